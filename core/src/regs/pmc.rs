//! PMC: chip identification (`dev_boot.h`, `nv_ref.h`).

use crate::register;

register! {
    /// Legacy chip identification. On Turing and later the architecture is split: bit 8 holds
    /// ARCHITECTURE_1 (the MSB) and 28:24 ARCHITECTURE_0.
    pub NV_PMC_BOOT_0 @ 0x0000_0000 {
        /// 3:0 MINOR_REVISION
        #[bits(4)] pub minor_revision: u8,
        /// 7:4 MAJOR_REVISION
        #[bits(4)] pub major_revision: u8,
        /// 8:8 ARCHITECTURE_1
        #[bits(1)] pub architecture_1: u8,
        #[bits(11)] __: u16,
        /// 23:20 IMPLEMENTATION
        #[bits(4)] pub implementation: u8,
        /// 28:24 ARCHITECTURE_0
        #[bits(5)] pub architecture_0: u8,
        #[bits(3)] __: u8,
    }

    /// Chip identification used from Fermi on (nova-core and RM key off this one).
    pub NV_PMC_BOOT_42 @ 0x0000_0a00 {
        #[bits(8)] __: u8,
        /// 11:8 MINOR_EXTENDED_REVISION
        #[bits(4)] pub minor_extended_revision: u8,
        /// 15:12 MINOR_REVISION
        #[bits(4)] pub minor_revision: u8,
        /// 19:16 MAJOR_REVISION
        #[bits(4)] pub major_revision: u8,
        /// 23:20 IMPLEMENTATION
        #[bits(4)] pub implementation: u8,
        /// 29:24 ARCHITECTURE
        #[bits(6)] pub architecture: u8,
        #[bits(2)] __: u8,
    }
}

impl NV_PMC_BOOT_0 {
    /// The full architecture number (`decodePmcBoot0Architecture`).
    pub fn architecture(self) -> u8 {
        (self.architecture_1() << 5) | self.architecture_0()
    }

    /// `architecture << 4 | implementation`, the form RM calls the chip id (e.g. 0x180 = GH100).
    pub fn chip_id(self) -> u16 {
        ((self.architecture() as u16) << 4) | self.implementation() as u16
    }
}

impl NV_PMC_BOOT_42 {
    /// 29:20 CHIP_ID: `architecture << 4 | implementation` (e.g. 0x192 = AD102).
    pub fn chip_id(self) -> u16 {
        ((self.architecture() as u16) << 4) | self.implementation() as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot0_fields_match_header() {
        // AD102 rev A1 as printed by nouveau: 0x192000a1.
        let b = NV_PMC_BOOT_0::from(0x1920_00a1);
        assert_eq!(b.minor_revision(), 1);
        assert_eq!(b.major_revision(), 0xa);
        assert_eq!(b.implementation(), 2);
        assert_eq!(b.architecture(), 0x19);
        assert_eq!(b.chip_id(), 0x192);
        // ARCHITECTURE_1 is the MSB of a 6-bit architecture.
        let b = NV_PMC_BOOT_0::from(0x0000_0100 | (0x01 << 24));
        assert_eq!(b.architecture(), 0x21);
    }

    #[test]
    fn boot42_fields_match_header() {
        let b = NV_PMC_BOOT_42::from(0x180a_1000);
        assert_eq!(b.architecture(), 0x18);
        assert_eq!(b.implementation(), 0);
        assert_eq!(b.major_revision(), 0xa);
        assert_eq!(b.minor_revision(), 1);
        assert_eq!(b.chip_id(), 0x180);
        assert_eq!(NV_PMC_BOOT_42::from(0x3f00_0000).architecture(), 0x3f);
    }
}
