//! `nvbare fw inspect FILE --json`: the facts the text output shows, as `Serialize` structs
//! (the header every file has, the ELF sections where there are some, and the structure of
//! each format).

use std::path::Path;

use nvbare_core::chip::Chipset;
use nvbare_gsp_firmware::elf::{Class, Elf};
use nvbare_gsp_firmware::fmc::SignatureScheme;
use nvbare_gsp_firmware::{FIRMWARE_VERSION, FirmwareFile, pinned};
use serde::Serialize;

/// What `fw inspect --json` prints.
#[derive(Debug, Serialize)]
pub struct FwReport {
    /// The file, as named.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Hex sha256 of the whole file.
    pub sha256: String,
    /// The pinned r570.144 paths with this digest (empty if none).
    pub pinned_as: Vec<&'static str>,
    /// What the file is, in words (the text output's `format`).
    pub format: &'static str,
    /// The ELF header and sections, for ELF formats (GSP-RM, FMC).
    pub elf: Option<ElfReport>,
    /// The format's own structure.
    pub details: Details,
}

/// An ELF's header and sections.
#[derive(Debug, Serialize)]
pub struct ElfReport {
    /// `ELF32` or `ELF64`.
    pub class: &'static str,
    /// `e_type`.
    pub e_type: u16,
    /// `e_machine`.
    pub machine: u16,
    /// Sections other than the null one.
    pub sections: Vec<SectionReport>,
}

/// One ELF section.
#[derive(Debug, Serialize)]
pub struct SectionReport {
    /// Index in the section header table.
    pub index: u16,
    /// Name.
    pub name: String,
    /// File offset.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
}

/// The structure of each format.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Details {
    /// A GSP-RM image.
    Gsp {
        /// `.fwversion`.
        version: String,
        /// Whether it is the version nvbare speaks.
        supported: bool,
        /// Bytes of `.fwimage`.
        image_size: u64,
        /// `.fwimage` is itself an ELF (LIBOS2).
        nested_elf: bool,
        /// Hex build id.
        build_id: Option<String>,
        /// The signature sections.
        signatures: Vec<SignatureReport>,
        /// What `--chip` would use: the section, or why none.
        for_chip: Option<String>,
    },
    /// An FMC image.
    Fmc {
        /// Bytes of the ucode.
        image_size: u64,
        /// Hex SHA-384 of the image.
        hash: String,
        /// Bytes of signature.
        signature_size: u64,
        /// `RSA-3K`, `ECDSA P-384` or `unknown`.
        scheme: &'static str,
        /// Bytes of public key.
        public_key_size: u64,
    },
    /// An HS falcon ucode (booter, scrubber).
    Booter {
        /// Signatures in the file.
        num_sigs: u32,
        /// Bytes per signature.
        signature_size: u64,
        /// Where the chosen signature is patched in.
        patch_loc: u32,
        /// `engine_id_mask`.
        engine_id_mask: u32,
        /// `ucode_id`.
        ucode_id: u32,
        /// Signature index per fuse version, `[fuse, index]`.
        signature_for_fuse: Vec<[u32; 2]>,
    },
    /// A GSP RISC-V bootloader.
    RiscvBootloader {
        /// `RM_RISCV_UCODE_DESC` version.
        version: u32,
        /// `appVersion`.
        app_version: u32,
        /// Bytes of the bootloader image.
        image_size: u64,
    },
    /// A generic falcon bootloader.
    GenericBootloader {
        /// `code_off`, `code_size`.
        code: [u32; 2],
        /// `data_off`, `data_size`.
        data: [u32; 2],
    },
    /// A VBIOS ROM.
    Vbios {
        /// Bytes of the ROM.
        rom_size: u64,
        /// `[offset, length, code type]` of each image.
        images: Vec<[u64; 3]>,
        /// `AA.BB.CC.DD.EE`, if the BIT has one.
        version: Option<String>,
        /// FWSEC's application id, or why there is none.
        fwsec: Result<u32, String>,
    },
    /// A CUDA cubin (not firmware: `nvbare cubin inspect` shows it).
    Cubin {
        /// Shader model, e.g. 90.
        sm: u32,
        /// Kernels.
        kernels: usize,
        /// What to do.
        hint: String,
    },
}

/// One GSP-RM signature section.
#[derive(Debug, Serialize)]
pub struct SignatureReport {
    /// Section name.
    pub section: String,
    /// Bytes.
    pub size: u64,
    /// For confidential computing.
    pub confidential_compute: bool,
}

/// The report of a firmware file `file` read from `path`.
pub fn report(
    path: &Path,
    bytes: &[u8],
    file: &FirmwareFile<'_>,
    chip: Option<Chipset>,
) -> FwReport {
    let (elf, details) = match file {
        FirmwareFile::Gsp(g) => (Some(elf_report(g.elf())), gsp(g, chip)),
        FirmwareFile::Fmc(f) => (
            Some(elf_report(f.elf())),
            Details::Fmc {
                image_size: f.image.len() as u64,
                hash: pinned::hex(f.hash),
                signature_size: f.signature.len() as u64,
                scheme: match f.scheme() {
                    SignatureScheme::Rsa3k => "RSA-3K",
                    SignatureScheme::EcdsaP384 => "ECDSA P-384",
                    SignatureScheme::Unknown => "unknown",
                },
                public_key_size: f.public_key.len() as u64,
            },
        ),
        FirmwareFile::Booter(b) => (
            None,
            Details::Booter {
                num_sigs: b.num_sigs,
                signature_size: b.signature_size() as u64,
                patch_loc: b.patch_loc,
                engine_id_mask: b.engine_id_mask(),
                ucode_id: b.ucode_id(),
                signature_for_fuse: (0..b.num_sigs)
                    .filter_map(|f| b.signature_index(f).ok().map(|i| [f, i]))
                    .collect(),
            },
        ),
        FirmwareFile::RiscvBootloader(b) => (
            None,
            Details::RiscvBootloader {
                version: b.desc.version.get(),
                app_version: b.desc.appVersion.get(),
                image_size: b.image().len() as u64,
            },
        ),
        FirmwareFile::GenericBootloader(b) => (
            None,
            Details::GenericBootloader {
                code: [b.desc.code_off.get(), b.desc.code_size.get()],
                data: [b.desc.data_off.get(), b.desc.data_size.get()],
            },
        ),
        FirmwareFile::Vbios(v) => (None, vbios(v)),
    };
    FwReport::new(path, bytes, file.kind_name(), elf, details)
}

/// The report of a cubin given to `fw inspect`.
pub fn cubin_report(path: &Path, bytes: &[u8], sm: u32, kernels: usize, hint: String) -> FwReport {
    let details = Details::Cubin { sm, kernels, hint };
    FwReport::new(path, bytes, "CUDA cubin (not firmware)", None, details)
}

impl FwReport {
    fn new(
        path: &Path,
        bytes: &[u8],
        format: &'static str,
        elf: Option<ElfReport>,
        details: Details,
    ) -> FwReport {
        FwReport {
            file: path.display().to_string(),
            size: bytes.len() as u64,
            sha256: pinned::hex(&pinned::sha256(bytes)),
            pinned_as: pinned::identify(bytes).map(|p| p.path).collect(),
            format,
            elf,
            details,
        }
    }
}

fn elf_report(elf: &Elf<'_>) -> ElfReport {
    ElfReport {
        class: match elf.class {
            Class::Elf32 => "ELF32",
            Class::Elf64 => "ELF64",
        },
        e_type: elf.e_type,
        machine: elf.machine,
        sections: elf
            .sections()
            .iter()
            .filter(|s| s.index != 0)
            .map(|s| SectionReport {
                index: s.index,
                name: s.name.to_string(),
                offset: s.offset,
                size: s.data.len() as u64,
            })
            .collect(),
    }
}

fn gsp(g: &nvbare_gsp_firmware::GspFirmware<'_>, chip: Option<Chipset>) -> Details {
    let image = g.image();
    Details::Gsp {
        version: g.version().to_string(),
        supported: g.version() == FIRMWARE_VERSION,
        image_size: image.len() as u64,
        nested_elf: image.starts_with(&nvbare_gsp_firmware::elf::ELF_MAGIC),
        build_id: g.build_id().map(pinned::hex),
        signatures: g
            .signatures()
            .map(|s| SignatureReport {
                section: format!(
                    "{}{}",
                    if s.confidential_compute {
                        ".fwsignature_cc_"
                    } else {
                        ".fwsignature_"
                    },
                    s.family
                ),
                size: s.data.len() as u64,
                confidential_compute: s.confidential_compute,
            })
            .collect(),
        for_chip: chip.map(|c| match g.signature(c) {
            Ok(_) => format!(".fwsignature_{}", c.info().gsp_signature_family),
            Err(e) => format!("unusable: {e}"),
        }),
    }
}

fn vbios(v: &nvbare_gsp_firmware::Vbios<'_>) -> Details {
    Details::Vbios {
        rom_size: v.rom().len() as u64,
        images: v
            .images()
            .iter()
            .map(|i| [i.offset as u64, i.len as u64, u64::from(i.code_type)])
            .collect(),
        version: v.version().map(|(ver, oem)| {
            let b = ver.to_be_bytes();
            format!(
                "{:02X}.{:02X}.{:02X}.{:02X}.{oem:02X}",
                b[0], b[1], b[2], b[3]
            )
        }),
        fwsec: v
            .fwsec()
            .map(|f| f.app_id.into())
            .map_err(|e| e.to_string()),
    }
}
