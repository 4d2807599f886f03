//! Unmapping: the check pass ([`UnmapCheck`]) and the write pass ([`UnmapWrite`]) over the one
//! [walk](super::walk), and one walk of the page tables under a dual PD0 entry
//! ([`Mapper::walk_pts`]) that both use.

use super::super::entry::{DirEntry, DualEntry, encode_dual_pde};
use super::super::format::{PT_4K, PT_BIG, PageSize};
use super::super::table_mem::PageTableMemory;
use super::super::tlb::TlbInvalidate;
use super::super::{MmError, PAGE_4K};
use super::walk::{At, Visit};
use super::{Mapper, TableSlot};

/// A PTE reached by [`Mapper::walk_pts`].
#[derive(Debug, Clone, Copy)]
enum Leaf {
    /// A valid 64 KiB PTE in the big-page table `slot`, at `va`; `whole`: the range covers it.
    Big { slot: u32, va: u64, whole: bool },
    /// A 4 KiB page of the range where no valid big PTE is, with its PTE in `slot` (if there
    /// is a 4 KiB table) and whether that is valid.
    Small {
        slot: Option<u32>,
        va: u64,
        valid: bool,
    },
}

/// The check pass of an unmap: fails unless every page in the range is mapped by a page lying
/// wholly inside it.
pub(super) struct UnmapCheck;

/// `SplitsPage` unless the range covers the page at `at` whole.
fn whole_page(at: &At) -> Result<(), MmError> {
    if at.whole() {
        Ok(())
    } else {
        Err(MmError::SplitsPage {
            page_va: at.base,
            page_size: at.span(),
        })
    }
}

impl<P, S, T> Visit<P, S, T> for UnmapCheck
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    type Table = u32;

    fn dir(&mut self, m: &mut Mapper<P, S, T>, table: u32, at: At) -> Result<Option<u32>, MmError> {
        match m.read_dir(table, at.idx, at.lvl)? {
            DirEntry::Invalid => Err(MmError::NotMapped { va: at.va }),
            DirEntry::Page(_) => whole_page(&at).map(|()| None),
            DirEntry::Table(t) => Ok(Some(m.slot_of(t, m.entry_gpu_addr(table, at.idx, 8), 0)?)),
        }
    }

    fn pd0(&mut self, m: &mut Mapper<P, S, T>, table: u32, at: At) -> Result<(), MmError> {
        match m.read_dual(table, at.idx)? {
            DualEntry::Invalid => Err(MmError::NotMapped { va: at.va }),
            DualEntry::Page(_) => whole_page(&at),
            DualEntry::Tables { big, small } => {
                let ea = m.entry_gpu_addr(table, at.idx, 16);
                let b = big.map(|b| m.slot_of(b, ea, 0)).transpose()?;
                let s = small.map(|s| m.slot_of(s, ea, 0)).transpose()?;
                m.walk_pts(b, s, at.va, at.end, |_, leaf| match leaf {
                    Leaf::Big {
                        va, whole: false, ..
                    } => Err(MmError::SplitsPage {
                        page_va: va,
                        page_size: PageSize::Size64K.bytes(),
                    }),
                    Leaf::Small {
                        va, valid: false, ..
                    } => Err(MmError::NotMapped { va }),
                    _ => Ok(()),
                })
            }
        }
    }
}

/// The write pass of an unmap (after [`UnmapCheck`] passed): clears PTEs and releases the
/// tables left empty, clearing their parent entries.
pub(super) struct UnmapWrite;

impl<P, S, T> Visit<P, S, T> for UnmapWrite
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
        match m.read_dir(table, at.idx, at.lvl)? {
            DirEntry::Invalid => Err(MmError::NotMapped { va: at.va }),
            DirEntry::Page(_) => {
                m.write_pair(table, at.idx, 8, 0, None)?;
                m.stats.ptes_written += 1;
                m.count_add(table, -1);
                Ok(None)
            }
            DirEntry::Table(t) => Ok(Some(m.slot_of(t, m.entry_gpu_addr(table, at.idx, 8), 0)?)),
        }
    }

    fn left(
        &mut self,
        m: &mut Mapper<P, S, T>,
        table: u32,
        at: At,
        child: u32,
    ) -> Result<(), MmError> {
        if m.count(child) == 0 {
            m.write_pair(table, at.idx, 8, 0, None)?;
            m.count_add(table, -1);
            m.retire(child);
        }
        Ok(())
    }

    fn pd0(&mut self, m: &mut Mapper<P, S, T>, table: u32, at: At) -> Result<(), MmError> {
        match m.read_dual(table, at.idx)? {
            DualEntry::Invalid => Err(MmError::NotMapped { va: at.va }),
            DualEntry::Page(_) => {
                m.write_pair(table, at.idx, 16, 0, Some(0))?;
                m.stats.ptes_written += 1;
                m.count_add(table, -1);
                Ok(())
            }
            DualEntry::Tables { big, small } => {
                let ea = m.entry_gpu_addr(table, at.idx, 16);
                let b = big.map(|b| m.slot_of(b, ea, 0)).transpose()?;
                let s = small.map(|s| m.slot_of(s, ea, 0)).transpose()?;
                m.unmap_pts(table, at.idx, b, s, at.va, at.end)
            }
        }
    }
}

impl<P, S, T> Mapper<P, S, T>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    /// Walks `[s, e)` inside one PD0 entry through its big-page table `big` and 4 KiB table
    /// `small`, 64 KiB block by block: a valid big PTE is one [`Leaf::Big`], else every 4 KiB
    /// page of the block in the range is a [`Leaf::Small`].
    fn walk_pts(
        &mut self,
        big: Option<u32>,
        small: Option<u32>,
        s: u64,
        e: u64,
        mut f: impl FnMut(&mut Self, Leaf) -> Result<(), MmError>,
    ) -> Result<(), MmError> {
        let bb = PageSize::Size64K.bytes();
        let mut blk = s & !(bb - 1);
        while blk < e {
            let (bs, be) = (s.max(blk), e.min(blk + bb));
            let big_valid = match big {
                Some(b) => self.read_word(b, PT_BIG.index(blk) * 8)? & 1 != 0,
                None => false,
            };
            match big.filter(|_| big_valid) {
                Some(slot) => f(
                    self,
                    Leaf::Big {
                        slot,
                        va: blk,
                        whole: bs == blk && be == blk + bb,
                    },
                )?,
                None => {
                    let mut p = bs;
                    while p < be {
                        let valid = match small {
                            Some(sm) => self.read_word(sm, PT_4K.index(p) * 8)? & 1 != 0,
                            None => false,
                        };
                        f(
                            self,
                            Leaf::Small {
                                slot: small,
                                va: p,
                                valid,
                            },
                        )?;
                        p += PAGE_4K;
                    }
                }
            }
            blk += bb;
        }
        Ok(())
    }

    /// Clears the PTEs of `[s, e)` under dual PD0 entry `idx` of `table`, then releases the
    /// page tables left empty and rewrites (or clears) the entry.
    fn unmap_pts(
        &mut self,
        table: u32,
        idx: u64,
        big: Option<u32>,
        small: Option<u32>,
        s: u64,
        e: u64,
    ) -> Result<(), MmError> {
        self.stats.tables_touched += u64::from(big.is_some()) + u64::from(small.is_some());
        self.walk_pts(big, small, s, e, |m, leaf| {
            let (slot, off) = match leaf {
                Leaf::Big { slot, va, .. } => (slot, PT_BIG.index(va) * 8),
                Leaf::Small {
                    slot: Some(slot),
                    va,
                    valid: true,
                } => (slot, PT_4K.index(va) * 8),
                Leaf::Small { .. } => return Ok(()),
            };
            m.write_word(slot, off, 0)?;
            m.stats.ptes_written += 1;
            m.count_add(slot, -1);
            Ok(())
        })?;
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
}
