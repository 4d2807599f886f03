//! The host ("FIFO") front end: channels, the doorbell, GPFIFO and pushbuffer execution.
//!
//! RM registers every channel it creates here ([`Fifo::add_channel`]): where its GPFIFO ring is
//! (a GPU VA in the channel's address space), where USERD is (a physical location, as in RAMFC),
//! the error notifier, and the work-submit token. A write of a token to the doorbell
//! (`NV_VIRTUAL_FUNCTION_DOORBELL`, BAR0 0xbb0090 = usermode `NOTIFY_CHANNEL_PENDING`) makes the
//! host take `GPPut` from USERD and fetch that channel's new GP entries (`GPGet` up to that
//! `GPPut`) and execute their pushbuffers: host methods here, copy-engine methods in
//! [`crate::ce`], compute methods in [`crate::compute`]. Every fetch and every engine access
//! goes through the channel's [`AddressSpace`].
//!
//! Execution is synchronous with the doorbell write, which keeps tests deterministic. A channel
//! whose semaphore acquire is not satisfied stops there (its `GPGet` is already past that entry:
//! an entry is committed when its segment begins, as the manual's `GP_GET` says) and is
//! retried on every later doorbell and after every semaphore release; it never blocks the
//! process. Entries published in USERD without a doorbell stay unfetched, as on hardware, and a
//! doorbell can be lost ([`Fifo::lose_doorbells`]): on the H200 one was whenever another
//! process created its channels, until the driver rang it again. A fault "RCs" the channel's
//! whole TSG, as RM does (`RC_NOTIFIER_SCOPE_TSG`): the error notifiers get the
//! `ROBUST_CHANNEL_*` code, the fault is recorded for the debugger controls, and the channels
//! stop executing.

pub(crate) mod exec;
mod host;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use nvbare_core::channel::gpfifo::USERD_GP_PUT;
use nvbare_core::chip::Chipset;
use nvbare_core::rm::ctrl::{
    NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY, NV83DE_SM_ERROR_STATE_REGISTERS, NvNotification,
};
use zerocopy::IntoBytes;

use crate::SimGpu;
use crate::bar0::{MmioEngine, SimCore};
use crate::compute::KernelRegistry;
use crate::gpu_mem::{AddressSpace, Aperture};
use crate::rm::RmModel;
use crate::rm::chips::ChipRm;
use crate::rm_service::RmNotice;

pub use exec::RcInfo;

/// BAR0 offset of the doorbell (`NV_VIRTUAL_FUNCTION_DOORBELL`).
pub const DOORBELL_OFFSET: u32 = 0x00bb_0090;

/// A physical location (what RAMFC holds for USERD, what RM knows of a notifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysLoc {
    /// VRAM or host memory.
    pub aperture: Aperture,
    /// Physical (VRAM) or bus (host) address.
    pub addr: u64,
}

impl PhysLoc {
    /// Reads `dst.len()` bytes at `self + off`.
    pub fn read(&self, core: &SimCore, off: u64, dst: &mut [u8]) -> Result<(), String> {
        let a = self.addr.checked_add(off).ok_or("address overflow")?;
        match self.aperture {
            Aperture::Vram => core.vram.read(a, dst).map_err(|e| e.to_string()),
            Aperture::SysCoherent | Aperture::SysNonCoherent => {
                core.host.read(a, dst).map_err(|e| e.to_string())
            }
            Aperture::Peer(id) => core.peers.read(id, a, dst),
        }
    }

    /// Writes `src` at `self + off`.
    pub fn write(&self, core: &SimCore, off: u64, src: &[u8]) -> Result<(), String> {
        let a = self.addr.checked_add(off).ok_or("address overflow")?;
        match self.aperture {
            Aperture::Vram => core.vram.write(a, src).map_err(|e| e.to_string()),
            Aperture::SysCoherent | Aperture::SysNonCoherent => {
                core.host.write(a, src).map_err(|e| e.to_string())
            }
            Aperture::Peer(id) => core.peers.write(id, a, src),
        }
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&self, core: &SimCore, off: u64) -> Result<u32, String> {
        let mut b = [0; 4];
        self.read(core, off, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian u32.
    pub fn write_u32(&self, core: &SimCore, off: u64, v: u32) -> Result<(), String> {
        self.write(core, off, &v.to_le_bytes())
    }
}

/// What RM tells the host about a new channel.
#[derive(Clone)]
pub struct ChannelDesc {
    /// Channel id.
    pub chid: u32,
    /// Work-submit token (chid | runlist << 16).
    pub token: u32,
    /// Identity of the channel's TSG (RC scope).
    pub tsg: u64,
    /// The GPFIFO class the channel was allocated with.
    pub class: u32,
    /// `NV2080_ENGINE_TYPE_*` of the channel's runlist.
    pub engine_type: u32,
    /// The channel's address space.
    pub space: Arc<dyn AddressSpace>,
    /// GPU VA of the GPFIFO ring.
    pub gpfifo_va: u64,
    /// Ring entries.
    pub entries: u32,
    /// USERD.
    pub userd: PhysLoc,
    /// The error notifier (`NvNotification[3]`), if the client gave one.
    pub notifier: Option<PhysLoc>,
}

impl std::fmt::Debug for ChannelDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelDesc")
            .field("chid", &self.chid)
            .field("token", &self.token)
            .field("class", &self.class)
            .field("gpfifo_va", &self.gpfifo_va)
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

/// A channel's execution state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelState {
    /// Fetching and executing whatever `GPPut` offers.
    Running,
    /// Waiting for a semaphore acquire to be satisfied.
    Blocked {
        /// Semaphore address.
        addr: u64,
        /// Value waited for.
        payload: u64,
    },
    /// Stopped at a method that waits for a grid that does not finish (methods that do not
    /// wait for it went on: [`Channel::running_grid`]).
    Hung {
        /// What is running.
        what: String,
    },
    /// Torn down by RC.
    Faulted(RcInfo),
}

/// What the debugger controls report for a channel.
#[derive(Debug, Clone, Default)]
pub struct ErrorRecord {
    /// SM error states by SM index.
    pub sm_errors: BTreeMap<u32, NV83DE_SM_ERROR_STATE_REGISTERS>,
    /// MMU faults, most recent last (at most 4 kept, like `READ_MMU_FAULT_INFO`).
    pub mmu_faults: Vec<NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY>,
    /// Whether an MMU fault occurred since the last clear.
    pub mmu_fault_valid: bool,
}

/// One channel as the host sees it.
pub struct Channel {
    desc: ChannelDesc,
    scheduled: bool,
    state: ChannelState,
    /// Classes of the engine objects RM allocated on this channel.
    objects: Vec<u32>,
    /// Class bound to each subchannel by `SET_OBJECT`.
    subchannels: [Option<u32>; 8],
    /// Next GP entry to fetch.
    gp_get: u32,
    /// `GPPut` as the host took it from USERD at the channel's last doorbell: entries beyond
    /// it are not fetched until another doorbell.
    known_put: u32,
    /// Fault injection ([`Fifo::switch_in_on_stores`]): the host also reloads `GPPut` when a
    /// CPU store lands.
    switch_in_on_stores: bool,
    cursor: Option<exec::Cursor>,
    regs: exec::Regs,
    errors: ErrorRecord,
    /// GSP-RM's check that the channel's GR context is usable, run before each launch.
    gr_check: Option<GrCheck>,
    /// Where GSP-RM wrote the instance block, and what it wrote (checked before each run).
    instance: Option<(PhysLoc, Vec<u8>)>,
    /// Counts, for tests and traces.
    pub stats: ChannelStats,
}

/// A check of a channel's GR context before a launch (installed by the RM when it knows how
/// the context is set up): `Err` tears the channel down with that RC.
pub type GrCheck = Arc<dyn Fn(&SimCore, &dyn AddressSpace) -> Result<(), RcInfo> + Send + Sync>;

/// Counters of what a channel did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// GP entries completed.
    pub gp_entries: u64,
    /// Methods executed.
    pub methods: u64,
    /// Semaphore releases.
    pub releases: u64,
    /// Copy-engine transfers.
    pub copies: u64,
    /// Grids launched.
    pub launches: u64,
    /// Grids launched while an earlier grid of the channel could still be running: no
    /// `WAIT_FOR_IDLE` (compute class), host `WFI` or release with `RELEASE_WFI` since it. The
    /// simulator runs grids one after the other, but on hardware such grids overlap (on the
    /// H200, 1000 `add1` launches back to back without one lost up to 11 increments per element).
    pub overlapping_launches: u64,
    /// Grids (counted in `launches`) that a completed QMD scheduled (dependent QMD
    /// `QMD_SCHEDULE`) instead of a PCAS method: they start after the grid before ends.
    pub dependent_launches: u64,
    /// Grids (counted in `launches`) launched from a QMD copy that `PCAS_ACTION` `PREFETCH`
    /// fetched earlier (while the grid before could still run) rather than from memory.
    pub prefetched_launches: u64,
    /// `INVALIDATE_SKED_CACHES` methods executed (compute class).
    pub sked_invalidates: u64,
    /// `NON_STALL_INTERRUPT`s raised.
    pub nonstall_interrupts: u64,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("desc", &self.desc)
            .field("state", &self.state)
            .field("gp_get", &self.gp_get)
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// Registration data.
    pub fn desc(&self) -> &ChannelDesc {
        &self.desc
    }

    /// Execution state.
    pub fn state(&self) -> &ChannelState {
        &self.state
    }

    /// The grid still running on the channel (a kernel that spins), as the trace names it;
    /// the channel is [`ChannelState::Hung`] only once a method waits for it.
    pub fn running_grid(&self) -> Option<&str> {
        self.regs.compute.running()
    }

    /// Fault records.
    pub fn errors(&self) -> &ErrorRecord {
        &self.errors
    }

    /// The last QMD this channel launched, as the compute engine decoded it.
    pub fn last_launch(&self) -> Option<&nvbare_core::channel::qmd::LaunchDesc> {
        self.regs.compute.last.as_ref()
    }

    /// Takes `GPPut` from USERD (what a doorbell or a switch-in makes the host do); whether it
    /// moved.
    fn take_put(&mut self, core: &mut SimCore) -> bool {
        match self.desc.userd.read_u32(core, USERD_GP_PUT) {
            Ok(put) => {
                let moved = put != self.known_put;
                self.known_put = put;
                moved
            }
            Err(e) => {
                core.trace(format!(
                    "host: USERD GPPut of channel {}: {e}",
                    self.desc.chid
                ));
                false
            }
        }
    }

    /// Clears the SM error states and the MMU-fault flag (`CLEAR_ALL_SM_ERROR_STATES`).
    pub fn clear_errors(&mut self) {
        self.errors.sm_errors.clear();
        self.errors.mmu_fault_valid = false;
    }
}

/// The host: all channels of the GPU.
pub struct Fifo {
    chip: Chipset,
    rm: ChipRm,
    kernels: Arc<KernelRegistry>,
    channels: BTreeMap<u32, Channel>,
    /// Test hook: channels whose doorbell is ignored (a stalled PBDMA).
    frozen: Vec<u32>,
    /// Fault injection ([`Fifo::run_lazily`]): channels run only in [`Fifo::catch_up`].
    lazy: bool,
    /// In [`Fifo::catch_up`] now.
    catching_up: bool,
    /// Test hook: how many of each channel's next doorbells are lost.
    lost: BTreeMap<u32, u32>,
    /// Whether RCs are queued for the RM to report (GSP-RM sends them as events).
    report_rcs: bool,
    notices: Vec<RmNotice>,
}

impl std::fmt::Debug for Fifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fifo")
            .field("chip", &self.chip)
            .field("channels", &self.channels.len())
            .finish_non_exhaustive()
    }
}

/// Most scheduling passes one doorbell runs (each pass is bounded by the entries in the rings,
/// so this only guards against a model bug).
const MAX_PASSES: usize = 10_000;

impl Fifo {
    /// The host of a `chip` GPU that runs kernels from `kernels`.
    pub fn new(chip: Chipset, rm: ChipRm, kernels: Arc<KernelRegistry>) -> Self {
        Fifo {
            chip,
            rm,
            kernels,
            channels: BTreeMap::new(),
            frozen: Vec::new(),
            lazy: false,
            catching_up: false,
            lost: BTreeMap::new(),
            report_rcs: false,
            notices: Vec::new(),
        }
    }

    /// Queues every RC for [`Fifo::take_notices`] from now on (GSP-RM reports them).
    pub fn report_rcs(&mut self, on: bool) {
        self.report_rcs = on;
    }

    /// RCs since the last call (when [`Fifo::report_rcs`] is on).
    pub fn take_notices(&mut self) -> Vec<RmNotice> {
        std::mem::take(&mut self.notices)
    }

    /// Installs the GR-context check of channel `chid`.
    pub fn set_gr_check(&mut self, chid: u32, check: GrCheck) {
        if let Some(c) = self.channels.get_mut(&chid) {
            c.gr_check = Some(check);
        }
    }

    /// Records the instance block of channel `chid` as GSP-RM wrote it.
    pub fn set_instance(&mut self, chid: u32, at: PhysLoc, written: Vec<u8>) {
        if let Some(c) = self.channels.get_mut(&chid) {
            c.instance = Some((at, written));
        }
    }

    /// Removes every channel (GSP-RM restarting).
    pub fn clear(&mut self) {
        self.channels.clear();
        self.frozen.clear();
        self.lost.clear();
        self.notices.clear();
    }

    /// The chip.
    pub fn chip(&self) -> Chipset {
        self.chip
    }

    /// What the chip's RM reports (classes, GR facts).
    pub fn chip_rm(&self) -> ChipRm {
        self.rm
    }

    /// Registers a channel (RM calls this when a GPFIFO object is allocated).
    pub fn add_channel(&mut self, desc: ChannelDesc) {
        let chid = desc.chid;
        self.channels.insert(
            chid,
            Channel {
                desc,
                scheduled: false,
                state: ChannelState::Running,
                objects: Vec::new(),
                subchannels: [None; 8],
                gp_get: 0,
                known_put: 0,
                switch_in_on_stores: false,
                cursor: None,
                regs: exec::Regs::default(),
                errors: ErrorRecord::default(),
                gr_check: None,
                instance: None,
                stats: ChannelStats::default(),
            },
        );
    }

    /// Removes a channel (RM frees it; whatever it was running stops).
    pub fn remove_channel(&mut self, chid: u32) -> Option<Channel> {
        self.frozen.retain(|&c| c != chid);
        self.lost.remove(&chid);
        self.channels.remove(&chid)
    }

    /// Records an engine object of `class` allocated on channel `chid`.
    pub fn add_object(&mut self, chid: u32, class: u32) {
        if let Some(c) = self.channels.get_mut(&chid) {
            c.objects.push(class);
        }
    }

    /// Forgets an engine object.
    pub fn remove_object(&mut self, chid: u32, class: u32) {
        if let Some(c) = self.channels.get_mut(&chid)
            && let Some(i) = c.objects.iter().position(|&o| o == class)
        {
            c.objects.remove(i);
            for s in c.subchannels.iter_mut() {
                if *s == Some(class) {
                    *s = None;
                }
            }
        }
    }

    /// Enables or disables scheduling of the channels of TSG `tsg` (`GPFIFO_SCHEDULE`).
    pub fn set_scheduled(&mut self, tsg: u64, enable: bool) {
        for c in self.channels.values_mut() {
            if c.desc.tsg == tsg {
                c.scheduled = enable;
            }
        }
    }

    /// Every channel.
    pub fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.channels.values()
    }

    /// A channel by id.
    pub fn channel(&self, chid: u32) -> Option<&Channel> {
        self.channels.get(&chid)
    }

    /// A channel by id, mutably.
    pub fn channel_mut(&mut self, chid: u32) -> Option<&mut Channel> {
        self.channels.get_mut(&chid)
    }

    /// Fault injection: the host ignores doorbells of channel `chid` (its `GPGet` stops
    /// advancing, as with a stalled PBDMA), until [`Fifo::thaw`].
    pub fn freeze(&mut self, chid: u32) {
        if !self.frozen.contains(&chid) {
            self.frozen.push(chid);
        }
    }

    /// Undoes [`Fifo::freeze`].
    pub fn thaw(&mut self, chid: u32) {
        self.frozen.retain(|&c| c != chid);
    }

    /// Fault injection: the GPU falls behind. Doorbells and switch-ins still take `GPPut`, and
    /// CPU writes still count, but no channel runs until [`Fifo::catch_up`], which the
    /// simulated CPU calls when time passes for the driver (it reads its clock or delays:
    /// [`crate::backend::SimBackend::run_lazily`]). Without it the simulator runs work at the
    /// doorbell, before the driver's next instruction, so a driver that reads results without
    /// waiting for them would pass; on hardware the GPU is microseconds behind.
    pub fn run_lazily(&mut self, on: bool) {
        self.lazy = on;
    }

    /// Runs every runnable channel until none makes progress, in lazy mode too
    /// ([`Fifo::run_lazily`]).
    pub fn catch_up(&mut self, core: &mut SimCore) {
        self.catching_up = true;
        self.run_all(core);
        self.catching_up = false;
    }

    /// Fault injection: the next `n` doorbells of channel `chid` are lost (the host does not
    /// take its new `GPPut`), as one was on the H200 when another process created its channels
    /// (docs/hardware.md). The driver must ring again when work it published is not fetched.
    pub fn lose_doorbells(&mut self, chid: u32, n: u32) {
        if n == 0 {
            self.lost.remove(&chid);
        } else {
            self.lost.insert(chid, n);
        }
    }

    /// Fault injection: channel `chid`'s QMD cache keeps every QMD it fetches and launches
    /// the kept copy again when a later launch of the same address does not invalidate it
    /// (`PCAS_ACTION` without `INVALIDATE`). `false` empties and stops it.
    pub fn keep_stale_qmds(&mut self, chid: u32, on: bool) -> bool {
        let Some(c) = self.channels.get_mut(&chid) else {
            return false;
        };
        c.regs.compute.stale_qmds = on.then(Default::default);
        true
    }

    /// Fault injection: the next launch on channel `chid` releases its timeline value minus
    /// `back`, as a launch on the H200 released the value of the launch one command-memory
    /// cycle earlier while another process set up its channels.
    pub fn stale_release(&mut self, chid: u32, back: u64) -> bool {
        let Some(c) = self.channels.get_mut(&chid) else {
            return false;
        };
        c.regs.compute.stale_release = Some(back);
        true
    }

    /// Fault injection: channel `chid` is switched in (the host reloads its `GPPut` from
    /// USERD, no doorbell needed) whenever [`Fifo::switch_in`] runs, which the simulated CPU
    /// does after each write-combined store lands ([`crate::wc`]). On real hardware a channel
    /// switch-in reloads `GPPut` at some moment while another process's channel shares the GPU;
    /// this puts it at every moment, so a `GPPut` visible before the work it publishes is caught.
    pub fn switch_in_on_stores(&mut self, chid: u32, on: bool) {
        if let Some(c) = self.channels.get_mut(&chid) {
            c.switch_in_on_stores = on;
        }
    }

    /// Switches in every channel marked by [`Fifo::switch_in_on_stores`]: reloads its `GPPut`
    /// from USERD and runs what it publishes.
    pub fn switch_in(&mut self, core: &mut SimCore) {
        let mut moved = false;
        for c in self.channels.values_mut().filter(|c| c.switch_in_on_stores) {
            if c.take_put(core) {
                core.trace(format!(
                    "host: channel {} switched in, GPPut {} reloaded from USERD",
                    c.desc.chid, c.known_put
                ));
                moved = true;
            }
        }
        if moved {
            self.run_all(core);
        }
    }

    /// Doorbells of channel `chid` still to be lost.
    pub fn doorbells_to_lose(&self, chid: u32) -> u32 {
        self.lost.get(&chid).copied().unwrap_or(0)
    }

    /// A doorbell write of `token`: the host takes that channel's `GPPut` from USERD, then runs
    /// it and every other runnable channel until none makes progress.
    pub fn doorbell(&mut self, core: &mut SimCore, token: u32) {
        let mut known = false;
        for c in self.channels.values_mut().filter(|c| c.desc.token == token) {
            known = true;
            let chid = c.desc.chid;
            if let Some(n) = self.lost.get_mut(&chid) {
                *n -= 1;
                if *n == 0 {
                    self.lost.remove(&chid);
                }
                core.trace(format!("host: doorbell of channel {chid} lost (injected)"));
                continue;
            }
            c.take_put(core);
        }
        if !known {
            core.trace(format!(
                "host: doorbell for unknown work-submit token {token:#x} ignored"
            ));
            return;
        }
        self.run_all(core);
    }

    /// Runs every runnable channel until no channel makes progress.
    pub fn run_all(&mut self, core: &mut SimCore) {
        self.run_all_progress(core);
    }

    /// [`Fifo::run_all`], telling whether any channel made progress (a
    /// [`crate::system::SimSystem`] repeats it over its GPUs until none does).
    pub fn run_all_progress(&mut self, core: &mut SimCore) -> bool {
        if self.lazy && !self.catching_up {
            return false;
        }
        let mut any = false;
        for _ in 0..MAX_PASSES {
            let ids: Vec<u32> = self.channels.keys().copied().collect();
            let mut progress = false;
            for chid in ids {
                if self.frozen.contains(&chid) {
                    continue;
                }
                match self.step_channel(core, chid) {
                    exec::Outcome::Progress => progress = true,
                    exec::Outcome::Idle => {}
                    exec::Outcome::Rc(info) => {
                        self.rc(core, chid, info);
                        progress = true;
                    }
                }
            }
            if !progress {
                return any;
            }
            any = true;
        }
        core.trace("host: scheduling pass limit reached".to_string());
        any
    }

    fn step_channel(&mut self, core: &mut SimCore, chid: u32) -> exec::Outcome {
        let kernels = self.kernels.clone();
        let chip = self.chip;
        let Some(ch) = self.channels.get_mut(&chid) else {
            return exec::Outcome::Idle;
        };
        if !ch.scheduled {
            return exec::Outcome::Idle;
        }
        if let Some((at, written)) = &ch.instance {
            let mut now = vec![0u8; written.len()];
            if at.read(core, 0, &mut now).is_err() || &now != written {
                let reason = format!(
                    "the instance block at {:#x} no longer holds what GSP-RM wrote (the driver \
                     reused its memory)",
                    at.addr
                );
                ch.instance = None;
                return exec::Outcome::Rc(RcInfo::pbdma(ch.desc.engine_type, reason));
            }
        }
        exec::run(
            ch,
            core,
            &exec::Ctx {
                chip,
                kernels: &kernels,
            },
        )
    }

    /// Tears down the TSG of channel `chid`: every channel of the group stops, gets the error
    /// notifier written, and keeps the fault for the debugger.
    fn rc(&mut self, core: &mut SimCore, chid: u32, info: RcInfo) {
        let Some(tsg) = self.channels.get(&chid).map(|c| c.desc.tsg) else {
            return;
        };
        core.trace(format!(
            "host: RC on channel {chid}: {} ({})",
            info.code, info.reason
        ));
        let now = core.clock.nanos();
        // The kernel RM writes it (krcErrorSetNotifier); whether GSP-RM writes the notifier
        // of a client that allocated its channels over RPC is not public (its RC path is
        // closed, and the kernel RM learns of RCs by event): unknown there.
        let write_notifier =
            !(self.report_rcs && core.unknowns.hard("gsp.rc.no_error_notifier_write"));
        for c in self.channels.values_mut().filter(|c| c.desc.tsg == tsg) {
            c.state = ChannelState::Faulted(info.clone());
            c.cursor = None;
            if let Some(n) = c.desc.notifier.filter(|_| write_notifier) {
                let note = NvNotification {
                    timeStamp: [(now >> 32) as u32, now as u32],
                    info32: info.code,
                    info16: info.engine_type as u16,
                    status: 0,
                };
                // Everything but status first, then status (RM's order).
                let _ = n.write(core, 0, &note.as_bytes()[..14]);
                let _ = n.write(core, 14, &0xffffu16.to_le_bytes());
            }
        }
        if self.report_rcs {
            self.notices.push(RmNotice::Rc {
                chid,
                code: info.code,
                engine_type: info.engine_type,
                mmu_fault: info.mmu_fault.map(|f| (f.faultAddress, f.faultType)),
                reason: info.reason.clone(),
            });
        }
        if let Some(c) = self.channels.get_mut(&chid) {
            if let Some(f) = info.mmu_fault {
                c.errors.mmu_fault_valid = true;
                if c.errors.mmu_faults.len() >= 4 {
                    c.errors.mmu_faults.remove(0);
                }
                c.errors.mmu_faults.push(f);
            }
            if let Some((sm, regs)) = info.sm_error {
                c.errors.sm_errors.insert(sm, regs);
            }
        }
    }
}

/// The doorbell register as a BAR0 engine.
pub struct DoorbellEngine {
    fifo: Arc<Mutex<Fifo>>,
}

impl std::fmt::Debug for DoorbellEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorbellEngine")
    }
}

impl DoorbellEngine {
    /// The doorbell of `fifo`.
    pub fn new(fifo: Arc<Mutex<Fifo>>) -> Self {
        DoorbellEngine { fifo }
    }
}

/// Locks a fifo, surviving a poisoned lock.
pub fn lock(fifo: &Mutex<Fifo>) -> MutexGuard<'_, Fifo> {
    fifo.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs every runnable channel of `gpu` (whose RM is `rm`) until none makes progress; whether
/// any did. Must not be called while `gpu` is locked (from inside an engine).
pub fn run_channels(gpu: &SimGpu, rm: &Mutex<RmModel>) -> bool {
    let fifo = rm.lock().unwrap_or_else(|e| e.into_inner()).fifo().clone();
    gpu.with_core(|core| lock(&fifo).run_all_progress(core))
}

/// What the simulated GPU does when the CPU did something its engines would notice on their
/// own (the host retrying an acquire, a channel switched in): re-run channels, of one GPU or
/// of every GPU of a system.
#[derive(Clone)]
pub struct Kick(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Kick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kick")
    }
}

impl MmioEngine for DoorbellEngine {
    fn name(&self) -> &'static str {
        "doorbell"
    }

    /// A function-level reset takes every channel off the host (RM must allocate them anew).
    fn reset(&mut self, _core: &mut SimCore) {
        lock(&self.fifo).clear();
    }

    fn claims(&self, offset: u32) -> bool {
        offset == DOORBELL_OFFSET
    }

    fn read(&mut self, _core: &mut SimCore, _offset: u32) -> u32 {
        0
    }

    fn write(&mut self, core: &mut SimCore, _offset: u32, value: u32) {
        lock(&self.fifo).doorbell(core, value);
    }
}
