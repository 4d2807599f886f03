//! `libcuda.so.1`: the CUDA driver API over any nvbare device (`sim:CHIP`, `vfio:BDF`,
//! `nvidia:N`, `remote:HOST:PORT`), so programs written against NVIDIA's driver API run
//! unmodified on nvbare. `NVBARE_DEVICE=SPEC[,SPEC...]` names the devices behind CUDA ordinals
//! 0, 1, ...; docs/libcuda.md lists what is implemented.
//!
//! Every entry point is `extern "C"` with NVIDIA's name and signature (cuda.h), catches
//! panics (`CUDA_ERROR_UNKNOWN`), and turns raw pointers from the caller into safe values at
//! once; everything behind that is safe Rust over the `nvbare` facade. Handles are ids looked
//! up in tables (`state.rs`), never our objects' addresses.

pub mod abi;
mod api;
pub mod error;
pub mod image;
pub mod jit;
pub(crate) mod state;

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock};

pub use api::*;

use abi::{CUDA_ERROR_UNKNOWN, CUDA_SUCCESS, CUresult};
use error::CuResult;

/// Whether `NVBARE_CUDA_LOG=1` asks for every failed call's reason on stderr.
pub(crate) fn verbose() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| std::env::var("NVBARE_CUDA_LOG").is_ok_and(|v| v == "1"))
}

/// Logs `what` once per process (unsupported entry points, unknown attributes).
pub(crate) fn log_once(what: &str) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if seen.insert(what.to_string()) {
        eprintln!("nvbare libcuda: {what}");
    }
}

/// Runs an entry point's body: its error becomes its `CUresult` (the reason logged), a panic
/// becomes `CUDA_ERROR_UNKNOWN` and never crosses into C.
pub(crate) fn guard(name: &str, f: impl FnOnce() -> CuResult<()>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(e)) => {
            e.log(name);
            e.code
        }
        Err(_) => {
            eprintln!("nvbare libcuda: {name}: internal error (a panic), please report it");
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// Runs `f` when the process exits (or the library is unloaded): devices are closed then, so a
/// bare-metal GPU is unloaded cleanly (GSP-RM shut down) as a program that never calls
/// anything like `cuCtxDestroy` ends.
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: `atexit` takes any `extern "C" fn()`; `f` catches its own panics.
    if unsafe { libc::atexit(f) } != 0 {
        eprintln!("nvbare libcuda: atexit failed: devices will not be closed at exit");
    }
}

/// Declares exported entry points: `#[no_mangle] unsafe extern "C"` with NVIDIA's name, the
/// body (returning [`CuResult`]) run under [`guard`].
macro_rules! entry {
    ($($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block)*) => {$(
        $(#[$m])*
        ///
        /// # Safety
        ///
        /// Pointer arguments must be valid for what cuda.h documents for this call.
        #[unsafe(no_mangle)]
        #[allow(clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::abi::CUresult {
            $crate::guard(stringify!($name), move || -> $crate::error::CuResult<()> { $body })
        }
    )*};
}
pub(crate) use entry;
