//! Stale QMDs on the simulated GPUs. The compute engine caches QMDs by address (the
//! `INVALIDATE` PCAS actions exist for that cache); a launch whose `PCAS_ACTION` does not
//! invalidate may run a cached copy of an older QMD at the same address, and nvbare reuses
//! command memory. Launches send `INVALIDATE_PREFETCH_COPY_SCHEDULE`, as CUDA does (tinygrad
//! and nvbare before 2026-11-30 sent `PREFETCH_SCHEDULE`). The simulator keeps stale QMDs on
//! request (`SimBackend::keep_stale_qmds`). On the H200 this change did not cure the stale
//! timeline releases seen while another process set up its channels (docs/device.md).
//! Launches behind a running grid prefetch their QMD (`INVALIDATE`, then `PREFETCH`, before
//! the `WAIT_FOR_IDLE`): a prefetch that finds a cached copy keeps it, so the invalidate
//! comes first there too.
#![forbid(unsafe_code)]

use nvbare_integration::{compute_stats, kernels_cubin, read_qmd, tuned};

mod spinning;
use spinning::finish_spinning_kernel;
use std::time::Duration;

use nvbare_core::channel::methods::{SUBC_COMPUTE, compute};
use nvbare_core::channel::pushbuf::PushBuffer;
use nvbare_core::channel::qmd::Qmd;
use nvbare_core::device::{ChannelKind, Device, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

/// Runs `launches` add1 launches on each chip, every third on buffer `a` and the others on
/// `b` (32 elements each), in 16 KiB of command memory (QMD addresses repeat every few
/// launches) with the QMD cache keeping every QMD it fetched; `wait_each` synchronizes after
/// every launch, otherwise only at the end. Checks both buffers and returns, per chip, the
/// grids launched from prefetched copies.
fn alternating_with_stale_cache(launches: u32, wait_each: bool) -> Vec<u64> {
    let mut prefetched = Vec::new();
    for (model, sm) in CHIPS {
        let b = SimBackend::new(model, true).expect("simulated GPU");
        let dev = Device::open(
            b,
            DeviceOptions {
                command_bytes: 16 << 10,
                timeout: Duration::from_millis(500),
                ..DeviceOptions::default()
            },
        )
        .unwrap();
        let m = dev.load_cubin(&kernels_cubin(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 32u32;
        let a = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let b = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let cfg = LaunchConfig::for_num_elems(n);
        dev.synchronize().unwrap();
        let [compute, _] = dev.channel_handles().unwrap();
        assert!(
            dev.with_backend(|be| be.keep_stale_qmds(compute, true))
                .unwrap()
        );
        for i in 0..launches {
            let buf = if i % 3 == 0 { &a } else { &b };
            dev.launch(&add1, cfg, &[buf.arg(), n.into()])
                .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
            if wait_each {
                dev.synchronize()
                    .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
            }
        }
        dev.synchronize()
            .unwrap_or_else(|e| panic!("{:?}: {e}", model.chipset));
        let on_a = launches.div_ceil(3);
        assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![on_a; n as usize]);
        assert_eq!(
            dev.dtoh_copy(&b).unwrap(),
            vec![launches - on_a; n as usize]
        );
        prefetched.push(compute_stats(&dev).prefetched_launches);
    }
    prefetched
}

#[test]
fn launches_reusing_command_memory_never_run_a_stale_cached_qmd() {
    // Each launch waited for: a stale QMD would add to the wrong buffer or release an older
    // timeline value (and the wait would time out).
    alternating_with_stale_cache(120, true);
}

#[test]
fn back_to_back_launches_prefetch_no_stale_cached_qmd() {
    // No waits but those for command memory: the arena wraps many times over addresses whose
    // older QMDs the cache kept, and most launches prefetch behind a running grid.
    for p in alternating_with_stale_cache(240, false) {
        assert!(p > 100, "{p} prefetched");
    }
}

#[test]
fn a_prefetched_qmd_runs_as_it_was_when_prefetched() {
    // The model behind Tuning::early_qmd_prefetch: `PREFETCH` reads the QMD then, and a
    // launch of that address that does not invalidate runs that copy, whatever memory holds by
    // then (so the device writes a QMD in full before publishing its prefetch). Two of the
    // device's own add1 QMDs (one per buffer), copied to a test buffer at one address.
    let b = SimBackend::new(GH100, true).expect("simulated GPU");
    let dev = Device::open(
        b,
        tuned(
            DeviceOptions {
                timeout: Duration::from_millis(500),
                ..DeviceOptions::default()
            },
            |t| {
                t.write_ahead = false;
            },
        ),
    )
    .unwrap();
    let m = dev.load_cubin(&kernels_cubin(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 32u32;
    let (a, b) = (
        dev.htod_copy(&vec![0u32; n as usize]).unwrap(),
        dev.htod_copy(&vec![0u32; n as usize]).unwrap(),
    );
    let cfg = LaunchConfig::for_num_elems(n);
    dev.synchronize().unwrap();
    for buf in [&a, &a, &b] {
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    }
    dev.synchronize().unwrap();
    let trace = dev.with_backend(|be| be.gpu().trace()).unwrap();
    let prefetched: Vec<u64> = trace
        .iter()
        .filter_map(|l| {
            let rest = l.strip_prefix("compute: QMD at 0x")?;
            let hex = rest.strip_suffix(" prefetched")?;
            u64::from_str_radix(hex, 16).ok()
        })
        .collect();
    let &[.., qa, qb] = prefetched.as_slice() else {
        panic!("two prefetched launches in the trace: {prefetched:x?}");
    };
    let v = dev.info().qmd;
    let read = |va: u64| {
        let mut q = read_qmd(&dev, va);
        // No timeline release from a copy: the raw submissions release their own values.
        q.set("RELEASE_ENABLE(0)", 0).unwrap();
        q
    };
    let (for_a, for_b) = (read(qa), read(qb));
    let slot = dev
        .alloc_zeros::<u8>(v.size().next_multiple_of(256))
        .unwrap();
    dev.synchronize().unwrap();
    let p = slot.gpu_va();
    let put = |q: &Qmd| {
        dev.with_backend(|be| be.write_gpu(p, q.as_bytes()))
            .unwrap()
            .unwrap()
    };
    let pcas = |actions: &[u32]| {
        let mut words = [0u32; 16];
        let mut push = PushBuffer::new(&mut words);
        for &act in actions {
            if act == u32::MAX {
                push.wfi().unwrap();
                continue;
            }
            push.inc(SUBC_COMPUTE, compute::SEND_PCAS_A, &[(p >> 8) as u32])
                .unwrap();
            push.immd(SUBC_COMPUTE, compute::SEND_SIGNALING_PCAS2_B, act)
                .unwrap();
        }
        let len = push.len();
        let v = dev.submit_raw(ChannelKind::Compute, &words[..len]).unwrap();
        dev.wait_for(ChannelKind::Compute, v).unwrap();
    };
    put(&for_a);
    pcas(&[
        compute::PCAS_ACTION_INVALIDATE,
        compute::PCAS_ACTION_PREFETCH,
    ]);
    put(&for_b);
    // Launched from the prefetched copy: adds to `a`, not `b`.
    pcas(&[u32::MAX, compute::PCAS_ACTION_PREFETCH_SCHEDULE]);
    assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![3u32; n as usize]);
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![1u32; n as usize]);
    // The copy went with that launch; an invalidating launch reads memory.
    pcas(&[compute::PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE]);
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![2u32; n as usize]);
    // A prefetch that is invalidated before the launch is not used either.
    put(&for_a);
    pcas(&[
        compute::PCAS_ACTION_PREFETCH,
        compute::PCAS_ACTION_INVALIDATE,
    ]);
    put(&for_b);
    pcas(&[compute::PCAS_ACTION_PREFETCH_SCHEDULE]);
    assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![3u32; n as usize]);
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![3u32; n as usize]);
}

#[test]
fn a_launch_that_changes_its_arguments_does_not_run_the_prefetched_copy() {
    // A wait writes the next launch ahead and publishes a prefetch of its QMD. A launch that
    // repeats the last one runs the prefetched copy; one whose arguments differ rewrites
    // constant bank 0 after the prefetch, and launches from memory instead (the prefetch may
    // have read the bank; what the hardware does there is not documented).
    for (model, sm) in CHIPS {
        let dev = Device::open(
            SimBackend::new(model, true).expect("simulated GPU"),
            DeviceOptions::default(),
        )
        .unwrap();
        let m = dev.load_cubin(&kernels_cubin(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 64u32;
        let a = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let b = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let cfg = LaunchConfig::for_num_elems(n);
        dev.launch(&add1, cfg, &[a.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        let count = |dev: &Device<SimBackend>| {
            let sim = compute_stats(dev).prefetched_launches;
            assert_eq!(dev.stats().early_prefetched, sim);
            sim
        };
        let before = count(&dev);
        for i in 0..12 {
            let buf = if i % 2 == 0 { &b } else { &a };
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            dev.synchronize().unwrap();
        }
        assert_eq!(count(&dev), before, "{:?}: changed launches", model.chipset);
        assert_eq!(dev.stats().written_ahead, 12);
        for _ in 0..5 {
            dev.launch(&add1, cfg, &[a.arg(), n.into()]).unwrap();
            dev.synchronize().unwrap();
        }
        // The last of the twelve was on `a` too: five repeats.
        assert_eq!(count(&dev), before + 5, "{:?}: repeats", model.chipset);
        assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![12u32; n as usize]);
        assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![6u32; n as usize]);
    }
}

#[test]
fn prefetch_slots_are_reused_only_after_the_gpu_has_read_them() {
    // Eight prefetch pushbuffers live outside the command arena; a wait takes the next only
    // once the timeline has passed the submission after its last use. Behind a kernel that
    // spins nothing completes, so after eight waits the ninth publishes no prefetch.
    let dev = Device::open(
        SimBackend::new(GH100, true).expect("simulated GPU"),
        DeviceOptions::default(),
    )
    .unwrap();
    let m = dev.load_cubin(&kernels_cubin(90, 13)).unwrap();
    let spin = m.function("spin_forever").unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 64u32;
    let a = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    let cfg = LaunchConfig::for_num_elems(n);
    dev.synchronize().unwrap();
    let prefetches = |dev: &Device<SimBackend>| {
        let trace = dev.with_backend(|b| b.gpu().trace()).unwrap();
        trace.iter().filter(|l| l.ends_with(" prefetched")).count()
    };
    let traced = prefetches(&dev);
    let [(done, _), _] = dev.timelines().unwrap();
    dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    for _ in 0..10 {
        dev.launch(&add1, cfg, &[a.arg(), n.into()]).unwrap();
        // Reached long ago: returns at once, after writing the next launch ahead.
        dev.wait_for(ChannelKind::Compute, done).unwrap();
    }
    finish_spinning_kernel(&dev);
    dev.synchronize().unwrap();
    // The first add1 followed the spinning launch (its own pushbuffer prefetches its QMD);
    // then ten waits, eight slots: eight more.
    assert_eq!(prefetches(&dev) - traced, 1 + 8);
    assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![10u32; n as usize]);
    // Once the timeline has passed them, the slots serve again.
    for _ in 0..3 {
        dev.launch(&add1, cfg, &[a.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
    }
    assert_eq!(prefetches(&dev) - traced, 1 + 8 + 3);
}
