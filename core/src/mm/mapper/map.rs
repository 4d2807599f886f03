//! Mapping: the check pass ([`MapCheck`]) and the write pass ([`MapWrite`]) over the one
//! [walk](super::walk), and the page tables under a dual PD0 entry.

use super::super::MmError;
use super::super::entry::{DirEntry, DualEntry, PteAttrs, encode_dual_pde, encode_pde, encode_pte};
use super::super::format::{PT_4K, PT_BIG, PageSize};
use super::super::table_mem::PageTableMemory;
use super::super::tlb::TlbInvalidate;
use super::walk::{At, Visit};
use super::{Mapper, TableSlot};

type R = core::ops::Range<u64>;

/// What a map asks for, page by page.
#[derive(Clone, Copy)]
pub(super) struct MapReq {
    /// pa - va (wrapping).
    pub delta: u64,
    pub attrs: PteAttrs,
    pub max_page: PageSize,
}

impl MapReq {
    fn pa(&self, va: u64) -> u64 {
        va.wrapping_add(self.delta)
    }
}

/// Tables a map would allocate, counted during the check pass, which stops as soon as the pool
/// cannot hold them (so a huge bad request costs O(pool), not O(range)).
pub(super) struct Need {
    pub n: u64,
    pub limit: u64,
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

/// The check pass of a map: fails if anything in the range is mapped, and counts the tables
/// the write pass will allocate (`Table` is `None` below a directory entry not there yet).
pub(super) struct MapCheck<'a> {
    pub req: &'a MapReq,
    pub need: Need,
}

impl<P, S, T> Visit<P, S, T> for MapCheck<'_>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    type Table = Option<u32>;

    fn dir(
        &mut self,
        m: &mut Mapper<P, S, T>,
        table: Option<u32>,
        at: At,
    ) -> Result<Option<Option<u32>>, MmError> {
        let entry = match table {
            Some(t) => m.read_dir(t, at.idx, at.lvl)?,
            None => DirEntry::Invalid,
        };
        let huge = m
            .fmt
            .dir_page(at.lvl)
            .is_some_and(|p| m.page_fits(p, at.va, at.end, self.req));
        if huge {
            if entry != DirEntry::Invalid {
                return Err(MmError::AlreadyMapped { va: at.va });
            }
            return Ok(None);
        }
        match entry {
            DirEntry::Page(_) => Err(MmError::AlreadyMapped { va: at.va }),
            DirEntry::Table(t) => {
                let ea = m.entry_gpu_addr(table.unwrap_or(0), at.idx, 8);
                Ok(Some(Some(m.slot_of(t, ea, 0)?)))
            }
            DirEntry::Invalid => {
                self.need.add(1)?;
                Ok(Some(None))
            }
        }
    }

    fn pd0(&mut self, m: &mut Mapper<P, S, T>, table: Option<u32>, at: At) -> Result<(), MmError> {
        let entry = match table {
            Some(t) => m.read_dual(t, at.idx)?,
            None => DualEntry::Invalid,
        };
        if m.page_fits(PageSize::Size2M, at.va, at.end, self.req) {
            if entry != DualEntry::Invalid {
                return Err(MmError::AlreadyMapped { va: at.va });
            }
            return Ok(());
        }
        let n = match entry {
            DualEntry::Page(_) => return Err(MmError::AlreadyMapped { va: at.va }),
            DualEntry::Invalid => {
                let (pre, mid, post) = m.split_pd0(at.va, at.end, self.req);
                u64::from(!mid.is_empty()) + u64::from(!pre.is_empty() || !post.is_empty())
            }
            DualEntry::Tables { big, small } => {
                let ea = m.entry_gpu_addr(table.unwrap_or(0), at.idx, 16);
                let b = big.map(|b| m.slot_of(b, ea, 0)).transpose()?;
                let s = small.map(|s| m.slot_of(s, ea, 0)).transpose()?;
                m.check_map_pts(b, s, at.va, at.end, self.req)?
            }
        };
        self.need.add(n)
    }
}

/// The write pass of a map (after [`MapCheck`] passed): allocates tables and writes PTEs.
pub(super) struct MapWrite<'a> {
    pub req: &'a MapReq,
}

impl<P, S, T> Visit<P, S, T> for MapWrite<'_>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    type Table = u32;

    fn enter(&mut self, m: &mut Mapper<P, S, T>, _table: u32) {
        m.stats.tables_touched += 1;
    }

    fn dir(&mut self, m: &mut Mapper<P, S, T>, table: u32, at: At) -> Result<Option<u32>, MmError> {
        let v = m.fmt.version();
        let huge = m
            .fmt
            .dir_page(at.lvl)
            .is_some_and(|p| m.page_fits(p, at.va, at.end, self.req));
        if huge {
            let pte = encode_pte(v, self.req.pa(at.va), &self.req.attrs)?;
            m.write_pair(table, at.idx, 8, pte, None)?;
            m.stats.ptes_written += 1;
            m.count_add(table, 1);
            return Ok(None);
        }
        let child = match m.read_dir(table, at.idx, at.lvl)? {
            DirEntry::Table(t) => m.slot_of(t, m.entry_gpu_addr(table, at.idx, 8), 0)?,
            DirEntry::Invalid => {
                let c = m.alloc_table()?;
                let pde = encode_pde(v, m.table_ref(c))?;
                m.write_pair(table, at.idx, 8, pde, None)?;
                m.count_add(table, 1);
                c
            }
            DirEntry::Page(_) => return Err(MmError::AlreadyMapped { va: at.va }),
        };
        Ok(Some(child))
    }

    fn pd0(&mut self, m: &mut Mapper<P, S, T>, table: u32, at: At) -> Result<(), MmError> {
        if m.page_fits(PageSize::Size2M, at.va, at.end, self.req) {
            let pte = encode_pte(m.fmt.version(), self.req.pa(at.va), &self.req.attrs)?;
            m.write_pair(table, at.idx, 16, pte, Some(0))?;
            m.stats.ptes_written += 1;
            m.count_add(table, 1);
            Ok(())
        } else {
            m.apply_map_pd0(table, at.idx, at.va, at.end, self.req)
        }
    }
}

impl<P, S, T> Mapper<P, S, T>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
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

    /// Fails if anything in `[s, e)` under one dual PD0 entry (its big-page table `big`, 4 KiB
    /// table `small`) is mapped; returns how many of the two tables a map would allocate.
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
}
