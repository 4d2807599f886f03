//! The device layer on a simulated GPU that falls behind (`SimBackend::run_lazily`): work
//! published by a doorbell runs only when time passes for the driver (it reads its clock or
//! delays), as on hardware, where the GPU is microseconds behind the CPU. Otherwise the
//! simulator runs work at the doorbell, so a missing wait before reading results would pass.
//! Every launch, copy and wait path must still give the right results.
#![forbid(unsafe_code)]

use nvbare_integration::{kernels_cubin as kernels, tuned};

use nvbare_core::device::{ChannelKind, Device, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

/// The launch paths: the defaults (launches written ahead), every launch in full, deferred
/// doorbells (launches chained) and deferred doorbells without chaining.
/// [`FLUSHER`] is the defaults with a flusher thread attached (automatic deferral: launches
/// behind a busy GPU held and chained).
fn modes() -> [(&'static str, DeviceOptions); 5] {
    let d = DeviceOptions::default;
    [
        ("default", d()),
        (FLUSHER, d()),
        (
            "no write-ahead",
            tuned(d(), |t| {
                t.write_ahead = false;
            }),
        ),
        (
            "deferred doorbells",
            tuned(d(), |t| {
                t.deferred_submits = 4;
            }),
        ),
        (
            "deferred doorbells, unchained",
            tuned(d(), |t| {
                t.deferred_submits = 4;
                t.chain_launches = false;
            }),
        ),
    ]
}

/// The mode with a flusher thread.
const FLUSHER: &str = "automatic deferral (flusher thread)";

fn open_lazy(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    let dev = Device::open(b, opts).expect("device opens");
    assert!(dev.with_backend(|b| b.run_lazily(true)).unwrap());
    dev
}

#[test]
fn a_lazy_gpu_runs_nothing_until_the_driver_waits() {
    let dev = open_lazy(GH100, DeviceOptions::default());
    let m = dev.load_cubin(&kernels(90, 13)).unwrap();
    let empty = m.function("empty").unwrap();
    dev.synchronize().unwrap();
    let [(before, done), _] = dev.timelines().unwrap();
    assert_eq!(before, done, "idle after a synchronize");
    dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    // The launch rang the doorbell, but the GPU has not run it yet: the lazy mode is in force
    // (otherwise the other tests here prove nothing).
    let [(submitted, done), _] = dev.timelines().unwrap();
    assert_eq!(submitted, before + 1);
    assert_eq!(done, before, "the launch ran before the driver waited");
    dev.synchronize().unwrap();
    let [(submitted, done), _] = dev.timelines().unwrap();
    assert_eq!(done, submitted);
    // Turning it off runs what is pending at once.
    dev.launch(&empty, LaunchConfig::for_num_elems(1), &[])
        .unwrap();
    assert!(dev.with_backend(|b| b.run_lazily(false)).unwrap());
    let [(submitted, done), _] = dev.timelines().unwrap();
    assert_eq!(done, submitted);
}

#[test]
fn launches_and_copies_give_the_right_results_on_a_lazy_gpu() {
    for (model, sm) in CHIPS {
        for (mode, opts) in modes() {
            let what = format!("{:?} {mode}", model.chipset);
            let dev = open_lazy(model, opts);
            if mode == FLUSHER {
                // Runs until the device closes.
                nvbare_pci_host::flusher::spawn(&dev).unwrap().detach();
            }
            let m = dev.load_cubin(&kernels(sm, 13)).unwrap();
            let add1 = m.function("add1").unwrap();
            let vadd = m.function("vector_add").unwrap();

            // A chain of dependent launches, no wait between them, then a copy back.
            let n = 3000u32;
            let cfg = LaunchConfig::for_num_elems(n);
            let host: Vec<u32> = (0..n).map(|i| i * 7).collect();
            let buf = dev.htod_copy(&host).unwrap();
            for _ in 0..40 {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
            }
            let out = dev.dtoh_copy(&buf).unwrap();
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, i as u32 * 7 + 40, "{what}: add1 chain [{i}]");
            }

            // Launch and synchronize, one at a time (the written-ahead path).
            for k in 1..=5 {
                dev.launch(&add1, cfg, &[buf.arg(), n.into()]).unwrap();
                dev.synchronize().unwrap();
                let out = dev.dtoh_copy(&buf).unwrap();
                assert_eq!(out[0], 40 + k, "{what}: launch + sync {k}");
            }

            // Copies larger than a staging half (4 MiB staging: 2 MiB halves), pageable both
            // ways, around a kernel that reads the first and writes the second.
            let len = (5 << 20) / 4 + 3;
            let a: Vec<f32> = (0..len).map(|i| (i % 1000) as f32 * 0.25).collect();
            let b: Vec<f32> = (0..len).map(|i| 7.0 - (i % 77) as f32).collect();
            let da = dev.htod_copy(&a).unwrap();
            let db = dev.htod_copy(&b).unwrap();
            let mut dc = dev.alloc_zeros::<f32>(len).unwrap();
            dev.launch(
                &vadd,
                LaunchConfig::for_num_elems(len as u32),
                &[da.arg(), db.arg(), dc.arg(), (len as u32).into()],
            )
            .unwrap();
            // Device to device after the kernel, then back to the host.
            let mut dd = dev.alloc_zeros::<f32>(len).unwrap();
            dev.dtod_copy(&dc, &mut dd).unwrap();
            let mut c = vec![0f32; len];
            dev.dtoh_copy_into(&dd, &mut c).unwrap();
            for i in 0..len {
                assert_eq!(c[i], a[i] + b[i], "{what}: vector_add [{i}]");
            }
            // Overwrite the source on the host side right after queuing the copy: the copy
            // must have taken its bytes already.
            let mut again = a.clone();
            dev.htod_copy_into(&again, &mut dc).unwrap();
            again.iter_mut().for_each(|x| *x = -1.0);
            let back = dev.dtoh_copy(&dc).unwrap();
            assert_eq!(back[len - 1], a[len - 1], "{what}: htod source reused");
            assert_eq!(back[0], a[0], "{what}: htod source reused");

            // A raw submission and an explicit wait for its value.
            let v = dev.submit_raw(ChannelKind::Compute, &[]).unwrap();
            dev.wait_for(ChannelKind::Compute, v).unwrap();
            let [(s, d), (cs, cd)] = dev.timelines().unwrap();
            assert!(d >= v && d <= s, "{what}: compute timeline {d} of {s}");
            assert!(cd <= cs, "{what}: copy timeline {cd} of {cs}");
            dev.synchronize().unwrap();
        }
    }
}
