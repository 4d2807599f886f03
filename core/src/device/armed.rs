//! Pre-armed launches ([`DeviceOptions::armed_launches`]): the compute channel is given
//! submissions ahead of time whose only methods are a host semaphore acquire on a flag in
//! command memory and `SEND_PCAS` of a QMD in the same region. The host fetches them and
//! stops at the first acquire. A launch then writes constant bank 0 and the QMD into the
//! front region (or nothing, when arming already wrote the same ones there) and sets its
//! flag: no pushbuffer, no GP entry and no doorbell on the launch path, and the host, already
//! holding the methods, starts the launch as soon as the flag's write reaches video memory.
//!
//! When to arm: a wait after a launch arms one submission (the CPU is about to wait anyway,
//! and a program that launches and waits is likely to launch again). A stream of launches
//! with no wait in between arms a batch once the armed ones are used up, as many as the
//! stream has had launches since the last wait (doubling, up to [`MAX_BATCH`]), with one
//! doorbell for the batch. Arming writes the previous launch's QMD and constant bank 0 into
//! every region, so repeating a launch costs one 8-byte store and a store barrier, and a call
//! that repeats the call before skips building its launch too, as launches written ahead do
//! ([`Inner::fire_armed_repeat`]). That shortcut was taken out once: beside another process
//! two launches of a burst released their timeline values out of order on the H200, because
//! their grids overlapped; since every launch waits for the one before
//! ([`crate::channel::pushbuf::PushBuffer::compute_launch`]) it is back (docs/benchmarks.md,
//! "The hardware checks with stream order").
//!
//! Any other compute-channel submission must not queue behind an acquire, so it first
//! consumes every armed submission with a launch that does nothing (the copy kernel with zero
//! bytes, [`Inner::disarm`]). A launch that needs methods the armed submission lacks (a
//! shader-cache invalidate after loading a module, a wait for the copy channel) or a larger
//! constant bank disarms the same way and takes the ordinary path.
//!
//! The acquire has `ACQUIRE_SWITCH_TSG` disabled: with it enabled the host switches the idle
//! channel group out and back, and an armed launch took 6-9 µs instead of 2 on the H200
//! (docs/benchmarks.md). The cost is that the channel group stays scheduled while armed, so
//! other processes' channels wait for its timeslice to end, also while this process idles
//! (~1 ms per launch of theirs on the H200 with RM's default timeslice; armed launches set
//! `DeviceOptions::armed_timeslice`, 50 µs by default, ~52 µs then, ~4 µs at 2 µs): hence
//! opt-in, for a GPU the process has to itself.

use alloc::collections::VecDeque;
use core::time::Duration;

use zerocopy::IntoBytes;

use super::ahead::Launched;
use super::backend::{Backend, GpuMemory};
use super::module::Arg;
use super::ops::{COMPUTE, Inner};
use super::{DeviceError, DeviceInfo, DeviceOptions};
use crate::channel::gpfifo::GpEntry;
use crate::channel::methods::host::sem_execute::{OPERATION_ACQ_CIRC_GEQ, PAYLOAD_SIZE_64BIT};
use crate::channel::pushbuf::PushBuffer;
use crate::hal::Mmio;

/// Offset of an armed submission's pushbuffer in its region (the flag is at 0).
const PB_OFFSET: u64 = 64;
/// Offset of the QMD in the region.
const QMD_OFFSET: u64 = 256;
/// Most bytes of constant bank 0 a region has room for: the driver area and up to ~3.5 KiB
/// of parameters; kernels with more take the ordinary path.
const CB_BYTES: u64 = 4096;
/// Most submissions armed at once.
pub(super) const MAX_BATCH: usize = 128;
/// Launches in a row without a wait before the launch path arms a batch.
const STREAM_MIN: u32 = 4;
/// The default of `DeviceOptions::armed_timeslice` (RM's default is 1 ms). While armed, the
/// group holds the runlist until its timeslice ends; on the H200 another process's launch +
/// sync beside an idle armed process took 1050 µs with RM's default, 205 µs with 200 µs, 52 µs
/// with 50 µs and 4 µs with 2 µs, and the armed process alone ran as fast at each; a shorter
/// one shrinks the armed process's share while both are busy, so 50 µs is the middle.
pub const ARMED_TIMESLICE: Duration = Duration::from_micros(50);

/// A submission waiting at its acquire for a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Armed {
    /// Offset of its region in the compute channel's command memory (the flag is at `off`).
    off: u64,
    /// The timeline value its launch releases.
    value: u64,
    /// Offset of constant bank 0 in the region (after the QMD).
    cb_offset: u64,
    /// Bytes of constant bank 0 the region has room for.
    cb_room: u64,
    /// Arming wrote the QMD and constant bank 0 of the image [`ArmState::pre_seq`] names.
    prewritten: bool,
}

/// The device's pre-armed launches.
#[derive(Debug, Default)]
pub(crate) struct ArmState {
    /// Armed submissions, oldest first (their timeline values are consecutive).
    slots: VecDeque<Armed>,
    /// Launching the no-op that consumes an armed submission.
    disarming: bool,
    /// Launches that used an armed submission (the no-ops not counted).
    fired: u64,
    /// A kernel was launched since the last wait armed.
    launched_since_wait: bool,
    /// Launches since the last wait (the stream a batch is sized by).
    stream: u32,
    /// The [`super::ahead::LastLaunch::seq`] of the image the armed regions hold when
    /// `prewritten`.
    pre_seq: Option<u64>,
}

impl ArmState {
    /// Forgets the armed submissions (the channels were re-created).
    pub(super) fn reset(&mut self) {
        self.slots.clear();
        self.disarming = false;
        self.stream = 0;
    }

    pub(super) fn is_armed(&self) -> bool {
        !self.slots.is_empty()
    }

    pub(super) fn fired(&self) -> u64 {
        self.fired
    }

    /// Launching the no-ops that consume armed submissions.
    pub(super) fn is_disarming(&self) -> bool {
        self.disarming
    }
}

impl<B: Backend> Inner<B> {
    /// Arms up to `n` submissions if armed launches are on, none is armed and a no-op launch
    /// exists to disarm with. Never waits: it stops where command memory has no room now.
    fn arm(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        n: usize,
    ) -> Result<(), DeviceError> {
        if !opts.armed_launches
            || self.arm.is_armed()
            || self.copy_kernel.is_none()
            || self.dead.is_some()
        {
            return Ok(());
        }
        let done = self.sem.read_u64(self.chans[COMPUTE].sem_offset)?;
        self.chans[COMPUTE].arena.retire(done);
        // Regions sized for the last launch's constant bank 0 (a larger one disarms).
        let cb_room = self
            .last
            .image
            .as_ref()
            .map_or(CB_BYTES, |l| u64::from(l.cb_size))
            .clamp(256, CB_BYTES)
            .next_multiple_of(256);
        let cb_offset = QMD_OFFSET + (info.qmd.size() as u64).next_multiple_of(256);
        let size = cb_offset + cb_room;
        // Taken out for the arming (put back below), not cloned: no allocation.
        let last = self.last.image.take();
        let prewrite = last.as_ref().filter(|l| u64::from(l.cb_size) <= cb_room);
        let seq = self.last.seq;
        let base_value = self.chans[COMPUTE].submitted + 1;
        // Armed entries sit in the ring until launched: leave at least half of it for other
        // work, or pushing more would wait for a GPGet that cannot move.
        let ring_room = (self.chans[COMPUTE].fifo.entries() as usize / 2).saturating_sub(1);
        for i in 0..n.clamp(1, MAX_BATCH).min(ring_room) as u64 {
            let value = base_value + i;
            let Some(off) = self.chans[COMPUTE].arena.alloc(size, value) else {
                break;
            };
            self.arm.slots.push_back(Armed {
                off,
                value,
                cb_offset,
                cb_room,
                prewritten: false,
            });
        }
        let Some(last_value) = self.arm.slots.back().map(|a| a.value) else {
            self.last.image = last;
            return Ok(());
        };
        // The last launch's constant bank 0, once for the batch (kept until its last launch),
        // and each region's QMD pointing at it.
        let shared = prewrite.and_then(|img| {
            let off = self.chans[COMPUTE]
                .arena
                .alloc(u64::from(img.cb_size), last_value)?;
            Some((off, img))
        });
        let r = (|| -> Result<(), DeviceError> {
            if let Some((cb_off, img)) = shared {
                self.chans[COMPUTE].cmds.write(cb_off, &img.cb)?;
                // One QMD for the batch; the regions' copies differ only in the release.
                let cb_va = self.chans[COMPUTE].cmds.gpu_va() + cb_off;
                let mut qmd = self.region_qmd(info, opts, &img.launched(), cb_va, base_value)?;
                for s in self.arm.slots.iter_mut() {
                    self.qmd_patch.set_payload(&mut qmd, s.value)?;
                    self.chans[COMPUTE]
                        .cmds
                        .write(s.off + QMD_OFFSET, qmd.as_bytes())?;
                    s.prewritten = true;
                }
            }
            Ok(())
        })();
        let mut pushed = 0;
        let r = r.and_then(|()| {
            while let Some(a) = self.arm.slots.get(pushed).copied() {
                self.push_armed(opts, &a)?;
                pushed += 1;
            }
            Ok(())
        });
        // Regions not pushed are forgotten (the arena reuses them once the timeline passes
        // their values); the pushed ones are armed and published below.
        let prewritten = shared.is_some();
        self.last.image = last;
        self.arm.slots.truncate(pushed);
        if pushed == 0 {
            return r;
        }
        self.arm.pre_seq = prewritten.then_some(seq);
        // The store barriers of the kick also order the regions' QMDs and banks before any
        // flag.
        self.chans[COMPUTE].publish(opts.bar1_readback, &self.usermode)?;
        r
    }

    /// An armed submission: flag cleared, acquire + `SEND_PCAS`, GP entry (the caller rings
    /// the doorbell).
    fn push_armed(&mut self, opts: &DeviceOptions, a: &Armed) -> Result<(), DeviceError> {
        let Inner {
            chans,
            usermode,
            backend,
            ..
        } = self;
        let c = &mut chans[COMPUTE];
        let va = c.cmds.gpu_va() + a.off;
        let mut words = [0u32; 16];
        let mut pb = PushBuffer::new(&mut words);
        pb.host_semaphore(va, a.value, OPERATION_ACQ_CIRC_GEQ | PAYLOAD_SIZE_64BIT)?;
        pb.compute_launch(va + QMD_OFFSET)?;
        let len = pb.len();
        // The region held older commands: clear the flag before the host can read it.
        c.cmds.write_u64(a.off, 0)?;
        c.cmds.write(
            a.off + PB_OFFSET,
            words.get(..len).unwrap_or(&[]).as_bytes(),
        )?;
        let entry = GpEntry::new(va + PB_OFFSET, len as u32)?;
        c.push(usermode, backend.clock(), opts.timeout, entry)
    }

    /// Before a wait: writes the next launch ahead or arms one (whichever is on).
    pub(super) fn before_wait(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        self.write_ahead(info, opts)?;
        self.arm_after_launch(info, opts)
    }

    /// Arms one submission if a kernel was launched since the last wait: the caller is about
    /// to wait for it (on hardware the GPU is still running it, so the stores and the doorbell
    /// cost no latency).
    fn arm_after_launch(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if !opts.armed_launches || !self.arm.launched_since_wait {
            return Ok(());
        }
        self.check_alive()?;
        self.arm.launched_since_wait = false;
        self.arm.stream = 0;
        self.arm(info, opts, 1)
    }

    /// Disarms unless a launch with a constant bank 0 of `cb_size` bytes can use the front
    /// armed submission.
    pub(super) fn disarm_unless_fits(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        cb_size: u64,
    ) -> Result<(), DeviceError> {
        if self.arm.is_armed() && !self.armed_fits(cb_size) {
            self.disarm(info, opts)?;
        }
        Ok(())
    }

    /// Whether a launch with a constant bank 0 of `cb_size` bytes can use the front armed
    /// submission (it has no room or methods for more).
    pub(super) fn armed_fits(&mut self, cb_size: u64) -> bool {
        let Some(a) = self.arm.slots.front() else {
            return false;
        };
        if self.arm.disarming {
            return true;
        }
        if self.caches_dirty || cb_size > a.cb_room {
            return false;
        }
        // Copy-channel work the launch must follow needs an acquire the armed submission does
        // not have, unless it is already done (a copy to the host waited for it, say).
        self.other_done(COMPUTE)
    }

    /// Launches `l` (description normalized) through the front armed submission (the caller
    /// checked [`Inner::armed_fits`]): writes its constant bank 0 and QMD unless the region
    /// already holds the same, then the flag. `value` is the timeline value the launch is to
    /// release.
    pub(super) fn launch_armed(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        l: &Launched<'_>,
        value: u64,
    ) -> Result<(), DeviceError> {
        let Some(a) = self.arm.slots.front().copied() else {
            return Err(DeviceError::Dead(
                "no armed submission to launch through".into(),
            ));
        };
        // Nothing was submitted since arming (`launch` disarms otherwise).
        if a.value != value {
            return Err(DeviceError::Dead(alloc::format!(
                "armed launch for timeline value {}, the next is {value}",
                a.value
            )));
        }
        // The region holds this launch's QMD and bank when it was written for the image that
        // is still the last launch and this launch repeats it (one comparison).
        let repeats_last = !self.arm.disarming && !self.last.remember(l);
        let same = a.prewritten && repeats_last && self.arm.pre_seq == Some(self.last.seq);
        if !same {
            self.write_image(
                info,
                opts,
                l,
                a.off + a.cb_offset,
                a.off + QMD_OFFSET,
                a.value,
            )?;
        }
        let c = &mut self.chans[COMPUTE];
        if !same {
            // Bank and QMD before the flag (write-combined stores may be reordered).
            self.usermode.store_barrier();
            c.read_back(opts.bar1_readback, &self.usermode)?;
        }
        c.cmds.write_u64(a.off, a.value)?;
        self.usermode.store_barrier();
        c.submitted = a.value;
        self.arm.slots.pop_front();
        if !self.arm.disarming {
            self.arm.fired += 1;
        }
        Ok(())
    }

    /// Launches a call that repeats the last launch's call (`ahead::Call`; the caller
    /// checked) through the front armed submission with release `value`, if arming wrote that
    /// launch into it: the flag and a store barrier, nothing built. Returns whether it did.
    pub(super) fn fire_armed_repeat(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        value: u64,
    ) -> Result<bool, DeviceError> {
        let Some(a) = self.arm.slots.front().copied() else {
            return Ok(false);
        };
        if self.arm.disarming
            || a.value != value
            || !a.prewritten
            || self.arm.pre_seq != Some(self.last.seq)
            || !self.other_done(COMPUTE)
        {
            return Ok(false);
        }
        let c = &mut self.chans[COMPUTE];
        c.cmds.write_u64(a.off, a.value)?;
        self.usermode.store_barrier();
        c.submitted = a.value;
        self.arm.slots.pop_front();
        self.arm.fired += 1;
        self.after_launch(info, opts, None)?;
        Ok(true)
    }

    /// After a launch (either path; `remember` the launch, description normalized, unless it
    /// used an armed submission, which remembered it already): counts it, and in a stream of
    /// launches with the armed submissions used up, arms the next batch.
    pub(super) fn after_launch(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        remember: Option<&Launched<'_>>,
    ) -> Result<(), DeviceError> {
        if !opts.armed_launches || self.arm.disarming {
            return Ok(());
        }
        if let Some(l) = remember {
            self.last.remember(l);
        }
        self.arm.launched_since_wait = true;
        self.arm.stream = self.arm.stream.saturating_add(1);
        if self.arm.stream >= STREAM_MIN && !self.arm.is_armed() {
            self.arm(info, opts, self.arm.stream as usize)?;
        }
        Ok(())
    }

    /// Consumes every armed submission with a launch that does nothing (the copy kernel
    /// copying zero bytes), so the next compute submission does not queue behind an acquire.
    pub(super) fn disarm(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if !self.arm.is_armed() {
            return Ok(());
        }
        let Some(ck) = self.copy_kernel.take() else {
            return Err(DeviceError::Dead(
                "an armed launch without a copy kernel to disarm it".into(),
            ));
        };
        self.arm.disarming = true;
        let mut r = Ok(());
        while self.arm.is_armed() && r.is_ok() {
            let args = [Arg::U64(0), Arg::U64(0), Arg::U64(0)];
            r = self.launch(
                info,
                opts,
                &ck.info,
                ck.sass_version,
                &ck.call(1, 32, &args),
            );
        }
        self.arm.disarming = false;
        self.arm.stream = 0;
        self.copy_kernel = Some(ck);
        r
    }
}
