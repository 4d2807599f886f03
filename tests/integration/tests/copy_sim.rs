//! Device-to-device copies on the simulated GPUs: the copy kernel (`runtime.ptx`, run by the
//! simulator's model of it) against the copy engine, the choice between them, stream order
//! across the two channels, deferred doorbells and the doorbell fences.
#![forbid(unsafe_code)]

use nvbare_integration::tuned;
use std::time::Duration;

use nvbare_core::device::{
    Arg, CopyPath, Device, DeviceError, DeviceOptions, DoorbellFence, LaunchConfig,
};
use nvbare_gsp_firmware::program::{LoadCubin, runtime_cubin};
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

fn fixture(name: &str) -> Vec<u8> {
    let p = format!("{}/../fixtures/cubins/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn open_with(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    Device::open(b, opts).expect("device opens")
}

fn open_runtime(model: ChipModel) -> Device<SimBackend> {
    let dev = open_with(model, DeviceOptions::default());
    assert!(
        dev.install_runtime().unwrap(),
        "a runtime cubin for {:?}",
        model.chipset
    );
    assert!(dev.has_copy_kernel());
    dev
}

/// Deterministic bytes (a 64-bit LCG), different per seed.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

/// Submitted values of the (compute, copy) timelines.
fn submitted(dev: &Device<SimBackend>) -> (u64, u64) {
    let [c, k] = dev.timelines().unwrap();
    (c.0, k.0)
}

#[test]
fn the_copy_kernel_copies_every_size_and_alignment() {
    // (src offset, dst offset, bytes): congruent and not modulo 16, heads and tails of every
    // length, one vector, many vectors, a remainder after the four-at-a-time loop.
    let cases: &[(usize, usize, usize)] = &[
        (0, 0, 1),
        (0, 0, 15),
        (0, 0, 16),
        (0, 0, 17),
        (1, 1, 1),
        (1, 1, 14),
        (1, 1, 15),
        (3, 3, 16),
        (15, 15, 33),
        (7, 23, 1000),
        (0, 0, 64 * 1024),
        (5, 5, (1 << 20) + 11),
        (0, 3, 4097),
        (9, 2, 100_003),
        (16, 48, 12_345),
    ];
    for (model, _) in CHIPS {
        let dev = open_runtime(model);
        let n = (1 << 20) + 64;
        let src_data = bytes(n, 1);
        let src = dev.htod_copy(&src_data).unwrap();
        for (i, &(so, d_o, len)) in cases.iter().enumerate() {
            let fill = bytes(n, 100 + i as u64);
            let mut dst = dev.htod_copy(&fill).unwrap();
            let (c0, _) = submitted(&dev);
            dev.dtod_copy_range(&src, so, &mut dst, d_o, len, CopyPath::Kernel)
                .unwrap();
            let (c1, _) = submitted(&dev);
            assert_eq!(c1, c0 + 1, "one launch on the compute channel");
            let got = dev.dtoh_copy(&dst).unwrap();
            let mut want = fill.clone();
            want[d_o..d_o + len].copy_from_slice(&src_data[so..so + len]);
            if got != want {
                let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap();
                panic!(
                    "{:?} case {i} ({so}, {d_o}, {len}): first wrong byte at {first}",
                    model.chipset
                );
            }
        }
    }
}

#[test]
fn auto_uses_the_kernel_only_for_large_copies_between_device_buffers() {
    let dev = open_runtime(GH100);
    let n = 1 << 20;
    let data = bytes(n, 7);
    let a = dev.htod_copy(&data).unwrap();
    let mut b = dev.alloc_zeros::<u8>(n).unwrap();
    let host = dev.alloc_host::<u8>(n).unwrap();
    let min = dev.options().tuning.kernel_copy_min_bytes as usize;
    assert!(min > 4096 && min <= n);

    let check = |path_is_kernel: bool, what: &str, before: (u64, u64), after: (u64, u64)| {
        if path_is_kernel {
            assert_eq!(
                (after.0, after.1),
                (before.0 + 1, before.1),
                "{what}: kernel"
            );
        } else {
            assert_eq!(after.0, before.0, "{what}: nothing on the compute channel");
            assert!(after.1 > before.1, "{what}: the copy engine");
        }
    };

    let s = submitted(&dev);
    dev.dtod_copy(&a, &mut b).unwrap();
    check(true, "1 MiB device to device", s, submitted(&dev));
    assert_eq!(dev.dtoh_copy(&b).unwrap(), data);

    let s = submitted(&dev);
    dev.dtod_copy_range(&a, 0, &mut b, 0, 4096, CopyPath::Auto)
        .unwrap();
    check(false, "4 KiB", s, submitted(&dev));

    let s = submitted(&dev);
    dev.dtod_copy_range(&a, 0, &mut b, 0, min, CopyPath::Auto)
        .unwrap();
    check(true, "exactly the threshold", s, submitted(&dev));

    let s = submitted(&dev);
    dev.dtod_copy_range(&a, 1, &mut b, 0, min, CopyPath::Auto)
        .unwrap();
    check(false, "addresses that differ modulo 16", s, submitted(&dev));

    let mut host = host;
    let s = submitted(&dev);
    dev.dtod_copy(&a, &mut host).unwrap();
    check(false, "device to host memory", s, submitted(&dev));

    let s = submitted(&dev);
    dev.dtod_copy(&host, &mut b).unwrap();
    check(false, "host memory to device", s, submitted(&dev));

    let s = submitted(&dev);
    dev.dtod_copy_with(&a, &mut b, CopyPath::CopyEngine)
        .unwrap();
    check(false, "explicit copy engine", s, submitted(&dev));
    assert_eq!(dev.dtoh_copy(&b).unwrap(), data);

    // Explicit kernel to and from host memory works too (the SMs reach it over PCIe).
    let mut b2 = dev.alloc_zeros::<u8>(n).unwrap();
    let s = submitted(&dev);
    dev.dtod_copy_with(&host, &mut b2, CopyPath::Kernel)
        .unwrap();
    check(true, "explicit kernel from host memory", s, submitted(&dev));
    assert_eq!(dev.dtoh_copy(&b2).unwrap(), data);
}

#[test]
fn without_the_runtime_every_copy_uses_the_copy_engine() {
    let dev = open_with(GH100, DeviceOptions::default());
    assert!(!dev.has_copy_kernel());
    let n = 1 << 20;
    let data = bytes(n, 3);
    let a = dev.htod_copy(&data).unwrap();
    let mut b = dev.alloc_zeros::<u8>(n).unwrap();
    let (c0, k0) = submitted(&dev);
    dev.dtod_copy(&a, &mut b).unwrap();
    let (c1, k1) = submitted(&dev);
    assert_eq!(c1, c0);
    assert!(k1 > k0);
    assert_eq!(dev.dtoh_copy(&b).unwrap(), data);
    match dev.dtod_copy_with(&a, &mut b, CopyPath::Kernel) {
        Err(DeviceError::BadRange(m)) => assert!(m.contains("install_copy_kernel"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ranges_outside_the_buffers_are_refused() {
    let dev = open_runtime(GH100);
    let a = dev.alloc_zeros::<u32>(100).unwrap();
    let mut b = dev.alloc_zeros::<u32>(50).unwrap();
    for (so, d_o, n) in [(0, 0, 51), (60, 0, 41), (0, 49, 2), (usize::MAX, 0, 2)] {
        assert!(matches!(
            dev.dtod_copy_range(&a, so, &mut b, d_o, n, CopyPath::Auto),
            Err(DeviceError::BadRange(_))
        ));
    }
    assert!(matches!(
        dev.dtod_copy(&a, &mut b),
        Err(DeviceError::BadRange(_))
    ));
    dev.dtod_copy_range(&a, 0, &mut b, 0, 0, CopyPath::Kernel)
        .unwrap();
}

#[test]
fn kernel_copies_keep_stream_order_with_the_copy_engine_and_kernels() {
    for (model, sm) in CHIPS {
        let dev = open_runtime(model);
        let m = dev
            .load_cubin(&fixture(&format!("kernels_sm{sm}_cuda13.cubin")))
            .unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 300_001usize;
        let v: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let a = dev.htod_copy(&v).unwrap(); // copy engine
        let mut b = dev.alloc::<u32>(n).unwrap();
        dev.dtod_copy(&a, &mut b).unwrap(); // kernel, after the upload
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(n as u32),
            &[b.arg(), (n as u32).into()],
        )
        .unwrap(); // after the kernel copy
        let mut c = dev.alloc::<u32>(n).unwrap();
        dev.dtod_copy_with(&b, &mut c, CopyPath::CopyEngine)
            .unwrap(); // copy engine, after add1
        dev.dtod_copy_with(&c, &mut b, CopyPath::Kernel).unwrap();
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(n as u32),
            &[b.arg(), (n as u32).into()],
        )
        .unwrap();
        let got = dev.dtoh_copy(&b).unwrap();
        let want: Vec<u32> = v.iter().map(|x| x.wrapping_add(2)).collect();
        assert!(got == want, "{:?}", model.chipset);
    }
}

#[test]
fn a_faulting_copy_kernel_is_reported_by_name() {
    // The runtime cubin loaded as a user module, launched with a source past the buffer: the
    // model's loads go through the MMU and fault like any kernel's.
    let dev = open_runtime(GH100);
    let m = dev.load_cubin(runtime_cubin(90).unwrap()).unwrap();
    let copy = m.function("nvbare_copy").unwrap();
    let dst = dev.alloc_zeros::<u8>(4096).unwrap();
    let bad = dst.gpu_va() + (1 << 40);
    dev.launch(
        &copy,
        LaunchConfig::for_num_elems(256),
        &[Arg::U64(dst.gpu_va()), Arg::U64(bad), Arg::U64(4096)],
    )
    .unwrap();
    match dev.synchronize() {
        Err(DeviceError::Fault(r)) => {
            assert_eq!(r.kernel.as_deref(), Some("nvbare_copy"));
            assert!(
                r.mmu_faults.iter().any(|f| f.address >> 12 == bad >> 12),
                "{r:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The device recovered and the installed kernel still works.
    let src = dev.htod_copy(&bytes(4096, 5)).unwrap();
    let mut d2 = dev.alloc_zeros::<u8>(4096).unwrap();
    dev.dtod_copy_with(&src, &mut d2, CopyPath::Kernel).unwrap();
    assert_eq!(dev.dtoh_copy(&d2).unwrap(), bytes(4096, 5));
}

#[test]
fn a_copy_kernel_over_an_odd_grid_still_copies_each_threads_share() {
    // Launched by hand with 3 CTAs of 40 threads: the model follows the loop thread by thread.
    let dev = open_runtime(AD102);
    let m = dev.load_cubin(runtime_cubin(89).unwrap()).unwrap();
    let copy = m.function("nvbare_copy").unwrap();
    let data = bytes(10_007, 9);
    let src = dev.htod_copy(&data).unwrap();
    let dst = dev.alloc_zeros::<u8>(10_007).unwrap();
    let cfg = LaunchConfig {
        grid: [3, 1, 1],
        block: [40, 1, 1],
        shared_mem_bytes: 0,
    };
    for (so, d_o) in [(3u64, 3u64), (0, 5)] {
        let len = 10_007 - 5;
        dev.launch(
            &copy,
            cfg,
            &[
                Arg::U64(dst.gpu_va() + d_o),
                Arg::U64(src.gpu_va() + so),
                Arg::U64(len),
            ],
        )
        .unwrap();
        let got = dev.dtoh_copy(&dst).unwrap();
        let (so, d_o, len) = (so as usize, d_o as usize, len as usize);
        assert!(got[d_o..d_o + len] == data[so..so + len], "({so}, {d_o})");
    }
}

#[test]
fn deferred_doorbells_start_work_at_the_next_wait_or_flush() {
    let opts = tuned(DeviceOptions::default(), |t| {
        t.deferred_submits = 8;
    });
    let dev = open_with(GH100, opts);
    let m = dev
        .load_cubin(&fixture("kernels_sm90_cuda13.cubin"))
        .unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 1000u32;
    let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    let cfg = LaunchConfig::for_num_elems(n);
    let reached = |d: &Device<SimBackend>| d.timelines().unwrap()[0].1;
    let base = reached(&dev);
    for _ in 0..3 {
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    }
    // The simulator runs a channel's work when its doorbell rings: none has rung yet.
    let [(sub, _), _] = dev.timelines().unwrap();
    assert_eq!(sub, base + 3);
    assert_eq!(reached(&dev), base, "no doorbell for three queued launches");
    dev.flush().unwrap();
    assert_eq!(reached(&dev), base + 3, "flush rang it");
    // The ninth queued launch rings it by itself.
    for _ in 0..9 {
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    }
    assert_eq!(reached(&dev), base + 12);
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    assert_eq!(reached(&dev), base + 12);
    // A copy back waits, and so rings it first.
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![13u32; n as usize]);
}

#[test]
fn every_doorbell_fence_runs_work() {
    for fence in [
        DoorbellFence::Store,
        DoorbellFence::StoreTwice,
        DoorbellFence::Full,
    ] {
        for (model, sm) in CHIPS {
            let opts = tuned(
                DeviceOptions {
                    timeout: Duration::from_secs(2),
                    ..DeviceOptions::default()
                },
                |t| {
                    t.doorbell_fence = fence;
                },
            );
            let dev = open_with(model, opts);
            let m = dev
                .load_cubin(&fixture(&format!("kernels_sm{sm}_cuda13.cubin")))
                .unwrap();
            let add1 = m.function("add1").unwrap();
            let buf = dev.htod_copy(&[5u32; 64]).unwrap();
            for _ in 0..3 {
                dev.launch(
                    &add1,
                    LaunchConfig::for_num_elems(64),
                    &[buf.arg(), 64u32.into()],
                )
                .unwrap();
            }
            assert_eq!(
                dev.dtoh_copy(&buf).unwrap(),
                [8u32; 64],
                "{fence:?} {:?}",
                model.chipset
            );
        }
    }
}
