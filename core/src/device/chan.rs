//! One channel of the device: ring, USERD, error notifier, command arena, timeline.

use alloc::boxed::Box;
use alloc::collections::VecDeque;

use super::backend::GpuMemory;
use super::error::{ChannelKind, DeviceError};
use crate::channel::gpfifo::{GpEntry, GpFifo, RingMemory, USERD_GP_GET, USERD_GP_PUT};
use crate::channel::qmd::Qmd;
use crate::hal::HalError;
use crate::rm::Handle;

/// Alignment of every arena allocation (QMDs and constant banks need 256).
pub(super) const ARENA_ALIGN: u64 = 256;

/// A ring allocator over a channel's command memory. Each allocation is tied to the timeline
/// value of the submission that uses it and is reused once that value is reached.
#[derive(Debug)]
pub(super) struct Arena {
    size: u64,
    head: u64,
    live: VecDeque<(u64, u64, u64)>,
    /// `(start, value)` of an allocation made ahead of the submission it is for
    /// ([`Arena::alloc_spare`]), while it is the newest and unclaimed.
    spare: Option<(u64, u64)>,
}

impl Arena {
    pub(super) fn new(size: u64) -> Self {
        Arena {
            size,
            head: 0,
            live: VecDeque::with_capacity(64),
            spare: None,
        }
    }

    /// Forgets every allocation (after the channel was re-created).
    pub(super) fn reset(&mut self) {
        self.head = 0;
        self.live.clear();
        self.spare = None;
    }

    /// Releases allocations whose submission reached the timeline.
    pub(super) fn retire(&mut self, completed: u64) {
        while let Some(&(_, _, v)) = self.live.front() {
            if v > completed {
                break;
            }
            self.live.pop_front();
        }
        if self.spare.is_some_and(|(_, v)| v <= completed) {
            self.spare = None;
        }
        if self.live.is_empty() {
            self.head = 0;
        }
    }

    /// Takes back the newest allocation (its submission was not made).
    pub(super) fn cancel_last(&mut self) {
        if let Some((start, _, value)) = self.live.pop_back() {
            self.head = start;
            if self.spare == Some((start, value)) {
                self.spare = None;
            }
        }
        if self.live.is_empty() {
            self.head = 0;
        }
    }

    /// [`Arena::alloc`] for a submission not made yet (a launch written ahead of its call,
    /// `device/fast/ahead.rs`): its value can be reached only by that submission, so when the
    /// arena is full, [`Arena::reclaim_spare`] gives it back instead of waiting for it.
    pub(super) fn alloc_spare(&mut self, n: u64, value: u64) -> Option<u64> {
        let start = self.alloc(n, value)?;
        self.spare = Some((start, value));
        Some(start)
    }

    /// Whether the allocation at `start` for `value` is still the unclaimed spare one.
    pub(super) fn is_spare(&self, start: u64, value: u64) -> bool {
        self.spare == Some((start, value))
    }

    /// The spare allocation's submission is made: it is an ordinary allocation from now on.
    pub(super) fn claim_spare(&mut self) {
        self.spare = None;
    }

    /// Gives the spare allocation back if it is the newest. Returns whether it did.
    pub(super) fn reclaim_spare(&mut self) -> bool {
        let Some((start, value)) = self.spare.take() else {
            return false;
        };
        if self
            .live
            .back()
            .is_some_and(|&(s, _, v)| (s, v) == (start, value))
        {
            self.cancel_last();
            return true;
        }
        false
    }

    /// The timeline value that must be reached before the oldest allocation can be reused.
    pub(super) fn oldest_value(&self) -> Option<u64> {
        self.live.front().map(|&(_, _, v)| v)
    }

    /// Allocates `n` bytes for the submission with timeline value `value`; `None` if there is
    /// no room until older submissions complete.
    pub(super) fn alloc(&mut self, n: u64, value: u64) -> Option<u64> {
        let n = n.checked_next_multiple_of(ARENA_ALIGN)?;
        if n > self.size {
            return None;
        }
        let start = match self.live.front() {
            None => 0,
            Some(&(tail, _, _)) => {
                let head = self.head;
                if head > tail || (head == tail && self.live.is_empty()) {
                    if head + n <= self.size {
                        head
                    } else if n <= tail {
                        0
                    } else {
                        return None;
                    }
                } else if head + n <= tail {
                    head
                } else {
                    return None;
                }
            }
        };
        self.head = start + n;
        self.live.push_back((start, start + n, value));
        Some(start)
    }
}

/// A channel and everything it owns.
pub(super) struct Chan<M: GpuMemory> {
    pub kind: ChannelKind,
    pub handle: Handle,
    pub object: Handle,
    /// Engine class bound on the channel.
    pub class: u32,
    /// GPFIFO ring, then USERD at `userd_offset`.
    pub ring: M,
    pub userd_offset: u64,
    /// Error notifier (`NvNotification[3]`).
    pub notifier: M,
    /// Pushbuffers, QMDs, constant banks.
    pub cmds: M,
    pub arena: Arena,
    pub fifo: GpFifo,
    /// Last timeline value submitted.
    pub submitted: u64,
    /// Byte offset of the timeline semaphore in the device's semaphore page.
    pub sem_offset: u64,
    /// The other channel's timeline value this channel has already waited for.
    pub synced_other: u64,
    /// Highest timeline value a wait has seen reached (the timeline must never read lower).
    pub seen: u64,
    /// Compute channels: code was loaded since this channel's last launch, so its next one
    /// invalidates the shader caches.
    pub caches_dirty: bool,
    /// A QMD not written to command memory yet (at this offset), written before anything is
    /// published or pushed: a chain's last one, which the launch after it may still change
    /// (`device/fast/chain.rs`), so it is written once, in its final form.
    pub unwritten: Option<(u64, Box<Qmd>)>,
    /// The timeline value before the oldest entry queued and not yet published (`None`: none
    /// waits): once the timeline reaches it, the GPU has run everything published and waits
    /// for held work (`device/fast/flusher.rs` publishes it then).
    pub held_after: Option<u64>,
    /// A value of this channel's own timeline that its next submission first waits for (a
    /// host semaphore acquire), unless the timeline has reached it: the end of work the engine
    /// schedules by itself (chained QMDs, `device/fast/chain.rs`), which `WAIT_FOR_IDLE` is not
    /// documented to wait for.
    pub own_wait: Option<u64>,
    /// Submissions that began with the acquire of [`Chan::own_wait`].
    pub own_waits: u64,
}

impl<M: GpuMemory> Chan<M> {
    /// Publishes the entries pushed since the last kick: `GPPut` and the doorbell
    /// ([`GpFifo::kick`]).
    pub fn publish<U: crate::hal::Mmio + ?Sized>(
        &mut self,
        usermode: &U,
    ) -> Result<(), DeviceError> {
        self.write_unwritten()?;
        let view = RingView::of(&self.ring, self.userd_offset);
        self.fifo.kick(&view, usermode)?;
        self.held_after = None;
        Ok(())
    }

    /// Appends `entry` to the ring without publishing it ([`GpFifo::push`]: waits up to
    /// `timeout` for a free slot).
    pub fn push<U: crate::hal::Mmio + ?Sized, C: crate::hal::Clock + ?Sized>(
        &mut self,
        usermode: &U,
        clock: &C,
        timeout: core::time::Duration,
        entry: GpEntry,
    ) -> Result<(), DeviceError> {
        // A full ring publishes what is queued while it waits.
        self.write_unwritten()?;
        let view = RingView::of(&self.ring, self.userd_offset);
        self.fifo.push(&view, usermode, clock, timeout, entry)?;
        Ok(())
    }

    /// Writes [`Chan::unwritten`] (the GPU may be about to see the chain).
    pub fn write_unwritten(&mut self) -> Result<(), HalError> {
        if let Some((off, q)) = &self.unwritten {
            self.cmds.write(*off, q.as_bytes())?;
            self.unwritten = None;
        }
        Ok(())
    }

    /// Queues `entry` in the ring and publishes it, unless `defer` entries may still wait for a
    /// doorbell ([`super::Tuning::deferred_submits`], or the launch's automatic deferral,
    /// `device/fast/flusher.rs`). `timeout` bounds the wait for a free slot.
    pub fn queue<U: crate::hal::Mmio + ?Sized, C: crate::hal::Clock + ?Sized>(
        &mut self,
        usermode: &U,
        clock: &C,
        timeout: core::time::Duration,
        defer: u32,
        entry: GpEntry,
    ) -> Result<(), DeviceError> {
        self.push(usermode, clock, timeout, entry)?;
        if self.fifo.unpublished() == 1 {
            self.held_after = Some(self.submitted);
        }
        if self.fifo.unpublished() > defer {
            self.publish(usermode)?;
        }
        Ok(())
    }

    /// Whether `n` more entries fit in the ring without waiting ([`GpFifo::has_room`]).
    pub fn has_room(&mut self, n: u32) -> Result<bool, DeviceError> {
        let view = RingView::of(&self.ring, self.userd_offset);
        Ok(self.fifo.has_room(&view, n)?)
    }

    /// Writes `entry` into the ring's next slot ahead of the push that will publish it
    /// ([`GpFifo::stage`]); nothing if the ring is full.
    pub fn stage(&mut self, entry: GpEntry) -> Result<bool, DeviceError> {
        let view = RingView::of(&self.ring, self.userd_offset);
        Ok(self.fifo.stage(&view, entry)?)
    }

    /// USERD `GPGet`: how far the host has fetched the ring.
    pub fn fifo_get(&self) -> Result<u32, HalError> {
        self.ring.read_u32(self.userd_offset + USERD_GP_GET)
    }
}

/// The ring and USERD of a channel as [`RingMemory`].
struct RingView<'a, M: GpuMemory> {
    mem: &'a M,
    userd: u64,
}

impl<'a, M: GpuMemory> RingView<'a, M> {
    /// The ring in `mem`, its USERD at `userd`.
    fn of(mem: &'a M, userd: u64) -> Self {
        RingView { mem, userd }
    }
}

impl<M: GpuMemory> RingMemory for RingView<'_, M> {
    fn write_entry(&self, index: u32, entry: u64) -> Result<(), HalError> {
        self.mem.write_u64(index as u64 * 8, entry)
    }
    fn read_gp_get(&self) -> Result<u32, HalError> {
        self.mem.read_u32(self.userd + USERD_GP_GET)
    }
    fn write_gp_put(&self, put: u32) -> Result<(), HalError> {
        self.mem.write_u32(self.userd + USERD_GP_PUT, put)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_reuses_space_only_after_completion() {
        let mut a = Arena::new(1024);
        assert_eq!(a.alloc(300, 1), Some(0)); // 512 bytes
        assert_eq!(a.alloc(256, 2), Some(512));
        assert_eq!(a.alloc(256, 3), Some(768));
        assert_eq!(a.alloc(1, 4), None, "full until something completes");
        a.retire(1);
        assert_eq!(a.alloc(600, 4), None, "only 512 bytes free at the front");
        assert_eq!(a.alloc(512, 4), Some(0));
        assert_eq!(a.alloc(1, 5), None);
        a.retire(3);
        assert_eq!(a.oldest_value(), Some(4));
        assert_eq!(a.alloc(256, 5), Some(512));
        a.retire(5);
        assert_eq!(a.oldest_value(), None);
        assert_eq!(a.alloc(1024, 6), Some(0));
        assert_eq!(a.alloc(2048, 7), None);
    }

    #[test]
    fn a_spare_allocation_is_given_back_only_while_it_is_the_newest_and_unclaimed() {
        let mut a = Arena::new(1024);
        assert_eq!(a.alloc(256, 1), Some(0));
        assert_eq!(a.alloc_spare(256, 2), Some(256));
        assert!(a.is_spare(256, 2));
        assert!(a.reclaim_spare());
        assert!(!a.is_spare(256, 2));
        assert_eq!(a.alloc(256, 2), Some(256), "its room is free again");
        // Not the newest: kept until its value is reached, like any allocation.
        assert_eq!(a.alloc_spare(256, 3), Some(512));
        assert_eq!(a.alloc(256, 3), Some(768));
        assert!(!a.reclaim_spare());
        assert!(!a.is_spare(512, 3));
        assert_eq!(a.alloc(1, 4), None);
        a.retire(3);
        assert_eq!(a.oldest_value(), None);
        // Claimed by its submission: an ordinary allocation.
        let mut a = Arena::new(1024);
        assert_eq!(a.alloc_spare(256, 1), Some(0));
        a.claim_spare();
        assert!(!a.reclaim_spare());
        assert_eq!(a.oldest_value(), Some(1));
        // Cancelled or retired: no longer spare.
        assert_eq!(a.alloc_spare(256, 2), Some(256));
        a.cancel_last();
        assert!(!a.is_spare(256, 2));
        assert_eq!(a.alloc_spare(256, 2), Some(256));
        a.retire(2);
        assert!(!a.is_spare(256, 2));
    }
}
