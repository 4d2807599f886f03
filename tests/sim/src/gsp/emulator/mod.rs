//! The GSP-RM emulator: the firmware's side of the message queues, on the real format.
//!
//! It reaches the shared memory only as GSP-RM does: by bus address through the page table
//! named in `MESSAGE_QUEUE_INIT_ARGUMENTS`, via [`SimCore::host`] (so a wrong page table is a
//! DMA fault). Its queue code is written independently of the driver's (only the ABI structs,
//! whose layouts are tested against NVIDIA's headers, are shared), and it checks everything
//! the driver writes: the command-queue header, element counts, lengths, the r570 checksum,
//! zero element tails (r535's whole-element rule), sequence numbers and continuation records.
//! Problems are recorded in [`EmuStats::errors`], never hidden.
//!
//! On each doorbell (`NV_PGSP_QUEUE_HEAD(0)`) it consumes every queued command, dispatches
//! GSP_RM_ALLOC / CONTROL / FREE to an [`RmService`], answers SET_SYSTEM_INFO, SET_REGISTRY and
//! GET_GSP_STATIC_INFO itself, and writes replies and queued events to the status queue. What
//! does not fit stays in an outbox until the next doorbell or [`GspEmulator::pump`];
//! [`EmuClock`] pumps whenever the driver waits, which models GSP-RM running concurrently.
//!
//! Faults ([`Fault`]) are injected one at a time into the next message(s) it writes.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nvbare_core::gsp::events::{
    NV_VGPU_MSG_EVENT_GSP_INIT_DONE, NV_VGPU_MSG_EVENT_GSP_LOCKDOWN_NOTICE,
    NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD, NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER,
    NV_VGPU_MSG_EVENT_MMU_FAULT_QUEUED, NV_VGPU_MSG_EVENT_OS_ERROR_LOG,
    NV_VGPU_MSG_EVENT_POST_EVENT, NV_VGPU_MSG_EVENT_RC_TRIGGERED,
    NV_VGPU_MSG_EVENT_UCODE_LIBOS_PRINT, rpc_post_event_v17_00, rpc_rc_triggered_v17_02,
    rpc_run_cpu_sequencer_v17_00,
};
use nvbare_core::gsp::msgq::{
    ENTRY_OFF, GSP_MSG_QUEUE_ELEMENT, MESSAGE_QUEUE_INIT_ARGUMENTS, MSGQ_FLAGS_SWAP_RX, RX_HDR_OFF,
    msgqTxHeader,
};
use nvbare_core::gsp::registry;
use nvbare_core::gsp::rpc::{
    self as rpc, NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD, NV_VGPU_MSG_FUNCTION_FREE,
    NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO, NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC,
    NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL, NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO,
    NV_VGPU_MSG_FUNCTION_SET_REGISTRY, NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER,
    NV_VGPU_MSG_HEADER_VERSION, NV_VGPU_MSG_SIGNATURE_VALID, NVOS00_PARAMETERS_v03_00,
    rpc_gsp_rm_alloc_v03_00, rpc_message_header_v03_00,
};
use nvbare_core::gsp::sysinfo::{GspStaticConfigInfo, GspSystemInfo};
use nvbare_core::hal::Clock;
use nvbare_core::rm::{Handle, RmAbi, RmStatus};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::SimGpu;
use crate::bar0::{MmioEngine, SimCore};
use crate::clock::SimClock;
use crate::models::ChipModel;
use crate::rm_service::{RmCaller, RmNotice, RmService};

mod dispatch;
mod inbox;
mod log;
mod outbox;

use log::build_log_image;

const PAGE: usize = 4096;
/// A page of zeros (slice copies and compares are memcpy/memcmp even in debug builds).
static ZERO_PAGE: [u8; PAGE] = [0; PAGE];
const ELEM_HDR: usize = 48;
const RPC_HDR: usize = 32;
const RPC_MAX: usize = 16 * PAGE - ELEM_HDR;
/// `NV_PGSP_QUEUE_HEAD(0)`.
pub(crate) const QUEUE_HEAD0: u32 = 0x11_0c00;
/// `NV_VGPU_MSG_RESULT_RPC_UNKNOWN_FUNCTION`.
const RPC_UNKNOWN_FUNCTION: u32 = 0xff10_0001;
/// `NV_VGPU_MSG_RESULT_RPC_INVALID_MESSAGE_FORMAT`.
const RPC_INVALID_MESSAGE_FORMAT: u32 = 0xff10_0002;
/// `NV_ERR_INVALID_PARAM_STRUCT`.
const NV_ERR_INVALID_PARAM_STRUCT: u32 = 0x3a;
/// Index in `Inner::pointer_errors` of the command queue's write pointer.
const CMD_WRITE_PTR: usize = 0;
/// Index in `Inner::pointer_errors` of the CPU's status-queue read pointer.
const STAT_READ_PTR: usize = 1;

/// Handles GSP-RM reports for its internal client, device and subdevice. The client is the
/// first handle of RM's internal range (`RS_CLIENT_INTERNAL_HANDLE_BASE`); not 0xc1e00004,
/// which tinygrad allocates as a new client on real GPUs (a duplicate would fail with
/// NV_ERR_INSERT_DUPLICATE_NAME, rs_server.c). Drivers read it from GspStaticConfigInfo.
pub const INTERNAL_CLIENT: u32 = 0xc1e0_0000;
/// See [`INTERNAL_CLIENT`].
pub const INTERNAL_DEVICE: u32 = 0xde1d_0000;
/// See [`INTERNAL_CLIENT`].
pub const INTERNAL_SUBDEVICE: u32 = 0x5d1d_0000;

/// A fault to inject into the next message(s) the emulator writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next message gets a wrong checksum.
    CorruptChecksum,
    /// The next reply is never sent.
    DropReply,
    /// The next reply is held back and sent just before the following reply.
    LateReply,
    /// The next reply is sent twice (two messages, consecutive sequence numbers).
    DuplicateReply,
    /// The next message is written twice with the same element sequence number.
    RepeatSeqNum,
    /// The next two messages have their element sequence numbers swapped.
    SwapNextTwo,
    /// The next message's `rpc.length` is replaced by this value.
    OversizedLength(u32),
    /// The next message's `elemCount` is replaced by this value.
    BadElementCount(u32),
    /// The next reply carries this function number instead of the request's.
    WrongFunction(u32),
    /// The status queue's write pointer is set out of range once.
    CorruptWritePtr,
    /// GSP-RM stops consuming commands until [`GspEmulator::resume`].
    Stall,
    /// GSP-RM stops consuming commands for this long (virtual time).
    StallFor(Duration),
    /// GSP-RM lies: in its next successful reply to control `cmd`, the 32-bit word at byte
    /// `offset` of the parameters reads `value`. Unlike the others this fault waits in the
    /// queue, wherever it is, until such a reply is sent.
    PatchControl {
        /// The control command.
        cmd: u32,
        /// Byte offset in its parameters.
        offset: usize,
        /// The value reported.
        value: u32,
    },
}

/// An event the emulator can send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmuEvent {
    /// GSP_INIT_DONE with this `rpc_result`.
    InitDone(u32),
    /// OS_ERROR_LOG (an Xid).
    OsErrorLog {
        /// Xid.
        xid: u32,
        /// Channel.
        chid: u32,
        /// Text.
        text: String,
    },
    /// RC_TRIGGERED.
    RcTriggered {
        /// Channel.
        chid: u32,
        /// Exception (Xid).
        except_type: u32,
        /// Faulting address.
        fault_addr: u64,
    },
    /// MMU_FAULT_QUEUED.
    MmuFaultQueued,
    /// POST_EVENT for a client.
    PostEvent {
        /// Client.
        h_client: u32,
        /// Event object.
        h_event: u32,
        /// Notifier index.
        notify_index: u32,
    },
    /// GSP_LOCKDOWN_NOTICE.
    LockdownNotice(bool),
    /// UCODE_LIBOS_PRINT with these log bytes.
    UcodeLibosPrint(Vec<u8>),
    /// GSP_RUN_CPU_SEQUENCER with these command dwords.
    RunCpuSequencer(Vec<u32>),
    /// Any function with a raw payload.
    Raw {
        /// Function or event number.
        function: u32,
        /// Payload.
        payload: Vec<u8>,
    },
}

impl EmuEvent {
    fn encode(&self) -> (u32, u32, Vec<u8>) {
        match self {
            EmuEvent::InitDone(r) => (NV_VGPU_MSG_EVENT_GSP_INIT_DONE, *r, vec![0; 4]),
            EmuEvent::OsErrorLog { xid, chid, text } => {
                let mut p = vec![0u8; 272];
                p[0..4].copy_from_slice(&xid.to_le_bytes());
                p[8..12].copy_from_slice(&chid.to_le_bytes());
                let t = text.as_bytes();
                let n = t.len().min(255);
                p[12..12 + n].copy_from_slice(&t[..n]);
                (NV_VGPU_MSG_EVENT_OS_ERROR_LOG, 0, p)
            }
            EmuEvent::RcTriggered {
                chid,
                except_type,
                fault_addr,
            } => {
                let rc = rpc_rc_triggered_v17_02 {
                    nv2080EngineType: 1,
                    chid: *chid,
                    exceptType: *except_type,
                    mmuFaultAddrLo: *fault_addr as u32,
                    mmuFaultAddrHi: (*fault_addr >> 32) as u32,
                    bCallbackNeeded: 1,
                    ..Default::default()
                };
                (NV_VGPU_MSG_EVENT_RC_TRIGGERED, 0, rc.as_bytes().to_vec())
            }
            EmuEvent::MmuFaultQueued => (NV_VGPU_MSG_EVENT_MMU_FAULT_QUEUED, 0, vec![0; 4]),
            EmuEvent::PostEvent {
                h_client,
                h_event,
                notify_index,
            } => {
                let p = rpc_post_event_v17_00 {
                    hClient: *h_client,
                    hEvent: *h_event,
                    notifyIndex: *notify_index,
                    ..Default::default()
                };
                (NV_VGPU_MSG_EVENT_POST_EVENT, 0, p.as_bytes().to_vec())
            }
            EmuEvent::LockdownNotice(on) => (
                NV_VGPU_MSG_EVENT_GSP_LOCKDOWN_NOTICE,
                0,
                vec![*on as u8, 0, 0, 0],
            ),
            EmuEvent::UcodeLibosPrint(b) => {
                let mut p = Vec::with_capacity(8 + b.len());
                p.extend_from_slice(&0u32.to_le_bytes());
                p.extend_from_slice(&(b.len() as u32).to_le_bytes());
                p.extend_from_slice(b);
                (NV_VGPU_MSG_EVENT_UCODE_LIBOS_PRINT, 0, p)
            }
            EmuEvent::RunCpuSequencer(cmds) => {
                let h = rpc_run_cpu_sequencer_v17_00 {
                    bufferSizeDWord: (cmds.len() as u32 + 1).max(64),
                    cmdIndex: cmds.len() as u32,
                    regSaveArea: [0; 8],
                };
                let mut p = h.as_bytes().to_vec();
                for c in cmds {
                    p.extend_from_slice(&c.to_le_bytes());
                }
                (NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER, 0, p)
            }
            EmuEvent::Raw { function, payload } => (*function, 0, payload.clone()),
        }
    }
}

/// Emulator settings.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Where the driver put the queues.
    pub init: MESSAGE_QUEUE_INIT_ARGUMENTS,
    /// The board (static info).
    pub model: ChipModel,
    /// Struct layouts the emulated firmware speaks.
    pub abi: RmAbi,
    /// Send GSP_INIT_DONE when started.
    pub send_init_done: bool,
    /// Log every RPC to the LOGRM buffer (when attached).
    pub log_rpcs: bool,
    /// Where to record one line per RPC received, if anywhere.
    pub trace: Option<crate::trace::Trace>,
}

impl EmulatorConfig {
    /// r570 firmware on `model`, with the driver's queue layout.
    pub fn new(init: MESSAGE_QUEUE_INIT_ARGUMENTS, model: ChipModel) -> Self {
        EmulatorConfig {
            init,
            model,
            abi: RmAbi::R570,
            send_init_done: true,
            log_rpcs: false,
            trace: None,
        }
    }
}

/// What the emulator saw and did.
#[derive(Debug, Clone, Default)]
pub struct EmuStats {
    /// Command records consumed.
    pub records: u64,
    /// RPCs dispatched (after reassembly).
    pub rpcs: u64,
    /// Continuation records received.
    pub continuations_received: u64,
    /// Messages written to the status queue.
    pub messages_sent: u64,
    /// Events written.
    pub events_sent: u64,
    /// Doorbells rung.
    pub doorbells: u64,
    /// Protocol violations by the driver (or DMA faults), in words.
    pub errors: Vec<String>,
    /// (start, elements) of command records that wrapped the ring.
    pub cmd_wraps: BTreeSet<(u32, u32)>,
    /// (start, elements) of status messages that wrapped the ring.
    pub stat_wraps: BTreeSet<(u32, u32)>,
    /// Start indices of command records.
    pub cmd_starts: BTreeSet<u32>,
    /// Wall time spent inside the emulator (for `nvbare bench rpc`).
    pub busy: Duration,
    /// Registry keys received (name -> DWORD value, or length for strings/binaries).
    pub registry: HashMap<String, u32>,
    /// The GspSystemInfo received.
    pub system_info: Option<Vec<u8>>,
    /// UNLOADING_GUEST_DRIVER received.
    pub unloaded: bool,
}

/// One RPC message to write (header fields + payload), possibly split later.
#[derive(Debug, Clone)]
struct Out {
    function: u32,
    sequence: u32,
    rpc_result: u32,
    payload: Vec<u8>,
    is_reply: bool,
}

#[derive(Debug)]
struct Partial {
    header: rpc_message_header_v03_00,
    body: Vec<u8>,
    expected: usize,
}

/// A LIBOS log buffer the emulator writes.
#[derive(Debug, Clone)]
struct LogBuf {
    name: String,
    addr: u64,
    size: u64,
    put: u64,
}

/// Base VA of the emulator's fake logging image.
pub const LOG_IMAGE_BASE: u64 = 0x8000_0000;

struct Inner {
    cfg: EmulatorConfig,
    rm: Box<dyn RmService>,
    started: bool,
    crashed: bool,
    /// Answered UNLOADING_GUEST_DRIVER: consumes nothing more.
    halted: bool,
    /// The GPU's answers to unknowns (taken from the core when started).
    unknowns: Arc<crate::unknowns::Unknowns>,
    pages: Vec<u64>,
    cmd_off: usize,
    stat_off: usize,
    cmd_count: u32,
    stat_count: u32,
    /// `rxHdrOff` of the command queue's header: where the CPU publishes its status-queue
    /// read pointer (`msgqRxLink`: `pReadIncoming` = their rx header when both swap).
    cmd_rx_hdr_off: usize,
    /// The problem last recorded for each queue pointer GSP-RM reads ([`CMD_WRITE_PTR`],
    /// [`STAT_READ_PTR`]), so that one bad value polled many times is one error (the queue
    /// library re-reads it on every poll and sees an empty or a full ring).
    pointer_errors: [Option<String>; 2],
    cmd_read: u32,
    rx_seq: u32,
    stat_write: u32,
    tx_seq: u32,
    outbox: VecDeque<Out>,
    records: VecDeque<(rpc_message_header_v03_00, Vec<u8>)>,
    partial: Option<Partial>,
    faults: VecDeque<Fault>,
    stalled: bool,
    stall_until: Option<Duration>,
    held_reply: Option<Out>,
    swap_second: Option<u32>,
    stats: EmuStats,
    logs: Vec<LogBuf>,
    log_image: Vec<(u64, Vec<u8>)>,
}

/// The emulator; clone it to keep a handle after attaching it to a GPU.
#[derive(Clone)]
pub struct GspEmulator {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for GspEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GspEmulator").finish_non_exhaustive()
    }
}

/// The `MmioEngine` that turns doorbell writes into [`GspEmulator::pump`].
#[derive(Debug)]
pub struct GspQueueEngine {
    emu: GspEmulator,
}

impl MmioEngine for GspQueueEngine {
    fn name(&self) -> &'static str {
        "gsp-rm-emulator"
    }

    fn claims(&self, offset: u32) -> bool {
        (QUEUE_HEAD0..QUEUE_HEAD0 + 64).contains(&offset) && offset.is_multiple_of(8)
    }

    fn read(&mut self, core: &mut SimCore, offset: u32) -> u32 {
        core.regs.get(offset)
    }

    fn write(&mut self, core: &mut SimCore, offset: u32, value: u32) {
        core.regs.set(offset, value);
        if offset == QUEUE_HEAD0 {
            let mut g = self.emu.lock();
            g.stats.doorbells += 1;
            drop(g);
            self.emu.pump(core);
        }
    }
}

fn checksum(bytes: &[u8]) -> u32 {
    let mut acc = 0u64;
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        acc ^= u64::from_le_bytes(w);
    }
    (acc >> 32) as u32 ^ acc as u32
}

impl GspEmulator {
    /// An emulator for the queues described by `cfg`, dispatching RM calls to `rm`.
    pub fn new(cfg: EmulatorConfig, rm: Box<dyn RmService>) -> Self {
        let log_image = build_log_image(&cfg.model);
        GspEmulator {
            inner: Arc::new(Mutex::new(Inner {
                cfg,
                rm,
                started: false,
                crashed: false,
                halted: false,
                unknowns: Arc::new(crate::unknowns::Unknowns::new(
                    crate::unknowns::Mode::Helpful,
                )),
                pages: Vec::new(),
                cmd_off: 0,
                stat_off: 0,
                cmd_count: 0,
                stat_count: 0,
                cmd_rx_hdr_off: RX_HDR_OFF as usize,
                pointer_errors: [None, None],
                cmd_read: 0,
                rx_seq: 0,
                stat_write: 0,
                tx_seq: 0,
                outbox: VecDeque::new(),
                records: VecDeque::new(),
                partial: None,
                faults: VecDeque::new(),
                stalled: false,
                stall_until: None,
                held_reply: None,
                swap_second: None,
                stats: EmuStats::default(),
                logs: Vec::new(),
                log_image,
            })),
        }
    }

    /// Creates the emulator, plugs its doorbell engine into `gpu` and returns it.
    pub fn attach(gpu: &SimGpu, cfg: EmulatorConfig, rm: Box<dyn RmService>) -> Self {
        let emu = GspEmulator::new(cfg, rm);
        gpu.add_engine(Box::new(emu.engine()));
        emu
    }

    /// The doorbell engine.
    pub fn engine(&self) -> GspQueueEngine {
        GspQueueEngine { emu: self.clone() }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// "Boots" GSP-RM: reads the page table, checks the command queue, creates the status
    /// queue, handles what was queued before boot, and sends GSP_INIT_DONE.
    pub fn start(&self, core: &mut SimCore) {
        let t0 = Instant::now();
        let mut g = self.lock();
        g.unknowns = core.unknowns.clone();
        if let Err(e) = g.boot(core) {
            g.crashed = true;
            g.stats.errors.push(format!("boot: {e}"));
            return;
        }
        g.started = true;
        g.log(core, 0, &[LOG_IMAGE_BASE + 0x800, LOG_IMAGE_BASE + 0x900]);
        if g.cfg.send_init_done {
            g.queue_event_inner(&EmuEvent::InitDone(0));
        }
        g.pump(core);
        g.stats.busy += t0.elapsed();
    }

    /// Handles pending commands and writes pending output.
    pub fn pump(&self, core: &mut SimCore) {
        let t0 = Instant::now();
        let mut g = self.lock();
        g.pump(core);
        g.stats.busy += t0.elapsed();
    }

    /// Queues a fault for the next message(s).
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push_back(fault);
    }

    /// Ends a [`Fault::Stall`].
    pub fn resume(&self) {
        let mut g = self.lock();
        g.stalled = false;
        g.stall_until = None;
    }

    /// Queues an event, written before the replies of the next pump.
    pub fn queue_event(&self, ev: EmuEvent) {
        self.lock().queue_event_inner(&ev);
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> EmuStats {
        self.lock().stats.clone()
    }

    /// Protocol errors seen so far.
    pub fn errors(&self) -> Vec<String> {
        self.lock().stats.errors.clone()
    }

    /// Messages and records waiting for status-queue space.
    pub fn outbox_len(&self) -> usize {
        let g = self.lock();
        g.outbox.len() + g.records.len()
    }

    /// Registers a LIBOS log buffer (`LOGINIT`, `LOGRM`...) at bus address `addr`.
    pub fn attach_log(&self, name: &str, addr: u64, size: u64) {
        self.lock().logs.push(LogBuf {
            name: name.to_string(),
            addr,
            size,
            put: 0,
        });
    }

    /// Writes an "injected fault %u" record with `code` to the attached logs (for hardware
    /// models that make GSP-RM fail).
    pub fn log_fault_code(&self, core: &mut SimCore, code: u32) {
        self.lock().log(core, 2, &[code as u64]);
    }

    /// The fake logging image the emulator's log records point into, as (VA, bytes).
    pub fn log_image(&self) -> Vec<(u64, Vec<u8>)> {
        self.lock().log_image.clone()
    }

    /// Fills log buffer `name` with garbage words (and a garbage put pointer).
    pub fn garbage_log(&self, core: &mut SimCore, name: &str, seed: u64) {
        let g = self.lock();
        let Some(l) = g.logs.iter().find(|l| l.name == name) else {
            return;
        };
        let mut x = seed | 1;
        let mut bytes = vec![0u8; l.size as usize];
        for w in bytes.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
        }
        let _ = core.host.write(l.addr, &bytes);
    }
}

impl Inner {
    fn shm_addr(&self, off: usize) -> Result<u64, String> {
        let page = self
            .pages
            .get(off / PAGE)
            .ok_or_else(|| format!("shared-memory offset {off:#x} beyond the page table"))?;
        Ok(page + (off % PAGE) as u64)
    }

    fn shm_read(&self, core: &SimCore, off: usize, dst: &mut [u8]) -> Result<(), String> {
        let mut done = 0;
        while done < dst.len() {
            let o = off + done;
            let n = (PAGE - o % PAGE).min(dst.len() - done);
            let a = self.shm_addr(o)?;
            core.host
                .read(a, &mut dst[done..done + n])
                .map_err(|e| e.to_string())?;
            done += n;
        }
        Ok(())
    }

    fn shm_write(&self, core: &SimCore, off: usize, src: &[u8]) -> Result<(), String> {
        let mut done = 0;
        while done < src.len() {
            let o = off + done;
            let n = (PAGE - o % PAGE).min(src.len() - done);
            let a = self.shm_addr(o)?;
            core.host
                .write(a, &src[done..done + n])
                .map_err(|e| e.to_string())?;
            done += n;
        }
        Ok(())
    }

    fn shm_u32(&self, core: &SimCore, off: usize) -> Result<u32, String> {
        let mut b = [0u8; 4];
        self.shm_read(core, off, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn boot(&mut self, core: &mut SimCore) -> Result<(), String> {
        let init = self.cfg.init;
        let n = init.pageTableEntryCount as usize;
        if n == 0 || n > 1 << 20 {
            return Err(format!("pageTableEntryCount {n}"));
        }
        // The page table's own first page is at sharedMemPhysAddr; later PTE pages are found
        // through earlier entries.
        let mut pages: Vec<u64> = Vec::with_capacity(n);
        for i in 0..n {
            let byte = i * 8;
            let page_addr = if byte < PAGE {
                init.sharedMemPhysAddr
            } else {
                *pages
                    .get(byte / PAGE)
                    .ok_or("page table entry out of range")?
            };
            let mut b = [0u8; 8];
            core.host
                .read(page_addr + (byte % PAGE) as u64, &mut b)
                .map_err(|e| format!("reading the page table: {e}"))?;
            pages.push(u64::from_le_bytes(b));
        }
        if pages.first() != Some(&init.sharedMemPhysAddr) {
            return Err("PTE 0 does not point at the page table itself".into());
        }
        self.pages = pages;
        let total = n * PAGE;
        let (cmd_off, stat_off) = (init.cmdQueueOffset as usize, init.statQueueOffset as usize);
        if cmd_off % PAGE != 0 || stat_off <= cmd_off || stat_off >= total || cmd_off < 8 * n {
            return Err(format!("bad queue offsets {cmd_off:#x} / {stat_off:#x}"));
        }
        self.cmd_off = cmd_off;
        self.stat_off = stat_off;
        let cmd_size = (stat_off - cmd_off) as u32;
        let stat_size = (total - stat_off) as u32;
        let mut hb = [0u8; 32];
        self.shm_read(core, cmd_off, &mut hb)?;
        let h = msgqTxHeader::read_from_bytes(&hb).map_err(|_| "header")?;
        // msgqRxLink's checks (msgq.c, the queue library GSP-RM shares), in its order: room
        // for one element (-6), size (-7), msgSize (-8), version (-9), the derived fields
        // (-10). Stricter than the library: entryOff must be msgqTxCreate's 0x1000 (the
        // library takes any entryOff that matches msgCount) and both sides must swap (the
        // library links an unswapped queue with the read pointers the other way round);
        // the sim models only the layout the CPU's msgqTxCreate call produces.
        if h.entryOff
            .checked_add(h.msgSize)
            .is_none_or(|e| cmd_size < e)
        {
            return Err(format!(
                "command queue of {cmd_size} bytes has no room for one element after \
                 entryOff {:#x} (msgqRxLink -6)",
                h.entryOff
            ));
        }
        if h.size != cmd_size
            || h.msgSize != PAGE as u32
            || h.version != 0
            || h.rxHdrOff < 32
            || h.entryOff != ENTRY_OFF
            || h.msgCount != (cmd_size - h.entryOff) / PAGE as u32
            || h.flags & MSGQ_FLAGS_SWAP_RX == 0
        {
            return Err(format!(
                "command queue header {h:?} disagrees with the layout"
            ));
        }
        // GSP-RM's own msgqTxCreate for the status queue (with the CPU's parameters: 4 KiB
        // elements at 0x1000) fails when the queue cannot hold one element.
        if (stat_size as usize) < ENTRY_OFF as usize + PAGE {
            return Err(format!(
                "status queue of {stat_size} bytes has no room for one element after \
                 entryOff {ENTRY_OFF:#x} (msgqTxCreate)"
            ));
        }
        self.cmd_count = h.msgCount;
        self.cmd_rx_hdr_off = h.rxHdrOff as usize;
        self.stat_count = (stat_size - ENTRY_OFF) / PAGE as u32;
        let sh = msgqTxHeader {
            version: 0,
            size: stat_size,
            msgSize: PAGE as u32,
            msgCount: self.stat_count,
            writePtr: 0,
            flags: MSGQ_FLAGS_SWAP_RX,
            rxHdrOff: RX_HDR_OFF,
            entryOff: ENTRY_OFF,
        };
        self.shm_write(core, stat_off + RX_HDR_OFF as usize, &0u32.to_le_bytes())?;
        self.shm_write(core, stat_off, sh.as_bytes())?;
        Ok(())
    }

    fn queue_event_inner(&mut self, ev: &EmuEvent) {
        let (function, rpc_result, payload) = ev.encode();
        self.outbox.push_back(Out {
            function,
            sequence: 0,
            rpc_result,
            payload,
            is_reply: false,
        });
    }

    fn pump(&mut self, core: &mut SimCore) {
        if !self.started || self.crashed {
            return;
        }
        if let Some(t) = self.stall_until
            && core.clock.now() >= t
        {
            self.stall_until = None;
            self.stalled = false;
        }
        self.flush(core);
        if self.stalled || self.halted {
            return;
        }
        if let Some(f) = self.faults.front().copied() {
            match f {
                Fault::Stall => {
                    self.faults.pop_front();
                    self.stalled = true;
                    return;
                }
                Fault::StallFor(d) => {
                    self.faults.pop_front();
                    self.stalled = true;
                    self.stall_until = Some(core.clock.now() + d);
                    return;
                }
                _ => {}
            }
        }
        self.drain_notices();
        // Bounded: each pass consumes at least one element or stops.
        for _ in 0..=self.cmd_count {
            match self.consume_one(core) {
                Ok(true) => self.flush(core),
                Ok(false) => break,
                Err(e) => {
                    self.stats.errors.push(e);
                    self.crashed = true;
                    return;
                }
            }
        }
        self.drain_notices();
        self.flush(core);
    }
}

/// `GspStaticConfigInfo` for `model`, consistent with the chip table and the board.
pub fn static_info(model: &ChipModel) -> GspStaticConfigInfo {
    let mut s = GspStaticConfigInfo::new_zeroed();
    let name = format!("NVIDIA {}", model.board);
    let n = name.len().min(63);
    s.gpuNameString[..n].copy_from_slice(&name.as_bytes()[..n]);
    for (i, c) in name.encode_utf16().take(63).enumerate() {
        s.gpuNameString_Unicode[i] = c;
    }
    let short = model.chipset.name().as_bytes();
    s.gpuShortNameString[..short.len()].copy_from_slice(short);
    let fb = (model.vram_mib as u64) << 20;
    s.fb_length = fb;
    let (bus_width, l2) = match model.chipset.info().architecture {
        // H200: six HBM3e stacks (6144-bit), 50 MiB L2; RTX 5090: 512-bit, 96 MiB; RTX 4090: 384-bit, 72 MiB;
        // A100 40GB: five HBM2 stacks (5120-bit), 40 MiB L2 (public board specifications);
        _ if model.chipset == nvbare_core::chip::Chipset::GA100 => (5120, 40 << 20),
        // TITAN RTX: 384-bit GDDR6, 6 MiB L2; Tesla T4: 256-bit, 4 MiB.
        _ if model.chipset == nvbare_core::chip::Chipset::TU104 => (256, 4 << 20),
        nvbare_core::chip::Architecture::Turing => (384, 6 << 20),
        nvbare_core::chip::Architecture::Hopper => (6144, 50 << 20),
        nvbare_core::chip::Architecture::Blackwell => (512, 96 << 20),
        _ => (384, 72 << 20),
    };
    s.fb_bus_width = bus_width;
    s.l2_cache_size = l2;
    s.fbRegionInfoParams.numFBRegions = 1;
    s.fbRegionInfoParams.fbRegion[0].base = 0;
    s.fbRegionInfoParams.fbRegion[0].limit = fb - 1;
    s.fbRegionInfoParams.fbRegion[0].performance = 1000;
    s.gidInfo.length = 16;
    for (i, b) in s.gidInfo.data.iter_mut().take(16).enumerate() {
        *b = (model.device_id as usize).wrapping_add(i * 17) as u8;
    }
    s.bVbiosValid = 1;
    s.vbiosSubVendor = model.subsystem.0 as u32;
    s.vbiosSubDevice = model.subsystem.1 as u32;
    s.bIsTesla = (model.class == 0x03_0200) as u8;
    s.hInternalClient = INTERNAL_CLIENT;
    s.hInternalDevice = INTERNAL_DEVICE;
    s.hInternalSubdevice = INTERNAL_SUBDEVICE;
    s
}

/// A clock that lets the emulator run whenever the driver waits: each `delay` advances the
/// simulator's clock and then pumps the emulator, the way GSP-RM works while the CPU polls.
#[derive(Debug, Clone)]
pub struct EmuClock {
    clock: Arc<SimClock>,
    gpu: Arc<SimGpu>,
    emu: GspEmulator,
}

impl EmuClock {
    /// A clock over `gpu`'s clock that pumps `emu`.
    pub fn new(gpu: &Arc<SimGpu>, emu: &GspEmulator) -> Self {
        EmuClock {
            clock: gpu.clock(),
            gpu: gpu.clone(),
            emu: emu.clone(),
        }
    }
}

impl Clock for EmuClock {
    fn now(&self) -> Duration {
        self.clock.now()
    }

    fn delay(&self, d: Duration) {
        self.clock.delay(d);
        self.gpu.with_core(|core| self.emu.pump(core));
    }
}
