//! A fixed-capacity range allocator (no heap): the engine of the VRAM and VA allocators.
//!
//! Free space is a sorted, coalesced list of ranges and live blocks a sorted list, both in
//! `heapless::Vec`s of capacity `N`. Live blocks are limited to `N - 1`, which bounds the free
//! fragments to `N` (there is at most one free range between two live blocks, plus the ends),
//! so freeing never fails for lack of room. Keeping live blocks lets `free` take just the
//! address and reject double or bogus frees with an error instead of corrupting the free list.
//!
//! Costs: allocation scans the free list (O(fragments)); insertion and removal shift the
//! vectors (O(N) memmove). With N in the thousands both are microseconds, far below the cost of
//! writing the page tables for the memory. Fragmentation figures are in `docs/mm.md`.

use core::fmt;

/// How a free range is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FitPolicy {
    /// The lowest-addressed range that fits.
    #[default]
    FirstFit,
    /// The smallest range that fits (lowest address on ties).
    BestFit,
}

/// Why an allocator call failed. The allocator is unchanged after every error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// A size of zero.
    ZeroSize,
    /// An address or size is not a multiple of the allocator's granule.
    Misaligned {
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The granule.
        align: u64,
    },
    /// An alignment that is not a power of two.
    BadAlignment(u64),
    /// No free range can hold the request.
    Exhausted {
        /// Bytes asked for.
        size: u64,
        /// Alignment asked for.
        align: u64,
        /// Free bytes in total.
        free: u64,
        /// The largest free range.
        largest: u64,
    },
    /// The fixed number of live blocks is reached.
    TooManyBlocks {
        /// Live blocks allowed.
        capacity: usize,
    },
    /// No live block starts at this address (double free or a bogus address).
    NotAllocated {
        /// The address.
        addr: u64,
    },
    /// The block is a reservation (GSP/firmware memory) and cannot be freed.
    Reserved {
        /// The address.
        addr: u64,
    },
    /// A fixed-address request overlaps a live block or leaves the managed range.
    Unavailable {
        /// First byte.
        addr: u64,
        /// Bytes.
        size: u64,
    },
    /// The managed range itself is unusable (empty, misaligned, overflowing).
    BadRange {
        /// Why.
        why: &'static str,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroSize => write!(f, "cannot allocate zero bytes"),
            Self::Misaligned { what, value, align } => {
                write!(f, "{what} {value:#x} is not a multiple of {align:#x}")
            }
            Self::BadAlignment(a) => write!(f, "alignment {a:#x} is not a power of two"),
            Self::Exhausted {
                size,
                align,
                free,
                largest,
            } => write!(
                f,
                "no room for {size:#x} bytes aligned to {align:#x}: {free:#x} bytes free, the \
                 largest free range is {largest:#x}; free buffers or allocate smaller pieces"
            ),
            Self::TooManyBlocks { capacity } => write!(
                f,
                "allocator full: {capacity} live blocks is its fixed capacity; free blocks or \
                 build it with a larger capacity"
            ),
            Self::NotAllocated { addr } => write!(
                f,
                "{addr:#x} is not the start of a live allocation (double free?); nothing was \
                 freed"
            ),
            Self::Reserved { addr } => write!(
                f,
                "{addr:#x} is reserved for the GSP or firmware and cannot be freed"
            ),
            Self::Unavailable { addr, size } => write!(
                f,
                "range {addr:#x}+{size:#x} is in use or outside the managed range"
            ),
            Self::BadRange { why } => write!(f, "unusable allocator range: {why}"),
        }
    }
}

impl core::error::Error for AllocError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    start: u64,
    end: u64,
    reserved: bool,
}

/// A first-fit or best-fit allocator over `[base, base + size)` with at most `N - 1` live
/// blocks. Addresses and sizes are multiples of `granule`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeAllocator<const N: usize> {
    base: u64,
    end: u64,
    granule: u64,
    policy: FitPolicy,
    free: heapless::Vec<(u64, u64), N>,
    used: heapless::Vec<Block, N>,
    free_bytes: u64,
}

impl<const N: usize> RangeAllocator<N> {
    /// An allocator over `size` bytes at `base`; `granule` is a power of two dividing both.
    pub fn new(base: u64, size: u64, granule: u64, policy: FitPolicy) -> Result<Self, AllocError> {
        let mut a = Self::empty();
        a.reset(base, size, granule, policy)?;
        Ok(a)
    }

    /// An allocator managing nothing, for `static` or in-place initialisation with
    /// [`RangeAllocator::reset`] (large capacities need not pass through the stack).
    pub const fn empty() -> Self {
        RangeAllocator {
            base: 0,
            end: 0,
            granule: 4096,
            policy: FitPolicy::FirstFit,
            free: heapless::Vec::new(),
            used: heapless::Vec::new(),
            free_bytes: 0,
        }
    }

    /// Forgets every block and manages `size` bytes at `base` from now on. On error the
    /// allocator is unchanged.
    pub fn reset(
        &mut self,
        base: u64,
        size: u64,
        granule: u64,
        policy: FitPolicy,
    ) -> Result<(), AllocError> {
        if N < 2 {
            return Err(AllocError::BadRange {
                why: "capacity must be at least 2",
            });
        }
        if !granule.is_power_of_two() {
            return Err(AllocError::BadAlignment(granule));
        }
        if size == 0 {
            return Err(AllocError::BadRange { why: "empty" });
        }
        for (what, value) in [("base", base), ("size", size)] {
            if !value.is_multiple_of(granule) {
                return Err(AllocError::Misaligned {
                    what,
                    value,
                    align: granule,
                });
            }
        }
        let end = base.checked_add(size).ok_or(AllocError::BadRange {
            why: "base + size overflows",
        })?;
        self.base = base;
        self.end = end;
        self.granule = granule;
        self.policy = policy;
        self.used.clear();
        self.free.clear();
        // Capacity is at least 2, so this push cannot fail.
        let _ = self.free.push((base, end));
        self.free_bytes = size;
        Ok(())
    }

    /// First managed byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Managed bytes.
    pub fn size(&self) -> u64 {
        self.end - self.base
    }

    /// The allocation granule.
    pub fn granule(&self) -> u64 {
        self.granule
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// The largest free range.
    pub fn largest_free(&self) -> u64 {
        self.free.iter().map(|&(s, e)| e - s).max().unwrap_or(0)
    }

    /// Number of free ranges.
    pub fn free_fragments(&self) -> usize {
        self.free.len()
    }

    /// Live blocks (reservations included).
    pub fn blocks(&self) -> usize {
        self.used.len()
    }

    /// Live blocks allowed.
    pub const fn capacity() -> usize {
        N.saturating_sub(1)
    }

    /// Free ranges, lowest first, as (start, end).
    pub fn free_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().copied()
    }

    /// Live blocks, lowest first, as (start, end, reserved).
    pub fn used_ranges(&self) -> impl Iterator<Item = (u64, u64, bool)> + '_ {
        self.used.iter().map(|b| (b.start, b.end, b.reserved))
    }

    fn check_size(&self, size: u64) -> Result<(), AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !size.is_multiple_of(self.granule) {
            return Err(AllocError::Misaligned {
                what: "size",
                value: size,
                align: self.granule,
            });
        }
        if self.used.len() >= Self::capacity() {
            return Err(AllocError::TooManyBlocks {
                capacity: Self::capacity(),
            });
        }
        Ok(())
    }

    /// Allocates `size` bytes at an address that is a multiple of `align` (a power of two;
    /// values below the granule mean the granule).
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.check_size(size)?;
        if !align.is_power_of_two() {
            return Err(AllocError::BadAlignment(align));
        }
        let align = align.max(self.granule);
        let mut best: Option<(usize, u64, u64)> = None; // (index, start, fragment size)
        for (i, &(s, e)) in self.free.iter().enumerate() {
            let Some(a) = s.checked_next_multiple_of(align) else {
                continue;
            };
            if a.checked_add(size).is_some_and(|end| end <= e) {
                match self.policy {
                    FitPolicy::FirstFit => {
                        best = Some((i, a, e - s));
                        break;
                    }
                    FitPolicy::BestFit => {
                        if best.is_none_or(|(_, _, len)| e - s < len) {
                            best = Some((i, a, e - s));
                        }
                    }
                }
            }
        }
        let Some((i, a, _)) = best else {
            return Err(AllocError::Exhausted {
                size,
                align,
                free: self.free_bytes,
                largest: self.largest_free(),
            });
        };
        self.carve(i, a, a + size, false)?;
        Ok(a)
    }

    /// Takes `[addr, addr + size)`, which must be free, as a live block (`reserved` blocks
    /// cannot be freed).
    pub fn alloc_at(&mut self, addr: u64, size: u64, reserved: bool) -> Result<(), AllocError> {
        self.check_size(size)?;
        if !addr.is_multiple_of(self.granule) {
            return Err(AllocError::Misaligned {
                what: "address",
                value: addr,
                align: self.granule,
            });
        }
        let end = addr
            .checked_add(size)
            .ok_or(AllocError::Unavailable { addr, size })?;
        let i = self
            .free
            .iter()
            .position(|&(s, e)| s <= addr && end <= e)
            .ok_or(AllocError::Unavailable { addr, size })?;
        self.carve(i, addr, end, reserved)
    }

    /// Cuts `[a, b)` out of free range `i` and records it as live.
    fn carve(&mut self, i: usize, a: u64, b: u64, reserved: bool) -> Result<(), AllocError> {
        let Some(&(s, e)) = self.free.get(i) else {
            return Err(AllocError::Unavailable {
                addr: a,
                size: b - a,
            });
        };
        let full = AllocError::TooManyBlocks {
            capacity: Self::capacity(),
        };
        // Room checks first, so a failure changes nothing (the invariant makes them pass).
        let grows = a > s && b < e;
        if (grows && self.free.is_full()) || self.used.is_full() {
            return Err(full);
        }
        let ui = self.used.partition_point(|u| u.start < a);
        let block = Block {
            start: a,
            end: b,
            reserved,
        };
        self.used.insert(ui, block).map_err(|_| full)?;
        match (a > s, b < e) {
            (false, false) => {
                self.free.remove(i);
            }
            (true, false) => {
                if let Some(f) = self.free.get_mut(i) {
                    *f = (s, a);
                }
            }
            (false, true) => {
                if let Some(f) = self.free.get_mut(i) {
                    *f = (b, e);
                }
            }
            (true, true) => {
                if let Some(f) = self.free.get_mut(i) {
                    *f = (s, a);
                }
                // Checked above: there is room.
                self.free.insert(i + 1, (b, e)).map_err(|_| full)?;
            }
        }
        self.free_bytes -= b - a;
        Ok(())
    }

    /// Frees the live block starting at `addr`; returns its size.
    pub fn free(&mut self, addr: u64) -> Result<u64, AllocError> {
        let ui = self
            .used
            .binary_search_by(|u| u.start.cmp(&addr))
            .map_err(|_| AllocError::NotAllocated { addr })?;
        let Some(&Block {
            start,
            end,
            reserved,
        }) = self.used.get(ui)
        else {
            return Err(AllocError::NotAllocated { addr });
        };
        if reserved {
            return Err(AllocError::Reserved { addr });
        }
        // Neighbours in the free list.
        let fi = self.free.partition_point(|&(s, _)| s < start);
        let left = fi
            .checked_sub(1)
            .and_then(|j| self.free.get(j).copied())
            .filter(|&(_, e)| e == start);
        let right = self.free.get(fi).copied().filter(|&(s, _)| s == end);
        match (left, right) {
            (Some((ls, _)), Some((_, re))) => {
                if let Some(f) = self.free.get_mut(fi - 1) {
                    *f = (ls, re);
                }
                self.free.remove(fi);
            }
            (Some((ls, _)), None) => {
                if let Some(f) = self.free.get_mut(fi - 1) {
                    *f = (ls, end);
                }
            }
            (None, Some((_, re))) => {
                if let Some(f) = self.free.get_mut(fi) {
                    *f = (start, re);
                }
            }
            (None, None) => {
                // At most used.len() + 1 <= N free ranges exist, and we are about to remove
                // a used block; this cannot overflow.
                self.free
                    .insert(fi, (start, end))
                    .map_err(|_| AllocError::TooManyBlocks {
                        capacity: Self::capacity(),
                    })?;
            }
        }
        self.used.remove(ui);
        self.free_bytes += end - start;
        Ok(end - start)
    }

    /// The live block containing `addr`, as (start, end, reserved).
    pub fn block_containing(&self, addr: u64) -> Option<(u64, u64, bool)> {
        let i = self.used.partition_point(|u| u.start <= addr);
        let b = self.used.get(i.checked_sub(1)?)?;
        (addr < b.end).then_some((b.start, b.end, b.reserved))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::vec::Vec;

    #[test]
    fn basics() {
        let mut a =
            RangeAllocator::<8>::new(0x1000, 0x10_0000, 0x1000, FitPolicy::FirstFit).unwrap();
        let x = a.alloc(0x2000, 0x1000).unwrap();
        assert_eq!(x, 0x1000);
        let y = a.alloc(0x1000, 0x1_0000).unwrap();
        assert_eq!(y, 0x1_0000);
        assert_eq!(a.free_fragments(), 2);
        assert_eq!(a.free(x), Ok(0x2000));
        assert_eq!(a.free(x), Err(AllocError::NotAllocated { addr: x }));
        assert_eq!(
            a.free(y + 0x1000),
            Err(AllocError::NotAllocated { addr: y + 0x1000 })
        );
        assert_eq!(a.free(y), Ok(0x1000));
        assert_eq!(a.free_bytes(), 0x10_0000);
        assert_eq!(a.free_fragments(), 1);
        assert_eq!(a.alloc(0, 0x1000), Err(AllocError::ZeroSize));
        assert!(matches!(
            a.alloc(0x800, 0x1000),
            Err(AllocError::Misaligned { .. })
        ));
        assert_eq!(a.alloc(0x1000, 3), Err(AllocError::BadAlignment(3)));
        assert!(matches!(
            a.alloc(0x20_0000, 0x1000),
            Err(AllocError::Exhausted { .. })
        ));
        a.alloc_at(0x8000, 0x1000, true).unwrap();
        assert_eq!(a.free(0x8000), Err(AllocError::Reserved { addr: 0x8000 }));
        assert!(matches!(
            a.alloc_at(0x8000, 0x1000, false),
            Err(AllocError::Unavailable { .. })
        ));
        assert_eq!(a.block_containing(0x8800), Some((0x8000, 0x9000, true)));
        assert_eq!(a.block_containing(0x9000), None);
    }

    #[test]
    fn capacity_is_enforced_and_free_never_fails() {
        let mut a = RangeAllocator::<4>::new(0, 0x100_0000, 0x1000, FitPolicy::FirstFit).unwrap();
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(a.alloc(0x1000, 0x1_0000).unwrap());
        }
        assert_eq!(
            a.alloc(0x1000, 0x1000),
            Err(AllocError::TooManyBlocks { capacity: 3 })
        );
        // Free the middle one: 3 free ranges + ... still fits.
        a.free(v[1]).unwrap();
        a.free(v[0]).unwrap();
        a.free(v[2]).unwrap();
        assert_eq!(a.free_fragments(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { pages: u64, align_shift: u32 },
        Free { pick: usize },
        FreeBogus { addr: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u64..64, 12u32..22).prop_map(|(pages, align_shift)| Op::Alloc { pages, align_shift }),
            2 => any::<usize>().prop_map(|pick| Op::Free { pick }),
            1 => (0u64..0x400).prop_map(|p| Op::FreeBogus { addr: p * 0x1000 }),
        ]
    }

    fn check_invariants<const N: usize>(a: &RangeAllocator<N>, live: &BTreeMap<u64, u64>) {
        // Free ranges sorted, disjoint, coalesced, inside; used matches the model; together
        // they cover the whole range exactly.
        let mut pieces: Vec<(u64, u64)> = a.free_ranges().collect();
        for w in pieces.windows(2) {
            assert!(w[0].1 < w[1].0, "free ranges overlap or touch: {w:?}");
        }
        let used: Vec<(u64, u64)> = a.used_ranges().map(|(s, e, _)| (s, e)).collect();
        let want: Vec<(u64, u64)> = live.iter().map(|(&s, &n)| (s, s + n)).collect();
        assert_eq!(used, want);
        pieces.extend(used);
        pieces.sort();
        let mut at = a.base();
        for (s, e) in pieces {
            assert_eq!(s, at, "gap or overlap at {at:#x}");
            assert!(e > s);
            at = e;
        }
        assert_eq!(at, a.base() + a.size());
        let used_bytes: u64 = live.values().sum();
        assert_eq!(a.free_bytes(), a.size() - used_bytes);
    }

    fn run(policy: FitPolicy, ops: Vec<Op>) {
        const SIZE: u64 = 0x40_0000;
        let mut a = RangeAllocator::<16>::new(0x10_0000, SIZE, 0x1000, policy).unwrap();
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            let before = a.clone();
            match op {
                Op::Alloc { pages, align_shift } => {
                    let size = pages * 0x1000;
                    let align = 1u64 << align_shift;
                    match a.alloc(size, align) {
                        Ok(x) => {
                            assert_eq!(x % align, 0);
                            assert!(x >= a.base() && x + size <= a.base() + SIZE);
                            live.insert(x, size);
                        }
                        Err(AllocError::TooManyBlocks { .. }) => {
                            assert_eq!(live.len(), 15);
                            assert_eq!(a, before, "a failed alloc changed the allocator");
                        }
                        Err(AllocError::Exhausted { .. }) => {
                            // Really no aligned room anywhere.
                            for (s, e) in a.free_ranges() {
                                let st = s.next_multiple_of(align);
                                assert!(st + size > e);
                            }
                            assert_eq!(a, before, "a failed alloc changed the allocator");
                        }
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                Op::Free { pick } => {
                    if live.is_empty() {
                        continue;
                    }
                    let (&x, &n) = live.iter().nth(pick % live.len()).unwrap();
                    assert_eq!(a.free(x), Ok(n));
                    live.remove(&x);
                    let after = a.clone();
                    assert_eq!(a.free(x), Err(AllocError::NotAllocated { addr: x }));
                    assert_eq!(a, after, "a double free changed the allocator");
                }
                Op::FreeBogus { addr } => {
                    let addr = a.base() + addr;
                    if !live.contains_key(&addr) {
                        assert_eq!(a.free(addr), Err(AllocError::NotAllocated { addr }));
                        assert_eq!(a, before, "a failed free changed the allocator");
                    }
                }
            }
            check_invariants(&a, &live);
        }
        for (&x, &n) in &live {
            assert_eq!(a.free(x), Ok(n));
        }
        assert_eq!(a.free_bytes(), SIZE);
        assert_eq!(a.free_fragments(), 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn first_fit_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
            run(FitPolicy::FirstFit, ops);
        }

        #[test]
        fn best_fit_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
            run(FitPolicy::BestFit, ops);
        }
    }
}
