//! Errors of the device layer, and the fault report a failed wait carries.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use super::backend::BackendError;
use crate::channel::gpfifo::GpFifoError;
use crate::channel::launch::LaunchError;
use crate::channel::pushbuf::PushError;
use crate::channel::qmd::QmdError;
use crate::hal::HalError;
use crate::rm::RmError;
use crate::rm::class::ClassKind;
use crate::rm::ctrl::{access_type_name, fault_type_name, rc, warp_esr};

/// Which of the device's channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// The compute channel (kernels).
    Compute,
    /// The copy channel (copy engine).
    Copy,
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChannelKind::Compute => "compute",
            ChannelKind::Copy => "copy",
        })
    }
}

/// An MMU fault as the debugger reports it (`NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmuFaultRecord {
    /// Faulting GPU virtual address.
    pub address: u64,
    /// `NV_PFAULT_FAULT_TYPE_*`.
    pub fault_type: u32,
    /// `NV_PFAULT_ACCESS_TYPE_*`.
    pub access_type: u32,
}

/// An SM's error state (`NV83DE_SM_ERROR_STATE_REGISTERS`) that is not clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmErrorRecord {
    /// SM index.
    pub sm: u32,
    /// `hwwGlobalEsr`.
    pub global_esr: u32,
    /// `hwwWarpEsr` (error code in 15:0).
    pub warp_esr: u32,
    /// `hwwWarpEsrPc64`.
    pub pc: u64,
    /// `hwwEsrAddr`.
    pub address: u64,
}

/// What the device layer found out about a failed or stuck channel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FaultReport {
    /// The channel being waited on.
    pub channel: Option<ChannelKind>,
    /// `ROBUST_CHANNEL_*` code from an error notifier (the Xid), if RM tore a channel down.
    pub rc: Option<u32>,
    /// MMU faults the debugger recorded for the compute channel.
    pub mmu_faults: Vec<MmuFaultRecord>,
    /// SMs with an error state.
    pub sm_errors: Vec<SmErrorRecord>,
    /// Whether the debugger reported an MMU fault on the channel.
    pub mmu_fault_flag: bool,
    /// The last kernel launched on the compute channel.
    pub kernel: Option<String>,
    /// Timeline value reached and the one waited for.
    pub reached: u64,
    /// Timeline value the wait needed.
    pub wanted: u64,
    /// Events the backend reported.
    pub events: Vec<String>,
    /// The channel's USERD `GPGet` and `GPPut` when the wait ended: whether the host had
    /// fetched every submission.
    pub fetch: Option<(u32, u32)>,
    /// Doorbells rung again during the wait because nothing moved.
    pub doorbell_retries: u64,
    /// The timeline read lower than a value an earlier wait had already seen reached: the GPU
    /// released an older value after a newer one (it ran a stale copy of an earlier launch's
    /// commands; seen on the H200 while another process set up its channels).
    pub went_back_from: Option<u64>,
    /// What happened to the channels afterwards.
    pub recovery: Recovery,
}

/// What the device layer did after a fault or timeout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Recovery {
    /// Nothing yet.
    #[default]
    None,
    /// The channel group was freed and re-created; buffers and modules are intact and the
    /// device is usable.
    ChannelsRecreated,
    /// Re-creating the channels failed; the device must be reopened.
    Failed(String),
}

impl FaultReport {
    /// The first MMU fault's address, if any.
    pub fn fault_address(&self) -> Option<u64> {
        self.mmu_faults.first().map(|f| f.address)
    }
}

impl fmt::Display for FaultReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(k) = &self.kernel {
            write!(f, "last kernel `{k}`")?;
            sep = "; ";
        }
        if let Some(code) = self.rc {
            let name = rc::name(code).unwrap_or("ROBUST_CHANNEL_?");
            write!(f, "{sep}RM tore the channel down with {name} (Xid {code})")?;
            sep = "; ";
        }
        for m in &self.mmu_faults {
            write!(
                f,
                "{sep}MMU fault at GPU VA {:#x} ({}, {})",
                m.address,
                fault_type_name(m.fault_type),
                access_type_name(m.access_type)
            )?;
            sep = "; ";
        }
        if self.mmu_faults.is_empty() && self.mmu_fault_flag {
            write!(f, "{sep}MMU fault (address unknown)")?;
            sep = "; ";
        }
        for s in &self.sm_errors {
            if s.warp_esr & 0xffff != 0 {
                write!(
                    f,
                    "{sep}SM {}: warp error {} at pc {:#x}",
                    s.sm,
                    warp_esr::name(s.warp_esr),
                    s.pc
                )?;
            } else {
                write!(f, "{sep}SM {}: error state at {:#x}", s.sm, s.address)?;
            }
            sep = "; ";
        }
        for e in &self.events {
            write!(f, "{sep}{e}")?;
            sep = "; ";
        }
        if self.rc.is_none() && self.mmu_faults.is_empty() && self.sm_errors.is_empty() {
            write!(
                f,
                "{sep}no fault recorded (the work is still running or blocked)"
            )?;
            sep = "; ";
        }
        if self.wanted > self.reached {
            write!(f, "{sep}timeline at {} of {}", self.reached, self.wanted)?;
            sep = "; ";
        }
        if let Some(seen) = self.went_back_from {
            write!(
                f,
                "{sep}the timeline went back from {seen}, which an earlier wait saw reached: \
                 the GPU released an older launch's value after newer ones, i.e. it ran stale \
                 commands and the launches after {} may not have run as submitted (seen on the \
                 H200 while another process set up its channels; docs/device.md)",
                self.reached
            )?;
            sep = "; ";
        }
        if let Some((get, put)) = self.fetch {
            if get == put {
                write!(
                    f,
                    "{sep}the GPU had fetched every submission (GPGet = GPPut = {put})"
                )?;
            } else {
                write!(
                    f,
                    "{sep}the GPU had not fetched every submission (GPGet {get}, GPPut {put}; \
                     doorbell rung again {} times)",
                    self.doorbell_retries
                )?;
            }
            sep = "; ";
        }
        match &self.recovery {
            Recovery::None => Ok(()),
            Recovery::ChannelsRecreated => write!(
                f,
                "{sep}the channels were re-created: buffers and modules are intact and the \
                 device is usable"
            ),
            Recovery::Failed(e) => write!(
                f,
                "{sep}re-creating the channels failed ({e}): close and reopen the device"
            ),
        }
    }
}

/// Why a device operation failed. Messages say what to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceError {
    /// An RM call failed.
    Rm(RmError),
    /// The backend failed.
    Backend(BackendError),
    /// A CPU access to GPU memory failed.
    Hal(HalError),
    /// The RM offers no class of this kind (e.g. no compute class for this GPU).
    NoClass {
        /// The kind.
        kind: ClassKind,
    },
    /// The chip could not be identified or nvbare cannot launch work on it.
    UnsupportedChip(String),
    /// The GPU faulted while running our work.
    Fault(Box<FaultReport>),
    /// Work did not complete in time.
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
        /// What the device layer found out.
        report: Box<FaultReport>,
    },
    /// The GPFIFO could not take work.
    GpFifo(GpFifoError),
    /// A pushbuffer could not be built.
    Push(PushError),
    /// The program's image could not be produced (e.g. an unsupported relocation).
    Program(String),
    /// The program is for another GPU generation.
    WrongSm {
        /// Shader model of the cubin (e.g. 80).
        cubin: u32,
        /// Shader model of the device (e.g. 90).
        device: u32,
    },
    /// No kernel of that name in the module.
    NoSuchKernel(String),
    /// No device variable of that name in the module.
    NoSuchGlobal(String),
    /// The launch configuration does not fit the hardware or the kernel.
    Launch(LaunchError),
    /// A QMD could not be built.
    Qmd(QmdError),
    /// The arguments do not match the kernel's parameters.
    Arguments(String),
    /// A buffer, module or function from another device (or already freed).
    ForeignObject(&'static str),
    /// Sizes or ranges that do not fit.
    BadRange(String),
    /// The kernel needs something nvbare does not do (the message says what, and what to
    /// change).
    Unsupported(String),
    /// The device is unusable after an earlier failure; reopen it.
    Dead(String),
    /// An event's GPU time cannot be read: recorded without timing, or so long ago that later
    /// timed events took its slot (`Device::event_time_ns`).
    EventTime(String),
    /// Two devices cannot reach each other's memory directly (no P2P path, different IOMMU
    /// domains, different chips, or a backend without peer support).
    PeerUnavailable {
        /// The device that wanted access.
        from: String,
        /// The peer.
        to: String,
        /// Why, in words.
        reason: String,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Rm(e) => write!(f, "{e}"),
            DeviceError::Backend(e) => write!(f, "{e}"),
            DeviceError::Hal(e) => write!(f, "{e}"),
            DeviceError::NoClass { kind } => write!(
                f,
                "RM offers no {kind:?} class on this GPU: the GPU or driver is not supported \
                 (see `nvbare info`)"
            ),
            DeviceError::UnsupportedChip(s) => f.write_str(s),
            DeviceError::Fault(r) => write!(f, "the GPU faulted: {r}"),
            DeviceError::Timeout {
                what,
                waited,
                report,
            } => write!(f, "timed out after {waited:?} waiting for {what}: {report}"),
            DeviceError::GpFifo(e) => write!(f, "{e}"),
            DeviceError::Push(e) => write!(f, "{e}"),
            DeviceError::Program(e) => write!(f, "cannot load the program: {e}"),
            DeviceError::WrongSm { cubin, device } => write!(
                f,
                "the program is compiled for sm_{cubin} but the device is sm_{device}: rebuild \
                 it with `-arch=sm_{device}`"
            ),
            DeviceError::NoSuchKernel(k) => {
                write!(
                    f,
                    "the module has no kernel `{k}` (check the name and `extern \"C\"`)"
                )
            }
            DeviceError::NoSuchGlobal(g) => write!(
                f,
                "the module has no device variable `{g}` (a `__device__` global; check the \
                 name and `extern \"C\"`)"
            ),
            DeviceError::Launch(e) => write!(f, "invalid launch: {e}"),
            DeviceError::Qmd(e) => write!(f, "cannot build the QMD: {e}"),
            DeviceError::Arguments(s) => write!(f, "kernel arguments: {s}"),
            DeviceError::ForeignObject(what) => write!(
                f,
                "the {what} belongs to another device (or was freed); use objects with the \
                 device that created them"
            ),
            DeviceError::BadRange(s) => f.write_str(s),
            DeviceError::Unsupported(s) => f.write_str(s),
            DeviceError::Dead(s) => write!(f, "the device is unusable ({s}): reopen it"),
            DeviceError::EventTime(s) => write!(f, "no GPU time for the event: {s}"),
            DeviceError::PeerUnavailable { from, to, reason } => write!(
                f,
                "{from} cannot reach {to} directly: {reason}; nvbare does not fall back to \
                 copies through host memory on its own: open the link with \
                 PeerMode::AllowHostStaging (slower) to allow that (CLI: --mode staged)"
            ),
        }
    }
}

impl core::error::Error for DeviceError {}

impl DeviceError {
    /// The fault report, for faults and timeouts.
    pub fn report(&self) -> Option<&FaultReport> {
        match self {
            DeviceError::Fault(r) | DeviceError::Timeout { report: r, .. } => Some(r),
            _ => None,
        }
    }
}

impl From<RmError> for DeviceError {
    fn from(e: RmError) -> Self {
        DeviceError::Rm(e)
    }
}
impl From<BackendError> for DeviceError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::Rm(r) => DeviceError::Rm(r),
            other => DeviceError::Backend(other),
        }
    }
}
impl From<HalError> for DeviceError {
    fn from(e: HalError) -> Self {
        DeviceError::Hal(e)
    }
}
impl From<GpFifoError> for DeviceError {
    fn from(e: GpFifoError) -> Self {
        DeviceError::GpFifo(e)
    }
}
impl From<PushError> for DeviceError {
    fn from(e: PushError) -> Self {
        DeviceError::Push(e)
    }
}
impl From<super::program::ProgramError> for DeviceError {
    fn from(e: super::program::ProgramError) -> Self {
        DeviceError::Program(e.0)
    }
}
impl From<LaunchError> for DeviceError {
    fn from(e: LaunchError) -> Self {
        DeviceError::Launch(e)
    }
}
impl From<QmdError> for DeviceError {
    fn from(e: QmdError) -> Self {
        DeviceError::Qmd(e)
    }
}
