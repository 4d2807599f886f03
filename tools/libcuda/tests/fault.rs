//! A kernel that writes outside its memory: the fault comes back as CUDA's
//! `CUDA_ERROR_ILLEGAL_ADDRESS` at the next wait (its own process: the device has faulted).

use std::ffi::c_void;
use std::ptr::null_mut;

use cuda::abi::*;
use cuda::*;

#[test]
fn an_mmu_fault_is_an_illegal_address() {
    // SAFETY: the only test of this process: nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("NVBARE_DEVICE", "sim:gh100") };
    let image = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
    ))
    .unwrap();
    let (mut ctx, mut m, mut f, mut p) = (null_mut(), null_mut(), null_mut(), 0u64);
    // SAFETY: out-pointers to locals, a whole cubin, parameters that outlive the launch.
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut p, 64), CUDA_SUCCESS);
        assert_eq!(
            cuModuleLoadData(&mut m, image.as_ptr().cast()),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut f, m, c"oob_write".as_ptr()),
            CUDA_SUCCESS
        );
        let mut params = [(&mut p as *mut u64).cast::<c_void>()];
        let r = cuLaunchKernel(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            null_mut(),
        );
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    }
}
