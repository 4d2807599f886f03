//! Timings of the primitives a submission is made of, for `nvbare bench --probe`: where the
//! CPU's share of a launch goes on a given machine (write-combined stores to command memory, the
//! store barrier, the uncached doorbell, reading the timeline semaphore).
//!
//! Everything runs on the compute channel with no work outstanding: command memory at offset 0
//! is free then (the arena is empty), and a doorbell without new entries makes the GPU look at
//! `GPPut`, find nothing new and carry on.

use core::sync::atomic::{Ordering, fence};

use super::backend::{Backend, GpuMemory};
use super::error::ChannelKind;
use super::ops::{Inner, chan_index};
use super::{Device, DeviceError, DeviceInfo, DeviceOptions};
use crate::channel::gpfifo::USERD_GP_PUT;
use crate::hal::{Clock, Mmio};
use crate::regs::RelativeRegister;
use crate::regs::usermode::{
    MappedUsermode, NVC361_NOTIFY_CHANNEL_PENDING, NVC361_TIME_0, NVC361_TIME_1,
};

/// Mean cost of each primitive, nanoseconds per operation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SubmitProbe {
    /// Operations timed per primitive.
    pub iterations: u32,
    /// Reading the compute timeline (64-bit, host memory) while the GPU is idle.
    pub sem_read_ns: f64,
    /// Writing 8 bytes of command memory, then the usermode window's store barrier.
    pub write8_barrier_ns: f64,
    /// Writing 8 bytes of command memory, then a full `SeqCst` fence.
    pub write8_full_fence_ns: f64,
    /// Writing 1 KiB of command memory, then the store barrier.
    pub write1k_barrier_ns: f64,
    /// Writing 1 KiB of command memory with no fence (what the stores alone cost to issue).
    pub write1k_ns: f64,
    /// Ringing the compute channel's doorbell with nothing new in its ring.
    pub doorbell_ns: f64,
    /// Rewriting `GPPut` in USERD (the value it has) and the store barrier: the ring's own
    /// mapping, which a launch writes besides command memory.
    pub userd_write_barrier_ns: f64,
    /// Reading the GPU timer (`NVC361_TIME_0`) from the usermode window.
    pub timer_read_ns: f64,
}

impl<B: Backend> Inner<B> {
    pub(super) fn probe_submit(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        n: u32,
    ) -> Result<SubmitProbe, DeviceError> {
        // The primitives run on an idle channel with an empty arena: not behind an armed
        // acquire.
        self.disarm(info, opts)?;
        self.synchronize(info, opts)?;
        self.drop_written_ahead();
        let ci = 0;
        let done = self.sem.read_u64(self.chans[ci].sem_offset)?;
        self.chans[ci].arena.retire(done);
        if self.chans[ci].arena.oldest_value().is_some() {
            return Err(DeviceError::BadRange(
                "command memory still in use after a synchronize".into(),
            ));
        }
        let n = n.max(1);
        let clock = self.backend.clock();
        let cmds = &self.chans[ci].cmds;
        let sem = &self.sem;
        let sem_offset = self.chans[ci].sem_offset;
        let um = &self.usermode;
        let token = self.chans[ci].fifo.token();
        let block = [0x5au8; 1024];
        let per_op = |t0: core::time::Duration| {
            clock.now().saturating_sub(t0).as_nanos() as f64 / f64::from(n)
        };

        let t = clock.now();
        let mut sum = 0u64;
        for _ in 0..n {
            sum = sum.wrapping_add(sem.read_u64(sem_offset)?);
        }
        let sem_read_ns = per_op(t);
        core::hint::black_box(sum);

        let t = clock.now();
        for i in 0..n {
            cmds.write_u64(u64::from(i % 128) * 8, u64::from(i))?;
            um.store_barrier();
        }
        let write8_barrier_ns = per_op(t);

        let t = clock.now();
        for i in 0..n {
            cmds.write_u64(u64::from(i % 128) * 8, u64::from(i))?;
            fence(Ordering::SeqCst);
        }
        let write8_full_fence_ns = per_op(t);

        let t = clock.now();
        for _ in 0..n {
            cmds.write(0, &block)?;
            um.store_barrier();
        }
        let write1k_barrier_ns = per_op(t);

        let t = clock.now();
        for _ in 0..n {
            cmds.write(0, &block)?;
        }
        um.store_barrier();
        let write1k_ns = per_op(t);

        let ring = &self.chans[ci].ring;
        let put_at = self.chans[ci].userd_offset + USERD_GP_PUT;
        let put = self.chans[ci].fifo.put();
        if self.chans[ci].fifo.unpublished() != 0 {
            return Err(DeviceError::BadRange(
                "ring entries not yet published after a synchronize".into(),
            ));
        }
        let t = clock.now();
        for _ in 0..n {
            ring.write_u32(put_at, put)?;
            um.store_barrier();
        }
        let userd_write_barrier_ns = per_op(t);

        let bell = NVC361_NOTIFY_CHANNEL_PENDING::offset_of::<MappedUsermode>();
        let t = clock.now();
        for _ in 0..n {
            um.write32(bell, token);
        }
        let doorbell_ns = per_op(t);

        let timer = NVC361_TIME_0::offset_of::<MappedUsermode>();
        let t = clock.now();
        let mut sum = 0u32;
        for _ in 0..n {
            sum = sum.wrapping_add(um.read32(timer));
        }
        let timer_read_ns = per_op(t);
        core::hint::black_box(sum);

        Ok(SubmitProbe {
            iterations: n,
            sem_read_ns,
            write8_barrier_ns,
            write8_full_fence_ns,
            write1k_barrier_ns,
            write1k_ns,
            doorbell_ns,
            userd_write_barrier_ns,
            timer_read_ns,
        })
    }

    /// The GPU timer (ns), read TIME_1, TIME_0, TIME_1 until the high word is stable.
    pub(super) fn gpu_time_ns(&self) -> u64 {
        let um = &self.usermode;
        let hi_at = NVC361_TIME_1::offset_of::<MappedUsermode>();
        let lo_at = NVC361_TIME_0::offset_of::<MappedUsermode>();
        let mut hi = um.read32(hi_at);
        for _ in 0..4 {
            let lo = um.read32(lo_at);
            let hi2 = um.read32(hi_at);
            if hi2 == hi {
                return (u64::from(hi) << 32) | u64::from(lo);
            }
            hi = hi2;
        }
        u64::from(hi) << 32
    }

    /// The timestamp the GPU wrote with the last release of channel `ci`'s timeline.
    pub(super) fn release_timestamp(&self, ci: usize) -> Result<u64, DeviceError> {
        Ok(self.sem.read_u64(self.chans[ci].sem_offset + 8)?)
    }
}

impl<B: Backend> Device<B> {
    /// Times the primitives of a submission, `n` times each (after waiting for all work). For
    /// benchmarks; see [`SubmitProbe`].
    pub fn probe_submit_path(&self, n: u32) -> Result<SubmitProbe, DeviceError> {
        self.inner()?.probe_submit(&self.info, &self.options, n)
    }

    /// The GPU's timer in nanoseconds (usermode `NVC361_TIME_0/1`; an uncached read across
    /// PCIe on hardware). Same time base as [`Device::release_timestamp`].
    pub fn gpu_time_ns(&self) -> Result<u64, DeviceError> {
        Ok(self.inner()?.gpu_time_ns())
    }

    /// The GPU timestamp of the last release of `channel`'s timeline semaphore (the launch's
    /// QMD release writes one; the copy engine's release too).
    pub fn release_timestamp(&self, channel: ChannelKind) -> Result<u64, DeviceError> {
        self.inner()?.release_timestamp(chan_index(channel))
    }
}
