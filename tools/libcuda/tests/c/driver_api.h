/* The CUDA driver API as this project's C checks call it: their own declarations of NVIDIA's
 * ABI (types, structs and entry points as cuda.h gives them), so the checks build without an
 * NVIDIA header. Shared by driver_api_check.c and capture_check.c. */
#ifndef NVBARE_DRIVER_API_H
#define NVBARE_DRIVER_API_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev);
CUresult cuDeviceGetAttribute(int *v, int attrib, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n);
CUresult cuModuleLoadData(CUmodule *m, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuModuleUnload(CUmodule m);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                        void **extra);
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuEventCreate(CUevent *e, unsigned int flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventSynchronize(CUevent e);
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b);
CUresult cuEventDestroy_v2(CUevent e);
CUresult cuGetErrorName(CUresult r, const char **name);
typedef void *CUgraph, *CUgraphExec, *CUgraphNode;
typedef struct {
    CUfunction func;
    unsigned int grid[3], block[3], shared;
    void **params, **extra;
} KernelNodeParams; /* cuda.h's CUDA_KERNEL_NODE_PARAMS (v1) */
typedef struct {
    size_t src_x, src_y, src_z, src_lod;
    int src_type;
    const void *src_host;
    CUdeviceptr src_dev;
    void *src_array, *reserved0;
    size_t src_pitch, src_height;
    size_t dst_x, dst_y, dst_z, dst_lod;
    int dst_type;
    void *dst_host;
    CUdeviceptr dst_dev;
    void *dst_array, *reserved1;
    size_t dst_pitch, dst_height;
    size_t width, height, depth;
} Memcpy3d; /* cuda.h's CUDA_MEMCPY3D */
CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
CUresult cuGraphAddKernelNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              const KernelNodeParams *p);
CUresult cuGraphAddMemcpyNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              const Memcpy3d *p, CUcontext ctx);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec e);
CUresult cuGraphDestroy(CUgraph g);
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags);

/* Stream capture and the async memset (tests/c/capture_check.c). */
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuStreamIsCapturing(CUstream s, int *status);
CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count);

/* The whole file at `path`, NUL-terminated (PTX is text); exits on failure. */
static void *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1); /* NUL-terminated: PTX is text */
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "reading %s failed\n", path);
        exit(1);
    }
    fclose(f);
    b[n] = 0;
    return b;
}

#endif
