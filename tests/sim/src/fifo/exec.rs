//! GPFIFO fetch and pushbuffer execution for one channel.

use nvbare_core::channel::gpfifo::{GP_ENTRY_SIZE, GpEntry, USERD_GP_GET};
use nvbare_core::channel::pushbuf::{Header, SecOp};
use nvbare_core::chip::Chipset;
use nvbare_core::rm::class::{ClassKind, class_kind, class_name};
use nvbare_core::rm::ctrl::{
    NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY, NV83DE_SM_ERROR_STATE_REGISTERS, rc,
};

use super::{Channel, ChannelState, host};
use crate::bar0::SimCore;
use crate::compute::{self, KernelRegistry};
use crate::gpu_mem::{Access, FaultKind, MmuFault, gpu_read};

/// Why a channel was torn down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RcInfo {
    /// `ROBUST_CHANNEL_*` code (the Xid).
    pub code: u32,
    /// `NV2080_ENGINE_TYPE_*` of the engine that failed.
    pub engine_type: u32,
    /// What happened, in words (for traces and test failures).
    pub reason: String,
    /// The MMU fault, if that was the cause.
    pub mmu_fault: Option<NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY>,
    /// An SM error state (SM index, registers), if an SM raised it.
    pub sm_error: Option<(u32, NV83DE_SM_ERROR_STATE_REGISTERS)>,
}

impl RcInfo {
    /// A host (PBDMA) error.
    pub fn pbdma(engine_type: u32, reason: impl Into<String>) -> Self {
        RcInfo {
            code: rc::ROBUST_CHANNEL_PBDMA_ERROR,
            engine_type,
            reason: reason.into(),
            mmu_fault: None,
            sm_error: None,
        }
    }

    /// An MMU fault.
    pub fn mmu(engine_type: u32, f: MmuFault, who: &str) -> Self {
        RcInfo {
            code: rc::ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT,
            engine_type,
            reason: format!("{who}: {f}"),
            mmu_fault: Some(fault_entry(f)),
            sm_error: None,
        }
    }
}

/// The `READ_MMU_FAULT_INFO` entry for a fault (`NV_PFAULT_FAULT_TYPE_*`,
/// `NV_PFAULT_ACCESS_TYPE_VIRT_*`).
pub fn fault_entry(f: MmuFault) -> NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY {
    let fault_type = match f.kind {
        FaultKind::InvalidPde => 0x0,
        FaultKind::InvalidPte => 0x2,
        FaultKind::VaLimit => 0x3,
        FaultKind::ReadOnly => 0x6,
        FaultKind::BadPhysical => 0xa,
    };
    let access_type = match f.access {
        Access::Read | Access::Fetch => 0x0,
        Access::Write => 0x1,
        Access::Atomic => 0x2,
    };
    NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY {
        faultAddress: f.va,
        faultType: fault_type,
        accessType: access_type,
    }
}

/// Result of running a channel.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// It consumed work.
    Progress,
    /// Nothing to do (or still blocked).
    Idle,
    /// It must be torn down.
    Rc(RcInfo),
}

/// Result of executing one method.
#[derive(Debug)]
pub(crate) enum Step {
    /// Done; go on.
    Ok,
    /// An acquire is not satisfied: stop here and retry later.
    Block { addr: u64, payload: u64 },
    /// The engine is busy forever.
    Hang(String),
    /// Tear the channel down.
    Rc(RcInfo),
}

/// Read-only context of a run.
pub(crate) struct Ctx<'a> {
    pub chip: Chipset,
    pub kernels: &'a KernelRegistry,
}

/// Where the host is inside a pushbuffer segment.
#[derive(Debug)]
pub(crate) struct Cursor {
    words: Vec<u32>,
    pos: usize,
    /// A multi-word method in progress: its header and the index of the next data word.
    method: Option<(Header, u32)>,
}

/// Per-channel method state (latched registers).
#[derive(Debug, Default)]
pub(crate) struct Regs {
    pub host: host::HostRegs,
    pub ce: crate::ce::CeRegs,
    pub compute: compute::ComputeRegs,
}

enum SegmentEnd {
    Done,
    Stop(Step),
}

/// Runs channel `ch` until it runs out of work, blocks, hangs or faults.
pub(crate) fn run(ch: &mut Channel, core: &mut SimCore, ctx: &Ctx<'_>) -> Outcome {
    let engine = ch.desc.engine_type;
    let mut progress = false;
    if matches!(ch.state, ChannelState::Faulted(_)) {
        return Outcome::Idle;
    }
    // A grid still running: has it finished? The channel went on with methods that do not wait
    // for it, and stopped (Hung) at the first that does.
    if ch.regs.compute.running().is_some() {
        let space = ch.desc.space.clone();
        let before = engine_counts(ch);
        let polled = compute::poll_pending(&mut ch.regs.compute, core, &*space, ctx, engine);
        count_engine_launches(ch, before);
        match polled {
            None if matches!(ch.state, ChannelState::Hung { .. }) => return Outcome::Idle,
            None => {}
            Some(Step::Rc(info)) => return Outcome::Rc(info),
            Some(_) => {
                if matches!(ch.state, ChannelState::Hung { .. }) {
                    ch.state = ChannelState::Running;
                }
                progress = true;
            }
        }
    } else if matches!(ch.state, ChannelState::Hung { .. }) {
        ch.state = ChannelState::Running;
    }
    loop {
        if ch.cursor.is_none() {
            // The GPPut of the last doorbell: entries published since are not seen yet.
            let put = ch.known_put;
            if put >= ch.desc.entries {
                return Outcome::Rc(RcInfo::pbdma(
                    engine,
                    format!("GPPut {put} is outside the {}-entry ring", ch.desc.entries),
                ));
            }
            if ch.gp_get == put {
                break;
            }
            let Some(entry_va) = (ch.gp_get as u64)
                .checked_mul(GP_ENTRY_SIZE)
                .and_then(|o| ch.desc.gpfifo_va.checked_add(o))
            else {
                return Outcome::Rc(RcInfo::pbdma(engine, "GPFIFO address overflow"));
            };
            let mut raw = [0u8; 8];
            if let Err(f) = gpu_read(core, &*ch.desc.space, entry_va, &mut raw, Access::Fetch) {
                return Outcome::Rc(RcInfo::mmu(engine, f, "GPFIFO fetch"));
            }
            let entry = GpEntry::decode(u64::from_le_bytes(raw));
            if entry.length == 0 {
                // A control entry (NOP/CRC opcodes): nothing to fetch.
                commit_entry(ch, core);
                progress = true;
                continue;
            }
            let mut bytes = vec![0u8; entry.length as usize * 4];
            if let Err(f) = gpu_read(
                core,
                &*ch.desc.space,
                entry.address,
                &mut bytes,
                Access::Fetch,
            ) {
                return Outcome::Rc(RcInfo::mmu(engine, f, "pushbuffer fetch"));
            }
            let words = bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            ch.cursor = Some(Cursor {
                words,
                pos: 0,
                method: None,
            });
            // The segment begins: its entry is committed and GPGet moves past it, however long
            // the segment then takes (dev_pbdma.ref.txt, GP_GET).
            commit_entry(ch, core);
            progress = true;
        }
        match run_segment(ch, core, ctx) {
            SegmentEnd::Done => {
                ch.cursor = None;
                ch.stats.gp_entries += 1;
                progress = true;
            }
            SegmentEnd::Stop(Step::Block { addr, payload }) => {
                let was_blocked = matches!(ch.state, ChannelState::Blocked { .. });
                ch.state = ChannelState::Blocked { addr, payload };
                return if progress || !was_blocked {
                    Outcome::Progress
                } else {
                    Outcome::Idle
                };
            }
            SegmentEnd::Stop(Step::Hang(what)) => {
                core.trace(format!("host: channel {} hung: {what}", ch.desc.chid));
                ch.state = ChannelState::Hung { what };
                return Outcome::Progress;
            }
            SegmentEnd::Stop(Step::Rc(info)) => return Outcome::Rc(info),
            SegmentEnd::Stop(Step::Ok) => {}
        }
    }
    ch.state = ChannelState::Running;
    if progress {
        Outcome::Progress
    } else {
        Outcome::Idle
    }
}

/// Moves `GPGet` past the entry whose segment begins (or a control entry): "Once the next GP
/// entry has begun processing, that GP entry is committed and will not be refetched, and
/// NV_PPBDMA_GP_GET is incremented" (dev_pbdma.ref.txt). A segment blocked on an acquire or
/// running a kernel that spins has therefore left the ring, as on the H200 (a hung kernel's
/// timeout report shows `GPGet` = `GPPut`).
fn commit_entry(ch: &mut Channel, core: &mut SimCore) {
    ch.gp_get = (ch.gp_get + 1) % ch.desc.entries;
    let _ = ch.desc.userd.write_u32(core, USERD_GP_GET, ch.gp_get);
}

fn run_segment(ch: &mut Channel, core: &mut SimCore, ctx: &Ctx<'_>) -> SegmentEnd {
    let engine = ch.desc.engine_type;
    loop {
        let Some(cur) = ch.cursor.as_mut() else {
            return SegmentEnd::Done;
        };
        let Some(&word) = cur.words.get(cur.pos) else {
            if cur.method.is_some() {
                return SegmentEnd::Stop(Step::Rc(RcInfo::pbdma(
                    engine,
                    "pushbuffer segment ends inside a method",
                )));
            }
            return SegmentEnd::Done;
        };
        let (subc, method, data, next) = if let Some((hdr, i)) = cur.method {
            let m = match hdr.op {
                SecOp::IncMethod => hdr.method + 4 * i,
                SecOp::OneInc if i > 0 => hdr.method + 4,
                _ => hdr.method,
            };
            let next = (i + 1 < hdr.count).then_some((hdr, i + 1));
            (hdr.subchannel, m, word, Some(next))
        } else {
            if word == 0 {
                cur.pos += 1;
                continue;
            }
            let hdr = Header::decode(word);
            match hdr.op {
                SecOp::IncMethod | SecOp::NonIncMethod | SecOp::OneInc => {
                    cur.pos += 1;
                    if hdr.count as usize > cur.words.len() - cur.pos {
                        return SegmentEnd::Stop(Step::Rc(RcInfo::pbdma(
                            engine,
                            format!(
                                "method header {word:#010x} promises {} words, segment has {}",
                                hdr.count,
                                cur.words.len() - cur.pos
                            ),
                        )));
                    }
                    if hdr.count > 0 {
                        cur.method = Some((hdr, 0));
                    }
                    continue;
                }
                SecOp::ImmdDataMethod => (hdr.subchannel, hdr.method, hdr.count, None),
                SecOp::EndPbSegment => return SegmentEnd::Done,
                _ => {
                    return SegmentEnd::Stop(Step::Rc(RcInfo::pbdma(
                        engine,
                        format!("unsupported pushbuffer opcode in {word:#010x}"),
                    )));
                }
            }
        };
        if let Some(what) = ch.regs.compute.running()
            && waits_for_grid(ch, subc, method, data)
        {
            return SegmentEnd::Stop(Step::Hang(what.to_string()));
        }
        match exec_method(ch, core, ctx, subc, method, data) {
            step @ (Step::Ok | Step::Hang(_)) => {
                if let Step::Hang(what) = step {
                    // The method was accepted and its grid runs on: the channel goes on with
                    // the methods after it until one waits for the grid (`waits_for_grid`).
                    core.trace(format!("compute: {what}: the grid keeps running"));
                }
                ch.stats.methods += 1;
                if let Some(cur) = ch.cursor.as_mut() {
                    cur.pos += 1;
                    if let Some(next) = next {
                        cur.method = next;
                    }
                }
            }
            other => return SegmentEnd::Stop(other),
        }
    }
}

/// Whether a method cannot run while a grid of the channel is still running: a wait for the
/// engine to go idle (compute `WAIT_FOR_IDLE`, host `WFI`, a host release with `RELEASE_WFI`),
/// a launch (the simulator runs one grid at a time), or work for another engine of the
/// channel. Everything else (semaphore acquires and plain releases, QMD prefetches and
/// invalidates, cache invalidates, state) is processed while the grid runs, as the front end
/// does on hardware.
fn waits_for_grid(ch: &Channel, subc: u8, method: u32, data: u32) -> bool {
    use nvbare_core::channel::methods::compute as cm;
    if method < 0x100 {
        return host_waits_for_idle(method, data);
    }
    match ch
        .subchannels
        .get(subc as usize)
        .copied()
        .flatten()
        .and_then(class_kind)
    {
        Some(ClassKind::Compute) => method == cm::WAIT_FOR_IDLE || launches_grid(method, data),
        _ => true,
    }
}

/// A host `WFI`, or a release that waits for idle: waits for the grids launched before.
fn host_waits_for_idle(method: u32, data: u32) -> bool {
    use nvbare_core::channel::methods::host as hm;
    method == hm::WFI
        || (method == hm::SEM_EXECUTE
            && data & 7 == hm::sem_execute::OPERATION_RELEASE
            && data & hm::sem_execute::RELEASE_WFI_EN != 0)
}

/// A compute-class method that launches a grid: `SEND_SIGNALING_PCAS2_B` with a launching
/// `PCAS_ACTION`, or `SEND_SIGNALING_PCAS_B` with `SCHEDULE` (whether the class has the
/// method is the compute engine's to check).
fn launches_grid(method: u32, data: u32) -> bool {
    use nvbare_core::channel::methods::compute as cm;
    (method == cm::SEND_SIGNALING_PCAS2_B && compute::pcas_launches(data & 0xf))
        || (method == cm::SEND_SIGNALING_PCAS_B && data & cm::PCAS_B_SCHEDULE != 0)
}

/// The compute engine's own launch counters (dependent QMDs, prefetched copies), for
/// [`count_engine_launches`], and its sked-cache invalidates.
fn engine_counts(ch: &Channel) -> (u64, u64, u64) {
    let r = &ch.regs.compute;
    (
        r.dependent_launches,
        r.prefetched_launches,
        r.sked_invalidates,
    )
}

/// Adds to `ch`'s statistics the grids the compute engine launched since `before`
/// ([`engine_counts`]) without a PCAS method of its own: those dependent QMDs scheduled (also
/// counted as launches), and those run from prefetched copies; and its sked-cache invalidates.
fn count_engine_launches(ch: &mut Channel, before: (u64, u64, u64)) {
    let (dependent, prefetched, sked) = engine_counts(ch);
    let scheduled = dependent - before.0;
    ch.stats.launches += scheduled;
    ch.stats.dependent_launches += scheduled;
    ch.stats.prefetched_launches += prefetched - before.1;
    ch.stats.sked_invalidates += sked - before.2;
}

fn exec_method(
    ch: &mut Channel,
    core: &mut SimCore,
    ctx: &Ctx<'_>,
    subc: u8,
    method: u32,
    data: u32,
) -> Step {
    let engine = ch.desc.engine_type;
    if method < 0x100 {
        if host_waits_for_idle(method, data) {
            ch.regs.compute.grid_unwaited = false;
        }
        return host::method(ch, core, subc, method, data);
    }
    let Some(class) = ch.subchannels.get(subc as usize).copied().flatten() else {
        return Step::Rc(RcInfo::pbdma(
            engine,
            format!("method {method:#x} sent to subchannel {subc}, which has no object"),
        ));
    };
    let space = ch.desc.space.clone();
    match class_kind(class) {
        Some(ClassKind::Copy) => {
            let r = crate::ce::method(&mut ch.regs.ce, core, &*space, engine, class, method, data);
            if matches!(r, Step::Ok) && method == nvbare_core::channel::methods::copy::LAUNCH_DMA {
                ch.stats.copies += 1;
            }
            r
        }
        Some(ClassKind::Compute) => {
            if matches!(
                method,
                nvbare_core::channel::methods::compute::SEND_SIGNALING_PCAS2_B
                    | nvbare_core::channel::methods::compute::SEND_SIGNALING_PCAS_B
            ) && let Some(check) = ch.gr_check.clone()
                && let Err(rc) = check(core, &*space)
            {
                return Step::Rc(rc);
            }
            if method == nvbare_core::channel::methods::compute::WAIT_FOR_IDLE {
                ch.regs.compute.grid_unwaited = false;
            }
            let launches = launches_grid(method, data);
            if launches {
                if ch.regs.compute.grid_unwaited {
                    ch.stats.overlapping_launches += 1;
                }
                ch.regs.compute.grid_unwaited = true;
            }
            let before = engine_counts(ch);
            let r = compute::method(
                &mut ch.regs.compute,
                core,
                &*space,
                ctx,
                engine,
                class,
                method,
                data,
            );
            if launches {
                ch.stats.launches += 1;
            }
            count_engine_launches(ch, before);
            r
        }
        _ => Step::Rc(RcInfo::pbdma(
            engine,
            format!(
                "method {method:#x} for class {} which the simulator does not model",
                class_name(class).unwrap_or("?")
            ),
        )),
    }
}
