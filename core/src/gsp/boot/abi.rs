//! The structures the CPU hands the boot firmware and GSP-RM, r570.144 layouts. Sizes and
//! offsets are tested against `gsp_abi_check.c` (570.144) where it covers them, otherwise
//! against the headers by hand (cited per struct).
#![allow(non_snake_case, non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::gsp::msgq::MESSAGE_QUEUE_INIT_ARGUMENTS;

/// `GSP_FW_WPR_META_MAGIC`.
pub const GSP_FW_WPR_META_MAGIC: u64 = 0xdc3a_ae21_371a_60b3;
/// `GSP_FW_WPR_META_REVISION`.
pub const GSP_FW_WPR_META_REVISION: u64 = 1;
/// `GSP_FW_WPR_META_VERIFIED`: what the bootloader writes to `verified` after checking.
pub const GSP_FW_WPR_META_VERIFIED: u64 = 0xa0a0_a0a0_a0a0_a0a0;

/// `GspFwWprMeta` (`gsp_fw_wpr_meta.h`, 256 bytes, r570 layout with `flags` and
/// `pmuReservedSize`): where the firmware images are in host memory and how the top of the
/// framebuffer is carved up. The booter (Turing-Ada) or GSP-FMC (Hopper on) reads it.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GspFwWprMeta {
    pub magic: u64,
    pub revision: u64,
    /// Device address of the radix3 L0 page of the GSP-RM image.
    pub sysmemAddrOfRadix3Elf: u64,
    pub sizeOfRadix3Elf: u64,
    pub sysmemAddrOfBootloader: u64,
    pub sizeOfBootloader: u64,
    pub bootloaderCodeOffset: u64,
    pub bootloaderDataOffset: u64,
    pub bootloaderManifestOffset: u64,
    pub sysmemAddrOfSignature: u64,
    pub sizeOfSignature: u64,
    pub gspFwRsvdStart: u64,
    pub nonWprHeapOffset: u64,
    pub nonWprHeapSize: u64,
    pub gspFwWprStart: u64,
    pub gspFwHeapOffset: u64,
    pub gspFwHeapSize: u64,
    pub gspFwOffset: u64,
    pub bootBinOffset: u64,
    pub frtsOffset: u64,
    pub frtsSize: u64,
    pub gspFwWprEnd: u64,
    pub fbSize: u64,
    pub vgaWorkspaceOffset: u64,
    pub vgaWorkspaceSize: u64,
    pub bootCount: u64,
    /// The `partitionRpc*` union's first 16 bytes.
    pub partitionRpcPadding: [u32; 4],
    pub sysmemAddrOfCrashReportQueue: u64,
    pub sizeOfCrashReportQueue: u32,
    pub lsUcodeVersionPadding: u32,
    pub gspFwHeapVfPartitionCount: u8,
    /// `GSP_FW_FLAGS_*`.
    pub flags: u8,
    pub padding: [u8; 2],
    pub pmuReservedSize: u32,
    pub verified: u64,
}

/// `GSP_FW_FLAGS_CLOCK_BOOST`.
pub const GSP_FW_FLAGS_CLOCK_BOOST: u8 = 1 << 0;
/// `GSP_FW_FLAGS_RECOVERY_MARGIN_PRESENT`.
pub const GSP_FW_FLAGS_RECOVERY_MARGIN_PRESENT: u8 = 1 << 1;

/// `LibosMemoryRegionKind`: `LIBOS_MEMORY_REGION_CONTIGUOUS`.
pub const LIBOS_MEMORY_REGION_CONTIGUOUS: u8 = 1;
/// `LibosMemoryRegionLoc`: `LIBOS_MEMORY_REGION_LOC_SYSMEM`.
pub const LIBOS_MEMORY_REGION_LOC_SYSMEM: u8 = 1;

/// `LibosMemoryRegionInitArgument` (`libos_init_args.h`, 32 bytes): one memory region LIBOS
/// maps at boot (log buffers, "RMARGS"). The array ends with an entry whose `id8` is 0.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct LibosMemoryRegionInitArgument {
    /// Up to 8 ASCII characters, big-endian (`_kgspGenerateInitArgId`).
    pub id8: u64,
    pub pa: u64,
    pub size: u64,
    pub kind: u8,
    pub loc: u8,
    pub _pad: [u8; 6],
}

/// The `id8` of a region name: its (up to 8) bytes shifted in most significant first.
pub const fn libos_id8(name: &str) -> u64 {
    let b = name.as_bytes();
    let mut id = 0u64;
    let mut i = 0;
    while i < b.len() && i < 8 {
        id = (id << 8) | b[i] as u64;
        i += 1;
    }
    id
}

/// `GSP_SR_INIT_ARGUMENTS` (`gsp_init_args.h`, 12 bytes).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GSP_SR_INIT_ARGUMENTS {
    pub oldLevel: u32,
    pub flags: u32,
    pub bInPMTransition: u8,
    pub _pad: [u8; 3],
}

/// `GSP_ARGUMENTS_CACHED` (`gsp_init_args.h`, r570: 72 bytes): what the "RMARGS" region holds.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct GSP_ARGUMENTS_CACHED {
    pub messageQueueInitArguments: MESSAGE_QUEUE_INIT_ARGUMENTS,
    pub srInitArguments: GSP_SR_INIT_ARGUMENTS,
    pub gpuInstance: u32,
    /// r570: 1 (`r570_gsp_set_rmargs`).
    pub bDmemStack: u8,
    pub _pad: [u8; 7],
    pub profilerArgs_pa: u64,
    pub profilerArgs_size: u64,
}

/// `GSP_DMA_TARGET_LOCAL_FB`.
pub const GSP_DMA_TARGET_LOCAL_FB: u32 = 0;
/// `GSP_DMA_TARGET_COHERENT_SYSTEM`.
pub const GSP_DMA_TARGET_COHERENT_SYSTEM: u32 = 1;
/// `GSP_DMA_TARGET_NONCOHERENT_SYSTEM`.
pub const GSP_DMA_TARGET_NONCOHERENT_SYSTEM: u32 = 2;

/// `GSP_ACR_BOOT_GSP_RM_PARAMS` (`gspifpub.h`, 32 bytes).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GSP_ACR_BOOT_GSP_RM_PARAMS {
    pub target: u32,
    /// `sizeof(GspFwWprMeta)`.
    pub gspRmDescSize: u32,
    /// Device address of the `GspFwWprMeta`.
    pub gspRmDescOffset: u64,
    pub wprCarveoutOffset: u64,
    pub wprCarveoutSize: u32,
    pub bIsGspRmBoot: u8,
    pub _pad: [u8; 3],
}

/// `GSP_RM_PARAMS` (16 bytes).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GSP_RM_PARAMS {
    pub target: u32,
    pub _pad: u32,
    /// Device address of the LIBOS init arguments.
    pub bootArgsOffset: u64,
}

/// `GSP_SPDM_PARAMS` (24 bytes; unused without confidential computing).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GSP_SPDM_PARAMS {
    pub target: u32,
    pub _pad0: u32,
    pub payloadBufferOffset: u64,
    pub payloadBufferSize: u32,
    pub _pad1: u32,
}

/// `GSP_FMC_BOOT_PARAMS` (`gspifpub.h`, r570: 80 bytes): what the GSP-FMC reads at
/// `NVDM_PAYLOAD_COT.gspBootArgsSysmemOffset`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct GSP_FMC_BOOT_PARAMS {
    /// `GSP_FMC_INIT_PARAMS.regkeys`.
    pub initParams_regkeys: u32,
    pub _pad: u32,
    pub bootGspRmParams: GSP_ACR_BOOT_GSP_RM_PARAMS,
    pub gspRmParams: GSP_RM_PARAMS,
    pub gspSpdmParams: GSP_SPDM_PARAMS,
}

/// `NVDM_TYPE_COT`.
pub const NVDM_TYPE_COT: u8 = 0x14;
/// `NVDM_TYPE_FSP_RESPONSE`.
pub const NVDM_TYPE_FSP_RESPONSE: u8 = 0x15;
/// `MCTP_MSG_HEADER_TYPE_VENDOR_PCI`.
pub const MCTP_MSG_HEADER_TYPE_VENDOR_PCI: u32 = 0x7e;
/// `MCTP_MSG_HEADER_VENDOR_ID_NV`.
pub const MCTP_MSG_HEADER_VENDOR_ID_NV: u32 = 0x10de;

/// `NVDM_PAYLOAD_COT` (`kern_fsp_cot_payload.h`, `#pragma pack(1)`, 860 bytes): the chain of
/// trust message to the FSP. Version 1 on GH100, 2 on GB10x/GB20x (`g_kern_fsp_nvoc.c`).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct NVDM_PAYLOAD_COT {
    pub version: u16,
    pub size: u16,
    /// Device address of the GSP-FMC image.
    pub gspFmcSysmemOffset: u64,
    pub frtsSysmemOffset: u64,
    pub frtsSysmemSize: u32,
    /// FRTS end, as an offset from the end of FB.
    pub frtsVidmemOffset: u64,
    pub frtsVidmemSize: u32,
    /// `hash384[12]`: SHA-384 of the FMC image.
    pub hash384: [u8; 48],
    /// `publicKey[96]` (u32s), the FMC's key, zero-padded.
    pub publicKey: [u8; 384],
    /// `signature[96]` (u32s), zero-padded.
    pub signature: [u8; 384],
    /// Device address of the `GSP_FMC_BOOT_PARAMS`.
    pub gspBootArgsSysmemOffset: u64,
}

/// `NVDM_PAYLOAD_COMMAND_RESPONSE` (`nvdm_payload_cmd_response.h`, packed, 12 bytes): the
/// FSP's answer, after the NVDM type byte.
#[repr(C, packed)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[allow(missing_docs)]
pub struct NVDM_PAYLOAD_COMMAND_RESPONSE {
    pub taskId: u32,
    pub commandNvdmType: u32,
    /// `FSP_OK` (0) or `FSP_ERR_*`.
    pub errorCode: u32,
}

/// `FSP_OK`.
pub const FSP_OK: u32 = 0;
/// `FSP_ERR_IFS_ERR_INVALID_STATE`.
pub const FSP_ERR_IFS_ERR_INVALID_STATE: u32 = 0x9e;
/// `FSP_ERR_IFR_FILE_NOT_FOUND`.
pub const FSP_ERR_IFR_FILE_NOT_FOUND: u32 = 0x9f;
/// `FSP_ERR_IFS_ERR_NOT_SUPPORTED`.
pub const FSP_ERR_IFS_ERR_NOT_SUPPORTED: u32 = 0xa0;
/// `FSP_ERR_IFS_ERR_INVALID_DATA`.
pub const FSP_ERR_IFS_ERR_INVALID_DATA: u32 = 0xa1;

/// NVIDIA's name of an FSP error code.
pub fn fsp_error_name(code: u32) -> Option<&'static str> {
    Some(match code {
        FSP_OK => "FSP_OK",
        FSP_ERR_IFS_ERR_INVALID_STATE => "FSP_ERR_IFS_ERR_INVALID_STATE",
        FSP_ERR_IFR_FILE_NOT_FOUND => "FSP_ERR_IFR_FILE_NOT_FOUND",
        FSP_ERR_IFS_ERR_NOT_SUPPORTED => "FSP_ERR_IFS_ERR_NOT_SUPPORTED",
        FSP_ERR_IFS_ERR_INVALID_DATA => "FSP_ERR_IFS_ERR_INVALID_DATA",
        _ => return None,
    })
}

/// The MCTP transport header dword (`fsp_mctp_format.h`): SOM 31, EOM 30, SEQ 29:28, TAG
/// 26:24, SEID 23:16.
pub const fn mctp_header(som: bool, eom: bool, seid: u8, seq: u8) -> u32 {
    ((som as u32) << 31) | ((eom as u32) << 30) | (((seq & 3) as u32) << 28) | ((seid as u32) << 16)
}

/// The MCTP message header dword of an NVDM message: TYPE 6:0 = vendor PCI, VENDOR_ID 23:8 =
/// 0x10de, NVDM_TYPE 31:24.
pub const fn nvdm_header(nvdm_type: u8) -> u32 {
    MCTP_MSG_HEADER_TYPE_VENDOR_PCI
        | (MCTP_MSG_HEADER_VENDOR_ID_NV << 8)
        | ((nvdm_type as u32) << 24)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn wpr_meta_matches_gsp_abi_check() {
        // gsp_abi_check.c (570.144) lines 234-260.
        assert_eq!(size_of::<GspFwWprMeta>(), 256);
        assert_eq!(offset_of!(GspFwWprMeta, sysmemAddrOfRadix3Elf), 16);
        assert_eq!(offset_of!(GspFwWprMeta, bootloaderManifestOffset), 64);
        assert_eq!(offset_of!(GspFwWprMeta, sysmemAddrOfSignature), 72);
        assert_eq!(offset_of!(GspFwWprMeta, sizeOfSignature), 80);
        assert_eq!(offset_of!(GspFwWprMeta, gspFwRsvdStart), 88);
        assert_eq!(offset_of!(GspFwWprMeta, gspFwWprStart), 112);
        assert_eq!(offset_of!(GspFwWprMeta, gspFwHeapSize), 128);
        assert_eq!(offset_of!(GspFwWprMeta, frtsOffset), 152);
        assert_eq!(offset_of!(GspFwWprMeta, gspFwWprEnd), 168);
        assert_eq!(offset_of!(GspFwWprMeta, fbSize), 176);
        assert_eq!(offset_of!(GspFwWprMeta, vgaWorkspaceSize), 192);
        assert_eq!(offset_of!(GspFwWprMeta, bootCount), 200);
        assert_eq!(offset_of!(GspFwWprMeta, sysmemAddrOfCrashReportQueue), 224);
        assert_eq!(offset_of!(GspFwWprMeta, sizeOfCrashReportQueue), 232);
        assert_eq!(offset_of!(GspFwWprMeta, gspFwHeapVfPartitionCount), 240);
        assert_eq!(offset_of!(GspFwWprMeta, flags), 241);
        assert_eq!(offset_of!(GspFwWprMeta, pmuReservedSize), 244);
        assert_eq!(offset_of!(GspFwWprMeta, verified), 248);
    }

    #[test]
    fn init_args_match_gsp_abi_check() {
        // gsp_abi_check.c lines 139-144 and 206-209.
        assert_eq!(size_of::<GSP_ARGUMENTS_CACHED>(), 72);
        assert_eq!(offset_of!(GSP_ARGUMENTS_CACHED, srInitArguments), 32);
        assert_eq!(offset_of!(GSP_ARGUMENTS_CACHED, gpuInstance), 44);
        assert_eq!(offset_of!(GSP_ARGUMENTS_CACHED, bDmemStack), 48);
        assert_eq!(offset_of!(GSP_ARGUMENTS_CACHED, profilerArgs_pa), 56);
        assert_eq!(size_of::<GSP_SR_INIT_ARGUMENTS>(), 12);
        assert_eq!(offset_of!(GSP_SR_INIT_ARGUMENTS, bInPMTransition), 8);
        // libos_init_args.h by hand: 3 u64, 2 u8, aligned to 8.
        assert_eq!(size_of::<LibosMemoryRegionInitArgument>(), 32);
        assert_eq!(offset_of!(LibosMemoryRegionInitArgument, kind), 24);
        assert_eq!(offset_of!(LibosMemoryRegionInitArgument, loc), 25);
        // _kgspGenerateInitArgId: "LOGINIT" -> 0x4c4f47494e4954.
        assert_eq!(libos_id8("LOGINIT"), 0x004c_4f47_494e_4954);
        assert_eq!(libos_id8("RMARGS"), 0x0000_524d_4152_4753);
    }

    #[test]
    fn fmc_boot_params_match_gspifpub() {
        // gspifpub.h by hand (rm-abi.md 6): 80 bytes at r570.
        assert_eq!(size_of::<GSP_ACR_BOOT_GSP_RM_PARAMS>(), 32);
        assert_eq!(offset_of!(GSP_ACR_BOOT_GSP_RM_PARAMS, gspRmDescOffset), 8);
        assert_eq!(offset_of!(GSP_ACR_BOOT_GSP_RM_PARAMS, wprCarveoutSize), 24);
        assert_eq!(offset_of!(GSP_ACR_BOOT_GSP_RM_PARAMS, bIsGspRmBoot), 28);
        assert_eq!(size_of::<GSP_FMC_BOOT_PARAMS>(), 80);
        assert_eq!(offset_of!(GSP_FMC_BOOT_PARAMS, bootGspRmParams), 8);
        assert_eq!(offset_of!(GSP_FMC_BOOT_PARAMS, gspRmParams), 40);
        assert_eq!(offset_of!(GSP_RM_PARAMS, bootArgsOffset), 8);
        assert_eq!(offset_of!(GSP_FMC_BOOT_PARAMS, gspSpdmParams), 56);
    }

    #[test]
    fn cot_payload_matches_the_packed_header() {
        // kern_fsp_cot_payload.h (pack 1), rm-abi.md 6: 860 bytes.
        assert_eq!(size_of::<NVDM_PAYLOAD_COT>(), 860);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, size), 2);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, gspFmcSysmemOffset), 4);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, frtsSysmemOffset), 12);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, frtsSysmemSize), 20);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, frtsVidmemOffset), 24);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, frtsVidmemSize), 32);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, hash384), 36);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, publicKey), 84);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, signature), 468);
        assert_eq!(offset_of!(NVDM_PAYLOAD_COT, gspBootArgsSysmemOffset), 852);
        assert_eq!(size_of::<NVDM_PAYLOAD_COMMAND_RESPONSE>(), 12);
    }

    #[test]
    fn mctp_headers() {
        // tinygrad-nv.md 2.4: (1<<31)|(1<<30) and 0x7e | 0x10de<<8 | 0x14<<24.
        assert_eq!(mctp_header(true, true, 0, 0), 0xc000_0000);
        assert_eq!(mctp_header(false, true, 1, 5), 0x5001_0000);
        assert_eq!(nvdm_header(NVDM_TYPE_COT), 0x1410_de7e);
    }
}
