//! [`CubinError`]: every way a cubin can fail to parse or load, with messages that say what
//! to do about it.

use alloc::string::String;
use core::fmt;

use super::{IMAGE_ALIGN, MAX_IMAGE_SIZE, eiattr, reloc, trap};

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
    /// Not an NVIDIA GPU ELF (`e_machine` is not [`EM_CUDA`](super::EM_CUDA)).
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
    /// [`Cubin::load_image`](super::Cubin::load_image) was given a load address that is not
    /// [`IMAGE_ALIGN`]-aligned.
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
