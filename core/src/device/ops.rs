//! The device's state ([`Inner`]) and submission: the plain path's core. Around it, in files
//! of their own: bring-up and teardown (`open.rs`), waits, the doorbell watchdog, fault
//! reports and recovery (`wait.rs`), memory slots and module loads (`slots.rs`), copies and
//! cross-device ordering (`transfer.rs`), launches (`launch.rs`), the copy kernel (`copy.rs`).
//! They import from here, never the reverse. The latency machinery (`device/fast/`) owns one
//! field here, [`Inner::fast`], and is reached from `launch.rs` at a few named points; what it
//! leaves for the plain path to honour is data on the channel ([`Chan::own_wait`],
//! [`Chan::unwritten`], the arena's spare allocation).

use alloc::string::String;
use alloc::vec::Vec;

use zerocopy::IntoBytes;

use super::backend::{Backend, GpuMemory, RmEvent, RmObjects};
use super::chan::{ARENA_ALIGN, Chan};
use super::error::{ChannelKind, DeviceError};
use super::fast::Fast;
use super::qmd::QmdPatch;
use super::{Classes, DeviceInfo, DeviceOptions};
use crate::channel::gpfifo::{GpEntry, GpFifo, GpFifoError};
use crate::channel::pushbuf::PushBuffer;
use crate::rm::{Handle, RmAbi};

/// Most words a submission's own methods take (acquire + launch + release + local memory).
const MAX_PB_WORDS: usize = 64;
/// Most words [`Inner::submit_raw`] takes.
const MAX_RAW_WORDS: usize = 1024;

/// A memory slot (user buffer or module image).
pub(crate) struct Slot<M> {
    pub(super) generation: u32,
    pub(super) mem: Option<M>,
    /// Kernel names, for modules (fault reports name the last kernel).
    pub(super) kernels: Vec<String>,
}

pub(crate) struct Inner<B: Backend> {
    pub(super) backend: B,
    pub(super) objs: RmObjects,
    pub(super) abi: RmAbi,
    pub(super) classes: Classes,
    pub(super) usermode: B::Usermode,
    pub(super) tsg: Handle,
    pub(super) debugger: Option<Handle>,
    /// Two channels per stream: stream `s` has compute channel `2 * s` and copy channel
    /// `2 * s + 1`. The latency machinery (`device/fast/`) works on stream 0's alone.
    pub(super) chans: Vec<Chan<B::Memory>>,
    /// The stream the current call works on ([`super::Device::with_stream`]).
    pub(super) cur: usize,
    pub(super) sem: B::Memory,
    pub(super) staging: B::Memory,
    /// Copy channel and timeline value of the last copy that used each staging half.
    pub(super) staging_last: [(usize, u64); 2],
    pub(super) slots: Vec<Slot<B::Memory>>,
    /// Local-memory buffer and the bytes per thread it was sized for.
    pub(super) local: Option<(B::Memory, u64, u32)>,
    /// Constant bank 0 of the launch being built (reused: the launch path allocates nothing).
    pub(super) scratch: Vec<u8>,
    pub(super) qmd_patch: QmdPatch,
    /// The last kernel launched (module slot, kernel index), which fault reports name.
    pub(super) last_kernel: Option<(usize, usize)>,
    pub(super) dead: Option<String>,
    /// Re-creating the channels now (a fault meanwhile must not recurse into recovery).
    pub(super) recovering: bool,
    /// The copy kernel, once installed (`device/copy.rs`).
    pub(super) copy_kernel: Option<super::copy::CopyKernel>,
    /// Doorbells rung again by waits that saw no progress.
    pub(super) doorbell_retries: DoorbellRetries,
    /// Events taken from the backend while waiting (an RC ends a wait), kept for the report.
    pub(super) pending_events: Vec<RmEvent>,
    /// Compute submissions that may wait for the doorbell: [`super::Tuning::deferred_submits`],
    /// or during a launch what automatic deferral gives it (`device/fast/flusher.rs`).
    pub(super) defer: u32,
    /// The latency machinery's state (`device/fast/`).
    pub(super) fast: Fast,
    /// Timed events' GPU times (`device/stamp.rs`): the memory, once the first is recorded,
    /// and the last sequence number given out.
    pub(super) stamps: Option<B::Memory>,
    pub(super) stamp_seq: u64,
}

/// Doorbells rung again by waits that saw no progress ([`super::DeviceStats`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct DoorbellRetries {
    /// Every doorbell rung again.
    pub all: u64,
    /// Those rung for a channel whose published entries the host had not all fetched (USERD
    /// `GPGet` behind `GPPut`, or unreadable): the mark of a lost doorbell, or of a channel
    /// not scheduled while another process held the GPU. The others were rung while the host
    /// had fetched everything and the engines were still at work (a long copy or kernel):
    /// a precaution, in case the channel lost its place in the schedule.
    pub unfetched: u64,
}

pub(super) const COMPUTE: usize = 0;
pub(super) const COPY: usize = 1;

/// A channel's ring of `entries` for work-submit token `token`, ordered and retried as `opts`
/// say.
pub(super) fn channel_fifo(
    opts: &DeviceOptions,
    entries: u32,
    token: u32,
) -> Result<GpFifo, GpFifoError> {
    Ok(GpFifo::new(entries, token)?
        .with_fence(opts.tuning.doorbell_fence)
        .with_doorbell_retry(opts.tuning.doorbell_retry))
}

/// The channel of the same stream as channel `ci`, of the other kind.
pub(super) fn other(ci: usize) -> usize {
    ci ^ 1
}

/// The index in [`Inner::chans`] of stream `stream`'s channel of `kind`.
pub(super) fn chan_index(stream: usize, kind: ChannelKind) -> usize {
    2 * stream
        + match kind {
            ChannelKind::Compute => COMPUTE,
            ChannelKind::Copy => COPY,
        }
}

impl<B: Backend> Inner<B> {
    pub(super) fn check_alive(&self) -> Result<(), DeviceError> {
        match &self.dead {
            Some(why) => Err(DeviceError::Dead(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether the other channel's work that channel `ci`'s next submission must follow is
    /// done already (nothing newer than `ci` waited for, or the timeline reached it), so the
    /// submission needs no acquire. Records it when the timeline says so.
    pub(super) fn other_done(&mut self, ci: usize) -> bool {
        let o = other(ci);
        let theirs = self.chans[o].submitted;
        if theirs > self.chans[ci].synced_other {
            match self.sem.read_u64(self.chans[o].sem_offset) {
                Ok(done) if done >= theirs => self.chans[ci].synced_other = theirs,
                _ => return false,
            }
        }
        true
    }

    pub(super) fn completed(&self, ci: usize) -> Result<u64, DeviceError> {
        Ok(self.sem.read_u64(self.chans[ci].sem_offset)?)
    }

    /// Submits one pushbuffer on channel `ci`. `extra` bytes of command memory (256-aligned)
    /// precede the pushbuffer for `build` to fill (constant bank 0, QMD): `build` gets the
    /// writer, the GPU VA and (command memory, offset) of that space, the timeline value, and
    /// the command-memory offset where its methods will start (to patch one before the
    /// doorbell), and returns whether its
    /// methods release the timeline themselves (a QMD release); otherwise a release is
    /// appended. Before `build`'s methods goes a wait for the other channel's work, if any is
    /// newer than what this channel waited for. Returns the timeline value.
    pub(super) fn submit<F>(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        ci: usize,
        extra: u64,
        build: F,
    ) -> Result<u64, DeviceError>
    where
        F: FnOnce(
            &mut PushBuffer<'_>,
            u64,
            (&B::Memory, u64, u64, u64),
        ) -> Result<bool, DeviceError>,
    {
        self.submit_with(info, opts, ci, extra, &[], build)
    }

    /// [`Inner::submit`] with `raw` method words between the cross-channel wait and `build`'s
    /// methods.
    fn submit_with<F>(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        ci: usize,
        extra: u64,
        raw: &[u32],
        build: F,
    ) -> Result<u64, DeviceError>
    where
        F: FnOnce(
            &mut PushBuffer<'_>,
            u64,
            (&B::Memory, u64, u64, u64),
        ) -> Result<bool, DeviceError>,
    {
        let value = self.chans[ci].submitted + 1;
        let extra = extra.next_multiple_of(ARENA_ALIGN);
        let total = extra + ((2 * MAX_PB_WORDS + raw.len()) * 4) as u64;
        let off = self.arena_alloc(info, opts, ci, total, value)?;
        let o = other(ci);
        let other_sub = self.chans[o].submitted;
        let other_sem = self.sem.gpu_va() + self.chans[o].sem_offset;
        let own_sem = self.sem.gpu_va() + self.chans[ci].sem_offset;
        let need_acquire = other_sub > self.chans[ci].synced_other;
        let own_after = self.own_wait(ci);
        if need_acquire {
            // The GPU-side wait below needs the other channel's work started.
            self.kick(o)?;
        }
        let mut head_words = [0u32; MAX_PB_WORDS];
        let mut head = PushBuffer::new(&mut head_words);
        let mut tail_words = [0u32; MAX_PB_WORDS];
        let mut tail = PushBuffer::new(&mut tail_words);
        let cmds_va = self.chans[ci].cmds.gpu_va();
        let built = (|| -> Result<(), DeviceError> {
            if need_acquire {
                head.host_acquire64_geq(other_sem, other_sub)?;
            }
            if let Some(v) = own_after {
                head.host_acquire64_geq(own_sem, v)?;
            }
            let methods_off = off + extra + ((head.len() + raw.len()) * 4) as u64;
            let released = build(
                &mut tail,
                cmds_va + off,
                (&self.chans[ci].cmds, off, value, methods_off),
            )?;
            if !released {
                match self.chans[ci].kind {
                    ChannelKind::Compute => tail.host_release64(own_sem, value, true, true)?,
                    ChannelKind::Copy => {
                        tail.ce_release_on(own_sem, value, true, info.chip.ce_semaphore64())?
                    }
                }
            }
            Ok(())
        })();
        let fc = self.fast_ci();
        let c = &mut self.chans[ci];
        if let Err(e) = built {
            c.arena.cancel_last();
            return Err(e);
        }
        let pb_off = off + extra;
        let defer = if ci == fc {
            self.defer
        } else {
            opts.tuning.deferred_submits
        };
        let r = (|| -> Result<(), DeviceError> {
            let mut at = pb_off;
            for part in [head.words(), raw, tail.words()] {
                c.cmds.write(at, part.as_bytes())?;
                at += (part.len() * 4) as u64;
            }
            let len = (head.len() + raw.len() + tail.len()) as u32;
            let entry = GpEntry::new(cmds_va + pb_off, len)?;
            c.queue(
                &self.usermode,
                self.backend.clock(),
                opts.timeout,
                defer,
                entry,
            )
        })();
        if let Err(e) = r {
            c.arena.cancel_last();
            return Err(e);
        }
        c.submitted = value;
        if need_acquire {
            c.synced_other = other_sub;
        }
        c.own_wait = None;
        c.own_waits += u64::from(own_after.is_some());
        Ok(value)
    }

    /// [`Chan::own_wait`] of channel `ci`, unless the timeline has reached it (a wait saw it,
    /// or the semaphore says so).
    pub(super) fn own_wait(&self, ci: usize) -> Option<u64> {
        let c = &self.chans[ci];
        let v = c.own_wait?;
        let done = c.seen >= v || self.sem.read_u64(c.sem_offset).is_ok_and(|r| r >= v);
        (!done).then_some(v)
    }

    /// Space in channel `ci`'s command arena without waiting: what is free, else what is free
    /// once the allocations of completed submissions are given back. The timeline is read only
    /// when the arena looks full: a read of a line the GPU has just written is a cache miss the
    /// launch path need not pay every time.
    pub(super) fn arena_alloc_now(
        &mut self,
        ci: usize,
        n: u64,
        value: u64,
    ) -> Result<Option<u64>, DeviceError> {
        if let Some(off) = self.chans[ci].arena.alloc(n, value) {
            return Ok(Some(off));
        }
        let done = self.completed(ci)?;
        self.chans[ci].arena.retire(done);
        Ok(self.chans[ci].arena.alloc(n, value))
    }

    /// Space in channel `ci`'s command arena, waiting for old submissions if it is full.
    fn arena_alloc(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        ci: usize,
        n: u64,
        value: u64,
    ) -> Result<u64, DeviceError> {
        loop {
            if let Some(off) = self.arena_alloc_now(ci, n, value)? {
                return Ok(off);
            }
            // Memory taken ahead of the submission it was for (a launch written ahead) has
            // this very submission's timeline value, which no wait can reach: give it back.
            if self.chans[ci].arena.reclaim_spare() {
                continue;
            }
            let Some(oldest) = self.chans[ci].arena.oldest_value() else {
                return Err(DeviceError::BadRange(alloc::format!(
                    "a {n}-byte submission does not fit the {}-byte command memory; open the \
                     device with a larger DeviceOptions::command_bytes",
                    self.chans[ci].cmds.size()
                )));
            };
            self.wait(info, opts, ci, oldest, "command memory to free up")?;
        }
    }

    /// Rings channel `ci`'s doorbell for entries queued without one
    /// ([`super::Tuning::deferred_submits`], or held by automatic deferral).
    pub(super) fn kick(&mut self, ci: usize) -> Result<(), DeviceError> {
        let c = &mut self.chans[ci];
        if c.fifo.unpublished() == 0 {
            return Ok(());
        }
        c.publish(&self.usermode)
    }

    /// Rings both doorbells for everything queued.
    pub(super) fn flush(&mut self) -> Result<(), DeviceError> {
        self.check_alive()?;
        self.kick_all()
    }

    /// Rings every channel's doorbell for everything queued.
    pub(super) fn kick_all(&mut self) -> Result<(), DeviceError> {
        (0..self.chans.len()).try_for_each(|ci| self.kick(ci))
    }

    /// Rings the doorbells of stream `stream`'s channels for everything queued.
    pub(super) fn kick_stream(&mut self, stream: usize) -> Result<(), DeviceError> {
        let ci = chan_index(stream, ChannelKind::Compute);
        self.kick(ci)?;
        self.kick(ci + 1)
    }

    /// Stream [`Inner::cur`]'s compute channel.
    pub(super) fn compute_ci(&self) -> usize {
        chan_index(self.cur, ChannelKind::Compute)
    }

    /// Stream [`Inner::cur`]'s copy channel.
    pub(super) fn copy_ci(&self) -> usize {
        chan_index(self.cur, ChannelKind::Copy)
    }

    pub(super) fn submit_raw(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        channel: ChannelKind,
        words: &[u32],
    ) -> Result<u64, DeviceError> {
        self.check_alive()?;
        if words.len() > MAX_RAW_WORDS {
            return Err(DeviceError::BadRange(alloc::format!(
                "{} raw words; at most {MAX_RAW_WORDS} per submission",
                words.len()
            )));
        }
        let ci = chan_index(self.cur, channel);
        self.submit_with(info, opts, ci, 0, words, |_, _, _| Ok(false))
    }

    /// A raw acquire on the compute channel (tests, tools).
    pub(super) fn submit_raw_acquire(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        addr: u64,
        value: u64,
    ) -> Result<(), DeviceError> {
        self.check_alive()?;
        self.submit(info, opts, self.compute_ci(), 0, |pb, _, _| {
            pb.host_acquire64_geq(addr, value)?;
            Ok(false)
        })
        .map(|_| ())
    }

    // ------------------------------------------------------------------------------------------
    // Peers (see `peer.rs`): what another device needs to order its work against this one.

    /// Timeline values submitted on stream `stream`'s compute and copy channels.
    pub(super) fn submitted(&self, stream: usize) -> [u64; 2] {
        let ci = chan_index(stream, ChannelKind::Compute);
        [self.chans[ci].submitted, self.chans[ci + 1].submitted]
    }

    /// Byte offsets of stream `stream`'s compute and copy timelines in the semaphore page.
    pub(super) fn sem_offsets(&self, stream: usize) -> [u64; 2] {
        let ci = chan_index(stream, ChannelKind::Compute);
        [self.chans[ci].sem_offset, self.chans[ci + 1].sem_offset]
    }

    /// Code was loaded since stream [`Inner::cur`]'s last launch: the next one invalidates
    /// the shader caches.
    pub(super) fn caches_dirty(&self) -> bool {
        self.chans[self.compute_ci()].caches_dirty
    }

    /// Stream [`Inner::cur`]'s launch invalidated the shader caches.
    pub(super) fn caches_invalidated(&mut self) {
        let ci = self.compute_ci();
        self.chans[ci].caches_dirty = false;
    }
}
