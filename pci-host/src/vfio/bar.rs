//! A BAR of a VFIO device as [`Mmio`]: mmapped where VFIO allows it, `pread`/`pwrite` on the
//! device fd elsewhere (a sparse region, e.g. around an MSI-X table on older kernels).

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::Arc;

use nvbare_core::hal::{Mmio, check_mmio};
use rustix::mm::{MapFlags, ProtFlags};
use volatile::VolatilePtr;

use super::DeviceHandle;

/// One mmapped piece of a BAR.
#[derive(Debug)]
struct Area {
    /// Offset in the BAR.
    start: usize,
    len: usize,
    ptr: NonNull<u8>,
}

/// A BAR of the GPU. Accesses are single volatile 32-bit loads and stores; outside the BAR a
/// read returns all ones and a write is dropped, like a PCI master abort.
#[derive(Debug)]
pub struct BarMmio {
    index: u8,
    size: usize,
    /// Offset of the BAR's region in the device fd.
    region_offset: u64,
    /// Whether the region may be read and written through the fd.
    rw_fallback: bool,
    areas: Vec<Area>,
    device: Arc<DeviceHandle>,
}

// SAFETY: the mappings are device memory owned by this value; accesses are volatile 32-bit
// operations that the device accepts from any CPU.
unsafe impl Send for BarMmio {}
// SAFETY: as above; `&BarMmio` offers only volatile register accesses.
unsafe impl Sync for BarMmio {}

impl BarMmio {
    /// Maps `[start, start + len)` pieces of BAR `index` (a region of `size` bytes at
    /// `region_offset` in the device fd).
    pub(super) fn map(
        device: Arc<DeviceHandle>,
        index: u8,
        region_offset: u64,
        size: u64,
        pieces: &[(u64, u64)],
        rw_fallback: bool,
    ) -> std::io::Result<Self> {
        let size = usize::try_from(size).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let mut bar = BarMmio {
            index,
            size,
            region_offset,
            rw_fallback,
            areas: Vec::new(),
            device,
        };
        for &(start, len) in pieces {
            let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(len)) else {
                continue;
            };
            if len == 0 || start.checked_add(len).is_none_or(|e| e > size) {
                continue;
            }
            let off = region_offset
                .checked_add(start as u64)
                .ok_or(std::io::ErrorKind::InvalidInput)?;
            // SAFETY: a shared mapping of the device fd at a range VFIO reported as mmappable;
            // it aliases no Rust object and is reached only through volatile accesses.
            let ptr = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::SHARED,
                    bar.device.fd(),
                    off,
                )
            }?;
            let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(std::io::ErrorKind::OutOfMemory)?;
            bar.areas.push(Area { start, len, ptr });
        }
        Ok(bar)
    }

    /// The BAR index.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The mapping of the whole BAR, when one mmap covers all of it (what a peer's DMA can
    /// be pointed at through `VFIO_IOMMU_MAP_DMA`).
    pub(crate) fn whole_mapping(&self) -> Option<(NonNull<u8>, usize)> {
        match self.areas.as_slice() {
            [a] if a.start == 0 && a.len == self.size => Some((a.ptr, a.len)),
            _ => None,
        }
    }

    /// Whether every byte of the BAR is mmapped (no `pread`/`pwrite` fallback needed).
    pub fn fully_mapped(&self) -> bool {
        self.areas.iter().map(|a| a.len).sum::<usize>() == self.size
    }

    fn locate(&self, offset: usize) -> Option<NonNull<u32>> {
        let a = self
            .areas
            .iter()
            .find(|a| offset >= a.start && offset + 4 <= a.start + a.len)?;
        // SAFETY: offset - start + 4 <= len: inside the mapping.
        let p = unsafe { a.ptr.as_ptr().add(offset - a.start) };
        NonNull::new(p.cast::<u32>())
    }
}

impl Mmio for BarMmio {
    fn size(&self) -> usize {
        self.size
    }

    fn read32(&self, offset: usize) -> u32 {
        if check_mmio(offset, self.size).is_err() {
            return u32::MAX;
        }
        if let Some(p) = self.locate(offset) {
            // SAFETY: `p` is 4-byte aligned (offset is, and mappings are page aligned) and
            // inside a live mapping of this BAR.
            return unsafe { VolatilePtr::new_read_only(p) }.read();
        }
        if !self.rw_fallback {
            return u32::MAX;
        }
        let mut b = [0u8; 4];
        match rustix::io::pread(
            self.device.fd().as_fd(),
            &mut b,
            self.region_offset + offset as u64,
        ) {
            Ok(4) => u32::from_le_bytes(b),
            _ => u32::MAX,
        }
    }

    fn write32(&self, offset: usize, value: u32) {
        if check_mmio(offset, self.size).is_err() {
            return;
        }
        if let Some(p) = self.locate(offset) {
            // SAFETY: as in `read32`.
            unsafe { VolatilePtr::new(p) }.write(value);
            return;
        }
        if self.rw_fallback
            && let Err(e) = rustix::io::pwrite(
                self.device.fd().as_fd(),
                &value.to_le_bytes(),
                self.region_offset + offset as u64,
            )
        {
            log::debug!("BAR{} write at {offset:#x} failed: {e}", self.index);
        }
    }
}

impl Drop for BarMmio {
    fn drop(&mut self) {
        for a in &self.areas {
            // SAFETY: each area is a mapping made in `map` with this pointer and length, and
            // no access can outlive `&self`.
            if let Err(e) = unsafe { rustix::mm::munmap(a.ptr.as_ptr().cast(), a.len) } {
                log::error!("munmap of BAR{} failed: {e}", self.index);
            }
        }
    }
}
