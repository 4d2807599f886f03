//! BAR0: a register file plus engines that claim register ranges.
//!
//! Plain registers (chip identity, scratch values) live in [`RegisterFile`]. Hardware blocks
//! that act on writes (falcons, the MMU invalidate unit, the doorbell, the FSP queues) are
//! [`MmioEngine`]s: each claims a set of offsets and sees every access to them with mutable
//! access to the rest of the GPU through [`SimCore`]. Later subsystems plug in as engines
//! without touching this file.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::clock::SimClock;
use crate::host::HostMemory;
use crate::system::PeerPorts;
use crate::vram::Vram;

/// Size of BAR0 on every modelled chip (16 MiB).
pub const BAR0_SIZE: usize = 16 << 20;

/// Plain 32-bit registers, all zero until written.
#[derive(Debug, Default, Clone)]
pub struct RegisterFile {
    regs: HashMap<u32, u32>,
}

impl RegisterFile {
    /// Reads a register (0 if never written).
    pub fn get(&self, offset: u32) -> u32 {
        self.regs.get(&offset).copied().unwrap_or(0)
    }

    /// Writes a register.
    pub fn set(&mut self, offset: u32, value: u32) {
        self.regs.insert(offset, value);
    }
}

/// What engines can reach: registers, memory, time, and a log of notable events.
pub struct SimCore {
    /// Plain registers.
    pub regs: RegisterFile,
    /// Video memory.
    pub vram: Arc<Vram>,
    /// Host memory reachable by DMA.
    pub host: Arc<HostMemory>,
    /// Time.
    pub clock: Arc<SimClock>,
    /// Other GPUs' video memory by peer id (`Aperture::Peer`), set up by a
    /// [`crate::system::SimSystem`] when peer access is enabled.
    pub peers: Arc<PeerPorts>,
    /// Human-readable trace of what the GPU did (most recent last, bounded).
    pub trace: Vec<String>,
    /// How this GPU answers where nothing public says what the hardware does.
    pub unknowns: Arc<crate::unknowns::Unknowns>,
}

impl fmt::Debug for SimCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimCore")
            .field("vram", &self.vram.size())
            .finish_non_exhaustive()
    }
}

impl SimCore {
    /// Most trace lines kept.
    pub const TRACE_LIMIT: usize = 4096;

    /// Records a trace line.
    pub fn trace(&mut self, line: impl Into<String>) {
        if self.trace.len() >= Self::TRACE_LIMIT {
            self.trace.remove(0);
        }
        self.trace.push(line.into());
    }
}

/// A hardware block that reacts to BAR0 accesses.
pub trait MmioEngine: Send {
    /// Name for traces.
    fn name(&self) -> &'static str;

    /// Whether this engine handles `offset`.
    fn claims(&self, offset: u32) -> bool;

    /// A read of a claimed register.
    fn read(&mut self, core: &mut SimCore, offset: u32) -> u32;

    /// A write of a claimed register.
    fn write(&mut self, core: &mut SimCore, offset: u32, value: u32);

    /// A PCI function reset (FLR): return to the power-on state.
    fn reset(&mut self, _core: &mut SimCore) {}
}

/// The GPU timer in the usermode block (`NVC361_TIME_0/1` at BAR0 0xbb0080/0xbb0084).
#[derive(Debug, Default)]
pub struct UsermodeTimer;

impl MmioEngine for UsermodeTimer {
    fn name(&self) -> &'static str {
        "usermode-timer"
    }

    fn claims(&self, offset: u32) -> bool {
        offset == 0xbb_0080 || offset == 0xbb_0084
    }

    fn read(&mut self, core: &mut SimCore, offset: u32) -> u32 {
        let ns = core.clock.nanos();
        if offset == 0xbb_0080 {
            ns as u32
        } else {
            (ns >> 32) as u32
        }
    }

    fn write(&mut self, _core: &mut SimCore, _offset: u32, _value: u32) {}
}
