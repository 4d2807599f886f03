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

/// Metadata records: (format, argument count) at `LOG_IMAGE_BASE + i * 0x40`; strings from
/// `+0x800`.
const LOG_FORMATS: [(&str, u8); 3] = [
    ("emulated GSP-RM %s booted on %s\n", 2),
    ("RPC %u (seq %u) returned 0x%x\n", 3),
    ("injected fault %u\n", 1),
];

fn build_log_image(model: &ChipModel) -> Vec<(u64, Vec<u8>)> {
    let mut img = vec![0u8; 0x1000];
    let file_va = LOG_IMAGE_BASE + 0x700;
    img[0x700..0x700 + 12].copy_from_slice(b"emulator.rs\0");
    for (i, (fmt, argc)) in LOG_FORMATS.iter().enumerate() {
        let meta = i * 0x40;
        let fmt_off = 0x400 + i * 0x100;
        img[fmt_off..fmt_off + fmt.len()].copy_from_slice(fmt.as_bytes());
        // libosLogMetadata: filename, format, lineNumber (aligned 8), argumentCount,
        // printLevel, specialType.
        img[meta..meta + 8].copy_from_slice(&file_va.to_le_bytes());
        img[meta + 8..meta + 16].copy_from_slice(&(LOG_IMAGE_BASE + fmt_off as u64).to_le_bytes());
        img[meta + 16..meta + 20].copy_from_slice(&(100 + i as u32).to_le_bytes());
        img[meta + 20] = *argc;
        img[meta + 21] = 1;
    }
    img[0x800..0x808].copy_from_slice(b"r570.144");
    let name = model.chipset.name().as_bytes();
    img[0x900..0x900 + name.len()].copy_from_slice(name);
    vec![(LOG_IMAGE_BASE, img)]
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

    /// Reads one command record; `Ok(false)` when the queue is empty.
    fn consume_one(&mut self, core: &mut SimCore) -> Result<bool, String> {
        let wp = self.shm_u32(core, self.cmd_off + 16)?;
        if wp >= self.cmd_count {
            // msgqRxGetReadAvailable: a write pointer out of range means nothing to read;
            // GSP-RM reads on once the CPU writes a good one.
            self.pointer_error(
                CMD_WRITE_PTR,
                format!(
                    "command queue writePtr {wp} out of range ({} elements): nothing read",
                    self.cmd_count
                ),
            );
            return Ok(false);
        }
        self.pointer_errors[CMD_WRITE_PTR] = None;
        let avail = (wp + self.cmd_count - self.cmd_read) % self.cmd_count;
        if avail == 0 {
            return Ok(false);
        }
        let start = self.cmd_read;
        let mut rec = vec![0u8; PAGE];
        self.read_elems(core, start, 1, &mut rec)?;
        let eh = GSP_MSG_QUEUE_ELEMENT::read_from_prefix(&rec)
            .map_err(|_| "element header")?
            .0;
        let ec = eh.elemCount;
        if ec == 0 || ec > 16 || ec > avail {
            self.stats.errors.push(format!(
                "command at {start}: elemCount {ec} ({avail} available)"
            ));
            self.advance(core, 1)?;
            return Ok(true);
        }
        if ec > 1 {
            for _ in 1..ec {
                rec.extend_from_slice(&ZERO_PAGE);
            }
            self.read_elems(core, (start + 1) % self.cmd_count, ec - 1, &mut rec[PAGE..])?;
        }
        self.advance(core, ec)?;
        self.stats.records += 1;
        self.stats.cmd_starts.insert(start);
        if start + ec > self.cmd_count {
            self.stats.cmd_wraps.insert((start, ec));
        }
        let hdr = rpc_message_header_v03_00::read_from_bytes(&rec[ELEM_HDR..ELEM_HDR + RPC_HDR])
            .map_err(|_| "rpc header")?;
        let len = hdr.length as usize;
        if len < RPC_HDR || ELEM_HDR + len > rec.len() {
            self.stats
                .errors
                .push(format!("command seq {}: rpc length {len}", eh.seqNum));
            return Ok(true);
        }
        let r570 = checksum(&rec[..(ELEM_HDR + len).next_multiple_of(8)]);
        if r570 != 0 {
            self.stats
                .errors
                .push(format!("command seq {}: bad checksum", eh.seqNum));
            return Ok(true);
        }
        if rec[ELEM_HDR + len..]
            .chunks(PAGE)
            .any(|c| c != &ZERO_PAGE[..c.len()])
        {
            self.stats.errors.push(format!(
                "command seq {}: element tail not zero (r535's whole-element checksum would fail)",
                eh.seqNum
            ));
        }
        if eh.seqNum != self.rx_seq {
            // How GSP-RM takes a wrong number is not public. The queue's one public receiver
            // (GspMsgQueueReceiveStatus) drops an older message and refuses a newer one:
            // the message is dropped unanswered here, and the count resynchronises on a
            // newer number so that what follows is read.
            let older = (eh.seqNum.wrapping_sub(self.rx_seq) as i32) < 0;
            self.stats.errors.push(format!(
                "command seq {} where {} was expected: {} message dropped",
                eh.seqNum,
                self.rx_seq,
                if older { "an old" } else { "a" }
            ));
            if !older {
                self.rx_seq = eh.seqNum.wrapping_add(1);
            }
            return Ok(true);
        }
        self.rx_seq = eh.seqNum.wrapping_add(1);
        let body = rec[ELEM_HDR + RPC_HDR..ELEM_HDR + len].to_vec();
        if hdr.signature != NV_VGPU_MSG_SIGNATURE_VALID {
            // rpc_headers.h: an invalid message (bad signature) is answered with the
            // signature made valid and NV_VGPU_MSG_RESULT_RPC_INVALID_MESSAGE_FORMAT,
            // function unchanged; it is not executed.
            self.stats.errors.push(format!(
                "command seq {}: signature {:#x} (not 'VRPC' {NV_VGPU_MSG_SIGNATURE_VALID:#x}): \
                 answered RPC_INVALID_MESSAGE_FORMAT",
                eh.seqNum, hdr.signature
            ));
            self.abandon_partial();
            self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
            return Ok(true);
        }
        if hdr.header_version != NV_VGPU_MSG_HEADER_VERSION {
            // Only 3.0 (NV_VGPU_MSG_HEADER_VERSION_MAJOR_TOT/_MINOR_TOT) is written by RM;
            // what GSP-RM does with another is not public: dropped unanswered.
            self.stats.errors.push(format!(
                "command seq {}: header_version {:#x} (r570 writes {NV_VGPU_MSG_HEADER_VERSION:#x}): \
                 dropped",
                eh.seqNum, hdr.header_version
            ));
            self.abandon_partial();
            return Ok(true);
        }
        self.on_record(core, hdr, body);
        Ok(true)
    }

    fn read_elems(&self, core: &SimCore, start: u32, n: u32, dst: &mut [u8]) -> Result<(), String> {
        for i in 0..n as usize {
            let idx = (start as usize + i) % self.cmd_count as usize;
            let off = self.cmd_off + ENTRY_OFF as usize + idx * PAGE;
            self.shm_read(core, off, &mut dst[i * PAGE..(i + 1) * PAGE])?;
        }
        Ok(())
    }

    fn advance(&mut self, core: &SimCore, n: u32) -> Result<(), String> {
        self.cmd_read = (self.cmd_read + n) % self.cmd_count;
        self.shm_write(
            core,
            self.stat_off + RX_HDR_OFF as usize,
            &self.cmd_read.to_le_bytes(),
        )
    }

    /// Bytes the whole RPC message of `function` should have (after the RPC header), from its
    /// declared params size; `None` for functions without one.
    fn expected_body(&self, function: u32, body: &[u8]) -> Option<usize> {
        let u32_at = |o: usize| {
            body.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        match function {
            NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC => Some(32 + u32_at(20)? as usize),
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL => {
                let h = rpc::rm_control_header_size(self.cfg.abi);
                Some(h + u32_at(16)? as usize)
            }
            _ => None,
        }
    }

    fn on_record(&mut self, core: &mut SimCore, hdr: rpc_message_header_v03_00, body: Vec<u8>) {
        if hdr.function == NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD {
            self.stats.continuations_received += 1;
            let Some(mut p) = self.partial.take() else {
                self.stats
                    .errors
                    .push("continuation record with nothing to continue".into());
                return;
            };
            p.body.extend_from_slice(&body);
            if p.body.len() >= p.expected {
                p.body.truncate(p.expected);
                self.dispatch(core, p.header, p.body);
            } else {
                self.partial = Some(p);
            }
            return;
        }
        self.abandon_partial();
        let full = hdr.length as usize == RPC_MAX;
        let expected = self.expected_body(hdr.function, &body);
        match expected {
            Some(e) if e > body.len() && full => {
                self.partial = Some(Partial {
                    header: hdr,
                    body,
                    expected: e,
                })
            }
            // An async RPC without a size field (SET_REGISTRY): a full record means more to
            // come; the total is in the registry table header.
            None if full && hdr.function == NV_VGPU_MSG_FUNCTION_SET_REGISTRY => {
                let e = body
                    .get(0..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .unwrap_or(0);
                self.partial = Some(Partial {
                    header: hdr,
                    body,
                    expected: e,
                });
            }
            _ => self.dispatch(core, hdr, body),
        }
    }

    /// Drops a message whose continuation records stopped coming, as an error.
    fn abandon_partial(&mut self) {
        if let Some(p) = self.partial.take() {
            self.stats.errors.push(format!(
                "{} interrupted after {} of {} bytes",
                rpc::FunctionName(p.header.function),
                p.body.len(),
                p.expected
            ));
        }
    }

    /// Applies the first [`Fault::PatchControl`] for `cmd`, if one is queued.
    fn patch_control(&mut self, cmd: u32, params: &mut [u8]) {
        let Some(i) = self
            .faults
            .iter()
            .position(|f| matches!(f, Fault::PatchControl { cmd: c, .. } if *c == cmd))
        else {
            return;
        };
        if let Some(Fault::PatchControl { offset, value, .. }) = self.faults.remove(i) {
            match params.get_mut(offset..offset.saturating_add(4)) {
                Some(w) => w.copy_from_slice(&value.to_le_bytes()),
                None => self.stats.errors.push(format!(
                    "PatchControl: offset {offset} is beyond the {}-byte parameters of {cmd:#x}",
                    params.len()
                )),
            }
        }
    }

    fn reply(&mut self, hdr: rpc_message_header_v03_00, rpc_result: u32, payload: Vec<u8>) {
        // Whether GSP-RM echoes the request's `sequence` is not public (RM never sets it for
        // GSP and matches by function): unknown.
        let sequence = if self.unknowns.hard("gsp.reply.sequence_zero") {
            0
        } else {
            hdr.sequence
        };
        // GSP-RM sends events whenever it has them; one may come before any reply.
        if self.unknowns.hard("gsp.event_before_reply") {
            self.queue_event_inner(&EmuEvent::Raw {
                function: NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD,
                payload: vec![0; 16],
            });
        }
        let out = Out {
            function: hdr.function,
            sequence,
            rpc_result,
            payload,
            is_reply: true,
        };
        let mut wrong = None;
        match self.faults.front().copied() {
            Some(Fault::DropReply) => {
                self.faults.pop_front();
                return;
            }
            Some(Fault::LateReply) => {
                self.faults.pop_front();
                self.held_reply = Some(out);
                return;
            }
            Some(Fault::DuplicateReply) => {
                self.faults.pop_front();
                self.outbox.push_back(out.clone());
            }
            Some(Fault::WrongFunction(f)) => {
                self.faults.pop_front();
                wrong = Some(f);
            }
            _ => {}
        }
        if let Some(h) = self.held_reply.take() {
            self.outbox.push_back(h);
        }
        let mut out = out;
        if let Some(f) = wrong {
            out.function = f;
        }
        self.outbox.push_back(out);
    }

    /// Records an RPC in the trace: `what` names its object or command, `params` are the
    /// parameters as received, `status` the result (`None` for RPCs nobody answers).
    fn trace_rpc(&self, function: u32, what: &str, params: &[u8], status: Option<u32>) {
        let Some(t) = &self.cfg.trace else {
            return;
        };
        let st = status.map_or_else(|| "-".to_string(), |s| format!("{s:#x}"));
        t.line(&format!(
            "rpc {}{what} params={} hash={:08x} status={st}",
            rpc::FunctionName(function),
            params.len(),
            crate::trace::hash(params)
        ));
    }

    fn dispatch(&mut self, core: &mut SimCore, hdr: rpc_message_header_v03_00, mut body: Vec<u8>) {
        self.stats.rpcs += 1;
        let traced_in = self.cfg.trace.is_some().then(|| body.clone());
        let u32_at = |b: &[u8], o: usize| {
            b.get(o..o + 4)
                .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                .unwrap_or(0)
        };
        match hdr.function {
            NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO => {
                if body.len() != std::mem::size_of::<GspSystemInfo>() {
                    self.stats.errors.push(format!(
                        "GSP_SET_SYSTEM_INFO of {} bytes (r570: 928)",
                        body.len()
                    ));
                }
                self.trace_rpc(hdr.function, "", &body, None);
                self.stats.system_info = Some(body);
            }
            NV_VGPU_MSG_FUNCTION_SET_REGISTRY => {
                self.trace_rpc(hdr.function, "", &body, None);
                let n = u32_at(&body, 4);
                for i in 0..n.min(4096) {
                    match registry::entry(&body, i) {
                        Ok(e) => {
                            let v = match e.value {
                                registry::RegistryValue::Dword(v) => v,
                                registry::RegistryValue::String(b)
                                | registry::RegistryValue::Binary(b) => b.len() as u32,
                            };
                            self.stats
                                .registry
                                .insert(String::from_utf8_lossy(e.name).into_owned(), v);
                        }
                        Err(e) => {
                            self.stats
                                .errors
                                .push(format!("SET_REGISTRY entry {i}: {e}"));
                            break;
                        }
                    }
                }
            }
            NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO => {
                self.trace_rpc(hdr.function, "", &[], Some(0));
                let info = static_info(&self.cfg.model);
                self.reply(hdr, 0, info.as_bytes().to_vec());
            }
            NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER => {
                self.trace_rpc(hdr.function, "", &body, Some(0));
                self.stats.unloaded = true;
                self.reply(hdr, 0, body);
                // GSP-RM suspends and halts once it has answered: nothing after this is read
                // (a driver that sends more waits for a reply that never comes).
                self.halted = true;
            }
            NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC => {
                let Ok((a, rest)) = rpc_gsp_rm_alloc_v03_00::read_from_prefix(&body) else {
                    self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
                    return;
                };
                let n = a.paramsSize as usize;
                if rest.len() < n {
                    self.reply(hdr, NV_ERR_INVALID_PARAM_STRUCT, body);
                    return;
                }
                let caller = RmCaller {
                    abi: self.cfg.abi,
                    client: Handle(a.hClient),
                };
                let r = self.rm.alloc(
                    core,
                    caller,
                    Handle(a.hParent),
                    Handle(a.hObject),
                    a.hClass,
                    &mut body[32..32 + n],
                );
                let status = r.err().map_or(0, |s| s.0);
                if let Some(b) = &traced_in {
                    let what = format!(
                        " class={:#x}{} parent={:#x} object={:#x}",
                        a.hClass,
                        class_label(a.hClass),
                        a.hParent,
                        a.hObject
                    );
                    self.trace_rpc(hdr.function, &what, &b[32..32 + n], Some(status));
                }
                body[16..20].copy_from_slice(&status.to_le_bytes());
                // The kernel RM copies paramsSize bytes back whatever the reply's length
                // (rpcRmApiAlloc_GSP), so whether GSP-RM returns them is unknown: the shortest
                // reply is the fixed part.
                if status == 0 && self.unknowns.hard("gsp.alloc.reply_without_params") {
                    body.truncate(32);
                }
                self.log_rpc(core, &hdr, status);
                self.reply(hdr, status, body);
            }
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL => {
                let h = rpc::rm_control_header_size(self.cfg.abi);
                if body.len() < h {
                    self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
                    return;
                }
                let n = u32_at(&body, 16) as usize;
                if body.len() < h + n {
                    self.reply(hdr, NV_ERR_INVALID_PARAM_STRUCT, body);
                    return;
                }
                let caller = RmCaller {
                    abi: self.cfg.abi,
                    client: Handle(u32_at(&body, 0)),
                };
                let (obj, cmd) = (u32_at(&body, 4), u32_at(&body, 8));
                let r = self
                    .rm
                    .control(core, caller, Handle(obj), cmd, &mut body[h..h + n]);
                if r.is_ok() {
                    self.patch_control(cmd, &mut body[h..h + n]);
                }
                let status = r.err().map_or(0, |s: RmStatus| s.0);
                if let Some(b) = &traced_in {
                    let what = format!(" cmd={cmd:#x} object={obj:#x}");
                    self.trace_rpc(hdr.function, &what, &b[h..h + n], Some(status));
                }
                body[12..16].copy_from_slice(&status.to_le_bytes());
                self.log_rpc(core, &hdr, status);
                self.reply(hdr, status, body);
            }
            NV_VGPU_MSG_FUNCTION_FREE => {
                let Ok(p) = NVOS00_PARAMETERS_v03_00::read_from_prefix(&body).map(|x| x.0) else {
                    self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
                    return;
                };
                let caller = RmCaller {
                    abi: self.cfg.abi,
                    client: Handle(p.hRoot),
                };
                let r = self
                    .rm
                    .free(core, caller, Handle(p.hObjectParent), Handle(p.hObjectOld));
                let status = r.err().map_or(0, |s| s.0);
                let what = format!(" object={:#x}", p.hObjectOld);
                self.trace_rpc(hdr.function, &what, &[], Some(status));
                body[12..16].copy_from_slice(&status.to_le_bytes());
                self.log_rpc(core, &hdr, status);
                self.reply(hdr, status, body);
            }
            function => match self.rm.rpc(core, self.cfg.abi, function, &mut body) {
                Some(r) => {
                    let status = r.err().map_or(0, |s| s.0);
                    if let Some(b) = &traced_in {
                        self.trace_rpc(function, "", b, Some(status));
                    }
                    self.log_rpc(core, &hdr, status);
                    self.reply(hdr, status, body);
                }
                None => {
                    if let Some(b) = &traced_in {
                        self.trace_rpc(function, "", b, Some(RPC_UNKNOWN_FUNCTION));
                    }
                    self.reply(hdr, RPC_UNKNOWN_FUNCTION, body)
                }
            },
        }
    }

    /// Turns what the RM reports (channel resets) into the events GSP-RM sends: for an MMU
    /// fault MMU_FAULT_QUEUED first, then the Xid (OS_ERROR_LOG) and RC_TRIGGERED.
    fn drain_notices(&mut self) {
        for n in self.rm.take_notices() {
            match n {
                RmNotice::Rc {
                    chid,
                    code,
                    engine_type,
                    mmu_fault,
                    reason,
                } => {
                    if mmu_fault.is_some() {
                        self.queue_event_inner(&EmuEvent::MmuFaultQueued);
                    }
                    self.queue_event_inner(&EmuEvent::OsErrorLog {
                        xid: code,
                        chid,
                        text: reason,
                    });
                    let (addr, ty) = mmu_fault.unwrap_or((0, 0));
                    let rc = rpc_rc_triggered_v17_02 {
                        nv2080EngineType: engine_type,
                        chid,
                        exceptType: code,
                        // RC_NOTIFIER_SCOPE_TSG: the whole channel group goes.
                        scope: 1,
                        mmuFaultAddrLo: addr as u32,
                        mmuFaultAddrHi: (addr >> 32) as u32,
                        mmuFaultType: ty,
                        ..Default::default()
                    };
                    self.queue_event_inner(&EmuEvent::Raw {
                        function: NV_VGPU_MSG_EVENT_RC_TRIGGERED,
                        payload: rc.as_bytes().to_vec(),
                    });
                }
            }
        }
    }

    /// Writes as much of the outbox as fits, record by record (a message larger than the
    /// status queue flows as the driver consumes it).
    fn flush(&mut self, core: &mut SimCore) {
        loop {
            if self.records.is_empty() {
                let Some(out) = self.outbox.pop_front() else {
                    return;
                };
                if !out.is_reply {
                    self.stats.events_sent += 1;
                }
                self.split(&out);
            }
            let Some((_, chunk)) = self.records.front() else {
                return;
            };
            let need = (ELEM_HDR + RPC_HDR + chunk.len()).div_ceil(PAGE) as u32;
            // msgqTxGetFreeSpace: a read pointer out of range leaves no free space, so
            // nothing is written until the CPU repairs it.
            let free = match self.stat_free(core) {
                Ok(f) => f,
                Err(e) => {
                    self.pointer_error(STAT_READ_PTR, e);
                    return;
                }
            };
            self.pointer_errors[STAT_READ_PTR] = None;
            if need > free {
                return;
            }
            let Some((hdr, chunk)) = self.records.pop_front() else {
                return;
            };
            if let Err(e) = self.write_message(core, &hdr, &chunk) {
                self.stats.errors.push(e);
                self.crashed = true;
                return;
            }
        }
    }

    /// Splits a message into its first record and continuation records.
    fn split(&mut self, out: &Out) {
        let total = RPC_HDR + out.payload.len();
        let first = total.min(RPC_MAX);
        let mut hdr = rpc_message_header_v03_00 {
            header_version: NV_VGPU_MSG_HEADER_VERSION,
            signature: NV_VGPU_MSG_SIGNATURE_VALID,
            length: first as u32,
            function: out.function,
            rpc_result: out.rpc_result,
            rpc_result_private: out.rpc_result,
            sequence: out.sequence,
            spare: 0,
        };
        let (p1, mut rest) = out.payload.split_at(first - RPC_HDR);
        self.records.push_back((hdr, p1.to_vec()));
        while !rest.is_empty() {
            let (c, r) = rest.split_at(rest.len().min(RPC_MAX - RPC_HDR));
            hdr.function = NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD;
            hdr.length = (RPC_HDR + c.len()) as u32;
            self.records.push_back((hdr, c.to_vec()));
            rest = r;
        }
    }

    fn stat_free(&self, core: &SimCore) -> Result<u32, String> {
        let rp = self.shm_u32(core, self.cmd_off + self.cmd_rx_hdr_off)?;
        if rp >= self.stat_count {
            return Err(format!(
                "CPU status readPtr {rp} out of range (status queue of {} elements)",
                self.stat_count
            ));
        }
        Ok((rp + self.stat_count - self.stat_write - 1) % self.stat_count)
    }

    /// Records a problem with queue pointer `which` once however often it is polled (a new
    /// value, or the same after a good one, is a new error).
    fn pointer_error(&mut self, which: usize, e: String) {
        if self.pointer_errors[which].as_ref() != Some(&e) {
            self.stats.errors.push(e.clone());
            self.pointer_errors[which] = Some(e);
        }
    }

    fn write_message(
        &mut self,
        core: &mut SimCore,
        rpc_hdr: &rpc_message_header_v03_00,
        payload: &[u8],
    ) -> Result<(), String> {
        let mut rpc_hdr = *rpc_hdr;
        let len = RPC_HDR + payload.len();
        let ec = (ELEM_HDR + len).div_ceil(PAGE) as u32;
        let mut declared_ec = ec;
        let (mut corrupt_sum, mut repeat, mut bad_wp) = (false, false, false);
        let seq;
        if let Some(s) = self.swap_second.take() {
            // Second of a swapped pair: its number was reserved by the first.
            seq = s;
        } else {
            if self.faults.front() == Some(&Fault::SwapNextTwo) {
                self.faults.pop_front();
                seq = self.tx_seq.wrapping_add(1);
                self.swap_second = Some(self.tx_seq);
                self.tx_seq = self.tx_seq.wrapping_add(2);
            } else {
                seq = self.tx_seq;
                self.tx_seq = self.tx_seq.wrapping_add(1);
            }
            let f = self.faults.front().copied();
            match f {
                Some(Fault::CorruptChecksum) => corrupt_sum = true,
                Some(Fault::RepeatSeqNum) => repeat = true,
                Some(Fault::OversizedLength(l)) => rpc_hdr.length = l,
                Some(Fault::BadElementCount(n)) => declared_ec = n,
                Some(Fault::CorruptWritePtr) => bad_wp = true,
                _ => {}
            }
            if matches!(
                f,
                Some(
                    Fault::CorruptChecksum
                        | Fault::RepeatSeqNum
                        | Fault::OversizedLength(_)
                        | Fault::BadElementCount(_)
                        | Fault::CorruptWritePtr
                )
            ) {
                self.faults.pop_front();
            }
        }
        let mut eh = GSP_MSG_QUEUE_ELEMENT {
            seqNum: seq,
            elemCount: declared_ec,
            ..Default::default()
        };
        let mut bytes = Vec::with_capacity(ec as usize * PAGE);
        bytes.extend_from_slice(eh.as_bytes());
        bytes.extend_from_slice(rpc_hdr.as_bytes());
        bytes.extend_from_slice(payload);
        let sum_len = (ELEM_HDR + (rpc_hdr.length as usize).min(16 * PAGE)).next_multiple_of(8);
        let pad = ec as usize * PAGE - bytes.len();
        bytes.extend_from_slice(&ZERO_PAGE[..pad % PAGE]);
        for _ in 0..pad / PAGE {
            bytes.extend_from_slice(&ZERO_PAGE);
        }
        let sum = checksum(&bytes[..sum_len.min(bytes.len())]);
        eh.checkSum = if corrupt_sum { sum ^ 0x5a5a } else { sum };
        bytes[..ELEM_HDR].copy_from_slice(eh.as_bytes());
        let copies = if repeat { 2 } else { 1 };
        for _ in 0..copies {
            let start = self.stat_write;
            for (i, el) in bytes.chunks(PAGE).enumerate() {
                let idx = (start as usize + i) % self.stat_count as usize;
                let off = self.stat_off + ENTRY_OFF as usize + idx * PAGE;
                self.shm_write(core, off, el)?;
            }
            if start + ec > self.stat_count {
                self.stats.stat_wraps.insert((start, ec));
            }
            self.stat_write = (start + ec) % self.stat_count;
            let wp = if bad_wp {
                self.stat_count + 7
            } else {
                self.stat_write
            };
            self.shm_write(core, self.stat_off + 16, &wp.to_le_bytes())?;
            self.stats.messages_sent += 1;
        }
        if bad_wp {
            // The driver sees the bad pointer once; the next message repairs it.
            self.stats
                .errors
                .push("injected: status writePtr out of range".into());
        }
        Ok(())
    }

    fn log_rpc(&mut self, core: &mut SimCore, hdr: &rpc_message_header_v03_00, status: u32) {
        if self.cfg.log_rpcs {
            self.log(
                core,
                1,
                &[hdr.function as u64, hdr.sequence as u64, status as u64],
            );
        }
    }

    /// Appends a LIBOS record (args, metadata pointer, timestamp) to every log buffer.
    fn log(&mut self, core: &mut SimCore, meta: usize, args: &[u64]) {
        let ts = core.clock.nanos().max(1);
        let meta_va = LOG_IMAGE_BASE + (meta * 0x40) as u64;
        for i in 0..self.logs.len() {
            let l = self.logs[i].clone();
            let entries = l.size / 8 - 1;
            if entries == 0 {
                continue;
            }
            let mut put = l.put;
            for w in args.iter().chain([meta_va, ts].iter()) {
                let at = l.addr + 8 + (put % entries) * 8;
                let _ = core.host.write(at, &w.to_le_bytes());
                put += 1;
            }
            let _ = core.host.write(l.addr, &put.to_le_bytes());
            self.logs[i].put = put;
        }
    }
}

/// ` (NAME)` for a class the core knows, or nothing.
fn class_label(class: u32) -> String {
    nvbare_core::rm::class::class_name(class).map_or_else(String::new, |n| format!(" ({n})"))
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
        // H200: six HBM3e stacks (6144-bit), 50 MiB L2; RTX 5090: 512-bit, 96 MiB; RTX 4090: 384-bit, 72 MiB.
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
