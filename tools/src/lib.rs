//! The `nvbare` command-line tool, as a library so its pieces can be tested.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
// Doc comments on clap arguments are `--help` text (`sim[:CHIP]`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

pub mod baremetal;
pub mod cmd;
pub mod device;
pub mod input;
pub mod kmod;
pub mod logger;
pub mod open;

pub use device::DeviceSpec;

/// Errors a subcommand reports; the message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line asked for something impossible (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Reading sysfs failed.
    #[error(transparent)]
    Sysfs(#[from] nvbare_pci_host::SysfsError),
    /// The chip could not be identified.
    #[error("{0}")]
    Chip(#[from] nvbare_core::chip::ChipError),
    /// Binding a GPU to vfio-pci (or back) failed.
    #[error(transparent)]
    Bind(#[from] nvbare_pci_host::bind::BindError),
    /// Opening a GPU through VFIO failed.
    #[error(transparent)]
    Vfio(#[from] nvbare_pci_host::vfio::VfioError),
    /// Talking to a remote PCI server (`remote:` devices) failed.
    #[error(transparent)]
    Remote(#[from] nvbare_pci_host::remote::client::RemoteError),
    /// The nvidia kernel-driver adapter failed.
    #[cfg(feature = "nvidia-kmod")]
    #[error(transparent)]
    Kmod(#[from] nvbare_pci_host::nvidia::KmodError),
    /// Anything else that went wrong at run time (exit code 1).
    #[error("{0}")]
    Runtime(String),
}

impl CliError {
    /// The process exit code for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}
