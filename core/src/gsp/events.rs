//! Messages GSP-RM sends unasked (`NV_VGPU_MSG_EVENT_*`, r570 numbering 0x1001..0x1022).
//!
//! They arrive on the status queue between RPC replies, often while the driver waits for one,
//! and are never dropped on the floor: [`super::rpc::GspRpc`] parses each into a small
//! [`GspEvent`], offers it to the [`EventHandler`] (which must service the CPU sequencer
//! synchronously during boot), remembers the last RC and Xid, and queues it in a bounded
//! [`EventQueue`].
//!
//! Overflow policy of the queue: it keeps the *first* [`EVENT_QUEUE_LEN`] events not yet
//! taken, counts the rest in [`EventQueue::dropped`], and never blocks, except that an RC,
//! Xid or MMU-fault event arriving at a full queue displaces the oldest informational one
//! (a GSP that sends a NOCAT record with every reply must not hide a channel reset); the
//! newest RC and Xid are also kept apart ([`super::rpc::GspRpc::last_rc`]).

use core::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::GspError;
use crate::hal::{Clock, Mmio};
use crate::rm::RmStatus;

/// `NV_VGPU_MSG_EVENT_FIRST_EVENT`.
pub const NV_VGPU_MSG_EVENT_FIRST_EVENT: u32 = 0x1000;
/// `NV_VGPU_MSG_EVENT_GSP_INIT_DONE`.
pub const NV_VGPU_MSG_EVENT_GSP_INIT_DONE: u32 = 0x1001;
/// `NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER`.
pub const NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER: u32 = 0x1002;
/// `NV_VGPU_MSG_EVENT_POST_EVENT`.
pub const NV_VGPU_MSG_EVENT_POST_EVENT: u32 = 0x1003;
/// `NV_VGPU_MSG_EVENT_RC_TRIGGERED`.
pub const NV_VGPU_MSG_EVENT_RC_TRIGGERED: u32 = 0x1004;
/// `NV_VGPU_MSG_EVENT_MMU_FAULT_QUEUED`.
pub const NV_VGPU_MSG_EVENT_MMU_FAULT_QUEUED: u32 = 0x1005;
/// `NV_VGPU_MSG_EVENT_OS_ERROR_LOG`.
pub const NV_VGPU_MSG_EVENT_OS_ERROR_LOG: u32 = 0x1006;
/// `NV_VGPU_MSG_EVENT_UCODE_LIBOS_PRINT`.
pub const NV_VGPU_MSG_EVENT_UCODE_LIBOS_PRINT: u32 = 0x100c;
/// `NV_VGPU_MSG_EVENT_GSP_LOCKDOWN_NOTICE` (r570; 0x101d in r535).
pub const NV_VGPU_MSG_EVENT_GSP_LOCKDOWN_NOTICE: u32 = 0x101c;
/// `NV_VGPU_MSG_EVENT_UPDATE_GSP_TRACE` (r570).
pub const NV_VGPU_MSG_EVENT_UPDATE_GSP_TRACE: u32 = 0x101e;
/// `NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD` (r570).
pub const NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD: u32 = 0x1020;
/// `NV_VGPU_MSG_EVENT_FECS_ERROR` (r570).
pub const NV_VGPU_MSG_EVENT_FECS_ERROR: u32 = 0x1021;
/// `NV_VGPU_MSG_EVENT_RECOVERY_ACTION` (r570).
pub const NV_VGPU_MSG_EVENT_RECOVERY_ACTION: u32 = 0x1022;
/// `NV_VGPU_MSG_EVENT_NUM_EVENTS` (r570).
pub const NV_VGPU_MSG_EVENT_NUM_EVENTS: u32 = 0x1023;

/// Events queued before [`EventQueue`] starts dropping.
pub const EVENT_QUEUE_LEN: usize = 32;

/// `rpc_os_error_log_v17_00`, r570 layout (r580 moves the last field to offset 4).
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rpc_os_error_log_v17_00 {
    /// The Xid.
    pub exceptType: u32,
    pub runlistId: u32,
    pub chid: u32,
    /// NUL-terminated text.
    pub errString: [u8; 0x100],
    pub preemptiveRemovalPreviousXid: u32,
}

/// `rpc_rc_triggered_v17_02`, r570 layout (48 bytes, then `rcJournalBuffer[]`).
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_rc_triggered_v17_02 {
    pub nv2080EngineType: u32,
    pub chid: u32,
    pub gfid: u32,
    pub exceptLevel: u32,
    pub exceptType: u32,
    pub scope: u32,
    pub partitionAttributionId: u16,
    pub _pad0: u16,
    pub mmuFaultAddrLo: u32,
    pub mmuFaultAddrHi: u32,
    pub mmuFaultType: u32,
    pub bCallbackNeeded: u8,
    pub _pad1: [u8; 3],
    pub rcJournalBufferSize: u32,
}

/// `rpc_post_event_v17_00` up to `eventData[]` (which starts at offset 29).
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_post_event_v17_00 {
    pub hClient: u32,
    pub hEvent: u32,
    pub notifyIndex: u32,
    pub data: u32,
    pub info16: u16,
    pub _pad0: u16,
    pub status: u32,
    pub eventDataSize: u32,
    pub bNotifyList: u8,
    pub _pad1: [u8; 3],
}

/// Offset of `rpc_post_event_v17_00::eventData`.
pub const POST_EVENT_DATA_OFFSET: usize = 29;

/// `rpc_run_cpu_sequencer_v17_00` up to `commandBuffer[]` (offset 40).
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_run_cpu_sequencer_v17_00 {
    pub bufferSizeDWord: u32,
    /// Dwords of commands in `commandBuffer`.
    pub cmdIndex: u32,
    pub regSaveArea: [u32; 8],
}

/// `rpc_ucode_libos_print_v1E_08` up to `libosPrintBuf[]`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_ucode_libos_print_v1E_08 {
    pub ucodeEngDesc: u32,
    pub libosPrintBufSize: u32,
}

/// `rpc_update_gsp_trace_v01_00`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_update_gsp_trace_v01_00 {
    pub records: u32,
    pub data: u32,
}

/// `rpc_fecs_error_v26_02`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_fecs_error_v26_02 {
    pub grIdx: u32,
    pub error_type: u8,
    pub _pad: [u8; 3],
}

/// `rpc_recovery_action_v28_01`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_recovery_action_v28_01 {
    pub r#type: u32,
    pub value: u8,
    pub _pad: [u8; 3],
}

/// A channel reset by GSP-RM (RC_TRIGGERED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcTriggered {
    /// `NV2080_ENGINE_TYPE_*` of the engine.
    pub engine_type: u32,
    /// Channel id.
    pub chid: u32,
    /// `ROBUST_CHANNEL_*` exception (an Xid, e.g. 31 = MMU fault).
    pub except_type: u32,
    /// Exception level.
    pub except_level: u32,
    /// Scope (channel, TSG, engine).
    pub scope: u32,
    /// Faulting address for MMU faults.
    pub mmu_fault_addr: u64,
    /// `NV_PFAULT_FAULT_TYPE_*` for MMU faults.
    pub mmu_fault_type: u32,
    /// Whether the kernel RM must call back.
    pub callback_needed: bool,
}

/// An Xid message (OS_ERROR_LOG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsErrorLog {
    /// The Xid.
    pub except_type: u32,
    /// Runlist.
    pub runlist_id: u32,
    /// Channel.
    pub chid: u32,
    /// The text, lossy (non-ASCII bytes replaced by `?`).
    pub text: heapless::String<256>,
    /// r570's `preemptiveRemovalPreviousXid`, when the payload has it.
    pub preemptive_removal_previous_xid: Option<u32>,
}

/// An event, parsed as far as its r570 layout allows.
// Fixed-size on purpose (no heap): the Xid text makes one variant large.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GspEvent {
    /// GSP-RM finished initialising; `status` is the header's `rpc_result`.
    InitDone {
        /// How init went.
        status: RmStatus,
    },
    /// A CPU-sequencer script (serviced by the [`EventHandler`]).
    RunCpuSequencer {
        /// `bufferSizeDWord`.
        buffer_size_dwords: u32,
        /// Dwords of commands.
        cmd_dwords: u32,
    },
    /// An RM event notification for a client.
    PostEvent {
        /// Client.
        h_client: u32,
        /// Event object.
        h_event: u32,
        /// Notifier index.
        notify_index: u32,
        /// Data.
        data: u32,
        /// 16-bit info.
        info16: u16,
        /// Status.
        status: u32,
        /// Bytes of event data following.
        event_data_size: u32,
    },
    /// A channel was reset.
    RcTriggered(RcTriggered),
    /// A replayable MMU fault was queued for the CPU to service.
    MmuFaultQueued,
    /// An Xid.
    OsErrorLog(OsErrorLog),
    /// A log buffer from another microcontroller (PMU).
    UcodeLibosPrint {
        /// `ucodeEngDesc`.
        ucode_eng_desc: u32,
        /// Bytes of log data.
        size: u32,
    },
    /// GSP entered or left lockdown (its registers are unreadable meanwhile).
    LockdownNotice {
        /// Entering.
        engaging: bool,
    },
    /// GSP trace records are available.
    UpdateGspTrace {
        /// Records.
        records: u32,
        /// Data.
        data: u32,
    },
    /// A NOCAT (error report) record.
    PostNocatRecord {
        /// Payload bytes.
        len: usize,
    },
    /// FECS (context switch) logging error.
    FecsError {
        /// GR index.
        gr_idx: u32,
        /// `FECS_ERROR_EVENT_TYPE_*`.
        error_type: u8,
    },
    /// GSP-RM asks for a recovery action (drain, reboot...).
    RecoveryAction {
        /// `GPU_RECOVERY_EVENT_TYPE_*`.
        kind: u32,
        /// Its argument.
        value: bool,
    },
    /// Any other event (named by [`super::rpc::FunctionName`]).
    Other {
        /// Event number.
        function: u32,
        /// Payload bytes.
        len: usize,
    },
    /// A reply nobody waits for (e.g. to an RPC that timed out), kept for diagnosis.
    UnexpectedReply {
        /// Function.
        function: u32,
        /// RPC sequence number in its header.
        sequence: u32,
    },
    /// A payload too short for its layout.
    Malformed {
        /// Event number.
        function: u32,
        /// Payload bytes.
        len: usize,
        /// Bytes the layout needs.
        need: usize,
    },
}

/// Reads bytes of an event's payload (it stays in the status queue until handled).
pub trait PayloadRead {
    /// Copies payload bytes `[offset, offset + dst.len())`.
    fn read_payload(&self, offset: usize, dst: &mut [u8]) -> Result<(), GspError>;
}

impl PayloadRead for &[u8] {
    fn read_payload(&self, offset: usize, dst: &mut [u8]) -> Result<(), GspError> {
        let src = offset
            .checked_add(dst.len())
            .and_then(|end| self.get(offset..end))
            .ok_or(GspError::Hal(crate::hal::HalError::OutOfRange {
                offset: offset as u64,
                len: dst.len() as u64,
                limit: self.len() as u64,
            }))?;
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// An event as the handler sees it: parsed summary plus access to the raw payload.
pub struct RawEvent<'a> {
    /// Event number.
    pub function: u32,
    /// `rpc_result` from the RPC header.
    pub rpc_result: u32,
    /// Payload bytes.
    pub len: usize,
    /// The parsed summary.
    pub parsed: &'a GspEvent,
    reader: &'a dyn PayloadRead,
}

impl core::fmt::Debug for RawEvent<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawEvent")
            .field("function", &self.function)
            .field("len", &self.len)
            .field("parsed", self.parsed)
            .finish()
    }
}

impl<'a> RawEvent<'a> {
    /// An event over `reader` (used by the RPC layer and by tests).
    pub fn new(
        function: u32,
        rpc_result: u32,
        len: usize,
        parsed: &'a GspEvent,
        reader: &'a dyn PayloadRead,
    ) -> Self {
        RawEvent {
            function,
            rpc_result,
            len,
            parsed,
            reader,
        }
    }

    /// Copies payload bytes, bounds-checked against the payload length.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), GspError> {
        if offset.checked_add(dst.len()).is_none_or(|e| e > self.len) {
            return Err(GspError::Malformed {
                function: self.function,
                len: self.len,
                need: offset.saturating_add(dst.len()),
            });
        }
        self.reader.read_payload(offset, dst)
    }

    /// Reads a little-endian u32 of the payload.
    pub fn read_u32(&self, offset: usize) -> Result<u32, GspError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Decodes a GSP_RUN_CPU_SEQUENCER payload into its commands.
    pub fn sequencer(&self) -> Result<SequencerCommands<'_, 'a>, GspError> {
        let need = core::mem::size_of::<rpc_run_cpu_sequencer_v17_00>();
        let mut h = rpc_run_cpu_sequencer_v17_00::default();
        self.read(0, h.as_mut_bytes())
            .map_err(|_| GspError::Malformed {
                function: self.function,
                len: self.len,
                need,
            })?;
        // kgspExecuteSequencerBuffer: cmdIndex < bufferSizeDWord, and the commands must be
        // in the payload.
        let in_payload = (self.len - need) / 4;
        if h.bufferSizeDWord == 0
            || h.cmdIndex >= h.bufferSizeDWord
            || h.cmdIndex as usize > in_payload
        {
            return Err(GspError::Malformed {
                function: self.function,
                len: self.len,
                need: need + h.cmdIndex as usize * 4,
            });
        }
        Ok(SequencerCommands {
            ev: self,
            header: h,
            at: 0,
        })
    }
}

/// `GSP_SEQ_BUF_OPCODE` commands of the CPU sequencer (`rmgspseq.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCommand {
    /// `REG_WRITE(addr, val)`.
    RegWrite {
        /// BAR0 offset.
        addr: u32,
        /// Value.
        val: u32,
    },
    /// `REG_MODIFY(addr, mask, val)`: `reg = (reg & !mask) | val`.
    RegModify {
        /// BAR0 offset.
        addr: u32,
        /// Bits to clear.
        mask: u32,
        /// Bits to set.
        val: u32,
    },
    /// `REG_POLL(addr, mask, val, timeout, error)`: wait until `reg & mask == val`.
    RegPoll {
        /// BAR0 offset.
        addr: u32,
        /// Mask.
        mask: u32,
        /// Expected value.
        val: u32,
        /// Timeout (RM passes it to `gpuSetTimeout`, i.e. microseconds).
        timeout: u32,
        /// `GSP_SEQUENCER_BUFFER_ERR` code to report on timeout.
        error: u32,
    },
    /// `DELAY_US(val)`.
    DelayUs(u32),
    /// `REG_STORE(addr, index)`: save a register into `regSaveArea[index]`.
    RegStore {
        /// BAR0 offset.
        addr: u32,
        /// Save-area index (< 8).
        index: u32,
    },
    /// `CORE_RESET`.
    CoreReset,
    /// `CORE_START`.
    CoreStart,
    /// `CORE_WAIT_FOR_HALT`.
    CoreWaitForHalt,
    /// `CORE_RESUME`.
    CoreResume,
}

/// Iterator over a sequencer script; stops at the first malformed command.
pub struct SequencerCommands<'e, 'a> {
    ev: &'e RawEvent<'a>,
    header: rpc_run_cpu_sequencer_v17_00,
    at: u32,
}

impl core::fmt::Debug for SequencerCommands<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SequencerCommands")
            .field("header", &self.header)
            .field("at", &self.at)
            .finish()
    }
}

impl SequencerCommands<'_, '_> {
    /// The header (with the register save area GSP-RM sent).
    pub fn header(&self) -> &rpc_run_cpu_sequencer_v17_00 {
        &self.header
    }

    fn dword(&self, i: u32) -> Result<u32, GspError> {
        self.ev.read_u32(40 + i as usize * 4)
    }
}

impl Iterator for SequencerCommands<'_, '_> {
    type Item = Result<SeqCommand, GspError>;

    fn next(&mut self) -> Option<Self::Item> {
        let end = self.header.cmdIndex;
        if self.at >= end {
            return None;
        }
        let op = match self.dword(self.at) {
            Ok(op) => op,
            Err(e) => {
                self.at = end;
                return Some(Err(e));
            }
        };
        let n = match op {
            0 => 2,
            1 => 3,
            2 => 5,
            3 => 1,
            4 => 2,
            5..=8 => 0,
            _ => {
                self.at = end;
                return Some(Err(GspError::Handler("unknown CPU-sequencer opcode")));
            }
        };
        if self.at + 1 + n > end {
            self.at = end;
            return Some(Err(GspError::Handler("truncated CPU-sequencer command")));
        }
        let mut a = [0u32; 5];
        for (i, slot) in a.iter_mut().take(n as usize).enumerate() {
            match self.dword(self.at + 1 + i as u32) {
                Ok(v) => *slot = v,
                Err(e) => {
                    self.at = end;
                    return Some(Err(e));
                }
            }
        }
        self.at += 1 + n;
        Some(Ok(match op {
            0 => SeqCommand::RegWrite {
                addr: a[0],
                val: a[1],
            },
            1 => SeqCommand::RegModify {
                addr: a[0],
                mask: a[1],
                val: a[2],
            },
            2 => SeqCommand::RegPoll {
                addr: a[0],
                mask: a[1],
                val: a[2],
                timeout: a[3],
                error: a[4],
            },
            3 => SeqCommand::DelayUs(a[0]),
            4 => SeqCommand::RegStore {
                addr: a[0],
                index: a[1],
            },
            5 => SeqCommand::CoreReset,
            6 => SeqCommand::CoreStart,
            7 => SeqCommand::CoreWaitForHalt,
            _ => SeqCommand::CoreResume,
        }))
    }
}

#[allow(clippy::result_large_err)]
fn read_prefix<T: FromBytes + IntoBytes>(
    function: u32,
    len: usize,
    r: &dyn PayloadRead,
) -> Result<T, GspEvent> {
    let mut v = T::new_zeroed();
    let need = core::mem::size_of::<T>();
    if len < need || r.read_payload(0, v.as_mut_bytes()).is_err() {
        return Err(GspEvent::Malformed {
            function,
            len,
            need,
        });
    }
    Ok(v)
}

impl GspEvent {
    /// Parses an event's payload (`len` bytes readable through `r`). Never fails: payloads
    /// too short for their layout become [`GspEvent::Malformed`].
    pub fn parse(function: u32, rpc_result: u32, len: usize, r: &dyn PayloadRead) -> GspEvent {
        let parsed = match function {
            NV_VGPU_MSG_EVENT_GSP_INIT_DONE => Ok(GspEvent::InitDone {
                status: RmStatus(rpc_result),
            }),
            NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER => {
                read_prefix::<rpc_run_cpu_sequencer_v17_00>(function, len, r).map(|h| {
                    GspEvent::RunCpuSequencer {
                        buffer_size_dwords: h.bufferSizeDWord,
                        cmd_dwords: h.cmdIndex,
                    }
                })
            }
            NV_VGPU_MSG_EVENT_POST_EVENT => {
                if len < POST_EVENT_DATA_OFFSET {
                    Err(GspEvent::Malformed {
                        function,
                        len,
                        need: POST_EVENT_DATA_OFFSET,
                    })
                } else {
                    let mut p = rpc_post_event_v17_00::default();
                    let n = len.min(core::mem::size_of::<rpc_post_event_v17_00>());
                    match r.read_payload(0, &mut p.as_mut_bytes()[..n]) {
                        Ok(()) => Ok(GspEvent::PostEvent {
                            h_client: p.hClient,
                            h_event: p.hEvent,
                            notify_index: p.notifyIndex,
                            data: p.data,
                            info16: p.info16,
                            status: p.status,
                            event_data_size: p.eventDataSize,
                        }),
                        Err(_) => Err(GspEvent::Malformed {
                            function,
                            len,
                            need: POST_EVENT_DATA_OFFSET,
                        }),
                    }
                }
            }
            NV_VGPU_MSG_EVENT_RC_TRIGGERED => {
                read_prefix::<rpc_rc_triggered_v17_02>(function, len, r).map(|p| {
                    GspEvent::RcTriggered(RcTriggered {
                        engine_type: p.nv2080EngineType,
                        chid: p.chid,
                        except_type: p.exceptType,
                        except_level: p.exceptLevel,
                        scope: p.scope,
                        mmu_fault_addr: ((p.mmuFaultAddrHi as u64) << 32) | p.mmuFaultAddrLo as u64,
                        mmu_fault_type: p.mmuFaultType,
                        callback_needed: p.bCallbackNeeded != 0,
                    })
                })
            }
            NV_VGPU_MSG_EVENT_MMU_FAULT_QUEUED => Ok(GspEvent::MmuFaultQueued),
            NV_VGPU_MSG_EVENT_OS_ERROR_LOG => parse_os_error_log(function, len, r),
            NV_VGPU_MSG_EVENT_UCODE_LIBOS_PRINT => {
                read_prefix::<rpc_ucode_libos_print_v1E_08>(function, len, r).map(|p| {
                    GspEvent::UcodeLibosPrint {
                        ucode_eng_desc: p.ucodeEngDesc,
                        size: p.libosPrintBufSize,
                    }
                })
            }
            NV_VGPU_MSG_EVENT_GSP_LOCKDOWN_NOTICE => {
                read_prefix::<[u8; 1]>(function, len, r).map(|b| GspEvent::LockdownNotice {
                    engaging: b[0] != 0,
                })
            }
            NV_VGPU_MSG_EVENT_UPDATE_GSP_TRACE => {
                read_prefix::<rpc_update_gsp_trace_v01_00>(function, len, r).map(|p| {
                    GspEvent::UpdateGspTrace {
                        records: p.records,
                        data: p.data,
                    }
                })
            }
            NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD => Ok(GspEvent::PostNocatRecord { len }),
            NV_VGPU_MSG_EVENT_FECS_ERROR => {
                // The struct is 8 bytes with padding; the meaningful part is 5.
                let mut b = [0u8; 8];
                let n = len.min(8);
                if len < 5 || r.read_payload(0, &mut b[..n]).is_err() {
                    Err(GspEvent::Malformed {
                        function,
                        len,
                        need: 5,
                    })
                } else {
                    Ok(GspEvent::FecsError {
                        gr_idx: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                        error_type: b[4],
                    })
                }
            }
            NV_VGPU_MSG_EVENT_RECOVERY_ACTION => {
                let mut b = [0u8; 8];
                let n = len.min(8);
                if len < 5 || r.read_payload(0, &mut b[..n]).is_err() {
                    Err(GspEvent::Malformed {
                        function,
                        len,
                        need: 5,
                    })
                } else {
                    Ok(GspEvent::RecoveryAction {
                        kind: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                        value: b[4] != 0,
                    })
                }
            }
            _ => Ok(GspEvent::Other { function, len }),
        };
        parsed.unwrap_or_else(|m| m)
    }
}

#[allow(clippy::result_large_err)]
fn parse_os_error_log(
    function: u32,
    len: usize,
    r: &dyn PayloadRead,
) -> Result<GspEvent, GspEvent> {
    const MIN: usize = 12;
    let mut raw = [0u8; core::mem::size_of::<rpc_os_error_log_v17_00>()];
    let n = len.min(raw.len());
    if len < MIN || r.read_payload(0, &mut raw[..n]).is_err() {
        return Err(GspEvent::Malformed {
            function,
            len,
            need: MIN,
        });
    }
    let p = rpc_os_error_log_v17_00::read_from_bytes(&raw).map_err(|_| GspEvent::Malformed {
        function,
        len,
        need: MIN,
    })?;
    let text_len = n.saturating_sub(12).min(0x100);
    let mut text = heapless::String::new();
    for &b in p.errString.iter().take(text_len).take_while(|&&b| b != 0) {
        let c = if b.is_ascii() && (b >= 0x20 || b == b'\n' || b == b'\t') {
            b as char
        } else {
            '?'
        };
        if text.push(c).is_err() {
            break;
        }
    }
    Ok(GspEvent::OsErrorLog(OsErrorLog {
        except_type: p.exceptType,
        runlist_id: p.runlistId,
        chid: p.chid,
        text,
        preemptive_removal_previous_xid: (len >= raw.len())
            .then_some(p.preemptiveRemovalPreviousXid),
    }))
}

/// What the handler did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Serviced; do not queue it.
    Handled,
    /// Queue it for [`super::rpc::GspRpc::take_events`].
    Queue,
}

/// Hardware the handler may need (the CPU sequencer writes registers and waits).
#[derive(Debug)]
pub struct EventContext<'a, M: ?Sized, C: ?Sized> {
    /// BAR0.
    pub bar0: &'a M,
    /// The clock.
    pub clock: &'a C,
    /// Clock time ([`Clock::now`]) by which the handler must return: the end of the wait
    /// that received the event. Handlers that wait (the CPU sequencer) stop there.
    pub deadline: Duration,
}

/// Services events synchronously, inside whatever wait received them.
///
/// The boot code implements this to run GSP_RUN_CPU_SEQUENCER scripts; returning an error
/// aborts the current wait with it. Sending RPCs from a handler is impossible by design (RM
/// forbids recursive polling too).
pub trait EventHandler {
    /// Called once per event, before it is queued.
    fn on_event<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &mut self,
        ctx: EventContext<'_, M, C>,
        event: &RawEvent<'_>,
    ) -> Result<Disposition, GspError>;
}

/// Queues every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHandler;

impl EventHandler for NoHandler {
    fn on_event<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &mut self,
        _ctx: EventContext<'_, M, C>,
        _event: &RawEvent<'_>,
    ) -> Result<Disposition, GspError> {
        Ok(Disposition::Queue)
    }
}

/// Events not yet taken, in arrival order; see the module docs for the overflow policy.
#[derive(Debug, Default, Clone)]
pub struct EventQueue {
    events: heapless::Deque<GspEvent, EVENT_QUEUE_LEN>,
    dropped: u64,
}

/// Events a channel's fate depends on: when the queue is full they displace informational
/// ones (NOCAT records, traces, log prints) instead of being dropped.
fn matters(ev: &GspEvent) -> bool {
    matches!(
        ev,
        GspEvent::RcTriggered(_) | GspEvent::OsErrorLog(_) | GspEvent::MmuFaultQueued
    )
}

impl EventQueue {
    /// Appends `ev`. When the queue is full, an RC, Xid or MMU-fault event displaces the
    /// oldest queued event that is none of those; anything else is counted as dropped.
    pub fn push(&mut self, ev: GspEvent) {
        if !self.events.is_full() {
            let _ = self.events.push_back(ev);
            return;
        }
        self.dropped += 1;
        if !matters(&ev) {
            return;
        }
        let Some(i) = self.events.iter().position(|e| !matters(e)) else {
            return;
        };
        // Rebuild without the displaced one, keeping the order.
        let mut kept = heapless::Deque::new();
        for (j, e) in core::mem::take(&mut self.events).into_iter().enumerate() {
            if j != i {
                let _ = kept.push_back(e);
            }
        }
        let _ = kept.push_back(ev);
        self.events = kept;
    }

    /// Takes the oldest event.
    pub fn pop(&mut self) -> Option<GspEvent> {
        self.events.pop_front()
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether none are queued.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The queued events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &GspEvent> {
        self.events.iter()
    }
}

#[cfg(test)]
mod tests;
