// A CUDA graph of 1 or 20 dependent vector_add kernels (the fixture cubin), launched and synchronized
// each time against launched back to back: what a synchronized step (tinygrad's JIT) pays on
// top of the GPU's time, and how long cuGraphLaunch keeps the CPU; the queued graphs also timed
// by events (the GPU's clock). The same kernels through the stream for reference. Builds against the toolkit's cuda.h; runs on whichever
// libcuda.so.1 the process loads (tools/libcuda/hw/launch-compare.sh runs it on both).
// usage: graph_gap [CUBIN]   (ITERS=N round trips per case, default 2000)
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../bench/bench_util.h"

#define CK(x) do { CUresult r = (x); if (r) { printf("%s -> %d\n", #x, r); exit(1); } } while (0)
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
static void *slurp(const char *p) {
    FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    void *b = malloc(n); if (fread(b, 1, n, f) != (size_t)n) exit(1); fclose(f); return b;
}
int main(int argc, char **argv) {
    const char *cubin = argc > 1 ? argv[1] : "tests/fixtures/cubins/kernels_sm90_cuda13.cubin";
    CUdevice d; CUcontext c; CUmodule m; CUfunction f;
    CK(cuInit(0)); CK(cuDeviceGet(&d, 0)); CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
    CK(cuModuleLoadData(&m, slurp(cubin))); CK(cuModuleGetFunction(&f, m, "vector_add"));
    int it = getenv("ITERS") ? (int)parse_long("graph_gap", getenv("ITERS"), "ITERS", 10) : 2000;
    double *t = malloc(it * sizeof *t), *s = malloc(it * sizeof *s), *cl = malloc(it * sizeof *cl);
    unsigned ns[] = {1u << 12, 1u << 16, 1u << 20};
    int nodes[] = {1, 20};
    for (int ni = 0; ni < 3; ni++) for (int gi = 0; gi < 2; gi++) {
        unsigned n = ns[ni]; int N = nodes[gi];
        CUdeviceptr a, b, o; CK(cuMemAlloc(&a, 4 * n)); CK(cuMemAlloc(&b, 4 * n)); CK(cuMemAlloc(&o, 4 * n));
        CK(cuMemsetD32(a, 0, n)); CK(cuMemsetD32(b, 0, n));
        void *args[] = {&a, &b, &o, &n};
        CUgraph g; CUgraphExec e; CK(cuGraphCreate(&g, 0));
        CUgraphNode prev = 0;
        for (int k = 0; k < N; k++) {
            CUDA_KERNEL_NODE_PARAMS p = {0};
            p.func = f; p.gridDimX = (n + 255) / 256; p.gridDimY = 1; p.gridDimZ = 1;
            p.blockDimX = 256; p.blockDimY = 1; p.blockDimZ = 1; p.kernelParams = args;
            CUgraphNode nd; CK(cuGraphAddKernelNode(&nd, g, k ? &prev : NULL, k ? 1 : 0, &p)); prev = nd;
        }
        CK(cuGraphInstantiate(&e, g, 0));
        for (int r = -10; r < it; r++) {
            double t0 = now_s();
            CK(cuGraphLaunch(e, 0));
            double t1 = now_s();
            CK(cuCtxSynchronize());
            if (r >= 0) { t[r] = now_s() - t0; cl[r] = t1 - t0; }
        }
        qsort(t, it, sizeof t[0], cmp); qsort(cl, it, sizeof cl[0], cmp);
        // Queued back to back: by the host's clock, and by events around the same launches
        // (the GPU's time between them).
        CUevent ev0, ev1; CK(cuEventCreate(&ev0, 0)); CK(cuEventCreate(&ev1, 0));
        double t0 = now_s();
        CK(cuEventRecord(ev0, 0));
        for (int r = 0; r < it / 2; r++) CK(cuGraphLaunch(e, 0));
        CK(cuEventRecord(ev1, 0));
        CK(cuCtxSynchronize());
        double q = (now_s() - t0) / (it / 2);
        float ev_ms = -1; CK(cuEventElapsedTime(&ev_ms, ev0, ev1));
        CK(cuEventDestroy(ev0)); CK(cuEventDestroy(ev1));
        // The same kernels through the stream, synchronized each time.
        for (int r = -10; r < it; r++) {
            double t1 = now_s();
            for (int k = 0; k < N; k++) CK(cuLaunchKernel(f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, 0, args, 0));
            CK(cuCtxSynchronize());
            if (r >= 0) s[r] = now_s() - t1;
        }
        qsort(s, it, sizeof s[0], cmp);
        printf("n %7u nodes %2d: graph sync %7.2f us (p10 %7.2f p90 %7.2f) queued %7.2f us (events %7.2f), overhead %6.2f; stream sync %7.2f us; graph launch call %6.2f us\n",
               n, N, t[it / 2] * 1e6, t[it / 10] * 1e6, t[it * 9 / 10] * 1e6, q * 1e6, ev_ms * 1e3 / (it / 2), (t[it / 2] - q) * 1e6, s[it / 2] * 1e6, cl[it / 2] * 1e6);
        CK(cuGraphExecDestroy(e)); CK(cuGraphDestroy(g));
        CK(cuMemFree(a)); CK(cuMemFree(b)); CK(cuMemFree(o));
    }
    return 0;
}
