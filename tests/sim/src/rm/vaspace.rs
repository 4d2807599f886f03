//! A GPU virtual address space kept as a mapping table by the simulated RM (contract D).
//!
//! When RM calls are answered directly (an RM "in a kernel"), RM owns the page tables; the
//! simulator keeps the mappings RM made as a sorted table instead of building real page tables
//! and resolves every GPU access through it. An unmapped address faults like an invalid PTE when
//! something else is mapped in its 2 MiB (RM would have built that page table) and like an
//! invalid PDE otherwise; addresses past the end of the space fault with a VA-limit violation.

use std::collections::BTreeMap;
use std::sync::RwLock;

use crate::bar0::SimCore;
use crate::gpu_mem::{Access, AddressSpace, Aperture, FaultKind, MmuFault, Translation};

/// Bytes one last-level page table of 4 KiB pages covers (GMMU v2 and v3).
const PDE0_SPAN: u64 = 2 << 20;

/// One mapping: `size` bytes at `va` backed by `phys` in `aperture`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// First virtual address.
    pub va: u64,
    /// Bytes.
    pub size: u64,
    /// Backing memory.
    pub aperture: Aperture,
    /// Physical (VRAM) or bus (host) address of `va`.
    pub phys: u64,
    /// Writes and atomics fault.
    pub read_only: bool,
}

/// Why a mapping could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// It overlaps an existing mapping.
    Overlap,
    /// It leaves the address space or has zero size.
    OutOfRange,
    /// No free range of that size and alignment in the window.
    NoSpace,
}

#[derive(Debug, Default)]
struct Table {
    maps: BTreeMap<u64, Mapping>,
}

/// A VA space as a mapping table.
#[derive(Debug)]
pub struct VaTable {
    base: u64,
    limit: u64,
    table: RwLock<Table>,
}

impl VaTable {
    /// A space covering `[base, limit]`.
    pub fn new(base: u64, limit: u64) -> Self {
        VaTable {
            base,
            limit,
            table: RwLock::new(Table::default()),
        }
    }

    /// Lowest valid address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Highest valid address.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a mapping.
    pub fn map(&self, m: Mapping) -> Result<(), MapError> {
        let end = m.va.checked_add(m.size).ok_or(MapError::OutOfRange)?;
        if m.size == 0 || m.va < self.base || end - 1 > self.limit {
            return Err(MapError::OutOfRange);
        }
        let mut t = self.write();
        if let Some((_, prev)) = t.maps.range(..end).next_back()
            && prev.va + prev.size > m.va
        {
            return Err(MapError::Overlap);
        }
        t.maps.insert(m.va, m);
        Ok(())
    }

    /// Removes the mapping that starts at `va`.
    pub fn unmap(&self, va: u64) -> Option<Mapping> {
        self.write().maps.remove(&va)
    }

    /// The mapping covering `va`.
    pub fn lookup(&self, va: u64) -> Option<Mapping> {
        let t = self.read();
        let (_, m) = t.maps.range(..=va).next_back()?;
        (va - m.va < m.size).then_some(*m)
    }

    /// Finds a free range of `size` bytes aligned to `align` inside `[lo, hi]`, lowest first.
    pub fn find_free(&self, lo: u64, hi: u64, size: u64, align: u64) -> Result<u64, MapError> {
        let align = align.max(1);
        let lo = lo.max(self.base);
        let hi = hi.min(self.limit);
        let t = self.read();
        let mut cand = lo
            .checked_next_multiple_of(align)
            .ok_or(MapError::NoSpace)?;
        for m in t.maps.values() {
            let m_end = m.va + m.size;
            if m_end <= cand {
                continue;
            }
            if cand.checked_add(size).is_some_and(|e| e <= m.va) {
                break;
            }
            cand = m_end
                .checked_next_multiple_of(align)
                .ok_or(MapError::NoSpace)?;
        }
        match cand.checked_add(size) {
            Some(e) if size > 0 && e - 1 <= hi => Ok(cand),
            _ => Err(MapError::NoSpace),
        }
    }

    /// Whether any mapping overlaps the 2 MiB region (one PDE0's span) holding `va`.
    fn anything_in_pde0(&self, va: u64) -> bool {
        let lo = va & !(PDE0_SPAN - 1);
        let hi = lo.saturating_add(PDE0_SPAN);
        let t = self.read();
        t.maps
            .range(..hi)
            .next_back()
            .is_some_and(|(_, m)| m.va.saturating_add(m.size) > lo)
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.read().maps.len()
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl AddressSpace for VaTable {
    fn translate(&self, _core: &SimCore, va: u64, access: Access) -> Result<Translation, MmuFault> {
        if va < self.base || va > self.limit {
            return Err(MmuFault {
                va,
                access,
                kind: FaultKind::VaLimit,
            });
        }
        let Some(m) = self.lookup(va) else {
            // RM builds page tables only where something is mapped: an address with no
            // mapping in its 2 MiB (the span of one last-level page table of 4 KiB pages) has
            // no valid PDE0 either, and the H200 reports FAULT_PDE there (docs/hardware.md).
            let kind = if self.anything_in_pde0(va) {
                FaultKind::InvalidPte
            } else {
                FaultKind::InvalidPde
            };
            return Err(MmuFault { va, access, kind });
        };
        if m.read_only && matches!(access, Access::Write | Access::Atomic) {
            return Err(MmuFault {
                va,
                access,
                kind: FaultKind::ReadOnly,
            });
        }
        let off = va - m.va;
        Ok(Translation {
            aperture: m.aperture,
            phys: m.phys + off,
            contiguous: m.size - off,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(va: u64, size: u64) -> Mapping {
        Mapping {
            va,
            size,
            aperture: Aperture::Vram,
            phys: 0x10_0000 + va,
            read_only: false,
        }
    }

    #[test]
    fn map_lookup_overlap_and_free_ranges() {
        let t = VaTable::new(0x1000, 0xffff_ffff);
        t.map(m(0x10000, 0x1000)).unwrap();
        t.map(m(0x20000, 0x10000)).unwrap();
        assert_eq!(t.map(m(0x1f000, 0x2000)), Err(MapError::Overlap));
        assert_eq!(t.map(m(0x10800, 0x100)), Err(MapError::Overlap));
        assert_eq!(t.map(m(0x0, 0x1000)), Err(MapError::OutOfRange));
        assert!(t.lookup(0x10fff).is_some());
        assert!(t.lookup(0x11000).is_none());
        assert_eq!(t.find_free(0x10000, u64::MAX, 0x1000, 0x1000), Ok(0x11000));
        assert_eq!(
            t.find_free(0x10000, u64::MAX, 0x10000, 0x10000),
            Ok(0x30000)
        );
        assert_eq!(
            t.find_free(0x10000, 0x20fff, 0x10000, 0x1000),
            Err(MapError::NoSpace)
        );
        // Next to a mapping the page table exists (an invalid PTE); 2 MiB further there is no
        // page table at all (an invalid PDE, what the H200 reported 2^40 past a buffer).
        assert!(t.anything_in_pde0(0x11000));
        assert!(t.anything_in_pde0(0x1f_f000));
        assert!(!t.anything_in_pde0(0x20_0000));
        assert!(!t.anything_in_pde0(0x10000 + (1 << 40)));
        assert_eq!(t.unmap(0x10000).map(|m| m.size), Some(0x1000));
        assert_eq!(t.find_free(0x10000, u64::MAX, 0x1000, 0x1000), Ok(0x10000));
    }
}
