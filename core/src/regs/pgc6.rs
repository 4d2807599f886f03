//! PGC6: always-on scratch registers the VBIOS and firmware use to talk to the driver
//! (`dev_gc6_island.h`, `dev_gc6_island_addendum.h`).

use crate::register;

register! {
    /// GFW boot progress and other VBIOS scratch (`NV_PGC6_AON_SECURE_SCRATCH_GROUP_05(i)`).
    /// Element 0 is `_0_GFW_BOOT`; PROGRESS 7:0 reads 0xff once devinit is complete.
    pub NV_PGC6_AON_SECURE_SCRATCH_GROUP_05 @ 0x0011_8234 [4; 4] {
        /// 7:0 GFW_BOOT_PROGRESS (element 0)
        #[bits(8)] pub progress: u8,
        #[bits(24)] __: u32,
    }

    /// Whether level-0 (the CPU) may read GROUP_05; poll this before trusting GFW_BOOT.
    pub NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK @ 0x0011_8128 {
        /// 0:0 READ_PROTECTION_LEVEL0 (1 = enabled)
        #[bits(1)] pub read_protection_level0: bool,
        #[bits(31)] __: u32,
    }

    /// Usable framebuffer size in MiB, written by the VBIOS (alias `NV_USABLE_FB_SIZE_IN_MB`;
    /// `ga102/dev_gc6_island.h`: OpenRM reads it from GA102 on, TU10x and GA100 publish no such
    /// register).
    pub NV_PGC6_AON_SECURE_SCRATCH_GROUP_42 @ 0x0011_83a4 {
        /// 31:0 VALUE (MiB)
        #[bits(32)] pub value: u32,
    }
}

register! {
    /// BSI scratch 14: SEC2 sets BOOT_STAGE_3_HANDOFF once it has reloaded GSP-RM (the CPU
    /// sequencer's CORE_RESUME waits for it; `dev_gc6_island_addendum.h`).
    pub NV_PGC6_BSI_SECURE_SCRATCH_14 @ 0x0011_80f8 {
        #[bits(26)] __: u32,
        /// 26:26 BOOT_STAGE_3_HANDOFF (1 = done)
        #[bits(1)] pub boot_stage_3_handoff: bool,
        #[bits(5)] __: u8,
    }
}

/// `NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_0_GFW_BOOT_PROGRESS_COMPLETED`.
pub const GFW_BOOT_PROGRESS_COMPLETED: u8 = 0xff;

impl NV_PGC6_AON_SECURE_SCRATCH_GROUP_42 {
    /// VRAM size in bytes.
    pub fn vram_bytes(self) -> u64 {
        (self.value() as u64) << 20
    }
}
