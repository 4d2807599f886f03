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
        let mut v = Self::empty(fmt);
        v.reset(base, size, policy)?;
        Ok(v)
    }

    /// An allocator managing nothing, for `static` or in-place initialisation with
    /// [`VaAllocator::reset`].
    pub const fn empty(fmt: MmuFormat) -> Self {
        VaAllocator {
            inner: RangeAllocator::empty(),
            fmt,
        }
    }

    /// Forgets every block and hands out `[base, base + size)` from now on.
    pub fn reset(&mut self, base: u64, size: u64, policy: FitPolicy) -> Result<(), AllocError> {
        match base.checked_add(size) {
            Some(end) if end <= self.fmt.va_limit() => {}
            _ => {
                return Err(AllocError::BadRange {
                    why: "beyond the format's virtual address space",
                });
            }
        }
        self.inner.reset(base, size, VA_GRANULE, policy)
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
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    proptest! {
        #[test]
        fn va_blocks_are_aligned_disjoint_and_all_come_back(
            sizes in proptest::collection::vec(1u64..(1 << 20), 1..100),
            frees in proptest::collection::vec(any::<prop::sample::Index>(), 0..50),
        ) {
            let fmt = MmuFormat::V3;
            let mut v = VaAllocator::<64>::new(fmt, 1 << 32, 1 << 36, FitPolicy::FirstFit).unwrap();
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (i, pages) in sizes.into_iter().enumerate() {
                let size = pages * 4096;
                let before = v.clone();
                match v.alloc(size) {
                    Ok(a) => {
                        let align = fmt.largest_page_within(size).bytes();
                        prop_assert_eq!(a % align, 0);
                        prop_assert!(a >= 1 << 32 && a + size <= (1 << 32) + (1 << 36));
                        for &(b, n) in &live {
                            prop_assert!(a + size <= b || b + n <= a);
                        }
                        live.push((a, size));
                    }
                    Err(_) => prop_assert_eq!(v.ranges(), before.ranges()),
                }
                if let Some(ix) = frees.get(i).filter(|_| !live.is_empty()) {
                    let (a, n) = live.swap_remove(ix.index(live.len()));
                    prop_assert_eq!(v.free(a), Ok(n));
                }
            }
            for (a, n) in live {
                prop_assert_eq!(v.free(a), Ok(n));
            }
            prop_assert_eq!(v.free_bytes(), 1 << 36);
            prop_assert_eq!(v.ranges().free_fragments(), 1);
        }
    }

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
