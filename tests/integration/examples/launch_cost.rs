//! Driver-side cost of back-to-back launches on the simulator (host paused), for profiling.
#![forbid(unsafe_code)]
use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::GH100;
fn main() {
    let dev = Device::open(
        SimBackend::new(GH100, false).unwrap(),
        DeviceOptions::default(),
    )
    .unwrap();
    let cubin = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/cubins/kernels_sm90_cuda12.cubin"
    ))
    .unwrap();
    let m = dev.load_cubin(&cubin).unwrap();
    let f = m.function("empty").unwrap();
    let one = LaunchConfig::for_num_elems(1);
    let [c, _] = dev.channel_handles().unwrap();
    let mut driver = std::time::Duration::ZERO;
    let mut n = 0u32;
    for _ in 0..200 {
        dev.with_backend(|b| b.freeze_channel(c)).unwrap();
        let t = std::time::Instant::now();
        for _ in 0..256 {
            dev.launch(&f, one, &[]).unwrap();
            n += 1;
        }
        driver += t.elapsed();
        dev.with_backend(|b| b.thaw_channel(c)).unwrap();
        dev.synchronize().unwrap();
    }
    eprintln!("{:?} driver time per launch", driver / n);
}
