//! Every address in `core/src/regs/` checked against NVIDIA's published headers.
//!
//! The headers are `src/common/inc/swref/published/<arch>/<chip>/dev_*.h` of
//! open-gpu-kernel-modules (tag 570.144, the release nvbare's firmware comes from; a header
//! marked "595.45.04" is only published from that release on). Paths below are relative to
//! `published/`, so each names the chip its number is for. For each register the tests check
//! the offset and the window or engine base it is relative to, and the bit positions of the
//! fields nvbare uses.
//!
//! A check lists what each header of a chip family nvbare targets says ([`H`]): the same
//! value ([`H::Is`]), another one ([`H::Differs`], with the reason it is not used there or the
//! issue it is), or nothing ([`H::Absent`], with the reason). At least one header must confirm
//! nvbare's value. `every_register_is_checked` fails when a register, a block base or a
//! constant is declared in `core/src/regs/` and not named here, so a new register cannot skip
//! this file.
//!
//! The simulator's own decoding is checked the same way in `tests/sim/src/regs_check.rs`.

extern crate std;

use std::string::String;
use std::vec::Vec;

use super::falcon::*;
use super::fsp::*;
use super::fuse::*;
use super::gsp::*;
use super::mmu::*;
use super::pbus::*;
use super::pfb::*;
use super::pgc6::*;
use super::pmc::*;
use super::usermode::*;
use super::{Register, RegisterArray, RegisterBase, RegisterFamily, RelativeRegister};

/// What one published header says about one of nvbare's numbers.
#[derive(Debug, Clone, Copy)]
enum H {
    /// The header (path below `published/`) gives this value.
    Is(&'static str, u32),
    /// The header gives another value; the text says why nvbare's is still right where nvbare
    /// uses it, or names the issue.
    Differs(&'static str, u32, &'static str),
    /// The header does not define it; the text says why that is fine, or names the issue.
    Absent(&'static str, &'static str),
}

use H::{Absent, Differs, Is};

/// Checks `ours` against every header in `facts`; at least one must confirm it.
fn check(name: &str, ours: u32, facts: &[H]) {
    let mut confirmed = false;
    for f in facts {
        match *f {
            Is(h, v) => {
                assert_eq!(ours, v, "{name} is {ours:#x}, {h} gives {v:#x}");
                confirmed = true;
            }
            Differs(h, v, why) => {
                assert_ne!(ours, v, "{name}: {h} was listed as differing ({why})");
                assert!(!why.is_empty());
            }
            Absent(h, why) => assert!(!h.is_empty() && !why.is_empty()),
        }
    }
    assert!(
        confirmed,
        "{name} = {ours:#x}: no published header confirms it"
    );
}

/// Checks a block base (`RegisterBase<F> for E`).
fn base<F: RegisterFamily, E: RegisterBase<F>>(what: &str, facts: &[H]) {
    check(what, E::BASE, facts);
}

/// Checks a relative register: its offset in the block and its BAR0 address in instance `E`.
fn rel<R: RelativeRegister, E: RegisterBase<R::Family>>(offset: &[H], absolute: &[H]) {
    check(R::NAME, R::OFFSET, offset);
    if !absolute.is_empty() {
        check(R::NAME, R::offset_of::<E>() as u32, absolute);
    }
}

/// Checks a header `NAME(i)` macro: element 0 and the stride (`base + i * stride`).
fn arr<R: RegisterArray>(base: &[H], stride: u32) {
    check(R::NAME, R::BASE, base);
    assert_eq!(R::STRIDE, stride, "{}: stride", R::NAME);
}

/// The mask of header bits `hi:lo`.
const fn mask(hi: u32, lo: u32) -> u32 {
    ((u64::MAX >> (63 - hi)) as u32) & !((1u32 << lo) - 1)
}

/// Asserts that a field covers exactly the header's bits: `R.with_f = hi:lo` (integer field,
/// set to all ones) or `R.with_f: bool = bit`.
macro_rules! field {
    ($r:ident . $f:ident : bool = $bit:literal, $h:expr) => {
        assert_eq!(
            u32::from($r::new().$f(true)),
            1u32 << $bit,
            "{}.{}: {}",
            stringify!($r),
            stringify!($f),
            $h
        );
    };
    ($r:ident . $f:ident = $hi:literal : $lo:literal, $h:expr) => {{
        let ones: u64 = u64::MAX >> (63 - ($hi - $lo));
        assert_eq!(
            u32::from($r::new().$f(ones.try_into().unwrap())),
            mask($hi, $lo),
            "{}.{}: {}",
            stringify!($r),
            stringify!($f),
            $h
        );
    }};
}

const NOT_DATA: &str = "the header has no such field";

// ---------------------------------------------------------------------------------------------
// PMC

#[test]
fn pmc_boot_registers() {
    check(
        NV_PMC_BOOT_0::NAME,
        NV_PMC_BOOT_0::OFFSET,
        &[
            Is("nv_ref.h", 0x0),
            Is("ampere/ga100/dev_boot.h", 0x0),
            Is("hopper/gh100/dev_pmc.h", 0x0),
        ],
    );
    check(
        NV_PMC_BOOT_42::NAME,
        NV_PMC_BOOT_42::OFFSET,
        &[Is("nv_ref.h", 0xa00)],
    );
    // nv_ref.h (chip-independent; decodePmcBoot0Architecture).
    field!(NV_PMC_BOOT_0.with_minor_revision = 3:0, "nv_ref.h");
    field!(NV_PMC_BOOT_0.with_major_revision = 7:4, "nv_ref.h");
    field!(NV_PMC_BOOT_0.with_architecture_1 = 8:8, "nv_ref.h");
    field!(NV_PMC_BOOT_0.with_implementation = 23:20, "nv_ref.h");
    field!(NV_PMC_BOOT_0.with_architecture_0 = 28:24, "nv_ref.h");
    field!(NV_PMC_BOOT_42.with_minor_extended_revision = 11:8, "nv_ref.h");
    field!(NV_PMC_BOOT_42.with_minor_revision = 15:12, "nv_ref.h");
    field!(NV_PMC_BOOT_42.with_major_revision = 19:16, "nv_ref.h");
    field!(NV_PMC_BOOT_42.with_implementation = 23:20, "nv_ref.h");
    field!(NV_PMC_BOOT_42.with_architecture = 29:24, "nv_ref.h");
    // NV_PMC_BOOT_42_CHIP_ID 29:20 = architecture:implementation.
    assert_eq!(NV_PMC_BOOT_42::from(0x3ff0_0000).chip_id(), 0x3ff);
}

// ---------------------------------------------------------------------------------------------
// PBUS, PROM, BAR1 block

#[test]
fn pbus_vbios_scratch_and_prom() {
    const NO_FWSEC: &str = "the header does not publish it; OpenRM reads FWSEC's status with \
                            the tu102 header on every chip that runs FWSEC (TU10x-AD10x)";
    arr::<NV_PBUS_VBIOS_SCRATCH>(
        &[
            Is("turing/tu102/dev_bus.h", 0x1400),
            Absent("ampere/ga100/dev_bus.h", NO_FWSEC),
            Absent("ada/ad102/dev_bus.h", NO_FWSEC),
            Absent("hopper/gh100/dev_bus.h", "no FWSEC on Hopper on"),
        ],
        4,
    );
    // The indexes and fields are not in a header: kernel_gsp_frts_tu102.c defines
    // NV_VBIOS_FWSECLIC_SCRATCH_INDEX_0E 0x0E (FRTS_ERR_CODE 31:16) and _15 0x15 (SB_ERR_CODE
    // 15:0).
    check(
        "FWSECLIC_SCRATCH_INDEX_0E",
        FWSECLIC_SCRATCH_INDEX_0E,
        &[Is("(kernel_gsp_frts_tu102.c)", 0x0e)],
    );
    check(
        "FWSECLIC_SCRATCH_INDEX_15",
        FWSECLIC_SCRATCH_INDEX_15,
        &[Is("(kernel_gsp_frts_tu102.c)", 0x15)],
    );
    assert_eq!(frts_err_code(0xabcd_0000), 0xabcd);
    assert_eq!(sb_err_code(0x0000_abcd), 0xabcd);
    // turing/tu102/dev_ext_devices.h: NV_PROM_DATA(i) (0x00300000+(i)).
    check(
        "NV_PROM_DATA",
        NV_PROM_DATA,
        &[Is("turing/tu102/dev_ext_devices.h", 0x30_0000)],
    );
    check(
        "PROM_WINDOW_SIZE",
        PROM_WINDOW_SIZE,
        &[
            Absent(
                "turing/tu102/dev_ext_devices.h",
                "gives NV_PROM_DATA(i) without a __SIZE_1",
            ),
            // The same PROM block of the NVSwitch LR10; no GPU header gives the size.
            Is(
                "nvswitch/lr10/dev_ext_devices.h (NV_PROM_DATA__SIZE_1)",
                1_048_576,
            ),
        ],
    );
}

#[test]
fn bar1_block_registers() {
    const VF: u32 = 0xb8_0000;
    check(
        NV_PBUS_BAR1_BLOCK::NAME,
        NV_PBUS_BAR1_BLOCK::OFFSET,
        &[
            Is("turing/tu102/dev_bus.h", 0x1704),
            Is("ampere/ga100/dev_bus.h", 0x1704),
            Is("ada/ad102/dev_bus.h", 0x1704),
            Absent(
                "hopper/gh100/dev_bus.h",
                "Hopper on use the VF register (device::baremetal::set_bar1_physical)",
            ),
            Absent("blackwell/gb100/dev_bus.h", "as Hopper"),
        ],
    );
    // tu102, ga100, ad102 dev_bus.h: PTR 27:0, TARGET 29:28, MODE 31:31.
    field!(NV_PBUS_BAR1_BLOCK.with_ptr = 27:0, "tu102/dev_bus.h");
    field!(NV_PBUS_BAR1_BLOCK.with_target = 29:28, "tu102/dev_bus.h");
    field!(NV_PBUS_BAR1_BLOCK.with_mode_virtual: bool = 31, "tu102/dev_bus.h");
    // gh100/dev_vm.h: NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0xB80000 (tu102, gb100 dev_vm.h)
    // + _PRIV_FUNC_BAR1_BLOCK_LOW_ADDR 0xF60, _HIGH_ADDR 0xF64 (inside NV_VIRTUAL_FUNCTION_PRIV
    // 0x2FFFF:0). GB10x/GB20x run OpenRM's kbusTeardownMailbox_GH100 with this header.
    let no_gb = "not in the GB headers; OpenRM's GH100 HAL (kbusTeardownMailbox_GH100) serves GB";
    check(
        NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::NAME,
        NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::OFFSET,
        &[
            Is("hopper/gh100/dev_vm.h", VF + 0xf60),
            Absent("blackwell/gb100/dev_vm.h", no_gb),
            Absent("blackwell/gb202/dev_vm.h", no_gb),
        ],
    );
    check(
        NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR::NAME,
        NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR::OFFSET,
        &[
            Is("hopper/gh100/dev_vm.h", VF + 0xf64),
            Absent("blackwell/gb100/dev_vm.h", no_gb),
        ],
    );
    type Lo = NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR;
    field!(Lo.with_bar1_pending: bool = 0, "gh100/dev_vm.h");
    field!(Lo.with_bar1_outstanding: bool = 1, "gh100/dev_vm.h");
    field!(Lo.with_mode_virtual: bool = 9, "gh100/dev_vm.h");
    field!(Lo.with_target = 11:10, "gh100/dev_vm.h");
    field!(Lo.with_ptr = 31:12, "gh100/dev_vm.h");
    type Hi = NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR;
    field!(Hi.with_ptr = 31:0, "gh100/dev_vm.h");
}

// ---------------------------------------------------------------------------------------------
// PFB

#[test]
fn pfb_wpr2() {
    let lo = [
        Is("turing/tu102/dev_fb.h", 0x1f_a824),
        Absent(
            "ampere/ga100/dev_fb.h",
            "not published; OpenRM reads WPR2 with the tu102 header (kernel_gsp_tu102.c)",
        ),
        Is("hopper/gh100/dev_fb.h (595.45.04)", 0x1f_a824),
        Absent(
            "blackwell/gb100/dev_fb.h (595.45.04)",
            "not published; OpenRM reads WPR2 with the tu102 header (kernel_gsp_tu102.c)",
        ),
    ];
    check(
        NV_PFB_PRI_MMU_WPR2_ADDR_LO::NAME,
        NV_PFB_PRI_MMU_WPR2_ADDR_LO::OFFSET,
        &lo,
    );
    let hi = [
        Is("turing/tu102/dev_fb.h", 0x1f_a828),
        Is("hopper/gh100/dev_fb.h (595.45.04)", 0x1f_a828),
    ];
    check(
        NV_PFB_PRI_MMU_WPR2_ADDR_HI::NAME,
        NV_PFB_PRI_MMU_WPR2_ADDR_HI::OFFSET,
        &hi,
    );
    // VAL 31:4, ALIGNMENT 0xc (tu102, gh100).
    field!(NV_PFB_PRI_MMU_WPR2_ADDR_LO.with_val = 31:4, "tu102/dev_fb.h");
    field!(NV_PFB_PRI_MMU_WPR2_ADDR_HI.with_val = 31:4, "tu102/dev_fb.h");
    assert_eq!(NV_PFB_PRI_MMU_WPR2_ADDR_LO::from(0x10).address(), 1 << 12);
    assert_eq!(NV_PFB_PRI_MMU_WPR2_ADDR_HI::from(0x10).address(), 1 << 12);
}

// ---------------------------------------------------------------------------------------------
// PGC6 (always-on and BSI scratch)

#[test]
fn pgc6_scratch() {
    arr::<NV_PGC6_AON_SECURE_SCRATCH_GROUP_05>(
        &[
            Is("turing/tu102/dev_gc6_island.h", 0x11_8234),
            Is("ampere/ga102/dev_gc6_island.h", 0x11_8234),
        ],
        4,
    );
    // _0_GFW_BOOT_PROGRESS 7:0, _COMPLETED 0xFF (tu102, ga102 dev_gc6_island_addendum.h).
    field!(NV_PGC6_AON_SECURE_SCRATCH_GROUP_05.with_progress = 7:0, "addendum");
    check(
        "GFW_BOOT_PROGRESS_COMPLETED",
        GFW_BOOT_PROGRESS_COMPLETED.into(),
        &[
            Is("turing/tu102/dev_gc6_island_addendum.h", 0xff),
            Is("ampere/ga102/dev_gc6_island_addendum.h", 0xff),
        ],
    );
    type Plm = NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK;
    check(
        Plm::NAME,
        Plm::OFFSET,
        &[
            Is("turing/tu102/dev_gc6_island.h", 0x11_8128),
            Is("ampere/ga102/dev_gc6_island.h", 0x11_8128),
        ],
    );
    // READ_PROTECTION_LEVEL0 0:0, _ENABLE 1 (what kern_gpu_tu102.c waits for).
    field!(Plm.with_read_protection_level0: bool = 0, "tu102/dev_gc6_island.h");
    type G42 = NV_PGC6_AON_SECURE_SCRATCH_GROUP_42;
    check(
        G42::NAME,
        G42::OFFSET,
        &[
            Is("ampere/ga102/dev_gc6_island.h", 0x11_83a4),
            // Issue: BareMetalBackend::open reads it on every chip; OpenRM's
            // kmemsysReadUsableFbSize_GA102 reads it from GA102 on, but TU10x and GA100 use
            // kmemsysReadUsableFbSize_GP102 (NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE).
            Absent(
                "turing/tu102/dev_gc6_island.h",
                "not published for TU10x/GA100: issue, nvbare reads it there",
            ),
        ],
    );
    // NV_USABLE_FB_SIZE_IN_MB_VALUE 31:0 (ga102/dev_gc6_island_addendum.h).
    field!(G42.with_value = 31:0, "ga102/dev_gc6_island_addendum.h");
    assert_eq!(G42::from(1).vram_bytes(), 1 << 20);
    type Bsi14 = NV_PGC6_BSI_SECURE_SCRATCH_14;
    check(
        Bsi14::NAME,
        Bsi14::OFFSET,
        &[
            Is("turing/tu102/dev_gc6_island.h", 0x11_80f8),
            Is("ampere/ga102/dev_gc6_island.h", 0x11_80f8),
        ],
    );
    // BOOT_STAGE_3_HANDOFF 26:26 (tu102, ga102 dev_gc6_island_addendum.h).
    field!(Bsi14.with_boot_stage_3_handoff: bool = 26, "addendum");
}

// ---------------------------------------------------------------------------------------------
// GSP engine registers outside the falcon core

#[test]
fn gsp_queue_head_and_mailboxes() {
    let no_queue = "not published; OpenRM's kgspSetCmdQueueHead_TU102 (tu102 header) serves \
                    every chip";
    arr::<NV_PGSP_QUEUE_HEAD>(
        &[
            Is("turing/tu102/dev_gsp.h", 0x11_0c00),
            Is("ampere/ga102/dev_gsp.h", 0x11_0c00),
            Absent("hopper/gh100/dev_gsp.h", no_queue),
            Absent("blackwell/gb100/dev_gsp.h", no_queue),
        ],
        8,
    );
    // NV_PGSP_QUEUE_HEAD__SIZE_1 8 (tu102, ga102).
    assert_eq!(NV_PGSP_QUEUE_HEAD::COUNT, 8);
    field!(NV_PGSP_QUEUE_HEAD.with_address = 31:0, "tu102/dev_gsp.h");
    arr::<NV_PGSP_MAILBOX>(
        &[
            Is("turing/tu102/dev_gsp.h", 0x11_0804),
            Is("ampere/ga102/dev_gsp.h", 0x11_0804),
            Is("hopper/gh100/dev_gsp.h", 0x11_0804),
            Is("blackwell/gb100/dev_gsp.h", 0x11_0804),
        ],
        4,
    );
    // NV_PGSP_MAILBOX__SIZE_1 4 (tu102, ga102).
    assert_eq!(NV_PGSP_MAILBOX::COUNT, 4);
    field!(NV_PGSP_MAILBOX.with_data = 31:0, "tu102/dev_gsp.h");
}

// The falcon, falcon2, FBIF and RISC-V registers: headers/falcon.rs.
mod falcon;

// ---------------------------------------------------------------------------------------------
// Fuses

#[test]
fn fuse_ucode_versions() {
    // ga100/dev_fuse.h: _UCODE1_VERSION .. _UCODE16_VERSION, 4 bytes apart, DATA 15:0.
    // tu102/dev_fuse.h (and gh100's) publish none of them: OpenRM's
    // k{gsp,sec2}ReadUcodeFuseVersion_b2b553 returns 0 on TU10x without reading, while
    // nvbare's FalconHal::ucode_fuse_version reads them on GA100 on only.
    let no_tu = "not published for TU10x: FalconHal::Tu102 does not read it";
    let fuse = |v| {
        [
            Is("ampere/ga100/dev_fuse.h", v),
            Absent(
                "ada/ad102",
                "no dev_fuse.h for AD10x; OpenRM reads it with the ga100 header",
            ),
            Absent("turing/tu102/dev_fuse.h", no_tu),
        ]
    };
    arr::<NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION>(&fuse(0x82_4100), 4);
    arr::<NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION>(&fuse(0x82_4140), 4);
    arr::<NV_FUSE_OPT_FPF_GSP_UCODE_VERSION>(&fuse(0x82_41c0), 4);
    // _UCODE16_VERSION is the last element: 0x82413C, 0x82417C, 0x8241FC (ga100).
    let last = |b: u32| b + 15 * 4;
    assert_eq!(NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION::COUNT, 16);
    check(
        "NVDEC_UCODE16",
        last(NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION::BASE),
        &[Is("ampere/ga100/dev_fuse.h", 0x82_413c)],
    );
    check(
        "SEC2_UCODE16",
        last(NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION::BASE),
        &[Is("ampere/ga100/dev_fuse.h", 0x82_417c)],
    );
    check(
        "GSP_UCODE16",
        last(NV_FUSE_OPT_FPF_GSP_UCODE_VERSION::BASE),
        &[Is("ampere/ga100/dev_fuse.h", 0x82_41fc)],
    );
    field!(NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION.with_data = 15:0, "ga100/dev_fuse.h");
    field!(NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION.with_data = 15:0, "ga100/dev_fuse.h");
    field!(NV_FUSE_OPT_FPF_GSP_UCODE_VERSION.with_data = 15:0, "ga100/dev_fuse.h");
    assert_eq!(fuse_version(0x8000), 16);
}

// ---------------------------------------------------------------------------------------------
// FSP and the thermal scratch it reports through

#[test]
fn fsp_registers() {
    // gh100/dev_fsp_pri.h. The GB10x/GB20x headers publish only the scratch groups; OpenRM's
    // GH100 FSP HAL (kfspSendPacket_GH100 and friends) serves them.
    let gb = "not published for GB; OpenRM's kfsp*_GH100 serves GB10x/GB20x";
    let gh = |v| {
        [
            Is("hopper/gh100/dev_fsp_pri.h", v),
            Absent("blackwell/gb100/dev_fsp_pri.h", gb),
            Absent("blackwell/gb202/dev_fsp_pri.h", gb),
        ]
    };
    arr::<NV_PFSP_EMEMC>(&gh(0x8f_2ac0), 8);
    arr::<NV_PFSP_EMEMD>(&gh(0x8f_2ac4), 8);
    arr::<NV_PFSP_QUEUE_HEAD>(&gh(0x8f_2c00), 8);
    arr::<NV_PFSP_QUEUE_TAIL>(&gh(0x8f_2c04), 8);
    arr::<NV_PFSP_MSGQ_HEAD>(&gh(0x8f_2c80), 8);
    arr::<NV_PFSP_MSGQ_TAIL>(&gh(0x8f_2c84), 8);
    // __SIZE_1 8 for all six.
    for n in [
        NV_PFSP_EMEMC::COUNT,
        NV_PFSP_EMEMD::COUNT,
        NV_PFSP_QUEUE_HEAD::COUNT,
        NV_PFSP_QUEUE_TAIL::COUNT,
        NV_PFSP_MSGQ_HEAD::COUNT,
        NV_PFSP_MSGQ_TAIL::COUNT,
    ] {
        assert_eq!(n, 8);
    }
    arr::<NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2>(
        &[
            Is("hopper/gh100/dev_fsp_pri.h", 0x8f_0320),
            Is("blackwell/gb100/dev_fsp_pri.h", 0x8f_0320),
            Is("blackwell/gb202/dev_fsp_pri.h", 0x8f_0320),
        ],
        4,
    );
    assert_eq!(NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2::COUNT, 4);
    // EMEMC: OFFS 7:2, BLK 15:8, AINCW 24:24, AINCR 25:25; the others 31:0.
    field!(NV_PFSP_EMEMC.with_offs = 7:2, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_EMEMC.with_blk = 15:8, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_EMEMC.with_aincw: bool = 24, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_EMEMC.with_aincr: bool = 25, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_EMEMD.with_data = 31:0, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_QUEUE_HEAD.with_address = 31:0, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_QUEUE_TAIL.with_address = 31:0, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_MSGQ_HEAD.with_val = 31:0, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_MSGQ_TAIL.with_val = 31:0, "gh100/dev_fsp_pri.h");
    field!(NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2.with_val = 31:0, "gh100/dev_fsp_pri.h");
    // Not register headers: src/nvidia/arch/nvalloc/common/inc/fsp/fsp_emem_channels.h
    // (FSP_EMEM_CHANNEL_RM 0x0, _SIZE 1024) and kern_fsp_gh100.c (DWORDS_PER_EMEM_BLOCK 64;
    // BLK counts 256-byte blocks).
    check(
        "FSP_EMEM_CHANNEL_RM",
        FSP_EMEM_CHANNEL_RM,
        &[Is("(fsp_emem_channels.h)", 0)],
    );
    check(
        "FSP_EMEM_CHANNEL_RM_SIZE",
        FSP_EMEM_CHANNEL_RM_SIZE as u32,
        &[Is("(fsp_emem_channels.h)", 1024)],
    );
    check(
        "DWORDS_PER_EMEM_BLOCK",
        DWORDS_PER_EMEM_BLOCK,
        &[Is("(kern_fsp_gh100.c)", 64)],
    );
}

#[test]
fn therm_i2cs_scratch() {
    // No header gives the thermal block's base; nvbare's bases make the header's absolute
    // NV_THERM_I2CS_SCRATCH.
    rel::<NV_THERM_I2CS_SCRATCH, ThermGh100>(
        &[Is("NV_THERM_I2CS_SCRATCH - block base", 0xbc)],
        &[
            Is("hopper/gh100/dev_therm.h", 0x2_00bc),
            Is("blackwell/gb100/dev_therm.h", 0x2_00bc),
            Differs(
                "blackwell/gb202/dev_therm.h",
                0xad_00bc,
                "GB20x: ThermGb202",
            ),
        ],
    );
    base::<PThermBase, ThermGh100>(
        "ThermGh100",
        &[Is("gh100/dev_therm.h I2CS_SCRATCH - 0xbc", 0x2_0000)],
    );
    base::<PThermBase, ThermGb202>(
        "ThermGb202",
        &[Is("gb202/dev_therm.h I2CS_SCRATCH - 0xbc", 0xad_0000)],
    );
    check(
        "NV_THERM_I2CS_SCRATCH (GB20x)",
        NV_THERM_I2CS_SCRATCH::offset_of::<ThermGb202>() as u32,
        &[
            Is("blackwell/gb202/dev_therm.h", 0xad_00bc),
            Differs(
                "hopper/gh100/dev_therm.h",
                0x2_00bc,
                "GH100/GB10x: ThermGh100",
            ),
        ],
    );
    field!(NV_THERM_I2CS_SCRATCH.with_data = 31:0, "_FSP_BOOT_COMPLETE_STATUS 31:0");
    check(
        "FSP_BOOT_COMPLETE_SUCCESS",
        FSP_BOOT_COMPLETE_SUCCESS,
        &[
            Is("hopper/gh100/dev_therm_addendum.h", 0xff),
            Is("blackwell/gb100/dev_therm_addendum.h", 0xff),
            Is("blackwell/gb202/dev_therm_addendum.h", 0xff),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// MMU invalidate (the issue-34 item 6 registers)

#[test]
fn mmu_invalidate_registers() {
    // NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0x00BBFFFF:0x00B80000 (tu102, gb100 dev_vm.h) plus
    // the PRIV offsets. ga100/dev_vm.h publishes _INVALIDATE only; gh100/dev_vm.h none (GH100
    // runs kgmmuCommitTlbInvalidate_TU102, GB kgmmuCommitTlbInvalidate_GB100: same register).
    const VF: u32 = 0xb8_0000;
    let v = |o| {
        [
            Is("turing/tu102/dev_vm.h", VF + o),
            Is("blackwell/gb100/dev_vm.h", VF + o),
            Absent(
                "hopper/gh100/dev_vm.h",
                "not published; GH100 uses the TU102 HAL",
            ),
        ]
    };
    type Pdb = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB;
    type Upper = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB;
    type Inv = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE;
    check(Pdb::NAME, Pdb::OFFSET, &v(0x30a0));
    check(Upper::NAME, Upper::OFFSET, &v(0x30a4));
    let mut inv = v(0x30b0).to_vec();
    inv.push(Is("ampere/ga100/dev_vm.h", VF + 0x30b0));
    // Item 6 of issue 34: 0xbb30b0 is NV_VIRTUAL_FUNCTION (0x30000, the usermode page) +
    // 0x30b0, not a PRIV register.
    inv.push(Differs("(item 6)", 0xbb_30b0, "the old wrong address"));
    check(Inv::NAME, Inv::OFFSET, &inv);
    // PDB: APERTURE 1:1, ADDR 31:4; UPPER_PDB ADDR 19:0 (tu102, gb100).
    field!(Pdb.with_aperture_sys: bool = 1, "tu102/dev_vm.h");
    field!(Pdb.with_addr = 31:4, "tu102/dev_vm.h");
    field!(Upper.with_addr = 19:0, "tu102/dev_vm.h");
    // INVALIDATE (tu102, ga100, gb100): ALL_VA 0:0, ALL_PDB 1:1, HUBTLB_ONLY 2:2, REPLAY 5:3,
    // SYS_MEMBAR 6:6, ACK 8:7 (_GLOBALLY 1), CANCEL_CLIENT_ID 14:9, CANCEL_GPC_ID 19:15,
    // CANCEL_CLIENT_TYPE 20:20, USE_PASID 21:21, USE_SIZE 22:22, PROP_FLUSH 23:23,
    // CACHE_LEVEL 26:24, TRIGGER 31:31 (ga100/gb100 also INVAL_SCOPE 16:15, gb100 SKIPPED
    // 30:30: unused).
    field!(Inv.with_all_va: bool = 0, "tu102/dev_vm.h");
    field!(Inv.with_all_pdb: bool = 1, "tu102/dev_vm.h");
    field!(Inv.with_hubtlb_only: bool = 2, "tu102/dev_vm.h");
    field!(Inv.with_replay = 5:3, "tu102/dev_vm.h");
    field!(Inv.with_sys_membar: bool = 6, "tu102/dev_vm.h");
    field!(Inv.with_ack = 8:7, "tu102/dev_vm.h");
    field!(Inv.with_cancel_client_id = 14:9, "tu102/dev_vm.h");
    field!(Inv.with_cancel_gpc_id = 19:15, "tu102/dev_vm.h");
    field!(Inv.with_cancel_client_type: bool = 20, "tu102/dev_vm.h");
    field!(Inv.with_use_pasid: bool = 21, "tu102/dev_vm.h");
    field!(Inv.with_use_size: bool = 22, "tu102/dev_vm.h");
    field!(Inv.with_prop_flush: bool = 23, "tu102/dev_vm.h");
    field!(Inv.with_cache_level = 26:24, "tu102/dev_vm.h");
    field!(Inv.with_trigger: bool = 31, "tu102/dev_vm.h");
    check(
        "INVALIDATE_ACK_GLOBALLY",
        INVALIDATE_ACK_GLOBALLY.into(),
        &[
            Is("turing/tu102/dev_vm.h", 1),
            Is("ampere/ga100/dev_vm.h", 1),
            Is("blackwell/gb100/dev_vm.h", 1),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Usermode block, doorbell

#[test]
fn usermode_block() {
    // clc361.h (VOLTA_USERMODE_A; the later usermode classes map the same block):
    // NVC361_TIME_0 0x80, NVC361_TIME_1 0x84, NVC361_NOTIFY_CHANNEL_PENDING 0x90,
    // NVC361_NV_USERMODE__SIZE 65536.
    let c361 = |v| [Is("sdk/nvidia/inc/class/clc361.h", v)];
    rel::<NVC361_TIME_0, MappedUsermode>(&c361(0x80), &c361(0x80));
    rel::<NVC361_TIME_1, MappedUsermode>(&c361(0x84), &[]);
    rel::<NVC361_NOTIFY_CHANNEL_PENDING, MappedUsermode>(&c361(0x90), &[]);
    check(
        "USERMODE_BLOCK_SIZE",
        USERMODE_BLOCK_SIZE as u32,
        &c361(65536),
    );
    base::<UsermodeBase, MappedUsermode>(
        "MappedUsermode",
        &[Is("(an RM usermode object maps the block at 0)", 0)],
    );
    // In BAR0: NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0xB80000 + NV_VIRTUAL_FUNCTION
    // 0x3FFFF:0x30000 (tu102, gh100, gb100 dev_vm.h).
    base::<UsermodeBase, Bar0Usermode>(
        "Bar0Usermode",
        &[
            Is("turing/tu102/dev_vm.h", 0xb8_0000 + 0x3_0000),
            Is("hopper/gh100/dev_vm.h", 0xb8_0000 + 0x3_0000),
            Is("blackwell/gb100/dev_vm.h", 0xb8_0000 + 0x3_0000),
        ],
    );
    // NV_VIRTUAL_FUNCTION_TIME_0 0x30080, _TIME_1 0x30084, _DOORBELL 0x30090 (VF-relative).
    const VF: u32 = 0xb8_0000;
    let time = |o| {
        [
            Is("turing/tu102/dev_vm.h", VF + o),
            Is("ampere/ga100/dev_vm.h", VF + o),
            Is("blackwell/gb100/dev_vm.h", VF + o),
        ]
    };
    check(
        "NV_VIRTUAL_FUNCTION_TIME_0",
        NVC361_TIME_0::offset_of::<Bar0Usermode>() as u32,
        &time(0x3_0080),
    );
    check(
        "NV_VIRTUAL_FUNCTION_TIME_1",
        NVC361_TIME_1::offset_of::<Bar0Usermode>() as u32,
        &time(0x3_0084),
    );
    check(
        "NV_VIRTUAL_FUNCTION_DOORBELL",
        NVC361_NOTIFY_CHANNEL_PENDING::offset_of::<Bar0Usermode>() as u32,
        &[
            Is("turing/tu102/dev_vm.h", VF + 0x3_0090),
            Is("ampere/ga100/dev_vm.h (595.45.04)", VF + 0x3_0090),
            Is("blackwell/gb100/dev_vm.h", VF + 0x3_0090),
            Is("blackwell/gb202/dev_vm.h", VF + 0x3_0090),
        ],
    );
    // TIME_0 NSEC 31:5, TIME_1 NSEC 28:0 in dev_vm.h; nvbare reads both words whole
    // (docs/assumptions.md).
    field!(NVC361_TIME_0.with_nsec = 31:0, "whole word");
    field!(NVC361_TIME_1.with_nsec = 31:0, "whole word");
    field!(NVC361_NOTIFY_CHANNEL_PENDING.with_token = 31:0, "DOORBELL_HANDLE 31:0");
    // Token: NV_CTRL_VF_DOORBELL_VECTOR 11:0, _RUNLIST_ID 22:16 (tu102, ga100 dev_ctrl.h;
    // NV_VIRTUAL_FUNCTION_DOORBELL_VECTOR/_RUNLIST_ID in gb100, gb202 dev_vm.h).
    field!(WorkSubmitToken.with_chid = 11:0, "tu102/dev_ctrl.h");
    field!(WorkSubmitToken.with_runlist_id = 22:16, "tu102/dev_ctrl.h");
    // gb202/dev_vm.h: _RUNLIST_DOORBELL 30:30, _ENABLE 1 (kfifoGenerateWorkSubmitTokenHal_GB202
    // sets it; gsp::client::work_submit_token does on GB20x).
    check(
        "DOORBELL_RUNLIST_DOORBELL_ENABLE_GB202",
        crate::gsp::client::DOORBELL_RUNLIST_DOORBELL_ENABLE_GB202,
        &[Is("blackwell/gb202/dev_vm.h", 1 << 30)],
    );
}

// ---------------------------------------------------------------------------------------------
// The PCI config space mirror in BAR0 (chip table)

#[test]
fn pci_config_mirror() {
    use crate::chip::{Architecture, CHIPS};
    // NV_PCFG 0x00088FFF:0x00088000 (tu102, ga100 dev_nv_xve.h; kbifGetPciConfigSpacePriMirror_
    // GM107 up to Ada), NV_EP_PCFGM 0x92FFF:0x92000 (gh100/dev_xtl_ep_pri.h; _GH100 from Hopper
    // on).
    for c in CHIPS {
        let facts: &[H] = match c.architecture {
            Architecture::Turing | Architecture::Ampere | Architecture::Ada => &[
                Is("turing/tu102/dev_nv_xve.h (NV_PCFG)", 0x8_8000),
                Is("ampere/ga100/dev_nv_xve.h (NV_PCFG)", 0x8_8000),
            ],
            Architecture::Hopper | Architecture::Blackwell => {
                &[Is("hopper/gh100/dev_xtl_ep_pri.h (NV_EP_PCFGM)", 0x9_2000)]
            }
        };
        check(c.name, c.pci_config_mirror, facts);
    }
}

// The TU10x/GA100-only registers (falcon HAL `Tu102`/`Ga100`, `FbSizeSource`).
mod tu102_ga100;

// ---------------------------------------------------------------------------------------------
// Completeness

/// The register modules' sources, scanned for declarations.
const SOURCES: &[(&str, &str)] = &[
    ("falcon.rs", include_str!("falcon.rs")),
    ("fsp.rs", include_str!("fsp.rs")),
    ("fuse.rs", include_str!("fuse.rs")),
    ("gsp.rs", include_str!("gsp.rs")),
    ("mmu.rs", include_str!("mmu.rs")),
    ("pbus.rs", include_str!("pbus.rs")),
    ("pfb.rs", include_str!("pfb.rs")),
    ("pgc6.rs", include_str!("pgc6.rs")),
    ("pmc.rs", include_str!("pmc.rs")),
    ("usermode.rs", include_str!("usermode.rs")),
];

/// Whether `ident` occurs in `text` as a whole identifier.
fn names(text: &str, ident: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(ident).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(word)
            && !text[i + ident.len()..].chars().next().is_some_and(word)
    })
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

#[test]
fn every_register_is_checked() {
    let this = include_str!("headers.rs");
    // Only what comes before the completeness section counts as checked.
    let checked = &std::format!(
        "{}{}{}",
        &this[..this.find("// Completeness").unwrap()],
        include_str!("headers/falcon.rs"),
        include_str!("headers/tu102_ga100.rs")
    );
    let mut declared: Vec<String> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for (file, src) in SOURCES {
        for line in src.lines().map(str::trim) {
            // `pub NAME @ ...` inside register! {}, `pub const NAME: ...`, and
            // `impl RegisterBase<Family> for Instance`.
            let name = if let Some(rest) = line.strip_prefix("pub const ") {
                Some(ident(rest))
            } else if let Some(rest) = line.strip_prefix("pub ")
                && rest.contains(" @ ")
            {
                Some(ident(rest))
            } else if let Some(rest) = line.strip_prefix("impl RegisterBase<") {
                rest.split(" for ").nth(1).map(ident)
            } else {
                None
            };
            if let Some(n) = name.filter(|n| !n.is_empty()) {
                declared.push(String::from(n));
                if !names(checked, n) {
                    missing.push(std::format!("{file}: {n}"));
                }
            }
        }
    }
    assert!(declared.len() > 90, "the scan found only {declared:?}");
    assert!(
        missing.is_empty(),
        "declared in core/src/regs/ but not checked against a header in regs/headers.rs: \
         {missing:?}"
    );
}
