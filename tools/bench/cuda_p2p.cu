// CUDA baseline for `nvbare bench p2p`: peer copy bandwidth both ways between two GPUs with
// cudaDeviceEnablePeerAccess + cudaMemcpyPeer, printed as JSON with the keys
// `nvbare bench p2p --json` prints (tools/bench/README.md, "Peer to peer").
//
// Build on a machine with the CUDA toolkit (host code only, no kernels):
//   nvcc -O2 -o target/cuda_p2p tools/bench/cuda_p2p.cu
// Run:
//   target/cuda_p2p [--devices A,B] [--size-mib N] [--reps N]
//
// Each timed copy is cudaMemcpyPeer followed by cudaDeviceSynchronize on both devices, timed on
// the host with CLOCK_MONOTONIC from the call to the end of both synchronizes (nvbare times a
// copy the same way). One untimed warm-up copy per direction. GB/s = 10^9 bytes per second of
// data moved one way. Destinations start zeroed; after the timed copies both are copied back and
// compared element by element with what was uploaded ("verified").
//
// Human-readable progress goes to stderr, the JSON object to stdout.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench_util.h"

static const char *kProg = "cuda_p2p";

static void check(cudaError_t r, const char *what, int line) {
    if (r == cudaSuccess) return;
    fprintf(stderr, "cuda_p2p: %s failed at line %d: %s (%s)\n", what, line, cudaGetErrorName(r),
            cudaGetErrorString(r));
    exit(1);
}
#define CK(x) check((x), #x, __LINE__)

struct Args {
    int a = 0;
    int b = 1;
    long size_mib = 1024;
    int reps = 10;
};

static Args parse(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string f = argv[i];
        if (f == "-h" || f == "--help") {
            fprintf(stderr, "usage: cuda_p2p [--devices A,B] [--size-mib N] [--reps N]\n");
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "cuda_p2p: %s needs a value\n", f.c_str());
            exit(2);
        }
        const char *v = argv[++i];
        if (f == "--devices") {
            const char *comma = strchr(v, ',');
            if (!comma) {
                fprintf(stderr, "cuda_p2p: --devices needs A,B (e.g. 0,1), got %s\n", v);
                exit(2);
            }
            std::string first(v, comma - v);
            a.a = (int)parse_long(kProg, first.c_str(), "--devices", 0);
            a.b = (int)parse_long(kProg, comma + 1, "--devices", 0);
        } else if (f == "--size-mib") {
            a.size_mib = parse_long(kProg, v, f.c_str(), 1);
        } else if (f == "--reps") {
            a.reps = (int)parse_long(kProg, v, f.c_str(), 1);
        } else {
            fprintf(stderr, "cuda_p2p: unknown option %s\n", f.c_str());
            exit(2);
        }
    }
    if (a.a == a.b) {
        fprintf(stderr, "cuda_p2p: --devices needs two different GPUs\n");
        exit(2);
    }
    return a;
}

static uint32_t pattern(size_t i, uint32_t seed) { return (uint32_t)i * 2654435761u + seed; }

static void sync_both(int a, int b) {
    CK(cudaSetDevice(a));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(b));
    CK(cudaDeviceSynchronize());
}

struct Dir {
    std::vector<double> secs;
    double median() const {
        std::vector<double> v = secs;
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[v.size() / 2];
    }
    double gbps(double bytes) const {
        double m = median();
        return m > 0 ? bytes / m / 1e9 : 0.0;
    }
    double min_gbps(double bytes) const {
        double hi = *std::max_element(secs.begin(), secs.end());
        return hi > 0 ? bytes / hi / 1e9 : 0.0;
    }
    double max_gbps(double bytes) const {
        double lo = *std::min_element(secs.begin(), secs.end());
        return lo > 0 ? bytes / lo / 1e9 : 0.0;
    }
};

// Times `reps` copies (after one warm-up) of `bytes` from `src` on `sdev` to `dst` on `ddev`.
static Dir time_copies(void *dst, int ddev, const void *src, int sdev, size_t bytes, int reps) {
    Dir d;
    for (int i = 0; i <= reps; i++) {
        double t0 = now_s();
        CK(cudaMemcpyPeer(dst, ddev, src, sdev, bytes));
        sync_both(sdev, ddev);
        double t = now_s() - t0;
        if (i > 0) d.secs.push_back(t);
    }
    return d;
}

// Copies `dev_buf` back and compares it with pattern(seed); prints the first mismatch.
static bool verify(int dev, const void *dev_buf, size_t n, uint32_t seed, const char *what) {
    std::vector<uint32_t> host(n);
    CK(cudaSetDevice(dev));
    CK(cudaMemcpy(host.data(), dev_buf, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        if (host[i] != pattern(i, seed)) {
            fprintf(stderr, "cuda_p2p: %s: element %zu is %#x, expected %#x\n", what, i, host[i],
                    pattern(i, seed));
            return false;
        }
    }
    return true;
}

static std::string json_escape(const char *s) {
    std::string o;
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            o += '\\';
            o += *s;
        } else if ((unsigned char)*s < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", (unsigned char)*s);
            o += b;
        } else {
            o += *s;
        }
    }
    return o;
}

static void print_dir(const char *key, const Dir &d, double bytes) {
    printf(",\"%s\":{\"median_gbps\":%.3f,\"min_gbps\":%.3f,\"max_gbps\":%.3f,\"median_s\":%.6f}",
           key, d.gbps(bytes), d.min_gbps(bytes), d.max_gbps(bytes), d.median());
}

int main(int argc, char **argv) {
    Args args = parse(argc, argv);
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (args.a >= count || args.b >= count) {
        fprintf(stderr, "cuda_p2p: devices %d,%d asked for, CUDA sees %d GPU(s)\n", args.a, args.b,
                count);
        return 1;
    }
    int runtime = 0, driver = 0;
    CK(cudaRuntimeGetVersion(&runtime));
    CK(cudaDriverGetVersion(&driver));
    cudaDeviceProp pa, pb;
    CK(cudaGetDeviceProperties(&pa, args.a));
    CK(cudaGetDeviceProperties(&pb, args.b));
    int ab = 0, ba = 0;
    CK(cudaDeviceCanAccessPeer(&ab, args.a, args.b));
    CK(cudaDeviceCanAccessPeer(&ba, args.b, args.a));
    fprintf(stderr, "cuda_p2p: A = %s (%d), B = %s (%d); can access peer: A->B %d, B->A %d\n",
            pa.name, args.a, pb.name, args.b, ab, ba);

    // Contexts first, so the enable time is only the peer setup.
    CK(cudaSetDevice(args.a));
    CK(cudaFree(0));
    CK(cudaSetDevice(args.b));
    CK(cudaFree(0));
    double t0 = now_s();
    bool direct = ab && ba;
    if (direct) {
        CK(cudaSetDevice(args.a));
        cudaError_t r = cudaDeviceEnablePeerAccess(args.b, 0);
        if (r != cudaErrorPeerAccessAlreadyEnabled) CK(r);
        CK(cudaSetDevice(args.b));
        r = cudaDeviceEnablePeerAccess(args.a, 0);
        if (r != cudaErrorPeerAccessAlreadyEnabled) CK(r);
        (void)cudaGetLastError();
    } else {
        fprintf(stderr, "cuda_p2p: no peer access between the GPUs: cudaMemcpyPeer stages "
                        "through host memory\n");
    }
    double enable_s = now_s() - t0;

    size_t bytes = (size_t)args.size_mib << 20;
    size_t n = bytes / 4;
    void *src_a, *dst_a, *src_b, *dst_b;
    std::vector<uint32_t> host(n);
    CK(cudaSetDevice(args.a));
    CK(cudaMalloc(&src_a, bytes));
    CK(cudaMalloc(&dst_a, bytes));
    for (size_t i = 0; i < n; i++) host[i] = pattern(i, 0xa0a0);
    CK(cudaMemcpy(src_a, host.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dst_a, 0, bytes));
    CK(cudaSetDevice(args.b));
    CK(cudaMalloc(&src_b, bytes));
    CK(cudaMalloc(&dst_b, bytes));
    for (size_t i = 0; i < n; i++) host[i] = pattern(i, 0xb0b0);
    CK(cudaMemcpy(src_b, host.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dst_b, 0, bytes));
    sync_both(args.a, args.b);

    Dir d_ab = time_copies(dst_b, args.b, src_a, args.a, bytes, args.reps);
    Dir d_ba = time_copies(dst_a, args.a, src_b, args.b, bytes, args.reps);
    bool ok = verify(args.b, dst_b, n, 0xa0a0, "A -> B");
    ok = verify(args.a, dst_a, n, 0xb0b0, "B -> A") && ok;
    double fb = (double)bytes;
    fprintf(stderr,
            "cuda_p2p: %zu MiB copies: A -> B %.2f GB/s, B -> A %.2f GB/s (median of %d); data %s\n",
            bytes >> 20, d_ab.gbps(fb), d_ba.gbps(fb), args.reps, ok ? "verified" : "WRONG");

    printf("{\"backend\":\"cuda\",\"devices\":[\"%s (%d)\",\"%s (%d)\"],\"path\":\"%s\","
           "\"can_access_peer\":[%s,%s],\"runtime_api\":%d,\"driver_api\":%d,\"enable_s\":%.6f,"
           "\"copy_bytes\":%zu,\"reps\":%d,\"engine\":\"cudaMemcpyPeer\","
           "\"p2p_a_to_b_gbps\":%.3f,\"p2p_b_to_a_gbps\":%.3f",
           json_escape(pa.name).c_str(), args.a, json_escape(pb.name).c_str(), args.b,
           direct ? "direct" : "host_staging", ab ? "true" : "false", ba ? "true" : "false",
           runtime, driver, enable_s, bytes, args.reps, d_ab.gbps(fb), d_ba.gbps(fb));
    print_dir("p2p_a_to_b", d_ab, fb);
    print_dir("p2p_b_to_a", d_ba, fb);
    printf(",\"verified\":%s}\n", ok ? "true" : "false");

    CK(cudaSetDevice(args.a));
    CK(cudaFree(src_a));
    CK(cudaFree(dst_a));
    CK(cudaSetDevice(args.b));
    CK(cudaFree(src_b));
    CK(cudaFree(dst_b));
    return ok ? 0 : 1;
}
