//! Graphs: a fixed sequence of launches, built and checked once, whose commands the device
//! writes once and launches as one chained submission (the latency machinery's
//! `fast/graph.rs` says how, and why).
//!
//! ```text
//! let nodes = vec![dev.graph_node(&f, cfg, &args)?, dev.graph_node(&g, cfg, &args2)?];
//! let graph = dev.create_graph(nodes)?;
//! dev.launch_graph(&graph)?;              // as often as wanted, on any stream
//! dev.set_graph_node(&graph, 1, dev.graph_node(&g, cfg, &other)?)?;
//! dev.free_graph(graph);
//! ```

use alloc::vec::Vec;

use super::backend::Backend;
use super::fast::{GraphNode, RawGraph};
use super::launch::Built;
use super::module::{Arg, Function, LaunchConfig};
use super::{Device, DeviceError};

impl<B: Backend> Device<B> {
    /// Launch `f` over `cfg` with `args` as a node of a graph: checked as [`Device::launch`]
    /// checks a launch (shape, argument count and sizes, shared and local memory), but not
    /// submitted.
    pub fn graph_node(
        &self,
        f: &Function<'_, '_, B>,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<GraphNode, DeviceError> {
        let call = self.call_inputs(f, cfg, args)?;
        let mut i = self.inner()?;
        i.check_call(call.key)?;
        let (desc, cb_size) = i.build_launch(
            &self.info,
            &self.options,
            f.info(),
            f.module.sass_version,
            &call,
        )?;
        let l = Built {
            key: call.key,
            desc: &desc,
            cb_size,
            cb: &i.scratch,
        };
        Ok(GraphNode::new(self.id, &l, args))
    }

    /// A graph of `nodes` (1 to [`super::MAX_GRAPH_NODES`], from [`Device::graph_node`] on
    /// this device), run in order when launched. Its modules must stay loaded while it is
    /// launched.
    pub fn create_graph(&self, nodes: Vec<GraphNode>) -> Result<RawGraph, DeviceError> {
        self.inner()?.create_graph(&self.info, self.id, nodes)
    }

    /// Replaces node `index` of `graph` (a node of the same kernel or another, with a bank
    /// that fits: parameters no larger than the node's first). Launches already queued keep
    /// what they were launched with.
    pub fn set_graph_node(
        &self,
        graph: &RawGraph,
        index: usize,
        node: GraphNode,
    ) -> Result<(), DeviceError> {
        self.check_graph(graph)?;
        self.inner()?.set_graph_node(graph, index, node)
    }

    /// Queues `graph` on the current stream: its launches run in order, after everything
    /// submitted on the stream before. Returns once it is queued, and whether it went as one
    /// submission of commands written once (a graph of two launches or more on a stream
    /// whose work is done, or of [`super::WRITTEN_BEHIND_WORK`] or more on any); otherwise it
    /// was launched launch by launch, chained to the work still running (`fast/graph.rs` says
    /// why). A launch as one submission waits on the CPU if the graph's commands are in use
    /// by two earlier launches.
    pub fn launch_graph(&self, graph: &RawGraph) -> Result<bool, DeviceError> {
        self.check_graph(graph)?;
        self.inner()?
            .for_launch()
            .launch_graph(&self.info, &self.options, graph)
    }

    /// Frees `graph` once the GPU has finished with it. A graph of another device is left
    /// alone.
    pub fn free_graph(&self, graph: RawGraph) {
        if graph.device != self.id {
            return;
        }
        if let Ok(mut i) = self.inner() {
            i.free_graph(&self.info, &self.options, &graph);
        }
    }

    fn check_graph(&self, graph: &RawGraph) -> Result<(), DeviceError> {
        if graph.device != self.id {
            return Err(DeviceError::ForeignObject("graph (made on another device)"));
        }
        Ok(())
    }
}
