//! [`VfioError`]: why a GPU could not be opened through VFIO, with what to do next.

use std::io;
use std::path::PathBuf;

use super::{NOIOMMU_ENV, sys};
use crate::bind::human;
use crate::dma::DmaError;
use crate::{Bdf, SysfsError};

/// What to do next when VFIO is missing (shared by several errors).
const ENABLE_VFIO: &str = "Load the driver with `modprobe vfio-pci`. VFIO also needs the \
IOMMU: enable VT-d (Intel) or AMD-Vi (AMD) in the firmware setup and boot with \
`intel_iommu=on iommu=pt` or `amd_iommu=on iommu=pt`. Then move the GPU to vfio-pci with \
`nvbare bind BDF` (see docs/vfio.md).";

/// Why a GPU could not be opened through VFIO.
#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    /// `/dev/vfio/vfio` does not exist.
    #[error("VFIO is not available: {} does not exist. {ENABLE_VFIO}", path.display())]
    NoVfio {
        /// The container node looked for.
        path: PathBuf,
    },
    /// The device is not an NVIDIA GPU.
    #[error("{bdf} is not an NVIDIA GPU (vendor {vendor:04x}, {class}); see `nvbare list`")]
    NotNvidiaGpu {
        /// The function.
        bdf: Bdf,
        /// Its vendor.
        vendor: u16,
        /// What it is.
        class: &'static str,
    },
    /// The device is bound to another driver (or none).
    #[error(
        "{bdf} is bound to {}, not vfio-pci: run `nvbare bind {bdf}` first \
         (`--dry-run` shows what it will do)",
        driver.as_deref().unwrap_or("no driver")
    )]
    NotBound {
        /// The function.
        bdf: Bdf,
        /// Its driver.
        driver: Option<String>,
    },
    /// The device has no IOMMU group.
    #[error(
        "{bdf} has no IOMMU group: the IOMMU is off. Enable VT-d / AMD-Vi in the firmware \
         setup and boot with `intel_iommu=on iommu=pt` (Intel) or `amd_iommu=on iommu=pt` (AMD). \
         nvbare does not fall back to VFIO's unsafe no-IOMMU mode unless you set \
         {NOIOMMU_ENV}=1 (see docs/vfio.md)"
    )]
    NoIommuGroup {
        /// The function.
        bdf: Bdf,
    },
    /// The group exists only as an unsafe no-IOMMU group.
    #[error(
        "{bdf} is in VFIO's unsafe no-IOMMU group {}: the GPU could reach all host memory. \
         Enable the IOMMU instead, or set {NOIOMMU_ENV}=1 if you accept the risk",
        node.display()
    )]
    NoIommuRefused {
        /// The function.
        bdf: Bdf,
        /// The `noiommu-N` node.
        node: PathBuf,
    },
    /// The group's device node does not exist.
    #[error(
        "{} does not exist: {bdf} (IOMMU group {group}) is not bound to vfio-pci yet; run \
         `nvbare bind {bdf}`",
        node.display()
    )]
    GroupNodeMissing {
        /// The function.
        bdf: Bdf,
        /// Its group.
        group: u32,
        /// The node looked for.
        node: PathBuf,
    },
    /// Some device in the group is bound to a driver that is not vfio-pci.
    #[error(
        "IOMMU group {group} is not viable: {} bound to other drivers. VFIO needs every device \
         in the group on vfio-pci (or on no driver): run `nvbare bind {bdf}`, which moves the \
         GPU's own functions and explains what to do about foreign ones",
        offenders.iter().map(|(b, d)| format!("{b} ({d})")).collect::<Vec<_>>().join(", ")
    )]
    GroupNotViable {
        /// The GPU.
        bdf: Bdf,
        /// Its group.
        group: u32,
        /// `(device, driver)` of each offender.
        offenders: Vec<(Bdf, String)>,
    },
    /// A VFIO node could not be opened for lack of permission.
    #[error(
        "cannot open {}: permission denied. Run as root, or give your user the group's node \
         (`sudo chown $USER {}`, or a udev rule `SUBSYSTEM==\"vfio\", OWNER=\"$USER\"`) and \
         raise the locked-memory limit (`ulimit -l unlimited`): VFIO pins DMA memory",
        path.display(), path.display()
    )]
    Permission {
        /// The node.
        path: PathBuf,
    },
    /// Another process holds the group.
    #[error(
        "{} is busy: another process (a VM, another nvbare) has the group open; stop it first",
        path.display()
    )]
    GroupBusy {
        /// The node.
        path: PathBuf,
    },
    /// A BAR is missing or cannot be mapped.
    #[error("BAR{index} of {bdf}: {reason}")]
    Bar {
        /// The function.
        bdf: Bdf,
        /// BAR index.
        index: u8,
        /// What went wrong.
        reason: String,
    },
    /// BAR1 is smaller than the caller needs.
    #[error(
        "BAR1 of {bdf} is {} but {} is needed. {}",
        human(*size), human(*needed),
        match resizable {
            Some(max) if max > needed => format!(
                "The GPU can grow it to {}: run `nvbare unbind {bdf}` then `nvbare bind {bdf}` \
                 (bind resizes BAR1 while no driver holds the GPU)", human(*max)),
            _ => "The GPU offers no larger size: enable \"Above 4G decoding\" and \"Resizable \
                  BAR\" in the firmware setup, then rebind".into(),
        }
    )]
    Bar1TooSmall {
        /// The function.
        bdf: Bdf,
        /// BAR1 size now.
        size: u64,
        /// Size needed.
        needed: u64,
        /// The largest size the kernel offers (`resource1_resize`).
        resizable: Option<u64>,
    },
    /// GPUs cannot be opened together as a peer group.
    #[error("peer group {bdfs}: {reason}")]
    PeerGroup {
        /// The functions, comma-separated.
        bdfs: String,
        /// Why, and what to do.
        reason: String,
    },
    /// Reading sysfs failed.
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    /// DMA memory could not be set up.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// vfio-ioctls reported an error not covered above.
    #[error("VFIO: {0}")]
    Vfio(#[from] vfio_ioctls::VfioError),
    /// The no-IOMMU path failed.
    #[error("VFIO no-IOMMU mode: {0}")]
    NoIommu(#[from] sys::NoIommuError),
    /// An operation on the device failed.
    #[error("{op} on {bdf} failed: {source}")]
    Io {
        /// The function.
        bdf: Bdf,
        /// What was done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
}
