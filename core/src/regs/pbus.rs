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

register! {
    /// `NV_PBUS_BAR1_BLOCK` (Turing to Ada, `dev_bus.h`): BAR1's instance block and mode.
    /// Physical mode makes BAR1 a linear window onto VRAM from address 0.
    pub NV_PBUS_BAR1_BLOCK @ 0x0000_1704 {
        /// 27:0 PTR (instance block >> 12)
        #[bits(28)] pub ptr: u32,
        /// 29:28 TARGET (0 VID_MEM, 2 SYS_MEM_COHERENT, 3 SYS_MEM_NONCOHERENT)
        #[bits(2)] pub target: u8,
        #[bits(1)] __: u8,
        /// 31:31 MODE (0 PHYSICAL, 1 VIRTUAL)
        #[bits(1)] pub mode_virtual: bool,
    }
    /// `NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR` (Hopper on, `gh100/dev_vm.h` +
    /// `NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET` 0xb80000): the same for the VF register block
    /// (`kbusTeardownMailbox_GH100` puts BAR1 back to physical mode through it).
    pub NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR @ 0x00b8_0f60 {
        /// 0:0 BAR1_PENDING
        #[bits(1)] pub bar1_pending: bool,
        /// 1:1 BAR1_OUTSTANDING
        #[bits(1)] pub bar1_outstanding: bool,
        #[bits(7)] __: u8,
        /// 9:9 MODE (0 PHYSICAL, 1 VIRTUAL)
        #[bits(1)] pub mode_virtual: bool,
        /// 11:10 TARGET (0 VID_MEM, 2 SYS_MEM_COHERENT, 3 SYS_MEM_NONCOHERENT)
        #[bits(2)] pub target: u8,
        /// 31:12 PTR (low bits of the instance block >> 12)
        #[bits(20)] pub ptr: u32,
    }
    /// `NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR` (Hopper on).
    pub NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR @ 0x00b8_0f64 {
        /// 31:0 PTR
        #[bits(32)] pub ptr: u32,
    }
}

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

    #[test]
    fn bar1_block_fields() {
        use crate::regs::Register;
        // dev_bus.h: MODE 31:31, TARGET 29:28, PTR 27:0.
        let v: u32 = NV_PBUS_BAR1_BLOCK::new()
            .with_mode_virtual(true)
            .with_target(2)
            .with_ptr(0x123_4567)
            .into();
        assert_eq!(v, 0xa123_4567);
        assert_eq!(NV_PBUS_BAR1_BLOCK::OFFSET, 0x1704);
        // gh100/dev_vm.h: MODE 9:9, TARGET 11:10, PTR 31:12.
        let v: u32 = NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::new()
            .with_mode_virtual(true)
            .with_target(3)
            .with_ptr(0xabcde)
            .into();
        assert_eq!(v, 0xabcd_ee00);
        assert_eq!(
            NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::OFFSET,
            0xb8_0f60
        );
    }
}
