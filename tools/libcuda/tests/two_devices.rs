//! Two simulated GH100s in one process (`NVBARE_DEVICE=sim:gh100,sim:gh100`): CUDA's address
//! space is unified, so device pointers of the two never overlap, module variables included,
//! and a copy between them takes either's pointers.

use std::ffi::c_void;
use std::ptr::null_mut;

use cuda::abi::*;
use cuda::*;

/// Sets the environment and calls cuInit (one test in this binary: nothing else reads the
/// environment meanwhile).
fn init() {
    // SAFETY: the only test of this process, before the library reads the environment.
    unsafe {
        std::env::set_var("NVBARE_DEVICE", "sim:gh100,sim:gh100");
        std::env::set_var("NVBARE_NVJITLINK", "/nonexistent/libnvJitLink.so");
    }
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuInit(0) }, CUDA_SUCCESS);
}

/// The primary context of `dev`.
fn primary(dev: CUdevice) -> CUcontext {
    let mut ctx = null_mut();
    // SAFETY: an out-pointer to a local.
    let r = unsafe { cuDevicePrimaryCtxRetain(&mut ctx, dev) };
    assert_eq!(r, CUDA_SUCCESS);
    ctx
}

fn set_current(ctx: CUcontext) {
    // SAFETY: a handle from the driver.
    assert_eq!(unsafe { cuCtxSetCurrent(ctx) }, CUDA_SUCCESS);
}

/// `bytes` on the current context's device; its range as cuMemGetAddressRange reports it.
fn alloc(bytes: usize) -> (CUdeviceptr, usize) {
    let (mut p, mut base, mut size) = (0, 0, 0);
    // SAFETY: out-pointers to locals.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut p, bytes), CUDA_SUCCESS);
        assert_eq!(
            cuMemGetAddressRange_v2(&mut base, &mut size, p),
            CUDA_SUCCESS
        );
    }
    assert_eq!((base, size), (p, bytes));
    (p, bytes)
}

fn write(p: CUdeviceptr, data: &[u8]) {
    // SAFETY: `data` is valid for its length.
    let r = unsafe { cuMemcpyHtoD_v2(p, data.as_ptr().cast(), data.len()) };
    assert_eq!(r, CUDA_SUCCESS);
}

fn read(p: CUdeviceptr, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    // SAFETY: `v` is valid for `n` bytes.
    let r = unsafe { cuMemcpyDtoH_v2(v.as_mut_ptr().cast::<c_void>(), p, n) };
    assert_eq!(r, CUDA_SUCCESS);
    v
}

fn overlap(a: (u64, usize), b: (u64, usize)) -> bool {
    a.0 < b.0 + b.1 as u64 && b.0 < a.0 + a.1 as u64
}

#[test]
fn two_devices_have_disjoint_pointers_and_copy_between_them() {
    init();
    let mut n = 0;
    // SAFETY: an out-pointer to a local.
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, CUDA_SUCCESS);
    assert_eq!(n, 2);
    let ctx = [primary(0), primary(1)];

    // Allocations alternate between the devices: each device's allocator starts at the start
    // of its window, so without a window per device the first ones coincide.
    let sizes = [4096, 1 << 20, 3 * 4096 + 12, 64 << 10];
    let mut ranges: Vec<(usize, (u64, usize))> = Vec::new();
    for &s in &sizes {
        for (d, &c) in ctx.iter().enumerate() {
            set_current(c);
            ranges.push((d, alloc(s)));
        }
    }
    for (i, &(da, a)) in ranges.iter().enumerate() {
        for &(db, b) in &ranges[i + 1..] {
            assert!(
                !overlap(a, b),
                "device {da} {:#x}+{:#x} overlaps device {db} {:#x}+{:#x}",
                a.0,
                a.1,
                b.0,
                b.1
            );
        }
    }

    // Every allocation resolves to its own device's memory: what is written through one
    // device's pointer is read back through it, not through the other's.
    for (k, &(d, (p, len))) in ranges.iter().enumerate() {
        set_current(ctx[d]);
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + k * 13) as u8).collect();
        write(p, &data);
    }
    for (k, &(d, (p, len))) in ranges.iter().enumerate() {
        set_current(ctx[d]);
        let want: Vec<u8> = (0..len).map(|i| (i * 7 + k * 13) as u8).collect();
        assert_eq!(read(p, len), want, "allocation {k} on device {d}");
    }

    // Device 0 -> device 1 (cuMemcpyDtoD, from device 0's context), then back to a fresh
    // allocation on device 0 (cuMemcpy with unified addresses, from device 1's context).
    let len = 1 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ 0x5a).collect();
    set_current(ctx[0]);
    let (a, _) = alloc(len);
    write(a, &data);
    set_current(ctx[1]);
    let (b, _) = alloc(len);
    write(b, &vec![0; len]);
    set_current(ctx[0]);
    let (back, _) = alloc(len);
    write(back, &vec![0; len]);
    // SAFETY: device pointers of live allocations of `len` bytes.
    unsafe {
        assert_eq!(cuMemcpyDtoD_v2(b, a, len), CUDA_SUCCESS);
    }
    set_current(ctx[1]);
    assert!(read(b, len) == data, "device 1's copy differs");
    // SAFETY: as above.
    unsafe {
        assert_eq!(cuMemcpy(back, b, len), CUDA_SUCCESS);
    }
    set_current(ctx[0]);
    assert!(read(back, len) == data, "the copy back to device 0 differs");

    // Module variables: the same module on both devices has its variable at two addresses,
    // each resolving to its own device's copy.
    let image = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
    ))
    .unwrap();
    let mut globals = Vec::new();
    for (d, &c) in ctx.iter().enumerate() {
        set_current(c);
        let (mut m, mut p, mut n) = (null_mut(), 0, 0);
        // SAFETY: a whole cubin, out-pointers to locals, a NUL-terminated name.
        unsafe {
            assert_eq!(
                cuModuleLoadData(&mut m, image.as_ptr().cast()),
                CUDA_SUCCESS
            );
            assert_eq!(
                cuModuleGetGlobal_v2(&mut p, &mut n, m, c"spin_forever_release".as_ptr()),
                CUDA_SUCCESS
            );
        }
        write(p, &(100 + d as u32).to_le_bytes());
        globals.push((d, (p, n)));
    }
    assert!(!overlap(globals[0].1, globals[1].1), "{globals:x?}");
    for &(_, g) in &globals {
        for &(_, r) in &ranges {
            assert!(!overlap(g, r), "variable {g:x?} overlaps allocation {r:x?}");
        }
    }
    for &(d, (p, n)) in &globals {
        set_current(ctx[d]);
        assert_eq!(read(p, n), (100 + d as u32).to_le_bytes());
    }

    for &(d, (p, _)) in ranges.iter() {
        set_current(ctx[d]);
        // SAFETY: a live allocation's start.
        assert_eq!(unsafe { cuMemFree_v2(p) }, CUDA_SUCCESS);
    }
}
