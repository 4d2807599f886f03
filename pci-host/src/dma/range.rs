//! A first-fit allocator of address ranges: IOVA space, and space inside a DMA chunk.

use std::collections::BTreeMap;

/// Why a range could not be returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The range overlaps free space (a double free) or is not granule-aligned.
    #[error("range {start:#x}+{len:#x} is not an allocated range (double free or corrupt size)")]
    NotAllocated {
        /// First address.
        start: u64,
        /// Length.
        len: u64,
    },
}

/// Free ranges of an address space, kept sorted and coalesced; allocation is first fit with
/// alignment. Every size and address is a multiple of the granule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeAllocator {
    /// start -> length of each free range; no two touch.
    free: BTreeMap<u64, u64>,
    granule: u64,
}

impl RangeAllocator {
    /// An allocator with no free space yet; `granule` must be a power of two.
    pub fn new(granule: u64) -> Self {
        RangeAllocator {
            free: BTreeMap::new(),
            granule: granule.max(1).next_power_of_two(),
        }
    }

    /// An allocator owning `[start, start + len)`.
    pub fn with_range(start: u64, len: u64, granule: u64) -> Self {
        let mut a = Self::new(granule);
        a.add(start, len);
        a
    }

    /// The granule.
    pub fn granule(&self) -> u64 {
        self.granule
    }

    /// Adds `[start, start + len)` to the free space, trimmed to whole granules. Space that is
    /// already free is ignored.
    pub fn add(&mut self, start: u64, len: u64) {
        let Some(end) = start.checked_add(len) else {
            return;
        };
        let s = start.next_multiple_of(self.granule);
        let e = end - end % self.granule;
        if e <= s {
            return;
        }
        // Insert piece by piece around existing free ranges.
        let mut cur = s;
        while cur < e {
            if let Some((&fs, &fl)) = self.free.range(..=cur).next_back()
                && fs + fl > cur
            {
                cur = fs + fl;
                continue;
            }
            let next_free = self.free.range(cur..e).next().map(|(&k, _)| k).unwrap_or(e);
            self.insert_free(cur, next_free - cur);
            cur = next_free;
        }
    }

    /// Removes `[start, start + len)` from the free space (e.g. reserved IOVA regions).
    pub fn reserve(&mut self, start: u64, len: u64) {
        let Some(end) = start.checked_add(len) else {
            return;
        };
        let s = start - start % self.granule;
        let e = end
            .checked_next_multiple_of(self.granule)
            .unwrap_or(u64::MAX);
        let overlapping: Vec<(u64, u64)> = self
            .free
            .range(..e)
            .filter(|(fs, fl)| **fs + **fl > s)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (fs, fl) in overlapping {
            self.free.remove(&fs);
            if fs < s {
                self.free.insert(fs, s - fs);
            }
            if fs + fl > e {
                self.free.insert(e, fs + fl - e);
            }
        }
    }

    /// Allocates `size` bytes (rounded up to the granule) aligned to `align` (a power of two,
    /// at least the granule). Returns the start address.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let size = size.max(1).checked_next_multiple_of(self.granule)?;
        let align = align.max(self.granule).checked_next_power_of_two()?;
        let (fs, fl, at) = self.free.iter().find_map(|(&fs, &fl)| {
            let at = fs.checked_next_multiple_of(align)?;
            let end = at.checked_add(size)?;
            (end <= fs + fl).then_some((fs, fl, at))
        })?;
        self.free.remove(&fs);
        if at > fs {
            self.free.insert(fs, at - fs);
        }
        let end = at + size;
        if fs + fl > end {
            self.free.insert(end, fs + fl - end);
        }
        Some(at)
    }

    /// Returns `[start, start + size)` (size rounded up like [`alloc`](Self::alloc)).
    pub fn free(&mut self, start: u64, size: u64) -> Result<(), RangeError> {
        let err = RangeError::NotAllocated { start, len: size };
        let size = size
            .max(1)
            .checked_next_multiple_of(self.granule)
            .ok_or(err)?;
        let end = start.checked_add(size).ok_or(err)?;
        if !start.is_multiple_of(self.granule) {
            return Err(err);
        }
        if let Some((&fs, &fl)) = self.free.range(..end).next_back()
            && fs + fl > start
        {
            return Err(err);
        }
        self.insert_free(start, size);
        Ok(())
    }

    fn insert_free(&mut self, start: u64, len: u64) {
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = self.free.range(..s).next_back()
            && ps + pl == s
        {
            self.free.remove(&ps);
            s = ps;
            l += pl;
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
    }

    /// Free bytes in total.
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// The free ranges, sorted.
    pub fn free_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(a, b)| (*a, *b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_fit_with_alignment_and_coalescing() {
        let mut a = RangeAllocator::with_range(0x1000, 0x10_0000, 0x1000);
        let x = a.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(x, 0x1000);
        let y = a.alloc(0x2000, 0x1_0000).unwrap();
        assert_eq!(y, 0x1_0000);
        assert_eq!(a.alloc(0x1000, 0).unwrap(), 0x2000);
        a.free(x, 0x1000).unwrap();
        assert_eq!(
            a.free(x, 0x1000),
            Err(RangeError::NotAllocated {
                start: x,
                len: 0x1000
            })
        );
        a.free(y, 0x2000).unwrap();
        a.free(0x2000, 1).unwrap();
        assert_eq!(a.free_ranges().collect::<Vec<_>>(), [(0x1000, 0x10_0000)]);
        assert_eq!(a.alloc(0x20_0000, 0x1000), None);
    }

    #[test]
    fn reserve_and_add_carve_the_space() {
        let mut a = RangeAllocator::with_range(0, 0x1_0000_0000, 0x1000);
        a.reserve(0xfee0_0000, 0x10_0000);
        assert_eq!(
            a.free_ranges().collect::<Vec<_>>(),
            [(0, 0xfee0_0000), (0xfef0_0000, 0x110_0000)]
        );
        a.add(0xfee0_0000, 0x1000);
        a.add(0, 0x10); // already free and sub-granule: ignored
        assert_eq!(a.free_bytes(), 0x1_0000_0000 - 0xf_f000);
        a.add(u64::MAX - 5, 100); // overflow: ignored
        assert_eq!(a.free_bytes(), 0x1_0000_0000 - 0xf_f000);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64, u32),
        Free(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..40, 0u32..5).prop_map(|(p, a)| Op::Alloc(p * 0x1000, a)),
            any::<usize>().prop_map(Op::Free),
        ]
    }

    proptest! {
        /// Against a model of one flag per granule: allocations never overlap, stay inside the
        /// space, are aligned; frees restore exactly what was taken; first fit finds space
        /// whenever the model says an aligned gap exists.
        #[test]
        fn matches_a_granule_model(ops in proptest::collection::vec(op(), 1..200)) {
            const G: u64 = 0x1000;
            const N: usize = 256;
            let base = 0x40_0000u64;
            let mut a = RangeAllocator::with_range(base, N as u64 * G, G);
            let mut used = [false; N];
            let mut live: Vec<(u64, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(size, al) => {
                        let align = G << al;
                        let pages = (size / G) as usize;
                        let model_fit = (0..N).find(|&i| {
                            (base + i as u64 * G).is_multiple_of(align)
                                && i + pages <= N
                                && used[i..i + pages].iter().all(|u| !u)
                        });
                        match a.alloc(size, align) {
                            Some(at) => {
                                prop_assert!(at.is_multiple_of(align));
                                let i = ((at - base) / G) as usize;
                                prop_assert!(i + pages <= N);
                                prop_assert!(used[i..i + pages].iter().all(|u| !u));
                                prop_assert_eq!(Some(i), model_fit, "first fit");
                                used[i..i + pages].iter_mut().for_each(|u| *u = true);
                                live.push((at, size));
                            }
                            None => prop_assert_eq!(model_fit, None),
                        }
                    }
                    Op::Free(k) => {
                        if live.is_empty() { continue; }
                        let (at, size) = live.swap_remove(k % live.len());
                        a.free(at, size).unwrap();
                        let i = ((at - base) / G) as usize;
                        used[i..i + (size / G) as usize].iter_mut().for_each(|u| *u = false);
                        prop_assert!(a.free(at, size).is_err(), "double free detected");
                    }
                }
                let free_model = used.iter().filter(|u| !**u).count() as u64 * G;
                prop_assert_eq!(a.free_bytes(), free_model);
                let ranges: Vec<_> = a.free_ranges().collect();
                for w in ranges.windows(2) {
                    prop_assert!(w[0].0 + w[0].1 < w[1].0, "coalesced and sorted");
                }
            }
        }
    }
}
