//! Graphs: a fixed sequence of launches whose commands the device writes once, launched as
//! one chained submission as often as wanted (`nvbare_core::device::Device::launch_graph`;
//! what that saves: docs/performance.md, "Synchronized graphs: written once").

use std::sync::Arc;

use nvbare_core::device::{Arg, LaunchConfig, RawGraph};

use crate::gpu::GpuShared;
use crate::module::Function;
use crate::stream::Stream;
use crate::{Error, Result};

/// A fixed sequence of launches ([`Graph::new`]), run in order by [`Stream::launch_graph`]:
/// on a stream whose work is done as one submission of commands written once, behind running
/// work launch by launch (chained to it) unless it has
/// [`nvbare_core::device::WRITTEN_BEHIND_WORK`] launches or more. Its kernels' modules stay
/// loaded while it lives. `Send + Sync`; a launch waits on the CPU when both copies of its
/// commands are in use (by launches on other streams, or by two earlier ones of a large
/// graph).
#[derive(Debug)]
pub struct Graph {
    gpu: Arc<GpuShared>,
    raw: RawGraph,
    /// Keep the kernels' modules loaded.
    functions: Vec<Function>,
}

/// One launch of a graph: the kernel, its shape, its arguments (as [`Stream::launch_raw`]
/// takes them: one per parameter, sizes checked against the kernel's).
pub type GraphLaunch<'a> = (&'a Function, LaunchConfig, &'a [Arg<'a>]);

impl Graph {
    /// A graph of `launches` (at least one, all of kernels loaded on one device), each
    /// checked as a launch is.
    pub fn new(launches: &[GraphLaunch<'_>]) -> Result<Graph> {
        let Some((first, _, _)) = launches.first() else {
            return Err(Error::Device(nvbare_core::device::DeviceError::BadRange(
                "a graph of no launches: give at least one".into(),
            )));
        };
        let shared = &first.loaded.gpu;
        let d = shared.lock()?;
        let mut nodes = Vec::with_capacity(launches.len().min(1 << 16));
        for (f, cfg, args) in launches {
            check_gpu(f, shared)?;
            nodes.push(d.graph_node(&f.loaded.raw, f.index, *cfg, args)?);
        }
        let raw = d.create_graph(nodes)?;
        Ok(Graph {
            gpu: shared.clone(),
            raw,
            functions: launches.iter().map(|(f, _, _)| (*f).clone()).collect(),
        })
    }

    /// Launches in it.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// Never: a graph has at least one launch.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// Replaces launch `index` (another kernel or the same with other arguments or shape; its
    /// parameters must fit in the bank the graph was made with: at most as many bytes as the
    /// first kernel's). Launches already queued keep what they were launched with.
    pub fn set_launch(
        &mut self,
        index: usize,
        f: &Function,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<()> {
        check_gpu(f, &self.gpu)?;
        let Some(slot) = self.functions.get_mut(index) else {
            return Err(Error::Device(nvbare_core::device::DeviceError::BadRange(
                format!("launch {index} of a graph of {}", self.functions.len()),
            )));
        };
        let d = self.gpu.lock()?;
        let node = d.graph_node(&f.loaded.raw, f.index, cfg, args)?;
        d.set_graph_node(&self.raw, index, node)?;
        *slot = f.clone();
        Ok(())
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if let Ok(d) = self.gpu.lock() {
            d.free_graph(self.raw);
        }
    }
}

impl Stream {
    /// Queues `graph` on this stream: its launches run in order after everything submitted
    /// on the stream before, as one submission where [`Graph`] says. Returns once it is
    /// queued.
    pub fn launch_graph(&self, graph: &Graph) -> Result<()> {
        if !Arc::ptr_eq(&graph.gpu, &self.gpu) {
            return Err(Error::ForeignObject(format!(
                "the graph was made on {}, not on {}",
                graph.gpu.name, self.gpu.name
            )));
        }
        self.run(|dev| dev.launch_graph(&graph.raw))
    }
}

fn check_gpu(f: &Function, gpu: &Arc<GpuShared>) -> Result<()> {
    if !Arc::ptr_eq(&f.loaded.gpu, gpu) {
        return Err(Error::ForeignObject(format!(
            "kernel `{}` is loaded on {}, not on {}",
            f.name(),
            f.loaded.gpu.name,
            gpu.name
        )));
    }
    Ok(())
}
