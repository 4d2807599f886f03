//! Host memory the simulated GPU reaches by DMA.
//!
//! The driver allocates buffers through [`SimDma`] (the core's `DmaAllocator`); each gets a fake
//! bus address. The GPU side reads and writes by bus address through [`HostMemory`], which acts
//! like an IOMMU: an address that no live buffer covers is a DMA fault, not a silent success.
//! Buffers are separated by an unmapped guard gap so that running off the end of one faults.
//!
//! In a [`crate::system::SimSystem`] several GPUs share one `HostMemory`, and where the
//! topology allows PCIe peer-to-peer, each GPU's BAR1 is a window at a bus address that the
//! other GPUs' DMA reaches ([`HostMemory::add_peer_window`]): a SYS-aperture access there lands
//! in that GPU's video memory, linearly, as through the simulator's BAR1.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nvbare_core::hal::{DmaAllocator, DmaBuffer, HalError, check_range};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::vram::Vram;

/// First fake bus address handed out (above 4 GiB, like an IOVA window).
pub const DMA_BASE: u64 = 0x1_0000_0000;
/// Unmapped gap between buffers.
const GUARD: u64 = 64 << 10;
const PAGE: usize = 4096;

/// A DMA access the "IOMMU" refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("DMA fault: {len} bytes at bus address {addr:#x} are not mapped")]
pub struct DmaFault {
    /// Bus address.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

#[derive(Debug)]
struct Region {
    /// Whole pages, page-aligned in this process as a host's DMA memory is (programs are
    /// handed it as their own: [`DmaBuffer::cpu_ptr`]).
    data: Mutex<Box<[Page]>>,
}

/// One page of a region.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// A GPU's BAR1 as other PCIe agents reach it.
#[derive(Debug)]
struct Window {
    size: u64,
    vram: Arc<Vram>,
}

#[derive(Debug, Default)]
struct Map {
    regions: BTreeMap<u64, Arc<Region>>,
    windows: BTreeMap<u64, Window>,
    next: u64,
    limit: u64,
    allocated: u64,
}

/// All host memory mapped for the GPU.
#[derive(Debug)]
pub struct HostMemory {
    map: Mutex<Map>,
}

impl HostMemory {
    /// A host with at most `limit` bytes of DMA memory.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(HostMemory {
            map: Mutex::new(Map {
                regions: BTreeMap::new(),
                windows: BTreeMap::new(),
                next: DMA_BASE,
                limit,
                allocated: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes currently allocated.
    pub fn allocated(&self) -> u64 {
        self.lock().allocated
    }

    /// Number of live buffers.
    pub fn buffers(&self) -> usize {
        self.lock().regions.len()
    }

    /// Makes `size` bytes at bus address `base` a window onto `vram` (a peer GPU's BAR1,
    /// linear from VRAM address 0). Fails if it overlaps DMA memory or another window.
    pub fn add_peer_window(&self, base: u64, size: u64, vram: Arc<Vram>) -> Result<(), String> {
        let mut map = self.lock();
        let end = base
            .checked_add(size)
            .ok_or_else(|| format!("window {base:#x}+{size:#x} overflows"))?;
        // The range buffers are handed out from (at least `limit` bytes, more with guards).
        let dma_end = map.next.max(DMA_BASE.saturating_add(map.limit));
        if size == 0 || (base < dma_end && end > DMA_BASE) {
            return Err(format!(
                "window {base:#x}..{end:#x} overlaps the DMA range {DMA_BASE:#x}..{dma_end:#x}"
            ));
        }
        if let Some((&b, w)) = map.windows.range(..end).next_back()
            && b + w.size > base
        {
            return Err(format!(
                "window {base:#x}..{end:#x} overlaps the one at {b:#x}"
            ));
        }
        map.windows.insert(base, Window { size, vram });
        Ok(())
    }

    /// The VRAM window covering `[addr, addr + len)`, if any (`Err` if one covers only part).
    fn window(&self, addr: u64, len: u64) -> Result<Option<(Arc<Vram>, u64)>, DmaFault> {
        let map = self.lock();
        let fault = DmaFault { addr, len };
        let Some((&base, w)) = map.windows.range(..=addr).next_back() else {
            return Ok(None);
        };
        if addr >= base + w.size {
            return Ok(None);
        }
        let end = addr.checked_add(len).ok_or(fault)?;
        if end > base + w.size {
            return Err(fault);
        }
        Ok(Some((w.vram.clone(), addr - base)))
    }

    fn find(&self, addr: u64, len: u64) -> Result<(u64, Arc<Region>), DmaFault> {
        let map = self.lock();
        let fault = DmaFault { addr, len };
        let (&base, region) = map.regions.range(..=addr).next_back().ok_or(fault)?;
        let size = region
            .data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_bytes()
            .len() as u64;
        let end = addr.checked_add(len).ok_or(fault)?;
        if end > base + size {
            return Err(fault);
        }
        Ok((base, region.clone()))
    }

    /// GPU-side read by bus address.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        if let Some((vram, off)) = self.window(addr, dst.len() as u64)? {
            return vram.read(off, dst).map_err(|_| DmaFault {
                addr,
                len: dst.len() as u64,
            });
        }
        let (base, r) = self.find(addr, dst.len() as u64)?;
        let data = r.data.lock().unwrap_or_else(|e| e.into_inner());
        let off = (addr - base) as usize;
        dst.copy_from_slice(&data.as_bytes()[off..off + dst.len()]);
        Ok(())
    }

    /// GPU-side write by bus address.
    pub fn write(&self, addr: u64, src: &[u8]) -> Result<(), DmaFault> {
        if let Some((vram, off)) = self.window(addr, src.len() as u64)? {
            return vram.write(off, src).map_err(|_| DmaFault {
                addr,
                len: src.len() as u64,
            });
        }
        let (base, r) = self.find(addr, src.len() as u64)?;
        let mut data = r.data.lock().unwrap_or_else(|e| e.into_inner());
        let off = (addr - base) as usize;
        data.as_mut_bytes()[off..off + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn alloc(self: &Arc<Self>, size: usize) -> Result<SimDmaBuffer, HalError> {
        let size = size.max(1).div_ceil(PAGE) * PAGE;
        let mut map = self.lock();
        if map.allocated + size as u64 > map.limit {
            return Err(HalError::NoMemory {
                requested: size as u64,
            });
        }
        let addr = map.next;
        let end = addr + size as u64 + GUARD;
        if map
            .windows
            .range(..end)
            .next_back()
            .is_some_and(|(&b, w)| b + w.size > addr)
        {
            // The fake bus address space ran into a peer window.
            return Err(HalError::NoMemory {
                requested: size as u64,
            });
        }
        map.next = end;
        map.allocated += size as u64;
        let region = Arc::new(Region {
            data: Mutex::new(vec![Page([0; PAGE]); size / PAGE].into_boxed_slice()),
        });
        map.regions.insert(addr, region.clone());
        Ok(SimDmaBuffer {
            host: self.clone(),
            region,
            addr,
            len: size,
        })
    }

    fn release(&self, addr: u64, len: usize) {
        let mut map = self.lock();
        if map.regions.remove(&addr).is_some() {
            map.allocated -= len as u64;
        }
    }
}

/// The driver's handle for allocating simulated DMA memory.
#[derive(Debug, Clone)]
pub struct SimDma {
    host: Arc<HostMemory>,
}

impl SimDma {
    /// An allocator over `host`.
    pub fn new(host: Arc<HostMemory>) -> Self {
        SimDma { host }
    }
}

impl DmaAllocator for SimDma {
    type Buffer = SimDmaBuffer;

    fn alloc_dma(&self, size: usize) -> Result<SimDmaBuffer, HalError> {
        self.host.alloc(size)
    }
}

/// A simulated DMA buffer; unmapped from the GPU when dropped.
#[derive(Debug)]
pub struct SimDmaBuffer {
    host: Arc<HostMemory>,
    region: Arc<Region>,
    addr: u64,
    len: usize,
}

impl DmaBuffer for SimDmaBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn dev_addr(&self) -> u64 {
        self.addr
    }

    /// The region's bytes stay where they are for its lifetime (a boxed slice, never
    /// replaced). A CPU access through this pointer bypasses the region's lock as a CPU's
    /// loads and stores bypass the GPU: a program that touches the memory while queued GPU
    /// work reads or writes it races, as it would on hardware.
    fn cpu_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        let mut data = self.region.data.lock().unwrap_or_else(|e| e.into_inner());
        std::ptr::NonNull::new(data.as_mut_bytes().as_mut_ptr())
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        let data = self.region.data.lock().unwrap_or_else(|e| e.into_inner());
        dst.copy_from_slice(&data.as_bytes()[offset..offset + dst.len()]);
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        let mut data = self.region.data.lock().unwrap_or_else(|e| e.into_inner());
        data.as_mut_bytes()[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

impl Drop for SimDmaBuffer {
    fn drop(&mut self) {
        self.host.release(self.addr, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_and_gpu_see_the_same_bytes() {
        let host = HostMemory::new(1 << 20);
        let dma = SimDma::new(host.clone());
        let b = dma.alloc_dma(100).unwrap();
        assert_eq!(b.len(), 4096);
        b.write_u32(8, 0xdead_beef).unwrap();
        let mut x = [0; 4];
        host.read(b.dev_addr() + 8, &mut x).unwrap();
        assert_eq!(u32::from_le_bytes(x), 0xdead_beef);
        host.write(b.dev_addr() + 4092, &[1, 2, 3, 4]).unwrap();
        assert_eq!(b.read_u32(4092).unwrap(), 0x0403_0201);
    }

    #[test]
    fn out_of_bounds_is_a_fault() {
        let host = HostMemory::new(1 << 20);
        let dma = SimDma::new(host.clone());
        let b = dma.alloc_dma(4096).unwrap();
        assert!(host.read(b.dev_addr() + 4093, &mut [0; 4]).is_err());
        assert!(host.read(b.dev_addr() - 1, &mut [0; 1]).is_err());
        assert!(b.read_u32(4093).is_err());
        let addr = b.dev_addr();
        drop(b);
        assert!(
            host.read(addr, &mut [0; 1]).is_err(),
            "freed memory must fault"
        );
        assert_eq!(host.allocated(), 0);
    }

    #[test]
    fn peer_windows_reach_vram_and_nothing_else() {
        let host = HostMemory::new(1 << 20);
        let vram = Arc::new(Vram::new(1 << 20));
        let base = 0x1000_0000_0000;
        host.add_peer_window(base, 1 << 20, vram.clone()).unwrap();
        host.write(base + 0x100, &[9, 8, 7]).unwrap();
        let mut b = [0u8; 3];
        vram.read(0x100, &mut b).unwrap();
        assert_eq!(b, [9, 8, 7]);
        assert!(
            host.read(base + (1 << 20) - 1, &mut [0; 2]).is_err(),
            "runs off the window"
        );
        assert!(host.read(base + (1 << 20), &mut [0; 1]).is_err());
        assert!(
            host.add_peer_window(base + 4096, 4096, vram.clone())
                .is_err(),
            "overlap"
        );
        assert!(
            host.add_peer_window(DMA_BASE, 4096, vram).is_err(),
            "DMA range"
        );
    }

    #[test]
    fn exhaustion_is_an_error() {
        let host = HostMemory::new(8192);
        let dma = SimDma::new(host);
        let _a = dma.alloc_dma(8192).unwrap();
        assert!(matches!(dma.alloc_dma(1), Err(HalError::NoMemory { .. })));
    }
}
