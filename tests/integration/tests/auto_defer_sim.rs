//! Automatic deferral (`Tuning::auto_defer`, `core/src/device/fast/flusher.rs`) on simulated
//! GPUs that fall behind (`SimBackend::run_lazily`: published work runs only when time passes
//! for the driver). With a flusher attached, a launch made while the GPU still runs published
//! work is held so the launches after it chain to it; the flusher (polled here by hand, or by
//! `nvbare_pci_host::flusher`'s thread) publishes it once the GPU has run that work, without
//! the program calling the device again. Every result is checked.
#![forbid(unsafe_code)]

use nvbare_integration::{kernels_cubin as kernels, tuned};
use std::time::{Duration, Instant};

use nvbare_core::device::{
    Device, DeviceBuffer, DeviceError, DeviceOptions, FlushPoll, Flusher, LaunchConfig, Module,
};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::clock::SimClock;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

mod spinning;
use spinning::finish_spinning_kernel;

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

fn open_lazy(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    let dev = Device::open(b, opts).expect("device opens");
    assert!(dev.with_backend(|b| b.run_lazily(true)).unwrap());
    dev
}

/// Submitted and reached values of the compute timeline.
fn compute(dev: &Device<SimBackend>) -> (u64, u64) {
    dev.timelines().unwrap()[0]
}

#[test]
fn launches_behind_a_busy_gpu_are_held_chained_and_published_by_the_flusher() {
    for (model, sm) in CHIPS {
        let what = format!("{:?}", model.chipset);
        let dev = open_lazy(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 1000u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let buf = dev.htod_copy(&vec![5u32; n as usize]).unwrap();
        dev.synchronize().unwrap();
        let flusher = dev.flusher().unwrap();
        let (base, _) = compute(&dev);
        let [chan, _] = dev.channel_handles().unwrap();

        // The GPU runs nothing meanwhile (lazy): the first launch is published, the second
        // (the GPU busy) is held, the rest chain to it.
        for _ in 0..10 {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        }
        let stats = dev.stats();
        assert_eq!(
            stats.chained, 8,
            "{what}: launches 3..10 chained to the held second"
        );
        // The host stops fetching: the first launch cannot finish, and nothing is published.
        // (No `timelines()` here: a program polling it is waiting, and it publishes.)
        assert!(dev.with_backend(|b| b.freeze_channel(chan)).unwrap());
        // The program launched since the flusher last looked: it leaves held work to the
        // program's own calls, and looks again later.
        assert_eq!(flusher.poll(), FlushPoll::Launching, "{what}");
        assert_eq!(
            flusher.poll(),
            FlushPoll::Held,
            "{what}: the first launch still runs"
        );
        assert!(dev.with_backend(|b| b.thaw_channel(chan)).unwrap());

        // The next poll lets time pass: the published launch runs, and with the GPU done
        // the held chain is published, with no call by the program.
        assert_eq!(flusher.poll(), FlushPoll::Published, "{what}");
        assert_eq!(
            flusher.poll(),
            FlushPoll::Idle,
            "{what}: nothing held any more"
        );
        assert_eq!(dev.stats().flusher_published, 1, "{what}");
        assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
        assert_eq!(compute(&dev), (base + 10, base + 10), "{what}: all ran");
        assert_eq!(
            dev.dtoh_copy(&buf).unwrap(),
            vec![15u32; n as usize],
            "{what}: each of the ten launches ran once, in order"
        );
    }
}

#[test]
fn held_launches_are_published_by_the_next_call_once_the_gpu_caught_up() {
    let dev = open_lazy(GH100, DeviceOptions::default());
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    let one = LaunchConfig::for_num_elems(1);
    dev.synchronize().unwrap();
    let flusher = dev.flusher().unwrap();
    let (base, _) = compute(&dev);
    for _ in 0..3 {
        dev.launch(&empty, one, &[]).unwrap();
    }
    assert_eq!(
        dev.stats().chained,
        1,
        "the third chained to the held second"
    );
    // The first runs (time passes for the driver through the backend's clock) ...
    dev.with_backend(|b| {
        let _ = nvbare_core::hal::Clock::now(nvbare_core::device::Backend::clock(b));
    })
    .unwrap();
    // ... and that call, as it ends, saw the GPU done and published what was held: the next
    // launch heads a new batch instead of chaining.
    assert_eq!(flusher.poll(), FlushPoll::Idle, "nothing held");
    dev.launch(&empty, one, &[]).unwrap();
    assert_eq!(dev.stats().chained, 1);
    assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
    assert_eq!(compute(&dev), (base + 4, base + 4));
    assert_eq!(dev.stats().flusher_published, 0);
}

#[test]
fn polling_the_timelines_or_recording_an_event_publishes_held_launches() {
    let dev = open_lazy(GH100, DeviceOptions::default());
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    let one = LaunchConfig::for_num_elems(1);
    dev.synchronize().unwrap();
    let flusher = dev.flusher().unwrap();
    let [chan, _] = dev.channel_handles().unwrap();
    // The host fetches nothing: only publishing can make the flusher see nothing held.
    assert!(dev.with_backend(|b| b.freeze_channel(chan)).unwrap());
    for observe in ["timelines", "record_event"] {
        for _ in 0..3 {
            dev.launch(&empty, one, &[]).unwrap();
        }
        assert_eq!(flusher.poll(), FlushPoll::Launching, "{observe}");
        assert_eq!(flusher.poll(), FlushPoll::Held, "{observe}");
        match observe {
            "timelines" => drop(dev.timelines().unwrap()),
            _ => drop(dev.record_event().unwrap()),
        }
        assert_eq!(flusher.poll(), FlushPoll::Idle, "{observe} published them");
    }
    assert!(dev.with_backend(|b| b.thaw_channel(chan)).unwrap());
    dev.synchronize().unwrap();
    assert_eq!(dev.stats().flusher_published, 0);
}

/// Elements of the buffer [`behind_a_caught_up_gpu`] increments.
const CAUGHT_UP_N: u32 = 64;

/// A lazily running GH100 opened with `opts`, a flusher, and `launch`: `add1` over a buffer of
/// zeros. Launches A (published: the GPU is idle) and B (held behind it), lets the GPU run A
/// with no call into the device (so B's batch is due from then on), then runs `body` with the
/// chained count before that and the simulator's (virtual) clock; returns the buffer after a
/// synchronize.
fn behind_a_caught_up_gpu(
    opts: DeviceOptions,
    body: impl FnOnce(&Device<SimBackend>, &dyn Fn(), &Flusher<SimBackend>, u64, &SimClock),
) -> Vec<u32> {
    let dev = open_lazy(GH100, opts);
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let n = CAUGHT_UP_N;
    let cfg = LaunchConfig::for_num_elems(n);
    let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    dev.synchronize().unwrap();
    let flusher = dev.flusher().unwrap();
    let (run_gpu, clock) = dev.with_backend(|b| (b.runner(), b.sim_clock())).unwrap();
    let launch = || dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    launch();
    launch();
    // (Any call but a launch publishes a batch that is due, whatever its size: count before
    // it is.)
    let before = dev.stats().chained;
    run_gpu();
    body(&dev, &launch, &flusher, before, &clock);
    dev.synchronize().unwrap();
    dev.dtoh_copy(&buf).unwrap()
}

/// After E's launch call in [`behind_a_caught_up_gpu`]: that call published B..E, one batch
/// (C, D and E chained to B), and nothing is held.
fn assert_published_b_to_e(dev: &Device<SimBackend>, flusher: &Flusher<SimBackend>, before: u64) {
    assert_eq!(
        flusher.poll(),
        FlushPoll::Idle,
        "B..E published by E's call"
    );
    assert_eq!(dev.stats().chained, before + 3, "C, D, E chained to B");
}

#[test]
fn a_launch_publishes_a_caught_up_batch_only_once_it_holds_the_minimum() {
    // Tuning::auto_defer_min_batch: while the program keeps launching, a launch call
    // publishes held work the GPU could start only once the batch has that many launches; the
    // flusher, once the program stops launching, publishes any batch.
    for min in [4u32, 1] {
        let opts = tuned(DeviceOptions::default(), |t| {
            t.auto_defer_min_batch = min;
            // Not reached here (the simulator's time is virtual): see the next test.
            t.auto_defer_batch_wait = Duration::from_secs(60);
        });
        let got = behind_a_caught_up_gpu(opts, |dev, launch, flusher, before, _| {
            // C and D chain to B; with `min` 4 their calls leave the batch held, ...
            launch();
            launch();
            assert_eq!(
                flusher.poll(),
                FlushPoll::Launching,
                "min {min}: the program launches: the flusher leaves held work to it"
            );
            // ... and E's call, the fourth held launch, publishes it as it ends. With 1, C's
            // call published B and C; D headed a new batch (the GPU has not run B and C) and E
            // chained to it.
            launch();
            if min == 4 {
                assert_published_b_to_e(dev, flusher, before);
            } else {
                assert_eq!(dev.stats().chained, before + 2, "C to B, E to D");
            }
            assert_eq!(dev.stats().flusher_published, 0, "min {min}");
            // Two more are held behind the published batch (the lazy GPU has not run it);
            // once the program stops launching, the flusher publishes them, fewer than `min`
            // as they are.
            launch();
            launch();
            assert_eq!(flusher.poll(), FlushPoll::Launching, "min {min}");
            assert_eq!(flusher.poll(), FlushPoll::Published, "min {min}");
            assert_eq!(dev.stats().flusher_published, 1, "min {min}");
        });
        assert_eq!(
            got,
            vec![7u32; CAUGHT_UP_N as usize],
            "min {min}: the seven launches ran once each"
        );
    }
}

#[test]
fn a_caught_up_batch_below_the_minimum_waits_for_the_program_at_most_the_batch_wait() {
    // Tuning::auto_defer_batch_wait: a program that keeps launching, slower than the GPU
    // runs, publishes a batch smaller than auto_defer_min_batch once its calls have seen it
    // due for that long (time is virtual here: it passes only as the test says).
    let wait = Duration::from_micros(100);
    let opts = tuned(DeviceOptions::default(), |t| {
        t.auto_defer_batch_wait = wait;
    });
    // (The clock comes from the helper: a call here would publish the due batch.)
    let got = behind_a_caught_up_gpu(opts, |dev, launch, flusher, before, clock| {
        // C's call sees B's batch due first, D's half the wait later leaves it held ...
        launch();
        clock.advance(wait / 2);
        launch();
        assert_eq!(flusher.poll(), FlushPoll::Launching);
        // ... and E's, past the wait, publishes B..E (4 of the 64). Had D's published, E would
        // head a held batch of its own (the lazy GPU has not run B..D).
        clock.advance(wait);
        launch();
        assert_published_b_to_e(dev, flusher, before);
        assert_eq!(dev.stats().flusher_published, 0);
    });
    assert_eq!(got, vec![5u32; CAUGHT_UP_N as usize]);
}

#[test]
fn without_a_flusher_or_with_auto_defer_off_every_launch_rings_its_doorbell() {
    for (label, attach, opts) in [
        ("no flusher", false, DeviceOptions::default()),
        (
            "auto_defer off",
            true,
            tuned(DeviceOptions::default(), |t| {
                t.auto_defer = false;
            }),
        ),
    ] {
        let dev = open_lazy(GH100, opts);
        let m = dev.load_cubin(&kernels(90, 13)).unwrap();
        let empty = m.function("empty").unwrap();
        dev.synchronize().unwrap();
        let flusher = attach.then(|| dev.flusher().unwrap());
        let (base, _) = compute(&dev);
        for _ in 0..20 {
            dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
                .unwrap();
        }
        assert_eq!(dev.stats().chained, 0, "{label}");
        if let Some(f) = &flusher {
            assert_eq!(f.poll(), FlushPoll::Idle, "{label}");
        }
        // Everything was published: turning laziness off runs it all.
        assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
        assert_eq!(compute(&dev), (base + 20, base + 20), "{label}");
    }
}

#[test]
fn a_process_on_one_cpu_starts_no_flusher_thread_and_holds_nothing() {
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
    // Affinity is per thread: this pins only the test's own thread (and what it spawns).
    let before = sched_getaffinity(None).unwrap();
    let cpu = (0..CpuSet::MAX_CPU)
        .find(|&c| before.is_set(c))
        .expect("the thread may run somewhere");
    let mut one = CpuSet::new();
    one.set(cpu);
    sched_setaffinity(None, &one).unwrap();
    let pinned = std::panic::catch_unwind(|| {
        assert!(!nvbare_pci_host::flusher::can_run_beside_the_program());
        let dev = open_lazy(GH100, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(90, 13)).unwrap();
        let empty = m.function("empty").unwrap();
        dev.synchronize().unwrap();
        let thread = nvbare_pci_host::flusher::spawn_if_parallel(&dev).unwrap();
        assert!(thread.is_none(), "a flusher thread on one CPU");
        assert!(!dev.auto_deferral_active());
        let (base, _) = compute(&dev);
        for _ in 0..20 {
            dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
                .unwrap();
        }
        assert_eq!(dev.stats().chained, 0, "launches held without a flusher");
        assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
        assert_eq!(compute(&dev), (base + 20, base + 20));
    });
    sched_setaffinity(None, &before).unwrap();
    if let Err(p) = pinned {
        std::panic::resume_unwind(p);
    }
    // With the thread's CPUs back (two or more on CI), the thread starts and launches are held.
    if nvbare_pci_host::flusher::can_run_beside_the_program() {
        let dev = open_lazy(GH100, DeviceOptions::default());
        assert!(!dev.auto_deferral_active(), "no flusher attached yet");
        let thread = nvbare_pci_host::flusher::spawn_if_parallel(&dev).unwrap();
        assert!(thread.is_some());
        assert!(dev.auto_deferral_active());
        drop(thread);
        assert!(!dev.auto_deferral_active(), "the flusher is gone");
    }
}

#[test]
fn explicit_deferral_is_left_to_the_program() {
    // With Tuning::deferred_submits the program asked to ring doorbells itself
    // (flush, waits): the flusher does not publish that work.
    let dev = open_lazy(
        GH100,
        tuned(DeviceOptions::default(), |t| {
            t.deferred_submits = 8;
        }),
    );
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    dev.synchronize().unwrap();
    let flusher = dev.flusher().unwrap();
    let (base, _) = compute(&dev);
    for _ in 0..3 {
        dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
    }
    assert_eq!(flusher.poll(), FlushPoll::Idle);
    assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
    assert_eq!(
        compute(&dev),
        (base + 3, base),
        "queued for the program's flush"
    );
    dev.flush().unwrap();
    assert_eq!(compute(&dev), (base + 3, base + 3));
}

#[test]
fn round_trips_hold_nothing() {
    let dev = open_lazy(GH100, DeviceOptions::default());
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    let flusher = dev.flusher().unwrap();
    for _ in 0..50 {
        dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
        assert_eq!(
            flusher.poll(),
            FlushPoll::Idle,
            "the GPU was idle: published at once"
        );
        dev.synchronize().unwrap();
    }
    let s = dev.stats();
    assert_eq!((s.chained, s.flusher_published), (0, 0));
}

#[test]
fn dropping_the_flusher_publishes_what_is_held_and_stops_holding() {
    let dev = open_lazy(GB202, DeviceOptions::default());
    let m = dev.load_cubin(&kernels(120, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    dev.synchronize().unwrap();
    let flusher = dev.flusher().unwrap();
    assert!(
        matches!(dev.flusher(), Err(DeviceError::Unsupported(ref m)) if m.contains("already")),
        "one flusher per device"
    );
    let (base, _) = compute(&dev);
    for _ in 0..6 {
        dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
    }
    assert_eq!(dev.stats().chained, 4);
    drop(flusher);
    assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
    assert_eq!(
        compute(&dev),
        (base + 6, base + 6),
        "published as it detached"
    );
    assert!(dev.with_backend(|b| b.run_lazily(true)).unwrap());
    for _ in 0..6 {
        dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
    }
    assert_eq!(dev.stats().chained, 4, "no holding without a flusher");
    // A new flusher may attach; once the device closes it says so.
    let f = dev.flusher().unwrap();
    drop(m);
    drop(dev);
    assert!(f.is_gone());
    assert_eq!(f.poll(), FlushPoll::Idle);
}

#[test]
fn the_flusher_thread_publishes_held_launches_while_the_program_does_not_call() {
    for (model, sm) in CHIPS {
        let what = format!("{:?}", model.chipset);
        let dev = open_lazy(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 512u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let buf = dev.htod_copy(&vec![1u32; n as usize]).unwrap();
        dev.synchronize().unwrap();
        let thread = nvbare_pci_host::flusher::spawn(&dev).unwrap();
        let launches = 600u32;
        for _ in 0..launches {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        }
        // No synchronize, flush, copy or timeline poll (those publish too): only the flusher
        // thread's polls let time pass for the lazy GPU, so only it can find the GPU done and
        // publish what was held. (`stats` publishes nothing.)
        let t = Instant::now();
        while dev.stats().flusher_published == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{what}: the flusher thread never published the held launches"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
        let (sub, done) = compute(&dev);
        assert_eq!(done, sub, "{what}: everything ran");
        assert_eq!(
            dev.dtoh_copy(&buf).unwrap(),
            vec![1 + launches; n as usize],
            "{what}: every launch ran once, in stream order"
        );
        drop(thread);
    }
}

/// Elements of the buffer [`behind_a_spinning_kernel`] hands out.
const SPIN_N: u32 = 64;

/// On a simulated GPU that runs work at the doorbell: a device with `timeout`, a flusher
/// attached (polled by hand), a zeroed buffer of [`SPIN_N`] elements, and a grid that spins
/// until [`finish_spinning_kernel`] ends it, so the launches `body` makes find the GPU busy and
/// are held.
fn behind_a_spinning_kernel(
    model: ChipModel,
    sm: u32,
    timeout: Duration,
    body: impl FnOnce(
        &Device<SimBackend>,
        &Module<'_, SimBackend>,
        &DeviceBuffer<'_, SimBackend, u32>,
        &Flusher<SimBackend>,
    ),
) {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    let dev = Device::open(
        b,
        DeviceOptions {
            timeout,
            ..DeviceOptions::default()
        },
    )
    .expect("device opens");
    let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
    let buf = dev.htod_copy(&vec![0u32; SPIN_N as usize]).unwrap();
    dev.synchronize().unwrap();
    let flusher = dev.flusher().unwrap();
    let spin = m.function("spin_forever").unwrap();
    dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    body(&dev, &m, &buf, &flusher);
}

#[test]
fn launches_behind_a_spinning_kernel_stay_held_until_it_ends_then_run_in_order() {
    for (model, sm) in CHIPS {
        let what = format!("{:?}", model.chipset);
        behind_a_spinning_kernel(model, sm, Duration::from_secs(5), |dev, m, buf, flusher| {
            let add1 = m.function("add1").unwrap();
            let cfg = LaunchConfig::for_num_elems(SPIN_N);
            for _ in 0..5 {
                dev.launch(&add1, cfg, &[buf.arg(), SPIN_N.into()]).unwrap();
            }
            assert_eq!(dev.stats().chained, 4, "{what}");
            assert_eq!(flusher.poll(), FlushPoll::Launching, "{what}");
            assert_eq!(flusher.poll(), FlushPoll::Held, "{what}: the kernel spins");
            // Ending it is a call into the device: as it ends it finds the GPU done and
            // publishes.
            finish_spinning_kernel(dev);
            assert_eq!(flusher.poll(), FlushPoll::Idle, "{what}");
            dev.synchronize().unwrap();
            assert_eq!(
                dev.dtoh_copy(buf).unwrap(),
                vec![5u32; SPIN_N as usize],
                "{what}"
            );
        });
    }
}

#[test]
fn a_fault_in_a_held_chain_is_reported_and_the_device_recovers() {
    for (model, sm) in CHIPS {
        let what = format!("{:?}", model.chipset);
        behind_a_spinning_kernel(model, sm, Duration::from_secs(5), |dev, m, buf, flusher| {
            let (add1, oob, spin) = (
                m.function("add1").unwrap(),
                m.function("oob_write").unwrap(),
                m.function("spin_forever").unwrap(),
            );
            let cfg = LaunchConfig::for_num_elems(SPIN_N);
            dev.launch(&add1, cfg, &[buf.arg(), SPIN_N.into()]).unwrap();
            dev.launch(&oob, LaunchConfig::for_num_elems(32), &[buf.arg()])
                .unwrap();
            dev.launch(&add1, cfg, &[buf.arg(), SPIN_N.into()]).unwrap();
            assert_eq!(dev.stats().chained, 2, "{what}");
            let flag = finish_spinning_kernel(dev);
            let err = dev.synchronize().unwrap_err();
            assert!(err.to_string().contains("MMU fault"), "{what}: {err}");
            // Re-created channels: launches are held and chained again, and run (the spinning
            // kernel's flag cleared, so that it spins again).
            let buf = dev.htod_copy(&vec![0u32; SPIN_N as usize]).unwrap();
            dev.with_backend(|b| b.write_gpu(flag, &0u32.to_le_bytes()))
                .unwrap()
                .unwrap();
            dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
                .unwrap();
            for _ in 0..10 {
                dev.launch(&add1, cfg, &[buf.arg(), SPIN_N.into()]).unwrap();
            }
            assert_eq!(dev.stats().chained, 2 + 9, "{what}");
            finish_spinning_kernel(dev);
            assert_eq!(flusher.poll(), FlushPoll::Idle, "{what}");
            assert_eq!(
                dev.dtoh_copy(&buf).unwrap(),
                vec![10u32; SPIN_N as usize],
                "{what}"
            );
        });
    }
}

#[test]
fn a_kernel_that_never_ends_times_out_with_launches_held_behind_it() {
    behind_a_spinning_kernel(
        GH100,
        90,
        Duration::from_millis(300),
        |dev, m, buf, flusher| {
            let add1 = m.function("add1").unwrap();
            let cfg = LaunchConfig::for_num_elems(SPIN_N);
            for _ in 0..3 {
                dev.launch(&add1, cfg, &[buf.arg(), SPIN_N.into()]).unwrap();
            }
            assert_eq!(flusher.poll(), FlushPoll::Launching);
            assert_eq!(flusher.poll(), FlushPoll::Held);
            let err = dev.synchronize().unwrap_err();
            assert!(
                matches!(err, DeviceError::Timeout { .. }),
                "expected a timeout: {err}"
            );
            // Nothing is left held for the flusher, and the device works (held and chained
            // again).
            assert_eq!(flusher.poll(), FlushPoll::Idle);
            let buf = dev.htod_copy(&vec![0u32; SPIN_N as usize]).unwrap();
            for _ in 0..8 {
                dev.launch(&add1, cfg, &[buf.arg(), SPIN_N.into()]).unwrap();
            }
            dev.synchronize().unwrap();
            assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![8u32; SPIN_N as usize]);
        },
    );
}
