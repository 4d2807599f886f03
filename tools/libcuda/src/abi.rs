//! The CUDA driver ABI as NVIDIA's `cuda.h` (CUDA 12 and 13) defines it: handle types, the
//! values of `CUresult`, `CUdevice_attribute`, `CUfunction_attribute`, `CUjit_option` and the
//! flags, and the structs graph nodes take. Facts only, with cuda.h's names; the layout tests
//! at the bottom hold the structs to cuda.h's sizes and offsets (x86_64 / aarch64 LP64).
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use std::ffi::{c_uint, c_void};

/// `CUresult` (cuda.h `enum cudaError_enum`): what every entry point returns.
pub type CUresult = u32;
/// `CUdevice`: a device ordinal.
pub type CUdevice = i32;
/// `CUdeviceptr` (`unsigned long long` since CUDA 3.2): a GPU virtual address.
pub type CUdeviceptr = u64;
/// `CUcontext` (`struct CUctx_st *`); ours are opaque ids, never dereferenced.
pub type CUcontext = *mut c_void;
/// `CUmodule` (`struct CUmod_st *`).
pub type CUmodule = *mut c_void;
/// `CUfunction` (`struct CUfunc_st *`).
pub type CUfunction = *mut c_void;
/// `CUstream` (`struct CUstream_st *`); null is the context's default stream.
pub type CUstream = *mut c_void;
/// `CUevent` (`struct CUevent_st *`).
pub type CUevent = *mut c_void;
/// `CUgraph` (`struct CUgraph_st *`).
pub type CUgraph = *mut c_void;
/// `CUgraphExec` (`struct CUgraphExec_st *`).
pub type CUgraphExec = *mut c_void;
/// `CUgraphNode` (`struct CUgraphNode_st *`).
pub type CUgraphNode = *mut c_void;

/// Declares `CUresult` values with their cuda.h names; [`error_name`] and [`error_string`]
/// answer `cuGetErrorName` / `cuGetErrorString` from the same table.
macro_rules! results {
    ($($name:ident = $v:expr, $text:expr;)*) => {
        $(#[doc = concat!("cuda.h `", stringify!($name), "`: ", $text)]
        pub const $name: CUresult = $v;)*
        /// `cuGetErrorName`'s answer: the value's cuda.h name (NUL-terminated).
        pub fn error_name(r: CUresult) -> Option<&'static str> {
            match r {
                $($v => Some(concat!(stringify!($name), "\0")),)*
                _ => None,
            }
        }
        /// `cuGetErrorString`'s answer: a description (NUL-terminated).
        pub fn error_string(r: CUresult) -> Option<&'static str> {
            match r {
                $($v => Some(concat!($text, "\0")),)*
                _ => None,
            }
        }
    };
}

results! {
    CUDA_SUCCESS = 0, "no error";
    CUDA_ERROR_INVALID_VALUE = 1, "invalid argument";
    CUDA_ERROR_OUT_OF_MEMORY = 2, "out of memory";
    CUDA_ERROR_NOT_INITIALIZED = 3, "initialization error (cuInit was not called, or failed)";
    CUDA_ERROR_DEINITIALIZED = 4, "driver shutting down";
    CUDA_ERROR_NO_DEVICE = 100, "no CUDA-capable device is detected";
    CUDA_ERROR_INVALID_DEVICE = 101, "invalid device ordinal";
    CUDA_ERROR_INVALID_IMAGE = 200, "device kernel image is invalid";
    CUDA_ERROR_INVALID_CONTEXT = 201, "invalid device context";
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209, "no kernel image is available for execution on the device";
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217, "peer access is not supported between these two devices";
    CUDA_ERROR_INVALID_PTX = 218, "a PTX JIT compilation failed";
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221, "PTX JIT compiler library not found";
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222, "the provided PTX was compiled with an unsupported toolchain";
    CUDA_ERROR_INVALID_SOURCE = 300, "device kernel image is invalid";
    CUDA_ERROR_FILE_NOT_FOUND = 301, "file not found";
    CUDA_ERROR_OPERATING_SYSTEM = 304, "OS call failed or operation not supported on this OS";
    CUDA_ERROR_INVALID_HANDLE = 400, "invalid resource handle";
    CUDA_ERROR_ILLEGAL_STATE = 401, "the operation cannot be performed in the present state";
    CUDA_ERROR_NOT_FOUND = 500, "named symbol not found";
    CUDA_ERROR_NOT_READY = 600, "device not ready";
    CUDA_ERROR_ILLEGAL_ADDRESS = 700, "an illegal memory access was encountered";
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, "too many resources requested for launch";
    CUDA_ERROR_LAUNCH_TIMEOUT = 702, "the launch timed out and was terminated";
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704, "peer access is already enabled";
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705, "peer access has not been enabled";
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709, "context is destroyed";
    CUDA_ERROR_ASSERT = 710, "device-side assert triggered";
    CUDA_ERROR_ILLEGAL_INSTRUCTION = 715, "an illegal instruction was encountered";
    CUDA_ERROR_MISALIGNED_ADDRESS = 716, "misaligned address";
    CUDA_ERROR_LAUNCH_FAILED = 719, "unspecified launch failure";
    CUDA_ERROR_NOT_PERMITTED = 800, "operation not permitted";
    CUDA_ERROR_NOT_SUPPORTED = 801, "operation not supported";
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, "operation not permitted when stream is capturing";
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901, "operation failed due to a previous error during capture";
    CUDA_ERROR_STREAM_CAPTURE_MERGE = 902, "operation would result in a merge of separate capture sequences";
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903, "capture was not ended in the same stream as it began";
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904, "capturing stream has unjoined work";
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905, "dependency created on uncaptured work in another stream";
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906, "operation would make the legacy stream depend on a capturing blocking stream";
    CUDA_ERROR_TIMEOUT = 909, "wait operation timed out";
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    CUDA_ERROR_UNKNOWN = 999, "unknown error";
}

// `CUdevice_attribute` (cuda.h `enum CUdevice_attribute_enum`).
/// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 1;
/// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X` (Y = 3, Z = 4).
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: i32 = 2;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: i32 = 3;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: i32 = 4;
/// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X` (Y = 6, Z = 7).
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: i32 = 5;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: i32 = 6;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: i32 = 7;
/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK` (without opting in).
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
pub const CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: i32 = 9;
pub const CU_DEVICE_ATTRIBUTE_WARP_SIZE: i32 = 10;
pub const CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: i32 = 12;
pub const CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: i32 = 15;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: i32 = 16;
pub const CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: i32 = 17;
pub const CU_DEVICE_ATTRIBUTE_INTEGRATED: i32 = 18;
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: i32 = 19;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: i32 = 20;
pub const CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: i32 = 31;
pub const CU_DEVICE_ATTRIBUTE_ECC_ENABLED: i32 = 32;
pub const CU_DEVICE_ATTRIBUTE_TCC_DRIVER: i32 = 35;
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
pub const CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: i32 = 40;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: i32 = 41;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: i32 = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: i32 = 76;
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: i32 = 81;
pub const CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: i32 = 82;
pub const CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: i32 = 83;
pub const CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: i32 = 84;
pub const CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: i32 = 89;
pub const CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: i32 = 95;
/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: with
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` set.
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: i32 = 106;

// `CUfunction_attribute` (cuda.h `enum CUfunction_attribute_enum`).
pub const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 0;
pub const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: i32 = 1;
pub const CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: i32 = 2;
pub const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: i32 = 3;
pub const CU_FUNC_ATTRIBUTE_NUM_REGS: i32 = 4;
pub const CU_FUNC_ATTRIBUTE_PTX_VERSION: i32 = 5;
pub const CU_FUNC_ATTRIBUTE_BINARY_VERSION: i32 = 6;
pub const CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: i32 = 7;
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
pub const CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: i32 = 9;

// `CUjit_option` (cuda.h `enum CUjit_option_enum`): the ones cuModuleLoadDataEx reads.
pub const CU_JIT_MAX_REGISTERS: i32 = 0;
pub const CU_JIT_THREADS_PER_BLOCK: i32 = 1;
pub const CU_JIT_WALL_TIME: i32 = 2;
pub const CU_JIT_INFO_LOG_BUFFER: i32 = 3;
pub const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: i32 = 4;
pub const CU_JIT_ERROR_LOG_BUFFER: i32 = 5;
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: i32 = 6;
pub const CU_JIT_OPTIMIZATION_LEVEL: i32 = 7;
pub const CU_JIT_TARGET_FROM_CUCONTEXT: i32 = 8;
pub const CU_JIT_TARGET: i32 = 9;
pub const CU_JIT_FALLBACK_STRATEGY: i32 = 10;
pub const CU_JIT_GENERATE_DEBUG_INFO: i32 = 11;
pub const CU_JIT_LOG_VERBOSE: i32 = 12;
pub const CU_JIT_GENERATE_LINE_INFO: i32 = 13;
pub const CU_JIT_CACHE_MODE: i32 = 14;

// cuLaunchKernel's `extra` keys (cuda.h `#define`s, pointers holding small integers).
/// `CU_LAUNCH_PARAM_END` (`(void*)0x00`): ends `extra`.
pub const CU_LAUNCH_PARAM_END: usize = 0x00;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER` (`(void*)0x01`): next is the packed parameter buffer.
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE` (`(void*)0x02`): next points at a `size_t`, its size.
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

// Stream handles with a meaning (cuda.h `#define`s).
/// `CU_STREAM_LEGACY` (`(CUstream)0x1`): the legacy default stream.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD` (`(CUstream)0x2`): the per-thread default stream.
pub const CU_STREAM_PER_THREAD: usize = 0x2;

// `CUstreamCaptureStatus` and `CUstreamCaptureMode` (cuda.h).
/// `CU_STREAM_CAPTURE_STATUS_NONE`: not capturing.
pub const CU_STREAM_CAPTURE_STATUS_NONE: c_uint = 0;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_uint = 1;
/// `CU_STREAM_CAPTURE_STATUS_INVALIDATED`: an error ended it; cuStreamEndCapture says so.
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: c_uint = 2;
/// `CU_STREAM_CAPTURE_MODE_GLOBAL`.
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: c_uint = 0;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`.
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: c_uint = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: c_uint = 2;

// Flags.
/// `CU_STREAM_NON_BLOCKING` (`CUstream_flags`).
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_EVENT_BLOCKING_SYNC` (`CUevent_flags`).
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
/// `CU_EVENT_DISABLE_TIMING`: cuEventElapsedTime refuses such events.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_EVENT_INTERPROCESS`.
pub const CU_EVENT_INTERPROCESS: c_uint = 0x4;
/// `CU_MEMHOSTALLOC_PORTABLE`.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;
/// `CU_MEMHOSTALLOC_DEVICEMAP`: kernels reach it at cuMemHostGetDevicePointer_v2's address.
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x2;
/// `CU_MEMHOSTALLOC_WRITECOMBINED`.
pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 0x4;

// `CUmemorytype` (cuda.h `enum CUmemorytype_enum`).
pub const CU_MEMORYTYPE_HOST: u32 = 1;
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;
pub const CU_MEMORYTYPE_ARRAY: u32 = 3;
pub const CU_MEMORYTYPE_UNIFIED: u32 = 4;

// `CUdriverProcAddressQueryResult` (cuGetProcAddress_v2's `symbolStatus`).
pub const CU_GET_PROC_ADDRESS_SUCCESS: i32 = 0;
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: i32 = 1;
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: i32 = 2;

/// cuda.h `CUDA_MEMCPY3D` (`struct CUDA_MEMCPY3D_st`): a graph memcpy node's copy.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_MEMCPY3D {
    pub srcXInBytes: usize,
    pub srcY: usize,
    pub srcZ: usize,
    pub srcLOD: usize,
    pub srcMemoryType: u32,
    pub srcHost: *const c_void,
    pub srcDevice: CUdeviceptr,
    pub srcArray: *mut c_void,
    pub reserved0: *mut c_void,
    pub srcPitch: usize,
    pub srcHeight: usize,
    pub dstXInBytes: usize,
    pub dstY: usize,
    pub dstZ: usize,
    pub dstLOD: usize,
    pub dstMemoryType: u32,
    pub dstHost: *mut c_void,
    pub dstDevice: CUdeviceptr,
    pub dstArray: *mut c_void,
    pub reserved1: *mut c_void,
    pub dstPitch: usize,
    pub dstHeight: usize,
    pub WidthInBytes: usize,
    pub Height: usize,
    pub Depth: usize,
}

/// cuda.h `CUDA_KERNEL_NODE_PARAMS` (v1, `struct CUDA_KERNEL_NODE_PARAMS_st`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_KERNEL_NODE_PARAMS {
    pub func: CUfunction,
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub kernelParams: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// cuda.h `CUDA_KERNEL_NODE_PARAMS_v2` (CUDA 12: v1 plus `kern` and `ctx`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_KERNEL_NODE_PARAMS_v2 {
    pub func: CUfunction,
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub kernelParams: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: *mut c_void,
    pub ctx: CUcontext,
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// cuda.h's `CUDA_MEMCPY3D`: 25 members, `CUmemorytype` (an enum, 4 bytes) padded to 8.
    #[test]
    fn memcpy3d_layout() {
        assert_eq!(size_of::<CUDA_MEMCPY3D>(), 200);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, srcMemoryType), 32);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, srcHost), 40);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, srcDevice), 48);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, srcPitch), 72);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, dstXInBytes), 88);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, dstMemoryType), 120);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, dstHost), 128);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, dstDevice), 136);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, WidthInBytes), 176);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, Depth), 192);
    }

    #[test]
    fn kernel_node_params_layout() {
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS>(), 56);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS, gridDimX), 8);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS, sharedMemBytes), 32);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS, kernelParams), 40);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS, extra), 48);
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v2>(), 72);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS_v2, kern), 56);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS_v2, ctx), 64);
    }

    #[test]
    fn error_names_come_from_one_table() {
        assert_eq!(error_name(221), Some("CUDA_ERROR_JIT_COMPILER_NOT_FOUND\0"));
        assert_eq!(error_name(801), Some("CUDA_ERROR_NOT_SUPPORTED\0"));
        assert_eq!(error_string(0), Some("no error\0"));
        assert_eq!(error_name(12345), None);
    }
}
