//! The one error type of this crate.

use alloc::string::String;
use core::fmt;

/// What is wrong with a firmware file or VBIOS image.
///
/// Messages say where (offsets, sizes) and what was expected. A file that fails to parse is
/// truncated, corrupt, of another version or of another kind than the caller assumed: re-fetch
/// firmware files with `tools/fetch-firmware.sh --force` (they are pinned by sha256).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A structure or region lies (partly) outside the bytes that should hold it.
    OutOfBounds {
        /// The structure or region.
        what: &'static str,
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u64,
        /// The size of what should hold it (the file, an image, a DMEM window).
        limit: u64,
    },
    /// A magic number or signature is wrong: not the kind of file the caller assumed.
    BadMagic {
        /// Which magic.
        what: &'static str,
        /// The value found.
        found: u64,
        /// The value the format requires.
        expected: u64,
    },
    /// A field holds a value the format does not allow.
    Invalid {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
        /// Why that is not allowed.
        why: &'static str,
    },
    /// A structure version this parser does not know.
    UnsupportedVersion {
        /// The structure.
        what: &'static str,
        /// The version found.
        version: u64,
    },
    /// A required structure or table entry is absent.
    Missing {
        /// What was looked for.
        what: &'static str,
    },
    /// A required ELF section is absent.
    MissingSection {
        /// The section name.
        name: String,
        /// The sections the file has, for the message.
        available: String,
    },
    /// An ELF section that must be unique appears more than once.
    DuplicateSection {
        /// The section name.
        name: String,
    },
    /// A section or structure has a size the format does not allow.
    BadSize {
        /// The section or structure.
        what: &'static str,
        /// Its size.
        size: u64,
        /// What the format requires, in words.
        expected: &'static str,
    },
    /// A checksum (CRC32, BIT byte sum) does not match the data.
    Checksum {
        /// What was checked.
        what: &'static str,
        /// The value recorded in the file.
        expected: u64,
        /// The value computed over the data.
        found: u64,
    },
    /// A cryptographic digest recorded in the file does not match the data.
    HashMismatch {
        /// What was hashed.
        what: &'static str,
    },
    /// The firmware is another version than nvbare's RM ABI is written for.
    VersionMismatch {
        /// The version in the file.
        found: String,
        /// The version nvbare needs.
        expected: &'static str,
    },
    /// The GSP-RM image has no signature section for the requested chip.
    NoSignature {
        /// The section looked for, e.g. `.fwsignature_gh100`.
        section: String,
        /// The signature sections the image has.
        available: String,
    },
    /// The ucode carries no signature for the GPU's fuse version.
    NoSignatureForFuse {
        /// The fuse version read from the GPU.
        fuse_version: u32,
        /// Which signatures the ucode carries, in words.
        available: String,
    },
    /// The bytes are a pinned firmware file, but not the one asked for (another chip or kind).
    WrongFile {
        /// The file asked for.
        expected: String,
        /// The pinned file(s) these bytes are.
        found: String,
    },
    /// The bytes match no pinned r570.144 file (corrupt, modified or another version).
    NotPinned {
        /// The file asked for.
        expected: String,
    },
    /// Not a format this crate knows.
    UnknownFormat {
        /// The first bytes, for the message.
        head: [u8; 4],
    },
}

impl Error {
    /// Attaches the name of the file the bytes came from.
    pub fn in_file(self, file: impl Into<String>) -> FileError {
        FileError {
            file: file.into(),
            error: self,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OutOfBounds {
                what,
                offset,
                len,
                limit,
            } => write!(
                f,
                "{what} at offset {offset:#x} ({len:#x} bytes) extends past the end of its \
                 container ({limit:#x} bytes): truncated or corrupt"
            ),
            Error::BadMagic {
                what,
                found,
                expected,
            } => write!(
                f,
                "bad {what}: found {found:#x}, expected {expected:#x} (not this kind of file)"
            ),
            Error::Invalid { what, value, why } => {
                write!(f, "invalid {what} {value:#x}: {why}")
            }
            Error::UnsupportedVersion { what, version } => {
                write!(f, "unsupported {what} version {version:#x}")
            }
            Error::Missing { what } => write!(f, "no {what} found"),
            Error::MissingSection { name, available } => {
                write!(f, "no ELF section '{name}' (sections: {available})")
            }
            Error::DuplicateSection { name } => {
                write!(f, "ELF section '{name}' appears more than once")
            }
            Error::BadSize {
                what,
                size,
                expected,
            } => write!(f, "{what} is {size} bytes, expected {expected}"),
            Error::Checksum {
                what,
                expected,
                found,
            } => write!(
                f,
                "{what} checksum mismatch: recorded {expected:#x}, computed {found:#x} (corrupt)"
            ),
            Error::HashMismatch { what } => {
                write!(f, "{what} does not match its recorded digest (corrupt)")
            }
            Error::VersionMismatch { found, expected } => write!(
                f,
                "firmware version {found}, but nvbare speaks the RM ABI of {expected}; use the \
                 r{expected} files (tools/fetch-firmware.sh)"
            ),
            Error::NoSignature { section, available } => write!(
                f,
                "this GSP-RM image has no '{section}' section (it has: {available}); it is the \
                 image of another chip family: load nvidia/<chip>/gsp/gsp-570.144.bin for this \
                 chip"
            ),
            Error::NoSignatureForFuse {
                fuse_version,
                available,
            } => write!(
                f,
                "no signature for fuse version {fuse_version} ({available}); the firmware is \
                 older than the GPU's fuses allow"
            ),
            Error::WrongFile { expected, found } => write!(
                f,
                "expected {expected}, but these bytes are {found} (another chip or file kind)"
            ),
            Error::NotPinned { expected } => write!(
                f,
                "the bytes given for {expected} match no pinned r570.144 file (corrupt, modified \
                 or another version)"
            ),
            Error::UnknownFormat { head } => write!(
                f,
                "unknown format (first bytes {:02x} {:02x} {:02x} {:02x}): not a GSP-RM ELF, \
                 nvfw_bin_hdr image, FMC ELF or VBIOS ROM",
                head[0], head[1], head[2], head[3]
            ),
        }
    }
}

impl core::error::Error for Error {}

/// An [`Error`] with the name of the file it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// The file name or path.
    pub file: String,
    /// What is wrong with it.
    pub error: Error,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.error)?;
        if !matches!(self.error, Error::UnknownFormat { .. }) {
            f.write_str(
                " (a cached firmware file can be restored with tools/fetch-firmware.sh --force)",
            )?;
        }
        Ok(())
    }
}

impl core::error::Error for FileError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}
