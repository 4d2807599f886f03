#!/usr/bin/env python3
"""Writes a C program that holds tools/libcuda/src/abi.rs to NVIDIA's headers: every constant
(and CUresult) it declares is compared with cuda.h's, the structs' sizes and offsets too, and
nvJitLink.h's facts the JIT loader relies on are printed. Build it with -I<CUDA>/include where
the CUDA toolkit is (tools/libcuda/hw/hw-check.sh); a name cuda.h lacks is a compile error.

Usage: gen_abi_check.py tools/libcuda/src/abi.rs > abi_check.c
"""
import re
import sys

src = open(sys.argv[1]).read()
consts = re.findall(r"pub const (CU\w+): \w+ = (0x[0-9a-fA-F]+|-?\d+);", src)
results = re.findall(r"^\s+(CUDA_\w+) = (\d+), \"", src, re.M)
pointers = {"CU_LAUNCH_PARAM_END", "CU_LAUNCH_PARAM_BUFFER_POINTER",
            "CU_LAUNCH_PARAM_BUFFER_SIZE", "CU_STREAM_LEGACY", "CU_STREAM_PER_THREAD"}

print("""#include <cuda.h>
#include <nvJitLink.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
static int bad, good;
static void chk(const char *name, long long theirs, long long ours) {
    if (theirs != ours) { printf("MISMATCH %s: cuda.h %lld, abi.rs %lld\\n", name, theirs, ours); bad++; }
    else good++;
}
#define C(name, v) chk(#name, (long long)(name), (long long)(v))
#define P(name, v) chk(#name, (long long)(uintptr_t)(name), (long long)(v))
#define S2(x) #x
#define S(x) S2(x)
int main(void) {""")
for name, v in results + consts:
    print(f"    {'P' if name in pointers else 'C'}({name}, {v});")
print("""    C(sizeof(CUDA_MEMCPY3D), 200);
    C(offsetof(CUDA_MEMCPY3D, srcMemoryType), 32);
    C(offsetof(CUDA_MEMCPY3D, srcHost), 40);
    C(offsetof(CUDA_MEMCPY3D, srcDevice), 48);
    C(offsetof(CUDA_MEMCPY3D, srcPitch), 72);
    C(offsetof(CUDA_MEMCPY3D, dstXInBytes), 88);
    C(offsetof(CUDA_MEMCPY3D, dstMemoryType), 120);
    C(offsetof(CUDA_MEMCPY3D, dstHost), 128);
    C(offsetof(CUDA_MEMCPY3D, dstDevice), 136);
    C(offsetof(CUDA_MEMCPY3D, WidthInBytes), 176);
    C(offsetof(CUDA_MEMCPY3D, Depth), 192);
    C(sizeof(CUDA_KERNEL_NODE_PARAMS_v1), 56);
    C(offsetof(CUDA_KERNEL_NODE_PARAMS_v1, sharedMemBytes), 32);
    C(offsetof(CUDA_KERNEL_NODE_PARAMS_v1, kernelParams), 40);
    C(offsetof(CUDA_KERNEL_NODE_PARAMS_v1, extra), 48);
    C(sizeof(CUDA_KERNEL_NODE_PARAMS_v2), 72);
    C(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kern), 56);
    C(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, ctx), 64);
    C(NVJITLINK_INPUT_PTX, 2);
    C(NVJITLINK_SUCCESS, 0);
    printf("cuda.h CUDA_VERSION %d\\n", CUDA_VERSION);
    printf("sizeof(CUDA_KERNEL_NODE_PARAMS) %zu\\n", sizeof(CUDA_KERNEL_NODE_PARAMS));
    printf("nvJitLink.h names: %s %s %s %s %s %s %s %s\\n", S(nvJitLinkCreate), S(nvJitLinkAddData),
           S(nvJitLinkComplete), S(nvJitLinkGetLinkedCubinSize), S(nvJitLinkGetLinkedCubin),
           S(nvJitLinkGetErrorLogSize), S(nvJitLinkGetErrorLog), S(nvJitLinkDestroy));
    printf("cuda.h names: %s %s %s %s %s %s\\n", S(cuCtxCreate), S(cuGraphInstantiate),
           S(cuGraphAddKernelNode), S(cuEventElapsedTime), S(cuGetProcAddress), S(cuMemAlloc));
    printf("abi checks: %d match, %d differ\\n", good, bad);
    return bad != 0;
}""")
