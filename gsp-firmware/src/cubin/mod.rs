//! CUDA cubins: the NVIDIA GPU ELF files `ptxas`/`nvcc -cubin` produce, parsed and laid out
//! the way a GPU loader needs them.
//!
//! [`Cubin::parse`] reads the ELF (machine `EM_CUDA` = 190, ELF64, little endian) with goblin,
//! finds every kernel (`FUNC` symbols marked `STO_CUDA_ENTRY`), reads their attributes from
//! `.nv.info` / `.nv.info.<kernel>` ([`eiattr`]), and lays the loadable sections out in one
//! *image*: code (`.text.*`), constant banks (`.nv.constant<N>[.<kernel>]`) and device globals
//! (`.nv.global.init`, and `.nv.global` zero-filled), each [`IMAGE_ALIGN`]-aligned, followed
//! by [`IMAGE_TAIL_PAD`] zero bytes. Shared and local memory sections (`.nv.shared.*`,
//! `.nv.local.*`) describe sizes, not contents, and are not in the image.
//!
//! A loader then:
//! 1. allocates [`Cubin::image_size`] bytes of GPU memory at an [`IMAGE_ALIGN`]-aligned VA,
//! 2. calls [`Cubin::load_image`] with that VA (every relocation applied) and copies the bytes,
//! 3. launches a [`Kernel`] with program address `va + code_offset`, constant banks from
//!    [`Kernel::const_banks`] at `va + image_offset`, and its own constant bank 0 holding the
//!    driver area and the parameters at [`Kernel::param_base`].
//!
//! Both cubin ABIs are supported: ELF ABI v7 (OS-ABI 0x33, SM in `e_flags` bits 0..7; CUDA 12
//! for sm_80..sm_90) and ABI v8 (OS-ABI 0x41, SM in `e_flags` bits 8..15; CUDA 13, and CUDA
//! 12.9 for sm_100/sm_120). v8 no longer stores the register count in `.text` `sh_info` bits
//! 24..31, so the register count comes from `EIATTR_REGCOUNT`; where `sh_info` has one too, the
//! larger of the two is used (`sh_info` leaves out the registers of called functions).
//!
//! Relocatable objects (`ptxas -c`, `ET_REL`) parse too; [`Cubin::load_image`] applies the
//! relocation types in [`reloc`] it knows (`R_CUDA_64`, `R_CUDA_ABS32_LO_32`,
//! `R_CUDA_ABS32_HI_32`, and the call targets `R_CUDA_ABS47_34` / `R_CUDA_ABS55_16_34` that
//! debug builds, `nvcc -G`, and calls between sections need) and rejects any other type in a
//! loaded section with [`CubinError::UnsupportedRelocation`]. Relocations of sections that are
//! not loaded (`.debug_frame`, ...) are ignored. Of the symbols the CUDA driver itself provides
//! at load time, `__assertfail` (device-side `assert`) goes to a trap of nvbare's own
//! ([`trap`]); `vprintf` (`printf`), `malloc` and `free` stay undefined and are refused with
//! [`CubinError::UndefinedSymbol`].
//!
//! Every malformed input gives a [`CubinError`]; nothing here panics on file contents.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::Elf;
use goblin::elf::header::{ET_EXEC, ET_REL};
use goblin::elf::reloc::RelocSection;
use goblin::elf::section_header::{
    SHF_ALLOC, SHT_NOBITS, SHT_PROGBITS, SHT_REL, SHT_RELA, SHT_SYMTAB, SectionHeader,
};
use goblin::elf::sym::{STT_FUNC, Symtab};

pub mod eiattr;
pub mod reloc;
pub mod trap;

/// `e_machine` of a cubin (`EM_CUDA`).
pub const EM_CUDA: u16 = 190;
/// `EI_OSABI` of ELF ABI v7 cubins (CUDA 12 for sm_80..sm_90).
pub const ELFOSABI_CUDA_V7: u8 = 0x33;
/// `EI_OSABI` of ELF ABI v8 cubins (CUDA 13; CUDA 12.9 for sm_100 and up).
pub const ELFOSABI_CUDA_V8: u8 = 0x41;
/// `sh_type` of `.nv.info` and `.nv.info.<kernel>` (`SHT_LOPROC + 0`).
pub const SHT_CUDA_INFO: u32 = 0x7000_0000;
/// `st_other` bit that marks a kernel entry point (`STO_CUDA_ENTRY`).
pub const STO_CUDA_ENTRY: u8 = 0x10;

/// Alignment of every section in the image, and the alignment [`Cubin::load_image`] requires
/// of the load address. Code needs 128 bytes; QMD constant-buffer addresses need 64 (V04/V05,
/// `_SHIFTED6`) and the constant-buffer units 256 bytes, so everything gets 256.
pub const IMAGE_ALIGN: u64 = 256;
/// Zero bytes at the end of the image: the SMs prefetch instructions past the end of a
/// program, and a prefetch into unmapped memory faults.
pub const IMAGE_TAIL_PAD: u64 = 4096;
/// Largest image [`Cubin::parse`] accepts (sum of section sizes, including zero-filled
/// `.nv.global`), so a corrupt size cannot make a loader allocate without bound.
pub const MAX_IMAGE_SIZE: u64 = 1 << 30;
/// `EIATTR_MIN_STACK_SIZE` of a kernel whose stack ptxas cannot size ("Stack size ... cannot
/// be statically determined": recursion).
pub const STACK_SIZE_UNKNOWN: u32 = u32::MAX;

const SHN_UNDEF: usize = 0;
const SHN_ABS: usize = 0xfff1;
const SHN_XINDEX: u16 = 0xffff;
/// `STT_CUDA_OBJECT`: the symbol type ptxas gives device variables in ET_REL objects.
const STT_CUDA_OBJECT: u8 = 13;
const STT_OBJECT: u8 = 1;

/// A parsed cubin. See the [module docs](self) for how a loader uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cubin {
    /// Shader model as `major * 10 + minor`, e.g. 90 for sm_90, 120 for sm_120.
    pub sm: u32,
    /// ELF ABI version (`EI_ABIVERSION`): 7 (CUDA 12 up to sm_90) or 8 (CUDA 13; CUDA 12.9 for
    /// sm_100 and up).
    pub abi_version: u8,
    /// `EI_OSABI`: [`ELFOSABI_CUDA_V7`] or [`ELFOSABI_CUDA_V8`].
    pub os_abi: u8,
    /// Raw `e_flags`.
    pub e_flags: u32,
    /// Whether this is a relocatable object (`ET_REL`, `ptxas -c`) rather than an executable
    /// (`ET_EXEC`). Both load; a relocatable object may carry relocation types
    /// [`Cubin::load_image`] rejects.
    pub relocatable: bool,
    /// The kernels (entry points), in symbol-table order.
    pub kernels: Vec<Kernel>,
    /// The image sections, in image order.
    pub sections: Vec<ImageSection>,
    /// Device global variables (`.nv.global`, `.nv.global.init`), e.g. for the host to read
    /// or write them at `va + image_offset`.
    pub globals: Vec<GlobalVar>,
    /// Relocations of image sections, applied by [`Cubin::load_image`].
    pub relocations: Vec<Relocation>,
    image_size: u64,
    /// File contents of each entry of `sections` (empty for zero-filled ones).
    section_data: Vec<Vec<u8>>,
}

/// One kernel (entry point) of a cubin.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// adds `cudaLimitStackSize` (`DeviceOptions::stack_size` in nvbare-core).
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
    /// Bank number (`N` of `.nv.constant<N>`).
    pub bank: u32,
    /// Byte offset in the image.
    pub image_offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// What a section of the image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    /// `.text.<function>`.
    Code,
    /// `.nv.constant<N>` or `.nv.constant<N>.<kernel>`.
    Constant {
        /// The bank number.
        bank: u32,
    },
    /// `.nv.global`: zero-initialised device variables (no file contents).
    Global,
    /// `.nv.global.init`: initialised device variables.
    GlobalInit,
    /// Any other allocated `PROGBITS` section.
    Data,
}

/// A section placed in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSection {
    /// ELF section name.
    pub name: String,
    /// What it holds.
    pub kind: SectionKind,
    /// Byte offset in the image.
    pub image_offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// A device global variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalVar {
    /// Symbol name.
    pub name: String,
    /// Byte offset in the image.
    pub image_offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// What a relocation's symbol resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelocTarget {
    /// A place in the image (byte offset): the value is `load VA + offset`.
    Image(u64),
    /// An absolute value (`SHN_ABS` symbol).
    Absolute(u64),
    /// An undefined symbol: the cubin needs linking (nvlink) first.
    Undefined,
    /// A symbol in a section that is not loaded (named).
    NotLoaded(String),
}

/// A relocation of an image section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relocation {
    /// The section it patches.
    pub section: String,
    /// Image offset of the relocated location (section offset + `r_offset`).
    pub image_offset: u64,
    /// `R_CUDA_*` type ([`reloc::name`] gives the name).
    pub r_type: u32,
    /// The symbol's name.
    pub symbol: String,
    /// What the symbol resolves to.
    pub target: RelocTarget,
    /// The addend (explicit in RELA sections, read from the patched field in REL ones).
    pub addend: i64,
}

/// Why a cubin could not be parsed or loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CubinError {
    /// The data ends before `what`.
    Truncated {
        /// The structure being read.
        what: &'static str,
    },
    /// No ELF magic.
    NotElf,
    /// Not ELF64 (`EI_CLASS` 2); 32-bit cubins are from CUDA toolkits nvbare does not support.
    WrongClass {
        /// `EI_CLASS`.
        class: u8,
    },
    /// Not little endian (`EI_DATA` 1).
    WrongEndian {
        /// `EI_DATA`.
        data: u8,
    },
    /// Not an NVIDIA GPU ELF (`e_machine` is not [`EM_CUDA`]).
    WrongMachine {
        /// `e_machine`.
        machine: u16,
    },
    /// Neither an executable nor a relocatable object.
    UnsupportedType {
        /// `e_type`.
        e_type: u16,
    },
    /// An OS-ABI / ABI-version pair other than (0x33, 7) and (0x41, 8).
    UnsupportedAbi {
        /// `EI_OSABI`.
        os_abi: u8,
        /// `EI_ABIVERSION`.
        abi_version: u8,
    },
    /// The ELF structure is inconsistent.
    Malformed {
        /// What is wrong.
        what: &'static str,
        /// Where (section or symbol name), if known.
        at: String,
    },
    /// goblin rejected a structure.
    Elf {
        /// The structure being read.
        what: &'static str,
        /// goblin's message.
        message: String,
    },
    /// A section's contents lie outside the file.
    SectionOutOfBounds {
        /// Section name (or index if the name is unreadable).
        section: String,
    },
    /// A kernel lacks an attribute it needs.
    MissingAttribute {
        /// The kernel.
        kernel: String,
        /// The attribute, e.g. `EIATTR_REGCOUNT`.
        attribute: &'static str,
    },
    /// An `.nv.info` record is malformed.
    BadAttribute {
        /// The `.nv.info*` section.
        section: String,
        /// The attribute byte.
        attribute: u8,
        /// What is wrong.
        reason: &'static str,
    },
    /// A relocation of a loaded section has a type the loader does not implement.
    UnsupportedRelocation {
        /// `R_CUDA_*` type number.
        r_type: u32,
        /// Its name, if known.
        name: Option<&'static str>,
        /// The section it patches.
        section: String,
        /// `r_offset`.
        offset: u64,
    },
    /// A relocation patches bytes outside its section.
    RelocationOutOfBounds {
        /// The section it patches.
        section: String,
        /// `r_offset`.
        offset: u64,
    },
    /// A relocation refers to an undefined symbol (the object needs linking).
    UndefinedSymbol {
        /// The symbol.
        symbol: String,
    },
    /// A relocation refers to a symbol in a section that is not loaded.
    SymbolNotLoaded {
        /// The symbol.
        symbol: String,
        /// Its section.
        section: String,
    },
    /// The relocated value does not fit (address arithmetic overflowed).
    RelocationOverflow {
        /// The symbol.
        symbol: String,
    },
    /// A relocated value does not fit its instruction field (a call target that is not
    /// 4-byte aligned or wider than the field).
    RelocationValue {
        /// The symbol.
        symbol: String,
        /// The relocation type's name.
        name: Option<&'static str>,
        /// The value.
        value: u64,
        /// What is wrong with it.
        error: reloc::FieldError,
    },
    /// The image would exceed [`MAX_IMAGE_SIZE`] (or the host's address space).
    ImageTooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// [`Cubin::load_image`] was given a load address that is not [`IMAGE_ALIGN`]-aligned.
    MisalignedBase {
        /// The address.
        base_va: u64,
    },
}

impl fmt::Display for CubinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { what } => write!(
                f,
                "cubin truncated: the data ends inside the {what}; check the file was copied whole"
            ),
            Self::NotElf => f.write_str(
                "not a cubin: no ELF magic (a fatbin or PTX text? extract the sm_XX cubin with \
                 `cuobjdump -xelf` or compile with `ptxas`/`nvcc -cubin`)",
            ),
            Self::WrongClass { class } => write!(
                f,
                "cubin is ELF class {class}, not ELF64: rebuild it for a 64-bit target with a \
                 CUDA 12 or 13 toolkit"
            ),
            Self::WrongEndian { data } => {
                write!(
                    f,
                    "cubin is not little endian (EI_DATA = {data}); not a cubin"
                )
            }
            Self::WrongMachine { machine } => write!(
                f,
                "ELF machine is {machine}, not EM_CUDA (190): this is not an NVIDIA GPU binary"
            ),
            Self::UnsupportedType { e_type } => write!(
                f,
                "ELF type {e_type} is neither ET_EXEC nor ET_REL; give nvbare a cubin from \
                 ptxas or nvcc -cubin"
            ),
            Self::UnsupportedAbi {
                os_abi,
                abi_version,
            } => write!(
                f,
                "unsupported cubin ABI: OS-ABI {os_abi:#x}, ABI version {abi_version} (nvbare \
                 reads 0x33/v7 and 0x41/v8, i.e. CUDA 12 and 13 output)"
            ),
            Self::Malformed { what, at } if at.is_empty() => write!(f, "malformed cubin: {what}"),
            Self::Malformed { what, at } => write!(f, "malformed cubin: {what} ({at})"),
            Self::Elf { what, message } => write!(f, "malformed cubin {what}: {message}"),
            Self::SectionOutOfBounds { section } => write!(
                f,
                "malformed cubin: section {section} extends past the end of the file (truncated?)"
            ),
            Self::MissingAttribute { kernel, attribute } => write!(
                f,
                "kernel {kernel} has no {attribute} in .nv.info; was the cubin stripped or \
                 produced by an unsupported tool?"
            ),
            Self::BadAttribute {
                section,
                attribute,
                reason,
            } => {
                let name = eiattr::name(*attribute).unwrap_or("unknown attribute");
                write!(f, "malformed {section}: {name} ({attribute:#04x}) {reason}")
            }
            Self::UnsupportedRelocation {
                r_type,
                name,
                section,
                offset,
            } => write!(
                f,
                "relocation {} ({r_type:#x}) at {section}+{offset:#x} is not supported by the \
                 loader; link the object with nvlink first, or compile without -c / -rdc=true",
                name.unwrap_or("of unknown type")
            ),
            Self::RelocationOutOfBounds { section, offset } => write!(
                f,
                "malformed cubin: relocation at {section}+{offset:#x} patches bytes outside the \
                 section"
            ),
            Self::UndefinedSymbol { symbol } => match driver_provided(symbol) {
                Some(feature) => write!(
                    f,
                    "the code calls {symbol}, which the CUDA driver links in at load time for \
                     device-side {feature}; nvbare does not provide it: remove {feature} from \
                     the device code (or build it only for debugging with CUDA)"
                ),
                None => write!(
                    f,
                    "relocation against undefined symbol {symbol}: link the object (nvlink) \
                     before loading it"
                ),
            },
            Self::SymbolNotLoaded { symbol, section } => write!(
                f,
                "relocation against {symbol} in section {section}, which is not part of the \
                 loaded image"
            ),
            Self::RelocationOverflow { symbol } => write!(
                f,
                "relocation against {symbol} overflows 64-bit address arithmetic; load the \
                 image at a lower address"
            ),
            Self::RelocationValue {
                symbol,
                name,
                value,
                error,
            } => {
                let name = name.unwrap_or("relocation");
                match error {
                    reloc::FieldError::Misaligned => write!(
                        f,
                        "{name} against {symbol}: the call target {value:#x} is not 4-byte \
                         aligned; the cubin is corrupt"
                    ),
                    reloc::FieldError::TooWide => write!(
                        f,
                        "{name} against {symbol}: the call target {value:#x} does not fit the \
                         instruction's field; load the image at a lower address"
                    ),
                    reloc::FieldError::Unsupported | reloc::FieldError::Length => write!(
                        f,
                        "{name} against {symbol} cannot be applied (a loader bug: please report \
                         it with the cubin)"
                    ),
                }
            }
            Self::ImageTooLarge { size } => write!(
                f,
                "cubin image would be {size} bytes, more than nvbare loads ({MAX_IMAGE_SIZE}); \
                 the section sizes are corrupt or the module is too large"
            ),
            Self::MisalignedBase { base_va } => write!(
                f,
                "cubin load address {base_va:#x} is not {IMAGE_ALIGN}-byte aligned; allocate \
                 the image with that alignment"
            ),
        }
    }
}

impl core::error::Error for CubinError {}

fn malformed(what: &'static str, at: impl Into<String>) -> CubinError {
    CubinError::Malformed {
        what,
        at: at.into(),
    }
}

fn elf_err(what: &'static str) -> impl Fn(goblin::error::Error) -> CubinError {
    move |e| CubinError::Elf {
        what,
        message: e.to_string(),
    }
}

fn to_usize(v: u64, what: &'static str, at: &str) -> Result<usize, CubinError> {
    usize::try_from(v).map_err(|_| malformed(what, at))
}

fn align_up(v: u64, align: u64) -> Option<u64> {
    // `align` is a power of two.
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

/// The NUL-terminated string at `off` in a string table.
fn cstr(table: &[u8], off: usize, at: &str) -> Result<String, CubinError> {
    let tail = table
        .get(off..)
        .ok_or_else(|| malformed("string offset outside its string table", at))?;
    let end = tail
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed("unterminated string", at))?;
    let s = tail.get(..end).unwrap_or(&[]);
    core::str::from_utf8(s)
        .map(|s| s.to_string())
        .map_err(|_| malformed("name is not UTF-8", at))
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// Bytes of GPU memory an image whose sections end at `end` needs: rounded up to
/// [`IMAGE_ALIGN`], plus [`IMAGE_TAIL_PAD`].
fn image_size_for(end: u64) -> Result<u64, CubinError> {
    align_up(end, IMAGE_ALIGN)
        .and_then(|e| e.checked_add(IMAGE_TAIL_PAD))
        .filter(|&e| e <= MAX_IMAGE_SIZE + IMAGE_TAIL_PAD)
        .ok_or(CubinError::ImageTooLarge { size: end })
}

/// The device-side feature behind a symbol the CUDA driver provides when it loads a module
/// (calls that `nvcc` leaves undefined in every cubin that uses the feature).
fn driver_provided(symbol: &str) -> Option<&'static str> {
    Some(match symbol {
        "vprintf" => "printf",
        trap::ASSERTFAIL => "assert",
        "malloc" | "free" => "malloc/free",
        _ => return None,
    })
}

/// A section header with its name.
struct Section {
    hdr: SectionHeader,
    name: String,
}

/// The file bytes of a section (empty for `SHT_NOBITS`), bounds-checked.
fn section_bytes<'a>(bytes: &'a [u8], s: &Section) -> Result<&'a [u8], CubinError> {
    if s.hdr.sh_type == SHT_NOBITS || s.hdr.sh_size == 0 {
        return Ok(&[]);
    }
    let off = to_usize(s.hdr.sh_offset, "section offset", &s.name)?;
    let size = to_usize(s.hdr.sh_size, "section size", &s.name)?;
    off.checked_add(size)
        .and_then(|end| bytes.get(off..end))
        .ok_or_else(|| CubinError::SectionOutOfBounds {
            section: s.name.clone(),
        })
}

/// How a section goes into the image, if it does: its kind and whether it has file contents.
fn classify(s: &Section) -> Option<(SectionKind, bool)> {
    let name = s.name.as_str();
    let alloc = s.hdr.sh_flags & u64::from(SHF_ALLOC) != 0;
    if name.starts_with(".nv.shared") || name.starts_with(".nv.local") {
        return None;
    }
    if name == ".nv.global" {
        return Some((SectionKind::Global, false));
    }
    if name == ".nv.global.init" {
        return Some((SectionKind::GlobalInit, true));
    }
    if let Some(rest) = name.strip_prefix(".nv.constant") {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (num, suffix) = rest.split_at(digits);
        if !num.is_empty() && (suffix.is_empty() || suffix.starts_with('.')) {
            let bank = num.parse().ok()?;
            return Some((SectionKind::Constant { bank }, s.hdr.sh_type != SHT_NOBITS));
        }
    }
    if name.starts_with(".text.") && alloc {
        return Some((SectionKind::Code, true));
    }
    if alloc && s.hdr.sh_type == SHT_PROGBITS {
        return Some((SectionKind::Data, true));
    }
    None
}

/// One `.nv.info` record.
struct Attr<'a> {
    attr: u8,
    /// The u16 after the attribute byte: the value of `EIFMT_BVAL`/`EIFMT_HVAL` records.
    value: u16,
    /// The payload of `EIFMT_SVAL` records.
    payload: &'a [u8],
}

fn parse_attrs<'a>(data: &'a [u8], section: &str) -> Result<Vec<Attr<'a>>, CubinError> {
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < data.len() {
        let (Some(&fmt), Some(&attr), Some(value)) =
            (data.get(i), data.get(i + 1), le_u16(data, i + 2))
        else {
            return Err(CubinError::BadAttribute {
                section: section.to_string(),
                attribute: data.get(i + 1).copied().unwrap_or(0),
                reason: "record header runs past the end of the section",
            });
        };
        i += 4;
        let payload = match fmt {
            eiattr::EIFMT_NVAL | eiattr::EIFMT_BVAL | eiattr::EIFMT_HVAL => &[][..],
            eiattr::EIFMT_SVAL => {
                let end = i + usize::from(value);
                let p = data.get(i..end).ok_or_else(|| CubinError::BadAttribute {
                    section: section.to_string(),
                    attribute: attr,
                    reason: "value runs past the end of the section",
                })?;
                i = end;
                p
            }
            _ => {
                return Err(CubinError::BadAttribute {
                    section: section.to_string(),
                    attribute: attr,
                    reason: "has an unknown EIFMT format byte",
                });
            }
        };
        out.push(Attr {
            attr,
            value,
            payload,
        });
    }
    Ok(out)
}

fn bad_attr(section: &str, attr: u8, reason: &'static str) -> CubinError {
    CubinError::BadAttribute {
        section: section.to_string(),
        attribute: attr,
        reason,
    }
}

/// `[u32 symbol index, u32 value]` payload of per-function records in `.nv.info`.
fn sym_value(a: &Attr<'_>, section: &str) -> Result<(u32, u32), CubinError> {
    match (a.payload.len(), le_u32(a.payload, 0), le_u32(a.payload, 4)) {
        (8, Some(sym), Some(v)) => Ok((sym, v)),
        _ => Err(bad_attr(section, a.attr, "is not 8 bytes (symbol, value)")),
    }
}

fn dims(a: &Attr<'_>, section: &str) -> Result<[u32; 3], CubinError> {
    match (
        a.payload.len(),
        le_u32(a.payload, 0),
        le_u32(a.payload, 4),
        le_u32(a.payload, 8),
    ) {
        (12, Some(x), Some(y), Some(z)) => Ok([x, y, z]),
        _ => Err(bad_attr(section, a.attr, "is not 12 bytes (x, y, z)")),
    }
}

fn dims_product(d: [u32; 3], section: &str, attr: u8) -> Result<u32, CubinError> {
    d[0].checked_mul(d[1])
        .and_then(|v| v.checked_mul(d[2]))
        .ok_or_else(|| bad_attr(section, attr, "block dimensions overflow"))
}

/// Per-function facts from the module-wide `.nv.info`, keyed by symbol index.
#[derive(Default, Clone, Copy)]
struct FuncInfo {
    regcount: Option<u32>,
    frame_size: u32,
    min_stack_size: u32,
}

/// What a kernel's `.nv.info.<name>` says.
#[derive(Default)]
struct KernelInfo {
    /// (offset, size) from `EIATTR_PARAM_CBANK`.
    param_cbank: Option<(u32, u32)>,
    params: Vec<KernelParam>,
    max_threads: Option<u32>,
    max_block: Option<[u32; 3]>,
    required_block: Option<[u32; 3]>,
    num_barriers: Option<u32>,
    cluster_dims: Option<[u32; 3]>,
}

impl KernelInfo {
    fn parse(data: &[u8], sn: &str) -> Result<KernelInfo, CubinError> {
        let mut k = KernelInfo::default();
        let mut cbank_param_size = None;
        for a in parse_attrs(data, sn)? {
            match a.attr {
                eiattr::EIATTR_PARAM_CBANK => {
                    // [u32 symbol of .nv.constant0.<name>, u16 offset, u16 size]
                    match (a.payload.len(), le_u16(a.payload, 4), le_u16(a.payload, 6)) {
                        (8, Some(o), Some(s)) => k.param_cbank = Some((u32::from(o), u32::from(s))),
                        _ => {
                            return Err(bad_attr(
                                sn,
                                a.attr,
                                "is not 8 bytes (symbol, offset, size)",
                            ));
                        }
                    }
                }
                eiattr::EIATTR_CBANK_PARAM_SIZE => cbank_param_size = Some(u32::from(a.value)),
                eiattr::EIATTR_KPARAM_INFO => {
                    // [u32 index, u16 ordinal, u16 offset, u32 flags: log2 align 0..7,
                    //  space 8..11, cbank 12..16, size 18..31]
                    match (
                        a.payload.len(),
                        le_u16(a.payload, 4),
                        le_u16(a.payload, 6),
                        le_u32(a.payload, 8),
                    ) {
                        (12, Some(ordinal), Some(offset), Some(w)) => k.params.push(KernelParam {
                            ordinal: u32::from(ordinal),
                            offset: u32::from(offset),
                            size: w >> 18,
                        }),
                        _ => return Err(bad_attr(sn, a.attr, "is not 12 bytes")),
                    }
                }
                eiattr::EIATTR_MAX_THREADS => k.max_block = Some(dims(&a, sn)?),
                eiattr::EIATTR_REQNTID => k.required_block = Some(dims(&a, sn)?),
                eiattr::EIATTR_NUM_BARRIERS => k.num_barriers = Some(u32::from(a.value & 0xff)),
                eiattr::EIATTR_CTA_PER_CLUSTER => k.cluster_dims = Some(dims(&a, sn)?),
                _ => {}
            }
        }
        if let (Some((_, s)), Some(c)) = (k.param_cbank, cbank_param_size)
            && s != c
        {
            return Err(bad_attr(
                sn,
                eiattr::EIATTR_CBANK_PARAM_SIZE,
                "disagrees with EIATTR_PARAM_CBANK",
            ));
        }
        for (d, attr) in [
            (k.max_block, eiattr::EIATTR_MAX_THREADS),
            (k.required_block, eiattr::EIATTR_REQNTID),
        ] {
            if let Some(d) = d {
                let n = dims_product(d, sn, attr)?;
                k.max_threads = Some(k.max_threads.map_or(n, |l| l.min(n)));
            }
        }
        k.params.sort_by_key(|p| p.ordinal);
        for p in &k.params {
            let inside = k
                .param_cbank
                .is_some_and(|(_, size)| p.offset.checked_add(p.size).is_some_and(|e| e <= size));
            if !inside {
                return Err(bad_attr(
                    sn,
                    eiattr::EIATTR_KPARAM_INFO,
                    "describes a parameter outside EIATTR_PARAM_CBANK",
                ));
            }
        }
        Ok(k)
    }
}

impl Cubin {
    /// Parses a cubin. Accepts ELF64 little-endian `EM_CUDA` executables and relocatable
    /// objects of ABI v7 or v8; every inconsistency is a [`CubinError`].
    pub fn parse(bytes: &[u8]) -> Result<Cubin, CubinError> {
        let ident = bytes.get(..16).ok_or(CubinError::Truncated {
            what: "ELF identification",
        })?;
        if ident.get(..4) != Some(b"\x7fELF".as_slice()) {
            return Err(CubinError::NotElf);
        }
        let (class, data, os_abi, abi_version) = (ident[4], ident[5], ident[7], ident[8]);
        if class != 2 {
            return Err(CubinError::WrongClass { class });
        }
        if data != 1 {
            return Err(CubinError::WrongEndian { data });
        }
        if bytes.len() < 64 {
            return Err(CubinError::Truncated { what: "ELF header" });
        }
        let h = Elf::parse_header(bytes).map_err(elf_err("ELF header"))?;
        if h.e_machine != EM_CUDA {
            return Err(CubinError::WrongMachine {
                machine: h.e_machine,
            });
        }
        let relocatable = match h.e_type {
            ET_EXEC => false,
            ET_REL => true,
            e_type => return Err(CubinError::UnsupportedType { e_type }),
        };
        let sm = match (os_abi, abi_version) {
            (ELFOSABI_CUDA_V7, 7) => h.e_flags & 0xff,
            (ELFOSABI_CUDA_V8, 8) => (h.e_flags >> 8) & 0xff,
            _ => {
                return Err(CubinError::UnsupportedAbi {
                    os_abi,
                    abi_version,
                });
            }
        };
        if sm == 0 {
            return Err(malformed("e_flags carries no SM version", ""));
        }

        // Section headers and names.
        if h.e_shoff == 0 {
            return Err(malformed("no section header table", ""));
        }
        if h.e_shentsize != 64 {
            return Err(malformed("section header entry size is not 64", ""));
        }
        let ctx = Ctx::new(Container::Big, Endian::Little);
        let shoff = to_usize(h.e_shoff, "section header offset", "")?;
        let hdrs = SectionHeader::parse(bytes, shoff, usize::from(h.e_shnum), ctx)
            .map_err(elf_err("section headers"))?;
        if hdrs.is_empty() {
            return Err(malformed("no section headers", ""));
        }
        let shstrndx = if h.e_shstrndx == SHN_XINDEX {
            hdrs.first().map_or(0, |s| s.sh_link as usize)
        } else {
            usize::from(h.e_shstrndx)
        };
        let shstr_hdr = hdrs
            .get(shstrndx)
            .ok_or_else(|| malformed("section name table index out of range", ""))?;
        let shstrtab = section_bytes(
            bytes,
            &Section {
                hdr: shstr_hdr.clone(),
                name: String::from(".shstrtab"),
            },
        )?;
        let mut sections = Vec::with_capacity(hdrs.len());
        for (i, hdr) in hdrs.into_iter().enumerate() {
            let name = cstr(shstrtab, hdr.sh_name, "section name")
                .map_err(|_| malformed("bad section name", alloc::format!("section {i}")))?;
            sections.push(Section { hdr, name });
        }

        // Symbols.
        let symtab_idx = sections
            .iter()
            .position(|s| s.hdr.sh_type == SHT_SYMTAB)
            .ok_or_else(|| malformed("no symbol table", ""))?;
        let symtab_sec = &sections[symtab_idx];
        let sym_data = section_bytes(bytes, symtab_sec)?;
        if sym_data.len() % 24 != 0 {
            return Err(malformed(
                "symbol table size is not a multiple of 24",
                ".symtab",
            ));
        }
        let symtab = Symtab::parse(sym_data, 0, sym_data.len() / 24, ctx)
            .map_err(elf_err("symbol table"))?;
        let strtab = sections
            .get(symtab_sec.hdr.sh_link as usize)
            .ok_or_else(|| malformed("symbol string table index out of range", ".symtab"))
            .and_then(|s| section_bytes(bytes, s))?;
        let sym_name = |i: usize, st_name: usize| {
            cstr(strtab, st_name, "symbol name")
                .map_err(|_| malformed("bad symbol name", alloc::format!("symbol {i}")))
        };

        // Image layout.
        let mut image: Vec<ImageSection> = Vec::new();
        let mut section_data: Vec<Vec<u8>> = Vec::new();
        let mut image_of: Vec<Option<usize>> = alloc::vec![None; sections.len()];
        let mut end = 0u64;
        for (i, s) in sections.iter().enumerate() {
            let Some((kind, has_data)) = classify(s) else {
                continue;
            };
            let align = s.hdr.sh_addralign.max(1);
            if !align.is_power_of_two() || align > 4096 {
                return Err(malformed(
                    "section alignment is not a power of two up to 4096",
                    &s.name,
                ));
            }
            let off = align_up(end, align.max(IMAGE_ALIGN))
                .ok_or(CubinError::ImageTooLarge { size: u64::MAX })?;
            end = off
                .checked_add(s.hdr.sh_size)
                .filter(|&e| e <= MAX_IMAGE_SIZE)
                .ok_or(CubinError::ImageTooLarge {
                    size: off.saturating_add(s.hdr.sh_size),
                })?;
            let data = if has_data {
                section_bytes(bytes, s)?.to_vec()
            } else {
                Vec::new()
            };
            image_of[i] = Some(image.len());
            image.push(ImageSection {
                name: s.name.clone(),
                kind,
                image_offset: off,
                size: s.hdr.sh_size,
            });
            section_data.push(data);
        }
        let image_size = image_size_for(end)?;

        // Image offset of (section index, value) as a symbol sees it.
        let place = |shndx: usize, value: u64| -> Option<Result<u64, CubinError>> {
            let img = image.get((*image_of.get(shndx)?)?)?;
            let hdr = &sections.get(shndx)?.hdr;
            Some(
                value
                    .checked_sub(hdr.sh_addr)
                    .and_then(|v| img.image_offset.checked_add(v))
                    .ok_or_else(|| malformed("symbol value outside its section", &img.name)),
            )
        };

        // Globals.
        let mut globals = Vec::new();
        for (i, sym) in symtab.iter().enumerate() {
            let t = sym.st_type();
            if t != STT_OBJECT && t != STT_CUDA_OBJECT {
                continue;
            }
            let Some(sec) = image_of
                .get(sym.st_shndx)
                .copied()
                .flatten()
                .and_then(|k| image.get(k))
            else {
                continue;
            };
            if !matches!(sec.kind, SectionKind::Global | SectionKind::GlobalInit) {
                continue;
            }
            let Some(off) = place(sym.st_shndx, sym.st_value) else {
                continue;
            };
            let off = off?;
            let name = sym_name(i, sym.st_name)?;
            let in_section = off
                .checked_add(sym.st_size)
                .is_some_and(|e| e <= sec.image_offset.saturating_add(sec.size));
            if !in_section {
                return Err(malformed("global variable extends past its section", name));
            }
            globals.push(GlobalVar {
                name,
                image_offset: off,
                size: sym.st_size,
            });
        }

        // Relocations of image sections.
        let mut relocations = Vec::new();
        for s in &sections {
            let is_rela = match s.hdr.sh_type {
                SHT_RELA => true,
                SHT_REL => false,
                _ => continue,
            };
            let Some(Some(target_idx)) = image_of.get(s.hdr.sh_info as usize).copied() else {
                continue;
            };
            if s.hdr.sh_link as usize != symtab_idx {
                return Err(malformed(
                    "relocation section does not use .symtab",
                    &s.name,
                ));
            }
            let target = &image[target_idx];
            let target_data = &section_data[target_idx];
            let data = section_bytes(bytes, s)?;
            let entsize = if is_rela { 24 } else { 16 };
            if data.len() % entsize != 0 {
                return Err(malformed(
                    "relocation section size is not a multiple of the entry size",
                    &s.name,
                ));
            }
            let rs = RelocSection::parse(data, 0, data.len(), is_rela, ctx)
                .map_err(elf_err("relocation section"))?;
            for r in rs.iter() {
                let sym = symtab
                    .get(r.r_sym)
                    .ok_or_else(|| malformed("relocation symbol index out of range", &s.name))?;
                let symbol = sym_name(r.r_sym, sym.st_name)?;
                let field = reloc::span(r.r_type);
                if let Some((at, width)) = field {
                    let fits = r
                        .r_offset
                        .checked_add(at + width)
                        .is_some_and(|e| e <= target.size);
                    if !fits {
                        return Err(CubinError::RelocationOutOfBounds {
                            section: target.name.clone(),
                            offset: r.r_offset,
                        });
                    }
                } else if r.r_offset >= target.size {
                    return Err(CubinError::RelocationOutOfBounds {
                        section: target.name.clone(),
                        offset: r.r_offset,
                    });
                }
                let addend = match (r.r_addend, field) {
                    (Some(a), _) if is_rela => a,
                    // REL: the addend is what the field holds now (zero in a zero-filled
                    // section).
                    (_, Some(_)) if target_data.is_empty() => 0,
                    (_, Some((at, width))) => {
                        let pos = to_usize(r.r_offset + at, "relocation offset", &s.name)?;
                        let bytes = pos
                            .checked_add(width as usize)
                            .and_then(|e| target_data.get(pos..e));
                        bytes
                            .and_then(|b| reloc::read(r.r_type, b))
                            .ok_or_else(|| CubinError::RelocationOutOfBounds {
                                section: target.name.clone(),
                                offset: r.r_offset,
                            })? as i64
                    }
                    _ => 0,
                };
                let to =
                    match sym.st_shndx {
                        SHN_UNDEF => RelocTarget::Undefined,
                        SHN_ABS => RelocTarget::Absolute(sym.st_value),
                        idx => match place(idx, sym.st_value) {
                            Some(off) => RelocTarget::Image(off?),
                            None => RelocTarget::NotLoaded(sections.get(idx).map_or_else(
                                || alloc::format!("section {idx}"),
                                |x| x.name.clone(),
                            )),
                        },
                    };
                relocations.push(Relocation {
                    section: target.name.clone(),
                    image_offset: target.image_offset + r.r_offset,
                    r_type: r.r_type,
                    symbol,
                    target: to,
                    addend,
                });
            }
        }

        // Module-wide .nv.info: per-function register count, frame and stack sizes.
        let mut funcs: Vec<(u32, FuncInfo)> = Vec::new();
        for s in sections
            .iter()
            .filter(|s| s.hdr.sh_type == SHT_CUDA_INFO && s.name == ".nv.info")
        {
            for a in parse_attrs(section_bytes(bytes, s)?, &s.name)? {
                let slot = |funcs: &mut Vec<(u32, FuncInfo)>, sym: u32| -> usize {
                    match funcs.iter().position(|(k, _)| *k == sym) {
                        Some(p) => p,
                        None => {
                            funcs.push((sym, FuncInfo::default()));
                            funcs.len() - 1
                        }
                    }
                };
                match a.attr {
                    eiattr::EIATTR_REGCOUNT => {
                        let (sym, v) = sym_value(&a, &s.name)?;
                        let p = slot(&mut funcs, sym);
                        funcs[p].1.regcount = Some(v);
                    }
                    eiattr::EIATTR_FRAME_SIZE => {
                        let (sym, v) = sym_value(&a, &s.name)?;
                        let p = slot(&mut funcs, sym);
                        funcs[p].1.frame_size = v;
                    }
                    eiattr::EIATTR_MIN_STACK_SIZE => {
                        let (sym, v) = sym_value(&a, &s.name)?;
                        let p = slot(&mut funcs, sym);
                        funcs[p].1.min_stack_size = v;
                    }
                    _ => {}
                }
            }
        }

        // Module-wide constant banks (other than 0).
        let module_banks: Vec<ConstBank> = sections
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let img = image.get(image_of.get(i).copied().flatten()?)?;
                match img.kind {
                    SectionKind::Constant { bank }
                        if bank != 0
                            && s.name
                                .strip_prefix(".nv.constant")
                                .is_some_and(|r| !r.contains('.')) =>
                    {
                        Some(ConstBank {
                            bank,
                            image_offset: img.image_offset,
                            size: img.size,
                        })
                    }
                    _ => None,
                }
            })
            .collect();

        // Kernels.
        let mut kernels = Vec::new();
        for (i, sym) in symtab.iter().enumerate() {
            if sym.st_type() != STT_FUNC || sym.st_other & STO_CUDA_ENTRY == 0 {
                continue;
            }
            let name = sym_name(i, sym.st_name)?;
            let text_idx = sym.st_shndx;
            let text = sections
                .get(text_idx)
                .filter(|s| s.name.starts_with(".text."))
                .ok_or_else(|| malformed("kernel symbol is not in a .text section", &name))?;
            let code_img = image_of
                .get(text_idx)
                .copied()
                .flatten()
                .and_then(|k| image.get(k))
                .ok_or_else(|| malformed("kernel code is not loadable", &name))?;
            let code_offset = place(text_idx, sym.st_value)
                .ok_or_else(|| malformed("kernel code is not loadable", &name))??;
            let code_size = (code_img.image_offset + code_img.size)
                .checked_sub(code_offset)
                .ok_or_else(|| malformed("kernel symbol lies past the end of its code", &name))?;
            let sym_index = u32::try_from(i).unwrap_or(u32::MAX);
            let fi = funcs
                .iter()
                .find(|(k, _)| *k == sym_index)
                .map(|(_, f)| *f)
                .unwrap_or_default();
            let sh_info_regs = text.hdr.sh_info >> 24;
            // Where both are given they can differ: `sh_info` counts the kernel's own
            // registers, `EIATTR_REGCOUNT` (what cuobjdump reports) also those of the functions
            // it calls (`nvcc -G`, or calls between sections: 38 against 26 in a kernel
            // calling `sin`). A launch needs the larger.
            let regcount = match (fi.regcount, sh_info_regs) {
                (Some(r), s) => r.max(s),
                (None, 0) => {
                    return Err(CubinError::MissingAttribute {
                        kernel: name,
                        attribute: "EIATTR_REGCOUNT",
                    });
                }
                (None, s) => s,
            };
            if regcount > 255 {
                return Err(bad_attr(
                    ".nv.info",
                    eiattr::EIATTR_REGCOUNT,
                    "is above 255 registers",
                ));
            }

            // Sections that belong to this kernel: linked by sh_info to its .text section.
            let own = |prefix: &str| {
                sections.iter().enumerate().find(|(_, s)| {
                    s.name.starts_with(prefix)
                        && (s.hdr.sh_info as usize == text_idx
                            || s.name.get(prefix.len()..) == Some(name.as_str()))
                })
            };
            let cbank0 = own(".nv.constant0.");
            let cbank0_size = match cbank0 {
                Some((_, s)) => u32::try_from(s.hdr.sh_size)
                    .map_err(|_| malformed("constant bank 0 larger than 4 GiB", &s.name))?,
                None => 0,
            };
            let shared_size = match sections
                .iter()
                .find(|s| s.name.strip_prefix(".nv.shared.") == Some(name.as_str()))
            {
                Some(s) => u32::try_from(s.hdr.sh_size)
                    .map_err(|_| malformed("shared memory larger than 4 GiB", &s.name))?,
                None => 0,
            };

            // Per-kernel .nv.info.<name>.
            let info = match sections.iter().find(|s| {
                s.hdr.sh_type == SHT_CUDA_INFO
                    && s.name.starts_with(".nv.info.")
                    && (s.hdr.sh_info as usize == text_idx
                        || s.name.get(9..) == Some(name.as_str()))
            }) {
                Some(s) => KernelInfo::parse(section_bytes(bytes, s)?, &s.name)?,
                None => KernelInfo::default(),
            };
            let (param_base, param_size) = info.param_cbank.unwrap_or((cbank0_size, 0));
            if cbank0_size != 0 && param_base.saturating_add(param_size) > cbank0_size {
                return Err(malformed(
                    "parameters extend past the kernel's constant bank 0",
                    name,
                ));
            }
            let mut const_banks = module_banks.clone();
            for (i, s) in sections.iter().enumerate() {
                let Some(img) = image_of
                    .get(i)
                    .copied()
                    .flatten()
                    .and_then(|k| image.get(k))
                else {
                    continue;
                };
                if let SectionKind::Constant { bank } = img.kind {
                    let owner = s
                        .name
                        .strip_prefix(".nv.constant")
                        .and_then(|r| r.split_once('.'))
                        .map(|(_, k)| k);
                    if bank != 0 && owner == Some(name.as_str()) {
                        const_banks.push(ConstBank {
                            bank,
                            image_offset: img.image_offset,
                            size: img.size,
                        });
                    }
                }
            }
            const_banks.sort_by_key(|b| b.bank);
            let stack_unknown = fi.min_stack_size == STACK_SIZE_UNKNOWN;
            kernels.push(Kernel {
                code_offset,
                code_size,
                regcount,
                param_base,
                param_size,
                params: info.params,
                shared_size,
                local_size: if stack_unknown {
                    fi.frame_size
                } else {
                    fi.frame_size.max(fi.min_stack_size)
                },
                stack_unknown,
                cluster_dims: info.cluster_dims,
                frame_size: fi.frame_size,
                min_stack_size: fi.min_stack_size,
                cbank0_size: if cbank0_size == 0 {
                    param_base.saturating_add(param_size)
                } else {
                    cbank0_size
                },
                max_threads: info.max_threads,
                max_block: info.max_block,
                required_block: info.required_block,
                // ABI v7 executables keep the barrier count in `.text` sh_flags bits 20..26
                // instead of EIATTR_NUM_BARRIERS.
                num_barriers: info
                    .num_barriers
                    .unwrap_or(((text.hdr.sh_flags >> 20) & 0x7f) as u32),
                const_banks,
                name,
            });
        }

        // Calls to `__assertfail` (device-side `assert`) go to a trap of nvbare's own, placed
        // after the sections ([`trap`]).
        let mut image_size = image_size;
        let asserts =
            |r: &Relocation| r.target == RelocTarget::Undefined && r.symbol == trap::ASSERTFAIL;
        if relocations.iter().any(asserts)
            && let Some(code) = trap::code(sm)
        {
            let off = align_up(end, IMAGE_ALIGN).ok_or(CubinError::ImageTooLarge { size: end })?;
            let size = code.len() as u64;
            image_size = image_size_for(off + size)?;
            image.push(ImageSection {
                name: trap::TRAP_SECTION.to_string(),
                kind: SectionKind::Code,
                image_offset: off,
                size,
            });
            section_data.push(code.to_vec());
            for r in relocations.iter_mut().filter(|r| asserts(r)) {
                r.target = RelocTarget::Image(off);
            }
        }

        Ok(Cubin {
            sm,
            abi_version,
            os_abi,
            e_flags: h.e_flags,
            relocatable,
            kernels,
            sections: image,
            globals,
            relocations,
            image_size,
            section_data,
        })
    }

    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// The device global variable called `name`.
    pub fn global(&self, name: &str) -> Option<&GlobalVar> {
        self.globals.iter().find(|g| g.name == name)
    }

    /// Bytes of GPU memory the image needs, including [`IMAGE_TAIL_PAD`]; a multiple of
    /// [`IMAGE_ALIGN`].
    pub fn image_size(&self) -> u64 {
        self.image_size
    }

    /// The QMD `SASS_VERSION` for this cubin's SM: `major << 4 | minor` (0x89 for sm_89,
    /// 0x90 for sm_90, 0xa0 for sm_100, 0xc0 for sm_120).
    pub fn sass_version(&self) -> u32 {
        ((self.sm / 10) << 4) | (self.sm % 10)
    }

    /// The loadable image for a load at GPU virtual address `base_va`, every relocation
    /// applied; [`Cubin::image_size`] bytes. `base_va` must be [`IMAGE_ALIGN`]-aligned.
    pub fn load_image(&self, base_va: u64) -> Result<Vec<u8>, CubinError> {
        if !base_va.is_multiple_of(IMAGE_ALIGN) {
            return Err(CubinError::MisalignedBase { base_va });
        }
        let too_large = CubinError::ImageTooLarge {
            size: self.image_size,
        };
        let size = usize::try_from(self.image_size).map_err(|_| too_large.clone())?;
        let mut img = Vec::new();
        img.try_reserve_exact(size).map_err(|_| too_large)?;
        img.resize(size, 0);
        for (s, data) in self.sections.iter().zip(&self.section_data) {
            let dst = usize::try_from(s.image_offset)
                .ok()
                .and_then(|o| img.get_mut(o..o.checked_add(data.len())?))
                .ok_or_else(|| malformed("section outside the image", &s.name))?;
            dst.copy_from_slice(data);
        }
        for r in &self.relocations {
            let (at, width) =
                reloc::span(r.r_type).ok_or_else(|| CubinError::UnsupportedRelocation {
                    r_type: r.r_type,
                    name: reloc::name(r.r_type),
                    section: r.section.clone(),
                    offset: r.image_offset.saturating_sub(
                        self.sections
                            .iter()
                            .find(|s| s.name == r.section)
                            .map_or(0, |s| s.image_offset),
                    ),
                })?;
            let s = match &r.target {
                RelocTarget::Image(off) => base_va.checked_add(*off),
                RelocTarget::Absolute(v) => Some(*v),
                RelocTarget::Undefined => {
                    return Err(CubinError::UndefinedSymbol {
                        symbol: r.symbol.clone(),
                    });
                }
                RelocTarget::NotLoaded(section) => {
                    return Err(CubinError::SymbolNotLoaded {
                        symbol: r.symbol.clone(),
                        section: section.clone(),
                    });
                }
            };
            let value = s
                .and_then(|s| s.checked_add_signed(r.addend))
                .ok_or_else(|| CubinError::RelocationOverflow {
                    symbol: r.symbol.clone(),
                })?;
            let pos = usize::try_from(r.image_offset + at).ok();
            let dst = pos
                .and_then(|p| img.get_mut(p..p.checked_add(width as usize)?))
                .ok_or_else(|| CubinError::RelocationOutOfBounds {
                    section: r.section.clone(),
                    offset: r.image_offset,
                })?;
            reloc::write(r.r_type, dst, value).map_err(|e| CubinError::RelocationValue {
                symbol: r.symbol.clone(),
                name: reloc::name(r.r_type),
                value,
                error: e,
            })?;
        }
        Ok(img)
    }

    /// The code of kernel `k` inside an image from [`Cubin::load_image`]; empty if the image
    /// is too short.
    pub fn code<'a>(&self, k: &Kernel, image: &'a [u8]) -> &'a [u8] {
        let range = usize::try_from(k.code_offset).ok().and_then(|o| {
            let e = o.checked_add(usize::try_from(k.code_size).ok()?)?;
            Some(o..e)
        });
        range.and_then(|r| image.get(r)).unwrap_or(&[])
    }
}
