//! The entry points called as a C program calls them, on the simulated GH100
//! (`NVBARE_DEVICE=sim:gh100`) with the fixture cubins. One process, one driver: the tests
//! share its state, so each takes [`setup`]'s lock.

use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};

use cuda::abi::*;
use cuda::*;

mod common;
use common::{add1, add1_args, add1_node, alloc_with, context, read_back, setup};

#[test]
fn devices_and_attributes() {
    let _g = setup();
    let (mut n, mut major, mut minor, mut v, mut dev) = (0, 0, 0, 0, 0);
    let mut name = [0 as c_char; 64];
    // SAFETY: out-pointers to locals, a name buffer of its length.
    unsafe {
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_SUCCESS);
        assert_eq!(n, 1);
        assert_eq!(cuDeviceGet(&mut dev, 0), CUDA_SUCCESS);
        assert_eq!(cuDeviceGet(&mut dev, 1), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 64, 0), CUDA_SUCCESS);
        let s = CStr::from_ptr(name.as_ptr()).to_str().unwrap();
        assert!(s.contains("GH100") && s.contains("sim:gh100"), "{s}");
        assert_eq!(
            cuDeviceComputeCapability(&mut major, &mut minor, 0),
            CUDA_SUCCESS
        );
        assert_eq!((major, minor), (9, 0));
        assert_eq!(
            cuDeviceGetAttribute(&mut v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
            CUDA_SUCCESS
        );
        assert_eq!(v, 32);
        assert_eq!(
            cuDeviceGetAttribute(&mut v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
            0
        );
        assert!(v > 0, "{v} SMs");
        assert_eq!(
            cuDeviceGetAttribute(&mut v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
            0
        );
        assert_eq!(v, 9);
        assert_eq!(
            cuDeviceGetAttribute(&mut v, 9999, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuDeviceGetAttribute(null_mut(), CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuDriverGetVersion(&mut v), CUDA_SUCCESS);
        assert!(v >= 12000);
        assert_eq!(cuDeviceCanAccessPeer(&mut v, 0, 0), CUDA_SUCCESS);
        assert_eq!(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    }
}

#[test]
fn contexts_are_per_thread_stacks() {
    let _g = setup();
    let mut ctx = null_mut();
    let mut cur = null_mut();
    // SAFETY: out-pointers to locals and handles from the driver.
    unsafe {
        assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUDA_SUCCESS);
        assert_eq!(cuCtxGetCurrent(&mut cur), CUDA_SUCCESS);
        assert_eq!(cur, ctx);
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        let other = std::thread::spawn(|| {
            let mut c = null_mut();
            cuCtxGetCurrent(&mut c);
            c as usize
        })
        .join()
        .unwrap();
        assert_eq!(other, 0, "another thread has no current context");
        assert_eq!(cuCtxPopCurrent_v2(&mut cur), CUDA_SUCCESS);
        assert_eq!(cur, ctx);
        assert_eq!(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
        assert_eq!(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
        assert_eq!(cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(
            cuCtxSetCurrent(0xdead_0000usize as CUcontext),
            CUDA_ERROR_INVALID_CONTEXT
        );
    }
}

#[test]
fn memory_round_trips_and_memsets() {
    let _g = setup();
    context();
    let data: Vec<u32> = (0..1024).collect();
    let p = alloc_with(&data);
    assert_eq!(read_back(p, 1024), data);
    // An address inside the allocation stands for the rest of it.
    assert_eq!(read_back(p + 16, 4), [4, 5, 6, 7]);
    // SAFETY: device pointers only, and locals.
    unsafe {
        assert_eq!(cuMemsetD32_v2(p, 0xabcd_0123, 8), CUDA_SUCCESS);
        assert_eq!(cuMemsetD8_v2(p + 32, 0x7f, 4), CUDA_SUCCESS);
        let mut q = 0;
        assert_eq!(cuMemAlloc_v2(&mut q, 4096), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoD_v2(q, p, 4096), CUDA_SUCCESS);
        let out = read_back(q, 10);
        assert_eq!(&out[..8], &[0xabcd_0123; 8]);
        assert_eq!(out[8], 0x7f7f_7f7f);
        assert_eq!(out[9], 9);
        assert_eq!(cuMemsetD32Async(q, 5, 1024, null_mut()), CUDA_SUCCESS);
        assert_eq!(read_back(q, 1024), vec![5; 1024]);
        // Bad pointers and sizes.
        let mut x = 0u32;
        assert_eq!(
            cuMemcpyDtoH_v2((&mut x as *mut u32).cast(), 0xdead_beef, 4),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuMemcpyDtoH_v2((&mut x as *mut u32).cast(), p + 4094, 4),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuMemcpyHtoD_v2(p, null(), 4), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemsetD32_v2(p + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemAlloc_v2(null_mut(), 16), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemAlloc_v2(&mut q, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFree_v2(p + 4), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
        // Unified copies: device to host, host to device, by address.
        let mut two = [0u32; 2];
        let host_addr = two.as_mut_ptr() as u64;
        assert_eq!(cuMemcpy(host_addr, q + 4, 8), CUDA_SUCCESS);
        assert_eq!(two, [5, 5]);
        let seven = [7u32; 2];
        assert_eq!(cuMemcpy(q, seven.as_ptr() as u64, 8), CUDA_SUCCESS);
        assert_eq!(read_back(q, 3), [7, 7, 5]);
        // Memory counts.
        let (mut free, mut total, mut dev_total) = (0usize, 0usize, 0usize);
        assert_eq!(cuMemGetInfo_v2(&mut free, &mut total), CUDA_SUCCESS);
        assert!(free > 0 && free <= total, "{free} of {total}");
        assert_eq!(cuDeviceTotalMem_v2(&mut dev_total, 0), CUDA_SUCCESS);
        assert_eq!(dev_total, total);
        // Host memory.
        let mut h: *mut c_void = null_mut();
        assert_eq!(cuMemHostAlloc(&mut h, 100, 0), CUDA_SUCCESS);
        assert_eq!(h as usize % 4096, 0);
        assert_eq!(cuMemFreeHost(h), CUDA_SUCCESS);
        assert_eq!(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    }
}

/// Pinned memory is the device's own host memory: copies to and from it at any offset, a
/// kernel reading and writing it in place through its device pointer, and the bad input.
#[test]
fn pinned_host_memory() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let n = 1024usize;
    let mut h: *mut c_void = null_mut();
    let mut d: CUdeviceptr = 0;
    // SAFETY: out-pointers to locals; `h` is used for the `4 * n` bytes allocated, and only
    // while no GPU work that uses it is queued (after each synchronous call).
    unsafe {
        assert_eq!(
            cuMemHostAlloc(&mut h, 4 * n, CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS
        );
        assert_eq!(h as usize % 4096, 0);
        let host = std::slice::from_raw_parts_mut(h.cast::<u32>(), n);
        for (i, x) in host.iter_mut().enumerate() {
            *x = i as u32;
        }
        assert_eq!(cuMemAlloc_v2(&mut d, 4 * n), CUDA_SUCCESS);
        // Host to device from an offset inside the allocation, then back into another.
        assert_eq!(
            cuMemcpyHtoD_v2(d, h.cast::<u32>().add(8).cast(), 4 * 16),
            CUDA_SUCCESS
        );
        assert_eq!(read_back(d, 16), (8..24).collect::<Vec<u32>>());
        assert_eq!(
            cuMemcpyDtoH_v2(h.cast::<u32>().add(100).cast(), d, 4 * 4),
            CUDA_SUCCESS
        );
        assert_eq!(host[100..104], [8, 9, 10, 11]);
        // Queued on a stream, then waited for.
        let mut s = null_mut();
        assert_eq!(cuStreamCreate(&mut s, 0), CUDA_SUCCESS);
        assert_eq!(cuMemcpyHtoDAsync_v2(d, h, 4 * n, s), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoHAsync_v2(h.cast::<u32>().add(n / 2).cast(), d, 4 * 4, s),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(host[n / 2..n / 2 + 4], [0, 1, 2, 3]);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        // A kernel works on the memory in place.
        let mut dp: CUdeviceptr = 0;
        assert_eq!(
            cuMemHostGetDevicePointer_v2(&mut dp, h.cast::<u32>().add(4).cast(), 0),
            CUDA_SUCCESS
        );
        let mut count = 8u32;
        let mut params = add1_args(&mut dp, &mut count);
        let r = cuLaunchKernel(
            f,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            null_mut(),
        );
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        assert_eq!(host[..14], [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 12, 13]);
        // Bad input.
        let mut local = 0u32;
        let not_pinned = (&mut local as *mut u32).cast();
        assert_eq!(
            cuMemHostGetDevicePointer_v2(&mut dp, not_pinned, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuMemHostGetDevicePointer_v2(&mut dp, h, 1),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuMemHostGetDevicePointer_v2(null_mut(), h, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        let mut h2: *mut c_void = null_mut();
        assert_eq!(cuMemHostAlloc(&mut h2, 64, 0x80), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemHostAlloc(&mut h2, 0, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemHostAlloc(null_mut(), 64, 0), CUDA_ERROR_INVALID_VALUE);
        // Up to the last byte.
        assert_eq!(
            cuMemcpyDtoH_v2(h.cast::<u32>().add(n - 2).cast(), d, 4 * 2),
            CUDA_SUCCESS
        );
        assert_eq!(host[n - 2..], [0, 1]);
        assert_eq!(cuMemFree_v2(d), CUDA_SUCCESS);
        assert_eq!(cuMemFreeHost(h), CUDA_SUCCESS);
        assert_eq!(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            cuMemHostGetDevicePointer_v2(&mut dp, h, 0),
            CUDA_ERROR_INVALID_VALUE
        );
    }
}

#[test]
fn add1_through_kernel_params_and_extra() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let n: u32 = 1000;
    let data: Vec<u32> = (0..n).collect();
    let mut p = alloc_with(&data);
    let mut nn = n;
    let mut params = add1_args(&mut p, &mut nn);
    // SAFETY: a function handle, pointers to locals that live through the calls.
    unsafe {
        let r = cuLaunchKernel(
            f,
            4,
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
        assert_eq!(read_back(p, n as usize), (1..=n).collect::<Vec<_>>());
        // The packed form: u64 pointer at 0, u32 at 8, 12 bytes (room for the sizes below).
        let mut buf = vec![0u8; 40_000];
        buf[..8].copy_from_slice(&p.to_le_bytes());
        buf[8..12].copy_from_slice(&n.to_le_bytes());
        let size: *mut usize = Box::into_raw(Box::new(12));
        let mut extra = [
            CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            buf.as_mut_ptr().cast(),
            CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            size.cast(),
            CU_LAUNCH_PARAM_END as *mut c_void,
        ];
        let r = cuLaunchKernel(
            f,
            4,
            1,
            1,
            256,
            1,
            1,
            0,
            null_mut(),
            null_mut(),
            extra.as_mut_ptr(),
        );
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(read_back(p, n as usize), (2..=n + 1).collect::<Vec<_>>());
        // Other sizes answer as NVIDIA's library does (seen on the H200): none, or more than
        // the parameter space, is invalid; longer than the parameters is out of resources; a
        // short one launches (the rest reads as zeros here: n = 0, nothing changes).
        for (bytes, want) in [
            (0, CUDA_ERROR_INVALID_VALUE),
            (13, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES),
            (16, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES),
            (32764, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES),
            (32768, CUDA_ERROR_INVALID_VALUE),
            (8, CUDA_SUCCESS),
        ] {
            *size = bytes;
            let r = cuLaunchKernel(
                f,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                null_mut(),
                null_mut(),
                extra.as_mut_ptr(),
            );
            assert_eq!(r, want, "extra buffer of {bytes} bytes");
        }
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        assert_eq!(read_back(p, n as usize), (2..=n + 1).collect::<Vec<_>>());
        // Neither, and both.
        let r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, null_mut(), null_mut(), null_mut());
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
        let r = cuLaunchKernel(
            f,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            extra.as_mut_ptr(),
        );
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
        let r = cuLaunchKernel(
            f,
            0,
            1,
            1,
            32,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            null_mut(),
        );
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
        drop(Box::from_raw(size));
    }
}

#[test]
fn function_attributes_and_lookups() {
    let _g = setup();
    context();
    let (m, f) = add1();
    let mut p = alloc_with(&[0; 32]);
    let mut nn: u32 = 32;
    let mut params = add1_args(&mut p, &mut nn);
    // SAFETY: handles from the driver, pointers to locals that live through the calls.
    unsafe {
        // Function attributes.
        let mut v = 0;
        assert_eq!(
            cuFuncGetAttribute(&mut v, CU_FUNC_ATTRIBUTE_NUM_REGS, f),
            CUDA_SUCCESS
        );
        assert!(v > 0);
        assert_eq!(
            cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuFuncGetAttribute(&mut v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            0
        );
        assert_eq!(v, 65536);
        assert_eq!(
            cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 30),
            CUDA_ERROR_INVALID_VALUE
        );
        // An unknown kernel, a stale module.
        let mut g = null_mut();
        assert_eq!(
            cuModuleGetFunction(&mut g, m, c"nope".as_ptr()),
            CUDA_ERROR_NOT_FOUND
        );
        assert_eq!(cuModuleUnload(m), CUDA_SUCCESS);
        assert_eq!(
            cuModuleGetFunction(&mut g, m, c"add1".as_ptr()),
            CUDA_ERROR_INVALID_HANDLE
        );
        let r = cuLaunchKernel(
            f,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            null_mut(),
        );
        assert_eq!(r, CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

#[test]
fn streams_and_events() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let mut p = alloc_with(&[0; 256]);
    let mut n: u32 = 256;
    let mut params = add1_args(&mut p, &mut n);
    let (mut s1, mut s2, mut e0, mut e1) = (null_mut(), null_mut(), null_mut(), null_mut());
    let mut ms = -1.0f32;
    // SAFETY: handles from the driver and pointers to locals.
    unsafe {
        assert_eq!(cuStreamCreate(&mut s1, 0), CUDA_SUCCESS);
        assert_eq!(
            cuStreamCreate(&mut s2, CU_STREAM_NON_BLOCKING),
            CUDA_SUCCESS
        );
        assert_eq!(cuEventCreate(&mut e0, 0), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut e1, 0), CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e0), CUDA_SUCCESS, "never recorded: complete");
        assert_eq!(cuEventRecord(e0, s1), CUDA_SUCCESS);
        assert_eq!(
            cuLaunchKernel(
                f,
                1,
                1,
                1,
                256,
                1,
                1,
                0,
                s1,
                params.as_mut_ptr(),
                null_mut()
            ),
            0
        );
        assert_eq!(cuEventRecord(e1, s1), CUDA_SUCCESS);
        // s2 runs after s1's launch: its add1 sees s1's result.
        assert_eq!(cuStreamWaitEvent(s2, e1, 0), CUDA_SUCCESS);
        assert_eq!(
            cuLaunchKernel(
                f,
                1,
                1,
                1,
                256,
                1,
                1,
                0,
                s2,
                params.as_mut_ptr(),
                null_mut()
            ),
            0
        );
        assert_eq!(cuStreamSynchronize(s2), CUDA_SUCCESS);
        assert_eq!(cuEventSynchronize(e1), CUDA_SUCCESS);
        assert_eq!(cuEventElapsedTime(&mut ms, e0, e1), CUDA_SUCCESS);
        // The GPU's times where it reached each event: the kernel between them took some.
        assert!(ms > 0.0, "{ms}");
        let mut back = 0.0f32;
        assert_eq!(cuEventElapsedTime(&mut back, e1, e0), CUDA_SUCCESS);
        assert_eq!(back, -ms, "reversed, the same span negative (as CUDA's)");
        assert_eq!(cuStreamQuery(s1), CUDA_SUCCESS);
        assert_eq!(read_back(p, 256), vec![2; 256]);
        // Bad handles.
        let bogus = 0xdead_0000usize as *mut c_void;
        assert_eq!(cuStreamSynchronize(bogus), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuEventQuery(bogus), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(
            cuEventElapsedTime(&mut ms, e0, bogus),
            CUDA_ERROR_INVALID_HANDLE
        );
        let mut e2 = null_mut();
        assert_eq!(
            cuEventCreate(&mut e2, CU_EVENT_DISABLE_TIMING),
            CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(e2, s1), CUDA_SUCCESS);
        assert_eq!(
            cuEventElapsedTime(&mut ms, e0, e2),
            CUDA_ERROR_INVALID_HANDLE
        );
        for e in [e0, e1, e2] {
            assert_eq!(cuEventDestroy_v2(e), CUDA_SUCCESS);
        }
        assert_eq!(cuEventDestroy_v2(e0), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s2), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

#[test]
fn images_that_do_not_load() {
    let _g = setup();
    context();
    let ptx = c".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
    let mut m = null_mut();
    let mut log = [0u8; 256];
    let mut opts = [CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    let mut vals = [log.as_mut_ptr().cast::<c_void>(), 256usize as *mut c_void];
    // SAFETY: NUL-terminated text, option arrays of 2, out-pointers to locals.
    unsafe {
        assert_eq!(
            cuModuleLoadData(&mut m, ptx.as_ptr().cast()),
            CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        );
        let r = cuModuleLoadDataEx(
            &mut m,
            ptx.as_ptr().cast(),
            2,
            opts.as_mut_ptr(),
            vals.as_mut_ptr(),
        );
        assert_eq!(r, CUDA_ERROR_JIT_COMPILER_NOT_FOUND);
        let text = CStr::from_ptr(log.as_ptr().cast()).to_str().unwrap();
        assert!(text.contains("nvJitLink"), "{text}");
        assert_eq!(
            cuModuleLoadData(&mut m, c"not an image".as_ptr().cast()),
            CUDA_ERROR_INVALID_IMAGE
        );
        assert_eq!(cuModuleLoadData(&mut m, null()), CUDA_ERROR_INVALID_VALUE);
        // A cubin for another SM.
        let other = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/cubins/kernels_sm80_cuda13.cubin"
        ))
        .unwrap();
        let r = cuModuleLoadData(&mut m, other.as_ptr().cast());
        assert_ne!(r, CUDA_SUCCESS);
    }
}

#[test]
fn names_strings_and_proc_addresses() {
    let _g = setup();
    let mut s: *const c_char = null();
    let mut pfn: *mut c_void = null_mut();
    let mut status = -1;
    // SAFETY: out-pointers to locals; the strings returned are static.
    unsafe {
        assert_eq!(
            cuGetErrorName(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, &mut s),
            CUDA_SUCCESS
        );
        assert_eq!(
            CStr::from_ptr(s).to_str().unwrap(),
            "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"
        );
        assert_eq!(
            cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &mut s),
            CUDA_SUCCESS
        );
        assert_eq!(CStr::from_ptr(s).to_str().unwrap(), "invalid argument");
        assert_eq!(cuGetErrorName(4242, &mut s), CUDA_ERROR_INVALID_VALUE);
        assert!(s.is_null());
        assert_eq!(
            cuGetProcAddress_v2(c"cuMemAlloc".as_ptr(), &mut pfn, 12000, 0, &mut status),
            0
        );
        assert_eq!(pfn as usize, cuMemAlloc_v2 as *const () as usize);
        assert_eq!(status, CU_GET_PROC_ADDRESS_SUCCESS);
        assert_eq!(
            cuGetProcAddress(c"cuLaunchKernel".as_ptr(), &mut pfn, 12000, 0),
            0
        );
        assert_eq!(pfn as usize, cuLaunchKernel as *const () as usize);
        assert_eq!(
            cuGetProcAddress(c"cuCtxCreate".as_ptr(), &mut pfn, 13000, 0),
            0
        );
        assert_eq!(pfn as usize, cuCtxCreate_v4 as *const () as usize);
        let r = cuGetProcAddress_v2(c"cuNoSuchThing".as_ptr(), &mut pfn, 12000, 0, &mut status);
        assert_eq!(r, CUDA_ERROR_NOT_FOUND);
        assert_eq!(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        assert!(pfn.is_null());
        // Found but not implemented: the stub answers NOT_SUPPORTED.
        let r = cuGetProcAddress(c"cuMemcpy2D".as_ptr(), &mut pfn, 12000, 0);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(pfn as usize, cuMemcpy2D_v2 as *const () as usize);
        assert_eq!(cuMemcpy2D_v2(), CUDA_ERROR_NOT_SUPPORTED);
        let r = cuGetProcAddress(c"cuGraphInstantiate".as_ptr(), &mut pfn, 12000, 0);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(
            pfn as usize,
            cuGraphInstantiateWithFlags as *const () as usize
        );
    }
}

#[test]
fn a_two_node_graph_replays_and_updates() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let mut p = alloc_with(&(0..64).collect::<Vec<u32>>());
    let mut n: u32 = 64;
    let mut params = add1_args(&mut p, &mut n);
    let mut out = vec![0u32; 64];
    let kp = add1_node(f, &mut params);
    // SAFETY: an all-zero CUDA_MEMCPY3D is valid (null pointers, zero sizes).
    let mut cp: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = p;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = out.as_mut_ptr().cast();
    cp.WidthInBytes = 64 * 4;
    cp.Height = 1;
    cp.Depth = 1;
    let (mut g, mut k, mut c, mut e) = (null_mut(), null_mut(), null_mut(), null_mut());
    // SAFETY: handles from the driver; params and buffers that outlive the graph.
    unsafe {
        assert_eq!(cuGraphCreate(&mut g, 0), CUDA_SUCCESS);
        assert_eq!(
            cuGraphAddKernelNode(&mut k, g, null(), 0, &kp),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuGraphAddMemcpyNode(&mut c, g, &k, 1, &cp, null_mut()),
            CUDA_SUCCESS
        );
        let bogus = 0xdead_0000usize as CUgraphNode;
        let r = cuGraphAddMemcpyNode(&mut c, g, &bogus, 1, &cp, null_mut());
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuGraphInstantiateWithFlags(&mut e, g, 0), CUDA_SUCCESS);
        assert!(!exec_is_written(e), "a memcpy node: launched node by node");
        assert_eq!(cuGraphLaunch(e, null_mut()), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e, null_mut()), CUDA_SUCCESS);
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        assert_eq!(out, (2..66).collect::<Vec<u32>>());
        // The arguments were captured at add time; an exec update changes them (n = 32).
        let mut half: u32 = 32;
        let mut params2 = add1_args(&mut p, &mut half);
        let kp2 = CUDA_KERNEL_NODE_PARAMS {
            kernelParams: params2.as_mut_ptr(),
            ..kp
        };
        assert_eq!(cuGraphExecKernelNodeSetParams(e, k, &kp2), CUDA_SUCCESS);
        assert_eq!(
            cuGraphExecKernelNodeSetParams(e, c, &kp2),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuGraphLaunch(e, null_mut()), CUDA_SUCCESS);
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        let want: Vec<u32> = (0..64)
            .map(|i| if i < 32 { i + 3 } else { i + 2 })
            .collect();
        assert_eq!(out, want);
        assert_eq!(cuGraphExecDestroy(e), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e, null_mut()), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

#[test]
fn a_graph_of_kernels_is_written_once_and_its_updates_apply_from_the_next_launch() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let mut p = alloc_with(&[0u32; 64]);
    let mut n: u32 = 64;
    let mut params = add1_args(&mut p, &mut n);
    let kp = add1_node(f, &mut params);
    let (mut g, mut e) = (null_mut(), null_mut());
    let mut nodes = [null_mut(); 3];
    // SAFETY: handles from the driver; params and buffers that outlive the graph.
    unsafe {
        assert_eq!(cuGraphCreate(&mut g, 0), CUDA_SUCCESS);
        assert_eq!(
            cuGraphAddKernelNode(&mut nodes[0], g, null(), 0, &kp),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuGraphAddEmptyNode(&mut nodes[1], g, &nodes[0], 1),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuGraphAddKernelNode(&mut nodes[2], g, &nodes[1], 1, &kp),
            CUDA_SUCCESS
        );
        assert_eq!(cuGraphInstantiateWithFlags(&mut e, g, 0), CUDA_SUCCESS);
        assert!(
            exec_is_written(e),
            "kernel and empty nodes: one chained submission"
        );
        for _ in 0..5 {
            assert_eq!(cuGraphLaunch(e, null_mut()), CUDA_SUCCESS);
        }
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        assert_eq!(read_back(p, 64), vec![10u32; 64]);
        // The same parameters again (tinygrad sets every node's before each launch), then
        // the last node on the first half only.
        assert_eq!(
            cuGraphExecKernelNodeSetParams(e, nodes[0], &kp),
            CUDA_SUCCESS
        );
        let mut half: u32 = 32;
        let mut params2 = add1_args(&mut p, &mut half);
        let kp2 = CUDA_KERNEL_NODE_PARAMS {
            kernelParams: params2.as_mut_ptr(),
            ..kp
        };
        assert_eq!(
            cuGraphExecKernelNodeSetParams(e, nodes[2], &kp2),
            CUDA_SUCCESS
        );
        assert!(exec_is_written(e));
        assert_eq!(cuGraphLaunch(e, null_mut()), CUDA_SUCCESS);
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
        let want: Vec<u32> = (0..64).map(|i| if i < 32 { 12 } else { 11 }).collect();
        assert_eq!(read_back(p, 64), want);
        // An empty node is not a kernel node.
        assert_eq!(
            cuGraphExecKernelNodeSetParams(e, nodes[1], &kp2),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuGraphExecDestroy(e), CUDA_SUCCESS);
        assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

#[test]
fn module_globals_by_name() {
    let _g = setup();
    context();
    let (m, _) = add1();
    let (mut p, mut n): (CUdeviceptr, usize) = (0, 0);
    // SAFETY: out-pointers to locals (or null, which CUDA allows), NUL-terminated names.
    unsafe {
        assert_eq!(
            cuModuleGetGlobal_v2(&mut p, &mut n, m, c"spin_forever_release".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(n, 4);
        assert_ne!(p, 0);
        // Either out-pointer may be null; the same variable answers the same.
        let mut q = 0;
        assert_eq!(
            cuModuleGetGlobal_v2(&mut q, null_mut(), m, c"spin_forever_release".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(q, p);
        let mut k = 0;
        assert_eq!(
            cuModuleGetGlobal_v2(null_mut(), &mut k, m, c"spin_forever_release".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(k, 4);
        // Copies and memsets take its address like an allocation's.
        assert_eq!(read_back(p, 1), [0]);
        let v = 41u32;
        assert_eq!(cuMemcpyHtoD_v2(p, (&raw const v).cast(), 4), CUDA_SUCCESS);
        assert_eq!(read_back(p, 1), [41]);
        assert_eq!(cuMemsetD32_v2(p, 5, 1), CUDA_SUCCESS);
        assert_eq!(read_back(p, 1), [5]);
        // Not an allocation: cuMemFree refuses it.
        assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
        // A missing name, a null name, a stale module.
        assert_eq!(
            cuModuleGetGlobal_v2(&mut p, &mut n, m, c"nope".as_ptr()),
            CUDA_ERROR_NOT_FOUND
        );
        assert_eq!(
            cuModuleGetGlobal_v2(&mut p, &mut n, m, null()),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuModuleUnload(m), CUDA_SUCCESS);
        assert_eq!(
            cuModuleGetGlobal_v2(&mut q, &mut n, m, c"spin_forever_release".as_ptr()),
            CUDA_ERROR_INVALID_HANDLE
        );
        // The unloaded module's variable is no longer memory.
        let mut out = 0u32;
        assert_eq!(
            cuMemcpyDtoH_v2((&raw mut out).cast(), p, 4),
            CUDA_ERROR_INVALID_VALUE
        );
    }
}
