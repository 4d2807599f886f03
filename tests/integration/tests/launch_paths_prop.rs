//! Random sequences of launches, waits and copies on the simulated GPUs, against a model of
//! what they must leave in memory. The launch paths (written ahead, repeated calls, calls that
//! change only argument values, prefetched QMDs, deferred and chained doorbells, the ordinary
//! build, launches held for a flusher and chained) are chosen by the device from the history of
//! calls; whichever it takes, every element must end up as the model says. With a flusher the
//! GPU runs lazily (only when time passes for the driver), so launches find it busy, and the
//! flusher is polled at random points, as its thread would.
#![forbid(unsafe_code)]

use std::time::Duration;

use nvbare_core::device::{Device, DeviceOptions, LaunchConfig, Tuning};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_integration::kernels_cubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};
use proptest::prelude::*;

const ELEMS: usize = 256;

#[derive(Debug, Clone)]
enum Op {
    /// `add1(buffers[buf], n)` over one CTA of `block` threads.
    Add1 { buf: usize, n: u32, block: u32 },
    /// The `empty` kernel (another kernel between two `add1` calls).
    Empty,
    /// `synchronize()`.
    Wait,
    /// Overwrite `buffers[buf]` from the host with `value` (copy-channel work).
    Fill { buf: usize, value: u32 },
    /// Time passes for the driver (a lazy GPU runs what is published), then the flusher, if
    /// any, is polled.
    Poll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, prop_oneof![Just(16u32), Just(64), Just(200), Just(300)], prop_oneof![Just(128u32), Just(256)])
            .prop_map(|(buf, n, block)| Op::Add1 { buf, n, block }),
        1 => Just(Op::Empty),
        3 => Just(Op::Wait),
        1 => (0..2usize, 0..1000u32).prop_map(|(buf, value)| Op::Fill { buf, value }),
        2 => Just(Op::Poll),
    ]
}

/// Device options, and whether a flusher is attached (with a lazy GPU).
fn options() -> impl Strategy<Value = (DeviceOptions, bool)> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0u32), Just(3)],
        any::<bool>(),
    )
        .prop_map(
            |(write_ahead, early_qmd_prefetch, deferred_submits, flusher)| {
                (
                    DeviceOptions {
                        timeout: Duration::from_secs(2),
                        tuning: Tuning {
                            write_ahead,
                            early_qmd_prefetch,
                            deferred_submits,
                            ..Tuning::default()
                        },
                        ..DeviceOptions::default()
                    },
                    flusher,
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_of_launches_leaves_what_the_model_says(
        chip in 0..3usize,
        (opts, with_flusher) in options(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let (model_chip, sm): (ChipModel, u32) = [(AD102, 89), (GH100, 90), (GB202, 120)][chip];
        let dev = Device::open(SimBackend::new(model_chip, true).expect("simulated GPU"), opts)
            .expect("device opens");
        let flusher = with_flusher.then(|| {
            prop_assert!(dev.with_backend(|b| b.run_lazily(true)).expect("backend"));
            Ok(dev.flusher().expect("flusher"))
        }).transpose()?;
        let m = dev.load_cubin(&kernels_cubin(sm, 13)).expect("fixture cubin");
        let add1 = m.function("add1").expect("add1");
        let empty = m.function("empty").expect("empty");
        let mut bufs = [
            dev.htod_copy(&[0u32; ELEMS]).expect("buffer"),
            dev.htod_copy(&[0u32; ELEMS]).expect("buffer"),
        ];
        let mut model = [vec![0u32; ELEMS], vec![0u32; ELEMS]];
        for op in &ops {
            match *op {
                Op::Add1 { buf, n, block } => {
                    let cfg = LaunchConfig { grid: [1, 1, 1], block: [block, 1, 1], shared_mem_bytes: 0 };
                    dev.launch(&add1, cfg, &[bufs[buf].arg(), n.into()]).expect("add1");
                    let upto = (n.min(block) as usize).min(ELEMS);
                    model[buf][..upto].iter_mut().for_each(|v| *v += 1);
                }
                Op::Empty => dev
                    .launch(&empty, LaunchConfig::for_num_elems(1), &[])
                    .expect("empty"),
                Op::Wait => dev.synchronize().expect("wait"),
                Op::Fill { buf, value } => {
                    dev.htod_copy_into(&[value; ELEMS], &mut bufs[buf]).expect("fill");
                    model[buf].iter_mut().for_each(|v| *v = value);
                }
                Op::Poll => {
                    dev.with_backend(|b| {
                        let _ = nvbare_core::hal::Clock::now(nvbare_core::device::Backend::clock(b));
                    })
                    .expect("backend");
                    if let Some(f) = &flusher {
                        f.poll();
                    }
                }
            }
        }
        for (i, b) in bufs.iter().enumerate() {
            prop_assert_eq!(&dev.dtoh_copy(b).expect("copy out"), &model[i], "buffer {}", i);
        }
    }
}
