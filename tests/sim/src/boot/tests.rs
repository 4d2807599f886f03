//! The driver's boot (`nvbare_core::gsp::boot`) with the real r570.144 firmware against the
//! simulated boot hardware, on virtual time (timeouts are instant).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::falcon::{Falcon, FalconHal};
use nvbare_core::gsp::boot::firmware::{
    BootFirmware, BooterKind, FirmwareError, FmcDesc, FuseSelector, GenericBootloaderDesc, HsUcode,
    RiscvBootloaderDesc,
};
use nvbare_core::gsp::boot::{
    BootError, BootErrorKind, BootObserver, BootOptions, BootPhase, BootReport, RunningGsp, boot,
};
use nvbare_core::gsp::log::Segments;
use nvbare_core::hal::PciConfig;
use nvbare_core::mm::FbOwner;
use nvbare_core::regs::falcon::Gsp;
use nvbare_gsp_firmware::FirmwareSet;

use super::*;
use crate::unknowns::Mode;
use crate::{SimConfig, models};

use firmware::pinned_firmware as firmware;

pub(super) struct Rig {
    pub(super) gpu: Arc<SimGpu>,
    pub(super) boot: BootModel,
    pub(super) hw: SimBootHw,
    pub(super) fw: Arc<FirmwareSet>,
}

fn rig_with(model: ChipModel, tweak: impl FnOnce(&mut BootSimConfig)) -> Rig {
    rig_in(SimConfig::new(model), tweak)
}

/// A rig whose unknowns are answered in `mode`, whatever `NVBARE_SIM_UNKNOWNS` says.
pub(super) fn rig_mode(
    model: ChipModel,
    mode: Mode,
    tweak: impl FnOnce(&mut BootSimConfig),
) -> Rig {
    rig_in(SimConfig::new(model).with_unknowns(mode), tweak)
}

fn rig_in(sc: SimConfig, tweak: impl FnOnce(&mut BootSimConfig)) -> Rig {
    let model = sc.model;
    let (sim_fw, fw) = firmware(model.chipset);
    let gpu = SimGpu::new(sc.with_virtual_time());
    let mut cfg = BootSimConfig::new(sim_fw);
    tweak(&mut cfg);
    let boot = BootModel::install(&gpu, cfg);
    let hw = boot_hw(&gpu);
    Rig { gpu, boot, hw, fw }
}

pub(super) fn rig(model: ChipModel) -> Rig {
    rig_with(model, |_| {})
}

fn faulty(model: ChipModel, f: BootFault) -> Rig {
    rig_with(model, |c| c.faults.push(f))
}

/// Records phases and the failure report.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) phases: Vec<BootPhase>,
    pub(super) details: Vec<String>,
    pub(super) report: Option<BootReport>,
}

impl BootObserver for Recorder {
    fn phase_finished(&mut self, p: BootPhase, _t: Duration) {
        self.phases.push(p);
    }
    fn detail(&mut self, _p: BootPhase, what: fmt::Arguments<'_>) {
        self.details.push(what.to_string());
    }
    fn failed(&mut self, _e: &BootError, r: &BootReport) {
        self.report = Some(r.clone());
    }
}

pub(super) fn opts() -> BootOptions<'static> {
    BootOptions::default()
}

type Booted = nvbare_core::gsp::boot::BootedGsp<crate::SimDmaBuffer, SimBar0, SharedClock>;

fn boot_ok(r: &Rig) -> Booted {
    let mut rec = Recorder::default();
    match boot(&r.hw, &*r.fw, &opts(), &mut rec) {
        Ok(b) => b,
        Err(e) => panic!(
            "boot failed: {e}\n{}\nsim errors: {:#?}",
            rec.report.map(|r| r.to_string()).unwrap_or_default(),
            r.boot.errors()
        ),
    }
}

fn boot_err(r: &Rig) -> (BootError, Recorder) {
    boot_err_with(r, &*r.fw, &opts())
}

pub(super) fn boot_err_with<F: BootFirmware>(
    r: &Rig,
    fw: &F,
    o: &BootOptions<'_>,
) -> (BootError, Recorder) {
    let mut rec = Recorder::default();
    match boot(&r.hw, fw, o, &mut rec) {
        Ok(_) => panic!("boot succeeded but should have failed"),
        Err(e) => (e, rec),
    }
}

fn assert_clean(r: &Rig) {
    assert_eq!(
        r.boot.errors(),
        Vec::<String>::new(),
        "the simulator saw mistakes"
    );
    assert_eq!(
        r.boot.warnings(),
        Vec::<String>::new(),
        "the simulator saw what hardware tolerates but nvbare avoids"
    );
}

fn full_cycle(model: ChipModel) {
    full_cycle_on(rig(model));
}

fn full_cycle_on(r: Rig) {
    let model = *r.gpu.model();
    let baseline = (r.gpu.host().allocated(), r.gpu.host().buffers());
    for round in 0..2 {
        let mut b = boot_ok(&r);
        let name = b.static_info().gpu_name().unwrap_or("").to_string();
        assert_eq!(name, format!("NVIDIA {}", model.board), "round {round}");
        // The RPC transport works after boot.
        let again = b.rpc().get_gsp_static_info().unwrap();
        assert_eq!(again.fb_length, (model.vram_mib as u64) << 20);
        let l = b.fb_layout();
        let gsp = l
            .reservations()
            .iter()
            .find(|x| x.owner == FbOwner::GspReserved)
            .unwrap();
        assert_eq!(gsp.base + gsp.size, l.fb_size());
        let (lo, end) = r.boot.wpr2().expect("WPR2 up while GSP-RM runs");
        assert!(
            gsp.base < lo && end <= l.fb_size(),
            "WPR2 inside the reservation"
        );
        assert!(
            gsp.size > 128 << 20,
            "the carve-out is over 128 MiB, not tinygrad's 64"
        );
        // The flush page was programmed before GSP-RM started and is still ours.
        let flush = b.state().sysmem_flush_addr();
        assert_eq!(r.boot.sysmem_flush_addr(), flush);
        let report = b.unload(&r.hw, &mut Recorder::default(), None).unwrap();
        assert!(!report.suspend_timed_out);
        assert_eq!(r.boot.wpr2(), None, "unload leaves WPR2 down");
        assert_eq!(
            r.boot.sysmem_flush_addr(),
            0,
            "the page let go after the unload"
        );
        assert_eq!(
            (r.gpu.host().allocated(), r.gpu.host().buffers()),
            baseline,
            "unload frees every DMA buffer of the boot"
        );
        assert_clean(&r);
    }
    let s = r.boot.stats();
    assert_eq!(s.gsp_rm_starts, 2);
    assert_eq!(s.suspends, 2);
    assert_eq!(s.resets, 0, "no PCI reset was needed between the boots");
    assert_eq!(
        s.flush_page_ok, 2,
        "GSP-RM found a valid flush page at both starts"
    );
    // kgspUnloadRm(NORMAL, LEVEL_0), not tinygrad's FAST_UNLOAD.
    let level0 = UnloadRequest {
        in_pm_transition: false,
        gc6_entering: false,
        new_level: 0,
    };
    assert_eq!(s.unloads, [level0, level0]);
    if model.chipset.info().boot == nvbare_core::chip::BootMethod::Booter {
        // GA100 has no FRTS region (no FWSEC-FRTS); FWSEC-SB runs at every unload.
        let frts = if model.chipset == Chipset::GA100 {
            0
        } else {
            2
        };
        assert_eq!((s.fwsec_frts, s.booter_load), (frts, 2));
        // Whether a cold boot sends a script is an unknown; each one sent ran correctly.
        assert_eq!(s.sequencer_ok, s.sequencer_scripts);
        assert_eq!((s.fwsec_sb, s.booter_unload), (2, 2));
    } else {
        assert_eq!(s.cot_accepted, 2);
        // (COHERENT, NONCOHERENT) as kgspSetupGspFmcArgs_GH100 sends for cached WPR metadata
        // and uncached LIBOS arguments.
        assert_eq!(s.fmc_targets, [(1, 2), (1, 2)]);
    }
    assert_eq!(s.brom_rejects, 0);
}

#[test]
fn ad102_boots_unloads_and_boots_again() {
    full_cycle(models::AD102);
}

#[test]
fn gh100_boots_unloads_and_boots_again() {
    full_cycle(models::GH100);
}

#[test]
fn gb202_boots_unloads_and_boots_again() {
    full_cycle(models::GB202);
}

#[test]
fn phases_are_reported_in_order() {
    let r = rig(models::AD102);
    let mut rec = Recorder::default();
    let b = boot(&r.hw, &*r.fw, &opts(), &mut rec).unwrap();
    use BootPhase::*;
    assert_eq!(
        rec.phases,
        [
            Identify,
            WaitGfwBoot,
            CheckRunningGsp,
            ReadVbios,
            ComputeLayout,
            PrepareMemory,
            QueueRpcs,
            FwsecFrts,
            BooterLoad,
            StartRiscv,
            WaitInitDone,
            StaticInfo
        ]
    );
    if r.boot.stats().sequencer_scripts > 0 {
        assert!(rec.details.iter().any(|d| d.contains("CPU-sequencer")));
    }
    assert_eq!(b.state().timings().len(), rec.phases.len());
    let r = rig(models::GH100);
    let mut rec = Recorder::default();
    boot(&r.hw, &*r.fw, &opts(), &mut rec).unwrap();
    assert!(rec.phases.contains(&FspChainOfTrust) && rec.phases.contains(&WaitLockdown));
    assert!(!rec.phases.contains(&FwsecFrts));
}

#[test]
fn a_gsp_left_running_is_refused_then_reset() {
    for model in [models::AD102, models::GB202] {
        let r = rig(model);
        let b = boot_ok(&r);
        // The driver goes away without unloading: WPR2 stays up.
        drop(b);
        let (e, rec) = boot_err(&r);
        assert_eq!(e.phase, BootPhase::CheckRunningGsp);
        assert!(matches!(e.kind, BootErrorKind::GspRunning { .. }), "{e}");
        assert!(e.to_string().contains("reset"), "{e}");
        assert!(rec.report.is_some());
        // The hardware refuses too: FWSEC will not set FRTS up twice, the FSP says INVALID_STATE.
        let o = BootOptions {
            running_gsp: RunningGsp::Attempt,
            ..opts()
        };
        let (e, _) = boot_err_with(&r, &*r.fw, &o);
        match model.chipset {
            Chipset::AD102 => assert!(
                matches!(
                    e.kind,
                    BootErrorKind::FwsecFrts {
                        err_code: err::FRTS_WPR2_UP,
                        ..
                    }
                ),
                "{e}"
            ),
            _ => assert!(
                matches!(
                    e.kind,
                    BootErrorKind::Fsp(fsp::FspError::Rejected {
                        error_code: 0x9e,
                        ..
                    })
                ),
                "{e}"
            ),
        }
        // With reset, it boots.
        let o = BootOptions {
            running_gsp: RunningGsp::Reset,
            ..opts()
        };
        let mut rec = Recorder::default();
        let b = boot(&r.hw, &*r.fw, &o, &mut rec).unwrap();
        assert!(rec.phases.contains(&BootPhase::ResetGpu));
        assert_eq!(r.boot.stats().resets, 1);
        b.unload(&r.hw, &mut Recorder::default(), None).unwrap();
    }
}

use nvbare_core::gsp::boot::fsp;

#[test]
fn gfw_boot_that_never_completes_times_out() {
    for model in [models::AD102, models::GH100] {
        let r = faulty(model, BootFault::GfwBootNeverCompletes);
        let (e, rec) = boot_err(&r);
        assert_eq!(e.phase, BootPhase::WaitGfwBoot);
        assert!(matches!(e.kind, BootErrorKind::Timeout { .. }), "{e}");
        let report = rec.report.unwrap();
        assert!(report.elapsed >= nvbare_core::gsp::boot::GFW_BOOT_TIMEOUT);
        assert!(
            report
                .regs
                .iter()
                .any(|(n, _)| n.starts_with("NV_PMC_BOOT_0"))
        );
    }
}

#[test]
fn corrupted_wpr_metadata_is_refused_by_the_booter_and_the_fmc() {
    let r = faulty(models::AD102, BootFault::CorruptWprMeta);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::BooterLoad);
    assert_eq!(
        e.kind,
        BootErrorKind::Booter {
            kind: BooterKind::Load,
            mailbox0: err::BOOTER_META_MAGIC
        }
    );
    let r = faulty(models::GH100, BootFault::CorruptWprMeta);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::WaitLockdown);
    assert_eq!(
        e.kind,
        BootErrorKind::FmcError {
            mailbox0: err::FMC_META
        }
    );
}

#[test]
fn a_gsp_that_never_reports_init_done_times_out_with_its_log() {
    for model in models::MODELS {
        let r = faulty(model, BootFault::NoInitDone);
        let baseline = r.gpu.host().buffers();
        let log = r.boot.log_image();
        let segs: Vec<(u64, &[u8])> = log.iter().map(|(a, b)| (*a, b.as_slice())).collect();
        let img = Segments(&segs);
        let o = BootOptions {
            log_image: Some(&img),
            ..opts()
        };
        let (e, rec) = boot_err_with(&r, &*r.fw, &o);
        assert_eq!(e.phase, BootPhase::WaitInitDone, "{}", model.board);
        assert!(matches!(e.kind, BootErrorKind::Timeout { .. }), "{e}");
        let report = rec.report.unwrap();
        let text = report.to_string();
        assert!(
            text.contains("emulated GSP-RM r570.144 booted on"),
            "the report shows the GSP's log:\n{text}"
        );
        assert!(
            report
                .regs
                .iter()
                .any(|(n, _)| *n == "NV_PGSP_FALCON_MAILBOX0")
        );
        assert_eq!(
            r.gpu.host().buffers(),
            baseline,
            "a failed boot frees its DMA memory"
        );
    }
}

#[test]
fn init_done_with_an_error_is_reported() {
    let r = faulty(models::GB202, BootFault::InitDoneError(0x65));
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::WaitInitDone);
    assert_eq!(e.kind, BootErrorKind::InitFailed { status: 0x65 });
}

#[test]
fn fsp_failures() {
    let r = faulty(models::GH100, BootFault::FspNoResponse);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::FspChainOfTrust);
    assert!(
        matches!(e.kind, BootErrorKind::Fsp(fsp::FspError::Timeout { .. })),
        "{e}"
    );

    let r = faulty(models::GB202, BootFault::FspError(0xa1));
    let (e, _) = boot_err(&r);
    assert!(
        matches!(
            e.kind,
            BootErrorKind::Fsp(fsp::FspError::Rejected {
                error_code: 0xa1,
                command: 0x14,
                ..
            })
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("FSP_ERR_IFS_ERR_INVALID_DATA"),
        "{e}"
    );

    let r = faulty(models::GH100, BootFault::FmcError(0x42));
    let (e, _) = boot_err(&r);
    assert_eq!(e.kind, BootErrorKind::FmcError { mailbox0: 0x42 });

    let r = faulty(models::GB202, BootFault::LockdownNeverReleased);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::WaitLockdown);
    assert!(matches!(e.kind, BootErrorKind::Timeout { .. }), "{e}");
}

#[test]
fn falcon_failures() {
    let r = faulty(models::AD102, BootFault::BooterHang);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::BooterLoad);
    assert!(
        matches!(
            e.kind,
            BootErrorKind::Falcon(nvbare_core::falcon::FalconError::Timeout { engine: "SEC2", .. })
        ),
        "{e}"
    );
    for model in [models::AD102, models::GH100] {
        let r = faulty(model, BootFault::RiscvNeverActive);
        let (e, _) = boot_err(&r);
        assert_eq!(e.phase, BootPhase::StartRiscv, "{}", model.board);
        assert_eq!(e.kind, BootErrorKind::RiscvNotActive);
    }
}

#[test]
fn a_sequencer_poll_that_never_completes_fails_the_boot() {
    let r = faulty(models::AD102, BootFault::SequencerPollNeverReady);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::WaitInitDone);
    match e.kind {
        BootErrorKind::Sequencer(sequencer::SequencerError::PollTimeout {
            addr, error, ..
        }) => {
            assert_eq!(addr, 0x11_0810);
            assert_eq!(error, 0x5e0);
        }
        k => panic!("{k}"),
    }
}

use nvbare_core::gsp::boot::sequencer;

#[test]
fn fuse_versions_without_a_signature_are_firmware_errors() {
    // SEC2 fuse version 3: the booters carry signatures for 0 and 1 only. booter_unload is
    // prepared first, before FWSEC-FRTS puts WPR2 up, so nothing needs undoing.
    let r = rig_with(models::AD102, |c| c.sec2_fuse = 0b100);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::FwsecFrts);
    assert_eq!(
        e.kind,
        BootErrorKind::Firmware(FirmwareError::NoSignature {
            file: "booter_unload",
            fuse_version: 3
        })
    );
    assert_eq!(r.boot.wpr2(), None);
    assert_eq!(r.boot.stats().fwsec_frts, 0);
    // GSP fuse version 2: the VBIOS's FWSEC has signatures for 0, 1 and 3.
    let r = rig_with(models::AD102, |c| c.gsp_fuse = 0b10);
    let (e, _) = boot_err(&r);
    assert_eq!(e.phase, BootPhase::FwsecFrts);
    assert!(matches!(
        e.kind,
        BootErrorKind::Firmware(FirmwareError::NoSignature { file: "FWSEC", .. })
    ));
}

#[test]
fn firmware_for_another_chip_is_refused() {
    let r = rig(models::GH100);
    let (_, ad) = firmware(Chipset::AD102);
    let (e, _) = boot_err_with(&r, &*ad, &opts());
    assert_eq!(e.phase, BootPhase::Identify);
    assert_eq!(
        e.kind,
        BootErrorKind::WrongFirmware {
            firmware: Chipset::AD102,
            gpu: Chipset::GH100
        }
    );
}

#[test]
fn unload_without_suspend_fails_like_the_hardware() {
    let r = faulty(models::AD102, BootFault::NoSuspend);
    let b = boot_ok(&r);
    let e = b.unload(&r.hw, &mut Recorder::default(), None).unwrap_err();
    assert_eq!(e.phase, BootPhase::BooterUnload);
    assert_eq!(
        e.kind,
        BootErrorKind::Booter {
            kind: BooterKind::Unload,
            mailbox0: err::BOOTER_GSP_RUNNING
        }
    );
    let r = faulty(models::GH100, BootFault::NoSuspend);
    let b = boot_ok(&r);
    let e = b.unload(&r.hw, &mut Recorder::default(), None).unwrap_err();
    assert_eq!(e.phase, BootPhase::WaitHalt);
}

/// Delegates to real firmware but swaps in other bytes, to check the simulator compares against
/// the real files.
pub(super) struct Tampered<'a> {
    real: &'a FirmwareSet,
    image: Option<Vec<u8>>,
    signature: Option<Vec<u8>>,
    bootloader_code_offset: Option<u32>,
    fmc_hash_flip: bool,
    pub(super) gen_bootloader: Option<Vec<u8>>,
}

impl<'a> Tampered<'a> {
    pub(super) fn new(real: &'a FirmwareSet) -> Self {
        Tampered {
            real,
            image: None,
            signature: None,
            bootloader_code_offset: None,
            fmc_hash_flip: false,
            gen_bootloader: None,
        }
    }
}

impl BootFirmware for Tampered<'_> {
    type Image = Vec<u8>;
    type Vbios = <FirmwareSet as BootFirmware>::Vbios;
    fn chipset(&self) -> Chipset {
        self.real.chipset()
    }
    fn gsp_image(&self) -> &[u8] {
        self.image.as_deref().unwrap_or(self.real.gsp_image())
    }
    fn gsp_signature(&self) -> &[u8] {
        self.signature
            .as_deref()
            .unwrap_or(self.real.gsp_signature())
    }
    fn bootloader(&self) -> RiscvBootloaderDesc<'_> {
        let mut b = self.real.bootloader();
        if let Some(o) = self.bootloader_code_offset {
            b.code_offset = o;
        }
        b
    }
    fn booter_fuse(&self, k: BooterKind) -> Result<FuseSelector, FirmwareError> {
        self.real.booter_fuse(k)
    }
    fn booter(&self, k: BooterKind, f: u32) -> Result<HsUcode<Vec<u8>>, FirmwareError> {
        self.real.booter(k, f)
    }
    fn fmc(&self) -> Result<FmcDesc<'_>, FirmwareError> {
        let mut f = self.real.fmc()?;
        if self.fmc_hash_flip {
            f.hash[0] ^= 1;
        }
        Ok(f)
    }
    fn generic_bootloader(&self) -> Result<GenericBootloaderDesc<'_>, FirmwareError> {
        let mut b = self.real.generic_bootloader()?;
        if let Some(code) = &self.gen_bootloader {
            b.code = code;
        }
        Ok(b)
    }
    fn parse_vbios(
        &self,
        read32: &mut dyn FnMut(usize) -> Option<u32>,
    ) -> Result<Self::Vbios, FirmwareError> {
        self.real.parse_vbios(read32)
    }
}

#[test]
fn the_simulator_checks_the_real_firmware_bytes() {
    // A one-byte change in the GSP-RM image is found through the radix3 walk.
    let r = rig(models::AD102);
    let mut t = Tampered::new(&r.fw);
    let mut img = r.fw.gsp_image().to_vec();
    img[0x1234] ^= 0x80;
    t.image = Some(img);
    let (e, rec) = boot_err_with(&r, &t, &opts());
    assert_eq!(
        e.kind,
        BootErrorKind::Booter {
            kind: BooterKind::Load,
            mailbox0: err::BOOTER_IMAGE
        }
    );
    // The failed boot took WPR2 down again (FWSEC-SB + booter_unload), so the next one runs
    // without a reset.
    assert!(
        rec.details.iter().any(|d| d.contains("WPR2 torn down")),
        "{:?}",
        rec.details
    );
    assert_eq!(r.boot.wpr2(), None);
    // Wrong bootloader offset.
    let mut t = Tampered::new(&r.fw);
    t.bootloader_code_offset = Some(r.fw.bootloader().code_offset + 0x100);
    let (e, _) = boot_err_with(&r, &t, &opts());
    assert!(
        matches!(
            e.kind,
            BootErrorKind::Booter {
                mailbox0: err::BOOTER_BOOTLOADER,
                ..
            }
        ),
        "{e}"
    );
    // Another family's signature.
    let mut t = Tampered::new(&r.fw);
    let mut sig = r.fw.gsp_signature().to_vec();
    sig[7] ^= 1;
    t.signature = Some(sig);
    let (e, _) = boot_err_with(&r, &t, &opts());
    assert!(
        matches!(
            e.kind,
            BootErrorKind::Booter {
                mailbox0: err::BOOTER_SIGNATURE,
                ..
            }
        ),
        "{e}"
    );
    // The FMC's hash in the COT.
    let r = rig(models::GB202);
    let mut t = Tampered::new(&r.fw);
    t.fmc_hash_flip = true;
    let (e, _) = boot_err_with(&r, &t, &opts());
    assert!(
        matches!(
            e.kind,
            BootErrorKind::Fsp(fsp::FspError::Rejected {
                error_code: 0xa1,
                ..
            })
        ),
        "{e}"
    );
    // And through the GSP-FMC on Hopper: a changed image.
    let r = rig(models::GH100);
    let mut t = Tampered::new(&r.fw);
    let mut img = r.fw.gsp_image().to_vec();
    let n = img.len();
    img[n - 1] ^= 1;
    t.image = Some(img);
    let (e, _) = boot_err_with(&r, &t, &opts());
    assert_eq!(
        e.kind,
        BootErrorKind::FmcError {
            mailbox0: err::FMC_IMAGE
        }
    );
}

#[test]
fn the_boot_rom_rejects_a_ucode_with_wrong_parameters() {
    // Run booter_load by hand with a wrong ucode id: the ROM refuses, the falcon halts with the
    // mailboxes as given (what the driver then reports as a booter error).
    let r = rig(models::AD102);
    let clock = r.hw.clock.clone();
    let bar0 = r.hw.bar0.clone();
    let fuse = 1;
    let mut u = r.fw.booter(BooterKind::Load, fuse).unwrap();
    u.load.brom.ucode_id += 1;
    let buf = nvbare_core::gsp::boot::memory::copy_to_dma(&r.hw.dma, &u.image).unwrap();
    let sec2: Falcon<'_, nvbare_core::regs::falcon::Sec2, _, _> =
        Falcon::new(&bar0, &clock, FalconHal::Ga102);
    sec2.reset().unwrap();
    use nvbare_core::hal::DmaBuffer;
    let (m0, m1) = sec2
        .execute_hs(
            buf.dev_addr(),
            buf.len(),
            &u.load,
            Some((0x1234_5000, 1)),
            1,
        )
        .unwrap();
    assert_eq!((m0, m1), (0x1234_5000, 1));
    assert_eq!(r.boot.stats().brom_rejects, 1);
    assert!(r.boot.errors().iter().any(|e| e.contains("UCODE_ID")));
}

#[test]
fn pio_loads_reach_the_falcon_memories() {
    let r = rig(models::AD102);
    let clock = r.hw.clock.clone();
    let bar0 = r.hw.bar0.clone();
    let gsp: Falcon<'_, Gsp, _, _> = Falcon::new(&bar0, &clock, FalconHal::Ga102);
    gsp.reset().unwrap();
    let code: Vec<u8> = (0..600u32).map(|i| (i * 3) as u8).collect();
    gsp.load_imem_pio(0x100, 0x2000, &code, true).unwrap();
    gsp.load_dmem_pio(0x40, b"hello falcon").unwrap();
    let mut back = [0u8; 12];
    gsp.read_dmem_pio(0x40, &mut back).unwrap();
    assert_eq!(&back, b"hello falcon");
    let g = r.boot.lock();
    assert_eq!(g.gsp.imem_by_va(0x2000, 600).unwrap(), code);
    assert!(g.gsp.imem_secure_by_va(0x2000, 600));
}

#[test]
fn the_pci_reset_returns_the_boot_hardware_to_power_on() {
    let r = rig(models::GH100);
    let b = boot_ok(&r);
    drop(b);
    assert!(r.boot.wpr2().is_some());
    r.hw.pci.reset_function().unwrap();
    assert_eq!(r.boot.wpr2(), None);
    assert!(r.boot.emulator().is_none());
    // The FSP boots again after the reset (the driver waits for it).
    let b = boot_ok(&r);
    b.unload(&r.hw, &mut Recorder::default(), None).unwrap();
    let _ = &r.gpu;
}

#[test]
fn every_chip_cycles_with_pessimistic_and_random_unknowns() {
    // Slow devinit and FSP, heavy-secure ucodes just inside the drivers' timeouts, PRI errors
    // for early WPR2 reads, a suspend and halt that take their time (virtual time).
    for mode in [Mode::Pessimistic, Mode::Random(7), Mode::Random(8)] {
        for model in models::MODELS {
            full_cycle_on(rig_mode(model, mode, |_| {}));
        }
    }
}

#[test]
fn wpr2_is_read_only_after_gfw_boot() {
    // Pessimistic: WPR2 reads before devinit / the FSP's secure boot complete are PRI errors
    // (0xbadf10ff has every VAL bit the old check took for "WPR2 up"). A boot right after a
    // reset must wait for GFW boot before it looks.
    for model in models::MODELS {
        let r = rig_mode(model, Mode::Pessimistic, |_| {});
        r.hw.pci.reset_function().unwrap();
        let raw = nvbare_core::hal::Mmio::read32(&r.hw.bar0, 0x1f_a828);
        assert!(nvbare_core::hal::is_pri_error(raw), "{raw:#x}");
        let mut rec = Recorder::default();
        let b = boot(&r.hw, &*r.fw, &opts(), &mut rec).unwrap_or_else(|e| panic!("{e}"));
        let gfw = rec.phases.iter().position(|p| *p == BootPhase::WaitGfwBoot);
        let check = rec
            .phases
            .iter()
            .position(|p| *p == BootPhase::CheckRunningGsp);
        assert!(gfw < check, "{:?}", rec.phases);
        b.unload(&r.hw, &mut Recorder::default(), None).unwrap();
        assert_clean(&r);
    }
}

#[test]
fn a_pri_error_from_wpr2_after_gfw_boot_is_not_taken_for_a_running_gsp() {
    // A driver that took 0xbadf.... for "WPR2 up" would refuse or reset; nvbare says it cannot
    // tell (an engine that answers every WPR2 read with a PRI error).
    struct PriWpr2;
    impl crate::bar0::MmioEngine for PriWpr2 {
        fn name(&self) -> &'static str {
            "pri-error WPR2"
        }
        fn claims(&self, o: u32) -> bool {
            o == 0x1f_a824 || o == 0x1f_a828
        }
        fn read(&mut self, _c: &mut SimCore, _o: u32) -> u32 {
            0xbadf_5040
        }
        fn write(&mut self, _c: &mut SimCore, _o: u32, _v: u32) {}
    }
    let (sim_fw, fw) = firmware(Chipset::AD102);
    let gpu = SimGpu::new(SimConfig::new(models::AD102).with_virtual_time());
    gpu.add_engine(Box::new(PriWpr2));
    let _boot = BootModel::install(&gpu, BootSimConfig::new(sim_fw));
    let hw = boot_hw(&gpu);
    let mut rec = Recorder::default();
    let e = boot(&hw, &*fw, &opts(), &mut rec).map(|_| ()).unwrap_err();
    assert_eq!(e.phase, BootPhase::CheckRunningGsp);
    assert_eq!(e.kind, BootErrorKind::Wpr2Unreadable { raw: 0xbadf_5040 });
}

#[test]
fn a_fast_unload_may_leave_gsp_rm_s_state_for_a_reset() {
    use nvbare_core::gsp::rpc::UNLOAD_LEVEL_FAST;
    // tinygrad's unload level: the open driver sends it only at shutdown, and tinygrad resets
    // before its next boot. Whether GSP-RM then leaves WPR2 up is not public: the sim does so
    // when pessimistic, and warns in every mode.
    for (mode, kept) in [(Mode::Helpful, false), (Mode::Pessimistic, true)] {
        let r = rig_mode(models::GH100, mode, |_| {});
        let mut b = boot_ok(&r);
        b.rpc()
            .unloading_guest_driver(false, false, UNLOAD_LEVEL_FAST)
            .unwrap();
        let clock = r.hw.clock.clone();
        let bar0 = r.hw.bar0.clone();
        let gsp: Falcon<'_, Gsp, _, _> = Falcon::new(&bar0, &clock, FalconHal::Gh100);
        gsp.wait_riscv_halted(Duration::from_secs(8)).unwrap();
        assert_eq!(r.boot.wpr2().is_some(), kept, "{mode}");
        assert!(
            r.boot.warnings().iter().any(|w| w.contains("FAST_UNLOAD")),
            "{mode}"
        );
        drop(b);
        if kept {
            let (e, _) = boot_err(&r);
            assert!(matches!(e.kind, BootErrorKind::GspRunning { .. }), "{e}");
        }
    }
}

#[test]
fn a_failed_hopper_boot_waits_for_the_gsp_to_halt_before_freeing_its_memory() {
    // The GSP-FMC reports an error and keeps running (and reading its boot parameters and the
    // WPR metadata) until its core halts: 100 µs helpful, 4.5 s pessimistic. Freeing earlier
    // is a use after free the sim sees.
    for mode in [Mode::Helpful, Mode::Pessimistic, Mode::Random(7)] {
        for model in [models::GH100, models::GB202] {
            let r = rig_mode(model, mode, |c| c.faults.push(BootFault::FmcError(0x42)));
            let baseline = r.gpu.host().buffers();
            let (e, rec) = boot_err(&r);
            assert_eq!(e.kind, BootErrorKind::FmcError { mailbox0: 0x42 });
            // Let the simulated GSP-FMC finish whatever it still does.
            nvbare_core::hal::Clock::delay(&r.hw.clock, Duration::from_secs(6));
            nvbare_core::hal::Mmio::read32(&r.hw.bar0, 0x11_1388);
            assert!(
                rec.details.iter().any(|d| d.contains("halted")),
                "{:?}",
                rec.details
            );
            assert!(r.boot.errors().is_empty(), "{mode}: {:?}", r.boot.errors());
            assert_eq!(r.gpu.host().buffers(), baseline);
            let bm = r.hw.pci.read_config32(4).unwrap() & 4;
            assert_eq!(bm, 4, "bus mastering stays on when the GSP halted");
        }
    }
}

#[test]
fn a_gsp_that_never_halts_loses_bus_mastering_before_its_memory_is_freed() {
    for model in [models::GH100, models::GB202] {
        let r = faulty(model, BootFault::LockdownNeverReleased);
        r.hw.pci.set_bus_master(true).unwrap();
        let (e, rec) = boot_err(&r);
        assert_eq!(e.phase, BootPhase::WaitLockdown);
        assert!(
            rec.details
                .iter()
                .any(|d| d.contains("bus mastering is off")),
            "{:?}",
            rec.details
        );
        assert_eq!(r.hw.pci.read_config32(4).unwrap() & 4, 0);
        // The next boot turns it back on (and resets: the GSP-FMC left WPR2 up).
        let o = BootOptions {
            running_gsp: RunningGsp::Reset,
            ..opts()
        };
        r.boot.clear_faults();
        let mut rec = Recorder::default();
        let b = boot(&r.hw, &*r.fw, &o, &mut rec).unwrap();
        assert!(
            rec.details
                .iter()
                .any(|d| d.contains("bus mastering was off"))
        );
        assert_eq!(r.hw.pci.read_config32(4).unwrap() & 4, 4);
        b.unload(&r.hw, &mut Recorder::default(), None).unwrap();
    }
}

#[test]
fn a_pri_error_while_the_fsp_holds_the_gsp_is_not_a_halt() {
    // Pessimistic: the target-mask PRI errors read 0xbadf41ff, whose bit 4 is HALTED. The FSP
    // never lets go of the GSP; the failed boot must not take that for a halted core.
    for model in [models::GH100, models::GB202] {
        let r = rig_mode(model, Mode::Pessimistic, |c| {
            c.faults.push(BootFault::TargetMaskNeverReleased)
        });
        let raw = {
            let (e, rec) = boot_err(&r);
            assert_eq!(e.phase, BootPhase::WaitLockdown);
            assert!(matches!(e.kind, BootErrorKind::Timeout { .. }), "{e}");
            assert!(
                !rec.details.iter().any(|d| d.contains("halted")),
                "{:?}",
                rec.details
            );
            assert!(
                rec.details
                    .iter()
                    .any(|d| d.contains("may still be running")),
                "{:?}",
                rec.details
            );
            nvbare_core::hal::Mmio::read32(&r.hw.bar0, 0x11_1388)
        };
        assert_eq!(raw, 0xbadf_41ff);
        assert_eq!(r.hw.pci.read_config32(4).unwrap() & 4, 0);
    }
}
