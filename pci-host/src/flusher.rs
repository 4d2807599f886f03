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
/// 0.63-0.93 (docs/benchmarks.md).
pub const MAX_BACKOFF: Duration = Duration::from_micros(4);

/// How long a parked thread sleeps before it looks whether the device closed.
const PARK: Duration = Duration::from_millis(50);

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
