//! Pool tests. They run the real page code (mmap, mlock, pagemap) on this machine; the IOMMU
//! is a recording double, since there is no VFIO container here.

use super::*;
use proptest::prelude::*;

/// An IOMMU that records what is mapped and can be told to refuse.
#[derive(Debug, Default)]
struct FakeIommu {
    mapped: Mutex<BTreeMap<u64, usize>>,
    refuse: std::sync::atomic::AtomicBool,
    log: Mutex<Vec<String>>,
}

impl Iommu for FakeIommu {
    // SAFETY: only the numbers are recorded; the host pointer is never used.
    unsafe fn map(&self, iova: u64, _host: *mut u8, len: usize) -> Result<(), String> {
        if self.refuse.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("Cannot allocate memory (os error 12)".into());
        }
        let mut m = self.mapped.lock().unwrap();
        if m.range(..iova + len as u64)
            .any(|(a, l)| a + *l as u64 > iova)
        {
            return Err(format!("overlapping map at {iova:#x}"));
        }
        m.insert(iova, len);
        self.log
            .lock()
            .unwrap()
            .push(format!("map {iova:#x}+{len:#x}"));
        Ok(())
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), String> {
        let mut m = self.mapped.lock().unwrap();
        match m.remove(&iova) {
            Some(l) if l == len => {
                self.log
                    .lock()
                    .unwrap()
                    .push(format!("unmap {iova:#x}+{len:#x}"));
                Ok(())
            }
            _ => Err(format!("unmap of unmapped {iova:#x}+{len:#x}")),
        }
    }
}

fn pool(opts: PoolOptions) -> (DmaPool, Arc<FakeIommu>) {
    let iommu = Arc::new(FakeIommu::default());
    let p = DmaPool::new(Addressing::iommu(iommu.clone(), IovaSpace::default()), opts);
    (p, iommu)
}

fn small(retain: usize) -> PoolOptions {
    PoolOptions {
        pages: PagePolicy::SmallOnly,
        grow: HUGE_PAGE,
        retain_chunks: retain,
    }
}

fn hugepages_free() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn small_page_pool_allocates_reads_writes_and_frees() {
    let (p, iommu) = pool(small(0));
    let a = p.alloc_dma(100).unwrap();
    let b = p.alloc_dma(3 * 4096).unwrap();
    assert_eq!(a.len(), 4096);
    assert_eq!(b.len(), 3 * 4096);
    assert!(a.dev_addr() >= IovaSpace::DEFAULT.0);
    assert!(a.dev_addr().is_multiple_of(4096));
    // One chunk, mapped once, holds both buffers.
    assert_eq!(iommu.mapped.lock().unwrap().len(), 1);
    assert_eq!(b.dev_addr(), a.dev_addr() + 4096);

    let mut buf = [0u8; 16];
    b.read(4096, &mut buf).unwrap();
    assert_eq!(buf, [0; 16], "zeroed");
    b.write(4096 + 3, b"hello, gpu").unwrap();
    b.write_u64(8 * 1024, 0x1122_3344_5566_7788).unwrap();
    b.read(4096 + 3, &mut buf[..10]).unwrap();
    assert_eq!(&buf[..10], b"hello, gpu");
    assert_eq!(b.read_u64(8 * 1024).unwrap(), 0x1122_3344_5566_7788);
    assert_eq!(b.read_u32(8 * 1024 + 4).unwrap(), 0x1122_3344);
    // The other buffer did not see it.
    assert_eq!(a.read_u64(0).unwrap(), 0);
    assert!(matches!(
        b.write(3 * 4096 - 2, &[1, 2, 3]),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        a.read(usize::MAX, &mut buf),
        Err(HalError::OutOfRange { .. })
    ));
    b.fill(0, 4096, 0xab).unwrap();
    assert_eq!(b.read_u32(4092).unwrap(), 0xabab_abab);
    assert_eq!(b.read_u32(4096 + 16).unwrap(), 0);
    assert_eq!(b.read_u32(4096).unwrap(), u32::from(b'h') << 24);

    let stats = p.stats();
    assert_eq!(stats.small_bytes, HUGE_PAGE);
    assert_eq!(stats.huge_bytes, 0);
    assert_eq!(stats.used_bytes, 4 * 4096);

    // Freeing everything unmaps the chunk from the IOMMU and returns its IOVA range.
    let iova = a.dev_addr();
    drop(a);
    assert_eq!(iommu.mapped.lock().unwrap().len(), 1);
    drop(b);
    assert!(iommu.mapped.lock().unwrap().is_empty());
    assert_eq!(p.stats(), PoolStats::default());
    assert_eq!(
        *iommu.log.lock().unwrap(),
        [
            format!("map {iova:#x}+{HUGE_PAGE:#x}"),
            format!("unmap {iova:#x}+{HUGE_PAGE:#x}")
        ]
    );
    // The IOVA comes back for the next chunk.
    let c = p.alloc_dma(4096).unwrap();
    assert_eq!(c.dev_addr(), iova);
}

#[test]
fn freed_space_is_zeroed_when_handed_out_again() {
    let (p, _) = pool(small(1));
    let a = p.alloc_dma(8192).unwrap();
    a.fill(0, 8192, 0x5a).unwrap();
    let addr = a.dev_addr();
    drop(a);
    assert_eq!(p.stats().chunks, 1, "one idle chunk retained");
    let b = p.alloc_dma(8192).unwrap();
    assert_eq!(b.dev_addr(), addr);
    let mut back = vec![1u8; 8192];
    b.read(0, &mut back).unwrap();
    assert!(back.iter().all(|x| *x == 0));
}

#[test]
fn large_and_aligned_requests() {
    let (p, iommu) = pool(small(0));
    let big = p.alloc(5 << 20, 0).unwrap();
    assert_eq!(big.len(), 5 << 20);
    assert!(iommu.mapped.lock().unwrap().values().any(|l| *l == 6 << 20));
    big.write_u32((5 << 20) - 4, 7).unwrap();
    assert_eq!(big.read_u32((5 << 20) - 4).unwrap(), 7);
    let _x = p.alloc(4096, 0).unwrap();
    let y = p.alloc(4096, 64 << 10).unwrap();
    assert!(y.dev_addr().is_multiple_of(64 << 10));
    assert!(matches!(p.alloc(4096, 4 << 20), Err(DmaError::Invalid(_))));
    assert!(matches!(p.alloc(0, 0), Err(DmaError::Invalid(_))));
    assert!(matches!(p.alloc(usize::MAX, 0), Err(DmaError::Invalid(_))));
}

#[test]
fn iova_space_avoids_reserved_regions_and_runs_out_cleanly() {
    let iommu = Arc::new(FakeIommu::default());
    // 4 GiB window around the x86 MSI region, of which only 4 MiB is left usable.
    let space = IovaSpace::new(
        &[(0xfe00_0000, 0xfe3f_ffff + 0x20_0000)],
        &[(0xfe20_0000, 0xfe3f_ffff)],
    );
    assert_eq!(space.free_bytes(), 4 << 20);
    let p = DmaPool::new(Addressing::iommu(iommu.clone(), space), small(0));
    let a = p.alloc_dma(4096).unwrap();
    let b = p.alloc(HUGE_PAGE, 0).unwrap();
    for buf in [a.dev_addr(), b.dev_addr()] {
        assert!(
            !(0xfe20_0000..0xfe40_0000).contains(&buf),
            "{buf:#x} reserved"
        );
    }
    let e = p.alloc(HUGE_PAGE, 0).unwrap_err();
    assert!(matches!(e, DmaError::IovaExhausted { .. }), "{e}");
}

#[test]
fn iommu_refusal_is_reported_and_gives_the_iova_back() {
    let (p, iommu) = pool(small(0));
    iommu
        .refuse
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(p.alloc_dma(4096), Err(HalError::Os { .. })));
    let e = p.alloc(4096, 0).unwrap_err();
    assert!(matches!(e, DmaError::IommuMap { .. }), "{e}");
    assert!(e.to_string().contains("ulimit -l"), "{e}");
    iommu
        .refuse
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let a = p.alloc_dma(4096).unwrap();
    assert_eq!(a.dev_addr(), IovaSpace::DEFAULT.0, "IOVA was returned");
    assert_eq!(p.stats().chunks, 1);
}

#[test]
fn hugepages_are_used_when_reserved_and_reported_when_not() {
    let opts = PoolOptions {
        pages: PagePolicy::HugeOnly,
        ..PoolOptions::default()
    };
    let (p, _) = pool(opts);
    match p.alloc(4096, 0) {
        Ok(b) => {
            assert!(hugepages_free() > 0 || p.stats().huge_bytes > 0);
            assert_eq!(p.stats().huge_bytes, HUGE_PAGE);
            b.write_u32(0, 1).unwrap();
        }
        Err(e) => {
            assert_eq!(hugepages_free(), 0, "hugepages were free but: {e}");
            assert!(matches!(e, DmaError::NoHugepages { .. }), "{e}");
            let msg = e.to_string();
            assert!(msg.contains("sysctl vm.nr_hugepages="), "{msg}");
            assert!(msg.contains("hugeadm --pool-pages-min 2MB:"), "{msg}");
        }
    }
}

#[test]
fn falls_back_to_small_pages_without_hugepages() {
    let (p, _) = pool(PoolOptions::default());
    let b = p.alloc_dma(4096).unwrap();
    b.write_u32(0, 0xdead_beef).unwrap();
    assert_eq!(b.read_u32(0).unwrap(), 0xdead_beef);
    let s = p.stats();
    if hugepages_free() == 0 {
        assert_eq!((s.small_bytes, s.huge_bytes), (HUGE_PAGE, 0));
    } else {
        assert_eq!(s.huge_bytes, HUGE_PAGE);
    }
}

#[test]
fn no_memory_at_all_names_every_remedy() {
    let e = DmaError::NoHostMemory {
        size: HUGE_PAGE,
        huge: io::Error::from_raw_os_error(12),
        small: io::Error::from_raw_os_error(11),
    };
    let m = e.to_string();
    for want in [
        "sysctl vm.nr_hugepages=",
        "hugeadm --pool-pages-min 2MB:",
        "ulimit -l",
        "limits.conf",
    ] {
        assert!(m.contains(want), "{want} missing from {m}");
    }
    assert_eq!(e.to_hal(5), HalError::NoMemory { requested: 5 });
}

/// Without an IOMMU the default policy takes hugepages only: with none reserved it fails,
/// saying how to reserve them and why 4 KiB pages will not do.
#[test]
fn physical_addressing_uses_hugepages_and_pagemap_as_root() {
    let p = DmaPool::new(Addressing::Physical, PoolOptions::default());
    match p.alloc(4096, 0) {
        Ok(b) => {
            let phys = pages::physical_pages(b.as_ptr() as usize, 4096).unwrap();
            assert_eq!(phys, [b.dev_addr()]);
            assert_eq!(
                (p.stats().huge_bytes, p.stats().small_bytes),
                (HUGE_PAGE, 0)
            );
            b.write_u32(0, 9).unwrap();
        }
        Err(DmaError::Pagemap(e)) => assert!(matches!(e, PagemapError::Hidden), "{e}"),
        Err(e) => {
            assert_eq!(hugepages_free(), 0, "hugepages were free but: {e}");
            assert!(
                matches!(
                    e,
                    DmaError::HugepagesRequired {
                        source: Some(_),
                        ..
                    }
                ),
                "{e}"
            );
            assert_eq!(p.stats(), PoolStats::default(), "no 4 KiB fallback");
            let msg = e.to_string();
            for want in [
                "none could be mapped",
                "sysctl vm.nr_hugepages=",
                "grep Huge /proc/meminfo",
                "physical address",
                "4 KiB pages can move",
            ] {
                assert!(msg.contains(want), "{want} missing from {msg}");
            }
        }
    }
    // Nothing masters into this pool: let it give its pages back.
    p.mark_device_stopped();
}

/// Without an IOMMU, asking for 4 KiB pages is refused before anything is mapped.
#[test]
fn physical_addressing_refuses_small_pages() {
    let p = DmaPool::new(Addressing::Physical, small(0));
    let e = p.alloc(4096, 0).unwrap_err();
    assert!(
        matches!(e, DmaError::HugepagesRequired { source: None, .. }),
        "{e}"
    );
    assert_eq!(p.stats(), PoolStats::default(), "nothing was mapped");
    let msg = e.to_string();
    for want in [
        "SmallOnly",
        "sysctl vm.nr_hugepages=",
        "grep Huge /proc/meminfo",
        "4 KiB pages can move",
    ] {
        assert!(msg.contains(want), "{want} missing from {msg}");
    }
}

/// A physical-addressing pool with one hand-built chunk of `len` bytes of 4 KiB pages, seen by
/// the "device" as one run at 0x10_0000 (a real one needs root and hugepages). Returns the pool
/// and the chunk's CPU address.
fn physical_pool_with_chunk(len: usize, retain: usize) -> (DmaPool, usize) {
    let p = DmaPool::new(Addressing::Physical, small(retain));
    let pages = HostPages::new(len, PageKind::Small4K).unwrap();
    let at = pages.as_ptr() as usize;
    p.insert_chunk(Chunk {
        pages,
        iova: None,
        arenas: vec![Arena {
            offset: 0,
            dev: 0x10_0000,
            free: RangeAllocator::with_range(0x10_0000, len as u64, 4096),
        }],
        used: 0,
    });
    (p, at)
}

/// Whether `[at, at + len)` lies inside one mapping of `/proc/self/maps`.
fn mapped(at: usize, len: usize) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .any(|(a, b)| a <= at && at + len <= b)
}

/// The 16 bytes at `at`, read through `/proc/self/mem` (which fails cleanly for an unmapped
/// address, and reads memory another thread may have mapped there since without a data race).
fn peek(at: usize) -> Option<[u8; 16]> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/mem").ok()?;
    let mut b = [0u8; 16];
    f.read_exact_at(&mut b, at as u64).ok()?;
    Some(b)
}

const MARK: [u8; 16] = *b"nvbare-dma-mark!";

#[test]
fn physical_chunks_stay_after_their_last_buffer_is_freed() {
    let (p, _) = physical_pool_with_chunk(4 * SMALL_PAGE, 0);
    let a = p.alloc(4096, 0).unwrap();
    let b = p.alloc(8192, 0).unwrap();
    assert_eq!((a.dev_addr(), b.dev_addr()), (0x10_0000, 0x10_1000));
    drop(a);
    drop(b);
    // retain_chunks is 0, yet the chunk stays: the device may still write it.
    let s = p.stats();
    assert_eq!(
        (s.chunks, s.small_bytes, s.used_bytes),
        (1, 4 * SMALL_PAGE, 0)
    );
    // Its space is handed out again.
    assert_eq!(p.alloc(4096, 0).unwrap().dev_addr(), 0x10_0000);
    p.mark_device_stopped();
}

#[test]
fn physical_pages_are_kept_when_the_device_was_not_stopped() {
    let len = 4 * SMALL_PAGE;
    let (p, at) = physical_pool_with_chunk(len, 0);
    let b = p.alloc(len, 0).unwrap();
    b.write(0, &MARK).unwrap();
    drop(b);
    assert!(!p.device_stopped());
    drop(p);
    assert!(mapped(at, len), "the pages were given back to the kernel");
    assert_eq!(peek(at), Some(MARK));
    // SAFETY: the pool leaked this mapping on purpose and nothing refers to it any more (the
    // "device" is imaginary); give it back so the test does not hold locked memory.
    unsafe { rustix::mm::munmap(at as *mut std::ffi::c_void, len) }.unwrap();
}

#[test]
fn physical_pages_go_back_once_the_device_is_stopped() {
    let len = 4 * SMALL_PAGE;
    let (p, at) = physical_pool_with_chunk(len, 0);
    let b = p.alloc(len, 0).unwrap();
    b.write(0, &MARK).unwrap();
    let other = p.clone();
    p.add_device();
    p.mark_device_stopped();
    assert!(!p.device_stopped(), "a second device still masters");
    p.mark_device_stopped();
    assert!(p.device_stopped());
    drop((p, other));
    // The buffer keeps the pool alive.
    assert_eq!(peek(at), Some(MARK));
    drop(b);
    // Unmapped (if another test's thread has mapped something there since, it is not ours).
    assert!(
        !mapped(at, len) || peek(at) != Some(MARK),
        "the pages are still mapped"
    );
}

#[test]
fn physical_buffers_must_fit_a_contiguous_run() {
    // A chunk whose pages the "device" sees as two runs of 4 KiB and 8 KiB.
    let pages = HostPages::new(HUGE_PAGE, PageKind::Small4K).unwrap();
    let mut c = Chunk {
        pages,
        iova: None,
        arenas: vec![
            Arena {
                offset: 0,
                dev: 0x10_0000,
                free: RangeAllocator::with_range(0x10_0000, 4096, 4096),
            },
            Arena {
                offset: 4096,
                dev: 0x80_0000,
                free: RangeAllocator::with_range(0x80_0000, 8192, 4096),
            },
        ],
        used: 0,
    };
    assert_eq!(take(&mut c, 16384, 4096), None);
    assert_eq!(take(&mut c, 8192, 4096), Some((1, 0x80_0000, 4096)));
    assert_eq!(take(&mut c, 4096, 4096), Some((0, 0x10_0000, 0)));
    assert_eq!(take(&mut c, 4096, 4096), None);
}

#[test]
fn buffers_work_across_threads() {
    let (p, _) = pool(small(1));
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..32u32 {
                    let b = p.alloc_dma(4096 * (1 + (i as usize % 3))).unwrap();
                    b.write_u32(0, t << 16 | i).unwrap();
                    assert_eq!(b.read_u32(0).unwrap(), t << 16 | i);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(p.stats().used_bytes, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Live buffers never overlap in device addresses, keep their contents, and lie inside a
    /// chunk the IOMMU has mapped; when all are gone nothing stays mapped.
    #[test]
    fn pool_matches_model(ops in proptest::collection::vec((0u8..3, 1usize..600_000), 1..40)) {
        let (p, iommu) = pool(small(0));
        let mut live: Vec<(PoolBuffer, u32)> = Vec::new();
        for (n, (kind, size)) in ops.into_iter().enumerate() {
            if kind == 0 && !live.is_empty() {
                let (b, tag) = live.swap_remove(size % live.len());
                prop_assert_eq!(b.read_u32(b.len() - 4).unwrap(), tag);
                drop(b);
            } else {
                let b = p.alloc_dma(size).unwrap();
                let tag = n as u32;
                prop_assert_eq!(b.read_u32(0).unwrap(), 0);
                b.write_u32(b.len() - 4, tag).unwrap();
                live.push((b, tag));
            }
            let mapped = iommu.mapped.lock().unwrap().clone();
            let mut ranges: Vec<(u64, u64)> =
                live.iter().map(|(b, _)| (b.dev_addr(), b.dev_addr() + b.len() as u64)).collect();
            ranges.sort();
            for w in ranges.windows(2) {
                prop_assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
            }
            for (s, e) in &ranges {
                prop_assert!(mapped.iter().any(|(a, l)| a <= s && *e <= a + *l as u64));
            }
            for (b, tag) in &live {
                prop_assert_eq!(b.read_u32(b.len() - 4).unwrap(), *tag);
            }
        }
        drop(live);
        prop_assert!(iommu.mapped.lock().unwrap().is_empty());
    }
}
