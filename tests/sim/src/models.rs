//! The chips the simulator can play, with the identity and sizes of a real board of each.

use nvbare_core::chip::Chipset;

/// A simulated board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChipModel {
    /// The chip.
    pub chipset: Chipset,
    /// Board the model imitates.
    pub board: &'static str,
    /// PCI device id.
    pub device_id: u16,
    /// PCI subsystem (vendor, device).
    pub subsystem: (u16, u16),
    /// PCI class code (0x030000 VGA, 0x030200 3D controller).
    pub class: u32,
    /// Revision (major, minor) as in BOOT_42, e.g. (0xa, 1) for A1.
    pub revision: (u8, u8),
    /// Usable VRAM in MiB (what the VBIOS writes to `NV_USABLE_FB_SIZE_IN_MB`, or on TU10x and
    /// GA100 to `NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE`, which can say only `mag << scale` MiB).
    pub vram_mib: u32,
    /// BAR1 (VRAM aperture) size in bytes.
    pub bar1_size: u64,
}

/// A100 SXM4 40 GB (GA100): PCI id 0x20b0 (`pci-host`'s pci_ids), a 3D controller; 40 GiB
/// HBM2 (what LOCAL_MEMORY_RANGE can say: 40 << 10 MiB), BAR1 64 GiB (the subsystem id and
/// BAR1 size are what such boards commonly report, not checked against one here).
/// Its VRAM size is in `NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE` (no `NV_USABLE_FB_SIZE_IN_MB` in
/// ga100's headers).
pub const GA100: ChipModel = ChipModel {
    chipset: Chipset::GA100,
    board: "A100 SXM4 40GB",
    device_id: 0x20b0,
    subsystem: (0x10de, 0x134f),
    class: 0x03_0200,
    revision: (0xa, 1),
    vram_mib: 40_960,
    bar1_size: 64 << 30,
};

/// TITAN RTX (TU102): PCI id 0x1e02, a VGA controller; 24 GiB GDDR6 (LOCAL_MEMORY_RANGE:
/// 3 << 13 MiB), a 256 MiB BAR1 as Turing GeForce boards without resizable BAR have (the
/// subsystem id is what such boards commonly report, not checked against one here). Its VRAM
/// size is in `NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE` (no `NV_USABLE_FB_SIZE_IN_MB` in tu102's
/// headers).
pub const TU102: ChipModel = ChipModel {
    chipset: Chipset::TU102,
    board: "TITAN RTX",
    device_id: 0x1e02,
    subsystem: (0x10de, 0x12a3),
    class: 0x03_0000,
    revision: (0xa, 1),
    vram_mib: 24_576,
    bar1_size: 256 << 20,
};

/// Tesla T4 (TU104): PCI id 0x1eb8, a 3D controller; 16 GiB GDDR6 (LOCAL_MEMORY_RANGE:
/// 1 << 14 MiB), a 256 MiB BAR1 (what T4s report; the subsystem id is what such boards
/// commonly report, not checked against one here).
pub const TU104: ChipModel = ChipModel {
    chipset: Chipset::TU104,
    board: "Tesla T4",
    device_id: 0x1eb8,
    subsystem: (0x10de, 0x12a2),
    class: 0x03_0200,
    revision: (0xa, 1),
    vram_mib: 16_384,
    bar1_size: 256 << 20,
};

/// GeForce RTX 4090 (AD102).
pub const AD102: ChipModel = ChipModel {
    chipset: Chipset::AD102,
    board: "GeForce RTX 4090",
    device_id: 0x2684,
    subsystem: (0x10de, 0x167c),
    class: 0x03_0000,
    revision: (0xa, 1),
    vram_mib: 24_564,
    bar1_size: 32 << 30,
};

/// H200 SXM (GH100).
pub const GH100: ChipModel = ChipModel {
    chipset: Chipset::GH100,
    board: "H200",
    device_id: 0x2335,
    subsystem: (0x10de, 0x18be),
    class: 0x03_0200,
    revision: (0xa, 1),
    vram_mib: 143_771,
    bar1_size: 256 << 30,
};

/// GeForce RTX 5090 (GB202).
pub const GB202: ChipModel = ChipModel {
    chipset: Chipset::GB202,
    board: "GeForce RTX 5090",
    device_id: 0x2b85,
    subsystem: (0x10de, 0x2104),
    class: 0x03_0000,
    revision: (0xa, 1),
    vram_mib: 32_607,
    bar1_size: 32 << 30,
};

/// Every model.
pub const MODELS: [ChipModel; 6] = [TU102, TU104, GA100, AD102, GH100, GB202];

impl ChipModel {
    /// The model for a chip, if the simulator has one.
    pub fn for_chipset(chipset: Chipset) -> Option<ChipModel> {
        MODELS.iter().copied().find(|m| m.chipset == chipset)
    }

    /// Whether the chip's headers give the VRAM size only in
    /// `NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE` (TU10x, GA100: no `NV_USABLE_FB_SIZE_IN_MB`).
    pub fn has_local_memory_range_only(&self) -> bool {
        self.chipset.info().architecture == nvbare_core::chip::Architecture::Turing
            || self.chipset == Chipset::GA100
    }

    /// Names of the modelled chips, for error messages.
    pub fn names() -> impl Iterator<Item = &'static str> {
        MODELS.iter().map(|m| m.chipset.name())
    }
}
