//! What can go wrong talking to nvidia.ko, with messages that say what to do.

use std::fmt::Write as _;
use std::path::PathBuf;

use nvbare_core::rm::{Handle, RmError, RmStatus};
use rustix::io::Errno;

use super::driver::CardInfo;

/// The driver branch whose layouts the adapter speaks.
pub const SUPPORTED_BRANCH: &str = "580";

/// Errors of the kernel-driver adapter.
#[derive(Debug, thiserror::Error)]
pub enum KmodError {
    /// `/dev/nvidiactl` is missing and so is `/proc/driver/nvidia/version`.
    #[error(
        "no nvidia kernel driver is loaded (is nvidia.ko installed? `lsmod | grep nvidia`): \
         {path} does not exist. Load it with `sudo modprobe nvidia`, or use --device sim:CHIP"
    )]
    NoDriver {
        /// The control node that was looked for.
        path: PathBuf,
    },
    /// The module is loaded but a device node is missing.
    #[error(
        "nvidia.ko is loaded ({version}) but {path} does not exist: create the device nodes with \
         `sudo nvidia-modprobe -c {minor} -u` (or run `nvidia-smi` once as root)"
    )]
    NodeMissing {
        /// The missing node.
        path: PathBuf,
        /// What `/proc/driver/nvidia/version` says, or "version unknown".
        version: String,
        /// GPU minor number for the nvidia-modprobe hint (0 for the control node).
        minor: u32,
    },
    /// Opening a device node was refused.
    #[error(
        "permission denied opening {path}: add your user to the group that owns it (see \
         `ls -l {path}`; usually `video`: `sudo usermod -aG video $USER`, then log in again), or \
         install a udev rule that makes the nvidia nodes accessible (e.g. \
         KERNEL==\"nvidia*\", MODE=\"0666\" in /etc/udev/rules.d/70-nvidia.rules)"
    )]
    PermissionDenied {
        /// The node.
        path: PathBuf,
    },
    /// A node exists but does not behave like an nvidia device.
    #[error(
        "{path} is not an nvidia device node (an nvidia ioctl failed with {errno}); check \
         `ls -l {path}` (nvidiactl is character device 195:255) and `lsmod | grep nvidia`"
    )]
    NotNvidiaNode {
        /// The node.
        path: PathBuf,
        /// The error the first ioctl gave.
        errno: Errno,
    },
    /// Opening a node failed for another reason.
    #[error("cannot open {path}: {errno}")]
    Open {
        /// The node.
        path: PathBuf,
        /// The OS error.
        errno: Errno,
    },
    /// The loaded driver is not a branch the adapter has layouts for.
    #[error(
        "nvidia driver {found} is not supported: the kernel-driver adapter speaks the r{supported} \
         struct layouts (install a {supported}.x driver, or drive the GPU without nvidia.ko via \
         --device vfio:BDF)"
    )]
    UnsupportedDriver {
        /// The version string the driver reported.
        found: String,
        /// The branch we support.
        supported: &'static str,
    },
    /// The driver's version could not be determined.
    #[error(
        "cannot tell which nvidia driver is loaded ({detail}); check `cat /proc/driver/nvidia/version`"
    )]
    VersionUnknown {
        /// What was tried.
        detail: String,
    },
    /// The requested GPU index does not exist.
    #[error("there is no GPU nvidia:{index}; {}", list_cards(found))]
    NoSuchGpu {
        /// The index asked for (the `/dev/nvidiaN` minor number).
        index: u32,
        /// The GPUs the driver reported.
        found: Vec<CardInfo>,
    },
    /// The driver failed to bring the GPU up when its node was opened.
    #[error(
        "nvidia:{index}: the driver could not initialize the GPU (open rc {rc}, adapter status \
         {status}); check `sudo dmesg | grep NVRM` and `nvidia-smi`"
    )]
    GpuInitFailed {
        /// GPU index.
        index: u32,
        /// The open's errno (negative) as the driver recorded it.
        rc: i32,
        /// RM's status.
        status: RmStatus,
    },
    /// An ioctl that is not an RM call failed.
    #[error("{op} on {path} failed: {errno}{}", errno_hint(*errno))]
    Ioctl {
        /// The escape, in NVIDIA's name.
        op: &'static str,
        /// The node.
        path: PathBuf,
        /// The OS error.
        errno: Errno,
    },
    /// An RM call failed.
    #[error(transparent)]
    Rm(#[from] RmError),
    /// An RM escape other than alloc/control/free returned a failure status.
    #[error("RM {op} on {object} failed: {status}")]
    RmCall {
        /// The escape, in NVIDIA's name.
        op: &'static str,
        /// The object it acted on.
        object: Handle,
        /// RM's status.
        status: RmStatus,
    },
    /// A UVM call returned a failure status.
    #[error("{op} failed: {status}{}", uvm_hint(*status))]
    Uvm {
        /// The UVM ioctl, in NVIDIA's name.
        op: &'static str,
        /// UVM's status.
        status: RmStatus,
    },
    /// `/dev/nvidia-uvm` is missing.
    #[error(
        "{path} does not exist: load the UVM module with `sudo modprobe nvidia-uvm` \
         (or `sudo nvidia-modprobe -u -c 0`)"
    )]
    UvmMissing {
        /// The node.
        path: PathBuf,
    },
    /// A memory-management call (mmap, munmap) failed.
    #[error("{op} failed: {errno}")]
    Os {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        errno: Errno,
    },
    /// The caller asked for something the adapter cannot do.
    #[error("{0}")]
    Invalid(String),
    /// A GPU VA window the adapter cannot use ([`super::KernelBackend::open_in`]): not inside
    /// [`super::KMOD_VA_WINDOW`], or a split of it into parts too small.
    #[error(
        "{0} (the nvidia kernel-driver adapter hands out GPU VAs from {kmod}, which UVM mode \
         reserves in the CPU's address space)",
        kmod = super::KMOD_VA_WINDOW
    )]
    VaWindow(#[from] nvbare_core::device::VaWindowError),
}

fn list_cards(found: &[CardInfo]) -> String {
    if found.is_empty() {
        return "the nvidia driver reports no GPUs (see `nvidia-smi` and `sudo dmesg | grep NVRM`)"
            .to_string();
    }
    let mut s = String::from("GPUs the driver has:");
    for c in found {
        let _ = write!(s, "\n  nvidia:{}  {}", c.minor, c);
    }
    s
}

fn errno_hint(e: Errno) -> &'static str {
    match e {
        Errno::INVAL => {
            " (the driver rejected the request: wrong struct size for this driver version, or \
             the wrong device node)"
        }
        Errno::NOTTY => " (not an nvidia device node)",
        Errno::IO => " (the GPU is not initialized or was lost; see `sudo dmesg | grep NVRM`)",
        _ => "",
    }
}

fn uvm_hint(s: RmStatus) -> &'static str {
    match s.0 {
        // NV_ERR_INVALID_FLAGS: observed when the VA space lacks ENABLE_PAGE_FAULTING |
        // IS_EXTERNALLY_OWNED.
        0x29 => {
            " (the RM VA space must be allocated with flags ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED)"
        }
        _ => "",
    }
}

/// Maps an `open` error of `path` to the error a user can act on.
pub(crate) fn open_error(path: PathBuf, errno: Errno) -> KmodError {
    match errno {
        Errno::ACCESS | Errno::PERM => KmodError::PermissionDenied { path },
        _ => KmodError::Open { path, errno },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_to_do() {
        let e = KmodError::NoDriver {
            path: "/dev/nvidiactl".into(),
        };
        let m = e.to_string();
        assert!(m.contains("no nvidia kernel driver is loaded"), "{m}");
        assert!(m.contains("lsmod | grep nvidia"), "{m}");

        let e = open_error("/dev/nvidia0".into(), Errno::ACCESS);
        let m = e.to_string();
        assert!(m.contains("/dev/nvidia0") && m.contains("video"), "{m}");
        assert!(m.contains("udev"), "{m}");

        let e = KmodError::UnsupportedDriver {
            found: "535.104.05".into(),
            supported: SUPPORTED_BRANCH,
        };
        let m = e.to_string();
        assert!(m.contains("535.104.05") && m.contains("r580"), "{m}");

        let e = KmodError::NoSuchGpu {
            index: 3,
            found: vec![],
        };
        assert!(e.to_string().contains("nvidia:3"));
    }

    #[test]
    fn unknown_open_errors_keep_the_errno() {
        let e = open_error("/dev/nvidia0".into(), Errno::NXIO);
        assert!(matches!(e, KmodError::Open { .. }));
        assert!(e.to_string().contains("/dev/nvidia0"));
    }
}
