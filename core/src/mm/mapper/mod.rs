//! The page-table tree of one GPU virtual address space.
//!
//! [`Mapper`] owns a region of page-table memory ([`PageTableMemory`]), carves it into 4 KiB
//! table slots, and maps and unmaps ranges:
//!
//! * **Page sizes.** Each piece of a range gets the largest page the format supports whose size
//!   both the virtual and the physical address are aligned to and that fits in what is left
//!   (512 MiB in PD1, 2 MiB in PD0, 64 KiB in the big-page table, else 4 KiB), optionally capped
//!   by the caller.
//! * **Bad input leaves the tables unchanged.** Every call first walks the range without
//!   writing (conflicts, holes, split pages, table memory needed), then writes.
//! * **Tables.** New tables are zeroed; a table whose last valid entry is cleared is released
//!   (its parent entry cleared), but its slot is reused only after the TLB invalidate that
//!   follows, so the GPU never walks a recycled table through a stale PDE.
//! * **TLB.** Every call that changes the tables ends with a flush of the table memory and a TLB
//!   invalidate through a [`TlbInvalidate`] before it returns; [`Mapper::batch`] groups several
//!   changes under one invalidate.
//!
//! Table bookkeeping (free list, valid-entry count per table) lives in caller-provided
//! [`TableSlot`] storage, one per 4 KiB of the region, so the mapper needs no heap. Every 4 KiB
//! mapped with 4 KiB or 64 KiB pages costs 8 bytes of table memory (1/512), plus the
//! directories; a big-page table (256 bytes) gets a whole slot.

mod map;
mod slots;
mod unmap;
mod walk;

use core::fmt;

use self::map::{MapCheck, MapReq, MapWrite, Need};
use self::slots::{NIL, SLOT};
use self::unmap::{UnmapCheck, UnmapWrite};
use self::walk::Reserve;
use super::entry::{
    DirEntry, DualEntry, Pte, PteAttrs, TableAperture, TableRef, decode_dual_pde, decode_pde,
    decode_pte, encode_dual_pde, encode_pde, encode_pte,
};
use super::format::{MmuFormat, PT_4K, PT_BIG, PageSize};
use super::table_mem::PageTableMemory;
use super::tlb::{InvalidateKind, TlbInvalidate};
use super::{MmError, PAGE_4K};

/// The root of an address space: what `SET_PAGE_DIRECTORY` and the instance block take, and
/// what a TLB invalidate names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageDirectoryBase {
    /// Where the root table is.
    pub aperture: TableAperture,
    /// Its address (4 KiB aligned).
    pub addr: u64,
}

/// Bookkeeping for one 4 KiB table slot (opaque; give the mapper `[TableSlot::INIT; N]` or a
/// slice of them, one per 4 KiB of the table region).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct TableSlot(u32);

impl TableSlot {
    /// Initial value (the mapper initialises all slots itself).
    pub const INIT: TableSlot = TableSlot(0);
}

impl fmt::Debug for TableSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 >> 30 {
            0 => write!(f, "Used({})", self.0 & 0xffff),
            2 => write!(f, "Free"),
            _ => write!(f, "Retired"),
        }
    }
}

/// Cumulative counters (subtract two snapshots to measure one operation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapStats {
    /// Tables whose entries a write pass visited.
    pub tables_touched: u64,
    /// Tables allocated (and zeroed).
    pub tables_allocated: u64,
    /// Tables released.
    pub tables_freed: u64,
    /// 64-bit entry words read from table memory.
    pub words_read: u64,
    /// 64-bit entry words written (not counting zeroing new tables).
    pub words_written: u64,
    /// PTEs written (valid or cleared).
    pub ptes_written: u64,
    /// TLB invalidates issued.
    pub invalidates: u64,
}

/// One directory table on the path to a range handed to someone else to fill (see
/// [`Mapper::reserve_dirs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedLevel {
    /// The table.
    pub table: TableRef,
    /// Its size in bytes.
    pub bytes: u64,
    /// log2 of the VA one of its entries covers.
    pub page_shift: u8,
}

/// A translation found by [`Mapper::translate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Virtual address of the page.
    pub va: u64,
    /// The page's size.
    pub page: PageSize,
    /// Where it points and how.
    pub pte: Pte,
}

/// The page tables of one address space. See the [module documentation](self).
pub struct Mapper<P, S, T> {
    fmt: MmuFormat,
    mem: P,
    slots: S,
    nslots: u32,
    free_head: u32,
    free_count: u32,
    retired_head: u32,
    retired_count: u32,
    root: u32,
    tlb: T,
    pending: Option<InvalidateKind>,
    stats: MapStats,
}

impl<P, S, T> fmt::Debug for Mapper<P, S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapper")
            .field("format", &self.fmt)
            .field("slots", &self.nslots)
            .field("free", &self.free_count)
            .field("retired", &self.retired_count)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl<P, S, T> Mapper<P, S, T>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    /// A mapper with an empty address space in `mem`, bookkeeping in `slots` (one per 4 KiB of
    /// `mem`; extra table memory beyond `slots.len()` is unused) and TLB invalidates through
    /// `tlb`. Allocates and zeroes the root directory.
    pub fn new(fmt: MmuFormat, mem: P, slots: S, tlb: T) -> Result<Self, MmError> {
        if !mem.base().is_multiple_of(SLOT) {
            return Err(MmError::BadPool(
                "the table region must start on a 4 KiB boundary",
            ));
        }
        let nslots = (mem.size() / SLOT)
            .min(slots.as_ref().len() as u64)
            .min(NIL as u64) as u32;
        if nslots == 0 {
            return Err(MmError::BadPool(
                "no room for a single table (region or slot storage empty)",
            ));
        }
        // Every table address in the region must fit every PDE field that may point at it.
        let last = TableRef {
            aperture: mem.aperture(),
            addr: mem.base() + (nslots as u64 - 1) * SLOT,
        };
        encode_pde(fmt.version(), last)?;
        encode_dual_pde(fmt.version(), Some(last), Some(last))?;
        let mut m = Mapper {
            fmt,
            mem,
            slots,
            nslots,
            free_head: NIL,
            free_count: 0,
            retired_head: NIL,
            retired_count: 0,
            root: 0,
            tlb,
            pending: None,
            stats: MapStats::default(),
        };
        for i in (0..nslots).rev() {
            m.push_free(i);
        }
        m.root = m.alloc_table()?;
        Ok(m)
    }

    /// The page-table format.
    pub fn format(&self) -> MmuFormat {
        self.fmt
    }

    /// The root directory (for `SET_PAGE_DIRECTORY`, the instance block and invalidates).
    pub fn root(&self) -> PageDirectoryBase {
        PageDirectoryBase {
            aperture: self.mem.aperture(),
            addr: self.slot_addr(self.root),
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> MapStats {
        self.stats
    }

    /// Tables allocated now (the root included).
    pub fn tables_in_use(&self) -> u32 {
        self.nslots - self.free_count - self.retired_count
    }

    /// Tables that can still be allocated (after the next invalidate, released ones too).
    pub fn tables_free(&self) -> u32 {
        self.free_count + self.retired_count
    }

    /// The page-table memory.
    pub fn memory(&self) -> &P {
        &self.mem
    }

    #[cfg(test)]
    pub(crate) fn memory_mut_for_tests(&mut self) -> &mut P {
        &mut self.mem
    }

    /// The TLB invalidator.
    pub fn invalidator(&mut self) -> &mut T {
        &mut self.tlb
    }

    /// Maps `size` bytes at `va` to `pa` with `attrs`, using the largest pages alignment allows,
    /// then invalidates. Fails without changing anything if any page is already mapped.
    pub fn map(&mut self, va: u64, pa: u64, size: u64, attrs: &PteAttrs) -> Result<(), MmError> {
        self.map_with_max_page(va, pa, size, attrs, PageSize::Size512M)
    }

    /// [`Mapper::map`] with pages no larger than `max_page` (e.g. to keep ranges that will be
    /// partly unmapped later in small pages).
    pub fn map_with_max_page(
        &mut self,
        va: u64,
        pa: u64,
        size: u64,
        attrs: &PteAttrs,
        max_page: PageSize,
    ) -> Result<(), MmError> {
        let r = self.map_nosync(va, pa, size, attrs, max_page);
        self.finish(r)
    }

    /// Unmaps `size` bytes at `va`, releases tables that became empty, then invalidates (with a
    /// memory barrier, so accesses through the old translations are over when this returns).
    /// Fails without changing anything if part of the range is not mapped or a larger page
    /// would be cut.
    pub fn unmap(&mut self, va: u64, size: u64) -> Result<(), MmError> {
        let r = self.unmap_nosync(va, size);
        self.finish(r)
    }

    /// Runs several maps and unmaps with one TLB invalidate at the end (also when `f` fails
    /// part-way: changes that were made are always invalidated before this returns).
    pub fn batch<X>(
        &mut self,
        f: impl FnOnce(&mut Batch<'_, P, S, T>) -> Result<X, MmError>,
    ) -> Result<X, MmError> {
        let r = f(&mut Batch { m: self });
        self.finish(r)
    }

    /// Issues an invalidate still owed (after an earlier one failed); a no-op otherwise.
    pub fn sync(&mut self) -> Result<(), MmError> {
        if let Some(kind) = self.pending {
            self.mem.flush()?;
            self.tlb.invalidate(self.root(), kind)?;
            self.stats.invalidates += 1;
            self.pending = None;
        }
        self.recycle_retired();
        Ok(())
    }

    /// The directory tables from the root down to the one whose entries cover `span` bytes
    /// (a directory level's span, e.g. 512 MiB), allocating the missing ones, for the range
    /// `[va, va + span)`, which must be aligned and unmapped: another agent (GSP-RM, after
    /// `NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES`) fills the entry covering it. The
    /// last table is pinned (it stays allocated whatever is unmapped around it), and nothing
    /// must be mapped in the range afterwards.
    pub fn reserve_dirs(
        &mut self,
        va: u64,
        span: u64,
    ) -> Result<heapless::Vec<ReservedLevel, 6>, MmError> {
        let dirs = self.fmt.dirs();
        let depth = dirs
            .iter()
            .position(|l| l.span() == span)
            .filter(|&d| d + 1 < dirs.len())
            .ok_or(MmError::Misaligned {
                what: "reserved span (not a directory level's)",
                value: span,
                align: span,
            })?;
        if !va.is_multiple_of(span) {
            return Err(MmError::Misaligned {
                what: "reserved range",
                value: va,
                align: span,
            });
        }
        self.check_range(va, span)?;
        // New directory entries only: the TLB has nothing of them to drop (an upgrade).
        self.pending = Some(self.pending.unwrap_or(InvalidateKind::Upgrade));
        let mut v = Reserve {
            depth,
            out: heapless::Vec::new(),
        };
        self.walk(&mut v, 0, self.root, va, va + span)?;
        self.finish(Ok(v.out))
    }

    /// Looks `va` up in the tables (as the GPU's walker would, without a TLB).
    pub fn translate(&self, va: u64) -> Result<Option<Mapping>, MmError> {
        if va >= self.fmt.va_limit() {
            return Err(MmError::VaOutOfRange {
                va,
                size: 1,
                limit: self.fmt.va_limit(),
            });
        }
        let v = self.fmt.version();
        let dirs = self.fmt.dirs();
        let pd0 = dirs.len() - 1;
        let mut table = self.root;
        for (lvl, l) in dirs.iter().enumerate() {
            let idx = l.index(va);
            if lvl == pd0 {
                let (lo, hi) = self.peek_pair(table, idx, 16)?;
                return match decode_dual_pde(v, lo, hi) {
                    DualEntry::Invalid => Ok(None),
                    DualEntry::Page(pte) => Ok(Some(Mapping {
                        va: va & !(l.span() - 1),
                        page: PageSize::Size2M,
                        pte,
                    })),
                    DualEntry::Tables { big, small } => {
                        let ea = self.entry_gpu_addr(table, idx, 16);
                        if let Some(b) = big {
                            let bs = self.slot_of(b, ea, lo)?;
                            let raw = self.peek_pair(bs, PT_BIG.index(va), 8)?.0;
                            if let Some(pte) = decode_pte(v, raw) {
                                return Ok(Some(Mapping {
                                    va: va & !(PageSize::Size64K.bytes() - 1),
                                    page: PageSize::Size64K,
                                    pte,
                                }));
                            }
                        }
                        if let Some(s) = small {
                            let ss = self.slot_of(s, ea, hi)?;
                            let raw = self.peek_pair(ss, PT_4K.index(va), 8)?.0;
                            if let Some(pte) = decode_pte(v, raw) {
                                return Ok(Some(Mapping {
                                    va: va & !(PAGE_4K - 1),
                                    page: PageSize::Size4K,
                                    pte,
                                }));
                            }
                        }
                        Ok(None)
                    }
                };
            }
            let raw = self.peek_pair(table, idx, 8)?.0;
            match decode_pde(v, raw) {
                DirEntry::Invalid => return Ok(None),
                DirEntry::Page(pte) => {
                    let page = self.fmt.dir_page(lvl).ok_or(MmError::CorruptTable {
                        entry_addr: self.entry_gpu_addr(table, idx, 8),
                        raw,
                    })?;
                    return Ok(Some(Mapping {
                        va: va & !(l.span() - 1),
                        page,
                        pte,
                    }));
                }
                DirEntry::Table(t) => {
                    table = self.slot_of(t, self.entry_gpu_addr(table, idx, 8), raw)?;
                }
            }
        }
        Ok(None)
    }

    // -----------------------------------------------------------------------------------------
    // Map and unmap without the final invalidate.
    // -----------------------------------------------------------------------------------------

    fn finish<X>(&mut self, r: Result<X, MmError>) -> Result<X, MmError> {
        // Invalidate whatever was changed, even if the operation failed later on.
        let s = self.sync();
        match (r, s) {
            (Ok(x), Ok(())) => Ok(x),
            (_, Err(e)) => Err(e),
            (Err(e), Ok(())) => Err(e),
        }
    }

    fn check_range(&self, va: u64, size: u64) -> Result<u64, MmError> {
        if size == 0 {
            return Err(MmError::ZeroSize);
        }
        for (what, value) in [("virtual address", va), ("size", size)] {
            if !value.is_multiple_of(PAGE_4K) {
                return Err(MmError::Misaligned {
                    what,
                    value,
                    align: PAGE_4K,
                });
            }
        }
        let limit = self.fmt.va_limit();
        match va.checked_add(size) {
            Some(end) if end <= limit => Ok(end),
            _ => Err(MmError::VaOutOfRange { va, size, limit }),
        }
    }

    fn map_nosync(
        &mut self,
        va: u64,
        pa: u64,
        size: u64,
        attrs: &PteAttrs,
        max_page: PageSize,
    ) -> Result<(), MmError> {
        let end = self.check_range(va, size)?;
        if !pa.is_multiple_of(PAGE_4K) {
            return Err(MmError::Misaligned {
                what: "physical address",
                value: pa,
                align: PAGE_4K,
            });
        }
        let last_pa = pa
            .checked_add(size - PAGE_4K)
            .ok_or(MmError::AddressTooWide { addr: pa, bits: 64 })?;
        // The address fields are checked on the highest page; attributes on any.
        let v = self.fmt.version();
        encode_pte(v, last_pa, attrs)?;
        let req = MapReq {
            delta: pa.wrapping_sub(va),
            attrs: *attrs,
            max_page,
        };
        let need = Need {
            n: 0,
            limit: (self.free_count + self.retired_count) as u64,
        };
        let mut check = MapCheck { req: &req, need };
        self.walk(&mut check, 0, Some(self.root), va, end)?;
        let needed = check.need.n as u32;
        if needed > self.free_count && self.retired_count > 0 {
            // Released tables become reusable once the GPU has forgotten them.
            self.sync()?;
        }
        if needed > self.free_count {
            return Err(MmError::OutOfTableMemory {
                needed,
                free: self.free_count,
            });
        }
        self.pending = Some(match self.pending {
            Some(InvalidateKind::Downgrade) => InvalidateKind::Downgrade,
            _ => InvalidateKind::Upgrade,
        });
        self.walk(&mut MapWrite { req: &req }, 0, self.root, va, end)
    }

    fn unmap_nosync(&mut self, va: u64, size: u64) -> Result<(), MmError> {
        let end = self.check_range(va, size)?;
        self.walk(&mut UnmapCheck, 0, self.root, va, end)?;
        self.pending = Some(InvalidateKind::Downgrade);
        self.walk(&mut UnmapWrite, 0, self.root, va, end)
    }
}

/// Maps and unmaps whose TLB invalidate is deferred to the end of [`Mapper::batch`].
pub struct Batch<'m, P, S, T> {
    m: &'m mut Mapper<P, S, T>,
}

impl<P, S, T> fmt::Debug for Batch<'_, P, S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch").finish_non_exhaustive()
    }
}

impl<P, S, T> Batch<'_, P, S, T>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    /// [`Mapper::map`] without its own invalidate.
    pub fn map(&mut self, va: u64, pa: u64, size: u64, attrs: &PteAttrs) -> Result<(), MmError> {
        self.m.map_nosync(va, pa, size, attrs, PageSize::Size512M)
    }

    /// [`Mapper::map_with_max_page`] without its own invalidate.
    pub fn map_with_max_page(
        &mut self,
        va: u64,
        pa: u64,
        size: u64,
        attrs: &PteAttrs,
        max_page: PageSize,
    ) -> Result<(), MmError> {
        self.m.map_nosync(va, pa, size, attrs, max_page)
    }

    /// [`Mapper::unmap`] without its own invalidate.
    pub fn unmap(&mut self, va: u64, size: u64) -> Result<(), MmError> {
        self.m.unmap_nosync(va, size)
    }

    /// [`Mapper::translate`].
    pub fn translate(&self, va: u64) -> Result<Option<Mapping>, MmError> {
        self.m.translate(va)
    }
}
