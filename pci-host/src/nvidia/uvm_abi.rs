//! The nvidia-uvm ioctl ABI (`/dev/nvidia-uvm`) in its 570/580 layout.
//!
//! Sources (open-gpu-kernel-modules 580.142): `kernel-open/nvidia-uvm/uvm_ioctl.h`,
//! `uvm_linux_ioctl.h`, `uvm_types.h`, `kernel-open/common/inc/nv_uvm_user_types.h`.
//!
//! On Linux the request word is the bare command number (`UVM_IOCTL_BASE(i) = i`): there is no
//! size in it and UVM copies `sizeof` of **its own** struct in and out (`uvm_api.h`,
//! `UVM_ROUTE_CMD_*`). A wrong user layout is therefore silently misread and overwritten, not
//! rejected; every struct here has a size test. The one that changed across releases is
//! [`UVM_MAP_EXTERNAL_ALLOCATION_PARAMS`]: 1200 bytes at 535, 9264 bytes from 570
//! (`UVM_MAX_GPUS` = `NV_MAX_DEVICES * UVM_PARENT_ID_MAX_SUB_PROCESSORS` = 32 * 8).
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Must be the first ioctl on a UVM fd (`uvm_linux_ioctl.h`).
pub const UVM_INITIALIZE: u32 = 0x3000_0001;
pub const UVM_DEINITIALIZE: u32 = 0x3000_0002;
pub const UVM_REGISTER_GPU_VASPACE: u32 = 25;
pub const UVM_UNREGISTER_GPU_VASPACE: u32 = 26;
pub const UVM_REGISTER_CHANNEL: u32 = 27;
pub const UVM_UNREGISTER_CHANNEL: u32 = 28;
pub const UVM_ENABLE_PEER_ACCESS: u32 = 29;
pub const UVM_DISABLE_PEER_ACCESS: u32 = 30;
pub const UVM_MAP_EXTERNAL_ALLOCATION: u32 = 33;
pub const UVM_FREE: u32 = 34;
pub const UVM_UNMAP_EXTERNAL: u32 = 66;
pub const UVM_REGISTER_GPU: u32 = 37;
pub const UVM_UNREGISTER_GPU: u32 = 38;
pub const UVM_CREATE_EXTERNAL_RANGE: u32 = 73;
pub const UVM_MM_INITIALIZE: u32 = 75;

/// `UVM_INIT_FLAGS_DISABLE_HMM`.
pub const UVM_INIT_FLAGS_DISABLE_HMM: u64 = 0x1;
/// `UVM_INIT_FLAGS_MULTI_PROCESS_SHARING_MODE`.
pub const UVM_INIT_FLAGS_MULTI_PROCESS_SHARING_MODE: u64 = 0x2;

/// `UVM_MAX_GPUS` at 570/580 (32 at 535).
pub const UVM_MAX_GPUS: usize = 256;

/// `UvmGpuMappingTypeReadWriteAtomic` (`nv_uvm_user_types.h`).
pub const UvmGpuMappingTypeReadWriteAtomic: u32 = 1;
/// `UvmGpuCachingTypeDefault`.
pub const UvmGpuCachingTypeDefault: u32 = 0;
/// `UvmGpuCachingTypeForceUncached`.
pub const UvmGpuCachingTypeForceUncached: u32 = 1;

/// `NvProcessorUuid`: a GPU UUID in binary form.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct NvProcessorUuid {
    pub uuid: [u8; 16],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_INITIALIZE_PARAMS {
    pub flags: u64,
    pub rmStatus: u32,
    pub _pad0: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_MM_INITIALIZE_PARAMS {
    pub uvmFd: i32,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_REGISTER_GPU_PARAMS {
    pub gpu_uuid: NvProcessorUuid,
    /// NvBool, OUT.
    pub numaEnabled: u8,
    pub _pad0: [u8; 3],
    pub numaNodeId: i32,
    pub rmCtrlFd: i32,
    pub hClient: u32,
    pub hSmcPartRef: u32,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_UNREGISTER_GPU_PARAMS {
    pub gpu_uuid: NvProcessorUuid,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_REGISTER_GPU_VASPACE_PARAMS {
    pub gpuUuid: NvProcessorUuid,
    pub rmCtrlFd: i32,
    pub hClient: u32,
    pub hVaSpace: u32,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_UNREGISTER_GPU_VASPACE_PARAMS {
    pub gpuUuid: NvProcessorUuid,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_REGISTER_CHANNEL_PARAMS {
    pub gpuUuid: NvProcessorUuid,
    pub rmCtrlFd: i32,
    pub hClient: u32,
    pub hChannel: u32,
    pub _pad0: u32,
    pub base: u64,
    pub length: u64,
    pub rmStatus: u32,
    pub _pad1: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_UNREGISTER_CHANNEL_PARAMS {
    pub gpuUuid: NvProcessorUuid,
    pub hClient: u32,
    pub hChannel: u32,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_ENABLE_PEER_ACCESS_PARAMS {
    pub gpuUuidA: NvProcessorUuid,
    pub gpuUuidB: NvProcessorUuid,
    pub rmStatus: u32,
}

/// `UVM_UNMAP_EXTERNAL_PARAMS`: removes one GPU's mapping of an external range (the range and
/// the other GPUs' mappings stay).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_UNMAP_EXTERNAL_PARAMS {
    pub base: u64,
    pub length: u64,
    pub gpuUuid: NvProcessorUuid,
    pub rmStatus: u32,
    pub _pad0: u32,
}

/// `UVM_DISABLE_PEER_ACCESS_PARAMS` has the same layout.
pub type UVM_DISABLE_PEER_ACCESS_PARAMS = UVM_ENABLE_PEER_ACCESS_PARAMS;

/// `UvmGpuMappingAttributes` (`uvm_types.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UvmGpuMappingAttributes {
    pub gpuUuid: NvProcessorUuid,
    pub gpuMappingType: u32,
    pub gpuCachingType: u32,
    pub gpuFormatType: u32,
    pub gpuElementBits: u32,
    pub gpuCompressionType: u32,
}

/// `UVM_MAP_EXTERNAL_ALLOCATION_PARAMS`, 570/580 layout (9264 bytes; 1200 at 535).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_MAP_EXTERNAL_ALLOCATION_PARAMS {
    pub base: u64,
    pub length: u64,
    pub offset: u64,
    pub perGpuAttributes: [UvmGpuMappingAttributes; UVM_MAX_GPUS],
    pub gpuAttributesCount: u64,
    pub rmCtrlFd: i32,
    pub hClient: u32,
    pub hMemory: u32,
    pub rmStatus: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_FREE_PARAMS {
    pub base: u64,
    pub length: u64,
    pub rmStatus: u32,
    pub _pad0: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UVM_CREATE_EXTERNAL_RANGE_PARAMS {
    pub base: u64,
    pub length: u64,
    pub rmStatus: u32,
    pub _pad0: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn ioctl_numbers() {
        assert_eq!(UVM_REGISTER_GPU_VASPACE, 25);
        assert_eq!(UVM_REGISTER_CHANNEL, 27);
        assert_eq!(UVM_MAP_EXTERNAL_ALLOCATION, 33);
        assert_eq!(UVM_FREE, 34);
        assert_eq!(UVM_REGISTER_GPU, 37);
        assert_eq!(UVM_CREATE_EXTERNAL_RANGE, 73);
        assert_eq!(UVM_MM_INITIALIZE, 75);
    }

    #[test]
    fn small_layouts() {
        assert_eq!(size_of::<NvProcessorUuid>(), 16);
        assert_eq!(size_of::<UVM_INITIALIZE_PARAMS>(), 16);
        assert_eq!(offset_of!(UVM_INITIALIZE_PARAMS, rmStatus), 8);
        assert_eq!(size_of::<UVM_MM_INITIALIZE_PARAMS>(), 8);
        assert_eq!(offset_of!(UVM_MM_INITIALIZE_PARAMS, rmStatus), 4);

        assert_eq!(size_of::<UVM_REGISTER_GPU_PARAMS>(), 40);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_PARAMS, numaEnabled), 16);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_PARAMS, numaNodeId), 20);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_PARAMS, rmCtrlFd), 24);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_PARAMS, hClient), 28);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_PARAMS, hSmcPartRef), 32);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_PARAMS, rmStatus), 36);
        assert_eq!(size_of::<UVM_UNREGISTER_GPU_PARAMS>(), 20);

        assert_eq!(size_of::<UVM_REGISTER_GPU_VASPACE_PARAMS>(), 32);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_VASPACE_PARAMS, rmCtrlFd), 16);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_VASPACE_PARAMS, hClient), 20);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_VASPACE_PARAMS, hVaSpace), 24);
        assert_eq!(offset_of!(UVM_REGISTER_GPU_VASPACE_PARAMS, rmStatus), 28);
        assert_eq!(size_of::<UVM_UNREGISTER_GPU_VASPACE_PARAMS>(), 20);

        assert_eq!(size_of::<UVM_REGISTER_CHANNEL_PARAMS>(), 56);
        assert_eq!(offset_of!(UVM_REGISTER_CHANNEL_PARAMS, hChannel), 24);
        assert_eq!(offset_of!(UVM_REGISTER_CHANNEL_PARAMS, base), 32);
        assert_eq!(offset_of!(UVM_REGISTER_CHANNEL_PARAMS, length), 40);
        assert_eq!(offset_of!(UVM_REGISTER_CHANNEL_PARAMS, rmStatus), 48);
        assert_eq!(size_of::<UVM_UNREGISTER_CHANNEL_PARAMS>(), 28);
        assert_eq!(offset_of!(UVM_UNREGISTER_CHANNEL_PARAMS, hChannel), 20);
        assert_eq!(offset_of!(UVM_UNREGISTER_CHANNEL_PARAMS, rmStatus), 24);

        assert_eq!(size_of::<UVM_ENABLE_PEER_ACCESS_PARAMS>(), 36);
        assert_eq!(offset_of!(UVM_ENABLE_PEER_ACCESS_PARAMS, rmStatus), 32);
        // gcc over uvm_ioctl.h (580.142): 40 bytes, rmStatus at 32.
        assert_eq!(size_of::<UVM_UNMAP_EXTERNAL_PARAMS>(), 40);
        assert_eq!(offset_of!(UVM_UNMAP_EXTERNAL_PARAMS, length), 8);
        assert_eq!(offset_of!(UVM_UNMAP_EXTERNAL_PARAMS, gpuUuid), 16);
        assert_eq!(offset_of!(UVM_UNMAP_EXTERNAL_PARAMS, rmStatus), 32);
        assert_eq!(size_of::<UVM_FREE_PARAMS>(), 24);
        assert_eq!(offset_of!(UVM_FREE_PARAMS, rmStatus), 16);
        assert_eq!(size_of::<UVM_CREATE_EXTERNAL_RANGE_PARAMS>(), 24);
        assert_eq!(offset_of!(UVM_CREATE_EXTERNAL_RANGE_PARAMS, rmStatus), 16);
    }

    #[test]
    fn map_external_allocation_is_the_570_plus_layout() {
        assert_eq!(size_of::<UvmGpuMappingAttributes>(), 36);
        assert_eq!(offset_of!(UvmGpuMappingAttributes, gpuMappingType), 16);
        assert_eq!(offset_of!(UvmGpuMappingAttributes, gpuCompressionType), 32);

        assert_eq!(size_of::<UVM_MAP_EXTERNAL_ALLOCATION_PARAMS>(), 9264);
        assert_eq!(offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, offset), 16);
        assert_eq!(
            offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, perGpuAttributes),
            24
        );
        assert_eq!(
            offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, gpuAttributesCount),
            9240
        );
        assert_eq!(
            offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmCtrlFd),
            9248
        );
        assert_eq!(
            offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hClient),
            9252
        );
        assert_eq!(
            offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hMemory),
            9256
        );
        assert_eq!(
            offset_of!(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmStatus),
            9260
        );
    }
}
