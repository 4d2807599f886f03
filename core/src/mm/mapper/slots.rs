//! Table slots and entry access: the 4 KiB slots the table region is carved into (free list,
//! retired list, valid-entry counts in the caller's [`TableSlot`] storage), and reading and
//! writing entries with the [`MapStats`](super::MapStats) counters kept.

use super::super::MmError;
use super::super::entry::{DirEntry, DualEntry, TableRef, decode_dual_pde, decode_pde};
use super::super::table_mem::PageTableMemory;
use super::super::tlb::TlbInvalidate;
use super::{Mapper, TableSlot};

pub(super) const STATE_USED: u32 = 0;
pub(super) const STATE_FREE: u32 = 2;
pub(super) const STATE_RETIRED: u32 = 3;
pub(super) const NIL: u32 = 0x3fff_ffff;
pub(super) const SLOT: u64 = 4096;

impl<P, S, T> Mapper<P, S, T>
where
    P: PageTableMemory,
    S: AsRef<[TableSlot]> + AsMut<[TableSlot]>,
    T: TlbInvalidate,
{
    pub(super) fn slot_addr(&self, slot: u32) -> u64 {
        self.mem.base() + slot as u64 * SLOT
    }

    pub(super) fn table_ref(&self, slot: u32) -> TableRef {
        TableRef {
            aperture: self.mem.aperture(),
            addr: self.slot_addr(slot),
        }
    }

    pub(super) fn entry_gpu_addr(&self, slot: u32, idx: u64, entry_size: u64) -> u64 {
        self.slot_addr(slot) + idx * entry_size
    }

    /// The slot a PDE read back from memory points at; anything that is not one of our live
    /// tables is corruption.
    pub(super) fn slot_of(&self, t: TableRef, entry_addr: u64, raw: u64) -> Result<u32, MmError> {
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

    pub(super) fn slot_raw(&self, slot: u32) -> u32 {
        self.slots
            .as_ref()
            .get(slot as usize)
            .map_or(STATE_FREE << 30 | NIL, |s| s.0)
    }

    pub(super) fn set_slot(&mut self, slot: u32, v: u32) {
        if let Some(s) = self.slots.as_mut().get_mut(slot as usize) {
            s.0 = v;
        }
    }

    pub(super) fn push_free(&mut self, slot: u32) {
        self.set_slot(slot, STATE_FREE << 30 | self.free_head);
        self.free_head = slot;
        self.free_count += 1;
    }

    pub(super) fn alloc_table(&mut self) -> Result<u32, MmError> {
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

    pub(super) fn retire(&mut self, slot: u32) {
        self.set_slot(slot, STATE_RETIRED << 30 | self.retired_head);
        self.retired_head = slot;
        self.retired_count += 1;
        self.stats.tables_freed += 1;
    }

    pub(super) fn recycle_retired(&mut self) {
        while self.retired_head != NIL {
            let slot = self.retired_head;
            self.retired_head = self.slot_raw(slot) & NIL;
            self.retired_count -= 1;
            self.push_free(slot);
        }
    }

    pub(super) fn count(&self, slot: u32) -> u32 {
        self.slot_raw(slot) & 0xffff
    }

    pub(super) fn count_add(&mut self, slot: u32, delta: i32) {
        let c = self.count(slot).saturating_add_signed(delta) & 0xffff;
        self.set_slot(slot, STATE_USED << 30 | c);
    }

    pub(super) fn read_word(&mut self, slot: u32, off: u64) -> Result<u64, MmError> {
        self.stats.words_read += 1;
        Ok(self.mem.read_u64(slot as u64 * SLOT + off)?)
    }

    pub(super) fn write_word(&mut self, slot: u32, off: u64, value: u64) -> Result<(), MmError> {
        self.stats.words_written += 1;
        Ok(self.mem.write_u64(slot as u64 * SLOT + off, value)?)
    }

    /// Reads entry `idx` (8 or 16 bytes) without counting (for `translate`).
    pub(super) fn peek_pair(
        &self,
        slot: u32,
        idx: u64,
        entry_size: u64,
    ) -> Result<(u64, u64), MmError> {
        let off = slot as u64 * SLOT + idx * entry_size;
        let lo = self.mem.read_u64(off)?;
        let hi = if entry_size == 16 {
            self.mem.read_u64(off + 8)?
        } else {
            0
        };
        Ok((lo, hi))
    }

    pub(super) fn read_dir(
        &mut self,
        slot: u32,
        idx: u64,
        lvl: usize,
    ) -> Result<DirEntry, MmError> {
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

    pub(super) fn read_dual(&mut self, slot: u32, idx: u64) -> Result<DualEntry, MmError> {
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
    pub(super) fn write_pair(
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
