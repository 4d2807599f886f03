//! The device layer: the generation-independent runtime every backend shares.
//!
//! [`Device::open`] brings a GPU up the way CUDA and tinygrad do (tinygrad-nv.md §1.3, the H200
//! run in rm-abi.md §0): device and subdevice objects, chip identification, the class list
//! (newest compute / GPFIFO / copy / usermode class), GR facts, the usermode doorbell, a
//! performance boost, a VA space, a channel group with one subcontext and two channels per
//! stream ([`DeviceOptions::streams`]; compute with the compute object on subchannel 1, copy
//! with the copy object on subchannel 4), a `GT200_DEBUGGER` for fault reports, work-submit tokens, and scheduling.
//!
//! Then, with an API shaped like cudarc's (here on the simulated GH100; a program on real
//! hardware gets its backend from `nvbare_pci_host` or, simpler, opens through the `nvbare`
//! crate):
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
//! use nvbare_gsp_firmware::program::LoadCubin; // cubins: the parser lives in gsp-firmware
//!
//! let backend = nvbare_sim::backend::SimBackend::new(nvbare_sim::models::GH100, true)?;
//! let dev = Device::open(backend, DeviceOptions::default())?;
//! let data: Vec<u32> = (0..1024).collect();
//! let n = data.len() as u32;
//! let buf = dev.htod_copy(&data)?; // DeviceBuffer<u32>
//! # let cubin_bytes = nvbare_sim::compute::kernels::FIXTURES.iter()
//! #     .find(|(name, _)| *name == "kernels_sm90_cuda13").map(|(_, b)| *b).unwrap();
//! let module = dev.load_cubin(cubin_bytes)?;
//! let add1 = module.function("add1")?;
//! dev.launch(&add1, LaunchConfig::for_num_elems(n), &[buf.arg(), n.into()])?;
//! let out: Vec<u32> = dev.dtoh_copy(&buf)?; // waits for the kernel, then copies
//! assert!(out.iter().zip(&data).all(|(o, d)| *o == d + 1));
//!
//! // Another stream, ordered after the default stream's work by an event (on the GPU).
//! let ev = dev.record_event()?;
//! dev.with_stream(1, |d| -> Result<(), nvbare_core::device::DeviceError> {
//!     d.wait_event(&ev)?;
//!     d.launch(&add1, LaunchConfig::for_num_elems(n), &[buf.arg(), n.into()])?;
//!     d.synchronize_stream()
//! })??;
//! assert_eq!(dev.dtoh_copy(&buf)?[0], 2);
//! # Ok(())
//! # }
//! ```
//!
//! Several devices in one process reach each other through a [`PeerLink`]
//! ([`Device::enable_peer_access`]): peer mappings ([`PeerLink::map`]), copies from one GPU's
//! memory to another's on a copy engine ([`PeerLink::copy`], [`Device::dtod_peer_copy`]),
//! cross-device waits ([`Device::record_event`], [`PeerLink::wait_event`],
//! [`PeerLink::semaphore`]); without a direct path only an explicit
//! [`PeerMode::AllowHostStaging`] copies through host memory (`docs/multi-gpu.md`).
//!
//! Work on a stream is ordered like a CUDA stream: every submission on one of its channels
//! first waits (a host `SEM_EXECUTE` acquire) for everything submitted before on the other.
//! Streams are ordered against each other only by events ([`Device::wait_event`]); their
//! kernels do not overlap (each launch's `WAIT_FOR_IDLE` waits for the shared compute
//! context), their copies can. Each channel has a
//! 64-bit timeline semaphore, released by the QMD's release semaphore (compute) or a
//! copy-engine semaphore release (copy). Waits spin briefly, then poll with the backend's
//! clock, check the channels' error notifiers, and end in a typed error after the timeout.
//!
//! A fault or a timeout is reported with what RM knows (error notifier code, MMU faults and SM
//! error states from the debugger, backend events) and the channel group is then freed and
//! re-created: buffers and modules live in the VA space, not in the channels, so they survive
//! and the device stays usable. Abandoned work counts as complete.
//!
//! The module needs `alloc` (feature `device`): modules keep their kernel tables, copies and
//! launches use per-device scratch that is allocated once. Programs come in through the
//! [`Program`] trait; cubins implement it in `nvbare-gsp-firmware` (which depends on this crate,
//! so the parser cannot be called from here). The launch path itself allocates
//! nothing: pushbuffers are built on the stack, QMDs are values, constant bank 0 is assembled
//! in a reused buffer and written into a ring arena.

mod backend;
pub mod baremetal;
mod chan;
mod copy;
mod error;
mod fast;
mod graph;
mod launch;
mod memory;
mod module;
mod open;
mod ops;
mod peer;
mod program;
mod qmd;
mod slots;
mod stamp;
mod transfer;
mod va;
mod wait;

use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;

pub use backend::{
    Backend, BackendError, GpuMemory, Location, MemoryRequest, PeerMapping, PeerPathInfo,
    PhysRange, Purpose, RmEvent, RmObjects,
};
pub use copy::{COPY_KERNEL_NAME, CopyPath};
pub use error::{ChannelKind, DeviceError, FaultReport, MmuFaultRecord, Recovery, SmErrorRecord};
pub use fast::{
    AUTO_BATCH_WAIT, AUTO_DEFER_LIMIT, AUTO_MIN_BATCH, FlushPoll, Flusher, GraphNode,
    MAX_GRAPH_NODES, RawGraph, WRITTEN_BEHIND_WORK,
};
pub use launch::LaunchRecord;
pub use memory::{DeviceBuffer, DeviceRepr, RawBuffer};
pub use module::{Arg, Function, GlobalInfo, KernelInfo, LaunchConfig, Module, RawModule};
pub use open::MAX_STREAMS;
pub use peer::{Event, PeerBuffer, PeerLink, PeerMode, PeerPath, PeerSemaphore};
pub use program::{Program, ProgramError, ProgramGlobal};
pub use stamp::EVENT_STAMP_SLOTS;
pub use va::{VA_SLICE_MIN, VA_WINDOW_ALIGN, VaWindow, VaWindowError};

pub use crate::channel::gpfifo::DoorbellFence;
use crate::chip::{ChipInfo, Chipset, QmdVersion};
pub use crate::kernel::{ConstBank, Kernel, KernelParam, STACK_SIZE_UNKNOWN};
use crate::rm::Handle;
use crate::rm::class::{
    AMPERE_COMPUTE_A, BLACKWELL_COMPUTE_A, ClassKind, HOPPER_COMPUTE_A, class_kind,
};

/// [`DeviceOptions::streams`]'s default: the default stream and three more.
pub const DEFAULT_STREAMS: u32 = 4;

/// [`DeviceOptions::stack_size`]'s default: CUDA's default `cudaLimitStackSize`.
pub const DEFAULT_STACK_SIZE: u32 = 1024;

/// What a program chooses when it opens a device. Everything else has a default measured on
/// the H200 and no reason to change outside benchmarks (`DeviceOptions::tuning`, hidden).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceOptions {
    /// Longest any wait may take before it ends in [`DeviceError::Timeout`] (and the channels
    /// are re-created): longer than the longest kernel or copy the program waits for.
    pub timeout: Duration,
    /// Streams (1 to [`MAX_STREAMS`]), each a compute and a copy channel of the device's
    /// channel group, all created as the device opens: the channels of a scheduled channel
    /// group are all there when RM schedules it (what CUDA and tinygrad do; whether a channel
    /// added later is scheduled is not documented). Stream 0 is the default stream; calls go
    /// to another through [`Device::with_stream`].
    pub streams: u32,
    /// GPFIFO entries per channel (a power of two): submissions that can be queued before a
    /// launch waits for the GPU to fetch.
    pub gpfifo_entries: u32,
    /// Command memory per channel (pushbuffers, QMDs, constant banks): launches that can be in
    /// flight before a launch waits for an old one to finish.
    pub command_bytes: u64,
    /// Host staging memory for copies from and to slices (two halves are used alternately; at
    /// most 4 GiB): larger halves mean fewer copy-engine transfers for large copies.
    pub staging_bytes: u64,
    /// Stack per thread, in bytes, every launch provides: CUDA's `cudaLimitStackSize`, with the
    /// same default (1 KiB). A kernel gets the larger of this and the local memory its compiler
    /// reports, or its frame plus this when the compiler could not size its stack (recursion;
    /// ptxas warns "Stack size ... cannot be statically determined"). Not only for those:
    /// ptxas 13.0 reports no stack at all for some recursive kernels, which CUDA runs within
    /// this limit (seen on the H200). Deeper recursion overflows it and the kernel faults. The
    /// device's local memory is sized for it when it opens (0.44 GiB of the H200's VRAM at
    /// 1 KiB, against 0.16 GiB without a stack limit); a value no thread can have fails the open.
    pub stack_size: u32,
    /// Ask RM to boost clocks (`NV2080_CTRL_CMD_PERF_BOOST`); failures are ignored. Off for a
    /// GPU whose clocks another party manages.
    pub perf_boost: bool,
    /// How long a wait spins before it starts polling with delays: most waits on hardware end
    /// within microseconds. On a platform whose clock sleeps in its delays, this trades CPU
    /// for latency.
    pub spin: Duration,
    /// Delay between polls after the spin. It bounds how late a long wait sees its release:
    /// `HostClock` spins through delays this short, so a shorter interval costs no more CPU
    /// there. On the H200, 10 µs made a 1 GiB device-to-device copy (~0.5 ms) about 1 % slower
    /// than 1 µs (docs/performance.md, "Device-to-device copies: the copy kernel, its
    /// carveout, the wait's poll").
    pub poll_interval: Duration,
    /// The GPU virtual addresses the device's memory gets (default [`VaWindow::DEFAULT`]).
    /// The backend allocates them, so the code that opens the backend applies it: nvbare's
    /// `open_device_with` opens every backend with this window; [`Device::open`] on a backend
    /// opened by hand does not change the backend's window. Two devices of one process hand
    /// out the same addresses unless each gets its own window (a part of the default from
    /// [`VaWindow::slice`], as nvbare's libcuda does): give them disjoint windows when
    /// addresses of both are kept in one table.
    pub va_window: VaWindow,
    /// The latency machinery's switches and the copy kernel's shape, for benchmarks and tests
    /// that measure each piece on and off. Not a stable API.
    #[doc(hidden)]
    pub tuning: Tuning,
}

/// Switches and sizes the benchmark (`nvbare bench`) and the tests turn to measure what each
/// piece of the launch path earns; the defaults are what the H200 showed best
/// (docs/performance.md, "What each mechanism buys"; docs/device.md). Not a stable API: fields
/// come and go with the measurements.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Write the next launch ahead: after a launch, [`Device::synchronize`] and
    /// [`Device::wait_for`] first write a repeat of it (constant bank 0, QMD, pushbuffer, GP
    /// entry) into the compute channel's next command memory, so that a following launch of the
    /// same kernel and shape only writes the parameter words that changed and publishes it
    /// (`device/fast/ahead.rs`). Off, every launch writes its commands in full.
    pub write_ahead: bool,
    /// Launches find their QMD already fetched: a launch that follows a launch not yet seen
    /// complete prefetches it before its `WAIT_FOR_IDLE`, and a wait that writes the next
    /// launch ahead also publishes a prefetch of that launch's QMD. Chained launches have their
    /// own form and ignore it.
    pub early_qmd_prefetch: bool,
    /// With deferred doorbells (`deferred_submits` > 0, or automatic deferral): a launch that
    /// follows a launch still waiting for its doorbell is scheduled by that launch's QMD
    /// (dependent QMD, as a CUDA graph's kernels are) instead of by methods of its own
    /// (`device/fast/chain.rs`).
    pub chain_launches: bool,
    /// Automatic deferral (`device/fast/flusher.rs`): with `deferred_submits` 0 and a
    /// [`Flusher`] attached ([`Device::flusher`]), a launch made while the GPU has not
    /// finished the work published before it is held, so the launches after it are chained to
    /// it, and published once the GPU has run that work (by the program's next call or, once it
    /// stops launching, the flusher). Without a flusher it does nothing.
    pub auto_defer: bool,
    /// Automatic deferral: while the program keeps launching, a held batch is published once
    /// due only if it holds at least this many launches (each batch's head costs an ordinary
    /// launch); any other call, and the flusher once the program stops launching, publish it
    /// whatever its size. Default [`AUTO_MIN_BATCH`].
    pub auto_defer_min_batch: u32,
    /// Automatic deferral: a launch call publishes a smaller batch than `auto_defer_min_batch`
    /// once calls have seen it due for this long. Default [`AUTO_BATCH_WAIT`].
    pub auto_defer_batch_wait: Duration,
    /// Submissions that may wait in a channel's ring before its doorbell is rung. 0 (the
    /// default) rings it for every launch and copy, so queued work starts without further
    /// calls, as in CUDA. With N > 0 the doorbell is rung once N + 1 submissions are queued, at
    /// every wait and at [`Device::flush`]: a program that waits for a kernel by other means
    /// (polling memory) must flush first.
    pub deferred_submits: u32,
    /// How the CPU's stores are ordered before `GPPut` and the doorbell (default: a store
    /// barrier before each; one barrier ran stale commands on the H200 while another process
    /// shared the GPU, docs/device.md).
    pub doorbell_fence: DoorbellFence,
    /// How long a wait may see no progress before the doorbell of each channel with unfinished
    /// work is rung again (doubling while nothing moves, up to 10 ms): the H200 lost doorbells
    /// when another process created its channels. `Duration::MAX` never rings again.
    pub doorbell_retry: Duration,
    /// [`Device::dtod_copy`] between two device-memory buffers uses the copy kernel (when one
    /// is installed) from this many bytes up; smaller copies use the copy engine.
    pub kernel_copy_min_bytes: u64,
    /// Threads per CTA of the copy kernel.
    pub copy_kernel_block: u32,
    /// CTAs per SM of the copy kernel: its grid is at most this many times the SM count (each
    /// thread loops over the vectors beyond that).
    pub copy_kernel_ctas_per_sm: u32,
}

impl Tuning {
    /// Whether a device opened with these holds launches for an attached [`Flusher`]:
    /// automatic deferral on, no explicit deferral (the program rings its doorbells itself
    /// then) and chaining on (holding is for chaining). Without it a flusher has nothing to do.
    pub fn holds_launches(&self) -> bool {
        self.auto_defer && self.deferred_submits == 0 && self.chain_launches
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            write_ahead: true,
            early_qmd_prefetch: true,
            chain_launches: true,
            auto_defer: true,
            auto_defer_min_batch: AUTO_MIN_BATCH,
            auto_defer_batch_wait: AUTO_BATCH_WAIT,
            deferred_submits: 0,
            doorbell_fence: DoorbellFence::StoreTwice,
            doorbell_retry: crate::channel::gpfifo::DOORBELL_RETRY,
            kernel_copy_min_bytes: 256 << 10,
            // The best of the shapes measured on the H200 (docs/performance.md, "Device-to-device
            // copies: the copy kernel, its carveout, the wait's poll"): 256-thread
            // CTAs, enough of them that a 1 GiB copy needs no grid-stride loop.
            copy_kernel_block: 256,
            copy_kernel_ctas_per_sm: 2048,
        }
    }
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            timeout: Duration::from_secs(10),
            streams: DEFAULT_STREAMS,
            gpfifo_entries: 1024,
            command_bytes: 1 << 20,
            staging_bytes: 4 << 20,
            stack_size: DEFAULT_STACK_SIZE,
            perf_boost: true,
            spin: Duration::from_micros(20),
            poll_interval: Duration::from_micros(1),
            va_window: VaWindow::DEFAULT,
            tuning: Tuning::default(),
        }
    }
}

/// What the device's launch path and waits did since it opened ([`Device::stats`]): for
/// benchmarks and tests that check which path launches took.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceStats {
    /// Launches through command memory a wait wrote ahead.
    pub written_ahead: u64,
    /// Launches whose call repeated the previous launch's (same kernel, shape and arguments)
    /// and so built nothing: through command memory written ahead, or chained to the launch
    /// before.
    pub repeated: u64,
    /// Launches whose call differed from the previous one only in argument values and so wrote
    /// only the changed parameter words into command memory written ahead (a part of
    /// `written_ahead`).
    pub argument_only: u64,
    /// Launches whose QMD was prefetched early: behind a launch not yet seen complete, or by
    /// the wait that wrote them ahead.
    pub early_prefetched: u64,
    /// Launches scheduled by the QMD before them instead of methods of their own (chained).
    pub chained: u64,
    /// Chained launches that used the constant bank 0 of the launch before them.
    pub shared_banks: u64,
    /// Submissions that began with an acquire of a chain's last value.
    pub chain_acquires: u64,
    /// Batches of held launches the flusher published (automatic deferral); the others were
    /// published by the launching thread.
    pub flusher_published: u64,
    /// Doorbells rung again by waits that saw no progress for the retry interval.
    pub doorbell_retries: u64,
    /// Of those, the ones rung for a channel whose published entries the host had not all
    /// fetched (USERD `GPGet` behind `GPPut`): a lost doorbell (as on the H200 whenever another
    /// process created its channels), or another process holding the GPU. The rest were rung
    /// while a long copy or kernel ran, as a precaution.
    pub doorbell_retries_unfetched: u64,
    /// Whether a launch is written ahead now.
    pub written_ahead_now: bool,
    /// Times the latency machinery moved to another stream (a launch on a stream other than
    /// the one launched on before).
    pub fast_stream_moves: u64,
    /// Graph launches ([`Device::launch_graph`]).
    pub graph_launches: u64,
    /// Of those, the ones made as one submission of commands written once (the others were
    /// launched launch by launch: a graph of one launch, or a stream still at work).
    pub graph_launches_written: u64,
    /// Of those, the ones that waited on the CPU for the launch two before of the same graph
    /// (its commands' copy was still in use).
    pub graph_waits: u64,
}

/// GR facts RM reported (`NV2080_CTRL_CMD_GR_GET_INFO_V2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrInfo {
    /// Raw `SM_VERSION` (0x900 for sm_90).
    pub sm_version: u32,
    /// `MAX_WARPS_PER_SM`.
    pub max_warps_per_sm: u32,
    /// `LITTER_NUM_GPCS`.
    pub gpcs: u32,
    /// `LITTER_NUM_TPC_PER_GPC`.
    pub tpc_per_gpc: u32,
    /// `LITTER_NUM_SM_PER_TPC`.
    pub sm_per_tpc: u32,
    /// `SHADER_PIPE_SUB_COUNT`: enabled TPCs.
    pub tpcs: u32,
}

impl GrInfo {
    /// Enabled SMs.
    pub fn sm_count(&self) -> u32 {
        self.tpcs * self.sm_per_tpc
    }
}

/// The classes the device uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classes {
    /// Compute class.
    pub compute: u32,
    /// GPFIFO (host) class.
    pub gpfifo: u32,
    /// Copy-engine class.
    pub copy: u32,
    /// Usermode class.
    pub usermode: u32,
}

/// What a device is.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// The backend, e.g. `sim:gh100`.
    pub backend: String,
    /// The chip.
    pub chip: &'static ChipInfo,
    /// Shader model, `major * 10 + minor` (90 for sm_90).
    pub sm: u32,
    /// GR facts.
    pub gr: GrInfo,
    /// Classes in use.
    pub classes: Classes,
    /// QMD layout.
    pub qmd: QmdVersion,
    /// Every class RM offers.
    pub class_list: Vec<u32>,
    /// RM's build version, if it reported one.
    pub driver_version: Option<String>,
    /// Work-submit tokens of the compute and copy channels.
    pub tokens: [u32; 2],
}

/// A GPU, opened.
pub struct Device<B: Backend> {
    id: u32,
    info: DeviceInfo,
    options: DeviceOptions,
    /// The device's state (`None` once closed), shared with a [`Flusher`] if one is attached.
    shared: Arc<fast::Shared<B>>,
    /// This thread is inside a call (re-entrant use is an error, not a deadlock). Also keeps
    /// the device `!Sync`: it is single-threaded.
    borrowed: Cell<bool>,
    /// The stream calls go to ([`Device::with_stream`]).
    stream: Cell<usize>,
}

/// The device's state, locked for one call ([`Device::inner`]).
pub(crate) struct InnerGuard<'a, B: Backend> {
    guard: spin::MutexGuard<'a, Option<ops::Inner<B>>>,
    dev: &'a Device<B>,
    /// The call is the program's launch ([`InnerGuard::for_launch`]).
    launch: bool,
}

impl<B: Backend> core::ops::Deref for InnerGuard<'_, B> {
    type Target = ops::Inner<B>;
    fn deref(&self) -> &Self::Target {
        match self.guard.as_ref() {
            Some(i) => i,
            // `Device::inner` hands out guards only over `Some`, and only closing (which takes
            // `&mut Device`) sets `None`.
            None => unreachable!("device state checked when locked"),
        }
    }
}

impl<B: Backend> core::ops::DerefMut for InnerGuard<'_, B> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self.guard.as_mut() {
            Some(i) => i,
            None => unreachable!("device state checked when locked"),
        }
    }
}

impl<B: Backend> InnerGuard<'_, B> {
    /// Marks the call as the program's launch (`Device::launch`, not the copy kernel's) and
    /// counts it for the flusher, which leaves held work to a program that keeps launching.
    pub(crate) fn for_launch(mut self) -> Self {
        self.launch = true;
        self.dev.shared.auto.0.count_launch();
        self
    }
}

impl<B: Backend> Drop for InnerGuard<'_, B> {
    fn drop(&mut self) {
        if let Some(i) = self.guard.as_mut() {
            // The flusher and the latency machinery work on their own stream (`Fast::stream`).
            i.cur = 0;
            fast::end_call(i, &self.dev.options, self.launch, &self.dev.shared.auto.0);
        }
        self.dev.borrowed.set(false);
    }
}

impl<B: Backend> core::fmt::Debug for Device<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.id)
            .field("backend", &self.info.backend)
            .field("chip", &self.info.chip.name)
            .finish_non_exhaustive()
    }
}

static NEXT_DEVICE_ID: AtomicU32 = AtomicU32::new(1);

/// Picks the numerically highest class of `kind` (UVM's `findDeviceClasses` rule).
pub fn newest_class(list: &[u32], kind: ClassKind) -> Option<u32> {
    list.iter()
        .copied()
        .filter(|&c| class_kind(c) == Some(kind))
        .max()
}

/// The QMD layout a compute class uses (Mesa `nak/qmd.rs`).
pub fn qmd_version_for(compute_class: u32) -> QmdVersion {
    if compute_class >= BLACKWELL_COMPUTE_A {
        QmdVersion::V05_00
    } else if compute_class >= HOPPER_COMPUTE_A {
        QmdVersion::V04_00
    } else if compute_class >= AMPERE_COMPUTE_A {
        QmdVersion::V03_00
    } else {
        // Volta and Turing (Mesa NVK: QMD V02_02 below AMPERE_COMPUTE_A).
        QmdVersion::V02_02
    }
}

impl<B: Backend> Device<B> {
    /// Brings the GPU behind `backend` up. See the [module docs](self) for the sequence.
    pub fn open(backend: B, mut options: DeviceOptions) -> Result<Self, DeviceError> {
        let (inner, info) = ops::Inner::open(backend, &options)?;
        // Turing's compute class cannot prefetch a QMD ahead of its launch (no
        // SEND_SIGNALING_PCAS2_B: `ChipInfo::has_pcas2`).
        if !info.chip.has_pcas2() {
            options.tuning.early_qmd_prefetch = false;
        }
        Ok(Device {
            id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
            info,
            options,
            shared: fast::Shared::new(inner),
            borrowed: Cell::new(false),
            stream: Cell::new(0),
        })
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The options it was opened with.
    pub fn options(&self) -> &DeviceOptions {
        &self.options
    }

    /// A process-unique id (buffers and modules remember it).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The chip.
    pub fn chipset(&self) -> Chipset {
        self.info.chip.chipset
    }

    pub(crate) fn inner(&self) -> Result<InnerGuard<'_, B>, DeviceError> {
        if self.borrowed.replace(true) {
            return Err(DeviceError::Dead(
                "re-entrant use of the device".to_string(),
            ));
        }
        // Held by a flusher only for a moment (it never waits for the GPU under the lock).
        let mut guard = self.shared.inner.0.lock();
        match guard.as_mut() {
            Some(i) => i.cur = self.stream.get(),
            None => {
                self.borrowed.set(false);
                return Err(DeviceError::Dead("the device is closing".to_string()));
            }
        }
        Ok(InnerGuard {
            guard,
            dev: self,
            launch: false,
        })
    }

    /// Attaches the [`Flusher`] that publishes launches held by automatic deferral (on by
    /// default, docs/device.md) from another thread; at most one per device. The core has no
    /// threads: poll it from one (`nvbare_pci_host::flusher::spawn` does).
    pub fn flusher(&self) -> Result<Flusher<B>, DeviceError> {
        if self.borrowed.get() {
            return Err(DeviceError::Dead(
                "re-entrant use of the device".to_string(),
            ));
        }
        Flusher::attach(&self.shared, self.options)
    }

    /// Whether automatic deferral can hold launches now: on in the options, no explicit
    /// deferral, and a [`Flusher`] attached (without one, every launch rings its doorbell).
    /// False once the device is closed or dead.
    pub fn auto_deferral_active(&self) -> bool {
        self.inner().is_ok_and(|i| fast::holds(&i))
    }

    /// Waits until everything submitted so far, on every stream, has finished.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        let mut i = self.inner()?;
        fast::before_wait(&mut i, &self.info, &self.options)?;
        i.synchronize(&self.info, &self.options)
    }

    /// Streams the device has ([`DeviceOptions::streams`]).
    pub fn streams(&self) -> u32 {
        self.options.streams
    }

    /// Runs `f` with every call on this device going to stream `stream` (0 is the default
    /// stream): copies, launches, events, [`Device::synchronize_stream`]. Work on one stream
    /// runs in the order it was submitted; streams are not ordered against each other except
    /// by events ([`Device::record_event`], [`Device::wait_event`]). Nests; the stream before
    /// is back when `f` returns.
    pub fn with_stream<R>(
        &self,
        stream: u32,
        f: impl FnOnce(&Self) -> R,
    ) -> Result<R, DeviceError> {
        if stream >= self.options.streams {
            return Err(DeviceError::BadRange(alloc::format!(
                "stream {stream} does not exist: the device has {} (DeviceOptions::streams)",
                self.options.streams
            )));
        }
        struct Restore<'a>(&'a Cell<usize>, usize);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.set(self.1);
            }
        }
        let _restore = Restore(&self.stream, self.stream.replace(stream as usize));
        Ok(f(self))
    }

    /// The stream calls go to now ([`Device::with_stream`]).
    pub fn current_stream(&self) -> u32 {
        self.stream.get() as u32
    }

    /// Waits until everything submitted so far on the current stream has finished.
    pub fn synchronize_stream(&self) -> Result<(), DeviceError> {
        let mut i = self.inner()?;
        fast::before_wait(&mut i, &self.info, &self.options)?;
        i.synchronize_stream(&self.info, &self.options)
    }

    /// What the launch path and the waits did since the device opened (all zero once it is
    /// closed or dead).
    pub fn stats(&self) -> DeviceStats {
        let Ok(i) = self.inner() else {
            return DeviceStats::default();
        };
        let mut s = DeviceStats {
            chain_acquires: i.chans.iter().step_by(2).map(|c| c.own_waits).sum(),
            doorbell_retries: i.doorbell_retries.all,
            doorbell_retries_unfetched: i.doorbell_retries.unfetched,
            ..DeviceStats::default()
        };
        fast::stats(&i, &mut s);
        s
    }

    /// Rings the doorbells for work queued without one (only with deferred doorbells, which
    /// benchmarks turn on; launches held by automatic deferral are published without it).
    /// Returns without waiting.
    pub fn flush(&self) -> Result<(), DeviceError> {
        self.inner()?.flush()
    }

    /// Runs `f` with the backend (tests use it to reach the simulator behind it).
    pub fn with_backend<R>(&self, f: impl FnOnce(&mut B) -> R) -> Result<R, DeviceError> {
        Ok(f(&mut self.inner()?.backend))
    }

    /// The RM objects the device layer allocated (or was handed): client, device, subdevice
    /// and VA space, for tools that talk to RM beside it (`nvbare rm`).
    pub fn rm_objects(&self) -> Result<RmObjects, DeviceError> {
        Ok(self.inner()?.objs)
    }

    /// The RM handles of the current stream's channels (compute, copy), for tests and tools.
    pub fn channel_handles(&self) -> Result<[Handle; 2], DeviceError> {
        let i = self.inner()?;
        Ok([i.chans[i.compute_ci()].handle, i.chans[i.copy_ci()].handle])
    }

    /// Timeline values submitted and reached on the current stream's compute and copy channels. A program that
    /// polls this is waiting for its work: launches held by automatic deferral are published
    /// first.
    pub fn timelines(&self) -> Result<[(u64, u64); 2], DeviceError> {
        let mut i = self.inner()?;
        i.publish_held(&self.options)?;
        let mut out = [(0, 0); 2];
        for (o, ci) in out.iter_mut().zip([i.compute_ci(), i.copy_ci()]) {
            let c = &i.chans[ci];
            *o = (c.submitted, i.sem.read_u64(c.sem_offset)?);
        }
        Ok(out)
    }

    /// Submits a wait on the current stream's compute channel for a 64-bit `value` at GPU VA `addr` (a host
    /// `SEM_EXECUTE` `ACQ_CIRC_GEQ`). The channel stops there until the value is reached;
    /// later submissions queue behind it. Used by tests of back-pressure and by tools.
    pub fn submit_wait(&self, addr: u64, value: u64) -> Result<(), DeviceError> {
        self.inner()?
            .submit_raw_acquire(&self.info, &self.options, addr, value)
    }

    /// Submits raw method words on one channel, followed by that channel's timeline release,
    /// and returns the timeline value that marks their completion (for tools that replay
    /// pushbuffers, and tests of the GPU side). The words are not checked: a malformed
    /// pushbuffer is the GPU's (or the simulator's) to reject, which surfaces at the next wait.
    /// At most 1024 words.
    pub fn submit_raw(&self, channel: ChannelKind, words: &[u32]) -> Result<u64, DeviceError> {
        self.inner()?
            .submit_raw(&self.info, &self.options, channel, words)
    }

    /// Waits until the current stream's `channel`'s timeline reaches `value` (from
    /// [`Device::submit_raw`]).
    pub fn wait_for(&self, channel: ChannelKind, value: u64) -> Result<(), DeviceError> {
        let mut i = self.inner()?;
        fast::before_wait(&mut i, &self.info, &self.options)?;
        i.wait_value(&self.info, &self.options, channel, value)
    }

    pub(crate) fn release_slot(&self, slot: usize, generation: u32) {
        if let Ok(mut i) = self.inner() {
            i.release_slot(&self.info, &self.options, slot, generation);
        } else {
            log::warn!("device memory slot {slot} leaked: device busy during drop");
        }
    }
}

impl<B: Backend> Device<B> {
    /// Closes the device (frees everything it created, as dropping it does) and returns the
    /// backend, e.g. to unload a bare-metal GPU and report how that went.
    pub fn close(mut self) -> Result<B, DeviceError> {
        match self.take_inner() {
            Some(i) => Ok(i.close(&self.info, &self.options)),
            None => Err(DeviceError::Dead("the device is closing".to_string())),
        }
    }

    /// Takes the state out (`None` from now on, so a flusher stops) and wakes the flusher.
    fn take_inner(&mut self) -> Option<ops::Inner<B>> {
        let i = self.shared.inner.0.lock().take();
        self.shared.auto.0.wake();
        i
    }
}

impl<B: Backend> Drop for Device<B> {
    fn drop(&mut self) {
        if let Some(i) = self.take_inner() {
            drop(i.close(&self.info, &self.options));
        }
    }
}
