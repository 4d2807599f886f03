//! Graphs: a fixed sequence of launches whose commands are written once, into command memory
//! of their own, and launched as one chained submission ([`crate::device::Device::launch_graph`]).
//!
//! Why: a CUDA graph replayed launch by launch rewrites every kernel's constant bank 0 and QMD
//! at each launch (~0.6 µs of CPU per kernel on an H100), and the GPU idles after the first
//! kernel while the rest are written and held for chaining: a synchronized 20-kernel graph
//! took 81.5 µs against 72.7-76.1 with NVIDIA's driver, which writes a graph's commands once
//! (docs/performance.md, "Synchronized graphs: written once"). Here each launch is
//! written as chained launches are (`chain.rs`): every QMD but the last schedules the next
//! (dependent QMD 0), releases nothing and ends its CTAs with a GPU-scope membar; the last
//! releases the stream's timeline with the launch's value and keeps the system-scope membar.
//! A launch of the graph then writes only the last QMD (its release value and semaphore
//! change per launch) and the nodes changed since the copy it uses was written, and submits
//! `[acquires] [shader-cache invalidate if code was loaded] INVALIDATE_SKED_CACHES
//! WAIT_FOR_IDLE SEND_PCAS` for the first QMD: the QMDs sit at addresses that held the
//! graph's QMDs of an earlier launch, which the scheduler may have cached. On an H100 the
//! synchronized 20-kernel graph then took 72.0-73.3 µs against NVIDIA's 72.7-72.8, and the
//! launch call ~1-2 µs instead of ~11.
//!
//! A graph of two launches or more launched on a stream whose compute work is done (and
//! nothing held) goes this way: that is the launch whose latency the program waits for (a
//! synchronized step), and the GPU is idle until it arrives. Behind work still running, a
//! graph of fewer than [`WRITTEN_BEHIND_WORK`] launches is launched launch by launch instead,
//! through the ordinary path, whose automatic deferral chains the launches to that work
//! without the `WAIT_FOR_IDLE` and sked-cache invalidate a submission of its own costs (on an
//! H100, queued 20-kernel graphs of small grids ran at 25.2-26.2 µs per graph written once
//! against 20.9 launch by launch, and queued tinygrad steps at 269 against 265 µs). A larger
//! graph goes written once there too: launch by launch, the CPU writes every launch again
//! (1000-launch graphs of empty kernels queued back to back through libcuda: 1.04 µs per
//! kernel against NVIDIA's 0.79 in a slow-CPU H100 VM), which outweighs one drain of the GPU
//! per graph (written behind work: 0.80 µs per kernel against 0.96 launch by launch and
//! NVIDIA's 0.78, docs/performance.md). A lone launch gets what the latency machinery does
//! for one (written ahead, a repeated call: 3.8 µs synchronized against 5.2 for the written
//! form).
//!
//! The commands are kept twice ([`COPIES`]), used in turn: a launch on an idle stream finds
//! its copy free (its own earlier launches are done), but another stream may still run the
//! graph, and so may the launch before last of a large graph behind running work; a launch
//! whose copy is in use waits for it on the CPU.
//!
//! What follows a graph of two or more kernels on the channel first acquires its value
//! ([`crate::device::chan::Chan::own_wait`], as after a chain): its later grids are scheduled by
//! the engine itself.

use alloc::vec;
use alloc::vec::Vec;

use super::ahead::Image;
use super::chain::ChainPatch;
use crate::channel::qmd::QmdError;
use crate::chip::QmdVersion;
use crate::device::backend::{Backend, GpuMemory, Location, Purpose};
use crate::device::chan::ARENA_ALIGN;
use crate::device::launch::{Built, CallInputs};
use crate::device::module::Arg;
use crate::device::ops::Inner;
use crate::device::qmd::LaunchKey;
use crate::device::{DeviceError, DeviceInfo, DeviceOptions};

/// Copies of a graph's commands, used in turn.
pub(super) const COPIES: usize = 2;

/// Most launches in one graph (a size from the caller, checked before it allocates).
pub const MAX_GRAPH_NODES: usize = 1 << 16;

/// Launches from which a graph goes as one submission even behind work still running (module
/// docs): the GPU's drain before it (a few µs) is then small against writing each launch
/// again on the CPU, and tinygrad's graphs (at most 32 launches) stay chained to the work
/// before them.
pub const WRITTEN_BEHIND_WORK: usize = 128;

/// One launch of a graph, built and checked against its kernel and the device
/// ([`crate::device::Device::graph_node`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphNode {
    /// [`crate::device::Device::id`] of the device it was built for.
    device: u32,
    /// The launch as built (the form write-ahead remembers a launch in).
    image: Image,
    /// The arguments' bytes, for a launch of the graph made launch by launch.
    args: Vec<Vec<u8>>,
}

impl GraphNode {
    /// Launch `l`, built for device `device` from a call with `args`.
    pub(in crate::device) fn new(device: u32, l: &Built<'_>, args: &[Arg<'_>]) -> Self {
        let mut tmp = [0u8; 8];
        GraphNode {
            device,
            image: Image {
                key: l.key,
                desc: *l.desc,
                cb_size: l.cb_size,
                cb: l.cb.to_vec(),
            },
            args: args.iter().map(|a| a.bytes(&mut tmp).to_vec()).collect(),
        }
    }

    fn key(&self) -> LaunchKey {
        self.image.key
    }
}

/// A graph without a borrow of its device ([`crate::device::Device::create_graph`]); free it
/// with [`crate::device::Device::free_graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawGraph {
    pub(in crate::device) device: u32,
    index: usize,
    generation: u32,
}

/// One copy of the commands: what it holds, and the launch that last used it.
#[derive(Debug)]
struct Copy {
    /// Per node, the node's version written there (0: not written).
    written: Vec<u64>,
    /// Channel and timeline value of the launch that last used it.
    last: Option<(usize, u64)>,
}

/// A graph: its launches, where each one's bank and QMD lie in a copy, and the copies.
#[derive(Debug)]
struct GraphRec {
    /// The memory slot holding the copies, and its generation.
    mem: (usize, u32),
    nodes: Vec<GraphNode>,
    /// Per node, bumped when [`Inner::set_graph_node`] changes it.
    versions: Vec<u64>,
    /// Per node, byte offsets of its constant bank 0 and its QMD within a copy.
    layout: Vec<(u64, u64)>,
    /// Bytes of one copy.
    copy_size: u64,
    copies: [Copy; COPIES],
    /// The copy the next launch uses.
    next: usize,
}

/// The device's graphs.
#[derive(Debug)]
pub(super) struct Graphs {
    patch: ChainPatch,
    /// By [`RawGraph::index`], with the generation each index is at.
    recs: Vec<(u32, Option<GraphRec>)>,
    /// Graph launches made.
    pub(super) launched: u64,
    /// Of those, the ones made as one submission of the commands written once.
    pub(super) written: u64,
    /// Graph launches that waited for their copy's previous use.
    pub(super) waited: u64,
}

impl Graphs {
    pub(super) fn new(v: QmdVersion) -> Result<Self, QmdError> {
        Ok(Graphs {
            patch: ChainPatch::new(v)?,
            recs: Vec::new(),
            launched: 0,
            written: 0,
            waited: 0,
        })
    }

    fn get(&self, g: &RawGraph) -> Result<&GraphRec, DeviceError> {
        match self.recs.get(g.index) {
            Some((generation, Some(r))) if *generation == g.generation => Ok(r),
            _ => Err(DeviceError::ForeignObject(
                "graph (freed, or of another device)",
            )),
        }
    }

    fn get_mut(&mut self, g: &RawGraph) -> Result<&mut GraphRec, DeviceError> {
        match self.recs.get_mut(g.index) {
            Some((generation, Some(r))) if *generation == g.generation => Ok(r),
            _ => Err(DeviceError::ForeignObject(
                "graph (freed, or of another device)",
            )),
        }
    }
}

/// Where each node's bank and QMD lie in a copy, and the copy's size.
fn layout(nodes: &[GraphNode], qmd_size: u64) -> Result<(Vec<(u64, u64)>, u64), DeviceError> {
    let qmd = qmd_size.next_multiple_of(ARENA_ALIGN);
    let mut at = 0u64;
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        let cb = u64::from(n.image.cb_size).next_multiple_of(ARENA_ALIGN);
        out.push((at, at + cb));
        at = at
            .checked_add(cb + qmd)
            .filter(|&a| a <= 256 << 20)
            .ok_or_else(|| {
                DeviceError::BadRange(alloc::format!(
                    "a graph of {} launches needs more than 256 MiB of command memory",
                    nodes.len()
                ))
            })?;
    }
    Ok((out, at))
}

impl<B: Backend> Inner<B> {
    /// A graph of `nodes` (checked against the device already): command memory for its copies.
    pub(in crate::device) fn create_graph(
        &mut self,
        info: &DeviceInfo,
        device: u32,
        nodes: Vec<GraphNode>,
    ) -> Result<RawGraph, DeviceError> {
        self.check_alive()?;
        if nodes.is_empty() || nodes.len() > MAX_GRAPH_NODES {
            return Err(DeviceError::BadRange(alloc::format!(
                "a graph of {} launches: give 1 to {MAX_GRAPH_NODES}",
                nodes.len()
            )));
        }
        for n in &nodes {
            if n.device != device {
                return Err(DeviceError::ForeignObject(
                    "graph node (built for another device)",
                ));
            }
            self.slot_va(n.key().slot, n.key().generation)
                .map_err(|_| DeviceError::ForeignObject("module (unloaded)"))?;
        }
        let (layout, copy_size) = layout(&nodes, info.qmd.size() as u64)?;
        let (slot, generation, _) =
            self.alloc_slot(copy_size * COPIES as u64, Location::Host, Purpose::Commands)?;
        let n = nodes.len();
        let rec = GraphRec {
            mem: (slot, generation),
            versions: vec![1; n],
            nodes,
            layout,
            copy_size,
            copies: core::array::from_fn(|_| Copy {
                written: vec![0; n],
                last: None,
            }),
            next: 0,
        };
        let g = &mut self.fast.graphs;
        let index = match g.recs.iter().position(|(_, r)| r.is_none()) {
            Some(i) => i,
            None => {
                g.recs.push((0, None));
                g.recs.len() - 1
            }
        };
        let e = &mut g.recs[index];
        e.0 = e.0.wrapping_add(1);
        e.1 = Some(rec);
        Ok(RawGraph {
            device,
            index,
            generation: e.0,
        })
    }

    /// Replaces launch `index` of graph `g` with `node` (of the same bank size or smaller):
    /// the copies are brought up to date as each is next used.
    pub(in crate::device) fn set_graph_node(
        &mut self,
        g: &RawGraph,
        index: usize,
        node: GraphNode,
    ) -> Result<(), DeviceError> {
        if node.device != g.device {
            return Err(DeviceError::ForeignObject(
                "graph node (built for another device)",
            ));
        }
        let r = self.fast.graphs.get_mut(g)?;
        let n = r.nodes.len();
        let (Some(old), Some(&(cb_off, qmd_off))) = (r.nodes.get_mut(index), r.layout.get(index))
        else {
            return Err(DeviceError::BadRange(alloc::format!(
                "launch {index} of a graph of {n}"
            )));
        };
        if *old == node {
            return Ok(());
        }
        if u64::from(node.image.cb_size) > qmd_off - cb_off {
            return Err(DeviceError::Unsupported(alloc::format!(
                "launch {index}'s new parameters need a {}-byte constant bank 0, more than the \
                 {} the graph was made with: make the graph again",
                node.image.cb_size,
                qmd_off - cb_off
            )));
        }
        *old = node;
        if let Some(v) = r.versions.get_mut(index) {
            *v += 1;
        }
        Ok(())
    }

    /// Frees graph `g` (after the GPU has finished with it).
    pub(in crate::device) fn free_graph(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        g: &RawGraph,
    ) {
        let Some(r) = self
            .fast
            .graphs
            .recs
            .get_mut(g.index)
            .filter(|(generation, _)| *generation == g.generation)
            .and_then(|(_, r)| r.take())
        else {
            return;
        };
        self.release_slot(info, opts, r.mem.0, r.mem.1);
    }

    /// Launches graph `g` on the current stream: as one submission of its first QMD, the
    /// rest chained, when it has two launches or more and the stream's compute work is done,
    /// or [`WRITTEN_BEHIND_WORK`] launches or more; otherwise launch by launch, so that the
    /// launches chain to the work still running or held (automatic deferral) instead of
    /// waiting for it, and a lone launch gets what the latency machinery does for one.
    /// Returns whether it was one submission.
    pub(in crate::device) fn launch_graph(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        g: &RawGraph,
    ) -> Result<bool, DeviceError> {
        self.check_alive()?;
        let r = self.fast.graphs.get(g)?;
        for n in &r.nodes {
            self.slot_va(n.key().slot, n.key().generation)
                .map_err(|_| {
                    DeviceError::ForeignObject("module of a graph's launch (unloaded since)")
                })?;
        }
        let ci = self.compute_ci();
        let n = r.nodes.len();
        let written = n >= WRITTEN_BEHIND_WORK || (n >= 2 && self.compute_idle(ci)?);
        if written {
            self.launch_graph_written(info, opts, g, ci)?;
        } else {
            self.launch_graph_nodes(info, opts, g)?;
        }
        self.fast.graphs.launched += 1;
        Ok(written)
    }

    /// Whether compute channel `ci` has nothing held and everything submitted done.
    fn compute_idle(&self, ci: usize) -> Result<bool, DeviceError> {
        let c = &self.chans[ci];
        Ok(c.fifo.unpublished() == 0
            && (c.seen >= c.submitted || self.completed(ci)? >= c.submitted))
    }

    /// Launches graph `g`'s launches one by one, as `Device::launch` would.
    fn launch_graph_nodes(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        g: &RawGraph,
    ) -> Result<(), DeviceError> {
        self.with_graph(g, |d, r| {
            r.nodes.iter().try_for_each(|n| {
                let args: Vec<Arg<'_>> = n.args.iter().map(|b| Arg::Bytes(b)).collect();
                let call = CallInputs {
                    key: n.key(),
                    grid: n.image.desc.grid,
                    block: n.image.desc.block,
                    args: &args,
                    device_id: g.device,
                };
                d.launch_built(info, opts, &n.image.built(), &call)
            })
        })
    }

    /// Launches graph `g` as one submission on compute channel `ci` (the current stream's).
    fn launch_graph_written(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        g: &RawGraph,
        ci: usize,
    ) -> Result<(), DeviceError> {
        let r = self.fast.graphs.get(g)?;
        let k = r.next;
        let before = r.copies[k].last;
        if let Some((ci, value)) = before
            && self.completed(ci)? < value
        {
            self.fast.graphs.waited += 1;
            self.wait(info, opts, ci, value, "a graph's earlier launch")?;
        }
        let value = self.chans[ci].submitted + 1;
        let first_qmd = self.write_copy(info, g, k, value)?;
        let dirty = self.caches_dirty();
        let pcas2 = info.chip.has_pcas2();
        let submitted = self.submit(info, opts, ci, 0, |pb, _, _| {
            if dirty {
                pb.invalidate_shader_caches()?;
            }
            pb.invalidate_sked_caches()?;
            pb.compute_launch_on(first_qmd, pcas2)?;
            Ok(true)
        });
        let r = self.fast.graphs.get_mut(g)?;
        let copy = &mut r.copies[k];
        let submitted = match submitted {
            Ok(v) if v == value => v,
            Ok(v) => {
                copy.written.fill(0);
                return Err(DeviceError::Dead(alloc::format!(
                    "a graph's launch was submitted as timeline value {v}, written for {value}"
                )));
            }
            Err(e) => {
                // The last QMD was written for a value that was not submitted.
                if let Some(w) = copy.written.last_mut() {
                    *w = 0;
                }
                return Err(e);
            }
        };
        copy.last = Some((ci, submitted));
        r.next = (k + 1) % COPIES;
        let chained = r.nodes.len() > 1;
        let last = r.nodes.last().map(|n| (n.key().slot, n.key().kernel));
        self.fast.graphs.written += 1;
        self.caches_invalidated();
        if chained {
            self.chans[ci].own_wait = Some(submitted);
        }
        if last.is_some() {
            self.last_kernel = last;
        }
        Ok(())
    }

    /// Brings copy `k` of graph `g` up to date for a launch releasing compute timeline value
    /// `value` of the current stream: the nodes changed since it was written, and the last QMD.
    /// Returns the first QMD's GPU VA.
    fn write_copy(
        &mut self,
        info: &DeviceInfo,
        g: &RawGraph,
        k: usize,
        value: u64,
    ) -> Result<u64, DeviceError> {
        let patch = self.fast.graphs.patch;
        self.with_graph(g, |d, r| {
            let (base_va, _) = d.slot_va(r.mem.0, r.mem.1)?;
            let at = k as u64 * r.copy_size;
            let last = r.nodes.len() - 1;
            for i in 0..r.nodes.len() {
                let version = r.versions[i];
                let stale = r.copies[k].written[i] != version;
                if i != last && !stale {
                    continue;
                }
                r.copies[k].written[i] = 0;
                let (cb_off, qmd_off) = r.layout[i];
                let node = &r.nodes[i];
                let cb_va = base_va + at + cb_off;
                let mut qmd = d.launch_qmd(info, &node.image.built(), cb_va, value)?;
                if i != last {
                    let next_qmd = base_va + at + r.layout[i + 1].1;
                    patch.make_inner(&mut qmd, next_qmd)?;
                }
                let mem = d.slot_mem(r.mem.0, r.mem.1)?;
                if stale {
                    mem.write(at + cb_off, &node.image.cb)?;
                }
                mem.write(at + qmd_off, qmd.as_bytes())?;
                r.copies[k].written[i] = version;
            }
            Ok(base_va + at + r.layout[0].1)
        })
    }

    /// Runs `f` with graph `g` taken out of the table (put back after): what `f` does
    /// needs `self`.
    fn with_graph<R>(
        &mut self,
        g: &RawGraph,
        f: impl FnOnce(&mut Self, &mut GraphRec) -> Result<R, DeviceError>,
    ) -> Result<R, DeviceError> {
        let (generation, slot) = self
            .fast
            .graphs
            .recs
            .get_mut(g.index)
            .ok_or(DeviceError::ForeignObject("graph"))?;
        let mut r = match slot.take() {
            Some(r) if *generation == g.generation => r,
            other => {
                *slot = other;
                return Err(DeviceError::ForeignObject("graph"));
            }
        };
        let res = f(self, &mut r);
        if let Some((_, slot)) = self.fast.graphs.recs.get_mut(g.index) {
            *slot = Some(r);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::qmd::LaunchDesc;
    use alloc::string::ToString;

    fn node(cb_size: u32) -> GraphNode {
        let desc = LaunchDesc::default();
        let l = Built {
            key: LaunchKey {
                slot: 0,
                generation: 1,
                kernel: 0,
                dynamic_shared: 0,
            },
            desc: &desc,
            cb_size,
            cb: &[],
        };
        GraphNode::new(1, &l, &[])
    }

    #[test]
    fn each_bank_and_qmd_has_its_own_aligned_room_and_huge_graphs_are_refused() {
        let nodes: Vec<_> = [0x210, 0x300, 0x1000, 4].into_iter().map(node).collect();
        let (l, size) = layout(&nodes, 0x100).unwrap();
        let mut end = 0;
        for ((cb, qmd), n) in l.iter().zip(&nodes) {
            assert_eq!(cb % ARENA_ALIGN, 0);
            assert_eq!(qmd % ARENA_ALIGN, 0);
            assert!(*cb >= end, "overlaps the node before");
            assert!(
                qmd - cb >= u64::from(n.image.cb_size),
                "the bank fits before the QMD"
            );
            end = qmd + 0x100;
        }
        assert_eq!(size, end);
        assert_eq!(size, 0x300 + 0x300 + 0x1000 + 0x100 + 4 * 0x100);
        let big = vec![node(64 << 10); 8192];
        let e = layout(&big, 0x100).unwrap_err();
        assert!(e.to_string().contains("256 MiB"), "{e}");
    }
}
