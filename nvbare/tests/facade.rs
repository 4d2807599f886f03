//! The library as a user calls it: `nvbare::open` on the simulated GPUs, handles that outlive
//! their scope and cross threads, typed launches, and what bad input gets.

use nvbare::{Arg, ByValue, DeviceBuffer, Error, Gpu, Graph, LaunchConfig, Options};

fn sim(chip: &str) -> Gpu {
    nvbare::open(&format!("sim:{chip}")).unwrap()
}

fn demo(gpu: &Gpu) -> nvbare::Module {
    gpu.load_cubin(nvbare::demo_cubin(gpu.info().sm).unwrap())
        .unwrap()
}

#[test]
fn add1_on_every_simulated_chip_with_slices_copies_and_events() {
    for chip in ["ad102", "gh100", "gb202"] {
        let gpu = sim(chip);
        let s = gpu.default_stream();
        let n = 4096u32;
        let data: Vec<u32> = (0..n).collect();
        let buf = s.htod_copy(&data).unwrap();
        let m = demo(&gpu);
        let add1 = m.function("add1").unwrap();
        // The second half only, through a slice.
        let half = buf.slice(2048..).unwrap();
        s.launch_builder(&add1)
            .arg(&half)
            .arg(&(n / 2))
            .launch(LaunchConfig::for_num_elems(n / 2))
            .unwrap();
        let ev = s.record_event().unwrap();
        ev.synchronize().unwrap();
        assert!(ev.is_done().unwrap());
        let out = s.dtoh_copy(&buf).unwrap();
        for (i, (o, d)) in out.iter().zip(&data).enumerate() {
            assert_eq!(*o, if i >= 2048 { d + 1 } else { *d }, "{chip} element {i}");
        }
        // Device to device, into a slice of a zeroed buffer.
        let dst: DeviceBuffer<u32> = gpu.alloc_zeros(8192).unwrap();
        s.dtod_copy(&buf, &dst.slice(4096..).unwrap()).unwrap();
        let back = s.dtoh_copy(&dst.slice(4095..4100).unwrap()).unwrap();
        assert_eq!(back, [0, 0, 1, 2, 3], "{chip}");
        gpu.close().unwrap();
    }
}

#[test]
fn handles_live_in_structs_and_cross_threads() {
    struct Job {
        stream: nvbare::Stream,
        f: nvbare::Function,
        buf: DeviceBuffer<u32>,
    }
    let gpu = sim("gh100");
    let job = {
        let m = demo(&gpu);
        let f = m.function("add1").unwrap();
        // `m` goes out of scope: the function keeps the image loaded.
        Job {
            stream: gpu.default_stream(),
            f,
            buf: gpu.alloc_zeros(256).unwrap(),
        }
    };
    let t = std::thread::spawn(move || {
        for _ in 0..3 {
            job.stream
                .launch_builder(&job.f)
                .arg(&job.buf)
                .arg(&256u32)
                .launch(LaunchConfig::for_num_elems(256))
                .unwrap();
        }
        job.stream.dtoh_copy(&job.buf).unwrap()
    });
    assert!(t.join().unwrap().iter().all(|&v| v == 3));
}

#[test]
fn bad_device_strings_say_what_is_valid() {
    for bad in ["gpu0", "sim:h100", "nvidia:x", "vfio:zz", "remote:", ""] {
        let e = nvbare::open(bad).unwrap_err();
        assert!(matches!(e, Error::Spec(_)), "{bad}: {e:?}");
        assert!(e.to_string().contains("valid forms"), "{bad}: {e}");
    }
}

#[test]
fn missing_firmware_without_fetching_is_a_typed_error_saying_what_to_do() {
    let opts = Options::default()
        .firmware_dir("/nonexistent/nvbare-firmware")
        .fetch_firmware(false);
    let e = nvbare::open_with("sim:ad102", opts).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Firmware(nvbare::backend::FirmwareError::Missing { .. })
        ),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(
        m.contains("/nonexistent/nvbare-firmware/nvidia/ad102/gsp/"),
        "{m}"
    );
    assert!(m.contains("nvbare fw fetch"), "{m}");
    assert!(m.contains("Options::firmware_dir"), "{m}");
    assert!(!std::path::Path::new("/nonexistent/nvbare-firmware").exists());
}

#[test]
fn the_firmware_directory_is_the_one_options_name() {
    // The cache, reached through a symlink of another name: opening works only if the path
    // given is the one used.
    let cache = nvbare::backend::firmware::default_dir();
    let link = std::env::temp_dir().join(format!("nvbare-fw-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&cache, &link).unwrap();
    let opts = Options::default().firmware_dir(&link).fetch_firmware(false);
    let gpu = nvbare::open_with("sim:gh100", opts);
    std::fs::remove_file(&link).unwrap();
    gpu.unwrap().close().unwrap();
}

#[test]
fn wrong_arguments_name_the_parameter() {
    let gpu = sim("ad102");
    let s = gpu.default_stream();
    let m = demo(&gpu);
    let add1 = m.function("add1").unwrap();
    let buf: DeviceBuffer<u32> = gpu.alloc_zeros(16).unwrap();
    let cfg = LaunchConfig::for_num_elems(16);
    let e = s.launch_builder(&add1).arg(&buf).launch(cfg).unwrap_err();
    assert!(
        e.to_string().contains("takes 2 parameters, 1 were given"),
        "{e}"
    );
    let e = s
        .launch_builder(&add1)
        .arg(&buf)
        .arg(&16u64)
        .launch(cfg)
        .unwrap_err();
    assert!(
        e.to_string().contains("parameter 1 of `add1` is 4 bytes"),
        "{e}"
    );
    let e = s
        .launch_builder(&add1)
        .arg(&ByValue([0u8; 4]))
        .arg(&16u32)
        .launch(cfg)
        .unwrap_err();
    assert!(
        e.to_string().contains("parameter 0 of `add1` is 8 bytes"),
        "{e}"
    );
    assert!(m.function("nope").unwrap_err().to_string().contains("add1"));
    assert!(buf.slice(10..20).is_err());
    // The device is fine after all that.
    s.launch_builder(&add1)
        .arg(&buf)
        .arg(&16u32)
        .launch(cfg)
        .unwrap();
    assert_eq!(s.dtoh_copy(&buf).unwrap(), [1; 16]);
}

#[test]
fn objects_of_one_device_are_refused_by_another() {
    let (a, b) = (sim("gh100"), sim("gh100"));
    let buf_a: DeviceBuffer<u32> = a.alloc_zeros(16).unwrap();
    let buf_b: DeviceBuffer<u32> = b.alloc_zeros(16).unwrap();
    let sb = b.default_stream();
    let e = sb.dtoh_copy(&buf_a).unwrap_err();
    assert!(matches!(e, Error::ForeignObject(_)), "{e:?}");
    let e = sb.dtod_copy(&buf_a, &buf_b).unwrap_err();
    assert!(e.to_string().contains("belongs to sim:gh100"), "{e}");
    let ma = demo(&a);
    let f = ma.function("add1").unwrap();
    let e = sb
        .launch_builder(&f)
        .arg(&buf_b)
        .arg(&16u32)
        .launch(LaunchConfig::for_num_elems(16))
        .unwrap_err();
    assert!(matches!(e, Error::ForeignObject(_)), "{e:?}");
    let mb = demo(&b);
    let fb = mb.function("add1").unwrap();
    let e = sb
        .launch_builder(&fb)
        .arg(&buf_a)
        .arg(&16u32)
        .launch(LaunchConfig::for_num_elems(16))
        .unwrap_err();
    assert!(e.to_string().contains("points into a buffer of"), "{e}");
    // An event of another device is waited for on the CPU.
    let ev = a.default_stream().record_event().unwrap();
    sb.wait_event(&ev).unwrap();
}

#[test]
fn handles_of_a_closed_device_fail_with_closed() {
    let gpu = sim("gb202");
    let s = gpu.default_stream();
    let buf: DeviceBuffer<u32> = gpu.alloc_zeros(16).unwrap();
    gpu.clone().close().unwrap();
    let e = s.dtoh_copy(&buf).unwrap_err();
    assert!(matches!(e, Error::Closed(_)), "{e:?}");
    assert!(e.to_string().contains("sim:gb202 was closed"), "{e}");
    assert!(matches!(gpu.alloc::<u8>(4), Err(Error::Closed(_))));
    // Dropping handles of a closed device is harmless.
    drop(buf);
}

#[test]
fn module_globals_are_buffers_and_a_missing_name_says_what_there_is() {
    let gpu = sim("gh100");
    let s = gpu.default_stream();
    let m = demo(&gpu);
    // kernels.ptx's zero-initialised `.nv.global` variable.
    let g = m
        .globals()
        .iter()
        .find(|g| g.name == "spin_forever_release")
        .cloned()
        .unwrap();
    assert_eq!(g.size, 4);
    let v = m.global::<u32>("spin_forever_release").unwrap();
    assert_eq!((v.len(), v.gpu_va()), (1, g.va));
    assert_eq!(s.dtoh_copy(&v).unwrap(), [0]);
    s.htod_copy_into(&[7u32], &v).unwrap();
    assert_eq!(s.dtoh_copy(&v).unwrap(), [7]);
    // The buffer keeps the module loaded after the module handle goes.
    drop(m);
    assert_eq!(s.dtoh_copy(&v).unwrap(), [7]);
    let m = demo(&gpu);
    let e = m.global::<u8>("no_such_variable").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Device(nvbare_core::device::DeviceError::NoSuchGlobal(_))
        ),
        "{e}"
    );
    assert!(e.to_string().contains("spin_forever_release"), "{e}");
    drop(v);
    gpu.close().unwrap();
}

#[test]
fn a_va_window_places_the_device_memory_and_a_kernel_driver_window_outside_is_refused() {
    use nvbare::VaWindow;
    let g = 1u64 << 30;
    // The upper half of the default window: the device's own memory and every buffer there.
    let window = VaWindow::DEFAULT.slice(1, 2).unwrap();
    let gpu = nvbare::open_with("sim:gh100", Options::default().va_window(window)).unwrap();
    let s = gpu.default_stream();
    let data: Vec<u32> = (0..1024).collect();
    let bufs: Vec<DeviceBuffer<u32>> = (0..3).map(|_| s.htod_copy(&data).unwrap()).collect();
    let host: DeviceBuffer<u32> = gpu.alloc_host(1024).unwrap();
    for b in bufs.iter().chain([&host]) {
        let (va, end) = (b.gpu_va(), b.gpu_va() + 4 * b.len() as u64);
        assert!(
            va >= window.base() && end <= window.end(),
            "{va:#x}..{end:#x} outside {window}"
        );
    }
    assert_eq!(s.dtoh_copy(&bufs[2]).unwrap(), data);
    // Host memory is this process's own (page-aligned); video memory has no CPU pointer.
    let p = host
        .host_ptr()
        .unwrap()
        .expect("the simulator's host memory is the process's");
    assert_eq!(p.as_ptr() as usize % 4096, 0);
    assert!(bufs[0].host_ptr().unwrap().is_none());
    drop(bufs);
    gpu.close().unwrap();
    assert!(
        matches!(host.host_ptr(), Err(Error::Closed(_))),
        "{:?}",
        host.host_ptr()
    );
    drop(host);

    // The kernel-driver adapter checks the window before it opens anything, so this needs no
    // GPU: below its range is where RM and the CPU put things.
    let low = VaWindow::new(0, 4 * g).unwrap();
    match nvbare::open_with("nvidia:0", Options::default().va_window(low)) {
        Err(Error::Spec(m)) => assert!(m.contains("choose a window inside it"), "{m}"),
        other => panic!("expected Error::Spec, got {other:?}"),
    }
}

#[test]
fn a_graph_runs_as_often_as_launched_keeps_its_kernels_loaded_and_takes_updates() {
    let gpu = sim("gh100");
    let s = gpu.default_stream();
    let a = s.htod_copy(&[0u32; 256]).unwrap();
    let b = s.htod_copy(&[0u32; 256]).unwrap();
    let (va, vb, n) = (
        a.gpu_va().to_le_bytes(),
        b.gpu_va().to_le_bytes(),
        256u32.to_le_bytes(),
    );
    let on_a = [Arg::Bytes(&va), Arg::Bytes(&n)];
    let on_b = [Arg::Bytes(&vb), Arg::Bytes(&n)];
    let cfg = LaunchConfig::for_num_elems(256);
    let m = demo(&gpu);
    let add1 = m.function("add1").unwrap();
    let mut g = Graph::new(&[(&add1, cfg, &on_a), (&add1, cfg, &on_a)]).unwrap();
    assert_eq!(g.len(), 2);
    // The graph keeps the module loaded.
    drop(m);
    for _ in 0..3 {
        s.launch_graph(&g).unwrap();
    }
    g.set_launch(1, &add1, cfg, &on_b).unwrap();
    s.launch_graph(&g).unwrap();
    assert_eq!(s.dtoh_copy(&a).unwrap(), vec![7u32; 256]);
    assert_eq!(s.dtoh_copy(&b).unwrap(), vec![1u32; 256]);
    // Bad input.
    let e = Graph::new(&[]).unwrap_err();
    assert!(e.to_string().contains("at least one"), "{e}");
    let e = Graph::new(&[(&add1, cfg, &on_a[..1])]).unwrap_err();
    assert!(e.to_string().contains("takes 2 parameters"), "{e}");
    let e = g.set_launch(2, &add1, cfg, &on_a).unwrap_err();
    assert!(e.to_string().contains("launch 2 of a graph of 2"), "{e}");
    let other = sim("gh100");
    let e = other.default_stream().launch_graph(&g).unwrap_err();
    assert!(matches!(e, Error::ForeignObject(_)), "{e}");
    drop(g);
    gpu.close().unwrap();
}
