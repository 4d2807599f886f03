//! Physical VRAM: the framebuffer layout the boot code reports and an allocator that never
//! hands out what the GSP or firmware own.
//!
//! What the GSP and firmware own is not a fixed amount. On Turing to Ada the CPU computes the
//! layout from the top of the framebuffer down (`kgspCalculateFbLayout_TU102`): VGA workspace,
//! FRTS, the boot binary, the GSP-RM ELF image, the WPR heap, the WPR metadata and the non-WPR
//! heap; on Hopper on, the GSP-FMC places WPR2 itself (`kgspCalculateFbLayout_GH100`) and adds
//! a PMU reservation. The heap alone is `os carveout + base + 96 KiB per GiB of FB + 96 MiB`
//! clamped to [88, 280] MiB (`gsp_fw_heap.h`, `kgspGetFwHeapSize`): 129 MiB on a 24 GiB AD102,
//! 146 MiB on a 141 GiB H200, before the ELF image and the rest. tinygrad's fixed 64 MiB at
//! the top is therefore too little. nvbare takes the reserved ranges from the boot code
//! ([`FbLayout`]: everything from `gspFwRsvdStart` to the end of FB, plus the FB regions GSP-RM
//! reports as reserved or protected) and reserves exactly those.

use super::format::PageSize;
use super::range::{AllocError, FitPolicy, RangeAllocator};
use crate::chip::{Architecture, ChipInfo, Chipset};
use crate::hal::Mmio;
use crate::regs::Register;
use crate::regs::pfb::NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE;
use crate::regs::pgc6::NV_PGC6_AON_SECURE_SCRATCH_GROUP_42;

/// Granule of VRAM allocations.
pub const VRAM_GRANULE: u64 = 4096;

/// Which register holds the usable framebuffer size devinit computed (RM's
/// `kmemsysReadUsableFbSize` HAL, `g_kern_mem_sys_nvoc.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FbSizeSource {
    /// TU102-TU117 and GA100: `NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE`
    /// (`kmemsysReadUsableFbSize_GP102`).
    LocalMemoryRange,
    /// GA102 on: `NV_USABLE_FB_SIZE_IN_MB` (`NV_PGC6_AON_SECURE_SCRATCH_GROUP_42`,
    /// `kmemsysReadUsableFbSize_GA102`).
    UsableFbSizeInMb,
}

impl FbSizeSource {
    /// The source for a chip.
    pub fn for_chip(info: &ChipInfo) -> FbSizeSource {
        if info.architecture == Architecture::Turing || info.chipset == Chipset::GA100 {
            FbSizeSource::LocalMemoryRange
        } else {
            FbSizeSource::UsableFbSizeInMb
        }
    }

    /// The register's address, for the raw read that tells a lost device (all ones) apart.
    pub fn offset(self) -> usize {
        match self {
            FbSizeSource::LocalMemoryRange => NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::OFFSET as usize,
            FbSizeSource::UsableFbSizeInMb => NV_PGC6_AON_SECURE_SCRATCH_GROUP_42::OFFSET as usize,
        }
    }

    /// Usable bytes decoded from the register's raw value.
    pub fn decode(self, raw: u32) -> u64 {
        match self {
            FbSizeSource::LocalMemoryRange => {
                NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::from(raw).usable_bytes()
            }
            FbSizeSource::UsableFbSizeInMb => {
                NV_PGC6_AON_SECURE_SCRATCH_GROUP_42::from(raw).vram_bytes()
            }
        }
    }

    /// Reads the usable framebuffer size in bytes.
    pub fn read<M: Mmio + ?Sized>(self, bar0: &M) -> u64 {
        self.decode(bar0.read32(self.offset()))
    }
}

/// Who owns a reserved VRAM range (for reports; all are treated alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FbOwner {
    /// `vgaWorkspaceOffset`/`Size`: the VBIOS's VGA workspace at the top of FB.
    VgaWorkspace,
    /// `frtsOffset`/`Size`: firmware runtime security data (FWSEC-FRTS or FSP).
    Frts,
    /// `pmuReservedSize` (570+): PMU memory reservation.
    PmuReserved,
    /// `bootBinOffset`: the booter / GSP-FMC image.
    BootBin,
    /// `gspFwOffset`: the GSP-RM ELF image.
    GspFwImage,
    /// `gspFwHeapOffset`/`Size`: the GSP-RM WPR heap.
    GspFwHeap,
    /// WPR2 as a whole (`NV_PFB_PRI_MMU_WPR2_ADDR_LO`/`HI`, or `gspFwWprStart`..`gspFwWprEnd`).
    Wpr2,
    /// `nonWprHeapOffset`/`Size`: the GSP's non-WPR heap (starts at `gspFwRsvdStart`).
    NonWprHeap,
    /// Everything from `gspFwRsvdStart` to the end of FB.
    GspReserved,
    /// An FB region GSP-RM reports reserved or protected (`NV2080_CTRL_FB_GET_FB_REGION_INFO`).
    RmReserved,
    /// Something else, named.
    Other(&'static str),
}

/// A VRAM range nobody else may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FbReservation {
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// Owner.
    pub owner: FbOwner,
}

/// Most reservations an [`FbLayout`] holds.
pub const FB_LAYOUT_CAPACITY: usize = 32;

/// The framebuffer as the boot code found it: its size and the ranges owned by others.
#[derive(Debug, Clone, Default)]
pub struct FbLayout {
    fb_size: u64,
    reserved: heapless::Vec<FbReservation, FB_LAYOUT_CAPACITY>,
}

impl FbLayout {
    /// A framebuffer of `fb_size` usable bytes (`NV_USABLE_FB_SIZE_IN_MB`, or the WPR meta's
    /// `fbSize`) with nothing reserved yet.
    pub fn new(fb_size: u64) -> FbLayout {
        FbLayout {
            fb_size,
            reserved: heapless::Vec::new(),
        }
    }

    /// Marks `[base, base + size)` as owned by `owner`. Ranges may overlap; they must lie inside
    /// the framebuffer.
    pub fn reserve(&mut self, base: u64, size: u64, owner: FbOwner) -> Result<(), AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        match base.checked_add(size) {
            Some(end) if end <= self.fb_size => {}
            _ => return Err(AllocError::Unavailable { addr: base, size }),
        }
        self.reserved
            .push(FbReservation { base, size, owner })
            .map_err(|_| AllocError::TooManyBlocks {
                capacity: FB_LAYOUT_CAPACITY,
            })
    }

    /// Reserves everything from `gsp_fw_rsvd_start` (the WPR meta's `gspFwRsvdStart`, which
    /// is also `nonWprHeapOffset`) to the end of FB: the GSP's whole region.
    pub fn reserve_gsp_region(&mut self, gsp_fw_rsvd_start: u64) -> Result<(), AllocError> {
        let size = self.fb_size.saturating_sub(gsp_fw_rsvd_start);
        self.reserve(gsp_fw_rsvd_start, size, FbOwner::GspReserved)
    }

    /// Usable framebuffer bytes.
    pub fn fb_size(&self) -> u64 {
        self.fb_size
    }

    /// The reservations, in the order given.
    pub fn reservations(&self) -> &[FbReservation] {
        &self.reserved
    }
}

/// Physical VRAM allocator with at most `N - 1` live blocks (reservations included).
#[derive(Debug, Clone)]
pub struct VramAllocator<const N: usize> {
    inner: RangeAllocator<N>,
    reserved_bytes: u64,
}

impl<const N: usize> VramAllocator<N> {
    /// An allocator over the framebuffer of `layout` with its reservations taken out (each
    /// widened to 4 KiB boundaries; overlapping ones merged).
    pub fn new(layout: &FbLayout, policy: FitPolicy) -> Result<Self, AllocError> {
        let mut v = Self::empty();
        v.reset(layout, policy)?;
        Ok(v)
    }

    /// An allocator managing nothing, for `static` or in-place initialisation with
    /// [`VramAllocator::reset`].
    pub const fn empty() -> Self {
        VramAllocator {
            inner: RangeAllocator::empty(),
            reserved_bytes: 0,
        }
    }

    /// Forgets every block and manages the framebuffer of `layout` from now on.
    pub fn reset(&mut self, layout: &FbLayout, policy: FitPolicy) -> Result<(), AllocError> {
        let fb = layout.fb_size & !(VRAM_GRANULE - 1);
        let mut ranges: heapless::Vec<(u64, u64), FB_LAYOUT_CAPACITY> = heapless::Vec::new();
        for r in layout.reservations() {
            let s = r.base & !(VRAM_GRANULE - 1);
            let e = r
                .base
                .saturating_add(r.size)
                .saturating_add(VRAM_GRANULE - 1)
                & !(VRAM_GRANULE - 1);
            let _ = ranges.push((s, e.min(fb)));
        }
        ranges.sort_unstable();
        let mut merged: heapless::Vec<(u64, u64), FB_LAYOUT_CAPACITY> = heapless::Vec::new();
        for (s, e) in ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => {
                    let _ = merged.push((s, e));
                }
            }
        }
        if merged.len() >= RangeAllocator::<N>::capacity() {
            return Err(AllocError::TooManyBlocks {
                capacity: RangeAllocator::<N>::capacity(),
            });
        }
        self.inner.reset(0, fb, VRAM_GRANULE, policy)?;
        self.reserved_bytes = 0;
        for (s, e) in merged {
            if e > s {
                // Disjoint, inside the FB and within capacity (checked above): cannot fail.
                self.inner.alloc_at(s, e - s, true)?;
                self.reserved_bytes += e - s;
            }
        }
        Ok(())
    }

    /// Allocates `size` bytes (a multiple of 4 KiB) aligned to `align`.
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.inner.alloc(size, align)
    }

    /// Allocates `size` bytes aligned to the largest page size not above `size`, so the mapper
    /// can use big or huge pages for it.
    pub fn alloc_for_mapping(&mut self, size: u64) -> Result<u64, AllocError> {
        let align = PageSize::DESCENDING
            .iter()
            .map(|p| p.bytes())
            .find(|&b| b <= size)
            .unwrap_or(VRAM_GRANULE);
        self.inner.alloc(size, align)
    }

    /// Frees the block at `addr`; returns its size. Reservations cannot be freed.
    pub fn free(&mut self, addr: u64) -> Result<u64, AllocError> {
        self.inner.free(addr)
    }

    /// Bytes held back for the GSP and firmware.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved_bytes
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.inner.free_bytes()
    }

    /// The largest free range.
    pub fn largest_free(&self) -> u64 {
        self.inner.largest_free()
    }

    /// The underlying range allocator (for statistics and iteration).
    pub fn ranges(&self) -> &RangeAllocator<N> {
        &self.inner
    }

    /// Whether `[addr, addr + size)` touches a reservation.
    pub fn is_reserved(&self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        self.inner
            .used_ranges()
            .any(|(s, e, r)| r && s < end && addr < e)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// An AD102-like layout (24 GiB): the GSP region from gspFwRsvdStart up, VGA at the top.
    fn ad102() -> FbLayout {
        let fb = 24_564u64 << 20;
        let mut l = FbLayout::new(fb);
        l.reserve(fb - (1 << 20), 1 << 20, FbOwner::VgaWorkspace)
            .unwrap();
        l.reserve(fb - (2 << 20), 1 << 20, FbOwner::Frts).unwrap();
        l.reserve_gsp_region(fb - (200 << 20)).unwrap();
        l
    }

    #[test]
    fn reservations_are_never_handed_out() {
        let l = ad102();
        let mut v = VramAllocator::<64>::new(&l, FitPolicy::FirstFit).unwrap();
        assert_eq!(v.reserved_bytes(), 200 << 20);
        assert_eq!(v.free_bytes(), l.fb_size() - (200 << 20));
        // Take everything that is free in 1 GiB pieces, then the rest in 2 MiB pieces.
        let mut got = Vec::new();
        while let Ok(a) = v.alloc(1 << 30, 1 << 21) {
            got.push((a, 1u64 << 30));
        }
        while let Ok(a) = v.alloc(2 << 20, 1 << 21) {
            got.push((a, 2 << 20));
        }
        for &(a, n) in &got {
            assert!(!v.is_reserved(a, n));
            assert!(a + n <= l.fb_size() - (200 << 20));
        }
        let top = l.fb_size() - (200 << 20);
        assert_eq!(v.free(top), Err(AllocError::Reserved { addr: top }));
    }

    #[test]
    fn bad_layouts() {
        let mut l = FbLayout::new(1 << 30);
        assert!(l.reserve((1 << 30) - 4096, 8192, FbOwner::Frts).is_err());
        assert_eq!(l.reserve(0, 0, FbOwner::Frts), Err(AllocError::ZeroSize));
        assert!(l.reserve(u64::MAX, 2, FbOwner::Frts).is_err());
        // Overlapping and unaligned reservations merge and widen.
        l.reserve(0x1800, 0x1000, FbOwner::RmReserved).unwrap();
        l.reserve(0x1000, 0x800, FbOwner::Other("a")).unwrap();
        l.reserve(0x2000, 0x3000, FbOwner::Other("b")).unwrap();
        let v = VramAllocator::<8>::new(&l, FitPolicy::FirstFit).unwrap();
        assert_eq!(v.reserved_bytes(), 0x4000);
        assert!(v.is_reserved(0x1000, 0x1000));
        assert!(!v.is_reserved(0x5000, 0x1000));
    }

    proptest! {
        #[test]
        fn allocations_avoid_reservations_and_all_memory_returns(
            rsv in proptest::collection::vec((0u64..1024, 1u64..64), 0..8),
            sizes in proptest::collection::vec((1u64..256, 0u32..10), 1..64),
        ) {
            let fb = 1024 * 0x10_0000u64; // 1 GiB in 1 MiB units
            let mut l = FbLayout::new(fb);
            for (mb, len) in &rsv {
                let base = mb * 0x10_0000;
                let size = (*len * 0x10_0000).min(fb - base);
                l.reserve(base, size, FbOwner::Other("test")).unwrap();
            }
            let mut v = VramAllocator::<128>::new(&l, FitPolicy::BestFit).unwrap();
            let free0 = v.free_bytes();
            let mut live = Vec::new();
            for (pages, ash) in sizes {
                let size = pages * 0x1000;
                if let Ok(a) = v.alloc(size, 0x1000 << ash) {
                    prop_assert!(!v.is_reserved(a, size));
                    for &(b, n) in &live {
                        prop_assert!(a + size <= b || b + n <= a, "overlap");
                    }
                    live.push((a, size));
                }
            }
            for (a, n) in live {
                prop_assert_eq!(v.free(a), Ok(n));
            }
            prop_assert_eq!(v.free_bytes(), free0);
        }
    }
}
