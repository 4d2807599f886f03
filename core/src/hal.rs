//! Hardware abstraction: the traits an embedder implements.
//!
//! The driver touches hardware only through these traits. A Linux host implements them over
//! VFIO and hugepages (`nvbare-pci-host`), the simulated GPU (`nvbare-sim`) implements them over
//! plain memory, and a unikernel implements them over its own page tables.
//!
//! Two rules shape the API:
//!
//! * MMIO and DMA memory are never exposed as Rust references. The GPU may change DMA memory at
//!   any time, so a `&[u8]` into it would be undefined behaviour; all access goes through
//!   methods that copy with volatile semantics.
//! * No method panics on a bad offset. MMIO behaves like PCI: reads outside the window return
//!   all ones and writes are dropped (see [`Mmio`]); DMA accessors return [`HalError`].

use core::fmt;
use core::time::Duration;

/// Errors reported by hardware-access implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalError {
    /// An access fell outside a window or buffer.
    OutOfRange {
        /// First byte of the access.
        offset: u64,
        /// Bytes accessed.
        len: u64,
        /// Size of the window or buffer.
        limit: u64,
    },
    /// An access was not naturally aligned.
    Misaligned {
        /// Offset of the access.
        offset: u64,
        /// Required alignment.
        align: u64,
    },
    /// The embedder could not provide DMA memory of this size.
    NoMemory {
        /// Bytes requested.
        requested: u64,
    },
    /// The embedder does not implement this operation.
    Unsupported(&'static str),
    /// A host operating-system call failed with this error number.
    Os {
        /// What was being done.
        op: &'static str,
        /// The OS error number (errno on Linux).
        errno: i32,
    },
    /// The device stopped answering (reads return all ones).
    DeviceLost,
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::OutOfRange { offset, len, limit } => write!(
                f,
                "access of {len} bytes at {offset:#x} is outside the {limit:#x}-byte window \
                 (a driver bug or a corrupt offset read from the device)"
            ),
            Self::Misaligned { offset, align } => {
                write!(f, "access at {offset:#x} is not {align}-byte aligned")
            }
            Self::NoMemory { requested } => write!(
                f,
                "no DMA memory for {requested} bytes: reserve more (hugepages) or free buffers"
            ),
            Self::Unsupported(what) => write!(f, "{what} is not supported by this platform"),
            Self::Os { op, errno } => write!(f, "{op} failed (os error {errno})"),
            Self::DeviceLost => write!(
                f,
                "the GPU stopped answering (reads return 0xffffffff): check `lspci`, dmesg, \
                 and whether the device needs a reset"
            ),
        }
    }
}

impl core::error::Error for HalError {}

/// Checks that `len` bytes at `offset` fit in a window of `limit` bytes.
pub fn check_range(offset: u64, len: u64, limit: u64) -> Result<(), HalError> {
    match offset.checked_add(len) {
        Some(end) if end <= limit => Ok(()),
        _ => Err(HalError::OutOfRange { offset, len, limit }),
    }
}

/// A window of 32-bit device registers (a PCI BAR, the usermode page, a simulated register file).
///
/// Implementations use volatile accesses of exactly 32 bits. Like a PCI master abort, a read
/// outside the window returns `0xffff_ffff` and a write outside it is dropped; callers that need
/// to know use [`Mmio::try_read32`]. Offsets must be 4-byte aligned; implementations treat a
/// misaligned offset like an out-of-range one.
pub trait Mmio {
    /// Size of the window in bytes.
    fn size(&self) -> usize;

    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: usize) -> u32;

    /// Writes the 32-bit register at `offset`.
    fn write32(&self, offset: usize, value: u32);

    /// Reads a 64-bit value as two 32-bit reads, low word first.
    fn read64(&self, offset: usize) -> u64 {
        let lo = self.read32(offset) as u64;
        let hi = self.read32(offset.wrapping_add(4)) as u64;
        (hi << 32) | lo
    }

    /// Writes a 64-bit value as two 32-bit writes, low word first.
    fn write64(&self, offset: usize, value: u64) {
        self.write32(offset, value as u32);
        self.write32(offset.wrapping_add(4), (value >> 32) as u32);
    }

    /// Reads `offset`, reporting out-of-range or misaligned accesses instead of returning all ones.
    fn try_read32(&self, offset: usize) -> Result<u32, HalError> {
        check_mmio(offset, self.size())?;
        Ok(self.read32(offset))
    }

    /// Writes `offset`, reporting out-of-range or misaligned accesses instead of dropping them.
    fn try_write32(&self, offset: usize, value: u32) -> Result<(), HalError> {
        check_mmio(offset, self.size())?;
        self.write32(offset, value);
        Ok(())
    }

    /// Makes every earlier store of this CPU, to any memory (write-combined mappings included),
    /// visible before the next write to this window: what a doorbell needs (Linux's `wmb()`
    /// before `writel()`). The default is a full `SeqCst` fence; implementations on x86 may use
    /// a store fence (`sfence`), which orders write-combined stores and costs less.
    fn store_barrier(&self) {
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }
}

/// Validates a 32-bit MMIO access: 4-byte aligned and inside a window of `size` bytes.
pub fn check_mmio(offset: usize, size: usize) -> Result<(), HalError> {
    if !offset.is_multiple_of(4) {
        return Err(HalError::Misaligned {
            offset: offset as u64,
            align: 4,
        });
    }
    check_range(offset as u64, 4, size as u64)
}

impl<T: Mmio + ?Sized> Mmio for &T {
    fn size(&self) -> usize {
        (**self).size()
    }
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    fn read64(&self, offset: usize) -> u64 {
        (**self).read64(offset)
    }
    fn write64(&self, offset: usize, value: u64) {
        (**self).write64(offset, value)
    }
}

/// A DMA-coherent host buffer the GPU can reach at [`DmaBuffer::dev_addr`].
///
/// The contents may change under the CPU at any time (the GPU writes them), so there is no way
/// to borrow them; every access copies. Offsets are checked and report [`HalError::OutOfRange`].
pub trait DmaBuffer {
    /// Size in bytes (a multiple of 4 KiB).
    fn len(&self) -> usize;

    /// Whether the buffer is empty (never true for buffers from [`DmaAllocator::alloc_dma`]).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address the device uses for byte 0: an IOVA behind an IOMMU, a bus address otherwise.
    fn dev_addr(&self) -> u64;

    /// Copies `dst.len()` bytes starting at `offset` out of the buffer.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError>;

    /// Copies `src` into the buffer starting at `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError>;

    /// Fills `len` bytes at `offset` with `byte`.
    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        check_range(offset as u64, len as u64, self.len() as u64)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The CPU address of byte 0, where the buffer is plain memory of this address space
    /// that stays put for its lifetime (`None`: reach it through [`DmaBuffer::read`] and
    /// [`DmaBuffer::write`] only). Lets a host library hand the memory to a program as its own
    /// (CUDA's pinned host memory). Never turn it into a Rust reference while the device may
    /// access the memory.
    fn cpu_ptr(&self) -> Option<core::ptr::NonNull<u8>> {
        None
    }

    /// Reads a little-endian `u32`.
    fn read_u32(&self, offset: usize) -> Result<u32, HalError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian `u32`.
    fn write_u32(&self, offset: usize, value: u32) -> Result<(), HalError> {
        self.write(offset, &value.to_le_bytes())
    }

    /// Reads a little-endian `u64`.
    fn read_u64(&self, offset: usize) -> Result<u64, HalError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian `u64`.
    fn write_u64(&self, offset: usize, value: u64) -> Result<(), HalError> {
        self.write(offset, &value.to_le_bytes())
    }
}

/// Hands out DMA-coherent host memory.
pub trait DmaAllocator {
    /// The buffer type; freeing happens when it is dropped.
    type Buffer: DmaBuffer;

    /// Allocates `size` bytes (rounded up to 4 KiB), zeroed, mapped for the device.
    fn alloc_dma(&self, size: usize) -> Result<Self::Buffer, HalError>;
}

/// Monotonic time and delays.
pub trait Clock {
    /// Time since an arbitrary fixed point; never goes backwards.
    fn now(&self) -> Duration;

    /// Waits at least `d` (may sleep or spin).
    fn delay(&self, d: Duration);
}

impl<T: Clock + ?Sized> Clock for &T {
    fn now(&self) -> Duration {
        (**self).now()
    }
    fn delay(&self, d: Duration) {
        (**self).delay(d)
    }
}

/// PCI configuration space and function-level control of the GPU.
pub trait PciConfig {
    /// Reads the dword at `offset` (4-byte aligned, below 4096).
    fn read_config32(&self, offset: u16) -> Result<u32, HalError>;

    /// Writes the dword at `offset` (4-byte aligned, below 4096).
    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError>;

    /// Reads the 16-bit word at `offset` (2-byte aligned).
    fn read_config16(&self, offset: u16) -> Result<u16, HalError> {
        if !offset.is_multiple_of(2) {
            return Err(HalError::Misaligned {
                offset: offset as u64,
                align: 2,
            });
        }
        let dword = self.read_config32(offset & !3)?;
        Ok((dword >> ((offset & 2) * 8)) as u16)
    }

    /// Resets the PCI function (FLR or the platform's reset method).
    fn reset_function(&self) -> Result<(), HalError> {
        Err(HalError::Unsupported("PCI function reset"))
    }

    /// Enables or disables bus mastering (PCI command register bit 2).
    fn set_bus_master(&self, enable: bool) -> Result<(), HalError> {
        let cmd = self.read_config32(0x04)?;
        let new = if enable { cmd | 0x4 } else { cmd & !0x4 };
        // Write back only the command word; the status half is write-one-to-clear.
        self.write_config32(0x04, new & 0xffff)
    }
}

/// Why a [`poll_until`] wait ended without the condition becoming true.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollError {
    /// What was being waited for.
    pub what: &'static str,
    /// How long the wait lasted.
    pub waited: Duration,
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.waited, self.what
        )
    }
}

impl core::error::Error for PollError {}

/// `GPU_READ_PRI_ERROR_MASK`: the bits of a register read that say it failed.
pub const PRI_ERROR_MASK: u32 = 0xfff0_0000;
/// `GPU_READ_PRI_ERROR_CODE`: a read whose [`PRI_ERROR_MASK`] bits are this did not reach the
/// register (`0xbadf41xx` while a PRIV target mask locks it, `0xbadf10xx` on a PRI timeout,
/// ...; the low bits carry extra error information, `_kfspIsGspTargetMaskReleased`).
pub const PRI_ERROR_CODE: u32 = 0xbad0_0000;

/// Whether a BAR0 read returned a PRI error instead of the register (`g_gpu_nvoc.h`): none of
/// its bits mean anything about the register.
pub const fn is_pri_error(value: u32) -> bool {
    value & PRI_ERROR_MASK == PRI_ERROR_CODE
}

/// Whether a BAR0 read holds the register's value: neither all ones (no device answered) nor a
/// PRI error.
pub const fn is_register_value(value: u32) -> bool {
    value != u32::MAX && !is_pri_error(value)
}

/// Polls `cond` until it yields a value, fails, or `timeout` passes.
///
/// Every wait in the driver goes through here, so none can hang. `cond` is called at least once
/// and once more after the deadline (so a slow host cannot time out a condition that is true).
/// Between calls the clock's delay is used with `interval` (0 means spin). The timeout turns
/// into the caller's error type through `From<PollError>`.
pub fn poll_until<C, T, E, F>(
    clock: &C,
    timeout: Duration,
    interval: Duration,
    what: &'static str,
    mut cond: F,
) -> Result<T, E>
where
    C: Clock + ?Sized,
    E: From<PollError>,
    F: FnMut() -> Result<Option<T>, E>,
{
    let start = clock.now();
    loop {
        let expired = clock.now().saturating_sub(start) >= timeout;
        if let Some(v) = cond()? {
            return Ok(v);
        }
        if expired {
            return Err(PollError {
                what,
                waited: clock.now().saturating_sub(start),
            }
            .into());
        }
        if !interval.is_zero() {
            clock.delay(interval);
        } else {
            core::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    /// A clock that advances only when asked to delay.
    struct FakeClock(Cell<Duration>);
    impl Clock for FakeClock {
        fn now(&self) -> Duration {
            self.0.get()
        }
        fn delay(&self, d: Duration) {
            self.0.set(self.0.get() + d)
        }
    }

    #[test]
    fn pri_errors_are_not_register_values() {
        for v in [
            0xbadf_4100,
            0xbadf_41ff,
            0xbadf_1000,
            0xbad0_b0ff,
            0xbad0_0001,
        ] {
            assert!(is_pri_error(v) && !is_register_value(v), "{v:#x}");
        }
        for v in [0, 0x10, 0xbacf_ffff, 0xbae0_0000, 0x8000_0000] {
            assert!(!is_pri_error(v) && is_register_value(v), "{v:#x}");
        }
        assert!(!is_pri_error(u32::MAX) && !is_register_value(u32::MAX));
    }

    #[test]
    fn poll_returns_value() {
        let c = FakeClock(Cell::new(Duration::ZERO));
        let n = Cell::new(0);
        let r: Result<u32, PollError> = poll_until(
            &c,
            Duration::from_millis(10),
            Duration::from_millis(1),
            "n",
            || {
                n.set(n.get() + 1);
                Ok((n.get() == 3).then_some(7))
            },
        );
        assert_eq!(r, Ok(7));
        assert_eq!(n.get(), 3);
    }

    #[test]
    fn poll_times_out() {
        let c = FakeClock(Cell::new(Duration::ZERO));
        let r: Result<(), PollError> = poll_until(
            &c,
            Duration::from_millis(10),
            Duration::from_millis(1),
            "never",
            || Ok(None),
        );
        let e = r.unwrap_err();
        assert_eq!(e.what, "never");
        assert!(e.waited >= Duration::from_millis(10));
    }

    #[test]
    fn poll_propagates_errors() {
        #[derive(Debug, PartialEq)]
        enum E {
            Poll,
            Bad,
        }
        impl From<PollError> for E {
            fn from(_: PollError) -> Self {
                E::Poll
            }
        }
        let c = FakeClock(Cell::new(Duration::ZERO));
        let r: Result<(), E> = poll_until(&c, Duration::from_secs(1), Duration::ZERO, "x", || {
            Err(E::Bad)
        });
        assert_eq!(r, Err(E::Bad));
    }

    #[test]
    fn range_checks() {
        assert!(check_range(0, 4, 4).is_ok());
        assert!(check_range(1, 4, 4).is_err());
        assert!(check_range(u64::MAX, 2, u64::MAX).is_err());
        assert!(check_mmio(2, 16).is_err());
        assert!(check_mmio(12, 16).is_ok());
        assert!(check_mmio(16, 16).is_err());
    }
}
