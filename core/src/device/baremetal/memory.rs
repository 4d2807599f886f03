//! GPU memory on bare metal: our VRAM allocator, our VA allocator and our page tables.
//!
//! Every allocation is physically contiguous (the device layer needs that for channel
//! memory, and it keeps the bookkeeping small): VRAM from [`VramAllocator`], host memory from
//! the platform's `DmaAllocator` (one buffer has one device address). Each is mapped at a VA
//! from [`VaAllocator`] by the [`Mapper`], which invalidates the TLB after every map and unmap.
//! The CPU reaches VRAM through BAR1 in physical mode (BAR1 offset = VRAM address, which is
//! why the backend insists on a BAR1 covering the framebuffer) and host memory through the
//! DMA buffer; both by volatile copies, never references.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use super::BareMetalError;
use crate::device::{GpuMemory, Location, MemoryRequest, PhysRange};
use crate::hal::{Clock, DmaAllocator, DmaBuffer, HalError, Mmio, check_range};
use crate::mm::{
    Bar1Tables, DmaTables, FbLayout, FitPolicy, Mapper, MmuFormat, MmuInvalidate, PAGE_4K,
    PageDirectoryBase, PageTableMemory, PteAttrs, TableAperture, TableSlot, VaAllocator,
    VramAllocator,
};

/// Blocks the VRAM allocator tracks (live allocations + free ranges).
const VRAM_BLOCKS: usize = 1024;
/// Blocks the VA allocator tracks.
const VA_BLOCKS: usize = 1024;

/// Where the page tables live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TablePlacement {
    /// In VRAM, written through BAR1 (what tinygrad does).
    Vram,
    /// In coherent host memory from the DMA allocator (no BAR1 reads on the map path).
    Host,
}

/// The page-table memory of either placement.
#[derive(Debug)]
pub(crate) enum TableMem<B1, B> {
    Vram(Bar1Tables<B1>),
    Host(DmaTables<B>),
}

impl<B1: Mmio, B: DmaBuffer> PageTableMemory for TableMem<B1, B> {
    fn aperture(&self) -> TableAperture {
        match self {
            TableMem::Vram(t) => t.aperture(),
            TableMem::Host(t) => t.aperture(),
        }
    }
    fn base(&self) -> u64 {
        match self {
            TableMem::Vram(t) => t.base(),
            TableMem::Host(t) => t.base(),
        }
    }
    fn size(&self) -> u64 {
        match self {
            TableMem::Vram(t) => t.size(),
            TableMem::Host(t) => t.size(),
        }
    }
    fn read_u64(&self, offset: u64) -> Result<u64, HalError> {
        match self {
            TableMem::Vram(t) => t.read_u64(offset),
            TableMem::Host(t) => t.read_u64(offset),
        }
    }
    fn write_u64(&mut self, offset: u64, value: u64) -> Result<(), HalError> {
        match self {
            TableMem::Vram(t) => t.write_u64(offset, value),
            TableMem::Host(t) => t.write_u64(offset, value),
        }
    }
    fn zero(&mut self, offset: u64, len: u64) -> Result<(), HalError> {
        match self {
            TableMem::Vram(t) => t.zero(offset, len),
            TableMem::Host(t) => t.zero(offset, len),
        }
    }
    fn flush(&mut self) -> Result<(), HalError> {
        match self {
            TableMem::Vram(t) => t.flush(),
            TableMem::Host(t) => t.flush(),
        }
    }
}

/// The mapper the backend uses.
pub(crate) type BareMapper<B1, B, M, C> =
    Mapper<TableMem<B1, B>, Vec<TableSlot>, MmuInvalidate<M, C>>;

/// CPU access to an allocation.
#[derive(Debug)]
enum Cpu<B1, B> {
    /// VRAM through BAR1 (physical mode: BAR1 offset = VRAM address).
    Vram { bar1: B1, offset: u64 },
    /// Host memory.
    Host(B),
}

/// An allocation of the bare-metal backend: physically contiguous, mapped at `gpu_va`.
#[derive(Debug)]
pub struct BareMemory<B1, B> {
    va: u64,
    size: u64,
    phys: PhysRange,
    cpu: Cpu<B1, B>,
}

impl<B1, B> BareMemory<B1, B> {
    /// The GPU VA (0 for memory that is not mapped, e.g. instance blocks).
    pub fn va(&self) -> u64 {
        self.va
    }
}

/// Reads bytes through a 32-bit MMIO window (aligned words, volatile).
fn mmio_read<M: Mmio>(bar: &M, base: u64, dst: &mut [u8]) -> Result<(), HalError> {
    let mut done = 0usize;
    while done < dst.len() {
        let addr = base + done as u64;
        let word_addr = addr & !3;
        let skip = (addr - word_addr) as usize;
        let w =
            bar.try_read32(
                usize::try_from(word_addr).map_err(|_| HalError::OutOfRange {
                    offset: word_addr,
                    len: 4,
                    limit: bar.size() as u64,
                })?,
            )?;
        let bytes = w.to_le_bytes();
        let n = (4 - skip).min(dst.len() - done);
        if let (Some(d), Some(s)) = (dst.get_mut(done..done + n), bytes.get(skip..skip + n)) {
            d.copy_from_slice(s);
        }
        done += n;
    }
    Ok(())
}

/// Writes bytes through a 32-bit MMIO window (read-modify-write for partial words).
fn mmio_write<M: Mmio>(bar: &M, base: u64, src: &[u8]) -> Result<(), HalError> {
    let mut done = 0usize;
    while done < src.len() {
        let addr = base + done as u64;
        let word_addr = addr & !3;
        let skip = (addr - word_addr) as usize;
        let n = (4 - skip).min(src.len() - done);
        let off = usize::try_from(word_addr).map_err(|_| HalError::OutOfRange {
            offset: word_addr,
            len: 4,
            limit: bar.size() as u64,
        })?;
        let mut bytes = if n == 4 {
            [0; 4]
        } else {
            bar.try_read32(off)?.to_le_bytes()
        };
        if let (Some(d), Some(s)) = (bytes.get_mut(skip..skip + n), src.get(done..done + n)) {
            d.copy_from_slice(s);
        }
        bar.try_write32(off, u32::from_le_bytes(bytes))?;
        done += n;
    }
    Ok(())
}

impl<B1: Mmio, B: DmaBuffer> GpuMemory for BareMemory<B1, B> {
    fn size(&self) -> u64 {
        self.size
    }
    fn gpu_va(&self) -> u64 {
        self.va
    }
    fn location(&self) -> Location {
        self.phys.location
    }
    fn phys(&self) -> Option<PhysRange> {
        Some(self.phys)
    }
    fn cpu_ptr(&self) -> Option<core::ptr::NonNull<u8>> {
        match &self.cpu {
            Cpu::Vram { .. } => None,
            Cpu::Host(b) => b.cpu_ptr(),
        }
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset, dst.len() as u64, self.size)?;
        match &self.cpu {
            Cpu::Vram { bar1, offset: base } => mmio_read(bar1, base + offset, dst),
            Cpu::Host(b) => b.read(offset as usize, dst),
        }
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), HalError> {
        check_range(offset, src.len() as u64, self.size)?;
        match &self.cpu {
            Cpu::Vram { bar1, offset: base } => mmio_write(bar1, base + offset, src),
            Cpu::Host(b) => b.write(offset as usize, src),
        }
    }
    fn zero(&self, offset: u64, len: u64) -> Result<(), HalError> {
        check_range(offset, len, self.size)?;
        match &self.cpu {
            Cpu::Vram { bar1, offset: base } => zero_bar(bar1, base + offset, len),
            Cpu::Host(b) => b.fill(offset as usize, len as usize, 0),
        }
    }
}

/// Zeroes `len` bytes of VRAM at BAR1 offset `at` (word writes, bytes at the edges).
fn zero_bar<M: Mmio>(bar: &M, at: u64, len: u64) -> Result<(), HalError> {
    let end = at.checked_add(len).ok_or(HalError::OutOfRange {
        offset: at,
        len,
        limit: bar.size() as u64,
    })?;
    check_range(at, len, bar.size() as u64)?;
    let head = (at.next_multiple_of(4)).min(end);
    mmio_write(bar, at, &[0u8; 4][..(head - at) as usize])?;
    let tail = (end & !3).max(head);
    let mut a = head;
    while a < tail {
        bar.write32(a as usize, 0);
        a += 4;
    }
    mmio_write(bar, tail, &[0u8; 4][..(end - tail) as usize])
}

/// A live mapping, for [`Mm::release_all`].
#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    vram: Option<u64>,
    owner: Owner,
}

/// Who frees an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The device layer (released by [`Mm::release_all_user`] when it detaches).
    User,
    /// The backend itself (GR context buffers).
    Backend,
    /// Another GPU's memory mapped here (peer mappings: no VRAM of ours behind them; released
    /// with the device layer's allocations).
    Peer,
}

/// A VRAM range nobody maps (instance blocks, RAMFC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VramBlock {
    pub addr: u64,
    pub size: u64,
}

/// The memory manager of one bare-metal GPU.
pub(crate) struct Mm<B1, B, M, C> {
    bar1: B1,
    vram: Box<VramAllocator<VRAM_BLOCKS>>,
    va: Box<VaAllocator<VA_BLOCKS>>,
    pub(crate) mapper: BareMapper<B1, B, M, C>,
    /// Where the page-table region lives in VRAM (freed never: it outlives every mapping).
    table_vram: Option<u64>,
    /// Every mapped allocation by VA.
    live: BTreeMap<u64, Live>,
    fb_end: u64,
}

impl<B1, B, M, C> core::fmt::Debug for Mm<B1, B, M, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mm")
            .field("live", &self.live.len())
            .field("vram_free", &self.vram.free_bytes())
            .finish_non_exhaustive()
    }
}

impl<B1, B, M, C> Mm<B1, B, M, C>
where
    B1: Mmio + Clone,
    B: DmaBuffer,
    M: Mmio,
    C: Clock,
{
    /// The memory manager over `layout`, with `table_bytes` of page tables in `placement`
    /// and VAs from [`va_base`, `va_base + va_size`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new<D: DmaAllocator<Buffer = B>>(
        fmt: MmuFormat,
        layout: &FbLayout,
        bar1: B1,
        dma: &D,
        invalidate: MmuInvalidate<M, C>,
        placement: TablePlacement,
        table_bytes: u64,
        va: (u64, u64),
    ) -> Result<Self, BareMetalError> {
        let mut vram = Box::new(VramAllocator::<VRAM_BLOCKS>::new(
            layout,
            FitPolicy::FirstFit,
        )?);
        let table_bytes = table_bytes.max(PAGE_4K).next_multiple_of(PAGE_4K);
        let slots = vec![TableSlot::INIT; (table_bytes / PAGE_4K) as usize];
        let (mem, table_vram) = match placement {
            TablePlacement::Vram => {
                let pa = vram.alloc(table_bytes, 2 << 20)?;
                if pa
                    .checked_add(table_bytes)
                    .is_none_or(|e| e > bar1.size() as u64)
                {
                    return Err(BareMetalError::SmallBar {
                        bar1: bar1.size() as u64,
                        needed: pa.saturating_add(table_bytes),
                    });
                }
                let t = Bar1Tables::new(bar1.clone(), pa, pa, table_bytes)?;
                (TableMem::Vram(t), Some(pa))
            }
            TablePlacement::Host => {
                let n = usize::try_from(table_bytes)
                    .map_err(|_| BareMetalError::Setup("page-table pool too large"))?;
                let buf = dma.alloc_dma(n)?;
                (TableMem::Host(DmaTables::new(buf, true)?), None)
            }
        };
        let mapper = Mapper::new(fmt, mem, slots, invalidate)?;
        let va = Box::new(VaAllocator::<VA_BLOCKS>::new(
            fmt,
            va.0,
            va.1,
            FitPolicy::FirstFit,
        )?);
        Ok(Mm {
            bar1,
            vram,
            va,
            mapper,
            table_vram,
            live: BTreeMap::new(),
            fb_end: layout.fb_size(),
        })
    }

    /// The root page directory.
    pub(crate) fn root(&self) -> PageDirectoryBase {
        self.mapper.root()
    }

    /// Hands `[va, va + span)` to GSP-RM: keeps it out of the VA allocator's reach and returns
    /// the directory tables from the root down to the one whose entry covers it (pinned, see
    /// [`Mapper::reserve_dirs`]), for `NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES`.
    pub(crate) fn reserve_server_range(
        &mut self,
        va: u64,
        span: u64,
    ) -> Result<heapless::Vec<crate::mm::ReservedLevel, 6>, BareMetalError> {
        let r = self.va.ranges();
        let (lo, hi) = (r.base(), r.base().saturating_add(r.size()));
        let overlaps = va < hi && lo < va.saturating_add(span);
        if overlaps {
            self.va
                .alloc_at(va, span)
                .map_err(|_| BareMetalError::Setup("the VA range GSP-RM manages is in use"))?;
        }
        match self.mapper.reserve_dirs(va, span) {
            Ok(l) => Ok(l),
            Err(e) => {
                if overlaps {
                    let _ = self.va.free(va);
                }
                Err(e.into())
            }
        }
    }

    /// Bytes of VRAM still free.
    pub(crate) fn vram_free(&self) -> u64 {
        self.vram.free_bytes()
    }

    /// Where the page tables are in VRAM, if they are there.
    pub(crate) fn table_vram(&self) -> Option<u64> {
        self.table_vram
    }

    /// Allocates and maps memory for the device layer (or for GR context buffers).
    pub(crate) fn alloc<D: DmaAllocator<Buffer = B>>(
        &mut self,
        dma: &D,
        req: &MemoryRequest,
        owner: Owner,
    ) -> Result<BareMemory<B1, B>, BareMetalError> {
        let size = req.size.max(1).checked_next_multiple_of(PAGE_4K).ok_or(
            BareMetalError::OutOfMemory {
                requested: req.size,
                location: req.location,
            },
        )?;
        let align = req.align.max(PAGE_4K);
        if !align.is_power_of_two() {
            return Err(BareMetalError::Setup("alignment is not a power of two"));
        }
        let va = self
            .va
            .alloc_aligned(size, align.max(page_align(size)))
            .map_err(|_| BareMetalError::OutOfMemory {
                requested: size,
                location: req.location,
            })?;
        let r = self.alloc_at(dma, req.location, size, align, va, owner);
        if r.is_err() {
            let _ = self.va.free(va);
        }
        r
    }

    fn alloc_at<D: DmaAllocator<Buffer = B>>(
        &mut self,
        dma: &D,
        location: Location,
        size: u64,
        align: u64,
        va: u64,
        owner: Owner,
    ) -> Result<BareMemory<B1, B>, BareMetalError> {
        match location {
            Location::Device => {
                let pa = self
                    .vram
                    .alloc(size, align.max(page_align(size)))
                    .map_err(|_| BareMetalError::OutOfMemory {
                        requested: size,
                        location,
                    })?;
                if pa
                    .checked_add(size)
                    .is_none_or(|e| e > self.bar1.size() as u64)
                {
                    let _ = self.vram.free(pa);
                    return Err(BareMetalError::SmallBar {
                        bar1: self.bar1.size() as u64,
                        needed: pa.saturating_add(size),
                    });
                }
                if let Err(e) = self.mapper.map(va, pa, size, &PteAttrs::vram()) {
                    let _ = self.vram.free(pa);
                    return Err(e.into());
                }
                self.live.insert(
                    va,
                    Live {
                        size,
                        vram: Some(pa),
                        owner,
                    },
                );
                Ok(BareMemory {
                    va,
                    size,
                    phys: PhysRange {
                        base: pa,
                        size,
                        location,
                    },
                    cpu: Cpu::Vram {
                        bar1: self.bar1.clone(),
                        offset: pa,
                    },
                })
            }
            Location::Host => {
                let n = usize::try_from(size).map_err(|_| BareMetalError::OutOfMemory {
                    requested: size,
                    location,
                })?;
                let buf = dma.alloc_dma(n).map_err(BareMetalError::Hal)?;
                let bus = buf.dev_addr();
                if !bus.is_multiple_of(PAGE_4K) {
                    return Err(BareMetalError::Setup(
                        "the DMA allocator returned a buffer that is not 4 KiB aligned",
                    ));
                }
                self.mapper.map(va, bus, size, &PteAttrs::sysmem())?;
                self.live.insert(
                    va,
                    Live {
                        size,
                        vram: None,
                        owner,
                    },
                );
                Ok(BareMemory {
                    va,
                    size,
                    phys: PhysRange {
                        base: bus,
                        size,
                        location,
                    },
                    cpu: Cpu::Host(buf),
                })
            }
        }
    }

    /// Unmaps and frees `mem` (the TLB is invalidated before the memory is reused).
    pub(crate) fn free(&mut self, mem: BareMemory<B1, B>) -> Result<(), BareMetalError> {
        self.release(mem.va)
    }

    fn release(&mut self, va: u64) -> Result<(), BareMetalError> {
        let Some(l) = self.live.remove(&va) else {
            // Already released by release_all_user (the device layer closing after detach).
            return Ok(());
        };
        self.mapper.unmap(va, l.size)?;
        let _ = self.va.free(va);
        if let Some(pa) = l.vram {
            let _ = self.vram.free(pa);
        }
        Ok(())
    }

    /// Unmaps and frees every allocation of the device layer still live (memory objects it
    /// still holds keep only their CPU side, which must not be used any more).
    pub(crate) fn release_all_user(&mut self) {
        let vas: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, l)| matches!(l.owner, Owner::User | Owner::Peer))
            .map(|(va, _)| *va)
            .collect();
        for va in vas {
            if let Err(e) = self.release(va) {
                log::warn!("releasing GPU VA {va:#x}: {e}");
            }
        }
    }

    /// A physically contiguous VRAM block nobody maps (instance blocks), zeroed.
    pub(crate) fn alloc_vram_block(
        &mut self,
        size: u64,
        align: u64,
    ) -> Result<VramBlock, BareMetalError> {
        let size = size.max(1).next_multiple_of(PAGE_4K);
        let addr =
            self.vram
                .alloc(size, align.max(PAGE_4K))
                .map_err(|_| BareMetalError::OutOfMemory {
                    requested: size,
                    location: Location::Device,
                })?;
        if let Err(e) = zero_bar(&self.bar1, addr, size) {
            let _ = self.vram.free(addr);
            return Err(e.into());
        }
        Ok(VramBlock { addr, size })
    }

    /// Frees a block from [`Mm::alloc_vram_block`].
    pub(crate) fn free_vram_block(&mut self, b: VramBlock) {
        let _ = self.vram.free(b.addr);
    }

    /// End of the framebuffer.
    pub(crate) fn fb_end(&self) -> u64 {
        self.fb_end
    }

    /// Bytes of BAR1.
    pub(crate) fn bar1_size(&self) -> u64 {
        self.bar1.size() as u64
    }

    /// Maps `size` bytes of memory that is not ours (another GPU's VRAM through its BAR1, its
    /// host memory) at bus/VRAM address `addr` with `attrs`, at a fresh VA.
    pub(crate) fn map_foreign(
        &mut self,
        addr: u64,
        size: u64,
        attrs: &PteAttrs,
    ) -> Result<u64, BareMetalError> {
        let size =
            size.max(1)
                .checked_next_multiple_of(PAGE_4K)
                .ok_or(BareMetalError::OutOfMemory {
                    requested: size,
                    location: Location::Device,
                })?;
        let va = self.va.alloc_aligned(size, page_align(size)).map_err(|_| {
            BareMetalError::OutOfMemory {
                requested: size,
                location: Location::Device,
            }
        })?;
        if let Err(e) = self.mapper.map(va, addr, size, attrs) {
            let _ = self.va.free(va);
            return Err(e.into());
        }
        self.live.insert(
            va,
            Live {
                size,
                vram: None,
                owner: Owner::Peer,
            },
        );
        Ok(va)
    }

    /// Removes a mapping of [`Mm::map_foreign`] (the mapper invalidates the TLB) and frees its
    /// VA. Gone already (released when the device layer detached): nothing to do.
    pub(crate) fn unmap_foreign(&mut self, va: u64) -> Result<(), BareMetalError> {
        match self.live.get(&va) {
            None => Ok(()),
            Some(l) if l.owner == Owner::Peer => self.release(va),
            Some(_) => Err(BareMetalError::Setup(
                "unmapping a peer mapping whose VA belongs to an allocation of this GPU (a stale \
                 or foreign PeerMapping)",
            )),
        }
    }
}

/// The largest page size not above `size` that the VA and PA should be aligned to (so big and
/// huge pages can be used).
fn page_align(size: u64) -> u64 {
    if size >= 2 << 20 {
        2 << 20
    } else if size >= 64 << 10 {
        64 << 10
    } else {
        PAGE_4K
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;

    /// A RAM-backed MMIO window.
    struct Ram(RefCell<Vec<u32>>);
    impl Mmio for Ram {
        fn size(&self) -> usize {
            self.0.borrow().len() * 4
        }
        fn read32(&self, o: usize) -> u32 {
            self.0.borrow().get(o / 4).copied().unwrap_or(u32::MAX)
        }
        fn write32(&self, o: usize, v: u32) {
            if let Some(w) = self.0.borrow_mut().get_mut(o / 4) {
                *w = v;
            }
        }
    }

    #[test]
    fn mmio_byte_access_round_trips_at_every_alignment() {
        let r = Ram(RefCell::new(vec![0x1111_1111; 16]));
        for start in 0..8u64 {
            for len in 0..13usize {
                let data: Vec<u8> = (0..len as u8).map(|x| x.wrapping_mul(7) ^ 0x5a).collect();
                mmio_write(&r, start, &data).unwrap();
                let mut back = vec![0u8; len];
                mmio_read(&r, start, &mut back).unwrap();
                assert_eq!(back, data, "start {start} len {len}");
            }
        }
        // Bytes around a write are kept.
        let r = Ram(RefCell::new(vec![0xaabb_ccdd; 2]));
        mmio_write(&r, 1, &[0x11, 0x22]).unwrap();
        assert_eq!(r.read32(0), 0xaa22_11dd);
        zero_bar(&r, 3, 3).unwrap();
        assert_eq!(r.read32(0), 0x0022_11dd);
        assert_eq!(r.read32(4), 0xaabb_0000);
        assert!(zero_bar(&r, 6, 8).is_err());
    }
}
