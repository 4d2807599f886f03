//! nvbare-pci-host: the Linux side of nvbare.
//!
//! * [`sysfs`]: PCI enumeration and device attributes under `/sys` (or `NVBARE_SYSFS_ROOT`):
//!   config space, BAR sizes and resizing, reset methods, IOMMU groups, driver overrides.
//! * [`config`]: PCI configuration space: capability walking, the Resizable BAR capability.
//! * [`bind`]: moving a GPU (and its companion functions) to vfio-pci and back, as a plan of
//!   sysfs writes that can be printed (`--dry-run`) or performed.
//! * [`vfio`]: a GPU bound to vfio-pci: BARs as [`nvbare_core::hal::Mmio`], config space, reset,
//!   DMA through the IOMMU ([`vfio::VfioGpu`]).
//! * [`dma`]: DMA memory: a pool of locked 2 MiB hugepages (4 KiB fallback) mapped once into
//!   the IOMMU and sub-allocated as [`nvbare_core::hal::DmaBuffer`]s.
//! * [`clock`]: a [`nvbare_core::hal::Clock`] over `std::time::Instant`.
//! * [`remote`]: tinygrad's remote PCI protocol (a GPU's BARs, config space and DMA memory
//!   over TCP), which `nvbare serve` answers and `remote:` devices speak.
//! * [`nvidia`] (feature `nvidia-kmod`): the kernel-driver adapter over nvidia.ko's ioctls.
//!
//! This crate knows nothing about GPU internals; it finds devices and gives the core access to
//! them.
#![warn(missing_docs)]

pub mod bind;
pub mod clock;
pub mod config;
pub mod dma;
#[cfg(feature = "device")]
pub mod flusher;
#[cfg(feature = "jit")]
pub mod jit;
#[cfg(feature = "nvidia-kmod")]
pub mod nvidia;
mod pci_ids;
pub mod remote;
pub mod sysfs;
pub mod vfio;

pub use sysfs::{Bar, Bdf, PciFunction, Sysfs, SysfsError};

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR_ID: u16 = 0x10de;

/// The product name of an NVIDIA PCI device id, when known.
pub fn nvidia_device_name(device_id: u16) -> Option<&'static str> {
    let t = pci_ids::NVIDIA_DEVICE_NAMES;
    t.binary_search_by_key(&device_id, |e| e.0)
        .ok()
        .map(|i| t[i].1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::nvidia_device_name(0x2335), Some("NVIDIA H200"));
        assert_eq!(
            super::nvidia_device_name(0x2684),
            Some("NVIDIA GeForce RTX 4090")
        );
        assert_eq!(super::nvidia_device_name(0x0001), None);
        let t = super::pci_ids::NVIDIA_DEVICE_NAMES;
        assert!(t.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
