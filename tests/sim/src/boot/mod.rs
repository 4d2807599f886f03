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
//!
//! This file holds the state, the configuration and the shared steps (settling jobs, the boot
//! ROM's checks); each handshake has its own file: `fwsec` (FWSEC on the GSP falcon),
//! `booter` (SEC2), `fsp` (the chain-of-trust message), `fmc` (the GSP-FMC), `gsp_rm` (what
//! the bootloaders check and GSP-RM's start), `unload`, and `engine` (the BAR0 registers).

pub mod bar1;
mod booter;
mod engine;
pub mod falcon;
pub mod firmware;
mod fmc;
mod fsp;
mod fwsec;
mod gen_bl;
mod gsp_rm;
mod ucode_load;
mod unload;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_flush;
#[cfg(test)]
mod tests_ga100;
#[cfg(test)]
mod tests_pio_booter;
#[cfg(test)]
mod tests_tu102;
#[cfg(test)]
mod tests_tu102_layout;
#[cfg(test)]
mod tests_unsupported;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::chip::{Architecture, BootMethod, Chipset};
use nvbare_core::falcon::FalconHal;
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

use falcon::{Cpu, Falcon, RegLayout, Riscv, off};
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
/// `NV_PGC6_AON_SECURE_SCRATCH_GROUP_42` (ga102 `dev_gc6_island.h`).
pub(crate) const SCRATCH_GROUP_42: u32 = 0x11_83a4;
/// `NV_PFB_PRI_MMU_LOCK_CFG_PRIV_LEVEL_MASK`, `_ADDR_LO`, `_ADDR_HI` (ga100 `dev_fb.h`).
pub(crate) const MMU_LOCK_PLM: u32 = 0x1f_a7c8;
pub(crate) const MMU_LOCK_LO: u32 = 0x1f_a82c;
pub(crate) const MMU_LOCK_HI: u32 = 0x1f_a830;
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
    /// How much memory at the top of a GA100's FB the VBIOS locks away from the MMU for the row
    /// remapper ("a few MBs", `mem_mgr_ga100.c` bug 2974274; the size is not public).
    pub const GA100_MMU_LOCK: &str = "boot: size of GA100's VBIOS MMU lock (row remapper)";
    /// The answers of [`GA100_MMU_LOCK`], in MiB.
    pub const GA100_MMU_LOCK_MIB: [u64; 2] = [2, 32];
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
    /// FWSEC-SB ran since the last booter_load (`kgspTeardown_TU102` runs it before
    /// booter_unload).
    sb_since_load: bool,
    /// GA100: the range `[lo, hi]` (hi: its last 4 KiB page) the VBIOS locked away from the MMU
    /// at the top of FB (`NV_PFB_PRI_MMU_LOCK_ADDR_LO/HI`).
    mmu_lock: Option<(u64, u64)>,
}

/// The sysmem flush registers of the simulated chip (published headers; the format follows
/// `kmemsysProgramSysmemFlushBuffer_GA100/_GH100/_GB10B`).
#[derive(Debug, Clone)]
pub(crate) struct FlushRegs {
    /// (LO, HI) offsets; no HI on Turing (`NV_PFB_NISO_FLUSH_SYSMEM_ADDR` alone).
    pub(crate) pairs: Vec<(u32, Option<u32>)>,
    /// LO holds address >> 8 and HI bits 46:40 (Ampere/Ada); otherwise LO is address 31:0 and
    /// HI 51:32.
    shifted: bool,
    values: std::collections::HashMap<u32, u32>,
}

impl FlushRegs {
    pub(crate) fn for_chip(c: Chipset) -> Self {
        let (pairs, shifted) = match c.info().architecture {
            // gm107/dev_fb.h NV_PFB_NISO_FLUSH_SYSMEM_ADDR (kmemsysProgramSysmemFlushBuffer_GM107
            // on TU10x; tu102 publishes no dev_fb.h with a _HI).
            Architecture::Turing => (vec![(0x10_0c10, None)], true),
            Architecture::Ampere | Architecture::Ada => {
                // ga100/dev_fb.h NV_PFB_NISO_FLUSH_SYSMEM_ADDR / _HI.
                (vec![(0x10_0c10, Some(0x10_0c40))], true)
            }
            // gh100/dev_fb.h NV_PFB_FBHUB_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI.
            Architecture::Hopper => (vec![(0x10_0a34, Some(0x10_0a38))], false),
            // gb100/dev_hshub_base.h in HSHUB0 (0x870000), both pairs.
            Architecture::Blackwell if matches!(c, Chipset::GB100 | Chipset::GB102) => (
                vec![(0x87_0e50, Some(0x87_0e54)), (0x87_06c0, Some(0x87_06c4))],
                false,
            ),
            // gb10b/dev_fbhub.h NV_PFB_FBHUB0_PCIE_FLUSH_SYSMEM_ADDR_LO / _HI (GB20x).
            Architecture::Blackwell => (vec![(0x8a_1d58, Some(0x8a_1d5c))], false),
        };
        FlushRegs {
            pairs,
            shifted,
            values: Default::default(),
        }
    }

    fn claims(&self, o: u32) -> bool {
        self.pairs.iter().any(|&(lo, hi)| o == lo || Some(o) == hi)
    }

    /// The address each pair holds.
    fn addresses(&self) -> Vec<u64> {
        let v = |o: u32| self.values.get(&o).copied().unwrap_or(0) as u64;
        self.pairs
            .iter()
            .map(|&(lo, hi)| {
                let h = hi.map_or(0, v);
                if self.shifted {
                    ((h & 0x7f) << 40) | (v(lo) << 8)
                } else {
                    ((h & 0xf_ffff) << 32) | (v(lo) & 0xffff_ff00)
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
    chip: Chipset,
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
        // TU10x and GA100 have neither the GA102 RISC-V layout nor FALCON2's BROM registers.
        let layout = match FalconHal::for_chip(info) {
            FalconHal::Tu102 | FalconHal::Ga100 => RegLayout::Tu102,
            _ => RegLayout::Ga102,
        };
        let m = BootModel {
            inner: Arc::new(Mutex::new(Model {
                cfg,
                model,
                fwsec: SimFwsec::new(),
                gsp: Falcon::new("GSP", GSP_BASE, true).with_layout(layout),
                sec2: Falcon::new("SEC2", SEC2_BASE, false).with_layout(layout),
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
                sb_since_load: false,
                mmu_lock: None,
            })),
        };
        {
            // Devinit / the FSP's secure boot may still run when the driver first looks.
            let pending = gpu.with_core(|c| {
                let m = m.lock();
                c.unknowns
                    .pick(unknown::GFW_AT_POWER_ON, &[Duration::ZERO, m.gfw_max()])
            });
            let lock_mib = gpu.with_core(|c| {
                c.unknowns
                    .pick(unknown::GA100_MMU_LOCK, &unknown::GA100_MMU_LOCK_MIB)
            });
            let mut g = m.lock();
            g.gfw_ready_at = Some(pending);
            if model.chipset == Chipset::GA100 {
                // LOCAL_MEMORY_RANGE says the FB rounded up to a GiB; the VBIOS locks the part
                // the row remapper uses (memmgrBlockMemLockedMemory_GA100 expects it to end at
                // the top of FB).
                let top = g.fb_size;
                g.mmu_lock = Some((top - (lock_mib << 20), top - 4096));
            }
            if has(&g.faults, BootFault::GfwBootNeverCompletes) {
                g.gfw_ready_at = None;
            }
        }
        let flush_offs = m
            .lock()
            .flush
            .pairs
            .iter()
            .flat_map(|&(lo, hi)| core::iter::once(lo).chain(hi))
            .collect();
        gpu.add_engine(Box::new(BootEngine {
            model: m.clone(),
            chip: model.chipset,
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
            self.classify_gsp(core)
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
}

/// Log regions GSP-RM writes: (name, bus address, size).
type LogRegions = Vec<(String, u64, u64)>;

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
