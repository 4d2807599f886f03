//! The boot hardware of the simulated GPU: GSP and SEC2 falcons, the VBIOS PROM window, the
//! FSP and its EMEM queue, WPR2, the GFW/FSP boot scratch registers and fuses, and what the
//! firmware running on them checks and does (FWSEC-FRTS/SB, booter_load/unload, the FSP chain
//! of trust and the GSP-FMC), up to starting the GSP-RM emulator on the queues the driver set
//! up.
//!
//! Everything the driver hands the firmware is checked against the REAL r570.144 files
//! ([`SimFirmware`]): the booter DMA'd into SEC2 must be the file's image patched for the fuse
//! version, the WPR metadata's radix3 tables must walk back to the real `.fwimage`, the
//! bootloader and signature must be the real ones with the real offsets, the chain-of-trust
//! message must carry the FMC's real hash, key and signature and point at the real image.
//! GSP-RM is found as the real one finds it: GSP mailboxes (Turing-Ada) or
//! `GSP_FMC_BOOT_PARAMS.gspRmParams` (Hopper on) → LIBOS arguments → "RMARGS" →
//! `GSP_ARGUMENTS_CACHED` → `MESSAGE_QUEUE_INIT_ARGUMENTS`.
//!
//! Wrong values produce what the hardware would show: the boot ROM rejects a ucode with the
//! wrong signature or parameters (the falcon halts with the mailboxes untouched), the booter
//! and GSP-FMC put an error code in MAILBOX0, the FSP answers with an `FSP_ERR_*`, and a GSP-RM
//! that cannot start never sends GSP_INIT_DONE (the driver's timeout must catch it). The error
//! codes of the booter and GSP-FMC are not published; the values here ([`err`]) are the
//! simulator's own. Every check that fails is also recorded in [`BootModel::errors`].
//!
//! Turing-Ada GSP-RM sends one CPU-sequencer script before GSP_INIT_DONE, exercising all nine
//! opcodes (REG_WRITE, REG_MODIFY, REG_POLL on a register that becomes ready later, DELAY_US,
//! REG_STORE, CORE_RESET, CORE_START, CORE_WAIT_FOR_HALT, CORE_RESUME with SEC2 reloading
//! GSP-RM); INIT_DONE comes only if the driver executed all of it correctly. The script is
//! synthetic (what real GSP-RM sends at cold boot, and whether, is not documented: under
//! `random` unknowns some cold boots send none).
//!
//! Where nothing public says what the hardware does, the answer comes from the GPU's
//! [`crate::unknowns::Unknowns`] (`NVBARE_SIM_UNKNOWNS`; the sites are the `unknown::*`
//! constants): how long devinit / the FSP's secure boot, FWSEC, the booters, the SEC2 reload,
//! the FSP's answer, its PRIV target mask, the GSP-FMC, GSP-RM's suspend and the RISC-V halt
//! take (helpful: quickly; pessimistic: just inside the tightest timeout a working driver uses),
//! whether WPR2 reads before GFW boot completes are PRI errors, the low byte of the
//! `0xbadf41xx` PRI errors, whether a cold boot sends a sequencer script, and what a
//! FAST_UNLOAD leaves behind.
//!
//! The sysmem flush registers hold whatever the driver wrote; GSP-RM checks them when it starts
//! (`kmemsysAssertSysmemFlushBufferValid_*`): zero is a warning ([`BootModel::warnings`]; GSP-RM
//! only asserts, and tinygrad, which never sets them, boots real GPUs), an address that is not
//! mapped DMA memory an error.

pub mod bar1;
pub mod falcon;
pub mod firmware;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::chip::{Architecture, BootMethod, Chipset};
use nvbare_core::gsp::boot::abi::{
    GSP_ARGUMENTS_CACHED, GSP_FMC_BOOT_PARAMS, GSP_FW_WPR_META_MAGIC, GSP_FW_WPR_META_REVISION,
    GspFwWprMeta, LibosMemoryRegionInitArgument, NVDM_PAYLOAD_COT, libos_id8,
};
use nvbare_core::gsp::msgq::{
    ENTRY_OFF, GSP_MSG_QUEUE_ELEMENT, MESSAGE_QUEUE_INIT_ARGUMENTS, RX_HDR_OFF, msgqTxHeader,
};
use nvbare_core::gsp::rpc::{
    NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER, UNLOAD_LEVEL_FAST, rpc_message_header_v03_00,
};
use zerocopy::FromBytes;

use crate::bar0::{MmioEngine, SimCore};
use crate::clock::SimClock;
use crate::gsp::emulator::{EmuEvent, EmulatorConfig, GspEmulator, GspQueueEngine};
use crate::gsp::mini_rm::MiniRm;
use crate::host::SimDma;
use crate::models::ChipModel;
use crate::rm_service::RmService;
use crate::{SimBar0, SimGpu, SimPci};

use falcon::{Cpu, Falcon, Riscv, off};
pub use firmware::{SimFirmware, SimFwsec};

/// The simulator's clock as a cloneable `Clock`, as `BootHw` wants it.
#[derive(Debug, Clone)]
pub struct SharedClock(pub Arc<SimClock>);

impl nvbare_core::hal::Clock for SharedClock {
    fn now(&self) -> Duration {
        self.0.now()
    }
    fn delay(&self, d: Duration) {
        self.0.delay(d)
    }
}

/// The simulated GPU as the boot code's hardware.
pub type SimBootHw = nvbare_core::gsp::boot::BootHw<SimBar0, SimDma, SharedClock, SimPci>;

/// `BootHw` over a simulated GPU.
pub fn boot_hw(gpu: &Arc<SimGpu>) -> SimBootHw {
    nvbare_core::gsp::boot::BootHw {
        bar0: gpu.bar0(),
        dma: gpu.dma(),
        clock: SharedClock(gpu.clock()),
        pci: gpu.pci(),
    }
}

/// Error codes the simulated booter / GSP-FMC / FWSEC report (the real codes are not published).
pub mod err {
    /// Booter: could not read the WPR metadata (DMA fault).
    pub const BOOTER_META_DMA: u32 = 0xb001;
    /// Booter: WPR metadata magic or revision wrong.
    pub const BOOTER_META_MAGIC: u32 = 0xb002;
    /// Booter: the GSP-RM image (radix3) does not match.
    pub const BOOTER_IMAGE: u32 = 0xb003;
    /// Booter: the bootloader image or its offsets do not match.
    pub const BOOTER_BOOTLOADER: u32 = 0xb004;
    /// Booter: the GSP-RM signature does not match.
    pub const BOOTER_SIGNATURE: u32 = 0xb005;
    /// Booter: the FB layout in the metadata is inconsistent.
    pub const BOOTER_LAYOUT: u32 = 0xb006;
    /// Booter: WPR2/FRTS is not set up (FWSEC-FRTS did not run).
    pub const BOOTER_NO_FRTS: u32 = 0xb007;
    /// Booter: the GSP is not reset into RISC-V with LIBOS arguments in its mailboxes.
    pub const BOOTER_GSP_NOT_READY: u32 = 0xb008;
    /// booter_unload: GSP-RM has not suspended.
    pub const BOOTER_GSP_RUNNING: u32 = 0xb009;
    /// booter_unload: wrong mailbox arguments.
    pub const BOOTER_UNLOAD_ARGS: u32 = 0xb00a;
    /// SEC2 reload (CORE_RESUME): the GSP is not ready.
    pub const RELOAD_GSP_NOT_READY: u32 = 0xb00b;
    /// booter_unload: GSP-RM suspended for a resume or skipped its teardown (a PM or
    /// FAST_UNLOAD `UNLOADING_GUEST_DRIVER`), so its state stays in WPR2.
    pub const BOOTER_UNLOAD_STATE_KEPT: u32 = 0xb00c;
    /// FWSEC-FRTS: WPR2 is already up.
    pub const FRTS_WPR2_UP: u16 = 0x0005;
    /// FWSEC-FRTS: bad region.
    pub const FRTS_BAD_REGION: u16 = 0x0006;
    /// GSP-FMC: bad boot parameters.
    pub const FMC_BOOT_PARAMS: u32 = 0x21;
    /// GSP-FMC: bad WPR metadata (magic, sizes).
    pub const FMC_META: u32 = 0x22;
    /// GSP-FMC: GSP-RM image, bootloader or signature mismatch.
    pub const FMC_IMAGE: u32 = 0x23;
    /// GSP-FMC: DMA fault.
    pub const FMC_DMA: u32 = 0x24;
}

/// A failure to inject into the boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootFault {
    /// The VBIOS devinit / FSP secure boot never completes.
    GfwBootNeverCompletes,
    /// The WPR metadata in host memory is corrupted (a bit flip in `magic`) before the booter
    /// or GSP-FMC reads it.
    CorruptWprMeta,
    /// GSP-RM starts but never sends GSP_INIT_DONE.
    NoInitDone,
    /// GSP_INIT_DONE carries this `rpc_result`.
    InitDoneError(u32),
    /// The FSP never answers the chain-of-trust message.
    FspNoResponse,
    /// The FSP answers with this `FSP_ERR_*`.
    FspError(u32),
    /// The GSP-FMC reports this error in MAILBOX0.
    FmcError(u32),
    /// The GSP-FMC never releases the lockdown.
    LockdownNeverReleased,
    /// The FSP never releases the GSP's PRIV target mask (every GSP read is `0xbadf41xx`).
    TargetMaskNeverReleased,
    /// The CPU sequencer's REG_POLL register never becomes ready.
    SequencerPollNeverReady,
    /// The GSP RISC-V core never starts after the booter / GSP-FMC.
    RiscvNeverActive,
    /// SEC2 runs booter_load forever.
    BooterHang,
    /// GSP-RM never suspends after UNLOADING_GUEST_DRIVER.
    NoSuspend,
}

/// Makes an RM model for a newly started GSP-RM.
pub type RmFactory = Arc<dyn Fn(&ChipModel) -> Box<dyn RmService> + Send + Sync>;

/// How the boot hardware behaves.
#[derive(Clone)]
pub struct BootSimConfig {
    /// The real firmware the checks use.
    pub firmware: Arc<SimFirmware>,
    /// Value of the SEC2 fuse register for the booters' ucode id (selects the signature).
    pub sec2_fuse: u32,
    /// Value of the GSP fuse register for FWSEC's ucode id.
    pub gsp_fuse: u32,
    /// Devinit / FSP secure boot time after a reset when unknowns are answered helpfully
    /// (otherwise up to [`unknown::GFW_BOOT_MAX_HBM`] and the like).
    pub gfw_boot_time: Duration,
    /// Faults to inject.
    pub faults: Vec<BootFault>,
    /// Faults injected into every GSP-RM the boot hardware starts (before its first reply).
    pub gsp_faults: Vec<crate::gsp::Fault>,
    /// Where to record the boot steps recognised and every RPC GSP-RM receives.
    pub trace: Option<crate::trace::Trace>,
    /// The RM GSP-RM serves.
    pub rm: RmFactory,
}

impl std::fmt::Debug for BootSimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootSimConfig")
            .field("chip", &self.firmware.chip)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl BootSimConfig {
    /// Defaults for `firmware`: SEC2 fuse version 1, FWSEC fuse version 3, 20 ms devinit,
    /// [`MiniRm`].
    pub fn new(firmware: Arc<SimFirmware>) -> Self {
        BootSimConfig {
            firmware,
            sec2_fuse: 0b1,
            gsp_fuse: 0b100,
            gfw_boot_time: Duration::from_millis(20),
            faults: Vec::new(),
            gsp_faults: Vec::new(),
            trace: None,
            rm: Arc::new(|m: &ChipModel| Box::new(MiniRm::new(m.board)) as Box<dyn RmService>),
        }
    }

    /// With a fault.
    pub fn with_fault(mut self, f: BootFault) -> Self {
        self.faults.push(f);
        self
    }

    /// With a fault in every GSP-RM started.
    pub fn with_gsp_fault(mut self, f: crate::gsp::Fault) -> Self {
        self.gsp_faults.push(f);
        self
    }
}

/// What the boot hardware saw.
#[derive(Debug, Clone, Default)]
pub struct BootStats {
    /// FWSEC-FRTS runs that set up WPR2.
    pub fwsec_frts: u32,
    /// FWSEC-FRTS runs refused because WPR2 was up.
    pub fwsec_refused: u32,
    /// FWSEC-SB runs.
    pub fwsec_sb: u32,
    /// booter_load runs that started GSP-RM.
    pub booter_load: u32,
    /// booter_unload runs that tore WPR2 down.
    pub booter_unload: u32,
    /// Ucodes the boot ROM rejected.
    pub brom_rejects: u32,
    /// Chain-of-trust messages accepted.
    pub cot_accepted: u32,
    /// GSP-RM starts.
    pub gsp_rm_starts: u32,
    /// CPU-sequencer scripts the driver completed correctly.
    pub sequencer_ok: u32,
    /// GSP-RM suspends after UNLOADING_GUEST_DRIVER.
    pub suspends: u32,
    /// PCI function resets.
    pub resets: u32,
    /// CPU-sequencer scripts GSP-RM sent.
    pub sequencer_scripts: u32,
    /// GSP-RM starts that found the sysmem flush registers pointing at mapped DMA memory.
    pub flush_page_ok: u32,
    /// `UNLOADING_GUEST_DRIVER` requests GSP-RM received.
    pub unloads: Vec<UnloadRequest>,
    /// `GSP_FMC_BOOT_PARAMS` targets the GSP-FMC found: (`bootGspRmParams`, `gspRmParams`).
    pub fmc_targets: Vec<(u32, u32)>,
    /// What real hardware tolerates but a careful driver avoids (GSP-RM's failed asserts, a
    /// FAST_UNLOAD before a boot without reset), in words.
    pub warnings: Vec<String>,
    /// Driver mistakes and failed checks, in words.
    pub errors: Vec<String>,
}

/// The parameters of an `UNLOADING_GUEST_DRIVER` (`rpc_unloading_guest_driver_v1F_07`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnloadRequest {
    /// `bInPMTransition`.
    pub in_pm_transition: bool,
    /// `bGc6Entering`.
    pub gc6_entering: bool,
    /// `newLevel`.
    pub new_level: u32,
}

pub(crate) const GSP_BASE: u32 = 0x11_0000;
pub(crate) const SEC2_BASE: u32 = 0x84_0000;
pub(crate) const PROM_BASE: u32 = 0x30_0000;
pub(crate) const PROM_SIZE: u32 = 0x10_0000;
pub(crate) const FSP_BASE: u32 = 0x8f_0000;
pub(crate) const WPR2_LO: u32 = 0x1f_a824;
pub(crate) const WPR2_HI: u32 = 0x1f_a828;
pub(crate) const GFW_PLM: u32 = 0x11_8128;
pub(crate) const GFW_GROUP05: u32 = 0x11_8234;
pub(crate) const BSI14: u32 = 0x11_80f8;
pub(crate) const VBIOS_SCRATCH_0E: u32 = 0x1438;
pub(crate) const VBIOS_SCRATCH_15: u32 = 0x1454;
pub(crate) const FUSE_BASE: u32 = 0x82_4100;
pub(crate) const FUSE_END: u32 = 0x82_4200;
pub(crate) const QUEUE_HEAD0: u32 = 0x11_0c00;
/// `NV_PGSP_MAILBOX(i)`, block-relative.
pub(crate) const PGSP_MAILBOX: u32 = 0x804;

const EMPTY_PROGRAM_TIME: Duration = Duration::from_micros(2);
const BROM_REJECT_TIME: Duration = Duration::from_micros(20);
/// When the sequencer's REG_POLL register becomes ready.
const SEQ_POLL_READY: Duration = Duration::from_micros(50);
const SEQ_DELAY_US: u32 = 20;

/// The unknowns this model asks ([`crate::unknowns`]): each a site name and its answers, most
/// convenient first, least convenient last. A time's last answer stays inside the tightest
/// timeout of a driver that boots real GPUs (the open driver's `GPU_TIMEOUT_DEFAULT` is 4 s
/// on Linux; nova-core gives heavy-secure ucodes and the SEC2 reload 2 s; the open driver
/// gives Turing-Ada devinit 2.05 s, `GPU_GFW_BOOT_COMPLETION_TIMEOUT_US`): nothing public says
/// how long these take, only that those drivers do not time out.
pub mod unknown {
    use std::time::Duration;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
    const fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Devinit after power-on or a reset, Turing-Ada (the open driver waits 2.05 s).
    pub const GFW_BOOT_TIME: &str = "boot: devinit / FSP secure boot time";
    /// The longest devinit on Turing-Ada.
    pub const GFW_BOOT_MAX_BOOTER: Duration = ms(1900);
    /// The FSP's secure boot on HBM3 parts ("FBFalcon training during devinit alone takes 2
    /// seconds, up to 3 on HBM3", `kfspWaitForSecureBoot_GH100`, which waits 4 s).
    pub const GFW_BOOT_MAX_HBM: Duration = ms(3000);
    /// ... and on GDDR parts.
    pub const GFW_BOOT_MAX_GDDR: Duration = ms(2000);
    /// Whether devinit / the FSP still runs when the driver first looks (right after power-on).
    pub const GFW_AT_POWER_ON: &str = "boot: devinit still running when the driver starts";
    /// What a WPR2 read returns before GFW boot completes: the register, or a PRI error.
    pub const WPR2_BEFORE_GFW: &str = "boot: WPR2 read before GFW boot completes";
    /// The answers of [`WPR2_BEFORE_GFW`] (0: the register's value).
    pub const WPR2_BEFORE_GFW_ANSWERS: [u32; 3] = [0, 0xbadf_1000, 0xbadf_10ff];
    /// The low byte of a `0xbadf41xx` target-mask PRI error ("it has extra error
    /// information", `_kfspIsGspTargetMaskReleased`).
    pub const TARGET_MASK_LSB: &str = "boot: low byte of a 0xbadf41xx PRI error";
    /// Its answers.
    pub const TARGET_MASK_LSB_ANSWERS: [u32; 4] = [0x00, 0x10, 0x80, 0xff];
    /// FWSEC's run time (FRTS or SB).
    pub const FWSEC_TIME: &str = "boot: FWSEC run time";
    /// booter_load / booter_unload's run time.
    pub const BOOTER_TIME: &str = "boot: booter run time";
    /// The SEC2 reload of a CPU-sequencer CORE_RESUME.
    pub const RELOAD_TIME: &str = "boot: SEC2 reload time";
    /// The answers of the three heavy-secure run times.
    pub const HS_TIMES: [Duration; 3] = [us(300), ms(50), ms(1800)];
    /// How long the FSP takes to answer the chain-of-trust message.
    pub const FSP_ANSWER_TIME: &str = "boot: FSP answer time";
    /// How long the FSP holds the GSP's PRIV target mask after answering.
    pub const TARGET_MASK_TIME: &str = "boot: FSP target-mask hold";
    /// How long the GSP-FMC takes after the target mask is released.
    pub const FMC_BOOT_TIME: &str = "boot: GSP-FMC boot time";
    /// The answers of the three FSP times (each waited for with 4 s by the open driver).
    pub const FSP_TIMES: [Duration; 3] = [us(200), ms(100), ms(3500)];
    /// How long a GSP-FMC that reported an error runs (and may read its boot memory) before its
    /// core halts (nova-core waits 5 s before freeing it).
    pub const FMC_ERROR_HALT: &str = "boot: GSP-FMC halt after an error";
    /// Its answers.
    pub const FMC_ERROR_HALT_TIMES: [Duration; 3] = [us(100), ms(100), ms(4500)];
    /// How long GSP-RM takes to suspend after UNLOADING_GUEST_DRIVER.
    pub const SUSPEND_TIME: &str = "boot: GSP-RM suspend time";
    /// How long the GSP RISC-V takes to halt after the suspend (Hopper on).
    pub const HALT_TIME: &str = "boot: GSP halt time after the suspend";
    /// The answers of the two unload times (each waited for with 4 s by the open driver).
    pub const UNLOAD_TIMES: [Duration; 3] = [us(0), ms(10), ms(3500)];
    /// Whether a Turing-Ada cold boot sends a CPU-sequencer script (the synthetic one) or none.
    pub const SEQUENCER_AT_COLD_BOOT: &str = "boot: a sequencer script at cold boot";
    /// Whether GSP-RM unloaded with FAST_UNLOAD (which "skips rmDestruct in GSP",
    /// `gpuEnterShutdown`) leaves its state in WPR2, so that the next boot needs a reset.
    pub const FAST_UNLOAD_KEEPS_STATE: &str = "boot: FAST_UNLOAD leaves GSP-RM's state behind";
}

/// What a started falcon CPU does when its run time is over.
#[derive(Debug, Clone)]
enum Job {
    /// The boot ROM rejected the ucode: halt, mailboxes untouched.
    Rejected,
    /// FWSEC with this DMEM command.
    Fwsec,
    /// booter_load.
    BooterLoad,
    /// booter_unload.
    BooterUnload,
    /// SEC2 reloading GSP-RM (CPU sequencer CORE_RESUME).
    Reload,
    /// Code that does nothing and halts (CORE_START of an empty falcon).
    Empty,
}

/// The sequencer script's progress as the hardware sees it.
#[derive(Debug, Clone, Default)]
struct SeqState {
    started_at: Option<Duration>,
    halt_waited: bool,
    poll_satisfied_at: Option<Duration>,
    write_ok: bool,
    modify_ok: bool,
    delay_ok: bool,
    core_reset: bool,
    core_start: bool,
    resume: bool,
}

/// GSP-RM as seen from the hardware.
struct RmState {
    emu: GspEmulator,
    doorbell: GspQueueEngine,
    libos_args: u64,
    /// Where its queues are (to read what the driver sent).
    init: MESSAGE_QUEUE_INIT_ARGUMENTS,
    suspended: bool,
    init_sent: bool,
    /// After UNLOADING_GUEST_DRIVER: when it suspends, when its core halts (Hopper on), and
    /// whether it keeps its state in WPR2.
    unload: Option<UnloadPlan>,
    /// The core halted after the unload.
    halted: bool,
}

#[derive(Debug, Clone, Copy)]
struct UnloadPlan {
    suspend_at: Duration,
    halt_at: Duration,
    keeps_state: bool,
}

/// The FSP's RM channel and the GSP-FMC boot it runs.
#[derive(Debug, Default)]
struct FspState {
    emem: Vec<u32>,
    ememc: u32,
    queue_head: u32,
    queue_tail: u32,
    msgq_head: u32,
    msgq_tail: u32,
    answer_at: Option<(Duration, Vec<u32>)>,
    /// GSP locked to the FSP until this time (HWCFG2 reads 0xbadf4100).
    target_mask_until: Option<Duration>,
    /// The GSP-FMC finishes at this time with this outcome.
    fmc_done_at: Option<(Duration, Result<(), u32>)>,
    /// A GSP-FMC that failed halts at this time, reading (boot params, WPR metadata) last.
    fmc_halt_at: Option<(Duration, u64, u64)>,
    boot_params: u64,
    /// `gspBootArgsSysmemOffset` of the accepted COT (the `GSP_FMC_BOOT_PARAMS`).
    cot_params: u64,
    /// `bootGspRmParams.gspRmDescOffset` (the WPR metadata).
    meta_addr: u64,
    /// HWCFG2.RISCV_BR_PRIV_LOCKDOWN of the GSP.
    lockdown: bool,
}

struct Model {
    cfg: BootSimConfig,
    model: ChipModel,
    fwsec: SimFwsec,
    gsp: Falcon,
    sec2: Falcon,
    jobs: [Option<(Duration, Job)>; 2],
    wpr2: Option<(u64, u64)>,
    gfw_ready_at: Option<Duration>,
    scratch_0e: u32,
    scratch_15: u32,
    bsi14: u32,
    fsp: FspState,
    rm: Option<RmState>,
    seq: SeqState,
    stats: BootStats,
    fb_size: u64,
    faults: VecDeque<BootFault>,
    /// SEC2 ran booter_load successfully and was not reset since (count of its resets then).
    sec2_loaded: Option<u32>,
    /// The sysmem flush registers: (LO, HI) offsets of each pair, and their values.
    flush: FlushRegs,
    /// The last unload kept GSP-RM's state in WPR2 (booter_unload refuses on Turing-Ada).
    state_kept: bool,
}

/// The sysmem flush registers of the simulated chip (published headers; the format follows
/// `kmemsysProgramSysmemFlushBuffer_GA100/_GH100/_GB10B`).
#[derive(Debug, Clone)]
pub(crate) struct FlushRegs {
    /// (LO, HI) offsets.
    pub(crate) pairs: Vec<(u32, u32)>,
    /// LO holds address >> 8 and HI bits 46:40 (Ampere/Ada); otherwise LO is address 31:0 and
    /// HI 51:32.
    shifted: bool,
    values: std::collections::HashMap<u32, u32>,
}

impl FlushRegs {
    pub(crate) fn for_chip(c: Chipset) -> Self {
        let (pairs, shifted) = match c.info().architecture {
            Architecture::Turing | Architecture::Ampere | Architecture::Ada => {
                // ga100/dev_fb.h NV_PFB_NISO_FLUSH_SYSMEM_ADDR / _HI.
                (vec![(0x10_0c10, 0x10_0c40)], true)
            }
            // gh100/dev_fb.h NV_PFB_FBHUB_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI.
            Architecture::Hopper => (vec![(0x10_0a34, 0x10_0a38)], false),
            // gb100/dev_hshub_base.h in HSHUB0 (0x870000), both pairs.
            Architecture::Blackwell if matches!(c, Chipset::GB100 | Chipset::GB102) => {
                (vec![(0x87_0e50, 0x87_0e54), (0x87_06c0, 0x87_06c4)], false)
            }
            // gb10b/dev_fbhub.h NV_PFB_FBHUB0_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI (GB20x).
            Architecture::Blackwell => (vec![(0x8a_1d58, 0x8a_1d5c)], false),
        };
        FlushRegs {
            pairs,
            shifted,
            values: Default::default(),
        }
    }

    fn claims(&self, o: u32) -> bool {
        self.pairs.iter().any(|&(lo, hi)| o == lo || o == hi)
    }

    /// The address each pair holds.
    fn addresses(&self) -> Vec<u64> {
        let v = |o: u32| self.values.get(&o).copied().unwrap_or(0) as u64;
        self.pairs
            .iter()
            .map(|&(lo, hi)| {
                if self.shifted {
                    ((v(hi) & 0x7f) << 40) | (v(lo) << 8)
                } else {
                    ((v(hi) & 0xf_ffff) << 32) | (v(lo) & 0xffff_ff00)
                }
            })
            .collect()
    }
}

fn has(faults: &VecDeque<BootFault>, f: BootFault) -> bool {
    faults.contains(&f)
}

/// The boot hardware; clone it to keep a handle after installing it.
#[derive(Clone)]
pub struct BootModel {
    inner: Arc<Mutex<Model>>,
}

impl std::fmt::Debug for BootModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootModel").finish_non_exhaustive()
    }
}

/// The `MmioEngine` of the boot hardware.
#[derive(Debug)]
pub struct BootEngine {
    model: BootModel,
    fsp: bool,
    therm: u32,
    flush_offs: Vec<u32>,
}

impl BootModel {
    /// Adds the boot hardware to `gpu` (whose chip must be the firmware's).
    pub fn install(gpu: &SimGpu, cfg: BootSimConfig) -> BootModel {
        let model = *gpu.model();
        let info = model.chipset.info();
        let fsp = info.boot == BootMethod::FspChainOfTrust;
        let therm = if matches!(
            model.chipset,
            Chipset::GB202 | Chipset::GB203 | Chipset::GB205 | Chipset::GB206 | Chipset::GB207
        ) {
            0xad_00bc
        } else {
            0x2_00bc
        };
        let faults = cfg.faults.iter().copied().collect();
        let m = BootModel {
            inner: Arc::new(Mutex::new(Model {
                cfg,
                model,
                fwsec: SimFwsec::new(),
                gsp: Falcon::new("GSP", GSP_BASE, true),
                sec2: Falcon::new("SEC2", SEC2_BASE, false),
                jobs: [None, None],
                wpr2: None,
                gfw_ready_at: Some(Duration::ZERO),
                scratch_0e: 0,
                scratch_15: 0,
                bsi14: 0,
                fsp: FspState {
                    emem: vec![0; 256],
                    ..Default::default()
                },
                rm: None,
                seq: SeqState::default(),
                stats: BootStats::default(),
                fb_size: (model.vram_mib as u64) << 20,
                faults,
                sec2_loaded: None,
                flush: FlushRegs::for_chip(model.chipset),
                state_kept: false,
            })),
        };
        {
            // Devinit / the FSP's secure boot may still run when the driver first looks.
            let pending = gpu.with_core(|c| {
                let m = m.lock();
                c.unknowns
                    .pick(unknown::GFW_AT_POWER_ON, &[Duration::ZERO, m.gfw_max()])
            });
            let mut g = m.lock();
            g.gfw_ready_at = Some(pending);
            if has(&g.faults, BootFault::GfwBootNeverCompletes) {
                g.gfw_ready_at = None;
            }
        }
        let flush_offs = m
            .lock()
            .flush
            .pairs
            .iter()
            .flat_map(|&(lo, hi)| [lo, hi])
            .collect();
        gpu.add_engine(Box::new(BootEngine {
            model: m.clone(),
            fsp,
            therm,
            flush_offs,
        }));
        gpu.add_engine(Box::new(bar1::Bar1BlockEngine::new(fsp)));
        m
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets the boot hardware do what is due by now (the FSP answering, the GSP-FMC handing
    /// over to GSP-RM, a suspend completing): real hardware does it whether or not the driver
    /// touches a register meanwhile (tinygrad waits for the status queue in system memory).
    pub fn settle(&self, core: &mut SimCore) {
        self.lock().settle(core);
    }

    /// The running GSP-RM emulator, if GSP-RM was started.
    pub fn emulator(&self) -> Option<GspEmulator> {
        self.lock().rm.as_ref().map(|r| r.emu.clone())
    }

    /// A snapshot of what the boot hardware saw.
    pub fn stats(&self) -> BootStats {
        self.lock().stats.clone()
    }

    /// What real hardware tolerates but a careful driver avoids (GSP-RM's failed asserts,
    /// an unload that leaves GSP-RM's state behind); nvbare's tests require none.
    pub fn warnings(&self) -> Vec<String> {
        self.lock().stats.warnings.clone()
    }

    /// The address the sysmem flush registers hold (of the first pair).
    pub fn sysmem_flush_addr(&self) -> u64 {
        self.lock().flush.addresses().first().copied().unwrap_or(0)
    }

    /// Failed checks and driver mistakes so far (including the falcons' and the emulator's).
    pub fn errors(&self) -> Vec<String> {
        let g = self.lock();
        let mut e = g.stats.errors.clone();
        e.extend(g.gsp.errors.iter().cloned());
        e.extend(g.sec2.errors.iter().cloned());
        if let Some(rm) = &g.rm {
            e.extend(rm.emu.errors().into_iter().map(|x| format!("GSP-RM: {x}")));
        }
        e
    }

    /// WPR2 as `[start, end)`, if up.
    pub fn wpr2(&self) -> Option<(u64, u64)> {
        self.lock().wpr2
    }

    /// Adds a fault from now on.
    pub fn inject(&self, f: BootFault) {
        let mut g = self.lock();
        if f == BootFault::GfwBootNeverCompletes {
            g.gfw_ready_at = None;
        }
        g.faults.push_back(f);
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The log image the emulated GSP-RM's log records point into (for the driver's decoder).
    pub fn log_image(&self) -> Vec<(u64, Vec<u8>)> {
        let g = self.lock();
        match &g.rm {
            Some(r) => r.emu.log_image(),
            None => GspEmulator::new(
                EmulatorConfig::new(MESSAGE_QUEUE_INIT_ARGUMENTS::default(), g.model),
                Box::new(MiniRm::new("")),
            )
            .log_image(),
        }
    }
}

impl Model {
    fn error(&mut self, e: String) {
        log::warn!("sim boot: {e}");
        if let Some(t) = &self.cfg.trace {
            t.line(&format!("boot error: {e}"));
        }
        self.stats.errors.push(e);
    }

    fn warning(&mut self, w: String) {
        log::warn!("sim boot: {w}");
        if let Some(t) = &self.cfg.trace {
            t.line(&format!("boot warning: {w}"));
        }
        self.stats.warnings.push(w);
    }

    /// The longest devinit / FSP secure boot of this chip (see [`unknown`]).
    fn gfw_max(&self) -> Duration {
        match (self.model.chipset.info().boot, self.model.chipset) {
            (BootMethod::Booter, _) => unknown::GFW_BOOT_MAX_BOOTER,
            (_, Chipset::GH100) => unknown::GFW_BOOT_MAX_HBM,
            _ => unknown::GFW_BOOT_MAX_GDDR,
        }
    }

    /// Records a boot step in the trace.
    fn phase(&self, what: &str) {
        if let Some(t) = &self.cfg.trace {
            t.line(&format!("boot {what}"));
        }
    }

    fn now(core: &SimCore) -> Duration {
        core.clock_now()
    }

    fn fsp_chip(&self) -> bool {
        self.model.chipset.info().boot == BootMethod::FspChainOfTrust
    }

    /// Advances everything whose time has come.
    fn settle(&mut self, core: &mut SimCore) {
        let now = Self::now(core);
        for i in 0..2 {
            if let Some((t, job)) = self.jobs[i].clone()
                && now >= t
            {
                self.jobs[i] = None;
                self.finish(core, i, job);
            }
        }
        if let Some((t, ans)) = self.fsp.answer_at.take() {
            if now >= t {
                for (i, w) in ans.iter().enumerate() {
                    if let Some(e) = self.fsp.emem.get_mut(i) {
                        *e = *w;
                    }
                }
                self.fsp.msgq_head = 0;
                self.fsp.msgq_tail = (ans.len() as u32 * 4).saturating_sub(4);
            } else {
                self.fsp.answer_at = Some((t, ans));
            }
        }
        if let Some(t) = self.fsp.target_mask_until
            && now >= t
        {
            self.fsp.target_mask_until = None;
        }
        if let Some((t, outcome)) = self.fsp.fmc_done_at
            && now >= t
        {
            self.fsp.fmc_done_at = None;
            self.fmc_finish(core, outcome);
        }
        if let Some((t, params, meta)) = self.fsp.fmc_halt_at
            && now >= t
        {
            self.fsp.fmc_halt_at = None;
            self.fmc_halt(core, params, meta);
        }
        self.settle_unload(core, now);
    }

    /// GSP-RM suspends some time after answering UNLOADING_GUEST_DRIVER, and (Hopper on) its
    /// core halts some time later, when the GSP-FMC/ACR takes WPR2 down.
    fn settle_unload(&mut self, core: &mut SimCore, now: Duration) {
        let noticed = self
            .rm
            .as_ref()
            .is_some_and(|r| r.unload.is_none() && r.emu.stats().unloaded);
        if noticed {
            let keeps_state = self.note_unload_request(core);
            let suspend = core
                .unknowns
                .pick(unknown::SUSPEND_TIME, &unknown::UNLOAD_TIMES);
            let halt = core
                .unknowns
                .pick(unknown::HALT_TIME, &unknown::UNLOAD_TIMES);
            if let Some(r) = &mut self.rm {
                r.unload = Some(UnloadPlan {
                    suspend_at: now + suspend,
                    halt_at: now + suspend + halt,
                    keeps_state,
                });
            }
        }
        let Some(plan) = self.rm.as_ref().and_then(|r| r.unload) else {
            return;
        };
        let suspended = self.rm.as_ref().is_some_and(|r| r.suspended);
        if !suspended && now >= plan.suspend_at && !has(&self.faults, BootFault::NoSuspend) {
            if let Some(r) = &mut self.rm {
                r.suspended = true;
            }
            self.stats.suspends += 1;
            self.phase("GSP-RM suspended (UNLOADING_GUEST_DRIVER)");
            self.check_flush_page(core, "suspends");
            self.gsp.set_reg(off::MAILBOX0, 0x8000_0000);
            self.state_kept = plan.keeps_state;
            if !self.fsp_chip() {
                self.gsp.riscv = Riscv::Halted;
            }
        }
        let suspended = self.rm.as_ref().is_some_and(|r| r.suspended);
        let halted = self.rm.as_ref().is_some_and(|r| r.halted);
        if self.fsp_chip() && suspended && !halted && now >= plan.halt_at {
            if let Some(r) = &mut self.rm {
                r.halted = true;
            }
            self.gsp.riscv = Riscv::Halted;
            if plan.keeps_state {
                self.phase("GSP halted; WPR2 stays up (GSP-RM kept its state)");
            } else {
                // The GSP-FMC/ACR tears WPR2 down when GSP-RM halts (kgspTeardown_GH100).
                self.wpr2 = None;
                self.phase("GSP halted; WPR2 down");
            }
        }
    }

    /// Reads the UNLOADING_GUEST_DRIVER GSP-RM just consumed and judges it; whether GSP-RM
    /// keeps its state in WPR2 afterwards (so that the next boot needs a reset).
    fn note_unload_request(&mut self, core: &mut SimCore) -> bool {
        let Some(init) = self.rm.as_ref().map(|r| r.init) else {
            return false;
        };
        let req = match last_command(core, &init) {
            Ok((function, body)) if function == NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER => {
                let u32_at = |o: usize| {
                    body.get(o..o + 4)
                        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                };
                UnloadRequest {
                    in_pm_transition: body.first().is_some_and(|&b| b != 0),
                    gc6_entering: body.get(1).is_some_and(|&b| b != 0),
                    new_level: u32_at(4),
                }
            }
            Ok((function, _)) => {
                self.error(format!(
                    "GSP-RM: the last command before the unload is function {function}, not                      UNLOADING_GUEST_DRIVER"
                ));
                return false;
            }
            Err(e) => {
                self.error(format!("GSP-RM: cannot read the unload request: {e}"));
                return false;
            }
        };
        self.stats.unloads.push(req);
        match req {
            // kgspUnloadRm(NORMAL, LEVEL_0): the unload after which RM boots GSP-RM again.
            UnloadRequest {
                in_pm_transition: false,
                gc6_entering: false,
                new_level: 0,
            } => false,
            UnloadRequest {
                in_pm_transition: false,
                gc6_entering: false,
                new_level: UNLOAD_LEVEL_FAST,
            } => {
                self.warning(
                    "UNLOADING_GUEST_DRIVER with FAST_UNLOAD: the open driver sends it only at \
                     system shutdown (\"skips rmDestruct in GSP\"); tinygrad resets the GPU \
                     before its next boot"
                        .into(),
                );
                core.unknowns.hard(unknown::FAST_UNLOAD_KEEPS_STATE)
            }
            r => {
                self.error(format!(
                    "UNLOADING_GUEST_DRIVER {r:?} asks GSP-RM to keep its state for a resume; \
                     an unload before a cold boot is (false, false, LEVEL_0)"
                ));
                true
            }
        }
    }

    /// GSP-RM's check of the sysmem flush registers (`kmemsysAssertSysmemFlushBufferValid_*`,
    /// at its start, and again when it suspends): zero is a failed assert (a warning: GSP-RM
    /// goes on, and tinygrad boots real GPUs without setting them); an address that is not
    /// mapped DMA memory makes every sysmembar flush fault (an error).
    fn check_flush_page(&mut self, core: &SimCore, when: &str) -> bool {
        let addrs = self.flush.addresses();
        let a = addrs.first().copied().unwrap_or(0);
        if addrs.iter().any(|&x| x != a) {
            self.error(format!(
                "GSP-RM {when}: the sysmem flush register pairs disagree ({addrs:#x?})"
            ));
            return false;
        }
        if a == 0 {
            self.warning(format!(
                "GSP-RM {when}: the sysmem flush registers are 0 \
                 (kmemsysAssertSysmemFlushBufferValid fails)"
            ));
            return false;
        }
        if core.host.read(a, &mut [0u8; 1]).is_err() {
            self.error(format!(
                "GSP-RM {when}: the sysmem flush page {a:#x} is not mapped DMA memory: its \
                 sysmembar flushes fault"
            ));
            return false;
        }
        true
    }

    fn fuse_version(v: u32) -> u32 {
        if v == 0 { 0 } else { 32 - v.leading_zeros() }
    }

    /// The CPU of falcon `idx` (0 GSP, 1 SEC2) was asked to start.
    fn start(&mut self, core: &mut SimCore, idx: usize) {
        let now = Self::now(core);
        let job = if idx == 0 {
            self.classify_gsp()
        } else {
            self.classify_sec2()
        };
        let time = match &job {
            Job::Rejected => {
                self.stats.brom_rejects += 1;
                self.phase("boot ROM rejected a ucode");
                BROM_REJECT_TIME
            }
            Job::Fwsec => core.unknowns.pick(unknown::FWSEC_TIME, &unknown::HS_TIMES),
            Job::BooterLoad if has(&self.faults, BootFault::BooterHang) => Duration::MAX / 4,
            Job::BooterLoad | Job::BooterUnload => {
                core.unknowns.pick(unknown::BOOTER_TIME, &unknown::HS_TIMES)
            }
            Job::Reload => core.unknowns.pick(unknown::RELOAD_TIME, &unknown::HS_TIMES),
            Job::Empty => EMPTY_PROGRAM_TIME,
        };
        let f = if idx == 0 {
            &mut self.gsp
        } else {
            &mut self.sec2
        };
        f.cpu = Cpu::Running(now + time);
        self.jobs[idx] = Some((now + time, job));
    }

    /// Checks the boot ROM parameters, the signature in DMEM and the secure IMEM of a
    /// heavy-secure ucode; `Err` says why the ROM refuses it.
    fn brom_check(
        f: &Falcon,
        code_va: u32,
        code: &[u8],
        dmem: &[u8],
        pkc: u32,
        engid: u32,
        ucode: u32,
    ) -> Result<(), String> {
        let name = f.name;
        if f.reg(off::BROM_PARAADDR0) != pkc {
            return Err(format!(
                "{name}: BROM_PARAADDR(0) {:#x}, the ucode's signature is at DMEM {pkc:#x}",
                f.reg(off::BROM_PARAADDR0)
            ));
        }
        if f.reg(off::BROM_ENGIDMASK) != engid || f.reg(off::BROM_CURR_UCODE_ID) & 0xff != ucode {
            return Err(format!(
                "{name}: BROM ENGIDMASK/UCODE_ID {:#x}/{} instead of {engid:#x}/{ucode}",
                f.reg(off::BROM_ENGIDMASK),
                f.reg(off::BROM_CURR_UCODE_ID)
            ));
        }
        if f.reg(off::MOD_SEL) & 0xff != 1 {
            return Err(format!("{name}: MOD_SEL is not RSA3K"));
        }
        if f.reg(off::BOOTVEC) != code_va {
            return Err(format!(
                "{name}: BOOTVEC {:#x}, the code starts at VA {code_va:#x}",
                f.reg(off::BOOTVEC)
            ));
        }
        match f.imem_by_va(code_va, code.len()) {
            Some(i) if i == code => {}
            Some(_) => return Err(format!("{name}: IMEM does not hold the ucode's code")),
            None => {
                return Err(format!(
                    "{name}: IMEM has no blocks tagged for VA {code_va:#x}"
                ));
            }
        }
        if !f.imem_secure_by_va(code_va, code.len()) {
            return Err(format!("{name}: the code was not loaded secure"));
        }
        if f.dmem.get(..dmem.len()) != Some(dmem) {
            let at = f
                .dmem
                .iter()
                .zip(dmem)
                .position(|(a, b)| a != b)
                .unwrap_or(f.dmem.len().min(dmem.len()));
            return Err(format!(
                "{name}: DMEM differs from the ucode's data patched with the signature for the \
                 fuse version (first at byte {at:#x} of {:#x})",
                dmem.len()
            ));
        }
        Ok(())
    }

    fn classify_gsp(&mut self) -> Job {
        let f = &self.gsp;
        if f.riscv_selected() {
            self.error("GSP falcon CPU started with the RISC-V core selected".into());
            return Job::Rejected;
        }
        if f.imem.iter().all(|&b| b == 0) {
            return Job::Empty;
        }
        let fw = &self.fwsec;
        let fuse = Self::fuse_version(self.cfg.gsp_fuse);
        let init_cmd = u32::from_le_bytes(
            f.dmem[nvbare_gsp_firmware::testutil::vbios::MAPPER + 44..][..4]
                .try_into()
                .unwrap_or([0; 4]),
        );
        let expected = match init_cmd {
            0x15 => {
                let c = nvbare_gsp_firmware::testutil::vbios::CMD_IN;
                let w = |i: usize| {
                    u32::from_le_bytes(
                        f.dmem[c + i * 4..c + i * 4 + 4]
                            .try_into()
                            .unwrap_or([0; 4]),
                    )
                };
                // frtsRegionDesc starts at dword 6 of the command: version, size, offset4K, size4K.
                let (offset, size) = ((w(8) as u64) << 12, (w(9) as u64) << 12);
                fw.dmem_frts(offset, size, fuse)
            }
            0x19 => fw.dmem_sb(fuse),
            _ => None,
        };
        // FWSECLIC_FRTS_CMD is 44 bytes of fields padded to 48 by its u64
        // (kernel_gsp_frts_tu102.c): RM copies 48, tinygrad 44 (packed). FWSEC reads the fields
        // only, so the padding is whatever the DMEM held.
        let expected = expected.map(|mut d| {
            if init_cmd == 0x15 {
                let p = nvbare_gsp_firmware::testutil::vbios::CMD_IN + 44;
                if let (Some(dst), Some(src)) = (d.get_mut(p..p + 4), f.dmem.get(p..p + 4)) {
                    dst.copy_from_slice(src);
                }
            }
            d
        });
        let Some(dmem) = expected else {
            self.error(format!(
                "GSP: FWSEC with init_cmd {init_cmd:#x} (or no signature for fuse version {fuse})"
            ));
            return Job::Rejected;
        };
        let r = Self::brom_check(
            f,
            0,
            &fw.imem,
            &dmem,
            SimFwsec::PKC as u32,
            SimFwsec::ENGINE_ID_MASK,
            SimFwsec::UCODE_ID,
        );
        match r {
            Ok(()) => Job::Fwsec,
            Err(e) => {
                self.error(e);
                Job::Rejected
            }
        }
    }

    fn classify_sec2(&mut self) -> Job {
        // A second start of a halted booter_load without a reset: the CORE_RESUME reload.
        if self.sec2.cpu == Cpu::Halted && self.sec2_loaded == Some(self.sec2.resets) {
            return Job::Reload;
        }
        let fuse = Self::fuse_version(self.cfg.sec2_fuse);
        let fw = self.cfg.firmware.clone();
        for (b, job) in [
            (&fw.booter_load, Job::BooterLoad),
            (&fw.booter_unload, Job::BooterUnload),
        ] {
            let Some(b) = b else { continue };
            let (va, len) = b.code;
            let Some(code) = b.image.get(va as usize..(va + len) as usize) else {
                continue;
            };
            if self.sec2.imem_by_va(va, code.len()).as_deref() != Some(code) {
                continue;
            }
            let Some(img) = b.patched(fuse) else {
                self.error(format!("SEC2: no booter signature for fuse version {fuse}"));
                return Job::Rejected;
            };
            let (doff, dlen) = b.data;
            let dmem = img
                .get(doff as usize..(doff + dlen) as usize)
                .unwrap_or(&[]);
            let code = img.get(va as usize..(va + len) as usize).unwrap_or(&[]);
            let r = Self::brom_check(
                &self.sec2,
                va,
                code,
                dmem,
                b.patch_loc.wrapping_sub(doff),
                b.engine_id_mask,
                b.ucode_id,
            );
            return match r {
                Ok(()) => job,
                Err(e) => {
                    self.error(e);
                    Job::Rejected
                }
            };
        }
        self.error("SEC2: started with IMEM holding neither booter".into());
        Job::Rejected
    }

    fn finish(&mut self, core: &mut SimCore, idx: usize, job: Job) {
        match job {
            Job::Rejected | Job::Empty => {}
            Job::Fwsec => self.fwsec_done(),
            Job::BooterLoad => self.booter_load_done(core),
            Job::BooterUnload => self.booter_unload_done(),
            Job::Reload => self.reload_done(core),
        }
        let f = if idx == 0 {
            &mut self.gsp
        } else {
            &mut self.sec2
        };
        f.cpu = Cpu::Halted;
    }

    fn fwsec_done(&mut self) {
        let c = nvbare_gsp_firmware::testutil::vbios::CMD_IN;
        let d = &self.gsp.dmem;
        let w =
            |i: usize| u32::from_le_bytes(d[c + i * 4..c + i * 4 + 4].try_into().unwrap_or([0; 4]));
        let init_cmd = u32::from_le_bytes(
            d[nvbare_gsp_firmware::testutil::vbios::MAPPER + 44..][..4]
                .try_into()
                .unwrap_or([0; 4]),
        );
        if init_cmd == 0x19 {
            self.scratch_15 = 0;
            self.stats.fwsec_sb += 1;
            self.phase("FWSEC-SB ran");
            return;
        }
        let (offset, size) = ((w(8) as u64) << 12, (w(9) as u64) << 12);
        if self.wpr2.is_some() {
            // FWSEC refuses to set FRTS up twice: the GPU needs a reset.
            self.scratch_0e = (err::FRTS_WPR2_UP as u32) << 16;
            self.stats.fwsec_refused += 1;
            self.phase("FWSEC-FRTS refused (WPR2 already up)");
            return;
        }
        if offset == 0 || size != 1 << 20 || offset + size > self.fb_size {
            self.scratch_0e = (err::FRTS_BAD_REGION as u32) << 16;
            self.error(format!(
                "FWSEC-FRTS region {offset:#x}+{size:#x} outside FB"
            ));
            return;
        }
        self.scratch_0e = 0;
        self.wpr2 = Some((offset, offset + size));
        self.stats.fwsec_frts += 1;
        self.phase("FWSEC-FRTS ran: WPR2 up");
    }

    fn read_host<T: FromBytes>(core: &SimCore, addr: u64) -> Option<T> {
        let mut b = vec![0u8; std::mem::size_of::<T>()];
        core.host.read(addr, &mut b).ok()?;
        T::read_from_bytes(&b).ok()
    }

    /// Checks the WPR metadata the booter / GSP-FMC is given; `Err((code, why))`.
    fn check_meta(
        &mut self,
        core: &SimCore,
        addr: u64,
        fmc: bool,
    ) -> Result<GspFwWprMeta, (u32, String)> {
        let codes = if fmc {
            [
                err::FMC_DMA,
                err::FMC_META,
                err::FMC_IMAGE,
                err::FMC_IMAGE,
                err::FMC_IMAGE,
                err::FMC_META,
            ]
        } else {
            [
                err::BOOTER_META_DMA,
                err::BOOTER_META_MAGIC,
                err::BOOTER_IMAGE,
                err::BOOTER_BOOTLOADER,
                err::BOOTER_SIGNATURE,
                err::BOOTER_LAYOUT,
            ]
        };
        if has(&self.faults, BootFault::CorruptWprMeta) {
            let mut b = [0u8; 1];
            if core.host.read(addr, &mut b).is_ok() {
                let _ = core.host.write(addr, &[b[0] ^ 0x10]);
            }
        }
        let m: GspFwWprMeta = Self::read_host(core, addr).ok_or((
            codes[0],
            format!("WPR metadata at {addr:#x} unreadable (DMA fault)"),
        ))?;
        if m.magic != GSP_FW_WPR_META_MAGIC || m.revision != GSP_FW_WPR_META_REVISION {
            return Err((
                codes[1],
                format!("WPR metadata magic {:#x} revision {}", m.magic, m.revision),
            ));
        }
        let fw = self.cfg.firmware.clone();
        // The GSP-RM image, walked through the radix3 tables as the bootloader does.
        if m.sizeOfRadix3Elf != fw.gsp_image_len {
            return Err((
                codes[2],
                format!(
                    "sizeOfRadix3Elf {:#x}, the image is {:#x}",
                    m.sizeOfRadix3Elf, fw.gsp_image_len
                ),
            ));
        }
        let digest = walk_radix3(core, m.sysmemAddrOfRadix3Elf, m.sizeOfRadix3Elf)
            .map_err(|e| (codes[2], format!("radix3 walk: {e}")))?;
        if digest != fw.gsp_image_sha256 {
            return Err((
                codes[2],
                "the radix3-mapped GSP-RM image differs from the real .fwimage".into(),
            ));
        }
        // Bootloader.
        let (c, d, man, _) = fw.bootloader_desc;
        let mut bl = vec![0u8; fw.bootloader.len()];
        let read_ok = core.host.read(m.sysmemAddrOfBootloader, &mut bl).is_ok();
        if !read_ok
            || m.sizeOfBootloader != fw.bootloader.len() as u64
            || bl != fw.bootloader
            || (
                m.bootloaderCodeOffset,
                m.bootloaderDataOffset,
                m.bootloaderManifestOffset,
            ) != (c as u64, d as u64, man as u64)
        {
            return Err((codes[3], "bootloader image, size or code/data/manifest offsets differ from the real bootloader".into()));
        }
        // Signature.
        let mut sig = vec![0u8; fw.gsp_signature.len()];
        if m.sizeOfSignature != sig.len() as u64
            || core.host.read(m.sysmemAddrOfSignature, &mut sig).is_err()
            || sig != fw.gsp_signature
        {
            return Err((
                codes[4],
                format!(
                    "GSP-RM signature is not the real .fwsignature for {}",
                    fw.chip
                ),
            ));
        }
        let layout_ok = if fmc {
            m.frtsSize == 1 << 20
                && m.vgaWorkspaceSize >= 128 << 10
                && m.gspFwHeapSize >= 88 << 20
                && m.nonWprHeapSize != 0
        } else {
            let ordered = m.nonWprHeapOffset == m.gspFwRsvdStart
                && m.nonWprHeapOffset + m.nonWprHeapSize <= m.gspFwWprStart
                && m.gspFwWprStart < m.gspFwHeapOffset
                && m.gspFwHeapOffset + m.gspFwHeapSize <= m.gspFwOffset
                && m.gspFwOffset + m.sizeOfRadix3Elf <= m.bootBinOffset
                && m.bootBinOffset + m.sizeOfBootloader <= m.frtsOffset
                && m.frtsOffset + m.frtsSize <= m.gspFwWprEnd
                && m.gspFwWprEnd <= m.vgaWorkspaceOffset
                && m.vgaWorkspaceOffset + m.vgaWorkspaceSize <= m.fbSize;
            let aligned = m.gspFwOffset.is_multiple_of(0x1_0000)
                && m.bootBinOffset.is_multiple_of(0x1000)
                && m.gspFwHeapOffset.is_multiple_of(1 << 20)
                && m.gspFwWprStart.is_multiple_of(0x2_0000)
                && m.gspFwWprEnd.is_multiple_of(0x2_0000);
            ordered && aligned && m.fbSize == self.fb_size && m.gspFwHeapSize >= 88 << 20
        };
        if !layout_ok {
            return Err((
                codes[5],
                format!("inconsistent FB layout in the WPR metadata: {m:?}"),
            ));
        }
        Ok(m)
    }

    fn booter_load_done(&mut self, core: &mut SimCore) {
        let (m0, m1) = self.sec2.mailboxes();
        let addr = (m1 as u64) << 32 | m0 as u64;
        let meta = match self.check_meta(core, addr, false) {
            Ok(m) => m,
            Err((code, why)) => {
                self.error(format!("booter_load: {why}"));
                self.sec2.set_reg(off::MAILBOX0, code);
                return;
            }
        };
        match self.wpr2 {
            Some((lo, _)) if lo == meta.frtsOffset => {}
            _ => {
                self.error(
                    "booter_load: FRTS/WPR2 not set up at frtsOffset (FWSEC-FRTS missing)".into(),
                );
                self.sec2.set_reg(off::MAILBOX0, err::BOOTER_NO_FRTS);
                return;
            }
        }
        let (g0, g1) = self.gsp.mailboxes();
        let libos = (g1 as u64) << 32 | g0 as u64;
        if !self.gsp.riscv_selected() || self.gsp.riscv != Riscv::Off || libos == 0 {
            self.error("booter_load: the GSP is not reset into RISC-V with the LIBOS arguments in its mailboxes".into());
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_GSP_NOT_READY);
            return;
        }
        self.wpr2 = Some((meta.gspFwWprStart, meta.gspFwWprEnd));
        self.stats.booter_load += 1;
        self.phase("booter_load ran: GSP-RM loaded into WPR2");
        self.sec2.set_reg(off::MAILBOX0, 0);
        self.sec2_loaded = Some(self.sec2.resets);
        self.start_gsp_rm(core, libos);
    }

    fn booter_unload_done(&mut self) {
        if self.sec2.mailboxes() != (0xff, 0xff) {
            self.error(format!(
                "booter_unload: mailboxes {:x?}, expected (0xff, 0xff)",
                self.sec2.mailboxes()
            ));
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_UNLOAD_ARGS);
            return;
        }
        if self.rm.as_ref().is_some_and(|r| !r.suspended) {
            self.error("booter_unload while GSP-RM runs (no UNLOADING_GUEST_DRIVER?)".into());
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_GSP_RUNNING);
            return;
        }
        if self.state_kept && self.rm.is_some() {
            self.phase("booter_unload refused: GSP-RM kept its state (WPR2 stays up)");
            self.sec2
                .set_reg(off::MAILBOX0, err::BOOTER_UNLOAD_STATE_KEPT);
            return;
        }
        self.wpr2 = None;
        self.rm = None;
        self.stats.booter_unload += 1;
        self.phase("booter_unload ran: WPR2 down");
        self.sec2.set_reg(off::MAILBOX0, 0);
    }

    /// Starts the GSP RISC-V core and GSP-RM with the LIBOS arguments at `libos`.
    fn start_gsp_rm(&mut self, core: &mut SimCore, libos: u64) {
        if has(&self.faults, BootFault::RiscvNeverActive) {
            return;
        }
        self.gsp.riscv = Riscv::Active;
        self.stats.gsp_rm_starts += 1;
        self.phase("GSP-RM started: found its queues from the LIBOS arguments");
        if self.check_flush_page(core, "starts") {
            self.stats.flush_page_ok += 1;
        }
        // GSP-RM binds BAR1 to its own tables (just below the end of FB, in its reservation).
        let fsp = self.model.chipset.info().boot == BootMethod::FspChainOfTrust;
        bar1::gsp_binds_bar1(core, fsp, ((self.fb_size - (4 << 20)) >> 12) as u32);
        let (init, logs) = match find_rm_args(core, libos) {
            Ok(x) => x,
            Err(e) => {
                // GSP-RM crashes before it creates its queues: no INIT_DONE ever comes.
                self.error(format!("GSP-RM cannot start: {e}"));
                return;
            }
        };
        let booter = self.model.chipset.info().boot == BootMethod::Booter;
        let mut ecfg = EmulatorConfig::new(init, self.model);
        ecfg.send_init_done = false;
        ecfg.trace = self.cfg.trace.clone();
        let emu = GspEmulator::new(ecfg, (self.cfg.rm)(&self.model));
        for f in &self.cfg.gsp_faults {
            emu.inject(*f);
        }
        for (name, addr, size) in &logs {
            emu.attach_log(name, *addr, *size);
        }
        // Whether a cold boot sends a script is not public: both, drawn in random mode (a
        // fault in the script needs one).
        let script = booter
            && (has(&self.faults, BootFault::SequencerPollNeverReady)
                || core
                    .unknowns
                    .pick(unknown::SEQUENCER_AT_COLD_BOOT, &[true, false, true]));
        if script {
            emu.queue_event(EmuEvent::RunCpuSequencer(sequencer_script()));
            self.stats.sequencer_scripts += 1;
            self.seq = SeqState {
                started_at: Some(Self::now(core)),
                ..Default::default()
            };
            self.gsp.set_reg(PGSP_MAILBOX + 4, 0x34ff);
        }
        emu.start(core);
        let doorbell = emu.engine();
        self.rm = Some(RmState {
            emu,
            doorbell,
            libos_args: libos,
            init,
            suspended: false,
            init_sent: false,
            unload: None,
            halted: false,
        });
        self.state_kept = false;
        if !script {
            self.send_init_done(core);
        }
    }

    fn send_init_done(&mut self, core: &mut SimCore) {
        if has(&self.faults, BootFault::NoInitDone) {
            return;
        }
        let result = self
            .faults
            .iter()
            .find_map(|f| match f {
                BootFault::InitDoneError(r) => Some(*r),
                _ => None,
            })
            .unwrap_or(0);
        if let Some(rm) = &mut self.rm
            && !rm.init_sent
        {
            rm.init_sent = true;
            rm.emu.queue_event(EmuEvent::InitDone(result));
            rm.emu.pump(core);
        }
    }

    /// SEC2 reloaded GSP-RM for the sequencer's CORE_RESUME.
    fn reload_done(&mut self, core: &mut SimCore) {
        let (g0, g1) = self.gsp.mailboxes();
        let libos = (g1 as u64) << 32 | g0 as u64;
        let expected = self.rm.as_ref().map(|r| r.libos_args);
        if !self.gsp.riscv_selected() || self.gsp.riscv != Riscv::Off || Some(libos) != expected {
            self.error(
                "SEC2 reload: the GSP is not reset into RISC-V with the LIBOS arguments".into(),
            );
            self.sec2.set_reg(off::MAILBOX0, err::RELOAD_GSP_NOT_READY);
            return;
        }
        self.bsi14 |= 1 << 26;
        self.sec2.set_reg(off::MAILBOX0, 0);
        self.gsp.riscv = Riscv::Active;
        self.seq.resume = true;
        let s = &self.seq;
        let mut missing = String::new();
        for (ok, what) in [
            (s.write_ok, "REG_WRITE"),
            (s.modify_ok, "REG_MODIFY"),
            (s.poll_satisfied_at.is_some(), "REG_POLL"),
            (s.delay_ok, "DELAY_US"),
            (s.core_reset, "CORE_RESET"),
            (s.core_start, "CORE_START"),
            (s.halt_waited, "CORE_WAIT_FOR_HALT"),
        ] {
            if !ok {
                let _ = write!(missing, " {what}");
            }
        }
        if missing.is_empty() {
            self.stats.sequencer_ok += 1;
            self.phase("CPU-sequencer script executed as expected");
            self.send_init_done(core);
        } else {
            self.error(format!("CPU sequencer not executed correctly:{missing}"));
            if let Some(rm) = &self.rm {
                rm.emu.log_fault_code(core, 0x5e0);
            }
        }
    }

    /// The chain-of-trust message arrived (QUEUE_HEAD written).
    fn fsp_command(&mut self, core: &mut SimCore) {
        let words = (self.fsp.queue_tail / 4 + 1) as usize;
        let pkt: Vec<u8> = self
            .fsp
            .emem
            .iter()
            .take(words)
            .flat_map(|w| w.to_le_bytes())
            .collect();
        // The FSP consumed the packet.
        self.fsp.queue_head = self.fsp.queue_tail;
        let answer =
            |code: u32, ty: u32| -> Vec<u32> { vec![0xc000_0000, 0x1510_de7e, 0, ty, code] };
        if has(&self.faults, BootFault::FspNoResponse) {
            return;
        }
        let now = Self::now(core);
        let code = self.fsp_check_cot(core, &pkt);
        let code = self
            .faults
            .iter()
            .find_map(|f| match f {
                BootFault::FspError(c) => Some(*c),
                _ => None,
            })
            .unwrap_or(code);
        let answer_in = core
            .unknowns
            .pick(unknown::FSP_ANSWER_TIME, &unknown::FSP_TIMES);
        self.fsp.answer_at = Some((now + answer_in, answer(code, 0x14)));
        if code == 0 {
            self.stats.cot_accepted += 1;
            self.phase("FSP accepted the chain-of-trust message");
            let cot = NVDM_PAYLOAD_COT::read_from_bytes(&pkt[8..8 + 860]).ok();
            let params = cot.map(|c| c.gspBootArgsSysmemOffset).unwrap_or(0);
            self.fsp.boot_params = params;
            self.fsp.cot_params = params;
            // The FSP hands the GSP-FMC its arguments in the GSP mailboxes and locks the GSP's
            // PRIV target mask until its ROM has started.
            self.gsp.set_reg(off::MAILBOX0, params as u32);
            self.gsp.set_reg(off::MAILBOX1, (params >> 32) as u32);
            let mask = core
                .unknowns
                .pick(unknown::TARGET_MASK_TIME, &unknown::FSP_TIMES);
            let released = now + answer_in + mask;
            self.fsp.target_mask_until =
                Some(if has(&self.faults, BootFault::TargetMaskNeverReleased) {
                    Duration::MAX
                } else {
                    released
                });
            self.fsp.lockdown = true;
            // The GSP-FMC runs on the GSP's RISC-V core from now on.
            self.gsp.riscv = Riscv::Active;
            let outcome =
                self.fmc_check(core, params, cot.map(|c| c.frtsVidmemOffset).unwrap_or(0));
            let outcome = match self.faults.iter().find_map(|f| match f {
                BootFault::FmcError(c) => Some(*c),
                _ => None,
            }) {
                Some(c) => Err(c),
                None => outcome,
            };
            if has(&self.faults, BootFault::LockdownNeverReleased)
                || has(&self.faults, BootFault::TargetMaskNeverReleased)
            {
                return;
            }
            let fmc = core
                .unknowns
                .pick(unknown::FMC_BOOT_TIME, &unknown::FSP_TIMES);
            self.fsp.fmc_done_at = Some((released + fmc, outcome));
        }
    }

    /// Checks a COT packet as the FSP would; the `FSP_ERR_*` code (0 = accepted).
    fn fsp_check_cot(&mut self, core: &SimCore, pkt: &[u8]) -> u32 {
        use nvbare_core::gsp::boot::abi::{
            FSP_ERR_IFS_ERR_INVALID_DATA as BAD, FSP_ERR_IFS_ERR_INVALID_STATE,
        };
        let w = |i: usize| {
            u32::from_le_bytes(
                pkt.get(i * 4..i * 4 + 4)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0; 4]),
            )
        };
        if w(0) >> 30 != 3 || w(1) & 0xff_ffff != 0x10_de7e || w(1) >> 24 != 0x14 {
            self.error(format!(
                "FSP: not a single-packet NVDM COT message ({:#x} {:#x})",
                w(0),
                w(1)
            ));
            return nvbare_core::gsp::boot::abi::FSP_ERR_IFS_ERR_NOT_SUPPORTED;
        }
        let Some(cot) = pkt
            .get(8..8 + 860)
            .and_then(|b| NVDM_PAYLOAD_COT::read_from_bytes(b).ok())
        else {
            self.error(format!(
                "FSP: COT payload of {} bytes, 860 expected",
                pkt.len().saturating_sub(8)
            ));
            return BAD;
        };
        // Up to a dword of padding after the payload is taken: tinygrad always pads the packet
        // (to 872 bytes) and its COT boots real Blackwell GPUs; RM sends exactly 868.
        if !(8 + 860..=8 + 860 + 4).contains(&pkt.len()) {
            self.error(format!("FSP: COT packet of {} bytes", pkt.len()));
            return BAD;
        }
        if self.wpr2.is_some() {
            return FSP_ERR_IFS_ERR_INVALID_STATE;
        }
        let want_version = if self.model.chipset.info().architecture == Architecture::Hopper {
            1
        } else {
            2
        };
        let (version, size) = (cot.version, cot.size);
        if version != want_version || size != 860 {
            self.error(format!(
                "FSP: COT version {version} size {size}, expected {want_version}/860"
            ));
            return BAD;
        }
        let Some(fmc) = self.cfg.firmware.fmc.clone() else {
            return BAD;
        };
        let mut img = vec![0u8; fmc.image.len()];
        let fmc_addr = cot.gspFmcSysmemOffset;
        if core.host.read(fmc_addr, &mut img).is_err() || img != fmc.image {
            self.error("FSP: the image at gspFmcSysmemOffset is not the real GSP-FMC".into());
            return BAD;
        }
        let hash = cot.hash384;
        if SimFirmware::sha384(&img) != hash || hash != fmc.hash {
            self.error("FSP: hash384 is not the FMC image's SHA-384".into());
            return BAD;
        }
        let (pk, sig) = (cot.publicKey, cot.signature);
        if pk != fmc.public_key || sig != fmc.signature {
            self.error("FSP: publicKey/signature are not the FMC's".into());
            return BAD;
        }
        let (off, sz) = (cot.frtsVidmemOffset, cot.frtsVidmemSize);
        if sz != 1 << 20 || off < 2 << 20 || off + (sz as u64) > self.fb_size {
            self.error(format!("FSP: FRTS {off:#x}/{sz:#x} from the end of FB"));
            return BAD;
        }
        0
    }

    /// What the GSP-FMC will find: `Ok` or its MAILBOX0 error code.
    fn fmc_check(&mut self, core: &SimCore, params_addr: u64, frts_off: u64) -> Result<(), u32> {
        let Some(p): Option<GSP_FMC_BOOT_PARAMS> = Self::read_host(core, params_addr) else {
            self.error("GSP-FMC: boot parameters unreadable".into());
            return Err(err::FMC_DMA);
        };
        let b = p.bootGspRmParams;
        let r = p.gspRmParams;
        self.stats.fmc_targets.push((b.target, r.target));
        if !fmc_targets_ok(b.target, r.target)
            || b.gspRmDescSize != 256
            || b.bIsGspRmBoot != 1
            || r.bootArgsOffset == 0
        {
            self.error(format!("GSP-FMC: bad GSP_FMC_BOOT_PARAMS {p:?}"));
            return Err(err::FMC_BOOT_PARAMS);
        }
        let meta = match self.check_meta(core, b.gspRmDescOffset, true) {
            Ok(m) => m,
            Err((code, why)) => {
                self.error(format!("GSP-FMC: {why}"));
                return Err(code);
            }
        };
        // ACR places WPR2 below FRTS, top down (kgspCalculateFbLayout_GH100's picture).
        let frts_end = self.fb_size - frts_off;
        let frts = frts_end - (1 << 20);
        let mut at = frts - meta.sizeOfBootloader;
        at = (at - meta.sizeOfRadix3Elf) & !0xffff;
        at = (at - meta.gspFwHeapSize) & !0xf_ffff;
        let wpr_start = at - (1 << 20);
        self.fsp.boot_params = r.bootArgsOffset;
        self.fsp.meta_addr = b.gspRmDescOffset;
        self.wpr2 = Some((wpr_start, frts_end));
        Ok(())
    }

    fn fmc_finish(&mut self, core: &mut SimCore, outcome: Result<(), u32>) {
        match outcome {
            Err(code) => {
                self.gsp.set_reg(off::MAILBOX0, code);
                self.gsp.set_reg(off::MAILBOX1, 0);
                self.wpr2 = None;
                // It goes on running (and reading its boot memory) for a while before its core
                // halts; how long is not public.
                let t = core
                    .unknowns
                    .pick(unknown::FMC_ERROR_HALT, &unknown::FMC_ERROR_HALT_TIMES);
                let params = self.fsp.cot_params;
                let meta = self.fsp.meta_addr;
                self.fsp.fmc_halt_at = Some((Self::now(core) + t, params, meta));
            }
            Ok(()) => {
                self.gsp.set_reg(off::MAILBOX0, 0);
                self.gsp.set_reg(off::MAILBOX1, 0);
                self.fsp.lockdown = false;
                // The GSP-FMC hands the core to GSP-RM (or, with RiscvNeverActive, stops).
                self.gsp.riscv = Riscv::Halted;
                let libos = self.fsp.boot_params;
                self.start_gsp_rm(core, libos);
            }
        }
    }

    /// A GSP-FMC that failed halts; its last reads are of its boot parameters and the WPR
    /// metadata, which the driver must not have freed yet.
    fn fmc_halt(&mut self, core: &SimCore, params: u64, meta: u64) {
        for (what, addr, len) in [
            (
                "boot parameters",
                params,
                std::mem::size_of::<GSP_FMC_BOOT_PARAMS>(),
            ),
            ("WPR metadata", meta, std::mem::size_of::<GspFwWprMeta>()),
        ] {
            if addr != 0 && core.host.read(addr, &mut vec![0u8; len]).is_err() {
                self.error(format!(
                    "GSP-FMC: its {what} at {addr:#x} were freed while it still ran (the driver \
                     must wait for the GSP RISC-V core to halt before freeing its boot memory)"
                ));
            }
        }
        self.gsp.riscv = Riscv::Halted;
        self.phase("GSP-FMC halted after its error");
    }
}

/// Reads the radix3 tables from `root` as the bootloader does and hashes the image pages.
fn walk_radix3(core: &SimCore, root: u64, size: u64) -> Result<[u8; 32], String> {
    use sha2::{Digest, Sha256};
    let entry = |table: u64, i: u64| -> Result<u64, String> {
        let mut b = [0u8; 8];
        core.host
            .read(table + i * 8, &mut b)
            .map_err(|e| format!("table page {table:#x}: {e}"))?;
        match u64::from_le_bytes(b) {
            0 => Err(format!("zero entry {i} in table page {table:#x}")),
            a => Ok(a),
        }
    };
    let pages = size.div_ceil(4096);
    let mut h = Sha256::new();
    let mut page = vec![0u8; 4096];
    let (mut l1, mut l2) = (None, None);
    for j in 0..pages {
        let l1_no = j / (512 * 512);
        let l2_no = j / 512;
        let l1a = match l1 {
            Some((n, a)) if n == l1_no => a,
            _ => {
                let a = entry(root, l1_no)?;
                l1 = Some((l1_no, a));
                a
            }
        };
        let l2a = match l2 {
            Some((n, a)) if n == l2_no => a,
            _ => {
                let a = entry(l1a, l2_no % 512)?;
                l2 = Some((l2_no, a));
                a
            }
        };
        let data = entry(l2a, j % 512)?;
        core.host
            .read(data, &mut page)
            .map_err(|e| format!("image page {j}: {e}"))?;
        let n = (size - j * 4096).min(4096) as usize;
        h.update(&page[..n]);
    }
    Ok(h.finalize().into())
}

/// Log regions GSP-RM writes: (name, bus address, size).
type LogRegions = Vec<(String, u64, u64)>;

/// Finds the message queues as GSP-RM does: LIBOS arguments → "RMARGS" →
/// `GSP_ARGUMENTS_CACHED` → `MESSAGE_QUEUE_INIT_ARGUMENTS`; also the log buffers.
fn find_rm_args(
    core: &SimCore,
    libos: u64,
) -> Result<(MESSAGE_QUEUE_INIT_ARGUMENTS, LogRegions), String> {
    let mut rmargs = None;
    let mut logs = Vec::new();
    for i in 0..128u64 {
        let mut b = [0u8; 32];
        core.host
            .read(libos + i * 32, &mut b)
            .map_err(|e| format!("LIBOS argument {i}: {e}"))?;
        let a = LibosMemoryRegionInitArgument::read_from_bytes(&b).map_err(|_| "LIBOS argument")?;
        if a.id8 == 0 {
            break;
        }
        if a.kind != 1 || a.loc != 1 {
            return Err(format!(
                "LIBOS region {i}: kind {} loc {} (CONTIGUOUS/SYSMEM expected)",
                a.kind, a.loc
            ));
        }
        let name: String = a
            .id8
            .to_be_bytes()
            .iter()
            .filter(|&&c| c != 0)
            .map(|&c| c as char)
            .collect();
        if i == 0 && a.id8 != libos_id8("LOGINIT") {
            return Err(format!(
                "the first LIBOS region is {name}, LOGINIT must come first"
            ));
        }
        if a.id8 == libos_id8("RMARGS") {
            rmargs = Some(a);
        } else if name.starts_with("LOG") {
            logs.push((name, a.pa, a.size));
        }
    }
    let r = rmargs.ok_or("no RMARGS region in the LIBOS arguments")?;
    if r.size < std::mem::size_of::<GSP_ARGUMENTS_CACHED>() as u64 {
        return Err(format!("RMARGS region of {} bytes", r.size));
    }
    let args: GSP_ARGUMENTS_CACHED =
        Model::read_host(core, r.pa).ok_or("GSP_ARGUMENTS_CACHED unreadable")?;
    if args.bDmemStack != 1 {
        return Err("GSP_ARGUMENTS_CACHED.bDmemStack is not 1 (r570 needs it)".into());
    }
    if args.gpuInstance != 0
        || args.srInitArguments.oldLevel != 0
        || args.srInitArguments.bInPMTransition != 0
    {
        return Err("GSP_ARGUMENTS_CACHED asks for a resume, not a cold boot".into());
    }
    Ok((args.messageQueueInitArguments, logs))
}

/// The synthetic CPU-sequencer script (see the module documentation).
fn sequencer_script() -> Vec<u32> {
    let mb = |i: u32| GSP_BASE + PGSP_MAILBOX + 4 * i;
    vec![
        0,
        mb(0),
        0xcafe_0001, // REG_WRITE
        // REG_MODIFY(addr, mask, val) with val == mask: the register's other bits must stay.
        // What GSP-RM really sends is not public; tinygrad, which boots real Ada GPUs, reads
        // the operands as (addr, val, mask), so the real scripts' REG_MODIFYs cannot tell the
        // two orders apart (docs/witness.md). The operand order itself is tested on the
        // driver's handler directly.
        1,
        mb(1),
        0xff00,
        0xff00,
        2,
        mb(3),
        0xffff,
        0x600d,
        2000,
        0x5e0, // REG_POLL (timeout 2 ms)
        3,
        SEQ_DELAY_US, // DELAY_US
        4,
        mb(0),
        0, // REG_STORE
        5, // CORE_RESET
        6, // CORE_START
        7, // CORE_WAIT_FOR_HALT
        8, // CORE_RESUME
    ]
}

/// Whether the GSP-FMC can use these `GSP_FMC_BOOT_PARAMS` targets for memory in sysmem: the
/// open driver, nouveau and nova-core send (COHERENT, NONCOHERENT) for the WPR metadata and the
/// LIBOS arguments, tinygrad (COHERENT, COHERENT), and all boot real GPUs; which of the two
/// the GSP-FMC prefers is not public, so both sysmem targets are taken for both. LOCAL_FB
/// (0) cannot reach host memory; 3 and up are not targets.
pub fn fmc_targets_ok(boot_gsp_rm: u32, gsp_rm: u32) -> bool {
    let sysmem = |t: u32| {
        t == nvbare_core::gsp::boot::abi::GSP_DMA_TARGET_COHERENT_SYSTEM
            || t == nvbare_core::gsp::boot::abi::GSP_DMA_TARGET_NONCOHERENT_SYSTEM
    };
    sysmem(boot_gsp_rm) && sysmem(gsp_rm)
}

/// The command GSP-RM consumed last: (function, payload). Read from the shared memory the way
/// GSP-RM finds it (page table → command queue header → its read pointer in the status
/// queue's rx header); single-element commands only.
fn last_command(
    core: &SimCore,
    init: &MESSAGE_QUEUE_INIT_ARGUMENTS,
) -> Result<(u32, Vec<u8>), String> {
    const PAGE: u64 = 4096;
    // Page `k` of the shared memory, through the self-mapping page table at its start.
    fn page(core: &SimCore, root: u64, k: u64, depth: u32) -> Result<u64, String> {
        let at = if k * 8 < PAGE {
            root + k * 8
        } else if depth < 4 {
            page(core, root, k * 8 / PAGE, depth + 1)? + (k * 8) % PAGE
        } else {
            return Err("page table too deep".into());
        };
        let mut b = [0u8; 8];
        core.host
            .read(at, &mut b)
            .map_err(|e| format!("page table: {e}"))?;
        Ok(u64::from_le_bytes(b))
    }
    let read = |off: u64, dst: &mut [u8]| -> Result<(), String> {
        if off % PAGE + dst.len() as u64 > PAGE {
            return Err("read across a page".into());
        }
        let a = page(core, init.sharedMemPhysAddr, off / PAGE, 0)? + off % PAGE;
        core.host.read(a, dst).map_err(|e| e.to_string())
    };
    let (cmd, stat) = (init.cmdQueueOffset, init.statQueueOffset);
    let mut h = [0u8; std::mem::size_of::<msgqTxHeader>()];
    read(cmd, &mut h)?;
    let tx = msgqTxHeader::read_from_bytes(&h).map_err(|_| "queue header")?;
    let mut rp = [0u8; 4];
    read(stat + RX_HDR_OFF as u64, &mut rp)?;
    let (rp, count) = (u32::from_le_bytes(rp), tx.msgCount.max(1));
    let last = (rp + count - 1) % count;
    let elem = cmd + ENTRY_OFF as u64 + last as u64 * PAGE;
    let head = std::mem::size_of::<GSP_MSG_QUEUE_ELEMENT>();
    let rpc = std::mem::size_of::<rpc_message_header_v03_00>();
    let mut b = vec![0u8; head + rpc + 64];
    read(elem, &mut b)?;
    let hdr = rpc_message_header_v03_00::read_from_bytes(&b[head..head + rpc])
        .map_err(|_| "RPC header")?;
    let len = (hdr.length as usize).saturating_sub(rpc).min(64);
    Ok((hdr.function, b[head + rpc..head + rpc + len].to_vec()))
}

impl BootEngine {
    fn claims_fixed(&self, o: u32) -> bool {
        matches!(
            o,
            WPR2_LO | WPR2_HI | GFW_PLM | BSI14 | VBIOS_SCRATCH_0E | VBIOS_SCRATCH_15
        ) || self.flush_offs.contains(&o)
            || (GFW_GROUP05..GFW_GROUP05 + 16).contains(&o)
            || (FUSE_BASE..FUSE_END).contains(&o)
            || (!self.fsp && (PROM_BASE..PROM_BASE + PROM_SIZE).contains(&o))
            || (self.fsp && ((FSP_BASE..FSP_BASE + 0x4000).contains(&o) || o == self.therm))
    }
}

impl MmioEngine for BootEngine {
    fn name(&self) -> &'static str {
        "boot"
    }

    fn claims(&self, o: u32) -> bool {
        (GSP_BASE..GSP_BASE + 0x4000).contains(&o)
            || (SEC2_BASE..SEC2_BASE + 0x4000).contains(&o)
            || self.claims_fixed(o)
    }

    fn read(&mut self, core: &mut SimCore, o: u32) -> u32 {
        let mut g = self.model.lock();
        g.settle(core);
        let gfw_ready = g.gfw_ready_at.is_some_and(|t| Model::now(core) >= t);
        match o {
            // Whether the MMU's WPR registers answer while devinit / the FSP still train the
            // FB is not public: a PRI error, or the value.
            WPR2_LO | WPR2_HI
                if !gfw_ready
                    && core
                        .unknowns
                        .pick(unknown::WPR2_BEFORE_GFW, &unknown::WPR2_BEFORE_GFW_ANSWERS)
                        != 0 =>
            {
                core.unknowns.pick(
                    unknown::WPR2_BEFORE_GFW,
                    &unknown::WPR2_BEFORE_GFW_ANSWERS[1..],
                )
            }
            WPR2_LO => g.wpr2.map_or(0, |(lo, _)| ((lo >> 12) as u32) << 4),
            WPR2_HI => g
                .wpr2
                .map_or(0, |(_, end)| (((end - 4096) >> 12) as u32) << 4),
            _ if g.flush.claims(o) => g.flush.values.get(&o).copied().unwrap_or(0),
            GFW_PLM => gfw_ready as u32,
            _ if o == GFW_GROUP05 => {
                if gfw_ready {
                    0xff
                } else {
                    0
                }
            }
            BSI14 => g.bsi14,
            VBIOS_SCRATCH_0E => g.scratch_0e,
            VBIOS_SCRATCH_15 => g.scratch_15,
            _ if o == self.therm && self.fsp => {
                if gfw_ready {
                    0xff
                } else {
                    0
                }
            }
            _ if (FUSE_BASE..FUSE_END).contains(&o) => {
                let idx = (o - FUSE_BASE) / 4;
                let sec2_id = g
                    .cfg
                    .firmware
                    .booter_load
                    .as_ref()
                    .map_or(0, |b| b.ucode_id);
                match idx {
                    // SEC2 array at +0x40, GSP array at +0xc0 (ids are 1-based).
                    i if (16..32).contains(&i) && i - 16 + 1 == sec2_id => g.cfg.sec2_fuse,
                    i if i >= 48 && i - 48 + 1 == SimFwsec::UCODE_ID => g.cfg.gsp_fuse,
                    _ => 0,
                }
            }
            _ if (PROM_BASE..PROM_BASE + PROM_SIZE).contains(&o) => {
                let at = (o - PROM_BASE) as usize;
                let b = &g.cfg.firmware.vbios.bytes;
                b.get(at..at + 4)
                    .map_or(u32::MAX, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            }
            _ if (FSP_BASE..FSP_BASE + 0x4000).contains(&o) => g.fsp_read(o),
            _ if (GSP_BASE..GSP_BASE + 0x4000).contains(&o) => {
                if g.fsp.target_mask_until.is_some() {
                    let lsb = core
                        .unknowns
                        .pick(unknown::TARGET_MASK_LSB, &unknown::TARGET_MASK_LSB_ANSWERS);
                    return 0xbadf_4100 | lsb;
                }
                let r = o - GSP_BASE;
                if r == PGSP_MAILBOX + 12 {
                    let now = Model::now(core);
                    let ready = !has(&g.faults, BootFault::SequencerPollNeverReady)
                        && g.seq.started_at.is_some_and(|t| now >= t + SEQ_POLL_READY);
                    if ready && g.seq.poll_satisfied_at.is_none() {
                        g.seq.poll_satisfied_at = Some(now);
                    }
                    return if ready { 0x600d } else { 0 };
                }
                if (QUEUE_HEAD0 - GSP_BASE..QUEUE_HEAD0 - GSP_BASE + 64).contains(&r)
                    && let Some(rm) = &mut g.rm
                {
                    return rm.doorbell.read(core, o);
                }
                let lockdown = g.fsp.lockdown;
                let v = g.gsp.read(core, r);
                if r == off::HWCFG2 && lockdown {
                    v | 1 << 13
                } else {
                    v
                }
            }
            _ => {
                let r = o - SEC2_BASE;
                g.sec2.read(core, r)
            }
        }
    }

    fn write(&mut self, core: &mut SimCore, o: u32, v: u32) {
        let mut g = self.model.lock();
        g.settle(core);
        if (FSP_BASE..FSP_BASE + 0x4000).contains(&o) && self.fsp {
            if g.fsp_write(o, v) {
                g.fsp_command(core);
            }
            return;
        }
        if g.flush.claims(o) {
            g.flush.values.insert(o, v);
            return;
        }
        let (idx, r) = if (GSP_BASE..GSP_BASE + 0x4000).contains(&o) {
            (0, o - GSP_BASE)
        } else if (SEC2_BASE..SEC2_BASE + 0x4000).contains(&o) {
            (1, o - SEC2_BASE)
        } else {
            // WPR2, scratch, fuses, PROM: not writable from the CPU.
            return;
        };
        if idx == 0 {
            if g.fsp.target_mask_until.is_some() {
                return;
            }
            if (QUEUE_HEAD0 - GSP_BASE..QUEUE_HEAD0 - GSP_BASE + 64).contains(&r) {
                g.gsp.set_reg(r, v);
                if let Some(rm) = &mut g.rm {
                    rm.doorbell.write(core, o, v);
                }
                return;
            }
            if r == off::ENGINE && v & 1 != 0 {
                g.note_gsp_reset(core);
            }
        }
        let f = if idx == 0 { &mut g.gsp } else { &mut g.sec2 };
        if f.write(core, r, v) {
            if idx == 0 && g.gsp.imem.iter().all(|&b| b == 0) && g.seq.core_reset {
                g.seq.core_start = true;
            }
            g.start(core, idx);
        }
    }

    fn reset(&mut self, core: &mut SimCore) {
        let mut g = self.model.lock();
        let now = Model::now(core);
        g.gsp.power_on_reset();
        g.sec2.power_on_reset();
        g.jobs = [None, None];
        g.wpr2 = None;
        g.rm = None;
        g.bsi14 = 0;
        g.scratch_0e = 0;
        g.scratch_15 = 0;
        g.seq = SeqState::default();
        g.sec2_loaded = None;
        g.state_kept = false;
        g.flush.values.clear();
        g.fsp = FspState {
            emem: vec![0; 256],
            ..Default::default()
        };
        // Devinit / the FSP's secure boot run again after the reset.
        let answers = [g.cfg.gfw_boot_time, Duration::from_millis(500), g.gfw_max()];
        let t = core.unknowns.pick(unknown::GFW_BOOT_TIME, &answers);
        g.gfw_ready_at = (!has(&g.faults, BootFault::GfwBootNeverCompletes)).then_some(now + t);
        g.stats.resets += 1;
        g.phase("function-level reset: WPR2, falcons and GSP-RM back to cold");
    }
}

impl Model {
    /// The GSP engine reset is being asserted: the sequencer's CORE_RESET or CORE_RESUME.
    fn note_gsp_reset(&mut self, core: &SimCore) {
        if self.seq.started_at.is_none() || self.seq.resume {
            return;
        }
        let now = Self::now(core);
        if !self.seq.core_reset {
            self.seq.core_reset = true;
            self.seq.write_ok = self.gsp.reg(PGSP_MAILBOX) == 0xcafe_0001;
            self.seq.modify_ok = self.gsp.reg(PGSP_MAILBOX + 4) == 0xffff;
            self.seq.delay_ok = self
                .seq
                .poll_satisfied_at
                .is_some_and(|t| now >= t + Duration::from_micros(SEQ_DELAY_US as u64));
        } else if self.seq.core_start {
            // CORE_RESUME resets into RISC-V; the empty program must have halted first.
            self.seq.halt_waited = self.gsp.cpu == Cpu::Halted;
            if !self.seq.halt_waited {
                self.seq.core_start = false;
            }
        }
    }

    fn emem_index(&self) -> usize {
        let c = self.fsp.ememc;
        (((c >> 8) & 0xff) * 64 + ((c >> 2) & 0x3f)) as usize
    }

    fn set_emem_index(&mut self, i: usize) {
        let i = i as u32;
        let flags = self.fsp.ememc & 0x0300_0000;
        self.fsp.ememc = flags | (((i / 64) & 0xff) << 8) | ((i % 64) << 2);
    }

    fn fsp_read(&mut self, o: u32) -> u32 {
        match o {
            0x8f_2ac0 => self.fsp.ememc,
            0x8f_2ac4 => {
                let i = self.emem_index();
                let v = self.fsp.emem.get(i).copied().unwrap_or(0);
                if self.fsp.ememc & (1 << 25) != 0 {
                    self.set_emem_index(i + 1);
                }
                v
            }
            0x8f_2c00 => self.fsp.queue_head,
            0x8f_2c04 => self.fsp.queue_tail,
            0x8f_2c80 => self.fsp.msgq_head,
            0x8f_2c84 => self.fsp.msgq_tail,
            _ => 0,
        }
    }

    /// Returns `true` when the write interrupts the FSP (QUEUE_HEAD(0)).
    fn fsp_write(&mut self, o: u32, v: u32) -> bool {
        match o {
            0x8f_2ac0 => {
                self.fsp.ememc = v & 0x0300_fffc;
                false
            }
            0x8f_2ac4 => {
                let i = self.emem_index();
                match self.fsp.emem.get_mut(i) {
                    Some(e) => *e = v,
                    None => self.error(format!(
                        "FSP: EMEM write beyond the 1 KiB channel at dword {i}"
                    )),
                }
                if self.fsp.ememc & (1 << 24) != 0 {
                    self.set_emem_index(i + 1);
                }
                false
            }
            0x8f_2c04 => {
                self.fsp.queue_tail = v;
                false
            }
            0x8f_2c00 => {
                self.fsp.queue_head = v;
                if v > self.fsp.queue_tail || self.fsp.queue_tail as usize >= 1024 {
                    self.error(format!(
                        "FSP: queue head {v:#x} tail {:#x}",
                        self.fsp.queue_tail
                    ));
                    return false;
                }
                true
            }
            0x8f_2c80 => {
                self.fsp.msgq_head = v;
                false
            }
            0x8f_2c84 => {
                self.fsp.msgq_tail = v;
                false
            }
            _ => false,
        }
    }
}
