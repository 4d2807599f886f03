//! GA100 (A100) booting as RM boots it (PIO-loaded booters, no FWSEC-FRTS, FWSEC-SB through the
//! generic bootloader at unload) within the
//! registers its headers define, and the check that catches a GA102 code path on it.

use nvbare_core::falcon::{Falcon, FalconHal};
use nvbare_core::gsp::boot::{BootPhase, boot};
use nvbare_core::mm::FbOwner;

use super::tests::{Recorder, opts, rig, rig_mode};
use crate::models;
use crate::unknowns::Mode;

#[test]
fn ga100_boots_by_its_pio_booters_without_fwsec_frts_within_its_headers() {
    // kgspGetFrtsSize_4a4dee: no FRTS region, so no FWSEC-FRTS (kgspBootstrap_TU102);
    // booter_load and booter_unload by PIO (kgspExecuteHsFalcon_TU102); the falcons and the
    // boot hardware refuse (and record) every GA102-only register, so `errors()` being empty
    // says this path touched none.
    for mode in [Mode::Helpful, Mode::Pessimistic] {
        let r = rig_mode(models::GA100, mode, |_| {});
        let mut rec = Recorder::default();
        let b = boot(&r.hw, &*r.fw, &opts(), &mut rec).unwrap_or_else(|e| {
            panic!(
                "{e}\n{}\n{:#?}",
                rec.report.map(|r| r.to_string()).unwrap_or_default(),
                r.boot.errors()
            )
        });
        assert!(
            !rec.phases.contains(&BootPhase::FwsecFrts),
            "{:?}",
            rec.phases
        );
        // WPR ends below the VBIOS's MMU lock (the booter refuses a layout above it).
        assert!(
            rec.details.iter().any(|d| d.contains("VBIOS MMU lock")),
            "{:?}",
            rec.details
        );
        assert!(
            rec.phases.contains(&BootPhase::BooterLoad),
            "{:?}",
            rec.phases
        );
        let s = r.boot.stats();
        assert_eq!((s.fwsec_frts, s.booter_load), (0, 1));
        let meta_frts = b
            .fb_layout()
            .reservations()
            .iter()
            .any(|x| x.owner == FbOwner::Frts);
        assert!(!meta_frts, "no FRTS reservation on GA100");
        let mut unload = Recorder::default();
        b.unload(&r.hw, &mut unload, None).unwrap();
        assert!(unload.phases.contains(&BootPhase::FwsecSb));
        assert!(unload.phases.contains(&BootPhase::BooterUnload));
        // FWSEC-SB through the generic bootloader (kgspTeardown_TU102 runs it on GA100 too).
        let s = r.boot.stats();
        assert_eq!((s.fwsec_sb, s.booter_unload), (1, 1));
        assert_eq!(r.boot.errors(), Vec::<String>::new(), "{mode:?}");
        assert_eq!(r.boot.warnings(), Vec::<String>::new(), "{mode:?}");
    }
}

#[test]
fn a_ga102_code_path_on_ga100_is_caught_by_the_simulator() {
    // The check above can fail: the GA102 falcon HAL on a GA100 writes BCR_CTRL and reads
    // RISCV_CPUCTL, and the VRAM size from SCRATCH_GROUP_42 is not answered.
    let r = rig(models::GA100);
    let gsp: Falcon<'_, nvbare_core::regs::falcon::Gsp, _, _> =
        Falcon::new(&r.hw.bar0, &r.hw.clock, FalconHal::Ga102);
    let _ = gsp.reset_into_riscv();
    let _ = gsp.is_riscv_active();
    let raw = nvbare_core::hal::Mmio::read32(&r.hw.bar0, 0x11_83a4);
    assert!(nvbare_core::hal::is_pri_error(raw), "{raw:#x}");
    let e = r.boot.errors();
    for what in ["0x111668", "0x111388", "0x1183a4"] {
        assert!(e.iter().any(|x| x.contains(what)), "{what}: {e:#?}");
    }
}
