//! Timed events: an event at which the GPU also notes the time it got there
//! ([`Device::record_timed_event`]), so that two of them measure the GPU time between them as
//! CUDA's `cuEventElapsedTime` does ([`Device::event_time_ns`]).
//!
//! Why the GPU's time: the host only learns that an event was reached when it looks, which
//! says nothing precise about when the kernels before it ended. The GPU's timer (`PTIMER`, in
//! ns, one clock for every engine) is what NVIDIA's own event times come from.
//!
//! How: a timed event is one more submission on its stream, after everything submitted before
//! it on the stream's compute and copy channels (the submission acquires the other channel's
//! newer work, as any does): a semaphore release with `RELEASE_TIMESTAMP` (16 bytes: the
//! payload, then the GPU time at +8) into a slot of its own in host memory. It goes on the
//! channel whose work is newest: on the compute channel the host's release waits for the
//! engine to idle first (`RELEASE_WFI`), so the time is when the grids before it ended; on
//! the copy channel the copy engine's release follows its copies (flushed). Slots are used in
//! turn ([`EVENT_STAMP_SLOTS`]); the payload is the event's sequence number, so a slot a later
//! event took is reported, never misread.
//!
//! The slot is cleared by the CPU before the submission, and a time is taken only once the
//! slot holds the event's number and a non-zero time: whether the release's two words become
//! visible together, in either order, or only after the stream's timeline release behind them
//! is not documented (docs/assumptions.md, "Channels"), so a reached event's slot is polled
//! for a moment before an incomplete one is an error.

use core::time::Duration;

use crate::hal::Clock;

use super::backend::{Backend, GpuMemory, Location, Purpose};
use super::ops::{Inner, chan_index};
use super::peer::Event;
use super::slots::alloc_mem;
use super::{ChannelKind, Device, DeviceError, DeviceInfo, DeviceOptions};

/// Timed events whose GPU time stays readable: an event's slot is taken again by the event
/// this many timed events later (on the same device).
pub const EVENT_STAMP_SLOTS: u64 = 4096;

/// Bytes per slot: a four-word semaphore (payload, GPU time).
const STAMP_BYTES: u64 = 16;

/// How long a reached event's slot may take to show its payload.
const STAMP_VISIBLE: Duration = Duration::from_millis(10);

/// The byte offset of event `seq`'s slot.
fn slot_offset(seq: u64) -> u64 {
    (seq % EVENT_STAMP_SLOTS) * STAMP_BYTES
}

impl<B: Backend> Inner<B> {
    /// The slots' memory, allocated (zeroed) at the first timed event.
    fn stamp_memory(&mut self) -> Result<&B::Memory, DeviceError> {
        let m = match self.stamps.take() {
            Some(m) => m,
            None => {
                let bytes = EVENT_STAMP_SLOTS * STAMP_BYTES;
                let m = alloc_mem(
                    &mut self.backend,
                    bytes,
                    Location::Host,
                    true,
                    Purpose::Notifier,
                )?;
                if let Err(e) = m.zero(0, bytes) {
                    let _ = self.backend.free_memory(m);
                    return Err(e.into());
                }
                m
            }
        };
        Ok(self.stamps.insert(m))
    }

    /// Submits the time-stamped release of the next timed event on stream [`Inner::cur`];
    /// returns its sequence number.
    fn record_stamp(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<u64, DeviceError> {
        let seq = self.stamp_seq + 1;
        let m = self.stamp_memory()?;
        // Cleared first, so that a time is taken only once both its words are the GPU's.
        m.write(slot_offset(seq), &[0; STAMP_BYTES as usize])?;
        let addr = m.gpu_va() + slot_offset(seq);
        let compute = chan_index(self.cur, ChannelKind::Compute);
        let copy = chan_index(self.cur, ChannelKind::Copy);
        let (cc, cp) = (&self.chans[compute], &self.chans[copy]);
        // The copy channel's work is the newest when it was ordered after all of the compute
        // channel's and the compute channel not after all of its.
        let on_copy = cp.submitted > cc.synced_other && cc.submitted <= cp.synced_other;
        let ci = if on_copy { copy } else { compute };
        let wide = info.chip.ce_semaphore64();
        self.submit(info, opts, ci, 0, |pb, _, _| {
            if on_copy {
                // The form of the channel's own timeline release (a 32-bit payload on copy
                // classes without a 64-bit one; the slot's check reads 32 bits either way).
                let payload = if wide { seq } else { seq & 0xffff_ffff };
                pb.ce_release_on(addr, payload, true, wide)?;
            } else {
                pb.host_release64(addr, seq, true, true)?;
            }
            Ok(false)
        })?;
        self.stamp_seq = seq;
        Ok(seq)
    }

    /// The GPU time of timed event `seq`, which the stream has reached.
    fn stamp_time(&self, opts: &DeviceOptions, seq: u64) -> Result<u64, DeviceError> {
        let reused = || {
            DeviceError::EventTime(alloc::format!(
                "{} timed events were recorded after it, and only the last {EVENT_STAMP_SLOTS} \
                 keep their time: read event times sooner",
                self.stamp_seq - seq
            ))
        };
        if self.stamp_seq >= seq + EVENT_STAMP_SLOTS {
            return Err(reused());
        }
        let Some(m) = &self.stamps else {
            return Err(DeviceError::EventTime(
                "the event is not from this device's timed events".into(),
            ));
        };
        let clock = self.backend.clock();
        let deadline = clock.now() + STAMP_VISIBLE.min(opts.timeout);
        loop {
            let mut slot = [0u8; STAMP_BYTES as usize];
            m.read(slot_offset(seq), &mut slot)?;
            let (payload, time) = slot.split_at(8);
            let payload = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
            let mut t = [0u8; 8];
            t.copy_from_slice(time);
            let time = u64::from_le_bytes(t);
            if payload == seq as u32 && time != 0 {
                return Ok(time);
            }
            if clock.now() >= deadline {
                return Err(DeviceError::EventTime(alloc::format!(
                    "the GPU reached the event but after {STAMP_VISIBLE:?} its time slot holds \
                     payload {payload:#x} (expected {:#x}) and time {time} (a lost semaphore \
                     write: report it)",
                    seq as u32
                )));
            }
            core::hint::spin_loop();
        }
    }
}

impl<B: Backend> Device<B> {
    /// [`Device::record_event`] at which the GPU also notes the time it gets there (one more
    /// submission on the stream: a time-stamped semaphore release, `device/stamp.rs`). Read
    /// the time with [`Device::event_time_ns`] once the event is reached.
    pub fn record_timed_event(&self) -> Result<Event, DeviceError> {
        let mut i = self.inner()?;
        i.check_alive()?;
        i.publish_held(&self.options)?;
        let stamp = i.record_stamp(&self.info, &self.options)?;
        Ok(Event {
            device: self.id,
            stream: i.cur as u32,
            values: i.submitted(i.cur),
            stamp,
        })
    }

    /// The GPU's time (ns of its timer) when it reached timed event `event`, or `None` while
    /// work before it still runs. The difference of two is the GPU time between them. Errors:
    /// an event of another device, one recorded without timing, or one whose slot
    /// [`EVENT_STAMP_SLOTS`] later timed events took ([`DeviceError::EventTime`]).
    pub fn event_time_ns(&self, event: &Event) -> Result<Option<u64>, DeviceError> {
        if event.device != self.id {
            return Err(DeviceError::ForeignObject(
                "event (recorded on another device)",
            ));
        }
        if event.stamp == 0 {
            return Err(DeviceError::EventTime(
                "it was recorded without timing: record it with Device::record_timed_event".into(),
            ));
        }
        if !self.event_done(event)? {
            return Ok(None);
        }
        self.inner()?
            .stamp_time(&self.options, event.stamp)
            .map(Some)
    }
}
