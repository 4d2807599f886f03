//! The falcon, falcon2, FBIF and RISC-V registers of every engine nvbare boots (GSP, SEC2,
//! FSP's), against each chip family's headers.

use super::super::falcon::*;
use super::*;

// ---------------------------------------------------------------------------------------------
// Falcon engine bases

#[test]
fn falcon_engine_bases() {
    // NV_PGSP 0x113fff:0x110000 (tu102, ga102, gh100 dev_gsp.h); gb100/dev_gsp.h has no range
    // but the same absolute registers (NV_PGSP_FALCON_MAILBOX0 0x110040).
    base::<PFalconBase, Gsp>(
        "GSP NV_PFALCON base",
        &[
            Is("turing/tu102/dev_gsp.h (NV_PGSP)", 0x11_0000),
            Is("ampere/ga102/dev_gsp.h (NV_PGSP)", 0x11_0000),
            Is("hopper/gh100/dev_gsp.h (NV_PGSP)", 0x11_0000),
        ],
    );
    // NV_FALCON2_GSP_BASE: the second block and the RISC-V block share it.
    let falcon2_gsp = [
        Is(
            "turing/tu102/dev_riscv_pri.h (NV_FALCON2_GSP_BASE)",
            0x11_1000,
        ),
        Is(
            "ampere/ga100/dev_riscv_pri.h (NV_FALCON2_GSP_BASE)",
            0x11_1000,
        ),
        Is(
            "ampere/ga102/dev_riscv_pri.h (NV_FALCON2_GSP_BASE)",
            0x11_1000,
        ),
        Is(
            "ampere/ga102/dev_falcon_second_pri.h (NV_FALCON2_GSP_BASE)",
            0x11_1000,
        ),
    ];
    base::<PFalcon2Base, Gsp>("GSP NV_PFALCON2 base", &falcon2_gsp);
    base::<PRiscvBase, Gsp>("GSP NV_PRISCV base", &falcon2_gsp);
    base::<PFbifBase, Gsp>(
        "GSP NV_PFALCON_FBIF base",
        &[
            Is(
                "turing/tu102/dev_gsp_addendum.h (NV_PGSP_FBIF_BASE)",
                0x11_0600,
            ),
            Is(
                "ampere/ga102/dev_gsp_addendum.h (NV_PGSP_FBIF_BASE)",
                0x11_0600,
            ),
        ],
    );
    // NV_PSEC 0x843fff:0x840000 (tu102, ga100, ga102 dev_sec_pri.h).
    base::<PFalconBase, Sec2>(
        "SEC2 NV_PFALCON base",
        &[
            Is("turing/tu102/dev_sec_pri.h (NV_PSEC)", 0x84_0000),
            Is("ampere/ga100/dev_sec_pri.h (NV_PSEC)", 0x84_0000),
            Is("ampere/ga102/dev_sec_pri.h (NV_PSEC)", 0x84_0000),
        ],
    );
    let falcon2_sec = [
        Is(
            "ampere/ga102/dev_falcon_second_pri.h (NV_FALCON2_SEC_BASE)",
            0x84_1000,
        ),
        Absent(
            "turing/tu102/dev_riscv_pri.h",
            "only NV_FALCON2_GSP_BASE is published for TU10x/GA100 (issue #40)",
        ),
    ];
    base::<PFalcon2Base, Sec2>("SEC2 NV_PFALCON2 base", &falcon2_sec);
    base::<PRiscvBase, Sec2>("SEC2 NV_PRISCV base", &falcon2_sec);
    base::<PFbifBase, Sec2>(
        "SEC2 NV_PFALCON_FBIF base",
        &[
            Is(
                "turing/tu102/dev_sec_addendum.h (NV_PSEC_FBIF_BASE)",
                0x84_0600,
            ),
            Is(
                "ampere/ga100/dev_sec_addendum.h (NV_PSEC_FBIF_BASE)",
                0x84_0600,
            ),
            Is(
                "ampere/ga102/dev_sec_addendum.h (NV_PSEC_FBIF_BASE)",
                0x84_0600,
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// NV_PFALCON_FALCON_*

/// What the falcon headers of TU102, GA100 and GA102 give for a core register (GH100's
/// `dev_falcon_v4.h` publishes MAILBOX0/1, OS and HWCFG2 only, GB100's none of these; OpenRM's
/// falcon code for them is the TU102/GA102 code, built with the tu102/ga102 headers).
fn falcon_v4(v: u32) -> [H; 5] {
    [
        Is("turing/tu102/dev_falcon_v4.h", v),
        Is("ampere/ga100/dev_falcon_v4.h", v),
        Is("ampere/ga102/dev_falcon_v4.h", v),
        Absent(
            "hopper/gh100/dev_falcon_v4.h",
            "GH100's publishes MAILBOX0/1, OS, HWCFG2 only; OpenRM uses the older headers",
        ),
        Absent(
            "blackwell/gb100/dev_falcon_v4.h",
            "GB100's publishes IRQSTAT_EXT only; OpenRM uses the older headers",
        ),
    ]
}

/// As [`falcon_v4`], for the registers GH100's header does publish.
fn falcon_v4_gh100(v: u32) -> [H; 4] {
    [
        Is("turing/tu102/dev_falcon_v4.h", v),
        Is("ampere/ga100/dev_falcon_v4.h", v),
        Is("ampere/ga102/dev_falcon_v4.h", v),
        Is("hopper/gh100/dev_falcon_v4.h", v),
    ]
}

#[test]
fn falcon_core_register_offsets() {
    rel::<NV_PFALCON_FALCON_IRQSCLR, Gsp>(&falcon_v4(0x004), &[]);
    rel::<NV_PFALCON_FALCON_IRQSTAT, Gsp>(
        &falcon_v4(0x008),
        &[Is(
            "blackwell/gb100/dev_gsp.h (NV_PGSP_FALCON_IRQSTAT)",
            0x11_0008,
        )],
    );
    let gsp_mb0 = [
        Is(
            "turing/tu102/dev_gsp.h (NV_PGSP_FALCON_MAILBOX0)",
            0x11_0040,
        ),
        Is(
            "ampere/ga102/dev_gsp.h (NV_PGSP_FALCON_MAILBOX0)",
            0x11_0040,
        ),
        Is(
            "hopper/gh100/dev_gsp.h (NV_PGSP_FALCON_MAILBOX0)",
            0x11_0040,
        ),
        Is(
            "blackwell/gb100/dev_gsp.h (NV_PGSP_FALCON_MAILBOX0)",
            0x11_0040,
        ),
    ];
    rel::<NV_PFALCON_FALCON_MAILBOX0, Gsp>(&falcon_v4_gh100(0x040), &gsp_mb0);
    let gsp_mb1 = [
        Is(
            "turing/tu102/dev_gsp.h (NV_PGSP_FALCON_MAILBOX1)",
            0x11_0044,
        ),
        Is(
            "ampere/ga102/dev_gsp.h (NV_PGSP_FALCON_MAILBOX1)",
            0x11_0044,
        ),
        Is(
            "hopper/gh100/dev_gsp.h (NV_PGSP_FALCON_MAILBOX1)",
            0x11_0044,
        ),
        Is(
            "blackwell/gb100/dev_gsp.h (NV_PGSP_FALCON_MAILBOX1)",
            0x11_0044,
        ),
    ];
    rel::<NV_PFALCON_FALCON_MAILBOX1, Gsp>(&falcon_v4_gh100(0x044), &gsp_mb1);
    rel::<NV_PFALCON_FALCON_OS, Gsp>(&falcon_v4_gh100(0x080), &[]);
    rel::<NV_PFALCON_FALCON_RM, Gsp>(&falcon_v4(0x084), &[]);
    rel::<NV_PFALCON_FALCON_HWCFG2, Gsp>(&falcon_v4_gh100(0x0f4), &[]);
    rel::<NV_PFALCON_FALCON_CPUCTL, Gsp>(&falcon_v4(0x100), &[]);
    rel::<NV_PFALCON_FALCON_BOOTVEC, Gsp>(&falcon_v4(0x104), &[]);
    rel::<NV_PFALCON_FALCON_HWCFG, Gsp>(&falcon_v4(0x108), &[]);
    rel::<NV_PFALCON_FALCON_DMACTL, Gsp>(&falcon_v4(0x10c), &[]);
    rel::<NV_PFALCON_FALCON_DMATRFBASE, Gsp>(&falcon_v4(0x110), &[]);
    rel::<NV_PFALCON_FALCON_DMATRFMOFFS, Gsp>(&falcon_v4(0x114), &[]);
    rel::<NV_PFALCON_FALCON_DMATRFCMD, Gsp>(&falcon_v4(0x118), &[]);
    rel::<NV_PFALCON_FALCON_DMATRFFBOFFS, Gsp>(&falcon_v4(0x11c), &[]);
    rel::<NV_PFALCON_FALCON_DMATRFBASE1, Gsp>(&falcon_v4(0x128), &[]);
    rel::<NV_PFALCON_FALCON_CPUCTL_ALIAS, Gsp>(&falcon_v4(0x130), &[]);
    // Port 0 of IMEMC(i) (0x180+(i)*16), IMEMD(i) (0x184+(i)*16), IMEMT(i) (0x188+(i)*16),
    // DMEMC(i) (0x1c0+(i)*8), DMEMD(i) (0x1c4+(i)*8).
    rel::<NV_PFALCON_FALCON_IMEMC, Gsp>(&falcon_v4(0x180), &[]);
    rel::<NV_PFALCON_FALCON_IMEMD, Gsp>(&falcon_v4(0x184), &[]);
    rel::<NV_PFALCON_FALCON_IMEMT, Gsp>(&falcon_v4(0x188), &[]);
    rel::<NV_PFALCON_FALCON_DMEMC, Gsp>(&falcon_v4(0x1c0), &[]);
    rel::<NV_PFALCON_FALCON_DMEMD, Sec2>(&falcon_v4(0x1c4), &[]);
    // The falcon headers have no NV_PFALCON_FALCON_ENGINE; the engine headers give it
    // absolutely, 0x3c0 above NV_PGSP / NV_PSEC.
    let engine_gsp = [
        Is("turing/tu102/dev_gsp.h (NV_PGSP_FALCON_ENGINE)", 0x11_03c0),
        Is("ampere/ga102/dev_gsp.h (NV_PGSP_FALCON_ENGINE)", 0x11_03c0),
        Is("hopper/gh100/dev_gsp.h (NV_PGSP_FALCON_ENGINE)", 0x11_03c0),
        Is(
            "blackwell/gb100/dev_gsp.h (NV_PGSP_FALCON_ENGINE)",
            0x11_03c0,
        ),
    ];
    check(
        "NV_PFALCON_FALCON_ENGINE (block offset)",
        NV_PFALCON_FALCON_ENGINE::OFFSET,
        &[Is("NV_PGSP_FALCON_ENGINE - NV_PGSP", 0x3c0)],
    );
    check(
        "NV_PGSP_FALCON_ENGINE",
        NV_PFALCON_FALCON_ENGINE::offset_of::<Gsp>() as u32,
        &engine_gsp,
    );
    check(
        "NV_PSEC_FALCON_ENGINE",
        NV_PFALCON_FALCON_ENGINE::offset_of::<Sec2>() as u32,
        &[
            Is(
                "turing/tu102/dev_sec_pri.h (NV_PSEC_FALCON_ENGINE)",
                0x84_03c0,
            ),
            Is(
                "ampere/ga100/dev_sec_pri.h (NV_PSEC_FALCON_ENGINE)",
                0x84_03c0,
            ),
            Is(
                "ampere/ga102/dev_sec_pri.h (NV_PSEC_FALCON_ENGINE)",
                0x84_03c0,
            ),
        ],
    );
}

#[test]
fn falcon_core_register_fields() {
    // IRQSCLR / IRQSTAT: HALT 4:4, SWGEN0 6:6 (tu102, ga100, ga102).
    field!(NV_PFALCON_FALCON_IRQSCLR.with_halt: bool = 4, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IRQSCLR.with_swgen0: bool = 6, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IRQSTAT.with_halt: bool = 4, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IRQSTAT.with_swgen0: bool = 6, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_MAILBOX0.with_data = 31:0, "gh100/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_MAILBOX1.with_data = 31:0, "gh100/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_OS.with_version = 31:0, "gh100/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_RM.with_value = 31:0, NOT_DATA);
    // HWCFG2: RISCV 10:10 (tu102, ga100, ga102, gh100); MEM_SCRUBBING 12:12 (ga102, gh100;
    // TU10x and GA100 publish no such field and OpenRM waits on DMACTL's scrubbing bits there,
    // kflcnWaitForResetToFinish_TU102, as FalconHal::Tu102/Ga100 do); RISCV_BR_PRIV_LOCKDOWN 13:13 (gh100);
    // RESET_READY 31:31 (ga102/dev_falcon_v4_addendum.h only).
    field!(NV_PFALCON_FALCON_HWCFG2.with_riscv: bool = 10, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_HWCFG2.with_mem_scrubbing: bool = 12, "ga102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_HWCFG2.with_riscv_br_priv_lockdown: bool = 13, "gh100");
    field!(NV_PFALCON_FALCON_HWCFG2.with_reset_ready: bool = 31, "ga102 addendum");
    // gh100/dev_falcon_v4.h gives 31:24 as PRGN_RSVD_FUSE: bit 31 is no RESET_READY there.
    // OpenRM polls RESET_READY only on GA10x/AD10x (kflcnPreResetWait_GA102); nvbare's
    // pre_reset_wait polls it from GA102 on (FalconHal::waits_for_reset_ready; result ignored).
    // CPUCTL: STARTCPU 1:1, HALTED 4:4, ALIAS_EN 6:6; CPUCTL_ALIAS STARTCPU 1:1.
    field!(NV_PFALCON_FALCON_CPUCTL.with_startcpu: bool = 1, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_CPUCTL.with_halted: bool = 4, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_CPUCTL.with_alias_en: bool = 6, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_CPUCTL_ALIAS.with_startcpu: bool = 1, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_BOOTVEC.with_vec = 31:0, NOT_DATA);
    field!(NV_PFALCON_FALCON_HWCFG.with_imem_size = 8:0, "tu102/dev_falcon_v4.h");
    // DMACTL: REQUIRE_CTX 0:0, DMEM_SCRUBBING 1:1, IMEM_SCRUBBING 2:2.
    field!(NV_PFALCON_FALCON_DMACTL.with_require_ctx: bool = 0, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMACTL.with_dmem_scrubbing: bool = 1, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMACTL.with_imem_scrubbing: bool = 2, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFBASE.with_base = 31:0, "tu102/dev_falcon_v4.h");
    // DMATRFMOFFS OFFS 23:0 (ga100, ga102); tu102/dev_falcon_v4.h: 15:0 (regs::falcon::tu102,
    // used by FalconHal::Tu102: headers/tu102_ga100.rs).
    field!(NV_PFALCON_FALCON_DMATRFMOFFS.with_offs = 23:0, "ga102/dev_falcon_v4.h");
    // DMATRFCMD: FULL 0:0, IDLE 1:1, SEC 3:2, IMEM 4:4, WRITE 5:5, SIZE 10:8 (_256B 6),
    // CTXDMA 14:12, SET_DMTAG 16:16 (tu102, ga100, ga102).
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_full: bool = 0, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_idle: bool = 1, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_sec = 3:2, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_imem: bool = 4, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_write: bool = 5, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_size = 10:8, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_ctxdma = 14:12, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFCMD.with_set_dmtag: bool = 16, "tu102/dev_falcon_v4.h");
    check(
        "DMATRFCMD_SIZE_256B",
        DMATRFCMD_SIZE_256B.into(),
        &[
            Is("turing/tu102/dev_falcon_v4.h", 6),
            Is("ampere/ga102/dev_falcon_v4.h", 6),
        ],
    );
    field!(NV_PFALCON_FALCON_DMATRFFBOFFS.with_offs = 31:0, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMATRFBASE1.with_base = 8:0, "tu102/dev_falcon_v4.h");
    // IMEMC: OFFS 7:2, BLK 23:8 (ga100, ga102; tu102: 15:8, regs::falcon::tu102), AINCW 24:24, SECURE 28:28. AINCR 25:25 is in no IMEMC header (the DMEMC
    // one of tu102 has it).
    field!(NV_PFALCON_FALCON_IMEMC.with_offs = 7:2, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IMEMC.with_blk = 23:8, "ga102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IMEMC.with_aincw: bool = 24, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IMEMC.with_aincr: bool = 25, "as DMEMC_AINCR (tu102)");
    field!(NV_PFALCON_FALCON_IMEMC.with_secure: bool = 28, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IMEMD.with_data = 31:0, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_IMEMT.with_tag = 15:0, "tu102/dev_falcon_v4.h");
    // DMEMC: OFFS 7:2, BLK 23:8 (ga100, ga102; tu102 15:8), AINCW 24:24, AINCR 25:25 (tu102
    // only; ga100/ga102 do not list it).
    field!(NV_PFALCON_FALCON_DMEMC.with_offs = 7:2, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMEMC.with_blk = 23:8, "ga102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMEMC.with_aincw: bool = 24, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMEMC.with_aincr: bool = 25, "tu102/dev_falcon_v4.h");
    field!(NV_PFALCON_FALCON_DMEMD.with_data = 31:0, "tu102/dev_falcon_v4.h");
    // ENGINE: RESET 0:0 (tu102, ga102, gh100, gb100 dev_gsp.h; dev_sec_pri.h); RESET_STATUS
    // 10:8, _ASSERTED 0, _DEASSERTED 2 (gh100, gb100 dev_gsp.h only: nvbare reads it with the
    // GH100 falcon HAL, Hopper on).
    field!(NV_PFALCON_FALCON_ENGINE.with_reset: bool = 0, "tu102/dev_gsp.h");
    field!(NV_PFALCON_FALCON_ENGINE.with_reset_status = 10:8, "gh100/dev_gsp.h");
    let asserted = [
        Is("hopper/gh100/dev_gsp.h", 0),
        Is("blackwell/gb100/dev_gsp.h", 0),
    ];
    check(
        "ENGINE_RESET_STATUS_ASSERTED",
        ENGINE_RESET_STATUS_ASSERTED.into(),
        &asserted,
    );
    let deasserted = [
        Is("hopper/gh100/dev_gsp.h", 2),
        Is("blackwell/gb100/dev_gsp.h", 2),
    ];
    check(
        "ENGINE_RESET_STATUS_DEASSERTED",
        ENGINE_RESET_STATUS_DEASSERTED.into(),
        &deasserted,
    );
}

// ---------------------------------------------------------------------------------------------
// NV_PFALCON2_FALCON_* (boot ROM), NV_PFALCON_FBIF_*

#[test]
fn falcon2_and_fbif_registers() {
    let not_tu = |v| {
        [
            Is("ampere/ga102/dev_falcon_second_pri.h", v),
            Absent(
                "turing/tu102",
                "no dev_falcon_second_pri.h for TU10x/GA100 (FalconHal::Tu102/Ga100 never write them)",
            ),
        ]
    };
    rel::<NV_PFALCON2_FALCON_MOD_SEL, Sec2>(
        &not_tu(0x180),
        &[Is("NV_FALCON2_SEC_BASE + 0x180", 0x84_1180)],
    );
    rel::<NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID, Gsp>(&not_tu(0x198), &[]);
    rel::<NV_PFALCON2_FALCON_BROM_ENGIDMASK, Gsp>(&not_tu(0x19c), &[]);
    // BROM_PARAADDR(i) (0x210+(i)*4), port 0.
    rel::<NV_PFALCON2_FALCON_BROM_PARAADDR, Gsp>(
        &not_tu(0x210),
        &[Is("NV_FALCON2_GSP_BASE + 0x210", 0x11_1210)],
    );
    field!(NV_PFALCON2_FALCON_MOD_SEL.with_algo = 7:0, "ga102/dev_falcon_second_pri.h");
    check(
        "MOD_SEL_ALGO_RSA3K",
        MOD_SEL_ALGO_RSA3K.into(),
        &[Is("ampere/ga102/dev_falcon_second_pri.h", 1)],
    );
    field!(NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID.with_val = 7:0, "ga102");
    field!(NV_PFALCON2_FALCON_BROM_ENGIDMASK.with_val = 31:0, NOT_DATA);
    field!(NV_PFALCON2_FALCON_BROM_PARAADDR.with_val = 31:0, NOT_DATA);

    let fbif = |v| {
        [
            Is("turing/tu102/dev_fbif_v4.h", v),
            Is("ampere/ga100/dev_fbif_v4.h", v),
            Is("ampere/ga102/dev_fbif_v4.h", v),
        ]
    };
    // TRANSCFG(i) (0x0+(i)*4), aperture 0.
    rel::<NV_PFALCON_FBIF_TRANSCFG, Sec2>(&fbif(0x000), &[Is("NV_PSEC_FBIF_BASE + 0", 0x84_0600)]);
    rel::<NV_PFALCON_FBIF_CTL, Gsp>(&fbif(0x024), &[Is("NV_PGSP_FBIF_BASE + 0x24", 0x11_0624)]);
    field!(NV_PFALCON_FBIF_TRANSCFG.with_target = 1:0, "tu102/dev_fbif_v4.h");
    field!(NV_PFALCON_FBIF_TRANSCFG.with_mem_type_physical: bool = 2, "tu102/dev_fbif_v4.h");
    field!(NV_PFALCON_FBIF_CTL.with_allow_phys_no_ctx: bool = 7, "tu102/dev_fbif_v4.h");
    check(
        "TRANSCFG_TARGET_COHERENT_SYSMEM",
        TRANSCFG_TARGET_COHERENT_SYSMEM.into(),
        &[
            Is("turing/tu102/dev_fbif_v4.h", 1),
            Is("ampere/ga102/dev_fbif_v4.h", 1),
        ],
    );
    // LOCAL_FB is not in the GPU headers; the same FBIF in nvswitch/lr10/dev_soe_ip.h has
    // NV_SOE_FBIF_TRANSCFG_TARGET_LOCAL_FB 0 (docs/assumptions.md).
    check(
        "TRANSCFG_TARGET_LOCAL_FB",
        TRANSCFG_TARGET_LOCAL_FB.into(),
        &[
            Absent(
                "turing/tu102/dev_fbif_v4.h",
                "only COHERENT_SYSMEM is published",
            ),
            Is("nvswitch/lr10/dev_soe_ip.h (NV_SOE_FBIF_...)", 0),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// NV_PRISCV_RISCV_*

#[test]
fn riscv_registers() {
    // IRQMASK: 0x528 from GA102 on; TU10x and GA100 have it at 0x2b4. nvbare does not use it
    // (it is declared for the GA102 layout only).
    rel::<NV_PRISCV_RISCV_IRQMASK, Gsp>(
        &[
            Is("ampere/ga102/dev_riscv_pri.h", 0x528),
            Is("blackwell/gb202/dev_riscv_pri.h (595.45.04)", 0x528),
            Differs(
                "turing/tu102/dev_riscv_pri.h",
                0x2b4,
                "TU10x layout: regs::falcon::tu102",
            ),
            Differs(
                "ampere/ga100/dev_riscv_pri.h",
                0x2b4,
                "GA100 layout: regs::falcon::tu102",
            ),
        ],
        &[],
    );
    field!(NV_PRISCV_RISCV_IRQMASK.with_mask = 31:0, NOT_DATA);
    // CPUCTL: GA102 on. TU10x/GA100 report RISC-V activity in CORE_SWITCH_RISCV_STATUS
    // (0x240, ACTIVE_STAT 0:0; kflcnIsRiscvActive_TU102): headers/tu102_ga100.rs.
    let no_tu = "no RISC-V CPUCTL/BCR for TU10x/GA100: FalconHal::Tu102/Ga100 never touch them";
    rel::<NV_PRISCV_RISCV_CPUCTL, Gsp>(
        &[
            Is("ampere/ga102/dev_riscv_pri.h", 0x388),
            Is("hopper/gh100/dev_riscv_pri.h", 0x388),
            Is("blackwell/gb202/dev_riscv_pri.h (595.45.04)", 0x388),
            Absent("turing/tu102/dev_riscv_pri.h", no_tu),
            Absent("ampere/ga100/dev_riscv_pri.h", no_tu),
        ],
        &[Is("NV_FALCON2_GSP_BASE + 0x388", 0x11_1388)],
    );
    // STARTCPU 0:0 (gh100), HALTED 4:4 (ga102, gh100), STOPPED 5:5 (gh100), ACTIVE_STAT 7:7
    // (ga102, gh100).
    field!(NV_PRISCV_RISCV_CPUCTL.with_startcpu: bool = 0, "gh100/dev_riscv_pri.h");
    field!(NV_PRISCV_RISCV_CPUCTL.with_halted: bool = 4, "ga102/dev_riscv_pri.h");
    field!(NV_PRISCV_RISCV_CPUCTL.with_stopped: bool = 5, "gh100/dev_riscv_pri.h");
    field!(NV_PRISCV_RISCV_CPUCTL.with_active_stat: bool = 7, "ga102/dev_riscv_pri.h");
    // BCR_CTRL: only ga102's header publishes it (OpenRM's GA102 HAL serves AD10x and GH100).
    rel::<NV_PRISCV_RISCV_BCR_CTRL, Gsp>(
        &[
            Is("ampere/ga102/dev_riscv_pri.h", 0x668),
            Absent("hopper/gh100/dev_riscv_pri.h", "GH100 runs the GA102 HAL"),
            Absent("turing/tu102/dev_riscv_pri.h", no_tu),
            Absent("ampere/ga100/dev_riscv_pri.h", no_tu),
        ],
        &[Is("NV_FALCON2_GSP_BASE + 0x668", 0x11_1668)],
    );
    field!(NV_PRISCV_RISCV_BCR_CTRL.with_valid: bool = 0, "ga102/dev_riscv_pri.h");
    field!(NV_PRISCV_RISCV_BCR_CTRL.with_core_select_riscv: bool = 4, "ga102");
    field!(NV_PRISCV_RISCV_BCR_CTRL.with_brfetch: bool = 8, "ga102/dev_riscv_pri.h");
    // The boot ROM DMA registers: gh100/dev_riscv_pri.h (nvbare uses them Hopper on).
    let gh = |v| [Is("hopper/gh100/dev_riscv_pri.h", v)];
    rel::<NV_PRISCV_RISCV_BCR_DMACFG, Gsp>(&gh(0x66c), &[]);
    rel::<NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_LO, Gsp>(&gh(0x670), &[]);
    rel::<NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_HI, Gsp>(&gh(0x674), &[]);
    rel::<NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_LO, Gsp>(&gh(0x678), &[]);
    rel::<NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_HI, Gsp>(&gh(0x67c), &[]);
    rel::<NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_LO, Gsp>(&gh(0x680), &[]);
    rel::<NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_HI, Gsp>(
        &gh(0x684),
        &[Is("NV_FALCON2_GSP_BASE + 0x684", 0x11_1684)],
    );
    // DMACFG: TARGET 1:0 (_COHERENT_SYSMEM 1), POINTER_WALKING 28:28, LOCK 31:31; the
    // DMAADDR _LO VAL 31:0, _HI VAL 11:0.
    field!(NV_PRISCV_RISCV_BCR_DMACFG.with_target = 1:0, "gh100/dev_riscv_pri.h");
    field!(NV_PRISCV_RISCV_BCR_DMACFG.with_pointer_walking: bool = 28, "gh100");
    field!(NV_PRISCV_RISCV_BCR_DMACFG.with_lock: bool = 31, "gh100/dev_riscv_pri.h");
    check(
        "BCR_DMACFG_TARGET_COHERENT_SYSMEM",
        BCR_DMACFG_TARGET_COHERENT_SYSMEM.into(),
        &[Is("hopper/gh100/dev_riscv_pri.h", 1)],
    );
    field!(NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_LO.with_val = 31:0, "gh100");
    field!(NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_HI.with_val = 11:0, "gh100");
    field!(NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_LO.with_val = 31:0, "gh100");
    field!(NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_HI.with_val = 11:0, "gh100");
    field!(NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_LO.with_val = 31:0, "gh100");
    field!(NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_HI.with_val = 11:0, "gh100");
}
