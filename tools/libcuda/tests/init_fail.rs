//! cuInit when nothing opens (a VFIO device that is not there), and calls before cuInit: its
//! own process, as the driver's state is once per process.

use cuda::abi::*;
use cuda::*;

#[test]
fn calls_before_and_after_a_failed_init() {
    let mut n = -1;
    // SAFETY: an out-pointer to a local.
    let r = unsafe { cuDeviceGetCount(&mut n) };
    assert_eq!(r, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the only test of this process: nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("NVBARE_DEVICE", "vfio:0000:99:00.0") };
    // SAFETY: no pointers.
    let r = unsafe { cuInit(0) };
    assert_ne!(r, CUDA_SUCCESS);
    // SAFETY: as above; the failure sticks, as CUDA's does.
    assert_eq!(unsafe { cuInit(0) }, r);
    // SAFETY: an out-pointer to a local.
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, r);
    let mut p = 0;
    // SAFETY: an out-pointer to a local.
    assert_ne!(unsafe { cuMemAlloc_v2(&mut p, 16) }, CUDA_SUCCESS);
}
