//! The `hal` implementations of the check, all over static memory: DMA buffers carved from
//! `static` arrays (reached only through raw pointers, never as references, as the `hal`
//! contract asks of memory a device may write), a register file that logs writes, and a clock
//! that moves only when waited on.

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;

use nvbare_core::hal::{Clock, DmaBuffer, HalError, Mmio, check_range};

/// `N` bytes of static memory standing in for DMA memory, 4 KiB aligned. [`StaticMem::take`]
/// hands the memory out once, as one [`StaticDma`].
#[repr(C, align(4096))]
pub struct StaticMem<const N: usize> {
    bytes: UnsafeCell<[u8; N]>,
    taken: AtomicBool,
}

// SAFETY: the bytes are reached only through the single `StaticDma` that `take` hands out (the
// flag makes a second `take` fail), with raw-pointer accesses, never through references.
unsafe impl<const N: usize> Sync for StaticMem<N> {}

impl<const N: usize> StaticMem<N> {
    /// Zeroed memory (it lives in `.bss`).
    pub const fn new() -> Self {
        StaticMem {
            bytes: UnsafeCell::new([0; N]),
            taken: AtomicBool::new(false),
        }
    }

    /// The memory as a DMA buffer the "device" reaches at `dev_addr`; `None` if taken before.
    pub fn take(&'static self, dev_addr: u64) -> Option<StaticDma> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(StaticDma {
            base: self.bytes.get().cast::<u8>(),
            len: N,
            dev_addr,
        })
    }
}

/// A DMA buffer over static memory (what an embedder's buffer over a physical range looks
/// like, minus the address translation).
pub struct StaticDma {
    base: *mut u8,
    len: usize,
    dev_addr: u64,
}

impl DmaBuffer for StaticDma {
    fn len(&self) -> usize {
        self.len
    }

    fn dev_addr(&self) -> u64 {
        self.dev_addr
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: offset + i < len (checked above) and `base..base + len` is the static
            // array this buffer owns; volatile, as memory a device may write.
            *d = unsafe { self.base.add(offset + i).read_volatile() };
        }
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        for (i, s) in src.iter().enumerate() {
            // SAFETY: as in `read`.
            unsafe { self.base.add(offset + i).write_volatile(*s) };
        }
        Ok(())
    }
}

/// Writes the log keeps (older ones are dropped).
const LOG: usize = 32;

/// A register window that reads 0 everywhere (so every "busy" bit reads idle) and logs the
/// last [`LOG`] writes.
pub struct RegLog {
    writes: [Cell<(u32, u32)>; LOG],
    count: Cell<usize>,
}

impl RegLog {
    pub const fn new() -> Self {
        RegLog {
            writes: [const { Cell::new((0, 0)) }; LOG],
            count: Cell::new(0),
        }
    }

    /// Writes to `offset` so far (among the last [`LOG`]) and the last value written there.
    pub fn writes_to(&self, offset: usize) -> (u32, Option<u32>) {
        let n = self.count.get();
        let mut hits = 0;
        let mut last = None;
        for i in n.saturating_sub(LOG)..n {
            let (o, v) = self.writes[i % LOG].get();
            if o as usize == offset {
                hits += 1;
                last = Some(v);
            }
        }
        (hits, last)
    }
}

impl Mmio for RegLog {
    fn size(&self) -> usize {
        16 << 20
    }

    fn read32(&self, offset: usize) -> u32 {
        if offset >= self.size() { u32::MAX } else { 0 }
    }

    fn write32(&self, offset: usize, value: u32) {
        let n = self.count.get();
        self.writes[n % LOG].set((offset as u32, value));
        self.count.set(n + 1);
    }
}

/// A clock that advances only when asked to delay (so a timeout ends without real time).
pub struct StepClock(Cell<Duration>);

impl StepClock {
    pub const fn new() -> Self {
        StepClock(Cell::new(Duration::ZERO))
    }
}

impl Clock for StepClock {
    fn now(&self) -> Duration {
        self.0.get()
    }

    fn delay(&self, d: Duration) {
        self.0.set(self.0.get().saturating_add(d));
    }
}
