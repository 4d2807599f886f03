//! GPU virtual address allocation.
//!
//! Addresses are aligned to the largest page size that fits the request (as tinygrad's
//! `alloc_vaddr` does), so a buffer whose physical memory is equally aligned is mapped with big
//! or huge pages.

use super::format::MmuFormat;
use super::range::{AllocError, FitPolicy, RangeAllocator};

/// Granule of VA allocations.
pub const VA_GRANULE: u64 = 4096;

/// A VA allocator over part of one address space, with at most `N - 1` live blocks.
#[derive(Debug, Clone)]
pub struct VaAllocator<const N: usize> {
    inner: RangeAllocator<N>,
    fmt: MmuFormat,
}

impl<const N: usize> VaAllocator<N> {
    /// Hands out addresses in `[base, base + size)`, which must lie in `fmt`'s address space.
    /// Keep `base` above 0 so a null pointer never maps.
    pub fn new(
        fmt: MmuFormat,
        base: u64,
        size: u64,
        policy: FitPolicy,
    ) -> Result<Self, AllocError> {
        match base.checked_add(size) {
            Some(end) if end <= fmt.va_limit() => {}
            _ => {
                return Err(AllocError::BadRange {
                    why: "beyond the format's virtual address space",
                });
            }
        }
        Ok(VaAllocator {
            inner: RangeAllocator::new(base, size, VA_GRANULE, policy)?,
            fmt,
        })
    }

    /// Allocates `size` bytes aligned to the largest page size the format supports within
    /// `size`.
    pub fn alloc(&mut self, size: u64) -> Result<u64, AllocError> {
        let align = self.fmt.largest_page_within(size).bytes();
        self.inner.alloc(size, align)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two).
    pub fn alloc_aligned(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.inner.alloc(size, align)
    }

    /// Takes a fixed range (e.g. to keep VA equal to a CPU address).
    pub fn alloc_at(&mut self, va: u64, size: u64) -> Result<(), AllocError> {
        self.inner.alloc_at(va, size, false)
    }

    /// Frees the block at `va`; returns its size.
    pub fn free(&mut self, va: u64) -> Result<u64, AllocError> {
        self.inner.free(va)
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.inner.free_bytes()
    }

    /// The underlying range allocator.
    pub fn ranges(&self) -> &RangeAllocator<N> {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_for_large_pages() {
        let mut v =
            VaAllocator::<16>::new(MmuFormat::V3, 1 << 32, 1 << 40, FitPolicy::FirstFit).unwrap();
        let a = v.alloc(4096).unwrap();
        let b = v.alloc(3 << 20).unwrap();
        assert_eq!(b % (2 << 20), 0);
        let c = v.alloc(1 << 30).unwrap();
        assert_eq!(c % (512 << 20), 0);
        let mut t =
            VaAllocator::<16>::new(MmuFormat::V2_TURING, 1 << 32, 1 << 40, FitPolicy::FirstFit)
                .unwrap();
        let d = t.alloc(1 << 30).unwrap();
        assert_eq!(d % (2 << 20), 0);
        for x in [a, b, c] {
            v.free(x).unwrap();
        }
        assert_eq!(v.free(a), Err(AllocError::NotAllocated { addr: a }));
        assert_eq!(v.free_bytes(), 1 << 40);
        assert!(
            VaAllocator::<16>::new(
                MmuFormat::V2,
                1 << 48,
                (1 << 48) + 4096,
                FitPolicy::FirstFit
            )
            .is_err()
        );
        assert!(
            VaAllocator::<16>::new(MmuFormat::V3, 1 << 48, 1 << 48, FitPolicy::FirstFit).is_ok()
        );
    }
}
