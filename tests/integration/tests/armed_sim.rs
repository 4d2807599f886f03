//! Pre-armed launches (`DeviceOptions::armed_launches`, `core/src/device/armed.rs`) on the
//! simulated GPUs: a wait after a launch leaves the compute channel stopped at an acquire, the
//! next launch goes through it with no doorbell, and everything else on the compute channel
//! first consumes it with a no-op launch. The simulator's host retries a blocked acquire when
//! the CPU writes memory it may be polling, as the real host keeps retrying.
#![forbid(unsafe_code)]

use nvbare_integration::kernels_cubin as kernels;
use std::time::Duration;

use nvbare_core::device::{
    ChannelKind, Device, DeviceError, DeviceOptions, LaunchConfig, Recovery,
};
use nvbare_core::rm::class::NV01_DEVICE_0;
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

fn armed_opts() -> DeviceOptions {
    DeviceOptions {
        armed_launches: true,
        timeout: Duration::from_secs(2),
        ..DeviceOptions::default()
    }
}

fn open_armed(model: ChipModel) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    let dev = Device::open(b, armed_opts()).expect("device opens");
    assert!(dev.install_runtime().unwrap(), "{:?}", model.chipset);
    dev
}

/// Submitted compute-timeline value.
fn compute_submitted(dev: &Device<SimBackend>) -> u64 {
    dev.timelines().unwrap()[0].0
}

#[test]
fn launch_and_wait_loops_go_through_armed_submissions_on_every_chip() {
    for (model, sm) in CHIPS {
        let dev = open_armed(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 1000u32;
        let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let cfg = LaunchConfig::for_num_elems(n);
        assert!(!dev.is_armed(), "nothing launched yet");
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        assert!(
            dev.is_armed(),
            "{:?}: a wait after a launch arms",
            model.chipset
        );
        for i in 0..5 {
            let before = compute_submitted(&dev);
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            assert!(!dev.is_armed(), "the launch used the armed submission");
            assert_eq!(compute_submitted(&dev), before + 1, "one timeline value");
            dev.synchronize().unwrap();
            assert!(dev.is_armed(), "{i}: armed again");
        }
        assert_eq!(dev.armed_launches(), 5);
        assert_eq!(dev.repeated_launches(), 5, "each repeated the call before");
        // A wait with no launch since does not arm again; the armed one stays.
        dev.synchronize().unwrap();
        assert!(dev.is_armed());
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![6u32; n as usize]);
        assert_eq!(dev.armed_launches(), 5, "a copy to the host is no launch");
    }
}

#[test]
fn a_launch_unlike_the_one_before_rewrites_what_arming_wrote_ahead() {
    // Arming writes the previous launch's QMD and constant bank 0 into the armed region; a
    // launch with other arguments, another shape or another kernel must not run with them.
    for (model, sm) in CHIPS {
        let dev = open_armed(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let vadd = m.function("vector_add").unwrap();
        let a = dev.htod_copy(&[0u32; 64]).unwrap();
        let b = dev.htod_copy(&[100u32; 256]).unwrap();
        let fa = dev.htod_copy(&[1.5f32; 256]).unwrap();
        let fb = dev.htod_copy(&[2.0f32; 256]).unwrap();
        let fc = dev.alloc_zeros::<f32>(256).unwrap();
        let steps: [(&str, u32); 7] = [
            ("a", 64),
            ("a", 64),
            ("b", 256),
            ("b", 200),
            ("vadd", 256),
            ("a", 32),
            ("a", 32),
        ];
        // `vector_add` writes the output it was given; the others add one to a prefix.
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(1),
            &[a.arg(), 0u32.into()],
        )
        .unwrap();
        dev.synchronize().unwrap();
        for (what, n) in steps {
            let cfg = LaunchConfig::for_num_elems(n);
            match what {
                "a" => dev.launch(&add1, cfg, &[a.arg(), n.into()]),
                "b" => dev.launch(&add1, cfg, &[b.arg(), n.into()]),
                _ => dev.launch(&vadd, cfg, &[fa.arg(), fb.arg(), fc.arg(), n.into()]),
            }
            .unwrap();
            dev.synchronize().unwrap();
        }
        assert_eq!(dev.armed_launches(), 7, "{:?}", model.chipset);
        let got_a = dev.dtoh_copy(&a).unwrap();
        let want_a: Vec<u32> = (0..64).map(|i| if i < 32 { 4 } else { 2 }).collect();
        assert_eq!(got_a, want_a, "{:?}", model.chipset);
        let got_b = dev.dtoh_copy(&b).unwrap();
        let want_b: Vec<u32> = (0..256).map(|i| if i < 200 { 102 } else { 101 }).collect();
        assert_eq!(got_b, want_b, "{:?}", model.chipset);
        assert_eq!(dev.dtoh_copy(&fc).unwrap(), vec![3.5f32; 256]);
    }
}

#[test]
fn other_compute_work_consumes_the_armed_submission_first() {
    let dev = open_armed(GH100);
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 256u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut buf = dev.htod_copy(&vec![1u32; n as usize]).unwrap();
    let arm = |dev: &Device<SimBackend>,
               buf: &nvbare_core::device::DeviceBuffer<'_, SimBackend, u32>| {
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        assert!(dev.is_armed());
    };
    arm(&dev, &buf);
    let fired = dev.armed_launches();

    // New data from the copy channel, already copied (the copy waited): nothing to wait for
    // on the GPU, the armed submission serves.
    dev.htod_copy_into(&vec![10u32; n as usize], &mut buf)
        .unwrap();
    let before = compute_submitted(&dev);
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    assert_eq!(compute_submitted(&dev), before + 1);
    assert_eq!(dev.armed_launches(), fired + 1);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![11u32; n as usize]);

    // A copy still in flight (the copy channel is frozen): the launch must wait for it on the
    // GPU, which the armed submission has no acquire for, so a no-op consumes it and the
    // launch takes the normal path, after the copy.
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.synchronize().unwrap();
    assert!(dev.is_armed());
    let fired = dev.armed_launches();
    let [_, copy] = dev.channel_handles().unwrap();
    let src = dev.htod_copy(&vec![20u32; n as usize]).unwrap();
    assert!(dev.with_backend(|b| b.freeze_channel(copy)).unwrap());
    dev.dtod_copy_with(&src, &mut buf, nvbare_core::device::CopyPath::CopyEngine)
        .unwrap();
    let before = compute_submitted(&dev);
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    assert_eq!(compute_submitted(&dev), before + 2, "no-op + launch");
    assert_eq!(dev.armed_launches(), fired, "the no-op is not counted");
    assert!(dev.with_backend(|b| b.thaw_channel(copy)).unwrap());
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![21u32; n as usize]);

    // A module loaded while armed needs a shader-cache invalidate: the same.
    dev.synchronize().unwrap();
    assert!(dev.is_armed());
    let m2 = dev.load_cubin(&kernels(90, 12)).unwrap();
    let add1b = m2.function("add1").unwrap();
    dev.launch(&add1b, cfg, &[buf.arg(), n.into()]).unwrap();
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![22u32; n as usize]);
    assert_eq!(dev.armed_launches(), fired);

    // A raw submission does not queue behind the acquire.
    dev.synchronize().unwrap();
    assert!(dev.is_armed());
    let v = dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
    assert!(!dev.is_armed());
    dev.wait_for(ChannelKind::Compute, v).unwrap();
    assert!(!dev.is_armed(), "no launch since the last arm");

    // A device-to-device copy on the copy kernel is a launch: it uses an armed submission
    // (the destination is not zeroed: that would be copy-channel work to wait for).
    let mut dst = dev.alloc::<u32>(n as usize).unwrap();
    arm(&dev, &buf);
    let fired = dev.armed_launches();
    dev.dtod_copy_with(&buf, &mut dst, nvbare_core::device::CopyPath::Kernel)
        .unwrap();
    assert_eq!(dev.armed_launches(), fired + 1);
    assert_eq!(dev.dtoh_copy(&dst).unwrap(), vec![23u32; n as usize]);
}

#[test]
fn a_fault_or_a_hang_in_an_armed_launch_recovers_and_arming_resumes() {
    for (model, sm) in CHIPS {
        let dev = open_armed(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let buf = dev.htod_copy(&[0u32; 64]).unwrap();
        let cfg = LaunchConfig::for_num_elems(64);
        dev.launch(&add1, cfg, &[buf.arg(), 64u32.into()]).unwrap();
        dev.synchronize().unwrap();
        assert!(dev.is_armed());

        let oob = m.function("oob_write").unwrap();
        dev.launch(&oob, LaunchConfig::for_num_elems(32), &[buf.arg()])
            .unwrap();
        assert_eq!(dev.armed_launches(), 1);
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Fault(report) = &err else {
            panic!("{:?}: expected a fault, got {err}", model.chipset);
        };
        assert_eq!(report.fault_address(), Some(buf.gpu_va() + (1 << 40)));
        assert_eq!(report.kernel.as_deref(), Some("oob_write"));
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);
        assert!(!dev.is_armed(), "the channels were re-created");

        dev.launch(&add1, cfg, &[buf.arg(), 64u32.into()]).unwrap();
        dev.synchronize().unwrap();
        assert!(dev.is_armed());
        let spin = m.function("spin_forever").unwrap();
        dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Timeout { report, .. } = &err else {
            panic!("{:?}: expected a timeout, got {err}", model.chipset);
        };
        assert_eq!(report.kernel.as_deref(), Some("spin_forever"));
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);
        dev.launch(&add1, cfg, &[buf.arg(), 64u32.into()]).unwrap();
        dev.synchronize().unwrap();
        dev.launch(&add1, cfg, &[buf.arg(), 64u32.into()]).unwrap();
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![4u32; 64]);
        assert_eq!(dev.armed_launches(), 3, "{:?}", model.chipset);
    }
}

#[test]
fn without_a_copy_kernel_nothing_is_armed() {
    let b = SimBackend::new(GH100, true).unwrap();
    let dev = Device::open(b, armed_opts()).unwrap();
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let buf = dev.htod_copy(&[0u32; 32]).unwrap();
    for _ in 0..3 {
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(32),
            &[buf.arg(), 32u32.into()],
        )
        .unwrap();
        dev.synchronize().unwrap();
        assert!(!dev.is_armed());
    }
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![3u32; 32]);
    assert_eq!(dev.armed_launches(), 0);
}

#[test]
fn closing_an_armed_device_frees_everything() {
    let sim = SimBackend::new(GB202, true).unwrap();
    let model = sim.model_arc();
    let host = sim.gpu().host().clone();
    {
        let dev = Device::open(sim, armed_opts()).unwrap();
        assert!(dev.install_runtime().unwrap());
        let m = dev.load_cubin(&kernels(120, 13)).unwrap();
        let b = dev.htod_copy(&[1u32; 512]).unwrap();
        let f = m.function("add1").unwrap();
        dev.launch(
            &f,
            LaunchConfig::for_num_elems(512),
            &[b.arg(), 512u32.into()],
        )
        .unwrap();
        dev.synchronize().unwrap();
        assert!(dev.is_armed());
    }
    let m = model.lock().unwrap();
    assert_eq!(
        m.first_of_class(nvbare_sim::backend::CLIENT, NV01_DEVICE_0),
        None
    );
    assert_eq!(m.vram_used(), 0);
    drop(m);
    assert_eq!(host.buffers(), 0);
}

#[test]
fn a_stream_of_launches_arms_batches_and_other_work_consumes_all_of_them() {
    for (model, sm) in CHIPS {
        let dev = open_armed(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 128u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let other = dev.htod_copy(&vec![0u32; 64]).unwrap();
        // No wait in between: after a few launches the launch path arms a batch, and the
        // launches after it go through armed submissions. Two in every 50 differ from the one
        // the batch was written for, so they write their own bank and QMD (the second repeats
        // the call before it, but not what arming wrote).
        for i in 0..300 {
            if i % 50 >= 48 {
                let c = LaunchConfig::for_num_elems(64);
                dev.launch(&add1, c, &[other.arg(), 64u32.into()]).unwrap();
            } else {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            }
        }
        let fired = dev.armed_launches();
        assert!(
            fired >= 250,
            "{:?}: {fired} of 300 launches armed",
            model.chipset
        );
        // Many armed launches repeated the call before and found it written by arming (not
        // the rest of a batch after a launch unlike the one it was written for).
        let repeated = dev.repeated_launches();
        assert!(
            (100..fired).contains(&repeated),
            "{:?}: {repeated} of {fired} armed launches repeated",
            model.chipset
        );
        assert!(dev.is_armed(), "a batch is left for the next launches");
        let [(before, _), _] = dev.timelines().unwrap();
        // A raw compute submission must not queue behind an acquire: every armed submission
        // is consumed by a no-op first.
        let v = dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
        assert!(!dev.is_armed());
        assert!(v > before + 1, "no-ops were submitted: {before} -> {v}");
        assert_eq!(dev.armed_launches(), fired, "no-ops are not counted");
        dev.wait_for(ChannelKind::Compute, v).unwrap();
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![288u32; n as usize]);
        assert_eq!(dev.dtoh_copy(&other).unwrap(), vec![12u32; 64]);
        // Launching and waiting arms one at a time again, also after a copy to the host.
        let repeated = dev.repeated_launches();
        for i in 1..=3 {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            dev.synchronize().unwrap();
            assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![288 + i; n as usize]);
        }
        // The first of them differs from the call before (the last of the stream launched on
        // `other`); the next two repeat it and find it written by the wait before.
        assert_eq!(dev.repeated_launches(), repeated + 2);
        assert_eq!(
            dev.armed_launches(),
            fired + 3,
            "the wait after the raw one armed too"
        );
    }
}

#[test]
fn armed_launches_shorten_the_channel_groups_timeslice() {
    use nvbare_core::device::Backend;
    use nvbare_core::rm::Rm;
    use nvbare_core::rm::class::KEPLER_CHANNEL_GROUP_A;
    use nvbare_core::rm::ctrl::{NVA06C_CTRL_CMD_GET_TIMESLICE, NVA06C_CTRL_TIMESLICE_PARAMS};
    use zerocopy::IntoBytes;
    for (opts, want) in [(armed_opts(), 50), (DeviceOptions::default(), 1000)] {
        let sim = SimBackend::new(GH100, true).unwrap();
        let model = sim.model_arc();
        let dev = Device::open(sim, opts).unwrap();
        let tsg = model
            .lock()
            .unwrap()
            .first_of_class(nvbare_sim::backend::CLIENT, KEPLER_CHANNEL_GROUP_A)
            .expect("a channel group");
        let mut t = NVA06C_CTRL_TIMESLICE_PARAMS { timesliceUs: 0 };
        dev.with_backend(|b| {
            b.rm()
                .control(tsg, NVA06C_CTRL_CMD_GET_TIMESLICE, t.as_mut_bytes())
        })
        .unwrap()
        .unwrap();
        assert_eq!(t.timesliceUs, want, "armed: {}", opts.armed_launches);
    }
}

#[test]
fn batches_leave_room_in_a_small_ring() {
    // Armed entries wait in the GPFIFO ring until launched: a batch must not fill it.
    for entries in [4, 8, 16] {
        let b = SimBackend::new(GH100, true).unwrap();
        let opts = DeviceOptions {
            gpfifo_entries: entries,
            ..armed_opts()
        };
        let dev = Device::open(b, opts).unwrap();
        assert!(dev.install_runtime().unwrap());
        let m = dev.load_cubin(&kernels(90, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let buf = dev.htod_copy(&[0u32; 32]).unwrap();
        for _ in 0..100 {
            dev.launch(
                &add1,
                LaunchConfig::for_num_elems(32),
                &[buf.arg(), 32u32.into()],
            )
            .unwrap();
        }
        dev.synchronize().unwrap();
        assert_eq!(
            dev.dtoh_copy(&buf).unwrap(),
            vec![100u32; 32],
            "{entries} entries"
        );
        assert!(dev.armed_launches() > 0, "{entries} entries");
    }
}
