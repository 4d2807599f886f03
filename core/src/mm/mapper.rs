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

use core::fmt;

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

const STATE_USED: u32 = 0;
const STATE_FREE: u32 = 2;
const STATE_RETIRED: u32 = 3;
const NIL: u32 = 0x3fff_ffff;
const SLOT: u64 = 4096;

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

#[derive(Clone, Copy)]
struct MapReq {
    /// pa - va (wrapping).
    delta: u64,
    attrs: PteAttrs,
    max_page: PageSize,
}

impl MapReq {
    fn pa(&self, va: u64) -> u64 {
        va.wrapping_add(self.delta)
    }
}

type R = core::ops::Range<u64>;

/// Tables a map would allocate, counted during the check pass, which stops as soon as the pool
/// cannot hold them (so a huge bad request costs O(pool), not O(range)).
struct Need {
    n: u64,
    limit: u64,
}

impl Need {
    fn add(&mut self, k: u64) -> Result<(), MmError> {
        self.n = self.n.saturating_add(k);
        if self.n > self.limit {
            return Err(MmError::OutOfTableMemory {
                needed: self.n.min(u32::MAX as u64) as u32,
                free: self.limit.min(u32::MAX as u64) as u32,
            });
        }
        Ok(())
    }
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
        let v = self.fmt.version();
        let mut out = heapless::Vec::new();
        let mut table = self.root;
        // New directory entries only: the TLB has nothing of them to drop (an upgrade).
        self.pending = Some(self.pending.unwrap_or(InvalidateKind::Upgrade));
        for (lvl, l) in dirs.iter().enumerate().take(depth + 1) {
            let _ = out.push(ReservedLevel {
                table: self.table_ref(table),
                bytes: l.table_bytes(),
                page_shift: l.lo,
            });
            let idx = l.index(va);
            if lvl == depth {
                if !matches!(self.read_dir(table, idx, lvl)?, DirEntry::Invalid) {
                    return Err(MmError::AlreadyMapped { va });
                }
                // Pinned: an unmap elsewhere in this table must not release it.
                self.count_add(table, 1);
                break;
            }
            table = match self.read_dir(table, idx, lvl)? {
                DirEntry::Table(t) => self.slot_of(t, self.entry_gpu_addr(table, idx, 8), 0)?,
                DirEntry::Invalid => {
                    let c = self.alloc_table()?;
                    let pde = encode_pde(v, self.table_ref(c))?;
                    self.write_pair(table, idx, 8, pde, None)?;
                    self.count_add(table, 1);
                    c
                }
                DirEntry::Page(_) => return Err(MmError::AlreadyMapped { va }),
            };
        }
        self.finish(Ok(out))
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
        let mut need = Need {
            n: 0,
            limit: (self.free_count + self.retired_count) as u64,
        };
        self.check_map(0, Some(self.root), va, end, &req, &mut need)?;
        let needed = need.n as u32;
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
        self.apply_map(0, self.root, va, end, &req)
    }

    fn unmap_nosync(&mut self, va: u64, size: u64) -> Result<(), MmError> {
        let end = self.check_range(va, size)?;
        self.check_unmap(0, self.root, va, end)?;
        self.pending = Some(InvalidateKind::Downgrade);
        self.apply_unmap(0, self.root, va, end)
    }

    /// Whether a page of size `p` can map `[va, ..)` inside `end`.
    fn page_fits(&self, p: PageSize, va: u64, end: u64, req: &MapReq) -> bool {
        let b = p.bytes();
        self.fmt.supports(p)
            && p <= req.max_page
            && va.is_multiple_of(b)
            && req.pa(va).is_multiple_of(b)
            && end - va >= b
    }

    /// Splits `[s, e)` inside one 2 MiB entry into 4 KiB head, 64 KiB middle, 4 KiB tail.
    fn split_pd0(&self, s: u64, e: u64, req: &MapReq) -> (R, R, R) {
        let big = PageSize::Size64K.bytes();
        let big_ok = req.max_page >= PageSize::Size64K && req.delta.is_multiple_of(big);
        let a = s.next_multiple_of(big);
        let b = e & !(big - 1);
        if !big_ok || a >= b {
            (s..e, e..e, e..e)
        } else {
            (s..a, a..b, b..e)
        }
    }

    /// Counts the tables mapping `[va, end)` below `table` would allocate (`None`: the table
    /// itself does not exist yet), and fails if anything there is mapped.
    fn check_map(
        &mut self,
        lvl: usize,
        table: Option<u32>,
        va: u64,
        end: u64,
        req: &MapReq,
        need: &mut Need,
    ) -> Result<(), MmError> {
        let dirs = self.fmt.dirs();
        let pd0 = dirs.len() - 1;
        let Some(l) = dirs.get(lvl).copied() else {
            return Ok(());
        };
        let mut cur = va;
        while cur < end {
            let base = cur & !(l.span() - 1);
            let e_end = end.min(base + l.span());
            let idx = l.index(cur);
            if lvl == pd0 {
                let entry = match table {
                    Some(t) => self.read_dual(t, idx)?,
                    None => DualEntry::Invalid,
                };
                if self.page_fits(PageSize::Size2M, cur, e_end, req) {
                    if entry != DualEntry::Invalid {
                        return Err(MmError::AlreadyMapped { va: cur });
                    }
                } else {
                    let n = match entry {
                        DualEntry::Page(_) => return Err(MmError::AlreadyMapped { va: cur }),
                        DualEntry::Invalid => {
                            let (pre, mid, post) = self.split_pd0(cur, e_end, req);
                            u64::from(!mid.is_empty())
                                + u64::from(!pre.is_empty() || !post.is_empty())
                        }
                        DualEntry::Tables { big, small } => {
                            let ea = self.entry_gpu_addr(table.unwrap_or(0), idx, 16);
                            let b = big.map(|b| self.slot_of(b, ea, 0)).transpose()?;
                            let s = small.map(|s| self.slot_of(s, ea, 0)).transpose()?;
                            self.check_map_pts(b, s, cur, e_end, req)?
                        }
                    };
                    need.add(n)?;
                }
            } else {
                let entry = match table {
                    Some(t) => self.read_dir(t, idx, lvl)?,
                    None => DirEntry::Invalid,
                };
                let huge = self
                    .fmt
                    .dir_page(lvl)
                    .is_some_and(|p| self.page_fits(p, cur, e_end, req));
                if huge {
                    if entry != DirEntry::Invalid {
                        return Err(MmError::AlreadyMapped { va: cur });
                    }
                } else {
                    match entry {
                        DirEntry::Page(_) => return Err(MmError::AlreadyMapped { va: cur }),
                        DirEntry::Table(t) => {
                            let ea = self.entry_gpu_addr(table.unwrap_or(0), idx, 8);
                            let child = self.slot_of(t, ea, 0)?;
                            self.check_map(lvl + 1, Some(child), cur, e_end, req, need)?;
                        }
                        DirEntry::Invalid => {
                            need.add(1)?;
                            self.check_map(lvl + 1, None, cur, e_end, req, need)?;
                        }
                    }
                }
            }
            cur = e_end;
        }
        Ok(())
    }

    fn check_map_pts(
        &mut self,
        big: Option<u32>,
        small: Option<u32>,
        s: u64,
        e: u64,
        req: &MapReq,
    ) -> Result<u64, MmError> {
        let (pre, mid, post) = self.split_pd0(s, e, req);
        let mut needed = 0;
        if !mid.is_empty() {
            match big {
                None => needed += 1,
                Some(b) => self.expect_unmapped(b, PT_BIG.index(mid.start), mid.clone(), 16, s)?,
            }
            if let Some(sm) = small {
                self.expect_unmapped(sm, PT_4K.index(mid.start), mid, 12, s)?;
            }
        }
        if !pre.is_empty() || !post.is_empty() {
            match small {
                None => needed += 1,
                Some(sm) => {
                    for r in [pre.clone(), post.clone()] {
                        if !r.is_empty() {
                            self.expect_unmapped(sm, PT_4K.index(r.start), r, 12, s)?;
                        }
                    }
                }
            }
            if let Some(b) = big {
                for r in [pre, post] {
                    if !r.is_empty() {
                        let blocks = (r.start & !0xffff)..r.end;
                        self.expect_unmapped(b, PT_BIG.index(blocks.start), blocks, 16, r.start)?;
                    }
                }
            }
        }
        Ok(needed)
    }

    /// Fails if any PTE of the page table `slot` covering `r` (pages of 1 << `shift`, `r.start`
    /// aligned to that, starting at entry `first`) is valid; the error names the first mapped
    /// address at or after `from`.
    fn expect_unmapped(
        &mut self,
        slot: u32,
        first: u64,
        r: R,
        shift: u32,
        from: u64,
    ) -> Result<(), MmError> {
        let n = (r.end - r.start).div_ceil(1 << shift);
        for i in 0..n {
            let raw = self.read_word(slot, (first + i) * 8)?;
            if raw & 1 != 0 {
                return Err(MmError::AlreadyMapped {
                    va: (r.start + (i << shift)).max(from),
                });
            }
        }
        Ok(())
    }

    fn apply_map(
        &mut self,
        lvl: usize,
        table: u32,
        va: u64,
        end: u64,
        req: &MapReq,
    ) -> Result<(), MmError> {
        let v = self.fmt.version();
        let dirs = self.fmt.dirs();
        let pd0 = dirs.len() - 1;
        let Some(l) = dirs.get(lvl).copied() else {
            return Ok(());
        };
        self.stats.tables_touched += 1;
        let mut cur = va;
        while cur < end {
            let base = cur & !(l.span() - 1);
            let e_end = end.min(base + l.span());
            let idx = l.index(cur);
            if lvl == pd0 {
                if self.page_fits(PageSize::Size2M, cur, e_end, req) {
                    let pte = encode_pte(v, req.pa(cur), &req.attrs)?;
                    self.write_pair(table, idx, 16, pte, Some(0))?;
                    self.stats.ptes_written += 1;
                    self.count_add(table, 1);
                } else {
                    self.apply_map_pd0(table, idx, cur, e_end, req)?;
                }
            } else {
                let huge = self
                    .fmt
                    .dir_page(lvl)
                    .is_some_and(|p| self.page_fits(p, cur, e_end, req));
                if huge {
                    let pte = encode_pte(v, req.pa(cur), &req.attrs)?;
                    self.write_pair(table, idx, 8, pte, None)?;
                    self.stats.ptes_written += 1;
                    self.count_add(table, 1);
                } else {
                    let child = match self.read_dir(table, idx, lvl)? {
                        DirEntry::Table(t) => {
                            self.slot_of(t, self.entry_gpu_addr(table, idx, 8), 0)?
                        }
                        DirEntry::Invalid => {
                            let c = self.alloc_table()?;
                            let pde = encode_pde(v, self.table_ref(c))?;
                            self.write_pair(table, idx, 8, pde, None)?;
                            self.count_add(table, 1);
                            c
                        }
                        DirEntry::Page(_) => return Err(MmError::AlreadyMapped { va: cur }),
                    };
                    self.apply_map(lvl + 1, child, cur, e_end, req)?;
                }
            }
            cur = e_end;
        }
        Ok(())
    }

    fn apply_map_pd0(
        &mut self,
        table: u32,
        idx: u64,
        s: u64,
        e: u64,
        req: &MapReq,
    ) -> Result<(), MmError> {
        let v = self.fmt.version();
        let entry = self.read_dual(table, idx)?;
        let ea = self.entry_gpu_addr(table, idx, 16);
        let (mut big, mut small) = match entry {
            DualEntry::Invalid => (None, None),
            DualEntry::Tables { big, small } => (
                big.map(|b| self.slot_of(b, ea, 0)).transpose()?,
                small.map(|s| self.slot_of(s, ea, 0)).transpose()?,
            ),
            DualEntry::Page(_) => return Err(MmError::AlreadyMapped { va: s }),
        };
        let (pre, mid, post) = self.split_pd0(s, e, req);
        let mut changed = false;
        if !mid.is_empty() && big.is_none() {
            big = Some(self.alloc_table()?);
            changed = true;
        }
        if (!pre.is_empty() || !post.is_empty()) && small.is_none() {
            small = Some(self.alloc_table()?);
            changed = true;
        }
        if changed {
            let (lo, hi) = encode_dual_pde(
                v,
                big.map(|b| self.table_ref(b)),
                small.map(|s| self.table_ref(s)),
            )?;
            self.write_pair(table, idx, 16, lo, Some(hi))?;
            if entry == DualEntry::Invalid {
                self.count_add(table, 1);
            }
        }
        if let Some(b) = big.filter(|_| !mid.is_empty()) {
            self.stats.tables_touched += 1;
            self.write_ptes(b, mid, PageSize::Size64K, req)?;
        }
        if let Some(sm) = small.filter(|_| !pre.is_empty() || !post.is_empty()) {
            self.stats.tables_touched += 1;
            self.write_ptes(sm, pre, PageSize::Size4K, req)?;
            self.write_ptes(sm, post, PageSize::Size4K, req)?;
        }
        Ok(())
    }

    fn write_ptes(&mut self, slot: u32, r: R, page: PageSize, req: &MapReq) -> Result<(), MmError> {
        let v = self.fmt.version();
        let lvl = if page == PageSize::Size64K {
            PT_BIG
        } else {
            PT_4K
        };
        let mut cur = r.start;
        while cur < r.end {
            let pte = encode_pte(v, req.pa(cur), &req.attrs)?;
            self.write_word(slot, lvl.index(cur) * 8, pte)?;
            self.stats.ptes_written += 1;
            self.count_add(slot, 1);
            cur += page.bytes();
        }
        Ok(())
    }

    /// Fails unless every page in `[va, end)` below `table` is mapped by a page lying wholly
    /// inside the range.
    fn check_unmap(&mut self, lvl: usize, table: u32, va: u64, end: u64) -> Result<(), MmError> {
        let dirs = self.fmt.dirs();
        let pd0 = dirs.len() - 1;
        let Some(l) = dirs.get(lvl).copied() else {
            return Ok(());
        };
        let mut cur = va;
        while cur < end {
            let base = cur & !(l.span() - 1);
            let e_end = end.min(base + l.span());
            let idx = l.index(cur);
            let whole = cur == base && e_end == base + l.span();
            if lvl == pd0 {
                match self.read_dual(table, idx)? {
                    DualEntry::Invalid => return Err(MmError::NotMapped { va: cur }),
                    DualEntry::Page(_) if !whole => {
                        return Err(MmError::SplitsPage {
                            page_va: base,
                            page_size: l.span(),
                        });
                    }
                    DualEntry::Page(_) => {}
                    DualEntry::Tables { big, small } => {
                        let ea = self.entry_gpu_addr(table, idx, 16);
                        let b = big.map(|b| self.slot_of(b, ea, 0)).transpose()?;
                        let s = small.map(|s| self.slot_of(s, ea, 0)).transpose()?;
                        self.check_unmap_pts(b, s, cur, e_end)?;
                    }
                }
            } else {
                match self.read_dir(table, idx, lvl)? {
                    DirEntry::Invalid => return Err(MmError::NotMapped { va: cur }),
                    DirEntry::Page(_) if !whole => {
                        return Err(MmError::SplitsPage {
                            page_va: base,
                            page_size: l.span(),
                        });
                    }
                    DirEntry::Page(_) => {}
                    DirEntry::Table(t) => {
                        let child = self.slot_of(t, self.entry_gpu_addr(table, idx, 8), 0)?;
                        self.check_unmap(lvl + 1, child, cur, e_end)?;
                    }
                }
            }
            cur = e_end;
        }
        Ok(())
    }

    fn check_unmap_pts(
        &mut self,
        big: Option<u32>,
        small: Option<u32>,
        s: u64,
        e: u64,
    ) -> Result<(), MmError> {
        let bb = PageSize::Size64K.bytes();
        let mut blk = s & !(bb - 1);
        while blk < e {
            let (bs, be) = (s.max(blk), e.min(blk + bb));
            let big_valid = match big {
                Some(b) => self.read_word(b, PT_BIG.index(blk) * 8)? & 1 != 0,
                None => false,
            };
            if big_valid {
                if bs != blk || be != blk + bb {
                    return Err(MmError::SplitsPage {
                        page_va: blk,
                        page_size: bb,
                    });
                }
            } else {
                let mut p = bs;
                while p < be {
                    let mapped = match small {
                        Some(sm) => self.read_word(sm, PT_4K.index(p) * 8)? & 1 != 0,
                        None => false,
                    };
                    if !mapped {
                        return Err(MmError::NotMapped { va: p });
                    }
                    p += PAGE_4K;
                }
            }
            blk += bb;
        }
        Ok(())
    }

    fn apply_unmap(&mut self, lvl: usize, table: u32, va: u64, end: u64) -> Result<(), MmError> {
        let dirs = self.fmt.dirs();
        let pd0 = dirs.len() - 1;
        let Some(l) = dirs.get(lvl).copied() else {
            return Ok(());
        };
        self.stats.tables_touched += 1;
        let mut cur = va;
        while cur < end {
            let base = cur & !(l.span() - 1);
            let e_end = end.min(base + l.span());
            let idx = l.index(cur);
            if lvl == pd0 {
                match self.read_dual(table, idx)? {
                    DualEntry::Invalid => return Err(MmError::NotMapped { va: cur }),
                    DualEntry::Page(_) => {
                        self.write_pair(table, idx, 16, 0, Some(0))?;
                        self.stats.ptes_written += 1;
                        self.count_add(table, -1);
                    }
                    DualEntry::Tables { big, small } => {
                        let ea = self.entry_gpu_addr(table, idx, 16);
                        let b = big.map(|b| self.slot_of(b, ea, 0)).transpose()?;
                        let s = small.map(|s| self.slot_of(s, ea, 0)).transpose()?;
                        self.unmap_pts(table, idx, b, s, cur, e_end)?;
                    }
                }
            } else {
                match self.read_dir(table, idx, lvl)? {
                    DirEntry::Invalid => return Err(MmError::NotMapped { va: cur }),
                    DirEntry::Page(_) => {
                        self.write_pair(table, idx, 8, 0, None)?;
                        self.stats.ptes_written += 1;
                        self.count_add(table, -1);
                    }
                    DirEntry::Table(t) => {
                        let child = self.slot_of(t, self.entry_gpu_addr(table, idx, 8), 0)?;
                        self.apply_unmap(lvl + 1, child, cur, e_end)?;
                        if self.count(child) == 0 {
                            self.write_pair(table, idx, 8, 0, None)?;
                            self.count_add(table, -1);
                            self.retire(child);
                        }
                    }
                }
            }
            cur = e_end;
        }
        Ok(())
    }

    fn unmap_pts(
        &mut self,
        table: u32,
        idx: u64,
        big: Option<u32>,
        small: Option<u32>,
        s: u64,
        e: u64,
    ) -> Result<(), MmError> {
        let bb = PageSize::Size64K.bytes();
        self.stats.tables_touched += u64::from(big.is_some()) + u64::from(small.is_some());
        let mut blk = s & !(bb - 1);
        while blk < e {
            let (bs, be) = (s.max(blk), e.min(blk + bb));
            let big_valid = match big {
                Some(b) => self.read_word(b, PT_BIG.index(blk) * 8)? & 1 != 0,
                None => false,
            };
            match (big, big_valid) {
                (Some(b), true) => {
                    self.write_word(b, PT_BIG.index(blk) * 8, 0)?;
                    self.stats.ptes_written += 1;
                    self.count_add(b, -1);
                }
                _ => {
                    if let Some(sm) = small {
                        let mut p = bs;
                        while p < be {
                            let off = PT_4K.index(p) * 8;
                            if self.read_word(sm, off)? & 1 != 0 {
                                self.write_word(sm, off, 0)?;
                                self.stats.ptes_written += 1;
                                self.count_add(sm, -1);
                            }
                            p += PAGE_4K;
                        }
                    }
                }
            }
            blk += bb;
        }
        let new_big = big.filter(|&b| self.count(b) != 0);
        let new_small = small.filter(|&sm| self.count(sm) != 0);
        if new_big != big || new_small != small {
            let (lo, hi) = encode_dual_pde(
                self.fmt.version(),
                new_big.map(|b| self.table_ref(b)),
                new_small.map(|sm| self.table_ref(sm)),
            )?;
            self.write_pair(table, idx, 16, lo, Some(hi))?;
            if new_big.is_none() && new_small.is_none() {
                self.count_add(table, -1);
            }
            for t in [big, small].into_iter().flatten() {
                if self.count(t) == 0 {
                    self.retire(t);
                }
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Table slots and entry access.
    // -----------------------------------------------------------------------------------------

    fn slot_addr(&self, slot: u32) -> u64 {
        self.mem.base() + slot as u64 * SLOT
    }

    fn table_ref(&self, slot: u32) -> TableRef {
        TableRef {
            aperture: self.mem.aperture(),
            addr: self.slot_addr(slot),
        }
    }

    fn entry_gpu_addr(&self, slot: u32, idx: u64, entry_size: u64) -> u64 {
        self.slot_addr(slot) + idx * entry_size
    }

    /// The slot a PDE read back from memory points at; anything that is not one of our live
    /// tables is corruption.
    fn slot_of(&self, t: TableRef, entry_addr: u64, raw: u64) -> Result<u32, MmError> {
        let corrupt = MmError::CorruptTable { entry_addr, raw };
        if t.aperture != self.mem.aperture() {
            return Err(corrupt);
        }
        let off = t.addr.checked_sub(self.mem.base()).ok_or(corrupt)?;
        if !off.is_multiple_of(SLOT) || off / SLOT >= self.nslots as u64 {
            return Err(corrupt);
        }
        let slot = (off / SLOT) as u32;
        if self.slot_raw(slot) >> 30 != STATE_USED {
            return Err(corrupt);
        }
        Ok(slot)
    }

    fn slot_raw(&self, slot: u32) -> u32 {
        self.slots
            .as_ref()
            .get(slot as usize)
            .map_or(STATE_FREE << 30 | NIL, |s| s.0)
    }

    fn set_slot(&mut self, slot: u32, v: u32) {
        if let Some(s) = self.slots.as_mut().get_mut(slot as usize) {
            s.0 = v;
        }
    }

    fn push_free(&mut self, slot: u32) {
        self.set_slot(slot, STATE_FREE << 30 | self.free_head);
        self.free_head = slot;
        self.free_count += 1;
    }

    fn alloc_table(&mut self) -> Result<u32, MmError> {
        let slot = self.free_head;
        if slot == NIL {
            return Err(MmError::OutOfTableMemory { needed: 1, free: 0 });
        }
        self.mem.zero(slot as u64 * SLOT, SLOT)?;
        self.free_head = self.slot_raw(slot) & NIL;
        self.free_count -= 1;
        self.set_slot(slot, STATE_USED << 30);
        self.stats.tables_allocated += 1;
        Ok(slot)
    }

    fn retire(&mut self, slot: u32) {
        self.set_slot(slot, STATE_RETIRED << 30 | self.retired_head);
        self.retired_head = slot;
        self.retired_count += 1;
        self.stats.tables_freed += 1;
    }

    fn recycle_retired(&mut self) {
        while self.retired_head != NIL {
            let slot = self.retired_head;
            self.retired_head = self.slot_raw(slot) & NIL;
            self.retired_count -= 1;
            self.push_free(slot);
        }
    }

    fn count(&self, slot: u32) -> u32 {
        self.slot_raw(slot) & 0xffff
    }

    fn count_add(&mut self, slot: u32, delta: i32) {
        let c = self.count(slot).saturating_add_signed(delta) & 0xffff;
        self.set_slot(slot, STATE_USED << 30 | c);
    }

    fn read_word(&mut self, slot: u32, off: u64) -> Result<u64, MmError> {
        self.stats.words_read += 1;
        Ok(self.mem.read_u64(slot as u64 * SLOT + off)?)
    }

    fn write_word(&mut self, slot: u32, off: u64, value: u64) -> Result<(), MmError> {
        self.stats.words_written += 1;
        Ok(self.mem.write_u64(slot as u64 * SLOT + off, value)?)
    }

    /// Reads entry `idx` (8 or 16 bytes) without counting (for `translate`).
    fn peek_pair(&self, slot: u32, idx: u64, entry_size: u64) -> Result<(u64, u64), MmError> {
        let off = slot as u64 * SLOT + idx * entry_size;
        let lo = self.mem.read_u64(off)?;
        let hi = if entry_size == 16 {
            self.mem.read_u64(off + 8)?
        } else {
            0
        };
        Ok((lo, hi))
    }

    fn read_dir(&mut self, slot: u32, idx: u64, lvl: usize) -> Result<DirEntry, MmError> {
        let raw = self.read_word(slot, idx * 8)?;
        let e = decode_pde(self.fmt.version(), raw);
        if matches!(e, DirEntry::Page(_)) && self.fmt.dir_page(lvl).is_none() {
            return Err(MmError::CorruptTable {
                entry_addr: self.entry_gpu_addr(slot, idx, 8),
                raw,
            });
        }
        Ok(e)
    }

    fn read_dual(&mut self, slot: u32, idx: u64) -> Result<DualEntry, MmError> {
        let lo = self.read_word(slot, idx * 16)?;
        let hi = self.read_word(slot, idx * 16 + 8)?;
        if lo & 1 != 0 && hi != 0 {
            // A 2 MiB PTE leaves the high half zero.
            return Err(MmError::CorruptTable {
                entry_addr: self.entry_gpu_addr(slot, idx, 16),
                raw: lo,
            });
        }
        Ok(decode_dual_pde(self.fmt.version(), lo, hi))
    }

    /// Writes entry `idx`: the low word, and for a dual entry the high word. The word holding
    /// the valid/aperture bits the walker looks at first is written last.
    fn write_pair(
        &mut self,
        slot: u32,
        idx: u64,
        entry_size: u64,
        lo: u64,
        hi: Option<u64>,
    ) -> Result<(), MmError> {
        let off = idx * entry_size;
        if let Some(hi) = hi {
            self.write_word(slot, off + 8, hi)?;
        }
        self.write_word(slot, off, lo)
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
