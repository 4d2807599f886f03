//! Bare-metal GSP boot: from a GPU fresh out of reset to a running GSP-RM that answers RPCs,
//! and back (unload) so that the next boot works without a reset.
//!
//! [`boot`] runs the whole sequence over the `hal` traits (so it runs on the simulator and on
//! `VfioGpu` alike) and returns a [`BootedGsp`]: the RPC transport to GSP-RM, the framebuffer
//! layout to hand to [`crate::mm`], GSP-RM's static info, and what [`BootedGsp::unload`] needs.
//!
//! Turing-Ada (`BootMethod::Booter`, `kgspBootstrap_TU102`):
//! 1. wait for GFW boot (PGC6 scratch), then refuse or reset if WPR2 is already up (WPR2 is
//!    read only once GFW boot is done, as `kgspInitRm` does: a read before then may be a PRI
//!    error); point the sysmem flush registers at a page of ours ([`flush`]);
//! 2. read the VBIOS through the PROM window, extract FWSEC;
//! 3. compute the FB layout, fill DMA memory, queue SET_SYSTEM_INFO and SET_REGISTRY;
//! 4. FWSEC-FRTS on the GSP falcon (WPR2 comes up at the FRTS offset);
//! 5. reset the GSP into RISC-V with the LIBOS arguments in its mailboxes;
//! 6. booter_load on SEC2 with the WPR metadata address (MAILBOX0 must come back 0);
//! 7. write the OS version, check RISC-V runs, wait for GSP_INIT_DONE while running the CPU
//!    sequencer scripts GSP-RM sends; GET_GSP_STATIC_INFO.
//!
//! Hopper/Blackwell (`BootMethod::FspChainOfTrust`, `kgspBootstrap_GH100`):
//! 1. wait for the FSP's secure boot (I2CS scratch = 0xff), then refuse or reset if WPR2 is
//!    up; the sysmem flush page;
//! 2. as above, but the WPR metadata carries only sizes (the GSP-FMC places WPR2);
//! 3. `GSP_FMC_BOOT_PARAMS` + the `NVDM_PAYLOAD_COT` message to the FSP (FMC image, hash,
//!    key, signature, FRTS placement), check the FSP's answer;
//! 4. wait for the PRIV target mask and the RISC-V lockdown to be released (or an FMC error
//!    in MAILBOX0);
//! 5. as step 7 above (no sequencer on these chips).
//!
//! Unload ([`BootedGsp::unload`], `kgspUnloadRm`): UNLOADING_GUEST_DRIVER with
//! `newLevel` = [`UNLOAD_LEVEL_0`] (not PM, not GC6), wait for `MAILBOX0 = 0x80000000`, then
//! FWSEC-SB and booter_unload (WPR2 must go down) on Turing-Ada, or wait for the RISC-V halt
//! (the GSP-FMC tears WPR2 down) on Hopper on; the flush page goes last.
//!
//! A boot that fails stops what it started before its memory is freed: on Turing-Ada
//! FWSEC-SB and booter_unload (the GSP falcon reset stops GSP-RM), on Hopper on a wait of up to
//! [`FAILED_BOOT_HALT_TIMEOUT`] for the GSP RISC-V to halt (nova-core), and bus mastering off
//! if it does not.
//!
//! Every wait is a [`poll_until`] with a named timeout; every failure is a [`BootError`] naming
//! the phase; the [`BootReport`] of registers and the GSP's last log lines goes to
//! [`BootObserver::failed`].

pub mod abi;
pub mod firmware;
pub mod flush;
pub mod fsp;
pub mod layout;
pub mod memory;
pub mod report;
pub mod sequencer;

use core::fmt;
use core::time::Duration;

use zerocopy::{FromZeros, IntoBytes};

use crate::chip::{BootMethod, Chip, ChipInfo, Chipset, identify_mmio};
use crate::falcon::{Falcon, FalconHal, FuseEngine, RISCV_ACTIVE_TIMEOUT, ucode_fuse_version};
use crate::gsp::GspError;
use crate::gsp::events::NV_VGPU_MSG_EVENT_GSP_INIT_DONE;
use crate::gsp::log::LogImage;
use crate::gsp::msgq::{MsgQueue, SharedMemLayout};
use crate::gsp::registry::{self, DEFAULT_REGISTRY, RegistryEntry};
use crate::gsp::rpc::{GspConfig, GspRpc, UNLOAD_LEVEL_0};
use crate::gsp::sysinfo::{GspStaticConfigInfo, GspSystemInfo};
use crate::hal::{
    Clock, DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig, PollError, is_register_value,
    poll_until,
};
use crate::mm::{FbLayout, FbOwner};
use crate::regs::falcon::{Gsp, Sec2, TRANSCFG_TARGET_COHERENT_SYSMEM};
use crate::regs::falcon::{
    NV_PFALCON_FALCON_CPUCTL, NV_PFALCON_FALCON_HWCFG2, NV_PFALCON_FALCON_MAILBOX0,
    NV_PFALCON_FALCON_MAILBOX1, NV_PRISCV_RISCV_BCR_CTRL, NV_PRISCV_RISCV_CPUCTL,
};
use crate::regs::fsp::{
    FSP_BOOT_COMPLETE_SUCCESS, NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2, NV_PFSP_MSGQ_HEAD,
    NV_PFSP_MSGQ_TAIL, NV_PFSP_QUEUE_HEAD, NV_PFSP_QUEUE_TAIL, NV_THERM_I2CS_SCRATCH, ThermGb202,
    ThermGh100,
};
use crate::regs::pbus::{
    FWSECLIC_SCRATCH_INDEX_0E, FWSECLIC_SCRATCH_INDEX_15, NV_PBUS_VBIOS_SCRATCH, NV_PROM_DATA,
    PROM_WINDOW_SIZE, frts_err_code, sb_err_code,
};
use crate::regs::pfb::{NV_PFB_PRI_MMU_WPR2_ADDR_HI, NV_PFB_PRI_MMU_WPR2_ADDR_LO};
use crate::regs::pgc6::{
    GFW_BOOT_PROGRESS_COMPLETED, NV_PGC6_AON_SECURE_SCRATCH_GROUP_05,
    NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK, NV_PGC6_AON_SECURE_SCRATCH_GROUP_42,
    NV_PGC6_BSI_SECURE_SCRATCH_14,
};
use crate::regs::pmc::{NV_PMC_BOOT_0, NV_PMC_BOOT_42};
use crate::regs::{Register, RegisterArray, RelativeRegister};

use abi::{
    GSP_ACR_BOOT_GSP_RM_PARAMS, GSP_DMA_TARGET_COHERENT_SYSTEM, GSP_DMA_TARGET_NONCOHERENT_SYSTEM,
    GSP_FMC_BOOT_PARAMS, GSP_RM_PARAMS, GspFwWprMeta, NVDM_PAYLOAD_COT, NVDM_TYPE_COT,
};
use firmware::{BootFirmware, BooterKind, FirmwareError, FwsecCommand, HsUcode, VbiosFirmware};
use flush::{FlushRegs, SysmemFlush};
use fsp::Fsp;
use layout::{FRTS_SIZE, WprParams};
use memory::{BootMemory, copy_to_dma};
pub use report::{BootError, BootErrorKind, BootObserver, BootPhase, BootReport, NoObserver};
use sequencer::BootEvents;

/// How long the VBIOS devinit (or the FSP's secure boot) may take (`kfspWaitForSecureBoot_GH100`:
/// 4 s; FB training alone takes 2-3 s on HBM parts).
pub const GFW_BOOT_TIMEOUT: Duration = Duration::from_secs(4);
/// How long to leave the GPU alone after a function reset (tinygrad: 100 ms; GPUs may stop
/// answering while they reset).
pub const RESET_SETTLE: Duration = Duration::from_millis(100);
/// How long WPR2 may take to go down after a reset or an unload.
pub const WPR2_CLEAR_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the FSP may hold the GSP's PRIV target mask after the chain of trust
/// (`kfspWaitForGspTargetMaskReleased_GH100`: the default GPU timeout).
pub const TARGET_MASK_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the GSP-FMC may take to release the RISC-V lockdown (nova-core: 30 s).
pub const LOCKDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long GSP-RM may take to create its status queue and send GSP_INIT_DONE (nova-core:
/// 10 s).
pub const INIT_DONE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long GSP-RM may take to suspend its processor after UNLOADING_GUEST_DRIVER.
pub const SUSPEND_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the GSP RISC-V core may take to halt at unload (Hopper on; `kgspTeardown_GH100`
/// waits `GPU_TIMEOUT_DEFAULT`, 4 s on Linux).
pub const HALT_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a failed Hopper-on boot waits for the GSP RISC-V core to halt before its memory is
/// freed (nova-core: 5 s); if it does not, bus mastering goes off first.
pub const FAILED_BOOT_HALT_TIMEOUT: Duration = Duration::from_secs(5);
/// `LIBOS_INTERRUPT_PROCESSOR_SUSPENDED` in GSP MAILBOX0 (`_kgspIsProcessorSuspended`).
pub const PROCESSOR_SUSPENDED: u32 = 0x8000_0000;
/// PRIV error reads while the GSP is locked to the FSP (`_kfspIsGspTargetMaskReleased`).
const PRIV_TARGET_LOCKED: u32 = 0xbadf_4100;

/// The hardware the boot runs on: BAR0, DMA memory, time, PCI config space. The same shape as
/// `VfioGpu`'s `bar0()/dma()/pci()/clock()` and the simulator's `SimGpu`.
#[derive(Debug, Clone)]
pub struct BootHw<M, D, C, P> {
    /// BAR0.
    pub bar0: M,
    /// Host memory the GPU can reach.
    pub dma: D,
    /// Time.
    pub clock: C,
    /// PCI config space and function reset.
    pub pci: P,
}

/// What to do when a GSP is found running (WPR2 up) before boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningGsp {
    /// Stop with [`BootErrorKind::GspRunning`] and instructions (default).
    Refuse,
    /// Reset the PCI function ([`PciConfig::reset_function`]) and wait for WPR2 to go down.
    Reset,
    /// Boot anyway (diagnostics): the firmware refuses, as on hardware (FWSEC-FRTS reports an
    /// error, the FSP answers `FSP_ERR_IFS_ERR_INVALID_STATE`).
    Attempt,
}

/// Addresses GSP-RM wants in `GspSystemInfo` (0 when the embedder does not know them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemAddrs {
    /// BAR0 bus address.
    pub bar0: u64,
    /// BAR1 bus address.
    pub bar1: u64,
    /// BAR2/3 bus address.
    pub bar3: u64,
    /// `bus << 8 | device << 3 | function`.
    pub bdf: u64,
}

/// Boot options.
#[derive(Debug, Clone, Copy)]
pub struct BootOptions<'a> {
    /// What to do with a GSP left running.
    pub running_gsp: RunningGsp,
    /// BAR and bus addresses for `GspSystemInfo`.
    pub addrs: SystemAddrs,
    /// Registry keys for SET_REGISTRY.
    pub registry: &'a [RegistryEntry<'a>],
    /// RPC transport settings.
    pub gsp: GspConfig,
    /// How long to wait for GSP_INIT_DONE.
    pub init_done_timeout: Duration,
    /// Decodes the GSP's log records (without it, logs are raw words).
    pub log_image: Option<&'a dyn LogImage>,
}

impl fmt::Debug for dyn LogImage + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogImage")
    }
}

impl Default for BootOptions<'_> {
    fn default() -> Self {
        BootOptions {
            running_gsp: RunningGsp::Refuse,
            addrs: SystemAddrs::default(),
            registry: DEFAULT_REGISTRY,
            gsp: GspConfig::default(),
            init_done_timeout: INIT_DONE_TIMEOUT,
            log_image: None,
        }
    }
}

/// A heavy-secure ucode kept in DMA memory for the unload.
#[derive(Debug)]
struct PreparedUcode<B> {
    buf: B,
    load: crate::falcon::HsLoad,
}

/// What the Turing-Ada unload runs (prepared at boot, as nova-core's `UnloadBundle`).
#[derive(Debug)]
struct UnloadBundle<B> {
    fwsec_sb: PreparedUcode<B>,
    booter_unload: PreparedUcode<B>,
}

/// The transport type of a booted GSP.
pub type BootRpc<B, M, C> = GspRpc<B, M, C, BootEvents>;

/// Everything but the RPC transport of a booted GSP: memory GSP-RM keeps using, the layout,
/// and what the unload needs.
#[derive(Debug)]
pub struct BootState<B> {
    chip: Chip,
    hal: FalconHal,
    mem: BootMemory<B>,
    flush: SysmemFlush<B>,
    fmc: Option<(B, B)>,
    unload: Option<UnloadBundle<B>>,
    wpr_meta: GspFwWprMeta,
    fb_layout: FbLayout,
    static_info: GspStaticConfigInfo,
    timings: heapless::Vec<(BootPhase, Duration), 24>,
}

/// A running GSP-RM: the RPC transport plus [`BootState`].
#[derive(Debug)]
pub struct BootedGsp<B: DmaBuffer, M: Mmio, C: Clock> {
    rpc: BootRpc<B, M, C>,
    state: BootState<B>,
}

/// What an unload did.
#[derive(Debug, Clone, Default)]
pub struct UnloadReport {
    /// Time per phase.
    pub timings: heapless::Vec<(BootPhase, Duration), 8>,
    /// GSP-RM did not report its processor suspended in time (the teardown went ahead, as
    /// OpenRM's does).
    pub suspend_timed_out: bool,
}

/// A heavy-secure ucode in DMA memory the boot still owns: (device address, bytes, load).
type UcodeAt = (u64, usize, crate::falcon::HsLoad);

/// What a failed boot must stop before its memory is freed.
#[derive(Debug, Clone, Copy)]
enum Quiesce {
    /// Nothing the boot started runs on the GPU.
    Nothing,
    /// Turing-Ada: FWSEC-FRTS may have put WPR2 up and GSP-RM may run: FWSEC-SB (whose GSP
    /// falcon reset stops GSP-RM) and booter_unload, as nova-core's `BootUnloadGuard`.
    Teardown {
        hal: FalconHal,
        fwsec_sb: UcodeAt,
        booter_unload: UcodeAt,
    },
    /// Hopper on: the FSP has the chain of trust, so the GSP-FMC (and GSP-RM) may run and read
    /// the boot memory: wait for the RISC-V core to halt (nova-core), or turn bus mastering off.
    WaitHalt(FalconHal),
}

/// The phase bookkeeping of one boot or unload.
struct Run<'o, 'h, M: ?Sized, C: ?Sized, O: ?Sized> {
    bar0: &'h M,
    clock: &'h C,
    pci: Option<&'h dyn PciConfig>,
    chip: Option<&'static ChipInfo>,
    obs: &'o mut O,
    start: Duration,
    phase: BootPhase,
    phase_start: Duration,
    timings: heapless::Vec<(BootPhase, Duration), 24>,
    log_image: Option<&'h dyn LogImage>,
    quiesce: Quiesce,
    /// The flush page registered by this boot (cleared from the registers on failure).
    flush: Option<(FlushRegs, u64)>,
}

impl<'o, 'h, M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized> Run<'o, 'h, M, C, O> {
    fn new(bar0: &'h M, clock: &'h C, obs: &'o mut O, log_image: Option<&'h dyn LogImage>) -> Self {
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

    fn begin(&mut self, phase: BootPhase) {
        self.phase = phase;
        self.phase_start = self.clock.now();
        self.obs.phase_started(phase);
    }

    fn end(&mut self) {
        let took = self.clock.now().saturating_sub(self.phase_start);
        let _ = self.timings.push((self.phase, took));
        self.obs.phase_finished(self.phase, took);
    }

    fn detail(&mut self, args: fmt::Arguments<'_>) {
        self.obs.detail(self.phase, args);
    }

    /// Builds the error for the current phase and hands the observer the report: registers,
    /// and the logs when memory exists.
    fn fail<B: DmaBuffer>(
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
            } => {
                let t = teardown_wpr2(self.bar0, self.clock, hal, &fwsec_sb, &booter_unload);
                self.detail(format_args!(
                    "after the failure: {}",
                    if t.wpr2_down {
                        "WPR2 torn down (FWSEC-SB + booter_unload); the next boot needs no reset"
                    } else {
                        "WPR2 is still up; reset the GPU before the next boot"
                    }
                ));
                t.gsp_reset
            }
            Quiesce::WaitHalt(hal) => {
                let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(self.bar0, self.clock, hal);
                let t0 = self.clock.now();
                let halted = poll(
                    self.clock,
                    FAILED_BOOT_HALT_TIMEOUT,
                    Duration::from_millis(1),
                    "the GSP RISC-V core to halt after the failure",
                    || gsp.is_riscv_halted(),
                )
                .is_ok();
                if halted {
                    let took = self.clock.now().saturating_sub(t0);
                    self.detail(format_args!(
                        "after the failure: the GSP RISC-V core halted ({took:?}); its boot \
                         memory is freed"
                    ));
                }
                halted
            }
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

/// Reads the registers a failure report shows.
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
    put(
        "NV_PGSP_RISCV_CPUCTL",
        NV_PRISCV_RISCV_CPUCTL::offset_of::<Gsp>(),
    );
    put(
        "NV_PGSP_RISCV_BCR_CTRL",
        NV_PRISCV_RISCV_BCR_CTRL::offset_of::<Gsp>(),
    );
    let fsp = chip.is_some_and(|c| c.boot == BootMethod::FspChainOfTrust);
    if fsp {
        let therm = if chip.is_some_and(|c| is_gb20x(c.chipset)) {
            NV_THERM_I2CS_SCRATCH::offset_of::<ThermGb202>()
        } else {
            NV_THERM_I2CS_SCRATCH::offset_of::<ThermGh100>()
        };
        put("NV_THERM_I2CS_SCRATCH (FSP boot)", therm);
        for (i, name) in [
            "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(0)",
            "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(1)",
            "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(2)",
            "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(3)",
        ]
        .into_iter()
        .enumerate()
        {
            if let Ok(o) = NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2::offset(i as u32) {
                put(name, o);
            }
        }
        for (name, off) in [
            ("NV_PFSP_QUEUE_HEAD(0)", NV_PFSP_QUEUE_HEAD::offset(0)),
            ("NV_PFSP_QUEUE_TAIL(0)", NV_PFSP_QUEUE_TAIL::offset(0)),
            ("NV_PFSP_MSGQ_HEAD(0)", NV_PFSP_MSGQ_HEAD::offset(0)),
            ("NV_PFSP_MSGQ_TAIL(0)", NV_PFSP_MSGQ_TAIL::offset(0)),
        ] {
            if let Ok(o) = off {
                put(name, o);
            }
        }
    } else {
        put(
            "NV_PSEC_FALCON_MAILBOX0",
            NV_PFALCON_FALCON_MAILBOX0::offset_of::<Sec2>(),
        );
        put(
            "NV_PSEC_FALCON_MAILBOX1",
            NV_PFALCON_FALCON_MAILBOX1::offset_of::<Sec2>(),
        );
        put(
            "NV_PSEC_FALCON_CPUCTL",
            NV_PFALCON_FALCON_CPUCTL::offset_of::<Sec2>(),
        );
        for (name, i) in [
            (
                "NV_PBUS_VBIOS_SCRATCH(0x0e) (FRTS)",
                FWSECLIC_SCRATCH_INDEX_0E,
            ),
            (
                "NV_PBUS_VBIOS_SCRATCH(0x15) (SB)",
                FWSECLIC_SCRATCH_INDEX_15,
            ),
        ] {
            if let Ok(o) = NV_PBUS_VBIOS_SCRATCH::offset(i) {
                put(name, o);
            }
        }
    }
}

fn is_gb20x(c: Chipset) -> bool {
    matches!(
        c,
        Chipset::GB202 | Chipset::GB203 | Chipset::GB205 | Chipset::GB206 | Chipset::GB207
    )
}

/// WPR2 as (start, last page, up). A read that did not reach the register (all ones, or a
/// PRI error such as one before GFW boot completes) is not "up".
fn wpr2<M: Mmio + ?Sized>(bar0: &M) -> (u64, u64, bool) {
    let lo = NV_PFB_PRI_MMU_WPR2_ADDR_LO::read(bar0);
    let hi = NV_PFB_PRI_MMU_WPR2_ADDR_HI::read(bar0);
    let raw: u32 = hi.into();
    (
        lo.address(),
        hi.address(),
        is_register_value(raw) && hi.is_active(),
    )
}

/// The raw `NV_PFB_PRI_MMU_WPR2_ADDR_HI` if it did not read as a register value.
fn wpr2_unreadable<M: Mmio + ?Sized>(bar0: &M) -> Option<u32> {
    let raw = bar0.read32(NV_PFB_PRI_MMU_WPR2_ADDR_HI::OFFSET as usize);
    (!is_register_value(raw)).then_some(raw)
}

/// Waits for the VBIOS devinit (Turing-Ada: PGC6 scratch) or the FSP's secure boot (Hopper
/// on: I2CS scratch) to complete.
fn wait_gfw_boot<M: Mmio + ?Sized, C: Clock + ?Sized>(
    bar0: &M,
    clock: &C,
    info: &ChipInfo,
) -> Result<(), BootErrorKind> {
    if info.boot == BootMethod::FspChainOfTrust {
        let off = if is_gb20x(info.chipset) {
            NV_THERM_I2CS_SCRATCH::offset_of::<ThermGb202>()
        } else {
            NV_THERM_I2CS_SCRATCH::offset_of::<ThermGh100>()
        };
        poll(
            clock,
            GFW_BOOT_TIMEOUT,
            Duration::from_millis(1),
            "the FSP's secure boot (NV_THERM_I2CS_SCRATCH = 0xff)",
            || bar0.read32(off) == FSP_BOOT_COMPLETE_SUCCESS,
        )
    } else {
        poll(
            clock,
            GFW_BOOT_TIMEOUT,
            Duration::from_millis(1),
            "GFW boot (PGC6 SCRATCH_GROUP_05 PLM and GFW_BOOT progress 0xff)",
            || {
                let plm = NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK::read(bar0);
                is_register_value(u32::from(plm))
                    && plm.read_protection_level0()
                    && NV_PGC6_AON_SECURE_SCRATCH_GROUP_05::try_read(bar0, 0)
                        .is_ok_and(|v| v.progress() == GFW_BOOT_PROGRESS_COMPLETED)
            },
        )
    }
}

fn poll<C: Clock + ?Sized>(
    clock: &C,
    t: Duration,
    interval: Duration,
    what: &'static str,
    mut cond: impl FnMut() -> bool,
) -> Result<(), BootErrorKind> {
    let r: Result<(), PollError> =
        poll_until(clock, t, interval, what, || Ok(cond().then_some(())));
    r.map_err(|e| BootErrorKind::Timeout {
        what: e.what,
        waited: e.waited,
    })
}

fn fw_err(e: FirmwareError) -> BootErrorKind {
    BootErrorKind::Firmware(e)
}

fn hal_err(e: HalError) -> BootErrorKind {
    BootErrorKind::Hal(e)
}

fn gsp_err(e: GspError) -> BootErrorKind {
    match e {
        GspError::Hal(h) => BootErrorKind::Hal(h),
        e => BootErrorKind::Gsp(e),
    }
}

/// Reads the fuse version for a ucode's signature.
fn fuse_for<M: Mmio + ?Sized>(bar0: &M, sel: firmware::FuseSelector) -> u32 {
    match FuseEngine::from_engine_id_mask(sel.engine_id_mask) {
        Some(engine) => ucode_fuse_version(bar0, engine, sel.ucode_id),
        None => 0,
    }
}

/// Puts a prepared ucode in DMA memory.
fn prepare<D: DmaAllocator, I: AsRef<[u8]>>(
    dma: &D,
    u: HsUcode<I>,
) -> Result<PreparedUcode<D::Buffer>, HalError> {
    Ok(PreparedUcode {
        buf: copy_to_dma(dma, u.image.as_ref())?,
        load: u.load,
    })
}

/// Boots GSP-RM; see the [module documentation](self) for the sequence.
///
/// # Errors
///
/// A [`BootError`] naming the phase that failed, with registers and GSP log lines. Nothing
/// panics on device data or firmware bytes; every wait is bounded.
pub fn boot<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    opts: &BootOptions<'_>,
    obs: &mut O,
) -> Result<BootedGsp<D::Buffer, M, C>, BootError>
where
    M: Mmio + Clone,
    D: DmaAllocator,
    C: Clock + Clone,
    P: PciConfig,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let mut run = Run::new(&hw.bar0, &hw.clock, obs, opts.log_image);
    run.pci = Some(&hw.pci);
    // The unload bundle's buffers live here, past the failure handling in `Run::fail` that
    // runs them (nova-core's BootUnloadGuard).
    let mut teardown = None;
    boot_inner(hw, fw, opts, &mut run, &mut teardown)
}

/// What [`teardown_wpr2`] achieved.
struct Teardown {
    /// The GSP falcon was reset (so GSP-RM no longer runs).
    gsp_reset: bool,
    /// WPR2 is down.
    wpr2_down: bool,
}

/// FWSEC-SB and booter_unload without a running GSP-RM (best effort: booter_unload refuses
/// while GSP-RM has not suspended).
fn teardown_wpr2<M: Mmio + ?Sized, C: Clock + ?Sized>(
    bar0: &M,
    clock: &C,
    hal: FalconHal,
    fwsec_sb: &UcodeAt,
    booter_unload: &UcodeAt,
) -> Teardown {
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, hal);
    let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, clock, hal);
    let gsp_reset = gsp.reset().is_ok();
    if gsp_reset {
        let (addr, len, load) = fwsec_sb;
        let _ = gsp.execute_hs(*addr, *len, load, None, TRANSCFG_TARGET_COHERENT_SYSMEM);
    }
    if wpr2(bar0).2 && sec2.reset().is_ok() {
        let (addr, len, load) = booter_unload;
        let _ = sec2.execute_hs(
            *addr,
            *len,
            load,
            Some((0xff, 0xff)),
            TRANSCFG_TARGET_COHERENT_SYSMEM,
        );
    }
    Teardown {
        gsp_reset,
        wpr2_down: !wpr2(bar0).2,
    }
}

fn boot_inner<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    opts: &BootOptions<'_>,
    run: &mut Run<'_, '_, M, C, O>,
    teardown: &mut Option<UnloadBundle<D::Buffer>>,
) -> Result<BootedGsp<D::Buffer, M, C>, BootError>
where
    M: Mmio + Clone,
    D: DmaAllocator,
    C: Clock + Clone,
    P: PciConfig,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let bar0 = &hw.bar0;
    let clock = &hw.clock;
    let none: Option<&BootMemory<D::Buffer>> = None;

    // Identify.
    run.begin(BootPhase::Identify);
    let chip = identify_mmio(bar0).map_err(|e| run.fail(BootErrorKind::Chip(e), none))?;
    run.chip = Some(chip.info);
    let info = chip.info;
    if fw.chipset().info().firmware_dir != info.firmware_dir {
        return Err(run.fail(
            BootErrorKind::WrongFirmware {
                firmware: fw.chipset(),
                gpu: info.chipset,
            },
            none,
        ));
    }
    let hal = FalconHal::for_chip(info);
    let fsp_boot = info.boot == BootMethod::FspChainOfTrust;
    run.detail(format_args!("{chip}, boot via {:?}", info.boot));

    // Bus mastering on (tinygrad does so at every start): a failed boot may have turned it off
    // to keep a GSP that did not halt away from freed memory.
    if hw.pci.read_config32(0x04).is_ok_and(|c| c & 0x4 == 0) && hw.pci.set_bus_master(true).is_ok()
    {
        run.detail(format_args!("bus mastering was off: turned on"));
    }
    run.end();

    // GFW boot first: WPR2 is read only after it (`kgspInitRm` waits for GFW_BOOT before
    // `_kgspBootGspRm` checks WPR2), so a PRI error read while devinit or the FSP still run is
    // not taken for "WPR2 up".
    run.begin(BootPhase::WaitGfwBoot);
    wait_gfw_boot(bar0, clock, info).map_err(|k| run.fail(k, none))?;
    run.end();

    // A GSP left running?
    run.begin(BootPhase::CheckRunningGsp);
    if let Some(raw) = wpr2_unreadable(bar0) {
        let kind = if raw == u32::MAX {
            BootErrorKind::Hal(HalError::DeviceLost)
        } else {
            BootErrorKind::Wpr2Unreadable { raw }
        };
        return Err(run.fail(kind, none));
    }
    let (lo, hi, up) = wpr2(bar0);
    run.end();
    if up {
        match opts.running_gsp {
            RunningGsp::Refuse => {
                run.begin(BootPhase::CheckRunningGsp);
                return Err(run.fail(
                    BootErrorKind::GspRunning {
                        wpr2_lo: lo,
                        wpr2_hi: hi,
                    },
                    none,
                ));
            }
            RunningGsp::Attempt => {
                run.begin(BootPhase::CheckRunningGsp);
                run.detail(format_args!("WPR2 {lo:#x}..{hi:#x} is up; booting anyway"));
                run.end();
            }
            RunningGsp::Reset => {
                run.begin(BootPhase::ResetGpu);
                run.detail(format_args!(
                    "WPR2 {lo:#x}..{hi:#x} is up: resetting the function"
                ));
                let r = hw
                    .pci
                    .set_bus_master(false)
                    .and_then(|_| hw.pci.reset_function());
                if let Err(e) = r {
                    return Err(run.fail(BootErrorKind::ResetFailed(e), none));
                }
                clock.delay(RESET_SETTLE);
                if let Err(e) = hw.pci.set_bus_master(true) {
                    return Err(run.fail(BootErrorKind::ResetFailed(e), none));
                }
                run.end();
                // The reset restarts devinit / the FSP's secure boot; WPR2 reads only after it.
                run.begin(BootPhase::WaitGfwBoot);
                wait_gfw_boot(bar0, clock, info).map_err(|k| run.fail(k, none))?;
                run.end();
                run.begin(BootPhase::CheckRunningGsp);
                if poll(
                    clock,
                    WPR2_CLEAR_TIMEOUT,
                    Duration::from_millis(1),
                    "WPR2 to go down after the reset",
                    || wpr2_unreadable(bar0).is_none() && !wpr2(bar0).2,
                )
                .is_err()
                {
                    let hi = wpr2(bar0).1;
                    return Err(run.fail(BootErrorKind::Wpr2StillUp { wpr2_hi: hi }, none));
                }
                run.end();
            }
        }
    }

    // VBIOS / FWSEC (Turing-Ada).
    let vbios = if fsp_boot {
        None
    } else {
        run.begin(BootPhase::ReadVbios);
        let mut read32 = |off: usize| -> Option<u32> {
            if off >= PROM_WINDOW_SIZE as usize {
                return None;
            }
            bar0.try_read32(NV_PROM_DATA as usize + off).ok()
        };
        let v = fw
            .parse_vbios(&mut read32)
            .map_err(|e| run.fail(fw_err(e), none))?;
        run.end();
        Some(v)
    };

    // Layout.
    run.begin(BootPhase::ComputeLayout);
    let fb_size = NV_PGC6_AON_SECURE_SCRATCH_GROUP_42::read(bar0).vram_bytes();
    let params = WprParams::for_chip(info);
    let bl = fw.bootloader();
    let mut meta = GspFwWprMeta {
        sizeOfRadix3Elf: fw.gsp_image().len() as u64,
        sizeOfBootloader: bl.image.len() as u64,
        bootloaderCodeOffset: bl.code_offset as u64,
        bootloaderDataOffset: bl.data_offset as u64,
        bootloaderManifestOffset: bl.manifest_offset as u64,
        sizeOfSignature: fw.gsp_signature().len() as u64,
        ..GspFwWprMeta::new_zeroed()
    };
    if fsp_boot {
        layout::layout_gh100(&mut meta, &params, fb_size);
        run.detail(format_args!(
            "FB {} MiB; WPR heap {} MiB; the GSP-FMC places WPR2",
            fb_size >> 20,
            meta.gspFwHeapSize >> 20
        ));
    } else {
        layout::layout_tu102(&mut meta, &params, fb_size)
            .map_err(|e| run.fail(BootErrorKind::Layout(e), none))?;
        run.detail(format_args!(
            "FB {} MiB; GSP carve-out {:#x}..{:#x} ({} MiB); FRTS at {:#x}; WPR heap {} MiB",
            fb_size >> 20,
            meta.gspFwRsvdStart,
            meta.fbSize,
            (meta.fbSize - meta.gspFwRsvdStart) >> 20,
            meta.frtsOffset,
            meta.gspFwHeapSize >> 20
        ));
    }
    run.end();

    // DMA memory. The sysmem flush page first: before any falcon is reset (nova-core), and
    // GSP-RM asserts it is set when it starts (`kmemsysAssertSysmemFlushBufferValid_*`).
    run.begin(BootPhase::PrepareMemory);
    let flush =
        SysmemFlush::register(bar0, &hw.dma, info).map_err(|e| run.fail(hal_err(e), none))?;
    run.flush = Some((flush.regs(), flush.addr()));
    run.detail(format_args!(
        "sysmem flush page at {:#x} ({:?} registers)",
        flush.addr(),
        flush.regs()
    ));
    let layout = SharedMemLayout::default();
    let qbuf = hw
        .dma
        .alloc_dma(layout.total_size())
        .map_err(|e| run.fail(hal_err(e), none))?;
    let msgq = MsgQueue::new(qbuf, layout).map_err(|e| run.fail(gsp_err(e), none))?;
    let mem = BootMemory::new(
        &hw.dma,
        fw.gsp_image(),
        fw.gsp_signature(),
        bl.image,
        msgq.init_arguments(),
    )
    .map_err(|e| run.fail(hal_err(e), none))?;
    meta.sysmemAddrOfRadix3Elf = mem.radix3.dev_addr();
    meta.sysmemAddrOfBootloader = mem.bootloader.dev_addr();
    meta.sysmemAddrOfSignature = mem.signature.dev_addr();
    mem.wpr_meta
        .write(0, meta.as_bytes())
        .map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
    let libos_addr = mem.libos.dev_addr();
    run.detail(format_args!(
        "GSP-RM image {} KiB via radix3 at {:#x}; WPR meta at {:#x}; LIBOS args at {:#x}; \
         queues at {:#x}",
        meta.sizeOfRadix3Elf >> 10,
        meta.sysmemAddrOfRadix3Elf,
        mem.wpr_meta.dev_addr(),
        libos_addr,
        msgq.init_arguments().sharedMemPhysAddr
    ));
    run.end();

    // SET_SYSTEM_INFO and SET_REGISTRY, queued before GSP-RM runs.
    run.begin(BootPhase::QueueRpcs);
    let handler = BootEvents::new(hal, libos_addr, bl.app_version);
    let mut rpc = GspRpc::new(msgq, hw.bar0.clone(), hw.clock.clone(), handler, opts.gsp);
    let sysinfo = system_info(&hw.pci, info, &opts.addrs);
    rpc.set_system_info(&sysinfo)
        .map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    let mut table = [0u8; 4096];
    let n =
        registry::pack(opts.registry, &mut table).map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    rpc.set_registry(table.get(..n).unwrap_or(&[]))
        .map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    run.end();

    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, hal);
    let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, clock, hal);
    let mut fmc_bufs = None;

    if let Some(vbios) = &vbios {
        // FWSEC-FRTS on the GSP falcon.
        run.begin(BootPhase::FwsecFrts);
        let fuse = fuse_for(bar0, vbios.fwsec_fuse());
        let frts = vbios
            .fwsec(
                FwsecCommand::Frts {
                    offset: meta.frtsOffset,
                    size: FRTS_SIZE,
                },
                fuse,
            )
            .map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let sb = vbios
            .fwsec(FwsecCommand::Sb, fuse)
            .map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let frts = prepare(&hw.dma, frts).map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        let fwsec_sb = prepare(&hw.dma, sb).map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        // The unload bundle exists before WPR2 goes up (nova-core's UnloadBundle).
        let sel_u = fw
            .booter_fuse(BooterKind::Unload)
            .map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let unload_uc = fw
            .booter(BooterKind::Unload, fuse_for(bar0, sel_u))
            .map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let booter_unload =
            prepare(&hw.dma, unload_uc).map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        run.quiesce = Quiesce::Teardown {
            hal,
            fwsec_sb: (fwsec_sb.buf.dev_addr(), fwsec_sb.buf.len(), fwsec_sb.load),
            booter_unload: (
                booter_unload.buf.dev_addr(),
                booter_unload.buf.len(),
                booter_unload.load,
            ),
        };
        *teardown = Some(UnloadBundle {
            fwsec_sb,
            booter_unload,
        });
        gsp.reset()
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), Some(&mem)))?;
        gsp.execute_hs(
            frts.buf.dev_addr(),
            frts.buf.len(),
            &frts.load,
            None,
            TRANSCFG_TARGET_COHERENT_SYSMEM,
        )
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), Some(&mem)))?;
        let scratch = NV_PBUS_VBIOS_SCRATCH::try_read(bar0, FWSECLIC_SCRATCH_INDEX_0E)
            .map(u32::from)
            .unwrap_or(u32::MAX);
        let (lo, _hi, up) = wpr2(bar0);
        let err = frts_err_code(scratch);
        if err != 0 || !up || lo != meta.frtsOffset {
            return Err(run.fail(
                BootErrorKind::FwsecFrts {
                    err_code: err,
                    wpr2_lo: lo,
                    expected: meta.frtsOffset,
                },
                Some(&mem),
            ));
        }
        run.detail(format_args!("WPR2 up at {lo:#x}; fuse version {fuse}"));
        run.end();

        // booter_load on SEC2.
        run.begin(BootPhase::BooterLoad);
        let sel = fw
            .booter_fuse(BooterKind::Load)
            .map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let fuse = fuse_for(bar0, sel);
        let load = fw
            .booter(BooterKind::Load, fuse)
            .map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let load = prepare(&hw.dma, load).map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        // kgspBootstrap_TU102: the GSP goes into RISC-V with the LIBOS arguments in its
        // mailboxes before the booter runs.
        gsp.reset_into_riscv()
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), Some(&mem)))?;
        gsp.write_mailboxes(libos_addr as u32, (libos_addr >> 32) as u32);
        sec2.reset()
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), Some(&mem)))?;
        let meta_addr = mem.wpr_meta.dev_addr();
        let (m0, _) = sec2
            .execute_hs(
                load.buf.dev_addr(),
                load.buf.len(),
                &load.load,
                Some((meta_addr as u32, (meta_addr >> 32) as u32)),
                TRANSCFG_TARGET_COHERENT_SYSMEM,
            )
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), Some(&mem)))?;
        if m0 != 0 {
            return Err(run.fail(
                BootErrorKind::Booter {
                    kind: BooterKind::Load,
                    mailbox0: m0,
                },
                Some(&mem),
            ));
        }
        run.detail(format_args!("booter_load done (SEC2 fuse version {fuse})"));
        run.end();
    } else {
        // The chain of trust.
        run.begin(BootPhase::FspChainOfTrust);
        let fmc = fw.fmc().map_err(|e| run.fail(fw_err(e), Some(&mem)))?;
        let fmc_buf =
            copy_to_dma(&hw.dma, fmc.image).map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        let params_buf = hw
            .dma
            .alloc_dma(4096)
            .map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        // The targets as `kgspSetupGspFmcArgs_GH100` picks them (`_kgspMemdescToDmaTarget`):
        // the WPR metadata is cached sysmem (COHERENT), the LIBOS arguments uncached
        // (NONCOHERENT); nouveau and nova-core send the same. tinygrad sends COHERENT for both.
        let boot_params = GSP_FMC_BOOT_PARAMS {
            bootGspRmParams: GSP_ACR_BOOT_GSP_RM_PARAMS {
                target: GSP_DMA_TARGET_COHERENT_SYSTEM,
                gspRmDescSize: core::mem::size_of::<GspFwWprMeta>() as u32,
                gspRmDescOffset: mem.wpr_meta.dev_addr(),
                bIsGspRmBoot: 1,
                ..Default::default()
            },
            gspRmParams: GSP_RM_PARAMS {
                target: GSP_DMA_TARGET_NONCOHERENT_SYSTEM,
                _pad: 0,
                bootArgsOffset: libos_addr,
            },
            ..Default::default()
        };
        params_buf
            .write(0, boot_params.as_bytes())
            .map_err(|e| run.fail(hal_err(e), Some(&mem)))?;
        let cot = NVDM_PAYLOAD_COT {
            version: cot_version(info),
            size: core::mem::size_of::<NVDM_PAYLOAD_COT>() as u16,
            gspFmcSysmemOffset: fmc_buf.dev_addr(),
            frtsSysmemOffset: 0,
            frtsSysmemSize: 0,
            frtsVidmemOffset: params.frts_vidmem_offset(),
            frtsVidmemSize: FRTS_SIZE as u32,
            hash384: fmc.hash,
            publicKey: fmc.public_key,
            signature: fmc.signature,
            gspBootArgsSysmemOffset: params_buf.dev_addr(),
        };
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        // From here the FSP may start the GSP-FMC on this memory, whatever it answers.
        run.quiesce = Quiesce::WaitHalt(hal);
        let fsp = Fsp::new(bar0, clock);
        fsp.command(NVDM_TYPE_COT, cot.as_bytes())
            .map_err(|e| run.fail(BootErrorKind::Fsp(e), Some(&mem)))?;
        run.detail(format_args!(
            "COT v{} accepted: FMC {} KiB at {:#x}, boot params at {:#x}, FRTS {:#x} from the \
             end of FB",
            cot_version(info),
            fmc.image.len() >> 10,
            fmc_buf.dev_addr(),
            params_buf.dev_addr(),
            params.frts_vidmem_offset()
        ));
        run.end();

        run.begin(BootPhase::WaitLockdown);
        poll(
            clock,
            TARGET_MASK_TIMEOUT,
            Duration::from_micros(100),
            "the FSP to release the GSP's PRIV target mask",
            || {
                // `_kfspIsGspTargetMaskReleased` waits out 0xbadf41xx; any other PRI error says
                // as little about the GSP, so it is waited out too.
                let h = gsp.hwcfg2_raw();
                h != 0 && h & 0xffff_ff00 != PRIV_TARGET_LOCKED && is_register_value(h)
            },
        )
        .map_err(|k| run.fail(k, Some(&mem)))?;
        let params_addr = params_buf.dev_addr();
        poll(
            clock,
            LOCKDOWN_TIMEOUT,
            Duration::from_micros(100),
            "the GSP-FMC to release the RISC-V lockdown (HWCFG2.RISCV_BR_PRIV_LOCKDOWN)",
            || {
                let (m0, m1) = gsp.mailboxes();
                if !is_register_value(m0) || !is_register_value(gsp.hwcfg2_raw()) {
                    return false;
                }
                if m0 != 0 {
                    // Still the boot arguments the FSP put there, or an FMC error code.
                    let args = m0 == params_addr as u32 && m1 == (params_addr >> 32) as u32;
                    return !args;
                }
                !gsp.hwcfg2().riscv_br_priv_lockdown()
            },
        )
        .map_err(|k| run.fail(k, Some(&mem)))?;
        let (m0, _) = gsp.mailboxes();
        if m0 != 0 {
            return Err(run.fail(BootErrorKind::FmcError { mailbox0: m0 }, Some(&mem)));
        }
        run.end();
        fmc_bufs = Some((fmc_buf, params_buf));
    }

    // RISC-V.
    run.begin(BootPhase::StartRiscv);
    gsp.write_os_version(bl.app_version);
    gsp.wait_riscv_active(RISCV_ACTIVE_TIMEOUT)
        .map_err(|_| run.fail(BootErrorKind::RiscvNotActive, Some(&mem)))?;
    run.end();

    // GSP_INIT_DONE.
    run.begin(BootPhase::WaitInitDone);
    // The status queue is linked (msgqRxLink) lazily by the first receive.
    match rpc.wait_event(NV_VGPU_MSG_EVENT_GSP_INIT_DONE, opts.init_done_timeout) {
        Ok(_) => {}
        Err(e) => {
            let mut kind = init_err(&mut rpc, e);
            if !rpc.msgq().is_linked()
                && let BootErrorKind::Timeout { waited, .. } = kind
            {
                kind = BootErrorKind::Timeout {
                    what: "GSP-RM to create its status queue (it never started)",
                    waited,
                };
            }
            return Err(run.fail(kind, Some(&mem)));
        }
    }
    let scripts = rpc.handler_mut().scripts_run();
    if scripts > 0 {
        let cmds = rpc.handler_mut().commands_run();
        run.detail(format_args!(
            "ran {scripts} CPU-sequencer script(s), {cmds} commands"
        ));
    }
    run.end();

    // Static info.
    run.begin(BootPhase::StaticInfo);
    let static_info = rpc
        .get_gsp_static_info()
        .map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    let fb_layout = final_layout(bar0, info, &params, &meta, &static_info)
        .map_err(|k| run.fail(k, Some(&mem)))?;
    run.end();

    let timings = run.timings.clone();
    Ok(BootedGsp {
        rpc,
        state: BootState {
            chip,
            hal,
            mem,
            flush,
            fmc: fmc_bufs,
            unload: teardown.take(),
            wpr_meta: meta,
            fb_layout,
            static_info,
            timings,
        },
    })
}

fn init_err<B: DmaBuffer, M: Mmio, C: Clock>(
    rpc: &mut BootRpc<B, M, C>,
    e: GspError,
) -> BootErrorKind {
    if let Some(s) = rpc.handler_mut().last_error() {
        return BootErrorKind::Sequencer(s);
    }
    match e {
        GspError::Timeout { what, waited, .. } => BootErrorKind::Timeout { what, waited },
        GspError::Status { status, .. } => BootErrorKind::InitFailed { status: status.0 },
        GspError::RpcResult { result, .. } => BootErrorKind::InitFailed { status: result },
        e => gsp_err(e),
    }
}

/// `NVDM_PAYLOAD_COT.version`: 1 on GH100, 2 on Blackwell (`g_kern_fsp_nvoc.c`).
pub fn cot_version(info: &ChipInfo) -> u16 {
    match info.architecture {
        crate::chip::Architecture::Hopper => 1,
        _ => 2,
    }
}

/// `GspSystemInfo` as r570 wants it (`r570_gsp_set_system_info`, tinygrad's values).
pub fn system_info<P: PciConfig>(pci: &P, info: &ChipInfo, addrs: &SystemAddrs) -> GspSystemInfo {
    let mut s = GspSystemInfo::new_zeroed();
    s.gpuPhysAddr = addrs.bar0;
    s.gpuPhysFbAddr = addrs.bar1;
    s.gpuPhysInstAddr = addrs.bar3;
    s.nvDomainBusDeviceFunc = addrs.bdf;
    s.maxUserVa = 0x7fff_ffff_f000;
    s.pciConfigMirrorBase = info.pci_config_mirror;
    s.pciConfigMirrorSize = 0x1000;
    s.PCIDeviceID = pci.read_config32(0x00).unwrap_or(0);
    s.PCISubDeviceID = pci.read_config32(0x2c).unwrap_or(0);
    s.PCIRevisionID = pci.read_config32(0x08).map(|v| v & 0xff).unwrap_or(0);
    s.bIsPassthru = 1;
    s.bIsPrimary = 0;
    s.bPreserveVideoMemoryAllocations = 0;
    s.hostPageSize = 4096;
    s
}

/// The reservations to hand `core::mm` after boot: the computed layout (Turing-Ada) or what
/// WPR2 and GSP-RM report (Hopper on), plus every FB region GSP-RM reports reserved or
/// protected.
fn final_layout<M: Mmio + ?Sized>(
    bar0: &M,
    info: &ChipInfo,
    params: &WprParams,
    meta: &GspFwWprMeta,
    si: &GspStaticConfigInfo,
) -> Result<FbLayout, BootErrorKind> {
    let fb_size = NV_PGC6_AON_SECURE_SCRATCH_GROUP_42::read(bar0).vram_bytes();
    let mut l = match info.boot {
        BootMethod::Booter => layout::fb_layout_tu102(meta).map_err(BootErrorKind::Layout)?,
        BootMethod::FspChainOfTrust => {
            let (lo, hi, _) = wpr2(bar0);
            layout::fb_layout_gh100(
                fb_size,
                params,
                lo,
                hi.saturating_add(4096),
                Some(si.fwWprLayoutOffset[0]),
            )
            .map_err(BootErrorKind::Layout)?
        }
    };
    let regions = &si.fbRegionInfoParams;
    for r in regions
        .fbRegion
        .iter()
        .take((regions.numFBRegions as usize).min(regions.fbRegion.len()))
    {
        if (r.reserved != 0 || r.bProtected != 0) && r.limit >= r.base && r.limit < l.fb_size() {
            let _ = l.reserve(r.base, r.limit - r.base + 1, FbOwner::RmReserved);
        }
    }
    Ok(l)
}

impl<B: DmaBuffer, M: Mmio, C: Clock> BootedGsp<B, M, C> {
    /// The RPC transport to GSP-RM.
    pub fn rpc(&mut self) -> &mut BootRpc<B, M, C> {
        &mut self.rpc
    }

    /// The rest of the boot state.
    pub fn state(&self) -> &BootState<B> {
        &self.state
    }

    /// Splits off the transport (to build a `GspRm` on it); [`BootState::unload`] takes it
    /// back.
    pub fn split(self) -> (BootRpc<B, M, C>, BootState<B>) {
        (self.rpc, self.state)
    }

    /// Puts a split booted GSP back together.
    pub fn join(rpc: BootRpc<B, M, C>, state: BootState<B>) -> Self {
        BootedGsp { rpc, state }
    }

    /// GSP-RM's static info.
    pub fn static_info(&self) -> &GspStaticConfigInfo {
        &self.state.static_info
    }

    /// The framebuffer reservations to give [`crate::mm::VramAllocator`].
    pub fn fb_layout(&self) -> &FbLayout {
        &self.state.fb_layout
    }

    /// Shuts GSP-RM down so the next boot works without a reset.
    ///
    /// # Errors
    ///
    /// A [`BootError`] naming the unload phase; WPR2 staying up is
    /// [`BootErrorKind::Wpr2StillUp`] (the GPU then needs a reset).
    pub fn unload<D, P, O>(
        self,
        hw: &BootHw<M, D, C, P>,
        obs: &mut O,
        log_image: Option<&dyn LogImage>,
    ) -> Result<UnloadReport, BootError>
    where
        D: DmaAllocator<Buffer = B>,
        P: PciConfig,
        O: BootObserver + ?Sized,
    {
        self.state
            .unload(self.rpc, &hw.bar0, &hw.clock, obs, log_image)
    }
}

impl<B: DmaBuffer> BootState<B> {
    /// The chip.
    pub fn chip(&self) -> &Chip {
        &self.chip
    }

    /// The WPR metadata as the CPU wrote it.
    pub fn wpr_meta(&self) -> &GspFwWprMeta {
        &self.wpr_meta
    }

    /// The framebuffer reservations.
    pub fn fb_layout(&self) -> &FbLayout {
        &self.fb_layout
    }

    /// GSP-RM's static info.
    pub fn static_info(&self) -> &GspStaticConfigInfo {
        &self.static_info
    }

    /// Time per boot phase.
    pub fn timings(&self) -> &[(BootPhase, Duration)] {
        &self.timings
    }

    /// Decodes the GSP's LIBOS logs (see [`BootMemory::read_logs`]).
    pub fn read_logs(&self, image: Option<&dyn LogImage>, out: &mut dyn FnMut(fmt::Arguments<'_>)) {
        self.mem.read_logs(image, out)
    }

    /// Device address of the sysmem flush page (owned until the unload ends).
    pub fn sysmem_flush_addr(&self) -> u64 {
        self.flush.addr()
    }

    /// Device address of the GSP-FMC image and boot parameters (Hopper on).
    pub fn fmc_addresses(&self) -> Option<(u64, u64)> {
        self.fmc.as_ref().map(|(a, b)| (a.dev_addr(), b.dev_addr()))
    }

    /// Unloads with the transport split off earlier (see [`BootedGsp::unload`]).
    ///
    /// # Errors
    ///
    /// See [`BootedGsp::unload`].
    pub fn unload<M: Mmio, C: Clock, O: BootObserver + ?Sized>(
        self,
        mut rpc: BootRpc<B, M, C>,
        bar0: &M,
        clock: &C,
        obs: &mut O,
        log_image: Option<&dyn LogImage>,
    ) -> Result<UnloadReport, BootError> {
        let mut run = Run::new(bar0, clock, obs, log_image);
        run.chip = Some(self.chip.info);
        let mem = Some(&self.mem);
        let mut out = UnloadReport::default();

        run.begin(BootPhase::UnloadRpc);
        // `gpuStateDestroy` → `kgspUnloadRm(KGSP_UNLOAD_MODE_NORMAL, LEVEL_0)`: not in a PM
        // transition, not entering GC6, power level 0 (GSP-RM tears down fully and the next
        // boot needs no reset). tinygrad's FAST_UNLOAD is the open driver's shutdown-only value.
        rpc.unloading_guest_driver(false, false, UNLOAD_LEVEL_0)
            .map_err(|e| run.fail(gsp_err(e), mem))?;
        run.end();

        run.begin(BootPhase::WaitSuspend);
        let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, self.hal);
        let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, clock, self.hal);
        if poll(
            clock,
            SUSPEND_TIMEOUT,
            Duration::from_micros(100),
            "GSP-RM to suspend (MAILBOX0 = 0x80000000)",
            || gsp.mailboxes().0 == PROCESSOR_SUSPENDED,
        )
        .is_err()
        {
            // kgspUnloadRm ignores this too and tears down anyway.
            out.suspend_timed_out = true;
            run.detail(format_args!(
                "GSP-RM did not report suspended (MAILBOX0 {:#x}); tearing down anyway",
                gsp.mailboxes().0
            ));
        }
        run.end();
        // The transport is no longer needed; the queues stay allocated until we return.
        drop(rpc);

        match self.unload {
            Some(bundle) => {
                run.begin(BootPhase::FwsecSb);
                gsp.reset()
                    .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
                let u = &bundle.fwsec_sb;
                gsp.execute_hs(
                    u.buf.dev_addr(),
                    u.buf.len(),
                    &u.load,
                    None,
                    TRANSCFG_TARGET_COHERENT_SYSMEM,
                )
                .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
                let scratch = NV_PBUS_VBIOS_SCRATCH::try_read(bar0, FWSECLIC_SCRATCH_INDEX_15)
                    .map(u32::from)
                    .unwrap_or(u32::MAX);
                if sb_err_code(scratch) != 0 {
                    return Err(run.fail(
                        BootErrorKind::FwsecSb {
                            err_code: sb_err_code(scratch),
                        },
                        mem,
                    ));
                }
                run.end();

                run.begin(BootPhase::BooterUnload);
                if wpr2(bar0).2 {
                    sec2.reset()
                        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
                    let u = &bundle.booter_unload;
                    let (m0, _) = sec2
                        .execute_hs(
                            u.buf.dev_addr(),
                            u.buf.len(),
                            &u.load,
                            Some((0xff, 0xff)),
                            TRANSCFG_TARGET_COHERENT_SYSMEM,
                        )
                        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
                    if m0 != 0 {
                        return Err(run.fail(
                            BootErrorKind::Booter {
                                kind: BooterKind::Unload,
                                mailbox0: m0,
                            },
                            mem,
                        ));
                    }
                }
                let (_, hi, up) = wpr2(bar0);
                if up {
                    return Err(run.fail(BootErrorKind::Wpr2StillUp { wpr2_hi: hi }, mem));
                }
                run.end();
            }
            None => {
                run.begin(BootPhase::WaitHalt);
                gsp.wait_riscv_halted(HALT_TIMEOUT)
                    .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
                if poll(
                    clock,
                    WPR2_CLEAR_TIMEOUT,
                    Duration::from_micros(100),
                    "WPR2 to go down after the GSP halted",
                    || !wpr2(bar0).2,
                )
                .is_err()
                {
                    let hi = wpr2(bar0).1;
                    return Err(run.fail(BootErrorKind::Wpr2StillUp { wpr2_hi: hi }, mem));
                }
                run.end();
            }
        }
        // Nothing on the GPU flushes any more: the flush page can go (nova-core clears the
        // registers if they still point at it).
        if !self.flush.unregister(bar0) {
            run.detail(format_args!(
                "the sysmem flush registers no longer pointed at our page"
            ));
        }
        for t in run.timings.iter().take(8) {
            let _ = out.timings.push(*t);
        }
        Ok(out)
    }
}
