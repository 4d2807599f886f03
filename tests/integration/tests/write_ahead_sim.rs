//! Launches written ahead (`Tuning::write_ahead`, on by default; `core/src/device/fast/ahead.rs`)
//! on the simulated GPUs: a wait after a launch writes a repeat of it into the compute channel's
//! next command memory; the next launch goes through that region when it repeats the launch or
//! differs only in its parameters (only the changed words are written), and takes the ordinary
//! path otherwise. Every result is checked, so a region run with the wrong QMD, bank or timeline
//! value fails here.
#![forbid(unsafe_code)]

use nvbare_integration::{kernels_cubin as kernels, tuned};
use std::time::Duration;

use nvbare_core::device::{
    Arg, ChannelKind, CopyPath, Device, DeviceError, DeviceOptions, LaunchConfig, Recovery,
};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

fn open(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    Device::open(
        b,
        DeviceOptions {
            timeout: Duration::from_secs(2),
            ..opts
        },
    )
    .expect("device opens")
}

fn compute_submitted(dev: &Device<SimBackend>) -> u64 {
    dev.timelines().unwrap()[0].0
}

/// One 256-thread block: the shape stays the same whatever `n` is.
const ONE_BLOCK: LaunchConfig = LaunchConfig {
    grid: [1, 1, 1],
    block: [256, 1, 1],
    shared_mem_bytes: 0,
};

#[test]
fn launch_and_wait_loops_go_through_the_region_written_ahead_on_every_chip() {
    for (model, sm) in CHIPS {
        let dev = open(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 1000u32;
        let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let cfg = LaunchConfig::for_num_elems(n);
        dev.synchronize().unwrap();
        assert!(!dev.stats().written_ahead_now, "nothing launched yet");
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        assert!(!dev.stats().written_ahead_now, "only a wait writes ahead");
        dev.synchronize().unwrap();
        assert!(dev.stats().written_ahead_now, "{:?}", model.chipset);
        for i in 0..5u64 {
            let before = compute_submitted(&dev);
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            assert!(!dev.stats().written_ahead_now, "the launch used the region");
            assert_eq!(compute_submitted(&dev), before + 1, "one timeline value");
            assert_eq!(dev.stats().written_ahead, i + 1);
            dev.synchronize().unwrap();
            assert!(dev.stats().written_ahead_now, "{i}: written again");
        }
        // A wait with no launch since writes nothing new; the region stays for the next one.
        dev.synchronize().unwrap();
        assert!(dev.stats().written_ahead_now);
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![6u32; n as usize]);
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        assert_eq!(
            dev.stats().written_ahead,
            6,
            "a copy to the host is no launch"
        );
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![7u32; n as usize]);
    }
}

#[test]
fn other_parameters_shapes_and_kernels_run_as_launched() {
    // The region holds the previous launch. New parameters write only the words that differ
    // and use it; another shape or kernel must not run with what it holds.
    for (model, sm) in CHIPS {
        let dev = open(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let vadd = m.function("vector_add").unwrap();
        let a = dev.htod_copy(&[0u32; 512]).unwrap();
        let b = dev.htod_copy(&[100u32; 512]).unwrap();
        let fa = dev.htod_copy(&[1.5f32; 256]).unwrap();
        let fb = dev.htod_copy(&[2.0f32; 256]).unwrap();
        let fc = dev.alloc_zeros::<f32>(256).unwrap();
        // What the buffers must hold: add1 adds one to the first `n` elements.
        let mut want_a = vec![0u32; 512];
        let mut want_b = vec![100u32; 512];
        dev.launch(&add1, ONE_BLOCK, &[a.arg(), 64u32.into()])
            .unwrap();
        want_a[..64].iter_mut().for_each(|v| *v += 1);
        dev.synchronize().unwrap();
        // (what, elements, through the region written ahead, repeating the last call, only
        // the argument values changed since the last call)
        let steps: [(&str, u32, bool, bool, bool); 12] = [
            ("a", 64, true, true, false),       // the same launch
            ("b", 64, true, false, true),       // another buffer: one parameter word
            ("b", 200, true, false, true),      // another count
            ("a", 32, true, false, true),       // both
            ("a-2", 300, false, false, false),  // another shape (two blocks)
            ("a-2", 300, true, true, false),    // the same again
            ("vadd", 256, false, false, false), // another kernel
            ("a", 16, false, false, false),     // back to add1 (the region held vector_add)
            ("a", 16, true, true, false),       // the same again
            ("a-128", 16, false, false, false), // the same arguments, another block
            ("a", 16, false, false, false),     // and back
            ("a-2", 16, false, false, false),   // the same arguments, another grid
        ];
        for (i, (what, n, ahead, repeated, args_only)) in steps.into_iter().enumerate() {
            let used = dev.stats().written_ahead;
            let repeats = dev.stats().repeated;
            let patched = dev.stats().argument_only;
            match what {
                "a" => dev.launch(&add1, ONE_BLOCK, &[a.arg(), n.into()]),
                "a-2" => dev.launch(
                    &add1,
                    LaunchConfig::for_num_elems(512),
                    &[a.arg(), n.into()],
                ),
                "a-128" => dev.launch(
                    &add1,
                    LaunchConfig {
                        block: [128, 1, 1],
                        ..ONE_BLOCK
                    },
                    &[a.arg(), n.into()],
                ),
                "b" => dev.launch(&add1, ONE_BLOCK, &[b.arg(), n.into()]),
                _ => dev.launch(&vadd, ONE_BLOCK, &[fa.arg(), fb.arg(), fc.arg(), n.into()]),
            }
            .unwrap();
            match what {
                "a" | "a-2" | "a-128" => want_a[..n as usize].iter_mut().for_each(|v| *v += 1),
                "b" => want_b[..n as usize].iter_mut().for_each(|v| *v += 1),
                _ => {}
            }
            assert_eq!(
                dev.stats().written_ahead,
                used + u64::from(ahead),
                "{:?} step {i} ({what}, {n})",
                model.chipset
            );
            assert_eq!(
                dev.stats().repeated,
                repeats + u64::from(repeated),
                "{:?} step {i} ({what}, {n}): repeated",
                model.chipset
            );
            assert_eq!(
                dev.stats().argument_only,
                patched + u64::from(args_only),
                "{:?} step {i} ({what}, {n}): arguments only",
                model.chipset
            );
            dev.synchronize().unwrap();
        }
        assert_eq!(dev.dtoh_copy(&a).unwrap(), want_a, "{:?}", model.chipset);
        assert_eq!(dev.dtoh_copy(&b).unwrap(), want_b, "{:?}", model.chipset);
        assert_eq!(dev.dtoh_copy(&fc).unwrap(), vec![3.5f32; 256]);
    }
}

#[test]
fn a_repeated_call_is_compared_argument_by_argument() {
    // A call with the kernel, shape and arguments of the last one skips building its launch;
    // anything short of that (another device's pointer at the same address, an argument of
    // another size, one argument more or less) goes the ordinary way, which names the error,
    // and leaves the region for the next launch.
    for (model, sm) in CHIPS {
        let dev = open(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let a = dev.htod_copy(&[0u32; 256]).unwrap();
        let Arg::Ptr { va, device } = a.arg() else {
            panic!("a buffer's argument is a pointer")
        };
        let foreign = Arg::Ptr {
            va,
            device: device.wrapping_add(1),
        };
        dev.launch(&add1, ONE_BLOCK, &[a.arg(), 64u32.into()])
            .unwrap();
        dev.synchronize().unwrap();
        let mut ran = 1;
        // The same bytes as another type of argument: the same launch.
        dev.launch(&add1, ONE_BLOCK, &[a.arg(), Arg::I32(64)])
            .unwrap();
        ran += 1;
        assert_eq!((dev.stats().repeated, dev.stats().written_ahead), (1, 1));
        dev.synchronize().unwrap();
        let bad: [&[Arg<'_>]; 4] = [
            &[foreign, 64u32.into()],
            &[a.arg(), Arg::U64(64)],
            &[a.arg()],
            &[a.arg(), 64u32.into(), 1u32.into()],
        ];
        for (i, args) in bad.into_iter().enumerate() {
            let e = dev.launch(&add1, ONE_BLOCK, args).unwrap_err();
            assert!(
                matches!(e, DeviceError::ForeignObject(_) | DeviceError::Arguments(_)),
                "{:?} {i}: {e}",
                model.chipset
            );
            assert_eq!((dev.stats().repeated, dev.stats().written_ahead), (1, 1));
            assert!(dev.stats().written_ahead_now, "{i}: the region stays");
        }
        dev.launch(&add1, ONE_BLOCK, &[a.arg(), 64u32.into()])
            .unwrap();
        ran += 1;
        assert_eq!((dev.stats().repeated, dev.stats().written_ahead), (2, 2));
        // Raw bytes compare by length and content.
        dev.synchronize().unwrap();
        let n = 64u32.to_le_bytes();
        dev.launch(&add1, ONE_BLOCK, &[a.arg(), Arg::Bytes(&n)])
            .unwrap();
        ran += 1;
        assert_eq!(dev.stats().repeated, 3);
        dev.synchronize().unwrap();
        let short = [64u8; 2];
        assert!(matches!(
            dev.launch(&add1, ONE_BLOCK, &[a.arg(), Arg::Bytes(&short)]),
            Err(DeviceError::Arguments(_))
        ));
        assert_eq!(dev.stats().repeated, 3);
        let mut want = vec![0u32; 256];
        want[..64].iter_mut().for_each(|v| *v = ran);
        assert_eq!(dev.dtoh_copy(&a).unwrap(), want, "{:?}", model.chipset);
    }
}

#[test]
fn other_compute_work_copies_in_flight_and_module_loads_take_the_ordinary_path() {
    let dev = open(GH100, DeviceOptions::default());
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 256u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut buf = dev.htod_copy(&vec![1u32; n as usize]).unwrap();
    let write_ahead =
        |dev: &Device<SimBackend>, buf: &nvbare_core::device::DeviceBuffer<'_, SimBackend, u32>| {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            dev.synchronize().unwrap();
            assert!(dev.stats().written_ahead_now);
        };
    write_ahead(&dev, &buf); // 2

    // A raw submission takes the region's timeline value: the launch after it cannot use
    // the region (its QMD would release the wrong value).
    let used = dev.stats().written_ahead;
    let v = dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
    dev.wait_for(ChannelKind::Compute, v).unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap(); // 3
    assert_eq!(dev.stats().written_ahead, used);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![3u32; n as usize]);

    // New data from the copy channel, already copied (the copy waited): no acquire needed,
    // the region serves.
    write_ahead(&dev, &buf); // 4
    dev.htod_copy_into(&vec![10u32; n as usize], &mut buf)
        .unwrap();
    let used = dev.stats().written_ahead;
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap(); // 11
    assert_eq!(dev.stats().written_ahead, used + 1);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![11u32; n as usize]);

    // A copy still in flight (the copy channel is frozen): the launch must wait for it on the
    // GPU, which the region's pushbuffer has no acquire for: the ordinary path, after the copy.
    write_ahead(&dev, &buf); // 12
    let [_, copy] = dev.channel_handles().unwrap();
    let src = dev.htod_copy(&vec![20u32; n as usize]).unwrap();
    assert!(dev.with_backend(|b| b.freeze_channel(copy)).unwrap());
    dev.dtod_copy_with(&src, &mut buf, CopyPath::CopyEngine)
        .unwrap();
    let used = dev.stats().written_ahead;
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap(); // 21
    assert_eq!(dev.stats().written_ahead, used);
    assert!(dev.with_backend(|b| b.thaw_channel(copy)).unwrap());
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![21u32; n as usize]);

    // A module loaded since needs a shader-cache invalidate the region does not have.
    write_ahead(&dev, &buf); // 22
    let m2 = dev.load_cubin(&kernels(90, 12)).unwrap();
    let add1b = m2.function("add1").unwrap();
    let used = dev.stats().written_ahead;
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap(); // 23
    assert_eq!(dev.stats().written_ahead, used);
    dev.launch(&add1b, cfg, &[buf.arg(), n.into()]).unwrap(); // 24
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![24u32; n as usize]);

    // The same arguments and shape for another kernel (the other module's `add1`): not a
    // repeat of the call before.
    dev.synchronize().unwrap();
    dev.launch(&add1b, cfg, &[buf.arg(), n.into()]).unwrap(); // 25
    let repeated = dev.stats().repeated;
    assert!(repeated > 0);
    dev.synchronize().unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap(); // 26
    assert_eq!(dev.stats().repeated, repeated);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![26u32; n as usize]);
}

#[test]
fn a_fault_or_a_hang_recovers_and_writing_ahead_resumes() {
    for (model, sm) in CHIPS {
        let dev = open(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let buf = dev.htod_copy(&[0u32; 64]).unwrap();
        let cfg = LaunchConfig::for_num_elems(64);
        dev.launch(&add1, cfg, &[buf.arg(), 64u32.into()]).unwrap();
        dev.synchronize().unwrap();
        assert!(dev.stats().written_ahead_now);

        let oob = m.function("oob_write").unwrap();
        dev.launch(&oob, LaunchConfig::for_num_elems(32), &[buf.arg()])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Fault(report) = &err else {
            panic!("{:?}: expected a fault, got {err}", model.chipset);
        };
        assert_eq!(report.kernel.as_deref(), Some("oob_write"));
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);
        assert!(
            !dev.stats().written_ahead_now,
            "the channels were re-created"
        );

        let spin = m.function("spin_forever").unwrap();
        dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Timeout { report, .. } = &err else {
            panic!("{:?}: expected a timeout, got {err}", model.chipset);
        };
        assert_eq!(report.kernel.as_deref(), Some("spin_forever"));
        assert!(!dev.stats().written_ahead_now);
        let used = dev.stats().written_ahead;
        for _ in 0..3 {
            dev.launch(&add1, cfg, &[buf.arg(), 64u32.into()]).unwrap();
            dev.synchronize().unwrap();
        }
        assert_eq!(dev.stats().written_ahead, used + 2, "{:?}", model.chipset);
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![4u32; 64]);
    }
}

#[test]
fn small_command_memory_and_deferred_doorbells_still_run_every_launch() {
    // 16 KiB of command memory: regions written ahead and abandoned ones must not wedge the
    // arena. Deferred doorbells: a launch through the region queues like any other.
    for deferred in [0, 3] {
        let dev = open(
            GB202,
            tuned(
                DeviceOptions {
                    command_bytes: 16 << 10,
                    gpfifo_entries: 8,
                    ..DeviceOptions::default()
                },
                |t| {
                    t.deferred_submits = deferred;
                },
            ),
        );
        let m = dev.load_cubin(&kernels(120, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let bufs = [
            dev.htod_copy(&[0u32; 64]).unwrap(),
            dev.htod_copy(&[0u32; 64]).unwrap(),
        ];
        let vadd = m.function("vector_add").unwrap();
        let f = dev.htod_copy(&[1.0f32; 64]).unwrap();
        let fc = dev.alloc_zeros::<f32>(64).unwrap();
        for i in 0..200u32 {
            let b = &bufs[(i % 2) as usize];
            dev.launch(&add1, ONE_BLOCK, &[b.arg(), 64u32.into()])
                .unwrap();
            if i % 7 == 0 {
                // Another kernel now and then abandons the region.
                dev.launch(
                    &vadd,
                    ONE_BLOCK,
                    &[f.arg(), f.arg(), fc.arg(), 64u32.into()],
                )
                .unwrap();
            }
            if i % 3 != 2 {
                dev.synchronize().unwrap();
            }
        }
        dev.synchronize().unwrap();
        assert!(
            dev.stats().written_ahead > 50,
            "{}",
            dev.stats().written_ahead
        );
        assert_eq!(dev.dtoh_copy(&bufs[0]).unwrap(), vec![100u32; 64]);
        assert_eq!(dev.dtoh_copy(&bufs[1]).unwrap(), vec![100u32; 64]);
        assert_eq!(dev.dtoh_copy(&fc).unwrap(), vec![2.0f32; 64]);
    }
}

#[test]
fn switched_off_nothing_is_written_ahead() {
    let dev = open(
        AD102,
        tuned(DeviceOptions::default(), |t| {
            t.write_ahead = false;
        }),
    );
    let m = dev.load_cubin(&kernels(89, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let buf = dev.htod_copy(&[0u32; 32]).unwrap();
    for _ in 0..4 {
        dev.launch(&add1, ONE_BLOCK, &[buf.arg(), 32u32.into()])
            .unwrap();
        dev.synchronize().unwrap();
        assert!(!dev.stats().written_ahead_now);
    }
    assert_eq!(dev.stats().written_ahead, 0);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![4u32; 32]);
}

#[test]
fn raw_submissions_after_a_region_written_behind_queued_launches() {
    // Launches queued without doorbells, a wait that writes the region behind them, then a
    // raw submission of 4.5 KiB that takes the region's timeline value (the region is
    // abandoned) in 16 KiB of command memory: every launch runs once, nothing waits for the
    // abandoned region. (When the arena has no room for such a submission at all, the region
    // is given back instead of waited for, `Inner::arena_alloc`; with the fixture kernels'
    // small constant banks that needs a larger submission than the 1024 raw words allowed.)
    // Unchained: after a chain of launches nothing is written ahead (`chain_sim.rs`).
    let dev = open(
        GH100,
        tuned(
            DeviceOptions {
                command_bytes: 16 << 10,
                timeout: Duration::from_millis(300),
                ..DeviceOptions::default()
            },
            |t| {
                t.deferred_submits = 8;
                t.chain_launches = false;
            },
        ),
    );
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let buf = dev.htod_copy(&[0u32; 64]).unwrap();
    let nops = vec![0u32; 1000];
    let mut launches = 0;
    for i in 0..12u32 {
        for _ in 0..=(i % 4) {
            dev.launch(&add1, ONE_BLOCK, &[buf.arg(), 64u32.into()])
                .unwrap();
            launches += 1;
        }
        dev.synchronize().unwrap();
        assert!(dev.stats().written_ahead_now);
        let v = dev
            .submit_raw(ChannelKind::Compute, &nops)
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
        dev.wait_for(ChannelKind::Compute, v).unwrap();
    }
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![launches; 64]);
}
