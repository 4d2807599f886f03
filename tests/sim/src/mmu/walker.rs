//! The GMMU page-table walk, written from `dev_mmu.h` independently of `nvbare_core::mm`
//! (so an encoding bug in the driver shows up as a wrong translation here instead of
//! cancelling out).
//!
//! Bit positions: version 2 from `kernel-open/nvidia-uvm/hwref/turing/tu102/dev_mmu.h`,
//! version 3 from `src/common/inc/swref/published/hopper/gh100/dev_mmu.h`. Level layouts from
//! `kgmmuFmtInitLevels_GP10X`/`_GA10X`/`_GH10X`. Dual-PDE semantics (a valid big PTE wins, an
//! invalid one lets the walk fall through to the 4 KiB table unless it is the "unmapped"
//! pattern that hides the 4 KiB entries) from UVM's `uvm_va_block.h` table and
//! `unmapped_pte_pascal`.

use nvbare_core::chip::{Architecture, ChipInfo, MmuVersion};

use crate::bar0::SimCore;
use crate::gpu_mem::{Aperture, FaultKind};

/// Which page-table format the walker reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GmmuFormat {
    /// Entry layout version.
    pub version: MmuVersion,
    /// Whether PD1 entries may be 512 MiB PTEs (GA10x, AD10x, GH100 and later; not TU10x).
    pub pd1_pages: bool,
}

impl GmmuFormat {
    /// The format of `chip` (`kgmmuFmtInitLevels` HAL table, `g_kern_gmmu_nvoc.c`).
    pub fn for_chip(chip: &ChipInfo) -> GmmuFormat {
        GmmuFormat {
            version: chip.mmu,
            pd1_pages: chip.architecture != Architecture::Turing,
        }
    }

    /// Directory levels as (hi, lo) VA bits, root first; the last is the dual PD0.
    pub(crate) fn dirs(&self) -> &'static [(u32, u32)] {
        match self.version {
            MmuVersion::V2 => &[(48, 47), (46, 38), (37, 29), (28, 21)],
            MmuVersion::V3 => &[(56, 56), (55, 47), (46, 38), (37, 29), (28, 21)],
        }
    }

    /// VA bits.
    pub fn va_bits(&self) -> u32 {
        match self.version {
            MmuVersion::V2 => 49,
            MmuVersion::V3 => 57,
        }
    }
}

/// Where a page directory or table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLoc {
    /// VRAM or host memory.
    pub aperture: Aperture,
    /// Address of its first byte.
    pub addr: u64,
}

/// The result of a successful walk: one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkedPage {
    /// VA of the page's first byte.
    pub va: u64,
    /// Page size in bytes.
    pub size: u64,
    /// Target memory.
    pub aperture: Aperture,
    /// Physical (or bus) address of the page's first byte.
    pub phys: u64,
    /// Writes and atomics fault.
    pub read_only: bool,
}

fn bits(raw: u128, hi: u32, lo: u32) -> u64 {
    ((raw >> lo) & ((1u128 << (hi - lo + 1)) - 1)) as u64
}

fn read_entry(core: &SimCore, t: TableLoc, offset: u64, len: usize) -> Result<u128, FaultKind> {
    let mut b = [0u8; 16];
    let dst = b.get_mut(..len).ok_or(FaultKind::InvalidPde)?;
    let addr = t.addr.checked_add(offset).ok_or(FaultKind::InvalidPde)?;
    let ok = match t.aperture {
        Aperture::Vram => core.vram.read(addr, dst).is_ok(),
        Aperture::SysCoherent | Aperture::SysNonCoherent => core.host.read(addr, dst).is_ok(),
        Aperture::Peer(_) => false,
    };
    if !ok {
        // The directory itself cannot be fetched.
        return Err(FaultKind::InvalidPde);
    }
    Ok(u128::from_le_bytes(b))
}

/// PDE aperture field: 0 INVALID, 1 VIDEO, 2 SYS_COHERENT, 3 SYS_NON_COHERENT.
fn pde_aperture(v: u64) -> Option<Aperture> {
    match v {
        1 => Some(Aperture::Vram),
        2 => Some(Aperture::SysCoherent),
        3 => Some(Aperture::SysNonCoherent),
        _ => None,
    }
}

/// Decodes a valid PTE (bit 0 set) into (aperture, page address, read-only).
fn pte(version: MmuVersion, raw: u64) -> Result<(Aperture, u64, bool), FaultKind> {
    let r = raw as u128;
    match version {
        MmuVersion::V2 => {
            // APERTURE 2:1 (0 VIDEO, 1 PEER, 2 SYS_COH, 3 SYS_NONCOH); READ_ONLY 6:6;
            // ADDRESS_SYS 53:8, ADDRESS_VID (35-3):8, ADDRESS_VID_PEER 35:33.
            let ro = bits(r, 6, 6) != 0;
            Ok(match bits(r, 2, 1) {
                0 => {
                    if bits(r, 35, 33) != 0 {
                        // A peer index on a local-VRAM PTE: not an address that exists.
                        return Err(FaultKind::BadPhysical);
                    }
                    (Aperture::Vram, bits(r, 32, 8) << 12, ro)
                }
                1 => (
                    Aperture::Peer(bits(r, 35, 33) as u8),
                    bits(r, 32, 8) << 12,
                    ro,
                ),
                2 => (Aperture::SysCoherent, bits(r, 53, 8) << 12, ro),
                _ => (Aperture::SysNonCoherent, bits(r, 53, 8) << 12, ro),
            })
        }
        MmuVersion::V3 => {
            // APERTURE 2:1, PCF 7:3 (bit 2 of the PCF = RO for a valid PTE), ADDRESS 51:12
            // (ADDRESS_VID 39:12), PEER_ID 63:61.
            let ro = bits(r, 7, 3) & 0x4 != 0;
            Ok(match bits(r, 2, 1) {
                0 => {
                    if bits(r, 51, 40) != 0 {
                        return Err(FaultKind::BadPhysical);
                    }
                    (Aperture::Vram, bits(r, 39, 12) << 12, ro)
                }
                1 => (
                    Aperture::Peer(bits(r, 63, 61) as u8),
                    bits(r, 51, 12) << 12,
                    ro,
                ),
                2 => (Aperture::SysCoherent, bits(r, 51, 12) << 12, ro),
                _ => (Aperture::SysNonCoherent, bits(r, 51, 12) << 12, ro),
            })
        }
    }
}

/// Whether an invalid big PTE hides the 4 KiB entries below it (or is sparse).
fn big_pte_blocks_small(version: MmuVersion, raw: u64) -> bool {
    let r = raw as u128;
    match version {
        // VALID 0 with PRIVILEGE 1 ("unmapped": 4K PTEs ignored) or VOL 1 (sparse).
        MmuVersion::V2 => bits(r, 5, 5) != 0 || bits(r, 3, 3) != 0,
        // PCF SPARSE (1) or NO_VALID_4KB_PAGE (3).
        MmuVersion::V3 => matches!(bits(r, 7, 3), 1 | 3),
    }
}

/// The directory entry of level `lvl` (not PD0) in `table` for `va`: `None` if invalid, the
/// next table if a PDE, an error for a PTE or an unreadable table.
pub(crate) fn dir_entry(
    core: &SimCore,
    fmt: GmmuFormat,
    table: TableLoc,
    lvl: usize,
    va: u64,
) -> Result<Option<TableLoc>, FaultKind> {
    let dirs = fmt.dirs();
    let &(hi, lo) = dirs
        .get(lvl)
        .filter(|_| lvl + 1 < dirs.len())
        .ok_or(FaultKind::InvalidPde)?;
    let idx = (va >> lo) & ((1 << (hi - lo + 1)) - 1);
    let raw = read_entry(core, table, idx * 8, 8)? as u64;
    if raw & 1 != 0 {
        return Err(FaultKind::InvalidPde);
    }
    let r = raw as u128;
    let Some(aperture) = pde_aperture(bits(r, 2, 1)) else {
        return Ok(None);
    };
    let addr = match fmt.version {
        MmuVersion::V2 if aperture == Aperture::Vram => bits(r, 32, 8) << 12,
        MmuVersion::V2 => bits(r, 53, 8) << 12,
        MmuVersion::V3 => bits(r, 51, 12) << 12,
    };
    Ok(Some(TableLoc { aperture, addr }))
}

/// A PDE (not PD0) pointing at the VRAM table `addr`, as GSP-RM writes one: V2 APERTURE 2:1
/// VIDEO, VOL 3 clear, ADDRESS_VID 32:8 (`>> 12`); V3 APERTURE 2:1, PCF 5:3 0, ADDRESS 51:12.
pub(crate) fn vram_pde(version: MmuVersion, addr: u64) -> u64 {
    match version {
        MmuVersion::V2 => (((addr >> 12) & ((1 << 25) - 1)) << 8) | (1 << 1),
        MmuVersion::V3 => (((addr >> 12) & ((1 << 40) - 1)) << 12) | (1 << 1),
    }
}

/// A dual PD0 entry with only its 4 KiB half: APERTURE_SMALL 66:65 VIDEO, ADDRESS_SMALL (V2
/// 96:72, V3 115:76, `>> 12`).
pub(crate) fn vram_pd0_small(version: MmuVersion, addr: u64) -> u128 {
    let a = (addr >> 12) as u128;
    match version {
        MmuVersion::V2 => ((a & ((1 << 25) - 1)) << 72) | (1 << 65),
        MmuVersion::V3 => ((a & ((1 << 40) - 1)) << 76) | (1 << 65),
    }
}

/// A valid 4 KiB PTE to VRAM page `addr`: VALID 0, APERTURE 2:1 VIDEO (0), V2 ADDRESS_VID 32:8,
/// V3 ADDRESS 39:12 (PCF 0: read-write).
pub(crate) fn vram_pte(version: MmuVersion, addr: u64) -> u64 {
    match version {
        MmuVersion::V2 => (((addr >> 12) & ((1 << 25) - 1)) << 8) | 1,
        MmuVersion::V3 => (((addr >> 12) & ((1 << 28) - 1)) << 12) | 1,
    }
}

/// Walks the tables rooted at `pdb` for `va`.
pub fn walk(
    core: &SimCore,
    fmt: GmmuFormat,
    pdb: TableLoc,
    va: u64,
) -> Result<WalkedPage, FaultKind> {
    if va >> fmt.va_bits() != 0 {
        return Err(FaultKind::VaLimit);
    }
    let v = fmt.version;
    let dirs = fmt.dirs();
    let pd0 = dirs.len() - 1;
    let mut table = pdb;
    for (lvl, &(hi, lo)) in dirs.iter().enumerate() {
        let idx = (va >> lo) & ((1 << (hi - lo + 1)) - 1);
        let page = |size_shift: u32, raw: u64| -> Result<WalkedPage, FaultKind> {
            let (aperture, base, read_only) = pte(v, raw)?;
            let size = 1u64 << size_shift;
            if !base.is_multiple_of(size) {
                // A huge PTE with address bits below its page size set.
                return Err(FaultKind::BadPhysical);
            }
            Ok(WalkedPage {
                va: va & !(size - 1),
                size,
                aperture,
                phys: base,
                read_only,
            })
        };
        if lvl == pd0 {
            let raw = read_entry(core, table, idx * 16, 16)?;
            let lo_word = raw as u64;
            if lo_word & 1 != 0 {
                // IS_PTE: a 2 MiB page in the low half.
                return page(21, lo_word);
            }
            // Dual PDE: APERTURE_BIG 2:1, APERTURE_SMALL 66:65.
            let (big, small) = match v {
                MmuVersion::V2 => {
                    // ADDRESS_BIG_SYS 53:4 / _VID (35-3):4, shift 8; ADDRESS_SMALL_SYS 117:72 /
                    // _VID (99-3):72, shift 12.
                    let big = pde_aperture(bits(raw, 2, 1)).map(|a| TableLoc {
                        aperture: a,
                        addr: if a == Aperture::Vram {
                            bits(raw, 32, 4) << 8
                        } else {
                            bits(raw, 53, 4) << 8
                        },
                    });
                    let small = pde_aperture(bits(raw, 66, 65)).map(|a| TableLoc {
                        aperture: a,
                        addr: if a == Aperture::Vram {
                            bits(raw, 96, 72) << 12
                        } else {
                            bits(raw, 117, 72) << 12
                        },
                    });
                    (big, small)
                }
                MmuVersion::V3 => {
                    // ADDRESS_BIG 51:8 (shift 8), ADDRESS_SMALL 115:76 (shift 12).
                    let big = pde_aperture(bits(raw, 2, 1)).map(|a| TableLoc {
                        aperture: a,
                        addr: bits(raw, 51, 8) << 8,
                    });
                    let small = pde_aperture(bits(raw, 66, 65)).map(|a| TableLoc {
                        aperture: a,
                        addr: bits(raw, 115, 76) << 12,
                    });
                    (big, small)
                }
            };
            if big.is_none() && small.is_none() {
                return Err(FaultKind::InvalidPde);
            }
            if let Some(bt) = big {
                let raw = read_entry(core, bt, ((va >> 16) & 31) * 8, 8)? as u64;
                if raw & 1 != 0 {
                    return page(16, raw);
                }
                if big_pte_blocks_small(v, raw) {
                    return Err(FaultKind::InvalidPte);
                }
            }
            let Some(st) = small else {
                return Err(FaultKind::InvalidPte);
            };
            let raw = read_entry(core, st, ((va >> 12) & 511) * 8, 8)? as u64;
            if raw & 1 == 0 {
                return Err(FaultKind::InvalidPte);
            }
            return page(12, raw);
        }
        let raw = read_entry(core, table, idx * 8, 8)? as u64;
        if raw & 1 != 0 {
            // IS_PTE: only PD1 may hold one (512 MiB), and only on formats that allow it.
            if lvl + 1 == pd0 && fmt.pd1_pages {
                return page(29, raw);
            }
            return Err(FaultKind::InvalidPde);
        }
        let r = raw as u128;
        let aperture = pde_aperture(bits(r, 2, 1)).ok_or(FaultKind::InvalidPde)?;
        let addr = match v {
            // ADDRESS_SYS 53:8 / ADDRESS_VID (35-3):8, shift 12.
            MmuVersion::V2 if aperture == Aperture::Vram => bits(r, 32, 8) << 12,
            MmuVersion::V2 => bits(r, 53, 8) << 12,
            // ADDRESS 51:12, shift 12.
            MmuVersion::V3 => bits(r, 51, 12) << 12,
        };
        table = TableLoc { aperture, addr };
    }
    Err(FaultKind::InvalidPde)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gsp_rm_entries_walk_back_to_their_page() {
        for model in [crate::models::AD102, crate::models::GH100] {
            let fmt = GmmuFormat::for_chip(model.chipset.info());
            let version = fmt.version;
            let gpu = crate::SimGpu::new(crate::SimConfig::new(model));
            gpu.with_core(|core| {
                let dirs = fmt.dirs();
                let va = 0x1_2345_6000u64;
                // One table per level at 1 MiB + 4 KiB * level, then the PT, then the page.
                let t = |l: usize| (1 << 20) + 4096 * l as u64;
                let at = |addr| TableLoc {
                    aperture: Aperture::Vram,
                    addr,
                };
                for (l, &(hi, lo)) in dirs.iter().enumerate() {
                    let idx = (va >> lo) & ((1 << (hi - lo + 1)) - 1);
                    if l + 1 == dirs.len() {
                        let e = vram_pd0_small(version, t(l + 1));
                        core.vram.write(t(l) + idx * 16, &e.to_le_bytes()).unwrap();
                    } else {
                        assert_eq!(dir_entry(core, fmt, at(t(l)), l, va).unwrap(), None);
                        let e = vram_pde(version, t(l + 1));
                        core.vram.write(t(l) + idx * 8, &e.to_le_bytes()).unwrap();
                        assert_eq!(
                            dir_entry(core, fmt, at(t(l)), l, va).unwrap(),
                            Some(at(t(l + 1)))
                        );
                    }
                }
                let page = 8 << 20;
                let e = vram_pte(version, page);
                let pt = t(dirs.len());
                core.vram
                    .write(pt + ((va >> 12) & 511) * 8, &e.to_le_bytes())
                    .unwrap();
                let w = walk(core, fmt, at(t(0)), va).unwrap();
                assert_eq!(
                    (w.aperture, w.phys, w.size, w.read_only),
                    (Aperture::Vram, page, 4096, false)
                );
            });
        }
    }

    #[test]
    fn bit_extraction() {
        assert_eq!(bits(0xf0, 7, 4), 0xf);
        assert_eq!(bits(1u128 << 100, 115, 76), 1 << 24);
        assert_eq!(bits(u128::MAX, 127, 64), u64::MAX);
    }
}
