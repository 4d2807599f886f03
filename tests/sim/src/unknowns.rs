//! How the simulator answers where nothing public says what the hardware, its firmware or
//! GSP-RM does (the **unknown** rows of docs/assumptions.md).
//!
//! A simulator that picked the answer the driver hopes for at each unknown would let a driver
//! bug pass CI and fail on the first real GPU. So each unknown has a set of plausible answers,
//! and `NVBARE_SIM_UNKNOWNS` chooses how they are given:
//!
//! | value | answers |
//! |---|---|
//! | `helpful` (default) | the most convenient plausible answer (what the sim always did) |
//! | `pessimistic` | the least convenient answer still consistent with the evidence |
//! | `random:SEED` | each occurrence drawn from the allowed answers, reproducibly from SEED |
//!
//! The driver must work under all of them. Every site that asks is named, so a failure under
//! `random` can be replayed with the same seed and traced to its site.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that selects the mode.
pub const ENV: &str = "NVBARE_SIM_UNKNOWNS";

/// How unknowns are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The most convenient plausible answer.
    Helpful,
    /// The least convenient answer consistent with the evidence.
    Pessimistic,
    /// Drawn per occurrence from the plausible answers, from this seed.
    Random(u64),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Helpful => f.write_str("helpful"),
            Mode::Pessimistic => f.write_str("pessimistic"),
            Mode::Random(s) => write!(f, "random:{s}"),
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        let bad = || {
            format!(
                "{ENV}={s:?} is not a mode: use helpful (the default), pessimistic or \
                 random:SEED (SEED a decimal number, e.g. random:7)"
            )
        };
        match s {
            "" | "helpful" => Ok(Mode::Helpful),
            "pessimistic" => Ok(Mode::Pessimistic),
            _ => {
                let seed = s.strip_prefix("random:").ok_or_else(bad)?;
                seed.parse().map(Mode::Random).map_err(|_| bad())
            }
        }
    }
}

impl Mode {
    /// The mode `NVBARE_SIM_UNKNOWNS` names (helpful when unset), or why its value is not one.
    pub fn from_env() -> Result<Mode, String> {
        match std::env::var(ENV) {
            Ok(v) => v.parse(),
            Err(std::env::VarError::NotPresent) => Ok(Mode::Helpful),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("{ENV} is not UTF-8")),
        }
    }
}

/// The answers of one simulated GPU (shared by its parts).
#[derive(Debug)]
pub struct Unknowns {
    mode: Mode,
    /// Occurrences asked so far (random mode draws each one anew).
    asked: AtomicU64,
}

impl Unknowns {
    /// Answers in `mode`.
    pub fn new(mode: Mode) -> Self {
        if let Mode::Random(seed) = mode {
            log::info!("sim: unknowns drawn with {ENV}=random:{seed}");
        }
        Unknowns {
            mode,
            asked: AtomicU64::new(0),
        }
    }

    /// Answers in the mode `NVBARE_SIM_UNKNOWNS` names. Panics with the accepted values if it
    /// names none: tests and the CLI check it first (`Mode::from_env`).
    pub fn from_env() -> Self {
        match Mode::from_env() {
            Ok(m) => Unknowns::new(m),
            Err(e) => panic!("{e}"),
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the inconvenient answer is given at `site` this time: never when helpful,
    /// always when pessimistic, drawn when random.
    pub fn hard(&self, site: &'static str) -> bool {
        match self.mode {
            Mode::Helpful => false,
            Mode::Pessimistic => true,
            Mode::Random(seed) => self.draw(seed, site) & 1 == 1,
        }
    }

    /// One of `answers` for `site`: the first when helpful, the last when pessimistic (list
    /// them from most to least convenient), any when random. `answers` must not be empty.
    pub fn pick<T: Copy>(&self, site: &'static str, answers: &[T]) -> T {
        let i = match self.mode {
            Mode::Helpful => 0,
            Mode::Pessimistic => answers.len().saturating_sub(1),
            Mode::Random(seed) => (self.draw(seed, site) % answers.len().max(1) as u64) as usize,
        };
        answers[i.min(answers.len().saturating_sub(1))]
    }

    fn draw(&self, seed: u64, site: &'static str) -> u64 {
        let n = self.asked.fetch_add(1, Ordering::Relaxed);
        // splitmix64 over (seed, site, occurrence): reproducible for a seed and a sequence of
        // questions.
        let mut x = seed ^ crate::trace::hash(site.as_bytes()) as u64 ^ n.wrapping_mul(0x9e37);
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
}

impl Default for Unknowns {
    fn default() -> Self {
        Unknowns::from_env()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_bad_values_list_the_good_ones() {
        assert_eq!("helpful".parse(), Ok(Mode::Helpful));
        assert_eq!("".parse(), Ok(Mode::Helpful));
        assert_eq!("pessimistic".parse(), Ok(Mode::Pessimistic));
        assert_eq!("random:7".parse(), Ok(Mode::Random(7)));
        for bad in ["random", "random:x", "kind", "Pessimistic", "random:-1"] {
            let e = bad.parse::<Mode>().unwrap_err();
            assert!(e.contains("helpful") && e.contains("random:SEED"), "{e}");
        }
        assert_eq!(Mode::Random(9).to_string(), "random:9");
    }

    #[test]
    fn answers_follow_the_mode_and_random_replays() {
        let h = Unknowns::new(Mode::Helpful);
        let p = Unknowns::new(Mode::Pessimistic);
        assert!(!h.hard("x") && p.hard("x"));
        assert_eq!(h.pick("y", &[1, 2, 3]), 1);
        assert_eq!(p.pick("y", &[1, 2, 3]), 3);
        let draws = |seed| {
            let r = Unknowns::new(Mode::Random(seed));
            (0..64)
                .map(|_| (r.hard("a"), r.pick("b", &[1, 2, 3])))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        let d = draws(7);
        assert!(
            d.iter().any(|x| x.0) && d.iter().any(|x| !x.0),
            "both answers drawn"
        );
        assert!((1..=3).all(|v| d.iter().any(|x| x.1 == v)));
    }
}
