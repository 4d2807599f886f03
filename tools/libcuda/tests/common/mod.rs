//! What the tests that call the entry points share: one driver per process on
//! `NVBARE_DEVICE=sim:gh100`, the fixture cubin, small buffers.
#![allow(dead_code)]

use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, OnceLock};

use cuda::abi::*;
use cuda::*;

/// Takes the lock, and the first time sets the environment and calls cuInit.
pub fn setup() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    static INIT: OnceLock<()> = OnceLock::new();
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    INIT.get_or_init(|| {
        // SAFETY: set once, under the lock every test takes first, before the library reads
        // the environment; no other thread of this process reads it meanwhile.
        unsafe {
            std::env::set_var("NVBARE_DEVICE", "sim:gh100");
            std::env::set_var("NVBARE_NVJITLINK", "/nonexistent/libnvJitLink.so");
        }
        // SAFETY: no pointers.
        assert_eq!(unsafe { cuInit(0) }, CUDA_SUCCESS);
    });
    g
}

/// A context on device 0, made current.
pub fn context() -> CUcontext {
    let mut ctx = null_mut();
    // SAFETY: an out-pointer to a local.
    let r = unsafe { cuDevicePrimaryCtxRetain(&mut ctx, 0) };
    assert_eq!(r, CUDA_SUCCESS);
    // SAFETY: a handle from the driver.
    assert_eq!(unsafe { cuCtxSetCurrent(ctx) }, CUDA_SUCCESS);
    ctx
}

pub fn cubin() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
    ))
    .unwrap()
}

/// The `add1` kernel of the fixture cubin, loaded.
pub fn add1() -> (CUmodule, CUfunction) {
    let image = cubin();
    let (mut m, mut f) = (null_mut(), null_mut());
    // SAFETY: a whole cubin and out-pointers to locals.
    unsafe {
        assert_eq!(
            cuModuleLoadData(&mut m, image.as_ptr().cast()),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut f, m, c"add1".as_ptr()),
            CUDA_SUCCESS
        );
    }
    (m, f)
}

pub fn alloc_with(data: &[u32]) -> CUdeviceptr {
    let mut p = 0;
    // SAFETY: out-pointer to a local; `data` is valid for its length.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut p, data.len() * 4), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyHtoD_v2(p, data.as_ptr().cast(), data.len() * 4),
            CUDA_SUCCESS
        );
    }
    p
}

pub fn read_back(p: CUdeviceptr, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    // SAFETY: `out` holds `n` u32s.
    let r = unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), p, n * 4) };
    assert_eq!(r, CUDA_SUCCESS);
    out
}

/// Three non-blocking streams and three events, destroyed (and checked) on drop.
pub struct StreamsAndEvents {
    pub s: [CUstream; 3],
    pub e: [CUevent; 3],
}

impl StreamsAndEvents {
    pub fn new() -> Self {
        let mut x = StreamsAndEvents {
            s: [null_mut(); 3],
            e: [null_mut(); 3],
        };
        // SAFETY: out-pointers into `x`.
        unsafe {
            for s in &mut x.s {
                assert_eq!(cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
            }
            for e in &mut x.e {
                assert_eq!(cuEventCreate(e, 0), CUDA_SUCCESS);
            }
        }
        x
    }
}

impl Drop for StreamsAndEvents {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: handles from the driver, destroyed once.
        unsafe {
            for s in self.s {
                assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
            }
            for e in self.e {
                assert_eq!(cuEventDestroy_v2(e), CUDA_SUCCESS);
            }
        }
    }
}

/// `add1`'s `kernelParams`: pointers to its buffer `p` and count `n`, which must outlive
/// every launch made with them.
pub fn add1_args(p: &mut CUdeviceptr, n: &mut u32) -> [*mut std::ffi::c_void; 2] {
    [(p as *mut u64).cast(), (n as *mut u32).cast()]
}

/// A kernel node of `add1` over one block of 64 threads, its arguments from `params`.
pub fn add1_node(
    f: CUfunction,
    params: &mut [*mut std::ffi::c_void; 2],
) -> CUDA_KERNEL_NODE_PARAMS {
    CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 64,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: params.as_mut_ptr(),
        extra: null_mut(),
    }
}
