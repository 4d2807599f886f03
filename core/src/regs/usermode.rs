//! The usermode register block (`clc361.h`; HOPPER_USERMODE_A and BLACKWELL_USERMODE_A map the
//! same block). It lives in BAR0 at `NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET + 0x30000` = 0xbb0000
//! and is also what an RM usermode object maps at offset 0 (through the kernel driver), so its
//! registers are relative: [`Bar0Usermode`] and [`MappedUsermode`] name the two placements.

use crate::register;
use crate::regs::{RegisterBase, RegisterFamily};

/// The usermode block family.
#[derive(Debug)]
pub struct UsermodeBase;
impl RegisterFamily for UsermodeBase {
    const NAME: &'static str = "NVC361";
}

/// The usermode block as seen in BAR0 (bare metal).
#[derive(Debug)]
pub struct Bar0Usermode;
impl RegisterBase<UsermodeBase> for Bar0Usermode {
    const BASE: u32 = 0x00bb_0000;
}

/// The usermode block as mapped by an RM usermode object (kernel-driver adapter).
#[derive(Debug)]
pub struct MappedUsermode;
impl RegisterBase<UsermodeBase> for MappedUsermode {
    const BASE: u32 = 0;
}

/// Size of the usermode block.
pub const USERMODE_BLOCK_SIZE: usize = 0x1_0000;

register! {
    /// GPU timer, low word (nanoseconds; read TIME_1, TIME_0, TIME_1 for a consistent value).
    pub NVC361_TIME_0 @ UsermodeBase + 0x80 {
        #[bits(32)] pub nsec: u32,
    }
    /// GPU timer, high word.
    pub NVC361_TIME_1 @ UsermodeBase + 0x84 {
        #[bits(32)] pub nsec: u32,
    }
    /// Doorbell: write a channel's work-submit token to make the host fetch its GPFIFO
    /// (`NV_VIRTUAL_FUNCTION_DOORBELL` in BAR0 terms).
    pub NVC361_NOTIFY_CHANNEL_PENDING @ UsermodeBase + 0x90 {
        #[bits(32)] pub token: u32,
    }
}

/// The work-submit token format (`NV_CTRL_VF_DOORBELL_VECTOR` 11:0, `_RUNLIST_ID` 22:16).
#[bitfield_struct::bitfield(u32)]
pub struct WorkSubmitToken {
    /// 11:0 channel id
    #[bits(12)]
    pub chid: u16,
    #[bits(4)]
    __: u8,
    /// 22:16 runlist id
    #[bits(7)]
    pub runlist_id: u8,
    #[bits(9)]
    __: u16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::RelativeRegister;

    #[test]
    fn doorbell_offsets() {
        assert_eq!(
            NVC361_NOTIFY_CHANNEL_PENDING::offset_of::<Bar0Usermode>(),
            0xbb_0090
        );
        assert_eq!(NVC361_TIME_0::offset_of::<MappedUsermode>(), 0x80);
        assert_eq!(NVC361_TIME_1::offset_of::<Bar0Usermode>(), 0xbb_0084);
    }

    #[test]
    fn token_layout() {
        let t = WorkSubmitToken::new().with_chid(0xa).with_runlist_id(3);
        assert_eq!(t.into_bits(), 0x3_000a);
    }
}
