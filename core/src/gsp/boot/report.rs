//! Boot phases, progress reporting, typed errors and the failure report.

use core::fmt::{self, Write as _};
use core::time::Duration;

use crate::chip::{ChipError, Chipset};
use crate::falcon::FalconError;
use crate::gsp::GspError;
use crate::hal::HalError;

use super::firmware::{BooterKind, FirmwareError};
use super::fsp::FspError;
use super::layout::LayoutError;
use super::sequencer::SequencerError;

/// A step of the boot or unload sequence, for progress, timings and error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BootPhase {
    /// Reading `NV_PMC_BOOT_0/42` and matching the firmware to the chip.
    Identify,
    /// Checking `NV_PFB_PRI_MMU_WPR2_ADDR_HI` for a GSP left running (after GFW boot).
    CheckRunningGsp,
    /// Resetting the PCI function to get rid of a GSP left running.
    ResetGpu,
    /// Waiting for the VBIOS devinit (PGC6 scratch) or the FSP's secure boot (I2CS scratch).
    WaitGfwBoot,
    /// Reading the VBIOS through the PROM window and extracting FWSEC.
    ReadVbios,
    /// Computing the framebuffer carve-out and WPR heap.
    ComputeLayout,
    /// Filling DMA memory: radix3 image, bootloader, signature, WPR metadata, LIBOS arguments,
    /// logs, RM arguments, message queues.
    PrepareMemory,
    /// Queueing GSP_SET_SYSTEM_INFO and SET_REGISTRY before GSP-RM runs.
    QueueRpcs,
    /// FWSEC-FRTS on the GSP falcon (Turing-Ada).
    FwsecFrts,
    /// booter_load on SEC2 (Turing-Ada).
    BooterLoad,
    /// The chain-of-trust message to the FSP (Hopper, Blackwell).
    FspChainOfTrust,
    /// Waiting for the GSP-FMC to release the GSP (Hopper, Blackwell).
    WaitLockdown,
    /// Writing the OS version and checking the RISC-V core runs.
    StartRiscv,
    /// Linking the status queue and waiting for GSP_INIT_DONE (servicing the CPU sequencer).
    WaitInitDone,
    /// GET_GSP_STATIC_INFO.
    StaticInfo,
    /// UNLOADING_GUEST_DRIVER.
    UnloadRpc,
    /// Waiting for GSP-RM to suspend its processor (`MAILBOX0 = 0x80000000`).
    WaitSuspend,
    /// FWSEC-SB on the GSP falcon (Turing-Ada unload).
    FwsecSb,
    /// booter_unload on SEC2 (Turing-Ada unload).
    BooterUnload,
    /// Waiting for the GSP RISC-V core to halt (Hopper, Blackwell unload).
    WaitHalt,
}

impl BootPhase {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            BootPhase::Identify => "identify",
            BootPhase::CheckRunningGsp => "check for a running GSP",
            BootPhase::ResetGpu => "reset GPU",
            BootPhase::WaitGfwBoot => "wait for GFW boot",
            BootPhase::ReadVbios => "read VBIOS / FWSEC",
            BootPhase::ComputeLayout => "compute FB layout",
            BootPhase::PrepareMemory => "prepare DMA memory",
            BootPhase::QueueRpcs => "queue SET_SYSTEM_INFO + SET_REGISTRY",
            BootPhase::FwsecFrts => "FWSEC-FRTS (GSP falcon)",
            BootPhase::BooterLoad => "booter_load (SEC2)",
            BootPhase::FspChainOfTrust => "FSP chain of trust",
            BootPhase::WaitLockdown => "wait for GSP-FMC lockdown release",
            BootPhase::StartRiscv => "start RISC-V",
            BootPhase::WaitInitDone => "wait for GSP_INIT_DONE",
            BootPhase::StaticInfo => "GET_GSP_STATIC_INFO",
            BootPhase::UnloadRpc => "UNLOADING_GUEST_DRIVER",
            BootPhase::WaitSuspend => "wait for GSP suspend",
            BootPhase::FwsecSb => "FWSEC-SB (GSP falcon)",
            BootPhase::BooterUnload => "booter_unload (SEC2)",
            BootPhase::WaitHalt => "wait for GSP halt",
        }
    }
}

impl fmt::Display for BootPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Receives progress while booting or unloading (the CLI prints it).
pub trait BootObserver {
    /// A phase begins.
    fn phase_started(&mut self, _phase: BootPhase) {}
    /// A phase ended successfully after `elapsed`.
    fn phase_finished(&mut self, _phase: BootPhase, _elapsed: Duration) {}
    /// Something worth showing happened inside a phase.
    fn detail(&mut self, _phase: BootPhase, _what: fmt::Arguments<'_>) {}
    /// The boot or unload failed: `report` holds the registers and the GSP's last log lines
    /// (kept out of [`BootError`] so that errors stay small).
    fn failed(&mut self, _error: &BootError, _report: &BootReport) {}
}

/// Ignores progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;
impl BootObserver for NoObserver {}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootErrorKind {
    /// The GPU could not be identified.
    Chip(ChipError),
    /// The chip is identified but its bare-metal boot is not yet supported: its boot path has
    /// not run against a model of it ([`super::BARE_METAL_CHIPS`]).
    NotSupported {
        /// The GPU.
        chip: Chipset,
    },
    /// The firmware set is for another chip.
    WrongFirmware {
        /// The chip the firmware is for.
        firmware: Chipset,
        /// The GPU.
        gpu: Chipset,
    },
    /// The firmware could not provide something.
    Firmware(FirmwareError),
    /// WPR2 is up: a GSP is running (or was not unloaded) and the options say not to reset.
    GspRunning {
        /// `NV_PFB_PRI_MMU_WPR2_ADDR_LO` as an address.
        wpr2_lo: u64,
        /// `NV_PFB_PRI_MMU_WPR2_ADDR_HI` as an address.
        wpr2_hi: u64,
    },
    /// `NV_PFB_PRI_MMU_WPR2_ADDR_HI` read as a PRI error although GFW boot had completed.
    Wpr2Unreadable {
        /// What the read returned.
        raw: u32,
    },
    /// The PCI function reset failed.
    ResetFailed(HalError),
    /// WPR2 stayed up (after a reset or after booter_unload).
    Wpr2StillUp {
        /// `NV_PFB_PRI_MMU_WPR2_ADDR_HI` as an address.
        wpr2_hi: u64,
    },
    /// A wait timed out.
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// A falcon operation failed.
    Falcon(FalconError),
    /// FWSEC-FRTS ran but did not set up FRTS/WPR2 as asked.
    FwsecFrts {
        /// `NV_VBIOS_FWSECLIC_FRTS_ERR_CODE`.
        err_code: u16,
        /// WPR2 start found.
        wpr2_lo: u64,
        /// WPR2 start expected (the FRTS offset).
        expected: u64,
    },
    /// FWSEC-SB failed.
    FwsecSb {
        /// `NV_VBIOS_FWSECLIC_SB_ERR_CODE`.
        err_code: u16,
    },
    /// A booter returned an error in MAILBOX0.
    Booter {
        /// Which booter.
        kind: BooterKind,
        /// SEC2 `MAILBOX0` (0 is success).
        mailbox0: u32,
    },
    /// The FSP refused or did not answer.
    Fsp(FspError),
    /// The GSP-FMC reported an error in the GSP's MAILBOX0.
    FmcError {
        /// GSP `MAILBOX0`.
        mailbox0: u32,
    },
    /// The RISC-V core did not start.
    RiscvNotActive,
    /// A CPU-sequencer script from GSP-RM failed.
    Sequencer(SequencerError),
    /// Talking to GSP-RM failed.
    Gsp(GspError),
    /// GSP_INIT_DONE reported a failure.
    InitFailed {
        /// Its `rpc_result`.
        status: u32,
    },
    /// The framebuffer carve-out could not be computed.
    Layout(LayoutError),
    /// DMA memory could not be allocated or written.
    Hal(HalError),
}

impl fmt::Display for BootErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootErrorKind::Chip(e) => write!(f, "{e}"),
            BootErrorKind::NotSupported { chip } => {
                write!(
                    f,
                    "{chip} ({}) is not yet supported for bare metal: nvbare boots ",
                    chip.info().architecture
                )?;
                for (i, c) in super::BARE_METAL_CHIPS.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{c}")?;
                }
                write!(f, " (the chips its simulator models)")?;
                write!(
                    f,
                    "; use the kernel-driver adapter (`nvidia:N`) for this GPU"
                )
            }
            BootErrorKind::WrongFirmware { firmware, gpu } => write!(
                f,
                "the firmware set is for {firmware} but the GPU is {gpu}: load the files of \
                 nvidia/{}/gsp/",
                gpu.info().firmware_dir
            ),
            BootErrorKind::Firmware(e) => write!(f, "{e}"),
            BootErrorKind::GspRunning { wpr2_lo, wpr2_hi } => write!(
                f,
                "a GSP is still running (WPR2 {wpr2_lo:#x}..{wpr2_hi:#x} is up): unload it \
                 first, reset the GPU (`echo 1 > /sys/bus/pci/devices/<bdf>/reset`), or boot \
                 with the reset option (nvbare boot --reset)"
            ),
            BootErrorKind::Wpr2Unreadable { raw } => write!(
                f,
                "NV_PFB_PRI_MMU_WPR2_ADDR_HI reads {raw:#x}, a PRI error, although GFW boot has \
                 completed: whether a GSP is running cannot be told; reset the GPU"
            ),
            BootErrorKind::ResetFailed(e) => write!(
                f,
                "the PCI function reset failed ({e}): reset the GPU from the host or reboot"
            ),
            BootErrorKind::Wpr2StillUp { wpr2_hi } => write!(
                f,
                "WPR2 is still up (ADDR_HI {wpr2_hi:#x}): the GPU needs a full reset (secondary \
                 bus reset or power cycle)"
            ),
            BootErrorKind::Timeout { what, waited } => write!(
                f,
                "timed out after {waited:?} waiting for {what}; see the registers and GSP log \
                 below, then reset the GPU"
            ),
            BootErrorKind::Falcon(e) => write!(f, "{e}"),
            BootErrorKind::FwsecFrts {
                err_code,
                wpr2_lo,
                expected,
            } => write!(
                f,
                "FWSEC-FRTS failed: FRTS error code {err_code:#x}, WPR2 starts at {wpr2_lo:#x} \
                 (expected {expected:#x}); if WPR2 was already up, reset the GPU"
            ),
            BootErrorKind::FwsecSb { err_code } => {
                write!(f, "FWSEC-SB failed with error code {err_code:#x}")
            }
            BootErrorKind::Booter { kind, mailbox0 } => write!(
                f,
                "{} on SEC2 failed: MAILBOX0 = {mailbox0:#x} (0 is success; a value equal to \
                 the argument means the boot ROM rejected the ucode: wrong signature/fuse or \
                 corrupt firmware)",
                kind.file()
            ),
            BootErrorKind::Fsp(e) => write!(f, "{e}"),
            BootErrorKind::FmcError { mailbox0 } => write!(
                f,
                "the GSP-FMC reported error {mailbox0:#x} while booting GSP-RM (bad WPR \
                 metadata, image or signature); check the firmware and reset the GPU"
            ),
            BootErrorKind::RiscvNotActive => write!(
                f,
                "the GSP RISC-V core is not running after the boot firmware finished"
            ),
            BootErrorKind::Sequencer(e) => write!(f, "{e}"),
            BootErrorKind::Gsp(e) => write!(f, "{e}"),
            BootErrorKind::InitFailed { status } => write!(
                f,
                "GSP_INIT_DONE reported status {status:#x}: GSP-RM failed to initialise; see \
                 its log"
            ),
            BootErrorKind::Layout(e) => write!(f, "{e}"),
            BootErrorKind::Hal(e) => write!(f, "{e}"),
        }
    }
}

/// Registers kept in a report.
pub const REPORT_REGS: usize = 40;
/// Log lines kept in a report.
pub const REPORT_LOG_LINES: usize = 24;
/// Bytes per report log line.
pub const REPORT_LINE_LEN: usize = 160;

/// What the driver saw when a boot or unload failed: registers and the GSP's last log lines.
/// Delivered through [`BootObserver::failed`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootReport {
    /// Time since the boot (or unload) started.
    pub elapsed: Duration,
    /// (name, value) of the registers read.
    pub regs: heapless::Vec<(&'static str, u32), REPORT_REGS>,
    /// The newest lines of the GSP's LIBOS logs, oldest first.
    pub log: heapless::Vec<heapless::String<REPORT_LINE_LEN>, REPORT_LOG_LINES>,
    /// Log lines that did not fit.
    pub log_dropped: u32,
}

impl BootReport {
    /// Appends a log line, dropping the oldest when full.
    pub fn push_log(&mut self, line: fmt::Arguments<'_>) {
        let mut s = heapless::String::<REPORT_LINE_LEN>::new();
        // A line longer than the buffer is cut, not lost.
        let _ = TruncWriter(&mut s).write_fmt(line);
        if self.log.is_full() {
            self.log.remove(0);
            self.log_dropped = self.log_dropped.saturating_add(1);
        }
        let _ = self.log.push(s);
    }
}

struct TruncWriter<'a, const N: usize>(&'a mut heapless::String<N>);

impl<const N: usize> fmt::Write for TruncWriter<'_, N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if c == '\n' {
                continue;
            }
            if self.0.push(c).is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}

impl fmt::Display for BootReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "after {:?}; registers:", self.elapsed)?;
        for (name, v) in &self.regs {
            writeln!(f, "  {name:<44} {v:#010x}")?;
        }
        if self.log.is_empty() {
            writeln!(f, "GSP log: (empty)")?;
        } else {
            writeln!(f, "GSP log (newest {} lines):", self.log.len())?;
            for l in &self.log {
                writeln!(f, "  {l}")?;
            }
        }
        Ok(())
    }
}

/// A failed boot or unload: where and what. The [`BootReport`] (registers, GSP log) goes to
/// [`BootObserver::failed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootError {
    /// The phase that failed.
    pub phase: BootPhase,
    /// What went wrong.
    pub kind: BootErrorKind,
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GSP boot failed in phase \"{}\": {}",
            self.phase, self.kind
        )
    }
}

impl core::error::Error for BootError {}
