//! Error names and strings, cuGetProcAddress, and the entry points that exist only to answer
//! `CUDA_ERROR_NOT_SUPPORTED` (so programs that link them load, and learn at the call).

use std::ffi::{c_char, c_int, c_void};

use super::{cstr, put};
use crate::abi::*;
use crate::entry;
use crate::error::err;

/// `CUDA_ERROR_NOT_SUPPORTED`, the entry point's name logged once.
fn not_supported(name: &str) -> CUresult {
    crate::log_once(&format!(
        "{name} is not supported (CUDA_ERROR_NOT_SUPPORTED)"
    ));
    CUDA_ERROR_NOT_SUPPORTED
}

/// Exports entry points that answer `CUDA_ERROR_NOT_SUPPORTED`, and their table for
/// cuGetProcAddress. They take no arguments: the C calling conventions nvbare runs on (x86_64
/// SysV, AArch64) let a callee ignore the ones it was passed.
macro_rules! unsupported {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: not implemented (`CUDA_ERROR_NOT_SUPPORTED`).")]
            #[unsafe(no_mangle)]
            pub extern "C" fn $name() -> CUresult {
                not_supported(stringify!($name))
            }
        )*
        fn unsupported_table() -> Vec<(&'static str, usize)> {
            vec![$((stringify!($name), $name as *const () as usize)),*]
        }
    };
}

unsupported! {
    cuDeviceGetUuid, cuDeviceGetUuid_v2, cuDeviceGetLuid, cuDeviceGetPCIBusId,
    cuDeviceGetByPCIBusId, cuDeviceGetProperties, cuDeviceGetDefaultMemPool,
    cuCtxGetFlags, cuCtxSetLimit, cuCtxGetLimit, cuCtxGetApiVersion, cuCtxDisablePeerAccess,
    cuCtxResetPersistingL2Cache, cuDevicePrimaryCtxReset_v2,
    cuMemAllocManaged, cuMemAllocPitch_v2, cuMemHostRegister_v2, cuMemHostUnregister,
    cuPointerGetAttribute, cuPointerGetAttributes,
    cuMemcpyPeer, cuMemcpyPeerAsync, cuMemcpy2D_v2,
    cuMemcpy2DAsync_v2, cuMemcpy3D_v2, cuMemcpy3DAsync_v2, cuMemAllocAsync, cuMemFreeAsync,
    cuLinkCreate_v2, cuLinkAddData_v2, cuLinkAddFile_v2, cuLinkComplete, cuLinkDestroy,
    cuLaunchKernelEx, cuLaunchCooperativeKernel, cuLaunchHostFunc, cuStreamAddCallback,
    cuStreamGetCaptureInfo_v2,
    cuStreamGetPriority, cuStreamGetFlags, cuStreamGetCtx,
    cuGraphAddMemsetNode, cuGraphInstantiate, cuGraphKernelNodeGetParams,
    cuGraphKernelNodeSetParams, cuStreamBeginCaptureToGraph,
    cuOccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxPotentialBlockSize,
    cuArrayCreate_v2, cuTexObjectCreate, cuIpcGetMemHandle, cuIpcOpenMemHandle_v2,
    cuLibraryLoadData, cuLibraryGetKernel, cuKernelGetFunction, cuModuleGetLoadingMode,
    cuProfilerStart, cuProfilerStop, cuGetExportTable, cuFlushGPUDirectRDMAWrites,
}

/// Declares the table of implemented entry points.
macro_rules! implemented {
    ($($name:ident),* $(,)?) => {
        fn implemented_table() -> Vec<(&'static str, usize)> {
            vec![$((stringify!($name), super::$name as *const () as usize)),*]
        }
    };
}

implemented! {
    cuInit, cuDriverGetVersion, cuDeviceGet, cuDeviceGetCount, cuDeviceGetName,
    cuDeviceComputeCapability, cuDeviceGetAttribute, cuDeviceCanAccessPeer,
    cuCtxCreate_v2, cuCtxCreate_v4, cuCtxDestroy_v2, cuCtxSetCurrent, cuCtxGetCurrent,
    cuCtxPushCurrent_v2, cuCtxPopCurrent_v2, cuCtxGetDevice, cuCtxSynchronize,
    cuCtxEnablePeerAccess, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease,
    cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxSetFlags_v2,
    cuMemAlloc_v2, cuMemFree_v2, cuMemGetAddressRange_v2, cuMemHostAlloc, cuMemAllocHost_v2,
    cuMemFreeHost, cuMemHostGetDevicePointer_v2, cuMemcpy, cuMemcpyAsync, cuMemGetInfo_v2, cuDeviceTotalMem_v2, cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemcpyDtoD_v2, cuMemcpyHtoDAsync_v2,
    cuMemcpyDtoHAsync_v2, cuMemcpyDtoDAsync_v2, cuMemsetD8_v2, cuMemsetD16_v2, cuMemsetD32_v2,
    cuMemsetD8Async, cuMemsetD16Async, cuMemsetD32Async,
    cuModuleLoadData, cuModuleLoadDataEx, cuModuleLoadFatBinary, cuModuleLoad, cuModuleUnload,
    cuModuleGetFunction, cuModuleGetGlobal_v2, cuFuncGetAttribute, cuFuncSetAttribute,
    cuFuncSetCacheConfig, cuLaunchKernel,
    cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy_v2, cuStreamSynchronize,
    cuStreamQuery, cuStreamWaitEvent, cuEventCreate, cuEventRecord, cuEventRecordWithFlags,
    cuEventQuery, cuEventSynchronize, cuEventElapsedTime, cuEventElapsedTime_v2,
    cuEventDestroy_v2, cuGetErrorString, cuGetErrorName, cuGetProcAddress, cuGetProcAddress_v2,
    cuGraphCreate, cuGraphAddEmptyNode, cuGraphAddKernelNode, cuGraphAddKernelNode_v2,
    cuGraphAddMemcpyNode, cuGraphInstantiateWithFlags, cuGraphInstantiate_v2, cuGraphLaunch,
    cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v2,
    cuGraphExecMemcpyNodeSetParams, cuGraphDestroy, cuGraphExecDestroy, cuGraphGetNodes,
    cuStreamBeginCapture, cuStreamBeginCapture_v2, cuStreamEndCapture, cuStreamIsCapturing,
}

/// The address of entry point `symbol` as a program built for CUDA `version` means it:
/// cuGetProcAddress takes base names (`cuMemAlloc`), which mean the newest ABI version of
/// that CUDA (`cuMemAlloc_v2`; `cuCtxCreate_v4` from CUDA 13, `cuEventElapsedTime_v2` too).
pub fn proc_address(symbol: &str, version: c_int) -> Option<usize> {
    let table: Vec<(&str, usize)> = implemented_table()
        .into_iter()
        .chain(unsupported_table())
        .collect();
    let find = |n: &str| table.iter().find(|(t, _)| *t == n).map(|(_, a)| *a);
    let newest = match symbol {
        "cuCtxCreate" if version >= 13000 => Some("cuCtxCreate_v4"),
        "cuEventElapsedTime" if version >= 13000 => Some("cuEventElapsedTime_v2"),
        "cuGetProcAddress" if version >= 12000 => Some("cuGetProcAddress_v2"),
        // CUDA 12 made cuGraphInstantiate the flags form.
        "cuGraphInstantiate" if version >= 12000 => Some("cuGraphInstantiateWithFlags"),
        "cuGraphAddKernelNode" | "cuGraphExecKernelNodeSetParams" if version < 12000 => {
            Some(symbol)
        }
        _ => None,
    };
    if let Some(n) = newest {
        return find(n);
    }
    find(&format!("{symbol}_v2")).or_else(|| find(symbol))
}

entry! {
    fn cuGetErrorString(error: CUresult, pstr: *mut *const c_char) {
        let s = error_string(error);
        // SAFETY: the caller's out-pointer; the strings are static and NUL-terminated.
        unsafe { put(pstr, s.map_or(std::ptr::null(), |s| s.as_ptr().cast()), "pStr")? };
        s.map(|_| ()).ok_or_else(|| err(CUDA_ERROR_INVALID_VALUE, format!("CUresult {error}")))
    }

    fn cuGetErrorName(error: CUresult, pstr: *mut *const c_char) {
        let s = error_name(error);
        // SAFETY: the caller's out-pointer; the names are static and NUL-terminated.
        unsafe { put(pstr, s.map_or(std::ptr::null(), |s| s.as_ptr().cast()), "pStr")? };
        s.map(|_| ()).ok_or_else(|| err(CUDA_ERROR_INVALID_VALUE, format!("CUresult {error}")))
    }

    fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
        let _ = flags; // per-thread default stream variants: the same functions
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { cstr(symbol, "symbol")? };
        let a = proc_address(name, version);
        // SAFETY: the caller's out-pointer.
        unsafe { put(pfn, a.unwrap_or(0) as *mut c_void, "pfn")? };
        a.map(|_| ()).ok_or_else(|| err(CUDA_ERROR_NOT_FOUND, format!("no entry point {name}")))
    }

    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
        status: *mut c_int,
    ) {
        let _ = flags;
        // SAFETY: the caller's NUL-terminated name.
        let name = unsafe { cstr(symbol, "symbol")? };
        let a = proc_address(name, version);
        // SAFETY: the caller's out-pointers (`status` may be null).
        unsafe {
            put(pfn, a.unwrap_or(0) as *mut c_void, "pfn")?;
            if !status.is_null() {
                let s = if a.is_some() { CU_GET_PROC_ADDRESS_SUCCESS } else { CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND };
                put(status, s, "symbolStatus")?;
            }
        }
        a.map(|_| ()).ok_or_else(|| err(CUDA_ERROR_NOT_FOUND, format!("no entry point {name}")))
    }
}
