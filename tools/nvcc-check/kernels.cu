// Kernels as a user writes them, compiled by the machine's own nvcc (tools/nvcc-check.sh), to
// check that nvbare loads and launches ordinary CUDA C++ output correctly, and that it refuses
// what it does not support with a clear error instead of running it wrong.
//
// extern "C" keeps the names unmangled, except for `templated`, which checks that a mangled
// name works too.

#include <cassert>
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cstdio>
#include <cuda_fp16.h>
#include <mma.h>

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

// Tensor cores (wmma): one 16x16 tile, C = A * B with A[i][k] = (i + k) % 5 and
// B[k][j] = (k * j) % 3 as halves (exact), accumulated in f32.
extern "C" __global__ void wmma_tile(float *c) {
    using namespace nvcuda;
    __shared__ half a[256], b[256];
    for (int i = threadIdx.x; i < 256; i += 32) {
        a[i] = __int2half_rn((i / 16 + i % 16) % 5);
        b[i] = __int2half_rn(((i / 16) * (i % 16)) % 3);
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

// More dynamic shared memory than the 48 KiB a launch gets without asking (run with
// --shared 102400): every word written, then read back rotated.
extern "C" __global__ void big_shared(unsigned *out, unsigned words) {
    extern __shared__ unsigned big[];
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) big[i] = i * 3 + 1;
    __syncthreads();
    unsigned sum = 0;
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) sum += big[(i + 7) % words];
    atomicAdd(out, sum);
}

// Half-precision pairs.
extern "C" __global__ void half_math(float *out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half2 x = __floats2half2_rn((float)(i % 64), 0.5f);
    __half2 y = __hfma2(x, __floats2half2_rn(2.0f, 4.0f), __floats2half2_rn(1.0f, 1.0f));
    out[i] = __low2float(y) + __high2float(y);
}

// Warp votes and reductions (sm_80+: __reduce_add_sync).
extern "C" __global__ void warp_ops(unsigned *out) {
    unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
    unsigned sum = __reduce_add_sync(0xffffffffu, lane + warp);
    if (lane == 0) {
        out[2 * warp] = __popc(ballot);
        out[2 * warp + 1] = sum;
    }
}

// Asynchronous global -> shared copies (cp.async on sm_80+) through cooperative groups.
extern "C" __global__ void async_copy(const unsigned *in, unsigned *out) {
    __shared__ unsigned tile[256];
    cg::thread_block block = cg::this_thread_block();
    cg::memcpy_async(block, tile, in + blockIdx.x * 256, sizeof(tile));
    cg::wait(block);
    out[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x] + 1;
}

// Double-precision atomics.
extern "C" __global__ void atomic_f64(double *sum) {
    atomicAdd(sum, 0.25 * (threadIdx.x + 1));
}

// Device-side assert: the CUDA driver links `__assertfail` in; nvbare links a trap of its own,
// so a failed assertion stops the kernel with a fault (without CUDA's message).
extern "C" __global__ void checked(unsigned *out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        assert(out[i] != 7);
        out[i] += 1;
    }
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
