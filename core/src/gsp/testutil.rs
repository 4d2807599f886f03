//! Test doubles for the GSP modules' unit tests: heap-backed DMA memory, a register file that
//! counts doorbells, and a clock that only moves when waited on.
extern crate std;

use core::cell::{Cell, RefCell};
use core::time::Duration;
use std::vec;
use std::vec::Vec;

use crate::hal::{Clock, DmaBuffer, HalError, Mmio, check_range};

/// DMA memory backed by a `Vec`, with a fixed fake device address.
pub(crate) struct VecDma {
    pub(crate) data: RefCell<Vec<u8>>,
    pub(crate) addr: u64,
}

impl VecDma {
    pub(crate) fn new(len: usize) -> Self {
        VecDma {
            data: RefCell::new(vec![0; len]),
            addr: 0x1_0000_0000,
        }
    }
}

impl DmaBuffer for VecDma {
    fn len(&self) -> usize {
        self.data.borrow().len()
    }
    fn dev_addr(&self) -> u64 {
        self.addr
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        let d = self.data.borrow();
        check_range(offset as u64, dst.len() as u64, d.len() as u64)?;
        dst.copy_from_slice(&d[offset..offset + dst.len()]);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        let mut d = self.data.borrow_mut();
        check_range(offset as u64, src.len() as u64, d.len() as u64)?;
        d[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

impl<T: DmaBuffer + ?Sized> DmaBuffer for &T {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn dev_addr(&self) -> u64 {
        (**self).dev_addr()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        (**self).read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        (**self).write(offset, src)
    }
}

/// Registers that remember writes to the doorbell.
#[derive(Default)]
pub(crate) struct Doorbell {
    pub(crate) rings: Cell<u32>,
}

impl Mmio for Doorbell {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    fn write32(&self, offset: usize, _value: u32) {
        if offset == 0x11_0c00 {
            self.rings.set(self.rings.get() + 1);
        }
    }
}

/// A clock that advances only in `delay`.
#[derive(Default)]
pub(crate) struct StepClock(pub(crate) Cell<Duration>);

impl Clock for StepClock {
    fn now(&self) -> Duration {
        self.0.get()
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d)
    }
}
