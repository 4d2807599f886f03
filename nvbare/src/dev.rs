//! The object-safe face of a device-layer [`Device`] of any backend: what the handles call
//! with the device locked.

use nvbare_core::device::{
    Arg, Backend, CopyPath, Device, DeviceError, DeviceInfo, Event, Function, GraphNode,
    LaunchConfig, Location, RawBuffer, RawGraph, RawModule,
};
use nvbare_gsp_firmware::program::LoadCubin;
use std::ptr::NonNull;

use crate::{Error, Result};

/// One open device, whatever its backend.
pub(crate) trait Dev: Send {
    fn info(&self) -> &DeviceInfo;
    fn id(&self) -> u32;
    fn alloc(&self, bytes: u64, location: Location, zero: bool) -> Result<RawBuffer>;
    fn free(&self, b: RawBuffer);
    /// Where the CPU reaches host-memory buffer `b` directly, if it can.
    fn cpu_ptr(&self, b: &RawBuffer) -> Result<Option<NonNull<u8>>>;
    fn htod(&self, dst: &RawBuffer, offset: u64, src: &[u8]) -> Result<()>;
    fn dtoh(&self, src: &RawBuffer, offset: u64, dst: &mut [u8]) -> Result<()>;
    fn dtod(
        &self,
        src: &RawBuffer,
        src_off: u64,
        dst: &RawBuffer,
        dst_off: u64,
        bytes: u64,
    ) -> Result<()>;
    fn load_cubin(&self, bytes: &[u8]) -> Result<RawModule>;
    fn free_module(&self, m: RawModule);
    fn launch(
        &self,
        m: &RawModule,
        kernel: usize,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<()>;
    /// A launch checked and built as a node of a graph, not submitted.
    fn graph_node(
        &self,
        m: &RawModule,
        kernel: usize,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<GraphNode>;
    fn create_graph(&self, nodes: Vec<GraphNode>) -> Result<RawGraph>;
    fn set_graph_node(&self, g: &RawGraph, index: usize, node: GraphNode) -> Result<()>;
    /// Queues the graph on the current stream.
    fn launch_graph(&self, g: &RawGraph) -> Result<()>;
    fn free_graph(&self, g: RawGraph);
    fn synchronize(&self) -> Result<()>;
    /// Video memory `(free, total)`, where the backend counts it.
    fn memory_info(&self) -> Result<Option<(u64, u64)>>;
    /// Streams the device has.
    fn streams(&self) -> u32;
    /// Runs `f` with every call on this device going to stream `stream`.
    fn on_stream(&self, stream: u32, f: &mut dyn FnMut(&dyn Dev) -> Result<()>) -> Result<()>;
    fn synchronize_stream(&self) -> Result<()>;
    /// Publishes work queued without its doorbell (held launches); does not wait.
    fn flush(&self) -> Result<()>;
    fn record_event(&self) -> Result<Event>;
    /// An event at which the GPU notes its time.
    fn record_timed_event(&self) -> Result<Event>;
    fn event_done(&self, e: &Event) -> Result<bool>;
    /// A timed event's GPU time, once reached.
    fn event_time_ns(&self, e: &Event) -> Result<Option<u64>>;
    /// Waits on the CPU for an event of this device.
    fn synchronize_event(&self, e: &Event) -> Result<()>;
    /// Makes the current stream's later work wait, on the GPU, for an event of this device.
    fn wait_event(&self, e: &Event) -> Result<()>;
    /// Closes the device; a bare-metal GPU is unloaded (GSP-RM shut down).
    fn finish(self: Box<Self>) -> Result<()>;
}

/// What a backend does when its device closes.
pub(crate) trait Finish<B: Backend>: Send {
    fn finish(&mut self, dev: Device<B>) -> Result<()>;
}

/// A device with what closing it needs (the simulator behind it, the unload).
pub(crate) struct Held<B: Backend> {
    pub dev: Device<B>,
    pub finish: Box<dyn Finish<B>>,
}

fn dev_err(e: DeviceError) -> Error {
    Error::Device(e)
}

impl<B: Backend> Held<B> {
    /// Runs `f` with kernel `kernel` of module `m`.
    fn with_function<R>(
        &self,
        m: &RawModule,
        kernel: usize,
        f: impl FnOnce(&Function<'_, '_, B>) -> std::result::Result<R, DeviceError>,
    ) -> Result<R> {
        self.dev
            .with_module(m, |m| f(&m.function_at(kernel)?))?
            .map_err(dev_err)
    }
}

impl<B> Dev for Held<B>
where
    B: Backend + Send + 'static,
    Device<B>: Send,
{
    fn info(&self) -> &DeviceInfo {
        self.dev.info()
    }

    fn id(&self) -> u32 {
        self.dev.id()
    }

    fn alloc(&self, bytes: u64, location: Location, zero: bool) -> Result<RawBuffer> {
        let len = usize::try_from(bytes)
            .map_err(|_| Error::Device(DeviceError::BadRange(format!("{bytes} bytes"))))?;
        let b = match (location, zero) {
            (Location::Device, true) => self.dev.alloc_zeros::<u8>(len)?,
            (Location::Device, false) => self.dev.alloc::<u8>(len)?,
            (Location::Host, _) => {
                let b = self.dev.alloc_host::<u8>(len)?;
                if zero {
                    // Host memory the GPU reaches: zeroed through the same copy path.
                    let z = vec![0u8; len.min(1 << 20)];
                    let mut b = b;
                    let mut at = 0;
                    while at < len {
                        let n = z.len().min(len - at);
                        self.dev.htod_copy_at(&z[..n], &mut b, at)?;
                        at += n;
                    }
                    b
                } else {
                    b
                }
            }
        };
        if zero {
            // Zeroed on the default stream's copy channel; any stream may use it next.
            self.dev.synchronize_stream()?;
        }
        Ok(b.into_raw())
    }

    fn free(&self, b: RawBuffer) {
        self.dev.free_raw_buffer(b);
    }

    fn cpu_ptr(&self, b: &RawBuffer) -> Result<Option<NonNull<u8>>> {
        Ok(self.dev.cpu_ptr(b)?)
    }

    fn htod(&self, dst: &RawBuffer, offset: u64, src: &[u8]) -> Result<()> {
        let off = usize::try_from(offset).unwrap_or(usize::MAX);
        self.dev
            .with_buffer::<u8, _>(dst, |d| self.dev.htod_copy_at(src, d, off))?
            .map_err(dev_err)
    }

    fn dtoh(&self, src: &RawBuffer, offset: u64, dst: &mut [u8]) -> Result<()> {
        let off = usize::try_from(offset).unwrap_or(usize::MAX);
        self.dev
            .with_buffer::<u8, _>(src, |s| self.dev.dtoh_copy_at(s, off, dst))?
            .map_err(dev_err)
    }

    fn dtod(
        &self,
        src: &RawBuffer,
        src_off: u64,
        dst: &RawBuffer,
        dst_off: u64,
        bytes: u64,
    ) -> Result<()> {
        let u = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        self.dev
            .with_buffer::<u8, _>(src, |s| {
                self.dev.with_buffer::<u8, _>(dst, |d| {
                    self.dev
                        .dtod_copy_range(s, u(src_off), d, u(dst_off), u(bytes), CopyPath::Auto)
                })
            })??
            .map_err(dev_err)
    }

    fn load_cubin(&self, bytes: &[u8]) -> Result<RawModule> {
        self.dev
            .load_cubin(bytes)
            .map(|m| m.into_raw())
            .map_err(|e| Error::Program(format!("loading the cubin: {e}")))
    }

    fn free_module(&self, m: RawModule) {
        self.dev.free_raw_module(m);
    }

    fn launch(
        &self,
        m: &RawModule,
        kernel: usize,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<()> {
        self.with_function(m, kernel, |f| self.dev.launch(f, cfg, args))
    }

    fn graph_node(
        &self,
        m: &RawModule,
        kernel: usize,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<GraphNode> {
        self.with_function(m, kernel, |f| self.dev.graph_node(f, cfg, args))
    }

    fn create_graph(&self, nodes: Vec<GraphNode>) -> Result<RawGraph> {
        Ok(self.dev.create_graph(nodes)?)
    }

    fn set_graph_node(&self, g: &RawGraph, index: usize, node: GraphNode) -> Result<()> {
        Ok(self.dev.set_graph_node(g, index, node)?)
    }

    fn launch_graph(&self, g: &RawGraph) -> Result<()> {
        self.dev.launch_graph(g)?;
        Ok(())
    }

    fn free_graph(&self, g: RawGraph) {
        self.dev.free_graph(g);
    }

    fn synchronize(&self) -> Result<()> {
        Ok(self.dev.synchronize()?)
    }

    fn memory_info(&self) -> Result<Option<(u64, u64)>> {
        Ok(self.dev.with_backend(|b| b.memory_info())?)
    }

    fn streams(&self) -> u32 {
        self.dev.streams()
    }

    fn on_stream(&self, stream: u32, f: &mut dyn FnMut(&dyn Dev) -> Result<()>) -> Result<()> {
        self.dev.with_stream(stream, |_| f(self))?
    }

    fn synchronize_stream(&self) -> Result<()> {
        Ok(self.dev.synchronize_stream()?)
    }

    fn flush(&self) -> Result<()> {
        Ok(self.dev.flush()?)
    }

    fn record_event(&self) -> Result<Event> {
        Ok(self.dev.record_event()?)
    }

    fn record_timed_event(&self) -> Result<Event> {
        Ok(self.dev.record_timed_event()?)
    }

    fn event_done(&self, e: &Event) -> Result<bool> {
        Ok(self.dev.event_done(e)?)
    }

    fn event_time_ns(&self, e: &Event) -> Result<Option<u64>> {
        Ok(self.dev.event_time_ns(e)?)
    }

    fn synchronize_event(&self, e: &Event) -> Result<()> {
        Ok(self.dev.synchronize_event(e)?)
    }

    fn wait_event(&self, e: &Event) -> Result<()> {
        Ok(self.dev.wait_event(e)?)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        let Held { dev, mut finish } = *self;
        finish.finish(dev)
    }
}
