//! What a kernel needs to be launched, independent of the file it came from (feature `alloc`).
//!
//! One type, [`Kernel`], carries a kernel's metadata from the program file to the launch: the
//! cubin parser in `nvbare-gsp-firmware` produces it (`cubin::Kernel` is this type), the
//! device layer's `Program` trait hands it over, and a loaded kernel (`device::KernelInfo`) is
//! this type plus its GPU address. It lives here because the parser's crate depends on this
//! one, not the other way round.
//!
//! Offsets are relative to the program *image*: the loader adds the image's GPU address.

use alloc::string::String;
use alloc::vec::Vec;

/// `EIATTR_MIN_STACK_SIZE` of a kernel whose stack ptxas cannot size ("Stack size ... cannot
/// be statically determined": recursion).
pub const STACK_SIZE_UNKNOWN: u32 = u32::MAX;

/// One kernel (entry point) of a program.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Kernel {
    /// The entry symbol's name (`.text.<name>`).
    pub name: String,
    /// Byte offset of the kernel's first instruction in the image: the QMD program address is
    /// `load VA + code_offset`.
    pub code_offset: u64,
    /// Bytes of code from `code_offset` to the end of its `.text` section (in executables the
    /// section also holds the `.func`s the kernel calls).
    pub code_size: u64,
    /// Registers per thread (`EIATTR_REGCOUNT`).
    pub regcount: u32,
    /// Byte offset of the parameters in constant bank 0 (`EIATTR_PARAM_CBANK`). Below it is
    /// the driver area. For a kernel without parameters, the size of its bank 0.
    pub param_base: u32,
    /// Bytes of parameters (`EIATTR_PARAM_CBANK` / `EIATTR_CBANK_PARAM_SIZE`).
    pub param_size: u32,
    /// The parameters (`EIATTR_KPARAM_INFO`), by ordinal.
    pub params: Vec<KernelParam>,
    /// Static shared memory per block (size of `.nv.shared.<name>`); 0 when the kernel uses
    /// none. For sm_90 and later ptxas places the kernel's variables after the 1 KiB
    /// system-reserved area and counts that area in this size (4000 bytes of `.shared` give
    /// 5024); for sm_80/sm_89 it does not (4000 give 4000).
    pub shared_size: u32,
    /// Local memory per thread the compiler needs: the larger of `EIATTR_FRAME_SIZE` and
    /// `EIATTR_MIN_STACK_SIZE` (the stack includes the kernel's frame and its callees'); only
    /// the frame when ptxas could not size the stack ([`Kernel::stack_unknown`]).
    pub local_size: u32,
    /// ptxas could not size the stack (recursion: `EIATTR_MIN_STACK_SIZE` is
    /// [`STACK_SIZE_UNKNOWN`]): a launch adds its stack limit to [`Kernel::local_size`], as CUDA
    /// adds `cudaLimitStackSize` (`DeviceOptions::stack_size` in the device layer).
    pub stack_unknown: bool,
    /// Compile-time thread-block cluster shape (`__cluster_dims__`, `EIATTR_CTA_PER_CLUSTER`);
    /// such a kernel only runs right in a cluster launch.
    pub cluster_dims: Option<[u32; 3]>,
    /// `EIATTR_FRAME_SIZE`: the kernel's own stack frame.
    pub frame_size: u32,
    /// `EIATTR_MIN_STACK_SIZE`: stack needed by the kernel and the functions it calls.
    pub min_stack_size: u32,
    /// Size of the kernel's constant bank 0 (`.nv.constant0.<name>`): driver area plus
    /// parameters. The loader builds bank 0 per launch; it is not taken from the image.
    pub cbank0_size: u32,
    /// Most threads per block this kernel may run with: the product of `EIATTR_MAX_THREADS`
    /// (`.maxntid`) or `EIATTR_REQNTID` (`.reqntid`), whichever is smaller; `None` if neither.
    pub max_threads: Option<u32>,
    /// `EIATTR_MAX_THREADS` (`.maxntid x, y, z`).
    pub max_block: Option<[u32; 3]>,
    /// `EIATTR_REQNTID` (`.reqntid x, y, z`): the block shape the kernel requires.
    pub required_block: Option<[u32; 3]>,
    /// Named barriers the kernel uses (`EIATTR_NUM_BARRIERS`, or `.text` `sh_flags` bits
    /// 20..26 in ABI v7 executables); the QMD `BARRIER_COUNT`.
    pub num_barriers: u32,
    /// Constant banks other than 0 the kernel sees, from the image: the module's
    /// `.nv.constant<N>` and the kernel's own `.nv.constant<N>.<name>`, sorted by bank.
    /// Bind each at `load VA + image_offset` with `size` bytes.
    pub const_banks: Vec<ConstBank>,
}

/// One kernel parameter (`EIATTR_KPARAM_INFO`).
///
/// The record holds no alignment of the parameter itself (cuobjdump calls its alignment bits
/// the *pointee's*); the offset is aligned for the declared type, so a typed launch checks an
/// argument's alignment against [`KernelParam::offset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelParam {
    /// Position in the parameter list, from 0.
    pub ordinal: u32,
    /// Byte offset from [`Kernel::param_base`].
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A constant bank in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConstBank {
    /// Bank number (`N` of `.nv.constant<N>`; 0..7 can be bound by a QMD, bank 0 is the
    /// driver's).
    pub bank: u32,
    /// Byte offset in the image.
    pub image_offset: u64,
    /// Size in bytes.
    pub size: u64,
}
