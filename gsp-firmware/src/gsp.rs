//! The GSP-RM firmware image (`nvidia/<chip>/gsp/gsp-570.144.bin`).
//!
//! An ELF64 (`EM_RISCV`, `ET_REL`) container; OpenRM reads it in `_kgspPrepareGspRmBinaryImage`
//! (`src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c`):
//!
//! * `.fwimage`: the RISC-V GSP-RM image the bootloader loads, handed to the GSP through radix3
//!   tables ([`GspFirmware::radix3`]);
//! * `.fwversion`: the NUL-terminated version string, which must equal the driver's version
//!   (`_kgspFwContainerVerifyVersion`): [`crate::FIRMWARE_VERSION`] for nvbare;
//! * `.fwsignature_<family>` and `.fwsignature_cc_<family>` (confidential computing, Hopper and
//!   Blackwell): the signature the WPR metadata points at, per chip family (`nv-firmware.h`
//!   `nv_firmware_chip_family_to_string`; [`nvbare_core::chip::ChipInfo::gsp_signature_family`]);
//! * `.note.gnu.build-id`: the build id RM keeps for crash decoding.
//!
//! Two images exist: `gsp_tu10x` (linux-firmware `tu102/gsp/gsp-*.bin`; families tu10x, tu11x,
//! ga100; LIBOS2, its `.fwimage` is itself a stripped RISC-V ELF) and `gsp_ga10x`
//! (`ga102/gsp/gsp-*.bin`; ga10x, ad10x, gh100, gb10x, gb20x; LIBOS3, its `.fwimage` is a raw
//! image). The other chips' `gsp-*.bin` are links to these. Either way the bytes of `.fwimage`
//! are handed to the GSP as they are.
//!
//! ```no_run
//! # fn f(bytes: &[u8]) -> Result<(), nvbare_gsp_firmware::Error> {
//! use nvbare_core::chip::Chipset;
//! use nvbare_gsp_firmware::GspFirmware;
//!
//! let fw = GspFirmware::parse(bytes)?; // checks .fwversion == "570.144"
//! let signature = fw.signature(Chipset::GH100)?; // .fwsignature_gh100, for sysmemAddrOfSignature
//! let radix3 = fw.radix3()?; // tables + pages for sysmemAddrOfRadix3Elf
//! let size = fw.image().len(); // sizeOfRadix3Elf
//! # let _ = (signature, radix3, size); Ok(()) }
//! ```

use alloc::format;
use alloc::string::String;

use nvbare_core::chip::Chipset;

use crate::bytes::{slice, u32_at};
use crate::elf::{Class, Elf};
use crate::radix3::Radix3;
use crate::{Error, FIRMWARE_VERSION};

/// `GSP_IMAGE_SECTION_NAME`.
pub const IMAGE_SECTION: &str = ".fwimage";
/// `GSP_VERSION_SECTION_NAME`.
pub const VERSION_SECTION: &str = ".fwversion";
/// `GSP_SIGNATURE_SECTION_NAME_PREFIX`.
pub const SIGNATURE_PREFIX: &str = ".fwsignature_";
/// `GSP_CC_SIGNATURE_SECTION_NAME_PREFIX` (confidential computing).
pub const CC_SIGNATURE_PREFIX: &str = ".fwsignature_cc_";
/// `GSP_BUILD_ID_SECTION_NAME`.
pub const BUILD_ID_SECTION: &str = ".note.gnu.build-id";
/// `NT_GNU_BUILD_ID`.
const NT_GNU_BUILD_ID: u32 = 3;
/// OpenRM rejects a `.fwversion` of 64 bytes or more.
const MAX_VERSION_LEN: usize = 64;

/// One `.fwsignature_*` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignatureSection<'a> {
    /// Chip family, e.g. `gh100`, `ga10x`.
    pub family: &'a str,
    /// `.fwsignature_cc_<family>`: the confidential-computing signature.
    pub confidential_compute: bool,
    /// The signature bytes (4 KiB in r570.144).
    pub data: &'a [u8],
}

/// A parsed GSP-RM image, borrowing the file's bytes.
#[derive(Debug, Clone)]
pub struct GspFirmware<'a> {
    elf: Elf<'a>,
    version: &'a str,
    image: &'a [u8],
    build_id: Option<&'a [u8]>,
}

impl<'a> GspFirmware<'a> {
    /// Parses a GSP-RM image and requires `.fwversion` to be [`FIRMWARE_VERSION`]: nvbare's RM
    /// structures are laid out as r570.144 has them, and other versions differ.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let fw = Self::parse_any_version(bytes)?;
        fw.check_version(FIRMWARE_VERSION)?;
        Ok(fw)
    }

    /// Parses a GSP-RM image of any version (for inspection tools).
    pub fn parse_any_version(bytes: &'a [u8]) -> Result<Self, Error> {
        let elf = Elf::parse(bytes)?;
        if elf.class != Class::Elf64 {
            return Err(Error::Invalid {
                what: "GSP-RM ELF class",
                value: 1,
                why: "the GSP-RM image is ELF64 (ELF32 with an 'image' section is an FMC file)",
            });
        }
        let image = elf.unique_section(IMAGE_SECTION)?.data;
        if image.is_empty() {
            return Err(Error::BadSize {
                what: "section .fwimage",
                size: 0,
                expected: "a non-empty GSP-RM image",
            });
        }
        let version = parse_version(elf.unique_section(VERSION_SECTION)?.data)?;
        for s in elf.sections() {
            if let Some(family) = signature_family(s.name) {
                if family.0.is_empty() {
                    return Err(Error::Invalid {
                        what: "signature section (no chip family in its name)",
                        value: s.index as u64,
                        why: "expected .fwsignature_<family>",
                    });
                }
                if s.data.is_empty() {
                    return Err(Error::BadSize {
                        what: "GSP-RM signature section",
                        size: 0,
                        expected: "a non-empty signature",
                    });
                }
            }
        }
        let build_id = elf
            .section(BUILD_ID_SECTION)
            .and_then(|s| gnu_build_id(s.data));
        Ok(GspFirmware {
            elf,
            version,
            image,
            build_id,
        })
    }

    /// Fails with [`Error::VersionMismatch`] unless `.fwversion` is `expected`.
    pub fn check_version(&self, expected: &'static str) -> Result<(), Error> {
        if self.version == expected {
            Ok(())
        } else {
            Err(Error::VersionMismatch {
                found: String::from(self.version),
                expected,
            })
        }
    }

    /// The `.fwversion` string, e.g. "570.144".
    pub fn version(&self) -> &'a str {
        self.version
    }

    /// The `.fwimage` bytes: what the radix3 tables describe (`sizeOfRadix3Elf` is its length).
    pub fn image(&self) -> &'a [u8] {
        self.image
    }

    /// Radix3 tables over [`GspFirmware::image`].
    pub fn radix3(&self) -> Result<Radix3<'a>, Error> {
        Radix3::new(self.image)
    }

    /// The signature for `chip` (`.fwsignature_<family>`), which the WPR metadata points at
    /// (`sysmemAddrOfSignature`, `sizeOfSignature`). Fails with [`Error::NoSignature`] when this
    /// image is not the one for `chip`'s family.
    pub fn signature(&self, chip: Chipset) -> Result<&'a [u8], Error> {
        self.signature_for_family(chip.info().gsp_signature_family, false)
    }

    /// The confidential-computing signature for `chip` (`.fwsignature_cc_<family>`; Hopper and
    /// Blackwell only).
    pub fn signature_cc(&self, chip: Chipset) -> Result<&'a [u8], Error> {
        self.signature_for_family(chip.info().gsp_signature_family, true)
    }

    /// The signature section for a chip family name (`ga10x`, `gh100`, ...).
    pub fn signature_for_family(
        &self,
        family: &str,
        confidential_compute: bool,
    ) -> Result<&'a [u8], Error> {
        let prefix = if confidential_compute {
            CC_SIGNATURE_PREFIX
        } else {
            SIGNATURE_PREFIX
        };
        let name = format!("{prefix}{family}");
        match self.elf.unique_section(&name) {
            Ok(s) => Ok(s.data),
            Err(Error::MissingSection { .. }) => Err(Error::NoSignature {
                section: name,
                available: self.signature_names(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Whether this image carries a signature for `chip`.
    pub fn supports(&self, chip: Chipset) -> bool {
        self.signature(chip).is_ok()
    }

    /// Every signature section.
    pub fn signatures(&self) -> impl Iterator<Item = SignatureSection<'a>> + '_ {
        self.elf.sections().iter().filter_map(|s| {
            let (family, cc) = signature_family(s.name)?;
            Some(SignatureSection {
                family,
                confidential_compute: cc,
                data: s.data,
            })
        })
    }

    /// The GNU build id, if the image has a well-formed `.note.gnu.build-id`.
    pub fn build_id(&self) -> Option<&'a [u8]> {
        self.build_id
    }

    /// The ELF container (section list for inspection).
    pub fn elf(&self) -> &Elf<'a> {
        &self.elf
    }

    fn signature_names(&self) -> String {
        let mut out = String::new();
        for s in self.signatures() {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(if s.confidential_compute {
                CC_SIGNATURE_PREFIX
            } else {
                SIGNATURE_PREFIX
            });
            out.push_str(s.family);
        }
        if out.is_empty() {
            out.push_str("none");
        }
        out
    }
}

/// `(family, confidential_compute)` of a signature section name.
fn signature_family(name: &str) -> Option<(&str, bool)> {
    if let Some(f) = name.strip_prefix(CC_SIGNATURE_PREFIX) {
        Some((f, true))
    } else {
        name.strip_prefix(SIGNATURE_PREFIX).map(|f| (f, false))
    }
}

/// The `.fwversion` text: non-empty, under 64 bytes, NUL-terminated, printable ASCII.
fn parse_version(data: &[u8]) -> Result<&str, Error> {
    let malformed = |why| Error::Invalid {
        what: "section .fwversion (length)",
        value: data.len() as u64,
        why,
    };
    if data.is_empty() || data.len() >= MAX_VERSION_LEN {
        return Err(malformed("must hold 1 to 63 bytes"));
    }
    let (text, nul) = data.split_at(data.len() - 1);
    if nul != [0] {
        return Err(malformed("must end with a NUL byte"));
    }
    if text.is_empty() || !text.iter().all(|b| b.is_ascii_graphic()) {
        return Err(malformed("must be a printable ASCII version string"));
    }
    core::str::from_utf8(text).map_err(|_| malformed("must be ASCII"))
}

/// The descriptor of an `NT_GNU_BUILD_ID` note named "GNU".
fn gnu_build_id(note: &[u8]) -> Option<&[u8]> {
    let namesz = u32_at(note, "note namesz", 0).ok()? as u64;
    let descsz = u32_at(note, "note descsz", 4).ok()? as u64;
    let kind = u32_at(note, "note type", 8).ok()?;
    let name = slice(note, "note name", 12, namesz).ok()?;
    if kind != NT_GNU_BUILD_ID || name != b"GNU\0" {
        return None;
    }
    let desc_off = 12 + crate::bytes::round_up(namesz, 4)?;
    slice(note, "note desc", desc_off, descsz).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text() {
        assert_eq!(parse_version(b"570.144\0").unwrap(), "570.144");
        assert!(parse_version(b"570.144").is_err());
        assert!(parse_version(b"\0").is_err());
        assert!(parse_version(b"").is_err());
        assert!(parse_version(b"57\x010\0").is_err());
        assert!(parse_version(&[b'1'; 64]).is_err());
    }

    #[test]
    fn family_names() {
        assert_eq!(
            signature_family(".fwsignature_gh100"),
            Some(("gh100", false))
        );
        assert_eq!(
            signature_family(".fwsignature_cc_gb10x"),
            Some(("gb10x", true))
        );
        assert_eq!(signature_family(".fwimage"), None);
    }
}
