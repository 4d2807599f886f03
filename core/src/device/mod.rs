//! The device layer: the generation-independent runtime every backend shares.
//!
//! [`Device::open`] brings a GPU up the way CUDA and tinygrad do (tinygrad-nv.md §1.3, the H200
//! run in rm-abi.md §0): device and subdevice objects, chip identification, the class list
//! (newest compute / GPFIFO / copy / usermode class), GR facts, the usermode doorbell, a
//! performance boost, a VA space, a channel group with one subcontext and two channels
//! (compute with the compute object on subchannel 1, copy with the copy object on
//! subchannel 4), a `GT200_DEBUGGER` for fault reports, work-submit tokens, and scheduling.
//!
//! Then, with an API shaped like cudarc's:
//!
//! ```text
//! let dev = Device::open(backend, DeviceOptions::default())?;
//! let buf = dev.htod_copy(&data)?;                 // DeviceBuffer<u32>
//! let module = dev.load_cubin(&cubin_bytes)?;      // (nvbare_gsp_firmware::program::LoadCubin)
//! let add1 = module.function("add1")?;
//! dev.launch(&add1, LaunchConfig::for_num_elems(n), &[buf.arg(), n.into()])?;
//! let out: Vec<u32> = dev.dtoh_copy(&buf)?;       // waits for the kernel, then copies
//! ```
//!
//! Several devices in one process reach each other through a [`PeerLink`]
//! ([`Device::enable_peer_access`]): peer mappings ([`PeerLink::map`]), copies from one GPU's
//! memory to another's on a copy engine ([`PeerLink::copy`], [`Device::dtod_peer_copy`]),
//! cross-device waits ([`Device::record_event`], [`PeerLink::wait_event`],
//! [`PeerLink::semaphore`]); without a direct path only an explicit
//! [`PeerMode::AllowHostStaging`] copies through host memory (`docs/multi-gpu.md`).
//!
//! Work is ordered like one CUDA stream: every submission on one channel first waits (a host
//! `SEM_EXECUTE` acquire) for everything submitted before on the other. Each channel has a
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

mod ahead;
mod armed;
pub use armed::ARMED_TIMESLICE;
mod backend;
pub mod baremetal;
mod chain;
mod chan;
mod copy;
mod error;
mod flusher;
mod memory;
mod module;
mod ops;
mod peer;
mod probe;
mod program;
mod template;

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
pub use chain::ChainStats;
pub use copy::{COPY_KERNEL_NAME, CopyPath};
pub use error::{ChannelKind, DeviceError, FaultReport, MmuFaultRecord, Recovery, SmErrorRecord};
pub use flusher::{AUTO_BATCH_WAIT, AUTO_DEFER_LIMIT, AUTO_MIN_BATCH, FlushPoll, Flusher};
pub use memory::{DeviceBuffer, DeviceRepr};
pub use module::{Arg, Function, KernelInfo, LaunchConfig, Module};
pub use ops::DoorbellRetries;
pub use peer::{Event, PeerBuffer, PeerLink, PeerMode, PeerPath, PeerSemaphore};
pub use probe::SubmitProbe;
pub use program::{ConstBankDesc, KernelDesc, ParamDesc, Program, ProgramError};

pub use crate::channel::gpfifo::DoorbellFence;
use crate::chip::{ChipInfo, Chipset, QmdVersion};
use crate::rm::Handle;
use crate::rm::class::{BLACKWELL_COMPUTE_A, ClassKind, HOPPER_COMPUTE_A, class_kind};

/// [`DeviceOptions::stack_size`]'s default: CUDA's default `cudaLimitStackSize`.
pub const DEFAULT_STACK_SIZE: u32 = 1024;

/// Tunables of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceOptions {
    /// Longest any wait may take before it ends in [`DeviceError::Timeout`].
    pub timeout: Duration,
    /// GPFIFO entries per channel (a power of two).
    pub gpfifo_entries: u32,
    /// Command memory per channel (pushbuffers, QMDs, constant banks).
    pub command_bytes: u64,
    /// Host staging memory for copies (two halves are used alternately; at most 4 GiB).
    pub staging_bytes: u64,
    /// How long a wait spins before it starts polling with delays.
    pub spin: Duration,
    /// Delay between polls after the spin. It bounds how late a long wait sees its release:
    /// `HostClock` spins through delays this short, so a shorter interval costs no more CPU.
    /// On the H200, 10 µs made a 1 GiB device-to-device copy (~0.5 ms) about 1 % slower than
    /// 1 µs (docs/benchmarks.md, "Waits that see the release late; the shared-memory
    /// carveout").
    pub poll_interval: Duration,
    /// How long a wait may see no progress (neither channel's timeline nor `GPGet` moved)
    /// before the doorbell of each channel with unfinished work is rung again; the interval
    /// doubles while nothing moves, up to 10 ms. A full ring rings again this often while it
    /// waits for room. The host lost doorbells on the H200 when another process created its
    /// channels, and the wait then timed out ([`crate::channel::gpfifo`] module docs); ringing
    /// again is harmless when the doorbell was not lost. `Duration::MAX` never rings again.
    pub doorbell_retry: Duration,
    /// Ask RM to boost clocks (`NV2080_CTRL_CMD_PERF_BOOST`); failures are ignored.
    pub perf_boost: bool,
    /// How the CPU's stores are ordered before `GPPut` and the doorbell (default: a store
    /// barrier before each, `sfence` on x86; see [`DoorbellFence`]: one barrier ran stale
    /// commands on the H200 while another process shared the GPU).
    pub doorbell_fence: DoorbellFence,
    /// Submissions that may wait in a channel's ring before its doorbell is rung. 0 (the
    /// default) rings it for every launch and copy, so queued work starts without further
    /// calls, as in CUDA. With N > 0 the doorbell is rung once N + 1 submissions are queued, at
    /// every wait (synchronize, copies to the host, freeing buffers) and at
    /// [`Device::flush`]: work queued since then does not start until one of those happens,
    /// so a program that waits for a kernel by other means (polling memory) must flush first.
    pub deferred_submits: u32,
    /// Automatic deferral (`device/flusher.rs`): with [`DeviceOptions::deferred_submits`] 0
    /// and a [`Flusher`] attached ([`Device::flusher`]; `nvbare_pci_host::flusher::spawn`
    /// attaches one, and the CLI does through `spawn_if_parallel` where the process may use a
    /// second CPU), a launch made while the GPU has not
    /// finished the work published before it is held, so the launches after it are chained to
    /// it ([`DeviceOptions::chain_launches`]), and the program's next call or, once it stops
    /// launching, the flusher's thread rings its doorbell when the GPU has run that work
    /// (see [`DeviceOptions::auto_defer_min_batch`]): back-to-back launches cost the
    /// GPU what a CUDA graph's kernels do (0.49-0.53 µs per launch on the H200 by VM instead of
    /// 0.83-1.30), and held work never waits for the program to call again. On by default;
    /// without a flusher it does nothing.
    pub auto_defer: bool,
    /// Automatic deferral: while the program keeps launching, a batch of held launches is
    /// published once the GPU has finished the work before it only if it holds at least this
    /// many; any other call, and the flusher once the program stops launching, publish it
    /// whatever its size. Why: a program slower to launch than the GPU is to run would
    /// otherwise publish a handful of launches at a time, and each batch's head costs an
    /// ordinary launch (~1 µs of CPU more than a chained one): on the H200, back-to-back
    /// launches with 1 µs of CPU work between them took 1.58-1.61 µs each with 1 (74 %
    /// chained) and 1.33 with 64 (98 %; explicit deferral of 511: 1.22-1.24). The price: with
    /// the CPU the bound, the GPU waits for the batch to fill (at most
    /// [`DeviceOptions::auto_defer_batch_wait`]), so a synchronize at the end of a burst can
    /// find up to this many launches not yet run (64 empty kernels: ~31 µs of GPU).
    /// 1 publishes as soon as the GPU caught up. Default [`AUTO_MIN_BATCH`].
    pub auto_defer_min_batch: u32,
    /// Automatic deferral: a launch call publishes a smaller batch than
    /// [`DeviceOptions::auto_defer_min_batch`] once calls have seen it due (the GPU done with
    /// the work before it) for this long: it bounds how long the GPU waits for a batch to
    /// fill when the program launches slowly but steadily (the flusher publishes at once
    /// only once the program stops launching). Default [`AUTO_BATCH_WAIT`].
    pub auto_defer_batch_wait: Duration,
    /// With [`DeviceOptions::deferred_submits`] > 0 (or automatic deferral): a launch that
    /// follows a launch still waiting for its doorbell is scheduled by that launch's QMD when its grid completes
    /// (dependent QMD, as a CUDA graph's kernels are) instead of by methods of its own
    /// (`device/chain.rs`). Stream order is kept; back-to-back launches then cost the GPU
    /// what a graph's kernels do rather than a `WAIT_FOR_IDLE` each. On by default; off for
    /// measurements. Ignored without deferral and with [`DeviceOptions::armed_launches`].
    pub chain_launches: bool,
    /// Launches find their QMD already fetched into the scheduler's cache instead of fetching
    /// it after their `WAIT_FOR_IDLE`: a launch that follows a launch not yet seen complete
    /// (back to back, no wait between) sends `PCAS_ACTION` `PREFETCH` before its wait and
    /// `PREFETCH_SCHEDULE` after it
    /// ([`crate::channel::pushbuf::PushBuffer::compute_launch_prefetched`]); and a wait that
    /// writes the next launch ahead ([`DeviceOptions::write_ahead`]) also publishes a prefetch
    /// of that launch's QMD, which the GPU runs while the grid waited for finishes, so the
    /// launch, if it repeats the last one, launches the cached copy (one that changes its
    /// arguments launches from memory, as without this). On the H200: 0.85 µs of GPU per
    /// back-to-back empty kernel instead of 1.06, and launch + sync ~0.25 µs shorter
    /// (docs/benchmarks.md). A launch after a wait without a region written ahead keeps the
    /// single action (behind an idle engine the split costs ~0.2 µs). On by default; off for
    /// measurements. Chained and armed launches have their own forms and ignore it.
    pub early_qmd_prefetch: bool,
    /// `MEMBAR_TYPE` of the QMD release semaphore that completes a launch: `NONE` (false, the
    /// default, as tinygrad leaves it) or `FE_SYSMEMBAR` (true). Every CTA already ends with a
    /// system-scope membar (`CWD_MEMBAR_TYPE` = `L1_SYSMEMBAR`), so a kernel's stores are
    /// visible system-wide before the grid completes and the release is written; the extra
    /// front-end membar cost 0.7 µs per launch + sync on the H200 (docs/benchmarks.md).
    pub release_sysmembar: bool,
    /// Before work is published (`GPPut`, or an armed launch's flag), order the stores and read
    /// one word of command memory back through its CPU mapping, so every earlier write through
    /// BAR1 has reached the GPU (UVM reads BAR1 back before publishing for this reason). Off by
    /// default: on the H200 it made a launch + sync 8.2 µs instead of 3.7, and what it cured
    /// (stale launches while another process shared the GPU) its store barrier alone cures,
    /// which [`DoorbellFence::StoreTwice`] now does (docs/device.md). For experiments.
    pub bar1_readback: bool,
    /// [`Device::dtod_copy`] between two device-memory buffers uses the copy kernel (when one
    /// is installed, [`Device::install_copy_kernel`]) from this many bytes up; smaller copies
    /// use the copy engine.
    pub kernel_copy_min_bytes: u64,
    /// Threads per CTA of the copy kernel.
    pub copy_kernel_block: u32,
    /// CTAs per SM of the copy kernel: its grid is at most this many times the SM count (each
    /// thread loops over the vectors beyond that).
    pub copy_kernel_ctas_per_sm: u32,
    /// QMD fields set after the QMD is built, by their name in NVIDIA's QMD header
    /// (`CWD_MEMBAR_TYPE`, `INVALIDATE_TEXTURE_DATA_CACHE`, ...), for measuring what a field
    /// costs (`nvbare bench --qmd FIELD=VALUE`). An unknown field or a value too wide for it
    /// fails the launch. Values that break the memory model are the caller's responsibility:
    /// leave this empty outside experiments.
    pub qmd_overrides: [Option<(&'static str, u64)>; 4],
    /// Pre-armed launches: after a launch, [`Device::synchronize`] and [`Device::wait_for`]
    /// (and a stream of launches, in batches) give the compute channel submissions that stop
    /// at a host semaphore acquire and then launch a QMD in command memory; a launch writes
    /// that QMD (unless arming already wrote the same) and the flag the acquire waits for,
    /// with no pushbuffer, GP entry or doorbell (`device/armed.rs`, docs/device.md). Any other
    /// compute submission first consumes them with launches that do nothing. Needs the copy
    /// kernel ([`Device::install_copy_kernel`]). Off by default:
    /// while armed, the channel group keeps the GPU's runlist until its timeslice ends
    /// ([`DeviceOptions::armed_timeslice`]), also while the process idles, so other
    /// processes' work waits for it (on the H200 another process's launch + sync took ~52 µs
    /// beside an idle armed process at 50 µs, ~4 µs at 2 µs, ~1 ms with RM's default
    /// timeslice, instead of ~3 µs). For a GPU the process has to itself; there it took
    /// 0.5-0.9 µs off a launch + sync round trip.
    pub armed_launches: bool,
    /// Write the next launch ahead: after a launch, [`Device::synchronize`] and
    /// [`Device::wait_for`] first write a repeat of it (constant bank 0, QMD, pushbuffer) into
    /// the compute channel's next command memory (usually while the GPU still runs the kernel
    /// waited for), so that a following launch of the same kernel and shape only writes the
    /// parameter words that changed and its GP entry (`device/ahead.rs`). None of it runs before that launch (with
    /// [`DeviceOptions::early_qmd_prefetch`] the wait publishes a prefetch of its QMD). On by
    /// default; off, every launch writes its commands in full (for measurements). Ignored
    /// with [`DeviceOptions::armed_launches`], which write ahead themselves.
    pub write_ahead: bool,
    /// Stack per thread, in bytes, every launch provides: CUDA's `cudaLimitStackSize`, with the
    /// same default (1 KiB). A kernel gets the larger of this and the local memory its compiler
    /// reports, or its frame plus this when the compiler could not size its stack (recursion;
    /// ptxas warns "Stack size ... cannot be statically determined"). Not only for those:
    /// ptxas 13.0 reports no stack at all for some recursive kernels, which CUDA runs within
    /// this limit (seen on the H200). Deeper recursion overflows it and the kernel faults. The
    /// device's local memory is sized for it when it opens (0.44 GiB of the H200's VRAM at
    /// 1 KiB, against 0.16 GiB without a stack limit); a value no thread can have fails the open.
    pub stack_size: u32,
    /// The channel group's timeslice with [`DeviceOptions::armed_launches`]
    /// (`NVA06C_CTRL_CMD_SET_TIMESLICE`, whole µs, at least 1): how long another process's
    /// work waits for an armed channel group that has nothing to run. Shorter is kinder to an
    /// idle neighbour (H200: 52 µs per launch of theirs at 50 µs, 4 µs at 2 µs) but shrinks
    /// this process's share of the GPU while both are busy (docs/device.md). Default
    /// [`ARMED_TIMESLICE`].
    pub armed_timeslice: Duration,
}

impl DeviceOptions {
    /// Whether a device opened with these options holds launches for an attached [`Flusher`]
    /// ([`DeviceOptions::auto_defer`]): automatic deferral on, no explicit deferral (the program
    /// rings its doorbells itself then), chaining on (holding is for chaining) and no armed
    /// launches (which are never chained). Without it a flusher has nothing to do.
    pub fn holds_launches(&self) -> bool {
        self.auto_defer && self.deferred_submits == 0 && self.chain_launches && !self.armed_launches
    }
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            timeout: Duration::from_secs(10),
            gpfifo_entries: 1024,
            command_bytes: 1 << 20,
            staging_bytes: 4 << 20,
            spin: Duration::from_micros(20),
            poll_interval: Duration::from_micros(1),
            doorbell_retry: crate::channel::gpfifo::DOORBELL_RETRY,
            perf_boost: true,
            doorbell_fence: DoorbellFence::StoreTwice,
            deferred_submits: 0,
            auto_defer: true,
            auto_defer_min_batch: AUTO_MIN_BATCH,
            auto_defer_batch_wait: AUTO_BATCH_WAIT,
            chain_launches: true,
            early_qmd_prefetch: true,
            release_sysmembar: false,
            bar1_readback: false,
            kernel_copy_min_bytes: 256 << 10,
            // The best of the shapes measured on the H200 (docs/benchmarks.md): 256-thread
            // CTAs, enough of them that a 1 GiB copy needs no grid-stride loop (4130-4141 GB/s,
            // CUDA 4128 in the same session; 256 CTAs per SM 4053, one looping wave 3843).
            copy_kernel_block: 256,
            copy_kernel_ctas_per_sm: 2048,
            qmd_overrides: [None; 4],
            armed_launches: false,
            write_ahead: true,
            armed_timeslice: ARMED_TIMESLICE,
            stack_size: DEFAULT_STACK_SIZE,
        }
    }
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
    shared: Arc<flusher::Shared<B>>,
    /// This thread is inside a call (re-entrant use is an error, not a deadlock). Also keeps
    /// the device `!Sync`: it is single-threaded.
    borrowed: Cell<bool>,
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
        if let Some(i) = self.guard.as_mut()
            && i.auto_holds
        {
            // Any call publishes held work once it is due, so a program that polls the device
            // does not depend on the flusher (which leaves held work to a program that keeps
            // launching); a launch call only a batch of `auto_defer_min_batch`, since more
            // launches are coming.
            if let Err(e) = i.publish_if_due(&self.dev.options, self.launch) {
                log::debug!("publishing held launches: {e}");
            }
            let held = i.auto_held();
            if held {
                // The flusher may publish what this thread wrote from another CPU, whose
                // store barrier does not drain this CPU's write-combining buffers: drain them
                // before the lock is let go.
                crate::hal::Mmio::store_barrier(&i.usermode);
            }
            self.dev.shared.auto.0.set_pending(held);
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
    } else {
        QmdVersion::V03_00
    }
}

impl<B: Backend> Device<B> {
    /// Brings the GPU behind `backend` up. See the [module docs](self) for the sequence.
    pub fn open(backend: B, options: DeviceOptions) -> Result<Self, DeviceError> {
        let (inner, info) = ops::Inner::open(backend, &options)?;
        Ok(Device {
            id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
            info,
            options,
            shared: flusher::Shared::new(inner),
            borrowed: Cell::new(false),
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
        let guard = self.shared.inner.0.lock();
        if guard.is_none() {
            self.borrowed.set(false);
            return Err(DeviceError::Dead("the device is closing".to_string()));
        }
        Ok(InnerGuard {
            guard,
            dev: self,
            launch: false,
        })
    }

    /// Attaches the [`Flusher`] that publishes launches held by automatic deferral
    /// ([`DeviceOptions::auto_defer`]) from another thread; at most one per device. The core
    /// has no threads: poll it from one (`nvbare_pci_host::flusher::spawn` does).
    pub fn flusher(&self) -> Result<Flusher<B>, DeviceError> {
        if self.borrowed.get() {
            return Err(DeviceError::Dead(
                "re-entrant use of the device".to_string(),
            ));
        }
        Flusher::attach(&self.shared, self.options)
    }

    /// Whether automatic deferral can hold launches now: [`DeviceOptions::auto_defer`] on,
    /// no explicit deferral, and a [`Flusher`] attached (without one, every launch rings its
    /// doorbell). False once the device is closed or dead.
    pub fn auto_deferral_active(&self) -> bool {
        self.inner().is_ok_and(|i| i.auto_holds)
    }

    /// Waits until everything submitted so far has finished.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        let mut i = self.inner()?;
        i.before_wait(&self.info, &self.options)?;
        i.synchronize(&self.info, &self.options)
    }

    /// Whether the compute channel holds a pre-armed launch now
    /// ([`DeviceOptions::armed_launches`]).
    pub fn is_armed(&self) -> bool {
        self.inner().is_ok_and(|i| i.arm.is_armed())
    }

    /// Launches since open that used a pre-armed submission
    /// ([`DeviceOptions::armed_launches`]; the no-op launches that disarm are not counted).
    pub fn armed_launches(&self) -> u64 {
        self.inner().map_or(0, |i| i.arm.fired())
    }

    /// Launches since open that went through command memory written ahead during a wait
    /// ([`DeviceOptions::write_ahead`]).
    pub fn written_ahead_launches(&self) -> u64 {
        self.inner().map_or(0, |i| i.ahead.used())
    }

    /// Launches whose call repeated the previous launch's (same kernel, shape and arguments)
    /// and so skipped building the launch altogether: through command memory written ahead
    /// (a part of [`Device::written_ahead_launches`]) or, with
    /// [`DeviceOptions::armed_launches`], a pre-armed submission that arming had written it
    /// into (a part of [`Device::armed_launches`]).
    pub fn repeated_launches(&self) -> u64 {
        self.inner().map_or(0, |i| i.ahead.repeated())
    }

    /// Launches whose call differed from the previous launch's only in argument values (same
    /// kernel, shape, number and sizes of arguments) and so wrote only the changed parameter
    /// words into command memory written ahead, building nothing (a part of
    /// [`Device::written_ahead_launches`]).
    pub fn argument_only_launches(&self) -> u64 {
        self.inner().map_or(0, |i| i.ahead.args_only())
    }

    /// Launches since open whose QMD was prefetched early ([`DeviceOptions::early_qmd_prefetch`]):
    /// those that followed a launch not yet seen complete (prefetch before their
    /// `WAIT_FOR_IDLE`) and those through command memory written ahead whose QMD the wait
    /// before had prefetched.
    pub fn early_prefetched_launches(&self) -> u64 {
        self.inner()
            .map_or(0, |i| i.early_prefetches + i.ahead.prefetched())
    }

    /// What launch chaining did since open ([`DeviceOptions::chain_launches`]).
    pub fn chain_stats(&self) -> ChainStats {
        self.inner()
            .map_or(ChainStats::default(), |i| i.chain.stats)
    }

    /// Whether a launch is written ahead now ([`DeviceOptions::write_ahead`]; for tests).
    pub fn is_written_ahead(&self) -> bool {
        self.inner().is_ok_and(|i| i.ahead.is_written())
    }

    /// Doorbells rung again since open by waits that saw no progress for
    /// [`DeviceOptions::doorbell_retry`]. [`DoorbellRetries::unfetched`] counts those that
    /// found published work unfetched (a doorbell the GPU lost, as on the H200 whenever
    /// another process created its channels, or another process holding the GPU); the rest
    /// were rung while a long copy or kernel ran.
    pub fn doorbell_retries(&self) -> DoorbellRetries {
        self.inner()
            .map_or(DoorbellRetries::default(), |i| i.doorbell_retries)
    }

    /// Rings the doorbells for work queued without one (only with
    /// [`DeviceOptions::deferred_submits`] > 0; otherwise nothing is ever queued). Returns
    /// without waiting.
    pub fn flush(&self) -> Result<(), DeviceError> {
        self.inner()?.flush(&self.options)
    }

    /// Runs `f` with the backend (tests use it to reach the simulator behind it).
    pub fn with_backend<R>(&self, f: impl FnOnce(&mut B) -> R) -> Result<R, DeviceError> {
        Ok(f(&mut self.inner()?.backend))
    }

    /// The RM handles of the channels (compute, copy), for tests and tools.
    pub fn channel_handles(&self) -> Result<[Handle; 2], DeviceError> {
        let i = self.inner()?;
        Ok([i.chans[0].handle, i.chans[1].handle])
    }

    /// Timeline values submitted and reached on the compute and copy channels. A program that
    /// polls this is waiting for its work: launches held by automatic deferral
    /// ([`DeviceOptions::auto_defer`]) are published first.
    pub fn timelines(&self) -> Result<[(u64, u64); 2], DeviceError> {
        let mut i = self.inner()?;
        i.publish_held(&self.options)?;
        let mut out = [(0, 0); 2];
        for (o, c) in out.iter_mut().zip(i.chans.iter()) {
            *o = (c.submitted, i.sem.read_u64(c.sem_offset)?);
        }
        Ok(out)
    }

    /// Submits a wait on the compute channel for a 64-bit `value` at GPU VA `addr` (a host
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

    /// Waits until `channel`'s timeline reaches `value` (from [`Device::submit_raw`]).
    pub fn wait_for(&self, channel: ChannelKind, value: u64) -> Result<(), DeviceError> {
        let mut i = self.inner()?;
        i.before_wait(&self.info, &self.options)?;
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
