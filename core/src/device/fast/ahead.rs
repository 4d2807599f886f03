//! Launches written ahead (`Tuning::write_ahead`, on by default) and the record of the
//! last launch that they and chained launches repeat.
//!
//! Most of a launch call is the CPU's ~1 KiB of stores to command memory (constant bank 0,
//! QMD, pushbuffer) draining through a write-combined BAR1 mapping, and the store barrier
//! before `GPPut` that waits for them (docs/performance.md, "Where a round trip's time goes").
//! A program that launches and then waits leaves the CPU idle while the GPU runs the kernel,
//! so the wait first writes the next
//! launch's region as a repeat of the last launch: bank 0, the QMD with the next timeline
//! value and the pushbuffer, into command memory the next submission would get anyway, and its
//! GP entry into the ring's next slot ([`crate::channel::gpfifo::GpFifo::stage`]). No `GPPut`
//! and no doorbell: the GPU fetches only up to `GPPut`, so it does not know about any of it.
//! The next launch then compares itself with that image: the same launch writes nothing there,
//! one with other parameters only the 8-byte words of bank 0 that differ, and both go straight
//! to `GPPut` and the doorbell (with the store barriers of every submission). A launch call
//! with the same kernel, shape and arguments as the call that made the remembered launch
//! ([`Call`]) does not even build its launch to compare it, and one that differs from it only
//! in argument values writes just those into the bank ([`Inner::launch_changed_args`]: on the
//! H200 the checks and rebuilding had cost such a launch ~1 µs of CPU). Anything else (another
//! kernel or shape, a submission in between, a module load that needs a cache invalidate,
//! copy-channel work still running) leaves the region unused, to be reused once the timeline
//! passes its value (or given back at once when the arena needs its room for the submission
//! that replaced it: the region is the arena's spare allocation), and takes the ordinary path;
//! its own GP entry overwrites the staged one.
//!
//! With `Tuning::early_qmd_prefetch` (the default) the wait also publishes a prefetch
//! of the region's QMD (`PushBuffer::qmd_prefetch`, from one of [`PREFETCH_SLOTS`] slots kept
//! out of the arena: a slot is reused only once the timeline has passed the submission after
//! its last use, so the GPU has read it; a region given back at once never takes one with it).
//! The GPU runs it behind the launch being waited for, while that grid runs, and the region's
//! pushbuffer launches the cached copy (`PREFETCH_SCHEDULE` after its `WAIT_FOR_IDLE`): on the
//! H200 that took ~0.25 µs off a launch + sync round trip. A launch that changes bank 0
//! rewrites that action word to the invalidating one first, so nothing fetched before the
//! change is used. Without a free slot or ring room the region gets the ordinary form.
//!
//! Otherwise this changes nothing the GPU sees: the written-ahead region is
//! published exactly as an ordinary launch's would be, with the same store barriers. On the
//! H200 it took the CPU's time from seeing a release to the next doorbell from 0.5-0.9 µs to
//! 0.3-0.5 µs, and launch + sync 0.28 µs on average; staging the GP entry and skipping the
//! build of a repeated call took the launch call from 0.15-0.41 µs to 0.07-0.16 and launch +
//! sync another 0.07-0.24 µs (3.11-3.27 µs); what follows the doorbell (~3.0-3.1 µs) is the
//! same either way (docs/performance.md, "Launches written ahead" and "Repeated and
//! argument-only calls").

use alloc::vec::Vec;

use zerocopy::IntoBytes;

use crate::channel::gpfifo::GpEntry;
use crate::channel::launch;
use crate::channel::methods::compute;
use crate::channel::pushbuf::PushBuffer;
use crate::channel::qmd::LaunchDesc;
use crate::device::backend::{Backend, GpuMemory};
use crate::device::chan::ARENA_ALIGN;
use crate::device::launch::{Built, CallInputs};
use crate::device::module::{Arg, KernelInfo};
use crate::device::ops::Inner;
use crate::device::qmd::LaunchKey;
use crate::device::{DeviceError, DeviceInfo, DeviceOptions};

/// A launch as it can be repeated: its launch key, the description without the parts that
/// differ per region (constant bank 0's address, the release), the bank's size and bytes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Image {
    pub key: LaunchKey,
    pub desc: LaunchDesc,
    pub cb_size: u32,
    pub cb: Vec<u8>,
}

impl Image {
    /// The remembered launch as the launch path builds one.
    pub(super) fn built(&self) -> Built<'_> {
        Built {
            key: self.key,
            desc: &self.desc,
            cb_size: self.cb_size,
            cb: &self.cb,
        }
    }
}

/// How a launch differs from the remembered one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// The same kernel, shape and constant bank 0 bytes.
    Same,
    /// The same kernel and shape (QMD); only bank 0's bytes (the parameters) differ.
    Bank,
    /// Another kernel, shape or bank size, or nothing remembered.
    Other,
}

/// The last launch, kept while write-ahead is on.
#[derive(Debug, Default)]
pub(super) struct LastLaunch {
    pub(super) image: Option<Image>,
    /// Bumped whenever `image` changes.
    pub(super) seq: u64,
}

impl LastLaunch {
    /// How `l` differs from the remembered launch.
    pub(super) fn compare(&self, l: &Built<'_>) -> Change {
        match &self.image {
            Some(i) if i.key == l.key && i.desc == *l.desc && i.cb_size == l.cb_size => {
                if i.cb == l.cb {
                    Change::Same
                } else {
                    Change::Bank
                }
            }
            _ => Change::Other,
        }
    }

    /// Remembers `l`. Returns whether it differs from the last one
    /// (which it then replaces). Allocates only the first time and when a bank outgrows the
    /// kept one.
    pub(super) fn remember(&mut self, l: &Built<'_>) -> bool {
        match &mut self.image {
            Some(i)
                if i.key == l.key
                    && i.desc == *l.desc
                    && i.cb_size == l.cb_size
                    && i.cb == l.cb =>
            {
                return false;
            }
            Some(i) => {
                i.key = l.key;
                i.desc = *l.desc;
                i.cb_size = l.cb_size;
                i.cb.clear();
                i.cb.extend_from_slice(l.cb);
            }
            None => {
                self.image = Some(Image {
                    key: l.key,
                    desc: *l.desc,
                    cb_size: l.cb_size,
                    cb: l.cb.to_vec(),
                });
            }
        }
        self.seq += 1;
        true
    }
}

/// A region of the compute channel's command memory written ahead as a repeat of the last
/// launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    /// Offset in command memory: constant bank 0, then the QMD, then the pushbuffer.
    off: u64,
    /// The timeline value its QMD releases (the next submission's).
    value: u64,
    /// The GP entry of its pushbuffer (staged in the ring when there was room).
    entry: GpEntry,
    /// [`LastLaunch::seq`] of the image written.
    seq: u64,
    /// Where its pushbuffer's `PCAS_ACTION` word is, when the wait that wrote it also published
    /// a prefetch of its QMD and the pushbuffer launches the prefetched copy
    /// (`PREFETCH_SCHEDULE`): a launch that changes bank 0 rewrites it to the invalidating
    /// action, so nothing fetched before the change is used.
    action_off: Option<u64>,
}

/// Prefetch pushbuffers of regions written ahead (`Tuning::early_qmd_prefetch`): slots
/// in the last [`PREFETCH_AREA`] bytes of the compute channel's command memory, outside its
/// arena, so a region given back at once never takes a prefetch the GPU has not read yet.
pub(super) const PREFETCH_SLOTS: usize = 8;
/// Bytes per prefetch slot (the pushbuffer takes 24).
const PREFETCH_SLOT_BYTES: u64 = 32;
/// Command memory the compute channel keeps out of its arena for the prefetch slots.
pub(super) const PREFETCH_AREA: u64 = PREFETCH_SLOTS as u64 * PREFETCH_SLOT_BYTES;

/// What a launch call was given ([`CallInputs`]), kept: the kernel, the shape and the
/// arguments. The launch a call makes is a function of these alone (and of the module, which the key names), so a call with the same
/// ones as the call that made the remembered launch makes that launch again, and can skip
/// building it (checks, constant bank 0, description, the comparison) to go straight to the
/// region written ahead.
#[derive(Debug, Default)]
struct Call {
    key: Option<LaunchKey>,
    grid: [u32; 3],
    block: [u32; 3],
    /// Per argument: its size (4 bytes, little-endian), then its bytes.
    args: Vec<u8>,
    /// [`LastLaunch::seq`] of the launch the call made.
    seq: u64,
}

impl Call {
    /// How `call` compares with this call, the one that made launch `seq` of the record: not
    /// at all (another kernel or shape, another number or size of arguments, a pointer not
    /// owned by the device launched on: that one goes the ordinary way, which names the
    /// error), in argument values only, or not at all different.
    fn compare(&self, seq: u64, call: &CallInputs<'_>) -> CallMatch {
        if self.seq != seq
            || self.key != Some(call.key)
            || self.grid != call.grid
            || self.block != call.block
        {
            return CallMatch::Other;
        }
        let mut rest = self.args.as_slice();
        let mut same = true;
        for a in call.args {
            if let Arg::Ptr { device, .. } = a
                && *device != call.device_id
            {
                return CallMatch::Other;
            }
            let mut tmp = [0u8; 8];
            let bytes = a.bytes(&mut tmp);
            let Some((size, tail)) = rest.split_first_chunk::<4>() else {
                return CallMatch::Other;
            };
            let Some((old, tail)) = tail.split_at_checked(bytes.len()) else {
                return CallMatch::Other;
            };
            if u32::from_le_bytes(*size) as usize != bytes.len() {
                return CallMatch::Other;
            }
            same &= old == bytes;
            rest = tail;
        }
        match (rest.is_empty(), same) {
            (false, _) => CallMatch::Other,
            (true, true) => CallMatch::Same,
            (true, false) => CallMatch::Values,
        }
    }

    /// Records `args` (no allocation once the buffer is large enough).
    fn set_args(&mut self, args: &[Arg<'_>]) {
        self.args.clear();
        for a in args {
            let mut tmp = [0u8; 8];
            let bytes = a.bytes(&mut tmp);
            self.args
                .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            self.args.extend_from_slice(bytes);
        }
    }
}

/// How a launch call compares with the [`Call`] that made the remembered launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallMatch {
    /// The same kernel, shape and argument bytes.
    Same,
    /// The same kernel, shape, number and sizes of arguments; other values.
    Values,
    /// Anything else.
    Other,
}

/// The device's write-ahead state.
#[derive(Debug, Default)]
pub(super) struct AheadState {
    region: Option<Region>,
    /// A kernel was launched (on either path) since the last wait.
    pub(super) launched_since_wait: bool,
    /// Launches that used a region written ahead.
    pub(super) used: u64,
    /// The call that made the remembered launch.
    call: Call,
    /// Launches that skipped building themselves ([`Call`]), through a region written ahead or
    /// chained to the launch before.
    pub(super) repeated: u64,
    /// Per prefetch slot, the timeline value of the first submission published after it: the
    /// slot is free once the timeline reaches it (the GPU read the prefetch before that
    /// submission).
    fences: [u64; PREFETCH_SLOTS],
    /// The slot the next prefetch takes.
    next_slot: usize,
    /// Launches through a region whose QMD a wait had prefetched.
    pub(super) prefetched: u64,
    /// Launches whose call differed from the last call only in argument values and which
    /// wrote only those into a region written ahead ([`Inner::launch_changed_args`]).
    pub(super) args_only: u64,
}

impl AheadState {
    /// Forgets the region (the channels were re-created).
    pub(super) fn reset(&mut self) {
        self.region = None;
        self.launched_since_wait = false;
        self.call.key = None;
        // The timeline restarts from what was submitted; the GPU read nothing since.
        self.fences = [0; PREFETCH_SLOTS];
    }

    /// Forgets the region and the call, as the machinery moves to another stream's channel,
    /// whose prefetch slots its submissions up to `submitted` may still read.
    pub(super) fn moved(&mut self, submitted: u64) {
        self.reset();
        self.fences = [submitted; PREFETCH_SLOTS];
    }

    /// Whether a region is written ahead now (for tests).
    pub(super) fn is_written(&self) -> bool {
        self.region.is_some()
    }
}

/// Byte ranges of `new` whose 8-byte words differ from `old` (same length), merged where
/// adjacent.
pub(super) fn differing_runs<'a>(
    old: &'a [u8],
    new: &'a [u8],
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let words = new.len().div_ceil(8);
    let differs = move |w: usize| {
        let r = w * 8..(w * 8 + 8).min(new.len());
        old.get(r.clone()) != new.get(r)
    };
    let mut w = 0;
    core::iter::from_fn(move || {
        while w < words && !differs(w) {
            w += 1;
        }
        if w >= words {
            return None;
        }
        let start = w;
        while w < words && differs(w) {
            w += 1;
        }
        Some((start * 8, (w * 8).min(new.len())))
    })
}

impl<B: Backend> Inner<B> {
    /// Writes `l`'s constant bank 0 at `cb_off` of the compute channel's command memory and
    /// its QMD at `qmd_off`, pointing at that bank and releasing timeline value `value`.
    fn write_image(
        &mut self,
        info: &DeviceInfo,
        l: &Built<'_>,
        cb_off: u64,
        qmd_off: u64,
        value: u64,
    ) -> Result<(), DeviceError> {
        let cb_va = self.chans[self.fast_ci()].cmds.gpu_va() + cb_off;
        self.chans[self.fast_ci()].cmds.write(cb_off, l.cb)?;
        let qmd = self.launch_qmd(info, l, cb_va, value)?;
        self.chans[self.fast_ci()]
            .cmds
            .write(qmd_off, qmd.as_bytes())?;
        Ok(())
    }

    /// Called before a wait: if a kernel was launched since the last one, writes the next
    /// launch's region as a repeat of the last launch (the stores drain while the GPU works).
    /// Never waits: without room in command memory it writes nothing.
    pub(super) fn write_ahead(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if !opts.tuning.write_ahead
            || !core::mem::take(&mut self.fast.ahead.launched_since_wait)
            || self.dead.is_some()
            // Its pushbuffer has no acquire for a chain that may still run (chain.rs).
            || self.own_wait(self.fast_ci()).is_some()
        {
            return Ok(());
        }
        let Some(cb_size) = self.fast.last.image.as_ref().map(|i| u64::from(i.cb_size)) else {
            return Ok(());
        };
        let fc = self.fast_ci();
        let c = &mut self.chans[fc];
        if self
            .fast
            .ahead
            .region
            .is_some_and(|r| r.value > c.submitted)
        {
            return Ok(());
        }
        // Written whether or not the GPU is still busy (usually it is, right after a launch):
        // a launch that repeats costs the same stores here as later, and what each wait does
        // then does not depend on timing.
        let done = self.sem.read_u64(c.sem_offset)?;
        c.arena.retire(done);
        let value = c.submitted + 1;
        let pb_off = cb_size + (info.qmd.size() as u64).next_multiple_of(ARENA_ALIGN);
        let Some(off) = c.arena.alloc_spare(pb_off + ARENA_ALIGN, value) else {
            return Ok(());
        };
        let cmds_va = c.cmds.gpu_va();
        let qmd_va = cmds_va + off + cb_size;
        // A prefetch of the QMD goes out with the region when its slot is free and the ring
        // has room for it and the launch without waiting.
        let slot = self.fast.ahead.next_slot;
        let fc = self.fast_ci();
        let prefetch = opts.tuning.early_qmd_prefetch
            && self.fast.ahead.fences[slot] <= done
            && self.chans[fc].has_room(2)?;
        let mut words = [0u32; 8];
        let mut pb = PushBuffer::new(&mut words);
        let built = if prefetch {
            pb.compute_launch_after_prefetch(qmd_va)
        } else {
            pb.compute_launch_on(qmd_va, info.chip.has_pcas2())
        };
        let pb_words = pb.len();
        // Taken out for the writing (put back below), not cloned: no allocation.
        let img = self.fast.last.image.take();
        let r = (|| -> Result<GpEntry, DeviceError> {
            built?;
            let entry = GpEntry::new(cmds_va + off + pb_off, pb_words as u32)?;
            let Some(img) = img.as_ref() else {
                return Ok(entry);
            };
            self.write_image(info, &img.built(), off, off + cb_size, value)?;
            let fc = self.fast_ci();
            let c = &mut self.chans[fc];
            c.cmds.write(
                off + pb_off,
                words.get(..pb_words).unwrap_or(&[]).as_bytes(),
            )?;
            if prefetch {
                // Published now, behind the launch being waited for: the scheduler fetches
                // the QMD while that grid runs, and the launch finds it cached.
                let mut pf_words = [0u32; 8];
                let mut pf = PushBuffer::new(&mut pf_words);
                pf.qmd_prefetch(qmd_va)?;
                let pf_len = pf.len();
                let slot_off = c.cmds.size() - PREFETCH_AREA + slot as u64 * PREFETCH_SLOT_BYTES;
                c.cmds
                    .write(slot_off, pf_words.get(..pf_len).unwrap_or(&[]).as_bytes())?;
                let pf_entry = GpEntry::new(cmds_va + slot_off, pf_len as u32)?;
                c.queue(
                    &self.usermode,
                    self.backend.clock(),
                    opts.timeout,
                    opts.tuning.deferred_submits,
                    pf_entry,
                )?;
                self.fast.ahead.fences[slot] = value;
                self.fast.ahead.next_slot = (slot + 1) % PREFETCH_SLOTS;
            }
            // The GP entry too: the launch then only publishes it.
            let fc = self.fast_ci();
            self.chans[fc].stage(entry)?;
            Ok(entry)
        })();
        self.fast.last.image = img;
        match r {
            Ok(entry) => {
                self.fast.ahead.region = Some(Region {
                    off,
                    value,
                    entry,
                    seq: self.fast.last.seq,
                    action_off: prefetch.then_some(off + pb_off + (pb_words as u64 - 1) * 4),
                });
                Ok(())
            }
            Err(e) => {
                let fc = self.fast_ci();
                self.chans[fc].arena.cancel_last();
                Err(e)
            }
        }
    }

    /// Submits launch `l` (releasing `value`) through the region
    /// written ahead, if it has one for `value` and `l` repeats what it holds or differs only
    /// in bank 0's bytes (those words are written). Returns whether it did; the region is used
    /// or given up either way. The caller checked that the launch needs no shader-cache
    /// invalidate.
    pub(super) fn launch_written_ahead(
        &mut self,
        opts: &DeviceOptions,
        l: &Built<'_>,
        value: u64,
    ) -> Result<bool, DeviceError> {
        let Some(r) = self.fast.ahead.region.take() else {
            return Ok(false);
        };
        if self.caches_dirty() || !self.region_serves(&r, value) {
            return Ok(false);
        }
        let change = self.fast.last.compare(l);
        match (change, self.fast.last.image.as_ref()) {
            (Change::Same, _) => {}
            (Change::Bank, Some(img)) => {
                self.rewrite_bank(&r, l.cb, differing_runs(&img.cb, l.cb))?
            }
            _ => return Ok(false),
        }
        self.publish_region(opts, &r, value, change == Change::Same)?;
        if change == Change::Bank {
            self.fast.last.remember(l);
        }
        Ok(true)
    }

    /// Submits the launch of a call that repeats the call which made the remembered launch
    /// ([`Call`]: same kernel, shape and arguments) without building it: through the region
    /// written ahead for release `value`, or chained as it is to a chain that is open. Returns
    /// whether it did; if not, nothing changed and the caller takes the usual path, which
    /// checks and builds the launch.
    pub(super) fn launch_repeated_call(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        call: &CallInputs<'_>,
        value: u64,
    ) -> Result<bool, DeviceError> {
        let fast = &self.fast;
        if self.caches_dirty() || fast.ahead.call.compare(fast.last.seq, call) != CallMatch::Same {
            return Ok(false);
        }
        let fired = if let Some(r) = self.fast.ahead.region {
            if !self.region_serves(&r, value) {
                return Ok(false);
            }
            self.fast.ahead.region = None;
            self.publish_region(opts, &r, value, true)?;
            true
        } else {
            self.launch_chained_repeat(info, opts, value)?
        };
        if fired {
            self.fast.ahead.repeated += 1;
        }
        Ok(fired)
    }

    /// Submits the launch of a call that differs from the call which made the remembered
    /// launch ([`Call`]) only in its argument values (same kernel, shape, number and sizes of
    /// arguments) through the region written ahead for release `value`: the changed parameter
    /// bytes go into the remembered image and, as whole 8-byte words, into the region's bank
    /// 0, and nothing else is built. Everything the ordinary path checks depends only on the
    /// kernel, the shape and the argument sizes, which the remembered call passed, except
    /// that every pointer must belong to this device ([`Call::compare`]); a call that fails that
    /// goes the ordinary way, which names the error. Returns whether it did; if not, nothing
    /// changed.
    pub(super) fn launch_changed_args(
        &mut self,
        opts: &DeviceOptions,
        call: &CallInputs<'_>,
        k: &KernelInfo,
        value: u64,
    ) -> Result<bool, DeviceError> {
        if self.caches_dirty()
            || call.args.len() != k.params.len()
            || self.fast.ahead.call.compare(self.fast.last.seq, call) != CallMatch::Values
        {
            return Ok(false);
        }
        let Some(r) = self.fast.ahead.region else {
            return Ok(false);
        };
        if !self.region_serves(&r, value) {
            return Ok(false);
        }
        let Some(img) = self.fast.last.image.as_mut() else {
            return Ok(false);
        };
        // The image is about to hold this launch: nothing may take the old call for it,
        // whatever happens below.
        self.fast.last.seq += 1;
        self.fast.ahead.region = None;
        // The sizes are the remembered call's, which `write_param` checked against the kernel
        // when that launch was built.
        let mut dirty: Option<(usize, usize)> = None;
        for (p, a) in k.params.iter().zip(call.args) {
            let mut tmp = [0u8; 8];
            let bytes = a.bytes(&mut tmp);
            let lo = k.param_base as usize + p.offset as usize;
            let hi = lo + bytes.len();
            if img.cb.get(lo..hi) != Some(bytes) {
                launch::write_param(&mut img.cb, k.param_base, k.param_size, p.offset, bytes)?;
                dirty = Some(dirty.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
            }
        }
        if let (Some((lo, hi)), Some(img)) = (dirty, self.fast.last.image.as_ref()) {
            // Whole words (the bank is a multiple of 8 bytes long but for its last word): the
            // words between two changed arguments are written too, unchanged.
            let run = (lo & !7, hi.next_multiple_of(8).min(img.cb.len()));
            self.rewrite_bank(&r, &img.cb, [run])?;
        }
        self.publish_region(opts, &r, value, dirty.is_none())?;
        let c = &mut self.fast.ahead.call;
        c.set_args(call.args);
        c.seq = self.fast.last.seq;
        self.fast.ahead.args_only += 1;
        Ok(true)
    }

    /// Writes `bank[a..b]` for each run `(a, b)` into region `r`'s constant bank 0. When the
    /// wait prefetched the region's QMD, its launch then takes the invalidating action: the
    /// prefetch ran before these words changed, and whether it read the bank is not
    /// documented, so nothing it fetched is used.
    fn rewrite_bank(
        &self,
        r: &Region,
        bank: &[u8],
        runs: impl IntoIterator<Item = (usize, usize)>,
    ) -> Result<(), DeviceError> {
        let cmds = &self.chans[self.fast_ci()].cmds;
        for (a, b) in runs {
            cmds.write(r.off + a as u64, bank.get(a..b).unwrap_or(&[]))?;
        }
        if let Some(at) = r.action_off {
            let w = PushBuffer::pcas_action_word(
                compute::PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE,
            )?;
            cmds.write_u32(at, w)?;
        }
        Ok(())
    }

    /// Whether region `r` can carry the launch with release `value`: written for that value
    /// and for the remembered launch, its memory not given back, and nothing on the copy
    /// channel left to wait for (its pushbuffer has no acquire).
    fn region_serves(&mut self, r: &Region, value: u64) -> bool {
        r.value == value
            && r.seq == self.fast.last.seq
            && self.chans[self.fast_ci()].arena.is_spare(r.off, r.value)
            && self.other_done(self.fast_ci())
    }

    /// Publishes region `r` as the compute submission with release `value`: its GP entry
    /// (staged by the wait that wrote it, so usually no store), `GPPut` and the doorbell.
    /// `unchanged`: bank 0 is as the wait wrote it (a prefetched QMD is launched as cached).
    fn publish_region(
        &mut self,
        opts: &DeviceOptions,
        r: &Region,
        value: u64,
        unchanged: bool,
    ) -> Result<(), DeviceError> {
        let fc = self.fast_ci();
        let c = &mut self.chans[fc];
        c.arena.claim_spare();
        c.queue(
            &self.usermode,
            self.backend.clock(),
            opts.timeout,
            self.defer,
            r.entry,
        )?;
        c.submitted = value;
        self.fast.ahead.used += 1;
        if unchanged && r.action_off.is_some() {
            self.fast.ahead.prefetched += 1;
        }
        Ok(())
    }

    /// After a launch: records the call that made it ([`Call`]), for the next call to compare
    /// itself with.
    pub(super) fn note_call(&mut self, opts: &DeviceOptions, call: &CallInputs<'_>) {
        if opts.tuning.write_ahead {
            let seq = self.fast.last.seq;
            let c = &mut self.fast.ahead.call;
            c.key = Some(call.key);
            c.grid = call.grid;
            c.block = call.block;
            c.set_args(call.args);
            c.seq = seq;
        }
    }

    /// After a launch built in full (ordinary or chained): remembers it and marks the next
    /// wait as one to write ahead in.
    pub(super) fn launched_built(&mut self, opts: &DeviceOptions, l: &Built<'_>) {
        if opts.tuning.write_ahead {
            self.fast.last.remember(l);
            self.fast.ahead.launched_since_wait = true;
            self.chain_remembered();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn a_call_compares_by_kernel_shape_argument_sizes_and_values() {
        let key = LaunchKey {
            slot: 1,
            generation: 2,
            kernel: 0,
            dynamic_shared: 0,
        };
        let ptr = |va, device| Arg::Ptr { va, device };
        let made = [ptr(0x1000, 7), Arg::U32(64)];
        let mut c = Call {
            key: Some(key),
            grid: [1, 1, 1],
            block: [256, 1, 1],
            seq: 5,
            ..Call::default()
        };
        c.set_args(&made);
        let cmp = |c: &Call, seq, key, grid, args: &[Arg<'_>]| {
            c.compare(
                seq,
                &CallInputs {
                    key,
                    grid,
                    block: [256, 1, 1],
                    args,
                    device_id: 7,
                },
            )
        };
        let one = [1, 1, 1];
        assert_eq!(cmp(&c, 5, key, one, &made), CallMatch::Same);
        // The same bytes as another type of the same size.
        assert_eq!(
            cmp(&c, 5, key, one, &[ptr(0x1000, 7), Arg::I32(64)]),
            CallMatch::Same
        );
        assert_eq!(
            cmp(&c, 5, key, one, &[ptr(0x2000, 7), Arg::U32(64)]),
            CallMatch::Values
        );
        assert_eq!(
            cmp(&c, 5, key, one, &[ptr(0x1000, 7), Arg::U32(65)]),
            CallMatch::Values
        );
        let other: [&[Arg<'_>]; 5] = [
            &[ptr(0x1000, 8), Arg::U32(64)], // another device's pointer
            &[ptr(0x1000, 7), Arg::U64(64)], // another size
            &[ptr(0x1000, 7)],               // one fewer
            &[ptr(0x1000, 7), Arg::U32(64), Arg::U32(1)],
            &[],
        ];
        for args in other {
            assert_eq!(cmp(&c, 5, key, one, args), CallMatch::Other, "{args:?}");
        }
        // Another record, kernel or shape.
        assert_eq!(cmp(&c, 6, key, one, &made), CallMatch::Other);
        let k2 = LaunchKey { kernel: 1, ..key };
        assert_eq!(cmp(&c, 5, k2, one, &made), CallMatch::Other);
        assert_eq!(cmp(&c, 5, key, [2, 1, 1], &made), CallMatch::Other);
        // Nothing remembered.
        assert_eq!(cmp(&Call::default(), 0, key, one, &made), CallMatch::Other);
    }

    #[test]
    fn differing_runs_cover_exactly_the_changed_words() {
        let old = vec![0u8; 40];
        let mut new = old.clone();
        assert_eq!(differing_runs(&old, &new).count(), 0);
        new[0] = 1; // word 0
        new[9] = 1; // word 1, adjacent: merged
        new[33] = 1; // word 4
        let runs: Vec<_> = differing_runs(&old, &new).collect();
        assert_eq!(runs, vec![(0, 16), (32, 40)]);
        // A tail shorter than a word.
        let old = vec![0u8; 13];
        let mut new = old.clone();
        new[12] = 7;
        assert_eq!(
            differing_runs(&old, &new).collect::<Vec<_>>(),
            vec![(8, 13)]
        );
        // Writing the runs turns old into new.
        let mut patched = old.clone();
        for (a, b) in differing_runs(&old, &new) {
            patched[a..b].copy_from_slice(&new[a..b]);
        }
        assert_eq!(patched, new);
    }
}
