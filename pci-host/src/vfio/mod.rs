//! A GPU bound to vfio-pci, opened for the bare-metal backend: BAR0/BAR1 as [`Mmio`], config
//! space as [`PciConfig`], DMA memory through the IOMMU as [`DmaAllocator`], and reset.
//!
//! The IOMMU path uses `vfio-ioctls` (container + group, type1v2 IOMMU; built without its
//! `kvm` feature). Its iommufd/cdev path (`vfio_cdev`) force-enables KVM support, so nvbare
//! does not use it. The no-IOMMU path (VFIO's `noiommu-N` groups, physical addresses from
//! `/proc/self/pagemap`) is opened with our own ioctls because vfio-ioctls cannot
//! (rust-vmm/vfio#152); it runs only when asked for (`NVBARE_VFIO_NOIOMMU=1`), since without
//! an IOMMU the GPU can read and write all of the host's memory.
//!
//! [`Mmio`]: nvbare_core::hal::Mmio
//! [`DmaAllocator`]: nvbare_core::hal::DmaAllocator

mod bar;
mod config;
mod error;
pub mod peer;
pub mod sys;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvbare_core::hal::{HalError, PciConfig};
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioRegionInfoCap};

use crate::clock::HostClock;
use crate::config::{PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, update_command};
use crate::dma::{Addressing, DmaPool, Iommu, IovaSpace, PoolOptions};
use crate::sysfs::driver_keeps_group_viable;
use crate::{Bdf, NVIDIA_VENDOR_ID, PciFunction, Sysfs};

pub use bar::BarMmio;
pub use config::VfioConfig;
pub use error::VfioError;

/// Where vfio-ioctls opens the container and groups.
const VFIO_DEV: &str = "/dev/vfio";

/// The environment variable that allows VFIO's unsafe no-IOMMU mode.
pub const NOIOMMU_ENV: &str = "NVBARE_VFIO_NOIOMMU";

/// Options for [`VfioGpu::open_with`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Use VFIO's no-IOMMU mode (`/dev/vfio/noiommu-N`, physical DMA addresses).
    pub noiommu: bool,
    /// The VFIO device directory (`/dev/vfio`). vfio-ioctls always opens `/dev/vfio`; this
    /// only moves the checks made before it (and the no-IOMMU path), for tests.
    pub vfio_dev: PathBuf,
    /// DMA pool settings.
    pub dma: PoolOptions,
    /// Refuse a BAR1 smaller than this (0: no check).
    pub min_bar1: u64,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            noiommu: false,
            vfio_dev: PathBuf::from(VFIO_DEV),
            dma: PoolOptions::default(),
            min_bar1: 0,
        }
    }
}

impl OpenOptions {
    /// Defaults, with `noiommu` from `NVBARE_VFIO_NOIOMMU=1`.
    pub fn from_env() -> Self {
        OpenOptions {
            noiommu: std::env::var(NOIOMMU_ENV).is_ok_and(|v| v == "1"),
            ..OpenOptions::default()
        }
    }
}

/// The open device: whatever keeps its fd alive.
pub(crate) enum DeviceHandle {
    /// Through vfio-ioctls (container + group).
    Iommu(VfioDevice),
    /// Our own no-IOMMU open.
    NoIommu(sys::NoIommuDevice),
}

impl std::fmt::Debug for DeviceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceHandle::Iommu(d) => write!(f, "VfioDevice(fd {})", d.as_raw_fd()),
            DeviceHandle::NoIommu(d) => write!(f, "{d:?}"),
        }
    }
}

impl DeviceHandle {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            // SAFETY: the VfioDevice owns this fd and lives as long as the borrow of `self`.
            DeviceHandle::Iommu(d) => unsafe { BorrowedFd::borrow_raw(d.as_raw_fd()) },
            DeviceHandle::NoIommu(d) => d.device.as_fd(),
        }
    }

    /// Region info and the mmappable pieces of it (offsets within the region).
    fn region(&self, index: u32) -> io::Result<(sys::RegionInfo, Vec<(u64, u64)>)> {
        let info = sys::region_info(self.fd(), index)?;
        let mut pieces = Vec::new();
        if info.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 {
            let sparse = match self {
                DeviceHandle::Iommu(d) => {
                    d.get_region_caps(index).into_iter().find_map(|c| match c {
                        VfioRegionInfoCap::SparseMmap(s) => {
                            Some(s.areas.iter().map(|a| (a.offset, a.size)).collect())
                        }
                        _ => None,
                    })
                }
                DeviceHandle::NoIommu(_) => None,
            };
            pieces = sparse.unwrap_or_else(|| vec![(0, info.size)]);
        }
        Ok((info, pieces))
    }
}

/// The IOMMU of a VFIO container, for the DMA pool.
struct ContainerIommu(Arc<VfioContainer>);

impl std::fmt::Debug for ContainerIommu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VfioContainer(fd {})", self.0.as_raw_fd())
    }
}

impl Iommu for ContainerIommu {
    // SAFETY: `Iommu::map`'s contract (the range stays mapped and is reached only through raw
    // pointers until `unmap`) is what `vfio_dma_map` needs, since VFIO pins those pages.
    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), String> {
        // SAFETY: forwarded from the caller's contract, which is VFIO's.
        unsafe { self.0.vfio_dma_map(iova, len, host) }.map_err(|e| {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(c) = src {
                s.push_str(&format!(": {c}"));
                src = c.source();
            }
            s
        })
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), String> {
        self.0.vfio_dma_unmap(iova, len).map_err(|e| e.to_string())
    }
}

/// A GPU bound to vfio-pci, opened: everything the bare-metal backend needs from the host.
///
/// Fields drop in order: BAR mappings, then the DMA pool's handle, then config; the device fd
/// closes when the last of them is gone. Before that, in no-IOMMU mode, dropping it turns the
/// GPU's bus mastering off, and only then lets the DMA pool give its pages back to the kernel
/// ([`stop_mastering`]).
#[derive(Debug)]
pub struct VfioGpu {
    bar0: BarMmio,
    bar1: BarMmio,
    dma: DmaPool,
    config: VfioConfig,
    function: PciFunction,
    noiommu: bool,
}

/// Turns bus mastering off (`PCI_COMMAND_MASTER`), checks that it stayed off, and only then
/// tells `pool` that this device no longer writes its memory ([`DmaPool::mark_device_stopped`]).
/// On any error the pool is left unmarked, so in no-IOMMU mode it keeps (leaks) its pages
/// rather than let a GPU or GSP that may still be running write into reused memory.
pub fn stop_mastering<P: PciConfig + ?Sized>(config: &P, pool: &DmaPool) -> Result<(), HalError> {
    update_command(config, 0, PCI_COMMAND_MASTER)?;
    let cmd = config.read_config16(PCI_COMMAND)?;
    if cmd == 0xffff {
        return Err(HalError::DeviceLost);
    }
    if cmd & PCI_COMMAND_MASTER != 0 {
        return Err(HalError::Unsupported(
            "turning bus mastering off (the command register kept the bit set)",
        ));
    }
    pool.mark_device_stopped();
    Ok(())
}

impl Drop for VfioGpu {
    fn drop(&mut self) {
        // With an IOMMU, the container going away cuts the GPU off from host memory. Without
        // one, only the GPU's bus mastering stands between it and pages the kernel may reuse.
        if self.noiommu
            && let Err(e) = stop_mastering(&self.config, &self.dma)
        {
            log::error!(
                "cannot turn bus mastering of {} off ({e}): its DMA memory stays allocated \
                 until the process exits",
                self.function.bdf
            );
        }
    }
}

/// Maps vfio-ioctls' errors to advice. `dev` is where vfio-ioctls looked: always `/dev/vfio`.
fn classify(e: vfio_ioctls::VfioError, dev: &Path, bdf: Bdf, group: u32) -> VfioError {
    use vfio_ioctls::VfioError as V;
    let kind = |io: &io::Error| (io.kind(), io.raw_os_error());
    match e {
        V::OpenContainer(io) => match kind(&io) {
            (io::ErrorKind::NotFound, _) => VfioError::NoVfio {
                path: dev.join("vfio"),
            },
            (io::ErrorKind::PermissionDenied, _) => VfioError::Permission {
                path: dev.join("vfio"),
            },
            _ => VfioError::Vfio(V::OpenContainer(io)),
        },
        V::OpenGroup(io, id) => {
            let path = dev.join(&id);
            match kind(&io) {
                (io::ErrorKind::NotFound, _) => VfioError::GroupNodeMissing {
                    bdf,
                    group,
                    node: path,
                },
                (io::ErrorKind::PermissionDenied, _) => VfioError::Permission { path },
                (_, Some(16)) => VfioError::GroupBusy { path },
                _ => VfioError::Vfio(V::OpenGroup(io, id)),
            }
        }
        V::GroupViable => VfioError::GroupNotViable {
            bdf,
            group,
            offenders: Vec::new(),
        },
        other => VfioError::Vfio(other),
    }
}

/// Checks everything that can be checked before touching `/dev/vfio` nodes, and returns the
/// function and its group.
pub fn preflight(
    sysfs: &Sysfs,
    bdf: Bdf,
    opts: &OpenOptions,
) -> Result<(PciFunction, u32), VfioError> {
    let container = opts.vfio_dev.join("vfio");
    if !container.exists() {
        return Err(VfioError::NoVfio { path: container });
    }
    let f = sysfs.function(bdf)?;
    if f.vendor != NVIDIA_VENDOR_ID || !f.is_gpu() {
        return Err(VfioError::NotNvidiaGpu {
            bdf,
            vendor: f.vendor,
            class: f.class_name(),
        });
    }
    if !f.driver.as_deref().is_some_and(|d| d.contains("vfio")) {
        return Err(VfioError::NotBound {
            bdf,
            driver: f.driver.clone(),
        });
    }
    let Some(group) = f.iommu_group else {
        return Err(VfioError::NoIommuGroup { bdf });
    };
    let noiommu_node = opts.vfio_dev.join(format!("noiommu-{group}"));
    let node = if opts.noiommu {
        noiommu_node
    } else if noiommu_node.exists() {
        return Err(VfioError::NoIommuRefused {
            bdf,
            node: noiommu_node,
        });
    } else {
        opts.vfio_dev.join(group.to_string())
    };
    match std::fs::metadata(&node) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(VfioError::Permission { path: node });
        }
        Err(_) => return Err(VfioError::GroupNodeMissing { bdf, group, node }),
    }
    let offenders: Vec<(Bdf, String)> = sysfs
        .iommu_group_members(group)?
        .into_iter()
        .filter(|m| *m != bdf)
        .map(|m| sysfs.function(m))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|m| !driver_keeps_group_viable(m.driver.as_deref()))
        .map(|m| (m.bdf, m.driver.unwrap_or_default()))
        .collect();
    if !offenders.is_empty() {
        return Err(VfioError::GroupNotViable {
            bdf,
            group,
            offenders,
        });
    }
    Ok((f, group))
}

impl VfioGpu {
    /// Opens the GPU at `bdf` with `/sys` (or `NVBARE_SYSFS_ROOT`) and default options
    /// (no-IOMMU mode only with `NVBARE_VFIO_NOIOMMU=1`).
    pub fn open(bdf: Bdf) -> Result<Self, VfioError> {
        Self::open_with(&Sysfs::from_env(), bdf, &OpenOptions::from_env())
    }

    /// Opens the GPU at `bdf`.
    pub fn open_with(sysfs: &Sysfs, bdf: Bdf, opts: &OpenOptions) -> Result<Self, VfioError> {
        let (function, group) = preflight(sysfs, bdf, opts)?;
        warn_memlock();
        let (device, addressing) = if opts.noiommu {
            (open_noiommu(opts, bdf, group)?, Addressing::Physical)
        } else {
            let container = Arc::new(
                VfioContainer::new(None)
                    .map_err(|e| classify(e, Path::new(VFIO_DEV), bdf, group))?,
            );
            let device = VfioDevice::new(&sysfs.device_dir(bdf), container.clone(), false)
                .map_err(|e| classify(e, Path::new(VFIO_DEV), bdf, group))?;
            let windows = match sys::iommu_iova_ranges(container.as_fd_borrowed()) {
                Ok(Some(r)) if !r.is_empty() => clip_windows(&r),
                Ok(_) => vec![IovaSpace::DEFAULT],
                Err(e) => {
                    log::debug!("VFIO_IOMMU_GET_INFO: {e}; using the default IOVA window");
                    vec![IovaSpace::DEFAULT]
                }
            };
            let reserved = sysfs.iommu_group_reserved(group).unwrap_or_default();
            let space = IovaSpace::new(&windows, &reserved);
            (
                DeviceHandle::Iommu(device),
                Addressing::iommu(Arc::new(ContainerIommu(container)), space),
            )
        };
        Self::finish(
            sysfs,
            function,
            device,
            DmaPool::new(addressing, opts.dma),
            opts,
        )
    }

    /// The rest of opening, once the device is open and its DMA pool exists (shared by the
    /// GPUs of a [`peer::VfioPeerGroup`]): config space, memory decoding, BAR0 and BAR1.
    fn finish(
        sysfs: &Sysfs,
        function: PciFunction,
        device: DeviceHandle,
        dma: DmaPool,
        opts: &OpenOptions,
    ) -> Result<Self, VfioError> {
        let bdf = function.bdf;
        let device = Arc::new(device);
        let io_err = |op| move |source| VfioError::Io { bdf, op, source };
        let (cfg, _) = device
            .region(VFIO_PCI_CONFIG_REGION_INDEX)
            .map_err(io_err("VFIO_DEVICE_GET_REGION_INFO (config)"))?;
        let config = VfioConfig {
            device: device.clone(),
            offset: cfg.offset,
            size: cfg.size,
        };
        update_command(&config, PCI_COMMAND_MEMORY, 0).map_err(|e| VfioError::Io {
            bdf,
            op: "enabling memory decoding",
            source: io::Error::other(e.to_string()),
        })?;
        let bar0 = map_bar(&device, bdf, 0)?;
        let bar1 = map_bar(&device, bdf, 1)?;
        let size1 = nvbare_core::hal::Mmio::size(&bar1) as u64;
        if size1 < opts.min_bar1 {
            return Err(VfioError::Bar1TooSmall {
                bdf,
                size: size1,
                needed: opts.min_bar1,
                resizable: sysfs
                    .resize_sizes(bdf, 1)
                    .ok()
                    .flatten()
                    .and_then(crate::config::largest_size),
            });
        }
        Ok(VfioGpu {
            bar0,
            bar1,
            dma,
            config,
            function,
            noiommu: opts.noiommu,
        })
    }

    /// BAR0: the GPU's registers.
    pub fn bar0(&self) -> &BarMmio {
        &self.bar0
    }

    /// BAR1: the window onto VRAM.
    pub fn bar1(&self) -> &BarMmio {
        &self.bar1
    }

    /// DMA memory the GPU can reach (a [`nvbare_core::hal::DmaAllocator`]).
    pub fn dma(&self) -> &DmaPool {
        &self.dma
    }

    /// Config space (a [`PciConfig`]; `reset_function` is `VFIO_DEVICE_RESET`).
    pub fn pci(&self) -> &VfioConfig {
        &self.config
    }

    /// A host clock.
    pub fn clock(&self) -> HostClock {
        HostClock::new()
    }

    /// What sysfs said about the GPU when it was opened.
    pub fn function(&self) -> &PciFunction {
        &self.function
    }

    /// Whether DMA uses physical addresses (no-IOMMU mode).
    pub fn noiommu(&self) -> bool {
        self.noiommu
    }

    /// Enables or disables bus mastering (the GPU's DMA).
    pub fn set_bus_master(&self, enable: bool) -> Result<(), HalError> {
        let (set, clear) = if enable {
            (PCI_COMMAND_MASTER, 0)
        } else {
            (0, PCI_COMMAND_MASTER)
        };
        update_command(&self.config, set, clear).map(|_| ())
    }

    /// Resets the function (`VFIO_DEVICE_RESET`).
    pub fn reset(&self) -> Result<(), VfioError> {
        sys::device_reset(self.config.device.fd()).map_err(|source| VfioError::Io {
            bdf: self.function.bdf,
            op: "VFIO_DEVICE_RESET",
            source,
        })
    }

    /// Maps another BAR (e.g. BAR3, whose address the GSP is told).
    pub fn map_bar(&self, index: u8) -> Result<BarMmio, VfioError> {
        map_bar(&self.config.device, self.function.bdf, index)
    }

    /// Routes MSI vector 0 to a new eventfd (optional: the GSP path polls). IOMMU mode only.
    pub fn enable_msi(&self) -> Result<vmm_sys_util::eventfd::EventFd, VfioError> {
        let DeviceHandle::Iommu(d) = &*self.config.device else {
            return Err(VfioError::Io {
                bdf: self.function.bdf,
                op: "enabling MSI",
                source: io::Error::other("not supported in no-IOMMU mode"),
            });
        };
        let fd = vmm_sys_util::eventfd::EventFd::new(libc_efd_nonblock()).map_err(|source| {
            VfioError::Io {
                bdf: self.function.bdf,
                op: "eventfd",
                source,
            }
        })?;
        d.enable_msi(vec![&fd])?;
        Ok(fd)
    }
}

/// Opens `bdf` in VFIO's no-IOMMU mode, warning what that means.
fn open_noiommu(opts: &OpenOptions, bdf: Bdf, group: u32) -> Result<DeviceHandle, VfioError> {
    log::warn!(
        "VFIO no-IOMMU mode: {bdf} can read and write all host memory; DMA uses physical \
         addresses"
    );
    let d = sys::open_noiommu(&opts.vfio_dev, group, &bdf.to_string())?;
    Ok(DeviceHandle::NoIommu(d))
}

/// `EFD_NONBLOCK` (= `O_NONBLOCK`).
fn libc_efd_nonblock() -> i32 {
    rustix::event::EventfdFlags::NONBLOCK.bits() as i32
}

/// Keeps the IOMMU's windows inside what the GPU and common IOMMUs address (below 2^47),
/// starting above 4 GiB when there is room there.
fn clip_windows(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let high: Vec<(u64, u64)> = ranges
        .iter()
        .filter_map(|&(a, b)| {
            let a = a.max(1 << 32);
            let b = b.min((1 << 47) - 1);
            (b > a).then_some((a, b))
        })
        .collect();
    if high.is_empty() {
        ranges.to_vec()
    } else {
        high
    }
}

fn map_bar(device: &Arc<DeviceHandle>, bdf: Bdf, index: u8) -> Result<BarMmio, VfioError> {
    let bar_err = |reason: String| VfioError::Bar { bdf, index, reason };
    let (info, pieces) = device
        .region(u32::from(index))
        .map_err(|e| bar_err(format!("VFIO_DEVICE_GET_REGION_INFO failed: {e}")))?;
    if info.size == 0 {
        return Err(bar_err("the BAR is not implemented or not assigned".into()));
    }
    if pieces.is_empty() && info.flags & VFIO_REGION_INFO_FLAG_READ == 0 {
        return Err(bar_err(
            "VFIO allows neither mmap nor read/write of it".into(),
        ));
    }
    BarMmio::map(
        device.clone(),
        index,
        info.offset,
        info.size,
        &pieces,
        info.flags & VFIO_REGION_INFO_FLAG_READ != 0,
    )
    .map_err(|e| bar_err(format!("mmap failed: {e}")))
}

fn warn_memlock() {
    if rustix::process::geteuid().is_root() {
        return;
    }
    let l = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    if l.current.is_some_and(|c| c < 256 << 20) {
        log::warn!(
            "the locked-memory limit is {} bytes; VFIO pins every DMA page against it. Raise it: \
             `ulimit -l unlimited`",
            l.current.unwrap_or(0)
        );
    }
}

trait AsFdBorrowed {
    fn as_fd_borrowed(&self) -> BorrowedFd<'_>;
}

impl AsFdBorrowed for VfioContainer {
    fn as_fd_borrowed(&self) -> BorrowedFd<'_> {
        // SAFETY: the container owns this fd and outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use super::config::config_access;
    use super::*;

    #[test]
    fn config_accesses_are_sized_aligned_and_inside_4_kib() {
        let at = |off, size| config_access(0x7000_0000_0000, 0x10_0000, off, size);
        assert_eq!(at(0, 4), Ok(0x7000_0000_0000));
        assert_eq!(at(0x6, 2), Ok(0x7000_0000_0006));
        assert_eq!(at(0xfff, 1), Ok(0x7000_0000_0fff));
        assert_eq!(at(0xffc, 4), Ok(0x7000_0000_0ffc));
        for size in [0, 3, 5, 8] {
            assert!(
                matches!(at(0, size), Err(HalError::Unsupported(_))),
                "{size}"
            );
        }
        assert_eq!(
            at(2, 4),
            Err(HalError::Misaligned {
                offset: 2,
                align: 4
            })
        );
        assert!(matches!(
            at(1, 2),
            Err(HalError::Misaligned { align: 2, .. })
        ));
        // The region's first 4 KiB only, and no more than the region.
        assert!(matches!(at(0x1000, 1), Err(HalError::OutOfRange { .. })));
        assert!(matches!(
            at(u16::MAX - 3, 4),
            Err(HalError::OutOfRange { .. })
        ));
        let small = |off, size| config_access(0, 256, off, size);
        assert!(small(0xfc, 4).is_ok());
        assert!(matches!(small(0x100, 4), Err(HalError::OutOfRange { .. })));
        // An fd offset that would wrap.
        assert!(matches!(
            config_access(u64::MAX - 1, 4096, 4, 4),
            Err(HalError::OutOfRange { .. })
        ));
    }

    #[test]
    fn the_open_gpu_can_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<VfioGpu>();
        send_sync::<BarMmio>();
        send_sync::<DmaPool>();
        send_sync::<crate::dma::PoolBuffer>();
    }

    #[test]
    fn windows_are_clipped_to_what_the_gpu_reaches() {
        assert_eq!(
            clip_windows(&[(0, 0xfedf_ffff), (0xfef0_0000, u64::MAX)]),
            [(1 << 32, (1 << 47) - 1)]
        );
        assert_eq!(clip_windows(&[(0, 0xffff_ffff)]), [(0, 0xffff_ffff)]);
    }

    #[test]
    fn vfio_ioctls_errors_become_advice() {
        use vfio_ioctls::VfioError as V;
        let dev = Path::new("/dev/vfio");
        let bdf: Bdf = "0000:01:00.0".parse().unwrap();
        let e = classify(
            V::OpenContainer(io::ErrorKind::NotFound.into()),
            dev,
            bdf,
            7,
        );
        assert!(matches!(e, VfioError::NoVfio { .. }));
        assert!(e.to_string().contains("modprobe vfio-pci"), "{e}");
        let e = classify(
            V::OpenGroup(io::ErrorKind::PermissionDenied.into(), "7".into()),
            dev,
            bdf,
            7,
        );
        assert!(e.to_string().contains("chown $USER /dev/vfio/7"), "{e}");
        let e = classify(
            V::OpenGroup(io::Error::from_raw_os_error(16), "7".into()),
            dev,
            bdf,
            7,
        );
        assert!(matches!(e, VfioError::GroupBusy { .. }), "{e}");
        let e = classify(
            V::OpenGroup(io::ErrorKind::NotFound.into(), "7".into()),
            dev,
            bdf,
            7,
        );
        assert!(e.to_string().contains("nvbare bind 0000:01:00.0"), "{e}");
        let e = classify(V::GroupViable, dev, bdf, 7);
        assert!(matches!(e, VfioError::GroupNotViable { group: 7, .. }));
    }

    #[test]
    fn bar1_advice_depends_on_resizability() {
        let bdf: Bdf = "0000:01:00.0".parse().unwrap();
        let e = VfioError::Bar1TooSmall {
            bdf,
            size: 256 << 20,
            needed: 16 << 30,
            resizable: Some(32 << 30),
        };
        assert!(e.to_string().contains("grow it to 32 GiB"), "{e}");
        let e = VfioError::Bar1TooSmall {
            bdf,
            size: 256 << 20,
            needed: 16 << 30,
            resizable: None,
        };
        assert!(e.to_string().contains("Above 4G decoding"), "{e}");
    }

    /// A regular file stands in for the device fd: mmap and pread/pwrite work on it the way
    /// they do on a VFIO device fd, so the BAR and config code runs for real.
    fn fake_device(len: u64) -> (Arc<DeviceHandle>, std::fs::File) {
        let dir = std::env::temp_dir().join(format!("nvbare-fakedev-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("dev-{len}"));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(len).unwrap();
        let peek = f.try_clone().unwrap();
        let null = || std::fs::File::open("/dev/null").unwrap();
        let h = DeviceHandle::NoIommu(sys::NoIommuDevice {
            device: f.into(),
            group: null(),
            container: null(),
        });
        let _ = std::fs::remove_file(&path);
        (Arc::new(h), peek)
    }

    #[test]
    fn bar_mmio_over_mapped_and_unmapped_pieces() {
        use nvbare_core::hal::Mmio;
        use std::os::unix::fs::FileExt;
        let (dev, file) = fake_device(3 * 4096);
        // Region at offset 4096, 8 KiB; only the first 4 KiB may be mmapped (sparse).
        let bar = BarMmio::map(dev.clone(), 0, 4096, 8192, &[(0, 4096)], true).unwrap();
        assert_eq!(bar.size(), 8192);
        assert!(!bar.fully_mapped());
        bar.write32(0x10, 0x1234_5678);
        bar.write32(0x1000, 0xcafe_f00d); // through pwrite
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, 4096 + 0x10).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0x1234_5678);
        file.read_exact_at(&mut b, 4096 + 0x1000).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0xcafe_f00d);
        file.write_all_at(&0xdead_beefu32.to_le_bytes(), 4096 + 0x1ffc)
            .unwrap();
        assert_eq!(bar.read32(0x1ffc), 0xdead_beef);
        assert_eq!(bar.read32(0x10), 0x1234_5678);
        assert_eq!(bar.read64(0x10) & 0xffff_ffff, 0x1234_5678);
        // Outside the BAR, or misaligned: all ones, writes dropped.
        assert_eq!(bar.read32(0x2000), u32::MAX);
        assert_eq!(bar.read32(0x11), u32::MAX);
        assert_eq!(bar.read32(usize::MAX - 3), u32::MAX);
        bar.write32(0x2000, 1);
        assert!(bar.try_read32(0x2000).is_err());
        // Without read/write access, unmapped pieces read as all ones.
        let sparse = BarMmio::map(dev.clone(), 1, 4096, 8192, &[(0, 4096)], false).unwrap();
        assert_eq!(sparse.read32(0x1ffc), u32::MAX);
        assert_eq!(sparse.read32(0x10), 0x1234_5678);
        // A whole mapping; pieces outside the region are ignored.
        let full = BarMmio::map(dev, 2, 0, 8192, &[(0, 8192), (4096, 1 << 20)], true).unwrap();
        assert!(full.fully_mapped());
        assert_eq!(full.read32(4096 + 0x10), 0x1234_5678);
    }

    /// Config space that records every write, with whether the pool had been told the device
    /// was stopped at that moment.
    struct RecordingConfig {
        command: std::cell::Cell<u32>,
        pool: DmaPool,
        writes: std::cell::RefCell<Vec<(u16, u32, bool)>>,
        /// Writes fail with this errno.
        fail: Option<i32>,
        /// Writes "succeed" but change nothing.
        ignore_writes: bool,
    }

    impl RecordingConfig {
        fn new(command: u32) -> Self {
            RecordingConfig {
                command: command.into(),
                pool: DmaPool::new(Addressing::Physical, PoolOptions::default()),
                writes: Vec::new().into(),
                fail: None,
                ignore_writes: false,
            }
        }
    }

    impl PciConfig for RecordingConfig {
        fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
            Ok(if offset == PCI_COMMAND {
                self.command.get()
            } else {
                0
            })
        }

        fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
            self.writes
                .borrow_mut()
                .push((offset, value, self.pool.device_stopped()));
            if let Some(errno) = self.fail {
                return Err(HalError::Os {
                    op: "writing PCI config space through VFIO",
                    errno,
                });
            }
            if offset == PCI_COMMAND && !self.ignore_writes {
                self.command.set(value);
            }
            Ok(())
        }
    }

    #[test]
    fn bus_mastering_goes_off_before_the_pool_is_told_the_device_stopped() {
        // Memory decoding and bus mastering on; a status bit in the upper half.
        let cfg = RecordingConfig::new(0x0010_0006);
        stop_mastering(&cfg, &cfg.pool).unwrap();
        assert_eq!(
            *cfg.writes.borrow(),
            [(PCI_COMMAND, 0x0002, false)],
            "one write clearing only the master bit (status half zero), made before the mark"
        );
        assert!(cfg.pool.device_stopped());

        // Already off: nothing to write, and the pool may be marked.
        let cfg = RecordingConfig::new(0x0002);
        stop_mastering(&cfg, &cfg.pool).unwrap();
        assert!(cfg.writes.borrow().is_empty());
        assert!(cfg.pool.device_stopped());
    }

    #[test]
    fn a_failed_bus_master_clear_leaves_the_pool_unmarked() {
        let cfg = RecordingConfig {
            fail: Some(19),
            ..RecordingConfig::new(0x0006)
        };
        let e = stop_mastering(&cfg, &cfg.pool).unwrap_err();
        assert!(matches!(e, HalError::Os { errno: 19, .. }), "{e}");
        assert!(!cfg.pool.device_stopped());

        // The write went through but the bit stayed set: not stopped either.
        let cfg = RecordingConfig {
            ignore_writes: true,
            ..RecordingConfig::new(0x0006)
        };
        let e = stop_mastering(&cfg, &cfg.pool).unwrap_err();
        assert!(matches!(e, HalError::Unsupported(_)), "{e}");
        assert!(!cfg.pool.device_stopped());

        // The device is gone (all ones): nothing says it stopped.
        let cfg = RecordingConfig {
            ignore_writes: true,
            ..RecordingConfig::new(u32::MAX)
        };
        assert_eq!(
            stop_mastering(&cfg, &cfg.pool).unwrap_err(),
            HalError::DeviceLost
        );
        assert!(!cfg.pool.device_stopped());
    }

    /// A no-IOMMU `VfioGpu` over a regular file standing in for the device fd, with bus
    /// mastering on in its config space. Returns it, its pool, and the file.
    fn fake_noiommu_gpu(command: u32) -> (VfioGpu, DmaPool, std::fs::File) {
        use std::os::unix::fs::FileExt;
        // A length no other test uses: `fake_device` names the file after it.
        let (dev, file) = fake_device(5 * 4096);
        file.write_all_at(&command.to_le_bytes(), 2 * 4096 + 4)
            .unwrap();
        let pool = DmaPool::new(Addressing::Physical, PoolOptions::default());
        let gpu = VfioGpu {
            bar0: BarMmio::map(dev.clone(), 0, 0, 4096, &[(0, 4096)], true).unwrap(),
            bar1: BarMmio::map(dev.clone(), 1, 4096, 4096, &[(0, 4096)], true).unwrap(),
            dma: pool.clone(),
            config: VfioConfig {
                device: dev,
                offset: 2 * 4096,
                size: 4096,
            },
            function: PciFunction {
                bdf: "0000:01:00.0".parse().unwrap(),
                vendor: NVIDIA_VENDOR_ID,
                device: 0x2335,
                class: 0x030200,
                driver: Some("vfio-pci".into()),
                iommu_group: Some(3),
                bars: Vec::new(),
                path: PathBuf::new(),
            },
            noiommu: true,
        };
        (gpu, pool, file)
    }

    #[test]
    fn dropping_a_noiommu_gpu_turns_bus_mastering_off_then_frees_its_pool() {
        use std::os::unix::fs::FileExt;
        let (gpu, pool, file) = fake_noiommu_gpu(0x0010_0006);
        assert!(!pool.device_stopped());
        drop(gpu);
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, 2 * 4096 + 4).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0x0002, "bus master bit cleared");
        assert!(pool.device_stopped());

        // With an IOMMU the GPU is left as it is (the container cuts it off).
        let (mut gpu, pool, file) = fake_noiommu_gpu(0x0006);
        gpu.noiommu = false;
        drop(gpu);
        file.read_exact_at(&mut b, 2 * 4096 + 4).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0x0006);
        assert!(!pool.device_stopped());
        pool.mark_device_stopped();
    }

    #[test]
    fn config_over_the_device_fd() {
        use std::os::unix::fs::FileExt;
        let (dev, file) = fake_device(8192);
        file.write_all_at(&0x2335_10deu32.to_le_bytes(), 4096)
            .unwrap();
        file.write_all_at(&0x0010_0002u32.to_le_bytes(), 4096 + 4)
            .unwrap();
        let cfg = VfioConfig {
            device: dev,
            offset: 4096,
            size: 4096,
        };
        assert_eq!(cfg.read_config32(0).unwrap(), 0x2335_10de);
        update_command(&cfg, PCI_COMMAND_MASTER, 0).unwrap();
        assert_eq!(cfg.read_config16(4).unwrap(), 0x6);
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, 4096 + 4).unwrap();
        assert_eq!(
            u32::from_le_bytes(b),
            0x6,
            "status half written as zero (W1C-safe)"
        );
        assert!(matches!(
            cfg.read_config32(4096),
            Err(HalError::OutOfRange { .. })
        ));
        // Not a VFIO device: the reset ioctl fails with the OS error, not a panic.
        assert!(matches!(cfg.reset_function(), Err(HalError::Os { .. })));
    }
}
