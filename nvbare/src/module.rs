//! Loaded cubins and their kernels.

use std::sync::Arc;

use nvbare_core::device::{DeviceError, GlobalInfo, KernelInfo, RawModule};

use crate::gpu::GpuShared;
use crate::{DeviceBuffer, DeviceRepr, Error, Result};

pub(crate) struct Loaded {
    pub gpu: Arc<GpuShared>,
    pub raw: RawModule,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Ok(d) = self.gpu.lock() {
            d.free_module(self.raw.clone());
        }
    }
}

/// A loaded cubin. Reference-counted: its image stays loaded while the module or one of its
/// [`Function`]s exists.
#[derive(Clone)]
pub struct Module {
    pub(crate) loaded: Arc<Loaded>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("kernels", &self.loaded.raw.kernels().len())
            .finish()
    }
}

impl Module {
    pub(crate) fn new(gpu: Arc<GpuShared>, raw: RawModule) -> Self {
        Module {
            loaded: Arc::new(Loaded { gpu, raw }),
        }
    }

    /// Every kernel, with its parameters.
    pub fn kernels(&self) -> &[KernelInfo] {
        self.loaded.raw.kernels()
    }

    /// Every device variable (`__device__` globals of `.nv.global` and `.nv.global.init`):
    /// name, GPU VA and size.
    pub fn globals(&self) -> &[GlobalInfo] {
        self.loaded.raw.globals()
    }

    /// The device variable called `name` (mangled for C++ names outside `extern "C"`), as a
    /// buffer of `T` over its bytes in the module's image: copy to and from it, or pass it to
    /// a kernel, like any [`DeviceBuffer`]. It keeps the module loaded and is never freed on
    /// its own. A missing name is [`DeviceError::NoSuchGlobal`] (listing the module's
    /// variables); a size that is not a multiple of `T`'s is [`DeviceError::BadRange`].
    ///
    /// `__constant__` variables are not found: they live in constant banks, which are not
    /// listed yet.
    pub fn global<T: DeviceRepr>(&self, name: &str) -> Result<DeviceBuffer<T>> {
        let raw = self.loaded.raw.global(name)?;
        DeviceBuffer::of_module(self.loaded.clone(), raw)
    }

    /// The kernel called `name` (its mangled name for C++ kernels; `extern "C"` ones keep
    /// theirs).
    pub fn function(&self, name: &str) -> Result<Function> {
        match self.loaded.raw.kernel_index(name) {
            Some(index) => Ok(Function {
                loaded: self.loaded.clone(),
                index,
            }),
            None => {
                let names: Vec<&str> = self.kernels().iter().map(|k| k.name.as_str()).collect();
                Err(Error::Device(DeviceError::NoSuchKernel(format!(
                    "{name} (the cubin has: {})",
                    names.join(", ")
                ))))
            }
        }
    }
}

/// A kernel of a loaded [`Module`], ready to launch ([`crate::Stream::launch_builder`]).
#[derive(Clone)]
pub struct Function {
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) index: usize,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.info().name)
            .finish()
    }
}

impl Function {
    /// What the cubin says about the kernel (parameters, registers, shared memory).
    pub fn info(&self) -> &KernelInfo {
        &self.loaded.raw.kernels()[self.index]
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.info().name
    }
}
