//! Typed errors inside the library, each with the `CUresult` a CUDA program expects and a
//! reason for the log.

use crate::abi::*;
use nvbare::Error;

/// A failed call: the `CUresult` to return and why (logged, never returned to C).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuError {
    /// What the entry point returns.
    pub code: CUresult,
    /// One line for stderr.
    pub why: String,
    /// Already reported (cuInit's failure, repeated by every later call): not logged again.
    pub quiet: bool,
}

/// `Result` with [`CuError`].
pub type CuResult<T> = Result<T, CuError>;

/// A [`CuError`] with `code` and `why`.
pub fn err(code: CUresult, why: impl Into<String>) -> CuError {
    CuError {
        code,
        why: why.into(),
        quiet: false,
    }
}

/// `CUDA_ERROR_INVALID_VALUE` for a null pointer argument named `what`.
pub fn null(what: &str) -> CuError {
    err(CUDA_ERROR_INVALID_VALUE, format!("{what} is null"))
}

impl CuError {
    /// Whether the failure came from the device rather than from the caller's arguments: those
    /// are always logged (a CUDA program often prints only the code).
    fn is_device_failure(&self) -> bool {
        matches!(
            self.code,
            CUDA_ERROR_ILLEGAL_ADDRESS
                | CUDA_ERROR_ILLEGAL_INSTRUCTION
                | CUDA_ERROR_LAUNCH_FAILED
                | CUDA_ERROR_LAUNCH_TIMEOUT
                | CUDA_ERROR_TIMEOUT
                | CUDA_ERROR_UNKNOWN
                | CUDA_ERROR_NO_DEVICE
                | CUDA_ERROR_OUT_OF_MEMORY
                | CUDA_ERROR_INVALID_PTX
                | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        )
    }

    /// Writes the reason to stderr: device failures always, the others with
    /// `NVBARE_CUDA_LOG=1`.
    pub fn log(&self, entry: &str) {
        if (self.is_device_failure() && !self.quiet) || crate::verbose() {
            let name = error_name(self.code)
                .map(|n| n.trim_end_matches('\0'))
                .unwrap_or("?");
            eprintln!("nvbare libcuda: {entry}: {name}: {}", self.why);
        }
    }
}

impl From<Error> for CuError {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Spec(_) | Error::Arguments(_) => CUDA_ERROR_INVALID_VALUE,
            Error::NotBuilt(_) => CUDA_ERROR_NOT_SUPPORTED,
            Error::Firmware(_) | Error::Open(_) => CUDA_ERROR_NO_DEVICE,
            Error::Program(_) => CUDA_ERROR_INVALID_IMAGE,
            Error::ForeignObject(_) => CUDA_ERROR_INVALID_CONTEXT,
            Error::Closed(_) => CUDA_ERROR_CONTEXT_IS_DESTROYED,
            Error::Device(d) => device_code(d),
            Error::Jit(nvbare_pci_host::jit::JitError::NotFound(_)) => {
                CUDA_ERROR_JIT_COMPILER_NOT_FOUND
            }
            Error::Jit(_) => CUDA_ERROR_INVALID_PTX,
            _ => CUDA_ERROR_UNKNOWN,
        };
        err(code, e.to_string())
    }
}

/// The `CUresult` for a device-layer error.
fn device_code(e: &nvbare_core::device::DeviceError) -> CUresult {
    use nvbare_core::device::{BackendError, DeviceError as D};
    match e {
        D::Fault(r) if r.mmu_fault_flag || !r.mmu_faults.is_empty() => CUDA_ERROR_ILLEGAL_ADDRESS,
        D::Fault(r) if !r.sm_errors.is_empty() => CUDA_ERROR_ILLEGAL_INSTRUCTION,
        D::Fault(_) => CUDA_ERROR_LAUNCH_FAILED,
        D::Timeout { .. } => CUDA_ERROR_LAUNCH_TIMEOUT,
        D::Program(_) => CUDA_ERROR_INVALID_IMAGE,
        D::WrongSm { .. } => CUDA_ERROR_NO_BINARY_FOR_GPU,
        D::NoSuchKernel(_) | D::NoSuchGlobal(_) => CUDA_ERROR_NOT_FOUND,
        D::Launch(_) | D::Qmd(_) => CUDA_ERROR_INVALID_VALUE,
        D::Arguments(_) | D::BadRange(_) => CUDA_ERROR_INVALID_VALUE,
        D::ForeignObject(_) => CUDA_ERROR_INVALID_CONTEXT,
        D::EventTime(_) => CUDA_ERROR_INVALID_HANDLE,
        D::Unsupported(_) => CUDA_ERROR_NOT_SUPPORTED,
        D::PeerUnavailable { .. } => CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        D::Backend(BackendError::OutOfMemory { .. }) => CUDA_ERROR_OUT_OF_MEMORY,
        _ => CUDA_ERROR_UNKNOWN,
    }
}
