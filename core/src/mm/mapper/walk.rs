//! The one descent through the page-directory levels that every pass uses.
//!
//! [`Mapper::walk`] goes from a table down through the directory levels, entry by entry, over
//! a VA range. What happens at each entry is the [`Visit`]or's: the check passes of map and
//! unmap ([`MapCheck`](super::map::MapCheck), [`UnmapCheck`](super::unmap::UnmapCheck)) only
//! read and fail, the write passes ([`MapWrite`](super::map::MapWrite),
//! [`UnmapWrite`](super::unmap::UnmapWrite)) change entries, allocate and release tables, and
//! [`Reserve`] allocates the directories down to one level. The walker itself reads and writes
//! nothing.

use super::super::MmError;
use super::super::entry::{DirEntry, encode_pde};
use super::super::format::Level;
use super::super::table_mem::PageTableMemory;
use super::super::tlb::TlbInvalidate;
use super::{Mapper, ReservedLevel, TableSlot};

/// One entry of a level as a walk reaches it, and the part of the range it covers.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    /// Depth of the level (0: the root).
    pub lvl: usize,
    /// The level.
    pub level: Level,
    /// Index of the entry in its table.
    pub idx: u64,
    /// First VA the entry covers.
    pub base: u64,
    /// First VA of the range inside the entry.
    pub va: u64,
    /// End of the range inside the entry.
    pub end: u64,
}

impl At {
    /// Bytes one entry of this level covers.
    pub fn span(&self) -> u64 {
        self.level.span()
    }

    /// Whether the range covers the entry whole.
    pub fn whole(&self) -> bool {
        self.va == self.base && self.end == self.base + self.span()
    }
}

/// What one pass does at the entries a [`Mapper::walk`] reaches.
pub(super) trait Visit<P, S, T> {
    /// How the pass names a table: a slot, or for a pass that only looks, possibly a table that
    /// does not exist yet.
    type Table: Copy;

    /// The walk enters `table`, before its entries.
    fn enter(&mut self, _m: &mut Mapper<P, S, T>, _table: Self::Table) {}

    /// A directory entry above PD0. `Some(child)`: walk the child table for `at`'s range.
    fn dir(
        &mut self,
        m: &mut Mapper<P, S, T>,
        table: Self::Table,
        at: At,
    ) -> Result<Option<Self::Table>, MmError>;

    /// After the walk below `at` into `child` (e.g. to release a table left empty).
    fn left(
        &mut self,
        _m: &mut Mapper<P, S, T>,
        _table: Self::Table,
        _at: At,
        _child: Self::Table,
    ) -> Result<(), MmError> {
        Ok(())
    }

    /// A dual PD0 entry: a 2 MiB page, or the big-page and 4 KiB page tables under it.
    fn pd0(&mut self, m: &mut Mapper<P, S, T>, table: Self::Table, at: At) -> Result<(), MmError>;
}

impl<P, S, T> Mapper<P, S, T>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    /// Walks `[va, end)` in `table` (at depth `lvl`) and below, entry by entry in address
    /// order, with `v` deciding at each entry; the first error ends the walk.
    pub(super) fn walk<V: Visit<P, S, T>>(
        &mut self,
        v: &mut V,
        lvl: usize,
        table: V::Table,
        va: u64,
        end: u64,
    ) -> Result<(), MmError> {
        let dirs = self.fmt.dirs();
        let pd0 = dirs.len() - 1;
        let Some(level) = dirs.get(lvl).copied() else {
            return Ok(());
        };
        v.enter(self, table);
        let mut cur = va;
        while cur < end {
            let base = cur & !(level.span() - 1);
            let at = At {
                lvl,
                level,
                idx: level.index(cur),
                base,
                va: cur,
                end: end.min(base + level.span()),
            };
            if lvl == pd0 {
                v.pd0(self, table, at)?;
            } else if let Some(child) = v.dir(self, table, at)? {
                self.walk(v, lvl + 1, child, at.va, at.end)?;
                v.left(self, table, at, child)?;
            }
            cur = at.end;
        }
        Ok(())
    }
}

/// [`Mapper::reserve_dirs`]: the directories from the root down to depth `depth`, allocating
/// missing ones; the entry at `depth` must be invalid, and its table is pinned.
pub(super) struct Reserve {
    pub depth: usize,
    pub out: heapless::Vec<ReservedLevel, 6>,
}

impl<P, S, T> Visit<P, S, T> for Reserve
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    type Table = u32;

    fn dir(&mut self, m: &mut Mapper<P, S, T>, table: u32, at: At) -> Result<Option<u32>, MmError> {
        let _ = self.out.push(ReservedLevel {
            table: m.table_ref(table),
            bytes: at.level.table_bytes(),
            page_shift: at.level.lo,
        });
        if at.lvl == self.depth {
            if !matches!(m.read_dir(table, at.idx, at.lvl)?, DirEntry::Invalid) {
                return Err(MmError::AlreadyMapped { va: at.va });
            }
            // Pinned: an unmap elsewhere in this table must not release it.
            m.count_add(table, 1);
            return Ok(None);
        }
        let child = match m.read_dir(table, at.idx, at.lvl)? {
            DirEntry::Table(t) => m.slot_of(t, m.entry_gpu_addr(table, at.idx, 8), 0)?,
            DirEntry::Invalid => {
                let c = m.alloc_table()?;
                let pde = encode_pde(m.fmt.version(), m.table_ref(c))?;
                m.write_pair(table, at.idx, 8, pde, None)?;
                m.count_add(table, 1);
                c
            }
            DirEntry::Page(_) => return Err(MmError::AlreadyMapped { va: at.va }),
        };
        Ok(Some(child))
    }

    fn pd0(&mut self, _m: &mut Mapper<P, S, T>, _table: u32, _at: At) -> Result<(), MmError> {
        // `depth` is above PD0 (checked by `reserve_dirs`): the walk stops there.
        Ok(())
    }
}
