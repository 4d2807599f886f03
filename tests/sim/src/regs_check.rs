//! The simulator's own register addresses checked against NVIDIA's published headers.
//!
//! The simulator decodes BAR0 partly through the core's register types (checked against the
//! headers in `core/src/regs/headers.rs`) and partly with constants and literals of its own;
//! a wrong address of its own would let a driver with the same mistake pass. This file checks
//! the latter against the header values, written out here with the header (the path below
//! `src/common/inc/swref/published/` of open-gpu-kernel-modules 570.144, which names the chip)
//! rather than taken from the core. Constants are compared directly; addresses that are match
//! literals inside the models (FSP, thermal scratch, fuses, PROM, the usermode timer, the BAR1
//! block) are checked by what the model does when the header's address is accessed.

use std::sync::Arc;
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::hal::Mmio;

use crate::boot::falcon::{Falcon, off};
use crate::boot::firmware::{SimFwsec, pinned_firmware};
use crate::boot::{self, BootModel, BootSimConfig};
use crate::{ChipModel, SimConfig, SimGpu, models};

/// Asserts that the simulator's `ours` is what `header` gives.
#[track_caller]
fn hdr(name: &str, ours: u32, header: &str, value: u32) {
    assert_eq!(
        ours, value,
        "simulator {name} is {ours:#x}, {header} gives {value:#x}"
    );
}

/// `NV_PGSP` 0x113fff:0x110000 (tu102, ga102, gh100 dev_gsp.h).
const NV_PGSP: u32 = 0x11_0000;
/// `NV_FALCON2_GSP_BASE` (tu102, ga100, ga102 dev_riscv_pri.h; ga102/dev_falcon_second_pri.h).
const NV_FALCON2_GSP_BASE: u32 = 0x11_1000;
/// `NV_PGSP_FBIF_BASE` (tu102, ga102 dev_gsp_addendum.h).
const NV_PGSP_FBIF_BASE: u32 = 0x11_0600;

#[test]
fn falcon_block_offsets() {
    // NV_PFALCON_FALCON_*: tu102, ga100, ga102 dev_falcon_v4.h (gh100's publishes MAILBOX0/1,
    // OS and HWCFG2 only, with the same offsets).
    let v4 = "tu102/ga100/ga102 dev_falcon_v4.h";
    hdr("off::MAILBOX0", off::MAILBOX0, v4, 0x040);
    hdr("off::MAILBOX1", off::MAILBOX1, v4, 0x044);
    hdr("off::OS", off::OS, v4, 0x080);
    hdr("off::RM", off::RM, v4, 0x084);
    hdr("off::HWCFG2", off::HWCFG2, v4, 0x0f4);
    hdr("off::CPUCTL", off::CPUCTL, v4, 0x100);
    hdr("off::BOOTVEC", off::BOOTVEC, v4, 0x104);
    hdr("off::HWCFG", off::HWCFG, v4, 0x108);
    hdr("off::DMACTL", off::DMACTL, v4, 0x10c);
    hdr("off::DMATRFBASE", off::DMATRFBASE, v4, 0x110);
    hdr("off::DMATRFMOFFS", off::DMATRFMOFFS, v4, 0x114);
    hdr("off::DMATRFCMD", off::DMATRFCMD, v4, 0x118);
    hdr("off::DMATRFFBOFFS", off::DMATRFFBOFFS, v4, 0x11c);
    hdr("off::DMATRFBASE1", off::DMATRFBASE1, v4, 0x128);
    hdr("off::CPUCTL_ALIAS", off::CPUCTL_ALIAS, v4, 0x130);
    // IMEMC(i) (0x180+(i)*16), IMEMD(i) (0x184+...), IMEMT(i) (0x188+...), DMEMC(i)
    // (0x1c0+(i)*8), DMEMD(i) (0x1c4+...): port 0.
    hdr("off::IMEMC", off::IMEMC, v4, 0x180);
    hdr("off::IMEMD", off::IMEMD, v4, 0x184);
    hdr("off::IMEMT", off::IMEMT, v4, 0x188);
    hdr("off::DMEMC", off::DMEMC, v4, 0x1c0);
    hdr("off::DMEMD", off::DMEMD, v4, 0x1c4);
    // NV_PGSP_FALCON_ENGINE 0x1103c0 (tu102, ga102, gh100, gb100 dev_gsp.h); NV_PSEC_FALCON_ENGINE
    // 0x8403c0 (tu102, ga100, ga102 dev_sec_pri.h).
    hdr("off::ENGINE", NV_PGSP + off::ENGINE, "dev_gsp.h", 0x11_03c0);
    // NV_PFALCON_FBIF_TRANSCFG(0) 0x0, _CTL 0x24 (dev_fbif_v4.h) above NV_PGSP_FBIF_BASE.
    hdr(
        "off::FBIF_TRANSCFG0",
        NV_PGSP + off::FBIF_TRANSCFG0,
        "dev_gsp_addendum.h + dev_fbif_v4.h",
        NV_PGSP_FBIF_BASE,
    );
    hdr(
        "off::FBIF_CTL",
        NV_PGSP + off::FBIF_CTL,
        "dev_gsp_addendum.h + dev_fbif_v4.h",
        NV_PGSP_FBIF_BASE + 0x24,
    );
    // NV_PFALCON2_FALCON_* (ga102/dev_falcon_second_pri.h) above NV_FALCON2_GSP_BASE.
    let f2 = "ga102/dev_falcon_second_pri.h";
    hdr(
        "off::MOD_SEL",
        NV_PGSP + off::MOD_SEL,
        f2,
        NV_FALCON2_GSP_BASE + 0x180,
    );
    hdr(
        "off::BROM_CURR_UCODE_ID",
        NV_PGSP + off::BROM_CURR_UCODE_ID,
        f2,
        NV_FALCON2_GSP_BASE + 0x198,
    );
    hdr(
        "off::BROM_ENGIDMASK",
        NV_PGSP + off::BROM_ENGIDMASK,
        f2,
        NV_FALCON2_GSP_BASE + 0x19c,
    );
    hdr(
        "off::BROM_PARAADDR0",
        NV_PGSP + off::BROM_PARAADDR0,
        f2,
        NV_FALCON2_GSP_BASE + 0x210,
    );
    // NV_PRISCV_RISCV_CPUCTL 0x388 (ga102, gh100), _BCR_CTRL 0x668 (ga102) above
    // NV_FALCON2_GSP_BASE. TU10x and GA100 publish neither (issue #40): the simulated GA100
    // refuses both (`RegLayout::Tu102`); AD102, GH100 and GB202 answer them.
    hdr(
        "off::RISCV_CPUCTL",
        NV_PGSP + off::RISCV_CPUCTL,
        "ga102/dev_riscv_pri.h",
        NV_FALCON2_GSP_BASE + 0x388,
    );
    hdr(
        "off::RISCV_BCR_CTRL",
        NV_PGSP + off::RISCV_BCR_CTRL,
        "ga102/dev_riscv_pri.h",
        NV_FALCON2_GSP_BASE + 0x668,
    );
    // NV_PGSP_MAILBOX(i) (0x110804+(i)*4) (tu102, ga102, gh100, gb100 dev_gsp.h).
    hdr(
        "boot::PGSP_MAILBOX",
        NV_PGSP + boot::PGSP_MAILBOX,
        "dev_gsp.h",
        0x11_0804,
    );
}

#[test]
fn engine_windows() {
    hdr(
        "boot::GSP_BASE",
        boot::GSP_BASE,
        "tu102/dev_gsp.h NV_PGSP",
        NV_PGSP,
    );
    // NV_PSEC 0x843fff:0x840000 (tu102, ga100, ga102 dev_sec_pri.h).
    hdr(
        "boot::SEC2_BASE",
        boot::SEC2_BASE,
        "tu102/dev_sec_pri.h",
        0x84_0000,
    );
    // Both windows are 16 KiB (0x113fff:0x110000, 0x843fff:0x840000).
    let gsp = Falcon::new("GSP", boot::GSP_BASE, true);
    assert!(gsp.claims(0x11_0000) && gsp.claims(0x11_3ffc));
    assert!(!gsp.claims(0x11_4000) && !gsp.claims(0x10_fffc));
    let sec2 = Falcon::new("SEC2", boot::SEC2_BASE, false);
    assert!(sec2.claims(0x84_3ffc) && !sec2.claims(0x84_4000));
    // NV_PGSP_QUEUE_HEAD(i) (0x110c00+(i)*8), __SIZE_1 8 (tu102, ga102 dev_gsp.h): the models
    // claim 64 bytes from queue 0.
    hdr(
        "boot::QUEUE_HEAD0",
        boot::QUEUE_HEAD0,
        "tu102/dev_gsp.h",
        0x11_0c00,
    );
    hdr(
        "gsp::emulator::QUEUE_HEAD0",
        crate::gsp::emulator::QUEUE_HEAD0,
        "tu102/dev_gsp.h",
        0x11_0c00,
    );
    assert_eq!(0x11_0c00 + 8 * 8, boot::QUEUE_HEAD0 + 64);
    // The FSP: no GPU header gives NV_PFSP's range; nvswitch/ls10/dev_fsp_pri.h (the same FSP
    // block) has NV_PFSP 0x8F3FFF:0x8F0000, and every FSP register of gh100/dev_fsp_pri.h the
    // model decodes lies in the window it claims (FSP_BASE + 16 KiB).
    hdr(
        "boot::FSP_BASE",
        boot::FSP_BASE,
        "nvswitch/ls10/dev_fsp_pri.h",
        0x8f_0000,
    );
    for r in [
        0x8f_0320, 0x8f_2ac0, 0x8f_2ac4, 0x8f_2c00, 0x8f_2c04, 0x8f_2c80, 0x8f_2c84,
    ] {
        assert!(
            (boot::FSP_BASE..boot::FSP_BASE + 0x4000).contains(&r),
            "{r:#x}"
        );
    }
}

#[test]
fn fixed_registers() {
    // turing/tu102/dev_ext_devices.h: NV_PROM_DATA(i) (0x00300000+(i)); the size is only in
    // nvswitch/lr10/dev_ext_devices.h (the same PROM block): NV_PROM_DATA__SIZE_1 1048576.
    hdr(
        "boot::PROM_BASE",
        boot::PROM_BASE,
        "tu102/dev_ext_devices.h",
        0x30_0000,
    );
    hdr(
        "boot::PROM_SIZE",
        boot::PROM_SIZE,
        "nvswitch/lr10/dev_ext_devices.h",
        1_048_576,
    );
    // NV_PFB_PRI_MMU_WPR2_ADDR_LO/HI 0x1FA824/0x1FA828 (tu102/dev_fb.h; gh100/dev_fb.h of
    // 595.45.04).
    hdr("boot::WPR2_LO", boot::WPR2_LO, "tu102/dev_fb.h", 0x1f_a824);
    hdr("boot::WPR2_HI", boot::WPR2_HI, "tu102/dev_fb.h", 0x1f_a828);
    // tu102 and ga102 dev_gc6_island.h.
    hdr(
        "boot::GFW_PLM",
        boot::GFW_PLM,
        "tu102/dev_gc6_island.h GROUP_05_PRIV_LEVEL_MASK",
        0x11_8128,
    );
    hdr(
        "boot::GFW_GROUP05",
        boot::GFW_GROUP05,
        "tu102/dev_gc6_island.h GROUP_05(0)",
        0x11_8234,
    );
    hdr(
        "boot::BSI14",
        boot::BSI14,
        "tu102/dev_gc6_island.h BSI_SECURE_SCRATCH_14",
        0x11_80f8,
    );
    // NV_PBUS_VBIOS_SCRATCH(i) (0x00001400+(i)*4) (tu102/dev_bus.h) at the FWSECLIC indexes
    // 0x0E and 0x15 (kernel_gsp_frts_tu102.c).
    hdr(
        "boot::VBIOS_SCRATCH_0E",
        boot::VBIOS_SCRATCH_0E,
        "tu102/dev_bus.h",
        0x1400 + 4 * 0x0e,
    );
    hdr(
        "boot::VBIOS_SCRATCH_15",
        boot::VBIOS_SCRATCH_15,
        "tu102/dev_bus.h",
        0x1400 + 4 * 0x15,
    );
    // ga100/dev_fuse.h: NV_FUSE_OPT_FPF_NVDEC_UCODE1_VERSION 0x824100 .. _GSP_UCODE16_VERSION
    // 0x8241FC (NVDEC at +0x00, SEC2 +0x40, GSP +0xC0, 16 each). Not in tu102/dev_fuse.h.
    hdr(
        "boot::FUSE_BASE",
        boot::FUSE_BASE,
        "ga100/dev_fuse.h",
        0x82_4100,
    );
    hdr(
        "boot::FUSE_END",
        boot::FUSE_END,
        "ga100/dev_fuse.h",
        0x82_41fc + 4,
    );
}

#[test]
fn usermode_and_doorbell() {
    // NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0xB80000 + NV_VIRTUAL_FUNCTION 0x30000 (tu102,
    // gh100, gb100 dev_vm.h); NV_VIRTUAL_FUNCTION_DOORBELL 0x30090 (tu102, gb100, gb202).
    hdr(
        "backend::USERMODE_BASE",
        crate::backend::USERMODE_BASE as u32,
        "tu102/dev_vm.h",
        0xb8_0000 + 0x3_0000,
    );
    hdr(
        "fifo::DOORBELL_OFFSET",
        crate::fifo::DOORBELL_OFFSET,
        "tu102/dev_vm.h",
        0xb8_0000 + 0x3_0090,
    );
    // NV_VIRTUAL_FUNCTION_TIME_0 0x30080, _TIME_1 0x30084 (tu102, ga100, gb100 dev_vm.h;
    // NVC361_TIME_0/1 of clc361.h): the timer answers there.
    let gpu = SimGpu::new(SimConfig::new(models::AD102).with_virtual_time());
    let bar0 = gpu.bar0();
    let (t0, t1) = (0xb8_0000 + 0x3_0080, 0xb8_0000 + 0x3_0084);
    gpu.clock().advance(Duration::from_nanos((3 << 32) + 4096));
    assert_eq!(bar0.read32(t1), 3, "TIME_1 at {t1:#x}");
    assert!(bar0.read32(t0) >= 4096, "TIME_0 at {t0:#x}");
}

#[test]
fn bar1_block_models_answer_at_the_header_addresses() {
    use crate::boot::bar1::Bar1BlockEngine;
    // gh100/dev_vm.h: _PRIV_FUNC_BAR1_BLOCK_LOW_ADDR 0xF60 above 0xB80000, MODE 9:9,
    // BAR1_PENDING 0:0 and BAR1_OUTSTANDING 1:1 (read-only; binds complete at once).
    let gpu = SimGpu::new(SimConfig::new(models::GH100).with_virtual_time());
    gpu.add_engine(Box::new(Bar1BlockEngine::new(true)));
    let bar0 = gpu.bar0();
    bar0.write32(0xb8_0f60, (1 << 9) | 3);
    assert!(gpu.vram().bar1_virtual());
    assert_eq!(bar0.read32(0xb8_0f60), 1 << 9);
    bar0.write32(0xb8_0f60, 0);
    assert!(!gpu.vram().bar1_virtual());
    // tu102/ga100/ad102 dev_bus.h: NV_PBUS_BAR1_BLOCK 0x1704, MODE 31:31.
    let gpu = SimGpu::new(SimConfig::new(models::AD102).with_virtual_time());
    gpu.add_engine(Box::new(Bar1BlockEngine::new(false)));
    let bar0 = gpu.bar0();
    bar0.write32(0x1704, 1 << 31);
    assert!(gpu.vram().bar1_virtual());
    bar0.write32(0x1704, 0);
    assert!(!gpu.vram().bar1_virtual());
}

/// A GPU of `model` with the boot hardware, as the boot tests build it.
fn with_boot_model(
    model: ChipModel,
    tweak: impl FnOnce(&mut BootSimConfig),
) -> (Arc<SimGpu>, BootModel) {
    let (sim_fw, _) = pinned_firmware(model.chipset);
    let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
    let mut cfg = BootSimConfig::new(sim_fw);
    tweak(&mut cfg);
    let boot = BootModel::install(&gpu, cfg);
    (gpu, boot)
}

#[test]
fn fsp_model_answers_at_the_header_addresses() {
    for model in [models::GH100, models::GB202] {
        let (gpu, _boot) = with_boot_model(model, |_| {});
        let bar0 = gpu.bar0();
        // Past any devinit / FSP secure boot time the model may pick.
        gpu.clock().advance(Duration::from_secs(10));
        // gh100/dev_fsp_pri.h (OpenRM's GH100 FSP HAL serves GB20x): NV_PFSP_EMEMC(i)
        // (0x8F2ac0+(i)*8): OFFS 7:2, BLK 15:8, AINCW 24:24, AINCR 25:25; NV_PFSP_EMEMD(i)
        // (0x8F2ac4+(i)*8).
        let (ememc, ememd) = (0x8f_2ac0, 0x8f_2ac4);
        bar0.write32(ememc, 1 << 24);
        bar0.write32(ememd, 0x1111_1111);
        bar0.write32(ememd, 0x2222_2222);
        bar0.write32(ememc, 1 << 25);
        assert_eq!(bar0.read32(ememd), 0x1111_1111, "{:?}", model.chipset);
        assert_eq!(bar0.read32(ememd), 0x2222_2222);
        assert_eq!(
            bar0.read32(ememc),
            (1 << 25) | (2 << 2),
            "OFFS 7:2 auto-incremented"
        );
        // Block 1 (BLK 15:8) is dword 64 of the channel.
        bar0.write32(ememc, (1 << 8) | (1 << 24));
        bar0.write32(ememd, 0x3333_3333);
        bar0.write32(ememc, 1 << 8);
        assert_eq!(bar0.read32(ememd), 0x3333_3333);
        bar0.write32(ememc, 0);
        assert_eq!(bar0.read32(ememd), 0x1111_1111);
        // NV_PFSP_QUEUE_TAIL(i) 0x8F2c04, NV_PFSP_MSGQ_HEAD(i) 0x8F2c80, _TAIL 0x8F2c84.
        for r in [0x8f_2c04, 0x8f_2c80, 0x8f_2c84] {
            bar0.write32(r, 0x3c);
            assert_eq!(bar0.read32(r), 0x3c, "{r:#x}");
        }
        // NV_THERM_I2CS_SCRATCH: 0x200BC (gh100, gb100 dev_therm.h), 0xAD00BC (gb202); reads
        // FSP_BOOT_COMPLETE_STATUS_SUCCESS 0xFF (dev_therm_addendum.h) once the FSP has booted.
        let therm = if model.chipset == Chipset::GB202 {
            0xad_00bc
        } else {
            0x2_00bc
        };
        assert_eq!(bar0.read32(therm), 0xff, "{:?}: {therm:#x}", model.chipset);
    }
}

#[test]
fn booter_chip_models_answer_at_the_header_addresses() {
    let (gpu, _boot) = with_boot_model(models::AD102, |c| {
        c.sec2_fuse = 0b10_0000;
        c.gsp_fuse = 0b1000_0000;
    });
    let bar0 = gpu.bar0();
    gpu.clock().advance(Duration::from_secs(10));
    // ga100/dev_fuse.h: NV_FUSE_OPT_FPF_SEC2_UCODE<n>_VERSION 0x824140 + 4 * (n - 1),
    // NV_FUSE_OPT_FPF_GSP_UCODE<n>_VERSION 0x8241C0 + 4 * (n - 1), DATA 15:0.
    let (sim_fw, _) = pinned_firmware(Chipset::AD102);
    let sec2_id = sim_fw.booter_load.as_ref().map(|b| b.ucode_id).unwrap() as usize;
    assert_eq!(bar0.read32(0x82_4140 + 4 * (sec2_id - 1)), 0b10_0000);
    assert_eq!(
        bar0.read32(0x82_41c0 + 4 * (SimFwsec::UCODE_ID as usize - 1)),
        0b1000_0000
    );
    // tu102/dev_ext_devices.h: NV_PROM_DATA(0) 0x300000, the start of the VBIOS image (the
    // PCI expansion ROM signature 0xAA55).
    assert_eq!(bar0.read32(0x30_0000) & 0xffff, 0xaa55);
    // tu102/dev_gc6_island.h: GROUP_05_PRIV_LEVEL_MASK 0x118128 READ_PROTECTION_LEVEL0 0:0
    // _ENABLE, GROUP_05(0) 0x118234 GFW_BOOT_PROGRESS 7:0 _COMPLETED 0xFF (addendum), once
    // devinit is done.
    assert_eq!(bar0.read32(0x11_8128) & 1, 1);
    assert_eq!(bar0.read32(0x11_8234) & 0xff, 0xff);
}

#[test]
fn identity_registers_through_the_core_types() {
    // nv_ref.h: NV_PMC_BOOT_0 0x0, NV_PMC_BOOT_42 0xA00 (CHIP_ID 29:20); ga102/dev_gc6_island.h
    // NV_PGC6_AON_SECURE_SCRATCH_GROUP_42 0x1183A4 (NV_USABLE_FB_SIZE_IN_MB).
    for model in models::MODELS {
        let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
        let bar0 = gpu.bar0();
        let chip_id = (bar0.read32(0xa00) >> 20) & 0x3ff;
        assert_eq!(Chipset::from_chip_id(chip_id as u16), Some(model.chipset));
        let boot0 = bar0.read32(0x0);
        assert_eq!(
            (boot0 >> 20) & 0xf,
            chip_id & 0xf,
            "BOOT_0 IMPLEMENTATION 23:20"
        );
        if !model.has_local_memory_range_only() {
            assert_eq!(bar0.read32(0x11_83a4), model.vram_mib);
        }
    }
}

#[test]
fn sysmem_flush_registers() {
    let pairs = |c| boot::FlushRegs::for_chip(c).pairs;
    let ga100 = "ga100/dev_fb.h NV_PFB_NISO_FLUSH_SYSMEM_ADDR / _HI";
    let [(lo, hi)] = pairs(Chipset::AD102)[..] else {
        panic!("one pair on AD102")
    };
    hdr("AD102 flush LO", lo, ga100, 0x0010_0c10);
    hdr("AD102 flush HI", hi.unwrap_or(0), ga100, 0x0010_0c40);
    let gh100 = "gh100/dev_fb.h NV_PFB_FBHUB_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI";
    let [(lo, hi)] = pairs(Chipset::GH100)[..] else {
        panic!("one pair on GH100")
    };
    hdr("GH100 flush LO", lo, gh100, 0x0010_0a34);
    hdr("GH100 flush HI", hi.unwrap_or(0), gh100, 0x0010_0a38);
    let gb10b = "gb10b/dev_fbhub.h NV_PFB_FBHUB0_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI";
    let [(lo, hi)] = pairs(Chipset::GB202)[..] else {
        panic!("one pair on GB202")
    };
    hdr("GB202 flush LO", lo, gb10b, 0x008a_1d58);
    hdr("GB202 flush HI", hi.unwrap_or(0), gb10b, 0x008a_1d5c);
    // gm107/dev_fb.h: TU10x has NV_PFB_NISO_FLUSH_SYSMEM_ADDR alone (no _HI).
    let [(lo, hi)] = pairs(Chipset::TU102)[..] else {
        panic!("one register on TU102")
    };
    hdr(
        "TU102 flush",
        lo,
        "gm107/dev_fb.h NV_PFB_NISO_FLUSH_SYSMEM_ADDR",
        0x0010_0c10,
    );
    assert_eq!(hi, None, "tu102 has no NV_PFB_NISO_FLUSH_SYSMEM_ADDR_HI");
    // gb100/dev_hshub_base.h, relative to HSHUB0 at 0x870000.
    let hshub = "gb100/dev_hshub_base.h NV_PFB_HSHUB(_EG)_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI";
    let p = pairs(Chipset::GB100);
    assert_eq!(p.len(), 2, "{hshub}: both pairs");
    hdr("GB100 flush LO", p[0].0, hshub, 0x0087_0e50);
    hdr("GB100 flush HI", p[0].1.unwrap_or(0), hshub, 0x0087_0e54);
    hdr("GB100 EG flush LO", p[1].0, hshub, 0x0087_06c0);
    hdr("GB100 EG flush HI", p[1].1.unwrap_or(0), hshub, 0x0087_06c4);
}
