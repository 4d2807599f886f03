//! The simulated RM's physical VRAM heap: first fit over a free list, with alignment.

use std::collections::BTreeMap;

/// A range allocator (free list of `start -> len`, coalesced).
#[derive(Debug, Clone)]
pub struct Heap {
    free: BTreeMap<u64, u64>,
    size: u64,
    used: u64,
}

impl Heap {
    /// A heap over `[start, start + len)`.
    pub fn new(start: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        Heap {
            free,
            size: len,
            used: 0,
        }
    }

    /// Bytes allocated.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Bytes managed.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Allocates `len` bytes aligned to `align` (a power of two), lowest address first.
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let (start, flen, addr) = self.free.iter().find_map(|(&s, &l)| {
            let a = s.checked_next_multiple_of(align)?;
            let end = a.checked_add(len)?;
            (end <= s + l).then_some((s, l, a))
        })?;
        self.free.remove(&start);
        if addr > start {
            self.free.insert(start, addr - start);
        }
        let end = addr + len;
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        self.used += len;
        Some(addr)
    }

    /// Returns `[addr, addr + len)`; returns `false` (and changes nothing) if any of it is
    /// already free.
    pub fn free(&mut self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        if let Some((&s, &l)) = self.free.range(..end).next_back()
            && s + l > addr
        {
            return false;
        }
        let mut start = addr;
        let mut len_total = len;
        if let Some((&s, &l)) = self.free.range(..addr).next_back()
            && s + l == addr
        {
            self.free.remove(&s);
            start = s;
            len_total += l;
        }
        if let Some(&l) = self.free.get(&end) {
            self.free.remove(&end);
            len_total += l;
        }
        self.free.insert(start, len_total);
        self.used -= len;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesce() {
        let mut h = Heap::new(0x1000, 0x10000);
        let a = h.alloc(0x1000, 0x1000).unwrap();
        let b = h.alloc(0x3000, 0x4000).unwrap();
        assert_eq!(a, 0x1000);
        assert_eq!(b, 0x4000);
        assert!(h.free(a, 0x1000));
        assert!(!h.free(a, 0x1000), "double free is refused");
        assert!(h.free(b, 0x3000));
        assert_eq!(h.used(), 0);
        // Everything coalesced back into one range.
        assert_eq!(h.alloc(0x10000, 0x1000), Some(0x1000));
        assert_eq!(h.alloc(1, 1), None);
        assert_eq!(h.alloc(0, 1), None);
    }

    proptest::proptest! {
        /// Allocations never overlap and stay inside the heap; freeing everything restores it.
        #[test]
        fn never_overlaps(ops in proptest::collection::vec((1u64..0x5000, 0u32..4, proptest::bool::ANY), 1..64)) {
            let mut h = Heap::new(0x10000, 0x40000);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, align_log, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (a, l) = live.remove(0);
                    proptest::prop_assert!(h.free(a, l));
                    continue;
                }
                let align = 0x1000u64 << align_log;
                if let Some(a) = h.alloc(len, align) {
                    proptest::prop_assert_eq!(a % align, 0);
                    proptest::prop_assert!(a >= 0x10000 && a + len <= 0x50000);
                    for &(b, m) in &live {
                        proptest::prop_assert!(a + len <= b || b + m <= a);
                    }
                    live.push((a, len));
                }
            }
            for (a, l) in live.drain(..) {
                proptest::prop_assert!(h.free(a, l));
            }
            proptest::prop_assert_eq!(h.used(), 0);
            proptest::prop_assert_eq!(h.alloc(0x40000, 0x1000), Some(0x10000));
        }
    }
}
