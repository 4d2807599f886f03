//! The PTX path end to end on the simulator, with a stand-in nvJitLink (tests/c/
//! fake_nvjitlink.c, built by gcc) found through `NVBARE_NVJITLINK`: the library is loaded,
//! its versioned entry points found, the device's `-arch` passed, the cubin it returns loaded
//! and add1 run; PTX that does not compile is `CUDA_ERROR_INVALID_PTX` with the JIT's log in
//! `CU_JIT_ERROR_LOG_BUFFER`. Its own process: the JIT is found once per process.

use std::ffi::{CStr, c_void};
use std::path::Path;
use std::ptr::null_mut;

use cuda::abi::*;
use cuda::*;

#[path = "c/fake_nvjitlink.rs"]
mod fake_nvjitlink;

#[test]
fn ptx_goes_through_the_jit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // SAFETY: the only test of this process, before the library reads the environment.
    unsafe {
        std::env::set_var("NVBARE_DEVICE", "sim:gh100");
        fake_nvjitlink::install(&root);
    }
    let mut ptx = std::fs::read(root.join("tests/fixtures/cubins/src/kernels.ptx")).unwrap();
    ptx.push(0);
    let (mut ctx, mut m, mut f) = (null_mut(), null_mut(), null_mut());
    let mut p = 0u64;
    let mut n: u32 = 256;
    let data: Vec<u32> = (0..256).collect();
    let mut out = vec![0u32; 256];
    // SAFETY: out-pointers to locals, NUL-terminated PTX, buffers of the sizes given.
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUDA_SUCCESS);
        assert_eq!(cuModuleLoadData(&mut m, ptx.as_ptr().cast()), CUDA_SUCCESS);
        assert_eq!(
            cuModuleGetFunction(&mut f, m, c"add1".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(cuMemAlloc_v2(&mut p, 1024), CUDA_SUCCESS);
        assert_eq!(cuMemcpyHtoD_v2(p, data.as_ptr().cast(), 1024), CUDA_SUCCESS);
        let mut params = [
            (&mut p as *mut u64).cast::<c_void>(),
            (&mut n as *mut u32).cast(),
        ];
        let r = cuLaunchKernel(
            f,
            1,
            1,
            1,
            256,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            null_mut(),
        );
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), p, 1024),
            CUDA_SUCCESS
        );
        assert_eq!(out, (1..=256).collect::<Vec<u32>>());
        // The same PTX again: from the cache.
        let mut m2 = null_mut();
        assert_eq!(cuModuleLoadData(&mut m2, ptx.as_ptr().cast()), CUDA_SUCCESS);
        // PTX that does not compile: the JIT's log comes back.
        let bad = c".version 8.0\n.target sm_80\nsyntax error\n";
        let mut log = [0u8; 256];
        let mut opts = [CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut vals = [log.as_mut_ptr().cast::<c_void>(), 256usize as *mut c_void];
        let r = cuModuleLoadDataEx(
            &mut m2,
            bad.as_ptr().cast(),
            2,
            opts.as_mut_ptr(),
            vals.as_mut_ptr(),
        );
        assert_eq!(r, CUDA_ERROR_INVALID_PTX);
        let text = CStr::from_ptr(log.as_ptr().cast()).to_str().unwrap();
        assert!(text.contains("syntax error in the input"), "{text}");
    }
}
