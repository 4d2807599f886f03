//! Lost doorbells on the simulated GPUs. The host takes a channel's `GPPut` only when its
//! doorbell is rung; on the H200 a doorbell was lost whenever another process created its
//! channels (docs/hardware.md), and the wait for that work timed out. Waits (and a
//! full ring) now ring the doorbell again when published entries stay unfetched
//! (`channel::gpfifo::DOORBELL_RETRY`). The simulator loses doorbells on request
//! (`SimBackend::lose_doorbells`).
#![forbid(unsafe_code)]

use nvbare_integration::{kernels_cubin, tuned};
use std::time::Duration;

use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

fn open_with(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    Device::open(b, opts).expect("device opens")
}

fn opts() -> DeviceOptions {
    DeviceOptions {
        timeout: Duration::from_secs(1),
        ..DeviceOptions::default()
    }
}

#[test]
fn a_launch_whose_doorbell_is_lost_completes_at_the_next_wait() {
    // With the defaults the wait publishes a prefetch of the next launch's QMD
    // (Tuning::early_qmd_prefetch), whose doorbell brings the lost one's entry too: no
    // retry. Without it, the wait's watchdog rings again once.
    for ((model, sm), (early, retries)) in CHIPS
        .into_iter()
        .flat_map(|c| [(c, (false, 1)), (c, (true, 0))])
    {
        let dev = open_with(
            model,
            tuned(opts(), |t| {
                t.early_qmd_prefetch = early;
            }),
        );
        let m = dev.load_cubin(&kernels_cubin(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 256u32;
        let buf = dev.htod_copy(&vec![1u32; n as usize]).unwrap();
        let cfg = LaunchConfig::for_num_elems(n);
        dev.synchronize().unwrap();
        assert_eq!(
            dev.stats().doorbell_retries,
            0,
            "no wait needed a retry yet"
        );
        let [compute, _] = dev.channel_handles().unwrap();
        assert!(dev.with_backend(|b| b.lose_doorbells(compute, 1)).unwrap());
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        let [(submitted, reached), _] = dev.timelines().unwrap();
        assert_eq!(
            reached + 1,
            submitted,
            "{:?}: the host did not fetch the launch",
            model.chipset
        );
        dev.synchronize()
            .unwrap_or_else(|e| panic!("{:?}: {e}", model.chipset));
        let r = dev.stats();
        assert_eq!(
            (r.doorbell_retries, r.doorbell_retries_unfetched),
            (retries, retries),
            "{:?} early prefetch {early}",
            model.chipset
        );
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![2u32; n as usize]);
        // Doorbells that arrive are not rung twice.
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        assert_eq!(dev.stats().doorbell_retries, retries);
    }
}

#[test]
fn copies_whose_doorbells_are_lost_complete() {
    let dev = open_with(GH100, opts());
    let [_, copy] = dev.channel_handles().unwrap();
    let src: Vec<u32> = (0..4096).collect();
    let a = dev.htod_copy(&src).unwrap();
    let mut b = dev.alloc_zeros::<u32>(src.len()).unwrap();
    dev.synchronize().unwrap();
    // Every doorbell of the copy channel for a while: each wait rings again until one arrives.
    assert!(dev.with_backend(|be| be.lose_doorbells(copy, 3)).unwrap());
    dev.dtod_copy(&a, &mut b).unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), src);
    assert_eq!(
        dev.with_backend(|be| be.doorbells_to_lose(copy)).unwrap(),
        Some(0)
    );
    let r = dev.stats();
    assert!(r.doorbell_retries >= 2, "{r:?}");
    assert_eq!(
        r.doorbell_retries_unfetched, r.doorbell_retries,
        "every retry found the copy unfetched"
    );
}

#[test]
fn a_full_ring_whose_doorbells_were_lost_drains() {
    let dev = open_with(
        AD102,
        DeviceOptions {
            gpfifo_entries: 4,
            ..opts()
        },
    );
    let [_, copy] = dev.channel_handles().unwrap();
    let a = dev.htod_copy(&[7u32; 64]).unwrap();
    let mut b = dev.alloc_zeros::<u32>(64).unwrap();
    dev.synchronize().unwrap();
    // The ring holds 3 unfetched entries; the fourth copy finds it full with no doorbell
    // having arrived, and must ring again while it waits for room.
    assert!(dev.with_backend(|be| be.lose_doorbells(copy, 4)).unwrap());
    for _ in 0..6 {
        dev.dtod_copy(&a, &mut b).unwrap();
    }
    dev.synchronize().unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![7u32; 64]);
    assert_eq!(
        dev.with_backend(|be| be.doorbells_to_lose(copy)).unwrap(),
        Some(0)
    );
}

#[test]
fn work_published_without_a_doorbell_is_not_fetched() {
    // The simulated host, like the real one with the GPU to itself, takes GPPut only at a
    // doorbell: with every doorbell lost and no wait, nothing runs.
    let dev = open_with(GH100, opts());
    let [_, copy] = dev.channel_handles().unwrap();
    let a = dev.htod_copy(&[3u32; 16]).unwrap();
    let mut b = dev.alloc_zeros::<u32>(16).unwrap();
    dev.synchronize().unwrap();
    let before = dev.timelines().unwrap()[1];
    assert!(dev.with_backend(|be| be.lose_doorbells(copy, 1)).unwrap());
    dev.dtod_copy(&a, &mut b).unwrap();
    let after = dev.timelines().unwrap()[1];
    assert_eq!(after.0, before.0 + 1, "one copy submitted");
    assert_eq!(after.1, before.1, "and not run: its doorbell was lost");
    dev.synchronize().unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![3u32; 16]);
}

#[test]
fn a_stalled_channel_times_out_saying_what_was_fetched_and_backs_off_its_retries() {
    let dev = open_with(
        GH100,
        DeviceOptions {
            timeout: Duration::from_millis(200),
            ..opts()
        },
    );
    let [_, copy] = dev.channel_handles().unwrap();
    let a = dev.htod_copy(&[5u32; 16]).unwrap();
    let mut b = dev.alloc_zeros::<u32>(16).unwrap();
    dev.synchronize().unwrap();
    // A stalled PBDMA: the host ignores the doorbell however often it is rung.
    assert!(dev.with_backend(|be| be.freeze_channel(copy)).unwrap());
    dev.dtod_copy(&a, &mut b).unwrap();
    let err = dev.synchronize().unwrap_err();
    let msg = err.to_string();
    let report = err.report().expect("a timeout has a report");
    let (get, put) = report.fetch.expect("USERD was readable");
    assert_ne!(get, put, "{msg}");
    assert!(msg.contains("had not fetched every submission"), "{msg}");
    assert!(msg.contains(&format!(
        "timeline at {} of {}",
        report.reached, report.wanted
    )));
    // 100 µs, doubling while nothing moves, then every 10 ms: about 25 in 200 ms, not 2000.
    assert!(
        (10..=40).contains(&report.doorbell_retries),
        "{} retries",
        report.doorbell_retries
    );
    assert!(msg.contains(&format!("rung again {} times", report.doorbell_retries)));
    assert_eq!(
        dev.stats().doorbell_retries_unfetched,
        report.doorbell_retries
    );
}

#[test]
fn retries_while_a_long_kernel_runs_are_not_counted_as_unfetched_work() {
    // The wait's watchdog rings again when nothing moves, also while the host has fetched
    // everything and a kernel is still running (a precaution). Only retries that found
    // published entries unfetched are the mark of a lost doorbell.
    for (model, sm) in CHIPS {
        let dev = open_with(
            model,
            DeviceOptions {
                timeout: Duration::from_millis(50),
                ..opts()
            },
        );
        let m = dev.load_cubin(&kernels_cubin(sm, 13)).unwrap();
        let spin = m.function("spin_forever").unwrap();
        dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let report = err.report().expect("a timeout has a report");
        let (get, put) = report.fetch.expect("USERD was readable");
        assert_eq!(get, put, "{err}");
        let r = dev.stats();
        assert!(r.doorbell_retries >= 3, "{:?}: {r:?}", model.chipset);
        assert_eq!(
            r.doorbell_retries_unfetched, 0,
            "{:?}: {r:?}",
            model.chipset
        );
        assert_eq!(report.doorbell_retries, r.doorbell_retries);
    }
}

#[test]
fn a_release_of_an_older_value_is_reported_as_the_timeline_going_back() {
    // What the H200 did in ~3 % of the runs where another process set up its channels: a
    // launch released the value of the launch one command-memory cycle earlier, and its wait
    // timed out. The report says so instead of "still running".
    let dev = open_with(
        GH100,
        DeviceOptions {
            timeout: Duration::from_millis(200),
            ..opts()
        },
    );
    let m = dev.load_cubin(&kernels_cubin(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    let one = LaunchConfig::for_num_elems(1);
    for _ in 0..5 {
        dev.launch(&empty, one, &[]).unwrap();
        dev.synchronize().unwrap();
    }
    let seen = dev.timelines().unwrap()[0].1;
    let [compute, _] = dev.channel_handles().unwrap();
    assert!(dev.with_backend(|b| b.stale_release(compute, 3)).unwrap());
    dev.launch(&empty, one, &[]).unwrap();
    let err = dev.synchronize().unwrap_err();
    let report = err.report().expect("a timeout has a report");
    assert_eq!(report.reached, seen + 1 - 3);
    assert_eq!(report.went_back_from, Some(seen));
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("the timeline went back from {seen}")),
        "{msg}"
    );
    assert!(
        msg.contains("the GPU had fetched every submission"),
        "{msg}"
    );
    // Recovery leaves the device usable.
    dev.launch(&empty, one, &[]).unwrap();
    dev.synchronize().unwrap();
}

#[test]
fn a_slow_kernel_is_not_reported_as_the_timeline_going_back() {
    let dev = open_with(
        GH100,
        DeviceOptions {
            timeout: Duration::from_millis(100),
            ..opts()
        },
    );
    let m = dev.load_cubin(&kernels_cubin(90, 13)).unwrap();
    let spin = m.function("spin_forever").unwrap();
    let empty = m.function("empty").unwrap();
    let one = LaunchConfig::for_num_elems(1);
    dev.launch(&empty, one, &[]).unwrap();
    dev.synchronize().unwrap();
    dev.launch(&spin, one, &[]).unwrap();
    let err = dev.synchronize().unwrap_err();
    assert_eq!(err.report().unwrap().went_back_from, None, "{err}");
    assert!(!err.to_string().contains("went back"));
}

#[test]
fn a_wait_reads_userd_only_at_the_watchdogs_checks_and_only_for_unfinished_work() {
    // `GPGet` lives in USERD, in video memory behind BAR1 with the kernel-driver adapter: an
    // uncached read crossing PCIe into a GPU that may be saturating its memory. Reading every
    // channel's at each wait's start made a 64 MiB copy + synchronize ~40 µs slower than CUDA
    // on an H100 (docs/performance.md). A wait reads it only when its watchdog checks, for the
    // channels with unfinished work: here one, checked about once per retry.
    for (model, sm) in CHIPS {
        let b = SimBackend::new(model, false).expect("simulated GPU");
        let dev = Device::open(b, opts()).expect("device opens");
        let m = dev.load_cubin(&kernels_cubin(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 256u32;
        let buf = dev.htod_copy(&vec![1u32; n as usize]).unwrap();
        dev.synchronize().unwrap();
        let [compute, _] = dev.channel_handles().unwrap();
        let t = dev
            .with_backend(|b| b.freeze_for(compute, Duration::from_millis(30)))
            .unwrap()
            .expect("the compute channel");
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(n),
            &[buf.arg(), n.into()],
        )
        .unwrap();
        let (reads, retries) = (
            dev.with_backend(|b| b.wc_reads()).unwrap(),
            dev.stats().doorbell_retries,
        );
        dev.synchronize().unwrap();
        t.join().unwrap();
        let reads = dev.with_backend(|b| b.wc_reads()).unwrap() - reads;
        let retries = dev.stats().doorbell_retries - retries;
        assert!(
            retries >= 3,
            "{:?}: the wait's watchdog checked ({retries} retries)",
            model.chipset
        );
        assert!(
            reads <= retries + 1,
            "{:?}: {reads} reads of write-combined memory in a wait with {retries} retries",
            model.chipset
        );
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![2u32; n as usize]);
    }
}
