// Kernels as a user writes them, compiled by the machine's own nvcc (tools/nvcc-check.sh), to
// check that nvbare loads and launches ordinary CUDA C++ output correctly, and that it refuses
// what it does not support with a clear error instead of running it wrong.
//
// extern "C" keeps the names unmangled, except for `templated`, which checks that a mangled
// name works too.

#include <cooperative_groups.h>
#include <cstdio>

namespace cg = cooperative_groups;

// y = a * x + y: scalar float parameter, two buffers, a bound check.
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// Initialised __constant__ data (a constant bank the module loader fills).
__constant__ unsigned table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
extern "C" __global__ void const_table(unsigned *out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[i & 7] * i;
}

// An initialised __device__ global and atomics on it: every thread gets a distinct ticket.
__device__ unsigned counter = 100;
extern "C" __global__ void tickets(unsigned *out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = atomicAdd(&counter, 1u);
}

// Dynamic shared memory, __syncthreads and warp shuffles: one sum per block.
extern "C" __global__ void block_sum(const unsigned *in, unsigned *out, unsigned n) {
    extern __shared__ unsigned s[];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride >= 32; stride /= 2) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        unsigned v = s[threadIdx.x];
        for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}

// Static shared memory, a 2D grid of 2D blocks.
extern "C" __global__ void transpose(const float *in, float *out, unsigned w, unsigned h) {
    __shared__ float tile[32][33];
    unsigned x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = in[y * w + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    if (x < h && y < w) out[y * h + x] = tile[threadIdx.x][threadIdx.y];
}

// Local memory: an array indexed at run time, and real recursion (a call stack).
__device__ __noinline__ unsigned fib(unsigned k) { return k < 2 ? k : fib(k - 1) + fib(k - 2); }
extern "C" __global__ void local_stack(unsigned *out, unsigned n, unsigned k) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    volatile unsigned a[64];
    for (unsigned j = 0; j < 64; j++) a[j] = j * j + i;
    if (i < n) out[i] = a[(i * 7 + k) & 63] + fib(k + (i & 3));
}

// Deep recursion with big frames: about 64 levels of at least 128 bytes, more than CUDA's
// default 1 KiB stack (it needs a larger stack limit: `nvbare run --stack-size`).
__device__ __noinline__ unsigned deep_sum(unsigned n, unsigned seed) {
    volatile unsigned frame[32];
    for (unsigned j = 0; j < 32; j++) frame[j] = seed + j;
    if (n == 0) return frame[seed & 31];
    return frame[(seed + n) & 31] + deep_sum(n - 1, seed + 1);
}
extern "C" __global__ void deep(unsigned *out, unsigned n) {
    out[threadIdx.x] = deep_sum(n, threadIdx.x);
}

// Double precision and libdevice functions.
extern "C" __global__ void math_f64(double *out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = sin(i * 0.1) * exp(-(double)i * 0.01) + sqrt((double)i);
}

// Parameters of every size, packed as the ABI aligns them.
extern "C" __global__ void params_mixed(unsigned char a, unsigned short b, unsigned long long c,
                                        double d, int e, unsigned *out) {
    out[0] = a;
    out[1] = b;
    out[2] = (unsigned)c;
    out[3] = (unsigned)(c >> 32);
    out[4] = (unsigned)(d * 2.0);
    out[5] = (unsigned)e;
}

// __launch_bounds__: at most 128 threads per block.
extern "C" __global__ void __launch_bounds__(128) bounded(unsigned *out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x + 1;
}

// A 3D grid of 3D blocks: every thread writes its linear index.
extern "C" __global__ void grid3d(unsigned *out) {
    unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned per = blockDim.x * blockDim.y * blockDim.z;
    out[bx * per + t] = bx * per + t;
}

// A C++ template instance (its name is mangled).
template <typename T> __global__ void templated(T *out, T v) {
    out[threadIdx.x] = v + (T)threadIdx.x;
}
template __global__ void templated<unsigned>(unsigned *, unsigned);

// --- Features nvbare does not do (yet): each must be refused with a clear error, or run right.

#ifdef WITH_PRINTF
// Device-side printf (the CUDA driver links its own `vprintf` into the module).
extern "C" __global__ void with_printf(unsigned *out) {
    printf("thread %u\n", threadIdx.x);
    out[threadIdx.x] = 7;
}
#endif

#ifdef WITH_CLUSTERS
// Thread-block clusters (sm_90+): compile-time cluster dimensions.
extern "C" __global__ void __cluster_dims__(2, 1, 1) clustered(unsigned *out) {
    cg::cluster_group c = cg::this_cluster();
    out[blockIdx.x] = c.block_rank() + 10;
}
#endif

// A grid-wide barrier (needs a cooperative launch).
extern "C" __global__ void grid_sync(unsigned *out) {
    cg::grid_group g = cg::this_grid();
    out[blockIdx.x] = 1;
    g.sync();
    if (blockIdx.x == 0) {
        unsigned s = 0;
        for (unsigned b = 0; b < gridDim.x; b++) s += out[b];
        out[0] = s + 100;
    }
}

#ifdef WITH_MANAGED
// A __managed__ variable (needs unified memory).
__managed__ unsigned managed_value = 5;
extern "C" __global__ void with_managed(unsigned *out) { out[0] = managed_value; }
#endif
