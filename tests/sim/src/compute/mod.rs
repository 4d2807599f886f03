//! The compute engine: compute-class methods and QMD launches.
//!
//! `SEND_PCAS_A` latches a QMD address; `SEND_SIGNALING_PCAS2_B` with a scheduling action
//! launches it (Turing: `SEND_SIGNALING_PCAS_B` with `SCHEDULE`; TURING_COMPUTE_A has no
//! `PCAS2`, and a class that does is refused the old method, which nvbare never sends there).
//! A launch reads the QMD in the layout of the channel's compute class (V02_02 on Turing,
//! V03_00 on Ampere and Ada, V04_00 on Hopper, V05_00 on Blackwell, Mesa's rule), decodes it with the
//! core's field tables (contract B), checks its version fields and resources, finds the kernel
//! model whose code matches the bytes at `PROGRAM_ADDRESS` ([`kernels`]), and runs it over
//! grid x block with every access through the channel's address space. Then it performs the
//! QMD's release semaphores.
//!
//! Failures become the SM error state and RC a real GPU would give: unknown code is an
//! `ILLEGAL_INSTR_ENCODING` warp error (GR exception, Xid 13); a load or store to an unmapped
//! address is an MMU fault (Xid 31) naming the address; a kernel that never finishes leaves the
//! channel busy (it is re-checked on later doorbells, so `spin_forever` completes if the host
//! sets its release flag).

pub mod kernels;
mod run;
#[cfg(test)]
mod tests_turing;

use nvbare_core::channel::launch::DriverArea;
use nvbare_core::channel::methods::compute as m;
use nvbare_core::channel::qmd::{LaunchDesc, Qmd};
use nvbare_core::chip::QmdVersion;
use nvbare_core::rm::class::{AMPERE_COMPUTE_A, BLACKWELL_COMPUTE_A, HOPPER_COMPUTE_A, class_name};
use nvbare_core::rm::ctrl::{NV83DE_SM_ERROR_STATE_REGISTERS, rc, warp_esr};

pub use kernels::{Behavior, KernelModel, KernelRegistry};

use crate::bar0::SimCore;
use crate::fifo::RcInfo;
use crate::fifo::exec::{Ctx, Step};
use crate::gpu_mem::{Access, AddressSpace, gpu_read, gpu_write};

/// Latched compute-class registers and a grid still running.
#[derive(Debug, Default)]
pub(crate) struct ComputeRegs {
    qmd_addr: u64,
    shared_window: [u32; 2],
    local_window: [u32; 2],
    local_memory: [u32; 2],
    local_non_throttled: [u32; 3],
    /// A grid that has not finished (a spinning kernel), with what to do when it does.
    pending: Option<Pending>,
    /// The last QMD launched, decoded.
    pub(crate) last: Option<LaunchDesc>,
    /// Fault injection ([`crate::fifo::Fifo::keep_stale_qmds`]): the QMD cache keeps every
    /// QMD it fetched, by address, and a launch whose PCAS action does not invalidate uses the
    /// kept copy (the `INVALIDATE` PCAS actions exist for this cache; when the real one keeps
    /// entries is not known, so this keeps them all).
    pub(crate) stale_qmds: Option<std::collections::BTreeMap<u64, Vec<u8>>>,
    /// QMDs fetched by `PCAS_ACTION` `PREFETCH`, by address, as they were then: a launch of
    /// that address by an action that does not invalidate runs this copy, not what memory
    /// holds by then. Invalidating actions and `INVALIDATE_SKED_CACHES` drop them.
    pub(crate) prefetched: std::collections::BTreeMap<u64, Vec<u8>>,
    /// Grids launched from a prefetched copy, ever.
    pub(crate) prefetched_launches: u64,
    /// `INVALIDATE_SKED_CACHES` methods executed, ever.
    pub(crate) sked_invalidates: u64,
    /// Fault injection ([`crate::fifo::Fifo::stale_release`]): the next launch's releases
    /// write their payload minus this, after the launch (an older launch's release).
    pub(crate) stale_release: Option<u64>,
    /// A grid was launched and nothing has waited for the engine to go idle since.
    pub(crate) grid_unwaited: bool,
    /// Grids scheduled by another QMD's completion (dependent QMD `QMD_SCHEDULE`), ever.
    pub(crate) dependent_launches: u64,
}

impl ComputeRegs {
    /// The grid still running (a kernel that spins), if any.
    pub(crate) fn running(&self) -> Option<&str> {
        self.pending.as_ref().map(|p| p.what.as_str())
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The flag the kernel polls (`None`: it never finishes).
    poll_va: Option<u64>,
    /// Release semaphores of its QMD.
    releases: Vec<Release>,
    /// The QMD its QMD schedules when it completes, and the compute class (for that launch).
    then: Option<(u64, u32)>,
    /// For traces.
    what: String,
}

#[derive(Debug, Clone, Copy)]
struct Release {
    addr: u64,
    payload: u64,
    wide: bool,
    timestamp: bool,
}

/// The QMD layout a compute class uses (Mesa `nak/qmd.rs`: Blackwell classes V05_00, Hopper
/// V04_00, Ampere/Ada V03_00; Mesa NVK: V02_02 from VOLTA_COMPUTE_A below AMPERE_COMPUTE_A).
pub fn qmd_version_for_class(class: u32) -> QmdVersion {
    if class >= BLACKWELL_COMPUTE_A {
        QmdVersion::V05_00
    } else if class >= HOPPER_COMPUTE_A {
        QmdVersion::V04_00
    } else if class >= AMPERE_COMPUTE_A {
        QmdVersion::V03_00
    } else {
        QmdVersion::V02_02
    }
}

/// Whether compute class `class` has `SEND_SIGNALING_PCAS2_B` (AMPERE_COMPUTE_A on;
/// TURING_COMPUTE_A has only `SEND_SIGNALING_PCAS_B`, `clc5c0.h`).
pub fn has_pcas2(class: u32) -> bool {
    class >= AMPERE_COMPUTE_A
}

/// A method the channel's compute class does not have: what the simulator answers for any
/// method it does not model (a GR exception RC naming it).
fn not_in_class(engine: u32, class: u32, method: u32) -> Step {
    Step::Rc(RcInfo {
        code: rc::ROBUST_CHANNEL_GR_EXCEPTION,
        engine_type: engine,
        reason: format!(
            "{} has no method {method:#x} (or the simulator does not model it there)",
            class_name(class).unwrap_or("compute class")
        ),
        mmu_fault: None,
        sm_error: None,
    })
}

/// An SM exception raised by the compute engine (GR exception, Xid 13).
fn sm_exception(engine: u32, warp_error: u32, pc: u64, addr: u64, reason: String) -> Step {
    let regs = NV83DE_SM_ERROR_STATE_REGISTERS {
        hwwGlobalEsr: 0,
        hwwWarpEsr: warp_error,
        hwwWarpEsrPc: pc as u32,
        hwwGlobalEsrReportMask: 0,
        hwwWarpEsrReportMask: 0xffff_ffff,
        _pad0: 0,
        hwwEsrAddr: addr,
        hwwWarpEsrPc64: pc,
        hwwCgaEsr: 0,
        hwwCgaEsrReportMask: 0,
    };
    Step::Rc(RcInfo {
        code: rc::ROBUST_CHANNEL_GR_EXCEPTION,
        engine_type: engine,
        reason: format!("{} ({reason})", warp_esr::name(warp_error)),
        mmu_fault: None,
        sm_error: Some((0, regs)),
    })
}

/// Whether `SEND_SIGNALING_PCAS2_B` with PCAS action `action` launches the latched QMD:
/// SCHEDULE (2), INVALIDATE_COPY_SCHEDULE (3), PREFETCH_SCHEDULE (9),
/// INVALIDATE_PREFETCH_COPY_SCHEDULE (10), ..._FORCE_REQUIRE_SCHEDULING (11).
pub(crate) fn pcas_launches(action: u32) -> bool {
    matches!(action, 2 | 3 | 9 | 10 | 11)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn method(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    ctx: &Ctx<'_>,
    engine: u32,
    class: u32,
    method: u32,
    data: u32,
) -> Step {
    match method {
        m::INVALIDATE_SKED_CACHES => {
            r.sked_invalidates += 1;
            if let Some(cache) = r.stale_qmds.as_mut() {
                cache.clear();
            }
            r.prefetched.clear();
        }
        m::NO_OPERATION
        | m::WAIT_FOR_IDLE
        | m::PM_TRIGGER
        | m::SEND_PCAS_B
        | m::SET_SHADER_CACHE_CONTROL
        | m::SET_SM_TIMEOUT_INTERVAL
        | m::INVALIDATE_SHADER_CACHES_NO_WFI => {}
        m::SET_SHADER_SHARED_MEMORY_WINDOW_A => r.shared_window[0] = data,
        m::SET_SHADER_SHARED_MEMORY_WINDOW_B => r.shared_window[1] = data,
        m::SET_SHADER_LOCAL_MEMORY_WINDOW_A => r.local_window[0] = data,
        m::SET_SHADER_LOCAL_MEMORY_WINDOW_B => r.local_window[1] = data,
        m::SET_SHADER_LOCAL_MEMORY_A => r.local_memory[0] = data,
        m::SET_SHADER_LOCAL_MEMORY_B => r.local_memory[1] = data,
        m::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A => r.local_non_throttled[0] = data,
        m::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B => r.local_non_throttled[1] = data,
        m::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C => r.local_non_throttled[2] = data,
        m::SEND_PCAS_A => r.qmd_addr = (data as u64) << 8,
        m::SEND_SIGNALING_PCAS2_B if !has_pcas2(class) => {
            return not_in_class(engine, class, method);
        }
        m::SEND_SIGNALING_PCAS_B if has_pcas2(class) => {
            // The method is in every class's header, but nvbare sends it only below Ampere and
            // its interplay with PCAS2's QMD cache actions is not modelled.
            return not_in_class(engine, class, method);
        }
        m::SEND_SIGNALING_PCAS_B => {
            // Bit 0 INVALIDATE, bit 1 SCHEDULE (`clc5c0.h`); the other bits are reserved.
            if data & !(m::PCAS_B_INVALIDATE | m::PCAS_B_SCHEDULE) != 0 {
                return sm_exception(
                    engine,
                    warp_esr::ILLEGAL_INSTR_PARAM,
                    0,
                    0,
                    format!("SEND_SIGNALING_PCAS_B {data:#x} sets reserved bits"),
                );
            }
            if data & m::PCAS_B_INVALIDATE != 0 {
                if let Some(cache) = r.stale_qmds.as_mut() {
                    cache.remove(&r.qmd_addr);
                }
                r.prefetched.remove(&r.qmd_addr);
            }
            if data & m::PCAS_B_SCHEDULE != 0 {
                return launch(r, core, space, ctx, engine, class);
            }
        }
        m::SEND_SIGNALING_PCAS2_B => {
            let action = data & 0xf;
            // INVALIDATE (1) and the INVALIDATE_..._COPY actions drop the cached copy.
            if matches!(action, 1 | 3 | 10 | 11) {
                if let Some(cache) = r.stale_qmds.as_mut() {
                    cache.remove(&r.qmd_addr);
                }
                r.prefetched.remove(&r.qmd_addr);
            }
            return match action {
                a if pcas_launches(a) => launch(r, core, space, ctx, engine, class),
                8 => prefetch(r, core, space, engine, class),
                0 | 1 => Step::Ok,
                a => sm_exception(
                    engine,
                    warp_esr::ILLEGAL_INSTR_PARAM,
                    0,
                    0,
                    format!("PCAS action {a} is not modelled"),
                ),
            };
        }
        _ => {
            return Step::Rc(RcInfo {
                code: rc::ROBUST_CHANNEL_GR_EXCEPTION,
                engine_type: engine,
                reason: format!(
                    "{} method {method:#x} is not modelled",
                    class_name(class).unwrap_or("compute")
                ),
                mmu_fault: None,
                sm_error: None,
            });
        }
    }
    Step::Ok
}

/// Re-checks a grid that did not finish; `Some(step)` when it has now finished (or failed),
/// with the QMDs its QMD schedules run.
pub(crate) fn poll_pending(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    ctx: &Ctx<'_>,
    engine: u32,
) -> Option<Step> {
    let p = r.pending.as_ref()?;
    let poll_va = p.poll_va?;
    let mut b = [0u8; 4];
    if let Err(f) = gpu_read(core, space, poll_va, &mut b, Access::Read) {
        r.pending = None;
        return Some(Step::Rc(RcInfo::mmu(engine, f, "kernel load")));
    }
    if u32::from_le_bytes(b) == 0 {
        return None;
    }
    let p = r.pending.take()?;
    core.trace(format!("compute: {} finished", p.what));
    let step = release_all(core, space, engine, &p.releases);
    match (step, p.then) {
        (Step::Ok, Some((next, class))) => {
            r.dependent_launches += 1;
            Some(launch_from(r, core, space, ctx, engine, class, next, true))
        }
        (step, _) => Some(step),
    }
}

fn release_all(core: &mut SimCore, space: &dyn AddressSpace, engine: u32, rel: &[Release]) -> Step {
    for r in rel {
        let bytes = r.payload.to_le_bytes();
        let n = if r.wide { 8 } else { 4 };
        if let Err(f) = gpu_write(core, space, r.addr, &bytes[..n], Access::Write) {
            return Step::Rc(RcInfo::mmu(engine, f, "QMD release semaphore"));
        }
        if r.timestamp {
            let ts = core.clock.nanos().to_le_bytes();
            if let Err(f) = gpu_write(core, space, r.addr + 8, &ts, Access::Write) {
                return Step::Rc(RcInfo::mmu(engine, f, "QMD release timestamp"));
            }
        }
    }
    Step::Ok
}

/// Reads a QMD field that is named differently per layout; `None` if neither name exists.
fn field(q: &Qmd, names: &[&str]) -> Option<u64> {
    names.iter().find_map(|n| q.get(n).ok())
}

fn releases(q: &Qmd, d: &LaunchDesc) -> Vec<Release> {
    let mut out = Vec::new();
    for (i, rel) in d.release.iter().enumerate() {
        let Some((addr, payload)) = *rel else {
            continue;
        };
        let wide = field(
            q,
            &[
                &format!("RELEASE{i}_PAYLOAD64B"),
                &format!("RELEASE_PAYLOAD64B({i})"),
            ],
        )
        .unwrap_or(0)
            != 0;
        // STRUCTURE_SIZE 0 = FOUR_WORDS: payload then timestamp.
        let four = field(
            q,
            &[
                &format!("RELEASE{i}_STRUCTURE_SIZE"),
                &format!("RELEASE_STRUCTURE_SIZE({i})"),
            ],
        )
        .unwrap_or(0)
            == 0;
        out.push(Release {
            addr,
            payload: if wide { payload } else { payload & 0xffff_ffff },
            wide,
            timestamp: four,
        });
    }
    out
}

/// Most QMDs one completion schedules in a row before the simulator calls it a cycle (a real
/// chain is at most `DeviceOptions::deferred_submits` + 1 launches long).
const MAX_DEPENDENT_RUN: u64 = 100_000;

/// Dependent QMD 0 of a QMD: `Ok(Some(va))` when it schedules the QMD at `va` on completion
/// (`QMD_SCHEDULE`), `Ok(None)` when it schedules nothing, `Err` for what is not modelled
/// (other actions, dependent QMD 1).
fn dependent(q: &Qmd) -> Result<Option<u64>, String> {
    let get = |names: &[&str]| field(q, names).unwrap_or(0);
    if q.version() == QmdVersion::V02_02 {
        // clc3c0qmd.h: DEPENDENT_QMD_SCHEDULE_ENABLE schedules the QMD at
        // DEPENDENT_QMD_POINTER; DEPENDENT_QMD_TYPE 1 = GRID (0 = QUEUE: not modelled), and
        // DEPENDENT_QMD_FIELD_COPY is not modelled either.
        if get(&["DEPENDENT_QMD_SCHEDULE_ENABLE"]) == 0 {
            return Ok(None);
        }
        if get(&["DEPENDENT_QMD_FIELD_COPY"]) != 0 {
            return Err("DEPENDENT_QMD_FIELD_COPY is not modelled".into());
        }
        return match get(&["DEPENDENT_QMD_TYPE"]) {
            1 => Ok(Some(get(&["DEPENDENT_QMD_POINTER"]) << 8)),
            t => Err(format!("dependent QMD type {t} (QUEUE) is not modelled")),
        };
    }
    if get(&["DEPENDENT_QMD1_ENABLE", "DEPENDENT_QMD_ENABLE(1)"]) != 0 {
        return Err("dependent QMD 1 is not modelled".into());
    }
    if get(&["DEPENDENT_QMD0_ENABLE", "DEPENDENT_QMD_ENABLE(0)"]) == 0 {
        return Ok(None);
    }
    // clc6c0qmd.h / clcbc0qmd.h: DEPENDENT_QMD_ACTION 1 = QMD_SCHEDULE (4 =
    // DECREMENT_DEPENDENCE, which needs a model of dependence counters).
    match get(&["DEPENDENT_QMD0_ACTION", "DEPENDENT_QMD_ACTION(0)"]) {
        1 => Ok(Some(get(&["DEPENDENT_QMD0_POINTER"]) << 8)),
        a => Err(format!("dependent QMD action {a} is not modelled")),
    }
}

/// `PCAS_ACTION` `PREFETCH`: the QMD at the latched address is read now and kept.
fn prefetch(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    engine: u32,
    class: u32,
) -> Step {
    let qmd_va = r.qmd_addr;
    let size = qmd_version_for_class(class).size();
    // A copy the cache kept (fault injection) is a hit: nothing is fetched.
    if let Some(b) = r.stale_qmds.as_ref().and_then(|c| c.get(&qmd_va))
        && b.len() == size
    {
        core.trace(format!(
            "compute: QMD at {qmd_va:#x} prefetched from the QMD cache"
        ));
        r.prefetched.insert(qmd_va, b.clone());
        return Step::Ok;
    }
    let mut bytes = vec![0u8; size];
    if let Err(f) = gpu_read(core, space, qmd_va, &mut bytes, Access::Read) {
        return Step::Rc(RcInfo::mmu(engine, f, "QMD prefetch"));
    }
    core.trace(format!("compute: QMD at {qmd_va:#x} prefetched"));
    if let Some(c) = r.stale_qmds.as_mut() {
        c.insert(qmd_va, bytes.clone());
    }
    r.prefetched.insert(qmd_va, bytes);
    Step::Ok
}

fn launch(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    ctx: &Ctx<'_>,
    engine: u32,
    class: u32,
) -> Step {
    let qmd_va = r.qmd_addr;
    launch_from(r, core, space, ctx, engine, class, qmd_va, false)
}

/// Launches the QMD at `qmd_va` (`scheduled`: by the QMD before it, which nothing invalidated
/// in the QMD cache for), then every QMD a completed one schedules, in order.
#[allow(clippy::too_many_arguments)]
fn launch_from(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    ctx: &Ctx<'_>,
    engine: u32,
    class: u32,
    mut qmd_va: u64,
    scheduled: bool,
) -> Step {
    if scheduled {
        core.trace(format!(
            "compute: QMD at {qmd_va:#x} scheduled by the QMD before it"
        ));
    }
    let mut chained = 0u64;
    loop {
        match launch_one(r, core, space, ctx, engine, class, qmd_va) {
            Ok(Some(_)) if chained >= MAX_DEPENDENT_RUN => {
                // QMDs that schedule each other in a cycle keep the engine busy for ever on
                // hardware; here the channel stays busy (a wait for it times out).
                let what = format!(
                    "dependent QMDs scheduled one another {chained} times without an end \
                     (last at {qmd_va:#x}): a cycle"
                );
                r.pending = Some(Pending {
                    poll_va: None,
                    releases: Vec::new(),
                    then: None,
                    what: what.clone(),
                });
                return Step::Hang(what);
            }
            Ok(Some(next)) => {
                chained += 1;
                r.dependent_launches += 1;
                core.trace(format!(
                    "compute: QMD at {qmd_va:#x} completed, schedules the QMD at {next:#x}"
                ));
                qmd_va = next;
            }
            Ok(None) => return Step::Ok,
            Err(step) => return step,
        }
    }
}

/// Runs the QMD at `qmd_va`: `Ok(Some(next))` when it completed and schedules the QMD at
/// `next`, `Ok(None)` when it completed, `Err(step)` for anything else (a fault, a grid still
/// running).
fn launch_one(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    ctx: &Ctx<'_>,
    engine: u32,
    class: u32,
    qmd_va: u64,
) -> Result<Option<u64>, Step> {
    let v = qmd_version_for_class(class);
    if v != ctx.chip.info().qmd {
        return Err(sm_exception(
            engine,
            warp_esr::ILLEGAL_INSTR_PARAM,
            0,
            qmd_va,
            format!(
                "{} uses {v:?} but this chip's QMD is {:?}",
                class_name(class).unwrap_or("compute class"),
                ctx.chip.info().qmd
            ),
        ));
    }
    let cached = r
        .stale_qmds
        .as_ref()
        .and_then(|c| c.get(&qmd_va))
        .filter(|b| b.len() == v.size())
        .cloned();
    let prefetched = r.prefetched.remove(&qmd_va).filter(|b| b.len() == v.size());
    let bytes = match (prefetched, cached) {
        (Some(b), _) => {
            r.prefetched_launches += 1;
            core.trace(format!(
                "compute: QMD at {qmd_va:#x} launched from its prefetched copy"
            ));
            b
        }
        (None, Some(b)) => {
            core.trace(format!(
                "compute: QMD at {qmd_va:#x} launched from the QMD cache"
            ));
            b
        }
        (None, None) => {
            let mut bytes = vec![0u8; v.size()];
            if let Err(f) = gpu_read(core, space, qmd_va, &mut bytes, Access::Read) {
                return Err(Step::Rc(RcInfo::mmu(engine, f, "QMD fetch")));
            }
            if let Some(c) = r.stale_qmds.as_mut() {
                c.insert(qmd_va, bytes.clone());
            }
            bytes
        }
    };
    let qmd = match Qmd::from_bytes(v, &bytes) {
        Ok(q) => q,
        Err(e) => return Err(bad_qmd(engine, qmd_va, e.to_string())),
    };
    if let Err(e) = qmd.check_version() {
        return Err(bad_qmd(engine, qmd_va, e.to_string()));
    }
    let d = match qmd.launch_desc() {
        Ok(d) => d,
        Err(e) => return Err(bad_qmd(engine, qmd_va, e.to_string())),
    };
    if let Err(why) = unmodelled_v02(&qmd) {
        return Err(bad_qmd(engine, qmd_va, why));
    }
    let then = dependent(&qmd).map_err(|why| bad_qmd(engine, qmd_va, why))?;
    let mut rel = releases(&qmd, &d);
    if let Some(back) = r.stale_release.take() {
        core.trace(format!(
            "compute: releases of the QMD at {qmd_va:#x} go back by {back} (injected)"
        ));
        for x in rel.iter_mut() {
            x.payload = x.payload.saturating_sub(back);
        }
    }
    r.last = Some(d);
    let end = match run::grid(core, space, ctx, &d) {
        run::GridEnd::Done => match release_all(core, space, engine, &rel) {
            Step::Ok => return Ok(then),
            step => step,
        },
        run::GridEnd::Fault { fault, pc, kernel } => {
            // What the H200 shows for a kernel's store to an unmapped address (docs/hardware.md):
            // a non-replayable MMU fault, Xid 31, the channel torn down, the fault in the
            // debugger's MMU fault info, and no SM error state (READ_ALL_SM_ERROR_STATES is
            // all clear), so the model records none either.
            let _ = pc;
            Step::Rc(RcInfo::mmu(engine, fault, &format!("kernel {kernel}")))
        }
        run::GridEnd::Exception {
            warp_error,
            pc,
            addr,
            reason,
        } => sm_exception(engine, warp_error, pc, addr, reason),
        run::GridEnd::Spinning { poll_va, kernel } => {
            let what = match poll_va {
                Some(va) => format!("kernel {kernel} (QMD at {qmd_va:#x}) polls {va:#x}"),
                None => format!("kernel {kernel} (QMD at {qmd_va:#x}) never completes"),
            };
            r.pending = Some(Pending {
                poll_va,
                releases: rel,
                then: then.map(|next| (next, class)),
                what: what.clone(),
            });
            Step::Hang(what)
        }
    };
    Err(end)
}

/// V02_02 fields a launch may not use here: `PROGRAM_OFFSET` (the code relative to a program
/// region: TURING_COMPUTE_A has no method that sets one, and Mesa NVK addresses Turing's code
/// with `PROGRAM_ADDRESS_*`), queue QMDs, release reductions.
fn unmodelled_v02(q: &Qmd) -> Result<(), String> {
    if q.version() != QmdVersion::V02_02 {
        return Ok(());
    }
    for name in [
        "PROGRAM_OFFSET",
        "IS_QUEUE",
        "RELEASE0_REDUCTION_ENABLE",
        "RELEASE1_REDUCTION_ENABLE",
    ] {
        if let Ok(v) = q.get(name)
            && v != 0
        {
            return Err(format!("{name} = {v:#x} is not modelled"));
        }
    }
    Ok(())
}

fn bad_qmd(engine: u32, qmd_va: u64, why: String) -> Step {
    sm_exception(
        engine,
        warp_esr::ILLEGAL_INSTR_PARAM,
        0,
        qmd_va,
        format!("QMD at {qmd_va:#x}: {why}"),
    )
}

/// The constant-bank-0 driver area layout a kernel of shader model `sm` reads.
pub(crate) fn driver_area(sm: u32) -> DriverArea {
    DriverArea::for_sm(sm)
}
