//! The FSP (foundation security processor, Hopper on): its EMEM message channels and the
//! scratch registers through which it reports its own boot (`published/hopper/gh100/
//! dev_fsp_pri.h`, `dev_therm.h`, `dev_therm_addendum.h`; GB202 moves the thermal block).

use crate::register;
use crate::regs::{RegisterBase, RegisterFamily};

register! {
    /// EMEM access control of channel `i` (the RM uses channel 0, `FSP_EMEM_CHANNEL_RM`).
    pub NV_PFSP_EMEMC @ 0x008f_2ac0 [8; 8] {
        #[bits(2)] __: u8,
        /// 7:2 OFFS (dword in the block)
        #[bits(6)] pub offs: u8,
        /// 15:8 BLK (256-byte block)
        #[bits(8)] pub blk: u8,
        #[bits(8)] __: u8,
        /// 24:24 AINCW
        #[bits(1)] pub aincw: bool,
        /// 25:25 AINCR
        #[bits(1)] pub aincr: bool,
        #[bits(6)] __: u8,
    }

    /// EMEM data port of channel `i`.
    pub NV_PFSP_EMEMD @ 0x008f_2ac4 [8; 8] {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }

    /// Command queue head of channel `i` (written last: it interrupts the FSP).
    pub NV_PFSP_QUEUE_HEAD @ 0x008f_2c00 [8; 8] {
        /// 31:0 ADDRESS (byte offset in the channel)
        #[bits(32)] pub address: u32,
    }

    /// Command queue tail of channel `i`: offset of the last dword of the packet.
    pub NV_PFSP_QUEUE_TAIL @ 0x008f_2c04 [8; 8] {
        /// 31:0 ADDRESS
        #[bits(32)] pub address: u32,
    }

    /// Message (reply) queue head of channel `i`.
    pub NV_PFSP_MSGQ_HEAD @ 0x008f_2c80 [8; 8] {
        /// 31:0 VAL
        #[bits(32)] pub val: u32,
    }

    /// Message queue tail of channel `i`: the CPU writes TAIL = HEAD to acknowledge.
    pub NV_PFSP_MSGQ_TAIL @ 0x008f_2c84 [8; 8] {
        /// 31:0 VAL
        #[bits(32)] pub val: u32,
    }

    /// FSP status scratch (dumped on failures, `kfspDumpDebugState_GH100`).
    pub NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2 @ 0x008f_0320 [4; 4] {
        /// 31:0 VAL
        #[bits(32)] pub val: u32,
    }
}

/// The block holding `NV_THERM_I2CS_SCRATCH`: at 0x20000 on GH100 and GB10x, 0xad0000 on GB20x.
#[derive(Debug)]
pub struct PThermBase;
impl RegisterFamily for PThermBase {
    const NAME: &'static str = "NV_THERM";
}

/// The thermal block of GH100 and GB10x (`NV_THERM_I2CS_SCRATCH` = 0x200bc).
#[derive(Debug)]
pub struct ThermGh100;
impl RegisterBase<PThermBase> for ThermGh100 {
    const BASE: u32 = 0x0002_0000;
}

/// The thermal block of GB20x (`NV_THERM_I2CS_SCRATCH` = 0xad00bc).
#[derive(Debug)]
pub struct ThermGb202;
impl RegisterBase<PThermBase> for ThermGb202 {
    const BASE: u32 = 0x00ad_0000;
}

register! {
    /// The FSP writes 0xff here when its secure boot is complete
    /// (`NV_THERM_I2CS_SCRATCH_FSP_BOOT_COMPLETE_STATUS_SUCCESS`).
    pub NV_THERM_I2CS_SCRATCH @ PThermBase + 0xbc {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }
}

/// `NV_THERM_I2CS_SCRATCH_FSP_BOOT_COMPLETE_STATUS_SUCCESS`.
pub const FSP_BOOT_COMPLETE_SUCCESS: u32 = 0xff;
/// `FSP_EMEM_CHANNEL_RM`.
pub const FSP_EMEM_CHANNEL_RM: u32 = 0;
/// `FSP_EMEM_CHANNEL_RM_SIZE`: bytes of the RM channel.
pub const FSP_EMEM_CHANNEL_RM_SIZE: usize = 1024;
/// `DWORDS_PER_EMEM_BLOCK` (`kern_fsp_gh100.c`).
pub const DWORDS_PER_EMEM_BLOCK: u32 = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::{RegisterArray, RelativeRegister};

    #[test]
    fn offsets_match_the_headers() {
        assert_eq!(NV_PFSP_EMEMC::offset(0).unwrap(), 0x8f_2ac0);
        assert_eq!(NV_PFSP_EMEMD::offset(1).unwrap(), 0x8f_2acc);
        assert_eq!(NV_PFSP_QUEUE_TAIL::offset(0).unwrap(), 0x8f_2c04);
        assert_eq!(NV_PFSP_MSGQ_TAIL::offset(0).unwrap(), 0x8f_2c84);
        assert_eq!(NV_THERM_I2CS_SCRATCH::offset_of::<ThermGh100>(), 0x2_00bc);
        assert_eq!(NV_THERM_I2CS_SCRATCH::offset_of::<ThermGb202>(), 0xad_00bc);
        let c = NV_PFSP_EMEMC::new()
            .with_blk(1)
            .with_offs(2)
            .with_aincw(true);
        assert_eq!(c.into_bits(), (1 << 8) | (2 << 2) | (1 << 24));
    }
}
