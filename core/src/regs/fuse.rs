//! Fuses that select which signature a heavy-secure ucode must carry (`published/ampere/ga100/
//! dev_fuse.h`; GA100 through Ada read the same registers, `kgspReadUcodeFuseVersion_GA100`,
//! `ksec2ReadUcodeFuseVersion_GA100`; `tu102/dev_fuse.h` has none of them and OpenRM reads no
//! fuse on TU10x).
//!
//! Each register is a bit mask; the fuse version of ucode id `n` (1-based) is the index of the
//! highest set bit of element `n - 1`, plus one (0 when no bit is set).

use crate::register;

register! {
    /// `NV_FUSE_OPT_FPF_NVDEC_UCODE1_VERSION` + 4 * (ucode id - 1).
    pub NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION @ 0x0082_4100 [16; 4] {
        /// 15:0 DATA
        #[bits(16)] pub data: u16,
        #[bits(16)] __: u16,
    }

    /// `NV_FUSE_OPT_FPF_SEC2_UCODE1_VERSION` + 4 * (ucode id - 1).
    pub NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION @ 0x0082_4140 [16; 4] {
        /// 15:0 DATA
        #[bits(16)] pub data: u16,
        #[bits(16)] __: u16,
    }

    /// `NV_FUSE_OPT_FPF_GSP_UCODE1_VERSION` + 4 * (ucode id - 1).
    pub NV_FUSE_OPT_FPF_GSP_UCODE_VERSION @ 0x0082_41c0 [16; 4] {
        /// 15:0 DATA
        #[bits(16)] pub data: u16,
        #[bits(16)] __: u16,
    }
}

/// The fuse version encoded in a fuse register value: highest set bit + 1, or 0.
pub fn fuse_version(value: u32) -> u32 {
    if value == 0 {
        0
    } else {
        32 - value.leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::RegisterArray;

    #[test]
    fn offsets_and_decoding() {
        assert_eq!(
            NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION::offset(0).unwrap(),
            0x82_4140
        );
        assert_eq!(
            NV_FUSE_OPT_FPF_GSP_UCODE_VERSION::offset(8).unwrap(),
            0x82_41e0
        );
        assert!(NV_FUSE_OPT_FPF_GSP_UCODE_VERSION::offset(16).is_err());
        assert_eq!(fuse_version(0), 0);
        assert_eq!(fuse_version(1), 1);
        assert_eq!(fuse_version(0b110), 3);
    }
}
