//! Host memory the simulated GPU reaches by DMA.
//!
//! The driver allocates buffers through [`SimDma`] (the core's `DmaAllocator`); each gets a fake
//! bus address. The GPU side reads and writes by bus address through [`HostMemory`], which acts
//! like an IOMMU: an address that no live buffer covers is a DMA fault, not a silent success.
//! Buffers are separated by an unmapped guard gap so that running off the end of one faults.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nvbare_core::hal::{DmaAllocator, DmaBuffer, HalError, check_range};

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
    data: Mutex<Box<[u8]>>,
}

#[derive(Debug, Default)]
struct Map {
    regions: BTreeMap<u64, Arc<Region>>,
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

    fn find(&self, addr: u64, len: u64) -> Result<(u64, Arc<Region>), DmaFault> {
        let map = self.lock();
        let fault = DmaFault { addr, len };
        let (&base, region) = map.regions.range(..=addr).next_back().ok_or(fault)?;
        let size = region.data.lock().unwrap_or_else(|e| e.into_inner()).len() as u64;
        let end = addr.checked_add(len).ok_or(fault)?;
        if end > base + size {
            return Err(fault);
        }
        Ok((base, region.clone()))
    }

    /// GPU-side read by bus address.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        let (base, r) = self.find(addr, dst.len() as u64)?;
        let data = r.data.lock().unwrap_or_else(|e| e.into_inner());
        let off = (addr - base) as usize;
        dst.copy_from_slice(&data[off..off + dst.len()]);
        Ok(())
    }

    /// GPU-side write by bus address.
    pub fn write(&self, addr: u64, src: &[u8]) -> Result<(), DmaFault> {
        let (base, r) = self.find(addr, src.len() as u64)?;
        let mut data = r.data.lock().unwrap_or_else(|e| e.into_inner());
        let off = (addr - base) as usize;
        data[off..off + src.len()].copy_from_slice(src);
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
        map.next = addr + size as u64 + GUARD;
        map.allocated += size as u64;
        let region = Arc::new(Region {
            data: Mutex::new(vec![0u8; size].into_boxed_slice()),
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

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        let data = self.region.data.lock().unwrap_or_else(|e| e.into_inner());
        dst.copy_from_slice(&data[offset..offset + dst.len()]);
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        let mut data = self.region.data.lock().unwrap_or_else(|e| e.into_inner());
        data[offset..offset + src.len()].copy_from_slice(src);
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
    fn exhaustion_is_an_error() {
        let host = HostMemory::new(8192);
        let dma = SimDma::new(host);
        let _a = dma.alloc_dma(8192).unwrap();
        assert!(matches!(dma.alloc_dma(1), Err(HalError::NoMemory { .. })));
    }
}
