//! Chip identification from static fake register windows (exit codes 10-39).

use nvbare_core::Mmio;
use nvbare_core::chip::{self, ChipError, Chipset, MmuVersion, QmdVersion};

/// A register window holding just the two identification registers.
struct FakeBar0 {
    boot0: u32,
    boot42: u32,
}

impl Mmio for FakeBar0 {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, offset: usize) -> u32 {
        match offset {
            0x0 => self.boot0,
            0xa00 => self.boot42,
            _ => 0,
        }
    }
    fn write32(&self, _offset: usize, _value: u32) {}
}

static WINDOWS: [(FakeBar0, Chipset, MmuVersion, QmdVersion); 3] = [
    (
        FakeBar0 {
            boot0: 0x1920_00a1,
            boot42: 0x192a_1000,
        },
        Chipset::AD102,
        MmuVersion::V2,
        QmdVersion::V03_00,
    ),
    (
        FakeBar0 {
            boot0: 0x1800_00a1,
            boot42: 0x180a_1000,
        },
        Chipset::GH100,
        MmuVersion::V3,
        QmdVersion::V04_00,
    ),
    (
        FakeBar0 {
            boot0: 0x1b20_00a1,
            boot42: 0x1b2a_1000,
        },
        Chipset::GB202,
        MmuVersion::V3,
        QmdVersion::V05_00,
    ),
];

/// Identifies three chips and a window that does not answer.
pub fn check() -> Result<(), i32> {
    for (i, (bar, chipset, mmu, qmd)) in WINDOWS.iter().enumerate() {
        let Ok(chip) = chip::identify_mmio(bar) else {
            return Err(10 + i as i32);
        };
        if chip.chipset() != *chipset || chip.info.mmu != *mmu || chip.info.qmd != *qmd {
            return Err(20 + i as i32);
        }
    }
    let dead = FakeBar0 {
        boot0: u32::MAX,
        boot42: u32::MAX,
    };
    if !matches!(
        chip::identify_mmio(&dead),
        Err(ChipError::NoResponse { .. })
    ) {
        return Err(30);
    }
    Ok(())
}
