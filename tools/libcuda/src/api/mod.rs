//! The exported entry points, by area, and the few helpers that turn the caller's raw
//! pointers into safe values (the only `unsafe` of the crate besides loading the JIT).

mod capture;
mod context;
mod device;
mod graph;
mod launch;
mod memory;
mod module;
mod proc;
mod stream;

pub use capture::*;
pub use context::*;
pub use device::*;
pub use graph::*;
pub use launch::*;
pub use memory::*;
pub use module::*;
pub use proc::*;
pub use stream::*;

use std::ffi::{CStr, c_char, c_void};

use crate::abi::CUDA_ERROR_INVALID_VALUE;
use crate::error::{CuResult, err, null};

/// Writes `v` through the caller's out-pointer `p` (null: `CUDA_ERROR_INVALID_VALUE`).
///
/// # Safety
///
/// `p` is null or valid for a write of `T` (cuda.h's contract for out-parameters).
pub(crate) unsafe fn put<T>(p: *mut T, v: T, what: &str) -> CuResult<()> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, and valid for a write of `T` by this function's contract; unaligned
    // so that a caller's misaligned pointer is not undefined behaviour here.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Reads a `T` the caller passed by pointer.
///
/// # Safety
///
/// `p` is null or valid for a read of `T`.
pub(crate) unsafe fn get<T: Copy>(p: *const T, what: &str) -> CuResult<T> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, and valid for a read of `T` by this function's contract.
    Ok(unsafe { p.read_unaligned() })
}

fn check_len(n: usize, what: &str) -> CuResult<()> {
    if n > isize::MAX as usize {
        return Err(err(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: {n} bytes is more than any host buffer can hold"),
        ));
    }
    Ok(())
}

/// `n` bytes of the caller's host memory at `p`.
///
/// # Safety
///
/// `p` is null or valid for reads of `n` bytes that nothing writes while the slice lives.
pub(crate) unsafe fn host<'a>(p: *const c_void, n: usize, what: &str) -> CuResult<&'a [u8]> {
    check_len(n, what)?;
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, at most isize::MAX bytes, valid for reads by this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) })
}

/// `n` bytes of the caller's host memory at `p`, to write.
///
/// # Safety
///
/// `p` is null or valid for writes of `n` bytes that nothing else touches while the slice
/// lives.
pub(crate) unsafe fn host_mut<'a>(p: *mut c_void, n: usize, what: &str) -> CuResult<&'a mut [u8]> {
    check_len(n, what)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, at most isize::MAX bytes, valid for writes by this function's
    // contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
}

/// The caller's NUL-terminated string.
///
/// # Safety
///
/// `p` is null or points at a NUL-terminated string.
pub(crate) unsafe fn cstr<'a>(p: *const c_char, what: &str) -> CuResult<&'a str> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null and NUL-terminated by this function's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| err(CUDA_ERROR_INVALID_VALUE, format!("{what} is not UTF-8")))
}

/// A handle as the id it is.
pub(crate) fn id(h: *mut c_void) -> usize {
    h as usize
}

/// An id as the handle C sees.
pub(crate) fn handle(id: usize) -> *mut c_void {
    id as *mut c_void
}
