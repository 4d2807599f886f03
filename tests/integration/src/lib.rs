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
