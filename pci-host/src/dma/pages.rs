//! Locked host memory for DMA: 2 MiB hugepages, or 4 KiB pages as a fallback, and their
//! physical addresses from `/proc/self/pagemap` (no-IOMMU mode only).
//!
//! Why not `hugepage-rs`: it maps without locking or populating, reports no physical or IO
//! address, and hands out `&mut T` to memory the device writes behind Rust's back, which is
//! undefined behaviour while a DMA mapping is live (see `reference/deps.md` §1.6). This is
//! the part of it we need, over rustix, with the memory only ever reached through raw pointers.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

/// 2 MiB, the hugepage size the pool uses.
pub const HUGE_PAGE: usize = 2 << 20;
/// 4 KiB, the base page size (and DMA granule).
pub const SMALL_PAGE: usize = 4096;

/// Which pages back a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// 2 MiB hugetlbfs pages, each physically contiguous.
    Huge2M,
    /// Ordinary 4 KiB pages, locked.
    Small4K,
}

impl PageKind {
    /// The page size in bytes.
    pub fn size(self) -> usize {
        match self {
            PageKind::Huge2M => HUGE_PAGE,
            PageKind::Small4K => SMALL_PAGE,
        }
    }
}

/// An anonymous, populated, locked mapping, unmapped on drop. The memory is never borrowed:
/// it is reached only through [`HostPages::as_ptr`].
#[derive(Debug)]
pub struct HostPages {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: the mapping is plain memory owned by this value; nothing in it is tied to a thread,
// and every access goes through raw pointers by the owner's rules.
unsafe impl Send for HostPages {}
// SAFETY: as above; `&HostPages` only exposes the pointer and length.
unsafe impl Sync for HostPages {}

impl HostPages {
    /// Maps `len` bytes (rounded up to the page size) of `kind` pages, populated and locked.
    pub fn new(len: usize, kind: PageKind) -> io::Result<Self> {
        let len = len
            .max(1)
            .checked_next_multiple_of(kind.size())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut flags = MapFlags::PRIVATE | MapFlags::POPULATE | MapFlags::LOCKED;
        if kind == PageKind::Huge2M {
            flags |= MapFlags::HUGETLB | MapFlags::HUGE_2MB;
        }
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses; it aliases
        // nothing in this process.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
            )
        }?;
        let Some(ptr) = NonNull::new(ptr.cast::<u8>()) else {
            return Err(io::ErrorKind::OutOfMemory.into());
        };
        let pages = HostPages { ptr, len, kind };
        // MAP_LOCKED does not fail when locking fails; mlock does, and says why (EAGAIN or
        // ENOMEM: RLIMIT_MEMLOCK; EPERM: no CAP_IPC_LOCK with a zero limit).
        // SAFETY: the range is the mapping just created.
        unsafe { rustix::mm::mlock(pages.ptr.as_ptr().cast(), len) }?;
        // A fork would otherwise give the child copy-on-write access to pages the device is
        // pinned to, and the parent could end up with fresh pages the device does not see.
        // SAFETY: the range is the mapping just created; the advice changes no contents.
        if let Err(e) = unsafe {
            rustix::mm::madvise(
                pages.ptr.as_ptr().cast(),
                len,
                rustix::mm::Advice::LinuxDontFork,
            )
        } {
            log::debug!("madvise(MADV_DONTFORK) failed: {e}");
        }
        Ok(pages)
    }

    /// The first byte. Only raw-pointer (volatile) access is allowed once the device can see it.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page kind.
    pub fn kind(&self) -> PageKind {
        self.kind
    }

    /// The physical address of every 4 KiB page, from `/proc/self/pagemap`.
    pub fn physical_pages(&self) -> Result<Vec<u64>, PagemapError> {
        physical_pages(self.ptr.as_ptr() as usize, self.len)
    }

    /// Physically contiguous runs as `(offset in the mapping, length, physical address)`.
    pub fn physical_runs(&self) -> Result<Vec<(usize, usize, u64)>, PagemapError> {
        let pages = self.physical_pages()?;
        let mut runs: Vec<(usize, usize, u64)> = Vec::new();
        for (i, pa) in pages.into_iter().enumerate() {
            let off = i * SMALL_PAGE;
            match runs.last_mut() {
                Some((o, l, p)) if *o + *l == off && p.checked_add(*l as u64) == Some(pa) => {
                    *l += SMALL_PAGE
                }
                _ => runs.push((off, SMALL_PAGE, pa)),
            }
        }
        Ok(runs)
    }
}

impl Drop for HostPages {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `new` with exactly this pointer and length, and
        // every user (buffers, IOMMU mappings) is gone before the owner drops it.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            log::error!("munmap of DMA memory failed: {e}");
        }
    }
}

/// Why physical addresses could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PagemapError {
    /// `/proc/self/pagemap` could not be read.
    #[error("cannot read /proc/self/pagemap: {0}")]
    Read(#[source] io::Error),
    /// The kernel hid the frame numbers (they are shown only to CAP_SYS_ADMIN).
    #[error(
        "/proc/self/pagemap shows no physical frame numbers: reading them needs CAP_SYS_ADMIN \
         (run as root)"
    )]
    Hidden,
    /// A page was not resident although it was locked.
    #[error("page at {vaddr:#x} is not resident")]
    NotPresent {
        /// Its virtual address.
        vaddr: usize,
    },
}

/// The physical address of each 4 KiB page of `[vaddr, vaddr + len)`.
pub fn physical_pages(vaddr: usize, len: usize) -> Result<Vec<u64>, PagemapError> {
    const PRESENT: u64 = 1 << 63;
    const PFN_MASK: u64 = (1 << 55) - 1;
    let f = File::open("/proc/self/pagemap").map_err(PagemapError::Read)?;
    let first = vaddr / SMALL_PAGE;
    let n = len.div_ceil(SMALL_PAGE);
    let mut raw = vec![0u8; n * 8];
    f.read_exact_at(&mut raw, (first as u64) * 8)
        .map_err(PagemapError::Read)?;
    let mut out = Vec::with_capacity(n);
    for (i, e) in raw.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(e);
        let entry = u64::from_ne_bytes(b);
        if entry & PRESENT == 0 {
            return Err(PagemapError::NotPresent {
                vaddr: (first + i) * SMALL_PAGE,
            });
        }
        let pfn = entry & PFN_MASK;
        if pfn == 0 {
            return Err(PagemapError::Hidden);
        }
        out.push(pfn * SMALL_PAGE as u64);
    }
    Ok(out)
}

/// Volatile copies between DMA or mapped device memory and ordinary slices (8 bytes at a time
/// where aligned).
pub(crate) mod volatile_copy {
    use std::ptr;

    /// Copies `dst.len()` bytes from `src` into `dst`.
    ///
    /// # Safety
    /// `src..src + dst.len()` must be readable memory that outlives the call.
    pub unsafe fn read(src: *const u8, dst: &mut [u8]) {
        let n = dst.len();
        let mut i = 0;
        while i < n {
            // SAFETY: i < n, so src + i is inside the caller's range.
            let p = unsafe { src.add(i) };
            if p.align_offset(8) == 0 && n - i >= 8 {
                // SAFETY: aligned, and 8 bytes remain inside the range.
                let v = unsafe { ptr::read_volatile(p.cast::<u64>()) };
                if let Some(d) = dst.get_mut(i..i + 8) {
                    d.copy_from_slice(&v.to_ne_bytes());
                }
                i += 8;
            } else {
                // SAFETY: inside the range.
                let v = unsafe { ptr::read_volatile(p) };
                if let Some(d) = dst.get_mut(i) {
                    *d = v;
                }
                i += 1;
            }
        }
    }

    /// Copies `src` to `dst..dst + src.len()`.
    ///
    /// # Safety
    /// `dst..dst + src.len()` must be writable memory that outlives the call.
    pub unsafe fn write(dst: *mut u8, src: &[u8]) {
        let n = src.len();
        let mut i = 0;
        while i < n {
            // SAFETY: i < n, so dst + i is inside the caller's range.
            let p = unsafe { dst.add(i) };
            match src.get(i..i + 8) {
                Some(s) if p.align_offset(8) == 0 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(s);
                    // SAFETY: aligned, and 8 bytes remain inside the range.
                    unsafe { ptr::write_volatile(p.cast::<u64>(), u64::from_ne_bytes(b)) };
                    i += 8;
                }
                _ => {
                    let v = src.get(i).copied().unwrap_or(0);
                    // SAFETY: inside the range.
                    unsafe { ptr::write_volatile(p, v) };
                    i += 1;
                }
            }
        }
    }

    /// Fills `dst..dst + len` with `byte`.
    ///
    /// # Safety
    /// `dst..dst + len` must be writable memory that outlives the call.
    pub unsafe fn fill(dst: *mut u8, len: usize, byte: u8) {
        let chunk = [byte; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            // SAFETY: done + n <= len, inside the caller's range.
            unsafe { write(dst.add(done), &chunk[..n]) };
            done += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pages_are_locked_and_have_physical_addresses_as_root() {
        let p = HostPages::new(3 * SMALL_PAGE + 1, PageKind::Small4K).unwrap();
        assert_eq!(p.len(), 4 * SMALL_PAGE);
        assert_eq!(p.kind(), PageKind::Small4K);
        assert!(p.as_ptr().align_offset(SMALL_PAGE) == 0);
        match p.physical_runs() {
            Ok(runs) => {
                let total: usize = runs.iter().map(|r| r.1).sum();
                assert_eq!(total, p.len());
                assert!(runs.iter().all(|r| r.2 != 0 && r.2.is_multiple_of(4096)));
            }
            // Not root: the frame numbers are hidden, and we say so.
            Err(e) => assert!(matches!(e, PagemapError::Hidden), "{e}"),
        }
    }

    #[test]
    fn volatile_copies_handle_every_alignment() {
        let p = HostPages::new(SMALL_PAGE, PageKind::Small4K).unwrap();
        let src: Vec<u8> = (0..100u8).collect();
        for off in 0..9usize {
            for len in [0usize, 1, 7, 8, 9, 31, 64, 91] {
                // SAFETY: off + len <= 100 < 4096, inside the mapping.
                unsafe {
                    volatile_copy::fill(p.as_ptr(), 128, 0xee);
                    volatile_copy::write(p.as_ptr().add(off), &src[..len]);
                }
                let mut back = vec![0u8; 128];
                // SAFETY: inside the mapping.
                unsafe { volatile_copy::read(p.as_ptr(), &mut back) };
                assert!(back[..off].iter().all(|b| *b == 0xee));
                assert_eq!(&back[off..off + len], &src[..len]);
                assert!(back[off + len..].iter().all(|b| *b == 0xee));
            }
        }
    }
}
