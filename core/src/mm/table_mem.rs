//! Where page tables live.
//!
//! The mapper keeps its tables in one contiguous region the embedder hands it, either in VRAM
//! (written by the CPU through a BAR1 [`Mmio`] window: [`Bar1Tables`]) or in host memory the GPU
//! reaches by DMA ([`DmaTables`]). [`PageTableMemory`] is the small interface between the two:
//! 64-bit entry reads and writes at offsets in the region, and a flush that makes the CPU's
//! writes visible to the GPU's page walker before a TLB invalidate.

use core::sync::atomic::{Ordering, fence};

use super::entry::TableAperture;
use crate::hal::{DmaBuffer, HalError, Mmio, check_range};

/// A region of memory holding page tables.
pub trait PageTableMemory {
    /// How the GPU reaches the region (the aperture written into PDEs).
    fn aperture(&self) -> TableAperture;

    /// The region's first byte as the GPU addresses it (VRAM physical or bus address);
    /// 4 KiB aligned.
    fn base(&self) -> u64;

    /// Bytes in the region.
    fn size(&self) -> u64;

    /// Reads the little-endian 64-bit entry at byte `offset` (8-aligned) of the region.
    fn read_u64(&self, offset: u64) -> Result<u64, HalError>;

    /// Writes the 64-bit entry at byte `offset` (8-aligned) of the region.
    fn write_u64(&mut self, offset: u64, value: u64) -> Result<(), HalError>;

    /// Zeroes `len` bytes at `offset` (both 8-aligned).
    fn zero(&mut self, offset: u64, len: u64) -> Result<(), HalError> {
        check_range(offset, len, self.size())?;
        let mut o = offset;
        while o < offset + len {
            self.write_u64(o, 0)?;
            o += 8;
        }
        Ok(())
    }

    /// Makes every earlier write visible to the GPU's page walker.
    fn flush(&mut self) -> Result<(), HalError>;
}

fn check_entry(offset: u64, size: u64) -> Result<(), HalError> {
    if !offset.is_multiple_of(8) {
        return Err(HalError::Misaligned { offset, align: 8 });
    }
    check_range(offset, 8, size)
}

/// Page tables in VRAM, written through a BAR1 window.
///
/// `bar1_offset` is where the region starts inside the window and `vram_base` is its VRAM
/// physical address (with a BAR1 that maps VRAM linearly from 0, the two are equal).
#[derive(Debug)]
pub struct Bar1Tables<M> {
    bar1: M,
    bar1_offset: u64,
    vram_base: u64,
    size: u64,
}

impl<M: Mmio> Bar1Tables<M> {
    /// Tables in `size` bytes of VRAM at physical `vram_base`, seen at `bar1_offset` of `bar1`.
    pub fn new(bar1: M, bar1_offset: u64, vram_base: u64, size: u64) -> Result<Self, HalError> {
        for (v, what) in [
            (bar1_offset, bar1_offset),
            (vram_base, vram_base),
            (size, size),
        ] {
            if !v.is_multiple_of(4096) {
                return Err(HalError::Misaligned {
                    offset: what,
                    align: 4096,
                });
            }
        }
        check_range(bar1_offset, size, bar1.size() as u64)?;
        Ok(Bar1Tables {
            bar1,
            bar1_offset,
            vram_base,
            size,
        })
    }

    /// The BAR1 window.
    pub fn bar1(&self) -> &M {
        &self.bar1
    }
}

impl<M: Mmio> PageTableMemory for Bar1Tables<M> {
    fn aperture(&self) -> TableAperture {
        TableAperture::Video
    }

    fn base(&self) -> u64 {
        self.vram_base
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_u64(&self, offset: u64) -> Result<u64, HalError> {
        check_entry(offset, self.size)?;
        let at = (self.bar1_offset + offset) as usize;
        let lo = self.bar1.read32(at);
        let hi = self.bar1.read32(at + 4);
        // We never write an all-ones entry; reading one means the link is down (PCIe master
        // abort), not a table we built.
        if lo == u32::MAX && hi == u32::MAX {
            return Err(HalError::DeviceLost);
        }
        Ok((hi as u64) << 32 | lo as u64)
    }

    fn write_u64(&mut self, offset: u64, value: u64) -> Result<(), HalError> {
        check_entry(offset, self.size)?;
        self.bar1
            .write64((self.bar1_offset + offset) as usize, value);
        Ok(())
    }

    fn zero(&mut self, offset: u64, len: u64) -> Result<(), HalError> {
        check_range(offset, len, self.size)?;
        let start = (self.bar1_offset + offset) as usize;
        for o in (start..start + len as usize).step_by(4) {
            self.bar1.write32(o, 0);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), HalError> {
        // BAR writes are posted; a read from the same window completes only after them.
        if self.bar1.read32(self.bar1_offset as usize) == u32::MAX
            && self.bar1.read32(self.bar1_offset as usize + 4) == u32::MAX
        {
            return Err(HalError::DeviceLost);
        }
        Ok(())
    }
}

/// Page tables in host memory the GPU reads by DMA.
#[derive(Debug)]
pub struct DmaTables<B> {
    buf: B,
    coherent: bool,
}

impl<B: DmaBuffer> DmaTables<B> {
    /// Tables in `buf`; `coherent` selects the SYSTEM_COHERENT (snooped) aperture.
    pub fn new(buf: B, coherent: bool) -> Result<Self, HalError> {
        if !buf.dev_addr().is_multiple_of(4096) {
            return Err(HalError::Misaligned {
                offset: buf.dev_addr(),
                align: 4096,
            });
        }
        Ok(DmaTables { buf, coherent })
    }

    /// The buffer.
    pub fn buffer(&self) -> &B {
        &self.buf
    }
}

impl<B: DmaBuffer> PageTableMemory for DmaTables<B> {
    fn aperture(&self) -> TableAperture {
        if self.coherent {
            TableAperture::SysCoherent
        } else {
            TableAperture::SysNonCoherent
        }
    }

    fn base(&self) -> u64 {
        self.buf.dev_addr()
    }

    fn size(&self) -> u64 {
        // Whole 4 KiB tables only.
        self.buf.len() as u64 & !0xfff
    }

    fn read_u64(&self, offset: u64) -> Result<u64, HalError> {
        check_entry(offset, self.size())?;
        self.buf.read_u64(offset as usize)
    }

    fn write_u64(&mut self, offset: u64, value: u64) -> Result<(), HalError> {
        check_entry(offset, self.size())?;
        self.buf.write_u64(offset as usize, value)
    }

    fn zero(&mut self, offset: u64, len: u64) -> Result<(), HalError> {
        check_range(offset, len, self.size())?;
        self.buf.fill(offset as usize, len as usize, 0)
    }

    fn flush(&mut self) -> Result<(), HalError> {
        // Coherent DMA memory: order the CPU's stores before the MMIO write that triggers the
        // invalidate. (Non-coherent platforms must also write back CPU caches; the buffer's
        // implementation is expected to map it uncached there.)
        fence(Ordering::SeqCst);
        Ok(())
    }
}
