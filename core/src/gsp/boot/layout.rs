//! The carve-out at the top of the framebuffer that GSP-RM and the boot firmware own.
//!
//! Turing to Ada: the CPU computes every offset (`kgspCalculateFbLayout_TU102`), top down:
//!
//! ```text
//! fbSize            VGA workspace (fbSize - 1 MiB)
//! gspFwWprEnd       (128 KiB aligned)
//! frtsOffset        FRTS, 1 MiB (FWSEC-FRTS puts WPR2 here)
//! bootBinOffset     bootloader image (4 KiB aligned)
//! gspFwOffset       GSP-RM image (64 KiB aligned)
//! gspFwHeapOffset   WPR heap (1 MiB aligned)
//! gspFwWprStart     WPR metadata (1 MiB)
//! nonWprHeapOffset  = gspFwRsvdStart, non-WPR heap
//! ```
//!
//! Hopper on: the CPU passes only sizes; the GSP-FMC (ACR) places everything
//! (`kgspCalculateFbLayout_GH100`), and the FSP puts FRTS at `frtsVidmemOffset` from the end
//! of FB.
//!
//! The WPR heap size follows `_kgspCalculateFwHeapSize` and `gsp_fw_heap.h` (r570): OS carveout
//! 22 MiB (LIBOS3) + base 8 MiB (Turing-Ada) or 14 MiB (Hopper+) + 96 KiB per GiB of FB (rounded
//! up to 1 MiB) + 96 MiB for client allocations, clamped to [88, 280] MiB.
//!
//! Not modelled: the VBIOS's MMU lock range (`memmgrReadMmuLock`; the VGA workspace is taken
//! as the conservative 1 MiB below the end of FB instead of `NV_PDISP_VGA_WORKSPACE_BASE`) and
//! the recovery margin of a retried boot.

use crate::chip::{Architecture, ChipInfo, Chipset};
use crate::gsp::boot::abi::{GSP_FW_WPR_META_MAGIC, GSP_FW_WPR_META_REVISION, GspFwWprMeta};
use crate::hal::{Mmio, is_register_value};
use crate::mm::{AllocError, FbLayout, FbOwner};
use crate::regs::Register;
use crate::regs::pfb::{
    NV_PFB_PRI_MMU_LOCK_ADDR_HI, NV_PFB_PRI_MMU_LOCK_ADDR_LO,
    NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `NV_PGC6_AON_FRTS_INPUT_WPR_SIZE_SECURE_SCRATCH_GROUP_03_0_WPR_SIZE_1MB_IN_4K` << 12.
pub const FRTS_SIZE: u64 = MIB;
/// `DRF_SIZE(NV_PRAMIN)`: the VGA workspace when the display's base is not read.
pub const VGA_WORKSPACE_SIZE: u64 = MIB;
/// `vgaWorkspaceSize` the CPU asks for on Hopper on (`kgspCalculateFbLayout_GH100`).
pub const VGA_WORKSPACE_SIZE_GH100: u64 = 128 * KIB;
/// `kfspGetExtraReservedMemorySize_GH100` (bug 3763996).
pub const FSP_EXTRA_RESERVED: u64 = 4 * KIB;

/// Sizes that differ per chip family (`r570` `nvkm_rm_wpr` tables, OpenRM HALs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WprParams {
    /// `kgspGetFwHeapParamOsCarveoutSize`.
    pub os_carveout: u64,
    /// `fwHeapParamBaseSize`.
    pub base_rm: u64,
    /// `kgspGetMinWprHeapSizeMB` in bytes.
    pub min_heap: u64,
    /// `kgspGetMaxWprHeapSizeMB` in bytes.
    pub max_heap: u64,
    /// `kgspGetNonWprHeapSize`.
    pub non_wpr_heap: u64,
    /// `kpmuReservedMemorySizeGet` (self-initialising PMU: Blackwell).
    pub pmu_reserved: u64,
    /// `memmgrGetFBEndReserveSizeEstimate`.
    pub fb_end_reserve_estimate: u64,
    /// `kgspGetFrtsSize`: [`FRTS_SIZE`], or 0 on GA100 (`kgspGetFrtsSize_4a4dee` in
    /// `g_kernel_gsp_nvoc.c`), where FWSEC-FRTS does not run (`kgspBootstrap_TU102` runs it only
    /// for a non-empty FRTS region).
    pub frts_size: u64,
}

impl WprParams {
    /// The parameters of a chip.
    pub fn for_chip(info: &ChipInfo) -> WprParams {
        let libos2 =
            matches!(info.architecture, Architecture::Turing) || info.chipset == Chipset::GA100;
        let hopper_plus = matches!(
            info.architecture,
            Architecture::Hopper | Architecture::Blackwell
        );
        let gb20x = matches!(
            info.chipset,
            Chipset::GB202 | Chipset::GB203 | Chipset::GB205 | Chipset::GB206 | Chipset::GB207
        );
        let blackwell = matches!(info.architecture, Architecture::Blackwell);
        WprParams {
            os_carveout: if libos2 { 0 } else { 22 * MIB },
            base_rm: if hopper_plus { 14 * MIB } else { 8 * MIB },
            min_heap: if libos2 { 64 * MIB } else { 88 * MIB },
            max_heap: if libos2 { 256 * MIB } else { 280 * MIB },
            non_wpr_heap: if gb20x {
                0x22_0000
            } else if hopper_plus {
                2 * MIB
            } else {
                MIB
            },
            // 0x800000 backing store + 0x1000000 surfaces + 4 KiB misc, 128 KiB aligned.
            pmu_reserved: if blackwell { 0x182_0000 } else { 0 },
            fb_end_reserve_estimate: if blackwell { 0x22_0000 } else { 0x20_0000 },
            frts_size: if info.chipset == Chipset::GA100 {
                0
            } else {
                FRTS_SIZE
            },
        }
    }

    /// The WPR heap size for `fb_size` bytes of usable framebuffer.
    pub fn heap_size(&self, fb_size: u64) -> u64 {
        let fb_gib = fb_size.div_ceil(GIB);
        let per_gb = (96 * KIB).saturating_mul(fb_gib).next_multiple_of(MIB);
        let client = (48 * KIB * 2048).next_multiple_of(MIB);
        let heap = self
            .os_carveout
            .saturating_add(self.base_rm)
            .saturating_add(per_gb)
            .saturating_add(client);
        heap.clamp(self.min_heap, self.max_heap)
    }

    /// `NVDM_PAYLOAD_COT.frtsVidmemOffset`: where FRTS ends, counted from the end of FB
    /// (`kfspPrepareBootCommands_GH100`).
    pub fn frts_vidmem_offset(&self) -> u64 {
        let mut off = self.fb_end_reserve_estimate;
        if self.pmu_reserved != 0 {
            off = (off + FSP_EXTRA_RESERVED + self.pmu_reserved).next_multiple_of(2 * MIB);
        }
        off
    }
}

/// Why a layout cannot be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// The framebuffer is too small for the carve-out.
    FbTooSmall {
        /// Usable bytes.
        fb_size: u64,
        /// Bytes the carve-out needs.
        needed: u64,
    },
    /// The reservations do not fit the framebuffer layout.
    Reserve(AllocError),
    /// GA100: the MMU lock range may not be read by the CPU (`memmgrReadMmuLock_GA100` fails
    /// the layout then).
    MmuLockUnreadable {
        /// `NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK` as read.
        plm: u32,
    },
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            LayoutError::FbTooSmall { fb_size, needed } => write!(
                f,
                "the framebuffer ({fb_size:#x} bytes, NV_USABLE_FB_SIZE_IN_MB) is too small for \
                 the GSP carve-out ({needed:#x} bytes): the VBIOS devinit may not have run; \
                 reset the GPU"
            ),
            LayoutError::Reserve(e) => write!(f, "framebuffer reservation: {e}"),
            LayoutError::MmuLockUnreadable { plm } => write!(
                f,
                "the VBIOS's MMU lock range (NV_PFB_PRI_MMU_LOCK_ADDR_LO/HI) is not readable \
                 (NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK {plm:#x}): the GSP layout must stay \
                 below it; reset the GPU so that devinit runs again"
            ),
        }
    }
}

fn sub(a: u64, b: u64, fb_size: u64) -> Result<u64, LayoutError> {
    a.checked_sub(b).ok_or(LayoutError::FbTooSmall {
        fb_size,
        needed: b.saturating_sub(a).saturating_add(fb_size),
    })
}

fn align_down(v: u64, a: u64) -> u64 {
    v & !(a - 1)
}

/// The range the VBIOS locked away from the MMU (GA100: the row remapper's memory above the
/// usable FB, `mem_mgr_ga100.c` bug 2974274), as `memmgrReadMmuLock_GA100` reads it: `None`
/// on other chips (`memmgrReadMmuLock_ccda6f`) and where HI < LO (no lock).
pub fn read_mmu_lock<M: Mmio + ?Sized>(
    bar0: &M,
    info: &ChipInfo,
) -> Result<Option<(u64, u64)>, LayoutError> {
    if info.chipset != Chipset::GA100 {
        return Ok(None);
    }
    let plm = bar0.read32(NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK::OFFSET as usize);
    if !is_register_value(plm)
        || !NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK::from(plm).read_protection_level0()
    {
        return Err(LayoutError::MmuLockUnreadable { plm });
    }
    let lo = (NV_PFB_PRI_MMU_LOCK_ADDR_LO::read(bar0).val() as u64) << 12;
    let hi = (NV_PFB_PRI_MMU_LOCK_ADDR_HI::read(bar0).val() as u64) << 12;
    Ok((hi >= lo).then_some((lo, hi)))
}

/// Fills the FB-layout fields of `meta` as `kgspCalculateFbLayout_TU102` does, for a
/// framebuffer of `fb_size` bytes, a bootloader of `boot_bin_size` bytes and a GSP-RM image
/// of `sizeOfRadix3Elf` bytes (already in `meta`); WPR ends below the VBIOS's MMU lock range
/// where there is one (`vbiosReservedOffset`).
pub fn layout_tu102(
    meta: &mut GspFwWprMeta,
    params: &WprParams,
    fb_size: u64,
    mmu_lock: Option<(u64, u64)>,
) -> Result<(), LayoutError> {
    meta.fbSize = fb_size;
    meta.vgaWorkspaceOffset = sub(fb_size, VGA_WORKSPACE_SIZE, fb_size)?;
    meta.vgaWorkspaceSize = VGA_WORKSPACE_SIZE;
    let vbios_reserved = match mmu_lock {
        Some((lo, _)) => lo.min(meta.vgaWorkspaceOffset),
        None => meta.vgaWorkspaceOffset,
    };
    meta.gspFwWprEnd = align_down(vbios_reserved, 128 * KIB);
    meta.frtsSize = params.frts_size;
    meta.frtsOffset = sub(meta.gspFwWprEnd, params.frts_size, fb_size)?;
    meta.bootBinOffset = align_down(
        sub(meta.frtsOffset, meta.sizeOfBootloader, fb_size)?,
        4 * KIB,
    );
    meta.gspFwOffset = align_down(
        sub(meta.bootBinOffset, meta.sizeOfRadix3Elf, fb_size)?,
        64 * KIB,
    );
    let non_wpr = params.non_wpr_heap.next_multiple_of(MIB);
    let wpr_meta_size = MIB; // NV_ALIGN_UP(sizeof(GspFwWprMeta), 1 MiB)
    let heap = params.heap_size(fb_size);
    meta.gspFwHeapOffset = align_down(sub(meta.gspFwOffset, heap, fb_size)?, MIB);
    meta.gspFwHeapSize = align_down(meta.gspFwOffset - meta.gspFwHeapOffset, MIB);
    meta.gspFwWprStart = sub(meta.gspFwHeapOffset, wpr_meta_size, fb_size)?;
    meta.nonWprHeapSize = non_wpr;
    meta.nonWprHeapOffset = sub(meta.gspFwWprStart, non_wpr, fb_size)?;
    meta.gspFwRsvdStart = meta.nonWprHeapOffset;
    meta.bootCount = 0;
    meta.verified = 0;
    meta.revision = GSP_FW_WPR_META_REVISION;
    meta.magic = GSP_FW_WPR_META_MAGIC;
    Ok(())
}

/// Fills the size fields of `meta` the CPU provides on Hopper on (`kgspCalculateFbLayout_GH100`);
/// the GSP-FMC computes the offsets.
pub fn layout_gh100(meta: &mut GspFwWprMeta, params: &WprParams, fb_size: u64) {
    meta.vgaWorkspaceSize = VGA_WORKSPACE_SIZE_GH100;
    meta.pmuReservedSize = params.pmu_reserved as u32;
    meta.nonWprHeapSize = params.non_wpr_heap;
    meta.gspFwHeapSize = params.heap_size(fb_size);
    meta.frtsSize = FRTS_SIZE;
    meta.revision = GSP_FW_WPR_META_REVISION;
    meta.magic = GSP_FW_WPR_META_MAGIC;
}

/// The reservations of a Turing-Ada layout (the whole region from `gspFwRsvdStart`, and its
/// parts for reports).
pub fn fb_layout_tu102(meta: &GspFwWprMeta) -> Result<FbLayout, LayoutError> {
    let mut l = FbLayout::new(meta.fbSize);
    let r = |l: &mut FbLayout, base: u64, size: u64, owner| {
        l.reserve(base, size, owner).map_err(LayoutError::Reserve)
    };
    r(
        &mut l,
        meta.gspFwRsvdStart,
        meta.fbSize - meta.gspFwRsvdStart,
        FbOwner::GspReserved,
    )?;
    r(
        &mut l,
        meta.nonWprHeapOffset,
        meta.nonWprHeapSize,
        FbOwner::NonWprHeap,
    )?;
    r(
        &mut l,
        meta.gspFwWprStart,
        meta.gspFwWprEnd - meta.gspFwWprStart,
        FbOwner::Wpr2,
    )?;
    r(
        &mut l,
        meta.gspFwHeapOffset,
        meta.gspFwHeapSize,
        FbOwner::GspFwHeap,
    )?;
    r(
        &mut l,
        meta.gspFwOffset,
        meta.sizeOfRadix3Elf,
        FbOwner::GspFwImage,
    )?;
    r(
        &mut l,
        meta.bootBinOffset,
        meta.sizeOfBootloader,
        FbOwner::BootBin,
    )?;
    if meta.frtsSize != 0 {
        r(&mut l, meta.frtsOffset, meta.frtsSize, FbOwner::Frts)?;
    }
    r(
        &mut l,
        meta.vgaWorkspaceOffset,
        meta.vgaWorkspaceSize,
        FbOwner::VgaWorkspace,
    )?;
    Ok(l)
}

/// The reservations on Hopper on, from what the hardware reports after boot: WPR2
/// (`[wpr2_lo, wpr2_end)`), the non-WPR heap below it, everything above it to the end of FB
/// (FRTS, PMU reservation, VGA workspace), and `non_wpr_heap_offset` from GSP-RM's
/// `fwWprLayoutOffset` when it reports one.
pub fn fb_layout_gh100(
    fb_size: u64,
    params: &WprParams,
    wpr2_lo: u64,
    wpr2_end: u64,
    non_wpr_heap_offset: Option<u64>,
) -> Result<FbLayout, LayoutError> {
    let mut l = FbLayout::new(fb_size);
    let guess = wpr2_lo.saturating_sub(params.non_wpr_heap.next_multiple_of(MIB));
    let start = match non_wpr_heap_offset {
        Some(o) if o != 0 && o < wpr2_lo => o.min(guess),
        _ => guess,
    };
    if start >= fb_size || wpr2_end > fb_size || wpr2_lo >= wpr2_end {
        return Err(LayoutError::FbTooSmall {
            fb_size,
            needed: fb_size.saturating_sub(start),
        });
    }
    let r = |l: &mut FbLayout, base: u64, size: u64, owner| {
        l.reserve(base, size, owner).map_err(LayoutError::Reserve)
    };
    r(&mut l, start, fb_size - start, FbOwner::GspReserved)?;
    r(&mut l, wpr2_lo, wpr2_end - wpr2_lo, FbOwner::Wpr2)?;
    let frts_end = fb_size.saturating_sub(params.frts_vidmem_offset());
    if let Some(frts) = frts_end.checked_sub(FRTS_SIZE) {
        r(&mut l, frts, FRTS_SIZE, FbOwner::Frts)?;
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_sizes_match_known_values() {
        // tinygrad's hard-coded GA/AD heap (24 GiB) and GB202 heap (32 GiB).
        let ad = WprParams::for_chip(Chipset::AD102.info());
        assert_eq!(ad.heap_size(24_564 << 20), 0x810_0000);
        let gb = WprParams::for_chip(Chipset::GB202.info());
        assert_eq!(gb.heap_size(32_607 << 20), 0x870_0000);
        assert_eq!(gb.non_wpr_heap, 0x22_0000);
        assert_eq!(gb.pmu_reserved, 0x182_0000);
        // docs/mm.md: 146 MiB on a 141 GiB H200.
        let gh = WprParams::for_chip(Chipset::GH100.info());
        assert_eq!(gh.heap_size(143_771 << 20) >> 20, 146);
        // Clamps.
        assert_eq!(ad.heap_size(0), 0x810_0000 - (3 << 20));
        assert_eq!(gh.heap_size(u64::MAX), 280 << 20);
        // Turing: LIBOS2, no OS carveout, 64 MiB minimum.
        let tu = WprParams::for_chip(Chipset::TU102.info());
        assert_eq!(tu.heap_size(8 << 30), (8 + 1 + 96) << 20);
    }

    #[test]
    fn frts_vidmem_offsets() {
        // tinygrad's GB202 COT: frtsVidmemOffset 0x1c00000.
        assert_eq!(
            WprParams::for_chip(Chipset::GB202.info()).frts_vidmem_offset(),
            0x1c0_0000
        );
        assert_eq!(
            WprParams::for_chip(Chipset::GH100.info()).frts_vidmem_offset(),
            0x20_0000
        );
    }

    #[test]
    fn ada_layout_is_ordered_and_aligned() {
        let p = WprParams::for_chip(Chipset::AD102.info());
        let fb = 24_564u64 << 20;
        let mut m = GspFwWprMeta {
            sizeOfBootloader: 0x9000,
            sizeOfRadix3Elf: 0x3c9_9000,
            ..Default::default()
        };
        layout_tu102(&mut m, &p, fb, None).unwrap();
        // tinygrad: VGA at vram-1M, FRTS 1 MiB below, heap 0x8100000.
        assert_eq!(m.vgaWorkspaceOffset, fb - MIB);
        assert_eq!(m.frtsOffset, fb - 2 * MIB);
        assert_eq!(m.gspFwWprEnd, fb - MIB);
        assert_eq!(m.bootBinOffset % 0x1000, 0);
        assert!(m.bootBinOffset + m.sizeOfBootloader <= m.frtsOffset);
        assert_eq!(m.gspFwOffset % 0x1_0000, 0);
        assert!(m.gspFwOffset + m.sizeOfRadix3Elf <= m.bootBinOffset);
        assert_eq!(m.gspFwHeapOffset % MIB, 0);
        assert_eq!(m.gspFwHeapSize, 0x810_0000);
        assert_eq!(m.gspFwWprStart, m.gspFwHeapOffset - MIB);
        assert_eq!(m.nonWprHeapOffset, m.gspFwWprStart - MIB);
        assert_eq!(m.gspFwRsvdStart, m.nonWprHeapOffset);
        let l = fb_layout_tu102(&m).unwrap();
        assert_eq!(l.reservations()[0].base, m.gspFwRsvdStart);
        assert_eq!(l.reservations()[0].base + l.reservations()[0].size, fb);
        // More than tinygrad's 64 MiB: about 198 MiB on a 24 GiB board.
        assert!(fb - m.gspFwRsvdStart > 190 * MIB);
    }

    #[test]
    fn wpr_ends_below_the_vbios_mmu_lock() {
        let p = WprParams::for_chip(Chipset::GA100.info());
        let fb = 40_960u64 << 20;
        let lock = (fb - 16 * MIB, fb - 4 * KIB);
        let mut m = GspFwWprMeta {
            sizeOfBootloader: 0x9000,
            sizeOfRadix3Elf: 0x3c9_9000,
            ..Default::default()
        };
        layout_tu102(&mut m, &p, fb, Some(lock)).unwrap();
        assert_eq!(m.gspFwWprEnd, lock.0);
        let mut free = GspFwWprMeta {
            sizeOfBootloader: 0x9000,
            sizeOfRadix3Elf: 0x3c9_9000,
            ..Default::default()
        };
        layout_tu102(&mut free, &p, fb, None).unwrap();
        assert_eq!(free.gspFwWprEnd, fb - MIB);
        // A lock at 0 (HI >= LO, as RM reads it) leaves no room: an error, not a panic.
        assert!(layout_tu102(&mut free, &p, fb, Some((0, 0))).is_err());
    }

    #[test]
    fn ga100_has_no_frts_region_and_turing_has_one() {
        // kgspGetFrtsSize_4a4dee (GA100) returns 0; _TU102 (TU10x, GA102 on) the 1 MiB region.
        for (chip, frts) in [
            (Chipset::GA100, 0),
            (Chipset::TU102, FRTS_SIZE),
            (Chipset::TU104, FRTS_SIZE),
            (Chipset::GA102, FRTS_SIZE),
        ] {
            let p = WprParams::for_chip(chip.info());
            assert_eq!(p.frts_size, frts, "{chip}");
            let fb = 40_960u64 << 20;
            let mut m = GspFwWprMeta {
                sizeOfBootloader: 0x9000,
                sizeOfRadix3Elf: 0x3c9_9000,
                ..Default::default()
            };
            layout_tu102(&mut m, &p, fb, None).unwrap();
            assert_eq!(m.frtsSize, frts, "{chip}");
            assert_eq!(m.frtsOffset, m.gspFwWprEnd - frts, "{chip}");
            assert!(
                m.bootBinOffset + m.sizeOfBootloader <= m.frtsOffset,
                "{chip}"
            );
            let l = fb_layout_tu102(&m).unwrap();
            let has_frts = l.reservations().iter().any(|r| r.owner == FbOwner::Frts);
            assert_eq!(has_frts, frts != 0, "{chip}");
        }
    }

    #[test]
    fn tiny_framebuffers_are_errors_not_panics() {
        let p = WprParams::for_chip(Chipset::AD102.info());
        for fb in [0u64, 4096, 64 * MIB, 150 * MIB] {
            let mut m = GspFwWprMeta {
                sizeOfBootloader: 0x9000,
                sizeOfRadix3Elf: 0x3c9_9000,
                ..Default::default()
            };
            assert!(matches!(
                layout_tu102(&mut m, &p, fb, None),
                Err(LayoutError::FbTooSmall { .. })
            ));
        }
        let gh = WprParams::for_chip(Chipset::GH100.info());
        assert!(fb_layout_gh100(1 << 30, &gh, 2 << 30, 3 << 30, None).is_err());
        assert!(fb_layout_gh100(1 << 30, &gh, 0, 0, None).is_err());
    }
}
