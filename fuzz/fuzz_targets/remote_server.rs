//! Arbitrary bytes as a client's stream into the remote PCI server's request loop
//! (`nvbare_pci_host::remote::server`, what `nvbare serve` runs), over two memory-backed
//! devices: the loop must end without a panic, let no access outside a BAR, config space or
//! host memory buffer reach a device, allocate no more than its limits allow however large the
//! sizes the requests claim, and free the client's host memory when it is gone.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Cursor;
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use nvbare_pci_host::remote::server::testutil::{MemDevice, MemStats};
use nvbare_pci_host::remote::server::{
    Connection, Devices, ServeLimits, ServedDevice, serve_stream,
};

/// Small limits, so that every request that passes them is cheap.
const LIMITS: ServeLimits = ServeLimits {
    max_sysmem_alloc: 64 << 10,
    max_sysmem_per_connection: 256 << 10,
    max_transfer: 64 << 10,
    max_probe_payload: 1 << 10,
};

/// What one input may make the server hold at once beyond the devices themselves: its host
/// memory (256 KiB), a payload and an answer (64 KiB each, twice that while a `Vec` grows),
/// its bookkeeping and error texts. A request that allocated from a size it claims (up to
/// 2^64 - 1 bytes) would pass it at once.
const BOUND: usize = 1 << 20;

/// Counts the bytes the Rust allocator has out (libFuzzer's own memory is not Rust's).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters are only
// statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Both blocks exist for a moment.
        grew(new_size);
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let devs = [
        MemDevice::new(64 << 10, 64 << 10),
        MemDevice::new(4 << 10, 16 << 10),
    ];
    let stats: Vec<_> = devs.iter().map(MemDevice::stats).collect();
    let devices = Devices::new(
        devs.into_iter()
            .map(|d| Box::new(d) as Box<dyn ServedDevice>)
            .collect(),
    );
    let mut conn = Connection::new(devices.clone(), LIMITS, "fuzz");
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);

    let mut rd = Cursor::new(data);
    let _ = serve_stream(&mut conn, &mut rd, &mut std::io::sink());
    assert!(rd.position() as usize <= data.len());
    assert!(conn.sysmem_bytes() <= LIMITS.max_sysmem_per_connection);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    assert!(peak <= BOUND, "the server held {peak} bytes for one client");

    for s in &stats {
        assert_eq!(
            MemStats::get(&s.unchecked),
            0,
            "the server let a bad range reach a device"
        );
    }
    drop(conn);
    for s in &stats {
        assert_eq!(
            MemStats::get(&s.live_sysmem),
            0,
            "host memory outlived its client"
        );
    }
});
