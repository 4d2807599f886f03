//! The thread that publishes launches held by automatic deferral
//! (`nvbare_core::device::DeviceOptions::auto_defer`, `core/src/device/flusher.rs`).
//!
//! The core holds a launch back only while a [`Flusher`] is attached, so that a launch never
//! waits for the program to call the device again: this thread polls the flusher while
//! launches are held (about once a microsecond once the program stops launching, backing off
//! to [`MAX_BACKOFF`] while it keeps launching; a core busy during bursts of back-to-back
//! launches, as CUDA's spinning synchronize is), keeps polling for [`IDLE_SPIN`] after the last
//! held batch, and then parks until the device wakes it. It ends when the device closes or the
//! [`FlusherThread`] is dropped (which first publishes anything held).
//!
//! The thread needs a CPU of its own: [`spawn_if_parallel`] starts none where the process may
//! run on one CPU only, and the device then never holds launches.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvbare_core::device::{Backend, Device, DeviceError, FlushPoll, Flusher};

use crate::clock::spin_for;

/// How long the thread keeps polling after held work was last seen, before it parks: a
/// stream of launches usually holds again within microseconds, and a wake-up costs the
/// launching thread a syscall.
pub const IDLE_SPIN: Duration = Duration::from_micros(200);

/// Between two polls while launches are held and the program has stopped launching: the
/// held batch is published about this soon after the GPU caught up.
pub const POLL_INTERVAL: Duration = Duration::from_micros(1);

/// Longest interval between polls while the program keeps launching ([`FlushPoll::Launching`],
/// [`FlushPoll::Busy`]; the interval doubles from [`POLL_INTERVAL`]). The launching thread
/// publishes its own batches then, and every poll reads a word it writes at each launch. It
/// bounds how long a batch held when the program stops waits for this thread: a poll that
/// sees no launch since the one before publishes. On the H200, with 400 ns of CPU work between
/// launches, 4 µs ran back-to-back launches at 0.661-0.668 µs each in four runs, 16 µs at
/// 0.63-0.93 (docs/performance.md, "Automatic deferral").
pub const MAX_BACKOFF: Duration = Duration::from_micros(4);

/// How long a parked thread sleeps before it looks whether the device closed.
const PARK: Duration = Duration::from_millis(50);

/// Whether a flusher thread can run beside the program: the process may use more than one CPU
/// (its affinity mask and CPU quota, as [`std::thread::available_parallelism`] reads them;
/// unknown counts as yes). On one CPU the thread runs only when the scheduler takes that CPU
/// from the program: on the H200, pinned to one CPU, it chained 3-12 of 100 000 back-to-back
/// launches, and held work waited for it (two launches then a polled timeline: 3.40-3.81 µs
/// with the thread, 2.79-3.10 without; docs/device.md, "One CPU: no flusher thread").
pub fn can_run_beside_the_program() -> bool {
    worth_a_thread(std::thread::available_parallelism().ok())
}

fn worth_a_thread(cpus: Option<std::num::NonZeroUsize>) -> bool {
    cpus.is_none_or(|n| n.get() > 1)
}

/// [`spawn`] where the thread can run beside the program ([`can_run_beside_the_program`]);
/// `Ok(None)` otherwise, and automatic deferral then holds no launch (it needs the thread).
pub fn spawn_if_parallel<B>(dev: &Device<B>) -> Result<Option<FlusherThread>, DeviceError>
where
    B: Backend + 'static,
    Flusher<B>: Send,
{
    if can_run_beside_the_program() {
        spawn(dev).map(Some)
    } else {
        Ok(None)
    }
}

/// A running flusher thread; dropping it stops the thread (held launches are published first).
#[derive(Debug)]
pub struct FlusherThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// Attaches a flusher to `dev` and polls it from a new thread named `nvbare-flusher`.
pub fn spawn<B>(dev: &Device<B>) -> Result<FlusherThread, DeviceError>
where
    B: Backend + 'static,
    Flusher<B>: Send,
{
    let flusher = dev.flusher()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("nvbare-flusher".into())
        .spawn(move || run(flusher, &stop2))
        .map_err(|e| {
            DeviceError::Unsupported(format!(
                "could not start the flusher thread ({e}); open the device with \
                 DeviceOptions::auto_defer off"
            ))
        })?;
    Ok(FlusherThread {
        stop,
        handle: Some(handle),
    })
}

impl FlusherThread {
    /// Lets the thread run on its own until the device closes.
    pub fn detach(mut self) {
        self.handle = None;
    }
}

impl Drop for FlusherThread {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.stop.store(true, Ordering::Release);
            h.thread().unpark();
            if h.join().is_err() {
                log::warn!("the flusher thread panicked");
            }
        }
    }
}

fn run<B: Backend>(flusher: Flusher<B>, stop: &AtomicBool) {
    let me = std::thread::current();
    flusher.set_waker(Box::new(move || me.unpark()));
    let mut last_active = Instant::now();
    let mut interval = POLL_INTERVAL;
    while !stop.load(Ordering::Acquire) {
        match flusher.poll() {
            FlushPoll::Gone => break,
            FlushPoll::Launching | FlushPoll::Busy => {
                last_active = Instant::now();
                spin_for(interval);
                interval = (interval * 2).min(MAX_BACKOFF);
            }
            FlushPoll::Held | FlushPoll::Published => {
                last_active = Instant::now();
                interval = POLL_INTERVAL;
                spin_for(interval);
            }
            FlushPoll::Idle => {
                interval = POLL_INTERVAL;
                if last_active.elapsed() < IDLE_SPIN {
                    spin_for(POLL_INTERVAL);
                } else if flusher.is_gone() {
                    break;
                } else {
                    std::thread::park_timeout(PARK);
                    last_active = Instant::now();
                }
            }
        }
    }
    // Dropping the flusher publishes anything held and turns holding off.
    drop(flusher);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;

    #[test]
    fn a_thread_is_worth_it_with_a_second_cpu_or_when_the_count_is_unknown() {
        assert!(!worth_a_thread(NonZeroUsize::new(1)));
        assert!(worth_a_thread(NonZeroUsize::new(2)));
        assert!(worth_a_thread(NonZeroUsize::new(128)));
        assert!(worth_a_thread(None));
    }
}
