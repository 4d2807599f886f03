//! Test doubles shared by the fuzz targets: heap DMA memory, a register window, a clock.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use nvbare_core::hal::{Clock, DmaBuffer, HalError, Mmio, check_range};

/// DMA memory backed by a `Vec`.
pub struct VecDma(pub RefCell<Vec<u8>>);

impl DmaBuffer for VecDma {
    fn len(&self) -> usize {
        self.0.borrow().len()
    }
    fn dev_addr(&self) -> u64 {
        0x1_0000_0000
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        let d = self.0.borrow();
        check_range(offset as u64, dst.len() as u64, d.len() as u64)?;
        dst.copy_from_slice(&d[offset..offset + dst.len()]);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        let mut d = self.0.borrow_mut();
        check_range(offset as u64, src.len() as u64, d.len() as u64)?;
        d[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

/// Registers that ignore writes.
pub struct NullMmio;

impl Mmio for NullMmio {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    fn write32(&self, _offset: usize, _value: u32) {}
}

/// A clock that moves only when waited on.
#[derive(Default)]
pub struct StepClock(pub Cell<Duration>);

impl Clock for StepClock {
    fn now(&self) -> Duration {
        self.0.get()
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d.max(Duration::from_nanos(1)))
    }
}

/// Registers whose reads come from fuzz input, word by word (cycling); writes are ignored.
pub struct ScriptMmio {
    words: Vec<u32>,
    at: Cell<usize>,
}

impl ScriptMmio {
    /// Reads return `bytes` as little-endian words, from the start again at the end.
    pub fn new(bytes: &[u8]) -> Self {
        let words = bytes
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(b)
            })
            .collect();
        ScriptMmio {
            words,
            at: Cell::new(0),
        }
    }
}

impl Mmio for ScriptMmio {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, _offset: usize) -> u32 {
        if self.words.is_empty() {
            return 0;
        }
        let i = self.at.get();
        self.at.set((i + 1) % self.words.len());
        self.words[i]
    }
    fn write32(&self, _offset: usize, _value: u32) {}
}

/// A clock that jumps at least a millisecond per wait, so that multi-second timeouts end in a
/// few thousand polls.
#[derive(Default)]
pub struct JumpClock(pub Cell<Duration>);

impl Clock for JumpClock {
    fn now(&self) -> Duration {
        self.0.get()
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d.max(Duration::from_millis(1)))
    }
}
