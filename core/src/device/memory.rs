//! Typed device buffers, copies, program loading and launches: the public face of
//! [`Device`].

use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::backend::{Backend, Location, Purpose};
use super::copy::CopyPath;
use super::launch::{CallInputs, LaunchRecord};
use super::module::{Arg, Function, GlobalInfo, KernelInfo, LaunchConfig, Module};
use super::program::Program;
use super::qmd::LaunchKey;
use super::{Device, DeviceError};

/// Element types a device buffer can hold: plain data with no padding (any bit pattern valid).
pub trait DeviceRepr: FromBytes + IntoBytes + Immutable + KnownLayout + Copy {}
impl<T: FromBytes + IntoBytes + Immutable + KnownLayout + Copy> DeviceRepr for T {}

/// A buffer of `len` elements of `T` in GPU memory, freed when dropped (after the GPU has
/// finished with it).
pub struct DeviceBuffer<'d, B: Backend, T: DeviceRepr> {
    pub(super) dev: &'d Device<B>,
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) len: usize,
    pub(super) va: u64,
    pub(super) location: Location,
    _t: PhantomData<T>,
}

impl<B: Backend, T: DeviceRepr> fmt::Debug for DeviceBuffer<'_, B, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("va", &format_args!("{:#x}", self.va))
            .field("len", &self.len)
            .field("location", &self.location)
            .finish()
    }
}

impl<B: Backend, T: DeviceRepr> DeviceBuffer<'_, B, T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes.
    pub fn bytes(&self) -> u64 {
        (self.len * size_of::<T>()) as u64
    }

    /// GPU virtual address of element 0.
    pub fn gpu_va(&self) -> u64 {
        self.va
    }

    /// Where it lives.
    pub fn location(&self) -> Location {
        self.location
    }

    /// The buffer as a kernel argument (its device pointer).
    pub fn arg(&self) -> Arg<'static> {
        Arg::Ptr {
            va: self.va,
            device: self.dev.id(),
        }
    }

    pub(super) fn check(&self, dev: &Device<B>) -> Result<(), DeviceError> {
        if core::ptr::eq(self.dev, dev) {
            Ok(())
        } else {
            Err(DeviceError::ForeignObject("buffer"))
        }
    }
}

impl<B: Backend, T: DeviceRepr> DeviceBuffer<'_, B, T> {
    /// Gives up the borrow of the device: the memory stays allocated until
    /// [`Device::free_raw_buffer`] (or the device closes). For owners that cannot hold a
    /// borrow, such as reference-counted handles.
    pub fn into_raw(self) -> RawBuffer {
        let raw = RawBuffer {
            device: self.dev.id(),
            slot: self.slot,
            generation: self.generation,
            bytes: self.bytes(),
            va: self.va,
            location: self.location,
        };
        core::mem::forget(self);
        raw
    }
}

/// Device memory without a borrow of its device ([`DeviceBuffer::into_raw`]): use it through
/// [`Device::with_buffer`], free it with [`Device::free_raw_buffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBuffer {
    device: u32,
    slot: usize,
    generation: u32,
    bytes: u64,
    va: u64,
    location: Location,
}

impl RawBuffer {
    /// [`Device::id`] of the device that owns it.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// GPU virtual address of its first byte.
    pub fn gpu_va(&self) -> u64 {
        self.va
    }

    /// Where it lives.
    pub fn location(&self) -> Location {
        self.location
    }

    /// A view of the bytes of global `g` of the program in `slot` (no memory of its own).
    pub(super) fn view(device: u32, slot: usize, generation: u32, g: &GlobalInfo) -> RawBuffer {
        RawBuffer {
            device,
            slot,
            generation,
            bytes: g.size,
            va: g.va,
            location: Location::Device,
        }
    }

    /// A device pointer `offset` bytes in, as a kernel argument.
    pub fn arg_at(&self, offset: u64) -> Arg<'static> {
        Arg::Ptr {
            va: self.va + offset.min(self.bytes),
            device: self.device,
        }
    }
}

impl<B: Backend> Device<B> {
    /// Runs `f` with the buffer `raw` stands for, as `T` elements (its size must be a multiple
    /// of `T`'s), borrowed from this device for the call.
    pub fn with_buffer<T: DeviceRepr, R>(
        &self,
        raw: &RawBuffer,
        f: impl FnOnce(&mut DeviceBuffer<'_, B, T>) -> R,
    ) -> Result<R, DeviceError> {
        if raw.device != self.id() {
            return Err(DeviceError::ForeignObject("buffer"));
        }
        let size = size_of::<T>() as u64;
        if size == 0 || !raw.bytes.is_multiple_of(size) {
            return Err(DeviceError::BadRange(alloc::format!(
                "a buffer of {} bytes viewed as elements of {size} bytes",
                raw.bytes
            )));
        }
        self.inner()?.buffer_va(raw.slot, raw.generation)?;
        let mut b = core::mem::ManuallyDrop::new(DeviceBuffer {
            dev: self,
            slot: raw.slot,
            generation: raw.generation,
            len: (raw.bytes / size) as usize,
            va: raw.va,
            location: raw.location,
            _t: PhantomData,
        });
        Ok(f(&mut b))
    }

    /// Where the CPU reaches the host-memory buffer `raw` directly
    /// ([`GpuMemory::cpu_ptr`](super::GpuMemory::cpu_ptr)): `None` for video memory and where
    /// the backend's host memory is not this process's own (`remote:`). Never turn it into a
    /// reference while GPU work that reads or writes the buffer may be queued.
    pub fn cpu_ptr(&self, raw: &RawBuffer) -> Result<Option<NonNull<u8>>, DeviceError> {
        use super::GpuMemory;
        if raw.device != self.id() {
            return Err(DeviceError::ForeignObject("buffer"));
        }
        if raw.location != Location::Host {
            return Ok(None);
        }
        let inner = self.inner()?;
        let mem = inner.slot_mem(raw.slot, raw.generation)?;
        let Some(base) = mem.cpu_ptr() else {
            return Ok(None);
        };
        let offset = raw
            .va
            .checked_sub(mem.gpu_va())
            .filter(|&o| {
                o.checked_add(raw.bytes)
                    .is_some_and(|end| end <= mem.size())
            })
            .and_then(|o| usize::try_from(o).ok());
        Ok(offset.and_then(|o| NonNull::new(base.as_ptr().wrapping_add(o))))
    }

    /// Frees memory given up by [`DeviceBuffer::into_raw`] (after the GPU has finished with
    /// it, as dropping a [`DeviceBuffer`] does). A buffer of another device is left alone.
    pub fn free_raw_buffer(&self, raw: RawBuffer) {
        if raw.device == self.id() {
            self.release_slot(raw.slot, raw.generation);
        }
    }
}

impl<B: Backend, T: DeviceRepr> Drop for DeviceBuffer<'_, B, T> {
    fn drop(&mut self) {
        self.dev.release_slot(self.slot, self.generation);
    }
}

fn bytes_of<T>(len: usize) -> Result<u64, DeviceError> {
    len.checked_mul(size_of::<T>())
        .filter(|&b| b > 0)
        .map(|b| b as u64)
        .ok_or_else(|| {
            DeviceError::BadRange(alloc::format!(
                "a buffer of {len} elements of {} bytes: need at least one byte and no overflow",
                size_of::<T>()
            ))
        })
}

/// The byte offset of element `offset` when `n` elements from there are copied `dir` a
/// buffer of `len`; an error when they do not all lie inside it.
fn span_start<T>(dir: &str, offset: usize, n: usize, len: usize) -> Result<u64, DeviceError> {
    match offset.checked_add(n) {
        // `offset <= len`, and `len` elements' bytes fit (the buffer was allocated).
        Some(end) if end <= len => Ok((offset * size_of::<T>()) as u64),
        _ => Err(DeviceError::BadRange(alloc::format!(
            "copying {n} elements {dir} a buffer of {len} from element {offset}"
        ))),
    }
}

impl<B: Backend> Device<B> {
    fn alloc_in<T: DeviceRepr>(
        &self,
        len: usize,
        location: Location,
    ) -> Result<DeviceBuffer<'_, B, T>, DeviceError> {
        let bytes = bytes_of::<T>(len)?;
        let (slot, generation, va) = self.inner()?.alloc_slot(bytes, location, Purpose::Buffer)?;
        Ok(DeviceBuffer {
            dev: self,
            slot,
            generation,
            len,
            va,
            location,
            _t: PhantomData,
        })
    }

    /// A buffer of `len` elements in device memory, contents undefined.
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<'_, B, T>, DeviceError> {
        self.alloc_in(len, Location::Device)
    }

    /// A buffer of `len` elements in host memory the GPU reaches over PCIe.
    pub fn alloc_host<T: DeviceRepr>(
        &self,
        len: usize,
    ) -> Result<DeviceBuffer<'_, B, T>, DeviceError> {
        self.alloc_in(len, Location::Host)
    }

    /// A zero-filled buffer of `len` elements in device memory.
    pub fn alloc_zeros<T: DeviceRepr>(
        &self,
        len: usize,
    ) -> Result<DeviceBuffer<'_, B, T>, DeviceError> {
        let b = self.alloc::<T>(len)?;
        self.inner()?
            .fill_zero(&self.info, &self.options, b.va, b.bytes())?;
        Ok(b)
    }

    /// A new device buffer holding a copy of `src`.
    pub fn htod_copy<T: DeviceRepr>(
        &self,
        src: &[T],
    ) -> Result<DeviceBuffer<'_, B, T>, DeviceError> {
        let mut b = self.alloc::<T>(src.len())?;
        self.htod_copy_into(src, &mut b)?;
        Ok(b)
    }

    /// Copies `src` into the start of `dst` (which must be at least as long). Returns when
    /// `src` may be reused; the copy itself completes in stream order.
    pub fn htod_copy_into<T: DeviceRepr>(
        &self,
        src: &[T],
        dst: &mut DeviceBuffer<'_, B, T>,
    ) -> Result<(), DeviceError> {
        dst.check(self)?;
        if src.len() > dst.len {
            return Err(DeviceError::BadRange(alloc::format!(
                "copying {} elements into a buffer of {}",
                src.len(),
                dst.len
            )));
        }
        if src.is_empty() {
            return Ok(());
        }
        let mut i = self.inner()?;
        i.buffer_va(dst.slot, dst.generation)?;
        i.htod(&self.info, &self.options, dst.va, src.as_bytes())
    }

    /// Copies the whole buffer back to the host, after all earlier work.
    pub fn dtoh_copy<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
    ) -> Result<Vec<T>, DeviceError> {
        let mut v = Vec::new();
        v.try_reserve_exact(src.len).map_err(|_| {
            DeviceError::BadRange(alloc::format!("no host memory for {} elements", src.len))
        })?;
        v.resize(src.len, T::new_zeroed());
        self.dtoh_copy_into(src, &mut v)?;
        Ok(v)
    }

    /// Copies the first `dst.len()` elements of `src` into `dst`, after all earlier work.
    pub fn dtoh_copy_into<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        dst: &mut [T],
    ) -> Result<(), DeviceError> {
        src.check(self)?;
        if dst.len() > src.len {
            return Err(DeviceError::BadRange(alloc::format!(
                "copying {} elements out of a buffer of {}",
                dst.len(),
                src.len
            )));
        }
        if dst.is_empty() {
            return Ok(());
        }
        let mut i = self.inner()?;
        i.buffer_va(src.slot, src.generation)?;
        i.dtoh(&self.info, &self.options, src.va, dst.as_mut_bytes())
    }

    /// Copies `src` into `dst` from element `offset` on (`offset + src.len()` must not pass
    /// the end of `dst`), so a large buffer can be filled through a small host buffer. Returns
    /// when `src` may be reused; the copy itself completes in stream order.
    pub fn htod_copy_at<T: DeviceRepr>(
        &self,
        src: &[T],
        dst: &mut DeviceBuffer<'_, B, T>,
        offset: usize,
    ) -> Result<(), DeviceError> {
        dst.check(self)?;
        let at = span_start::<T>("into", offset, src.len(), dst.len)?;
        if src.is_empty() {
            return Ok(());
        }
        let mut i = self.inner()?;
        i.buffer_va(dst.slot, dst.generation)?;
        i.htod(&self.info, &self.options, dst.va + at, src.as_bytes())
    }

    /// Copies `dst.len()` elements of `src` from element `offset` on into `dst`, after all
    /// earlier work, so a large buffer can be read back through a small host buffer.
    pub fn dtoh_copy_at<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        offset: usize,
        dst: &mut [T],
    ) -> Result<(), DeviceError> {
        src.check(self)?;
        let at = span_start::<T>("out of", offset, dst.len(), src.len)?;
        if dst.is_empty() {
            return Ok(());
        }
        let mut i = self.inner()?;
        i.buffer_va(src.slot, src.generation)?;
        i.dtoh(&self.info, &self.options, src.va + at, dst.as_mut_bytes())
    }

    /// Copies all of `src` into `dst` on the GPU, in stream order:
    /// [`Device::dtod_copy_with`] with [`CopyPath::Auto`] (the copy kernel for large copies
    /// between device-memory buffers when one is installed, otherwise the copy engine).
    pub fn dtod_copy<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        dst: &mut DeviceBuffer<'_, B, T>,
    ) -> Result<(), DeviceError> {
        self.dtod_copy_with(src, dst, CopyPath::Auto)
    }

    /// Loads a program (a parsed cubin): checks it is for this GPU's shader model and uploads
    /// the relocated image to device memory. For cubin bytes use `load_cubin` from
    /// `nvbare_gsp_firmware::program::LoadCubin`.
    pub fn load_module<P: Program + ?Sized>(
        &self,
        program: &P,
    ) -> Result<Module<'_, B>, DeviceError> {
        let sm = program.sm();
        let (slot, generation, base, descs) =
            self.inner()?
                .load_module(&self.info, &self.options, program)?;
        let kernels: Vec<KernelInfo> = descs
            .into_iter()
            .map(|k| KernelInfo::loaded(base, k))
            .collect();
        let globals: Vec<GlobalInfo> = program
            .globals()
            .into_iter()
            .map(|g| GlobalInfo::loaded(base, g))
            .collect();
        Ok(Module {
            dev: self,
            slot,
            generation,
            base,
            sm,
            sass_version: program.sass_version(),
            kernels: kernels.into(),
            globals: globals.into(),
            owned: true,
        })
    }

    /// Launches `f` over `cfg` with `args` (one per kernel parameter, sizes must match).
    /// Returns once the work is queued; errors of the kernel itself surface at the next wait.
    pub fn launch(
        &self,
        f: &Function<'_, '_, B>,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), DeviceError> {
        let call = self.call_inputs(f, cfg, args)?;
        self.inner()?.for_launch().launch(
            &self.info,
            &self.options,
            f.info(),
            f.module.sass_version,
            &call,
        )
    }

    /// [`Device::launch`] as an ordinary submission, returning the QMD and the methods it
    /// wrote, for tools that show them (`nvbare run --dump-qmd`); the latency machinery does
    /// not take it.
    pub fn launch_recorded(
        &self,
        f: &Function<'_, '_, B>,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<LaunchRecord, DeviceError> {
        let call = self.call_inputs(f, cfg, args)?;
        self.inner()?.for_launch().launch_recorded(
            &self.info,
            &self.options,
            f.info(),
            f.module.sass_version,
            &call,
        )
    }

    /// What a launch call of `f` on this device is given.
    pub(super) fn call_inputs<'a>(
        &self,
        f: &Function<'_, '_, B>,
        cfg: LaunchConfig,
        args: &'a [Arg<'a>],
    ) -> Result<CallInputs<'a>, DeviceError> {
        let m = f.module;
        if !core::ptr::eq(m.dev, self) {
            return Err(DeviceError::ForeignObject("module"));
        }
        Ok(CallInputs {
            key: LaunchKey {
                slot: m.slot,
                generation: m.generation,
                kernel: f.index,
                dynamic_shared: cfg.shared_mem_bytes,
            },
            grid: cfg.grid,
            block: cfg.block,
            args,
            device_id: self.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_copies_stay_inside_the_buffer() {
        assert_eq!(span_start::<u32>("into", 0, 10, 10).unwrap(), 0);
        assert_eq!(span_start::<u32>("into", 4, 6, 10).unwrap(), 16);
        assert_eq!(span_start::<u64>("out of", 10, 0, 10).unwrap(), 80);
        for (offset, n) in [(4, 7), (11, 0), (usize::MAX, 1), (1, usize::MAX)] {
            let e = span_start::<u32>("into", offset, n, 10).unwrap_err();
            assert!(
                matches!(&e, DeviceError::BadRange(m) if m.contains("a buffer of 10")),
                "{offset} {n}: {e:?}"
            );
        }
    }
}
