//! Telling firmware files apart by their content.

use crate::binhdr::{BIN_MAGIC, BinFile};
use crate::bootloader::{RISCV_DESC_V4_SIZE, RISCV_DESC_V5_SIZE};
use crate::elf::{ELF_MAGIC, Elf};
use crate::vbios::{
    IFR_SIGNATURE, PCI_EXP_ROM_SIGNATURE, PCI_EXP_ROM_SIGNATURE_NV, PCI_EXP_ROM_SIGNATURE_NV2,
};
use crate::{BooterImage, Error, FmcImage, GenericBootloader, GspFirmware, RiscvBootloader, Vbios};

/// Any file this crate parses.
#[derive(Debug, Clone)]
pub enum FirmwareFile<'a> {
    /// A GSP-RM ELF64 image (any `.fwversion`).
    Gsp(GspFirmware<'a>),
    /// An FMC ELF32 container.
    Fmc(FmcImage<'a>),
    /// An HS ucode with `nvfw_hs_header_v2` (booter load/unload, scrubber).
    Booter(BooterImage<'a>),
    /// A GSP RISC-V bootloader (`RM_RISCV_UCODE_DESC`).
    RiscvBootloader(RiscvBootloader<'a>),
    /// A generic falcon bootloader (`nvfw_bl_desc`).
    GenericBootloader(GenericBootloader<'a>),
    /// A VBIOS ROM.
    Vbios(Vbios<'a>),
}

impl<'a> FirmwareFile<'a> {
    /// Recognizes `bytes` and parses them with the matching parser; the error is that
    /// parser's when the magic matched but the content is malformed.
    ///
    /// * ELF with an `image` section: FMC; other ELF: GSP-RM.
    /// * `nvfw_bin_hdr` (0x10de): by the size of the header region before the image: 24 bytes
    ///   is `nvfw_bl_desc`, 76 to 84 bytes `RM_RISCV_UCODE_DESC`, anything else an HS header
    ///   with signatures.
    /// * 0xAA55 (or NVIDIA's ROM signatures) or "NVGI": a VBIOS ROM.
    pub fn detect(bytes: &'a [u8]) -> Result<Self, Error> {
        let mut head = [0u8; 4];
        for (d, s) in head.iter_mut().zip(bytes) {
            *d = *s;
        }
        if head == ELF_MAGIC {
            let elf = Elf::parse(bytes)?;
            return if elf.section(crate::fmc::SECTION_IMAGE).is_some() {
                FmcImage::parse(bytes).map(FirmwareFile::Fmc)
            } else {
                GspFirmware::parse_any_version(bytes).map(FirmwareFile::Gsp)
            };
        }
        let word = u32::from_le_bytes(head);
        if word == BIN_MAGIC {
            let bin = BinFile::parse(bytes)?;
            let n = bin.header.len();
            return if n == core::mem::size_of::<crate::bootloader::NvfwBlDesc>() {
                GenericBootloader::parse(bytes).map(FirmwareFile::GenericBootloader)
            } else if (RISCV_DESC_V4_SIZE..=RISCV_DESC_V5_SIZE).contains(&n) {
                RiscvBootloader::parse(bytes).map(FirmwareFile::RiscvBootloader)
            } else {
                BooterImage::parse(bytes).map(FirmwareFile::Booter)
            };
        }
        let half = u16::from_le_bytes([head[0], head[1]]);
        if matches!(
            half,
            PCI_EXP_ROM_SIGNATURE | PCI_EXP_ROM_SIGNATURE_NV | PCI_EXP_ROM_SIGNATURE_NV2
        ) || word == IFR_SIGNATURE
        {
            return Vbios::parse(bytes).map(FirmwareFile::Vbios);
        }
        Err(Error::UnknownFormat { head })
    }

    /// What the file is, in words.
    pub fn kind_name(&self) -> &'static str {
        match self {
            FirmwareFile::Gsp(_) => "GSP-RM firmware image (ELF64)",
            FirmwareFile::Fmc(_) => "GSP-FMC image for the FSP chain of trust (ELF32 container)",
            FirmwareFile::Booter(_) => {
                "HS falcon ucode (nvfw_bin_hdr + nvfw_hs_header_v2: booter or scrubber)"
            }
            FirmwareFile::RiscvBootloader(_) => {
                "GSP RISC-V bootloader (nvfw_bin_hdr + RM_RISCV_UCODE_DESC)"
            }
            FirmwareFile::GenericBootloader(_) => {
                "generic falcon bootloader (nvfw_bin_hdr + nvfw_bl_desc)"
            }
            FirmwareFile::Vbios(_) => "VBIOS ROM",
        }
    }
}
