//! Streams on the simulated GPUs: each its own pair of channels, ordered against each other
//! only by events, which wait on the GPU (semaphore acquires), never by the host.
#![forbid(unsafe_code)]

use nvbare_core::device::{Arg, Device, DeviceError, DeviceOptions, LaunchConfig, MAX_STREAMS};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_integration::kernels_cubin as kernels;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

mod spinning;
use spinning::finish_spinning_kernel;

fn open(model: ChipModel, opts: DeviceOptions) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    Device::open(b, opts).expect("device opens")
}

#[test]
fn every_stream_has_its_own_channels() {
    let dev = open(GH100, DeviceOptions::default());
    assert_eq!(dev.streams(), 4);
    let mut handles = Vec::new();
    for s in 0..dev.streams() {
        let h = dev
            .with_stream(s, |d| d.channel_handles())
            .unwrap()
            .unwrap();
        handles.extend(h);
    }
    let mut unique = handles.clone();
    unique.sort_by_key(|h| h.0);
    unique.dedup();
    assert_eq!(unique.len(), handles.len(), "{handles:?}");
    // Back on the default stream after each call.
    assert_eq!(dev.current_stream(), 0);
    assert_eq!(dev.channel_handles().unwrap(), handles[..2]);
}

#[test]
fn a_stream_waits_for_another_streams_event_on_the_gpu() {
    for (model, sm) in [(AD102, 89), (GH100, 90), (GB202, 120)] {
        let dev = open(model, DeviceOptions::default());
        let m = dev.load_cubin(&kernels(sm, 12)).unwrap();
        let spin = m.function("spin_forever").unwrap();
        let add1 = m.function("add1").unwrap();
        let n = 256u32;
        let buf = dev.alloc_zeros::<u32>(n as usize).unwrap();
        let mut out = dev.alloc_zeros::<u32>(n as usize).unwrap();
        dev.synchronize().unwrap();

        // Stream 1 runs a kernel that spins until a flag is set; stream 2 waits for it.
        dev.with_stream(1, |d| d.launch(&spin, LaunchConfig::for_num_elems(1), &[]))
            .unwrap()
            .unwrap();
        let ev = dev.with_stream(1, |d| d.record_event()).unwrap().unwrap();
        assert_eq!(ev.stream(), 1);
        dev.with_stream(2, |d| -> Result<(), DeviceError> {
            d.wait_event(&ev)?;
            d.launch(
                &add1,
                LaunchConfig::for_num_elems(n),
                &[buf.arg(), Arg::from(n)],
            )?;
            // A copy engine is not held up by the spinning grid: only the acquire holds it.
            d.dtod_copy(&buf, &mut out)?;
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert!(
            !dev.event_done(&ev).unwrap(),
            "{}: the kernel still spins",
            model.chipset.info().name
        );
        let [(cs, cr), (ps, pr)] = dev.with_stream(2, |d| d.timelines()).unwrap().unwrap();
        assert!(
            cr < cs && pr < ps,
            "{}: stream 2 ran before the event: {cs} {cr} {ps} {pr}",
            model.chipset.info().name
        );
        let copied = dev
            .with_backend(|b| b.read_gpu(out.gpu_va(), 4 * n as usize))
            .unwrap()
            .unwrap();
        assert!(
            copied.iter().all(|&b| b == 0),
            "{}: the copy ran early",
            model.chipset.info().name
        );

        dev.with_stream(1, finish_spinning_kernel).unwrap();
        dev.synchronize_event(&ev).unwrap();
        dev.with_stream(2, |d| d.synchronize_stream())
            .unwrap()
            .unwrap();
        assert_eq!(dev.dtoh_copy(&out).unwrap(), vec![1u32; n as usize]);
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![1u32; n as usize]);
    }
}

#[test]
fn an_event_of_the_same_stream_is_already_ordered() {
    let dev = open(GH100, DeviceOptions::default());
    let ev = dev.record_event().unwrap();
    dev.wait_event(&ev).unwrap();
    assert!(dev.event_done(&ev).unwrap());
    let [(before, _), _] = dev.timelines().unwrap();
    dev.wait_event(&ev).unwrap();
    assert_eq!(dev.timelines().unwrap()[0].0, before, "nothing submitted");
}

#[test]
fn bad_streams_and_foreign_events_are_errors() {
    let dev = open(GH100, DeviceOptions::default());
    let e = dev.with_stream(4, |_| ()).unwrap_err();
    assert!(matches!(e, DeviceError::BadRange(_)), "{e}");
    assert!(e.to_string().contains("DeviceOptions::streams"), "{e}");
    let other = open(GH100, DeviceOptions::default());
    let ev = other.record_event().unwrap();
    assert!(matches!(
        dev.wait_event(&ev),
        Err(DeviceError::ForeignObject(_))
    ));
    assert!(matches!(
        dev.event_done(&ev),
        Err(DeviceError::ForeignObject(_))
    ));
    for streams in [0, MAX_STREAMS + 1] {
        let b = SimBackend::new(GH100, true).unwrap();
        let e = Device::open(
            b,
            DeviceOptions {
                streams,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(matches!(e, DeviceError::BadRange(_)), "{e}");
    }
}

#[test]
fn one_stream_and_the_most_streams_open_and_launch() {
    for streams in [1, 2, 3, 5, MAX_STREAMS] {
        eprintln!("streams {streams}");
        let dev = open(
            GH100,
            DeviceOptions {
                streams,
                ..Default::default()
            },
        );
        let m = dev.load_cubin(&kernels(90, 12)).unwrap();
        let add1 = m.function("add1").unwrap();
        let buf = dev.alloc_zeros::<u32>(64).unwrap();
        for s in 0..streams {
            dev.with_stream(s, |d| -> Result<(), DeviceError> {
                d.launch(
                    &add1,
                    LaunchConfig::for_num_elems(64),
                    &[buf.arg(), 64u32.into()],
                )?;
                let ev = d.record_event()?;
                // The next stream continues after this one.
                d.with_stream((s + 1) % streams, |d| d.wait_event(&ev))??;
                Ok(())
            })
            .unwrap()
            .unwrap();
        }
        dev.synchronize().unwrap();
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![streams; 64]);
    }
}
