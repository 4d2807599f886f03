//! Shared helpers for nvbare's end-to-end tests.
#![forbid(unsafe_code)]

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

/// `opts` with its benchmark tuning (`DeviceOptions::tuning`) changed by `f`: tests turn the
/// latency machinery's pieces on and off with it.
pub fn tuned(
    opts: nvbare_core::device::DeviceOptions,
    f: impl FnOnce(&mut nvbare_core::device::Tuning),
) -> nvbare_core::device::DeviceOptions {
    let mut o = opts;
    f(&mut o.tuning);
    o
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

/// The last launch on `dev`'s compute channel, as the simulated GPU's compute engine decoded
/// its QMD (panics if nothing was launched).
pub fn last_compute_launch(
    dev: &nvbare_core::device::Device<nvbare_sim::backend::SimBackend>,
) -> nvbare_core::channel::qmd::LaunchDesc {
    let [compute, _] = dev.channel_handles().expect("channels");
    dev.with_backend(|b| {
        let chid = b.chid(compute).expect("compute channel");
        *nvbare_sim::fifo::lock(&b.fifo())
            .channel(chid)
            .expect("channel")
            .last_launch()
            .expect("a launch")
    })
    .expect("backend")
}

/// The QMD at GPU VA `va` of `dev`'s address space, as the simulated GPU reads it.
pub fn read_qmd(
    dev: &nvbare_core::device::Device<nvbare_sim::backend::SimBackend>,
    va: u64,
) -> nvbare_core::channel::qmd::Qmd {
    let v = dev.info().qmd;
    let mut bytes = vec![0u8; v.size()];
    dev.with_backend(|be| {
        let space = be.address_space().expect("address space");
        be.gpu().with_core(|core| {
            nvbare_sim::gpu_mem::gpu_read(
                core,
                &*space,
                va,
                &mut bytes,
                nvbare_sim::gpu_mem::Access::Read,
            )
            .expect("QMD readable")
        })
    })
    .expect("backend");
    nvbare_core::channel::qmd::Qmd::from_bytes(v, &bytes).expect("a QMD")
}
