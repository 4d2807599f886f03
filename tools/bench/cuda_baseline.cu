// CUDA baseline for `nvbare bench`: the same measurements through the CUDA driver API, printed
// as JSON with the keys `nvbare bench --json` prints (schema: tools/bench/README.md).
//
// Build on a machine with the CUDA toolkit:
//   nvcc -O2 -o target/cuda_baseline tools/bench/cuda_baseline.cu -lcuda
// Run:
//   target/cuda_baseline [--device N] [--cubin PATH] [--kernel NAME] [--iters N]
//                        [--launches N] [--copy-mib N] [--copy-reps N]
//
// The empty kernel is loaded from the same fixture cubin nvbare launches
// (tests/fixtures/cubins/kernels_sm90_cuda13.cubin, kernel `empty`) when --cubin is given and
// loads; otherwise from an embedded PTX `empty` kernel JIT-compiled for the device.
//
// Everything is timed with CLOCK_MONOTONIC on the host. Human-readable progress goes to stderr,
// the JSON object to stdout.

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench_util.h"

static const char *kProg = "cuda_baseline";

static const char *kEmptyPtx =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry empty()\n"
    "{\n"
    "    ret;\n"
    "}\n";

static void check(CUresult r, const char *what, int line) {
    if (r == CUDA_SUCCESS) return;
    const char *name = "?";
    const char *desc = "?";
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &desc);
    fprintf(stderr, "cuda_baseline: %s failed at line %d: %s (%s)\n", what, line, name, desc);
    exit(1);
}
#define CK(x) check((x), #x, __LINE__)

struct Args {
    int device = 0;
    std::string cubin;
    std::string kernel = "empty";
    long iters = 10000;      // launch+sync round trips (>= 2000)
    long launches = 100000;  // back-to-back launches
    long copy_mib = 1024;    // bandwidth buffer size
    int copy_reps = 10;      // timed copies per direction
    long small_iters = 10000;  // 4-byte copies
};

static Args parse(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string f = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "cuda_baseline: %s needs a value\n", f.c_str());
            exit(2);
        }
        const char *v = argv[++i];
        if (f == "--device") a.device = (int)parse_long(kProg, v, "--device", 0);
        else if (f == "--cubin") a.cubin = v;
        else if (f == "--kernel") a.kernel = v;
        else if (f == "--iters") a.iters = parse_long(kProg, v, "--iters", 1);
        else if (f == "--launches") a.launches = parse_long(kProg, v, "--launches", 1);
        else if (f == "--copy-mib") a.copy_mib = parse_long(kProg, v, "--copy-mib", 1);
        else if (f == "--copy-reps") a.copy_reps = (int)parse_long(kProg, v, "--copy-reps", 1);
        else if (f == "--small-iters") a.small_iters = parse_long(kProg, v, "--small-iters", 1);
        else {
            fprintf(stderr, "cuda_baseline: unknown option %s\n", f.c_str());
            exit(2);
        }
    }
    return a;
}

// Percentile of sorted samples (nearest rank).
static double pct(const std::vector<double> &s, double p) {
    if (s.empty()) return 0.0;
    size_t k = (size_t)(p / 100.0 * (double)(s.size() - 1) + 0.5);
    if (k >= s.size()) k = s.size() - 1;
    return s[k];
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return pct(v, 50.0);
}

int main(int argc, char **argv) {
    Args a = parse(argc, argv);
    if (a.iters < 2000) {
        fprintf(stderr, "cuda_baseline: --iters must be at least 2000\n");
        return 2;
    }

    // Device open: cuInit + context creation, the first CUDA calls of the process.
    double t0 = now_s();
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, a.device));
    CUcontext ctx;
#if CUDA_VERSION >= 13000
    CK(cuCtxCreate(&ctx, nullptr, 0, dev));
#else
    CK(cuCtxCreate(&ctx, 0, dev));
#endif
    double open_s = now_s() - t0;

    char name[256] = {0};
    CK(cuDeviceGetName(name, sizeof name - 1, dev));
    for (char *c = name; *c; c++) {
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = ' ';  // keep the JSON valid
    }
    int driver_version = 0;
    CK(cuDriverGetVersion(&driver_version));
    fprintf(stderr, "cuda_baseline: %s, CUDA driver API %d.%d, open %.3f s\n", name,
            driver_version / 1000, (driver_version % 1000) / 10, open_s);

    // The kernel.
    CUmodule mod = nullptr;
    std::string kernel_from = "embedded PTX (JIT)";
    if (!a.cubin.empty()) {
        CUresult r = cuModuleLoad(&mod, a.cubin.c_str());
        if (r == CUDA_SUCCESS) {
            kernel_from = a.cubin;
        } else {
            const char *n = "?";
            cuGetErrorName(r, &n);
            fprintf(stderr, "cuda_baseline: cannot load %s (%s); using the embedded PTX kernel\n",
                    a.cubin.c_str(), n);
            mod = nullptr;
        }
    }
    if (!mod) {
        CK(cuModuleLoadData(&mod, kEmptyPtx));
        a.kernel = "empty";
    }
    CUfunction fn;
    CK(cuModuleGetFunction(&fn, mod, a.kernel.c_str()));
    CUstream stream;
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    fprintf(stderr, "cuda_baseline: kernel %s from %s\n", a.kernel.c_str(), kernel_from.c_str());

    // Launch + sync round trip.
    for (int i = 0; i < 200; i++) {
        CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
        CK(cuStreamSynchronize(stream));
    }
    std::vector<double> rt;
    rt.reserve((size_t)a.iters);
    for (long i = 0; i < a.iters; i++) {
        double s = now_s();
        CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
        CK(cuStreamSynchronize(stream));
        rt.push_back((now_s() - s) * 1e6);
    }
    std::sort(rt.begin(), rt.end());
    double rt_med = pct(rt, 50), rt_p10 = pct(rt, 10), rt_p90 = pct(rt, 90);
    fprintf(stderr, "cuda_baseline: launch+sync median %.2f us (p10 %.2f, p90 %.2f) over %ld\n",
            rt_med, rt_p10, rt_p90, a.iters);

    // Back-to-back launches, one sync at the end.
    double s = now_s();
    for (long i = 0; i < a.launches; i++) {
        CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    }
    CK(cuStreamSynchronize(stream));
    double b2b_us = (now_s() - s) * 1e6 / (double)a.launches;
    fprintf(stderr, "cuda_baseline: back-to-back %.3f us/launch over %ld\n", b2b_us, a.launches);

    // For reference (no target): the same empty kernels through a CUDA graph, whose kernels
    // schedule one another on the GPU. One graph of kGraphKernels launches, captured from the
    // stream, launched until about as many kernels as the back-to-back loop ran.
    const long kGraphKernels = 1000;
    CUgraph graph;
    CUgraphExec graph_exec;
    CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (long i = 0; i < kGraphKernels; i++) {
        CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    }
    CK(cuStreamEndCapture(stream, &graph));
    CK(cuGraphInstantiateWithFlags(&graph_exec, graph, 0));
    CK(cuGraphLaunch(graph_exec, stream));  // warm-up
    CK(cuStreamSynchronize(stream));
    long graph_reps = std::max(1L, a.launches / kGraphKernels);
    s = now_s();
    for (long i = 0; i < graph_reps; i++) {
        CK(cuGraphLaunch(graph_exec, stream));
    }
    CK(cuStreamSynchronize(stream));
    long graph_kernels = graph_reps * kGraphKernels;
    double graph_us = (now_s() - s) * 1e6 / (double)graph_kernels;
    CK(cuGraphExecDestroy(graph_exec));
    CK(cuGraphDestroy(graph));
    fprintf(stderr, "cuda_baseline: CUDA graph %.3f us/kernel over %ld\n", graph_us, graph_kernels);

    // Bandwidth: pinned host <-> device, device -> device.
    size_t bytes = (size_t)a.copy_mib << 20;
    void *host = nullptr;
    CK(cuMemAllocHost(&host, bytes));
    memset(host, 0x5a, bytes);
    CUdeviceptr d0, d1;
    CK(cuMemAlloc(&d0, bytes));
    CK(cuMemAlloc(&d1, bytes));
    auto timed = [&](int kind) {
        std::vector<double> t;
        for (int rep = -1; rep < a.copy_reps; rep++) {  // rep -1 warms up
            double c0 = now_s();
            if (kind == 0) CK(cuMemcpyHtoDAsync(d0, host, bytes, stream));
            else if (kind == 1) CK(cuMemcpyDtoHAsync(host, d0, bytes, stream));
            else CK(cuMemcpyDtoDAsync(d1, d0, bytes, stream));
            CK(cuStreamSynchronize(stream));
            if (rep >= 0) t.push_back(now_s() - c0);
        }
        return median(t);
    };
    double h2d = (double)bytes / timed(0) / 1e9;
    double d2h = (double)bytes / timed(1) / 1e9;
    // Device-to-device counts bytes read plus bytes written, as CUDA's bandwidthTest does.
    double d2d = 2.0 * (double)bytes / timed(2) / 1e9;
    fprintf(stderr, "cuda_baseline: %ld MiB copies: H2D %.1f GB/s, D2H %.1f GB/s, D2D %.1f GB/s\n",
            a.copy_mib, h2d, d2h, d2d);

    // 4-byte host-to-device copy latency (pinned source).
    std::vector<double> small;
    small.reserve((size_t)a.small_iters);
    for (long i = -100; i < a.small_iters; i++) {
        double c0 = now_s();
        CK(cuMemcpyHtoDAsync(d1, host, 4, stream));
        CK(cuStreamSynchronize(stream));
        if (i >= 0) small.push_back((now_s() - c0) * 1e6);
    }
    double copy4 = median(small);
    fprintf(stderr, "cuda_baseline: 4-byte H2D median %.2f us\n", copy4);

    CK(cuMemFree(d1));
    CK(cuMemFree(d0));
    CK(cuMemFreeHost(host));
    CK(cuStreamDestroy(stream));
    CK(cuModuleUnload(mod));
    CK(cuCtxDestroy(ctx));

    printf("{\"backend\":\"cuda\",\"device\":\"%s\",\"driver_api\":%d,"
           "\"launch_sync_us\":{\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f,\"n\":%ld},"
           "\"back_to_back_us_per_launch\":%.4f,\"launches\":%ld,"
           "\"graph_us_per_kernel\":%.4f,\"graph_kernels\":%ld,"
           "\"copy_bytes\":%zu,\"h2d_gbps\":%.3f,\"d2h_gbps\":%.3f,\"d2d_gbps\":%.3f,"
           "\"copy4_h2d_us\":%.4f,\"open_s\":%.5f}\n",
           name, driver_version, rt_med, rt_p10, rt_p90, a.iters, b2b_us, a.launches, graph_us,
           graph_kernels, bytes, h2d, d2h, d2d, copy4, open_s);
    return 0;
}
