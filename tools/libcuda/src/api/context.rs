//! Contexts: per-thread current, as CUDA's are. All contexts of a device share its memory
//! (nvbare has one address space per device).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

use super::{handle, id, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuResult, err};
use crate::state::{self, Context};

/// A new context on `dev` (not yet current), as its handle.
fn new_context(dev: CUdevice, primary: bool) -> CuResult<usize> {
    let d = state::device(dev)?;
    let ctx = Context {
        device: dev as usize,
        gpu: d.gpu.clone(),
        stream: d.gpu.default_stream(),
        primary,
    };
    let mut o = state::objects();
    let h = o.handle();
    o.contexts.insert(h, Arc::new(ctx));
    Ok(h)
}

/// Forgets context `h` and what was made in it (streams, modules, functions); their device
/// objects are released after the table lock is let go (a release may wait for the GPU).
fn destroy_context(h: usize) {
    let mut o = state::objects();
    let ctx = o.contexts.remove(&h);
    let streams: Vec<_> = o.streams.extract_if(|_, s| s.ctx == h).collect();
    let modules: Vec<_> = o.modules.extract_if(|_, m| m.ctx == h).collect();
    let functions: Vec<_> = o
        .functions
        .extract_if(|_, f| modules.iter().any(|(m, _)| *m == f.module))
        .collect();
    drop(o);
    drop((ctx, streams, functions, modules));
}

fn ctx_id(ctx: CUcontext) -> CuResult<usize> {
    let h = id(ctx);
    if !state::objects().contexts.contains_key(&h) {
        return Err(err(CUDA_ERROR_INVALID_CONTEXT, format!("context {h:#x}")));
    }
    Ok(h)
}

entry! {
    /// Makes a context on `dev` and pushes it on this thread's stack.
    fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) {
        let _ = flags; // scheduling hints: every wait here polls with the facade's deadline
        if pctx.is_null() {
            return Err(crate::error::null("pctx"));
        }
        let h = new_context(dev, false)?;
        state::push_current(h);
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(pctx, handle(h), "pctx") }
    }

    /// CUDA 13's `cuCtxCreate`: the creation parameters (execution affinity, CIG) are not
    /// supported and must be null.
    fn cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut c_void, flags: c_uint, dev: CUdevice) {
        if !params.is_null() {
            return Err(err(CUDA_ERROR_NOT_SUPPORTED, "CUctxCreateParams (pass null)"));
        }
        // SAFETY: the same arguments as the caller's.
        match unsafe { cuCtxCreate_v2(pctx, flags, dev) } {
            CUDA_SUCCESS => Ok(()),
            code => Err(err(code, "cuCtxCreate_v2 failed")),
        }
    }

    fn cuCtxDestroy_v2(ctx: CUcontext) {
        state::driver()?;
        let h = ctx_id(ctx)?;
        if state::get(|o| &o.contexts, h, "context")?.primary {
            return Err(err(
                CUDA_ERROR_INVALID_CONTEXT,
                "a primary context is released (cuDevicePrimaryCtxRelease), not destroyed",
            ));
        }
        if state::current_handle() == Some(h) {
            state::pop_current();
        }
        destroy_context(h);
        Ok(())
    }

    fn cuCtxSetCurrent(ctx: CUcontext) {
        state::driver()?;
        if ctx.is_null() {
            state::set_current(None);
            return Ok(());
        }
        state::set_current(Some(ctx_id(ctx)?));
        Ok(())
    }

    fn cuCtxGetCurrent(pctx: *mut CUcontext) {
        state::driver()?;
        let h = state::current_handle().unwrap_or(0);
        // SAFETY: the caller's out-pointer.
        unsafe { put(pctx, handle(h), "pctx") }
    }

    fn cuCtxPushCurrent_v2(ctx: CUcontext) {
        state::driver()?;
        state::push_current(ctx_id(ctx)?);
        Ok(())
    }

    fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) {
        state::driver()?;
        let h = state::pop_current()
            .ok_or_else(|| err(CUDA_ERROR_INVALID_CONTEXT, "no context is current"))?;
        if pctx.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's out-pointer (null allowed: checked above).
        unsafe { put(pctx, handle(h), "pctx") }
    }

    fn cuCtxGetDevice(device: *mut CUdevice) {
        let (_, c) = state::current()?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(device, c.device as CUdevice, "device") }
    }

    /// Waits (with the facade's deadline) for all work of the current context's device.
    fn cuCtxSynchronize() {
        let (ch, c) = state::current()?;
        super::capture::refuse_if_any_capturing(ch, "cuCtxSynchronize")?;
        Ok(c.gpu.synchronize()?)
    }

    /// Peer access needs a GPU-side path the facade does not give (cuDeviceCanAccessPeer
    /// says 0).
    fn cuCtxEnablePeerAccess(peer: CUcontext, flags: c_uint) {
        let _ = flags;
        state::current()?;
        ctx_id(peer)?;
        Err(err(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "nvbare devices opened one by one are not peers"))
    }

    fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) {
        let d = state::device(dev)?;
        if pctx.is_null() {
            return Err(crate::error::null("pctx"));
        }
        let mut p = d.primary.lock().unwrap_or_else(|e| e.into_inner());
        let h = match *p {
            Some((h, n)) => {
                *p = Some((h, n.saturating_add(1)));
                h
            }
            None => {
                let h = new_context(dev, true)?;
                *p = Some((h, 1));
                h
            }
        };
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(pctx, handle(h), "pctx") }
    }

    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) {
        let d = state::device(dev)?;
        let mut p = d.primary.lock().unwrap_or_else(|e| e.into_inner());
        match *p {
            Some((h, 1)) => {
                *p = None;
                destroy_context(h);
            }
            Some((h, n)) => *p = Some((h, n - 1)),
            None => return Err(err(CUDA_ERROR_INVALID_CONTEXT, "the primary context is not retained")),
        }
        Ok(())
    }

    fn cuDevicePrimaryCtxRelease(dev: CUdevice) {
        // SAFETY: no pointers.
        match unsafe { cuDevicePrimaryCtxRelease_v2(dev) } {
            CUDA_SUCCESS => Ok(()),
            code => Err(err(code, "cuDevicePrimaryCtxRelease_v2 failed")),
        }
    }

    fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) {
        let d = state::device(dev)?;
        let on = d.primary.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(flags, 0, "flags")?;
            put(active, on as c_int, "active")
        }
    }

    fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) {
        let _ = flags;
        state::device(dev).map(|_| ())
    }
}
