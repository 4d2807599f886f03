//! Device and host memory, copies and memsets. A `CUdeviceptr` is the GPU virtual address of
//! an nvbare buffer; an address inside one stands for the rest of it ([`state::resolve`]).

use std::ffi::{c_uint, c_void};

use nvbare::Stream;

use super::capture::{Capturing, capturing};
use super::graph::{Copy1d, Work};
use super::{host, host_mut, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuResult, err};
use crate::state::{self, Alloc, HostAlloc, Page};

/// Largest host chunk a memset stages at once.
const MEMSET_CHUNK: usize = 1 << 20;

fn alloc(bytes: usize) -> CuResult<CUdeviceptr> {
    let (_, c) = state::current()?;
    if bytes == 0 {
        return Err(err(CUDA_ERROR_INVALID_VALUE, "bytesize is 0"));
    }
    let buf = c.gpu.alloc::<u8>(bytes)?;
    state::record_alloc(Alloc {
        device: c.device,
        buf,
    })
}

fn free(ptr: CUdeviceptr) -> CuResult<()> {
    state::current()?;
    // Taken out first: the memory is released (which may wait for the GPU) after the table
    // lock is let go.
    let a = state::objects().allocs.remove(&ptr);
    a.map(drop).ok_or_else(|| {
        err(
            CUDA_ERROR_INVALID_VALUE,
            format!("{ptr:#x} is not an allocation's start"),
        )
    })
}

/// Pinned host memory of `device` at `[ptr, ptr + len)`, where a copy can run on the GPU.
fn pinned_on(device: usize, ptr: *const u8, len: usize) -> Option<state::DevRange> {
    state::pinned(ptr as usize, len).filter(|h| h.alloc.device == device)
}

/// Copies `src` to `dst` in stream order. From pinned memory of the same device the GPU reads
/// it (queued: the caller keeps it unchanged until the stream gets there, as in CUDA); any
/// other host memory is staged, and may be reused as soon as this returns.
pub(crate) fn htod(dst: CUdeviceptr, src: &[u8], stream: &Stream) -> CuResult<()> {
    if src.is_empty() {
        return Ok(());
    }
    let d = state::resolve(dst, src.len())?;
    if let Some(h) = pinned_on(d.alloc.device, src.as_ptr(), src.len()) {
        return Ok(stream.dtod_copy(&h.slice()?, &d.slice()?)?);
    }
    Ok(stream.htod_copy_into(src, &d.slice()?)?)
}

/// Copies `src` to `dst` in stream order. Into pinned memory of the same device the GPU writes
/// it, queued (`Queued`: wait for the stream before reading `dst`, as in CUDA); any other host
/// memory is staged, the copy complete when this returns.
pub(crate) fn dtoh(dst: &mut [u8], src: CUdeviceptr, stream: &Stream) -> CuResult<Copied> {
    if dst.is_empty() {
        return Ok(Copied::Done);
    }
    let s = state::resolve(src, dst.len())?;
    if let Some(h) = pinned_on(s.alloc.device, dst.as_ptr(), dst.len()) {
        stream.dtod_copy(&s.slice()?, &h.slice()?)?;
        return Ok(Copied::Queued);
    }
    stream.dtoh_copy_into(&s.slice()?, dst)?;
    Ok(Copied::Done)
}

/// Whether a copy to host memory has landed when its call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Copied {
    /// Complete.
    Done,
    /// Queued on the stream (into pinned memory).
    Queued,
}

impl Copied {
    /// For a synchronous copy: waits for a queued one.
    fn wait(self, s: &Stream) -> CuResult<()> {
        if self == Copied::Queued {
            s.synchronize()?;
        }
        Ok(())
    }
}

pub(crate) fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: &Stream) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    let (s, d) = (state::resolve(src, n)?, state::resolve(dst, n)?);
    if s.alloc.device != d.alloc.device {
        // Devices opened one by one are not peers: through the host.
        let mut tmp = Vec::new();
        tmp.try_reserve_exact(n).map_err(|_| {
            err(
                CUDA_ERROR_OUT_OF_MEMORY,
                format!("{n} bytes of host staging"),
            )
        })?;
        tmp.resize(n, 0);
        // `stream` belongs to one of the two devices; each half runs on its own device's
        // default stream, so the copy is done (synchronously) before this returns: after the
        // caller's earlier work on `stream`, before anything queued later.
        stream.synchronize()?;
        let on = |dev: usize| -> CuResult<Stream> {
            Ok(state::device(dev as CUdevice)?.gpu.default_stream())
        };
        on(s.alloc.device)?.dtoh_copy_into(&s.slice()?, &mut tmp)?;
        let dst_stream = on(d.alloc.device)?;
        dst_stream.htod_copy_into(&tmp, &d.slice()?)?;
        return Ok(dst_stream.synchronize()?);
    }
    Ok(stream.dtod_copy(&s.slice()?, &d.slice()?)?)
}

/// The memory a memset of `count` elements of `pattern` at `dst` covers, and its bytes
/// (`None`: nothing to do), checked.
fn memset_range(
    dst: CUdeviceptr,
    pattern: &[u8],
    count: usize,
) -> CuResult<Option<(state::DevRange, usize)>> {
    let bytes = count
        .checked_mul(pattern.len())
        .ok_or_else(|| err(CUDA_ERROR_INVALID_VALUE, format!("{count} elements")))?;
    if bytes == 0 {
        return Ok(None);
    }
    if !dst.is_multiple_of(pattern.len() as u64) {
        return Err(err(
            CUDA_ERROR_INVALID_VALUE,
            format!("{dst:#x} is not aligned to {} bytes", pattern.len()),
        ));
    }
    Ok(Some((state::resolve(dst, bytes)?, bytes)))
}

/// Fills `count` elements of `pattern` (1, 2 or 4 bytes) at `dst`, through host staging.
pub(crate) fn memset(
    dst: CUdeviceptr,
    pattern: &[u8],
    count: usize,
    stream: &Stream,
) -> CuResult<()> {
    let Some((d, bytes)) = memset_range(dst, pattern, count)? else {
        return Ok(());
    };
    let chunk: Vec<u8> = pattern
        .iter()
        .copied()
        .cycle()
        .take(bytes.min(MEMSET_CHUNK))
        .collect();
    let mut at = 0;
    while at < bytes {
        let n = chunk.len().min(bytes - at);
        let s = d.alloc.buf.slice(d.offset + at..d.offset + at + n)?;
        stream.htod_copy_into(&chunk[..n], &s)?;
        at += n;
    }
    Ok(())
}

/// A copy queued on a capturing stream: checked now as the copy would be, run when the graph
/// is launched (host memory is read or written then, as in CUDA).
fn captured_copy(c: &Capturing, copy: Copy1d, n: usize) -> CuResult<()> {
    c.add(|| {
        if n == 0 {
            return Ok(Vec::new());
        }
        match copy {
            Copy1d::HtoD { dst, src } => {
                state::resolve(dst, n)?;
                if src == 0 {
                    return Err(crate::error::null("srcHost"));
                }
            }
            Copy1d::DtoH { dst, src } => {
                state::resolve(src, n)?;
                if dst == 0 {
                    return Err(crate::error::null("dstHost"));
                }
            }
            Copy1d::DtoD { dst, src } => {
                state::resolve(src, n)?;
                state::resolve(dst, n)?;
            }
        }
        Ok(vec![Work::Memcpy(copy, n)])
    })
}

/// A memset queued on a capturing stream, checked now.
fn captured_memset(c: &Capturing, dst: CUdeviceptr, pattern: &[u8], count: usize) -> CuResult<()> {
    c.add(|| {
        Ok(match memset_range(dst, pattern, count)? {
            None => Vec::new(),
            Some(_) => vec![Work::Memset {
                dst,
                pattern: pattern.to_vec(),
                count,
            }],
        })
    })
}

/// A host-memory buffer of the context's device with a CPU pointer, for cuMemHostAlloc:
/// `None` where the device gives none (the caller falls back to plain memory).
fn pinned_alloc(
    c: &state::Context,
    bytes: usize,
) -> CuResult<Option<(*mut c_void, std::sync::Arc<Alloc>)>> {
    let buf = match c.gpu.alloc_host::<u8>(bytes) {
        Ok(b) => b,
        Err(nvbare::Error::Device(nvbare_core::device::DeviceError::Backend(e))) => {
            // Registering the pages with the GPU failed (an RM limit, say): plain memory
            // still works, through staging.
            crate::log_once(&format!(
                "cuMemHostAlloc: pinned memory unavailable ({e}); using plain memory"
            ));
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let Some(p) = buf.host_ptr()? else {
        return Ok(None);
    };
    let a = std::sync::Arc::new(Alloc {
        device: c.device,
        buf,
    });
    Ok(Some((p.as_ptr().cast::<c_void>(), a)))
}

/// The current context's default stream, after a synchronous call's work is queued on it:
/// waited for, so the copy is complete when the call returns.
fn sync_default() -> CuResult<Stream> {
    state::stream_of(std::ptr::null_mut())
}

entry! {
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) {
        if dptr.is_null() {
            return Err(crate::error::null("dptr"));
        }
        let va = alloc(bytesize)?;
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(dptr, va, "dptr") }
    }

    fn cuMemFree_v2(dptr: CUdeviceptr) {
        free(dptr)
    }

    /// Base and size of the allocation holding `dptr`.
    fn cuMemGetAddressRange_v2(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) {
        state::current()?;
        let r = state::resolve(dptr, 0)?;
        // SAFETY: the caller's out-pointers (each may be null, as cuda.h allows).
        unsafe {
            if !pbase.is_null() {
                put(pbase, r.alloc.buf.gpu_va(), "pbase")?;
            }
            if !psize.is_null() {
                put(psize, r.alloc.buf.len(), "psize")?;
            }
        }
        Ok(())
    }

    /// Host memory of the current context's device that this process reaches directly, so
    /// copies to and from it run on the GPU (NVIDIA's pinned memory); where the device gives
    /// no CPU pointer (`remote:`), plain page-aligned memory, which copies stage.
    /// `CU_MEMHOSTALLOC_DEVICEMAP` needs the former: its device pointer is
    /// cuMemHostGetDevicePointer_v2's.
    fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) {
        let (_, c) = state::current()?;
        if pp.is_null() {
            return Err(crate::error::null("pp"));
        }
        if bytesize == 0 {
            return Err(err(CUDA_ERROR_INVALID_VALUE, "bytesize is 0"));
        }
        let known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
        if flags & !known != 0 {
            return Err(err(CUDA_ERROR_INVALID_VALUE, format!("flags {flags:#x}")));
        }
        let (p, h) = match pinned_alloc(&c, bytesize)? {
            Some((p, a)) => (p, HostAlloc::Pinned(a)),
            None if flags & CU_MEMHOSTALLOC_DEVICEMAP != 0 => {
                return Err(err(
                    CUDA_ERROR_NOT_SUPPORTED,
                    format!("CU_MEMHOSTALLOC_DEVICEMAP: the host memory of {} is not this process's", c.gpu.name()),
                ));
            }
            None => {
                let pages = bytesize.div_ceil(size_of::<Page>());
                let mut v: Vec<Page> = Vec::new();
                v.try_reserve_exact(pages).map_err(|_| {
                    err(CUDA_ERROR_OUT_OF_MEMORY, format!("{bytesize} bytes of host memory"))
                })?;
                v.resize(pages, Page([0; 4096]));
                (v.as_mut_ptr().cast::<c_void>(), HostAlloc::Pages { _pages: v })
            }
        };
        state::objects().host.insert(p as usize, h);
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(pp, p, "pp") }
    }

    /// The GPU address of pinned memory from cuMemHostAlloc (any address inside it), for
    /// kernels of its device to read and write it in place.
    fn cuMemHostGetDevicePointer_v2(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) {
        state::current()?;
        if pdptr.is_null() {
            return Err(crate::error::null("pdptr"));
        }
        if flags != 0 {
            return Err(err(CUDA_ERROR_INVALID_VALUE, format!("flags {flags:#x} (must be 0)")));
        }
        let h = state::pinned(p as usize, 1).ok_or_else(|| {
            err(CUDA_ERROR_INVALID_VALUE, format!("{p:?} is not in pinned memory from cuMemHostAlloc"))
        })?;
        let va = h.alloc.buf.gpu_va() + h.offset as u64;
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(pdptr, va, "pdptr") }
    }

    fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) {
        // SAFETY: the caller's arguments, passed on.
        match unsafe { cuMemHostAlloc(pp, bytesize, 0) } {
            CUDA_SUCCESS => Ok(()),
            code => Err(err(code, "cuMemHostAlloc failed")),
        }
    }

    /// Pinned memory is freed after the GPU has finished with it.
    fn cuMemFreeHost(p: *mut c_void) {
        state::driver()?;
        // Taken out first: freeing pinned memory may wait for the GPU.
        let h = state::objects().host.remove(&(p as usize));
        h.map(drop)
            .ok_or_else(|| err(CUDA_ERROR_INVALID_VALUE, format!("{p:?} is not from cuMemHostAlloc")))
    }

    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
        let s = sync_default()?;
        // SAFETY: the caller's source buffer of `n` bytes.
        htod(dst, unsafe { host(src, n, "srcHost")? }, &s)?;
        Ok(s.synchronize()?)
    }

    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        let s = sync_default()?;
        // SAFETY: the caller's destination buffer of `n` bytes.
        dtoh(unsafe { host_mut(dst, n, "dstHost")? }, src, &s)?.wait(&s)
    }

    fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        let s = sync_default()?;
        dtod(dst, src, n, &s)?;
        Ok(s.synchronize()?)
    }

    /// Returns once `src` may be reused; the copy completes in stream order.
    fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            return captured_copy(&c, Copy1d::HtoD { dst, src: src as usize }, n);
        }
        let s = state::stream_of(stream)?;
        // SAFETY: the caller's source buffer of `n` bytes.
        htod(dst, unsafe { host(src, n, "srcHost")? }, &s)
    }

    /// Into pinned memory: queued, as in CUDA. Into any other host memory: waits for the
    /// stream's earlier work and the copy (stronger than CUDA, never weaker).
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            return captured_copy(&c, Copy1d::DtoH { dst: dst as usize, src }, n);
        }
        let s = state::stream_of(stream)?;
        // SAFETY: the caller's destination buffer of `n` bytes.
        dtoh(unsafe { host_mut(dst, n, "dstHost")? }, src, &s).map(drop)
    }

    fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            return captured_copy(&c, Copy1d::DtoD { dst, src }, n);
        }
        dtod(dst, src, n, &state::stream_of(stream)?)
    }

    fn cuMemsetD8_v2(dst: CUdeviceptr, uc: u8, n: usize) {
        let s = sync_default()?;
        memset(dst, &[uc], n, &s)?;
        Ok(s.synchronize()?)
    }

    fn cuMemsetD16_v2(dst: CUdeviceptr, us: u16, n: usize) {
        let s = sync_default()?;
        memset(dst, &us.to_le_bytes(), n, &s)?;
        Ok(s.synchronize()?)
    }

    fn cuMemsetD32_v2(dst: CUdeviceptr, ui: c_uint, n: usize) {
        let s = sync_default()?;
        memset(dst, &ui.to_le_bytes(), n, &s)?;
        Ok(s.synchronize()?)
    }

    fn cuMemsetD8Async(dst: CUdeviceptr, uc: u8, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            return captured_memset(&c, dst, &[uc], n);
        }
        memset(dst, &[uc], n, &state::stream_of(stream)?)
    }

    fn cuMemsetD16Async(dst: CUdeviceptr, us: u16, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            return captured_memset(&c, dst, &us.to_le_bytes(), n);
        }
        memset(dst, &us.to_le_bytes(), n, &state::stream_of(stream)?)
    }

    fn cuMemsetD32Async(dst: CUdeviceptr, ui: c_uint, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            return captured_memset(&c, dst, &ui.to_le_bytes(), n);
        }
        memset(dst, &ui.to_le_bytes(), n, &state::stream_of(stream)?)
    }
}

/// Video memory of the current context's device, `(free, total)`.
fn memory_info() -> CuResult<(u64, u64)> {
    let (_, c) = state::current()?;
    c.gpu.memory_info()?.ok_or_else(|| {
        err(
            CUDA_ERROR_NOT_SUPPORTED,
            format!("{} does not count its memory", c.gpu.name()),
        )
    })
}

entry! {
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let (f, t) = memory_info()?;
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(free, f as usize, "free")?;
            put(total, t as usize, "total")
        }
    }

    /// Where the backend does not count its memory: `CUDA_ERROR_NOT_SUPPORTED`.
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) {
        let d = state::device(dev)?;
        let (_, t) = d.gpu.memory_info()?.ok_or_else(|| {
            err(CUDA_ERROR_NOT_SUPPORTED, format!("{} does not count its memory", d.spec))
        })?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(bytes, t as usize, "bytes") }
    }
}

/// A copy between unified addresses: an address inside an allocation is device memory, any
/// other the caller's host memory.
///
/// # Safety
///
/// An address that is not inside an allocation is valid host memory for `n` bytes (cuda.h's
/// contract for cuMemcpy with unified addressing).
unsafe fn unified(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: &Stream) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    let (on_dst, on_src) = (
        state::resolve(dst, n).is_ok(),
        state::resolve(src, n).is_ok(),
    );
    let (dp, sp) = (dst as usize as *mut c_void, src as usize as *const c_void);
    match (on_dst, on_src) {
        (true, true) => dtod(dst, src, n, s),
        // SAFETY: `src` is host memory of `n` bytes by this function's contract.
        (true, false) => htod(dst, unsafe { host(sp, n, "src")? }, s),
        // SAFETY: `dst` is host memory of `n` bytes by this function's contract.
        (false, true) => dtoh(unsafe { host_mut(dp, n, "dst")? }, src, s).map(drop),
        (false, false) => {
            // SAFETY: both are host memory of `n` bytes (this function's contract);
            // `ptr::copy` allows them to overlap.
            unsafe { std::ptr::copy(sp.cast::<u8>(), dp.cast::<u8>(), n) };
            Ok(())
        }
    }
}

entry! {
    /// Either direction, by unified address (synchronous).
    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        let s = sync_default()?;
        // SAFETY: the caller's unified addresses.
        unsafe { unified(dst, src, n, &s)? };
        Ok(s.synchronize()?)
    }

    fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream) {
        if let Some(c) = capturing(stream)? {
            let copy = match (state::resolve(dst, n).is_ok(), state::resolve(src, n).is_ok()) {
                (true, true) => Copy1d::DtoD { dst, src },
                (true, false) => Copy1d::HtoD { dst, src: src as usize },
                (false, true) => Copy1d::DtoH { dst: dst as usize, src },
                (false, false) => {
                    return c.add(|| Err(err(CUDA_ERROR_NOT_SUPPORTED, "a host-to-host copy in a stream capture")));
                }
            };
            return captured_copy(&c, copy, n);
        }
        // SAFETY: the caller's unified addresses.
        unsafe { unified(dst, src, n, &state::stream_of(stream)?) }
    }
}
