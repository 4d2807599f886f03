//! Stale QMDs on the simulated GPUs. The compute engine caches QMDs by address (the
//! `INVALIDATE` PCAS actions exist for that cache); a launch whose `PCAS_ACTION` does not
//! invalidate may run a cached copy of an older QMD at the same address, and nvbare reuses
//! command memory. Launches send `INVALIDATE_PREFETCH_COPY_SCHEDULE`, as CUDA does (tinygrad
//! and nvbare before 2026-11-30 sent `PREFETCH_SCHEDULE`). The simulator keeps stale QMDs on
//! request (`SimBackend::keep_stale_qmds`). On the H200 this change did not cure the stale
//! timeline releases seen while another process set up its channels (docs/device.md).

use nvbare_integration::kernels_cubin;
use std::time::Duration;

use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];

#[test]
fn launches_reusing_command_memory_never_run_a_stale_cached_qmd() {
    for (model, sm) in CHIPS {
        let b = SimBackend::new(model, true).expect("simulated GPU");
        let dev = Device::open(
            b,
            DeviceOptions {
                // A small arena: QMD addresses repeat every few launches.
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
        // Alternating buffers, each launch waited for: a stale QMD would add to the wrong
        // buffer or release an older timeline value (and the wait would time out).
        for i in 0..120 {
            let buf = if i % 3 == 0 { &a } else { &b };
            dev.launch(&add1, cfg, &[buf.arg(), n.into()])
                .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
            dev.synchronize()
                .unwrap_or_else(|e| panic!("{:?} launch {i}: {e}", model.chipset));
        }
        assert_eq!(dev.dtoh_copy(&a).unwrap(), vec![40u32; n as usize]);
        assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![80u32; n as usize]);
    }
}
