//! The TU10x and GA100 falcon and memory-size paths touch only registers their headers define:
//! every read and write goes through a recorder that checks the address against the chip's set,
//! written out from the 570.144 headers (not taken from `regs`).

extern crate std;

use core::cell::{Cell, RefCell};
use core::time::Duration;
use std::collections::BTreeMap;
use std::vec::Vec;

use super::*;
use crate::chip::Chipset;
use crate::mm::vram::FbSizeSource;
use crate::regs::falcon::{Gsp, Sec2};

const GSP: usize = 0x11_0000;
const SEC2: usize = 0x84_0000;

/// Offsets in a falcon's `NV_PFALCON_FALCON_*` block that `dev_falcon_v4.h` of tu102 and ga100
/// both define (port 0 of the IMEM/DMEM arrays).
const FALCON_V4: [usize; 27] = [
    0x004, 0x008, 0x010, 0x014, 0x018,
    0x01c, // IRQSCLR IRQSTAT IRQMSET IRQMCLR IRQMASK IRQDEST
    0x040, 0x044, 0x080, 0x084, 0x094, // MAILBOX0 MAILBOX1 OS RM DEBUGINFO
    0x0f4, 0x100, 0x104, 0x108, 0x10c, // HWCFG2 CPUCTL BOOTVEC HWCFG DMACTL
    0x110, 0x114, 0x118, 0x11c, 0x128,
    0x130, // DMATRFBASE MOFFS CMD FBOFFS BASE1 CPUCTL_ALIAS
    0x180, 0x184, 0x188, 0x1c0, 0x1c4, // IMEMC IMEMD IMEMT DMEMC DMEMD (0)
];

/// What the headers define for `chip`: the falcon blocks of GSP and SEC2, their engine reset
/// (`NV_PGSP_FALCON_ENGINE` tu102/dev_gsp.h, which RM's `kgspResetHw_TU102` uses on GA100 too;
/// `NV_PSEC_FALCON_ENGINE` tu102 and ga100 dev_sec_pri.h), the FBIF (`dev_fbif_v4.h`:
/// TRANSCFG(0..7), CTL), the GSP's RISC-V registers (`dev_riscv_pri.h`: 0x240, 0x2b4, 0x2b8
/// above NV_FALCON2_GSP_BASE; SEC2 has none, `kernel_sec2_tu102.c`), `NV_PMC_BOOT_0`, the
/// memory range (`pascal/gp102/dev_fb.h`) and, on GA100 only, the ucode fuse versions
/// (`ga100/dev_fuse.h` 0x824100-0x8241fc).
fn defined(chip: Chipset, addr: usize) -> bool {
    let falcon = |base: usize| {
        addr.checked_sub(base).is_some_and(|o| {
            FALCON_V4.contains(&o) || o == 0x3c0 || (0x600..0x620).contains(&o) || o == 0x624
        })
    };
    let riscv = [0x11_1240, 0x11_12b4, 0x11_12b8].contains(&addr);
    let fuses = chip == Chipset::GA100 && (0x82_4100..=0x82_41fc).contains(&addr);
    falcon(GSP) || falcon(SEC2) || riscv || fuses || addr == 0 || addr == 0x10_0ce0
}

/// A BAR0 that answers like an idle TU10x/GA100 falcon and records every address outside the
/// chip's headers.
struct Recorder {
    chip: Chipset,
    regs: RefCell<BTreeMap<usize, u32>>,
    writes: Cell<usize>,
    undefined: RefCell<Vec<usize>>,
}

impl Recorder {
    fn new(chip: Chipset) -> Self {
        Recorder {
            chip,
            regs: RefCell::new(BTreeMap::new()),
            writes: Cell::new(0),
            undefined: RefCell::new(Vec::new()),
        }
    }
    fn touch(&self, addr: usize) {
        if !defined(self.chip, addr) {
            self.undefined.borrow_mut().push(addr);
        }
    }
    fn undefined(&self) -> Vec<usize> {
        self.undefined.borrow().clone()
    }
}

impl Mmio for Recorder {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, offset: usize) -> u32 {
        self.touch(offset);
        match offset {
            // RISC-V active; DMATRFCMD idle.
            0x11_1240 => 1,
            o if o & 0xfff == 0x118 => 0x2,
            // 16 GiB, ECC off.
            0x10_0ce0 => (16 << 4) | 10,
            _ => self.regs.borrow().get(&offset).copied().unwrap_or(0),
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        self.touch(offset);
        self.writes.set(self.writes.get() + 1);
        // STARTCPU: the ucode runs and halts at once.
        let v = if offset & 0xfff == 0x100 && value & 2 != 0 {
            1 << 4
        } else {
            value
        };
        self.regs.borrow_mut().insert(offset, v);
    }
}

struct Tick(Cell<Duration>);
impl Clock for Tick {
    fn now(&self) -> Duration {
        let t = self.0.get() + Duration::from_micros(1);
        self.0.set(t);
        t
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d)
    }
}

fn direct_load() -> HsDirectLoad {
    HsDirectLoad::booter((0, 0x100), (0x100, 0x200), (0x300, 0x80))
}

/// Every operation the boot code uses on the GSP, as on SEC2.
fn exercise<E: FalconEngine>(bar: &Recorder, hal: FalconHal) {
    let clock = Tick(Cell::new(Duration::ZERO));
    let f: Falcon<'_, E, _, _> = Falcon::new(bar, &clock, hal);
    f.reset().unwrap();
    f.disable_ctx_req();
    f.set_dma_target(TRANSCFG_TARGET_COHERENT_SYSMEM);
    let image = [0x5au8; 0x400];
    let (m0, _) = f
        .execute_hs_direct(&image, &direct_load(), Some((1, 2)))
        .unwrap();
    assert_eq!(m0, 1);
    f.load_dmem_pio(0x40, &[1, 2, 3, 4]).unwrap();
    let mut out = [0u8; 4];
    f.read_dmem_pio(0x40, &mut out).unwrap();
    let _ = (f.hwcfg2(), f.is_halted(), f.mailboxes());
    f.write_os_version(7);
    // The boot-ROM path writes nothing here.
    let before = bar.writes.get();
    let e = f
        .execute_hs(0x1000, 0x400, &HsLoad::default(), None, 1)
        .unwrap_err();
    assert!(matches!(e, FalconError::Unsupported { .. }), "{e}");
    assert_eq!(bar.writes.get(), before);
}

fn gsp_riscv(bar: &Recorder, hal: FalconHal) {
    let clock = Tick(Cell::new(Duration::ZERO));
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(bar, &clock, hal);
    f.reset_into_riscv().unwrap();
    assert!(f.is_riscv_active());
    f.wait_riscv_active(Duration::from_millis(1)).unwrap();
    assert!(f.riscv_cpuctl().is_none() && !f.is_riscv_halted());
    assert!(f.wait_riscv_halted(Duration::from_millis(1)).is_err());
}

#[test]
fn turing_and_ga100_touch_only_their_headers_registers() {
    for (chip, hal) in [
        (Chipset::TU102, FalconHal::Tu102),
        (Chipset::TU104, FalconHal::Tu102),
        (Chipset::TU117, FalconHal::Tu102),
        (Chipset::GA100, FalconHal::Ga100),
    ] {
        assert_eq!(FalconHal::for_chip(chip.info()), hal, "{chip}");
        let bar = Recorder::new(chip);
        exercise::<Gsp>(&bar, hal);
        exercise::<Sec2>(&bar, hal);
        gsp_riscv(&bar, hal);
        let fuse = hal.ucode_fuse_version(&bar, FuseEngine::Sec2, 1);
        assert_eq!(fuse, 0);
        let fb = FbSizeSource::for_chip(chip.info());
        assert_eq!(fb, FbSizeSource::LocalMemoryRange);
        assert_eq!(fb.read(&bar), 16 << 30);
        assert_eq!(
            bar.undefined(),
            [],
            "{chip}: addresses its headers do not define"
        );
    }
}

#[test]
fn the_ga102_path_would_touch_registers_turing_lacks() {
    // The recorder catches the GA102 code on a TU102: BCR_CTRL (0x111668) and RISC-V CPUCTL
    // (0x111388) are ga102-only.
    let bar = Recorder::new(Chipset::TU102);
    let clock = Tick(Cell::new(Duration::ZERO));
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &clock, FalconHal::Ga102);
    let _ = f.reset_into_riscv();
    let _ = f.is_riscv_active();
    let u = bar.undefined();
    assert!(u.contains(&0x11_1668) && u.contains(&0x11_1388), "{u:x?}");
    // And NV_USABLE_FB_SIZE_IN_MB (0x1183a4) is GA102 on.
    let bar = Recorder::new(Chipset::GA100);
    FbSizeSource::for_chip(Chipset::GA102.info()).read(&bar);
    assert_eq!(bar.undefined(), [0x11_83a4]);
}

#[test]
fn tu102_refuses_what_its_narrow_fields_cannot_hold() {
    let bar = Recorder::new(Chipset::TU102);
    let clock = Tick(Cell::new(Duration::ZERO));
    let f: Falcon<'_, Sec2, _, _> = Falcon::new(&bar, &clock, FalconHal::Tu102);
    // DMEMC/IMEMC BLK 15:8: block 256 (64 KiB) does not fit.
    assert!(matches!(
        f.load_dmem_pio(0x1_0000, &[0; 4]),
        Err(FalconError::BadLoad { .. })
    ));
    assert!(f.load_imem_pio(0x1_0000, 0, &[0; 4], false).is_err());
    // GA100's fields are 23:8: the same block is written.
    let f: Falcon<'_, Sec2, _, _> = Falcon::new(&bar, &clock, FalconHal::Ga100);
    f.load_dmem_pio(0x1_0000, &[0; 4]).unwrap();
    assert_eq!(bar.regs.borrow()[&(SEC2 + 0x1c0)], (0x100 << 8) | (1 << 24));
}

#[test]
fn scrubbing_waits_on_dmactl() {
    struct Scrubbing(Recorder);
    impl Mmio for Scrubbing {
        fn size(&self) -> usize {
            self.0.size()
        }
        fn read32(&self, o: usize) -> u32 {
            if o == GSP + 0x10c {
                0x6
            } else {
                self.0.read32(o)
            }
        }
        fn write32(&self, o: usize, v: u32) {
            self.0.write32(o, v)
        }
    }
    let bar = Scrubbing(Recorder::new(Chipset::TU102));
    let clock = Tick(Cell::new(Duration::ZERO));
    let f: Falcon<'_, Gsp, _, _> = Falcon::new(&bar, &clock, FalconHal::Tu102);
    let e = f.reset().unwrap_err();
    assert!(matches!(e, FalconError::Timeout { .. }), "{e}");
    assert!(std::format!("{e}").contains("DMACTL"), "{e}");
}
