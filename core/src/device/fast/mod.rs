//! The latency machinery: what takes a launch below what the plain path costs, each piece kept
//! because the H200 showed it earns its place (`nvbare bench --device nvidia:0`, 2026-12-02,
//! three alternating rounds in one VM; launch + sync median / back-to-back per launch, µs):
//!
//! | | launch + sync | back-to-back |
//! |---|---|---|
//! | everything on (the defaults) | 2.92-3.07 | 0.49-0.52 |
//! | no write-ahead (`ahead.rs`) | 3.53-3.94 | 0.60-1.05 |
//! | no early QMD prefetch (`ahead.rs`, [`launch_form`]) | 3.22-3.28 | 0.49 |
//! | no automatic deferral, so no chaining (`flusher.rs`, `chain.rs`) | 2.89-3.05 | 0.89-1.43 |
//!
//! (Building a launch's QMD belongs to the plain path: `device/qmd.rs`.)
//!
//! This module is the boundary. It depends on the plain path (`ops.rs`, `launch.rs`,
//! `chan.rs`); the plain path reaches it only through [`Fast`], its one field of the device's
//! state, and the functions below, which `launch.rs` calls at named points: [`launch_defer`]
//! as a launch starts, [`launch_repeat`] before anything is built, [`launch_built`] once it is,
//! [`launch_form`] and [`launched`] around an ordinary submission. The device handle calls
//! [`before_wait`] and [`end_call`], and its graph calls (`device/graph.rs`) reach
//! `graph.rs`: a fixed sequence of launches whose commands are written once and launched as
//! one chained submission. All of it works on one stream at a time, the one the
//! program launched on last ([`Fast::stream`]): a launch on another stream first publishes
//! what is held on the old one and moves the machinery over, so a program that launches on one
//! stream (any of them) gets all of it, and one that alternates gets correct, plainer launches.
//! While it is elsewhere, launches take the plain path. What the plain path must honour in
//! between is data it owns: a channel's `own_wait` (what follows a chain waits for its end), `unwritten` (a
//! chain's last QMD, written before anything is published) and the arena's spare allocation
//! (a region written ahead, given back when the arena needs room).

mod ahead;
mod chain;
mod flusher;
mod graph;

pub use flusher::{AUTO_BATCH_WAIT, AUTO_DEFER_LIMIT, AUTO_MIN_BATCH, FlushPoll, Flusher};
pub(super) use flusher::{AutoState, Shared};
pub use graph::{GraphNode, MAX_GRAPH_NODES, RawGraph, WRITTEN_BEHIND_WORK};

use super::backend::Backend;
use super::launch::{Built, CallInputs, Head, LaunchForm};
use super::module::KernelInfo;
use super::ops::{Inner, chan_index};
use super::{ChannelKind, DeviceError, DeviceInfo, DeviceOptions, DeviceStats};
use crate::channel::qmd::QmdError;
use crate::chip::QmdVersion;

/// Command memory at the end of the compute channel's that the arena leaves to this module
/// (the prefetch pushbuffers of launches written ahead).
pub(super) const COMMAND_RESERVE: u64 = ahead::PREFETCH_AREA;

/// The latency machinery's state: one field of the device's ([`Inner::fast`]).
pub(super) struct Fast {
    /// The stream whose compute channel all of this drives (stream 0 until a program
    /// launches elsewhere).
    pub(super) stream: usize,
    /// The last launch, which write-ahead and chaining repeat.
    last: ahead::LastLaunch,
    ahead: ahead::AheadState,
    chain: chain::ChainState,
    auto: flusher::Auto,
    /// Graphs, written once and launched as one chained submission (`graph.rs`).
    graphs: graph::Graphs,
    /// Launches submitted with their QMD prefetched before their `WAIT_FOR_IDLE`.
    early_prefetches: u64,
    /// Times it moved to another stream.
    moves: u64,
}

impl Fast {
    /// The state for a device whose QMDs have layout `qmd`.
    pub(super) fn new(qmd: QmdVersion) -> Result<Self, QmdError> {
        Ok(Fast {
            stream: 0,
            last: Default::default(),
            ahead: Default::default(),
            chain: chain::ChainState::new(qmd)?,
            auto: Default::default(),
            graphs: graph::Graphs::new(qmd)?,
            early_prefetches: 0,
            moves: 0,
        })
    }

    /// Forgets everything that refers to the channels (they were re-created).
    pub(super) fn reset(&mut self) {
        self.ahead.reset();
        self.chain.reset();
    }
}

impl<B: Backend> Inner<B> {
    /// The compute channel the latency machinery drives: [`Fast::stream`]'s.
    pub(super) fn fast_ci(&self) -> usize {
        chan_index(self.fast.stream, ChannelKind::Compute)
    }

    /// Moves the latency machinery to the current stream: what it holds on the old one is
    /// published (it is that stream's work, in its order), and what it wrote ahead or chained
    /// there is forgotten (the old channel's plain path copes with both, as it does between
    /// launches). The new channel's prefetch slots count as in use until everything
    /// submitted on it so far is done.
    fn follow_stream(&mut self) -> Result<(), DeviceError> {
        if self.cur == self.fast.stream {
            return Ok(());
        }
        self.kick(self.fast_ci())?;
        self.fast.stream = self.cur;
        let submitted = self.chans[self.fast_ci()].submitted;
        self.fast.ahead.moved(submitted);
        self.fast.chain.reset();
        self.fast.auto.due_since = None;
        self.fast.moves += 1;
        Ok(())
    }
}

/// As a launch starts: moves the machinery to the launch's stream, and says how many
/// submissions may wait for the doorbell during it (`Tuning::deferred_submits`, or what
/// automatic deferral gives it).
pub(super) fn launch_defer<B: Backend>(
    i: &mut Inner<B>,
    opts: &DeviceOptions,
) -> Result<u32, DeviceError> {
    i.follow_stream()?;
    Ok(i.launch_defer(opts))
}

/// Before the launch is built: makes it without building it if the call repeats the call
/// before (through the region written ahead, or chained) or changes only argument values
/// (through the region). Returns whether it did.
pub(super) fn launch_repeat<B: Backend>(
    i: &mut Inner<B>,
    info: &DeviceInfo,
    opts: &DeviceOptions,
    k: &KernelInfo,
    call: &CallInputs<'_>,
) -> Result<bool, DeviceError> {
    if i.cur != i.fast.stream {
        return Ok(false);
    }
    let value = i.chans[i.fast_ci()].submitted + 1;
    let done = i.launch_repeated_call(info, opts, call, value)?
        || i.launch_changed_args(opts, call, k, value)?;
    if done {
        i.fast.ahead.launched_since_wait = true;
    }
    Ok(done)
}

/// Once launch `l` is built: makes it through the region written ahead (if it holds the same
/// launch, or one with other parameters) or chained to the launch before. Returns whether it
/// did.
pub(super) fn launch_built<B: Backend>(
    i: &mut Inner<B>,
    info: &DeviceInfo,
    opts: &DeviceOptions,
    l: &Built<'_>,
    call: &CallInputs<'_>,
) -> Result<bool, DeviceError> {
    if i.cur != i.fast.stream {
        return Ok(false);
    }
    let value = i.chans[i.fast_ci()].submitted + 1;
    if i.launch_written_ahead(opts, l, value)? {
        i.fast.ahead.launched_since_wait = true;
    } else if i.launch_chained(info, opts, l, value, None)? {
        i.launched_built(opts, l);
    } else {
        return Ok(false);
    }
    i.note_call(opts, call);
    Ok(true)
}

/// The form of an ordinary launch's pushbuffer: a chain's head while launches may be chained
/// to it, else with its QMD prefetched before `WAIT_FOR_IDLE` when it follows a launch not
/// seen complete (no wait since; reading the timeline would cost a cache miss), so the fetch
/// overlaps the grid before. A launch after a wait keeps the single action: behind an idle
/// engine the split costs ~0.2 µs.
pub(super) fn launch_form<B: Backend>(i: &Inner<B>, opts: &DeviceOptions) -> LaunchForm {
    if i.cur != i.fast.stream {
        return LaunchForm::default();
    }
    let chain_head = chain::chaining(opts, i.defer);
    let c = &i.chans[i.fast_ci()];
    LaunchForm {
        prefetch: opts.tuning.early_qmd_prefetch && !chain_head && c.submitted > c.seen,
        chain_head,
    }
}

/// After ordinary launch `l` was submitted in `form` (`head`: as a possible chain head).
pub(super) fn launched<B: Backend>(
    i: &mut Inner<B>,
    opts: &DeviceOptions,
    l: &Built<'_>,
    form: LaunchForm,
    head: Option<Head>,
    call: &CallInputs<'_>,
) {
    if i.cur != i.fast.stream {
        return;
    }
    if let Some(h) = head {
        i.chain_head(opts, h);
    }
    i.fast.early_prefetches += u64::from(form.prefetch);
    i.launched_built(opts, l);
    i.note_call(opts, call);
}

/// Before a wait (`Device::synchronize`, `Device::wait_for`): writes the next launch ahead
/// while the GPU runs the one waited for.
pub(super) fn before_wait<B: Backend>(
    i: &mut Inner<B>,
    info: &DeviceInfo,
    opts: &DeviceOptions,
) -> Result<(), DeviceError> {
    if i.cur != i.fast.stream {
        return Ok(());
    }
    i.write_ahead(info, opts)
}

/// As any call into the device ends (`launch`: the program's launch call): publishes held
/// launches that are due and tells the flusher whether work is held.
pub(super) fn end_call<B: Backend>(
    i: &mut Inner<B>,
    opts: &DeviceOptions,
    launch: bool,
    shared: &AutoState,
) {
    i.end_call(opts, launch, shared);
}

/// Whether launches can be held for a flusher now.
pub(super) fn holds<B: Backend>(i: &Inner<B>) -> bool {
    i.fast.auto.holds
}

/// The counters of [`DeviceStats`] this module keeps.
pub(super) fn stats<B: Backend>(i: &Inner<B>, s: &mut DeviceStats) {
    let f = &i.fast;
    s.written_ahead = f.ahead.used;
    s.repeated = f.ahead.repeated;
    s.argument_only = f.ahead.args_only;
    s.early_prefetched = f.early_prefetches + f.ahead.prefetched;
    s.chained = f.chain.chained;
    s.shared_banks = f.chain.shared_banks;
    s.flusher_published = f.auto.flusher_published;
    s.written_ahead_now = f.ahead.is_written();
    s.fast_stream_moves = f.moves;
    s.graph_launches = f.graphs.launched;
    s.graph_launches_written = f.graphs.written;
    s.graph_waits = f.graphs.waited;
}
