//! Chained launches: with the doorbell deferred ([`DeviceOptions::deferred_submits`] > 0)
//! and [`DeviceOptions::chain_launches`] on, a launch that follows another launch still
//! waiting for its doorbell is not given methods of its own: the QMD before it is set to
//! schedule it when its grid completes (dependent QMD 0, `QMD_SCHEDULE` + prefetch), as a CUDA
//! graph's kernels are (docs/hw/2026-11-30-cuda-stream-pushbuffer.txt).
//!
//! Why: a launch written with `WAIT_FOR_IDLE` before it (stream order, `compute_launch`) starts
//! only after the channel saw the engine go idle, ~1.06 µs per grid back to back on the H200
//! (0.85 with its QMD prefetched before the wait, [`DeviceOptions::early_qmd_prefetch`]);
//! chained, the GPU takes 0.60 µs per grid, 0.48 with the inner QMDs' membar below
//! (docs/benchmarks.md, "Chained launches"). Chaining needs the next launch written before the
//! one before can complete, which only deferral guarantees: the GPU has seen none of the chain
//! until the doorbell.
//!
//! The chain's head is an ordinary launch whose pushbuffer also invalidates the scheduler's
//! QMD cache (`INVALIDATE_SKED_CACHES`): the chained QMDs sit at command-memory addresses that
//! held older QMDs, and only the head is launched through a PCAS action that invalidates its
//! own address. The head is written with a `NO_OPERATION` in that place, which the first
//! launch chained to it overwrites with the invalidate (before the doorbell): a head nothing
//! chains to (a lone launch held by automatic deferral) does not pay it: two launches then a
//! polled timeline took 2.89-3.28 µs on the H200 against 3.32-3.71 with it (`bench`).
//!
//! Each chained launch writes constant bank 0 (unless the launch repeats the call
//! before and can use the bank already written for the chain) and the QMD before it, made
//! inner (`QmdPatch::make_inner`): it now schedules this one, releases nothing and ends its
//! CTAs with a GPU-scope membar, as a graph's inner kernels do. Its own QMD waits in host
//! memory ([`super::chan::Chan::unwritten`]) until the next launch chains or anything on the
//! channel is published, so each QMD is written once, whole, in its final form; only the head,
//! written with its methods, is patched (the words that change). Patching each QMD a launch
//! after writing it cost the H200's CPU ~0.1 µs more per launch (a few words into a line
//! written long before).
//! Only the chain's last QMD releases the timeline, with its value, which covers the launches
//! before it: the timeline jumps to the end of the chain, waits for any of its values end when
//! the chain does, and command memory of the whole chain is reused only after it (which is what
//! lets a chain share one constant bank). The last QMD keeps the system-scope CTA-end membar, so
//! everything the chain stored is visible to the host before the release. No GP entry: the chain
//! counts toward the deferral limit, and the doorbell is rung once head and chain reach N + 1
//! submissions (or at any wait, [`crate::device::Device::flush`] or another channel's need).
//!
//! Whatever follows a chain of two or more on the compute channel starts with a host
//! semaphore acquire of the chain's last value (unless the timeline already reached it): the
//! grids of a chain are scheduled by the engine itself, and whether `WAIT_FOR_IDLE` waits for a
//! dependent QMD not yet scheduled is not documented. CUDA orders a stream the same way, with
//! acquires on the kernel before's release. Launches written ahead are not written while a
//! chain may run (their pushbuffer has only the wait).
//!
//! Not chained: the first launch after a shader-cache invalidate (module load), a launch that
//! must wait for the copy channel, armed launches ([`DeviceOptions::armed_launches`]).

use alloc::boxed::Box;

use super::ahead::{Launched, differing_runs};
use super::backend::{Backend, GpuMemory};
use super::chan::ARENA_ALIGN;
use super::ops::{COMPUTE, Inner};
use super::{DeviceError, DeviceInfo, DeviceOptions};
use crate::channel::pushbuf::PushBuffer;
use crate::channel::qmd::Qmd;

/// The newest launch of a chain (or a head that may get one). Its QMD, as written (the last of
/// the chain: releasing, no dependent), is [`ChainState::qmd`].
#[derive(Debug, Clone, Copy)]
struct ChainTail {
    /// Command-memory offset of its QMD.
    qmd_off: u64,
    /// The timeline value it releases.
    value: u64,
    /// Launches in the chain, head included.
    len: u32,
    /// GPU VA of its constant bank 0, and [`super::ahead::LastLaunch::seq`] of the remembered
    /// launch whose bytes it holds (`None`: not known to be the remembered launch's).
    cb: (u64, Option<u64>),
    /// Command-memory offset of the head's `NO_OPERATION` that becomes the sked-cache
    /// invalidate when the first launch chains ([`PushBuffer::sked_invalidate_slot`]).
    sked_off: u64,
}

/// Counts of what chaining did (for tests and `nvbare bench`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChainStats {
    /// Launches scheduled by the QMD before them instead of methods of their own.
    pub chained: u64,
    /// Chained launches that used the constant bank 0 of the launch before them.
    pub shared_banks: u64,
    /// Submissions that began with an acquire of a chain's last value.
    pub acquires: u64,
    /// Batches of held launches the flusher published (automatic deferral,
    /// [`super::Flusher`]); the others were published by the launching thread.
    pub flusher_published: u64,
}

/// The device's chain state.
#[derive(Debug, Default)]
pub(crate) struct ChainState {
    tail: Option<ChainTail>,
    /// The head's QMD as written (the first chained launch patches it). On the heap,
    /// allocated once: it keeps the device's state (built on the stack when a device opens)
    /// small.
    qmd: Option<Box<Qmd>>,
    /// A QMD box to reuse for the next chained launch (the chained tail's QMD itself waits in
    /// [`super::chan::Chan::unwritten`]).
    spare: Option<Box<Qmd>>,
    pub(super) stats: ChainStats,
}

impl ChainState {
    /// Forgets the chain (the channels were re-created).
    pub(super) fn reset(&mut self) {
        self.tail = None;
    }

    /// Keeps `q` as the head's QMD.
    fn set_qmd(&mut self, q: &Qmd) {
        match self.qmd.as_mut() {
            Some(b) => (**b).clone_from(q),
            None => self.qmd = Some(Box::new(q.clone())),
        }
    }
}

/// Whether launches are chained under `opts` with `defer` submissions allowed to wait for
/// the doorbell ([`DeviceOptions::deferred_submits`], or the launch's automatic deferral,
/// `device/flusher.rs`).
pub(super) fn chaining(opts: &DeviceOptions, defer: u32) -> bool {
    opts.chain_launches && defer > 0 && !opts.armed_launches
}

/// Whether `opts` set the CTA-end membar itself (an experiment's `--qmd CWD_MEMBAR_TYPE=..`),
/// which inner QMDs then keep.
fn membar_overridden(opts: &DeviceOptions) -> bool {
    opts.qmd_overrides
        .iter()
        .flatten()
        .any(|(f, _)| *f == "CWD_MEMBAR_TYPE")
}

impl<B: Backend> Inner<B> {
    /// Whether a launch with timeline value `value` can be chained to the tail: the tail is
    /// the compute channel's last submission and its GP entry (the head's) still waits for the
    /// doorbell, so the GPU has read none of the chain.
    fn chain_open(&self, value: u64) -> bool {
        let c = &self.chans[COMPUTE];
        self.chain
            .tail
            .as_ref()
            .is_some_and(|t| t.value + 1 == value && c.submitted + 1 == value)
            && c.fifo.unpublished() > 0
    }

    /// Launches queued on the compute channel behind its doorbell: its unpublished
    /// submissions, counting the launches chained to the last of them.
    pub(super) fn queued_launches(&self) -> u32 {
        let c = &self.chans[COMPUTE];
        let unpublished = c.fifo.unpublished();
        if unpublished == 0 {
            return 0;
        }
        let chained = self
            .chain
            .tail
            .as_ref()
            .filter(|t| t.value == c.submitted)
            .map_or(0, |t| t.len - 1);
        unpublished + chained
    }

    /// The last value of a chain of two or more launches that may still be running (the
    /// timeline has not reached it): what the compute channel's next submission must acquire
    /// first.
    pub(super) fn chain_pending(&self) -> Option<u64> {
        let c = &self.chans[COMPUTE];
        let t = self.chain.tail.as_ref().filter(|t| t.len > 1)?;
        let done = c.seen >= t.value
            || self
                .sem
                .read_u64(c.sem_offset)
                .is_ok_and(|reached| reached >= t.value);
        (!done).then_some(t.value)
    }

    /// A compute submission other than a chained launch was made (`acquired`: it began with
    /// the acquire [`Inner::chain_pending`] asked for). Ends the chain.
    pub(super) fn chain_end(&mut self, acquired: bool) {
        self.chain.tail = None;
        if acquired {
            self.chain.stats.acquires += 1;
        }
    }

    /// After an ordinary launch with timeline value `value` whose QMD `qmd` went to
    /// `qmd_off` and its constant bank 0 to `cb_va`: it heads a chain if chaining is on and
    /// its doorbell is deferred.
    pub(super) fn chain_head(
        &mut self,
        opts: &DeviceOptions,
        qmd_off: u64,
        cb_va: u64,
        qmd: &Qmd,
        value: u64,
        sked_off: u64,
    ) {
        if !chaining(opts, self.defer) || self.chans[COMPUTE].fifo.unpublished() == 0 {
            self.chain.tail = None;
            return;
        }
        self.chain.set_qmd(qmd);
        self.chain.tail = Some(ChainTail {
            qmd_off,
            value,
            len: 1,
            cb: (cb_va, None),
            sked_off,
        });
    }

    /// The launch just made was remembered for write-ahead ([`Inner::launched_ordinary`]): if
    /// it is the chain's tail, its constant bank 0 holds the bytes of the remembered launch.
    pub(super) fn chain_remembered(&mut self) {
        let submitted = self.chans[COMPUTE].submitted;
        if let Some(t) = self.chain.tail.as_mut()
            && t.value == submitted
        {
            t.cb.1 = Some(self.last.seq);
        }
    }

    /// `tail`'s QMD in its final form: the head's as written, or a chained tail's, which is not
    /// written yet.
    fn tail_qmd(&self, tail: &ChainTail) -> Option<&Qmd> {
        if tail.len == 1 {
            self.chain.qmd.as_deref()
        } else {
            self.chans[COMPUTE]
                .unwritten
                .as_ref()
                .filter(|(off, _)| *off == tail.qmd_off)
                .map(|(_, q)| &**q)
        }
    }

    /// Chains a launch that repeats the remembered one (the caller checked that the call
    /// repeats the call that made it): its image is chained as it is, without building.
    pub(super) fn launch_chained_repeat(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        value: u64,
    ) -> Result<bool, DeviceError> {
        if !chaining(opts, self.defer) || !self.chain_open(value) {
            return Ok(false);
        }
        // Taken out for the writing (put back below), not cloned: no allocation.
        let Some(img) = self.last.image.take() else {
            return Ok(false);
        };
        let seq = self.last.seq;
        let r = self.launch_chained(info, opts, &img.launched(), value, Some(seq));
        self.last.image = Some(img);
        r
    }

    /// Chains launch `l` (description normalized), releasing timeline value `value`, to the
    /// tail, if the chain is open, nothing on the copy channel must be waited for and command
    /// memory has room without waiting. `repeat`: `l` is the remembered launch, of this
    /// [`super::ahead::LastLaunch::seq`]. Returns whether it chained.
    pub(super) fn launch_chained(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        l: &Launched<'_>,
        value: u64,
        repeat: Option<u64>,
    ) -> Result<bool, DeviceError> {
        if !chaining(opts, self.defer)
            || self.caches_dirty
            || !self.chain_open(value)
            || !self.other_done(COMPUTE)
        {
            return Ok(false);
        }
        let Some(tail) = self.chain.tail else {
            return Ok(false);
        };
        let head = tail.len == 1;
        if self.tail_qmd(&tail).is_none() {
            return Ok(false);
        }
        // The tail's bank holds this launch's bytes: use it (the chain's command memory is
        // reused only after its last QMD releases).
        let shared = repeat.is_some() && tail.cb.1 == repeat;
        let cb_size = if shared { 0 } else { u64::from(l.cb_size) };
        let qmd_size = (info.qmd.size() as u64).next_multiple_of(ARENA_ALIGN);
        let n = cb_size + qmd_size;
        // Never waits here: without room the launch takes the ordinary path (which waits, then
        // heads a new chain).
        let off = match self.arena_alloc_now(COMPUTE, n, value) {
            Ok(Some(off)) => off,
            r => return r.map(|_| false),
        };
        let cmds_va = self.chans[COMPUTE].cmds.gpu_va();
        let cb_va = if shared { tail.cb.0 } else { cmds_va + off };
        let qmd_off = off + cb_size;
        let r = (|| -> Result<Box<Qmd>, DeviceError> {
            let spare = if shared {
                self.chain.spare.take()
            } else {
                None
            };
            let tail_qmd = self
                .tail_qmd(&tail)
                .ok_or_else(|| DeviceError::Dead("the chain's tail QMD".into()))?;
            let mut inner = tail_qmd.clone();
            let next = if shared {
                // The same launch with the same bank: the tail's QMD with this release.
                let mut q = match spare {
                    Some(mut b) => {
                        (*b).clone_from(tail_qmd);
                        b
                    }
                    None => Box::new(tail_qmd.clone()),
                };
                self.qmd_patch.set_payload(&mut q, value)?;
                q
            } else {
                Box::new(self.region_qmd(info, opts, l, cb_va, value)?)
            };
            self.qmd_patch
                .make_inner(&mut inner, cmds_va + qmd_off, membar_overridden(opts))?;
            let c = &self.chans[COMPUTE];
            if head {
                // Written with the head's methods: only its words that change. First (a
                // write to a line written long before costs the CPU more behind a burst of
                // others); the GPU reads none of this before the doorbell, so the order is
                // free. The head's methods now invalidate the sked caches: this launch's QMD
                // sits at a reused address.
                let before = self.chain.qmd.as_deref().map_or(&[][..], |q| q.as_bytes());
                for (a, b) in differing_runs(before, inner.as_bytes()) {
                    let bytes = inner.as_bytes().get(a..b).unwrap_or(&[]);
                    c.cmds.write(tail.qmd_off + a as u64, bytes)?;
                }
                c.cmds
                    .write_u32(tail.sked_off, PushBuffer::sked_invalidate_word()?)?;
            } else {
                // Not written yet: once, whole, in its final form.
                c.cmds.write(tail.qmd_off, inner.as_bytes())?;
            }
            if !shared {
                c.cmds.write(off, l.cb)?;
            }
            Ok(next)
        })();
        let next = match r {
            Ok(q) => q,
            Err(e) => {
                // The tail stays what it was (it may still have to be acquired after); a
                // partly written patch is not read before the doorbell, and an error here
                // means the mapping is gone.
                self.chans[COMPUTE].arena.cancel_last();
                return Err(e);
            }
        };
        // This launch's QMD waits for the next launch, or for the doorbell.
        if let Some((_, old)) = self.chans[COMPUTE].unwritten.replace((qmd_off, next)) {
            self.chain.spare = Some(old);
        }
        let len = tail.len + 1;
        self.chain.tail = Some(ChainTail {
            qmd_off,
            value,
            len,
            cb: (cb_va, repeat),
            sked_off: tail.sked_off,
        });
        self.chans[COMPUTE].submitted = value;
        self.chain.stats.chained += 1;
        if shared {
            self.chain.stats.shared_banks += 1;
        }
        // The deferral limit counts the chain's launches as submissions.
        if self.queued_launches() > self.defer {
            self.kick(opts, COMPUTE)?;
        }
        Ok(true)
    }
}
