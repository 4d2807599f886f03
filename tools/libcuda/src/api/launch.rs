//! cuLaunchKernel: arguments through `kernelParams` (one pointer per parameter) or `extra`
//! (one packed buffer, `CU_LAUNCH_PARAM_BUFFER_POINTER` / `_SIZE`), sized by the cubin's
//! parameter table.

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use nvbare::{LaunchConfig, Stream};
use nvbare_core::device::Arg;

use super::capture::capturing;
use super::graph::Work;
use super::{get, host};
use crate::abi::*;
use crate::entry;
use crate::error::{CuResult, err};
use crate::state::{self, FuncObj};

/// Most `extra` key/value pairs read before `CU_LAUNCH_PARAM_END` must have come.
const MAX_EXTRA_PAIRS: usize = 16;

/// The packed buffer `extra` names: `(pointer, size)`.
///
/// # Safety
///
/// `extra` is an array of key/value pointers ending with `CU_LAUNCH_PARAM_END` (cuda.h).
unsafe fn extra_buffer(extra: *mut *mut c_void) -> CuResult<(*const c_void, usize)> {
    let (mut buf, mut size) = (None, None);
    for i in 0..MAX_EXTRA_PAIRS {
        // SAFETY: `extra` holds key/value pairs up to CU_LAUNCH_PARAM_END (cuda.h); reading
        // stops there.
        let key = unsafe { extra.add(2 * i).read() } as usize;
        if key == CU_LAUNCH_PARAM_END {
            break;
        }
        // SAFETY: a key other than END is followed by its value.
        let value = unsafe { extra.add(2 * i + 1).read() };
        match key {
            CU_LAUNCH_PARAM_BUFFER_POINTER => buf = Some(value.cast_const()),
            CU_LAUNCH_PARAM_BUFFER_SIZE => {
                // SAFETY: the value of BUFFER_SIZE points at a `size_t` (cuda.h).
                size = Some(unsafe { get(value.cast::<usize>(), "size")? })
            }
            k => return Err(err(CUDA_ERROR_INVALID_VALUE, format!("extra key {k:#x}"))),
        }
    }
    match (buf, size) {
        (Some(b), Some(s)) => Ok((b, s)),
        _ => Err(err(
            CUDA_ERROR_INVALID_VALUE,
            "extra needs CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE, then CU_LAUNCH_PARAM_END",
        )),
    }
}

/// The most bytes of parameters a kernel takes (cuda.h: 32764 since CUDA 12.1 on Volta and
/// later).
const MAX_PARAM_BYTES: usize = 32764;

/// The answers NVIDIA's library gives for an `extra` buffer of `size` bytes to a kernel taking
/// `need` (seen on the H200, driver 580.159.04, docs/libcuda.md): none at all for a kernel
/// with parameters and more than the parameter space are invalid; a short one is accepted;
/// a longer one is `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`.
fn check_extra_size(kernel: &str, size: usize, need: usize) -> CuResult<()> {
    if (size == 0 && need > 0) || size > MAX_PARAM_BYTES {
        return Err(err(
            CUDA_ERROR_INVALID_VALUE,
            format!("`{kernel}` takes {need} bytes of parameters; extra's buffer has {size}"),
        ));
    }
    if size > need {
        return Err(err(
            CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            format!(
                "`{kernel}` takes {need} bytes of parameters; extra's buffer has {size} (pass \
                 the packed size, without the padding sizeof adds)"
            ),
        ));
    }
    Ok(())
}

/// Each parameter's bytes, in parameter order.
///
/// # Safety
///
/// `params` is null or holds one pointer per kernel parameter, each valid for the
/// parameter's size; `extra` as [`extra_buffer`] or null.
unsafe fn arguments(
    k: &nvbare_core::device::KernelInfo,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(k.params.len());
    match (params.is_null(), extra.is_null()) {
        (false, true) => {
            for (i, p) in k.params.iter().enumerate() {
                // SAFETY: one pointer per parameter (cuda.h), each to the parameter's bytes.
                let arg = unsafe { params.add(i).read() };
                // SAFETY: as above.
                let bytes = unsafe { host(arg.cast_const(), p.size as usize, "kernelParams[i]")? };
                out.push(bytes.to_vec());
            }
        }
        (true, false) => {
            // SAFETY: the caller's `extra` array.
            let (buf, size) = unsafe { extra_buffer(extra)? };
            let need = k
                .params
                .iter()
                .map(|p| p.offset as usize + p.size as usize)
                .max()
                .unwrap_or(0);
            check_extra_size(&k.name, size, need)?;
            // SAFETY: the caller's buffer of `size` bytes (CU_LAUNCH_PARAM_BUFFER_SIZE).
            let b = unsafe { host(buf, size, "extra buffer")? };
            // A short buffer is taken as NVIDIA's library takes it (the launch goes ahead);
            // what the kernel sees past it is not known: zeros here.
            for p in &k.params {
                let (at, n) = (p.offset as usize, p.size as usize);
                let mut arg = vec![0u8; n];
                let have = b.get(at..).map_or(&[][..], |t| &t[..t.len().min(n)]);
                arg[..have.len()].copy_from_slice(have);
                out.push(arg);
            }
        }
        (true, true) if k.params.is_empty() => {}
        (true, true) => {
            return Err(err(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "`{}` takes {} parameters; kernelParams and extra are null",
                    k.name,
                    k.params.len()
                ),
            ));
        }
        (false, false) => {
            return Err(err(
                CUDA_ERROR_INVALID_VALUE,
                "both kernelParams and extra are given",
            ));
        }
    }
    Ok(out)
}

/// A launch, its arguments captured: what cuLaunchKernel submits and a graph's kernel node
/// holds.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The kernel.
    pub func: Arc<FuncObj>,
    /// Grid, block, dynamic shared memory.
    pub cfg: LaunchConfig,
    /// Each parameter's bytes.
    pub args: Vec<Vec<u8>>,
}

impl Launch {
    /// Checks the shape and captures the arguments.
    ///
    /// # Safety
    ///
    /// `params` and `extra` as [`arguments`] takes them.
    pub(crate) unsafe fn new(
        f: CUfunction,
        grid: [c_uint; 3],
        block: [c_uint; 3],
        shared_mem_bytes: c_uint,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CuResult<Launch> {
        let func = super::module::function_of(f)?;
        if grid.contains(&0) || block.contains(&0) {
            return Err(err(
                CUDA_ERROR_INVALID_VALUE,
                format!("grid {grid:?}, block {block:?}"),
            ));
        }
        let max_dyn = *func
            .max_dynamic_shared
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if shared_mem_bytes > max_dyn {
            return Err(err(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "{shared_mem_bytes} bytes of dynamic shared memory; the function allows \
                     {max_dyn} (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)"
                ),
            ));
        }
        // SAFETY: the caller's parameter arrays (this function's contract).
        let args = unsafe { arguments(func.func.info(), params, extra)? };
        let cfg = LaunchConfig {
            grid,
            block,
            shared_mem_bytes,
        };
        Ok(Launch { func, cfg, args })
    }

    /// Queues it on `stream`.
    pub(crate) fn submit(&self, stream: &Stream) -> CuResult<()> {
        Ok(stream.launch_raw(&self.func.func, self.cfg, &self.arg_list())?)
    }

    /// Its arguments as the device layer takes them.
    pub(crate) fn arg_list(&self) -> Vec<Arg<'_>> {
        self.args.iter().map(|b| Arg::Bytes(b)).collect()
    }

    /// The same kernel, shape and argument bytes as `other`.
    pub(crate) fn same(&self, other: &Launch) -> bool {
        Arc::ptr_eq(&self.func, &other.func) && self.cfg == other.cfg && self.args == other.args
    }
}

entry! {
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchKernel(
        f: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: CUstream,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let (grid, block) = ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]);
        // SAFETY: the caller's parameter arrays (cuLaunchKernel's contract).
        let l = unsafe { Launch::new(f, grid, block, shared_mem_bytes, kernel_params, extra) };
        if let Some(c) = capturing(stream)? {
            return c.add(|| Ok(vec![Work::Kernel(l?)]));
        }
        l?.submit(&state::stream_of(stream)?)
    }
}
