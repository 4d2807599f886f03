//! Several GPUs bound to vfio-pci opened as one peer group, so the bare-metal backend can let
//! them reach each other's memory (PCIe BAR1 P2P, `docs/multi-gpu.md`).
//!
//! With an IOMMU every GPU's DMA is translated by the domain of its VFIO container. A group
//! therefore puts all its GPUs in **one container** (one IOMMU domain, one DMA pool, so a host
//! buffer allocated for one GPU has the same IOVA for all), and maps each GPU's BAR1 mmap into
//! that container with `VFIO_IOMMU_MAP_DMA` at an IOVA chosen here (VFIO type1 accepts the
//! mmap of a vfio-pci BAR as the source of a DMA mapping: that is how QEMU gives assigned
//! devices peer-to-peer access). A GPU then reaches a peer's VRAM at the IOVA of the peer's
//! BAR1 plus the VRAM address (BAR1 is in physical mode). The BAR IOVAs are taken from the top of the
//! IOMMU's highest window and kept out of the DMA pool's range.
//!
//! In no-IOMMU mode DMA addresses are physical: each GPU is opened on its own VFIO container,
//! all of them share one DMA pool (a buffer of one is valid for the others, so the pool gives
//! its pages back only once every GPU of the group has stopped mastering), and a peer's BAR1 is
//! reached at its bus address from sysfs.
//!
//! What the platform must also allow (not visible from here, so not checked): PCIe P2P
//! between the GPUs' slots (ACS/root complex routing, the IOMMU accepting P2P translations).
//! **Untested on real hardware**: this machine has no `/dev/vfio`; the error paths are tested
//! with fixture sysfs trees.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vfio_ioctls::{VfioContainer, VfioDevice};

use super::{
    ContainerIommu, DeviceHandle, OpenOptions, VFIO_DEV, VfioError, VfioGpu, classify,
    clip_windows, open_noiommu, preflight, sys, warn_memlock,
};
use crate::dma::{Addressing, DmaPool, IovaSpace};
use crate::{Bdf, Sysfs};

/// The DMA address space id of every no-IOMMU GPU (physical addresses: one space).
pub const PHYSICAL_DMA_SPACE: u64 = 0;

/// Ids of IOMMU peer groups (one DMA address space each).
static NEXT_SPACE: AtomicU64 = AtomicU64::new(1);

/// GPUs opened together: one VFIO container (IOMMU domain) and DMA pool, each BAR1 mapped for
/// the others' DMA. Keep it alive as long as the GPUs are used (it unmaps the BARs on drop).
pub struct VfioPeerGroup {
    gpus: Vec<Arc<VfioGpu>>,
    bar1: Vec<Result<u64, String>>,
    space: u64,
    container: Option<Arc<VfioContainer>>,
    /// (IOVA, bytes) of the BAR mappings made in the container.
    mapped: Vec<(u64, u64)>,
}

impl std::fmt::Debug for VfioPeerGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPeerGroup")
            .field(
                "gpus",
                &self
                    .gpus
                    .iter()
                    .map(|g| g.function().bdf)
                    .collect::<Vec<_>>(),
            )
            .field("bar1", &self.bar1)
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

/// Places BARs of `sizes` bytes (powers of two) at IOVAs below the end of the highest of
/// `windows` (inclusive `(first, last)` pairs), each aligned to its size, from the top down.
/// Returns each BAR's IOVA and the inclusive range they take, or why they do not fit.
pub fn place_bars(windows: &[(u64, u64)], sizes: &[u64]) -> Result<(Vec<u64>, (u64, u64)), String> {
    let &(first, last) = windows
        .iter()
        .max_by_key(|w| w.1)
        .ok_or("the IOMMU reports no IOVA window")?;
    let mut cursor = last.checked_add(1).ok_or("IOVA window ends at 2^64")?;
    let mut out = Vec::with_capacity(sizes.len());
    for &size in sizes {
        if size == 0 || !size.is_power_of_two() {
            return Err(format!("a BAR1 of {size:#x} bytes is not a power of two"));
        }
        let base = cursor
            .checked_sub(size)
            .map(|b| b & !(size - 1))
            .filter(|&b| b >= first)
            .ok_or_else(|| {
                format!(
                    "the GPUs' BAR1s ({} GiB together) do not fit in the IOMMU's IOVA window \
                     {first:#x}..={last:#x}",
                    sizes.iter().sum::<u64>() >> 30
                )
            })?;
        out.push(base);
        cursor = base;
    }
    Ok((out, (cursor, last)))
}

fn group_err(bdfs: &[Bdf], reason: impl Into<String>) -> VfioError {
    VfioError::PeerGroup {
        bdfs: bdfs
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(","),
        reason: reason.into(),
    }
}

impl VfioPeerGroup {
    /// Opens the GPUs at `bdfs` together with `/sys` and default options.
    pub fn open(bdfs: &[Bdf]) -> Result<Self, VfioError> {
        Self::open_with(&Sysfs::from_env(), bdfs, &OpenOptions::from_env())
    }

    /// Opens the GPUs at `bdfs` together (at least two, all different). Every GPU passes the
    /// same checks as [`VfioGpu::open_with`] before anything is opened.
    pub fn open_with(sysfs: &Sysfs, bdfs: &[Bdf], opts: &OpenOptions) -> Result<Self, VfioError> {
        if bdfs.len() < 2 {
            return Err(group_err(bdfs, "a peer group needs at least two GPUs"));
        }
        for (i, b) in bdfs.iter().enumerate() {
            if bdfs.get(..i).is_some_and(|before| before.contains(b)) {
                return Err(group_err(bdfs, format!("{b} is listed twice")));
            }
        }
        let checked = bdfs
            .iter()
            .map(|&b| preflight(sysfs, b, opts))
            .collect::<Result<Vec<_>, _>>()?;
        warn_memlock();
        if opts.noiommu {
            // One pool: any GPU may be handed a buffer allocated for another (one physical
            // address space), so the pages may go back only when every GPU has stopped. Each
            // GPU marks it once on drop; the first is counted by `DmaPool::new`, the others
            // once they exist, so a GPU that failed to open is not waited for.
            let pool = DmaPool::new(Addressing::Physical, opts.dma);
            let mut gpus = Vec::with_capacity(bdfs.len());
            for (i, (&b, (f, group))) in bdfs.iter().zip(checked).enumerate() {
                let device = open_noiommu(opts, b, group)?;
                let gpu = VfioGpu::finish(sysfs, f, device, pool.clone(), opts)?;
                if i > 0 {
                    pool.add_device();
                }
                gpus.push(Arc::new(gpu));
            }
            let bar1 = gpus
                .iter()
                .map(|g| {
                    let f = g.function();
                    f.bars
                        .iter()
                        .find(|b| b.index == 1 && b.start != 0)
                        .map(|b| b.start)
                        .ok_or_else(|| {
                            format!("sysfs reports no bus address for BAR1 of {}", f.bdf)
                        })
                })
                .collect();
            return Ok(VfioPeerGroup {
                gpus,
                bar1,
                space: PHYSICAL_DMA_SPACE,
                container: None,
                mapped: Vec::new(),
            });
        }
        let (first_bdf, first_group) = (bdfs[0], checked[0].1);
        let container =
            Arc::new(VfioContainer::new(None).map_err(|e| {
                classify(e, std::path::Path::new(VFIO_DEV), first_bdf, first_group)
            })?);
        // Every group joins the one container (vfio-ioctls attaches a group once).
        let mut devices = Vec::with_capacity(bdfs.len());
        for (&b, (_, group)) in bdfs.iter().zip(&checked) {
            let d = VfioDevice::new(&sysfs.device_dir(b), container.clone(), false)
                .map_err(|e| classify(e, std::path::Path::new(VFIO_DEV), b, *group))?;
            devices.push(d);
        }
        let windows = match sys::iommu_iova_ranges(super::AsFdBorrowed::as_fd_borrowed(&*container))
        {
            Ok(Some(r)) if !r.is_empty() => clip_windows(&r),
            _ => vec![IovaSpace::DEFAULT],
        };
        let sizes: Vec<u64> = checked
            .iter()
            .map(|(f, _)| f.bars.iter().find(|b| b.index == 1).map_or(0, |b| b.size))
            .collect();
        let (iovas, bar_range) = place_bars(&windows, &sizes).map_err(|r| group_err(bdfs, r))?;
        let mut reserved = vec![bar_range];
        for (_, group) in &checked {
            reserved.extend(sysfs.iommu_group_reserved(*group).unwrap_or_default());
        }
        let pool = DmaPool::new(
            Addressing::iommu(
                Arc::new(ContainerIommu(container.clone())),
                IovaSpace::new(&windows, &reserved),
            ),
            opts.dma,
        );
        let mut gpus = Vec::with_capacity(bdfs.len());
        for (d, (f, _)) in devices.into_iter().zip(checked) {
            gpus.push(Arc::new(VfioGpu::finish(
                sysfs,
                f,
                DeviceHandle::Iommu(d),
                pool.clone(),
                opts,
            )?));
        }
        let mut group = VfioPeerGroup {
            gpus,
            bar1: Vec::new(),
            space: NEXT_SPACE.fetch_add(1, Ordering::Relaxed),
            container: Some(container.clone()),
            mapped: Vec::new(),
        };
        for (i, iova) in iovas.into_iter().enumerate() {
            let r = group.map_bar1(&container, i, iova);
            group.bar1.push(r);
        }
        Ok(group)
    }

    /// Maps GPU `i`'s BAR1 mmap at `iova` in the container; `Err` says why peers cannot reach
    /// it (the GPUs still share host memory).
    fn map_bar1(&mut self, container: &VfioContainer, i: usize, iova: u64) -> Result<u64, String> {
        let gpu = self.gpus.get(i).ok_or("no such GPU")?;
        let bdf = gpu.function().bdf;
        let (ptr, len): (NonNull<u8>, usize) = gpu.bar1().whole_mapping().ok_or_else(|| {
            format!(
                "BAR1 of {bdf} is not mmapped as one piece, so it cannot be mapped for the other \
                 GPUs' DMA"
            )
        })?;
        // SAFETY: `ptr..ptr+len` is the live mmap of this GPU's BAR1, which `self.gpus` keeps
        // alive until `Drop` has removed this IOMMU mapping; VFIO pins nothing of ours.
        match unsafe { container.vfio_dma_map(iova, len, ptr.as_ptr()) } {
            Ok(()) => {
                self.mapped.push((iova, len as u64));
                Ok(iova)
            }
            Err(e) => Err(format!(
                "VFIO_IOMMU_MAP_DMA of the BAR1 of {bdf} at IOVA {iova:#x} failed ({e}): the \
                 kernel or IOMMU does not let the other GPUs' DMA reach it (no PCIe P2P through \
                 this IOMMU)"
            )),
        }
    }

    /// The GPUs, in the order given.
    pub fn gpus(&self) -> &[Arc<VfioGpu>] {
        &self.gpus
    }

    /// The bus address (IOVA in the group's domain, or physical without an IOMMU) at which
    /// GPU `i`'s BAR1 is visible to the other GPUs' DMA, or why it is not.
    pub fn bar1_bus(&self, i: usize) -> Result<u64, String> {
        self.bar1
            .get(i)
            .cloned()
            .unwrap_or_else(|| Err(format!("the group has no GPU {i}")))
    }

    /// The id of the group's DMA address space ([`PHYSICAL_DMA_SPACE`] without an IOMMU).
    pub fn dma_space(&self) -> u64 {
        self.space
    }
}

impl Drop for VfioPeerGroup {
    fn drop(&mut self) {
        if let Some(c) = &self.container {
            for &(iova, len) in &self.mapped {
                if let Err(e) = c.vfio_dma_unmap(iova, len as usize) {
                    log::warn!("unmapping a peer BAR at IOVA {iova:#x}: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_go_to_the_top_of_the_highest_window_aligned() {
        let w = [(1 << 32, (1 << 39) - 1), (0x1000, 0xfee0_0000 - 1)];
        let (iovas, range) = place_bars(&w, &[1 << 37, 32 << 30]).unwrap();
        assert_eq!(
            iovas,
            vec![(1 << 39) - (1 << 37), (1 << 39) - (1 << 37) - (32 << 30)]
        );
        assert_eq!(range, (iovas[1], (1 << 39) - 1));
        for (i, s) in iovas.iter().zip([1u64 << 37, 32 << 30]) {
            assert_eq!(i % s, 0);
        }
        // A window whose end is not aligned: the BAR goes below, aligned.
        let (iovas, _) = place_bars(&[(0, 0x2_7fff_ffff)], &[1 << 32]).unwrap();
        assert_eq!(iovas, vec![1 << 32]);
        // Too big, not a power of two, no window.
        let e = place_bars(&[(1 << 32, (1 << 39) - 1)], &[1 << 38, 1 << 38]).unwrap_err();
        assert!(e.contains("do not fit"), "{e}");
        assert!(place_bars(&w, &[3 << 20]).is_err());
        assert!(place_bars(&w, &[0]).is_err());
        assert!(place_bars(&[], &[1 << 20]).is_err());
    }
}
