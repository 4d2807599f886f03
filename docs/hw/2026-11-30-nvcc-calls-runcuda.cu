// Runs one kernel of a cubin under the CUDA driver: runcuda CUBIN KERNEL N K  (out: u32 x N, optional u32 K)
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); printf("CUDA error %s at %s\n", s, #x); return 1; } } while (0)
int main(int argc, char **argv) {
    unsigned n = atoi(argv[3]); unsigned k = argc > 4 ? atoi(argv[4]) : 0;
    CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
    CUmodule m; CK(cuModuleLoad(&m, argv[1])); CUfunction f; CK(cuModuleGetFunction(&f, m, argv[2]));
    CUdeviceptr p; CK(cuMemAlloc(&p, 4 * n)); CK(cuMemsetD32(p, 0, n));
    void *args2[] = {&p, &k}; void *args3[] = {&p, &n, &k};
    CK(cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, 0, argc > 5 ? args3 : args2, 0)); CK(cuCtxSynchronize());
    std::vector<unsigned> h(n); CK(cuMemcpyDtoH(h.data(), p, 4 * n));
    printf("ok:"); for (unsigned i = 0; i < n && i < 8; i++) printf(" %u", h[i]); printf("\n");
    return 0;
}
