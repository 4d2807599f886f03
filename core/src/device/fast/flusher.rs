//! Automatic deferral: back-to-back launches chained without the caller deferring anything.
//!
//! Why: a launch whose doorbell is rung at once must be ordered behind the grid before it by
//! the channel (`WAIT_FOR_IDLE`, 0.85 µs of GPU per back-to-back empty kernel on the H200); a
//! launch chained to the one before it (`chain.rs`) is scheduled by that launch's QMD
//! and costs the GPU 0.48-0.51 µs, as a CUDA graph's kernels do. Chaining needs the next launch
//! known before the one before is published, which `Tuning::deferred_submits` gets by
//! holding the doorbell back, so that a kernel launched and then left alone does not start
//! until the program calls the device again. Automatic deferral keeps CUDA's rule (a launch
//! starts without further calls) and still chains, with a helper that publishes what is held:
//!
//! * A launch is held (queued without its doorbell, so that the launches after it chain to it)
//!   only while a [`Flusher`] is attached and the GPU has not finished the work published
//!   before it: held work could not start before that work ends anyway (stream order). A
//!   launch made while the GPU is idle is published at once, so a launch + sync round trip is
//!   what it was.
//! * Held work is published (its doorbell rung) once the GPU has finished everything
//!   published before it ("due"): by the next call into the device other than a launch, as it
//!   ends; by a launch call, as it ends, if the batch holds
//!   `Tuning::auto_defer_min_batch` launches or calls have seen it due for
//!   `Tuning::auto_defer_batch_wait`; or by the flusher's [`Flusher::poll`] from
//!   another thread once the program has made no launch since its last poll
//!   ([`FlushPoll::Launching`] otherwise). So held work never waits for a program that stops
//!   calling, and a program that keeps launching faster than the GPU caught up publishes
//!   batches worth their head (an ordinary launch). A call that observes or hands out the GPU's
//!   progress (`Device::timelines`, `Device::record_event`) publishes held work at once: a
//!   program polling for its kernels is done launching. A wait, a copy that needs it,
//!   `flush()` and the batch limit ([`AUTO_DEFER_LIMIT`] launches) publish it too. While the
//!   CPU launches faster than the GPU runs them, batches reach the limit and the GPU never
//!   waits; otherwise the CPU is the bound and the GPU waits for each batch to fill.
//! * Holding only when the GPU is busy, rather than when more than one batch is in flight,
//!   matters: on the H200 the latter fell back, whenever the CPU was briefly slower, into a
//!   steady state of single published launches (each ~0.8 µs of CPU, as long as the GPU's
//!   0.85 µs per unchained grid) and never chained again (0.59-0.80 µs per back-to-back launch
//!   in 2 of 3 runs, docs/performance.md, "Automatic deferral").
//!
//! The core has no threads: the flusher is a handle that another thread polls.
//! `nvbare_pci_host::flusher::spawn` runs one in a thread that polls while work is held and
//! parks otherwise (the CLI attaches one to every device it opens). Without a flusher, or with
//! `Tuning::auto_defer` off, every launch rings its doorbell as before.
//!
//! The launching thread drains its write-combining buffers (a store barrier) before it leaves
//! a call with work held: the flusher publishes from another CPU, whose barrier orders only its
//! own stores.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;

use crate::device::backend::{Backend, GpuMemory};
use crate::device::chan::Chan;
use crate::device::ops::Inner;
use crate::device::{DeviceError, DeviceOptions};

/// Most launches a held batch collects before its doorbell is rung regardless. A batch's head
/// (an ordinary launch with an acquire and `WAIT_FOR_IDLE`) costs the GPU ~1-2 µs, so longer
/// batches run closer to the chained rate: on the H200 `bench --defer 511` ran at 0.489-0.496
/// µs per launch against 0.499 at 255 in the same VM. Longer still (1023) fills half the
/// default 1 MiB command memory with one batch's QMDs (512 bytes each), and a chained launch
/// that finds no room takes the ordinary path.
pub const AUTO_DEFER_LIMIT: u32 = 511;

/// Default of `Tuning::auto_defer_min_batch`: a launch call publishes a held batch
/// once due only if it holds this many launches (a batch's head then costs the CPU under 2 %
/// of the batch; the GPU, when the CPU is the bound, waits for at most this many).
pub const AUTO_MIN_BATCH: u32 = 64;

/// Default of `Tuning::auto_defer_batch_wait`: about what 64 empty kernels take the
/// H200's GPU (0.48 µs each, chained), so a batch waits for the program no longer than the
/// GPU would spend on a full one.
pub const AUTO_BATCH_WAIT: core::time::Duration = core::time::Duration::from_micros(30);

/// The device's side of automatic deferral (in `Fast`).
#[derive(Debug, Default)]
pub(super) struct Auto {
    /// A [`Flusher`] is attached.
    attached: bool,
    /// Launches may be held for it (it is attached and the options allow it).
    pub(super) holds: bool,
    /// The held batch (its `held_after`) a launch call first saw due though smaller than
    /// `Tuning::auto_defer_min_batch`, and when (`Inner::batch_waits`).
    pub(super) due_since: Option<(Option<u64>, Duration)>,
    /// Batches of held launches the flusher published; the others were published by the
    /// launching thread.
    pub(super) flusher_published: u64,
}

/// A value on a cache line of its own: the flusher reads `pending` while the launching thread
/// takes the lock next to it.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub T);

/// What a device and its flusher share.
pub(crate) struct Shared<B: Backend> {
    /// `None` once the device closed.
    pub(crate) inner: Padded<spin::Mutex<Option<Inner<B>>>>,
    pub(crate) auto: Padded<AutoState>,
}

impl<B: Backend> Shared<B> {
    pub(crate) fn new(inner: Inner<B>) -> Arc<Self> {
        Arc::new(Shared {
            inner: Padded(spin::Mutex::new(Some(inner))),
            auto: Padded(AutoState::default()),
        })
    }
}

/// The flusher's side of automatic deferral.
#[derive(Default)]
pub(crate) struct AutoState {
    /// Held work waits for its doorbell (kept by the launching thread as it leaves a call).
    pending: AtomicBool,
    /// The program's launch calls, counted by the launching thread: the flusher tells from it,
    /// without the device's lock, whether the program is still launching.
    launches: AtomicU64,
    /// Called when `pending` turns true (unparks the flusher's thread).
    waker: spin::Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

impl AutoState {
    /// Records whether held work waits, after a call into the device; wakes the flusher when
    /// it starts to. A store only when it changed (the flusher reads this line while polling).
    pub(crate) fn set_pending(&self, pending: bool) {
        if self.pending.load(Ordering::Relaxed) == pending {
            return;
        }
        self.pending.store(pending, Ordering::Release);
        if pending {
            self.wake();
        }
    }

    /// Counts a launch call (only the device's thread writes: a plain store, not a locked
    /// add, which would also drain the write-combining buffers).
    pub(crate) fn count_launch(&self) {
        let n = self.launches.load(Ordering::Relaxed);
        self.launches.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Runs the waker, if any.
    pub(crate) fn wake(&self) {
        if let Some(w) = self.waker.lock().as_ref() {
            w();
        }
    }
}

/// What one [`Flusher::poll`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPoll {
    /// Nothing is held: the polling thread may park until the waker runs.
    Idle,
    /// Work is held and the GPU still runs what was published before it: poll again soon.
    Held,
    /// Work is held and the program launched since the last poll: its own calls publish held
    /// work as they end, so nothing was done (not even taking the lock); poll again later
    /// (each poll costs the launching thread a cache miss). Once it stops launching, a poll
    /// publishes.
    Launching,
    /// The launching thread was inside the device: poll again soon.
    Busy,
    /// Held work was published.
    Published,
    /// The device is closed: stop polling.
    Gone,
}

/// The handle that publishes held launches from another thread ([`crate::device::Device::flusher`];
/// module docs). While one exists, launches may be held; dropping it publishes what is held and
/// turns holding off.
pub struct Flusher<B: Backend> {
    shared: Arc<Shared<B>>,
    opts: DeviceOptions,
    /// [`AutoState::launches`] at the last poll: changed means the program is still
    /// launching, and publishes held work itself.
    seen_launches: AtomicU64,
}

impl<B: Backend> core::fmt::Debug for Flusher<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Flusher").finish_non_exhaustive()
    }
}

impl<B: Backend> Flusher<B> {
    /// Attaches a flusher to the device behind `shared` (at most one at a time).
    pub(crate) fn attach(
        shared: &Arc<Shared<B>>,
        opts: DeviceOptions,
    ) -> Result<Self, DeviceError> {
        let mut g = shared.inner.0.lock();
        let inner = g
            .as_mut()
            .ok_or_else(|| DeviceError::Dead("the device is closing".into()))?;
        let auto = &mut inner.fast.auto;
        if auto.attached {
            return Err(DeviceError::Unsupported(
                "a flusher is already attached to this device; keep the first one".into(),
            ));
        }
        auto.attached = true;
        auto.holds = opts.tuning.holds_launches();
        Ok(Flusher {
            shared: shared.clone(),
            opts,
            seen_launches: AtomicU64::new(shared.auto.0.launches.load(Ordering::Relaxed)),
        })
    }

    /// Sets what is called when held work starts to wait (e.g. unparking the polling thread;
    /// it runs on the launching thread, so it must be quick and must not call the device).
    pub fn set_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        *self.shared.auto.0.waker.lock() = Some(waker);
    }

    /// Publishes held launches if the GPU has finished the work published before them, unless
    /// the program launched since the last poll ([`FlushPoll::Launching`]: its calls publish
    /// as they end, and a publish from here would hold the lock ~1 µs while it launches).
    /// Never blocks on the launching thread: if it is inside the device, returns
    /// [`FlushPoll::Busy`].
    pub fn poll(&self) -> FlushPoll {
        let auto = &self.shared.auto.0;
        if !auto.pending.load(Ordering::Acquire) {
            // Closing sets nothing pending; look at the device itself only now and then
            // ([`Flusher::is_gone`]).
            return FlushPoll::Idle;
        }
        // Without the lock: taking it (and reading the device's state) would take those cache
        // lines from the launching thread at every poll.
        let launches = auto.launches.load(Ordering::Relaxed);
        if self.seen_launches.swap(launches, Ordering::Relaxed) != launches {
            return FlushPoll::Launching;
        }
        let Some(mut g) = self.shared.inner.0.try_lock() else {
            return FlushPoll::Busy;
        };
        let Some(inner) = g.as_mut() else {
            return FlushPoll::Gone;
        };
        match inner.auto_poll(&self.opts) {
            Ok(published) => {
                let held = inner.auto_held();
                auto.set_pending(held);
                if published {
                    FlushPoll::Published
                } else if !held {
                    FlushPoll::Idle
                } else {
                    FlushPoll::Held
                }
            }
            Err(e) => {
                // Not again until the launching thread has been back (it meets the same error
                // at its next call, which says what to do).
                log::warn!("publishing held launches: {e}");
                auto.pending.store(false, Ordering::Release);
                FlushPoll::Idle
            }
        }
    }

    /// Whether the device has closed (the polling thread should end).
    pub fn is_gone(&self) -> bool {
        match self.shared.inner.0.try_lock() {
            Some(g) => g.is_none(),
            None => false,
        }
    }
}

impl<B: Backend> Drop for Flusher<B> {
    fn drop(&mut self) {
        let mut g = self.shared.inner.0.lock();
        if let Some(inner) = g.as_mut() {
            if let Err(e) = inner.publish_held(&self.opts) {
                log::warn!("publishing held launches as the flusher detaches: {e}");
            }
            inner.fast.auto.attached = false;
            inner.fast.auto.holds = false;
        }
        self.shared.auto.0.pending.store(false, Ordering::Release);
        *self.shared.auto.0.waker.lock() = None;
    }
}

impl<B: Backend> Inner<B> {
    /// The deferral a launch gets: `Tuning::deferred_submits` when set; otherwise,
    /// with a flusher attached, [`AUTO_DEFER_LIMIT`] while a held batch is collecting or the GPU
    /// has not finished the published work, else 0 (module docs).
    pub(super) fn launch_defer(&self, opts: &DeviceOptions) -> u32 {
        if !self.fast.auto.holds {
            return opts.tuning.deferred_submits;
        }
        let c = &self.chans[self.fast_ci()];
        if c.fifo.unpublished() > 0 {
            return AUTO_DEFER_LIMIT;
        }
        if c.seen >= c.submitted {
            return 0;
        }
        match self.sem.read_u64(c.sem_offset) {
            Ok(done) if done < c.submitted => AUTO_DEFER_LIMIT,
            _ => 0,
        }
    }

    /// Publishes launches held by automatic deferral, if any (a call that observes or hands
    /// out the GPU's progress: the program is about to wait for that work).
    /// (`_opts`: what callers in `peer.rs` pass.)
    pub(in crate::device) fn publish_held(
        &mut self,
        _opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if self.auto_held() {
            self.kick(self.fast_ci())?;
        }
        Ok(())
    }

    /// Whether launches are held for the flusher now.
    pub(super) fn auto_held(&self) -> bool {
        self.fast.auto.holds && self.chans[self.fast_ci()].fifo.unpublished() > 0
    }

    /// As a call into the device ends (`launch`: the program's launch call): publishes held
    /// work that is due, so a program that polls the device does not depend on the flusher
    /// (which leaves held work to a program that keeps launching); a launch call only a batch
    /// of `Tuning::auto_defer_min_batch`, since more launches are coming. Then tells the
    /// flusher whether work is held.
    pub(super) fn end_call(&mut self, opts: &DeviceOptions, launch: bool, shared: &AutoState) {
        if !self.fast.auto.holds {
            return;
        }
        if let Err(e) = self.publish_if_due(opts, launch) {
            log::debug!("publishing held launches: {e}");
        }
        let held = self.auto_held();
        if held {
            // The flusher may publish what this thread wrote from another CPU, whose store
            // barrier does not drain this CPU's write-combining buffers: drain them before
            // the lock is let go.
            crate::hal::Mmio::store_barrier(&self.usermode);
        }
        shared.set_pending(held);
    }

    /// Publishes held launches if that is due ([`Inner::auto_publish_due`]) and, at the end of
    /// the program's launch call (`after_launch`), the batch is ready ([`Inner::batch_waits`]);
    /// returns whether it did.
    fn publish_if_due(
        &mut self,
        opts: &DeviceOptions,
        after_launch: bool,
    ) -> Result<bool, DeviceError> {
        if !self.auto_publish_due() || (after_launch && self.batch_waits(opts)) {
            return Ok(false);
        }
        self.kick(self.fast_ci())?;
        Ok(true)
    }

    /// Whether a due batch should wait for more launches: it holds fewer than
    /// `Tuning::auto_defer_min_batch` and launch calls have seen it due for less than
    /// `Tuning::auto_defer_batch_wait` (the first to see it notes when).
    fn batch_waits(&mut self, opts: &DeviceOptions) -> bool {
        if self.queued_launches() >= opts.tuning.auto_defer_min_batch {
            return false;
        }
        let batch = self.chans[self.fast_ci()].held_after;
        let now = crate::hal::Clock::now(self.backend.clock());
        let since = match self.fast.auto.due_since {
            Some((b, since)) if b == batch => since,
            _ => {
                self.fast.auto.due_since = Some((batch, now));
                now
            }
        };
        now.saturating_sub(since) < opts.tuning.auto_defer_batch_wait
    }

    /// Whether held launches should be published now: the GPU has finished everything
    /// published before them (or the timeline cannot be read, and the wait that follows will
    /// say why).
    fn auto_publish_due(&self) -> bool {
        if !self.auto_held() {
            return false;
        }
        let c: &Chan<B::Memory> = &self.chans[self.fast_ci()];
        let Some(before) = c.held_after else {
            return true;
        };
        self.sem
            .read_u64(c.sem_offset)
            .map_or(true, |done| done >= before)
    }

    /// The flusher's look ([`Flusher::poll`]): publishes held launches when due. Returns
    /// whether it did.
    fn auto_poll(&mut self, opts: &DeviceOptions) -> Result<bool, DeviceError> {
        if !self.auto_held() {
            return Ok(false);
        }
        self.check_alive()?;
        // Time passes for the driver here (a simulated GPU that runs lazily advances).
        let _ = crate::hal::Clock::now(self.backend.clock());
        let published = self.publish_if_due(opts, false)?;
        self.fast.auto.flusher_published += u64::from(published);
        Ok(published)
    }
}
