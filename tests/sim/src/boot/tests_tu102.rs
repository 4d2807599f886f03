//! TU102 booting as RM boots it: FWSEC-FRTS through the generic falcon bootloader
//! (`s_prepareHsFalconWithLoader`), the booters by PIO, FWSEC-SB through the bootloader at
//! unload; and what the simulated bootloader refuses.

use nvbare_core::gsp::boot::{BootPhase, boot};
use nvbare_core::mm::FbOwner;

use super::tests::{Recorder, Tampered, boot_err_with, opts, rig, rig_mode};
use crate::models;
use crate::unknowns::Mode;

#[test]
fn tu102_runs_fwsec_through_the_generic_bootloader_within_its_headers() {
    for mode in [Mode::Helpful, Mode::Pessimistic] {
        let r = rig_mode(models::TU102, mode, |_| {});
        let mut rec = Recorder::default();
        let b = boot(&r.hw, &*r.fw, &opts(), &mut rec).unwrap_or_else(|e| {
            panic!(
                "{e}\n{}\n{:#?}",
                rec.report.map(|r| r.to_string()).unwrap_or_default(),
                r.boot.errors()
            )
        });
        for p in [BootPhase::FwsecFrts, BootPhase::BooterLoad] {
            assert!(rec.phases.contains(&p), "{p:?}: {:?}", rec.phases);
        }
        assert!(
            rec.details
                .iter()
                .any(|d| d.contains("generic bootloader (start tag 0xfd")),
            "{:?}",
            rec.details
        );
        let s = r.boot.stats();
        assert_eq!((s.fwsec_frts, s.booter_load), (1, 1));
        assert!(
            b.fb_layout()
                .reservations()
                .iter()
                .any(|x| x.owner == FbOwner::Frts),
            "TU102 has an FRTS region"
        );
        let mut unload = Recorder::default();
        b.unload(&r.hw, &mut unload, None).unwrap();
        assert!(unload.phases.contains(&BootPhase::FwsecSb));
        let s = r.boot.stats();
        assert_eq!((s.fwsec_sb, s.booter_unload), (1, 1));
        assert_eq!(r.boot.errors(), Vec::<String>::new(), "{mode:?}");
        assert_eq!(r.boot.warnings(), Vec::<String>::new(), "{mode:?}");
    }
}

#[test]
fn a_bootloader_that_is_not_the_files_is_not_run() {
    // One flipped byte of gen_bootloader's code: the GSP falcon would run other code.
    let r = rig(models::TU102);
    let mut t = Tampered::new(&r.fw);
    let mut code = nvbare_core::gsp::boot::firmware::BootFirmware::generic_bootloader(&*r.fw)
        .unwrap()
        .code
        .to_vec();
    code[0x10] ^= 1;
    t.gen_bootloader = Some(code);
    let (e, _) = boot_err_with(&r, &t, &opts());
    assert_eq!(e.phase, BootPhase::FwsecFrts, "{e}");
    let errs = r.boot.errors();
    assert!(
        errs.iter()
            .any(|x| x.contains("does not hold the generic bootloader's code")),
        "{errs:#?}"
    );
    // No WPR2: FWSEC never ran.
    assert_eq!(r.boot.stats().fwsec_frts, 0);
}
