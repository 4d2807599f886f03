__device__ __noinline__ unsigned twice(unsigned x) { return 2 * x + 1; }
extern "C" __global__ void noinl_call(unsigned *out) { out[threadIdx.x] = twice(threadIdx.x); }
__device__ __noinline__ unsigned fib(unsigned k) { return k < 2 ? k : fib(k - 1) + fib(k - 2); }
extern "C" __global__ void rec_only(unsigned *out, unsigned k) { out[threadIdx.x] = fib(k + (threadIdx.x & 3)); }
extern "C" __global__ void local_only(unsigned *out, unsigned k) {
    volatile unsigned a[64];
    for (unsigned j = 0; j < 64; j++) a[j] = j * j + threadIdx.x;
    out[threadIdx.x] = a[(threadIdx.x * 7 + k) & 63];
}
