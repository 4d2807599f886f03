//! Shared helpers for nvbare's end-to-end tests.

pub mod sysfs_fixture;

/// The bytes of `tests/fixtures/cubins/NAME` (panics with the path when it is missing).
pub fn cubin_fixture(name: &str) -> Vec<u8> {
    let p = format!("{}/../fixtures/cubins/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The fixture kernels (`tests/fixtures/cubins/src/kernels.ptx`) built for `sm_SM` by CUDA
/// `CUDA` (12 or 13).
pub fn kernels_cubin(sm: u32, cuda: u32) -> Vec<u8> {
    cubin_fixture(&format!("kernels_sm{sm}_cuda{cuda}.cubin"))
}

/// What the simulated GPU counted on `dev`'s compute channel (launches, overlapping and
/// dependent grids, prefetched QMDs, ...).
pub fn compute_stats(
    dev: &nvbare_core::device::Device<nvbare_sim::backend::SimBackend>,
) -> nvbare_sim::fifo::ChannelStats {
    let [compute, _] = dev.channel_handles().expect("channels");
    dev.with_backend(|b| {
        let chid = b.chid(compute).expect("compute channel");
        nvbare_sim::fifo::lock(&b.fifo())
            .channel(chid)
            .expect("channel")
            .stats
    })
    .expect("backend")
}
