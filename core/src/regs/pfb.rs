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
}
