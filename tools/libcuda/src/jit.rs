//! PTX to cubin: nvbare's nvJitLink loader (`nvbare_pci_host::jit`, shared with the library's
//! `Gpu::load_ptx`), its errors as the `CUresult`s CUDA gives.

use nvbare_pci_host::jit::{self, JitError};

use crate::abi::*;
use crate::error::{CuResult, err};

/// `ptx` compiled for `sm_<sm>`: `CUDA_ERROR_JIT_COMPILER_NOT_FOUND` without nvJitLink,
/// `CUDA_ERROR_INVALID_PTX` with the JIT's log (also on stderr) when it does not compile.
pub fn compile(ptx: &[u8], sm: u32) -> CuResult<Vec<u8>> {
    jit::compile(ptx, sm).map_err(|e| match e {
        JitError::NotFound(why) => err(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, why),
        JitError::Compile { ref log, .. } => {
            eprintln!("nvbare libcuda: PTX JIT log:\n{log}");
            err(CUDA_ERROR_INVALID_PTX, e.to_string())
        }
    })
}

/// Where the JIT was loaded from, or why it was not.
pub fn location() -> Result<std::path::PathBuf, String> {
    jit::location()
}
