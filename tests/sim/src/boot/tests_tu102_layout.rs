//! The TU102/GA100 falcon layout: the GA102-only RISC-V and FALCON2 registers are refused (a
//! PRI error pattern on read, the write dropped, both recorded), `CORE_SWITCH_RISCV_STATUS`
//! answers instead of `NV_PRISCV_RISCV_CPUCTL`, and `HWCFG2` has no `MEM_SCRUBBING` field.

use super::falcon::{Falcon, PRI_ERROR, RegLayout, Riscv, off};
use crate::{SimConfig, SimGpu, models};

fn gpu() -> std::sync::Arc<SimGpu> {
    SimGpu::new(SimConfig::new(models::AD102).with_virtual_time())
}

#[test]
fn tu102_layout_refuses_the_ga102_only_registers() {
    let gpu = gpu();
    for o in [
        off::MOD_SEL,
        off::BROM_CURR_UCODE_ID,
        off::BROM_ENGIDMASK,
        off::BROM_PARAADDR0,
        off::RISCV_CPUCTL,
        off::RISCV_BCR_CTRL,
    ] {
        let mut f = Falcon::new("GSP", 0x11_0000, true).with_layout(RegLayout::Tu102);
        gpu.with_core(|core| {
            assert_eq!(f.read(core, o), PRI_ERROR, "{o:#x}");
            assert!(!f.write(core, o, 0x10));
            assert_eq!(f.reg(o), 0, "{o:#x}: write kept");
        });
        assert_eq!(f.errors.len(), 2, "{o:#x}: {:?}", f.errors);
        assert!(f.errors[0].contains("tu102/ga100 headers do not define"));
    }
}

#[test]
fn ga102_layout_answers_them() {
    let gpu = gpu();
    let mut f = Falcon::new("GSP", 0x11_0000, true);
    gpu.with_core(|core| {
        f.write(core, off::RISCV_BCR_CTRL, 0x110);
        assert_eq!(f.read(core, off::RISCV_BCR_CTRL), 0x111);
        assert_eq!(f.read(core, off::RISCV_CPUCTL), 1 << 4);
    });
    assert!(f.errors.is_empty(), "{:?}", f.errors);
}

#[test]
fn tu102_layout_reports_riscv_in_core_switch_status_and_no_hwcfg2_scrub_bit() {
    let gpu = gpu();
    let mut f = Falcon::new("GSP", 0x11_0000, true).with_layout(RegLayout::Tu102);
    gpu.with_core(|core| {
        assert_eq!(f.read(core, off::TU102_RISCV_STATUS), 0);
        f.riscv = Riscv::Active;
        assert_eq!(f.read(core, off::TU102_RISCV_STATUS), 1);
        assert_eq!(f.read(core, off::HWCFG2) & (1 << 12), 0);
        // IRQMASK at +0x2b4 and the status are read-only there (`R-I4R`).
        f.write(core, off::TU102_RISCV_IRQMASK, 0xff);
        assert_eq!(f.read(core, off::TU102_RISCV_IRQMASK), 0);
        f.write(core, off::TU102_RISCV_STATUS, 0);
        assert_eq!(f.read(core, off::TU102_RISCV_STATUS), 1);
    });
    assert!(f.errors.is_empty(), "{:?}", f.errors);
}
