//! Loaded cubins and their kernels.

use std::sync::Arc;

use nvbare_core::device::{DeviceError, KernelInfo, RawModule};

use crate::gpu::GpuShared;
use crate::{Error, Result};

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
