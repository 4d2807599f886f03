//! Streams and events.

use std::sync::Arc;

use nvbare_core::device::{Arg, LaunchConfig, Location};
use zerocopy::IntoBytes;

use crate::buffer::DeviceRange;
use crate::dev::Dev;
use crate::gpu::{Gpu, GpuShared};
use crate::launch::LaunchBuilder;
use crate::module::Function;
use crate::{DeviceBuffer, DeviceRepr, Error, Result};

/// An ordered queue of work on one device: copies and launches on a stream run in the order
/// they were submitted. Each stream is its own compute and copy channel; streams are ordered
/// against each other only by events ([`Stream::record_event`], [`Stream::wait_event`]).
/// Kernels of different streams do not overlap on the GPU (each launch waits for the
/// compute engine to be idle, as the device's channels share one context); copies of one
/// stream can run while another's kernel does. Reference-counted; `Send + Sync`.
#[derive(Clone)]
pub struct Stream {
    pub(crate) gpu: Arc<GpuShared>,
    handle: Arc<StreamHandle>,
}

/// A stream's index, given back to the device when its last [`Stream`] goes.
struct StreamHandle {
    gpu: Arc<GpuShared>,
    index: u32,
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        if self.index != 0 {
            let mut used = self
                .gpu
                .streams_in_use
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *used &= !(1u64 << self.index);
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.gpu.name)
            .field("index", &self.handle.index)
            .finish()
    }
}

impl Gpu {
    /// Another stream of this device (the device has [`crate::Options::streams`], the default
    /// stream included; a stream is free again once its last handle is dropped).
    pub fn new_stream(&self) -> Result<Stream> {
        let n = self.shared.lock()?.streams();
        let mut used = self
            .shared
            .streams_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(free) = (1..n.min(64)).find(|s| *used & (1u64 << s) == 0) else {
            return Err(Error::Device(nvbare_core::device::DeviceError::BadRange(
                format!(
                    "all {n} streams of {} are in use; drop a Stream, or open the device with \
                     more (Options::streams)",
                    self.shared.name
                ),
            )));
        };
        *used |= 1u64 << free;
        Ok(Stream::new(self.shared.clone(), free))
    }
}

fn too_long(what: &str, n: usize, len: usize) -> Error {
    Error::Device(nvbare_core::device::DeviceError::BadRange(format!(
        "copying {n} elements {what} {len}"
    )))
}

impl Stream {
    pub(crate) fn new(gpu: Arc<GpuShared>, index: u32) -> Self {
        let handle = Arc::new(StreamHandle {
            gpu: gpu.clone(),
            index,
        });
        Stream { gpu, handle }
    }

    /// Which of the device's streams this is (0: the default stream).
    pub fn index(&self) -> u32 {
        self.handle.index
    }

    /// Runs `f` with the device locked and its calls going to this stream.
    pub(crate) fn run<R>(&self, f: impl FnOnce(&dyn Dev) -> Result<R>) -> Result<R> {
        let d = self.gpu.lock()?;
        if self.handle.index == 0 {
            return f(&*d);
        }
        let mut f = Some(f);
        let mut out = None;
        d.on_stream(self.handle.index, &mut |d| {
            if let Some(f) = f.take() {
                out = Some(f(d)?);
            }
            Ok(())
        })?;
        out.ok_or_else(|| {
            Error::Device(nvbare_core::device::DeviceError::Dead(
                "a stream call did not run".to_string(),
            ))
        })
    }

    /// A new device buffer holding a copy of `src`. Returns once `src` may be reused; the
    /// copy completes in stream order.
    pub fn htod_copy<T: DeviceRepr>(&self, src: &[T]) -> Result<DeviceBuffer<T>> {
        let b = DeviceBuffer::alloc(&self.gpu, src.len(), Location::Device, false)?;
        self.htod_copy_into(src, &b)?;
        Ok(b)
    }

    /// Copies `src` into the start of `dst` (a buffer or a slice at least as long).
    pub fn htod_copy_into<T: DeviceRepr>(
        &self,
        src: &[T],
        dst: &impl DeviceRange<T>,
    ) -> Result<()> {
        let d = dst.span().0;
        d.on(&self.gpu, "the destination")?;
        if src.len() > d.len {
            return Err(too_long("into a buffer of", src.len(), d.len));
        }
        if src.is_empty() {
            return Ok(());
        }
        self.run(|dev| dev.htod(&d.mem.raw, d.offset, src.as_bytes()))
    }

    /// The elements of `src` (a buffer or a slice), after all earlier work on the stream.
    pub fn dtoh_copy<T: DeviceRepr>(&self, src: &impl DeviceRange<T>) -> Result<Vec<T>> {
        let n = src.span().0.len;
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|_| {
            Error::Device(nvbare_core::device::DeviceError::BadRange(format!(
                "no host memory for {n} elements"
            )))
        })?;
        v.resize(n, T::new_zeroed());
        self.dtoh_copy_into(src, &mut v)?;
        Ok(v)
    }

    /// Copies the first `dst.len()` elements of `src` into `dst`, after all earlier work.
    pub fn dtoh_copy_into<T: DeviceRepr>(
        &self,
        src: &impl DeviceRange<T>,
        dst: &mut [T],
    ) -> Result<()> {
        let s = src.span().0;
        s.on(&self.gpu, "the source")?;
        if dst.len() > s.len {
            return Err(too_long("out of a buffer of", dst.len(), s.len));
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.run(|dev| dev.dtoh(&s.mem.raw, s.offset, dst.as_mut_bytes()))
    }

    /// Copies all of `src` into the start of `dst` on the GPU, in stream order.
    pub fn dtod_copy<T: DeviceRepr>(
        &self,
        src: &impl DeviceRange<T>,
        dst: &impl DeviceRange<T>,
    ) -> Result<()> {
        let (s, d) = (src.span().0, dst.span().0);
        s.on(&self.gpu, "the source")?;
        d.on(&self.gpu, "the destination")?;
        if s.len > d.len {
            return Err(too_long("into a buffer of", s.len, d.len));
        }
        let bytes = (s.len * size_of::<T>()) as u64;
        self.run(|dev| dev.dtod(&s.mem.raw, s.offset, &d.mem.raw, d.offset, bytes))
    }

    /// A launch of `f` on this stream: add one [`LaunchBuilder::arg`] per parameter, then
    /// [`LaunchBuilder::launch`].
    pub fn launch_builder<'a>(&'a self, f: &'a Function) -> LaunchBuilder<'a> {
        LaunchBuilder::new(self, f)
    }

    /// Launches `f` with untyped arguments (sizes checked, alignment not): the lower level
    /// under [`Stream::launch_builder`].
    pub fn launch_raw(&self, f: &Function, cfg: LaunchConfig, args: &[Arg<'_>]) -> Result<()> {
        if !Arc::ptr_eq(&f.loaded.gpu, &self.gpu) {
            return Err(Error::ForeignObject(format!(
                "kernel `{}` is loaded on {}, not on {}",
                f.name(),
                f.loaded.gpu.name,
                self.gpu.name
            )));
        }
        self.run(|dev| dev.launch(&f.loaded.raw, f.index, cfg, args))
    }

    /// [`Stream::record_event`] at which the GPU also notes the time it gets there (one more
    /// submission on the stream): two such events measure the GPU time between them
    /// ([`Event::elapsed_ms`]).
    pub fn record_timed_event(&self) -> Result<Event> {
        let ev = self.run(|dev| dev.record_timed_event())?;
        Ok(Event {
            gpu: self.gpu.clone(),
            ev,
        })
    }

    /// A point in this stream: everything submitted on it so far.
    pub fn record_event(&self) -> Result<Event> {
        let ev = self.run(|dev| dev.record_event())?;
        Ok(Event {
            gpu: self.gpu.clone(),
            ev,
        })
    }

    /// Makes the work submitted on this stream from now on wait for `event`. An event of this
    /// device (any stream) is waited for on the GPU (a semaphore acquire; this returns at
    /// once); an event of another device is waited for here, on the CPU, before this returns.
    ///
    /// Why another device's event is a CPU wait: a GPU-side wait across devices needs a
    /// `nvbare_core::device::PeerLink`, which maps each device's semaphore page into the
    /// other. Devices from [`crate::open`] cannot have one: each bare-metal device (`sim:`,
    /// `vfio:`, `remote:`) is opened on its own, and the core makes bare-metal GPUs peers only
    /// when they are opened together as one peer group (one DMA address space); and a link
    /// borrows both devices for its lifetime and, when dropped, waits for the devices before it
    /// unmaps the semaphores, so the library (which holds each device behind its own lock)
    /// cannot keep one between calls, and one made per call would wait on the CPU anyway.
    /// Programs that need GPU-side waits across GPUs use the device layer directly
    /// (`Device::enable_peer_access`, `PeerLink::wait_event`; docs/multi-gpu.md).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if Arc::ptr_eq(&event.gpu, &self.gpu) {
            return self.run(|dev| dev.wait_event(&event.ev));
        }
        event.synchronize()
    }

    /// Waits until everything submitted on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.run(|dev| dev.synchronize_stream())
    }

    /// Starts what is queued now instead of letting the device layer hold it for launches
    /// still to come (automatic deferral chains a run of launches; the run's end is only
    /// known to the caller, for example at the end of a CUDA graph). Does not wait.
    pub fn flush(&self) -> Result<()> {
        self.run(|dev| dev.flush())
    }
}

/// A recorded point in a stream ([`Stream::record_event`]).
#[derive(Clone)]
pub struct Event {
    pub(crate) gpu: Arc<GpuShared>,
    pub(crate) ev: nvbare_core::device::Event,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.gpu.name)
            .finish_non_exhaustive()
    }
}

impl Event {
    /// Waits until everything before the event has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.gpu.lock()?.synchronize_event(&self.ev)
    }

    /// Whether everything before the event has finished (does not wait).
    pub fn is_done(&self) -> Result<bool> {
        self.gpu.lock()?.event_done(&self.ev)
    }

    /// The GPU's time (ns of its timer) when it reached this event, a
    /// [`Stream::record_timed_event`], or `None` while work before it still runs.
    pub fn gpu_time_ns(&self) -> Result<Option<u64>> {
        self.gpu.lock()?.event_time_ns(&self.ev)
    }

    /// Milliseconds of GPU time from this event to `end` (both [`Stream::record_timed_event`]s
    /// of one device), after waiting for both; negative if `end` was reached first (events of
    /// two streams).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        if !Arc::ptr_eq(&self.gpu, &end.gpu) {
            return Err(Error::ForeignObject(format!(
                "events of two devices ({} and {}) have no common clock",
                self.gpu.name, end.gpu.name
            )));
        }
        let mut t = [0u64; 2];
        for (ev, t) in [self, end].into_iter().zip(&mut t) {
            ev.synchronize()?;
            *t = ev.gpu_time_ns()?.ok_or_else(|| {
                Error::Device(nvbare_core::device::DeviceError::Dead(
                    "an event reported pending after its wait".into(),
                ))
            })?;
        }
        Ok(((t[1] as i128 - t[0] as i128) as f64 / 1e6) as f32)
    }
}
