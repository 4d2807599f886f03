//! PBUS scratch registers the VBIOS's FWSEC ucode reports through (`published/turing/tu102/
//! dev_bus.h`; the field layout is OpenRM's `kernel_gsp_frts_tu102.c`), and the PROM window.

use crate::register;

register! {
    /// `NV_PBUS_VBIOS_SCRATCH(i)`.
    pub NV_PBUS_VBIOS_SCRATCH @ 0x0000_1400 [64; 4] {
        /// 31:0
        #[bits(32)] pub data: u32,
    }
}

/// `NV_VBIOS_FWSECLIC_SCRATCH_INDEX_0E`: FWSEC-FRTS status.
pub const FWSECLIC_SCRATCH_INDEX_0E: u32 = 0x0e;
/// `NV_VBIOS_FWSECLIC_SCRATCH_INDEX_15`: FWSEC-SB status.
pub const FWSECLIC_SCRATCH_INDEX_15: u32 = 0x15;

/// `NV_VBIOS_FWSECLIC_FRTS_ERR_CODE` (31:16 of scratch 0x0e); 0 = none.
pub fn frts_err_code(scratch_0e: u32) -> u16 {
    (scratch_0e >> 16) as u16
}

/// `NV_VBIOS_FWSECLIC_SB_ERR_CODE` (15:0 of scratch 0x15); 0 = none.
pub fn sb_err_code(scratch_15: u32) -> u16 {
    scratch_15 as u16
}

/// `NV_PROM_DATA(0)`: BAR0 offset of the window onto the VBIOS ROM (`dev_ext_devices.h`).
pub const NV_PROM_DATA: u32 = 0x0030_0000;
/// Bytes of the PROM window nvbare reads (the largest ROM OpenRM walks).
pub const PROM_WINDOW_SIZE: u32 = 0x10_0000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::RegisterArray;

    #[test]
    fn scratch_layout() {
        assert_eq!(
            NV_PBUS_VBIOS_SCRATCH::offset(FWSECLIC_SCRATCH_INDEX_0E).unwrap(),
            0x1438
        );
        assert_eq!(frts_err_code(0x0005_1234), 5);
        assert_eq!(sb_err_code(0x0005_1234), 0x1234);
    }
}
