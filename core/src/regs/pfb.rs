//! PFB: framebuffer and write-protected regions (`dev_fb.h`).

use crate::register;

register! {
    /// Start of WPR2, the region GSP-RM's firmware protects (0 when no GSP is running).
    pub NV_PFB_PRI_MMU_WPR2_ADDR_LO @ 0x001f_a824 {
        #[bits(4)] __: u8,
        /// 31:4 VAL: address >> 12
        #[bits(28)] pub val: u32,
    }

    /// End of WPR2. Non-zero means a GSP is (or was) running and must be unloaded or reset.
    pub NV_PFB_PRI_MMU_WPR2_ADDR_HI @ 0x001f_a828 {
        #[bits(4)] __: u8,
        /// 31:4 VAL: address >> 12
        #[bits(28)] pub val: u32,
    }
}

register! {
    /// The framebuffer size devinit computed, on TU10x and GA100 (`pascal/gp102/dev_fb.h`,
    /// the header `kmemsysReadUsableFbSize_GP102` reads it with; RM's HAL table uses that
    /// function for TU102-TU117 and GA100, and `NV_USABLE_FB_SIZE_IN_MB` from GA102 on).
    pub NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE @ 0x0010_0ce0 {
        /// 3:0 LOWER_SCALE
        #[bits(4)] pub lower_scale: u8,
        /// 9:4 LOWER_MAG
        #[bits(6)] pub lower_mag: u8,
        #[bits(20)] __: u32,
        /// 30:30 ECC_MODE (1 = ENABLED)
        #[bits(1)] pub ecc_mode: bool,
        #[bits(1)] __: u8,
    }
}

register! {
    /// Who may read the MMU lock range, on GA100 (`ampere/ga100/dev_fb.h`; the
    /// `NV_PFB_PRI_MMU_LOCK_ADDR_LO__PRIV_LEVEL_MASK` `memmgrReadMmuLock_GA100` checks).
    pub NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK @ 0x001f_a7c8 {
        /// 0:0 READ_PROTECTION_LEVEL0 (1 = ENABLE: level 0, the CPU, may read)
        #[bits(1)] pub read_protection_level0: bool,
        #[bits(31)] __: u32,
    }

    /// First byte of the range the VBIOS locked away from the MMU, on GA100 (the row
    /// remapper's memory above the usable FB, bug 2974274 in `mem_mgr_ga100.c`).
    pub NV_PFB_PRI_MMU_LOCK_ADDR_LO @ 0x001f_a82c {
        #[bits(4)] __: u8,
        /// 31:4 VAL: address >> 12 (ALIGNMENT 0xc)
        #[bits(28)] pub val: u32,
    }

    /// Last 4 KiB page of the MMU lock range, on GA100.
    pub NV_PFB_PRI_MMU_LOCK_ADDR_HI @ 0x001f_a830 {
        #[bits(4)] __: u8,
        /// 31:4 VAL: address >> 12 (ALIGNMENT 0xc)
        #[bits(28)] pub val: u32,
    }
}

impl NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE {
    /// Usable bytes: `LOWER_MAG << (LOWER_SCALE + 20)`, less a sixteenth with ECC on
    /// (`kmemsysReadUsableFbSize_GP102`).
    pub fn usable_bytes(self) -> u64 {
        let size = (self.lower_mag() as u64) << (self.lower_scale() as u32 + 20);
        if self.ecc_mode() {
            size / 16 * 15
        } else {
            size
        }
    }
}

impl NV_PFB_PRI_MMU_WPR2_ADDR_LO {
    /// First byte of WPR2.
    pub fn address(self) -> u64 {
        (self.val() as u64) << 12
    }
}

impl NV_PFB_PRI_MMU_WPR2_ADDR_HI {
    /// Last 4 KiB page of WPR2 (the header's ALIGNMENT is 12).
    pub fn address(self) -> u64 {
        (self.val() as u64) << 12
    }

    /// Whether WPR2 is set up, i.e. a GSP was booted and not unloaded.
    pub fn is_active(self) -> bool {
        self.val() != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wpr2_address() {
        let hi = NV_PFB_PRI_MMU_WPR2_ADDR_HI::from(0x0123_4560);
        assert_eq!(hi.address(), 0x0001_2345_6000);
        assert!(hi.is_active());
        assert!(!NV_PFB_PRI_MMU_WPR2_ADDR_HI::from(0xf).is_active());
    }

    #[test]
    fn local_memory_range_size() {
        // LOWER_MAG 15, LOWER_SCALE 10: 15 << 30 bytes; with ECC on, 16 GiB keeps 15/16.
        let r = NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::from((15 << 4) | 10);
        assert_eq!(r.usable_bytes(), 15 << 30);
        let r = NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::from((1 << 30) | (16 << 4) | 10);
        assert_eq!(r.usable_bytes(), 15 << 30);
    }
}
