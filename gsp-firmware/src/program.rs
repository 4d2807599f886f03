//! Cubins as device programs (feature `device`).
//!
//! The device layer (`nvbare_core::device`) loads anything implementing
//! [`Program`]; this module implements it for [`Cubin`] and adds
//! [`LoadCubin::load_cubin`], which parses cubin bytes and loads them in one call:
//!
//! ```text
//! use nvbare_gsp_firmware::program::LoadCubin;
//! let module = dev.load_cubin(&std::fs::read("kernels.cubin")?)?;
//! ```
//!
//! The parser lives in this crate (it uses goblin) and this crate depends on `nvbare-core`, so
//! the core device layer cannot call it directly; the trait breaks that cycle.

use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;

use nvbare_core::device::{
    Backend, Device, DeviceError, Module, Program, ProgramError, ProgramGlobal,
};

use crate::cubin::{Cubin, CubinError, Kernel};

impl Program for Cubin {
    fn sm(&self) -> u32 {
        self.sm
    }

    fn sass_version(&self) -> u32 {
        Cubin::sass_version(self)
    }

    fn image_size(&self) -> u64 {
        Cubin::image_size(self)
    }

    fn image(&self, base_va: u64) -> Result<Vec<u8>, ProgramError> {
        self.load_image(base_va)
            .map_err(|e| ProgramError(e.to_string()))
    }

    fn kernels(&self) -> Vec<Kernel> {
        self.kernels.clone()
    }

    fn globals(&self) -> Vec<ProgramGlobal> {
        self.globals
            .iter()
            .map(|g| ProgramGlobal {
                name: g.name.clone(),
                image_offset: g.image_offset,
                size: g.size,
            })
            .collect()
    }
}

/// Why [`LoadCubin::load_cubin`] failed.
#[derive(Debug)]
pub enum LoadError {
    /// The bytes are not a cubin nvbare can load (malformed, truncated, unsupported).
    Cubin(CubinError),
    /// The device refused it (e.g. [`DeviceError::WrongSm`]) or failed while loading it.
    Device(DeviceError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Cubin(e) => write!(f, "cannot load the cubin: {e}"),
            LoadError::Device(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            LoadError::Cubin(e) => Some(e),
            LoadError::Device(e) => Some(e),
        }
    }
}

impl From<CubinError> for LoadError {
    fn from(e: CubinError) -> Self {
        LoadError::Cubin(e)
    }
}

impl From<DeviceError> for LoadError {
    fn from(e: DeviceError) -> Self {
        LoadError::Device(e)
    }
}

/// The runtime cubins (the device layer's own kernels, `tests/fixtures/cubins/src/runtime.ptx`
/// built with CUDA 13 by `build.sh`), by shader model.
pub const RUNTIME_CUBINS: &[(u32, &[u8])] = &[
    (80, include_bytes!("../cubins/runtime_sm80_cuda13.cubin")),
    (89, include_bytes!("../cubins/runtime_sm89_cuda13.cubin")),
    (90, include_bytes!("../cubins/runtime_sm90_cuda13.cubin")),
    (100, include_bytes!("../cubins/runtime_sm100_cuda13.cubin")),
    (120, include_bytes!("../cubins/runtime_sm120_cuda13.cubin")),
];

/// The runtime cubin that runs on shader model `sm`: the same major version, the highest minor
/// version not above the device's (sm_86 runs the sm_80 build), as the device's own check.
pub fn runtime_cubin(sm: u32) -> Option<&'static [u8]> {
    RUNTIME_CUBINS
        .iter()
        .filter(|(s, _)| s / 10 == sm / 10 && s % 10 <= sm % 10)
        .max_by_key(|(s, _)| *s)
        .map(|(_, b)| *b)
}

/// Loading cubin bytes into a [`Device`].
pub trait LoadCubin<B: Backend> {
    /// Parses `bytes` as a cubin, checks it is for this GPU's shader model and uploads the
    /// relocated image (see [`Device::load_module`]).
    fn load_cubin(&self, bytes: &[u8]) -> Result<Module<'_, B>, LoadError>;

    /// Installs the built-in runtime kernels for this GPU ([`runtime_cubin`]): the copy kernel
    /// large device-to-device copies use ([`Device::install_copy_kernel`]). Returns `false`
    /// when there is no runtime cubin for the device's shader model (copies then stay on the
    /// copy engine).
    fn install_runtime(&self) -> Result<bool, LoadError>;
}

impl<B: Backend> LoadCubin<B> for Device<B> {
    fn load_cubin(&self, bytes: &[u8]) -> Result<Module<'_, B>, LoadError> {
        let cubin = Cubin::parse(bytes)?;
        Ok(self.load_module(&cubin)?)
    }

    fn install_runtime(&self) -> Result<bool, LoadError> {
        let Some(bytes) = runtime_cubin(self.info().sm) else {
            return Ok(false);
        };
        let cubin = Cubin::parse(bytes)?;
        self.install_copy_kernel(&cubin)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static KERNELS: &[u8] = include_bytes!("../cubins/kernels_sm90_cuda12.cubin");

    #[test]
    fn runtime_cubins_are_picked_by_shader_model() {
        for (sm, want) in [
            (80, 80),
            (86, 80),
            (89, 89),
            (90, 90),
            (100, 100),
            (120, 120),
        ] {
            let c = Cubin::parse(runtime_cubin(sm).unwrap()).unwrap();
            assert_eq!(c.sm, want, "sm_{sm}");
            let k = c
                .kernels
                .iter()
                .find(|k| k.name == nvbare_core::device::COPY_KERNEL_NAME)
                .unwrap();
            let sizes: Vec<u32> = k.params.iter().map(|p| p.size).collect();
            assert_eq!(sizes, [8, 8, 8]);
        }
        assert!(runtime_cubin(75).is_none());
        assert!(runtime_cubin(110).is_none());
    }

    #[test]
    fn the_program_view_matches_the_cubin() {
        let c = Cubin::parse(KERNELS).unwrap();
        assert_eq!(Program::sm(&c), 90);
        assert_eq!(Program::sass_version(&c), 0x90);
        assert_eq!(Program::image_size(&c), c.image_size());
        assert_eq!(
            Program::image(&c, 0x10_0000).unwrap(),
            c.load_image(0x10_0000).unwrap()
        );
        let e = Program::image(&c, 0x10_0001).unwrap_err();
        assert_eq!(
            e.0,
            c.load_image(0x10_0001).unwrap_err().to_string(),
            "the cubin error's message is kept"
        );
        let ks = Program::kernels(&c);
        assert_eq!(ks.len(), c.kernels.len());
        for (d, k) in ks.iter().zip(&c.kernels) {
            assert_eq!(d.name, k.name);
            assert_eq!((d.code_offset, d.code_size), (k.code_offset, k.code_size));
            assert_eq!((d.param_base, d.param_size), (k.param_base, k.param_size));
            assert_eq!(d.params.len(), k.params.len());
            for (p, q) in d.params.iter().zip(&k.params) {
                assert_eq!((p.ordinal, p.offset, p.size), (q.ordinal, q.offset, q.size));
            }
            assert_eq!(d.const_banks.len(), k.const_banks.len());
            assert_eq!(
                (d.regcount, d.shared_size, d.local_size, d.num_barriers),
                (k.regcount, k.shared_size, k.local_size, k.num_barriers)
            );
            assert_eq!(
                (d.max_threads, d.required_block),
                (k.max_threads, k.required_block)
            );
        }
    }

    #[test]
    fn load_errors_say_which_side_failed() {
        let e = LoadError::from(Cubin::parse(b"nope").unwrap_err());
        assert!(e.to_string().starts_with("cannot load the cubin: "), "{e}");
        let e = LoadError::from(DeviceError::WrongSm {
            cubin: 80,
            device: 90,
        });
        assert!(e.to_string().contains("sm_80"), "{e}");
    }
}
