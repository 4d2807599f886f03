//! The simulator's clock: real monotonic time, or virtual time that only moves when the driver
//! waits (so tests of timeouts finish instantly and deterministically).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nvbare_core::hal::Clock;

/// How simulated time passes.
#[derive(Debug)]
pub enum SimClock {
    /// Wall-clock time since the simulator was created; delays sleep.
    Real(Instant),
    /// Virtual nanoseconds, advanced by delays (and by a tick on every read, so busy-polling
    /// loops still make progress).
    Virtual(AtomicU64),
}

impl SimClock {
    /// Real time.
    pub fn real() -> Self {
        SimClock::Real(Instant::now())
    }

    /// Virtual time starting at zero.
    pub fn virtual_time() -> Self {
        SimClock::Virtual(AtomicU64::new(0))
    }

    /// Advances virtual time (no effect on a real clock).
    pub fn advance(&self, d: Duration) {
        if let SimClock::Virtual(ns) = self {
            ns.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        }
    }

    /// Nanoseconds since start (the GPU timer, `NVC361_TIME_0/1`).
    pub fn nanos(&self) -> u64 {
        self.now().as_nanos().min(u64::MAX as u128) as u64
    }
}

/// Virtual time that passes on every clock read: 100 ns, about one PCIe register read.
const VIRTUAL_READ_TICK_NS: u64 = 100;

impl Clock for SimClock {
    fn now(&self) -> Duration {
        match self {
            SimClock::Real(start) => start.elapsed(),
            SimClock::Virtual(ns) => {
                Duration::from_nanos(ns.fetch_add(VIRTUAL_READ_TICK_NS, Ordering::Relaxed))
            }
        }
    }

    fn delay(&self, d: Duration) {
        match self {
            SimClock::Real(_) => std::thread::sleep(d),
            SimClock::Virtual(_) => self.advance(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_moves_on_delay_and_reads() {
        let c = SimClock::virtual_time();
        let t0 = c.now();
        c.delay(Duration::from_secs(5));
        assert!(c.now() - t0 >= Duration::from_secs(5));
        let a = c.now();
        let b = c.now();
        assert!(b > a);
    }
}
