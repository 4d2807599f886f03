//! The GSP side of the simulated GPU: a GSP-RM emulator on the real message-queue format,
//! and a small RM object model to test it with until the full one lands.

pub mod emulator;
pub mod mini_rm;

#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod tests;

pub use emulator::{EmuClock, EmuEvent, EmuStats, EmulatorConfig, Fault, GspEmulator};
pub use mini_rm::MiniRm;
