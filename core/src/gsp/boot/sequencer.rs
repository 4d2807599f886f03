//! The CPU sequencer: GSP-RM asks the CPU to run small register scripts
//! (GSP_RUN_CPU_SEQUENCER) on Turing-Ada, e.g. to reset its core and have SEC2 reload it.
//! [`BootEvents`] runs them synchronously inside whatever wait receives the event, as
//! `kgspExecuteSequencerBuffer` and `kgspExecuteSequencerCommand_GA102` do:
//!
//! | opcode | action |
//! |---|---|
//! | REG_WRITE(addr, val) | write |
//! | REG_MODIFY(addr, mask, val) | `reg = reg & !mask \| val` |
//! | REG_POLL(addr, mask, val, timeout, error) | wait for `reg & mask == val` (timeout in µs) |
//! | DELAY_US(n) | wait |
//! | REG_STORE(addr, index) | `regSaveArea[index] = reg` (kept locally; RM never returns it) |
//! | CORE_RESET | reset the GSP falcon, allow physical DMA without context |
//! | CORE_START | start the GSP falcon CPU |
//! | CORE_WAIT_FOR_HALT | wait for the GSP falcon to halt |
//! | CORE_RESUME | reset the GSP into RISC-V, put the LIBOS arguments in its mailboxes, start SEC2, wait for `BSI_SECURE_SCRATCH_14.BOOT_STAGE_3_HANDOFF`, require SEC2 MAILBOX0 = 0, write the OS version, check RISC-V runs |
//!
//! Register addresses come from GSP-RM; they are BAR0 offsets and are checked against the
//! window (an access outside it fails the script rather than being dropped silently).

use core::fmt;
use core::time::Duration;

use crate::falcon::{Falcon, FalconError, FalconHal, HS_HALT_TIMEOUT, RISCV_ACTIVE_TIMEOUT};
use crate::gsp::GspError;
use crate::gsp::events::{
    Disposition, EventContext, EventHandler, NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER, RawEvent,
    SeqCommand,
};
use crate::hal::{Clock, Mmio, PollError, poll_until};
use crate::regs::Register;
use crate::regs::falcon::{Gsp, Sec2};
use crate::regs::pgc6::NV_PGC6_BSI_SECURE_SCRATCH_14;

/// Longest REG_POLL the driver honours, whatever the script asks (RM's default timeout is
/// seconds; a script asking for more is treated as asking for this).
pub const SEQ_POLL_MAX: Duration = Duration::from_secs(4);
/// REG_POLL's timeout when the script gives 0.
pub const SEQ_POLL_DEFAULT: Duration = Duration::from_secs(4);
/// Longest DELAY_US honoured.
pub const SEQ_DELAY_MAX: Duration = Duration::from_secs(1);
/// How long CORE_RESUME waits for SEC2 to reload GSP-RM (`_kgspIsReloadCompleted`).
pub const SEQ_RELOAD_TIMEOUT: Duration = Duration::from_secs(4);

/// Why a sequencer script failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequencerError {
    /// The script is malformed (unknown opcode, truncated command, bad save index).
    Malformed(&'static str),
    /// A register access fell outside BAR0.
    BadAddress {
        /// The address.
        addr: u32,
    },
    /// REG_POLL timed out.
    PollTimeout {
        /// The register.
        addr: u32,
        /// Mask.
        mask: u32,
        /// Expected value.
        val: u32,
        /// Last value read.
        last: u32,
        /// The script's error code for this poll.
        error: u32,
    },
    /// CORE_RESUME: SEC2 did not report the reload done in time.
    ReloadTimeout {
        /// SEC2 MAILBOX0.
        sec2_mailbox0: u32,
    },
    /// CORE_RESUME: SEC2 reported an error in MAILBOX0.
    ReloadFailed {
        /// SEC2 MAILBOX0.
        sec2_mailbox0: u32,
    },
    /// A falcon operation failed.
    Falcon(FalconError),
    /// The RISC-V core did not run after CORE_RESUME.
    RiscvNotActive,
}

impl fmt::Display for SequencerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SequencerError::Malformed(w) => write!(f, "CPU-sequencer script from GSP-RM: {w}"),
            SequencerError::BadAddress { addr } => write!(
                f,
                "CPU-sequencer script names register {addr:#x}, outside BAR0"
            ),
            SequencerError::PollTimeout {
                addr,
                mask,
                val,
                last,
                error,
            } => write!(
                f,
                "CPU sequencer: register {addr:#x} & {mask:#x} never became {val:#x} (last \
                 {last:#x}, GSP error code {error:#x})"
            ),
            SequencerError::ReloadTimeout { sec2_mailbox0 } => write!(
                f,
                "CPU sequencer CORE_RESUME: SEC2 did not reload GSP-RM (SEC2 MAILBOX0 \
                 {sec2_mailbox0:#x})"
            ),
            SequencerError::ReloadFailed { sec2_mailbox0 } => write!(
                f,
                "CPU sequencer CORE_RESUME: SEC2 reported {sec2_mailbox0:#x}"
            ),
            SequencerError::Falcon(e) => write!(f, "CPU sequencer: {e}"),
            SequencerError::RiscvNotActive => {
                write!(
                    f,
                    "CPU sequencer CORE_RESUME: the GSP RISC-V core did not start"
                )
            }
        }
    }
}

/// Boot-time event handling: runs CPU-sequencer scripts, queues everything else.
#[derive(Debug, Clone, Copy)]
pub struct BootEvents {
    hal: FalconHal,
    libos_args: u64,
    app_version: u32,
    scripts: u32,
    commands: u32,
    save_area: [u32; 8],
    last_error: Option<SequencerError>,
}

impl BootEvents {
    /// A handler for a chip using `hal`, whose LIBOS arguments are at `libos_args` and whose
    /// bootloader has `app_version`.
    pub fn new(hal: FalconHal, libos_args: u64, app_version: u32) -> Self {
        BootEvents {
            hal,
            libos_args,
            app_version,
            scripts: 0,
            commands: 0,
            save_area: [0; 8],
            last_error: None,
        }
    }

    /// Scripts run.
    pub fn scripts_run(&self) -> u32 {
        self.scripts
    }

    /// Commands run.
    pub fn commands_run(&self) -> u32 {
        self.commands
    }

    /// The register save area after the last script.
    pub fn save_area(&self) -> &[u32; 8] {
        &self.save_area
    }

    /// Why the last script failed, if it did.
    pub fn last_error(&self) -> Option<SequencerError> {
        self.last_error
    }

    fn run<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &mut self,
        bar0: &M,
        clock: &C,
        cmd: SeqCommand,
    ) -> Result<(), SequencerError> {
        let read = |addr: u32| {
            bar0.try_read32(addr as usize)
                .map_err(|_| SequencerError::BadAddress { addr })
        };
        let write = |addr: u32, v: u32| {
            bar0.try_write32(addr as usize, v)
                .map_err(|_| SequencerError::BadAddress { addr })
        };
        let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, self.hal);
        match cmd {
            SeqCommand::RegWrite { addr, val } => write(addr, val)?,
            SeqCommand::RegModify { addr, mask, val } => {
                let v = read(addr)?;
                write(addr, (v & !mask) | val)?;
            }
            SeqCommand::RegPoll {
                addr,
                mask,
                val,
                timeout,
                error,
            } => {
                let t = if timeout == 0 {
                    SEQ_POLL_DEFAULT
                } else {
                    Duration::from_micros(timeout as u64).min(SEQ_POLL_MAX)
                };
                let mut last = read(addr)?;
                let r: Result<(), PollError> = poll_until(
                    clock,
                    t,
                    Duration::from_micros(1),
                    "a CPU-sequencer REG_POLL",
                    || {
                        last = bar0.read32(addr as usize);
                        Ok((last & mask == val).then_some(()))
                    },
                );
                r.map_err(|_| SequencerError::PollTimeout {
                    addr,
                    mask,
                    val,
                    last,
                    error,
                })?;
            }
            SeqCommand::DelayUs(us) => {
                clock.delay(Duration::from_micros(us as u64).min(SEQ_DELAY_MAX))
            }
            SeqCommand::RegStore { addr, index } => {
                let v = read(addr)?;
                *self
                    .save_area
                    .get_mut(index as usize)
                    .ok_or(SequencerError::Malformed(
                        "REG_STORE index beyond regSaveArea",
                    ))? = v;
            }
            SeqCommand::CoreReset => {
                gsp.reset().map_err(SequencerError::Falcon)?;
                gsp.disable_ctx_req();
            }
            SeqCommand::CoreStart => gsp.start_cpu(),
            SeqCommand::CoreWaitForHalt => gsp
                .wait_halted(HS_HALT_TIMEOUT)
                .map_err(SequencerError::Falcon)?,
            SeqCommand::CoreResume => self.core_resume(bar0, clock)?,
        }
        Ok(())
    }

    fn core_resume<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &self,
        bar0: &M,
        clock: &C,
    ) -> Result<(), SequencerError> {
        let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, self.hal);
        let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, clock, self.hal);
        gsp.reset_into_riscv().map_err(SequencerError::Falcon)?;
        gsp.write_mailboxes(self.libos_args as u32, (self.libos_args >> 32) as u32);
        sec2.start_cpu();
        let r: Result<(), PollError> = poll_until(
            clock,
            SEQ_RELOAD_TIMEOUT,
            Duration::from_micros(10),
            "SEC2 to reload GSP-RM (BSI_SECURE_SCRATCH_14.BOOT_STAGE_3_HANDOFF)",
            || {
                let v = NV_PGC6_BSI_SECURE_SCRATCH_14::read(bar0);
                Ok((u32::from(v) != u32::MAX && v.boot_stage_3_handoff()).then_some(()))
            },
        );
        let (m0, _) = sec2.mailboxes();
        if r.is_err() {
            return Err(SequencerError::ReloadTimeout { sec2_mailbox0: m0 });
        }
        if m0 != 0 {
            return Err(SequencerError::ReloadFailed { sec2_mailbox0: m0 });
        }
        gsp.write_os_version(self.app_version);
        gsp.wait_riscv_active(RISCV_ACTIVE_TIMEOUT)
            .map_err(|_| SequencerError::RiscvNotActive)
    }
}

impl EventHandler for BootEvents {
    fn on_event<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &mut self,
        ctx: EventContext<'_, M, C>,
        event: &RawEvent<'_>,
    ) -> Result<Disposition, GspError> {
        if event.function != NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER {
            return Ok(Disposition::Queue);
        }
        self.scripts += 1;
        let fail = |s: &mut Self, e: SequencerError| {
            log::error!("gsp: {e}");
            s.last_error = Some(e);
            GspError::Handler("CPU-sequencer script failed")
        };
        let cmds = match event.sequencer() {
            Ok(c) => c,
            Err(_) => {
                return Err(fail(
                    self,
                    SequencerError::Malformed("header (bufferSizeDWord/cmdIndex) inconsistent"),
                ));
            }
        };
        self.save_area = cmds.header().regSaveArea;
        for cmd in cmds {
            let cmd = match cmd {
                Ok(c) => c,
                Err(_) => {
                    return Err(fail(
                        self,
                        SequencerError::Malformed("unknown opcode or truncated command"),
                    ));
                }
            };
            log::debug!("gsp: sequencer {cmd:?}");
            self.commands += 1;
            if let Err(e) = self.run(ctx.bar0, ctx.clock, cmd) {
                return Err(fail(self, e));
            }
        }
        Ok(Disposition::Handled)
    }
}
