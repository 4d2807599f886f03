//! The GSP's RISC-V bootloader (`bootloader-570.144.bin`) and the generic falcon bootloader
//! (`gen_bootloader-570.144.bin`).
//!
//! `bootloader-*.bin` is `nvfw_bin_hdr` + `RM_RISCV_UCODE_DESC`
//! (`src/nvidia/arch/nvalloc/common/inc/rmRiscvUcode.h`) + the image
//! (`extract-firmware-nouveau.py` `bootloader()`, from OpenRM's `kgspBinArchiveGspRmBoot_*`).
//! The boot code copies the image to memory and fills `GspFwWprMeta` from the descriptor:
//! `sysmemAddrOfBootloader`/`sizeOfBootloader` = the image,
//! `bootloaderCodeOffset` = `monitorCodeOffset`, `bootloaderDataOffset` = `monitorDataOffset`,
//! `bootloaderManifestOffset` = `manifestOffset`; after boot `NV_PFALCON_FALCON_OS` is set to
//! `appVersion`.
//!
//! The descriptor grew over versions: version 5 (GA102 on) is 84 bytes, version 4 (the Turing
//! and GA100 LIBOS2 bootloader, still named `bootloader-535.113.01.bin` in linux-firmware) is
//! 76 bytes without `fbReservedSize`/`bSignedAsCode`.
//!
//! `gen_bootloader-*.bin` is `nvfw_bin_hdr` + `nvfw_bl_desc` + a small falcon loader that
//! Turing/GA100 use to run FWSEC (nouveau `include/nvfw/fw.h`).

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::Error;
use crate::binhdr::BinFile;
use crate::bytes::{range, read, slice};

/// `RM_RISCV_UCODE_DESC` (version 5 layout, 84 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct RmRiscvUcodeDesc {
    pub version: U32,
    pub bootloaderOffset: U32,
    pub bootloaderSize: U32,
    pub bootloaderParamOffset: U32,
    pub bootloaderParamSize: U32,
    pub riscvElfOffset: U32,
    pub riscvElfSize: U32,
    /// Changelist number of the image; written to `NV_PFALCON_FALCON_OS` after boot.
    pub appVersion: U32,
    pub manifestOffset: U32,
    pub manifestSize: U32,
    pub monitorDataOffset: U32,
    pub monitorDataSize: U32,
    pub monitorCodeOffset: U32,
    pub monitorCodeSize: U32,
    pub bIsMonitorEnabled: U32,
    pub swbromCodeOffset: U32,
    pub swbromCodeSize: U32,
    pub swbromDataOffset: U32,
    pub swbromDataSize: U32,
    /// Version 5 only.
    pub fbReservedSize: U32,
    /// Version 5 only.
    pub bSignedAsCode: U32,
}

/// Size of a version-4 descriptor (up to `swbromDataSize`).
pub const RISCV_DESC_V4_SIZE: usize = 76;
/// Size of a version-5 descriptor.
pub const RISCV_DESC_V5_SIZE: usize = 84;
/// Highest descriptor version this parser knows (rmRiscvUcode.h, r570.144).
pub const RISCV_DESC_MAX_VERSION: u32 = 5;

/// A parsed GSP RISC-V bootloader.
#[derive(Debug, Clone, Copy)]
pub struct RiscvBootloader<'a> {
    /// The file's `nvfw_bin_hdr` and image.
    pub bin: BinFile<'a>,
    /// The descriptor; for a 76-byte (version 4) descriptor the last two fields read 0.
    pub desc: RmRiscvUcodeDesc,
    /// Size of the descriptor in the file (76 or 84).
    pub desc_size: usize,
}

impl<'a> RiscvBootloader<'a> {
    /// Parses a `bootloader-*.bin` file and checks that every region the descriptor names lies
    /// inside the image.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let bin = BinFile::parse(bytes)?;
        let desc_size = bin.header.len();
        if desc_size < RISCV_DESC_V4_SIZE {
            return Err(Error::BadSize {
                what: "RM_RISCV_UCODE_DESC",
                size: desc_size as u64,
                expected: "76 (version 4) or 84 (version 5) bytes",
            });
        }
        let mut raw = [0u8; RISCV_DESC_V5_SIZE];
        let n = desc_size.min(RISCV_DESC_V5_SIZE);
        let src = slice(
            bytes,
            "RM_RISCV_UCODE_DESC",
            bin.header_offset() as u64,
            n as u64,
        )?;
        if let Some(dst) = raw.get_mut(..n) {
            dst.copy_from_slice(src);
        }
        let desc: RmRiscvUcodeDesc = *read(&raw, "RM_RISCV_UCODE_DESC", 0)?;
        let version = desc.version.get();
        if version == 0 || version > RISCV_DESC_MAX_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "RM_RISCV_UCODE_DESC",
                version: version as u64,
            });
        }
        if version >= 5 && desc_size < RISCV_DESC_V5_SIZE {
            return Err(Error::BadSize {
                what: "RM_RISCV_UCODE_DESC version 5",
                size: desc_size as u64,
                expected: "84 bytes",
            });
        }
        let len = bin.image.len();
        for (what, off, size) in [
            (
                "bootloader manifest",
                desc.manifestOffset,
                desc.manifestSize,
            ),
            (
                "bootloader monitor data",
                desc.monitorDataOffset,
                desc.monitorDataSize,
            ),
            (
                "bootloader monitor code",
                desc.monitorCodeOffset,
                desc.monitorCodeSize,
            ),
            (
                "bootloader code (bootloaderOffset)",
                desc.bootloaderOffset,
                desc.bootloaderSize,
            ),
            (
                "bootloader parameters",
                desc.bootloaderParamOffset,
                desc.bootloaderParamSize,
            ),
            (
                "bootloader RISC-V ELF",
                desc.riscvElfOffset,
                desc.riscvElfSize,
            ),
            (
                "bootloader SW-BROM code",
                desc.swbromCodeOffset,
                desc.swbromCodeSize,
            ),
            (
                "bootloader SW-BROM data",
                desc.swbromDataOffset,
                desc.swbromDataSize,
            ),
        ] {
            range(what, off.get() as u64, size.get() as u64, len)?;
        }
        Ok(RiscvBootloader {
            bin,
            desc,
            desc_size,
        })
    }

    /// The image (`sysmemAddrOfBootloader` points at a copy; `sizeOfBootloader` is its length).
    pub fn image(&self) -> &'a [u8] {
        self.bin.image
    }

    /// `bootloaderCodeOffset` for `GspFwWprMeta`: `monitorCodeOffset`.
    pub fn code_offset(&self) -> u32 {
        self.desc.monitorCodeOffset.get()
    }

    /// `bootloaderDataOffset` for `GspFwWprMeta`: `monitorDataOffset`.
    pub fn data_offset(&self) -> u32 {
        self.desc.monitorDataOffset.get()
    }

    /// `bootloaderManifestOffset` for `GspFwWprMeta`: `manifestOffset`.
    pub fn manifest_offset(&self) -> u32 {
        self.desc.manifestOffset.get()
    }

    /// `appVersion`, written to `NV_PFALCON_FALCON_OS` once the GSP runs.
    pub fn app_version(&self) -> u32 {
        self.desc.appVersion.get()
    }

    /// The monitor code bytes.
    pub fn code(&self) -> &'a [u8] {
        self.region(self.desc.monitorCodeOffset, self.desc.monitorCodeSize)
    }

    /// The monitor data bytes.
    pub fn data(&self) -> &'a [u8] {
        self.region(self.desc.monitorDataOffset, self.desc.monitorDataSize)
    }

    /// The manifest bytes (input to the boot ROM).
    pub fn manifest(&self) -> &'a [u8] {
        self.region(self.desc.manifestOffset, self.desc.manifestSize)
    }

    fn region(&self, off: U32, size: U32) -> &'a [u8] {
        // parse() checked every region.
        slice(
            self.bin.image,
            "bootloader region",
            off.get() as u64,
            size.get() as u64,
        )
        .unwrap_or(&[])
    }
}

/// `struct nvfw_bl_desc` (24 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct NvfwBlDesc {
    /// IMEM tag the loader starts at.
    pub start_tag: U32,
    /// DMEM offset its data is loaded to.
    pub dmem_load_off: U32,
    /// Image offset of the code.
    pub code_off: U32,
    /// Code size.
    pub code_size: U32,
    /// Image offset of the data.
    pub data_off: U32,
    /// Data size.
    pub data_size: U32,
}

/// A parsed generic falcon bootloader (`gen_bootloader-*.bin`).
#[derive(Debug, Clone, Copy)]
pub struct GenericBootloader<'a> {
    /// The file's `nvfw_bin_hdr` and image.
    pub bin: BinFile<'a>,
    /// The descriptor.
    pub desc: NvfwBlDesc,
}

impl<'a> GenericBootloader<'a> {
    /// Parses a `gen_bootloader-*.bin` file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let bin = BinFile::parse(bytes)?;
        if bin.header.len() != core::mem::size_of::<NvfwBlDesc>() {
            return Err(Error::BadSize {
                what: "nvfw_bl_desc",
                size: bin.header.len() as u64,
                expected: "24 bytes",
            });
        }
        let desc: NvfwBlDesc = *read(bytes, "nvfw_bl_desc", bin.header_offset() as u64)?;
        let len = bin.image.len();
        range(
            "generic bootloader code",
            desc.code_off.get() as u64,
            desc.code_size.get() as u64,
            len,
        )?;
        range(
            "generic bootloader data",
            desc.data_off.get() as u64,
            desc.data_size.get() as u64,
            len,
        )?;
        Ok(GenericBootloader { bin, desc })
    }

    /// The loader code.
    pub fn code(&self) -> &'a [u8] {
        slice(
            self.bin.image,
            "",
            self.desc.code_off.get() as u64,
            self.desc.code_size.get() as u64,
        )
        .unwrap_or(&[])
    }

    /// The loader data.
    pub fn data(&self) -> &'a [u8] {
        slice(
            self.bin.image,
            "",
            self.desc.data_off.get() as u64,
            self.desc.data_size.get() as u64,
        )
        .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn riscv_desc_matches_rm_riscv_ucode_h() {
        assert_eq!(size_of::<RmRiscvUcodeDesc>(), RISCV_DESC_V5_SIZE);
        assert_eq!(offset_of!(RmRiscvUcodeDesc, appVersion), 28);
        assert_eq!(offset_of!(RmRiscvUcodeDesc, manifestOffset), 32);
        assert_eq!(offset_of!(RmRiscvUcodeDesc, monitorDataOffset), 40);
        assert_eq!(offset_of!(RmRiscvUcodeDesc, monitorCodeOffset), 48);
        assert_eq!(offset_of!(RmRiscvUcodeDesc, bIsMonitorEnabled), 56);
        assert_eq!(
            offset_of!(RmRiscvUcodeDesc, fbReservedSize),
            RISCV_DESC_V4_SIZE
        );
        assert_eq!(offset_of!(RmRiscvUcodeDesc, bSignedAsCode), 80);
    }

    #[test]
    fn bl_desc_matches_nvfw_fw_h() {
        assert_eq!(size_of::<NvfwBlDesc>(), 24);
        assert_eq!(offset_of!(NvfwBlDesc, code_off), 8);
        assert_eq!(offset_of!(NvfwBlDesc, data_size), 20);
    }
}
