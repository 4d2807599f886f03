//! The device layer end to end on the simulated GPUs (AD102 / QMD V03, GH100 / V04, GB202 /
//! V05): bring-up, copies, launches, faults, timeouts, back-pressure, bad input.
#![forbid(unsafe_code)]

use nvbare_integration::{
    compute_stats, cubin_fixture as fixture, kernels_cubin as kernels, tuned,
};
use std::time::Duration;

use nvbare_core::channel::gpfifo::GpFifoError;
use nvbare_core::chip::QmdVersion;
use nvbare_core::device::{Arg, Device, DeviceError, DeviceOptions, LaunchConfig, Recovery};
use nvbare_core::rm::RmAbi;
use nvbare_core::rm::class::*;
use nvbare_core::rm::ctrl::rc;
use nvbare_gsp_firmware::program::{LoadCubin, LoadError};
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

mod spinning;
use spinning::finish_spinning_kernel;

const CHIPS: [(ChipModel, u32, QmdVersion); 3] = [
    (AD102, 89, QmdVersion::V03_00),
    (GH100, 90, QmdVersion::V04_00),
    (GB202, 120, QmdVersion::V05_00),
];

fn open(model: ChipModel) -> Device<SimBackend> {
    open_with(model, DeviceOptions::default())
}

fn open_with(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    Device::open(b, opts).expect("device opens")
}

#[test]
fn bring_up_picks_the_chips_classes_and_qmd() {
    for (model, sm, qmd) in CHIPS {
        let dev = open(model);
        let i = dev.info();
        let c = model.chipset.info().classes;
        assert_eq!(i.classes.compute, c.compute);
        assert_eq!(i.classes.copy, c.copy);
        assert_eq!(i.classes.gpfifo, c.gpfifo);
        assert_eq!(i.classes.usermode, c.usermode);
        assert_eq!(i.qmd, qmd);
        assert_eq!(i.sm, sm);
        assert_ne!(i.tokens[0], i.tokens[1]);
    }
    let h = open(GH100);
    assert_eq!(h.info().gr.sm_count(), 132);
    assert_eq!(h.info().gr.gpcs, 8);
    assert!(!h.info().class_list.contains(&AMPERE_COMPUTE_B));
}

#[test]
fn bring_up_and_launch_with_r570_layouts() {
    // The same flow with the r570 structs (GSP-RM 570.144, the bare-metal path): the VA space
    // params are 48 bytes, the class list holds 100 entries, SCHEDULE is 2 bytes.
    for (model, sm, qmd) in CHIPS {
        let b = SimBackend::new(model, true)
            .expect("simulated GPU")
            .with_abi(RmAbi::R570);
        let dev = Device::open(b, DeviceOptions::default()).expect("device opens with r570");
        assert_eq!(dev.info().qmd, qmd);
        assert_eq!(dev.info().driver_version.as_deref(), Some("570.144"));
        let n = 4096u32;
        let buf = dev.htod_copy(&vec![41u32; n as usize]).unwrap();
        let m = dev.load_cubin(&kernels(sm, 12)).unwrap();
        let add1 = m.function("add1").unwrap();
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(n),
            &[buf.arg(), n.into()],
        )
        .unwrap();
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![42u32; n as usize]);
    }
}

#[test]
fn add1_and_vector_add_on_every_chip_and_toolkit() {
    for (model, sm, _) in CHIPS {
        for cuda in [12, 13] {
            let dev = open(model);
            let n = 10_000u32;
            let host: Vec<u32> = (0..n).map(|i| i * 3).collect();
            let buf = dev.htod_copy(&host).unwrap();
            let m = dev.load_cubin(&kernels(sm, cuda)).unwrap();
            let add1 = m.function("add1").unwrap();
            dev.launch(
                &add1,
                LaunchConfig::for_num_elems(n),
                &[buf.arg(), n.into()],
            )
            .unwrap();
            // Twice, to check ordering of back-to-back launches.
            dev.launch(
                &add1,
                LaunchConfig::for_num_elems(n),
                &[buf.arg(), n.into()],
            )
            .unwrap();
            let out = dev.dtoh_copy(&buf).unwrap();
            for (i, v) in out.iter().enumerate() {
                assert_eq!(
                    *v,
                    i as u32 * 3 + 2,
                    "{} cuda{cuda} add1[{i}]",
                    model.chipset
                );
            }

            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
            let da = dev.htod_copy(&a).unwrap();
            let db = dev.htod_copy(&b).unwrap();
            let dc = dev.alloc_zeros::<f32>(n as usize).unwrap();
            let vadd = m.function("vector_add").unwrap();
            dev.launch(
                &vadd,
                LaunchConfig::for_num_elems(n),
                &[da.arg(), db.arg(), dc.arg(), n.into()],
            )
            .unwrap();
            let c = dev.dtoh_copy(&dc).unwrap();
            for i in 0..n as usize {
                assert_eq!(
                    c[i],
                    a[i] + b[i],
                    "{} cuda{cuda} vector_add[{i}]",
                    model.chipset
                );
            }
        }
    }
}

#[test]
fn partial_blocks_leave_the_tail_alone() {
    let dev = open(GH100);
    let m = dev.load_cubin(&kernels(90, 12)).unwrap();
    let add1 = m.function("add1").unwrap();
    let host = vec![7u32; 1000];
    let buf = dev.htod_copy(&host).unwrap();
    // n = 999: element 999 stays 7 although the grid covers it.
    dev.launch(
        &add1,
        LaunchConfig::for_num_elems(1000),
        &[buf.arg(), 999u32.into()],
    )
    .unwrap();
    let out = dev.dtoh_copy(&buf).unwrap();
    assert!(out[..999].iter().all(|&v| v == 8));
    assert_eq!(out[999], 7);
}

#[test]
fn copies_larger_than_the_staging_buffer_and_device_to_device() {
    let opts = DeviceOptions {
        staging_bytes: 64 << 10,
        ..Default::default()
    };
    let dev = open_with(AD102, opts);
    let n = 100_000usize; // 400 KB through a 64 KiB staging buffer
    let host: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let a = dev.htod_copy(&host).unwrap();
    let mut b = dev.alloc::<u32>(n).unwrap();
    dev.dtod_copy(&a, &mut b).unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), host);
    let z = dev.alloc_zeros::<u64>(50_000).unwrap();
    assert!(dev.dtoh_copy(&z).unwrap().iter().all(|&v| v == 0));
    let mut part = vec![0u32; 10];
    dev.dtoh_copy_into(&a, &mut part).unwrap();
    assert_eq!(part, host[..10]);
    assert!(matches!(
        dev.htod_copy_into(&host, &mut dev.alloc::<u32>(5).unwrap()),
        Err(DeviceError::BadRange(_))
    ));
    assert!(matches!(dev.alloc::<u32>(0), Err(DeviceError::BadRange(_))));
    let hb = dev.alloc_host::<u32>(16).unwrap();
    assert_eq!(hb.location(), nvbare_core::device::Location::Host);

    // Device to host goes through both staging halves at once (the next chunk is copied while
    // the last one is read out): sizes of exactly one, two and three halves, one byte more,
    // and right behind a copy to the device that still holds both halves.
    for bytes in [32 << 10, 64 << 10, 96 << 10, (96 << 10) + 1, 1, 3 << 20] {
        let src: Vec<u8> = (0..bytes).map(|i| (i * 7 + bytes) as u8).collect();
        let d = dev.htod_copy(&src).unwrap();
        assert_eq!(dev.dtoh_copy(&d).unwrap(), src, "{bytes} bytes");
    }
}

#[test]
fn a_copy_to_the_host_reads_each_chunk_only_after_the_copy_engine_wrote_it() {
    // The copy channel is frozen while the copy is made and thawed by another thread later
    // (real time): every chunk must wait for its copy, also when the next one is in flight.
    let b = SimBackend::new(GH100, false).expect("simulated GPU");
    let opts = DeviceOptions {
        staging_bytes: 64 << 10,
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let dev = Device::open(b, opts).expect("device opens");
    let src: Vec<u8> = (0..200u32 << 10)
        .map(|i| (i.wrapping_mul(13) ^ (i >> 12)) as u8)
        .collect();
    let d = dev.htod_copy(&src).unwrap();
    dev.synchronize().unwrap();
    let [_, copy] = dev.channel_handles().unwrap();
    let t = dev
        .with_backend(|b| b.freeze_for(copy, Duration::from_millis(50)))
        .unwrap()
        .expect("the copy channel");
    assert_eq!(dev.dtoh_copy(&d).unwrap(), src);
    t.join().unwrap();
}

#[test]
fn staging_memory_above_what_one_copy_per_half_can_move_is_refused() {
    let b = SimBackend::new(AD102, true).expect("simulated GPU");
    let opts = DeviceOptions {
        staging_bytes: (4 << 30) + 1,
        ..Default::default()
    };
    match Device::open(b, opts) {
        Err(DeviceError::BadRange(msg)) => assert!(msg.contains("staging_bytes"), "{msg}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened with more staging memory than a copy per half can move"),
    }
}

#[test]
fn fault_kernel_reports_the_faulting_address_and_the_device_recovers() {
    for (model, sm, _) in CHIPS {
        let dev = open(model);
        let m = dev.load_cubin(&kernels(sm, 12)).unwrap();
        let buf = dev.alloc_zeros::<u32>(64).unwrap();
        let oob = m.function("oob_write").unwrap();
        dev.launch(&oob, LaunchConfig::for_num_elems(32), &[buf.arg()])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Fault(report) = &err else {
            panic!("{}: expected a fault, got {err}", model.chipset);
        };
        let want = buf.gpu_va() + (1 << 40);
        assert_eq!(report.rc, Some(rc::ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT));
        assert_eq!(
            report.fault_address(),
            Some(want),
            "{}: {err}",
            model.chipset
        );
        assert_eq!(report.mmu_faults[0].access_type, 1, "a write");
        assert_eq!(report.kernel.as_deref(), Some("oob_write"));
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);
        let msg = err.to_string();
        assert!(msg.contains(&format!("{want:#x}")), "{msg}");

        // Still usable: buffers survived, new work runs.
        let add1 = m.function("add1").unwrap();
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(64),
            &[buf.arg(), 64u32.into()],
        )
        .unwrap();
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![1u32; 64]);
    }
}

#[test]
fn spinning_kernel_times_out_and_the_device_stays_usable() {
    let opts = DeviceOptions {
        timeout: Duration::from_secs(2),
        ..Default::default()
    };
    for (model, sm, _) in CHIPS {
        let dev = open_with(model, opts);
        let clock = dev.with_backend(|b| b.sim_clock()).unwrap();
        let t0 = clock.nanos();
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let spin = m.function("spin_forever").unwrap();
        dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Timeout { waited, report, .. } = &err else {
            panic!("{}: expected a timeout, got {err}", model.chipset);
        };
        assert!(*waited >= Duration::from_secs(2));
        // Virtual time: the wait took about the timeout, not forever.
        let elapsed = Duration::from_nanos(clock.nanos() - t0);
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
        assert_eq!(report.kernel.as_deref(), Some("spin_forever"));
        assert_eq!(report.rc, None);
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);
        let buf = dev.htod_copy(&[5u32; 8]).unwrap();
        let add1 = m.function("add1").unwrap();
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(8),
            &[buf.arg(), 8u32.into()],
        )
        .unwrap();
        assert_eq!(
            dev.dtoh_copy(&buf).unwrap(),
            vec![6u32; 8],
            "{}",
            model.chipset
        );
    }
}

#[test]
fn spinning_kernel_finishes_when_its_flag_is_set() {
    let dev = open(GH100);
    let m = dev.load_cubin(&kernels(90, 12)).unwrap();
    let spin = m.function("spin_forever").unwrap();
    dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    let [(sub, reached), _] = dev.timelines().unwrap();
    assert!(reached < sub, "still spinning");
    // Set the global the kernel polls from "outside": the module image holds it.
    let va = finish_spinning_kernel(&dev);
    assert!(va >= m.base() && va < m.base() + 0x10000, "{va:#x}");
    dev.synchronize().unwrap();
}

#[test]
fn full_gpfifo_waits_then_errors_without_overwriting() {
    let opts = DeviceOptions {
        gpfifo_entries: 8,
        timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let dev = open_with(GH100, opts);
    let m = dev.load_cubin(&kernels(90, 12)).unwrap();
    let empty = m.function("empty").unwrap();
    // A semaphore that is never released blocks the compute channel: GPGet stops.
    let flag = dev.alloc_zeros::<u64>(1).unwrap();
    dev.submit_wait(flag.gpu_va(), 1).unwrap();
    let mut accepted = 0;
    let err = loop {
        match dev.launch(&empty, LaunchConfig::for_num_elems(1), &[]) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 100, "the ring never filled");
    };
    match err {
        DeviceError::GpFifo(GpFifoError::RingFull {
            entries, waited, ..
        }) => {
            assert_eq!(entries, 8);
            assert!(waited >= Duration::from_millis(500));
        }
        e => panic!("expected RingFull, got {e}"),
    }
    // 8 entries hold 7 unprocessed ones: 7 launches (the blocked wait's segment has begun, so
    // GPGet is past its entry); nothing overwritten.
    assert_eq!(accepted, 7);
    // Releasing the flag drains the ring: everything queued runs.
    let va = flag.gpu_va();
    dev.with_backend(|b| b.write_gpu(va, &1u64.to_le_bytes()))
        .unwrap()
        .unwrap();
    dev.synchronize().unwrap();
    let [(sub, reached), _] = dev.timelines().unwrap();
    assert_eq!(sub, reached);
}

#[test]
fn frozen_channel_is_a_ring_full_error_and_thawing_drains_it() {
    let opts = DeviceOptions {
        gpfifo_entries: 4,
        timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let dev = open_with(AD102, opts);
    let [_, copy] = dev.channel_handles().unwrap();
    let a = dev.htod_copy(&[9u32; 16]).unwrap();
    let mut b = dev.alloc_zeros::<u32>(16).unwrap();
    dev.synchronize().unwrap();
    assert!(dev.with_backend(|be| be.freeze_channel(copy)).unwrap());
    let mut accepted = 0;
    let err = loop {
        match dev.dtod_copy(&a, &mut b) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 50, "the ring never filled");
    };
    assert!(
        matches!(
            err,
            DeviceError::GpFifo(GpFifoError::RingFull { entries: 4, .. })
        ),
        "{err}"
    );
    assert_eq!(accepted, 3, "a 4-entry ring holds 3 unfetched entries");
    assert!(dev.with_backend(|be| be.thaw_channel(copy)).unwrap());
    dev.synchronize().unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![9u32; 16]);
}

#[test]
fn bad_cubins_are_typed_errors() {
    let dev = open(GH100);
    let good = kernels(90, 12);
    assert!(matches!(dev.load_cubin(&[]), Err(LoadError::Cubin(_))));
    assert!(matches!(
        dev.load_cubin(b"not an elf"),
        Err(LoadError::Cubin(_))
    ));
    for cut in [16, 64, 500, good.len() / 2] {
        let r = dev.load_cubin(&good[..cut]);
        assert!(matches!(r, Err(LoadError::Cubin(_))), "cut at {cut}: {r:?}");
    }
    let mut corrupt = good.clone();
    for b in corrupt[0x40..0x80].iter_mut() {
        *b = 0xff;
    }
    assert!(dev.load_cubin(&corrupt).is_err());
    // Wrong generation.
    for (sm, cuda) in [(80, 12), (89, 12), (100, 13), (120, 12)] {
        match dev.load_cubin(&kernels(sm, cuda)) {
            Err(LoadError::Device(DeviceError::WrongSm { cubin, device: 90 })) => {
                assert_eq!(cubin, sm)
            }
            r => panic!("sm_{sm} on sm_90: {r:?}"),
        }
    }
    // sm_80 code runs on sm_89 (same major, lower minor).
    let ada = open(AD102);
    assert!(ada.load_cubin(&kernels(80, 12)).is_ok());
    // A relocation type the loader does not implement is refused before anything runs: the
    // R_CUDA_64 of `.rela.nv.constant4` turned into R_CUDA_UNIFIED32_LO_32 (0x70).
    let mut bad = kernels(90, 13);
    let at = rela_entries(&bad, ".rela.nv.constant4");
    bad[at + 8] = 0x70;
    let r = dev.load_cubin(&bad);
    match r {
        Err(LoadError::Device(DeviceError::Program(ref m))) => {
            assert!(m.contains("R_CUDA_UNIFIED32_LO_32"), "{m}")
        }
        _ => panic!("{r:?}"),
    }
    // An object whose call between sections the loader relocates loads.
    let rel = dev
        .load_cubin(&fixture("reloc_rel_sm90_cuda12.cubin"))
        .unwrap();
    assert!(rel.function("bump").is_ok());
    // The device is still fine.
    let m = dev.load_cubin(&good).unwrap();
    assert!(matches!(
        m.function("nope"),
        Err(DeviceError::NoSuchKernel(_))
    ));
}

#[test]
fn bad_launches_are_typed_errors() {
    let dev = open(GB202);
    let m = dev.load_cubin(&kernels(120, 12)).unwrap();
    let add1 = m.function("add1").unwrap();
    let buf = dev.alloc_zeros::<u32>(16).unwrap();
    let args = [buf.arg(), Arg::U32(16)];
    let cfg = |grid: [u32; 3], block: [u32; 3]| LaunchConfig {
        grid,
        block,
        shared_mem_bytes: 0,
    };
    for (g, b) in [
        ([1, 1, 1], [2048, 1, 1]),
        ([1, 1, 1], [32, 32, 2]),
        ([1, 1, 1], [1, 1, 65]),
        ([0, 1, 1], [32, 1, 1]),
        ([1, 1, 1], [0, 1, 1]),
        ([1, 70_000, 1], [32, 1, 1]),
    ] {
        assert!(
            matches!(
                dev.launch(&add1, cfg(g, b), &args),
                Err(DeviceError::Launch(_))
            ),
            "{g:?} {b:?}"
        );
    }
    let big_shared = LaunchConfig {
        shared_mem_bytes: 1 << 20,
        ..LaunchConfig::for_num_elems(16)
    };
    assert!(matches!(
        dev.launch(&add1, big_shared, &args),
        Err(DeviceError::Launch(_))
    ));
    // Arguments: count and sizes.
    let one = LaunchConfig::for_num_elems(16);
    assert!(matches!(
        dev.launch(&add1, one, &[buf.arg()]),
        Err(DeviceError::Arguments(_))
    ));
    assert!(matches!(
        dev.launch(&add1, one, &[buf.arg(), Arg::U64(16)]),
        Err(DeviceError::Arguments(_))
    ));
    assert!(matches!(
        dev.launch(&add1, one, &[Arg::U32(0), Arg::U32(16)]),
        Err(DeviceError::Arguments(_))
    ));
    // A buffer of another device.
    let other = open(GB202);
    let obuf = other.alloc::<u32>(16).unwrap();
    assert!(matches!(
        dev.launch(&add1, one, &[obuf.arg(), Arg::U32(16)]),
        Err(DeviceError::ForeignObject(_))
    ));
    // None of that reached the GPU: a good launch still works.
    dev.launch(&add1, one, &args).unwrap();
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![1u32; 16]);
}

#[test]
fn other_generations_classes_are_refused_like_on_the_h200() {
    use nvbare_core::rm::Rm;
    use nvbare_core::rm::RmStatus;
    let dev = open(GH100);
    let [compute, _] = dev.channel_handles().unwrap();
    let st = |e: nvbare_core::rm::RmError| e.status();
    dev.with_backend(|b| {
        let rm = nvbare_core::device::Backend::rm(b);
        assert_eq!(
            rm.alloc(compute, AMPERE_COMPUTE_B, &mut []).map_err(st),
            Err(Some(RmStatus::NV_ERR_NOT_SUPPORTED))
        );
        assert_eq!(
            rm.alloc(compute, AMPERE_DMA_COPY_B, &mut []).map_err(st),
            Err(Some(RmStatus::NV_ERR_NOT_SUPPORTED))
        );
        assert_eq!(
            rm.alloc(compute, 0x1234_5678, &mut []).map_err(st),
            Err(Some(RmStatus::NV_ERR_INVALID_CLASS))
        );
    })
    .unwrap();
}

#[test]
fn a_grid_too_large_to_simulate_times_out_instead_of_hanging() {
    let opts = DeviceOptions {
        timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let dev = open_with(GH100, opts);
    let m = dev.load_cubin(&kernels(90, 12)).unwrap();
    let add1 = m.function("add1").unwrap();
    let buf = dev.alloc_zeros::<u32>(16).unwrap();
    let cfg = LaunchConfig {
        grid: [0x7fff_ffff, 1, 1],
        block: [1024, 1, 1],
        shared_mem_bytes: 0,
    };
    dev.launch(&add1, cfg, &[buf.arg(), 16u32.into()]).unwrap();
    let e = dev.synchronize().unwrap_err();
    assert!(matches!(e, DeviceError::Timeout { .. }), "{e}");
    let small = LaunchConfig::for_num_elems(16);
    dev.launch(&add1, small, &[buf.arg(), 16u32.into()])
        .unwrap();
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![1u32; 16]);
}

/// A backend that fails at a chosen step, to test that a failed open cleans up.
struct Failing {
    inner: SimBackend,
    fail_usermode: bool,
    fail_channel: bool,
    /// Fail the n-th memory allocation (from 0).
    fail_memory: Option<u32>,
}

impl nvbare_core::device::Backend for Failing {
    type Rm = <SimBackend as nvbare_core::device::Backend>::Rm;
    type Memory = <SimBackend as nvbare_core::device::Backend>::Memory;
    type Usermode = <SimBackend as nvbare_core::device::Backend>::Usermode;
    type Clock = <SimBackend as nvbare_core::device::Backend>::Clock;
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn rm(&mut self) -> &mut Self::Rm {
        self.inner.rm()
    }
    fn clock(&self) -> &Self::Clock {
        nvbare_core::device::Backend::clock(&self.inner)
    }
    fn vaspace_params(&self) -> nvbare_core::rm::alloc::VaSpaceAlloc {
        self.inner.vaspace_params()
    }
    fn attach(
        &mut self,
        o: &nvbare_core::device::RmObjects,
    ) -> Result<(), nvbare_core::device::BackendError> {
        self.inner.attach(o)
    }
    fn alloc_memory(
        &mut self,
        r: &nvbare_core::device::MemoryRequest,
    ) -> Result<Self::Memory, nvbare_core::device::BackendError> {
        if let Some(n) = self.fail_memory.as_mut() {
            if *n == 0 {
                return Err(nvbare_core::device::BackendError::Other(
                    "memory (test)".into(),
                ));
            }
            *n -= 1;
        }
        self.inner.alloc_memory(r)
    }
    fn free_memory(&mut self, m: Self::Memory) -> Result<(), nvbare_core::device::BackendError> {
        self.inner.free_memory(m)
    }
    fn existing_device(&self) -> Option<(nvbare_core::rm::Handle, nvbare_core::rm::Handle)> {
        self.inner.existing_device()
    }
    fn detach(&mut self) {
        self.inner.detach()
    }
    fn map_usermode(
        &mut self,
        class: u32,
    ) -> Result<Self::Usermode, nvbare_core::device::BackendError> {
        if self.fail_usermode {
            return Err(nvbare_core::device::BackendError::Unsupported(
                "usermode (test)",
            ));
        }
        self.inner.map_usermode(class)
    }
    fn channel_created(
        &mut self,
        _: nvbare_core::rm::Handle,
    ) -> Result<(), nvbare_core::device::BackendError> {
        if self.fail_channel {
            return Err(nvbare_core::device::BackendError::Other(
                "channel (test)".into(),
            ));
        }
        Ok(())
    }
}

#[test]
fn a_failed_open_frees_what_it_allocated() {
    for (fail_usermode, fail_channel, fail_memory) in [
        (true, false, None),
        (false, true, None),
        (false, false, Some(5)),
    ] {
        let sim = SimBackend::new(GH100, true).unwrap();
        let model = sim.model_arc();
        let host = sim.gpu().host().clone();
        let b = Failing {
            inner: sim,
            fail_usermode,
            fail_channel,
            fail_memory,
        };
        let e = Device::open(b, DeviceOptions::default()).unwrap_err();
        assert!(e.to_string().contains("(test)"), "{e}");
        assert_eq!(host.buffers(), 0);
        // Nothing of the device is left in the RM, and no VRAM is held.
        let m = model.lock().unwrap();
        let client = nvbare_sim::backend::CLIENT;
        assert_eq!(m.first_of_class(client, NV01_DEVICE_0), None);
        assert_eq!(m.first_of_class(client, KEPLER_CHANNEL_GROUP_A), None);
        assert_eq!(m.vram_used(), 0);
        let fifo = m.fifo().clone();
        drop(m);
        let f = nvbare_sim::fifo::lock(&fifo);
        assert!((0..16).all(|chid| f.channel(chid).is_none()));
        drop(f);
        assert_eq!(
            model
                .lock()
                .unwrap()
                .object_count(nvbare_sim::backend::CLIENT),
            1
        );
    }
}

#[test]
fn a_device_the_backend_holds_is_used_and_outlives_the_device_layer() {
    use nvbare_core::device::Backend;
    let client = nvbare_sim::backend::CLIENT;
    // Opened and closed normally.
    let sim = SimBackend::new(GH100, true)
        .unwrap()
        .with_existing_device()
        .unwrap();
    let (device, subdevice) = sim.existing_device().unwrap();
    let model = sim.model_arc();
    let host = sim.gpu().host().clone();
    assert_eq!(model.lock().unwrap().object_count(client), 3);
    {
        let dev = Device::open(sim, DeviceOptions::default()).unwrap();
        assert_eq!(
            model.lock().unwrap().first_of_class(client, NV01_DEVICE_0),
            Some(device),
            "no second device object"
        );
        let m = dev.load_cubin(&kernels(90, 12)).unwrap();
        let b = dev.htod_copy(&[5u32; 512]).unwrap();
        let f = m.function("add1").unwrap();
        dev.launch(
            &f,
            LaunchConfig::for_num_elems(512),
            &[b.arg(), 512u32.into()],
        )
        .unwrap();
        assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![6u32; 512]);
    }
    let m = model.lock().unwrap();
    assert_eq!(m.class_of(client, device), Some(NV01_DEVICE_0));
    assert_eq!(m.class_of(client, subdevice), Some(NV20_SUBDEVICE_0));
    assert_eq!(
        m.object_count(client),
        3,
        "only the backend's objects are left: {:x?}",
        m.objects(client)
    );
    assert_eq!(m.vram_used(), 0);
    drop(m);
    assert_eq!(host.buffers(), 0);

    // A failed open leaves the backend's device alone and frees what it created.
    for (fail_usermode, fail_channel, fail_memory) in [
        (true, false, None),
        (false, true, None),
        (false, false, Some(5)),
        (false, false, Some(8)),
    ] {
        let sim = SimBackend::new(GH100, true)
            .unwrap()
            .with_existing_device()
            .unwrap();
        let host = sim.gpu().host().clone();
        let model = sim.model_arc();
        let b = Failing {
            inner: sim,
            fail_usermode,
            fail_channel,
            fail_memory,
        };
        assert!(Device::open(b, DeviceOptions::default()).is_err());
        let m = model.lock().unwrap();
        assert_eq!(m.class_of(client, device), Some(NV01_DEVICE_0));
        assert_eq!(
            m.object_count(client),
            3,
            "failing at {:?}: {:x?}",
            (fail_usermode, fail_channel, fail_memory),
            m.objects(client)
        );
        assert_eq!(m.vram_used(), 0);
        drop(m);
        assert_eq!(host.buffers(), 0);
    }
}

#[test]
fn closing_the_device_frees_everything() {
    let sim = SimBackend::new(AD102, true).unwrap();
    let model = sim.model_arc();
    let host = sim.gpu().host().clone();
    {
        let dev = Device::open(sim, DeviceOptions::default()).unwrap();
        let m = dev.load_cubin(&kernels(89, 12)).unwrap();
        let b = dev.htod_copy(&[1u32; 4096]).unwrap();
        let f = m.function("add1").unwrap();
        dev.launch(
            &f,
            LaunchConfig::for_num_elems(4096),
            &[b.arg(), 4096u32.into()],
        )
        .unwrap();
        assert!(model.lock().unwrap().vram_used() > 0);
        // Buffers and modules go first (they borrow the device), then the device.
    }
    let m = model.lock().unwrap();
    assert_eq!(
        m.first_of_class(nvbare_sim::backend::CLIENT, NV01_DEVICE_0),
        None
    );
    assert_eq!(m.vram_used(), 0);
    drop(m);
    // Host memory of the device (rings, staging, semaphores) went with the RM objects.
    assert_eq!(host.buffers(), 0);
}

/// The compute channel's count of grids launched while an earlier one could still run.
fn overlapping_launches(dev: &Device<SimBackend>) -> u64 {
    compute_stats(dev).overlapping_launches
}

#[test]
fn launches_find_their_qmd_prefetched_by_the_wait_before_or_behind_a_running_grid() {
    // Tuning::early_qmd_prefetch: a launch behind a grid that may still run fetches its
    // QMD before its WAIT_FOR_IDLE; a launch written ahead during a wait gets its QMD
    // prefetched by a submission that wait publishes. Per option: (round trips, back to back)
    // launched from a prefetched copy, after a first launch + sync.
    for (model, sm, _) in CHIPS {
        for (opts, expect) in [
            (DeviceOptions::default(), (9, 30)),
            (
                tuned(Default::default(), |t| {
                    t.write_ahead = false;
                }),
                (0, 29),
            ),
            (
                tuned(Default::default(), |t| {
                    t.early_qmd_prefetch = false;
                }),
                (0, 0),
            ),
            // Chained launches are scheduled by the QMD before them, not by PCAS actions: only
            // the first of the burst (written ahead) is prefetched.
            (
                tuned(Default::default(), |t| {
                    t.deferred_submits = 8;
                }),
                (9, 1),
            ),
            (
                tuned(Default::default(), |t| {
                    t.deferred_submits = 8;
                    t.chain_launches = false;
                }),
                (9, 30),
            ),
        ] {
            let dev = open_with(model, opts);
            let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
            let add1 = m.function("add1").unwrap();
            let n = 256u32;
            let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
            let cfg = LaunchConfig::for_num_elems(n);
            let args = [buf.arg(), n.into()];
            let what = format!("{} {opts:?}", model.chipset);
            let counts = |dev: &Device<SimBackend>| {
                let sim = compute_stats(dev).prefetched_launches;
                assert_eq!(dev.stats().early_prefetched, sim, "{what}");
                sim
            };
            dev.launch(&add1, cfg, &args).unwrap();
            dev.synchronize().unwrap();
            let before = counts(&dev);
            for _ in 0..9 {
                dev.launch(&add1, cfg, &args).unwrap();
                dev.synchronize().unwrap();
            }
            let round_trips = counts(&dev) - before;
            for _ in 0..30 {
                dev.launch(&add1, cfg, &args).unwrap();
            }
            dev.synchronize().unwrap();
            let back_to_back = counts(&dev) - before - round_trips;
            assert_eq!((round_trips, back_to_back), expect, "{what}");
            assert_eq!(compute_stats(&dev).overlapping_launches, 0, "{what}");
            // The prefetched copies were the launches' own: every grid added to its buffer.
            assert_eq!(
                dev.dtoh_copy(&buf).unwrap(),
                vec![40u32; n as usize],
                "{what}"
            );
        }
    }
}

#[test]
fn launches_back_to_back_wait_for_the_one_before() {
    // On the H200, grids of one channel overlap unless something waits for the engine to go
    // idle between them: 1000 `add1`s back to back lost up to 11 increments per element until
    // every launch began with WAIT_FOR_IDLE. The simulator counts launches made while an
    // earlier grid could still run; there must be none, on every path a launch can take.
    for (model, sm, _) in CHIPS {
        for opts in [
            DeviceOptions::default(),
            tuned(Default::default(), |t| {
                t.write_ahead = false;
            }),
            tuned(Default::default(), |t| {
                t.deferred_submits = 8;
            }),
            tuned(Default::default(), |t| {
                t.deferred_submits = 8;
                t.chain_launches = false;
            }),
            tuned(Default::default(), |t| {
                t.early_qmd_prefetch = false;
            }),
        ] {
            let dev = open_with(model, opts);
            let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
            let add1 = m.function("add1").unwrap();
            let n = 512u32;
            let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
            let cfg = LaunchConfig::for_num_elems(n);
            for _ in 0..40 {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            }
            for _ in 0..5 {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
                dev.synchronize().unwrap();
            }
            for _ in 0..20 {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            }
            assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![65u32; n as usize]);
            assert_eq!(
                overlapping_launches(&dev),
                0,
                "{:?} {opts:?}: launches made while an earlier grid could run",
                model.chipset
            );
        }
    }
}

/// File offset of the entries of ELF64 section `name` (section headers walked by hand).
fn rela_entries(elf: &[u8], name: &str) -> usize {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shnum, shstrndx) = (u64_at(0x28), u16_at(0x3c), u16_at(0x3e));
    let strtab = u64_at(shoff + shstrndx * 64 + 24);
    (0..shnum)
        .map(|i| shoff + i * 64)
        .find(|&h| {
            let n = strtab + u32_at(h);
            elf[n..].starts_with(name.as_bytes()) && elf[n + name.len()] == 0
        })
        .map(|h| u64_at(h + 24))
        .unwrap_or_else(|| panic!("no section {name}"))
}

#[test]
fn two_devices_with_disjoint_va_windows_hand_out_disjoint_addresses() {
    use nvbare_core::device::VaWindow;
    let windows = [0, 1].map(|i| VaWindow::DEFAULT.slice(i, 2).unwrap());
    let devs = windows.map(|w| {
        let b = SimBackend::new(GH100, true)
            .expect("simulated GPU")
            .with_va_window(w);
        Device::open(b, DeviceOptions::default()).expect("device opens")
    });
    let data: Vec<u32> = (0..4096).map(|i| i * 3 + 1).collect();
    for (dev, w) in devs.iter().zip(windows) {
        let d = dev.htod_copy(&data).unwrap();
        let h = dev.alloc_host::<u32>(4096).unwrap();
        for (va, bytes) in [(d.gpu_va(), 4 * d.len()), (h.gpu_va(), 4 * h.len())] {
            assert!(
                va >= w.base() && va + bytes as u64 <= w.end(),
                "{va:#x}+{bytes:#x} outside {w}"
            );
        }
        assert_eq!(dev.dtoh_copy(&d).unwrap(), data);
    }
}
