//! The host's monotonic clock as a [`Clock`].

use std::time::{Duration, Instant};

use nvbare_core::hal::Clock;

/// [`Clock`] over [`Instant`]: `now` counts from the clock's creation; `delay` sleeps for
/// long waits and spins for short ones (a sleep rounds up to the scheduler's tick, which would
/// make microsecond polls of a register take milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct HostClock {
    start: Instant,
}

impl HostClock {
    /// Below this, `delay` spins instead of sleeping.
    pub const SPIN_BELOW: Duration = Duration::from_micros(100);

    /// A clock starting now.
    pub fn new() -> Self {
        HostClock {
            start: Instant::now(),
        }
    }
}

/// Busy-waits `d` without sleeping (polling threads and benchmarks whose waits must not hand
/// the CPU to the scheduler). Zero returns at once, without reading the clock (a benchmark's
/// optional gap costs its timed loop nothing).
pub fn spin_for(d: Duration) {
    if d.is_zero() {
        return;
    }
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

impl Default for HostClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for HostClock {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn delay(&self, d: Duration) {
        let until = Instant::now() + d;
        if d >= Self::SPIN_BELOW {
            std::thread::sleep(d);
        }
        spin_for(until.saturating_duration_since(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::hal::{PollError, poll_until};

    #[test]
    fn delays_at_least_as_asked_and_never_goes_back() {
        let c = HostClock::new();
        let a = c.now();
        c.delay(Duration::from_micros(30));
        let b = c.now();
        assert!(b - a >= Duration::from_micros(30));
        c.delay(Duration::from_millis(2));
        assert!(c.now() - b >= Duration::from_millis(2));
    }

    #[test]
    fn spin_for_waits_at_least_as_asked() {
        let t = Instant::now();
        spin_for(Duration::from_micros(50));
        assert!(t.elapsed() >= Duration::from_micros(50));
        spin_for(Duration::ZERO);
    }

    #[test]
    fn poll_until_times_out_on_the_host_clock() {
        let c = HostClock::new();
        let r: Result<(), PollError> = poll_until(
            &c,
            Duration::from_millis(5),
            Duration::from_micros(200),
            "nothing",
            || Ok(None),
        );
        let e = r.unwrap_err();
        assert!(e.waited >= Duration::from_millis(5));
    }
}
