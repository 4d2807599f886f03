//! The real TU102, TU116 and GA100 booter files (r570.144) loaded the way those chips load them
//! (`Falcon::execute_hs_direct`, RM's `kgspExecuteHsFalcon_TU102`) on a BAR0 that refuses every
//! address the chip's headers do not define. This checks the load sequence and its registers
//! for all three; the GA100 boot itself runs against `models::GA100` (`boot::tests`), TU10x
//! has no model yet (`boot` refuses it).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::falcon::{Falcon, FalconHal, FuseEngine};
use nvbare_core::hal::{Clock, Mmio};
use nvbare_core::regs::falcon::Sec2;
use nvbare_gsp_firmware::booter::BooterImage;

const SEC2: usize = 0x84_0000;

/// SEC2's registers the load may touch, from tu102/ga100 `dev_falcon_v4.h` (port 0),
/// `dev_fbif_v4.h` (CTL 0x624) and `dev_sec_pri.h` (NV_PSEC_FALCON_ENGINE 0x8403c0), plus
/// `NV_PMC_BOOT_0` and, on GA100, the SEC2 fuse versions (ga100 `dev_fuse.h`
/// 0x824140-0x82417c).
fn defined(chip: Chipset, addr: usize) -> bool {
    const V4: [usize; 19] = [
        0x040, 0x044, 0x084, 0x0f4, 0x100, 0x104, 0x108, 0x10c, 0x110, 0x114, 0x118, 0x11c, 0x128,
        0x130, 0x180, 0x184, 0x188, 0x1c0, 0x1c4,
    ];
    let sec2 = addr
        .checked_sub(SEC2)
        .is_some_and(|o| V4.contains(&o) || o == 0x3c0 || o == 0x624);
    let fuses = chip == Chipset::GA100 && (0x82_4140..=0x82_417c).contains(&addr);
    sec2 || fuses || addr == 0
}

struct Bar {
    chip: Chipset,
    regs: RefCell<BTreeMap<usize, u32>>,
    undefined: RefCell<Vec<usize>>,
    imem_words: Cell<usize>,
    dmem_words: Cell<usize>,
}

impl Mmio for Bar {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, offset: usize) -> u32 {
        if !defined(self.chip, offset) {
            self.undefined.borrow_mut().push(offset);
        }
        self.regs.borrow().get(&offset).copied().unwrap_or(0)
    }
    fn write32(&self, offset: usize, value: u32) {
        if !defined(self.chip, offset) {
            self.undefined.borrow_mut().push(offset);
        }
        match offset - SEC2.min(offset) {
            0x184 => self.imem_words.set(self.imem_words.get() + 1),
            0x1c4 => self.dmem_words.set(self.dmem_words.get() + 1),
            _ => {}
        }
        // STARTCPU: the booter halts at once with MAILBOX0 = 0.
        let v = if offset == SEC2 + 0x100 && value & 2 != 0 {
            1 << 4
        } else {
            value
        };
        self.regs.borrow_mut().insert(offset, v);
        if offset == SEC2 + 0x100 {
            self.regs.borrow_mut().insert(SEC2 + 0x40, 0);
        }
    }
}

struct Tick(Cell<Duration>);
impl Clock for Tick {
    fn now(&self) -> Duration {
        self.0.set(self.0.get() + Duration::from_micros(1));
        self.0.get()
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d)
    }
}

#[test]
fn turing_and_ga100_booters_load_by_pio_within_their_headers() {
    let dir = nvbare_gsp_firmware::testutil::require_firmware_dir();
    for (chip, fw_dir) in [
        (Chipset::TU102, "tu102"),
        (Chipset::TU116, "tu116"),
        (Chipset::GA100, "ga100"),
    ] {
        let hal = FalconHal::for_chip(chip.info());
        assert!(!hal.boots_from_hs(), "{chip}");
        for file in ["booter_load", "booter_unload"] {
            let path = dir.join(format!("nvidia/{fw_dir}/gsp/{file}-570.144.bin"));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let b = BooterImage::parse(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let bar = Bar {
                chip,
                regs: RefCell::new(BTreeMap::new()),
                undefined: RefCell::new(Vec::new()),
                imem_words: Cell::new(0),
                dmem_words: Cell::new(0),
            };
            let fuse = hal.ucode_fuse_version(&bar, FuseEngine::Sec2, b.ucode_id());
            let image = b.patched_image(fuse).unwrap();
            let load = b.direct_load();
            let clock = Tick(Cell::new(Duration::ZERO));
            let sec2: Falcon<'_, Sec2, _, _> = Falcon::new(&bar, &clock, hal);
            sec2.reset().unwrap();
            let (m0, _) = sec2.execute_hs_direct(&image, &load, Some((1, 2))).unwrap();
            assert_eq!(m0, 0, "{path:?}");
            assert_eq!(bar.undefined.borrow().as_slice(), [], "{path:?}");
            // Both code parts in 256-byte blocks, the data in words.
            let blocks = |n: u32| n.div_ceil(256) as usize * 64;
            assert_eq!(
                bar.imem_words.get(),
                blocks(load.ns_size) + blocks(load.sec_size),
                "{path:?}"
            );
            assert_eq!(bar.dmem_words.get(), load.dmem_size.div_ceil(4) as usize);
        }
    }
}
