/* A CUDA driver-API program with its own declarations (no NVIDIA header), linked against
 * nvbare's libcuda.so.1: devices, a context, memory, the fixture cubin's add1 launched through
 * kernelParams and through extra, streams and events, a two-node graph and a 130-node one,
 * error names, cuGetProcAddress.
 *
 * Usage: NVBARE_DEVICE=sim:gh100 ./driver_api_check KERNELS_SM90.cubin [IMAGE...]
 * Each IMAGE (PTX, a fatbin, another cubin) holding the same add1 is loaded and run as well.
 * Prints "driver_api_check: ok" and exits 0, or names the failing call and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_api.h"

#define CHECK(call)                                                                         \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != 0) {                                                                      \
            const char *n_ = "?";                                                           \
            cuGetErrorName(r_, &n_);                                                        \
            fprintf(stderr, "driver_api_check: %s failed: %d %s\n", #call, r_, n_);         \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#define EXPECT(cond)                                                                        \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "driver_api_check: expected %s (line %d)\n", #cond, __LINE__);  \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

enum { N = 4096 };

/* The first n (at most N) u32s at p must read i + add. */
static void check_values(CUdeviceptr p, unsigned int n, unsigned int add) {
    static uint32_t out[N];
    CHECK(cuMemcpyDtoH_v2(out, p, n * sizeof out[0]));
    for (unsigned int i = 0; i < n; i++) {
        if (out[i] != i + add) {
            fprintf(stderr, "driver_api_check: element %u is %u, not %u\n", i, out[i], i + add);
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s KERNELS.cubin [IMAGE...]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    int count = 0, version = 0, major = 0, minor = 0, warp = 0;
    char name[128];
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGetCount(&count));
    EXPECT(count >= 1);
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(cuDeviceComputeCapability(&major, &minor, dev));
    CHECK(cuDeviceGetAttribute(&warp, 10 /* CU_DEVICE_ATTRIBUTE_WARP_SIZE */, dev));
    EXPECT(warp == 32);
    printf("device 0: %s, sm_%d%d, driver %d\n", name, major, minor, version);
    CHECK(cuCtxCreate_v2(&ctx, 0, dev));

    /* cuMemAlloc looked up by name, as cuda-python does. */
    CUresult (*alloc)(CUdeviceptr *, size_t) = 0;
    CHECK(cuGetProcAddress("cuMemAlloc", (void **)&alloc, 12000, 0));
    EXPECT(alloc != 0);

    static uint32_t host[N];
    for (unsigned int i = 0; i < N; i++) host[i] = i;
    CUdeviceptr buf;
    CHECK(alloc(&buf, sizeof host));
    CHECK(cuMemcpyHtoD_v2(buf, host, sizeof host));

    void *image = read_file(argv[1]);
    CUmodule mod;
    CUfunction add1;
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuModuleGetFunction(&add1, mod, "add1"));
    EXPECT(cuModuleGetFunction(&add1, mod, "no_such_kernel") == 500 /* NOT_FOUND */);
    CHECK(cuModuleGetFunction(&add1, mod, "add1"));

    /* kernelParams: one pointer per parameter. */
    unsigned int n = N;
    void *params[] = {&buf, &n};
    CHECK(cuLaunchKernel(add1, N / 256, 1, 1, 256, 1, 1, 0, 0, params, 0));
    check_values(buf, N, 1);

    /* extra: the packed parameter buffer (u64 at 0, u32 at 8). */
    unsigned char packed[16] = {0};
    memcpy(packed, &buf, 8);
    memcpy(packed + 8, &n, 4);
    size_t size = 12; /* the parameters' bytes, not a padded struct's sizeof */
    void *extra[] = {(void *)1 /* CU_LAUNCH_PARAM_BUFFER_POINTER */, packed,
                     (void *)2 /* CU_LAUNCH_PARAM_BUFFER_SIZE */, &size,
                     (void *)0 /* CU_LAUNCH_PARAM_END */};
    CHECK(cuLaunchKernel(add1, N / 256, 1, 1, 256, 1, 1, 0, 0, 0, extra));
    check_values(buf, N, 2);
    /* A buffer longer than the parameters: what NVIDIA's library answers. */
    size = 16;
    EXPECT(cuLaunchKernel(add1, N / 256, 1, 1, 256, 1, 1, 0, 0, 0, extra) == 701 /* OUT_OF_RESOURCES */);

    /* Two streams ordered by an event, timed by two more. */
    CUstream s1, s2;
    CUevent start, stop, between;
    CHECK(cuStreamCreate(&s1, 0));
    CHECK(cuStreamCreate(&s2, 1 /* CU_STREAM_NON_BLOCKING */));
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&stop, 0));
    CHECK(cuEventCreate(&between, 2 /* CU_EVENT_DISABLE_TIMING */));
    CHECK(cuEventRecord(start, s1));
    CHECK(cuLaunchKernel(add1, N / 256, 1, 1, 256, 1, 1, 0, s1, params, 0));
    CHECK(cuEventRecord(between, s1));
    CHECK(cuStreamWaitEvent(s2, between, 0));
    CHECK(cuLaunchKernel(add1, N / 256, 1, 1, 256, 1, 1, 0, s2, params, 0));
    CHECK(cuEventRecord(stop, s2));
    CHECK(cuEventSynchronize(stop));
    float ms = -1;
    CHECK(cuEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 0);
    CHECK(cuStreamSynchronize(s1));
    check_values(buf, N, 4);

    /* A two-node graph: add1, then a copy back to the host; launched twice. */
    static uint32_t back[N];
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode knode, cnode;
    KernelNodeParams kp = {add1, {N / 256, 1, 1}, {256, 1, 1}, 0, params, 0};
    Memcpy3d cp;
    memset(&cp, 0, sizeof cp);
    cp.src_type = 2; /* CU_MEMORYTYPE_DEVICE */
    cp.src_dev = buf;
    cp.dst_type = 1; /* CU_MEMORYTYPE_HOST */
    cp.dst_host = back;
    cp.width = sizeof back;
    cp.height = cp.depth = 1;
    CHECK(cuGraphCreate(&graph, 0));
    CHECK(cuGraphAddKernelNode(&knode, graph, 0, 0, &kp));
    CHECK(cuGraphAddMemcpyNode(&cnode, graph, &knode, 1, &cp, ctx));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cuGraphLaunch(exec, s1));
    CHECK(cuGraphLaunch(exec, s1));
    CHECK(cuStreamSynchronize(s1));
    for (unsigned int i = 0; i < N; i++) EXPECT(back[i] == i + 6);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));

    /* A graph of BIG dependent add1 nodes (at least nvbare's WRITTEN_BEHIND_WORK, so it goes
     * as one submission even behind running work) over a buffer of its own, launched twice
     * behind a plain launch: every increment must land, in order. */
    enum { BIG = 130, M = 256 };
    static uint32_t small[M];
    for (unsigned int i = 0; i < M; i++) small[i] = i;
    CUdeviceptr sbuf;
    CHECK(cuMemAlloc_v2(&sbuf, sizeof small));
    CHECK(cuMemcpyHtoD_v2(sbuf, small, sizeof small));
    unsigned int m = M;
    void *sparams[] = {&sbuf, &m};
    static CUgraphNode chain[BIG];
    KernelNodeParams skp = {add1, {1, 1, 1}, {M, 1, 1}, 0, sparams, 0};
    CHECK(cuGraphCreate(&graph, 0));
    for (int i = 0; i < BIG; i++)
        CHECK(cuGraphAddKernelNode(&chain[i], graph, i ? &chain[i - 1] : 0, i ? 1 : 0, &skp));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cuLaunchKernel(add1, 1, 1, 1, M, 1, 1, 0, s1, sparams, 0));
    CHECK(cuGraphLaunch(exec, s1));
    CHECK(cuGraphLaunch(exec, s1));
    CHECK(cuStreamSynchronize(s1));
    check_values(sbuf, M, 1 + 2 * BIG);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuMemFree_v2(sbuf));
    printf("%d-node graph: ok\n", BIG);

    /* The same add1 from the other images (PTX through the JIT, fatbins). */
    unsigned int expect = 6;
    for (int a = 2; a < argc; a++) {
        CUmodule m2;
        CUfunction f2;
        void *img2 = read_file(argv[a]);
        CHECK(cuModuleLoadData(&m2, img2));
        CHECK(cuModuleGetFunction(&f2, m2, "add1"));
        CHECK(cuLaunchKernel(f2, N / 256, 1, 1, 256, 1, 1, 0, 0, params, 0));
        check_values(buf, N, ++expect);
        CHECK(cuModuleUnload(m2));
        free(img2);
        printf("%s: add1 ran\n", argv[a]);
    }

    /* Bad input answers, never crashes. */
    EXPECT(cuMemcpyDtoH_v2(host, 0xdeadbeef, 4) == 1 /* INVALID_VALUE */);
    EXPECT(cuMemAlloc_v2(0, 16) == 1);
    /* A forged handle: NVIDIA's library may dereference it (DRIVER_API_CHECK_NO_FORGED=1). */
    if (!getenv("DRIVER_API_CHECK_NO_FORGED"))
        EXPECT(cuStreamSynchronize((CUstream)0xdead0000) == 400 /* INVALID_HANDLE */);

    CHECK(cuEventDestroy_v2(start));
    CHECK(cuEventDestroy_v2(stop));
    CHECK(cuEventDestroy_v2(between));
    CHECK(cuStreamDestroy_v2(s1));
    CHECK(cuStreamDestroy_v2(s2));
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree_v2(buf));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy_v2(ctx));
    free(image);
    printf("driver_api_check: ok\n");
    return 0;
}
