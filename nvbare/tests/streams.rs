//! Streams through the library: each its own channels, ordered by events on the GPU, handed
//! out and given back, and what happens when they run out or outlive their device.

use nvbare::{Error, Gpu, LaunchConfig, Options};

fn demo(gpu: &Gpu) -> nvbare::Module {
    gpu.load_cubin(nvbare::demo_cubin(gpu.info().sm).unwrap())
        .unwrap()
}

#[test]
fn work_on_one_stream_follows_an_event_of_another() {
    let gpu = nvbare::open("sim:gh100").unwrap();
    let m = demo(&gpu);
    let add1 = m.function("add1").unwrap();
    let (a, b) = (gpu.new_stream().unwrap(), gpu.new_stream().unwrap());
    assert_ne!(a.index(), b.index());
    assert!(a.index() != 0 && b.index() != 0);
    let n = 1u32 << 16;
    let buf = a.htod_copy(&vec![0u32; n as usize]).unwrap();
    for _ in 0..5 {
        a.launch_builder(&add1)
            .arg(&buf)
            .arg(&n)
            .launch(LaunchConfig::for_num_elems(n))
            .unwrap();
    }
    let ev = a.record_event().unwrap();
    // Stream b copies a's result once a's kernels are done: the GPU waits, not the host
    // (that it does wait is shown with a kernel that spins, tests/integration/tests/streams_sim.rs).
    b.wait_event(&ev).unwrap();
    let copy = gpu.alloc_zeros::<u32>(n as usize).unwrap();
    b.dtod_copy(&buf, &copy).unwrap();
    b.launch_builder(&add1)
        .arg(&copy)
        .arg(&n)
        .launch(LaunchConfig::for_num_elems(n))
        .unwrap();
    assert_eq!(b.dtoh_copy(&copy).unwrap(), vec![6u32; n as usize]);
    // And the default stream after b.
    let ev = b.record_event().unwrap();
    let s = gpu.default_stream();
    s.wait_event(&ev).unwrap();
    assert_eq!(s.dtoh_copy(&copy).unwrap(), vec![6u32; n as usize]);
    gpu.synchronize().unwrap();
}

#[test]
fn streams_are_handed_out_and_given_back() {
    let gpu = nvbare::open_with("sim:gh100", Options::default().streams(2)).unwrap();
    let first = gpu.new_stream().unwrap();
    let e = gpu.new_stream().unwrap_err();
    assert!(e.to_string().contains("Options::streams"), "{e}");
    let clone = first.clone();
    drop(first);
    // A clone keeps it.
    assert!(gpu.new_stream().is_err());
    drop(clone);
    let again = gpu.new_stream().unwrap();
    assert_eq!(again.index(), 1);
    // Streams move between threads.
    let t = std::thread::spawn(move || again.synchronize());
    t.join().unwrap().unwrap();
}

#[test]
fn a_stream_of_a_closed_device_fails_with_closed() {
    let gpu = nvbare::open("sim:ad102").unwrap();
    let s = gpu.new_stream().unwrap();
    let buf = s.htod_copy(&[1u32, 2, 3]).unwrap();
    gpu.close().unwrap();
    assert!(matches!(s.synchronize(), Err(Error::Closed(_))));
    assert!(matches!(s.dtoh_copy(&buf), Err(Error::Closed(_))));
    assert!(matches!(s.record_event(), Err(Error::Closed(_))));
}

#[test]
fn events_of_another_device_are_waited_for() {
    let g0 = nvbare::open("sim:gh100").unwrap();
    let g1 = nvbare::open("sim:gh100").unwrap();
    let s0 = g0.new_stream().unwrap();
    let buf = s0.htod_copy(&[7u32; 64]).unwrap();
    let ev = s0.record_event().unwrap();
    g1.default_stream().wait_event(&ev).unwrap();
    assert!(ev.is_done().unwrap());
    // A buffer of one device is refused by the other's streams.
    let e = g1.default_stream().dtoh_copy(&buf).unwrap_err();
    assert!(matches!(e, Error::ForeignObject(_)), "{e}");
}

#[test]
fn flush_starts_queued_work_and_fails_on_a_closed_device() {
    let gpu = nvbare::open("sim:gh100").unwrap();
    let m = demo(&gpu);
    let add1 = m.function("add1").unwrap();
    let n = 4096u32;
    for s in [gpu.default_stream(), gpu.new_stream().unwrap()] {
        let buf = s.htod_copy(&vec![0u32; n as usize]).unwrap();
        for _ in 0..3 {
            s.launch_builder(&add1)
                .arg(&buf)
                .arg(&n)
                .launch(LaunchConfig::for_num_elems(n))
                .unwrap();
        }
        s.flush().unwrap();
        s.flush().unwrap();
        assert_eq!(s.dtoh_copy(&buf).unwrap(), vec![3u32; n as usize]);
    }
    let s = gpu.default_stream();
    gpu.close().unwrap();
    assert!(matches!(s.flush(), Err(Error::Closed(_))));
}
