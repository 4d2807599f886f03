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
/// Longest a whole script may run, whatever its commands ask (the scripts RM's boot and
/// resume paths send are a few register accesses and at most one CORE_RESUME, which waits up
/// to [`SEQ_RELOAD_TIMEOUT`] + [`RISCV_ACTIVE_TIMEOUT`]). A script also stops at the deadline
/// of the wait that received it ([`EventContext::deadline`]), whichever comes first.
pub const SEQ_SCRIPT_MAX: Duration = Duration::from_secs(10);

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
    /// The script was still running at its deadline (the caller's wait, capped at
    /// [`SEQ_SCRIPT_MAX`]).
    ScriptTimeout {
        /// Commands completed before the deadline.
        commands: u32,
        /// How long the script had.
        allowed: Duration,
    },
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
            SequencerError::ScriptTimeout { commands, allowed } => write!(
                f,
                "CPU-sequencer script from GSP-RM still running after {allowed:?} ({commands} \
                 commands done): GSP-RM sent a script that waits longer than the driver allows; \
                 reset the GPU and read GSP-RM's logs"
            ),
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

    /// Runs one command; every wait in it ends by `deadline` (clock time), and a wait the
    /// deadline cut short is `Err(None)`: the caller reports the script's timeout.
    fn run<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &mut self,
        bar0: &M,
        clock: &C,
        deadline: Duration,
        cmd: SeqCommand,
    ) -> Result<(), Option<SequencerError>> {
        let left = || deadline.saturating_sub(clock.now());
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
                let asked = if timeout == 0 {
                    SEQ_POLL_DEFAULT
                } else {
                    Duration::from_micros(timeout as u64).min(SEQ_POLL_MAX)
                };
                let t = asked.min(left());
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
                if r.is_err() {
                    return Err((t == asked).then_some(SequencerError::PollTimeout {
                        addr,
                        mask,
                        val,
                        last,
                        error,
                    }));
                }
            }
            SeqCommand::DelayUs(us) => {
                let asked = Duration::from_micros(us as u64).min(SEQ_DELAY_MAX);
                let t = asked.min(left());
                clock.delay(t);
                if t < asked {
                    return Err(None);
                }
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
            SeqCommand::CoreWaitForHalt => {
                let t = HS_HALT_TIMEOUT.min(left());
                gsp.wait_halted(t)
                    .map_err(|e| (t == HS_HALT_TIMEOUT).then_some(SequencerError::Falcon(e)))?
            }
            SeqCommand::CoreResume => self.core_resume(bar0, clock, deadline)?,
        }
        Ok(())
    }

    fn core_resume<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &self,
        bar0: &M,
        clock: &C,
        deadline: Duration,
    ) -> Result<(), Option<SequencerError>> {
        let left = || deadline.saturating_sub(clock.now());
        let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, self.hal);
        let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, clock, self.hal);
        gsp.reset_into_riscv().map_err(SequencerError::Falcon)?;
        gsp.write_mailboxes(self.libos_args as u32, (self.libos_args >> 32) as u32);
        sec2.start_cpu();
        let reload = SEQ_RELOAD_TIMEOUT.min(left());
        let r: Result<(), PollError> = poll_until(
            clock,
            reload,
            Duration::from_micros(10),
            "SEC2 to reload GSP-RM (BSI_SECURE_SCRATCH_14.BOOT_STAGE_3_HANDOFF)",
            || {
                let v = NV_PGC6_BSI_SECURE_SCRATCH_14::read(bar0);
                Ok((u32::from(v) != u32::MAX && v.boot_stage_3_handoff()).then_some(()))
            },
        );
        let (m0, _) = sec2.mailboxes();
        if r.is_err() {
            return Err((reload == SEQ_RELOAD_TIMEOUT)
                .then_some(SequencerError::ReloadTimeout { sec2_mailbox0: m0 }));
        }
        if m0 != 0 {
            return Err(Some(SequencerError::ReloadFailed { sec2_mailbox0: m0 }));
        }
        gsp.write_os_version(self.app_version);
        let t = RISCV_ACTIVE_TIMEOUT.min(left());
        gsp.wait_riscv_active(t)
            .map_err(|_| (t == RISCV_ACTIVE_TIMEOUT).then_some(SequencerError::RiscvNotActive))
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
        let start = ctx.clock.now();
        let deadline = ctx.deadline.min(start.saturating_add(SEQ_SCRIPT_MAX));
        let mut done = 0u32;
        let timed_out = |s: &mut Self, done: u32| {
            fail(
                s,
                SequencerError::ScriptTimeout {
                    commands: done,
                    allowed: deadline.saturating_sub(start),
                },
            )
        };
        for cmd in cmds {
            if ctx.clock.now() >= deadline {
                return Err(timed_out(self, done));
            }
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
            match self.run(ctx.bar0, ctx.clock, deadline, cmd) {
                Ok(()) => done += 1,
                Err(Some(e)) => return Err(fail(self, e)),
                Err(None) => return Err(timed_out(self, done)),
            }
        }
        Ok(Disposition::Handled)
    }
}
