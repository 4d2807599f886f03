//! The bookkeeping of one boot or unload: phases and their timings, the observer, the failure
//! report, and what a failed boot must stop before its memory is freed.

use core::fmt;
use core::time::Duration;

use crate::chip::{BootMethod, ChipInfo};
use crate::falcon::FalconHal;
use crate::gsp::log::LogImage;
use crate::hal::{Clock, DmaBuffer, Mmio, PciConfig};
use crate::regs::falcon::{
    Gsp, NV_PFALCON_FALCON_CPUCTL, NV_PFALCON_FALCON_HWCFG2, NV_PFALCON_FALCON_MAILBOX0,
    NV_PFALCON_FALCON_MAILBOX1, NV_PRISCV_RISCV_BCR_CTRL, NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS,
    NV_PRISCV_RISCV_CPUCTL,
};
use crate::regs::pfb::{NV_PFB_PRI_MMU_WPR2_ADDR_HI, NV_PFB_PRI_MMU_WPR2_ADDR_LO};
use crate::regs::pgc6::{NV_PGC6_AON_SECURE_SCRATCH_GROUP_05, NV_PGC6_BSI_SECURE_SCRATCH_14};
use crate::regs::pmc::{NV_PMC_BOOT_0, NV_PMC_BOOT_42};
use crate::regs::{Register, RegisterArray, RelativeRegister};

use super::booter::{self, UcodeAt};
use super::cot;
use super::flush::FlushRegs;
use super::memory::BootMemory;
use super::report::{BootError, BootErrorKind, BootObserver, BootPhase, BootReport};

/// What a failed boot must stop before its memory is freed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Quiesce {
    /// Nothing the boot started runs on the GPU.
    Nothing,
    /// Turing-Ada: FWSEC-FRTS may have put WPR2 up and GSP-RM may run: FWSEC-SB (whose GSP
    /// falcon reset stops GSP-RM) and booter_unload, as nova-core's `BootUnloadGuard`.
    Teardown {
        hal: FalconHal,
        fwsec_sb: Option<UcodeAt>,
        booter_unload: UcodeAt,
    },
    /// Hopper on: the FSP has the chain of trust, so the GSP-FMC (and GSP-RM) may run and read
    /// the boot memory: wait for the RISC-V core to halt (nova-core), or turn bus mastering off.
    WaitHalt(FalconHal),
}

/// The phase bookkeeping of one boot or unload.
pub(super) struct Run<'o, 'h, M: ?Sized, C: ?Sized, O: ?Sized> {
    pub(super) bar0: &'h M,
    pub(super) clock: &'h C,
    pub(super) pci: Option<&'h dyn PciConfig>,
    pub(super) chip: Option<&'static ChipInfo>,
    obs: &'o mut O,
    start: Duration,
    phase: BootPhase,
    phase_start: Duration,
    pub(super) timings: heapless::Vec<(BootPhase, Duration), 24>,
    log_image: Option<&'h dyn LogImage>,
    pub(super) quiesce: Quiesce,
    /// The flush page registered by this boot (cleared from the registers on failure).
    pub(super) flush: Option<(FlushRegs, u64)>,
}

impl<'o, 'h, M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized> Run<'o, 'h, M, C, O> {
    pub(super) fn new(
        bar0: &'h M,
        clock: &'h C,
        obs: &'o mut O,
        log_image: Option<&'h dyn LogImage>,
    ) -> Self {
        let now = clock.now();
        Run {
            bar0,
            clock,
            pci: None,
            chip: None,
            obs,
            start: now,
            phase: BootPhase::Identify,
            phase_start: now,
            timings: heapless::Vec::new(),
            log_image,
            quiesce: Quiesce::Nothing,
            flush: None,
        }
    }

    pub(super) fn begin(&mut self, phase: BootPhase) {
        self.phase = phase;
        self.phase_start = self.clock.now();
        self.obs.phase_started(phase);
    }

    pub(super) fn end(&mut self) {
        let took = self.clock.now().saturating_sub(self.phase_start);
        let _ = self.timings.push((self.phase, took));
        self.obs.phase_finished(self.phase, took);
    }

    pub(super) fn detail(&mut self, args: fmt::Arguments<'_>) {
        self.obs.detail(self.phase, args);
    }

    /// Builds the error for the current phase and hands the observer the report: registers,
    /// and the logs when memory exists.
    pub(super) fn fail<B: DmaBuffer>(
        &mut self,
        kind: BootErrorKind,
        mem: Option<&BootMemory<B>>,
    ) -> BootError {
        let mut report = BootReport {
            elapsed: self.clock.now().saturating_sub(self.start),
            ..Default::default()
        };
        snapshot(self.bar0, self.chip, &mut report);
        if let Some(m) = mem {
            m.read_logs(self.log_image, &mut |l| report.push_log(l));
        }
        log::error!("gsp boot: {}: {kind}", self.phase);
        // The caller frees the boot's memory as soon as this returns.
        self.quiesce_for_free();
        let err = BootError {
            phase: self.phase,
            kind,
        };
        self.obs.failed(&err, &report);
        err
    }

    /// Stops what the failed boot started, so that freeing its memory is safe (see
    /// [`Quiesce`]), then lets the flush page go.
    fn quiesce_for_free(&mut self) {
        let q = core::mem::replace(&mut self.quiesce, Quiesce::Nothing);
        let stopped = match q {
            Quiesce::Nothing => true,
            Quiesce::Teardown {
                hal,
                fwsec_sb,
                booter_unload,
            } => booter::stop_after_failure(self, hal, fwsec_sb.as_ref(), &booter_unload),
            Quiesce::WaitHalt(hal) => cot::stop_after_failure(self, hal),
        };
        if !stopped {
            let off = self.pci.map(|p| p.set_bus_master(false));
            self.detail(format_args!(
                "after the failure: the GSP may still be running; {}; reset the GPU before the \
                 next boot",
                match off {
                    Some(Ok(())) =>
                        "bus mastering is off so it cannot reach the memory being freed",
                    Some(Err(_)) | None => {
                        "bus mastering could NOT be turned off: it may read freed memory"
                    }
                }
            ));
        }
        if let Some((regs, addr)) = self.flush.take()
            && regs.read(self.bar0) == addr
        {
            let _ = regs.program(self.bar0, 0);
        }
    }
}

/// Reads the registers a failure report shows: the common ones, then the boot method's.
fn snapshot<M: Mmio + ?Sized>(bar0: &M, chip: Option<&ChipInfo>, r: &mut BootReport) {
    let mut put = |name: &'static str, off: usize| {
        let _ = r.regs.push((name, bar0.read32(off)));
    };
    put("NV_PMC_BOOT_0", NV_PMC_BOOT_0::OFFSET as usize);
    put("NV_PMC_BOOT_42", NV_PMC_BOOT_42::OFFSET as usize);
    put(
        "NV_PFB_PRI_MMU_WPR2_ADDR_LO",
        NV_PFB_PRI_MMU_WPR2_ADDR_LO::OFFSET as usize,
    );
    put(
        "NV_PFB_PRI_MMU_WPR2_ADDR_HI",
        NV_PFB_PRI_MMU_WPR2_ADDR_HI::OFFSET as usize,
    );
    put(
        "NV_PGC6_AON_SECURE_SCRATCH_GROUP_05(0) (GFW_BOOT)",
        NV_PGC6_AON_SECURE_SCRATCH_GROUP_05::BASE as usize,
    );
    put(
        "NV_PGC6_BSI_SECURE_SCRATCH_14",
        NV_PGC6_BSI_SECURE_SCRATCH_14::OFFSET as usize,
    );
    put(
        "NV_PGSP_FALCON_MAILBOX0",
        NV_PFALCON_FALCON_MAILBOX0::offset_of::<Gsp>(),
    );
    put(
        "NV_PGSP_FALCON_MAILBOX1",
        NV_PFALCON_FALCON_MAILBOX1::offset_of::<Gsp>(),
    );
    put(
        "NV_PGSP_FALCON_HWCFG2",
        NV_PFALCON_FALCON_HWCFG2::offset_of::<Gsp>(),
    );
    put(
        "NV_PGSP_FALCON_CPUCTL",
        NV_PFALCON_FALCON_CPUCTL::offset_of::<Gsp>(),
    );
    // TU10x/GA100 have neither RISCV_CPUCTL at +0x388 nor BCR_CTRL (tu102, ga100
    // dev_riscv_pri.h): their RISC-V status is CORE_SWITCH_RISCV_STATUS.
    if chip.is_some_and(|c| FalconHal::for_chip(c).riscv_status_in_core_switch()) {
        put(
            "NV_PGSP_RISCV_CORE_SWITCH_RISCV_STATUS",
            NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS::offset_of::<Gsp>(),
        );
    } else {
        put(
            "NV_PGSP_RISCV_CPUCTL",
            NV_PRISCV_RISCV_CPUCTL::offset_of::<Gsp>(),
        );
        put(
            "NV_PGSP_RISCV_BCR_CTRL",
            NV_PRISCV_RISCV_BCR_CTRL::offset_of::<Gsp>(),
        );
    }
    match chip {
        Some(c) if c.boot == BootMethod::FspChainOfTrust => cot::snapshot(c, &mut put),
        _ => booter::snapshot(&mut put),
    }
}
