//! The VBIOS: PCI expansion ROM images, the BIOS Information Table (BIT) and the falcon ucode
//! table that leads to FWSEC.
//!
//! The boot code reads the ROM from BAR0's PROM window (`NV_PROM_DATA`, 0x300000, at most
//! 1 MiB) and hands the bytes to [`Vbios::parse`]. Layouts and the walk follow OpenRM
//! (`kgspExtractVbiosFromRom_TU102` in `kernel_gsp_vbios_tu102.c`, `kernel_gsp_fwsec.c`,
//! `platform/pci_exp_table.h`):
//!
//! 1. The ROM starts with a PCI expansion ROM header (0x55AA, or NVIDIA's 0x564E/0xBB77), or
//!    with an IFR header ("NVGI") whose version-specific fields give the offset of that header.
//! 2. Each image has a PCI data structure ("PCIR"/"NPDS"/"RGIS") at the pointer at +0x18, and
//!    may have an NVIDIA PCI data extension ("NPDE", revision 1.0/1.1) at the next 16-byte
//!    boundary after it, whose sub-image length and last-image flag override the PCIR's.
//!    Images follow each other; the walk ends at the last-image flag (bit 7).
//! 3. Falcon ucode pointers are relative to the *expansion ROM offset*: the offset of the first
//!    image of code type 0xE0 minus the size of the first image of code type 0x00 (0 if either
//!    is missing).
//! 4. The BIT header (id 0xB8FF, "BIT\0", bytes summing to 0 mod 256 over `HeaderSize`) is
//!    found by scanning; token 0x70 (falcon data, version 2) points at the falcon ucode table,
//!    whose entries point at ucode descriptors ([`crate::fwsec`]).
//!
//! Every walk is bounded: the image walk by [`MAX_IMAGES`] and the ROM size (each image is at
//! least 512 bytes), token and entry loops by their 8-bit counts, the BIT scan by the ROM size.

use alloc::vec::Vec;

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::Error;
use crate::bytes::{read, slice, u8_at, u16_at, u32_at};
use crate::fwsec::Fwsec;
use crate::fwsec_v2::FwsecV2;

/// `PCI_EXP_ROM_SIGNATURE`.
pub const PCI_EXP_ROM_SIGNATURE: u16 = 0xaa55;
/// `PCI_EXP_ROM_SIGNATURE_NV` ("VN").
pub const PCI_EXP_ROM_SIGNATURE_NV: u16 = 0x4e56;
/// `PCI_EXP_ROM_SIGNATURE_NV2`.
pub const PCI_EXP_ROM_SIGNATURE_NV2: u16 = 0xbb77;
/// `OFFSETOF_PCI_EXP_ROM_PCI_DATA_STRUCT_PTR`.
pub const PCI_DATA_STRUCT_PTR_OFFSET: u64 = 0x18;
/// `PCI_DATA_STRUCT_SIGNATURE` ("PCIR").
pub const PCI_DATA_STRUCT_SIGNATURE: u32 = 0x5249_4350;
/// `PCI_DATA_STRUCT_SIGNATURE_NV` ("NPDS").
pub const PCI_DATA_STRUCT_SIGNATURE_NV: u32 = 0x5344_504e;
/// `PCI_DATA_STRUCT_SIGNATURE_NV2` ("RGIS").
pub const PCI_DATA_STRUCT_SIGNATURE_NV2: u32 = 0x5349_4752;
/// `NV_PCI_DATA_EXT_SIG` ("NPDE").
pub const NV_PCI_DATA_EXT_SIG: u32 = 0x4544_504e;
/// `NV_PCI_DATA_EXT_REV_10`.
pub const NV_PCI_DATA_EXT_REV_10: u16 = 0x100;
/// `NV_PCI_DATA_EXT_REV_11`.
pub const NV_PCI_DATA_EXT_REV_11: u16 = 0x101;
/// `PCI_LAST_IMAGE`.
pub const PCI_LAST_IMAGE: u8 = 0x80;
/// `PCI_ROM_IMAGE_BLOCK_SIZE`.
pub const PCI_ROM_IMAGE_BLOCK_SIZE: u64 = 512;
/// `NV_BCRT_HASH_INFO_BASE_CODE_TYPE_VBIOS_BASE`.
pub const CODE_TYPE_VBIOS_BASE: u8 = 0x00;
/// `NV_BCRT_HASH_INFO_BASE_CODE_TYPE_VBIOS_EXT`: the image holding the falcon ucodes.
pub const CODE_TYPE_VBIOS_EXT: u8 = 0xe0;
/// `NV_PBUS_IFR_FMT_FIXED0_SIGNATURE_VALUE` ("NVGI").
pub const IFR_SIGNATURE: u32 = 0x4947_564e;
/// `NV_ROM_DIRECTORY_IDENTIFIER` ("RFRD").
pub const ROM_DIRECTORY_IDENTIFIER: u32 = 0x4452_4652;
/// `BIT_HEADER_ID`.
pub const BIT_HEADER_ID: u16 = 0xb8ff;
/// `BIT_HEADER_SIGNATURE` ("BIT\0").
pub const BIT_HEADER_SIGNATURE: u32 = 0x0054_4942;
/// `BIT_TOKEN_BIOSDATA`.
pub const BIT_TOKEN_BIOSDATA: u8 = 0x42;
/// `BIT_TOKEN_FALCON_DATA`.
pub const BIT_TOKEN_FALCON_DATA: u8 = 0x70;
/// `FALCON_UCODE_ENTRY_APPID_FIRMWARE_SEC_LIC`.
pub const APPID_FIRMWARE_SEC_LIC: u8 = 0x05;
/// `FALCON_UCODE_ENTRY_APPID_FWSEC_DBG`.
pub const APPID_FWSEC_DBG: u8 = 0x45;
/// `FALCON_UCODE_ENTRY_APPID_FWSEC_PROD`.
pub const APPID_FWSEC_PROD: u8 = 0x85;
/// The walk gives up after this many images without a last-image flag.
pub const MAX_IMAGES: usize = 32;
/// The PROM window OpenRM reads (`s_getBaseBiosMaxSize_TU102`).
pub const MAX_ROM_SIZE: u64 = 0x10_0000;

/// `PCI_DATA_STRUCT` (24 bytes, packed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct PciDataStruct {
    pub sig: U32,
    pub vendorID: U16,
    pub deviceID: U16,
    pub deviceListPtr: U16,
    pub pciDataStructLen: U16,
    pub pciDataStructRev: u8,
    pub classCode: [u8; 3],
    /// In 512-byte blocks.
    pub imageLen: U16,
    pub vendorRomRev: U16,
    pub codeType: u8,
    pub lastImage: u8,
    pub maxRunTimeImageLen: U16,
}

/// `NV_PCI_DATA_EXT_STRUCT` (12 bytes, packed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct NvPciDataExtStruct {
    pub signature: U32,
    pub nvPciDataExtRev: U16,
    pub nvPciDataExtLen: U16,
    /// In 512-byte blocks.
    pub subimageLen: U16,
    pub privLastImage: u8,
    pub flags: u8,
}

/// `BIT_HEADER_V1_00` (12 bytes, packed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct BitHeaderV1 {
    pub Id: U16,
    pub Signature: U32,
    pub BCD_Version: U16,
    pub HeaderSize: u8,
    pub TokenSize: u8,
    pub TokenEntries: u8,
    pub HeaderChksum: u8,
}

/// `BIT_TOKEN_V1_00` in its 8-byte form (`DataPtr` is 16-bit in 6-byte tokens).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct BitTokenV1 {
    pub TokenId: u8,
    pub DataVersion: u8,
    pub DataSize: U16,
    pub DataPtr: U32,
}

/// `FALCON_UCODE_TABLE_HDR_V1` (6 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconUcodeTableHdrV1 {
    pub Version: u8,
    pub HeaderSize: u8,
    pub EntrySize: u8,
    pub EntryCount: u8,
    pub DescVersion: u8,
    pub DescSize: u8,
}

/// `FALCON_UCODE_TABLE_ENTRY_V1` (6 bytes, packed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconUcodeTableEntryV1 {
    pub ApplicationID: u8,
    pub TargetID: u8,
    pub DescPtr: U32,
}

/// One image of the expansion ROM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RomImage {
    /// Offset from the start of the ROM (after any IFR prefix).
    pub offset: u32,
    /// Length in bytes (NPDE sub-image length if present, else PCIR image length; × 512).
    pub len: u32,
    /// PCIR code type: 0x00 PC-AT (base), 0x03 EFI, 0x70 NBSI, 0xE0 falcon ucode extension.
    pub code_type: u8,
    /// Whether the walk ended here.
    pub last: bool,
    /// The PCI data structure.
    pub pcir: PciDataStruct,
    /// The NVIDIA PCI data extension, if present.
    pub npde: Option<NvPciDataExtStruct>,
}

/// A BIT token with its data pointer widened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitToken {
    /// `TokenId` (0x42 BIOSDATA, 0x70 falcon data, ...).
    pub id: u8,
    /// `DataVersion`.
    pub data_version: u8,
    /// `DataSize`.
    pub data_size: u16,
    /// `DataPtr`: an offset from the start of the ROM.
    pub data_ptr: u32,
}

/// An entry of the falcon ucode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FalconUcodeEntry {
    /// `ApplicationID` (0x85 FWSEC_PROD, 0x45 FWSEC_DBG, 0x05 FIRMWARE_SEC_LIC, ...).
    pub app_id: u8,
    /// `TargetID`.
    pub target_id: u8,
    /// `DescPtr`, relative to the expansion ROM offset.
    pub desc_ptr: u32,
}

/// A parsed VBIOS ROM.
#[derive(Debug, Clone)]
pub struct Vbios<'a> {
    rom: &'a [u8],
    /// Offset of the PCI ROM in the input (non-zero behind an IFR header).
    pub ifr_offset: u32,
    images: Vec<RomImage>,
    /// Base of falcon ucode pointers (see the module documentation).
    pub expansion_rom_offset: u32,
    /// Offset and contents of the BIT header, if one was found.
    pub bit: Option<(u32, BitHeaderV1)>,
}

impl<'a> Vbios<'a> {
    /// Walks the ROM images of `input` (a ROM dump, e.g. the 1 MiB PROM window) and finds the
    /// BIT. Fails if the images are malformed; a missing BIT only fails [`Vbios::fwsec`].
    pub fn parse(input: &'a [u8]) -> Result<Self, Error> {
        let ifr_offset = find_pci_rom(input)?;
        let (images, size, expansion_rom_offset) = walk_images(input, ifr_offset as u64)?;
        let rom = slice(input, "VBIOS ROM images", ifr_offset as u64, size)?;
        let bit = find_bit(rom);
        Ok(Vbios {
            rom,
            ifr_offset,
            images,
            expansion_rom_offset,
            bit,
        })
    }

    /// The ROM bytes all offsets refer to (from the first image to the end of the last).
    pub fn rom(&self) -> &'a [u8] {
        self.rom
    }

    /// The images, in ROM order.
    pub fn images(&self) -> &[RomImage] {
        &self.images
    }

    /// The BIT tokens (none without a BIT; unreadable tokens are skipped, as OpenRM does).
    pub fn bit_tokens(&self) -> impl Iterator<Item = BitToken> + '_ {
        let (off, hdr) = match self.bit {
            Some((o, h)) => (o as u64, Some(h)),
            None => (0, None),
        };
        let count = hdr.map_or(0, |h| h.TokenEntries as u64);
        (0..count).filter_map(move |i| {
            let h = hdr?;
            let at = off + h.HeaderSize as u64 + i * h.TokenSize as u64;
            if h.TokenSize >= 8 {
                let t: &BitTokenV1 = read(self.rom, "BIT token", at).ok()?;
                Some(BitToken {
                    id: t.TokenId,
                    data_version: t.DataVersion,
                    data_size: t.DataSize.get(),
                    data_ptr: t.DataPtr.get(),
                })
            } else if h.TokenSize >= 6 {
                Some(BitToken {
                    id: u8_at(self.rom, "BIT token", at).ok()?,
                    data_version: u8_at(self.rom, "BIT token", at + 1).ok()?,
                    data_size: u16_at(self.rom, "BIT token", at + 2).ok()?,
                    data_ptr: u16_at(self.rom, "BIT token", at + 4).ok()? as u32,
                })
            } else {
                None
            }
        })
    }

    /// The VBIOS version from the BIOSDATA token: `(Version, OemVersion)`, printed by NVIDIA
    /// tools as `VV.VV.VV.VV.OO` in hex.
    pub fn version(&self) -> Option<(u32, u8)> {
        let t = self.bit_tokens().find(|t| {
            t.id == BIT_TOKEN_BIOSDATA && matches!(t.data_version, 1 | 2) && t.data_size > 5
        })?;
        let v = u32_at(self.rom, "BIOSDATA", t.data_ptr as u64).ok()?;
        let oem = u8_at(self.rom, "BIOSDATA", t.data_ptr as u64 + 4).ok()?;
        Some((v, oem))
    }

    /// The falcon ucode table: from BIT token 0x70 (version 2), its header and entries.
    pub fn falcon_ucode_table(
        &self,
    ) -> Result<(FalconUcodeTableHdrV1, Vec<FalconUcodeEntry>), Error> {
        if self.bit.is_none() {
            return Err(Error::Missing {
                what: "BIT header (id 0xB8FF, 'BIT\\0', valid checksum) in the VBIOS",
            });
        }
        let token = self
            .bit_tokens()
            .find(|t| t.id == BIT_TOKEN_FALCON_DATA && t.data_version == 2 && t.data_size >= 4)
            .ok_or(Error::Missing {
                what: "BIT falcon data token (0x70, version 2)",
            })?;
        let ptr = u32_at(self.rom, "BIT_DATA_FALCON_DATA_V2", token.data_ptr as u64)?;
        // u32 arithmetic, wrapping, exactly as OpenRM computes these offsets.
        let table = self.expansion_rom_offset.wrapping_add(ptr) as u64;
        let hdr: FalconUcodeTableHdrV1 = *read(self.rom, "FALCON_UCODE_TABLE_HDR_V1", table)?;
        if hdr.Version != 1 {
            return Err(Error::UnsupportedVersion {
                what: "FALCON_UCODE_TABLE_HDR",
                version: hdr.Version as u64,
            });
        }
        if hdr.HeaderSize < 6 || hdr.EntrySize < 6 {
            return Err(Error::Invalid {
                what: "FALCON_UCODE_TABLE_HDR_V1 header/entry size",
                value: ((hdr.HeaderSize as u64) << 8) | hdr.EntrySize as u64,
                why: "header and entries are at least 6 bytes",
            });
        }
        let mut entries = Vec::with_capacity(hdr.EntryCount as usize);
        for i in 0..hdr.EntryCount as u64 {
            let at = table + hdr.HeaderSize as u64 + i * hdr.EntrySize as u64;
            let e: &FalconUcodeTableEntryV1 = read(self.rom, "FALCON_UCODE_TABLE_ENTRY_V1", at)?;
            entries.push(FalconUcodeEntry {
                app_id: e.ApplicationID,
                target_id: e.TargetID,
                desc_ptr: e.DescPtr.get(),
            });
        }
        Ok((hdr, entries))
    }

    /// The production FWSEC ucode (`FWSEC_PROD` 0x85 or `FIRMWARE_SEC_LIC` 0x05), as OpenRM
    /// picks it on production-fused GPUs.
    pub fn fwsec(&self) -> Result<Fwsec<'a>, Error> {
        self.fwsec_matching(|id| id == APPID_FWSEC_PROD || id == APPID_FIRMWARE_SEC_LIC)
    }

    /// The debug FWSEC ucode (`FWSEC_DBG` 0x45 or `FIRMWARE_SEC_LIC`), for debug-fused GPUs.
    pub fn fwsec_debug(&self) -> Result<Fwsec<'a>, Error> {
        self.fwsec_matching(|id| id == APPID_FWSEC_DBG || id == APPID_FIRMWARE_SEC_LIC)
    }

    /// The production FWSEC with a `FALCON_UCODE_DESC_V2` (Turing, GA100), which runs through
    /// the generic falcon bootloader ([`FwsecV2`]).
    pub fn fwsec_v2(&self) -> Result<FwsecV2<'a>, Error> {
        self.fwsec_parsed(
            |id| id == APPID_FWSEC_PROD || id == APPID_FIRMWARE_SEC_LIC,
            FwsecV2::parse,
        )
    }

    fn fwsec_matching(&self, want: impl Fn(u8) -> bool) -> Result<Fwsec<'a>, Error> {
        self.fwsec_parsed(want, Fwsec::parse)
    }

    fn fwsec_parsed<T>(
        &self,
        want: impl Fn(u8) -> bool,
        parse: impl Fn(&'a [u8], u64, u8) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let (_, entries) = self.falcon_ucode_table()?;
        let mut first_error = None;
        for e in entries.iter().filter(|e| want(e.app_id)) {
            let desc_offset = self.expansion_rom_offset.wrapping_add(e.desc_ptr) as u64;
            match parse(self.rom, desc_offset, e.app_id) {
                Ok(f) => return Ok(f),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        Err(first_error.unwrap_or(Error::Missing {
            what: "FWSEC entry in the VBIOS falcon ucode table",
        }))
    }
}

fn valid_rom_sig(sig: u16) -> bool {
    matches!(
        sig,
        PCI_EXP_ROM_SIGNATURE | PCI_EXP_ROM_SIGNATURE_NV | PCI_EXP_ROM_SIGNATURE_NV2
    )
}

fn valid_pcir_sig(sig: u32) -> bool {
    matches!(
        sig,
        PCI_DATA_STRUCT_SIGNATURE | PCI_DATA_STRUCT_SIGNATURE_NV | PCI_DATA_STRUCT_SIGNATURE_NV2
    )
}

/// Offset of the PCI expansion ROM: 0, or where an IFR header says (`s_romImgFindPciHeader_TU102`).
fn find_pci_rom(input: &[u8]) -> Result<u32, Error> {
    let sig = u16_at(input, "PCI expansion ROM signature", 0)?;
    if valid_rom_sig(sig) {
        return Ok(0);
    }
    let fixed0 = u32_at(input, "IFR header", 0)?;
    if fixed0 != IFR_SIGNATURE {
        return Err(Error::BadMagic {
            what: "VBIOS signature (PCI ROM 0xAA55 or IFR 'NVGI')",
            found: sig as u64,
            expected: PCI_EXP_ROM_SIGNATURE as u64,
        });
    }
    let fixed1 = u32_at(input, "IFR header", 4)?;
    let fixed2 = u32_at(input, "IFR header", 8)?;
    let version = (fixed1 >> 8) & 0xff;
    let image_offset = match version {
        1 | 2 => {
            let extended = (fixed1 >> 16) & 0x7fff;
            u32_at(input, "IFR extended data", extended as u64 + 4)?
        }
        3 => {
            let total = fixed2 & 0xf_ffff;
            let flash_status = u32_at(input, "IFR flash status offset", total as u64)?;
            let dir = flash_status as u64 + 4096;
            let dir_sig = u32_at(input, "IFR ROM directory", dir)?;
            if dir_sig != ROM_DIRECTORY_IDENTIFIER {
                return Err(Error::BadMagic {
                    what: "IFR ROM directory signature",
                    found: dir_sig as u64,
                    expected: ROM_DIRECTORY_IDENTIFIER as u64,
                });
            }
            u32_at(input, "IFR ROM directory", dir + 8)?
        }
        v => {
            return Err(Error::UnsupportedVersion {
                what: "IFR",
                version: v as u64,
            });
        }
    };
    if image_offset % 4 != 0 {
        return Err(Error::Invalid {
            what: "IFR image offset",
            value: image_offset as u64,
            why: "must be 4-byte aligned",
        });
    }
    let sig = u16_at(
        input,
        "PCI expansion ROM signature (after IFR)",
        image_offset as u64,
    )?;
    if !valid_rom_sig(sig) {
        return Err(Error::BadMagic {
            what: "PCI expansion ROM signature (after IFR)",
            found: sig as u64,
            expected: PCI_EXP_ROM_SIGNATURE as u64,
        });
    }
    Ok(image_offset)
}

/// Walks the images (`s_locateExpansionRoms`): returns them, the ROM size and the expansion ROM
/// offset.
fn walk_images(input: &[u8], pci_offset: u64) -> Result<(Vec<RomImage>, u64, u32), Error> {
    let mut images = Vec::new();
    let mut block = pci_offset;
    let mut ext_rom_offset = 0u64;
    let mut base_rom_size = 0u64;
    for _ in 0..MAX_IMAGES {
        let sig = u16_at(input, "PCI expansion ROM image signature", block)?;
        if !valid_rom_sig(sig) {
            return Err(Error::BadMagic {
                what: "PCI expansion ROM image signature",
                found: sig as u64,
                expected: PCI_EXP_ROM_SIGNATURE as u64,
            });
        }
        let pcir_ptr = u16_at(
            input,
            "PCI data structure pointer",
            block + PCI_DATA_STRUCT_PTR_OFFSET,
        )?;
        let pcir_at = block + pcir_ptr as u64;
        let pcir: PciDataStruct = *read(input, "PCI data structure", pcir_at)?;
        if !valid_pcir_sig(pcir.sig.get()) {
            return Err(Error::BadMagic {
                what: "PCI data structure signature ('PCIR')",
                found: pcir.sig.get() as u64,
                expected: PCI_DATA_STRUCT_SIGNATURE as u64,
            });
        }
        let mut last = pcir.lastImage & PCI_LAST_IMAGE != 0;
        let img_len = pcir.imageLen.get();
        let mut sub_len = img_len;
        let npde_at = (pcir_at + pcir.pciDataStructLen.get() as u64 + 0xf) & !0xf;
        let npde = read::<NvPciDataExtStruct>(input, "NPDE", npde_at)
            .ok()
            .copied()
            .filter(|n| {
                n.signature.get() == NV_PCI_DATA_EXT_SIG
                    && matches!(
                        n.nvPciDataExtRev.get(),
                        NV_PCI_DATA_EXT_REV_10 | NV_PCI_DATA_EXT_REV_11
                    )
            });
        if let Some(n) = npde {
            sub_len = n.subimageLen.get();
            // `privLastImage` is at 0x0a: present if the extension is long enough.
            if n.nvPciDataExtLen.get() >= 0x0b {
                last = n.privLastImage & PCI_LAST_IMAGE != 0;
            } else if sub_len < img_len {
                last = false;
            }
        }
        if sub_len == 0 {
            return Err(Error::Invalid {
                what: "VBIOS image length (PCIR/NPDE, 512-byte blocks)",
                value: 0,
                why: "an image of length 0 would never end the walk",
            });
        }
        let offset = block - pci_offset;
        let len = sub_len as u64 * PCI_ROM_IMAGE_BLOCK_SIZE;
        if ext_rom_offset == 0 && pcir.codeType == CODE_TYPE_VBIOS_EXT {
            ext_rom_offset = offset;
        } else if base_rom_size == 0 && pcir.codeType == CODE_TYPE_VBIOS_BASE {
            base_rom_size = len;
        }
        images.push(RomImage {
            offset: offset as u32,
            len: len as u32,
            code_type: pcir.codeType,
            last,
            pcir,
            npde,
        });
        // The image must be in the ROM (and the ROM in the PROM window).
        let end = offset + len;
        if end > MAX_ROM_SIZE {
            return Err(Error::OutOfBounds {
                what: "VBIOS image",
                offset,
                len,
                limit: MAX_ROM_SIZE,
            });
        }
        slice(input, "VBIOS image", block, len)?;
        if last {
            let expansion = if ext_rom_offset > 0 && base_rom_size > 0 {
                // Both are below MAX_ROM_SIZE; OpenRM subtracts in u32, wrapping.
                (ext_rom_offset as u32).wrapping_sub(base_rom_size as u32)
            } else {
                0
            };
            return Ok((images, end, expansion));
        }
        block += len;
    }
    Err(Error::Invalid {
        what: "VBIOS image count",
        value: MAX_IMAGES as u64,
        why: "no image carries the last-image flag",
    })
}

/// The first BIT header whose bytes sum to zero (`s_vbiosFindBitHeader`).
fn find_bit(rom: &[u8]) -> Option<(u32, BitHeaderV1)> {
    let needle = [0xff, 0xb8, b'B', b'I', b'T', 0];
    let mut at = 0usize;
    while let Some(pos) = rom
        .get(at..)?
        .windows(needle.len())
        .position(|w| w == needle)
    {
        let off = at + pos;
        if let Ok(h) = read::<BitHeaderV1>(rom, "BIT header", off as u64) {
            let size = h.HeaderSize as usize;
            let sums_to_zero = rom
                .get(off..off + size)
                .is_some_and(|b| b.iter().fold(0u8, |s, &x| s.wrapping_add(x)) == 0);
            if size >= core::mem::size_of::<BitHeaderV1>() && sums_to_zero {
                return Some((off as u32, *h));
            }
        }
        at = off + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_the_headers() {
        // pci_exp_table.h
        assert_eq!(size_of::<PciDataStruct>(), 0x18);
        assert_eq!(offset_of!(PciDataStruct, pciDataStructLen), 0x0a);
        assert_eq!(offset_of!(PciDataStruct, classCode), 0x0d);
        assert_eq!(offset_of!(PciDataStruct, imageLen), 0x10);
        assert_eq!(offset_of!(PciDataStruct, codeType), 0x14);
        assert_eq!(offset_of!(PciDataStruct, lastImage), 0x15);
        assert_eq!(size_of::<NvPciDataExtStruct>(), 12);
        assert_eq!(offset_of!(NvPciDataExtStruct, nvPciDataExtRev), 4);
        assert_eq!(offset_of!(NvPciDataExtStruct, nvPciDataExtLen), 6);
        assert_eq!(offset_of!(NvPciDataExtStruct, subimageLen), 8);
        assert_eq!(offset_of!(NvPciDataExtStruct, privLastImage), 0x0a);
        // kernel_gsp_fwsec.c packed formats: "1w1d1w4b", "2b1w1d", "6b", "2b1d".
        assert_eq!(size_of::<BitHeaderV1>(), 12);
        assert_eq!(offset_of!(BitHeaderV1, HeaderSize), 8);
        assert_eq!(size_of::<BitTokenV1>(), 8);
        assert_eq!(size_of::<FalconUcodeTableHdrV1>(), 6);
        assert_eq!(size_of::<FalconUcodeTableEntryV1>(), 6);
        assert_eq!(offset_of!(FalconUcodeTableEntryV1, DescPtr), 2);
    }
}
