//! Graphs (`Device::create_graph` / `launch_graph`; `core/src/device/fast/graph.rs`) on the
//! simulated GPUs: launches written once into command memory of their own and launched as one
//! chained submission. Every result is checked, so a node run twice, not at all, out of
//! order, from a stale QMD (the simulator's QMD cache keeps stale copies here) or with
//! parameters of an earlier launch fails.
#![forbid(unsafe_code)]

use nvbare_integration::{compute_stats, kernels_cubin as kernels};
use std::time::Duration;

use nvbare_core::device::{
    Device, DeviceBuffer, DeviceError, DeviceOptions, Function, LaunchConfig, MAX_GRAPH_NODES,
    WRITTEN_BEHIND_WORK,
};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];
const N: u32 = 64;

/// A device whose compute channel's QMD cache keeps stale copies (a QMD rewritten at an
/// address the scheduler fetched before runs the old one unless the caches are invalidated).
fn open(model: ChipModel) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    let dev = Device::open(
        b,
        DeviceOptions {
            timeout: Duration::from_millis(500),
            streams: 2,
            ..DeviceOptions::default()
        },
    )
    .expect("device opens");
    let [compute, _] = dev.channel_handles().unwrap();
    assert!(
        dev.with_backend(|b| b.keep_stale_qmds(compute, true))
            .unwrap()
    );
    dev
}

/// Stalls the current stream's compute channel for 30 ms; join the handle to know it thawed.
fn stall(dev: &Device<SimBackend>) -> std::thread::JoinHandle<()> {
    let [compute, _] = dev.channel_handles().unwrap();
    dev.with_backend(|b| b.freeze_for(compute, Duration::from_millis(30)))
        .unwrap()
        .unwrap()
}

/// N zeros on the device.
fn zeros(dev: &Device<SimBackend>) -> DeviceBuffer<'_, SimBackend, u32> {
    dev.htod_copy(&vec![0u32; N as usize]).unwrap()
}

fn add1_node(
    dev: &Device<SimBackend>,
    add1: &Function<'_, '_, SimBackend>,
    buf: &DeviceBuffer<'_, SimBackend, u32>,
) -> nvbare_core::device::GraphNode {
    dev.graph_node(add1, LaunchConfig::for_num_elems(N), &[buf.arg(), N.into()])
        .unwrap()
}

#[test]
fn a_graph_runs_its_launches_in_order_as_one_chained_submission() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let vadd = m.function("vector_add").unwrap();
        let a = zeros(&dev);
        let fa = dev.htod_copy(&[1.5f32; N as usize]).unwrap();
        let fb = dev.htod_copy(&[2.0f32; N as usize]).unwrap();
        let fc = dev.alloc_zeros::<f32>(N as usize).unwrap();
        let fd = dev.alloc_zeros::<f32>(N as usize).unwrap();
        dev.synchronize().unwrap();
        let cfg = LaunchConfig::for_num_elems(N);
        // fd = (fa + fb) + fb only if the second vector_add runs after the first.
        let nodes = vec![
            add1_node(&dev, &add1, &a),
            dev.graph_node(&vadd, cfg, &[fa.arg(), fb.arg(), fc.arg(), N.into()])
                .unwrap(),
            dev.graph_node(&vadd, cfg, &[fc.arg(), fb.arg(), fd.arg(), N.into()])
                .unwrap(),
            add1_node(&dev, &add1, &a),
        ];
        let g = dev.create_graph(nodes).unwrap();
        let before = compute_stats(&dev);
        assert!(
            dev.launch_graph(&g).unwrap(),
            "{what:?}: the stream was idle"
        );
        dev.synchronize().unwrap();
        let after = compute_stats(&dev);
        assert_eq!(
            dev.dtoh_copy(&a).unwrap(),
            vec![2u32; N as usize],
            "{what:?}"
        );
        assert_eq!(
            dev.dtoh_copy(&fd).unwrap(),
            vec![5.5f32; N as usize],
            "{what:?}"
        );
        assert_eq!(after.launches - before.launches, 4, "{what:?}");
        assert_eq!(
            after.dependent_launches - before.dependent_launches,
            3,
            "{what:?}: all but the first scheduled by the QMD before"
        );
        assert_eq!(after.gp_entries - before.gp_entries, 1, "{what:?}");
        assert_eq!(
            after.sked_invalidates - before.sked_invalidates,
            1,
            "{what:?}"
        );
        assert_eq!(after.overlapping_launches, 0, "{what:?}");
        assert_eq!(dev.stats().graph_launches_written, 1);
        dev.free_graph(g);
    }
}

#[test]
fn a_graph_launched_again_and_again_without_waiting_loses_nothing() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let a = zeros(&dev);
        let b = zeros(&dev);
        dev.synchronize().unwrap();
        let nodes = (0..5).map(|_| add1_node(&dev, &add1, &a)).collect();
        let g = dev.create_graph(nodes).unwrap();
        let one = dev.create_graph(vec![add1_node(&dev, &add1, &b)]).unwrap();
        // Stalled for a while: the first launch (of an idle stream) goes as one submission,
        // what follows it acquires its value, and the launches behind it go launch by
        // launch (chained where automatic deferral holds them: not on this device, which has
        // no flusher).
        let thaw = stall(&dev);
        for i in 0..30 {
            let written = dev.launch_graph(&g).unwrap();
            assert_eq!(written, i == 0, "{what:?} launch {i}");
            // Ordinary launches and one-node graphs in between: each follows the graph
            // (an acquire of its value) and is followed by it.
            match i % 3 {
                0 => dev
                    .launch(&add1, LaunchConfig::for_num_elems(N), &[a.arg(), N.into()])
                    .unwrap(),
                1 => assert!(!dev.launch_graph(&one).unwrap(), "one launch"),
                _ => {}
            }
        }
        dev.synchronize().unwrap();
        thaw.join().unwrap();
        assert_eq!(
            dev.dtoh_copy(&a).unwrap(),
            vec![30 * 5 + 10; N as usize],
            "{what:?}"
        );
        assert_eq!(
            dev.dtoh_copy(&b).unwrap(),
            vec![10u32; N as usize],
            "{what:?}"
        );
        let s = dev.stats();
        assert_eq!(s.graph_launches, 40, "{what:?}");
        assert_eq!(s.graph_launches_written, 1, "{what:?}");
        assert!(s.chain_acquires >= 1, "{what:?}: {s:?}");
        assert_eq!(compute_stats(&dev).overlapping_launches, 0, "{what:?}");
    }
}

#[test]
fn a_large_graph_goes_as_one_submission_behind_running_work_too() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let a = zeros(&dev);
        let b = zeros(&dev);
        dev.synchronize().unwrap();
        let large = dev
            .create_graph(
                (0..WRITTEN_BEHIND_WORK)
                    .map(|_| add1_node(&dev, &add1, &a))
                    .collect(),
            )
            .unwrap();
        let below = dev
            .create_graph(
                (0..WRITTEN_BEHIND_WORK - 1)
                    .map(|_| add1_node(&dev, &add1, &b))
                    .collect(),
            )
            .unwrap();
        let thaw = stall(&dev);
        let cfg = LaunchConfig::for_num_elems(N);
        // The launches of the large graph follow running work (the stalled channel's, the
        // first at least): one submission each. The smaller graph behind the stalled work
        // goes launch by launch (which may wait for room in the ring, so later launches
        // may find the channel idle).
        for i in 0..4 {
            dev.launch(&add1, cfg, &[a.arg(), N.into()]).unwrap();
            assert!(dev.launch_graph(&large).unwrap(), "{what:?} launch {i}");
            if i == 0 {
                assert!(!dev.launch_graph(&below).unwrap(), "{what:?}");
            }
        }
        dev.synchronize().unwrap();
        thaw.join().unwrap();
        let n = WRITTEN_BEHIND_WORK as u32;
        assert_eq!(
            dev.dtoh_copy(&a).unwrap(),
            vec![4 * n + 4; N as usize],
            "{what:?}"
        );
        assert_eq!(
            dev.dtoh_copy(&b).unwrap(),
            vec![n - 1; N as usize],
            "{what:?}"
        );
        assert_eq!(dev.stats().graph_launches_written, 4, "{what:?}");
        assert_eq!(compute_stats(&dev).overlapping_launches, 0, "{what:?}");
        dev.free_graph(large);
        dev.free_graph(below);
    }
}

#[test]
fn a_changed_node_is_used_from_the_next_launch_on_and_queued_launches_keep_theirs() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let bufs: Vec<_> = (0..3).map(|_| zeros(&dev)).collect();
        dev.synchronize().unwrap();
        let g = dev
            .create_graph(vec![
                add1_node(&dev, &add1, &bufs[0]),
                add1_node(&dev, &add1, &bufs[0]),
            ])
            .unwrap();
        dev.launch_graph(&g).unwrap();
        // Queued behind the launch above, which keeps its parameters.
        dev.set_graph_node(&g, 1, add1_node(&dev, &add1, &bufs[1]))
            .unwrap();
        dev.launch_graph(&g).unwrap();
        dev.set_graph_node(&g, 0, add1_node(&dev, &add1, &bufs[2]))
            .unwrap();
        // The same node again changes nothing.
        dev.set_graph_node(&g, 0, add1_node(&dev, &add1, &bufs[2]))
            .unwrap();
        dev.launch_graph(&g).unwrap();
        dev.synchronize().unwrap();
        assert!(dev.launch_graph(&g).unwrap());
        dev.synchronize().unwrap();
        // The copy of the commands launch 1 used, written again where the nodes changed.
        assert!(dev.launch_graph(&g).unwrap());
        dev.synchronize().unwrap();
        let got: Vec<u32> = bufs.iter().map(|b| dev.dtoh_copy(b).unwrap()[0]).collect();
        // Launch 1: 0, 0. Launch 2: 0, 1. Launches 3, 4 and 5: 2, 1.
        assert_eq!(got, [3, 4, 3], "{what:?}");
        let e = dev
            .set_graph_node(&g, 2, add1_node(&dev, &add1, &bufs[0]))
            .unwrap_err();
        assert!(
            matches!(&e, DeviceError::BadRange(m) if m.contains("launch 2 of a graph of 2")),
            "{e}"
        );
    }
}

#[test]
fn graphs_follow_the_stream_they_are_launched_on() {
    let dev = open(GH100);
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let a = zeros(&dev);
    dev.synchronize().unwrap();
    let g = dev
        .create_graph((0..3).map(|_| add1_node(&dev, &add1, &a)).collect())
        .unwrap();
    for i in 0..6 {
        dev.with_stream(i % 2, |d| {
            d.launch_graph(&g)?;
            d.synchronize_stream()
        })
        .unwrap()
        .unwrap();
    }
    assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![18u32; N as usize]);
    assert_eq!(dev.stats().graph_launches_written, 6);
}

#[test]
fn a_graph_whose_commands_are_in_use_on_other_streams_waits_for_them() {
    let dev = open(GH100);
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let a = zeros(&dev);
    let b = zeros(&dev);
    dev.synchronize().unwrap();
    let g = dev
        .create_graph(vec![add1_node(&dev, &add1, &a), add1_node(&dev, &add1, &b)])
        .unwrap();
    let [compute1, _] = dev
        .with_stream(1, |d| d.channel_handles())
        .unwrap()
        .unwrap();
    let thaw = dev
        .with_backend(|b| b.freeze_for(compute1, Duration::from_millis(30)))
        .unwrap()
        .unwrap();
    // Stream 1 (stalled) uses the first copy of the commands, stream 0 the second; stream
    // 0's next launch finds the first in use and waits for stream 1's launch.
    assert!(dev.with_stream(1, |d| d.launch_graph(&g)).unwrap().unwrap());
    assert!(dev.launch_graph(&g).unwrap());
    dev.synchronize_stream().unwrap();
    assert_eq!(dev.stats().graph_waits, 0);
    assert!(dev.launch_graph(&g).unwrap());
    assert_eq!(dev.stats().graph_waits, 1);
    thaw.join().unwrap();
    dev.synchronize().unwrap();
    assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![3u32; N as usize]);
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![3u32; N as usize]);
}

#[test]
fn a_fault_in_a_graph_is_reported_and_the_graph_runs_again_after_recovery() {
    for (model, sm) in CHIPS {
        let what = model.chipset;
        let dev = open(model);
        let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
        let add1 = m.function("add1").unwrap();
        let oob = m.function("oob_write").unwrap();
        let a = zeros(&dev);
        dev.synchronize().unwrap();
        let bad = dev
            .create_graph(vec![
                add1_node(&dev, &add1, &a),
                dev.graph_node(&oob, LaunchConfig::for_num_elems(32), &[a.arg()])
                    .unwrap(),
                add1_node(&dev, &add1, &a),
            ])
            .unwrap();
        let a2 = zeros(&dev);
        let good = dev
            .create_graph(vec![
                add1_node(&dev, &add1, &a2),
                add1_node(&dev, &add1, &a2),
            ])
            .unwrap();
        dev.launch_graph(&good).unwrap();
        dev.synchronize().unwrap();
        dev.launch_graph(&bad).unwrap();
        let text = dev.synchronize().unwrap_err().to_string();
        assert!(text.contains("MMU fault"), "{what:?}: {text}");
        // Re-created channels: the graphs launch and run again.
        for _ in 0..3 {
            dev.launch_graph(&good).unwrap();
        }
        dev.synchronize().unwrap();
        assert_eq!(
            dev.dtoh_copy(&a2).unwrap(),
            vec![8u32; N as usize],
            "{what:?}"
        );
    }
}

#[test]
fn bad_graphs_are_refused_with_what_to_do() {
    let dev = open(GH100);
    let other = open(AD102);
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1 = m.function("add1").unwrap();
    let a = zeros(&dev);
    let e = dev.create_graph(Vec::new()).unwrap_err();
    assert!(
        matches!(&e, DeviceError::BadRange(m) if m.contains("give 1 to")),
        "{e}"
    );
    let e = dev
        .create_graph(vec![add1_node(&dev, &add1, &a); MAX_GRAPH_NODES + 1])
        .unwrap_err();
    assert!(matches!(&e, DeviceError::BadRange(_)), "{e}");
    // A node is checked as a launch is.
    let e = dev
        .graph_node(&add1, LaunchConfig::for_num_elems(N), &[a.arg()])
        .unwrap_err();
    assert!(
        e.to_string().contains("takes 2 parameters, 1 were given"),
        "{e}"
    );
    // Another device's node.
    let om = other.load_cubin(&kernels(89, 13)).unwrap();
    let oa = zeros(&other);
    let foreign = add1_node(&other, &om.function("add1").unwrap(), &oa);
    let e = dev.create_graph(vec![foreign.clone()]).unwrap_err();
    assert!(matches!(e, DeviceError::ForeignObject(_)), "{e}");
    let g = dev.create_graph(vec![add1_node(&dev, &add1, &a)]).unwrap();
    let e = dev.set_graph_node(&g, 0, foreign).unwrap_err();
    assert!(matches!(e, DeviceError::ForeignObject(_)), "{e}");
    // Another device's graph.
    let e = other.launch_graph(&g).unwrap_err();
    assert!(matches!(e, DeviceError::ForeignObject(_)), "{e}");
    other.free_graph(g);
    dev.launch_graph(&g).unwrap();
    dev.free_graph(g);
    let e = dev.launch_graph(&g).unwrap_err();
    assert!(e.to_string().contains("freed"), "{e}");
    // A graph whose module was unloaded.
    let m2 = dev.load_cubin(&kernels(90, 13)).unwrap();
    let add1b = m2.function("add1").unwrap();
    let g = dev.create_graph(vec![add1_node(&dev, &add1b, &a)]).unwrap();
    drop(m2);
    let e = dev.launch_graph(&g).unwrap_err();
    assert!(e.to_string().contains("unloaded"), "{e}");
    // Nothing was left half-submitted: the device still works.
    dev.launch(&add1, LaunchConfig::for_num_elems(N), &[a.arg(), N.into()])
        .unwrap();
    assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![2u32; N as usize]);
}
