//! Chained launches (`Tuning::chain_launches` with deferred doorbells;
//! `core/src/device/fast/chain.rs`) on the simulated GPUs: a launch that follows a launch still
//! waiting for its doorbell is scheduled by the QMD before it (dependent QMD `QMD_SCHEDULE`),
//! which the simulator runs when that QMD's grid completes. Every result is checked, so a
//! chained QMD run twice, not at all, out of order or from a stale QMD cache entry fails here.
#![forbid(unsafe_code)]

use nvbare_integration::{compute_stats, kernels_cubin as kernels, read_qmd, tuned};
use std::time::Duration;

use nvbare_core::channel::pushbuf::PushBuffer;
use nvbare_core::device::{
    ChannelKind, Device, DeviceBuffer, DeviceError, DeviceOptions, Function, LaunchConfig, Recovery,
};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

mod spinning;
use spinning::finish_spinning_kernel;

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

/// Deferred doorbells, chaining on (its default).
fn deferred(n: u32) -> DeviceOptions {
    tuned(
        DeviceOptions {
            timeout: Duration::from_millis(500),
            ..DeviceOptions::default()
        },
        |t| t.deferred_submits = n,
    )
}

fn open(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    Device::open(b, opts).expect("device opens")
}

/// Elements of each buffer [`in_small_command_memory`] hands out.
const SMALL_N: u32 = 32;

/// Runs `body` on a device with 16 KiB of command memory (chains reuse it often) and `defer`
/// deferred submissions, with `add1` loaded and two zeroed buffers of [`SMALL_N`] elements.
fn in_small_command_memory(
    model: ChipModel,
    sm: u32,
    defer: u32,
    body: impl FnOnce(
        &Device<SimBackend>,
        &Function<'_, '_, SimBackend>,
        [&DeviceBuffer<'_, SimBackend, u32>; 2],
    ),
) {
    let dev = open(
        model,
        DeviceOptions {
            command_bytes: 16 << 10,
            ..deferred(defer)
        },
    );
    let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let a = dev.htod_copy(&vec![0u32; SMALL_N as usize]).unwrap();
    let b = dev.htod_copy(&vec![0u32; SMALL_N as usize]).unwrap();
    dev.synchronize().unwrap();
    body(&dev, &add1, [&a, &b]);
}

#[test]
fn back_to_back_launches_are_chained_in_batches_and_run_in_order() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model, deferred(8));
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 700u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let host: Vec<u32> = (0..n).map(|i| i * 3).collect();
        let buf = dev.htod_copy(&host).unwrap();
        dev.synchronize().unwrap();
        let before = compute_stats(&dev);
        // The first launch after the module load carries the shader-cache invalidate and is
        // not chained to; every batch of 9 (8 deferred + the one that rings) is a head and
        // 8 chained launches.
        for _ in 0..100 {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        }
        let out = dev.dtoh_copy(&buf).unwrap();
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v, i as u32 * 3 + 100, "{what:?} [{i}]");
        }
        let s = compute_stats(&dev);
        let launches = s.launches - before.launches;
        let dependent = s.dependent_launches - before.dependent_launches;
        assert_eq!(launches, 100, "{what:?}: every launch ran once");
        assert_eq!(
            dev.stats().chained,
            dependent,
            "{what:?}: the driver's count"
        );
        // 1 unchained + 99 in batches of 9: 11 heads, 88 chained.
        assert_eq!(dependent, 88, "{what:?}");
        // The chained launches repeat the call before: none of them built its launch, and
        // each used the constant bank of the launch before it.
        assert!(dev.stats().repeated >= 88, "{what:?}");
        assert_eq!(dev.stats().shared_banks, 88, "{what:?}");
        assert_eq!(s.overlapping_launches, 0, "{what:?}");
        // The copy to the host waited on the copy channel after the chain: its submission
        // acquired the compute timeline, not the chain's own acquire.
        let [(sub, done), _] = dev.timelines().unwrap();
        assert_eq!(sub, done);
    }
}

#[test]
fn without_chaining_or_deferral_nothing_is_chained() {
    for opts in [
        tuned(deferred(8), |t| {
            t.chain_launches = false;
        }),
        DeviceOptions {
            timeout: Duration::from_millis(500),
            ..DeviceOptions::default()
        },
    ] {
        let dev = open(GH100, opts);
        let m = dev.load_cubin(&kernels(90, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 256u32;
        let buf = dev.htod_copy(&vec![5u32; n as usize]).unwrap();
        for _ in 0..50 {
            dev.launch(
                &add1,
                LaunchConfig::for_num_elems(n),
                &[buf.arg(), n.into()],
            )
            .unwrap();
        }
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![55u32; n as usize]);
        let s = dev.stats();
        assert_eq!(
            (
                s.chained,
                s.shared_banks,
                s.chain_acquires,
                s.flusher_published
            ),
            (0, 0, 0, 0),
            "{opts:?}"
        );
        assert_eq!(compute_stats(&dev).dependent_launches, 0);
    }
}

#[test]
fn chains_over_reused_command_memory_never_run_a_stale_cached_qmd() {
    // A small arena: chained QMDs land where older QMDs were. The simulator's QMD cache keeps
    // every QMD it fetched (`keep_stale_qmds`); only the head's INVALIDATE_SKED_CACHES keeps
    // the chained ones from running stale copies (older constant banks and timeline values).
    for (model, sm) in CHIPS {
        in_small_command_memory(model, sm, 6, |dev, add1, [a, b]| {
            let cfg = LaunchConfig::for_num_elems(SMALL_N);
            let [compute, _] = dev.channel_handles().unwrap();
            assert!(
                dev.with_backend(|be| be.keep_stale_qmds(compute, true))
                    .unwrap()
            );
            for i in 0..300 {
                let buf = if i % 3 == 0 { a } else { b };
                dev.launch(add1, cfg, &[buf.arg(), SMALL_N.into()])
                    .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
                if i % 50 == 49 {
                    dev.synchronize()
                        .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
                }
            }
            dev.synchronize().unwrap();
            assert_eq!(dev.dtoh_copy(a).unwrap(), vec![100u32; SMALL_N as usize]);
            assert_eq!(dev.dtoh_copy(b).unwrap(), vec![200u32; SMALL_N as usize]);
            assert!(dev.stats().chained > 200, "{:?}", dev.stats());
        });
    }
}

#[test]
fn what_follows_a_chain_acquires_its_last_value_and_other_work_breaks_chains() {
    let dev = open(GH100, deferred(16));
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let vadd = m.function("vector_add").unwrap();
    let n = 64u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    dev.synchronize().unwrap();
    for _ in 0..4 {
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    }
    assert_eq!(dev.stats().chained, 3);
    assert_eq!(dev.stats().chain_acquires, 0);
    // A raw submission on the compute channel follows the chain: it acquires its last value.
    dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
    assert_eq!(dev.stats().chain_acquires, 1);
    // A launch after it heads a new chain; another kernel chains too.
    let fa = dev.htod_copy(&[1.5f32; 64]).unwrap();
    let fb = dev.htod_copy(&[2.0f32; 64]).unwrap();
    let fc = dev.alloc_zeros::<f32>(64).unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.launch(&vadd, cfg, &[fa.arg(), fb.arg(), fc.arg(), 64u32.into()])
        .unwrap();
    // The copies before these launches were on the copy channel: the first launch waited for
    // them (an acquire in its pushbuffer), so it could not chain; the second chained to it.
    assert_eq!(dev.stats().chained, 4);
    // A copy into the buffer between launches: the launch after it waits for the copy and
    // cannot chain.
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.htod_copy_into(&vec![1000u32; n as usize], &mut buf)
        .unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![1002u32; n as usize]);
    assert_eq!(dev.dtoh_copy(&fc).unwrap(), vec![3.5f32; 64]);
    let s = dev.stats();
    assert_eq!(s.chained, 6, "{s:?}");
    // Waited for by the copies to the host: no acquire needed after.
    dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
    assert_eq!(
        dev.stats().chain_acquires,
        s.chain_acquires,
        "already seen complete"
    );
    assert_eq!(compute_stats(&dev).overlapping_launches, 0);
}

#[test]
fn a_chain_head_invalidates_the_sked_caches_only_once_a_launch_chains_to_it() {
    for (model, sm) in CHIPS {
        let what = format!("{:?}", model.chipset);
        // Nothing written ahead: the first launch after a wait takes the ordinary path too.
        let opts = tuned(deferred(16), |t| {
            t.write_ahead = false;
        });
        let dev = open(model, opts);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 64u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        dev.synchronize().unwrap();
        let base = compute_stats(&dev).sked_invalidates;
        // A lone launch behind its deferred doorbell is written as a chain's head; nothing
        // chains to it, so its slot stays a NO_OPERATION.
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        assert_eq!(dev.stats().chained, 0, "{what}");
        assert_eq!(
            compute_stats(&dev).sked_invalidates,
            base,
            "{what}: a lone head"
        );
        // A head and two chained launches: the first chained one turned the slot into the
        // invalidate, once.
        for _ in 0..3 {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        }
        dev.synchronize().unwrap();
        assert_eq!(dev.stats().chained, 2, "{what}");
        assert_eq!(
            compute_stats(&dev).sked_invalidates,
            base + 1,
            "{what}: a chain"
        );
        assert_eq!(
            dev.dtoh_copy(&buf).unwrap(),
            vec![4u32; n as usize],
            "{what}"
        );
    }
}

#[test]
fn a_wait_after_a_chain_writes_nothing_ahead_and_after_a_single_launch_it_does() {
    // A launch written ahead has only WAIT_FOR_IDLE before it, not the acquire a chain needs.
    let dev = open(GH100, deferred(8));
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 64u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.synchronize().unwrap();
    for round in 1..=5u32 {
        for _ in 0..3 {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        }
        dev.synchronize().unwrap();
        assert!(
            !dev.stats().written_ahead_now,
            "round {round}: written behind a chain"
        );
        // One launch alone (a chain of one): the wait writes the next one ahead.
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        assert!(dev.stats().written_ahead_now, "round {round}");
    }
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![21u32; n as usize]);
    assert!(dev.stats().written_ahead >= 5);
}

#[test]
fn a_fault_in_a_chain_is_reported_and_the_device_recovers() {
    for (model, sm) in CHIPS {
        let dev = open(model, deferred(8));
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let oob = m.function("oob_write").unwrap();
        let n = 64u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        dev.synchronize().unwrap();
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.launch(&oob, LaunchConfig::for_num_elems(32), &[buf.arg()])
            .unwrap();
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        assert_eq!(dev.stats().chained, 3);
        let err = dev.synchronize().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("MMU fault"), "{:?}: {text}", model.chipset);
        // Re-created channels: launches chain and run again.
        let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        for _ in 0..20 {
            dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        }
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![20u32; n as usize]);
        assert!(dev.stats().chained > 3);
    }
}

#[test]
fn only_the_last_launch_of_a_chain_releases_the_timeline() {
    // add1, add1, spin_forever, add1 chained: the two add1s before the spinning kernel have
    // run, but the timeline stays where it was until the chain's end releases its value.
    let dev = open(
        GH100,
        DeviceOptions {
            timeout: Duration::from_secs(2),
            ..deferred(8)
        },
    );
    let m = dev.load_cubin(&kernels(90, 12)).unwrap();
    let spin = m.function("spin_forever").unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 64u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    dev.synchronize().unwrap();
    let [(before, _), _] = dev.timelines().unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    assert_eq!(dev.stats().chained, 3);
    dev.flush().unwrap();
    let [(sub, reached), _] = dev.timelines().unwrap();
    assert_eq!(sub, before + 4);
    assert_eq!(
        reached, before,
        "a launch inside the chain released its value"
    );
    assert_eq!(
        compute_stats(&dev).dependent_launches,
        2,
        "add1, add1 ran, spin spins"
    );
    finish_spinning_kernel(&dev);
    dev.synchronize().unwrap();
    let [(sub, reached), _] = dev.timelines().unwrap();
    assert_eq!(reached, sub);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![3u32; n as usize]);
}

#[test]
fn chains_sharing_constant_banks_in_small_command_memory_run_every_launch_right() {
    // Runs of repeated calls share one constant bank 0 per chain; the chain's memory must not
    // be reused before its end. Buffers change every 5 launches, so a bank reused too early
    // would send increments to the wrong buffer.
    for (model, sm) in CHIPS {
        in_small_command_memory(model, sm, 12, |dev, add1, [a, b]| {
            let cfg = LaunchConfig::for_num_elems(SMALL_N);
            for i in 0..400 {
                let buf = if (i / 5) % 2 == 0 { a } else { b };
                dev.launch(add1, cfg, &[buf.arg(), SMALL_N.into()])
                    .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
            }
            assert_eq!(dev.dtoh_copy(a).unwrap(), vec![200u32; SMALL_N as usize]);
            assert_eq!(dev.dtoh_copy(b).unwrap(), vec![200u32; SMALL_N as usize]);
            let s = dev.stats();
            assert!(s.chained > 300 && s.shared_banks > 200, "{s:?}");
        });
    }
}

#[test]
fn a_chain_behind_a_spinning_kernel_runs_when_the_kernel_finishes() {
    let dev = open(
        GH100,
        DeviceOptions {
            timeout: Duration::from_secs(2),
            ..deferred(8)
        },
    );
    let m = dev.load_cubin(&kernels(90, 12)).unwrap();
    let spin = m.function("spin_forever").unwrap();
    let add1 = m.function("add1").unwrap();
    let n = 64u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let buf = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
    dev.synchronize().unwrap();
    dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    for _ in 0..3 {
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
    }
    assert_eq!(dev.stats().chained, 3);
    dev.flush().unwrap();
    let [(sub, reached), _] = dev.timelines().unwrap();
    assert!(reached < sub, "still spinning");
    finish_spinning_kernel(&dev);
    dev.synchronize().unwrap();
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![3u32; n as usize]);
    assert_eq!(compute_stats(&dev).dependent_launches, 3);
}

/// GPU VAs of the last pair of QMDs the simulator's trace shows scheduled one after another.
fn last_scheduled_pair(dev: &Device<SimBackend>) -> (u64, u64) {
    let trace = dev.with_backend(|b| b.gpu().trace()).unwrap();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    trace
        .iter()
        .rev()
        .find_map(|l| {
            let rest = l.strip_prefix("compute: QMD at ")?;
            let (a, b) = rest.split_once(" completed, schedules the QMD at ")?;
            Some((hex(a), hex(b)))
        })
        .expect("a chained pair in the trace")
}

#[test]
fn qmds_that_schedule_each_other_in_a_cycle_hang_the_channel_not_the_simulator() {
    // Two QMDs that schedule each other keep the engine busy for ever on hardware. The
    // simulator must not loop in the doorbell write: after 100 000 dependent launches in a
    // row it leaves the channel busy, and the wait times out and recovers as for a hung kernel.
    // Nothing written ahead: the chain's QMDs stay in command memory after the wait.
    let dev = open(
        GH100,
        tuned(deferred(8), |t| {
            t.write_ahead = false;
        }),
    );
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    let cfg = LaunchConfig::for_num_elems(1);
    dev.launch(&empty, cfg, &[]).unwrap();
    dev.synchronize().unwrap();
    for _ in 0..2 {
        dev.launch(&empty, cfg, &[]).unwrap();
    }
    dev.synchronize().unwrap();
    assert_eq!(dev.stats().chained, 1);
    // The chain's two QMDs as the device wrote them, copied to a buffer of the test's own,
    // the second now scheduling the first.
    let (a, b) = last_scheduled_pair(&dev);
    let v = dev.info().qmd;
    let (mut qa, mut qb) = (read_qmd(&dev, a), read_qmd(&dev, b));
    let slot = (v.size() as u64).next_multiple_of(256);
    let buf = dev.alloc_zeros::<u8>(2 * slot as usize).unwrap();
    // (Zeroed by the copy channel, whose doorbell is deferred too: before the writes below.)
    dev.synchronize().unwrap();
    let (pa, pb) = (buf.gpu_va(), buf.gpu_va() + slot);
    assert_eq!(pa % 256, 0);
    qa.schedule_after(pb).unwrap();
    qb.schedule_after(pa).unwrap();
    for (va, q) in [(pa, &qa), (pb, &qb)] {
        dev.with_backend(|be| be.write_gpu(va, q.as_bytes()))
            .unwrap()
            .unwrap();
    }
    let mut words = [0u32; 16];
    let mut push = PushBuffer::new(&mut words);
    push.invalidate_sked_caches().unwrap();
    push.compute_launch(pa).unwrap();
    let n = push.len();
    dev.submit_raw(ChannelKind::Compute, &words[..n]).unwrap();
    let err = dev.synchronize().unwrap_err();
    let DeviceError::Timeout { report, .. } = &err else {
        let trace = dev.with_backend(|b| b.gpu().trace()).unwrap();
        panic!(
            "expected a timeout, got {err}; trace ends {:#?}",
            &trace[trace.len().saturating_sub(8)..]
        );
    };
    assert_eq!(report.recovery, Recovery::ChannelsRecreated, "{err}");
    let trace = dev.with_backend(|b| b.gpu().trace()).unwrap();
    assert!(
        trace
            .iter()
            .any(|l| l.contains("dependent QMDs scheduled one another 100000 times")),
        "no cycle in the trace"
    );
    // The device is usable again.
    let add1 = m.function("add1").unwrap();
    let x = dev.htod_copy(&[1u32; 32]).unwrap();
    dev.launch(
        &add1,
        LaunchConfig::for_num_elems(32),
        &[x.arg(), 32u32.into()],
    )
    .unwrap();
    assert_eq!(dev.dtoh_copy(&x).unwrap(), vec![2u32; 32]);
}

#[test]
fn a_full_ring_publishing_a_chain_writes_its_last_qmd_first() {
    // A chain's last QMD is written only when the next launch chains or when the GPU may see
    // the chain: a submission that finds the ring full publishes what is queued while it
    // waits for room, the chain included.
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(
            model,
            DeviceOptions {
                gpfifo_entries: 4,
                ..deferred(64)
            },
        );
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 256u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let buf = dev.htod_copy(&vec![7u32; n as usize]).unwrap();
        dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
        dev.synchronize().unwrap();
        let chained = dev.stats().chained;
        for _ in 0..3 {
            // Two raw submissions, then a head and two chained launches: with the head's,
            // three entries wait in a ring of four, and the next raw submission finds it full.
            dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
            dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
            for _ in 0..3 {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            }
        }
        dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
        assert_eq!(dev.stats().chained - chained, 6, "{what:?}");
        assert_eq!(
            dev.dtoh_copy(&buf).unwrap(),
            vec![17u32; n as usize],
            "{what:?}"
        );
    }
}

#[test]
fn launches_on_any_one_stream_are_chained_and_alternating_streams_stay_in_order() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model, deferred(8));
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 256u32;
        let cfg = LaunchConfig::for_num_elems(n);
        let a = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        let b = dev.htod_copy(&vec![0u32; n as usize]).unwrap();
        dev.synchronize().unwrap();
        // One stream other than the default: chained as the default stream's are (one
        // unchained launch, then batches of 9 with 8 chained each).
        let before = dev.stats();
        dev.with_stream(2, |d| {
            for _ in 0..100 {
                d.launch(&add1, cfg, &[a.arg(), n.into()]).unwrap();
            }
            d.synchronize_stream().unwrap();
        })
        .unwrap();
        let s = dev.stats();
        assert_eq!(s.chained - before.chained, 88, "{what:?}");
        assert_eq!(
            s.fast_stream_moves - before.fast_stream_moves,
            1,
            "{what:?}"
        );
        assert_eq!(
            dev.dtoh_copy(&a).unwrap(),
            vec![100; n as usize],
            "{what:?}"
        );
        // Two streams in turn, each on its own buffer: every launch runs once, in its
        // stream's order, and the machinery follows each launch's stream.
        let before = dev.stats();
        for i in 0..40u32 {
            let (stream, buf) = if i % 2 == 0 { (1, &a) } else { (3, &b) };
            dev.with_stream(stream, |d| d.launch(&add1, cfg, &[buf.arg(), n.into()]))
                .unwrap()
                .unwrap();
        }
        dev.synchronize().unwrap();
        assert_eq!(
            dev.stats().fast_stream_moves - before.fast_stream_moves,
            40,
            "{what:?}"
        );
        assert_eq!(
            dev.dtoh_copy(&a).unwrap(),
            vec![120; n as usize],
            "{what:?}"
        );
        assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![20; n as usize], "{what:?}");
        // And back on the default stream, chained again.
        let before = dev.stats();
        for _ in 0..10 {
            dev.launch(&add1, cfg, &[b.arg(), n.into()]).unwrap();
        }
        assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![30; n as usize], "{what:?}");
        assert!(dev.stats().chained - before.chained >= 8, "{what:?}");
    }
}
