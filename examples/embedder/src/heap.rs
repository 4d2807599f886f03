//! The global allocator the `device` feature needs, over a static arena. **Skeleton**: a
//! first-fit allocator (nvbare-core's own `RangeAllocator`) behind a spin lock; a real kernel
//! plugs in its own allocator instead.
//!
//! Size: `FirmwareSet::load` copies the firmware files into the heap, and the r570.144 GSP-RM
//! file alone is 63.6 MB (60.6 MiB); the device layer adds a few MiB. 96 MiB leaves room.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;

use nvbare_core::mm::{FitPolicy, RangeAllocator};

/// Bytes of heap.
pub const HEAP_BYTES: usize = 96 << 20;
/// Smallest unit handed out (and the least alignment).
const GRANULE: u64 = 16;
/// Live allocations at once, minus one (the allocator's fixed capacity).
const BLOCKS: usize = 4096;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; HEAP_BYTES]>);

// SAFETY: the arena's bytes are handed out by `Heap` only, each byte to one live allocation at
// a time (the range allocator's guarantee), under `Heap`'s lock.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; HEAP_BYTES]));

/// The allocator: offsets into [`ARENA`], lazily set up on first use.
#[derive(Debug)]
pub struct Heap {
    inner: spin::Mutex<(bool, RangeAllocator<BLOCKS>)>,
}

impl Heap {
    const fn new() -> Self {
        Heap {
            inner: spin::Mutex::new((false, RangeAllocator::empty())),
        }
    }
}

#[global_allocator]
static HEAP: Heap = Heap::new();

// SAFETY: `alloc` returns blocks of the arena that the range allocator gives to no one else
// until `dealloc` returns them; sizes and alignments are rounded up, never down.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Offsets are aligned within the arena, which is 4 KiB aligned: larger alignments
        // are refused (the driver asks for none).
        if layout.align() > 4096 {
            return core::ptr::null_mut();
        }
        let mut g = self.inner.lock();
        let (ready, a) = &mut *g;
        if !*ready {
            if a.reset(0, HEAP_BYTES as u64, GRANULE, FitPolicy::FirstFit)
                .is_err()
            {
                return core::ptr::null_mut();
            }
            *ready = true;
        }
        let size = (layout.size().max(1) as u64).next_multiple_of(GRANULE);
        let align = (layout.align() as u64).max(GRANULE);
        match a.alloc(size, align) {
            Ok(off) => ARENA.0.get().cast::<u8>().wrapping_add(off as usize),
            Err(_) => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        let off = (ptr as usize).wrapping_sub(ARENA.0.get() as usize);
        let _ = self.inner.lock().1.free(off as u64);
    }
}
