//! FWSEC with a `FALCON_UCODE_DESC_V2` descriptor: the Turing and GA100 form, which the GSP
//! falcon cannot boot from heavy-secure ROM, so RM loads it through the generic falcon
//! bootloader (`KGSP_FLCN_UCODE_BOOT_WITH_LOADER`, `kernel_gsp_fwsec.c`
//! `s_vbiosFillFlcnUcodeFromDescV2`).
//!
//! The ucode follows the 60-byte descriptor (`descOffset + descSize`): IMEM bytes
//! `[0, IMEMLoadSize)` and DMEM bytes `[DMEMOffset, DMEMOffset + DMEMLoadSize)` of it. RM copies
//! them into two physically contiguous buffers, each rounded up to 256 bytes: the code at
//! `imemNsPa` (= `IMEMPhysBase`) of the code buffer, the data at `dmemPa` (= `DMEMPhysBase`)
//! of the data buffer. From the descriptor:
//!
//! - `imemNsSize = IMEMLoadSize - IMEMSecSize`, `imemNsPa = IMEMPhysBase`
//! - `imemSecSize = IMEMSecSize` rounded up to 256,
//!   `imemSecPa = IMEMSecBase - IMEMVirtBase + IMEMPhysBase`
//! - `codeEntry = VirtualEntry`
//!
//! The command is patched into the data buffer (`s_prepareForFwsec_TU102`, with the interface
//! table at `InterfaceOffset` of the data buffer) as for a v3 FWSEC; unlike v3, no signature is
//! patched in: the ucode carries its own.

use alloc::vec;
use alloc::vec::Vec;

use zerocopy::IntoBytes;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

use crate::Error;
use crate::bytes::{read, round_up, slice};
use crate::fwsec::{
    CMD_FRTS, CMD_SB, DESC_VERSION_V2, DescHeader, FwseclicFrtsCmd, frts_cmd, patch_dmem,
    read_vbios_desc,
};

/// `FALCON_UCODE_DESC_V2_SIZE_60`.
pub const DESC_V2_SIZE: usize = 60;

/// `FALCON_UCODE_DESC_V2` (60 bytes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
#[allow(non_snake_case, missing_docs)]
pub struct FalconUcodeDescV2 {
    /// `FALCON_UCODE_DESC_HEADER.vDesc`: flags 7:0, version 15:8, size 31:16.
    pub vDesc: U32,
    pub StoredSize: U32,
    pub UncompressedSize: U32,
    pub VirtualEntry: U32,
    pub InterfaceOffset: U32,
    pub IMEMPhysBase: U32,
    pub IMEMLoadSize: U32,
    pub IMEMVirtBase: U32,
    pub IMEMSecBase: U32,
    pub IMEMSecSize: U32,
    pub DMEMOffset: U32,
    pub DMEMPhysBase: U32,
    pub DMEMLoadSize: U32,
    pub altIMEMLoadSize: U32,
    pub altDMEMLoadSize: U32,
}

/// A v2 FWSEC found in a VBIOS, borrowing the ROM bytes.
#[derive(Debug, Clone, Copy)]
pub struct FwsecV2<'a> {
    /// Falcon ucode table `ApplicationID` it came from.
    pub app_id: u8,
    /// Offset of the descriptor in the ROM.
    pub desc_offset: u64,
    /// Descriptor size from `vDesc`.
    pub desc_size: u32,
    /// The descriptor.
    pub desc: FalconUcodeDescV2,
    code: &'a [u8],
    data: &'a [u8],
}

/// FWSEC ready for the generic bootloader: the two buffers RM DMAs from and the offsets of the
/// bootloader's DMEM descriptor (`RM_FLCN_BL_DMEM_DESC`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FwsecLoaderUcode {
    /// The code buffer (`IMEMLoadSize` rounded up to 256; the code at `ns_offset`).
    pub code: Vec<u8>,
    /// The patched data buffer (`DMEMLoadSize` rounded up to 256; the data at `dmem_pa`).
    pub data: Vec<u8>,
    /// The command patched into `init_cmd` ([`CMD_FRTS`] or [`CMD_SB`]).
    pub init_cmd: u32,
    /// `imemNsPa`: `nonSecureCodeOff`.
    pub ns_offset: u32,
    /// `imemNsSize`: `nonSecureCodeSize`.
    pub ns_size: u32,
    /// `imemSecPa`: `secureCodeOff`.
    pub sec_offset: u32,
    /// `imemSecSize`: `secureCodeSize`.
    pub sec_size: u32,
    /// `codeEntry` (`VirtualEntry`). RM writes 0 as `codeEntryPoint` regardless.
    pub code_entry: u32,
    /// `dmemPa`.
    pub dmem_pa: u32,
    /// `dmemSize`: `dataSize`.
    pub dmem_size: u32,
}

fn bad_offset(what: &'static str, offset: u64, len: u64, limit: u64) -> Error {
    Error::OutOfBounds {
        what,
        offset,
        len,
        limit,
    }
}

impl<'a> FwsecV2<'a> {
    /// Parses the descriptor at `desc_offset` of `rom` with every check of OpenRM's
    /// `s_vbiosFillFlcnUcodeFromDescV2` (image bounds and buffer bounds).
    pub fn parse(rom: &'a [u8], desc_offset: u64, app_id: u8) -> Result<Self, Error> {
        let desc_size = DescHeader {
            version: DESC_VERSION_V2,
            version_what: "falcon ucode descriptor for the generic bootloader (v2 expected)",
            min_size: DESC_V2_SIZE,
            size_what: "FALCON_UCODE_DESC_V2 (vDesc size)",
            size_expected: "at least 60 bytes",
        }
        .check(rom, desc_offset)?;
        let desc: FalconUcodeDescV2 = *read(rom, "FALCON_UCODE_DESC_V2", desc_offset)?;
        let rom_len = rom.len() as u64;
        let code_at = desc_offset + desc_size as u64;
        if code_at >= rom_len {
            return Err(bad_offset(
                "FWSEC v2 code (after the descriptor)",
                code_at,
                1,
                rom_len,
            ));
        }
        let imem = desc.IMEMLoadSize.get() as u64;
        let code = slice(rom, "FWSEC v2 code (IMEMLoadSize)", code_at, imem)?;
        let data_at = code_at + desc.DMEMOffset.get() as u64;
        if data_at >= rom_len {
            return Err(bad_offset(
                "FWSEC v2 data (DMEMOffset)",
                data_at,
                1,
                rom_len,
            ));
        }
        let dmem = desc.DMEMLoadSize.get() as u64;
        let data = slice(rom, "FWSEC v2 data (DMEMLoadSize)", data_at, dmem)?;
        if desc.IMEMSecSize.get() > desc.IMEMLoadSize.get() {
            return Err(Error::Invalid {
                what: "FWSEC v2 IMEMSecSize",
                value: desc.IMEMSecSize.get() as u64,
                why: "larger than IMEMLoadSize",
            });
        }
        let f = FwsecV2 {
            app_id,
            desc_offset,
            desc_size,
            desc,
            code,
            data,
        };
        f.check_buffers()?;
        Ok(f)
    }

    /// The buffer bounds OpenRM checks: the code (at `imemNsPa`) inside the 256-aligned code
    /// buffer, the data (at `dmemPa`) inside the data buffer, and the secure code (which the
    /// bootloader fetches from `imemSecPa`) inside the code buffer.
    fn check_buffers(&self) -> Result<(), Error> {
        let (code_len, data_len) = (self.code_buffer_len()?, self.data_buffer_len()?);
        let ns = self.desc.IMEMPhysBase.get() as u64;
        if ns >= code_len || ns + self.code.len() as u64 > code_len {
            return Err(bad_offset(
                "FWSEC v2 code in its buffer (IMEMPhysBase)",
                ns,
                self.code.len() as u64,
                code_len,
            ));
        }
        let pa = self.desc.DMEMPhysBase.get() as u64;
        if pa >= data_len || pa + self.data.len() as u64 > data_len {
            return Err(bad_offset(
                "FWSEC v2 data in its buffer (DMEMPhysBase)",
                pa,
                self.data.len() as u64,
                data_len,
            ));
        }
        let sec = self.sec_offset()? as u64;
        let sec_size = self.sec_size() as u64;
        if sec + sec_size > code_len {
            return Err(bad_offset(
                "FWSEC v2 secure code (IMEMSecBase - IMEMVirtBase + IMEMPhysBase)",
                sec,
                sec_size,
                code_len,
            ));
        }
        Ok(())
    }

    fn code_buffer_len(&self) -> Result<u64, Error> {
        round_up(self.desc.IMEMLoadSize.get() as u64, 256).ok_or(Error::Invalid {
            what: "FWSEC v2 IMEMLoadSize",
            value: self.desc.IMEMLoadSize.get() as u64,
            why: "too large",
        })
    }

    fn data_buffer_len(&self) -> Result<u64, Error> {
        round_up(self.desc.DMEMLoadSize.get() as u64, 256).ok_or(Error::Invalid {
            what: "FWSEC v2 DMEMLoadSize",
            value: self.desc.DMEMLoadSize.get() as u64,
            why: "too large",
        })
    }

    fn sec_offset(&self) -> Result<u32, Error> {
        let d = &self.desc;
        d.IMEMSecBase
            .get()
            .checked_sub(d.IMEMVirtBase.get())
            .and_then(|o| o.checked_add(d.IMEMPhysBase.get()))
            .ok_or(Error::Invalid {
                what: "FWSEC v2 IMEMSecBase",
                value: d.IMEMSecBase.get() as u64,
                why: "below IMEMVirtBase (or the secure offset overflows)",
            })
    }

    fn sec_size(&self) -> u32 {
        self.desc.IMEMSecSize.get().next_multiple_of(256)
    }

    /// The unpatched code (`IMEMLoadSize` bytes).
    pub fn code(&self) -> &'a [u8] {
        self.code
    }

    /// The unpatched data (`DMEMLoadSize` bytes).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The ucode prepared for FWSEC-FRTS at `frts_offset` (`frts_size` bytes), as
    /// [`crate::Fwsec::patch_frts`] but without a signature.
    pub fn patch_frts(&self, frts_offset: u64, frts_size: u64) -> Result<FwsecLoaderUcode, Error> {
        let cmd: FwseclicFrtsCmd = frts_cmd(frts_offset, frts_size)?;
        self.prepare(CMD_FRTS, cmd.as_bytes())
    }

    /// The ucode prepared for FWSEC-SB.
    pub fn patch_sb(&self) -> Result<FwsecLoaderUcode, Error> {
        self.prepare(CMD_SB, read_vbios_desc().as_bytes())
    }

    fn prepare(&self, init_cmd: u32, arg: &[u8]) -> Result<FwsecLoaderUcode, Error> {
        // check_buffers() at parse bounds every offset below.
        let code_len = self.code_buffer_len()? as usize;
        let data_len = self.data_buffer_len()? as usize;
        let mut code = vec![0u8; code_len];
        let ns = self.desc.IMEMPhysBase.get() as usize;
        if let Some(dst) = code.get_mut(ns..ns + self.code.len()) {
            dst.copy_from_slice(self.code);
        }
        let mut data = vec![0u8; data_len];
        let pa = self.desc.DMEMPhysBase.get() as usize;
        if let Some(dst) = data.get_mut(pa..pa + self.data.len()) {
            dst.copy_from_slice(self.data);
        }
        // s_prepareForFwsec_TU102 patches the mapped data buffer (interface offset from its
        // start) with dmemSize as the limit.
        let dmem_size = self.desc.DMEMLoadSize.get();
        let limit = (dmem_size as usize).min(data.len());
        patch_dmem(
            &mut data[..limit],
            self.desc.InterfaceOffset.get(),
            init_cmd,
            arg,
        )?;
        let d = &self.desc;
        Ok(FwsecLoaderUcode {
            code,
            data,
            init_cmd,
            ns_offset: d.IMEMPhysBase.get(),
            ns_size: d.IMEMLoadSize.get() - d.IMEMSecSize.get(),
            sec_offset: self.sec_offset()?,
            sec_size: self.sec_size(),
            code_entry: d.VirtualEntry.get(),
            dmem_pa: d.DMEMPhysBase.get(),
            dmem_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn desc_v2_matches_kernel_gsp_fwsec_c() {
        // FALCON_UCODE_DESC_V2 "15d" = 60 bytes.
        assert_eq!(size_of::<FalconUcodeDescV2>(), DESC_V2_SIZE);
        assert_eq!(offset_of!(FalconUcodeDescV2, VirtualEntry), 12);
        assert_eq!(offset_of!(FalconUcodeDescV2, InterfaceOffset), 16);
        assert_eq!(offset_of!(FalconUcodeDescV2, IMEMPhysBase), 20);
        assert_eq!(offset_of!(FalconUcodeDescV2, IMEMSecBase), 32);
        assert_eq!(offset_of!(FalconUcodeDescV2, IMEMSecSize), 36);
        assert_eq!(offset_of!(FalconUcodeDescV2, DMEMOffset), 40);
        assert_eq!(offset_of!(FalconUcodeDescV2, DMEMLoadSize), 48);
        assert_eq!(offset_of!(FalconUcodeDescV2, altDMEMLoadSize), 56);
    }
}
