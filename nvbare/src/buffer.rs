//! Device buffers and views of them.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;
use std::sync::Arc;

use nvbare_core::device::{Location, RawBuffer};

use crate::gpu::GpuShared;
use crate::{DeviceRepr, Error, Result};

/// The memory behind a buffer and its views; freed when the last of them goes (after the GPU
/// has finished with it).
pub(crate) struct Memory {
    pub gpu: Arc<GpuShared>,
    pub raw: RawBuffer,
    /// For a module's device variable ([`crate::Module::global`]): the module whose image
    /// holds it, kept loaded; the memory is the module's, never freed on its own.
    pub module: Option<Arc<crate::module::Loaded>>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("device", &self.gpu.name)
            .field("gpu_va", &format_args!("{:#x}", self.raw.gpu_va()))
            .finish()
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.module.is_some() {
            return;
        }
        // A closed device freed everything already.
        if let Ok(d) = self.gpu.lock() {
            d.free(self.raw);
        }
    }
}

/// `len` elements of `T` in GPU memory. Reference-counted: clones and
/// [`DeviceBuffer::slice`]s share the memory, which is freed when the last of them goes.
pub struct DeviceBuffer<T: DeviceRepr> {
    pub(crate) mem: Arc<Memory>,
    pub(crate) len: usize,
    _t: PhantomData<fn() -> T>,
}

/// A range of a [`DeviceBuffer`]'s elements: usable wherever the buffer is (copies, kernel
/// arguments), and keeps its memory alive.
pub struct DeviceSlice<T: DeviceRepr> {
    pub(crate) mem: Arc<Memory>,
    /// First element.
    pub(crate) start: usize,
    pub(crate) len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeviceRepr> Clone for DeviceBuffer<T> {
    fn clone(&self) -> Self {
        DeviceBuffer {
            mem: self.mem.clone(),
            len: self.len,
            _t: PhantomData,
        }
    }
}

impl<T: DeviceRepr> Clone for DeviceSlice<T> {
    fn clone(&self) -> Self {
        DeviceSlice {
            mem: self.mem.clone(),
            start: self.start,
            len: self.len,
            _t: PhantomData,
        }
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("gpu_va", &format_args!("{:#x}", self.mem.raw.gpu_va()))
            .field("len", &self.len)
            .field("location", &self.mem.raw.location())
            .finish()
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSlice")
            .field("gpu_va", &format_args!("{:#x}", self.gpu_va()))
            .field("len", &self.len)
            .finish()
    }
}

fn bytes_of<T>(len: usize) -> Result<u64> {
    len.checked_mul(size_of::<T>())
        .filter(|&b| b > 0)
        .map(|b| b as u64)
        .ok_or_else(|| {
            Error::Device(nvbare_core::device::DeviceError::BadRange(format!(
                "a buffer of {len} elements of {} bytes: need at least one byte and no overflow",
                size_of::<T>()
            )))
        })
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    pub(crate) fn alloc(
        gpu: &Arc<GpuShared>,
        len: usize,
        location: Location,
        zero: bool,
    ) -> Result<Self> {
        let bytes = bytes_of::<T>(len)?;
        let raw = gpu.lock()?.alloc(bytes, location, zero)?;
        Ok(DeviceBuffer {
            mem: Arc::new(Memory {
                gpu: gpu.clone(),
                raw,
                module: None,
            }),
            len,
            _t: PhantomData,
        })
    }

    /// A module's device variable as a buffer: `raw` views the module's image, which `module`
    /// keeps loaded.
    pub(crate) fn of_module(module: Arc<crate::module::Loaded>, raw: RawBuffer) -> Result<Self> {
        let size = size_of::<T>() as u64;
        if size == 0 || !raw.bytes().is_multiple_of(size) {
            return Err(Error::Device(nvbare_core::device::DeviceError::BadRange(
                format!(
                    "a device variable of {} bytes read as elements of {size} bytes",
                    raw.bytes()
                ),
            )));
        }
        Ok(DeviceBuffer {
            len: (raw.bytes() / size) as usize,
            mem: Arc::new(Memory {
                gpu: module.gpu.clone(),
                raw,
                module: Some(module),
            }),
            _t: PhantomData,
        })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements (never for an allocation: those hold at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// GPU virtual address of element 0.
    pub fn gpu_va(&self) -> u64 {
        self.mem.raw.gpu_va()
    }

    /// Where it lives.
    pub fn location(&self) -> Location {
        self.mem.raw.location()
    }

    /// For a buffer from [`Gpu::alloc_host`](crate::Gpu::alloc_host): where this process's
    /// CPU reaches the same memory the GPU does, so a program can read and write it in place
    /// and copies from and to it run on the GPU without staging (CUDA's pinned memory).
    /// `None` for video memory and behind `remote:` (the host memory is the server's).
    ///
    /// The GPU reads or writes the memory whenever queued work uses it: touch it through
    /// this pointer only when no such work is queued, and never keep a reference made from it.
    pub fn host_ptr(&self) -> Result<Option<NonNull<T>>> {
        Ok(self
            .mem
            .gpu
            .lock()?
            .cpu_ptr(&self.mem.raw)?
            .map(NonNull::cast))
    }

    /// Elements `range` as a view. A range past the end is an error.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<T>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(Error::Device(nvbare_core::device::DeviceError::BadRange(
                format!(
                    "elements {start}..{end} of a buffer of {} elements",
                    self.len
                ),
            )));
        }
        Ok(DeviceSlice {
            mem: self.mem.clone(),
            start,
            len: end - start,
            _t: PhantomData,
        })
    }
}

impl<T: DeviceRepr> DeviceSlice<T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// GPU virtual address of its first element.
    pub fn gpu_va(&self) -> u64 {
        self.mem.raw.gpu_va() + (self.start * size_of::<T>()) as u64
    }
}

/// A buffer or a view: a byte range of one device's memory.
#[derive(Debug)]
pub(crate) struct Span<'a> {
    pub mem: &'a Arc<Memory>,
    /// Byte offset.
    pub offset: u64,
    /// Elements.
    pub len: usize,
}

/// What copies and launches take: a [`DeviceBuffer`] or a [`DeviceSlice`] of `T`.
pub trait DeviceRange<T: DeviceRepr>: private::Sealed {
    #[doc(hidden)]
    fn span(&self) -> SpanRef<'_>;
}

/// The byte range a [`DeviceRange`] covers (opaque).
#[doc(hidden)]
#[derive(Debug)]
pub struct SpanRef<'a>(pub(crate) Span<'a>);

mod private {
    pub trait Sealed {}
    impl<T: crate::DeviceRepr> Sealed for crate::DeviceBuffer<T> {}
    impl<T: crate::DeviceRepr> Sealed for crate::DeviceSlice<T> {}
}

impl<T: DeviceRepr> DeviceRange<T> for DeviceBuffer<T> {
    fn span(&self) -> SpanRef<'_> {
        SpanRef(Span {
            mem: &self.mem,
            offset: 0,
            len: self.len,
        })
    }
}

impl<T: DeviceRepr> DeviceRange<T> for DeviceSlice<T> {
    fn span(&self) -> SpanRef<'_> {
        SpanRef(Span {
            mem: &self.mem,
            offset: (self.start * size_of::<T>()) as u64,
            len: self.len,
        })
    }
}

impl Span<'_> {
    /// Checks it belongs to `gpu`.
    pub(crate) fn on(&self, gpu: &Arc<GpuShared>, what: &str) -> Result<()> {
        if Arc::ptr_eq(&self.mem.gpu, gpu) {
            Ok(())
        } else {
            Err(Error::ForeignObject(format!(
                "{what} belongs to {}, not to {}: copy it between the devices first",
                self.mem.gpu.name, gpu.name
            )))
        }
    }
}
