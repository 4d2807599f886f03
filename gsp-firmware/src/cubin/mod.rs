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
//!
//! The parser runs in passes, one private module each: `sections` (ELF header, section
//! headers, image layout), `symbols` (the symbol table, device globals), `kernels` (entry
//! points and their attributes) and `relocations` (and the `__assertfail` trap). A kernel's
//! metadata is [`Kernel`], the one kernel-metadata type (`nvbare_core::kernel`), so the device
//! layer launches what the parser produced without a copy into a type of its own.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

pub use nvbare_core::kernel::{ConstBank, Kernel, KernelParam, STACK_SIZE_UNKNOWN};

pub use error::CubinError;
use sections::Layout;
use symbols::Symbols;

pub mod eiattr;
mod error;
mod kernels;
pub mod reloc;
mod relocations;
mod sections;
mod symbols;
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

impl Cubin {
    /// Parses a cubin. Accepts ELF64 little-endian `EM_CUDA` executables and relocatable
    /// objects of ABI v7 or v8; every inconsistency is a [`CubinError`].
    pub fn parse(bytes: &[u8]) -> Result<Cubin, CubinError> {
        let h = sections::header(bytes)?;
        let sections = sections::sections(bytes, &h)?;
        let syms = Symbols::parse(bytes, &sections)?;
        let mut layout = Layout::new(bytes, &sections)?;
        let image_size = image_size_for(layout.end)?;
        let globals = symbols::globals(&syms, &sections, &layout)?;
        let mut relocations = relocations::relocations(bytes, &sections, &syms, &layout)?;
        let kernels = kernels::kernels(bytes, &sections, &syms, &layout)?;
        let image_size =
            relocations::place_assert_trap(h.sm, &mut layout, &mut relocations, image_size)?;
        Ok(Cubin {
            sm: h.sm,
            abi_version: h.abi_version,
            os_abi: h.os_abi,
            e_flags: h.e_flags,
            relocatable: h.relocatable,
            kernels,
            sections: layout.image,
            globals,
            relocations,
            image_size,
            section_data: layout.data,
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
            relocations::apply(r, &self.sections, base_va, &mut img)?;
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
