//! What the device layer needs from a program file, independent of its format.
//!
//! The device loads anything that implements [`Program`]: an image it places at a GPU address
//! (with relocations applied for that address) and a table of kernels ([`Kernel`], the one
//! kernel-metadata type). CUDA cubins implement it in `nvbare-gsp-firmware` (feature
//! `device`, `nvbare_gsp_firmware::program`), which also adds `Device::load_cubin(&bytes)`;
//! the parser lives there because it needs goblin, and that crate depends on this one.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::kernel::Kernel;

/// Why a program's image could not be produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramError(pub String);

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for ProgramError {}

/// A device variable of a program (a cubin's `.nv.global` / `.nv.global.init` symbol): where
/// it lies in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramGlobal {
    /// Symbol name.
    pub name: String,
    /// Byte offset in the image.
    pub image_offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// A loadable program (a parsed cubin).
pub trait Program {
    /// Shader model it was compiled for, `major * 10 + minor`.
    fn sm(&self) -> u32;
    /// The QMD `SASS_VERSION` (`major << 4 | minor`).
    fn sass_version(&self) -> u32 {
        let sm = self.sm();
        ((sm / 10) << 4) | (sm % 10)
    }
    /// Bytes of GPU memory the image needs.
    fn image_size(&self) -> u64;
    /// The image for a load at GPU VA `base_va` (256-byte aligned), relocations applied.
    fn image(&self, base_va: u64) -> Result<Vec<u8>, ProgramError>;
    /// Its kernels, with offsets relative to the image.
    fn kernels(&self) -> Vec<Kernel>;
    /// Its device variables, with offsets relative to the image (none by default).
    fn globals(&self) -> Vec<ProgramGlobal> {
        Vec::new()
    }
}
