//! Page-table formats: levels, VA bits and page sizes.
//!
//! Level layouts follow `kgmmuFmtInitLevels_GP10X` (`arch/pascal/kern_gmmu_fmt_gp10x.c`, used by
//! TU10x), `kgmmuFmtInitLevels_GA10X` (`arch/ampere/kern_gmmu_fmt_ga10x.c`: GA10x and AD10x,
//! which lets PD1 hold a 512 MiB PTE) and `kgmmuFmtInitLevels_GH10X`
//! (`arch/hopper/kern_gmmu_fmt_gh10x.c`: GH100, extended for GB10x/GB20x). The chip-to-levels
//! mapping is the `kgmmuFmtInitLevels` HAL table in `g_kern_gmmu_nvoc.c` (570.144).
//!
//! ```text
//!   v2 (49-bit VA)             v3 (57-bit VA)
//!                              PD4 [56:56]
//!   PD3 [48:47]                PD3 [55:47]
//!   PD2 [46:38]                PD2 [46:38]
//!   PD1 [37:29] (512M PTE*)    PD1 [37:29] (512M PTE)
//!   PD0 [28:21] dual (2M PTE)  PD0 [28:21] dual (2M PTE)
//!   PT_BIG [20:16] / PT_4K [20:12] under each dual PD0 entry
//!   * GA10x/AD10x only, not TU10x
//! ```
//!
//! Blackwell's extra 256 GiB PTE in PD2 (`kgmmuFmtInitLevels_GB10X`) is not used.

use core::fmt;

use crate::chip::{Architecture, ChipInfo, MmuVersion};

/// A GPU page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PageSize {
    /// 4 KiB (PT_4K).
    Size4K,
    /// 64 KiB, the "big" page (PT_BIG; 128 KiB is unsupported from Pascal on).
    Size64K,
    /// 2 MiB, a PTE in PD0.
    Size2M,
    /// 512 MiB, a PTE in PD1 (GA10x and later).
    Size512M,
}

impl PageSize {
    /// Every page size, largest first.
    pub const DESCENDING: [PageSize; 4] = [
        PageSize::Size512M,
        PageSize::Size2M,
        PageSize::Size64K,
        PageSize::Size4K,
    ];

    /// log2 of the size.
    pub const fn shift(self) -> u32 {
        match self {
            PageSize::Size4K => 12,
            PageSize::Size64K => 16,
            PageSize::Size2M => 21,
            PageSize::Size512M => 29,
        }
    }

    /// Size in bytes.
    pub const fn bytes(self) -> u64 {
        1 << self.shift()
    }

    /// The page size of `bytes`, if it is one.
    pub fn from_bytes(bytes: u64) -> Option<PageSize> {
        PageSize::DESCENDING
            .iter()
            .copied()
            .find(|p| p.bytes() == bytes)
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageSize::Size4K => "4K",
            PageSize::Size64K => "64K",
            PageSize::Size2M => "2M",
            PageSize::Size512M => "512M",
        })
    }
}

/// One page-directory level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Name as in the open driver's comments ("PD3", "PD0").
    pub name: &'static str,
    /// Highest VA bit indexing this level.
    pub hi: u8,
    /// Lowest VA bit indexing this level (log2 of the span of one entry).
    pub lo: u8,
    /// Bytes per entry (16 for the dual PD0).
    pub entry_size: u8,
}

impl Level {
    /// Entries in a table of this level.
    pub const fn entries(&self) -> u64 {
        1 << (self.hi - self.lo + 1)
    }

    /// Bytes of VA one entry covers.
    pub const fn span(&self) -> u64 {
        1 << self.lo
    }

    /// Index of `va` in a table of this level.
    pub const fn index(&self, va: u64) -> u64 {
        (va >> self.lo) & (self.entries() - 1)
    }

    /// Bytes a table of this level occupies.
    pub const fn table_bytes(&self) -> u64 {
        self.entries() * self.entry_size as u64
    }
}

const fn lvl(name: &'static str, hi: u8, lo: u8, entry_size: u8) -> Level {
    Level {
        name,
        hi,
        lo,
        entry_size,
    }
}

/// Directory levels of version 2, root first (`kgmmuFmtInitLevels_GP10X`).
const V2_DIRS: [Level; 4] = [
    lvl("PD3", 48, 47, 8),
    lvl("PD2", 46, 38, 8),
    lvl("PD1", 37, 29, 8),
    lvl("PD0", 28, 21, 16),
];

/// Directory levels of version 3, root first (`kgmmuFmtInitLevels_GH10X`).
const V3_DIRS: [Level; 5] = [
    lvl("PD4", 56, 56, 8),
    lvl("PD3", 55, 47, 8),
    lvl("PD2", 46, 38, 8),
    lvl("PD1", 37, 29, 8),
    lvl("PD0", 28, 21, 16),
];

/// The big-page table below a dual PD0 entry (bigPageShift 16).
pub const PT_BIG: Level = lvl("PT_BIG", 20, 16, 8);
/// The 4 KiB page table below a dual PD0 entry.
pub const PT_4K: Level = lvl("PT_4K", 20, 12, 8);

/// A chip's page-table format: the version plus which levels may hold huge PTEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmuFormat {
    version: MmuVersion,
    pd1_pages: bool,
}

impl MmuFormat {
    /// Version 2 as on TU10x (no 512 MiB pages).
    pub const V2_TURING: MmuFormat = MmuFormat {
        version: MmuVersion::V2,
        pd1_pages: false,
    };
    /// Version 2 as on GA10x and AD10x (512 MiB pages in PD1).
    pub const V2: MmuFormat = MmuFormat {
        version: MmuVersion::V2,
        pd1_pages: true,
    };
    /// Version 3 (GH100, GB10x, GB20x).
    pub const V3: MmuFormat = MmuFormat {
        version: MmuVersion::V3,
        pd1_pages: true,
    };

    /// The format a chip uses (`ChipInfo::mmu` plus the per-architecture level table).
    pub fn for_chip(info: &ChipInfo) -> MmuFormat {
        match info.mmu {
            MmuVersion::V3 => MmuFormat::V3,
            MmuVersion::V2 if info.architecture == Architecture::Turing => MmuFormat::V2_TURING,
            MmuVersion::V2 => MmuFormat::V2,
        }
    }

    /// The entry-format version.
    pub const fn version(&self) -> MmuVersion {
        self.version
    }

    /// Directory levels, root first; the last is the dual PD0.
    pub fn dirs(&self) -> &'static [Level] {
        match self.version {
            MmuVersion::V2 => &V2_DIRS,
            MmuVersion::V3 => &V3_DIRS,
        }
    }

    /// Virtual address bits (49 or 57).
    pub fn va_bits(&self) -> u32 {
        match self.version {
            MmuVersion::V2 => 49,
            MmuVersion::V3 => 57,
        }
    }

    /// Size of the virtual address space in bytes.
    pub fn va_limit(&self) -> u64 {
        1 << self.va_bits()
    }

    /// Entries in the root directory (`numEntries` of `SET_PAGE_DIRECTORY`).
    pub fn root_entries(&self) -> u32 {
        self.dirs().first().map_or(0, |l| l.entries() as u32)
    }

    /// The page size a PTE in directory level `dir` maps, if that level may hold PTEs.
    pub fn dir_page(&self, dir: usize) -> Option<PageSize> {
        let dirs = self.dirs();
        let pd0 = dirs.len() - 1;
        if dir == pd0 {
            Some(PageSize::Size2M)
        } else if dir + 1 == pd0 && self.pd1_pages {
            Some(PageSize::Size512M)
        } else {
            None
        }
    }

    /// Whether this format can map pages of `size`.
    pub fn supports(&self, size: PageSize) -> bool {
        size != PageSize::Size512M || self.pd1_pages
    }

    /// The largest supported page size not above `bytes` (at least 4 KiB).
    pub fn largest_page_within(&self, bytes: u64) -> PageSize {
        PageSize::DESCENDING
            .iter()
            .copied()
            .find(|p| self.supports(*p) && p.bytes() <= bytes)
            .unwrap_or(PageSize::Size4K)
    }
}

impl fmt::Display for MmuFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.version, self.pd1_pages) {
            (MmuVersion::V2, false) => write!(f, "GMMU v2 (49-bit VA, 4K/64K/2M pages)"),
            (MmuVersion::V2, true) => write!(f, "GMMU v2 (49-bit VA, 4K/64K/2M/512M pages)"),
            (MmuVersion::V3, _) => write!(f, "GMMU v3 (57-bit VA, 4K/64K/2M/512M pages)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chip::Chipset;

    #[test]
    fn levels_match_the_open_driver() {
        // kgmmuFmtInitLevels_GP10X / _GH10X: bit ranges and entry sizes.
        let v2: [(u8, u8, u8); 4] = [(48, 47, 8), (46, 38, 8), (37, 29, 8), (28, 21, 16)];
        for (l, (hi, lo, es)) in MmuFormat::V2.dirs().iter().zip(v2) {
            assert_eq!((l.hi, l.lo, l.entry_size), (hi, lo, es), "{}", l.name);
        }
        let v3: [(u8, u8, u8); 5] = [
            (56, 56, 8),
            (55, 47, 8),
            (46, 38, 8),
            (37, 29, 8),
            (28, 21, 16),
        ];
        for (l, (hi, lo, es)) in MmuFormat::V3.dirs().iter().zip(v3) {
            assert_eq!((l.hi, l.lo, l.entry_size), (hi, lo, es), "{}", l.name);
        }
        assert_eq!((PT_BIG.hi, PT_BIG.lo, PT_BIG.entries()), (20, 16, 32));
        assert_eq!((PT_4K.hi, PT_4K.lo, PT_4K.entries()), (20, 12, 512));
        assert_eq!(MmuFormat::V2.root_entries(), 4);
        assert_eq!(MmuFormat::V3.root_entries(), 2);
        assert_eq!(MmuFormat::V2.va_bits(), 49);
        assert_eq!(MmuFormat::V3.va_bits(), 57);
        // Every table fits a 4 KiB slot.
        for f in [MmuFormat::V2, MmuFormat::V3] {
            for l in f.dirs() {
                assert!(l.table_bytes() <= 4096);
            }
        }
        assert_eq!(MmuFormat::V3.dirs()[4].table_bytes(), 4096);
        assert_eq!(PT_BIG.table_bytes(), 256);
    }

    #[test]
    fn formats_per_chip() {
        assert_eq!(
            MmuFormat::for_chip(Chipset::TU102.info()),
            MmuFormat::V2_TURING
        );
        assert_eq!(MmuFormat::for_chip(Chipset::GA102.info()), MmuFormat::V2);
        assert_eq!(MmuFormat::for_chip(Chipset::AD102.info()), MmuFormat::V2);
        assert_eq!(MmuFormat::for_chip(Chipset::GH100.info()), MmuFormat::V3);
        assert_eq!(MmuFormat::for_chip(Chipset::GB202.info()), MmuFormat::V3);
        assert!(!MmuFormat::V2_TURING.supports(PageSize::Size512M));
        assert_eq!(MmuFormat::V2_TURING.dir_page(2), None);
        assert_eq!(MmuFormat::V2.dir_page(2), Some(PageSize::Size512M));
        assert_eq!(MmuFormat::V3.dir_page(3), Some(PageSize::Size512M));
        assert_eq!(MmuFormat::V3.dir_page(4), Some(PageSize::Size2M));
        assert_eq!(MmuFormat::V3.dir_page(2), None);
        assert_eq!(
            MmuFormat::V2_TURING.largest_page_within(1 << 30),
            PageSize::Size2M
        );
        assert_eq!(
            MmuFormat::V3.largest_page_within(1 << 30),
            PageSize::Size512M
        );
        assert_eq!(MmuFormat::V3.largest_page_within(100), PageSize::Size4K);
    }

    #[test]
    fn level_math() {
        let pd0 = MmuFormat::V3.dirs()[4];
        assert_eq!(pd0.span(), 2 << 20);
        assert_eq!(pd0.index(0x1234_5678_9000), (0x1234_5678_9000 >> 21) & 255);
        assert_eq!(PageSize::from_bytes(64 << 10), Some(PageSize::Size64K));
        assert_eq!(PageSize::from_bytes(8 << 10), None);
    }
}
