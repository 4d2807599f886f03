//! Write-combined CPU stores, as x86 does them for BAR1 mappings of video memory.
//!
//! A store through a write-combined mapping waits in the CPU's write-combining buffers and
//! reaches the GPU when they are drained: at a store barrier (`sfence`), or before an uncached
//! store such as the doorbell (Intel SDM vol. 3, the write-combining memory type). Drained
//! stores become visible in no defined order, so one store barrier before the doorbell makes
//! everything visible by the time the doorbell arrives, but not in the order it was written.
//! Stores to the same bytes keep their order (the newest wins, as in a write-combining buffer
//! that merges them), and the CPU itself reads its own pending stores.
//!
//! That matters because the host does not only look at `GPPut` at a doorbell: when another
//! process's channel shares the GPU, the scheduler switches channels and reloads `GPPut` from
//! USERD when it switches one in. On the H200 a `GPPut` store that became visible before the
//! GP entry, pushbuffer and QMD it published made the host run what those addresses held one
//! ring or command-memory cycle earlier (docs/device.md, "Stale releases"). Two fault
//! injections reproduce it here: [`WcBuffer::set_last_first`] drains stores in reverse order
//! (the worst order hardware may pick) and a switch-in hook runs after every store that lands
//! ([`crate::fifo::Fifo::switch_in_on_stores`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use nvbare_core::hal::{HalError, check_range};
use nvbare_core::rm::Handle;

use crate::fifo::Kick;
use crate::rm::CpuMapping;

struct Pending {
    /// The memory object written (pending stores overlay reads of the same object).
    memory: Handle,
    map: CpuMapping,
    off: u64,
    bytes: Vec<u8>,
    after: Option<Kick>,
}

#[derive(Default)]
struct State {
    pending: Vec<Pending>,
    last_first: bool,
    switch_in: Option<Kick>,
}

/// One CPU's write-combining buffers (one per simulated process).
#[derive(Default)]
pub struct WcBuffer {
    state: Mutex<State>,
    /// CPU reads of write-combined memory: uncached on hardware, each a round trip across
    /// PCIe (into video memory for BAR1), which the device layer keeps off its waits.
    reads: AtomicU64,
}

impl std::fmt::Debug for WcBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("WcBuffer")
            .field("pending", &s.pending.len())
            .field("last_first", &s.last_first)
            .finish_non_exhaustive()
    }
}

impl WcBuffer {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A store of `src` at `off` of `memory` (mapped by `map`), held until the next drain;
    /// `after` runs when it lands.
    pub fn store(
        &self,
        memory: Handle,
        map: &CpuMapping,
        off: u64,
        src: &[u8],
        after: Option<Kick>,
    ) -> Result<(), HalError> {
        check_range(off, src.len() as u64, map.size())?;
        self.lock().pending.push(Pending {
            memory,
            map: map.clone(),
            off,
            bytes: src.to_vec(),
            after,
        });
        Ok(())
    }

    /// Lays this CPU's pending stores to `memory` over `dst`, which holds bytes from `off`
    /// as memory has them (a CPU reads its own stores).
    pub fn overlay(&self, memory: Handle, off: u64, dst: &mut [u8]) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let s = self.lock();
        let end = off + dst.len() as u64;
        for p in s.pending.iter().filter(|p| p.memory == memory) {
            let p_end = p.off + p.bytes.len() as u64;
            let (lo, hi) = (p.off.max(off), p_end.min(end));
            if lo < hi {
                dst[(lo - off) as usize..(hi - off) as usize]
                    .copy_from_slice(&p.bytes[(lo - p.off) as usize..(hi - p.off) as usize]);
            }
        }
    }

    /// CPU reads of write-combined memory so far ([`WcBuffer::overlay`] calls).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Stores not yet drained.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Fault injection: drains make stores visible last first (hardware may pick any order).
    pub fn set_last_first(&self, on: bool) {
        self.lock().last_first = on;
    }

    /// Fault injection: `hook` runs after every store that lands (`None` stops it).
    pub fn set_switch_in(&self, hook: Option<Kick>) {
        self.lock().switch_in = hook;
    }

    /// Makes every pending store visible (a store barrier, or an uncached store).
    pub fn drain(&self) {
        let (pending, last_first, switch_in) = {
            let mut s = self.lock();
            if s.pending.is_empty() {
                return;
            }
            (
                std::mem::take(&mut s.pending),
                s.last_first,
                s.switch_in.clone(),
            )
        };
        let order: Vec<usize> = if last_first {
            (0..pending.len()).rev().collect()
        } else {
            (0..pending.len()).collect()
        };
        for i in order {
            let p = &pending[i];
            // Bytes a newer store to the same object already wrote stay as that one wrote
            // them; the stores were range-checked when made, so the mapping cannot refuse.
            let newer = pending[i + 1..].iter().filter(|q| q.memory == p.memory);
            for (lo, hi) in uncovered(p.off, p.off + p.bytes.len() as u64, newer) {
                let _ = p
                    .map
                    .write(lo, &p.bytes[(lo - p.off) as usize..(hi - p.off) as usize]);
            }
            if let Some(after) = &p.after {
                (after.0)();
            }
            if let Some(hook) = &switch_in {
                (hook.0)();
            }
        }
    }
}

/// The parts of `[lo, hi)` that none of `newer` covers (empty when all of it is covered).
fn uncovered<'a>(lo: u64, hi: u64, newer: impl Iterator<Item = &'a Pending>) -> Vec<(u64, u64)> {
    let mut parts = vec![(lo, hi)];
    for q in newer {
        let (q_lo, q_hi) = (q.off, q.off + q.bytes.len() as u64);
        parts = parts
            .into_iter()
            .flat_map(|(a, b)| {
                if q_hi <= a || b <= q_lo {
                    vec![(a, b)]
                } else {
                    [(a, q_lo), (q_hi, b)]
                        .into_iter()
                        .filter(|(x, y)| x < y)
                        .collect()
                }
            })
            .collect();
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostMemory, SimDma, SimDmaBuffer};
    use nvbare_core::hal::{DmaAllocator, DmaBuffer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A mapping of `len` bytes of host memory (a page at least), and the memory.
    fn host(len: usize) -> (CpuMapping, Arc<SimDmaBuffer>) {
        let dma = SimDma::new(HostMemory::new(1 << 20));
        let b = Arc::new(dma.alloc_dma(len).unwrap());
        (CpuMapping::Host(b.clone()), b)
    }

    fn bytes(b: &SimDmaBuffer, off: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        b.read(off, &mut v).unwrap();
        v
    }

    #[test]
    fn stores_wait_for_a_drain_and_the_cpu_reads_its_own() {
        let wc = WcBuffer::default();
        let (map, mem) = host(64);
        let h = Handle(1);
        wc.store(h, &map, 4, &[1, 2, 3, 4], None).unwrap();
        wc.store(h, &map, 6, &[9, 9], None).unwrap();
        assert_eq!(bytes(&mem, 4, 4), [0; 4], "not visible before a drain");
        let mut mine = [0u8; 6];
        wc.overlay(h, 3, &mut mine);
        assert_eq!(mine, [0, 1, 2, 9, 9, 0], "later stores win");
        let mut other = [0u8; 4];
        wc.overlay(Handle(2), 4, &mut other);
        assert_eq!(other, [0; 4], "another object's stores do not show");
        wc.drain();
        assert_eq!(wc.pending(), 0);
        assert_eq!(bytes(&mem, 4, 4), [1, 2, 9, 9]);
    }

    #[test]
    fn a_last_first_drain_lands_the_newest_store_first() {
        let wc = WcBuffer::default();
        let (map, mem) = host(16);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (m2, s2) = (mem.clone(), seen.clone());
        wc.set_switch_in(Some(Kick(Arc::new(move || {
            s2.lock().unwrap().push(bytes(&m2, 0, 2));
        }))));
        wc.set_last_first(true);
        wc.store(Handle(1), &map, 0, &[1], None).unwrap();
        wc.store(Handle(1), &map, 1, &[2], None).unwrap();
        wc.drain();
        assert_eq!(*seen.lock().unwrap(), [vec![0, 2], vec![1, 2]]);
    }

    #[test]
    fn stores_to_the_same_bytes_keep_their_order_in_any_drain() {
        for last_first in [false, true] {
            let wc = WcBuffer::default();
            wc.set_last_first(last_first);
            let (map, mem) = host(4096);
            // A zero-fill, then stores into it: the later ones win whatever the drain order.
            wc.store(Handle(1), &map, 0, &[0xaa; 16], None).unwrap();
            wc.store(Handle(1), &map, 4, &[1, 2], None).unwrap();
            wc.store(Handle(1), &map, 5, &[3, 4, 5], None).unwrap();
            wc.drain();
            let mut want = [0xaa; 16];
            want[4..8].copy_from_slice(&[1, 3, 4, 5]);
            assert_eq!(bytes(&mem, 0, 16), want, "last_first {last_first}");
        }
    }

    #[test]
    fn a_store_out_of_range_is_refused_and_hooks_run_when_it_lands() {
        let wc = WcBuffer::default();
        let (map, _) = host(4096);
        assert!(wc.store(Handle(1), &map, 4094, &[0; 4], None).is_err());
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let hook = Kick(Arc::new(move || {
            n2.fetch_add(1, Ordering::SeqCst);
        }));
        wc.store(Handle(1), &map, 0, &[5], Some(hook)).unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 0);
        wc.drain();
        wc.drain();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }
}
