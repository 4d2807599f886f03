//! Timed events through the library: the GPU's own time where it reached each event (a
//! time-stamped semaphore release, core `device/stamp.rs`), on the compute channel after
//! kernels and on the copy channel after copies; and the refusals: an untimed event, events of
//! two devices, an event whose slot later events took.

use std::time::{Duration, Instant};

use nvbare::{Error, Gpu, LaunchConfig};

fn add1(gpu: &Gpu) -> nvbare::Module {
    gpu.load_cubin(nvbare::demo_cubin(gpu.info().sm).unwrap())
        .unwrap()
}

#[test]
fn elapsed_time_is_the_gpus_not_when_the_host_looked() {
    let gpu = nvbare::open("sim:gh100").unwrap();
    let m = add1(&gpu);
    let f = m.function("add1").unwrap();
    let s = gpu.new_stream().unwrap();
    let n = 1u32 << 12;
    let buf = s.htod_copy(&vec![0u32; n as usize]).unwrap();
    let e0 = s.record_timed_event().unwrap();
    for _ in 0..3 {
        s.launch_builder(&f)
            .arg(&buf)
            .arg(&n)
            .launch(LaunchConfig::for_num_elems(n))
            .unwrap();
    }
    let e1 = s.record_timed_event().unwrap();
    // The host looks only after a long pause: a time taken when the host saw the event done
    // would include it; the GPU's does not.
    let pause = Duration::from_millis(300);
    let looked = Instant::now();
    std::thread::sleep(pause);
    let ms = e0.elapsed_ms(&e1).unwrap();
    assert!(looked.elapsed() >= pause);
    assert!(ms >= 0.0, "{ms}");
    assert!(f64::from(ms) < pause.as_secs_f64() * 1e3, "{ms} ms");
    let (t0, t1) = (
        e0.gpu_time_ns().unwrap().unwrap(),
        e1.gpu_time_ns().unwrap().unwrap(),
    );
    assert!(t1 >= t0, "{t0} {t1}");
    // Reversed: the same span, negative.
    assert_eq!(e1.elapsed_ms(&e0).unwrap(), -ms);
    assert_eq!(s.dtoh_copy(&buf).unwrap(), vec![3u32; n as usize]);
}

#[test]
fn events_after_copies_and_kernels_are_in_order() {
    for chip in ["sim:ad102", "sim:gh100", "sim:gb202"] {
        after_copies_and_kernels(chip);
    }
}

fn after_copies_and_kernels(chip: &str) {
    let gpu = nvbare::open(chip).unwrap();
    let m = add1(&gpu);
    let f = m.function("add1").unwrap();
    let s = gpu.default_stream();
    let n = 1024u32;
    let e0 = s.record_timed_event().unwrap();
    // After a copy (the copy channel's work is newest), after a kernel, after a copy again.
    let buf = s.htod_copy(&vec![5u32; n as usize]).unwrap();
    let e1 = s.record_timed_event().unwrap();
    s.launch_builder(&f)
        .arg(&buf)
        .arg(&n)
        .launch(LaunchConfig::for_num_elems(n))
        .unwrap();
    let e2 = s.record_timed_event().unwrap();
    let copy = gpu.alloc_zeros::<u32>(n as usize).unwrap();
    s.dtod_copy(&buf, &copy).unwrap();
    let e3 = s.record_timed_event().unwrap();
    s.synchronize().unwrap();
    let t: Vec<u64> = [&e0, &e1, &e2, &e3]
        .iter()
        .map(|e| e.gpu_time_ns().unwrap().expect("reached"))
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "{chip}: {t:?}");
    assert!(e0.elapsed_ms(&e3).unwrap() >= 0.0);
    assert_eq!(s.dtoh_copy(&copy).unwrap(), vec![6u32; n as usize]);
}

#[test]
fn events_without_a_time_are_refused_with_what_to_do() {
    let g0 = nvbare::open("sim:gh100").unwrap();
    let g1 = nvbare::open("sim:gh100").unwrap();
    let s = g0.default_stream();
    let untimed = s.record_event().unwrap();
    let timed = s.record_timed_event().unwrap();
    s.synchronize().unwrap();
    let e = untimed.gpu_time_ns().unwrap_err();
    assert!(e.to_string().contains("record_timed_event"), "{e}");
    let e = timed.elapsed_ms(&untimed).unwrap_err();
    assert!(e.to_string().contains("without timing"), "{e}");
    // Two devices' timers are not one clock.
    let other = g1.default_stream().record_timed_event().unwrap();
    let e = timed.elapsed_ms(&other).unwrap_err();
    assert!(matches!(e, Error::ForeignObject(_)), "{e}");
    assert!(e.to_string().contains("no common clock"), "{e}");
}

#[test]
fn an_event_whose_slot_later_events_took_is_an_error_not_a_wrong_time() {
    let gpu = nvbare::open("sim:gh100").unwrap();
    let s = gpu.default_stream();
    let first = s.record_timed_event().unwrap();
    let mut last = None;
    for _ in 0..nvbare::EVENT_STAMP_SLOTS {
        last = Some(s.record_timed_event().unwrap());
    }
    s.synchronize().unwrap();
    let e = first.gpu_time_ns().unwrap_err();
    assert!(e.to_string().contains("read event times sooner"), "{e}");
    // The newest still has its time.
    assert!(last.unwrap().gpu_time_ns().unwrap().is_some());
}
