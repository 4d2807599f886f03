//! FWSEC: the heavy-secure ucode in the VBIOS that the GSP falcon runs before GSP-RM boots on
//! Turing–Ada. FWSEC-FRTS carves out the FRTS region and raises WPR2; FWSEC-SB runs at unload.
//!
//! The falcon ucode descriptor (`FALCON_UCODE_DESC_V3`, `kernel_gsp_fwsec.c`) sits in the VBIOS
//! at `expansion ROM offset + DescPtr`; its header word (`vDesc`) gives version (bits 15:8) and
//! size (31:16). The signatures (384-byte RSA-3K each) follow the 44-byte descriptor up to that
//! size; the ucode image follows the descriptor, `StoredSize` rounded up to 256 bytes long:
//! IMEM bytes `[0, IMEMLoadSize)`, then DMEM bytes `[IMEMLoadSize, IMEMLoadSize + DMEMLoadSize)`.
//!
//! Before running it, the host patches the DMEM (`s_prepareForFwsec_TU102`,
//! `kernel_gsp_frts_tu102.c`):
//!
//! 1. At DMEM `InterfaceOffset`: `FALCON_APPLICATION_INTERFACE_HEADER_V1` (4 bytes, at least two
//!    entries), then 8-byte entries `{id, dmemOffset}`; entry id 4 (`DMEMMAPPER`) points at the
//!    `FALCON_APPLICATION_INTERFACE_DMEM_MAPPER_V3`.
//! 2. The mapper's `init_cmd` gets the command (0x15 FRTS, 0x19 SB) and its command buffer
//!    (`cmd_in_buffer_offset`) the argument: `FWSECLIC_FRTS_CMD` (read-VBIOS descriptor version 1,
//!    flags 2; FRTS region version 1, offset and size in 4 KiB units, media type 2 = FB) or just the
//!    read-VBIOS descriptor for SB.
//! 3. The signature for the GPU's fuse version is copied to DMEM `PKCDataOffset`: signature
//!    `n` where `n` counts the set bits of `SignatureVersions` below bit `fuse_version`.
//!
//! ```no_run
//! # fn f(rom: &[u8], vram_size: u64, fuse: u32) -> Result<(), nvbare_gsp_firmware::Error> {
//! use nvbare_gsp_firmware::Vbios;
//!
//! let vbios = Vbios::parse(rom)?;
//! let fwsec = vbios.fwsec()?;
//! // FRTS: 1 MiB at the top of VRAM below the VGA workspace (as GspFwWprMeta.frtsOffset says).
//! let ucode = fwsec.patch_frts(vram_size - 0x20_0000, 0x10_0000, fuse)?;
//! // DMA ucode.image() to the GSP falcon: IMEM from ucode.code(), DMEM from ucode.dmem(), then
//! // program the BROM with ucode.pkc_data_offset, engine_id_mask and ucode_id.
//! # let _ = ucode; Ok(()) }
//! ```

use alloc::format;
use alloc::vec::Vec;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::Error;
use crate::bytes::{range, read, round_up, slice};

/// `BCRT30_RSA3K_SIG_SIZE`.
pub const SIGNATURE_SIZE: usize = 384;
/// `FALCON_UCODE_DESC_V3_SIZE_44`.
pub const DESC_V3_SIZE: usize = 44;
/// `NV_BIT_FALCON_UCODE_DESC_HEADER_VDESC_VERSION_V2`.
pub const DESC_VERSION_V2: u8 = 2;
/// `NV_BIT_FALCON_UCODE_DESC_HEADER_VDESC_VERSION_V3`.
pub const DESC_VERSION_V3: u8 = 3;
/// `FALCON_APPLICATION_INTERFACE_ENTRY_ID_DMEMMAPPER`.
pub const APPIF_ID_DMEMMAPPER: u32 = 4;
/// `FALCON_APPLICATION_INTERFACE_DMEM_MAPPER_V3_CMD_FRTS`.
pub const CMD_FRTS: u32 = 0x15;
/// `FALCON_APPLICATION_INTERFACE_DMEM_MAPPER_V3_CMD_SB`.
pub const CMD_SB: u32 = 0x19;
/// `FWSECLIC_READ_VBIOS_STRUCT_FLAGS`.
pub const READ_VBIOS_FLAGS: u32 = 2;
/// `FWSECLIC_FRTS_REGION_MEDIA_FB`.
pub const FRTS_REGION_MEDIA_FB: u32 = 2;
/// The FRTS region size RM uses (`..._WPR_SIZE_1MB_IN_4K` × 4 KiB).
pub const FRTS_SIZE: u64 = 0x10_0000;

/// `FALCON_UCODE_DESC_V3` (44 bytes, packed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconUcodeDescV3 {
    /// `FALCON_UCODE_DESC_HEADER.vDesc`: flags 7:0, version 15:8, size 31:16.
    pub vDesc: U32,
    pub StoredSize: U32,
    pub PKCDataOffset: U32,
    pub InterfaceOffset: U32,
    pub IMEMPhysBase: U32,
    pub IMEMLoadSize: U32,
    pub IMEMVirtBase: U32,
    pub DMEMPhysBase: U32,
    pub DMEMLoadSize: U32,
    pub EngineIdMask: U16,
    pub UcodeId: u8,
    pub SignatureCount: u8,
    pub SignatureVersions: U16,
    pub Reserved: U16,
}

/// `FALCON_APPLICATION_INTERFACE_HEADER_V1`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconAppifHeaderV1 {
    pub version: u8,
    pub headerSize: u8,
    pub entrySize: u8,
    pub entryCount: u8,
}

/// `FALCON_APPLICATION_INTERFACE_ENTRY_V1`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconAppifEntryV1 {
    pub id: U32,
    pub dmemOffset: U32,
}

/// `FALCON_APPLICATION_INTERFACE_DMEM_MAPPER_V3` (64 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconAppifDmemMapperV3 {
    /// "DMAP" in the VBIOSes seen so far (not checked, as in OpenRM).
    pub signature: U32,
    pub version: U16,
    pub size: U16,
    pub cmd_in_buffer_offset: U32,
    pub cmd_in_buffer_size: U32,
    pub cmd_out_buffer_offset: U32,
    pub cmd_out_buffer_size: U32,
    pub nvf_img_data_buffer_offset: U32,
    pub nvf_img_data_buffer_size: U32,
    pub printfBufferHdr: U32,
    pub ucode_build_time_stamp: U32,
    pub ucode_signature: U32,
    pub init_cmd: U32,
    pub ucode_feature: U32,
    pub ucode_cmd_mask0: U32,
    pub ucode_cmd_mask1: U32,
    pub multiTgtTbl: U32,
}

/// `FWSECLIC_READ_VBIOS_DESC` (24 bytes; `gfwImageOffset` is naturally aligned at 8).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FwseclicReadVbiosDesc {
    pub version: U32,
    pub size: U32,
    pub gfwImageOffset: U64,
    pub gfwImageSize: U32,
    pub flags: U32,
}

/// `FWSECLIC_FRTS_REGION_DESC` (20 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FwseclicFrtsRegionDesc {
    pub version: U32,
    pub size: U32,
    pub frtsRegionOffset4K: U32,
    pub frtsRegionSize: U32,
    pub frtsRegionMediaType: U32,
}

/// `FWSECLIC_FRTS_CMD`: 44 bytes of fields; C's `sizeof` is 48 (the `NvU64` in the read-VBIOS
/// descriptor aligns the struct to 8), and OpenRM copies `sizeof` bytes, so the tail padding is
/// explicit and zero.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FwseclicFrtsCmd {
    pub readVbiosDesc: FwseclicReadVbiosDesc,
    pub frtsRegionDesc: FwseclicFrtsRegionDesc,
    pub _padding: U32,
}

/// The FWSEC ucode found in a VBIOS, borrowing the ROM bytes.
#[derive(Debug, Clone, Copy)]
pub struct Fwsec<'a> {
    /// Falcon ucode table `ApplicationID` it came from.
    pub app_id: u8,
    /// Offset of the descriptor in the ROM.
    pub desc_offset: u64,
    /// Descriptor size from `vDesc` (44 + signatures).
    pub desc_size: u32,
    /// The descriptor.
    pub desc: FalconUcodeDescV3,
    signatures: &'a [u8],
    image: &'a [u8],
}

/// What a falcon ucode descriptor of one version must show in its `vDesc` word, with the
/// names an error gives.
pub(crate) struct DescHeader {
    /// `NV_BIT_FALCON_UCODE_DESC_HEADER_VDESC_VERSION_*`.
    pub version: u8,
    /// Names the descriptor when the version differs.
    pub version_what: &'static str,
    /// The descriptor's own size, the least `vDesc` may give.
    pub min_size: usize,
    /// Names the size when `vDesc` gives less than `min_size`.
    pub size_what: &'static str,
    /// What the size should be, in that error's words.
    pub size_expected: &'static str,
}

impl DescHeader {
    /// Checks the `vDesc` word at `desc_offset` of `rom` (the version-available flag, the
    /// version, the size) as OpenRM's `s_vbiosFillFlcnUcodeFromDesc*` do; returns the
    /// descriptor's size.
    pub(crate) fn check(&self, rom: &[u8], desc_offset: u64) -> Result<u32, Error> {
        let vdesc = crate::bytes::u32_at(rom, "falcon ucode descriptor header", desc_offset)?;
        if vdesc & 1 == 0 {
            return Err(Error::Invalid {
                what: "falcon ucode descriptor header (vDesc)",
                value: vdesc as u64,
                why: "the version-available flag (bit 0) is clear",
            });
        }
        let version = ((vdesc >> 8) & 0xff) as u8;
        let desc_size = vdesc >> 16;
        if version != self.version {
            return Err(Error::UnsupportedVersion {
                what: self.version_what,
                version: version as u64,
            });
        }
        if (desc_size as usize) < self.min_size {
            return Err(Error::BadSize {
                what: self.size_what,
                size: desc_size as u64,
                expected: self.size_expected,
            });
        }
        Ok(desc_size)
    }
}

impl<'a> Fwsec<'a> {
    /// Parses the descriptor at `desc_offset` of `rom` and checks it as OpenRM's
    /// `s_vbiosFillFlcnUcodeFromDescV3` does (plus the FRTS patch's own bounds).
    pub fn parse(rom: &'a [u8], desc_offset: u64, app_id: u8) -> Result<Self, Error> {
        let desc_size = DescHeader {
            version: DESC_VERSION_V3,
            version_what: "falcon ucode descriptor (v2 is Turing/GA100 boot-with-loader FWSEC)",
            min_size: DESC_V3_SIZE,
            size_what: "FALCON_UCODE_DESC_V3 (vDesc size)",
            size_expected: "at least 44 bytes",
        }
        .check(rom, desc_offset)?;
        let desc: FalconUcodeDescV3 = *read(rom, "FALCON_UCODE_DESC_V3", desc_offset)?;
        let signatures = slice(
            rom,
            "FWSEC signatures",
            desc_offset + DESC_V3_SIZE as u64,
            desc_size as u64 - DESC_V3_SIZE as u64,
        )?;
        let size = round_up(desc.StoredSize.get() as u64, 256).unwrap_or(u64::MAX);
        let image = slice(
            rom,
            "FWSEC ucode image (StoredSize)",
            desc_offset + desc_size as u64,
            size,
        )?;
        let len = image.len();
        let imem = desc.IMEMLoadSize.get() as u64;
        range("FWSEC IMEM (IMEMLoadSize)", 0, imem, len)?;
        if imem >= len as u64 {
            return Err(Error::OutOfBounds {
                what: "FWSEC DMEM (starts at IMEMLoadSize)",
                offset: imem,
                len: 1,
                limit: len as u64,
            });
        }
        range(
            "FWSEC DMEM (DMEMLoadSize)",
            imem,
            desc.DMEMLoadSize.get() as u64,
            len,
        )?;
        // The signature lands at DMEM PKCDataOffset, inside the image (OpenRM's check).
        range(
            "FWSEC signature location (IMEMLoadSize + PKCDataOffset)",
            imem + desc.PKCDataOffset.get() as u64,
            SIGNATURE_SIZE as u64,
            len,
        )?;
        Ok(Fwsec {
            app_id,
            desc_offset,
            desc_size,
            desc,
            signatures,
            image,
        })
    }

    /// The unpatched ucode (IMEM then DMEM), `StoredSize` rounded up to 256.
    pub fn image(&self) -> &'a [u8] {
        self.image
    }

    /// The signatures following the descriptor.
    pub fn signatures(&self) -> &'a [u8] {
        self.signatures
    }

    /// Byte offset of the signature for `fuse_version` in [`Fwsec::signatures`] (OpenRM: the
    /// fuse version selects bit `fuse_version` of `SignatureVersions`, which must be set, and
    /// the signatures of the lower set bits come first).
    pub fn signature_offset(&self, fuse_version: u32) -> Result<usize, Error> {
        let versions = self.desc.SignatureVersions.get() as u32;
        let unavailable = || Error::NoSignatureForFuse {
            fuse_version,
            available: format!("SignatureVersions = {versions:#06x}"),
        };
        if fuse_version >= 16 || versions & (1 << fuse_version) == 0 {
            return Err(unavailable());
        }
        let below = (versions & ((1u32 << fuse_version) - 1)).count_ones() as usize;
        let off = below * SIGNATURE_SIZE;
        range(
            "FWSEC signature for the fuse version",
            off as u64,
            SIGNATURE_SIZE as u64,
            self.signatures.len(),
        )?;
        Ok(off)
    }

    /// The signature for `fuse_version`.
    pub fn signature_for_fuse(&self, fuse_version: u32) -> Result<&'a [u8], Error> {
        let off = self.signature_offset(fuse_version)?;
        slice(
            self.signatures,
            "FWSEC signature",
            off as u64,
            SIGNATURE_SIZE as u64,
        )
    }

    /// The ucode prepared for FWSEC-FRTS: FRTS region at `frts_offset` (bytes from the start of
    /// VRAM, 4 KiB aligned) of `frts_size` bytes (4 KiB multiple; RM uses [`FRTS_SIZE`]), and
    /// the signature for `fuse_version` (read from `NV_FUSE_OPT_FPF_GSP_UCODE<UcodeId>_VERSION`).
    pub fn patch_frts(
        &self,
        frts_offset: u64,
        frts_size: u64,
        fuse_version: u32,
    ) -> Result<FwsecUcode, Error> {
        let cmd = frts_cmd(frts_offset, frts_size)?;
        self.prepare(CMD_FRTS, cmd.as_bytes(), fuse_version)
    }

    /// The ucode prepared for FWSEC-SB (run at unload, before booter_unload).
    pub fn patch_sb(&self, fuse_version: u32) -> Result<FwsecUcode, Error> {
        self.prepare(CMD_SB, read_vbios_desc().as_bytes(), fuse_version)
    }

    fn prepare(&self, init_cmd: u32, arg: &[u8], fuse_version: u32) -> Result<FwsecUcode, Error> {
        let signature = self.signature_for_fuse(fuse_version)?;
        let mut image = self.image.to_vec();
        let imem = self.desc.IMEMLoadSize.get() as u64;
        let dmem_len = self.desc.DMEMLoadSize.get() as u64;
        let dmem_range = range("FWSEC DMEM", imem, dmem_len, image.len())?;
        let dmem = image.get_mut(dmem_range).ok_or(Error::OutOfBounds {
            what: "FWSEC DMEM",
            offset: imem,
            len: dmem_len,
            limit: self.image.len() as u64,
        })?;
        patch_dmem(dmem, self.desc.InterfaceOffset.get(), init_cmd, arg)?;
        let sig_range = range(
            "FWSEC signature location (IMEMLoadSize + PKCDataOffset)",
            imem + self.desc.PKCDataOffset.get() as u64,
            signature.len() as u64,
            image.len(),
        )?;
        if let Some(dst) = image.get_mut(sig_range) {
            dst.copy_from_slice(signature);
        }
        Ok(FwsecUcode {
            image,
            init_cmd,
            imem_phys_base: self.desc.IMEMPhysBase.get(),
            imem_load_size: self.desc.IMEMLoadSize.get(),
            imem_virt_base: self.desc.IMEMVirtBase.get(),
            dmem_phys_base: self.desc.DMEMPhysBase.get(),
            dmem_load_size: self.desc.DMEMLoadSize.get(),
            pkc_data_offset: self.desc.PKCDataOffset.get(),
            engine_id_mask: self.desc.EngineIdMask.get(),
            ucode_id: self.desc.UcodeId,
        })
    }
}

/// The FWSEC-FRTS command argument (`FWSECLIC_FRTS_CMD`) for `frts_offset`/`frts_size`.
pub(crate) fn frts_cmd(frts_offset: u64, frts_size: u64) -> Result<FwseclicFrtsCmd, Error> {
    if frts_offset == 0 || !frts_offset.is_multiple_of(4096) || frts_offset >> 12 > u32::MAX as u64
    {
        return Err(Error::Invalid {
            what: "FRTS offset",
            value: frts_offset,
            why: "must be non-zero, 4 KiB aligned and below 16 TiB",
        });
    }
    if frts_size == 0 || !frts_size.is_multiple_of(4096) || frts_size >> 12 > u32::MAX as u64 {
        return Err(Error::Invalid {
            what: "FRTS size",
            value: frts_size,
            why: "must be a non-zero multiple of 4 KiB",
        });
    }
    Ok(FwseclicFrtsCmd {
        readVbiosDesc: read_vbios_desc(),
        frtsRegionDesc: FwseclicFrtsRegionDesc {
            version: U32::new(1),
            size: U32::new(core::mem::size_of::<FwseclicFrtsRegionDesc>() as u32),
            frtsRegionOffset4K: U32::new((frts_offset >> 12) as u32),
            frtsRegionSize: U32::new((frts_size >> 12) as u32),
            frtsRegionMediaType: U32::new(FRTS_REGION_MEDIA_FB),
        },
        _padding: U32::new(0),
    })
}

pub(crate) fn read_vbios_desc() -> FwseclicReadVbiosDesc {
    FwseclicReadVbiosDesc {
        version: U32::new(1),
        size: U32::new(core::mem::size_of::<FwseclicReadVbiosDesc>() as u32),
        gfwImageOffset: U64::new(0),
        gfwImageSize: U32::new(0),
        flags: U32::new(READ_VBIOS_FLAGS),
    }
}

/// `s_vbiosPatchInterfaceData`, with the command buffer bounds checked against the command
/// buffer itself (OpenRM checks the mapper's offset instead and only warns on a short buffer).
pub(crate) fn patch_dmem(
    dmem: &mut [u8],
    interface_offset: u32,
    init_cmd: u32,
    arg: &[u8],
) -> Result<(), Error> {
    let hdr: FalconAppifHeaderV1 = *read(
        dmem,
        "FALCON_APPLICATION_INTERFACE_HEADER_V1",
        interface_offset as u64,
    )?;
    if hdr.entryCount < 2 {
        return Err(Error::Invalid {
            what: "FWSEC application interface entry count",
            value: hdr.entryCount as u64,
            why: "OpenRM requires at least two entries",
        });
    }
    let entries_at = interface_offset as u64 + core::mem::size_of::<FalconAppifHeaderV1>() as u64;
    let mut mapper_at = None;
    for i in 0..hdr.entryCount as u64 {
        let e: &FalconAppifEntryV1 = read(
            dmem,
            "FALCON_APPLICATION_INTERFACE_ENTRY_V1",
            entries_at + i * core::mem::size_of::<FalconAppifEntryV1>() as u64,
        )?;
        if e.id.get() == APPIF_ID_DMEMMAPPER {
            mapper_at = Some(e.dmemOffset.get() as u64);
        }
    }
    let mapper_at = mapper_at.ok_or(Error::Missing {
        what: "DMEMMAPPER entry (id 4) in the FWSEC application interface table",
    })?;
    let mapper: FalconAppifDmemMapperV3 = *read(
        dmem,
        "FALCON_APPLICATION_INTERFACE_DMEM_MAPPER_V3",
        mapper_at,
    )?;
    if (mapper.cmd_in_buffer_size.get() as usize) < arg.len() {
        return Err(Error::BadSize {
            what: "FWSEC DMEMMAPPER command buffer (cmd_in_buffer_size)",
            size: mapper.cmd_in_buffer_size.get() as u64,
            expected: "at least the command's size (48 bytes for FRTS)",
        });
    }
    let cmd_range = range(
        "FWSEC command buffer (cmd_in_buffer_offset)",
        mapper.cmd_in_buffer_offset.get() as u64,
        arg.len() as u64,
        dmem.len(),
    )?;
    let init_at = mapper_at + core::mem::offset_of!(FalconAppifDmemMapperV3, init_cmd) as u64;
    let init_range = range("FWSEC DMEMMAPPER init_cmd", init_at, 4, dmem.len())?;
    if let Some(dst) = dmem.get_mut(init_range) {
        dst.copy_from_slice(&init_cmd.to_le_bytes());
    }
    if let Some(dst) = dmem.get_mut(cmd_range) {
        dst.copy_from_slice(arg);
    }
    Ok(())
}

/// FWSEC ready to load: the patched image and the falcon load parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FwsecUcode {
    /// The patched ucode: IMEM bytes `[0, imem_load_size)`, DMEM bytes after them.
    pub image: Vec<u8>,
    /// The command patched into `init_cmd` ([`CMD_FRTS`] or [`CMD_SB`]).
    pub init_cmd: u32,
    /// IMEM physical load address.
    pub imem_phys_base: u32,
    /// IMEM bytes.
    pub imem_load_size: u32,
    /// IMEM virtual base (the boot vector).
    pub imem_virt_base: u32,
    /// DMEM physical load address.
    pub dmem_phys_base: u32,
    /// DMEM bytes.
    pub dmem_load_size: u32,
    /// `NV_PFALCON2_FALCON_BROM_PARAADDR`: DMEM offset of the signature.
    pub pkc_data_offset: u32,
    /// `NV_PFALCON2_FALCON_BROM_ENGIDMASK`.
    pub engine_id_mask: u16,
    /// `NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID`.
    pub ucode_id: u8,
}

impl FwsecUcode {
    /// The IMEM part.
    pub fn code(&self) -> &[u8] {
        self.image
            .get(..self.imem_load_size as usize)
            .unwrap_or(&[])
    }

    /// The patched DMEM part: the bytes to load into DMEM.
    pub fn dmem(&self) -> &[u8] {
        let start = self.imem_load_size as usize;
        let end = start.saturating_add(self.dmem_load_size as usize);
        self.image.get(start..end).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn desc_header_checks_flag_version_and_size() {
        let v3 = DescHeader {
            version: DESC_VERSION_V3,
            version_what: "v3",
            min_size: DESC_V3_SIZE,
            size_what: "size",
            size_expected: "at least 44 bytes",
        };
        let vdesc = |flag: u32, version: u32, size: u32| {
            let mut rom = [0u8; 8];
            rom[4..].copy_from_slice(&(flag | version << 8 | size << 16).to_le_bytes());
            rom
        };
        assert_eq!(v3.check(&vdesc(1, 3, 44 + 384), 4), Ok(44 + 384));
        assert!(matches!(
            v3.check(&vdesc(0, 3, 44), 4),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(
            v3.check(&vdesc(1, 2, 44), 4),
            Err(Error::UnsupportedVersion { version: 2, .. })
        ));
        assert!(matches!(
            v3.check(&vdesc(1, 3, 43), 4),
            Err(Error::BadSize { size: 43, .. })
        ));
        assert!(v3.check(&vdesc(1, 3, 44), 5).is_err());
    }

    #[test]
    fn layouts_match_the_headers() {
        // kernel_gsp_fwsec.c: FALCON_UCODE_DESC_V3 "9d1w2b2w" = 44 bytes.
        assert_eq!(size_of::<FalconUcodeDescV3>(), DESC_V3_SIZE);
        assert_eq!(offset_of!(FalconUcodeDescV3, PKCDataOffset), 8);
        assert_eq!(offset_of!(FalconUcodeDescV3, IMEMLoadSize), 20);
        assert_eq!(offset_of!(FalconUcodeDescV3, DMEMLoadSize), 32);
        assert_eq!(offset_of!(FalconUcodeDescV3, EngineIdMask), 36);
        assert_eq!(offset_of!(FalconUcodeDescV3, UcodeId), 38);
        assert_eq!(offset_of!(FalconUcodeDescV3, SignatureVersions), 40);
        // kernel_gsp_frts_tu102.c
        assert_eq!(size_of::<FalconAppifHeaderV1>(), 4);
        assert_eq!(size_of::<FalconAppifEntryV1>(), 8);
        assert_eq!(size_of::<FalconAppifDmemMapperV3>(), 64);
        assert_eq!(offset_of!(FalconAppifDmemMapperV3, cmd_in_buffer_offset), 8);
        assert_eq!(offset_of!(FalconAppifDmemMapperV3, init_cmd), 44);
        assert_eq!(size_of::<FwseclicReadVbiosDesc>(), 24);
        assert_eq!(offset_of!(FwseclicReadVbiosDesc, gfwImageOffset), 8);
        assert_eq!(offset_of!(FwseclicReadVbiosDesc, flags), 20);
        assert_eq!(size_of::<FwseclicFrtsRegionDesc>(), 20);
        assert_eq!(offset_of!(FwseclicFrtsCmd, frtsRegionDesc), 24);
        assert_eq!(size_of::<FwseclicFrtsCmd>(), 48);
    }
}
