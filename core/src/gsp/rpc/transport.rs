//! The RPC transport: sending (split into continuation records when large), waiting for
//! replies and reassembling them, and dispatching the events that arrive meanwhile.

use core::fmt;
use core::time::Duration;

use zerocopy::IntoBytes;

use super::trace::RpcWhat;
use super::wire::*;
use crate::gsp::GspError;
use crate::gsp::events::{
    Disposition, EventContext, EventHandler, EventQueue, GspEvent, NV_VGPU_MSG_EVENT_FIRST_EVENT,
    NoHandler, OsErrorLog, PayloadRead, RawEvent, RcTriggered,
};
use crate::gsp::msgq::{GSP_MSG_QUEUE_RPC_SIZE_MAX, MsgQueue, Record};
use crate::hal::{Clock, DmaBuffer, Mmio, poll_until};
use crate::rm::RmAbi;

/// Tunables of the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GspConfig {
    /// Struct layouts GSP-RM speaks (r570.144 firmware: [`RmAbi::R570`]).
    pub abi: RmAbi,
    /// How long to wait for a reply (RM: 1.5 x its default timeout).
    pub reply_timeout: Duration,
    /// How long to wait for command-queue space (RM: 1 s).
    pub send_timeout: Duration,
    /// Pause between polls of the status queue.
    pub poll_interval: Duration,
}

impl Default for GspConfig {
    fn default() -> Self {
        GspConfig {
            abi: RmAbi::R570,
            reply_timeout: Duration::from_secs(6),
            send_timeout: Duration::from_secs(1),
            poll_interval: Duration::from_micros(1),
        }
    }
}

/// Counters of the RPC layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// RPCs answered.
    pub rpcs: u64,
    /// RPCs sent without waiting (SET_SYSTEM_INFO, SET_REGISTRY).
    pub async_sends: u64,
    /// Continuation records sent.
    pub continuations_sent: u64,
    /// Continuation records received.
    pub continuations_received: u64,
    /// Events received.
    pub events: u64,
    /// Replies nobody waited for (older sequence, or no RPC in flight), discarded.
    pub stale_replies: u64,
    /// Continuation records with no message to continue, discarded.
    pub stray_continuations: u64,
    /// RC_TRIGGERED events.
    pub rc_triggered: u64,
    /// MMU_FAULT_QUEUED events.
    pub mmu_faults_queued: u64,
    /// OS_ERROR_LOG (Xid) events.
    pub xids: u64,
    /// Received messages whose header signature was not "VRPC".
    pub bad_signatures: u64,
}

/// The header of an answered RPC and how many payload bytes came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The first record's RPC header.
    pub header: rpc_message_header_v03_00,
    /// Payload bytes received (all records).
    pub len: usize,
}

/// An awaited event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventInfo {
    /// Its header's `rpc_result`.
    pub rpc_result: u32,
    /// Its parsed payload.
    pub event: GspEvent,
}

/// Decides from the reply header and fixed part whether params are copied back.
type CopyPolicy = fn(&rpc_message_header_v03_00, &[u8]) -> bool;

struct ReplyState<'a> {
    function: u32,
    seq: u32,
    fixed: &'a mut [u8],
    params: &'a mut [u8],
    /// Fewest payload bytes a successful reply may have.
    min: usize,
    policy: CopyPolicy,
    copy_params: bool,
    got: usize,
    first: Option<rpc_message_header_v03_00>,
}

impl ReplyState<'_> {
    fn expected(&self) -> usize {
        self.fixed.len() + self.params.len()
    }

    /// Copies `n` payload bytes of `rec` starting at payload offset `from` to body offset `at`.
    fn copy<B: DmaBuffer>(
        &mut self,
        q: &MsgQueue<B>,
        rec: &Record,
        from: usize,
        at: usize,
        n: usize,
    ) -> Result<(), GspError> {
        let f = self.fixed.len();
        // Part in `fixed`.
        if at < f {
            let k = (f - at).min(n);
            if let Some(dst) = self.fixed.get_mut(at..at + k) {
                q.read(rec, RPC_HEADER_SIZE + from, dst)?;
            }
        }
        // Part in `params`.
        let end = at + n;
        if self.copy_params && end > f {
            let p0 = at.max(f) - f;
            let p1 = end - f;
            let src = from + (at.max(f) - at);
            if let Some(dst) = self.params.get_mut(p0..p1) {
                q.read(rec, RPC_HEADER_SIZE + src, dst)?;
            }
        }
        Ok(())
    }
}

#[allow(clippy::large_enum_variant)]
enum Want<'a> {
    Nothing,
    Reply(ReplyState<'a>),
    Event {
        function: u32,
        got: Option<EventInfo>,
    },
}

/// The part of [`GspRpc`] that polls (separate from the clock so a poll closure can borrow
/// both).
struct Core<B: DmaBuffer, M: Mmio, H: EventHandler> {
    msgq: MsgQueue<B>,
    bar0: M,
    handler: H,
    next_seq: u32,
    /// Sequence numbers of the last RPCs that ended (answered or timed out): an echo of one
    /// of them is a stale or duplicated reply.
    ended: heapless::Deque<u32, 16>,
    events: EventQueue,
    last_rc: Option<RcTriggered>,
    last_os_error: Option<OsErrorLog>,
    stats: RpcStats,
}

/// Reads an event payload out of the status queue.
struct RecordPayload<'q, B: DmaBuffer> {
    q: &'q MsgQueue<B>,
    rec: &'q Record,
}

impl<B: DmaBuffer> PayloadRead for RecordPayload<'_, B> {
    fn read_payload(&self, offset: usize, dst: &mut [u8]) -> Result<(), GspError> {
        let at = offset
            .checked_add(RPC_HEADER_SIZE)
            .ok_or(GspError::Malformed {
                function: self.rec.rpc.function,
                len: self.rec.payload_len(),
                need: usize::MAX,
            })?;
        self.q.read(self.rec, at, dst)
    }
}

/// How one [`Core::pump`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pumped {
    /// What was wanted arrived.
    Satisfied,
    /// The status queue is empty.
    Drained,
    /// A ring's worth of messages was handled and more are waiting.
    Budget,
}

impl<B: DmaBuffer, M: Mmio, H: EventHandler> Core<B, M, H> {
    /// Handles status-queue messages until `want` is satisfied, the queue is empty, or one
    /// ring's worth (the status queue's element count) has been handled. The bound keeps a GSP
    /// that refills the queue as fast as it is read from holding the caller past its deadline.
    /// `deadline` (clock time) is handed to event handlers; `records` counts what was handled.
    fn pump<C: Clock + ?Sized>(
        &mut self,
        clock: &C,
        want: &mut Want<'_>,
        deadline: Duration,
        records: &mut u64,
    ) -> Result<Pumped, GspError> {
        for _ in 0..self.msgq.rx_msg_count().max(1) {
            let Some(rec) = self.msgq.receive()? else {
                return Ok(Pumped::Drained);
            };
            *records += 1;
            let f = rec.rpc.function;
            let s = rec.rpc.sequence;
            if rec.rpc.signature != NV_VGPU_MSG_SIGNATURE_VALID {
                self.stats.bad_signatures += 1;
                log::warn!(
                    "gsp: message {} has signature {:#x}",
                    rec.seq,
                    rec.rpc.signature
                );
            }
            if let Want::Reply(st) = want {
                // An echo of an RPC that already ended is stale; anything else may be ours.
                let seq_ok = s == st.seq || s == 0 || !self.ended.iter().any(|&e| e == s);
                if st.first.is_none() && f == st.function && seq_ok {
                    let r = self.take_first(st, &rec);
                    self.msgq.consume(&rec)?;
                    r?;
                    // Only a full record can be continued.
                    let last = rec.rpc.length as usize != GSP_MSG_QUEUE_RPC_SIZE_MAX;
                    if st.got >= st.expected()
                        || last
                        || st.first.is_some_and(|h| h.rpc_result != 0)
                    {
                        return Ok(Pumped::Satisfied);
                    }
                    continue;
                }
                if st.first.is_some() && f == NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD && seq_ok {
                    let n = rec.payload_len().min(st.expected() - st.got);
                    let at = st.got;
                    let r = st.copy(&self.msgq, &rec, 0, at, n);
                    self.msgq.consume(&rec)?;
                    r?;
                    st.got += n;
                    self.stats.continuations_received += 1;
                    if st.got >= st.expected() {
                        return Ok(Pumped::Satisfied);
                    }
                    if rec.rpc.length as usize != GSP_MSG_QUEUE_RPC_SIZE_MAX {
                        return Err(GspError::ReplyTooShort {
                            function: st.function,
                            expected: st.expected(),
                            got: st.got,
                        });
                    }
                    continue;
                }
                if f < NV_VGPU_MSG_EVENT_FIRST_EVENT
                    && f != NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD
                    && s == st.seq
                    && st.first.is_none()
                {
                    self.msgq.consume(&rec)?;
                    return Err(GspError::ReplyMismatch {
                        expected_function: st.function,
                        function: f,
                        sequence: s,
                    });
                }
            }
            if f >= NV_VGPU_MSG_EVENT_FIRST_EVENT {
                if let Want::Event { function, got } = want
                    && *function == f
                {
                    let ev = {
                        let r = RecordPayload {
                            q: &self.msgq,
                            rec: &rec,
                        };
                        GspEvent::parse(f, rec.rpc.rpc_result, rec.payload_len(), &r)
                    };
                    self.msgq.consume(&rec)?;
                    self.stats.events += 1;
                    *got = Some(EventInfo {
                        rpc_result: rec.rpc.rpc_result,
                        event: ev,
                    });
                    return Ok(Pumped::Satisfied);
                }
                self.dispatch(clock, deadline, &rec)?;
                continue;
            }
            self.msgq.consume(&rec)?;
            if f == NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD {
                self.stats.stray_continuations += 1;
                log::warn!("gsp: discarding continuation record nobody waits for");
            } else {
                self.stats.stale_replies += 1;
                log::warn!(
                    "gsp: discarding reply {} seq {s} nobody waits for",
                    FunctionName(f)
                );
                self.events.push(GspEvent::UnexpectedReply {
                    function: f,
                    sequence: s,
                });
            }
        }
        Ok(Pumped::Budget)
    }

    fn take_first(&mut self, st: &mut ReplyState<'_>, rec: &Record) -> Result<(), GspError> {
        let len = rec.payload_len();
        let n = len.min(st.expected());
        // The fixed part first: the copy policy looks at its status field.
        let nf = n.min(st.fixed.len());
        if let Some(dst) = st.fixed.get_mut(..nf) {
            self.msgq.read(rec, RPC_HEADER_SIZE, dst)?;
        }
        st.copy_params = (st.policy)(&rec.rpc, st.fixed);
        if n > nf {
            st.copy(&self.msgq, rec, nf, nf, n - nf)?;
        }
        st.got = n;
        st.first = Some(rec.rpc);
        if n < st.min.min(st.expected())
            && rec.rpc.rpc_result == 0
            && rec.rpc.length as usize != GSP_MSG_QUEUE_RPC_SIZE_MAX
        {
            return Err(GspError::ReplyTooShort {
                function: st.function,
                expected: st.expected(),
                got: n,
            });
        }
        Ok(())
    }

    /// Parses an event, offers it to the handler, records it, and consumes it.
    fn dispatch<C: Clock + ?Sized>(
        &mut self,
        clock: &C,
        deadline: Duration,
        rec: &Record,
    ) -> Result<(), GspError> {
        let f = rec.rpc.function;
        let len = rec.payload_len();
        let r = RecordPayload { q: &self.msgq, rec };
        let parsed = GspEvent::parse(f, rec.rpc.rpc_result, len, &r);
        let raw = RawEvent::new(f, rec.rpc.rpc_result, len, &parsed, &r);
        let disp = self.handler.on_event(
            EventContext {
                bar0: &self.bar0,
                clock,
                deadline,
            },
            &raw,
        );
        self.msgq.consume(rec)?;
        self.stats.events += 1;
        match &parsed {
            GspEvent::RcTriggered(rc) => {
                self.stats.rc_triggered += 1;
                log::error!(
                    "gsp: channel {} reset (RC, exception {}) on engine type {}",
                    rc.chid,
                    rc.except_type,
                    rc.engine_type
                );
                self.last_rc = Some(*rc);
            }
            GspEvent::OsErrorLog(x) => {
                self.stats.xids += 1;
                log::error!("gsp: Xid {}: {}", x.except_type, x.text);
                self.last_os_error = Some(x.clone());
            }
            GspEvent::MmuFaultQueued => self.stats.mmu_faults_queued += 1,
            GspEvent::Malformed {
                function,
                len,
                need,
            } => log::warn!(
                "gsp: {} payload of {len} bytes, layout needs {need}",
                FunctionName(*function)
            ),
            _ => log::debug!("gsp: {}", FunctionName(f)),
        }
        match disp? {
            Disposition::Handled => {}
            Disposition::Queue => self.events.push(parsed),
        }
        Ok(())
    }
}

/// The RPC transport to GSP-RM over a [`MsgQueue`], with the typed RPCs boot needs.
///
/// `M` is BAR0 (for the doorbell; use `&Bar0` to share it with the boot code), `C` the clock,
/// `H` the [`EventHandler`] that services events synchronously.
pub struct GspRpc<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler = NoHandler> {
    clock: C,
    cfg: GspConfig,
    core: Core<B, M, H>,
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> fmt::Debug for GspRpc<B, M, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GspRpc")
            .field("cfg", &self.cfg)
            .field("stats", &self.core.stats)
            .field("msgq", self.core.msgq.stats())
            .finish_non_exhaustive()
    }
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> GspRpc<B, M, C, H> {
    /// A transport over `msgq`.
    pub fn new(msgq: MsgQueue<B>, bar0: M, clock: C, handler: H, cfg: GspConfig) -> Self {
        GspRpc {
            clock,
            cfg,
            core: Core {
                msgq,
                bar0,
                handler,
                next_seq: 1,
                ended: heapless::Deque::new(),
                events: EventQueue::default(),
                last_rc: None,
                last_os_error: None,
                stats: RpcStats::default(),
            },
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GspConfig {
        &self.cfg
    }

    /// Changes the configuration (e.g. a longer timeout for boot).
    pub fn config_mut(&mut self) -> &mut GspConfig {
        &mut self.cfg
    }

    /// The message queues.
    pub fn msgq(&self) -> &MsgQueue<B> {
        &self.core.msgq
    }

    /// The event handler.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.core.handler
    }

    /// BAR0.
    pub fn bar0(&self) -> &M {
        &self.core.bar0
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// RPC-layer counters.
    pub fn stats(&self) -> &RpcStats {
        &self.core.stats
    }

    /// Takes the queued events (and their dropped count), leaving an empty queue.
    pub fn take_events(&mut self) -> EventQueue {
        core::mem::take(&mut self.core.events)
    }

    /// The queued events.
    pub fn events(&self) -> &EventQueue {
        &self.core.events
    }

    /// The most recent channel reset, if any (kept apart from the queue).
    pub fn last_rc(&self) -> Option<RcTriggered> {
        self.core.last_rc
    }

    /// The most recent Xid, if any.
    pub fn last_os_error(&self) -> Option<&OsErrorLog> {
        self.core.last_os_error.as_ref()
    }

    fn next_seq(&mut self) -> u32 {
        let s = self.core.next_seq;
        // 0 is what a firmware that ignores the field would echo; never use it.
        self.core.next_seq = match s.wrapping_add(1) {
            0 => 1,
            n => n,
        };
        s
    }

    /// Sends one RPC (splitting it into continuation records when large) without waiting.
    fn send(
        &mut self,
        function: u32,
        seq: u32,
        fixed: &[u8],
        params: &[u8],
    ) -> Result<(), GspError> {
        let body = fixed.len() + params.len();
        let total = RPC_HEADER_SIZE + body;
        let first = total.min(GSP_MSG_QUEUE_RPC_SIZE_MAX);
        if fixed.len() > first - RPC_HEADER_SIZE {
            return Err(GspError::MessageTooLarge {
                len: fixed.len(),
                max: CONTINUATION_PAYLOAD_MAX,
            });
        }
        let in_first = first - RPC_HEADER_SIZE - fixed.len();
        let (p1, mut rest) = params.split_at(in_first.min(params.len()));
        let hdr = rpc_message_header_v03_00::request(function, first, seq);
        let (t, i) = (self.cfg.send_timeout, self.cfg.poll_interval);
        let c = &mut self.core;
        c.msgq
            .send(&c.bar0, &self.clock, t, i, &[hdr.as_bytes(), fixed, p1])?;
        while !rest.is_empty() {
            let (chunk, r) = rest.split_at(rest.len().min(CONTINUATION_PAYLOAD_MAX));
            let h = rpc_message_header_v03_00::request(
                NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD,
                RPC_HEADER_SIZE + chunk.len(),
                seq,
            );
            c.msgq
                .send(&c.bar0, &self.clock, t, i, &[h.as_bytes(), chunk])?;
            c.stats.continuations_sent += 1;
            rest = r;
        }
        Ok(())
    }

    /// Sends an RPC whose payload is `fixed ++ params` and waits for its reply, copying the
    /// reply's payload back over `fixed` and (when `policy` allows) `params`.
    pub fn call(
        &mut self,
        function: u32,
        fixed: &mut [u8],
        params: &mut [u8],
        policy: fn(&rpc_message_header_v03_00, &[u8]) -> bool,
    ) -> Result<Reply, GspError> {
        let min = fixed.len() + params.len();
        self.call_min(function, fixed, params, policy, min)
    }

    /// [`GspRpc::call`] accepting a successful reply of at least `min` payload bytes; what a
    /// shorter reply leaves out of `fixed ++ params` keeps what was sent.
    pub(super) fn call_min(
        &mut self,
        function: u32,
        fixed: &mut [u8],
        params: &mut [u8],
        policy: fn(&rpc_message_header_v03_00, &[u8]) -> bool,
        min: usize,
    ) -> Result<Reply, GspError> {
        let seq = self.next_seq();
        let traced = log::log_enabled!(log::Level::Debug)
            .then(|| (RpcWhat::of(function, fixed), self.clock.now()));
        let sent = fixed.len() + params.len();
        self.send(function, seq, fixed, params)?;
        let mut want = Want::Reply(ReplyState {
            function,
            seq,
            fixed,
            params,
            min,
            policy,
            copy_params: false,
            got: 0,
            first: None,
        });
        let r = self.wait(
            &mut want,
            self.cfg.reply_timeout,
            "a reply from GSP-RM",
            function,
        );
        let ended = &mut self.core.ended;
        if ended.is_full() {
            ended.pop_front();
        }
        let _ = ended.push_back(seq);
        let Want::Reply(st) = want else {
            return Err(GspError::Handler("internal: reply state lost"));
        };
        if let Some((what, t0)) = traced {
            let us = self.clock.now().saturating_sub(t0).as_micros();
            match (&r, &st.first) {
                (Ok(()), Some(h)) => log::debug!(
                    "rpc {what}: {sent} B out, {} B back, {} in {us} us",
                    st.got,
                    what.outcome(h.rpc_result, st.fixed)
                ),
                (Err(e), _) => log::debug!("rpc {what}: {sent} B out, failed after {us} us: {e}"),
                (Ok(()), None) => {}
            }
        }
        r?;
        self.core.stats.rpcs += 1;
        let header = st
            .first
            .ok_or(GspError::Handler("internal: reply without header"))?;
        Ok(Reply {
            header,
            len: st.got,
        })
    }

    /// Sends an RPC GSP-RM does not answer (SET_SYSTEM_INFO, SET_REGISTRY).
    pub fn send_async(&mut self, function: u32, payload: &[u8]) -> Result<(), GspError> {
        let seq = self.next_seq();
        self.send(function, seq, &[], payload)?;
        log::debug!(
            "rpc {}: {} B out, not answered",
            FunctionName(function),
            payload.len()
        );
        self.core.stats.async_sends += 1;
        Ok(())
    }

    fn wait(
        &mut self,
        want: &mut Want<'_>,
        timeout: Duration,
        what: &'static str,
        function: u32,
    ) -> Result<(), GspError> {
        let clock = &self.clock;
        let cfg = &self.cfg;
        let core = &mut self.core;
        let deadline = clock.now().saturating_add(timeout);
        let (mut records, mut flooding) = (0u64, false);
        let r: Result<(), GspError> = poll_until(clock, timeout, cfg.poll_interval, what, || {
            let p = core.pump(clock, want, deadline, &mut records)?;
            flooding = p == Pumped::Budget;
            Ok((p == Pumped::Satisfied).then_some(()))
        });
        r.map_err(|e| match e {
            GspError::Timeout { what, waited, .. } if flooding => GspError::Flood {
                what,
                function,
                records,
                waited,
            },
            GspError::Timeout { what, waited, .. } => GspError::Timeout {
                what,
                function,
                waited,
            },
            e => e,
        })
    }

    /// Handles what GSP-RM has sent, without waiting (at most one ring's worth of messages, so
    /// a flooding GSP cannot keep the caller here); returns the events now queued. Event
    /// handlers get [`GspConfig::reply_timeout`] from now as their deadline.
    pub fn poll_events(&mut self) -> Result<usize, GspError> {
        let mut want = Want::Nothing;
        let deadline = self.clock.now().saturating_add(self.cfg.reply_timeout);
        self.core.pump(&self.clock, &mut want, deadline, &mut 0)?;
        Ok(self.core.events.len())
    }

    /// Waits for event `function` (e.g. GSP_INIT_DONE), dispatching everything before it.
    /// The awaited event is returned, not queued; a non-zero `rpc_result` in it is an error.
    pub fn wait_event(&mut self, function: u32, timeout: Duration) -> Result<EventInfo, GspError> {
        let mut want = Want::Event {
            function,
            got: None,
        };
        self.wait(&mut want, timeout, "an event from GSP-RM", function)?;
        let Want::Event { got: Some(ev), .. } = want else {
            return Err(GspError::Handler("internal: event lost"));
        };
        if ev.rpc_result != 0 {
            return Err(rpc_result_error(function, ev.rpc_result));
        }
        Ok(ev)
    }
}
