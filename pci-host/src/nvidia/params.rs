//! RM alloc and control param structs the adapter uses, in their r580 layouts.
//!
//! The ones the device layer shares live in `nvbare_core::rm::{alloc, ctrl}` and are re-exported
//! here (the r580 variant where the layout differs by version); the few only the adapter needs
//! (GPU id info, client database counts, FB info, the shifted NVOS32 attribute fields) are
//! defined here, checked against open-gpu-kernel-modules 580.142 (`nvos.h`,
//! `ctrl/ctrl0000/ctrl0000gpu.h`, `ctrl0000system.h`, `ctrl/ctrl2080/ctrl2080fb.h`). The layout
//! tests below cover both.
//!
//! Also here: the r580 alloc-param size of every class the adapter may allocate
//! ([`alloc_param_rule`]). RM takes the size of alloc params from its own class table, not from
//! the caller, so a short buffer would be over-read and over-written; the adapter refuses such
//! calls before they reach the kernel.
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use nvbare_core::rm::class;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub use nvbare_core::rm::alloc::{
    NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES, NV_MEMORY_ALLOCATION_PARAMS,
    NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING,
    NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
    NV_VASPACE_ALLOCATION_PARAMETERS_R580 as NV_VASPACE_ALLOCATION_PARAMETERS,
    NV0080_ALLOC_PARAMETERS, NV2080_ALLOC_PARAMETERS, NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE,
    NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT, NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED,
    NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED, NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM,
    NVOS32_TYPE_IMAGE, NVOS32_TYPE_NOTIFIER,
};
pub use nvbare_core::rm::ctrl::{
    NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
    NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R580 as NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE,
    NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580 as NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS,
    NV0080_CTRL_GR_INFO_MAX_SIZE, NV2080_CTRL_CMD_GPU_GET_GID_INFO, NV2080_CTRL_CMD_GR_GET_INFO_V2,
    NV2080_CTRL_CMD_MC_GET_ARCH_INFO, NV2080_CTRL_GPU_GET_GID_INFO_PARAMS,
    NV2080_CTRL_GR_GET_INFO_V2_PARAMS, NV2080_CTRL_GR_ROUTE_INFO,
    NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS, NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY,
    NV2080_GPU_MAX_GID_LENGTH,
};

// NVOS32 attribute fields (`nvos.h`) as value + shift, as used in NV_MEMORY_ALLOCATION_PARAMS.
pub const NVOS32_ATTR_PAGE_SIZE_SHIFT: u32 = 23;
pub const NVOS32_ATTR_PAGE_SIZE_4KB: u32 = 1;
pub const NVOS32_ATTR_PAGE_SIZE_BIG: u32 = 2;
pub const NVOS32_ATTR_PAGE_SIZE_HUGE: u32 = 3;
pub const NVOS32_ATTR_LOCATION_SHIFT: u32 = 25;
pub const NVOS32_ATTR_LOCATION_VIDMEM: u32 = 0;
pub const NVOS32_ATTR_LOCATION_PCI: u32 = 1;
pub const NVOS32_ATTR_PHYSICALITY_SHIFT: u32 = 27;
pub const NVOS32_ATTR_PHYSICALITY_CONTIGUOUS: u32 = 2;
pub const NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS: u32 = 3;
pub const NVOS32_ATTR_COHERENCY_SHIFT: u32 = 29;
pub const NVOS32_ATTR_COHERENCY_UNCACHED: u32 = 0;
pub const NVOS32_ATTR_COHERENCY_CACHED: u32 = 1;
pub const NVOS32_ATTR2_ZBC_PREFER_NO_ZBC: u32 = 1;
pub const NVOS32_ATTR2_GPU_CACHEABLE_SHIFT: u32 = 2;
pub const NVOS32_ATTR2_GPU_CACHEABLE_YES: u32 = 1;
pub const NVOS32_ATTR2_GPU_CACHEABLE_NO: u32 = 2;
pub const NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT: u32 = 20;
pub const NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB: u32 = 1;

/// `NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2` (on the client).
pub const NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2: u32 = 0x205;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS {
    pub gpuId: u32,
    pub gpuFlags: u32,
    pub deviceInstance: u32,
    pub subDeviceInstance: u32,
    pub sliStatus: u32,
    pub boardId: u32,
    pub gpuInstance: u32,
    pub numaId: i32,
}

/// `NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO` (on the client; RMCTRL_FLAGS_PRIVILEGED,
/// so it needs root): counts of RM clients and resources across the whole driver.
pub const NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO: u32 = 0x13d;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NV0000_CTRL_SYSTEM_GET_CLIENT_DATABASE_INFO_PARAMS {
    pub clientCount: u32,
    pub _pad0: u32,
    pub resourceCount: u64,
}

/// `NV2080_CTRL_CMD_FB_GET_INFO_V2` (on the subdevice).
pub const NV2080_CTRL_CMD_FB_GET_INFO_V2: u32 = 0x2080_1303;
/// `NV2080_CTRL_FB_INFO_MAX_LIST_SIZE` at 580 (0x80; 0x39 at 570, 0x36 at 535).
pub const NV2080_CTRL_FB_INFO_MAX_LIST_SIZE: usize = 0x80;
/// `NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE` (KiB).
pub const NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE: u32 = 0x8;
/// `NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE` (KiB available for user allocations).
pub const NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE: u32 = 0x9;
/// `NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE` (KiB free).
pub const NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE: u32 = 0x16;

/// `NVXXXX_CTRL_XXX_INFO`: one `{index, data}` pair of the FB and GR info lists.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVXXXX_CTRL_XXX_INFO {
    pub index: u32,
    pub data: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NV2080_CTRL_FB_GET_INFO_V2_PARAMS {
    pub fbInfoListSize: u32,
    pub fbInfoList: [NVXXXX_CTRL_XXX_INFO; NV2080_CTRL_FB_INFO_MAX_LIST_SIZE],
}

// GR info indices (`ctrl0080gr.h`, same in 535/570/580).
pub const NV2080_CTRL_GR_INFO_INDEX_SHADER_PIPE_SUB_COUNT: u32 = 0x09;
pub const NV2080_CTRL_GR_INFO_INDEX_SM_VERSION: u32 = 0x0c;
pub const NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM: u32 = 0x0d;
pub const NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS: u32 = 0x14;
pub const NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC: u32 = 0x17;
pub const NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC: u32 = 0x20;

/// How RM sizes a class's alloc params (`RS_REQUIRED` / `RS_OPTIONAL` / `RS_NONE` in
/// `src/nvidia/src/kernel/rmapi/resource_list.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocParamRule {
    /// Params of exactly this size are required.
    Required(usize),
    /// Either no params (NULL) or params of exactly this size.
    Optional(usize),
    /// The class takes no params.
    None,
}

/// The r580 alloc-param rule of `class`, when the adapter knows it.
pub fn alloc_param_rule(c: u32) -> Option<AllocParamRule> {
    use AllocParamRule::*;
    use class::*;
    Some(match c {
        // RS_OPTIONAL(NvHandle)
        NV01_ROOT | NV01_ROOT_CLIENT => Optional(4),
        NV01_DEVICE_0 => Optional(56),
        NV20_SUBDEVICE_0 => Optional(4),
        FERMI_VASPACE_A => Required(56),
        KEPLER_CHANNEL_GROUP_A => Required(20),
        FERMI_CONTEXT_SHARE_A => Required(12),
        GT200_DEBUGGER => Required(12),
        NV01_EVENT_OS_EVENT => Required(24),
        NV01_MEMORY_LOCAL_USER | NV01_MEMORY_SYSTEM | NV50_MEMORY_VIRTUAL => Required(128),
        NV01_MEMORY_VIRTUAL => Required(24),
        VOLTA_USERMODE_A | TURING_USERMODE_A | AMPERE_USERMODE_A => None,
        HOPPER_USERMODE_A | BLACKWELL_USERMODE_A => Optional(2),
        VOLTA_CHANNEL_GPFIFO_A
        | TURING_CHANNEL_GPFIFO_A
        | AMPERE_CHANNEL_GPFIFO_A
        | HOPPER_CHANNEL_GPFIFO_A
        | BLACKWELL_CHANNEL_GPFIFO_A
        | BLACKWELL_CHANNEL_GPFIFO_B => Required(368),
        // NV_GR_ALLOCATION_PARAMETERS
        TURING_COMPUTE_A | AMPERE_COMPUTE_A | AMPERE_COMPUTE_B | ADA_COMPUTE_A
        | HOPPER_COMPUTE_A | BLACKWELL_COMPUTE_A | BLACKWELL_COMPUTE_B => Optional(16),
        // NVB0B5_ALLOCATION_PARAMETERS
        TURING_DMA_COPY_A | AMPERE_DMA_COPY_A | AMPERE_DMA_COPY_B | HOPPER_DMA_COPY_A
        | BLACKWELL_DMA_COPY_A | BLACKWELL_DMA_COPY_B => Optional(8),
        _ => return Option::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn alloc_layouts() {
        assert_eq!(size_of::<NV0080_ALLOC_PARAMETERS>(), 56);
        assert_eq!(offset_of!(NV0080_ALLOC_PARAMETERS, flags), 16);
        assert_eq!(offset_of!(NV0080_ALLOC_PARAMETERS, vaSpaceSize), 24);
        assert_eq!(offset_of!(NV0080_ALLOC_PARAMETERS, vaStartInternal), 32);
        assert_eq!(offset_of!(NV0080_ALLOC_PARAMETERS, vaLimitInternal), 40);
        assert_eq!(offset_of!(NV0080_ALLOC_PARAMETERS, vaMode), 48);
        assert_eq!(size_of::<NV2080_ALLOC_PARAMETERS>(), 4);

        assert_eq!(size_of::<NV_MEMORY_ALLOCATION_PARAMS>(), 128);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, r#type), 4);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, flags), 8);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, attr), 24);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, attr2), 28);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, format), 32);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, zcullCovg), 40);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, rangeLo), 48);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, rangeHi), 56);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, size), 64);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, alignment), 72);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, offset), 80);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, limit), 88);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, address), 96);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, ctagOffset), 104);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, hVASpace), 108);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, internalflags), 112);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, tag), 116);
        assert_eq!(offset_of!(NV_MEMORY_ALLOCATION_PARAMS, numaNode), 120);

        assert_eq!(size_of::<NV_VASPACE_ALLOCATION_PARAMETERS>(), 56);
        assert_eq!(offset_of!(NV_VASPACE_ALLOCATION_PARAMETERS, vaSize), 8);
        assert_eq!(
            offset_of!(NV_VASPACE_ALLOCATION_PARAMETERS, vaStartInternal),
            16
        );
        assert_eq!(
            offset_of!(NV_VASPACE_ALLOCATION_PARAMETERS, vaLimitInternal),
            24
        );
        assert_eq!(
            offset_of!(NV_VASPACE_ALLOCATION_PARAMETERS, bigPageSize),
            32
        );
        assert_eq!(offset_of!(NV_VASPACE_ALLOCATION_PARAMETERS, vaBase), 40);
        assert_eq!(offset_of!(NV_VASPACE_ALLOCATION_PARAMETERS, pasid), 48);
        assert_eq!(
            alloc_param_rule(nvbare_core::rm::class::FERMI_VASPACE_A),
            Some(AllocParamRule::Required(size_of::<
                NV_VASPACE_ALLOCATION_PARAMETERS,
            >()))
        );

        assert_eq!(size_of::<NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS>(), 24);
        assert_eq!(offset_of!(NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, limit), 8);
        assert_eq!(
            offset_of!(NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, hVASpace),
            16
        );
    }

    #[test]
    fn control_layouts() {
        assert_eq!(size_of::<NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS>(), 32);
        assert_eq!(
            offset_of!(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS, deviceInstance),
            8
        );
        assert_eq!(
            offset_of!(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS, subDeviceInstance),
            12
        );
        assert_eq!(
            offset_of!(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS, numaId),
            28
        );

        assert_eq!(
            size_of::<NV0000_CTRL_SYSTEM_GET_CLIENT_DATABASE_INFO_PARAMS>(),
            16
        );
        assert_eq!(
            offset_of!(
                NV0000_CTRL_SYSTEM_GET_CLIENT_DATABASE_INFO_PARAMS,
                resourceCount
            ),
            8
        );

        // 580: 804 (570: 404, 535: 644); 580 rejects the other sizes.
        assert_eq!(size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS>(), 804);
        assert_eq!(size_of::<NV2080_CTRL_GPU_GET_GID_INFO_PARAMS>(), 268);
        assert_eq!(size_of::<NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS>(), 16);
        assert_eq!(
            offset_of!(NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS, subRevision),
            12
        );
        assert_eq!(offset_of!(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, data), 12);

        // 580: 4 + 128 * 8.
        assert_eq!(size_of::<NV2080_CTRL_FB_GET_INFO_V2_PARAMS>(), 1028);
        assert_eq!(offset_of!(NV2080_CTRL_FB_GET_INFO_V2_PARAMS, fbInfoList), 4);

        // 570/580: 488 (535: 448).
        assert_eq!(size_of::<NV2080_CTRL_GR_GET_INFO_V2_PARAMS>(), 488);
        assert_eq!(offset_of!(NV2080_CTRL_GR_GET_INFO_V2_PARAMS, grInfoList), 4);
        assert_eq!(
            offset_of!(NV2080_CTRL_GR_GET_INFO_V2_PARAMS, grRouteInfo),
            472
        );
    }

    #[test]
    fn alloc_rules_match_the_struct_sizes() {
        use nvbare_core::rm::class::*;
        assert_eq!(
            alloc_param_rule(NV01_MEMORY_LOCAL_USER),
            Some(AllocParamRule::Required(size_of::<
                NV_MEMORY_ALLOCATION_PARAMS,
            >()))
        );
        assert_eq!(
            alloc_param_rule(NV01_MEMORY_VIRTUAL),
            Some(AllocParamRule::Required(size_of::<
                NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS,
            >()))
        );
        assert_eq!(
            alloc_param_rule(NV01_DEVICE_0),
            Some(AllocParamRule::Optional(
                size_of::<NV0080_ALLOC_PARAMETERS>()
            ))
        );
        assert_eq!(
            alloc_param_rule(HOPPER_CHANNEL_GPFIFO_A),
            Some(AllocParamRule::Required(368))
        );
        assert_eq!(
            alloc_param_rule(AMPERE_USERMODE_A),
            Some(AllocParamRule::None)
        );
        assert_eq!(alloc_param_rule(0xdead), None);
    }
}
