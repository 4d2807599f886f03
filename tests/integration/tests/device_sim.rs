//! The device layer end to end on the simulated GPUs.

use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, GB202, GH100};

fn cubin(sm: u32) -> Vec<u8> {
    let p = format!(
        "{}/../fixtures/cubins/kernels_sm{sm}_cuda12.cubin",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn add1_on_every_chip() {
    for (model, sm) in [(AD102, 89), (GH100, 90), (GB202, 120)] {
        let b = SimBackend::new(model, true).unwrap();
        let dev = Device::open(b, DeviceOptions::default()).unwrap();
        let n = 1000u32;
        let host: Vec<u32> = (0..n).collect();
        let buf = dev.htod_copy(&host).unwrap();
        let m = dev.load_module(&cubin(sm)).unwrap();
        let f = m.function("add1").unwrap();
        dev.launch(&f, LaunchConfig::for_num_elems(n), &[buf.arg(), n.into()])
            .unwrap();
        let out = dev.dtoh_copy(&buf).unwrap();
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v, i as u32 + 1, "{} element {i}", model.chipset);
        }
    }
}
