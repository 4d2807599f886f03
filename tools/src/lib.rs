//! The `nvbare` command-line tool, as a library so its pieces can be tested.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
// Doc comments on clap arguments are `--help` text (`sim[:CHIP]`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

pub mod cmd;
pub mod kmod;
pub mod logger;
pub mod open;
pub mod progress;

// Device opening lives in the library (`nvbare::backend`); the CLI uses it as it is.
pub use nvbare::backend::spec as device;
pub use nvbare::backend::{baremetal, input};
pub use nvbare::with_device;

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
    /// Opening a device (or its firmware) failed.
    #[error(transparent)]
    Backend(#[from] nvbare::backend::BackendError),
    /// Anything else that went wrong at run time (exit code 1).
    #[error("{0}")]
    Runtime(String),
}

impl CliError {
    /// The process exit code for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) | CliError::Backend(nvbare::backend::BackendError::Usage(_)) => 2,
            _ => 1,
        }
    }
}

impl From<nvbare::backend::FirmwareError> for CliError {
    fn from(e: nvbare::backend::FirmwareError) -> CliError {
        CliError::Backend(e.into())
    }
}

impl From<input::InputError> for CliError {
    /// A file of the wrong size is a usage error (exit 2): the command line named it.
    fn from(e: input::InputError) -> CliError {
        match e {
            input::InputError::Io { .. } => CliError::Runtime(e.to_string()),
            input::InputError::Size { .. } => CliError::Usage(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn input_errors_map_to_exit_codes() {
        let k = input::Kind {
            what: "a test file",
            hint: "pass a smaller one",
        };
        let missing = Path::new("/nonexistent/nvbare/input.bin");
        let cli = CliError::from(input::read_at_most(missing, 16, k).unwrap_err());
        assert_eq!(cli.exit_code(), 1);
        assert!(
            cli.to_string()
                .starts_with("cannot read /nonexistent/nvbare/input.bin")
        );
        let too_big =
            CliError::from(input::read_at_most(Path::new("/dev/zero"), 1, k).unwrap_err());
        assert_eq!(too_big.exit_code(), 2);
        let usage = CliError::from(nvbare::backend::BackendError::Usage("no".into()));
        assert_eq!(usage.exit_code(), 2);
    }
}
