//! Register-sequence tests of the falcon driver against a small fake (the simulator's falcon
//! model checks behaviour end to end in `tests/sim`).

extern crate std;

use core::cell::{Cell, RefCell};
use core::time::Duration;
use std::collections::BTreeMap;
use std::vec::Vec;

use super::*;
use crate::regs::falcon::{Gsp, Sec2};

/// Registers in a map, a write log, and a few behaviours: reset scrubbing, halting on start.
struct Fake {
    regs: RefCell<BTreeMap<usize, u32>>,
    writes: RefCell<Vec<(usize, u32)>>,
    scrub_forever: bool,
    halt_on_start: bool,
}

impl Fake {
    fn new() -> Self {
        Fake {
            regs: RefCell::new(BTreeMap::new()),
            writes: RefCell::new(Vec::new()),
            scrub_forever: false,
            halt_on_start: true,
        }
    }
    fn set(&self, off: usize, v: u32) {
        self.regs.borrow_mut().insert(off, v);
    }
    fn get(&self, off: usize) -> u32 {
        self.regs.borrow().get(&off).copied().unwrap_or(0)
    }
    fn writes_to(&self, off: usize) -> Vec<u32> {
        self.writes
            .borrow()
            .iter()
            .filter(|(o, _)| *o == off)
            .map(|(_, v)| *v)
            .collect()
    }
}

const GSP: usize = 0x11_0000;

impl Mmio for Fake {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, offset: usize) -> u32 {
        match offset - (offset & 0xfff_f000) {
            // HWCFG2: RISC-V present, reset ready, scrubbing as configured.
            0x0f4 if offset & !0xfff == GSP || offset & !0xfff == 0x84_0000 => {
                (1 << 10) | (1 << 31) | ((self.scrub_forever as u32) << 12)
            }
            // DMATRFCMD: idle, never full.
            0x118 => 0x2,
            _ => self.get(offset),
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        self.writes.borrow_mut().push((offset, value));
        if offset == GSP + 0x100 && value & 2 != 0 && self.halt_on_start {
            self.set(GSP + 0x100, 1 << 4);
            self.set(GSP + 0x40, 0);
            return;
        }
        self.set(offset, value);
    }
}

struct FakeClock(Cell<Duration>);
impl Clock for FakeClock {
    fn now(&self) -> Duration {
        let t = self.0.get() + Duration::from_nanos(100);
        self.0.set(t);
        t
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d)
    }
}

fn clock() -> FakeClock {
    FakeClock(Cell::new(Duration::ZERO))
}

#[test]
fn reset_toggles_the_engine_and_writes_boot0() {
    let bar = Fake::new();
    bar.set(0, 0x1920_00a1);
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Ga102);
    f.reset().unwrap();
    assert_eq!(bar.writes_to(GSP + 0x3c0), [1, 0]);
    assert_eq!(bar.get(GSP + 0x084), 0x1920_00a1);
    f.reset_into_riscv().unwrap();
    assert_eq!(bar.get(0x11_1668), 0x111);
}

#[test]
fn scrubbing_that_never_ends_times_out() {
    let mut bar = Fake::new();
    bar.scrub_forever = true;
    let c = clock();
    let f: Falcon<'_, Sec2, _, _> = Falcon::new(&bar, &c, FalconHal::Ga102);
    let e = f.reset().unwrap_err();
    assert!(
        matches!(e, FalconError::Timeout { engine: "SEC2", .. }),
        "{e}"
    );
    assert!(c.0.get() >= MEM_SCRUB_TIMEOUT);
}

#[test]
fn gh100_reset_waits_for_the_status_machine() {
    let bar = Fake::new();
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Gh100);
    // The fake's RESET_STATUS reads back the written value's bits 10:8, i.e. 0 = ASSERTED
    // after the assert write and stays 0 after deassert: DEASSERTED never comes.
    let e = f.reset().unwrap_err();
    assert!(matches!(e, FalconError::Timeout { .. }), "{e}");
    assert_eq!(bar.writes_to(GSP + 0x3c0), [1, 0]);
}

#[test]
fn hs_execution_programs_dma_brom_and_mailboxes() {
    let bar = Fake::new();
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Ga102);
    let load = HsLoad {
        code_offset: 0x100,
        imem_pa: 0,
        imem_va: 0x100,
        imem_size: 0x200,
        data_offset: 0x400,
        dmem_pa: 0,
        dmem_size: 0x100,
        brom: BromParams {
            pkc_data_offset: 0x10,
            engine_id_mask: 1,
            ucode_id: 3,
        },
    };
    let (m0, m1) = f
        .execute_hs(0x1_0000_0000, 0x1000, &load, Some((0xdead_b000, 7)), 1)
        .unwrap();
    assert_eq!((m0, m1), (0, 7));
    // IMEM: base biased by -imem_va, two 256-byte blocks with FB offsets = VA.
    assert_eq!(
        bar.writes_to(GSP + 0x110),
        [
            ((0x1_0000_0000u64 + 0x100 - 0x100) >> 8) as u32,
            (0x1_0000_0400u64 >> 8) as u32
        ]
    );
    assert_eq!(bar.writes_to(GSP + 0x11c), [0x100, 0x200, 0]);
    assert_eq!(bar.writes_to(GSP + 0x114), [0, 0x100, 0]);
    let cmds = bar.writes_to(GSP + 0x118);
    assert_eq!(cmds.len(), 3);
    assert_eq!(cmds[0], (1 << 4) | (1 << 2) | (6 << 8));
    assert_eq!(cmds[2], 6 << 8);
    assert_eq!(bar.get(0x11_1210), 0x10);
    assert_eq!(bar.get(0x11_119c), 1);
    assert_eq!(bar.get(0x11_1198), 3);
    assert_eq!(bar.get(0x11_1180), 1);
    assert_eq!(bar.get(GSP + 0x104), 0x100);
    assert_eq!(bar.get(GSP + 0x624) & 0x80, 0x80);
    assert_eq!(bar.get(GSP + 0x600), 0b101);
}

#[test]
fn hs_load_outside_the_image_is_refused_before_touching_hardware() {
    let bar = Fake::new();
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Ga102);
    let load = HsLoad {
        code_offset: 0xf00,
        imem_size: 0x200,
        dmem_size: 0x100,
        ..Default::default()
    };
    assert!(matches!(
        f.execute_hs(0x1000, 0x1000, &load, None, 1),
        Err(FalconError::BadLoad { .. })
    ));
    assert!(bar.writes.borrow().is_empty());
}

#[test]
fn a_falcon_that_never_halts_times_out() {
    let mut bar = Fake::new();
    bar.halt_on_start = false;
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Ga102);
    let load = HsLoad {
        imem_size: 0x100,
        data_offset: 0x100,
        dmem_size: 0x100,
        ..Default::default()
    };
    let e = f.execute_hs(0x1000, 0x1000, &load, None, 1).unwrap_err();
    assert!(matches!(e, FalconError::Timeout { .. }), "{e}");
}

#[test]
fn pio_loads_write_tags_and_words() {
    let bar = Fake::new();
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Ga102);
    let code: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    f.load_imem_pio(0x200, 0x1000, &code, true).unwrap();
    assert_eq!(
        bar.writes_to(GSP + 0x180),
        [(2 << 8) | (1 << 24) | (1 << 28)]
    );
    assert_eq!(bar.writes_to(GSP + 0x188), [0x10, 0x11]);
    let words = bar.writes_to(GSP + 0x184);
    assert_eq!(words.len(), 128);
    assert_eq!(words[0], 0x0302_0100);
    assert_eq!(words[74], u32::from_le_bytes([40, 41, 42, 43]));
    assert_eq!(words[75], 0);
    assert_eq!(words[127], 0);
    f.load_dmem_pio(0x104, &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(
        bar.writes_to(GSP + 0x1c0),
        [(1 << 8) | (1 << 2) | (1 << 24)]
    );
    assert_eq!(bar.writes_to(GSP + 0x1c4), [0x0403_0201, 5]);
    assert!(f.load_dmem_pio(2, &[0]).is_err());
}

#[test]
fn fuse_versions_follow_the_highest_set_bit() {
    let bar = Fake::new();
    bar.set(0x82_4148, 0b1); // SEC2 ucode 3
    bar.set(0x82_41e0, 0b100); // GSP ucode 9
    assert_eq!(ucode_fuse_version(&bar, FuseEngine::Sec2, 3), 1);
    assert_eq!(ucode_fuse_version(&bar, FuseEngine::Gsp, 9), 3);
    assert_eq!(ucode_fuse_version(&bar, FuseEngine::Gsp, 0), 0);
    assert_eq!(ucode_fuse_version(&bar, FuseEngine::Gsp, 17), 0);
    assert_eq!(
        FuseEngine::from_engine_id_mask(0x400),
        Some(FuseEngine::Gsp)
    );
    assert_eq!(FuseEngine::from_engine_id_mask(1), Some(FuseEngine::Sec2));
    assert_eq!(FuseEngine::from_engine_id_mask(0x100), None);
}

#[test]
fn a_pri_error_is_neither_a_halt_nor_a_running_core() {
    // While the FSP holds the GSP's PRIV target mask every read is 0xbadf41xx, and the low byte
    // carries error details: 0xbadf41ff has HALTED (bit 4) and ACTIVE_STAT (bit 7) set.
    let bar = Fake::new();
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Gh100);
    for v in [0xbadf_41ff, 0xbadf_4110, 0xbadf_1090, u32::MAX] {
        bar.set(GSP + 0x1388, v);
        assert!(!f.is_riscv_halted(), "{v:#x}");
        assert!(!f.is_riscv_active(), "{v:#x}");
        let e = f.wait_riscv_halted(Duration::from_millis(2)).unwrap_err();
        assert!(
            matches!(e, FalconError::Timeout { engine: "GSP", .. }),
            "{e}"
        );
        bar.set(GSP + 0x100, v);
        assert!(!f.is_halted(), "{v:#x}");
    }
    bar.set(GSP + 0x1388, 1 << 4);
    assert!(f.is_riscv_halted());
    f.wait_riscv_halted(Duration::from_millis(2)).unwrap();
    bar.set(GSP + 0x1388, 1 << 7);
    assert!(f.is_riscv_active() && !f.is_riscv_halted());
}

#[test]
fn the_generic_bootloader_load_writes_what_rm_writes() {
    use crate::gsp::testutil::VecDma;
    use crate::hal::DmaBuffer;
    let bar = Fake::new();
    // HWCFG: 0x100 IMEM blocks (64 KiB).
    bar.set(GSP + 0x108, 0x100 | (0x100 << 9));
    let c = clock();
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &c, FalconHal::Tu102);
    let bl = VecDma::new(0x300);
    bl.write(0, &[0x5a; 0x300]).unwrap();
    let desc = GenericBl {
        start_tag: 0xfd,
        code_size: 0x200,
    };
    let load = HsLoaderLoad {
        ns_offset: 0,
        ns_size: 0x200,
        sec_offset: 0x200,
        sec_size: 0x200,
        dmem_size: 0x600,
    };
    f.execute_hs_with_loader(&bl, &desc, 0x1_0000_0000, 0x2_0000_0100, &load)
        .unwrap();
    // TRANSCFG(4): COHERENT_SYSMEM, PHYSICAL.
    assert_eq!(bar.writes_to(GSP + 0x610), [0x5]);
    // The descriptor at DMEM 0: 21 words, ctxDma 4 at word 8, the code base at 9/10.
    assert_eq!(bar.writes_to(GSP + 0x1c0)[0], 1 << 24);
    let d = bar.writes_to(GSP + 0x1c4);
    assert_eq!(d.len(), 21);
    assert_eq!((d[8], d[9], d[10]), (4, 0, 1));
    assert_eq!((d[16], d[17], d[18]), (0x100, 2, 0x600));
    // The bootloader's two blocks at the top of IMEM, tagged 0xfd and 0xfe, BOOTVEC 0xfd00:
    // IMEM blocks 0xfe and 0xff of 0x100.
    assert_eq!(
        bar.writes_to(GSP + 0x180),
        [(0xfe << 8) | (1 << 24), (0xff << 8) | (1 << 24)]
    );
    assert_eq!(bar.writes_to(GSP + 0x188), [0xfd, 0xfe]);
    assert_eq!(bar.writes_to(GSP + 0x104), [0xfd00]);
}

#[test]
fn the_generic_bootloader_load_refuses_what_cannot_work() {
    use crate::gsp::testutil::VecDma;
    let c = clock();
    let bl = VecDma::new(0x200);
    let desc = GenericBl {
        start_tag: 0xfd,
        code_size: 0x200,
    };
    let load = HsLoaderLoad {
        sec_size: 0x100,
        ..Default::default()
    };
    let run = |bar: &Fake, hal, desc: &GenericBl, code: u64, load: &HsLoaderLoad| {
        let f: Falcon<'_, Gsp, _, _> = Falcon::new(bar, &c, hal);
        f.execute_hs_with_loader(&bl, desc, code, 0x1000, load)
    };
    let bar = Fake::new();
    bar.set(GSP + 0x108, 0x100);
    // A chip that boots from HS has no business here.
    assert!(matches!(
        run(&bar, FalconHal::Ga102, &desc, 0x1000, &load),
        Err(FalconError::Unsupported { .. })
    ));
    // Unaligned buffers, a descriptor longer than the code, no secure code.
    assert!(run(&bar, FalconHal::Tu102, &desc, 0x1080, &load).is_err());
    let long = GenericBl {
        code_size: 0x300,
        ..desc
    };
    assert!(run(&bar, FalconHal::Tu102, &long, 0x1000, &load).is_err());
    assert!(
        run(
            &bar,
            FalconHal::Tu102,
            &desc,
            0x1000,
            &HsLoaderLoad::default()
        )
        .is_err()
    );
    // IMEM smaller than the bootloader; HWCFG that does not answer.
    bar.set(GSP + 0x108, 1);
    assert!(run(&bar, FalconHal::Tu102, &desc, 0x1000, &load).is_err());
    bar.set(GSP + 0x108, 0xbadf_1000);
    assert!(run(&bar, FalconHal::Tu102, &desc, 0x1000, &load).is_err());
    // Nothing was started.
    assert!(bar.writes_to(GSP + 0x104).is_empty());
}
