//! DMA memory for the GPU: a pool of locked host pages, mapped once into the IOMMU at IOVAs we
//! choose, and sub-allocated into [`DmaBuffer`]s.
//!
//! * Backing: 2 MiB hugepages (`MAP_HUGETLB | MAP_HUGE_2MB | MAP_POPULATE | MAP_LOCKED`); when
//!   none are reserved, locked 4 KiB pages with a warning; when neither works, an error that
//!   names the remedy (`sysctl vm.nr_hugepages`, `hugeadm`, the memlock limit). Without an
//!   IOMMU only hugepages are used (see below).
//! * Device addresses: with an IOMMU ([`Addressing::Iommu`]) each chunk is mapped once at an
//!   IOVA from an [`IovaSpace`] allocator (reserved regions such as the MSI window excluded);
//!   without one ([`Addressing::Physical`], VFIO no-IOMMU mode only) the device sees physical
//!   addresses from `/proc/self/pagemap`, so a buffer must fit in one physically contiguous run.
//! * Buffers are never borrowed: [`PoolBuffer`] copies in and out with volatile accesses.
//!   Dropping one returns its space; with an IOMMU a chunk with nothing left in it is unmapped
//!   from the IOMMU (its IOVA range returned) and unmapped from the process, except for the
//!   first [`PoolOptions::retain_chunks`] idle chunks.
//! * Without an IOMMU nothing stands between the device and the pages, so the pool is stricter:
//!   locked 4 KiB pages are refused (locking keeps a page resident, not at the same physical
//!   address: compaction and migration move it, and the device would write wherever it was);
//!   no chunk is given back while the pool lives; and when the pool is dropped its pages go back
//!   to the kernel only if every device using it was declared stopped
//!   ([`DmaPool::mark_device_stopped`]), otherwise they are leaked on purpose.

pub mod pages;
pub mod range;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvbare_core::hal::{DmaAllocator, DmaBuffer, HalError, check_range};

pub use pages::{HUGE_PAGE, HostPages, PageKind, PagemapError, SMALL_PAGE};
pub use range::{RangeAllocator, RangeError};

use pages::volatile_copy;

/// What to do for 2 MiB hugepages versus 4 KiB pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagePolicy {
    /// Hugepages; locked 4 KiB pages (with a warning) when none are reserved. Without an
    /// IOMMU ([`Addressing::Physical`]) this is [`PagePolicy::HugeOnly`].
    HugeThenSmall,
    /// Hugepages only.
    HugeOnly,
    /// 4 KiB pages only. Refused without an IOMMU ([`DmaError::HugepagesRequired`]).
    SmallOnly,
}

/// Pool settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolOptions {
    /// Which pages to use.
    pub pages: PagePolicy,
    /// Bytes added per growth (rounded up to 2 MiB); a larger request grows by its own size.
    pub grow: usize,
    /// Idle chunks kept mapped for reuse instead of being released. Without an IOMMU every
    /// chunk is kept until the pool is dropped, whatever this says.
    pub retain_chunks: usize,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            pages: PagePolicy::HugeThenSmall,
            grow: HUGE_PAGE,
            retain_chunks: 1,
        }
    }
}

/// Why DMA memory could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// Hugepages were required and none could be had.
    #[error(
        "no 2 MiB hugepages for {size} bytes of DMA memory ({source}). Reserve some: \
         `sysctl vm.nr_hugepages=64` (as root; or `hugeadm --pool-pages-min 2MB:64`), \
         and check `grep Huge /proc/meminfo`"
    )]
    NoHugepages {
        /// Bytes requested.
        size: usize,
        /// The mmap/mlock error.
        source: io::Error,
    },
    /// Neither hugepages nor locked 4 KiB pages could be had.
    #[error(
        "cannot get {size} bytes of locked DMA memory: 2 MiB hugepages failed ({huge}) and \
         locked 4 KiB pages failed ({small}). Remedies: reserve hugepages with \
         `sysctl vm.nr_hugepages=64` (or `hugeadm --pool-pages-min 2MB:64`); raise the \
         locked-memory limit (`ulimit -l unlimited`, `LimitMEMLOCK=infinity` for a service, or \
         `memlock` in /etc/security/limits.conf), or run as root"
    )]
    NoHostMemory {
        /// Bytes requested.
        size: usize,
        /// Why hugepages failed.
        huge: io::Error,
        /// Why 4 KiB pages failed.
        small: io::Error,
    },
    /// Without an IOMMU only hugepages will do, and none could be had (or 4 KiB pages were
    /// asked for).
    #[error(
        "VFIO no-IOMMU mode needs 2 MiB hugepages for its {size} bytes of DMA memory, and {}. \
         Without an IOMMU the GPU reaches host memory by physical address, and locked 4 KiB \
         pages can move (mlock keeps a page in memory, not at the same physical address: \
         compaction and migration move it, and the GPU would write where it used to be). \
         Reserve hugepages: `sysctl vm.nr_hugepages=64` (as root; `vm.nr_hugepages=64` in \
         /etc/sysctl.d/ for every boot), and check `grep Huge /proc/meminfo`",
        match source {
            Some(e) => format!("none could be mapped ({e})"),
            None => "4 KiB pages were asked for (PagePolicy::SmallOnly)".to_owned(),
        }
    )]
    HugepagesRequired {
        /// Bytes requested.
        size: usize,
        /// The mmap/mlock error, when hugepages were tried.
        #[source]
        source: Option<io::Error>,
    },
    /// Locked 4 KiB pages were required and could not be had.
    #[error(
        "cannot lock {size} bytes of DMA memory ({source}): raise the locked-memory limit \
         (`ulimit -l unlimited`, or `memlock` in /etc/security/limits.conf) or run as root"
    )]
    NoLockedMemory {
        /// Bytes requested.
        size: usize,
        /// The mmap/mlock error.
        source: io::Error,
    },
    /// The IOVA space has no room.
    #[error("no IOVA space left for {size} bytes of DMA memory (free DMA buffers first)")]
    IovaExhausted {
        /// Bytes requested.
        size: usize,
    },
    /// The IOMMU refused a mapping.
    #[error(
        "mapping {len:#x} bytes at IOVA {iova:#x} into the IOMMU failed: {reason}. If this is \
         ENOMEM, VFIO ran into the locked-memory limit while pinning pages: \
         `ulimit -l unlimited` or run as root"
    )]
    IommuMap {
        /// The IOVA.
        iova: u64,
        /// Bytes.
        len: usize,
        /// The error from VFIO.
        reason: String,
    },
    /// Without an IOMMU a buffer must be physically contiguous.
    #[error(
        "{size} bytes of physically contiguous memory are not available without an IOMMU \
         (largest contiguous run: {max} bytes); reserve 2 MiB hugepages, ask for less, or use \
         the IOMMU (which nvbare prefers)"
    )]
    NotContiguous {
        /// Bytes requested.
        size: usize,
        /// The largest run available.
        max: usize,
    },
    /// Physical addresses could not be read (no-IOMMU mode).
    #[error(transparent)]
    Pagemap(#[from] PagemapError),
    /// Bad size or alignment.
    #[error("invalid DMA request: {0}")]
    Invalid(&'static str),
}

impl DmaError {
    /// The nearest [`HalError`], for the core's [`DmaAllocator`] interface.
    pub fn to_hal(&self, requested: usize) -> HalError {
        match self {
            DmaError::IommuMap { .. } => HalError::Os {
                op: "mapping DMA memory into the IOMMU",
                errno: 0,
            },
            DmaError::Invalid(w) => HalError::Unsupported(w),
            _ => HalError::NoMemory {
                requested: requested as u64,
            },
        }
    }
}

/// An IOMMU that maps host memory at IOVAs (a VFIO container, or a test double).
pub trait Iommu: Send + Sync + fmt::Debug {
    /// Maps `len` bytes at `host` so the device reaches them at `iova`.
    ///
    /// # Safety
    /// `host..host + len` must stay mapped until [`Iommu::unmap`] of the same range, and be
    /// reached only through raw pointers (volatile access) while mapped.
    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), String>;

    /// Removes the mapping made by [`Iommu::map`] with the same `iova` and `len`.
    fn unmap(&self, iova: u64, len: usize) -> Result<(), String>;
}

/// The device-visible IOVA space: usable windows minus reserved regions.
#[derive(Debug, Clone)]
pub struct IovaSpace {
    alloc: RangeAllocator,
}

impl IovaSpace {
    /// The window used when the IOMMU does not report its own: 4 GiB .. 512 GiB. Above 4 GiB
    /// keeps clear of the x86 MSI window and low reserved regions; below 2^39 fits IOMMUs
    /// with 3-level (39-bit) page tables; the GPU addresses 47 bits or more.
    pub const DEFAULT: (u64, u64) = (1 << 32, (1 << 39) - 1);

    /// `windows` and `reserved` are inclusive `(first, last)` pairs.
    pub fn new(windows: &[(u64, u64)], reserved: &[(u64, u64)]) -> Self {
        let mut alloc = RangeAllocator::new(SMALL_PAGE as u64);
        for &(a, b) in windows {
            if b >= a {
                alloc.add(a, (b - a).saturating_add(1));
            }
        }
        for &(a, b) in reserved {
            if b >= a {
                alloc.reserve(a, (b - a).saturating_add(1));
            }
        }
        IovaSpace { alloc }
    }

    /// Free IOVA bytes.
    pub fn free_bytes(&self) -> u64 {
        self.alloc.free_bytes()
    }
}

impl Default for IovaSpace {
    fn default() -> Self {
        IovaSpace::new(&[Self::DEFAULT], &[])
    }
}

/// How the device addresses host memory.
#[derive(Debug)]
pub enum Addressing {
    /// Through an IOMMU, at IOVAs from this space.
    Iommu {
        /// The IOMMU.
        iommu: Arc<dyn Iommu>,
        /// Where IOVAs come from.
        space: Mutex<IovaSpace>,
    },
    /// By physical address (VFIO no-IOMMU mode: the device can reach all of memory).
    Physical,
}

impl Addressing {
    /// IOMMU addressing over `iommu` with the IOVA space `space`.
    pub fn iommu(iommu: Arc<dyn Iommu>, space: IovaSpace) -> Self {
        Addressing::Iommu {
            iommu,
            space: Mutex::new(space),
        }
    }
}

/// A run of a chunk that is contiguous for the device.
#[derive(Debug)]
struct Arena {
    /// Offset of the run in the chunk.
    offset: usize,
    /// Device address of the run's first byte.
    dev: u64,
    /// Free space, in device addresses.
    free: RangeAllocator,
}

#[derive(Debug)]
struct Chunk {
    pages: HostPages,
    /// The IOVA range to unmap, for IOMMU addressing.
    iova: Option<u64>,
    arenas: Vec<Arena>,
    used: usize,
}

#[derive(Debug, Default)]
struct State {
    chunks: BTreeMap<u64, Chunk>,
    next_id: u64,
    warned_small: bool,
}

#[derive(Debug)]
struct Shared {
    addressing: Addressing,
    opts: PoolOptions,
    state: Mutex<State>,
    /// Devices that may still master into the pool's memory: one at first, more with
    /// [`DmaPool::add_device`], one less per [`DmaPool::mark_device_stopped`]. Only matters
    /// for physical addressing, where it decides whether the pages may go back to the kernel.
    masters: AtomicUsize,
}

/// The DMA pool; cheap to clone (all clones share the pool).
#[derive(Debug, Clone)]
pub struct DmaPool {
    shared: Arc<Shared>,
}

/// What backs the pool now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Chunks mapped.
    pub chunks: usize,
    /// Bytes of 2 MiB pages mapped.
    pub huge_bytes: usize,
    /// Bytes of 4 KiB pages mapped.
    pub small_bytes: usize,
    /// Bytes handed out.
    pub used_bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves consistent data (every update is done
    // before anything that can fail), so keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DmaPool {
    /// A pool whose device addresses come from `addressing`.
    pub fn new(addressing: Addressing, opts: PoolOptions) -> Self {
        DmaPool {
            shared: Arc::new(Shared {
                addressing,
                opts,
                state: Mutex::new(State::default()),
                masters: AtomicUsize::new(1),
            }),
        }
    }

    /// Says that one device using the pool no longer reaches its memory: its bus mastering is
    /// off or the function was reset, and nothing will turn it back on. Call it once per
    /// device (one, plus one per [`DmaPool::add_device`]).
    ///
    /// Without an IOMMU the device writes physical addresses, so the pool keeps its pages
    /// until it is dropped, and gives them back to the kernel then only if every device was
    /// declared stopped; otherwise it leaks them (and logs why) rather than let a GPU or GSP
    /// that is still running write into memory the kernel has handed to someone else. With
    /// an IOMMU this changes nothing: unmapping from the IOMMU cuts the device off.
    pub fn mark_device_stopped(&self) {
        let _ = self
            .shared
            .masters
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Says that one more device will master into the pool's memory (the GPUs of a no-IOMMU
    /// peer group share one pool); it too must call [`DmaPool::mark_device_stopped`].
    pub fn add_device(&self) {
        self.shared.masters.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether every device using the pool was declared stopped.
    pub fn device_stopped(&self) -> bool {
        self.shared.masters.load(Ordering::Acquire) == 0
    }

    /// Whether the device sees physical addresses (no IOMMU).
    fn physical(&self) -> bool {
        matches!(self.shared.addressing, Addressing::Physical)
    }

    /// Allocates `size` bytes (rounded up to 4 KiB), zeroed, at a device address aligned to
    /// `align` (a power of two; 4 KiB at least).
    pub fn alloc(&self, size: usize, align: usize) -> Result<PoolBuffer, DmaError> {
        if size == 0 {
            return Err(DmaError::Invalid("zero-sized DMA buffer"));
        }
        let size = size
            .checked_next_multiple_of(SMALL_PAGE)
            .ok_or(DmaError::Invalid("DMA buffer size overflows"))?;
        let align = align.max(SMALL_PAGE);
        if !align.is_power_of_two() || align > HUGE_PAGE {
            return Err(DmaError::Invalid(
                "DMA alignment must be a power of two up to 2 MiB",
            ));
        }
        let mut st = lock(&self.shared.state);
        let found = st
            .chunks
            .iter_mut()
            .find_map(|(id, c)| take(c, size, align).map(|(a, dev, off)| (*id, a, dev, off)));
        let (id, arena, dev, off) = match found {
            Some(f) => f,
            None => {
                let chunk = self.grow(&mut st, size)?;
                let id = st.next_id;
                st.next_id += 1;
                let mut chunk = chunk;
                let Some((a, dev, off)) = take(&mut chunk, size, align) else {
                    let max = chunk
                        .arenas
                        .iter()
                        .map(|a| a.free.free_bytes() as usize)
                        .max()
                        .unwrap_or(0);
                    drop(st);
                    self.release_chunk(chunk);
                    return Err(DmaError::NotContiguous { size, max });
                };
                st.chunks.insert(id, chunk);
                (id, a, dev, off)
            }
        };
        let Some(chunk) = st.chunks.get_mut(&id) else {
            return Err(DmaError::Invalid("DMA pool lost a chunk"));
        };
        chunk.used += size;
        // SAFETY: off + size <= chunk length (the arena lies inside the chunk).
        let ptr = unsafe { chunk.pages.as_ptr().add(off) };
        drop(st);
        // SAFETY: [ptr, ptr + size) is inside a live chunk and handed to no one else.
        unsafe { volatile_copy::fill(ptr, size, 0) };
        let ptr = NonNull::new(ptr).ok_or(DmaError::Invalid("null DMA pointer"))?;
        Ok(PoolBuffer {
            shared: self.shared.clone(),
            chunk: id,
            arena,
            ptr,
            len: size,
            dev,
        })
    }

    /// Maps a new chunk big enough for `size`.
    fn grow(&self, st: &mut State, size: usize) -> Result<Chunk, DmaError> {
        let len = size
            .max(self.shared.opts.grow)
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or(DmaError::Invalid("DMA buffer size overflows"))?;
        let physical = self.physical();
        let pages = match self.shared.opts.pages {
            // Without an IOMMU a 4 KiB page could move under the device (see the module docs).
            PagePolicy::SmallOnly if physical => {
                return Err(DmaError::HugepagesRequired {
                    size: len,
                    source: None,
                });
            }
            PagePolicy::HugeOnly | PagePolicy::HugeThenSmall if physical => {
                HostPages::new(len, PageKind::Huge2M).map_err(|e| DmaError::HugepagesRequired {
                    size: len,
                    source: Some(e),
                })?
            }
            PagePolicy::HugeOnly => HostPages::new(len, PageKind::Huge2M)
                .map_err(|source| DmaError::NoHugepages { size: len, source })?,
            PagePolicy::SmallOnly => HostPages::new(len, PageKind::Small4K)
                .map_err(|source| DmaError::NoLockedMemory { size: len, source })?,
            PagePolicy::HugeThenSmall => match HostPages::new(len, PageKind::Huge2M) {
                Ok(p) => p,
                Err(huge) => match HostPages::new(len, PageKind::Small4K) {
                    Ok(p) => {
                        if !st.warned_small {
                            st.warned_small = true;
                            log::warn!(
                                "no 2 MiB hugepages available ({huge}); using locked 4 KiB \
                                 pages for DMA, which costs more IOMMU entries and TLB misses. \
                                 Reserve hugepages: sysctl vm.nr_hugepages=64"
                            );
                        }
                        p
                    }
                    Err(small) => {
                        return Err(DmaError::NoHostMemory {
                            size: len,
                            huge,
                            small,
                        });
                    }
                },
            },
        };
        match &self.shared.addressing {
            Addressing::Iommu { iommu, space } => {
                let iova = lock(space)
                    .alloc
                    .alloc(len as u64, HUGE_PAGE as u64)
                    .ok_or(DmaError::IovaExhausted { size: len })?;
                // SAFETY: the pages stay mapped until `release_chunk`, which unmaps the IOVA
                // range first; the pool reaches them only through raw pointers.
                if let Err(reason) = unsafe { iommu.map(iova, pages.as_ptr(), len) } {
                    if let Err(e) = lock(space).alloc.free(iova, len as u64) {
                        log::error!("{e}");
                    }
                    return Err(DmaError::IommuMap { iova, len, reason });
                }
                Ok(Chunk {
                    arenas: vec![Arena {
                        offset: 0,
                        dev: iova,
                        free: RangeAllocator::with_range(iova, len as u64, SMALL_PAGE as u64),
                    }],
                    pages,
                    iova: Some(iova),
                    used: 0,
                })
            }
            Addressing::Physical => {
                let runs = pages.physical_runs()?;
                let arenas = runs
                    .into_iter()
                    .map(|(offset, l, pa)| Arena {
                        offset,
                        dev: pa,
                        free: RangeAllocator::with_range(pa, l as u64, SMALL_PAGE as u64),
                    })
                    .collect();
                Ok(Chunk {
                    pages,
                    iova: None,
                    arenas,
                    used: 0,
                })
            }
        }
    }

    /// Unmaps a chunk from the IOMMU, returns its IOVA range, and unmaps its pages.
    fn release_chunk(&self, chunk: Chunk) {
        if let (Some(iova), Addressing::Iommu { iommu, space }) =
            (chunk.iova, &self.shared.addressing)
        {
            let len = chunk.pages.len();
            match iommu.unmap(iova, len) {
                Ok(()) => {
                    if let Err(e) = lock(space).alloc.free(iova, len as u64) {
                        log::error!("{e}");
                    }
                }
                Err(e) => {
                    // The device may still reach these pages: leak them rather than hand the
                    // memory back to the kernel.
                    log::error!(
                        "IOMMU unmap of {len:#x} bytes at IOVA {iova:#x} failed ({e}); \
                         keeping the pages to stay safe"
                    );
                    std::mem::forget(chunk);
                    return;
                }
            }
        }
        drop(chunk);
    }

    fn free(&self, id: u64, arena: usize, dev: u64, len: usize) {
        let mut st = lock(&self.shared.state);
        let Some(chunk) = st.chunks.get_mut(&id) else {
            log::error!("DMA buffer freed into a chunk the pool does not have");
            return;
        };
        match chunk
            .arenas
            .get_mut(arena)
            .map(|a| a.free.free(dev, len as u64))
        {
            Some(Ok(())) => chunk.used = chunk.used.saturating_sub(len),
            Some(Err(e)) => log::error!("DMA pool: {e}"),
            None => log::error!("DMA buffer freed into an arena the pool does not have"),
        }
        // Without an IOMMU the device may still write a chunk's physical pages after its last
        // buffer is gone (a GSP still running, a stale descriptor): keep every chunk.
        if self.physical() {
            return;
        }
        let idle = st.chunks.values().filter(|c| c.used == 0).count();
        let empty = st.chunks.get(&id).is_some_and(|c| c.used == 0);
        if empty && idle > self.shared.opts.retain_chunks {
            let chunk = st.chunks.remove(&id);
            drop(st);
            if let Some(c) = chunk {
                self.release_chunk(c);
            }
        }
    }

    /// What backs the pool now.
    pub fn stats(&self) -> PoolStats {
        let st = lock(&self.shared.state);
        let mut s = PoolStats {
            chunks: st.chunks.len(),
            ..PoolStats::default()
        };
        for c in st.chunks.values() {
            match c.pages.kind() {
                PageKind::Huge2M => s.huge_bytes += c.pages.len(),
                PageKind::Small4K => s.small_bytes += c.pages.len(),
            }
            s.used_bytes += c.used;
        }
        s
    }
}

#[cfg(test)]
impl DmaPool {
    /// Adds a chunk built by hand (tests of physical addressing, which otherwise needs root
    /// and hugepages).
    fn insert_chunk(&self, chunk: Chunk) -> u64 {
        let mut st = lock(&self.shared.state);
        let id = st.next_id;
        st.next_id += 1;
        st.chunks.insert(id, chunk);
        id
    }
}

/// Takes `size` bytes aligned to `align` (in device addresses) from a chunk:
/// `(arena index, device address, offset in the chunk)`.
fn take(c: &mut Chunk, size: usize, align: usize) -> Option<(usize, u64, usize)> {
    c.arenas.iter_mut().enumerate().find_map(|(i, a)| {
        let dev = a.free.alloc(size as u64, align as u64)?;
        let off = a.offset + (dev - a.dev) as usize;
        Some((i, dev, off))
    })
}

impl Drop for Shared {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let chunks = std::mem::take(&mut st.chunks);
        let masters = *self.masters.get_mut();
        if matches!(self.addressing, Addressing::Physical) && masters > 0 && !chunks.is_empty() {
            let bytes: usize = chunks.values().map(|c| c.pages.len()).sum();
            log::error!(
                "DMA pool dropped while {masters} device(s) may still be mastering into it (no \
                 IOMMU, and no mark_device_stopped after bus mastering was turned off or the \
                 function reset): keeping its {bytes} bytes of DMA memory locked and mapped \
                 until the process exits, rather than let the device write into memory the \
                 kernel hands to someone else"
            );
            for (_, chunk) in chunks {
                std::mem::forget(chunk);
            }
            return;
        }
        for (_, chunk) in chunks {
            if let (Some(iova), Addressing::Iommu { iommu, .. }) = (chunk.iova, &self.addressing)
                && let Err(e) = iommu.unmap(iova, chunk.pages.len())
            {
                log::error!("IOMMU unmap at IOVA {iova:#x} failed ({e}); keeping the pages");
                std::mem::forget(chunk);
            }
        }
    }
}

impl DmaAllocator for DmaPool {
    type Buffer = PoolBuffer;

    fn alloc_dma(&self, size: usize) -> Result<PoolBuffer, HalError> {
        self.alloc(size, SMALL_PAGE).map_err(|e| {
            log::error!("{e}");
            e.to_hal(size)
        })
    }
}

/// A buffer from a [`DmaPool`]; its space returns to the pool on drop.
pub struct PoolBuffer {
    shared: Arc<Shared>,
    chunk: u64,
    arena: usize,
    ptr: NonNull<u8>,
    len: usize,
    dev: u64,
}

impl fmt::Debug for PoolBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuffer")
            .field("dev_addr", &format_args!("{:#x}", self.dev))
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the buffer is a range of locked memory owned by the pool (kept alive by the Arc);
// it is only reached through volatile copies, which are sound from any thread.
unsafe impl Send for PoolBuffer {}
// SAFETY: as above; `&PoolBuffer` offers only volatile copies, never references.
unsafe impl Sync for PoolBuffer {}

impl PoolBuffer {
    /// The CPU address of byte 0, for code that must hand it to the kernel (e.g. a `write`).
    /// Never turn it into a reference: the device may write the memory at any time.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl DmaBuffer for PoolBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn dev_addr(&self) -> u64 {
        self.dev
    }

    fn cpu_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        // SAFETY: the range was checked to lie inside this live buffer.
        unsafe { volatile_copy::read(self.ptr.as_ptr().add(offset), dst) };
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        // SAFETY: the range was checked to lie inside this live buffer.
        unsafe { volatile_copy::write(self.ptr.as_ptr().add(offset), src) };
        Ok(())
    }

    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        check_range(offset as u64, len as u64, self.len as u64)?;
        // SAFETY: the range was checked to lie inside this live buffer.
        unsafe { volatile_copy::fill(self.ptr.as_ptr().add(offset), len, byte) };
        Ok(())
    }
}

impl Drop for PoolBuffer {
    fn drop(&mut self) {
        DmaPool {
            shared: self.shared.clone(),
        }
        .free(self.chunk, self.arena, self.dev, self.len);
    }
}

#[cfg(test)]
mod tests;
