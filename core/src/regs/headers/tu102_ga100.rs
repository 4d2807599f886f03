//! The registers only the TU10x/GA100 falcon and memory HAL uses, against the tu102 and ga100
//! headers (and the pascal/gp102 one RM reads the memory range with on these chips).

use super::super::Register;
use super::super::falcon::{Gsp, NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS, tu102};
use super::super::pfb::{
    NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE, NV_PFB_PRI_MMU_LOCK_ADDR_HI, NV_PFB_PRI_MMU_LOCK_ADDR_LO,
    NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK,
};
use super::{Absent, Differs, H, Is, check, mask, rel};

type TuIrqmask = tu102::NV_PRISCV_RISCV_IRQMASK;
type TuMoffs = tu102::NV_PFALCON_FALCON_DMATRFMOFFS;
type TuImemc = tu102::NV_PFALCON_FALCON_IMEMC;
type TuDmemc = tu102::NV_PFALCON_FALCON_DMEMC;

const NO_GA102: &str = "GA102 on report RISC-V state in NV_PRISCV_RISCV_CPUCTL (0x388)";

#[test]
fn riscv_core_switch_status() {
    // tu102, ga100 dev_riscv_pri.h: CORE_SWITCH_RISCV_STATUS 0x240, ACTIVE_STAT 0:0 (_ACTIVE 1).
    let facts = [
        Is("turing/tu102/dev_riscv_pri.h", 0x240),
        Is("ampere/ga100/dev_riscv_pri.h", 0x240),
        Absent("ampere/ga102/dev_riscv_pri.h", NO_GA102),
    ];
    rel::<NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS, Gsp>(
        &facts,
        &[Is("NV_FALCON2_GSP_BASE + 0x240 (tu102)", 0x11_1240)],
    );
    // SEC2 has no RISC-V base on TU10x/GA100 (kernel_sec2_tu102.c, kernel_sec2_ga100.c:
    // `riscvRegisterBase = 0`, "RISC-V unused or unsupported"): only the GSP's is read.
    field!(NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS.with_active_stat: bool = 0, "tu102");
}

#[test]
fn tu102_riscv_irqmask() {
    rel::<tu102::NV_PRISCV_RISCV_IRQMASK, Gsp>(
        &[
            Is("turing/tu102/dev_riscv_pri.h", 0x2b4),
            Is("ampere/ga100/dev_riscv_pri.h", 0x2b4),
            Differs(
                "ampere/ga102/dev_riscv_pri.h",
                0x528,
                "GA102 layout: regs::falcon",
            ),
        ],
        &[],
    );
    field!(TuIrqmask.with_mask = 31:0, "no field in the header");
}

#[test]
fn tu102_narrow_falcon_fields() {
    let v4 = |v| -> [H; 2] {
        [
            Is("turing/tu102/dev_falcon_v4.h", v),
            Is("ampere/ga100/dev_falcon_v4.h", v),
        ]
    };
    rel::<tu102::NV_PFALCON_FALCON_DMATRFMOFFS, Gsp>(&v4(0x114), &[]);
    rel::<tu102::NV_PFALCON_FALCON_IMEMC, Gsp>(&v4(0x180), &[]);
    rel::<tu102::NV_PFALCON_FALCON_DMEMC, Gsp>(&v4(0x1c0), &[]);
    // tu102/dev_falcon_v4.h: DMATRFMOFFS_OFFS 15:0; IMEMC OFFS 7:2, BLK 15:8, AINCW 24:24,
    // SECURE 28:28; DMEMC OFFS 7:2, BLK 15:8, AINCW 24:24, AINCR 25:25 (ga100: 23:0, 23:8).
    field!(TuMoffs.with_offs = 15:0, "tu102");
    field!(TuImemc.with_offs = 7:2, "tu102");
    field!(TuImemc.with_blk = 15:8, "tu102");
    field!(TuImemc.with_aincw: bool = 24, "tu102");
    field!(TuImemc.with_secure: bool = 28, "tu102");
    field!(TuDmemc.with_offs = 7:2, "tu102");
    field!(TuDmemc.with_blk = 15:8, "tu102");
    field!(TuDmemc.with_aincw: bool = 24, "tu102");
    field!(TuDmemc.with_aincr: bool = 25, "tu102");
}

#[test]
fn local_memory_range() {
    let not_tu = "not in tu102's dev_fb.h; kern_mem_sys_gp102.c includes pascal/gp102/dev_fb.h \
                  and the HAL table runs it on TU102-TU117 and GA100";
    check(
        NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::NAME,
        NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::OFFSET,
        &[
            Is("pascal/gp102/dev_fb.h", 0x10_0ce0),
            Absent("turing/tu102/dev_fb.h", not_tu),
            Absent("ampere/ga100/dev_fb.h", not_tu),
        ],
    );
    // gp102/dev_fb.h: LOWER_SCALE 3:0, LOWER_MAG 9:4, ECC_MODE 30:30 (_ENABLED 1).
    field!(NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE.with_lower_scale = 3:0, "gp102/dev_fb.h");
    field!(NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE.with_lower_mag = 9:4, "gp102/dev_fb.h");
    field!(NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE.with_ecc_mode: bool = 30, "gp102/dev_fb.h");
}

#[test]
fn ga100_mmu_lock() {
    // ampere/ga100/dev_fb.h; memmgrReadMmuLock_GA100 is GA100's only (TU10x: _ccda6f, no read).
    for (name, ours, addr) in [
        (
            NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK::NAME,
            NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK::OFFSET,
            0x1f_a7c8,
        ),
        (
            NV_PFB_PRI_MMU_LOCK_ADDR_LO::NAME,
            NV_PFB_PRI_MMU_LOCK_ADDR_LO::OFFSET,
            0x1f_a82c,
        ),
        (
            NV_PFB_PRI_MMU_LOCK_ADDR_HI::NAME,
            NV_PFB_PRI_MMU_LOCK_ADDR_HI::OFFSET,
            0x1f_a830,
        ),
    ] {
        check(name, ours, &[Is("ampere/ga100/dev_fb.h", addr)]);
    }
    field!(NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK.with_read_protection_level0: bool = 0, "ga100");
    field!(NV_PFB_PRI_MMU_LOCK_ADDR_LO.with_val = 31:4, "ga100");
    field!(NV_PFB_PRI_MMU_LOCK_ADDR_HI.with_val = 31:4, "ga100");
}
