//! Stream capture on the simulated GH100: one stream, and across streams (fork and join).
//! One process, one driver: the tests share its state, so each takes `setup`'s lock.

use std::ffi::{c_uint, c_void};
use std::ptr::null_mut;

use cuda::abi::*;
use cuda::*;

mod common;
use common::{StreamsAndEvents, add1, add1_args, alloc_with, context, read_back, setup};

#[test]
fn stream_capture_records_a_graph() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let mut p = alloc_with(&[0u32; 64]);
    let mut n: u32 = 64;
    let mut params = add1_args(&mut p, &mut n);
    let mut src: Vec<u32> = (100..164).collect();
    let mut out = vec![0u32; 64];
    let (mut s, mut g, mut e) = (null_mut(), null_mut(), null_mut());
    let mut status: c_uint = 9;
    // SAFETY: handles from the driver; buffers that outlive the graph's launches.
    unsafe {
        assert_eq!(cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        // Not capturing: ending is refused, the status says none.
        assert_eq!(cuStreamEndCapture(s, &mut g), CUDA_ERROR_ILLEGAL_STATE);
        assert_eq!(cuStreamIsCapturing(s, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);
        // The default stream cannot capture; a bad mode is refused.
        assert_eq!(
            cuStreamBeginCapture_v2(null_mut(), CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        );
        assert_eq!(cuStreamBeginCapture_v2(s, 7), CUDA_ERROR_INVALID_VALUE);

        assert_eq!(
            cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_ILLEGAL_STATE
        );
        assert_eq!(cuStreamIsCapturing(s, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        // Copy in, add one twice, copy out: recorded, not run.
        assert_eq!(
            cuMemcpyHtoDAsync_v2(p, src.as_ptr().cast(), 256, s),
            CUDA_SUCCESS
        );
        for _ in 0..2 {
            let r = cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, params.as_mut_ptr(), null_mut());
            assert_eq!(r, CUDA_SUCCESS);
        }
        assert_eq!(
            cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), p, 256, s),
            CUDA_SUCCESS
        );
        assert_eq!(read_back(p, 64), vec![0u32; 64]);
        assert_eq!(out, vec![0u32; 64]);
        assert_eq!(cuStreamEndCapture(s, &mut g), CUDA_SUCCESS);
        assert!(!g.is_null());
        let mut count = 0usize;
        assert_eq!(cuGraphGetNodes(g, null_mut(), &mut count), CUDA_SUCCESS);
        assert_eq!(count, 4);
        let mut nodes = [null_mut(); 6];
        let mut room = 6usize;
        assert_eq!(
            cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut room),
            CUDA_SUCCESS
        );
        assert_eq!(room, 4);
        assert!(nodes[..4].iter().all(|h| !h.is_null()) && nodes[4..].iter().all(|h| h.is_null()));

        assert_eq!(cuGraphInstantiateWithFlags(&mut e, g, 0), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(out, (102..166).collect::<Vec<u32>>());
        // The host source is read at launch time, as in CUDA.
        src.copy_from_slice(&(0..64).collect::<Vec<u32>>());
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(out, (2..66).collect::<Vec<u32>>());

        // A graph launched into a capture, then a memset: appended in order.
        let mut g2 = null_mut();
        assert_eq!(
            cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        assert_eq!(cuMemsetD32Async(p, 7, 64, s), CUDA_SUCCESS);
        assert_eq!(cuStreamEndCapture(s, &mut g2), CUDA_SUCCESS);
        assert_eq!(cuGraphGetNodes(g2, null_mut(), &mut count), CUDA_SUCCESS);
        assert_eq!(count, 5);
        let mut e2 = null_mut();
        assert_eq!(cuGraphInstantiateWithFlags(&mut e2, g2, 0), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e2, s), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(out, (2..66).collect::<Vec<u32>>());
        assert_eq!(read_back(p, 64), vec![7u32; 64]);

        // An error during capture invalidates it: the end says so and gives no graph.
        let mut g3 = 0x1234usize as CUgraph;
        assert_eq!(
            cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS
        );
        let r = cuLaunchKernel(f, 0, 1, 1, 64, 1, 1, 0, s, params.as_mut_ptr(), null_mut());
        assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamIsCapturing(s, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        let r = cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, params.as_mut_ptr(), null_mut());
        assert_eq!(r, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(
            cuStreamEndCapture(s, &mut g3),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        assert!(g3.is_null());
        // Waiting on a capturing stream is refused and invalidates; so does a bad address.
        for wait in 0..4 {
            assert_eq!(
                cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
                CUDA_SUCCESS
            );
            let r = match wait {
                0 => cuStreamSynchronize(s),
                1 => cuStreamQuery(s),
                2 => cuCtxSynchronize(),
                _ => cuMemsetD32Async(0xdead_0000, 1, 4, s),
            };
            let want = if wait == 3 {
                CUDA_ERROR_INVALID_VALUE
            } else {
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            };
            assert_eq!(r, want, "wait {wait}");
            let mut gx = null_mut();
            assert_eq!(
                cuStreamEndCapture(s, &mut gx),
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            );
        }
        // The stream works normally afterwards.
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(cuStreamEndCapture(s, null_mut()), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuStreamIsCapturing(s, null_mut()), CUDA_ERROR_INVALID_VALUE);
        for h in [e, e2] {
            assert_eq!(cuGraphExecDestroy(h), CUDA_SUCCESS);
        }
        for h in [g, g2] {
            assert_eq!(cuGraphDestroy(h), CUDA_SUCCESS);
        }
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

/// Capture across streams: a stream that waits for an event recorded in a capture joins it,
/// the origin joins it back, and the graph holds both streams' work.
#[test]
fn stream_capture_across_streams() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let (mut a, mut b) = (alloc_with(&[1u32; 32]), alloc_with(&[0u32; 32]));
    let mut n: u32 = 32;
    let mut pa = add1_args(&mut a, &mut n);
    let mut pb = add1_args(&mut b, &mut n);
    let mut out = vec![0u32; 32];
    let se = StreamsAndEvents::new();
    let ([s0, s1, s2], [e1, e2, _]) = (se.s, se.e);
    let mut g = null_mut();
    let mut status: c_uint = 9;
    let global = CU_STREAM_CAPTURE_MODE_GLOBAL;
    // SAFETY: handles from the driver; buffers and parameters that outlive the launches.
    unsafe {
        let launch = |s: CUstream, p: &mut [*mut c_void; 2]| {
            cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, p.as_mut_ptr(), null_mut())
        };
        // Fork: s0 begins, s1 joins through e1; join: s0 waits for e2 after s1's work.
        assert_eq!(cuStreamBeginCapture_v2(s0, global), CUDA_SUCCESS);
        assert_eq!(launch(s0, &mut pa), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e1, s0), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s1, e1, 0), CUDA_SUCCESS);
        assert_eq!(cuStreamIsCapturing(s1, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        assert_eq!(cuMemsetD32Async(b, 5, 32, s1), CUDA_SUCCESS);
        assert_eq!(launch(s1, &mut pb), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e2, s1), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s0, e2, 0), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), b, 128, s0),
            CUDA_SUCCESS
        );
        // Nothing ran.
        assert_eq!(read_back(a, 1), [1]);
        assert_eq!(cuStreamEndCapture(s0, &mut g), CUDA_SUCCESS);
        assert!(!g.is_null());
        for s in [s0, s1] {
            assert_eq!(cuStreamIsCapturing(s, &mut status), CUDA_SUCCESS);
            assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);
        }
        let mut count = 0usize;
        assert_eq!(cuGraphGetNodes(g, null_mut(), &mut count), CUDA_SUCCESS);
        assert_eq!(count, 4);
        let mut ex = null_mut();
        assert_eq!(cuGraphInstantiateWithFlags(&mut ex, g, 0), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(ex, s2), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s2), CUDA_SUCCESS);
        assert_eq!(read_back(a, 32), vec![2u32; 32]);
        assert_eq!(out, vec![6u32; 32]);
        // After the capture the events are ordinary ones again.
        assert_eq!(cuStreamWaitEvent(s1, e1, 0), CUDA_SUCCESS);
        assert_eq!(cuStreamIsCapturing(s1, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);

        assert_eq!(cuGraphExecDestroy(ex), CUDA_SUCCESS);
        assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(a), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(b), CUDA_SUCCESS);
    }
}

/// The errors of capture across streams: a fork not joined back, an end on the joined stream,
/// waits for an event from outside the capture or from another one, the default stream
/// joining; each invalidates, and the streams work normally afterwards.
#[test]
fn capture_across_streams_refuses_what_cuda_refuses() {
    let _g = setup();
    context();
    let (_m, f) = add1();
    let mut b = alloc_with(&[0u32; 32]);
    let mut n: u32 = 32;
    let mut pb = add1_args(&mut b, &mut n);
    let se = StreamsAndEvents::new();
    let ([s0, s1, s2], [e1, e2, e3]) = (se.s, se.e);
    let mut x = null_mut();
    let mut status: c_uint = 9;
    let global = CU_STREAM_CAPTURE_MODE_GLOBAL;
    // SAFETY: handles from the driver; the buffer and parameters outlive the launches.
    unsafe {
        let launch = |s: CUstream, p: &mut [*mut c_void; 2]| {
            cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, p.as_mut_ptr(), null_mut())
        };
        // A fork not joined back: the end fails, no graph, every stream out of the capture.
        assert_eq!(cuStreamBeginCapture_v2(s0, global), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e1, s0), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s1, e1, 0), CUDA_SUCCESS);
        assert_eq!(launch(s1, &mut pb), CUDA_SUCCESS);
        assert_eq!(
            cuStreamEndCapture(s0, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        );
        assert!(x.is_null());
        assert_eq!(cuStreamIsCapturing(s1, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);
        // Joined back before its last work: still unjoined.
        assert_eq!(cuStreamBeginCapture_v2(s0, global), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e1, s0), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s1, e1, 0), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e2, s1), CUDA_SUCCESS);
        assert_eq!(launch(s1, &mut pb), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s0, e2, 0), CUDA_SUCCESS);
        assert_eq!(
            cuStreamEndCapture(s0, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        );

        // Ended on the joined stream: unmatched, and the capture is invalidated.
        assert_eq!(cuStreamBeginCapture_v2(s0, global), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e1, s0), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s1, e1, 0), CUDA_SUCCESS);
        assert_eq!(
            cuStreamEndCapture(s1, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
        );
        assert_eq!(cuStreamIsCapturing(s0, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        assert_eq!(
            cuStreamEndCapture(s0, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );

        // An event recorded outside the capture: isolation.
        assert_eq!(cuEventRecord(e3, s2), CUDA_SUCCESS);
        assert_eq!(cuStreamBeginCapture_v2(s0, global), CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(s0, e3, 0),
            CUDA_ERROR_STREAM_CAPTURE_ISOLATION
        );
        assert_eq!(
            cuStreamEndCapture(s0, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        // Another capture's event: a merge, refused.
        assert_eq!(cuStreamBeginCapture_v2(s0, global), CUDA_SUCCESS);
        assert_eq!(cuStreamBeginCapture_v2(s2, global), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e1, s0), CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(s2, e1, 0),
            CUDA_ERROR_STREAM_CAPTURE_MERGE
        );
        assert_eq!(
            cuStreamEndCapture(s2, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        // The merge invalidated the event's capture too (as NVIDIA's library does).
        assert_eq!(cuStreamIsCapturing(s0, &mut status), CUDA_SUCCESS);
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        // The default stream cannot join one.
        assert_eq!(
            cuStreamWaitEvent(null_mut(), e1, 0),
            CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        );
        assert_eq!(
            cuStreamEndCapture(s0, &mut x),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );

        // Everything works normally afterwards.
        assert_eq!(launch(s1, &mut pb), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s1), CUDA_SUCCESS);
        assert_eq!(read_back(b, 1), [1]);
        assert_eq!(cuMemFree_v2(b), CUDA_SUCCESS);
    }
}
