//! Graphs as a recorded list of launches and copies, run in the order the nodes were added (a
//! valid order: a node's dependencies must exist before it) on the stream a launch names.
//! Kernel and 1-D memcpy nodes, empty nodes, instantiate, launch, and the exec-update of
//! kernel and memcpy nodes. An exec of kernel and empty nodes is also an [`nvbare::Graph`]
//! (its launches written once on the device, launched as one chained submission where the
//! stream is idle); other execs are replayed node by node.

use std::ffi::{c_char, c_uint, c_void};
use std::sync::{Arc, Mutex};

use nvbare::Stream;
use nvbare_core::device::Arg;

use super::capture::capturing;
use super::launch::Launch;
use super::memory::{dtod, dtoh, htod, memset};
use super::{handle, id, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuResult, err, null};
use crate::state;

/// A 1-D copy: host addresses are the caller's, read or written when the graph runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Copy1d {
    /// Host to device.
    HtoD { dst: CUdeviceptr, src: usize },
    /// Device to host.
    DtoH { dst: usize, src: CUdeviceptr },
    /// Device to device.
    DtoD { dst: CUdeviceptr, src: CUdeviceptr },
}

/// What a node does.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// Nothing (an empty node orders others).
    Empty,
    /// A launch.
    Kernel(Launch),
    /// A copy of `bytes`.
    Memcpy(Copy1d, usize),
    /// `count` elements of a 1-, 2- or 4-byte pattern at `dst` (captured cuMemsetD*Async).
    Memset {
        /// Where.
        dst: CUdeviceptr,
        /// The element's bytes.
        pattern: Vec<u8>,
        /// Elements.
        count: usize,
    },
}

/// A graph, or an instantiated one: nodes by handle, in the order they were added.
#[derive(Debug, Default)]
pub(crate) struct GraphObj {
    /// `(node handle, work)`.
    pub nodes: Mutex<Vec<(usize, Work)>>,
    /// An instantiated graph of kernel (and empty) nodes of one device: its launches written
    /// once on the device ([`nvbare::Graph`]), launched as one chained submission. `None`:
    /// launched node by node.
    pub written: Mutex<Option<Written>>,
}

/// An exec's kernel nodes as an [`nvbare::Graph`].
#[derive(Debug)]
pub(crate) struct Written {
    graph: nvbare::Graph,
    /// For each of the exec's nodes in order, its launch in `graph` (`None`: an empty node).
    index: Vec<Option<usize>>,
}

/// The exec's nodes as one [`nvbare::Graph`], if they are kernels (at least one) and empty
/// nodes; `None` (launched node by node) otherwise, or if the device refuses the graph.
fn written(nodes: &[(usize, Work)]) -> Option<Written> {
    let mut launches = Vec::new();
    let mut index = Vec::with_capacity(nodes.len());
    for (_, w) in nodes {
        match w {
            Work::Empty => index.push(None),
            Work::Kernel(l) => {
                index.push(Some(launches.len()));
                launches.push(l);
            }
            _ => return None,
        }
    }
    let args: Vec<Vec<Arg<'_>>> = launches.iter().map(|l| l.arg_list()).collect();
    let list: Vec<nvbare::GraphLaunch<'_>> = launches
        .iter()
        .zip(&args)
        .map(|(l, a)| (&l.func.func, l.cfg, &a[..]))
        .collect();
    if list.is_empty() {
        return None;
    }
    match nvbare::Graph::new(&list) {
        Ok(graph) => Some(Written { graph, index }),
        Err(e) => {
            if crate::verbose() {
                eprintln!("nvbare libcuda: a graph is launched node by node: {e}");
            }
            None
        }
    }
}

fn graph_of(g: CUgraph) -> CuResult<Arc<GraphObj>> {
    state::get(|o| &o.graphs, id(g), "graph")
}

fn exec_of(g: CUgraphExec) -> CuResult<Arc<GraphObj>> {
    state::get(|o| &o.execs, id(g), "graph exec")
}

/// Whether exec `e` is launched as one written graph (one chained submission) rather than
/// node by node: for tests.
#[doc(hidden)]
pub fn exec_is_written(e: CUgraphExec) -> bool {
    exec_of(e).is_ok_and(|e| e.written.lock().is_ok_and(|w| w.is_some()))
}

/// Checks the dependencies are nodes of `g`.
///
/// # Safety
///
/// `deps` is null or holds `n` node handles.
unsafe fn check_deps(g: &GraphObj, deps: *const CUgraphNode, n: usize) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    if deps.is_null() || n > 1 << 20 {
        return Err(err(CUDA_ERROR_INVALID_VALUE, format!("{n} dependencies")));
    }
    // SAFETY: `n` handles by this function's contract.
    let deps = unsafe { std::slice::from_raw_parts(deps, n) };
    let nodes = g.nodes.lock().unwrap_or_else(|e| e.into_inner());
    for d in deps {
        if !nodes.iter().any(|(h, _)| *h == id(*d)) {
            return Err(err(
                CUDA_ERROR_INVALID_VALUE,
                format!("dependency {:#x}", id(*d)),
            ));
        }
    }
    Ok(())
}

/// Adds `work` to `g` after checking the dependencies; writes the node's handle.
///
/// # Safety
///
/// `ph` null or valid for a write; `deps` as [`check_deps`].
unsafe fn add(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    work: impl FnOnce() -> CuResult<Work>,
) -> CuResult<()> {
    state::driver()?;
    if ph.is_null() {
        return Err(null("phGraphNode"));
    }
    let g = graph_of(g)?;
    // SAFETY: the caller's dependency array.
    unsafe { check_deps(&g, deps, n)? };
    let w = work()?;
    let h = state::objects().handle();
    g.nodes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((h, w));
    // SAFETY: the caller's out-pointer (checked non-null above).
    unsafe { put(ph, handle(h), "phGraphNode") }
}

/// A kernel node's launch, from the fields `CUDA_KERNEL_NODE_PARAMS` and `_v2` share.
///
/// # Safety
///
/// `p` null or a `CUDA_KERNEL_NODE_PARAMS` (v1 or v2) with valid argument arrays.
unsafe fn kernel(p: *const CUDA_KERNEL_NODE_PARAMS) -> CuResult<Work> {
    // SAFETY: the caller's params; v2 begins with v1's fields.
    let p = unsafe { super::get(p, "nodeParams")? };
    let grid = [p.gridDimX, p.gridDimY, p.gridDimZ];
    let block = [p.blockDimX, p.blockDimY, p.blockDimZ];
    // SAFETY: the node's argument arrays (cuGraphAddKernelNode's contract).
    let l = unsafe {
        Launch::new(
            p.func,
            grid,
            block,
            p.sharedMemBytes,
            p.kernelParams,
            p.extra,
        )?
    };
    Ok(Work::Kernel(l))
}

/// A memcpy node's copy: 1-D only (one row, one slice), between host and device memory.
///
/// # Safety
///
/// `p` null or a `CUDA_MEMCPY3D`.
unsafe fn memcpy(p: *const CUDA_MEMCPY3D) -> CuResult<Work> {
    // SAFETY: the caller's params.
    let c = unsafe { super::get(p, "copyParams")? };
    let flat =
        c.Height <= 1 && c.Depth <= 1 && c.srcY == 0 && c.srcZ == 0 && c.dstY == 0 && c.dstZ == 0;
    if !flat {
        return Err(err(
            CUDA_ERROR_NOT_SUPPORTED,
            "memcpy nodes of more than one row",
        ));
    }
    let dev = |t| t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED;
    let (sx, dx) = (c.srcXInBytes, c.dstXInBytes);
    let copy = match (c.srcMemoryType, c.dstMemoryType) {
        (CU_MEMORYTYPE_HOST, d) if dev(d) => Copy1d::HtoD {
            dst: c.dstDevice.wrapping_add(dx as u64),
            src: (c.srcHost as usize).wrapping_add(sx),
        },
        (s, CU_MEMORYTYPE_HOST) if dev(s) => Copy1d::DtoH {
            dst: (c.dstHost as usize).wrapping_add(dx),
            src: c.srcDevice.wrapping_add(sx as u64),
        },
        (s, d) if dev(s) && dev(d) => Copy1d::DtoD {
            dst: c.dstDevice.wrapping_add(dx as u64),
            src: c.srcDevice.wrapping_add(sx as u64),
        },
        (s, d) => {
            return Err(err(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("memcpy node from memory type {s} to {d}"),
            ));
        }
    };
    Ok(Work::Memcpy(copy, c.WidthInBytes))
}

/// Runs one node on `s`.
fn run(w: &Work, s: &Stream) -> CuResult<()> {
    match w {
        Work::Empty => Ok(()),
        Work::Kernel(l) => l.submit(s),
        Work::Memcpy(Copy1d::HtoD { dst, src }, n) => {
            // SAFETY: the host memory the node was given, which the caller keeps valid while
            // the graph may run (cuGraphAddMemcpyNode's contract).
            htod(
                *dst,
                unsafe { super::host(*src as *const c_void, *n, "srcHost")? },
                s,
            )
        }
        Work::Memcpy(Copy1d::DtoH { dst, src }, n) => {
            // SAFETY: as above, for the destination.
            dtoh(
                unsafe { super::host_mut(*dst as *mut c_void, *n, "dstHost")? },
                *src,
                s,
            )
            .map(drop)
        }
        Work::Memcpy(Copy1d::DtoD { dst, src }, n) => dtod(*dst, *src, *n, s),
        Work::Memset {
            dst,
            pattern,
            count,
        } => memset(*dst, pattern, *count, s),
    }
}

/// Replaces node `node`'s work in exec `e` with `w`, if it is a node of the same kind (and in
/// the exec's written graph, if it has one and the launch changed).
fn set_exec_node(e: CUgraphExec, node: CUgraphNode, w: Work) -> CuResult<()> {
    let e = exec_of(e)?;
    let mut nodes = e.nodes.lock().unwrap_or_else(|p| p.into_inner());
    let at = nodes
        .iter()
        .position(|(h, _)| *h == id(node))
        .ok_or_else(|| {
            err(
                CUDA_ERROR_INVALID_VALUE,
                format!("node {:#x} is not in the graph", id(node)),
            )
        })?;
    let old = &nodes[at].1;
    if std::mem::discriminant(old) != std::mem::discriminant(&w) {
        return Err(err(CUDA_ERROR_INVALID_VALUE, "the node is of another kind"));
    }
    let mut written = e.written.lock().unwrap_or_else(|p| p.into_inner());
    let changed = match (old, &w) {
        (Work::Kernel(old), Work::Kernel(new)) => (!old.same(new)).then_some(new),
        _ => None,
    };
    if let (Some(l), Some(wr)) = (changed, written.as_mut())
        && let Some(Some(i)) = wr.index.get(at)
        && let Err(e) = wr.graph.set_launch(*i, &l.func.func, l.cfg, &l.arg_list())
    {
        // Launched node by node from now on (the node itself is checked when it runs).
        if crate::verbose() {
            eprintln!("nvbare libcuda: a graph is launched node by node from now: {e}");
        }
        *written = None;
    }
    nodes[at].1 = w;
    Ok(())
}

/// Instantiates `g`: a snapshot of its nodes.
fn instantiate(pexec: *mut CUgraphExec, g: CUgraph) -> CuResult<()> {
    state::driver()?;
    let g = graph_of(g)?;
    if pexec.is_null() {
        return Err(null("phGraphExec"));
    }
    let nodes = g.nodes.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let written = written(&nodes);
    let mut o = state::objects();
    let h = o.handle();
    o.execs.insert(
        h,
        Arc::new(GraphObj {
            nodes: Mutex::new(nodes),
            written: Mutex::new(written),
        }),
    );
    drop(o);
    // SAFETY: the caller's out-pointer (checked non-null above).
    unsafe { put(pexec, handle(h), "phGraphExec") }
}

entry! {
    fn cuGraphCreate(ph: *mut CUgraph, flags: c_uint) {
        let _ = flags;
        state::driver()?;
        if ph.is_null() {
            return Err(null("phGraph"));
        }
        let mut o = state::objects();
        let h = o.handle();
        o.graphs.insert(h, Arc::new(GraphObj::default()));
        drop(o);
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(ph, handle(h), "phGraph") }
    }

    fn cuGraphAddEmptyNode(ph: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize) {
        // SAFETY: the caller's arguments.
        unsafe { add(ph, g, deps, n, || Ok(Work::Empty)) }
    }

    /// The arguments are captured now, as CUDA does.
    fn cuGraphAddKernelNode(
        ph: *mut CUgraphNode,
        g: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *const CUDA_KERNEL_NODE_PARAMS,
    ) {
        // SAFETY: the caller's arguments.
        unsafe { add(ph, g, deps, n, || kernel(params)) }
    }

    /// CUDA 12's `cuGraphAddKernelNode` (`CUDA_KERNEL_NODE_PARAMS_v2`: `kern` and `ctx` unused).
    fn cuGraphAddKernelNode_v2(
        ph: *mut CUgraphNode,
        g: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *const CUDA_KERNEL_NODE_PARAMS_v2,
    ) {
        // SAFETY: the caller's arguments; v2 starts with v1's fields.
        unsafe { add(ph, g, deps, n, || kernel(params.cast())) }
    }

    fn cuGraphAddMemcpyNode(
        ph: *mut CUgraphNode,
        g: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *const CUDA_MEMCPY3D,
        ctx: CUcontext,
    ) {
        let _ = ctx;
        // SAFETY: the caller's arguments.
        unsafe { add(ph, g, deps, n, || memcpy(params)) }
    }

    fn cuGraphInstantiateWithFlags(pexec: *mut CUgraphExec, g: CUgraph, flags: u64) {
        let _ = flags;
        instantiate(pexec, g)
    }

    /// The CUDA 11 form (error node and log unused: instantiation cannot fail on a node).
    fn cuGraphInstantiate_v2(
        pexec: *mut CUgraphExec,
        g: CUgraph,
        error_node: *mut CUgraphNode,
        log: *mut c_char,
        log_size: usize,
    ) {
        let _ = (error_node, log, log_size);
        instantiate(pexec, g)
    }

    /// Replays the nodes on `stream`, in order (into a capturing stream: appends them).
    fn cuGraphLaunch(e: CUgraphExec, stream: CUstream) {
        let e = exec_of(e)?;
        if let Some(c) = capturing(stream)? {
            let nodes = e.nodes.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return c.add(|| Ok(nodes.into_iter().map(|(_, w)| w).collect()));
        }
        let s = state::stream_of(stream)?;
        if let Some(w) = e.written.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            match s.launch_graph(&w.graph) {
                // A stream of another device: node by node below.
                Err(nvbare::Error::ForeignObject(_)) => {}
                r => return Ok(r?),
            }
        }
        // Held while the nodes are queued (an exec update of this graph from another thread
        // waits): no copy of the nodes per launch.
        let nodes = e.nodes.lock().unwrap_or_else(|p| p.into_inner());
        // No flush at the end: published at once, each graph's kernels start a batch of
        // their own, and tinygrad's queued JIT steps ran slower that way (docs/performance.md).
        nodes.iter().try_for_each(|(_, w)| run(w, &s))
    }

    /// The nodes in the order they were added; with `nodes` null, only their count.
    fn cuGraphGetNodes(g: CUgraph, nodes: *mut CUgraphNode, num: *mut usize) {
        state::driver()?;
        let g = graph_of(g)?;
        if num.is_null() {
            return Err(null("numNodes"));
        }
        let hs: Vec<usize> = g.nodes.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(h, _)| *h).collect();
        if !nodes.is_null() {
            // SAFETY: the caller's in/out count.
            let room = unsafe { super::get(num.cast_const(), "numNodes")? };
            for i in 0..room {
                // SAFETY: `nodes` holds `room` handles (cuda.h); past the graph's nodes, null.
                unsafe { nodes.add(i).write_unaligned(hs.get(i).map_or(std::ptr::null_mut(), |h| handle(*h))) };
            }
        }
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(num, hs.len(), "numNodes") }
    }

    fn cuGraphExecKernelNodeSetParams(e: CUgraphExec, node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS) {
        // SAFETY: the caller's params.
        set_exec_node(e, node, unsafe { kernel(params)? })
    }

    fn cuGraphExecKernelNodeSetParams_v2(e: CUgraphExec, node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS_v2) {
        // SAFETY: the caller's params; v2 starts with v1's fields.
        set_exec_node(e, node, unsafe { kernel(params.cast())? })
    }

    fn cuGraphExecMemcpyNodeSetParams(e: CUgraphExec, node: CUgraphNode, params: *const CUDA_MEMCPY3D, ctx: CUcontext) {
        let _ = ctx;
        // SAFETY: the caller's params.
        set_exec_node(e, node, unsafe { memcpy(params)? })
    }

    fn cuGraphDestroy(g: CUgraph) {
        state::driver()?;
        state::objects().graphs.remove(&id(g)).map(|_| ())
            .ok_or_else(|| err(CUDA_ERROR_INVALID_HANDLE, format!("graph {:#x}", id(g))))
    }

    fn cuGraphExecDestroy(e: CUgraphExec) {
        state::driver()?;
        // Dropped after the object table is unlocked: freeing a written graph waits for the GPU.
        let gone = state::objects().execs.remove(&id(e));
        gone.map(drop)
            .ok_or_else(|| err(CUDA_ERROR_INVALID_HANDLE, format!("graph exec {:#x}", id(e))))
    }
}
