//! The one error type of the library.

use nvbare_core::device::DeviceError;

/// What went wrong; every message says what to do next (the CLI prints the same ones).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device string names no device: the message lists the valid forms.
    #[error("{0}")]
    Spec(String),
    /// The device kind is not built into this copy of nvbare (a cargo feature is off).
    #[error("{0}")]
    NotBuilt(String),
    /// The GSP firmware a bare-metal device needs is missing, could not be fetched, or does
    /// not load ([`Options::firmware_dir`](crate::Options::firmware_dir),
    /// [`Options::fetch_firmware`](crate::Options::fetch_firmware)).
    #[error(transparent)]
    Firmware(#[from] crate::backend::FirmwareError),
    /// Opening the device failed (GSP boot, VFIO, the kernel driver, the network).
    #[error("{0}")]
    Open(String),
    /// The device failed a call: a fault report, a timeout, a range, an RM error.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A cubin that could not be loaded.
    #[error("{0}")]
    Program(String),
    /// PTX that could not be compiled ([`crate::Gpu::load_ptx`], feature `jit`): nvJitLink is
    /// not installed (the message says how: `pip install nvidia-nvjitlink`, the CUDA toolkit,
    /// or `NVBARE_NVJITLINK=/path/to/libnvJitLink.so`), or the PTX does not compile (with
    /// nvJitLink's log).
    #[cfg(feature = "jit")]
    #[error(transparent)]
    Jit(#[from] nvbare_pci_host::jit::JitError),
    /// Kernel arguments that do not match the kernel's parameters.
    #[error("{0}")]
    Arguments(String),
    /// A buffer, module, stream or event used with a device it does not belong to.
    #[error("{0}")]
    ForeignObject(String),
    /// The device was closed ([`crate::Gpu::close`]) while this handle still existed.
    #[error("{0} was closed; open it again with nvbare::open")]
    Closed(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;
