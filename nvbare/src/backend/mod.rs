//! Opening devices: the code path under [`crate::open`], public so that frontends (the
//! `nvbare` CLI in `nvbare-tools`, servers, benchmarks) open devices exactly as the library
//! does, with no glue of their own.
//!
//! * [`spec`]: the device-string grammar ([`DeviceSpec`]: `sim[:CHIP]`, `nvidia:N`,
//!   `vfio:BDF`, `remote:HOST[:PORT[:N]]`);
//! * [`firmware`]: where the GSP firmware comes from ([`FirmwareSource`]), fetched and verified
//!   by the embedded fetch script;
//! * [`baremetal`]: the platforms of the bare-metal path (simulated, VFIO, remote) and their
//!   openers;
//! * [`open`]: [`AnyDevice`], [`open_device`] and what every open does after the backend is up
//!   (runtime kernels, the flusher thread);
//! * [`input`]: size-limited reads of files users name.

pub mod baremetal;
pub mod firmware;
pub mod input;
pub mod open;
pub mod spec;

pub use firmware::{FirmwareError, FirmwareSource};
pub use open::{AnyDevice, open_device};
pub use spec::{DeviceSpec, DeviceSpecError};

/// Why opening a device (or a piece of it) failed; the message says what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The caller asked for something impossible (the CLI's exit code 2).
    #[error("{0}")]
    Usage(String),
    /// The firmware is missing, could not be fetched, or does not load.
    #[error(transparent)]
    Firmware(#[from] FirmwareError),
    /// The device kind is not built into this copy of nvbare (a cargo feature is off).
    #[error("{0}")]
    NotBuilt(String),
    /// Reading sysfs failed.
    #[error(transparent)]
    Sysfs(#[from] nvbare_pci_host::SysfsError),
    /// The chip could not be identified.
    #[error("{0}")]
    Chip(#[from] nvbare_core::chip::ChipError),
    /// Opening a GPU through VFIO failed.
    #[error(transparent)]
    Vfio(#[from] nvbare_pci_host::vfio::VfioError),
    /// Talking to a remote PCI server (`remote:` devices) failed.
    #[error(transparent)]
    Remote(#[from] nvbare_pci_host::remote::client::RemoteError),
    /// The nvidia kernel-driver adapter failed.
    #[cfg(feature = "nvidia")]
    #[error(transparent)]
    Kmod(#[from] nvbare_pci_host::nvidia::KmodError),
    /// Anything else that went wrong while opening or closing.
    #[error("{0}")]
    Runtime(String),
}
