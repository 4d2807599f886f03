//! What a GSP client (the kernel RM's role) sends GSP-RM besides plain alloc/control/free.
//!
//! On a GSP system the kernel driver (CPU-RM) owns the page tables of user address spaces,
//! allocates channel memory and GR context buffers itself, and tells GSP-RM where they are.
//! On bare metal nvbare plays that part, so it needs these structs (r570.144 layouts, each
//! with a size/offset test against the header named on it):
//!
//! * `SET_PAGE_DIRECTORY` (RPC 54, `rpc_set_page_directory_v1E_05`): point an externally owned
//!   `FERMI_VASPACE_A` at our root page directory (`deviceCtrlCmdDmaSetPageDirectory_IMPL`
//!   forwards it with `NV_RM_RPC_SET_PAGE_DIRECTORY`).
//! * `NV2080_CTRL_CMD_GPU_PROMOTE_CTX`: hand GSP-RM the physical GR context buffers (and later
//!   their virtual addresses in our address space), as `kgrobjPromoteContext_IMPL` and UVM's
//!   channel binding do.
//! * GSP-RM's internal controls the kernel RM reads at load time on `hInternalClient` /
//!   `hInternalSubdevice`: `KGR_GET_CONTEXT_BUFFERS_INFO` (context buffer sizes),
//!   `FIFO_GET_DEVICE_INFO_TABLE` (runlist ids), `CE_GET_FAULT_METHOD_BUFFER_SIZE`.
//! * `NV_KERNELCHANNEL_ALLOC_INTERNALFLAGS_*` for channel allocation, and the work-submit
//!   token the kernel RM builds (`kfifoGenerateWorkSubmitTokenHal_GA100/_GB202`): GSP-RM
//!   answers `GET_WORK_SUBMIT_TOKEN` with its internal token (the channel id only).
#![allow(non_camel_case_types, non_snake_case)]
#![allow(missing_docs)] // field names are NVIDIA's; the header named on each struct documents them

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::GspError;
use super::events::EventHandler;
use super::rpc::{GspRpc, rpc_result_error};
use crate::chip::Chipset;
use crate::hal::{Clock, DmaBuffer, Mmio};
use crate::rm::{Handle, RmStatus};

// ----------------------------------------------------------------------------------------------
// SET_PAGE_DIRECTORY.

/// `NV_VGPU_MSG_FUNCTION_SET_PAGE_DIRECTORY` (`rpc_global_enums.h`).
pub const NV_VGPU_MSG_FUNCTION_SET_PAGE_DIRECTORY: u32 = 54;
/// `NV_VGPU_MSG_FUNCTION_UNSET_PAGE_DIRECTORY`.
pub const NV_VGPU_MSG_FUNCTION_UNSET_PAGE_DIRECTORY: u32 = 79;

/// `NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_FLAGS_APERTURE` (1:0) `_VIDMEM` (`ctrl0080dma.h`).
pub const SET_PAGE_DIRECTORY_FLAGS_APERTURE_VIDMEM: u32 = 0;
/// `..._APERTURE_SYSMEM_COH`.
pub const SET_PAGE_DIRECTORY_FLAGS_APERTURE_SYSMEM_COH: u32 = 1;
/// `..._APERTURE_SYSMEM_NONCOH`.
pub const SET_PAGE_DIRECTORY_FLAGS_APERTURE_SYSMEM_NONCOH: u32 = 2;
/// `..._ALL_CHANNELS` (3:3) `_TRUE`: update every channel using the VA space.
pub const SET_PAGE_DIRECTORY_FLAGS_ALL_CHANNELS: u32 = 1 << 3;

/// `NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05` (`generated/g_sdk-structures.h`, 32 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05 {
    pub physAddress: u64,
    pub numEntries: u32,
    pub flags: u32,
    pub hVASpace: u32,
    pub chId: u32,
    /// Subdevice id + 1, 0 for broadcast.
    pub subDeviceId: u32,
    pub pasid: u32,
}

/// `NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES` (`ctrl90f1.h`): on a VA space whose page
/// tables the client owns, tells GSP-RM (the server) where they are, so its GPU walks use them
/// and it can fill the range it manages (`gvaspaceCopyServerRmReservedPdesToServerRm_IMPL`).
pub const NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES: u32 = 0x90f1_0106;
/// `GMMU_FMT_MAX_LEVELS`.
pub const GMMU_FMT_MAX_LEVELS: usize = 6;
/// `GMMU_APERTURE` (`inc/libraries/mmu/gmmu_fmt.h`, an enum: INVALID, VIDEO, PEER, SYS_NONCOH,
/// SYS_COH): video memory.
pub const GMMU_APERTURE_VIDEO: u32 = 1;
/// `GMMU_APERTURE_PEER`.
pub const GMMU_APERTURE_PEER: u32 = 2;
/// `GMMU_APERTURE_SYS_NONCOH`.
pub const GMMU_APERTURE_SYS_NONCOH: u32 = 3;
/// `GMMU_APERTURE_SYS_COH`.
pub const GMMU_APERTURE_SYS_COH: u32 = 4;

/// One level of [`NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS`] (24 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_LEVEL {
    pub physAddress: u64,
    pub size: u64,
    /// `GMMU_APERTURE_*` ([`GMMU_APERTURE_VIDEO`], [`GMMU_APERTURE_SYS_NONCOH`],
    /// [`GMMU_APERTURE_SYS_COH`]).
    pub aperture: u32,
    pub pageShift: u8,
    pub _pad: [u8; 3],
}

/// `NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS` (`ctrl90f1.h`, 184 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS {
    pub hSubDevice: u32,
    pub subDeviceId: u32,
    pub pageSize: u64,
    pub virtAddrLo: u64,
    pub virtAddrHi: u64,
    pub numLevelsToCopy: u32,
    pub _pad0: u32,
    pub levels: [NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_LEVEL; GMMU_FMT_MAX_LEVELS],
}

/// `rpc_set_page_directory_v1E_05` (`generated/g_rpc-structures.h`, 48 B: the params are
/// 8-byte aligned, so 4 bytes of padding follow `pasid`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct rpc_set_page_directory_v1E_05 {
    pub hClient: u32,
    pub hDevice: u32,
    pub pasid: u32,
    pub _pad0: u32,
    pub params: NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05,
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> GspRpc<B, M, C, H> {
    /// SET_PAGE_DIRECTORY (54): makes VA space `params.hVASpace` of `device` in `client` use the
    /// page directory at `params.physAddress` (the VA space must be externally owned or in
    /// shared management, and no channel may use it yet).
    pub fn set_page_directory(
        &mut self,
        client: Handle,
        device: Handle,
        params: &NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05,
    ) -> Result<(), GspError> {
        let mut p = rpc_set_page_directory_v1E_05 {
            hClient: client.0,
            hDevice: device.0,
            pasid: params.pasid,
            _pad0: 0,
            params: *params,
        };
        let f = NV_VGPU_MSG_FUNCTION_SET_PAGE_DIRECTORY;
        let r = self.call(f, p.as_mut_bytes(), &mut [], |_, _| false)?;
        if r.header.rpc_result != 0 {
            return Err(match r.header.rpc_result {
                s if s < 0xff00_0000 => GspError::Status {
                    function: f,
                    status: RmStatus(s),
                },
                s => rpc_result_error(f, s),
            });
        }
        Ok(())
    }
}

// ----------------------------------------------------------------------------------------------
// GR context buffers.

/// `NV2080_CTRL_CMD_GPU_PROMOTE_CTX` (on the subdevice).
pub const NV2080_CTRL_CMD_GPU_PROMOTE_CTX: u32 = 0x2080_012b;
/// `NV2080_CTRL_GPU_PROMOTE_CONTEXT_MAX_ENTRIES`.
pub const NV2080_CTRL_GPU_PROMOTE_CONTEXT_MAX_ENTRIES: usize = 16;

/// `NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ID_*` (`ctrl2080gpu.h`).
pub mod promote_id {
    pub const MAIN: u16 = 0;
    pub const PM: u16 = 1;
    pub const PATCH: u16 = 2;
    pub const BUFFER_BUNDLE_CB: u16 = 3;
    pub const PAGEPOOL: u16 = 4;
    pub const ATTRIBUTE_CB: u16 = 5;
    pub const RTV_CB_GLOBAL: u16 = 6;
    pub const GFXP_POOL: u16 = 7;
    pub const GFXP_CTRL_BLK: u16 = 8;
    pub const FECS_EVENT: u16 = 9;
    pub const PRIV_ACCESS_MAP: u16 = 10;
    pub const UNRESTRICTED_PRIV_ACCESS_MAP: u16 = 11;
    pub const GLOBAL_PRIV_ACCESS_MAP: u16 = 12;

    /// Name for messages.
    pub fn name(id: u16) -> &'static str {
        match id {
            MAIN => "MAIN",
            PM => "PM",
            PATCH => "PATCH",
            BUFFER_BUNDLE_CB => "BUFFER_BUNDLE_CB",
            PAGEPOOL => "PAGEPOOL",
            ATTRIBUTE_CB => "ATTRIBUTE_CB",
            RTV_CB_GLOBAL => "RTV_CB_GLOBAL",
            GFXP_POOL => "GFXP_POOL",
            GFXP_CTRL_BLK => "GFXP_CTRL_BLK",
            FECS_EVENT => "FECS_EVENT",
            PRIV_ACCESS_MAP => "PRIV_ACCESS_MAP",
            UNRESTRICTED_PRIV_ACCESS_MAP => "UNRESTRICTED_PRIV_ACCESS_MAP",
            GLOBAL_PRIV_ACCESS_MAP => "GLOBAL_PRIV_ACCESS_MAP",
            _ => "unknown",
        }
    }

    /// Whether the buffer belongs to one channel (the others are global, one per GPU).
    pub fn is_per_channel(id: u16) -> bool {
        matches!(id, MAIN | PM | PATCH)
    }
}

/// `NV2080_CTRL_GPU_INITIALIZE_CTX_APERTURE_VIDMEM` (1:0) for `physAttr`.
pub const INITIALIZE_CTX_APERTURE_VIDMEM: u32 = 0;
/// `NV2080_CTRL_GPU_INITIALIZE_CTX_APERTURE_COH_SYS`.
pub const INITIALIZE_CTX_APERTURE_COH_SYS: u32 = 1;
/// `NV2080_CTRL_GPU_INITIALIZE_CTX_APERTURE_NCOH_SYS`.
pub const INITIALIZE_CTX_APERTURE_NCOH_SYS: u32 = 2;
/// `NV2080_CTRL_GPU_INITIALIZE_CTX_GPU_CACHEABLE` (2:2) `_NO`, which the kernel RM always sets
/// (`kgrctxPrepareInitializeCtxBuffer_IMPL`).
pub const INITIALIZE_CTX_GPU_CACHEABLE_NO: u32 = 1 << 2;

/// `NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY` (`ctrl2080gpu.h`, 32 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY {
    pub gpuPhysAddr: u64,
    pub gpuVirtAddr: u64,
    pub size: u64,
    pub physAttr: u32,
    pub bufferId: u16,
    pub bInitialize: u8,
    pub bNonmapped: u8,
}

/// `NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS` (`ctrl2080gpu.h`, 560 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS {
    pub engineType: u32,
    pub hClient: u32,
    pub ChID: u32,
    pub hChanClient: u32,
    pub hObject: u32,
    pub hVirtMemory: u32,
    pub virtAddress: u64,
    pub size: u64,
    pub entryCount: u32,
    pub _pad0: u32,
    pub promoteEntry:
        [NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY; NV2080_CTRL_GPU_PROMOTE_CONTEXT_MAX_ENTRIES],
}

impl Default for NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO` (internal client only).
pub const NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO: u32 = 0x2080_0a32;
/// `NV2080_CTRL_INTERNAL_GR_MAX_ENGINES`.
pub const NV2080_CTRL_INTERNAL_GR_MAX_ENGINES: usize = 8;
/// `NV2080_CTRL_INTERNAL_ENGINE_CONTEXT_PROPERTIES_ENGINE_ID_COUNT`.
pub const ENGINE_CONTEXT_PROPERTIES_ENGINE_ID_COUNT: usize = 0x1a;

/// `NV0080_CTRL_FIFO_GET_ENGINE_CONTEXT_PROPERTIES_ENGINE_ID_*` (`ctrl0080fifo.h`): the index
/// into [`NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO::engine`].
pub mod ctx_engine_id {
    pub const GRAPHICS: usize = 0x00;
    pub const GRAPHICS_PM: usize = 0x09;
    pub const GRAPHICS_PATCH: usize = 0x10;
    pub const GRAPHICS_BUNDLE_CB: usize = 0x11;
    pub const GRAPHICS_PAGEPOOL_GLOBAL: usize = 0x12;
    pub const GRAPHICS_ATTRIBUTE_CB: usize = 0x13;
    pub const GRAPHICS_RTV_CB_GLOBAL: usize = 0x14;
    pub const GRAPHICS_GFXP_POOL: usize = 0x15;
    pub const GRAPHICS_GFXP_CTRL_BLK: usize = 0x16;
    pub const GRAPHICS_FECS_EVENT: usize = 0x17;
    pub const GRAPHICS_PRIV_ACCESS_MAP: usize = 0x18;

    /// The context-property entry that sizes promote buffer `id` (the three priv access maps
    /// share `GRAPHICS_PRIV_ACCESS_MAP`, as `kgrctxGetGlobalContextBufferExternalId` maps them).
    pub fn for_promote_id(id: u16) -> Option<usize> {
        use super::promote_id as p;
        Some(match id {
            p::MAIN => GRAPHICS,
            p::PM => GRAPHICS_PM,
            p::PATCH => GRAPHICS_PATCH,
            p::BUFFER_BUNDLE_CB => GRAPHICS_BUNDLE_CB,
            p::PAGEPOOL => GRAPHICS_PAGEPOOL_GLOBAL,
            p::ATTRIBUTE_CB => GRAPHICS_ATTRIBUTE_CB,
            p::RTV_CB_GLOBAL => GRAPHICS_RTV_CB_GLOBAL,
            p::GFXP_POOL => GRAPHICS_GFXP_POOL,
            p::GFXP_CTRL_BLK => GRAPHICS_GFXP_CTRL_BLK,
            p::FECS_EVENT => GRAPHICS_FECS_EVENT,
            p::PRIV_ACCESS_MAP | p::UNRESTRICTED_PRIV_ACCESS_MAP | p::GLOBAL_PRIV_ACCESS_MAP => {
                GRAPHICS_PRIV_ACCESS_MAP
            }
            _ => return None,
        })
    }
}

/// `NV2080_CTRL_INTERNAL_ENGINE_CONTEXT_BUFFER_INFO` (`ctrl2080internal.h`, 8 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_INTERNAL_ENGINE_CONTEXT_BUFFER_INFO {
    pub size: u32,
    pub alignment: u32,
}

/// `NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO` (208 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO {
    pub engine: [NV2080_CTRL_INTERNAL_ENGINE_CONTEXT_BUFFER_INFO;
        ENGINE_CONTEXT_PROPERTIES_ENGINE_ID_COUNT],
}

/// `NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS` (1664 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS {
    pub engineContextBuffersInfo:
        [NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO; NV2080_CTRL_INTERNAL_GR_MAX_ENGINES],
}

/// `NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_INFO` (`ctrl2080internal.h`): GR facts per GR
/// engine, the table the kernel RM keeps to answer `NV2080_CTRL_CMD_GR_GET_INFO`.
pub const NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_INFO: u32 = 0x2080_0a2a;
/// `NV0080_CTRL_GR_INFO_MAX_SIZE` (`ctrl0080gr.h`): GR info indices.
pub const NV0080_CTRL_GR_INFO_MAX_SIZE: usize = 0x3a;

/// `NV2080_CTRL_INTERNAL_GR_INFO` (8 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_INTERNAL_GR_INFO {
    pub index: u32,
    pub data: u32,
}

/// `NV2080_CTRL_INTERNAL_STATIC_GR_INFO`: one engine's table, indexed by GR info index
/// (464 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV2080_CTRL_INTERNAL_STATIC_GR_INFO {
    pub infoList: [NV2080_CTRL_INTERNAL_GR_INFO; NV0080_CTRL_GR_INFO_MAX_SIZE],
}

/// `NV2080_CTRL_INTERNAL_STATIC_GR_GET_INFO_PARAMS` (3712 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV2080_CTRL_INTERNAL_STATIC_GR_GET_INFO_PARAMS {
    pub engineInfo: [NV2080_CTRL_INTERNAL_STATIC_GR_INFO; NV2080_CTRL_INTERNAL_GR_MAX_ENGINES],
}

// ----------------------------------------------------------------------------------------------
// FIFO device info and the CE fault method buffer.

/// `NV2080_CTRL_CMD_FIFO_GET_DEVICE_INFO_TABLE` (on the subdevice).
pub const NV2080_CTRL_CMD_FIFO_GET_DEVICE_INFO_TABLE: u32 = 0x2080_1112;
/// `NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_MAX_ENTRIES`.
pub const DEVICE_INFO_TABLE_MAX_ENTRIES: usize = 32;
/// `ENGINE_INFO_TYPE_RM_ENGINE_TYPE` (`engine_info.h`): index into `engineData`.
pub const ENGINE_INFO_TYPE_RM_ENGINE_TYPE: usize = 2;
/// `ENGINE_INFO_TYPE_RUNLIST`.
pub const ENGINE_INFO_TYPE_RUNLIST: usize = 3;

/// `NV2080_CTRL_FIFO_DEVICE_ENTRY` (`ctrl2080fifo.h`, 100 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_FIFO_DEVICE_ENTRY {
    pub engineData: [u32; 16],
    pub pbdmaIds: [u32; 2],
    pub pbdmaFaultIds: [u32; 2],
    pub numPbdmas: u32,
    pub engineName: [u8; 16],
}

/// `NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS` (3212 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS {
    pub baseIndex: u32,
    pub numEntries: u32,
    pub bMore: u8,
    pub _pad0: [u8; 3],
    pub entries: [NV2080_CTRL_FIFO_DEVICE_ENTRY; DEVICE_INFO_TABLE_MAX_ENTRIES],
}

impl Default for NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS {
    /// The runlist of the first valid entry whose RM engine type is `engine_type`.
    pub fn runlist_of(&self, engine_type: u32) -> Option<u32> {
        let n = (self.numEntries as usize).min(DEVICE_INFO_TABLE_MAX_ENTRIES);
        self.entries.get(..n)?.iter().find_map(|e| {
            (e.engineData.get(ENGINE_INFO_TYPE_RM_ENGINE_TYPE) == Some(&engine_type))
                .then(|| e.engineData.get(ENGINE_INFO_TYPE_RUNLIST).copied())
                .flatten()
        })
    }
}

/// `NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE` (on the subdevice).
pub const NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE: u32 = 0x2080_2a08;

/// `NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS` (`ctrl2080ce.h`, 4 B).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS {
    pub size: u32,
}

// ----------------------------------------------------------------------------------------------
// Channels.

/// `NV_KERNELCHANNEL_ALLOC_INTERNALFLAGS_PRIVILEGE` (1:0) `_USER` (`g_kernel_channel_nvoc.h`).
pub const INTERNALFLAGS_PRIVILEGE_USER: u32 = 0;
/// `..._PRIVILEGE_KERNEL`.
pub const INTERNALFLAGS_PRIVILEGE_KERNEL: u32 = 2;
/// `ErrorNotifierType`: `ERROR_NOTIFIER_TYPE_NONE`.
pub const ERROR_NOTIFIER_TYPE_NONE: u32 = 1;
/// `ERROR_NOTIFIER_TYPE_MEMORY` (an `NvNotification` array in sysmem or vidmem).
pub const ERROR_NOTIFIER_TYPE_MEMORY: u32 = 3;

/// `internalFlags` for a channel: privilege, error notifier type (3:2) and ECC error notifier
/// type (5:4), as `kchannelConstruct_IMPL` sets them for GSP.
pub fn channel_internal_flags(privilege: u32, error_notifier: u32, ecc_notifier: u32) -> u32 {
    (privilege & 3) | ((error_notifier & 3) << 2) | ((ecc_notifier & 3) << 4)
}

/// Decodes `internalFlags` into (privilege, error notifier type, ECC notifier type).
pub fn decode_channel_internal_flags(flags: u32) -> (u32, u32, u32) {
    (flags & 3, (flags >> 2) & 3, (flags >> 4) & 3)
}

/// `NV_VIRTUAL_FUNCTION_DOORBELL_RUNLIST_DOORBELL` (30:30) `_ENABLE` on GB20x (`gb202/dev_vm.h`).
pub const DOORBELL_RUNLIST_DOORBELL_ENABLE_GB202: u32 = 1 << 30;

/// The work-submit token the kernel RM builds from GSP-RM's channel id and the runlist
/// (`kfifoGenerateWorkSubmitTokenHal_GA100`: `VECTOR` 11:0 = channel id, `RUNLIST_ID` 22:16;
/// GB20x also sets `RUNLIST_DOORBELL`). `None` if either does not fit its field.
pub fn work_submit_token(chipset: Chipset, chid: u32, runlist: u32) -> Option<u32> {
    if chid > 0xfff || runlist > 0x7f {
        return None;
    }
    let mut t = chid | (runlist << 16);
    if matches!(
        chipset,
        Chipset::GB202 | Chipset::GB203 | Chipset::GB205 | Chipset::GB206 | Chipset::GB207
    ) {
        t |= DOORBELL_RUNLIST_DOORBELL_ENABLE_GB202;
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn abi_layouts() {
        // g_sdk-structures.h / g_rpc-structures.h (570.144).
        type S = NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05;
        assert_eq!(size_of::<S>(), 32);
        assert_eq!(offset_of!(S, numEntries), 8);
        assert_eq!(offset_of!(S, flags), 12);
        assert_eq!(offset_of!(S, hVASpace), 16);
        assert_eq!(offset_of!(S, chId), 20);
        assert_eq!(offset_of!(S, subDeviceId), 24);
        assert_eq!(offset_of!(S, pasid), 28);
        // ctrl2080internal.h.
        assert_eq!(size_of::<NV2080_CTRL_INTERNAL_GR_INFO>(), 8);
        assert_eq!(offset_of!(NV2080_CTRL_INTERNAL_GR_INFO, data), 4);
        assert_eq!(size_of::<NV2080_CTRL_INTERNAL_STATIC_GR_INFO>(), 464);
        assert_eq!(
            size_of::<NV2080_CTRL_INTERNAL_STATIC_GR_GET_INFO_PARAMS>(),
            3712
        );
        // ctrl90f1.h.
        type L = NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_LEVEL;
        assert_eq!(size_of::<L>(), 24);
        assert_eq!(offset_of!(L, size), 8);
        assert_eq!(offset_of!(L, aperture), 16);
        assert_eq!(offset_of!(L, pageShift), 20);
        type C = NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS;
        assert_eq!(size_of::<C>(), 184);
        assert_eq!(offset_of!(C, pageSize), 8);
        assert_eq!(offset_of!(C, virtAddrLo), 16);
        assert_eq!(offset_of!(C, virtAddrHi), 24);
        assert_eq!(offset_of!(C, numLevelsToCopy), 32);
        assert_eq!(offset_of!(C, levels), 40);
        type R = rpc_set_page_directory_v1E_05;
        assert_eq!(size_of::<R>(), 48);
        assert_eq!(offset_of!(R, hDevice), 4);
        assert_eq!(offset_of!(R, pasid), 8);
        assert_eq!(offset_of!(R, params), 16);
        // ctrl2080gpu.h.
        type E = NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY;
        assert_eq!(size_of::<E>(), 32);
        assert_eq!(offset_of!(E, gpuVirtAddr), 8);
        assert_eq!(offset_of!(E, size), 16);
        assert_eq!(offset_of!(E, physAttr), 24);
        assert_eq!(offset_of!(E, bufferId), 28);
        assert_eq!(offset_of!(E, bInitialize), 30);
        assert_eq!(offset_of!(E, bNonmapped), 31);
        type P = NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS;
        assert_eq!(size_of::<P>(), 560);
        assert_eq!(offset_of!(P, hChanClient), 12);
        assert_eq!(offset_of!(P, hObject), 16);
        assert_eq!(offset_of!(P, hVirtMemory), 20);
        assert_eq!(offset_of!(P, virtAddress), 24);
        assert_eq!(offset_of!(P, size), 32);
        assert_eq!(offset_of!(P, entryCount), 40);
        assert_eq!(offset_of!(P, promoteEntry), 48);
        // ctrl2080internal.h.
        assert_eq!(
            size_of::<NV2080_CTRL_INTERNAL_ENGINE_CONTEXT_BUFFER_INFO>(),
            8
        );
        assert_eq!(
            size_of::<NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO>(),
            0x1a * 8
        );
        assert_eq!(
            size_of::<NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS>(),
            8 * 0x1a * 8
        );
        // ctrl2080fifo.h.
        type D = NV2080_CTRL_FIFO_DEVICE_ENTRY;
        assert_eq!(size_of::<D>(), 100);
        assert_eq!(offset_of!(D, pbdmaIds), 64);
        assert_eq!(offset_of!(D, pbdmaFaultIds), 72);
        assert_eq!(offset_of!(D, numPbdmas), 80);
        assert_eq!(offset_of!(D, engineName), 84);
        type T = NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS;
        assert_eq!(size_of::<T>(), 12 + 32 * 100);
        assert_eq!(offset_of!(T, bMore), 8);
        assert_eq!(offset_of!(T, entries), 12);
        assert_eq!(
            size_of::<NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS>(),
            4
        );
    }

    #[test]
    fn tokens_follow_the_kernel_rm() {
        // GA100 HAL (used by AD102 and GH100): runlist 22:16, channel 11:0.
        assert_eq!(work_submit_token(Chipset::GH100, 0xa, 0), Some(0xa));
        assert_eq!(work_submit_token(Chipset::AD102, 5, 3), Some(0x3_0005));
        // GB202: RUNLIST_DOORBELL_ENABLE as well.
        assert_eq!(work_submit_token(Chipset::GB202, 5, 3), Some(0x4003_0005));
        assert_eq!(work_submit_token(Chipset::GH100, 0x1000, 0), None);
        assert_eq!(work_submit_token(Chipset::GH100, 1, 0x80), None);
    }

    #[test]
    fn internal_flags() {
        let f = channel_internal_flags(
            INTERNALFLAGS_PRIVILEGE_USER,
            ERROR_NOTIFIER_TYPE_MEMORY,
            ERROR_NOTIFIER_TYPE_NONE,
        );
        assert_eq!(f, 0x1c);
        assert_eq!(decode_channel_internal_flags(f), (0, 3, 1));
        // What tinygrad's golden channel sends (kernel privilege, CTXDMA, NONE).
        assert_eq!(decode_channel_internal_flags(0x1a), (2, 2, 1));
    }

    #[test]
    fn runlist_lookup() {
        let mut t = NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS {
            numEntries: 2,
            ..Default::default()
        };
        t.entries[0].engineData[ENGINE_INFO_TYPE_RM_ENGINE_TYPE] = 0x13;
        t.entries[0].engineData[ENGINE_INFO_TYPE_RUNLIST] = 4;
        t.entries[1].engineData[ENGINE_INFO_TYPE_RM_ENGINE_TYPE] = 1;
        t.entries[1].engineData[ENGINE_INFO_TYPE_RUNLIST] = 2;
        assert_eq!(t.runlist_of(1), Some(2));
        assert_eq!(t.runlist_of(0x13), Some(4));
        assert_eq!(t.runlist_of(7), None);
        t.numEntries = 1000; // hostile count: clamped
        assert_eq!(t.runlist_of(1), Some(2));
    }
}
