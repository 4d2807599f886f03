//! Loaded programs, kernels, launch configurations and kernel arguments.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Deref;

use super::Device;
use super::backend::Backend;
use super::memory::RawBuffer;
use crate::kernel::Kernel;

/// Grid, block and dynamic shared memory of a launch (as in CUDA's `<<<grid, block, shmem>>>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks per grid (x, y, z).
    pub grid: [u32; 3],
    /// Threads per block (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch covering `n` elements with 256-thread blocks (cudarc's
    /// `LaunchConfig::for_num_elems`).
    pub fn for_num_elems(n: u32) -> Self {
        LaunchConfig {
            grid: [n.div_ceil(256).max(1), 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
        }
    }
}

/// One kernel argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    /// `u8`.
    U8(u8),
    /// `u16`.
    U16(u16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
    /// A device pointer (from [`super::DeviceBuffer::arg`]); `device` is the owner's id.
    Ptr {
        /// GPU virtual address.
        va: u64,
        /// [`Device::id`] of the owner.
        device: u32,
    },
    /// Raw bytes (a struct passed by value).
    Bytes(&'a [u8]),
}

impl Arg<'_> {
    /// The bytes the argument puts in constant bank 0.
    pub(super) fn encode(&self, out: &mut [u8; 8]) -> Option<usize> {
        let (b, n): ([u8; 8], usize) = match *self {
            Arg::U8(v) => ([v, 0, 0, 0, 0, 0, 0, 0], 1),
            Arg::U16(v) => (widen(&v.to_le_bytes()), 2),
            Arg::U32(v) => (widen(&v.to_le_bytes()), 4),
            Arg::I32(v) => (widen(&v.to_le_bytes()), 4),
            Arg::F32(v) => (widen(&v.to_le_bytes()), 4),
            Arg::U64(v) => (v.to_le_bytes(), 8),
            Arg::I64(v) => (v.to_le_bytes(), 8),
            Arg::F64(v) => (v.to_le_bytes(), 8),
            Arg::Ptr { va, .. } => (va.to_le_bytes(), 8),
            Arg::Bytes(_) => return None,
        };
        *out = b;
        Some(n)
    }

    /// The bytes the argument puts in constant bank 0, encoded into `tmp` unless it is raw
    /// bytes.
    pub(super) fn bytes<'b>(&'b self, tmp: &'b mut [u8; 8]) -> &'b [u8] {
        match self {
            Arg::Bytes(b) => b,
            _ => {
                let n = self.encode(tmp).unwrap_or(0);
                tmp.get(..n).unwrap_or(&[])
            }
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        match self {
            Arg::U8(_) => 1,
            Arg::U16(_) => 2,
            Arg::U32(_) | Arg::I32(_) | Arg::F32(_) => 4,
            Arg::U64(_) | Arg::I64(_) | Arg::F64(_) | Arg::Ptr { .. } => 8,
            Arg::Bytes(b) => b.len(),
        }
    }
}

fn widen(b: &[u8]) -> [u8; 8] {
    let mut o = [0u8; 8];
    for (d, s) in o.iter_mut().zip(b) {
        *d = *s;
    }
    o
}

impl fmt::Display for Arg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::U8(v) => write!(f, "u8 {v}"),
            Arg::U16(v) => write!(f, "u16 {v}"),
            Arg::U32(v) => write!(f, "u32 {v}"),
            Arg::I32(v) => write!(f, "i32 {v}"),
            Arg::U64(v) => write!(f, "u64 {v}"),
            Arg::I64(v) => write!(f, "i64 {v}"),
            Arg::F32(v) => write!(f, "f32 {v}"),
            Arg::F64(v) => write!(f, "f64 {v}"),
            Arg::Ptr { va, .. } => write!(f, "pointer {va:#x}"),
            Arg::Bytes(b) => write!(f, "{} bytes", b.len()),
        }
    }
}

macro_rules! arg_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Arg<'_> {
            fn from(x: $t) -> Self {
                Arg::$v(x)
            }
        }
    )*};
}
arg_from!(u8 => U8, u16 => U16, u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32, f64 => F64);

/// A kernel as the device layer keeps it once loaded: its metadata and where its code is.
///
/// Derefs to the [`Kernel`], so `info.params`, `info.regcount`, ... read the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// GPU VA of its first instruction.
    pub program_address: u64,
    /// The metadata, as the program gave it, without constant bank 0 (the driver builds bank
    /// 0 per launch).
    pub kernel: Kernel,
}

impl KernelInfo {
    /// The kernel `k` of a program loaded at GPU VA `base`.
    pub(super) fn loaded(base: u64, mut k: Kernel) -> KernelInfo {
        k.const_banks.retain(|b| b.bank != 0);
        KernelInfo {
            program_address: base + k.code_offset,
            kernel: k,
        }
    }
}

impl Deref for KernelInfo {
    type Target = Kernel;

    fn deref(&self) -> &Kernel {
        &self.kernel
    }
}

/// A device variable of a loaded module (a cubin's `__device__` global): where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalInfo {
    /// Symbol name (mangled for C++ names outside `extern "C"`).
    pub name: String,
    /// GPU VA of its first byte (inside the module's image).
    pub va: u64,
    /// Size in bytes.
    pub size: u64,
}

impl GlobalInfo {
    /// The program's global `g` loaded at GPU VA `base`.
    pub(super) fn loaded(base: u64, g: super::ProgramGlobal) -> GlobalInfo {
        GlobalInfo {
            name: g.name,
            va: base + g.image_offset,
            size: g.size,
        }
    }
}

/// The global called `name` of `globals`, or [`DeviceError::NoSuchGlobal`](super::DeviceError)
/// naming the ones there are.
fn find_global<'a>(
    globals: &'a [GlobalInfo],
    name: &str,
) -> Result<&'a GlobalInfo, super::DeviceError> {
    globals.iter().find(|g| g.name == name).ok_or_else(|| {
        let names: Vec<&str> = globals.iter().map(|g| g.name.as_str()).collect();
        super::DeviceError::NoSuchGlobal(if names.is_empty() {
            alloc::format!("{name}` (it has none)")
        } else {
            alloc::format!("{name}` (it has `{}`)", names.join("`, `"))
        })
    })
}

/// A loaded program: its image lives in device memory until the module is dropped.
pub struct Module<'d, B: Backend> {
    pub(super) dev: &'d Device<B>,
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) base: u64,
    pub(super) sm: u32,
    pub(super) sass_version: u32,
    pub(super) kernels: Arc<[KernelInfo]>,
    pub(super) globals: Arc<[GlobalInfo]>,
    /// Dropping it unloads the image (not for a view of a [`RawModule`]).
    pub(super) owned: bool,
}

impl<B: Backend> fmt::Debug for Module<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("base", &self.base)
            .field("sm", &self.sm)
            .field("kernels", &self.kernels.len())
            .finish()
    }
}

impl<'d, B: Backend> Module<'d, B> {
    /// GPU VA of the image.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Shader model the cubin was built for.
    pub fn sm(&self) -> u32 {
        self.sm
    }

    /// Every kernel.
    pub fn kernels(&self) -> &[KernelInfo] {
        &self.kernels
    }

    /// Every device variable (`__device__` globals), where it is loaded.
    pub fn globals(&self) -> &[GlobalInfo] {
        &self.globals
    }

    /// The device variable called `name`: its GPU VA and size
    /// ([`DeviceError::NoSuchGlobal`](super::DeviceError) when there is none).
    pub fn global(&self, name: &str) -> Result<&GlobalInfo, super::DeviceError> {
        find_global(&self.globals, name)
    }

    /// The kernel called `name`.
    pub fn function(&self, name: &str) -> Result<Function<'_, 'd, B>, super::DeviceError> {
        self.kernels
            .iter()
            .position(|k| k.name == name)
            .map(|index| Function {
                module: self,
                index,
            })
            .ok_or_else(|| super::DeviceError::NoSuchKernel(name.into()))
    }

    /// The kernel at `index` in [`Module::kernels`].
    pub fn function_at(&self, index: usize) -> Result<Function<'_, 'd, B>, super::DeviceError> {
        if index < self.kernels.len() {
            Ok(Function {
                module: self,
                index,
            })
        } else {
            Err(super::DeviceError::NoSuchKernel(alloc::format!(
                "kernel #{index} of a module with {}",
                self.kernels.len()
            )))
        }
    }
}

impl<'d, B: Backend> Module<'d, B> {
    /// Gives up the borrow of the device: the image stays loaded until
    /// [`Device::free_raw_module`] (or the device closes). For owners that cannot hold a
    /// borrow, such as reference-counted handles.
    pub fn into_raw(mut self) -> RawModule {
        self.owned = false;
        RawModule {
            device: self.dev.id(),
            slot: self.slot,
            generation: self.generation,
            base: self.base,
            sm: self.sm,
            sass_version: self.sass_version,
            kernels: self.kernels.clone(),
            globals: self.globals.clone(),
        }
    }
}

/// A loaded program without a borrow of its device ([`Module::into_raw`]): use it through
/// [`Device::with_module`], free it with [`Device::free_raw_module`].
#[derive(Debug, Clone)]
pub struct RawModule {
    pub(super) device: u32,
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) base: u64,
    pub(super) sm: u32,
    pub(super) sass_version: u32,
    pub(super) kernels: Arc<[KernelInfo]>,
    pub(super) globals: Arc<[GlobalInfo]>,
}

impl RawModule {
    /// [`Device::id`] of the device it is loaded on.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Every kernel.
    pub fn kernels(&self) -> &[KernelInfo] {
        &self.kernels
    }

    /// The index of the kernel called `name` (for [`Module::function_at`]).
    pub fn kernel_index(&self, name: &str) -> Option<usize> {
        self.kernels.iter().position(|k| k.name == name)
    }

    /// Every device variable.
    pub fn globals(&self) -> &[GlobalInfo] {
        &self.globals
    }

    /// The device variable called `name` as a buffer of its bytes inside the image: use it
    /// through [`Device::with_buffer`] while the module is loaded, and never free it (it is
    /// the module's memory; [`Device::free_raw_module`] frees it with the rest).
    pub fn global(&self, name: &str) -> Result<RawBuffer, super::DeviceError> {
        let g = find_global(&self.globals, name)?;
        Ok(RawBuffer::view(self.device, self.slot, self.generation, g))
    }
}

impl<B: Backend> Device<B> {
    /// Runs `f` with the module `raw` stands for, borrowed from this device for the call.
    pub fn with_module<R>(
        &self,
        raw: &RawModule,
        f: impl FnOnce(&Module<'_, B>) -> R,
    ) -> Result<R, super::DeviceError> {
        if raw.device != self.id() {
            return Err(super::DeviceError::ForeignObject("module"));
        }
        self.inner()?.buffer_va(raw.slot, raw.generation)?;
        let m = Module {
            dev: self,
            slot: raw.slot,
            generation: raw.generation,
            base: raw.base,
            sm: raw.sm,
            sass_version: raw.sass_version,
            kernels: raw.kernels.clone(),
            globals: raw.globals.clone(),
            owned: false,
        };
        Ok(f(&m))
    }

    /// Unloads a module given up by [`Module::into_raw`] (after the GPU has finished with
    /// it, as dropping a [`Module`] does). A module of another device is left alone.
    pub fn free_raw_module(&self, raw: RawModule) {
        if raw.device == self.id() {
            self.release_slot(raw.slot, raw.generation);
        }
    }
}

impl<B: Backend> Drop for Module<'_, B> {
    fn drop(&mut self) {
        if self.owned {
            self.dev.release_slot(self.slot, self.generation);
        }
    }
}

/// A kernel of a loaded module, ready to launch.
pub struct Function<'m, 'd, B: Backend> {
    pub(super) module: &'m Module<'d, B>,
    pub(super) index: usize,
}

impl<B: Backend> fmt::Debug for Function<'_, '_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.info().name)
            .finish()
    }
}

impl<B: Backend> Function<'_, '_, B> {
    /// What the device knows about the kernel.
    pub fn info(&self) -> &KernelInfo {
        // `index` comes from `position` over the module's own list.
        &self.module.kernels[self.index]
    }
}
