//! Chained launches: with the doorbell deferred (`Tuning::deferred_submits` > 0, or a launch
//! held by automatic deferral, `flusher.rs`) and `Tuning::chain_launches` on, a launch that
//! follows another launch still
//! waiting for its doorbell is not given methods of its own: the QMD before it is set to
//! schedule it when its grid completes (dependent QMD 0, `QMD_SCHEDULE` + prefetch), as a CUDA
//! graph's kernels are (docs/performance.md, "Chained launches": how CUDA does it).
//!
//! Why: a launch written with `WAIT_FOR_IDLE` before it (stream order, `compute_launch`) starts
//! only after the channel saw the engine go idle, ~1.06 µs per grid back to back on the H200
//! (0.85 with its QMD prefetched before the wait, `Tuning::early_qmd_prefetch`);
//! chained, the GPU takes 0.60 µs per grid, 0.48 with the inner QMDs' membar below
//! (docs/performance.md, "Chained launches"). Chaining needs the next launch written before the
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
//! inner ([`ChainPatch::make_inner`]): it now schedules this one, releases nothing and ends its
//! CTAs with a GPU-scope membar, as a graph's inner kernels do. Its own QMD waits in host
//! memory ([`Chan::unwritten`]) until the next launch chains or anything on the
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
//! semaphore acquire of the chain's last value ([`Chan::own_wait`], unless the timeline
//! already reached it): the
//! grids of a chain are scheduled by the engine itself, and whether `WAIT_FOR_IDLE` waits for a
//! dependent QMD not yet scheduled is not documented. CUDA orders a stream the same way, with
//! acquires on the kernel before's release. Launches written ahead are not written while a
//! chain may run (their pushbuffer has only the wait).
//!
//! Not chained: the first launch after a shader-cache invalidate (module load), a launch that
//! must wait for the copy channel.

use alloc::boxed::Box;

use super::ahead::differing_runs;
use crate::channel::pushbuf::PushBuffer;
use crate::channel::qmd::{CwdMembar, Qmd, QmdError, QmdLayout, with_layout};
use crate::chip::QmdVersion;
use crate::device::backend::{Backend, GpuMemory};
use crate::device::chan::ARENA_ALIGN;
#[cfg(doc)]
use crate::device::chan::Chan;
use crate::device::launch::{Built, Head};
use crate::device::ops::Inner;
use crate::device::{DeviceError, DeviceInfo, DeviceOptions};

/// The chain's changes to a QMD, through the typed setters of one layout.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChainPatch {
    version: QmdVersion,
}

impl ChainPatch {
    /// The changes for layout `v` (V03_00, V04_00 or V05_00).
    pub(super) fn new(v: QmdVersion) -> Result<Self, QmdError> {
        with_layout!(v, L => Ok(ChainPatch { version: L::VERSION }))
    }

    /// Turns `q`, the last QMD of a chain so far, into an inner one whose grid the QMD at
    /// `next` follows: it schedules `next` ([`QmdLayout::schedule_after`]), releases nothing
    /// (the chain's last QMD releases its timeline value, which covers this one's) and ends its
    /// CTAs with a GPU-scope membar and task chasing instead of the system-scope one (what a
    /// CUDA graph gives all but its last kernel: the next grid sees this one's stores; the last
    /// QMD's system-scope membar makes them visible to the host before its release).
    pub(super) fn make_inner(&self, q: &mut Qmd, next: u64) -> Result<(), QmdError> {
        with_layout!(self.version, L => {
            L::schedule_after(q, next)?;
            L::set_release_enable(q, 0, false)?;
            L::set_cwd_membar(q, CwdMembar::L1Membar, true)
        })
    }
}

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
    /// GPU VA of its constant bank 0, and `LastLaunch::seq` (`ahead.rs`) of the remembered
    /// launch whose bytes it holds (`None`: not known to be the remembered launch's).
    cb: (u64, Option<u64>),
    /// Command-memory offset of the head's `NO_OPERATION` that becomes the sked-cache
    /// invalidate when the first launch chains ([`PushBuffer::sked_invalidate_slot`]).
    sked_off: u64,
}

/// The device's chain state.
#[derive(Debug)]
pub(super) struct ChainState {
    patch: ChainPatch,
    tail: Option<ChainTail>,
    /// The head's QMD as written (the first chained launch patches it). On the heap,
    /// allocated once: it keeps the device's state (built on the stack when a device opens)
    /// small.
    qmd: Option<Box<Qmd>>,
    /// A QMD box to reuse for the next chained launch (the chained tail's QMD itself waits in
    /// [`Chan::unwritten`]).
    spare: Option<Box<Qmd>>,
    /// Launches scheduled by the QMD before them instead of methods of their own.
    pub(super) chained: u64,
    /// Chained launches that used the constant bank 0 of the launch before them.
    pub(super) shared_banks: u64,
}

impl ChainState {
    pub(super) fn new(v: QmdVersion) -> Result<Self, QmdError> {
        Ok(ChainState {
            patch: ChainPatch::new(v)?,
            tail: None,
            qmd: None,
            spare: None,
            chained: 0,
            shared_banks: 0,
        })
    }

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
/// the doorbell (`Tuning::deferred_submits`, or the launch's automatic deferral, `flusher.rs`).
pub(super) fn chaining(opts: &DeviceOptions, defer: u32) -> bool {
    opts.tuning.chain_launches && defer > 0
}

impl<B: Backend> Inner<B> {
    /// Whether a launch with timeline value `value` can be chained to the tail: the tail is
    /// the compute channel's last submission and its GP entry (the head's) still waits for the
    /// doorbell, so the GPU has read none of the chain.
    fn chain_open(&self, value: u64) -> bool {
        let c = &self.chans[self.fast_ci()];
        self.fast
            .chain
            .tail
            .as_ref()
            .is_some_and(|t| t.value + 1 == value && c.submitted + 1 == value)
            && c.fifo.unpublished() > 0
    }

    /// Launches queued on the compute channel behind its doorbell: its unpublished
    /// submissions, counting the launches chained to the last of them.
    pub(super) fn queued_launches(&self) -> u32 {
        let c = &self.chans[self.fast_ci()];
        let unpublished = c.fifo.unpublished();
        if unpublished == 0 {
            return 0;
        }
        let chained = self
            .fast
            .chain
            .tail
            .as_ref()
            .filter(|t| t.value == c.submitted)
            .map_or(0, |t| t.len - 1);
        unpublished + chained
    }

    /// After an ordinary launch submitted as a chain's possible head: it heads a chain if
    /// chaining is on and its doorbell is deferred.
    pub(super) fn chain_head(&mut self, opts: &DeviceOptions, h: Head) {
        let fc = self.fast_ci();
        let chain = &mut self.fast.chain;
        if !chaining(opts, self.defer) || self.chans[fc].fifo.unpublished() == 0 {
            chain.tail = None;
            return;
        }
        chain.set_qmd(&h.qmd);
        chain.tail = Some(ChainTail {
            qmd_off: h.qmd_off,
            value: h.value,
            len: 1,
            cb: (h.cb_va, None),
            sked_off: h.sked_off,
        });
    }

    /// The launch just made was remembered for write-ahead ([`Inner::launched_built`]): if
    /// it is the chain's tail, its constant bank 0 holds the bytes of the remembered launch.
    pub(super) fn chain_remembered(&mut self) {
        let submitted = self.chans[self.fast_ci()].submitted;
        let seq = self.fast.last.seq;
        if let Some(t) = self.fast.chain.tail.as_mut()
            && t.value == submitted
        {
            t.cb.1 = Some(seq);
        }
    }

    /// `tail`'s QMD in its final form: the head's as written, or a chained tail's, which is not
    /// written yet.
    fn tail_qmd(&self, tail: &ChainTail) -> Option<&Qmd> {
        if tail.len == 1 {
            self.fast.chain.qmd.as_deref()
        } else {
            self.chans[self.fast_ci()]
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
        let Some(img) = self.fast.last.image.take() else {
            return Ok(false);
        };
        let seq = self.fast.last.seq;
        let r = self.launch_chained(info, opts, &img.built(), value, Some(seq));
        self.fast.last.image = Some(img);
        r
    }

    /// Chains launch `l`, releasing timeline value `value`, to the tail, if the chain is open,
    /// nothing on the copy channel must be waited for and command memory has room without
    /// waiting. `repeat`: `l` is the remembered launch, of this `LastLaunch::seq`. Returns
    /// whether it chained.
    pub(super) fn launch_chained(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        l: &Built<'_>,
        value: u64,
        repeat: Option<u64>,
    ) -> Result<bool, DeviceError> {
        if !chaining(opts, self.defer)
            || self.caches_dirty()
            || !self.chain_open(value)
            || !self.other_done(self.fast_ci())
        {
            return Ok(false);
        }
        let Some(tail) = self.fast.chain.tail else {
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
        let off = match self.arena_alloc_now(self.fast_ci(), n, value) {
            Ok(Some(off)) => off,
            r => return r.map(|_| false),
        };
        let cmds_va = self.chans[self.fast_ci()].cmds.gpu_va();
        let cb_va = if shared { tail.cb.0 } else { cmds_va + off };
        let qmd_off = off + cb_size;
        let r = (|| -> Result<Box<Qmd>, DeviceError> {
            let spare = if shared {
                self.fast.chain.spare.take()
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
                Box::new(self.launch_qmd(info, l, cb_va, value)?)
            };
            self.fast
                .chain
                .patch
                .make_inner(&mut inner, cmds_va + qmd_off)?;
            let c = &self.chans[self.fast_ci()];
            if head {
                // Written with the head's methods: only its words that change. First (a
                // write to a line written long before costs the CPU more behind a burst of
                // others); the GPU reads none of this before the doorbell, so the order is
                // free. The head's methods now invalidate the sked caches: this launch's QMD
                // sits at a reused address.
                let before = self
                    .fast
                    .chain
                    .qmd
                    .as_deref()
                    .map_or(&[][..], |q| q.as_bytes());
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
                let fc = self.fast_ci();
                self.chans[fc].arena.cancel_last();
                return Err(e);
            }
        };
        // This launch's QMD waits for the next launch, or for the doorbell.
        let fc = self.fast_ci();
        let c = &mut self.chans[fc];
        if let Some((_, old)) = c.unwritten.replace((qmd_off, next)) {
            self.fast.chain.spare = Some(old);
        }
        c.submitted = value;
        // Scheduled by the engine itself: what follows the chain waits for its end.
        c.own_wait = Some(value);
        let chain = &mut self.fast.chain;
        chain.tail = Some(ChainTail {
            qmd_off,
            value,
            len: tail.len + 1,
            cb: (cb_va, repeat),
            sked_off: tail.sked_off,
        });
        chain.chained += 1;
        chain.shared_banks += u64::from(shared);
        // The deferral limit counts the chain's launches as submissions.
        if self.queued_launches() > self.defer {
            self.kick(self.fast_ci())?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::qmd::{LaunchDesc, SmSharedConfig};

    fn desc() -> LaunchDesc {
        let mut d = LaunchDesc {
            program_address: 0x10_0000_1000,
            register_count: 24,
            shared_memory_size: 1024,
            block: [64, 1, 1],
            grid: [3, 1, 1],
            shader_local_memory_high_size: 0x240,
            barrier_count: 1,
            sass_version: 0x90,
            sm_config: SmSharedConfig {
                min: 3,
                max: 0x1a,
                target: 3,
            },
            ..LaunchDesc::default()
        };
        d.cbufs[0] = Some((0x10_0000_2000, 0x300));
        d.cbufs[4] = Some((0x10_0000_8000, 0x10));
        d.release[0] = Some((0x10_0000_0000, 9));
        d
    }

    #[test]
    fn scheduling_after_a_built_qmd_equals_building_it_chained() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let d = desc();
            let mut q = Qmd::build(v, &d).unwrap();
            q.schedule_after(0x20_0000_1200).unwrap();
            assert_ne!(q, Qmd::build(v, &d).unwrap(), "{v:?}: it changed something");
            let mut chained = d;
            chained.dependent_qmd = Some(0x20_0000_1200);
            assert_eq!(q, Qmd::build(v, &chained).unwrap(), "{v:?}");
            assert_eq!(q.launch_desc().unwrap().dependent_qmd, Some(0x20_0000_1200));
            assert!(q.schedule_after(0x20_0000_1280).is_err(), "misaligned");
        }
    }

    #[test]
    fn an_inner_chain_qmd_schedules_the_next_releases_nothing_and_keeps_the_rest() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = ChainPatch::new(v).unwrap();
            let d = desc();
            let mut inner = Qmd::build(v, &d).unwrap();
            p.make_inner(&mut inner, 0x20_0000_1200).unwrap();
            let got = inner.launch_desc().unwrap();
            assert_eq!(got.dependent_qmd, Some(0x20_0000_1200), "{v:?}");
            assert_eq!(got.release, [None, None], "{v:?}");
            assert_eq!(inner.get("CWD_MEMBAR_TYPE").unwrap(), 3, "{v:?}");
            if v != QmdVersion::V03_00 {
                assert_eq!(inner.get("CWD_MEMBAR_TASK_CHASING_ENABLE").unwrap(), 1);
            }
            // Nothing else changed: the launch itself is the same.
            let mut want = d;
            want.release = [None, None];
            want.dependent_qmd = Some(0x20_0000_1200);
            let mut back = got;
            back.program_size = want.program_size;
            assert_eq!(back, want, "{v:?}");
        }
    }
}
