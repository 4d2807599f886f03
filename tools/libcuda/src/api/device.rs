//! Initialization, the driver version and devices.

use std::ffi::{c_char, c_int, c_uint};

use nvbare::DeviceInfo;

use super::{host_mut, put};
use crate::abi::*;
use crate::entry;
use crate::error::err;
use crate::state;

/// The CUDA version this library answers to (`cuDriverGetVersion`: 1000 * major + 10 *
/// minor): CUDA 13.0, whose cubins the fixtures are.
pub const DRIVER_VERSION: c_int = 13000;

entry! {
    /// Opens the devices `NVBARE_DEVICE` names (default: every GPU bound to vfio-pci).
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(err(CUDA_ERROR_INVALID_VALUE, format!("flags {flags} (must be 0)")));
        }
        state::init().map(|_| ())
    }

    fn cuDriverGetVersion(version: *mut c_int) {
        // SAFETY: the caller's out-pointer.
        unsafe { put(version, DRIVER_VERSION, "driverVersion") }
    }

    fn cuDeviceGetCount(count: *mut c_int) {
        let n = state::driver()?.devices.len();
        // SAFETY: the caller's out-pointer.
        unsafe { put(count, n as c_int, "count") }
    }

    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) {
        state::device(ordinal)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(device, ordinal, "device") }
    }

    /// `NVIDIA CHIP (nvbare SPEC)`, cut to `len` bytes with its NUL.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) {
        let d = state::device(dev)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| err(CUDA_ERROR_INVALID_VALUE, format!("len {len}")))?;
        let text = format!("NVIDIA {} (nvbare {})", d.gpu.info().chip.name, d.spec);
        // SAFETY: the caller's buffer of `len` bytes (cuda.h).
        let out = unsafe { host_mut(name.cast(), len, "name")? };
        let n = text.len().min(len - 1);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out[n] = 0;
        Ok(())
    }

    fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) {
        let sm = state::device(dev)?.gpu.info().sm as c_int;
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(major, sm / 10, "major")?;
            put(minor, sm % 10, "minor")
        }
    }

    fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, dev: CUdevice) {
        let d = state::device(dev)?;
        let v = attribute(d.gpu.info(), attrib).ok_or_else(|| {
            crate::log_once(&format!("cuDeviceGetAttribute: attribute {attrib} is not known to nvbare"));
            err(CUDA_ERROR_INVALID_VALUE, format!("attribute {attrib} is not known to nvbare"))
        })?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(pi, v, "pi") }
    }

    /// Always 0: devices opened one by one have no GPU-side path to each other through the
    /// facade (a cross-device event wait is a CPU wait; docs/libcuda.md).
    fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) {
        state::device(dev)?;
        state::device(peer)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(can, 0, "canAccessPeer") }
    }
}

/// Shared memory per SM and per block (opted in), blocks per SM, for shader model `sm`: the
/// figures of CUDA's programming guide (compute capabilities table).
fn sm_limits(sm: u32) -> (i32, i32, i32) {
    match sm {
        80 => (167_936, 166_912, 32),
        86 => (102_400, 101_376, 16),
        87 => (167_936, 166_912, 16),
        89 => (102_400, 101_376, 24),
        90 | 100 | 103 => (233_472, 232_448, 32),
        _ => (102_400, 101_376, 24),
    }
}

/// The value of `CUdevice_attribute` `attrib`, for the ones nvbare knows.
pub(crate) fn attribute(info: &DeviceInfo, attrib: c_int) -> Option<c_int> {
    let (smem_sm, smem_optin, blocks_sm) = sm_limits(info.sm);
    let threads_sm = match info.gr.max_warps_per_sm {
        0 => 2048,
        w => (w * 32) as c_int,
    };
    Some(match attrib {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X | CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y => 1024,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z => 64,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X => i32::MAX,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y | CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z => 65_535,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => 49_152,
        CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY => 65_536,
        CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK => 65_536,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR => 65_536,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => info.gr.sm_count() as c_int,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => threads_sm,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => smem_sm,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => smem_optin,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => blocks_sm,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => (info.sm / 10) as c_int,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => (info.sm % 10) as c_int,
        // Copies of one stream run while another's kernel does; kernels do not overlap.
        CU_DEVICE_ATTRIBUTE_GPU_OVERLAP => 1,
        CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => 1,
        CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS => 0,
        CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
        CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT
        | CU_DEVICE_ATTRIBUTE_INTEGRATED
        | CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
        | CU_DEVICE_ATTRIBUTE_COMPUTE_MODE
        | CU_DEVICE_ATTRIBUTE_ECC_ENABLED
        | CU_DEVICE_ATTRIBUTE_TCC_DRIVER
        | CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY
        | CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD
        | CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
        | CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH => 0,
        _ => return None,
    })
}
