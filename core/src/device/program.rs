//! What the device layer needs from a program file, independent of its format.
//!
//! The device loads anything that implements [`Program`]: an image it places at a GPU address
//! (with relocations applied for that address) and a table of kernels. CUDA cubins implement it
//! in `nvbare-gsp-firmware` (feature `device`, `nvbare_gsp_firmware::program`), which also adds
//! `Device::load_cubin(&bytes)`; the parser lives there because it needs goblin, and that crate
//! depends on this one.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// One kernel parameter in constant bank 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamDesc {
    /// Position in the signature.
    pub ordinal: u32,
    /// Byte offset from the start of the parameter area.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
}

/// A constant bank a kernel uses, inside the program image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConstBankDesc {
    /// Bank number (0..7 can be bound by a QMD; bank 0 is the driver's).
    pub bank: u32,
    /// Offset in the image.
    pub image_offset: u64,
    /// Bytes.
    pub size: u64,
}

/// A kernel of a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelDesc {
    /// Name.
    pub name: String,
    /// Offset of its code in the image.
    pub code_offset: u64,
    /// Code bytes.
    pub code_size: u64,
    /// Registers per thread.
    pub regcount: u32,
    /// Offset of the parameters in constant bank 0.
    pub param_base: u32,
    /// Parameter bytes.
    pub param_size: u32,
    /// Parameters.
    pub params: Vec<ParamDesc>,
    /// Static shared memory.
    pub shared_size: u32,
    /// Local memory per thread.
    pub local_size: u32,
    /// The compiler could not size the stack (recursion): a launch adds
    /// [`super::DeviceOptions::stack_size`] to `local_size`.
    pub stack_unknown: bool,
    /// Compile-time thread-block cluster shape (`__cluster_dims__`).
    pub cluster_dims: Option<[u32; 3]>,
    /// Thread limit (`.maxntid` / `EIATTR_MAX_THREADS`).
    pub max_threads: Option<u32>,
    /// Required block shape (`.reqntid`).
    pub required_block: Option<[u32; 3]>,
    /// Named barriers.
    pub num_barriers: u32,
    /// Constant banks.
    pub const_banks: Vec<ConstBankDesc>,
}

/// Why a program's image could not be produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramError(pub String);

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for ProgramError {}

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
    /// Its kernels.
    fn kernels(&self) -> Vec<KernelDesc>;
}
