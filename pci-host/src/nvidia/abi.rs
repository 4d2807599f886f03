//! The nvidia.ko escape ABI in its r580 layout: ioctl request words and the param structs of
//! `/dev/nvidiactl` and `/dev/nvidiaN`.
//!
//! Sources (NVIDIA/open-gpu-kernel-modules at tag 580.142, checked against 535.113.01 and
//! 570.144 in `docs/kernel-adapter.md`):
//! `kernel-open/common/inc/nv-ioctl.h`, `nv-ioctl-numbers.h`,
//! `src/nvidia/arch/nvalloc/unix/include/nv_escape.h`, `nv-unix-nvos-params-wrappers.h` and
//! `src/common/sdk/nvidia/inc/nvos.h`. Every struct has a size and offset test against the
//! values a C compiler gives for those headers (x86-64).
//!
//! Names are NVIDIA's, so the structs can be grepped in the open driver.
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `NV_IOCTL_MAGIC` ('F').
pub const NV_IOCTL_MAGIC: u8 = b'F';

/// Largest argument `_IOC_SIZE` can carry (14 bits); bigger ones go through
/// [`NV_ESC_IOCTL_XFER_CMD`].
pub const NV_IOC_SIZE_MAX: usize = 0x3fff;

/// `NV_ABSOLUTE_MAX_IOCTL_SIZE` (`kernel-open/common/inc/nv.h`): the driver refuses larger
/// arguments even through the XFER escape.
pub const NV_ABSOLUTE_MAX_IOCTL_SIZE: usize = 16384;

/// `_IOWR('F', nr, size)`: the request word of an nvidia escape with an argument of `size`
/// bytes. The driver reads only `_IOC_NR` and `_IOC_SIZE` from it (`nvidia_ioctl` in
/// `kernel-open/nvidia/nv.c`).
pub const fn nv_iowr(nr: u8, size: usize) -> u32 {
    (3 << 30)
        | (((size & NV_IOC_SIZE_MAX) as u32) << 16)
        | ((NV_IOCTL_MAGIC as u32) << 8)
        | nr as u32
}

// `nv-ioctl-numbers.h` (NV_IOCTL_BASE 200).
pub const NV_IOCTL_BASE: u8 = 200;
pub const NV_ESC_CARD_INFO: u8 = NV_IOCTL_BASE;
pub const NV_ESC_REGISTER_FD: u8 = NV_IOCTL_BASE + 1;
pub const NV_ESC_ALLOC_OS_EVENT: u8 = NV_IOCTL_BASE + 6;
pub const NV_ESC_FREE_OS_EVENT: u8 = NV_IOCTL_BASE + 7;
pub const NV_ESC_STATUS_CODE: u8 = NV_IOCTL_BASE + 9;
pub const NV_ESC_CHECK_VERSION_STR: u8 = NV_IOCTL_BASE + 10;
pub const NV_ESC_IOCTL_XFER_CMD: u8 = NV_IOCTL_BASE + 11;
pub const NV_ESC_ATTACH_GPUS_TO_FD: u8 = NV_IOCTL_BASE + 12;
pub const NV_ESC_QUERY_DEVICE_INTR: u8 = NV_IOCTL_BASE + 13;
pub const NV_ESC_SYS_PARAMS: u8 = NV_IOCTL_BASE + 14;
pub const NV_ESC_EXPORT_TO_DMABUF_FD: u8 = NV_IOCTL_BASE + 17;
/// New in 570.
pub const NV_ESC_WAIT_OPEN_COMPLETE: u8 = NV_IOCTL_BASE + 18;

// `nv_escape.h`.
pub const NV_ESC_RM_ALLOC_MEMORY: u8 = 0x27;
pub const NV_ESC_RM_ALLOC_OBJECT: u8 = 0x28;
pub const NV_ESC_RM_FREE: u8 = 0x29;
pub const NV_ESC_RM_CONTROL: u8 = 0x2a;
pub const NV_ESC_RM_ALLOC: u8 = 0x2b;
pub const NV_ESC_RM_DUP_OBJECT: u8 = 0x34;
pub const NV_ESC_RM_SHARE: u8 = 0x35;
pub const NV_ESC_RM_VID_HEAP_CONTROL: u8 = 0x4a;
pub const NV_ESC_RM_MAP_MEMORY: u8 = 0x4e;
pub const NV_ESC_RM_UNMAP_MEMORY: u8 = 0x4f;
pub const NV_ESC_RM_MAP_MEMORY_DMA: u8 = 0x57;
pub const NV_ESC_RM_UNMAP_MEMORY_DMA: u8 = 0x58;
pub const NV_ESC_RM_EXPORT_OBJECT_TO_FD: u8 = 0x5c;
pub const NV_ESC_RM_IMPORT_OBJECT_FROM_FD: u8 = 0x5d;
pub const NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO: u8 = 0x5e;
/// `NV_ESC_RM_LOCKLESS_DIAGNOSTIC` at 570/580 (`NV_ESC_RM_NVLOG_CTRL` at 535).
pub const NV_ESC_RM_LOCKLESS_DIAGNOSTIC: u8 = 0x5f;

/// `NV_RM_API_VERSION_STRING_LENGTH`.
pub const NV_RM_API_VERSION_STRING_LENGTH: usize = 64;
/// `NV_RM_API_VERSION_CMD_STRICT`.
pub const NV_RM_API_VERSION_CMD_STRICT: u32 = 0;
/// `NV_RM_API_VERSION_CMD_RELAXED` ('1').
pub const NV_RM_API_VERSION_CMD_RELAXED: u32 = b'1' as u32;
/// `NV_RM_API_VERSION_CMD_QUERY` ('2'): the driver writes its version string back.
pub const NV_RM_API_VERSION_CMD_QUERY: u32 = b'2' as u32;
/// `NV_RM_API_VERSION_REPLY_RECOGNIZED`.
pub const NV_RM_API_VERSION_REPLY_RECOGNIZED: u32 = 1;

/// `NV_MAX_DEVICES` (`nvlimits.h`).
pub const NV_MAX_DEVICES: usize = 32;
/// `nv_ioctl_card_info_t` entries we pass to `NV_ESC_CARD_INFO` (the driver fails with EINVAL
/// when there are more GPUs than entries; tinygrad also passes 64).
pub const NV_CARD_INFO_ENTRIES: usize = 64;

/// `NVOS00_PARAMETERS` (RM_FREE).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS00_PARAMETERS {
    pub hRoot: u32,
    pub hObjectParent: u32,
    pub hObjectOld: u32,
    pub status: u32,
}

/// `NVOS02_PARAMETERS` (RM_ALLOC_MEMORY).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS02_PARAMETERS {
    pub hRoot: u32,
    pub hObjectParent: u32,
    pub hObjectNew: u32,
    pub hClass: u32,
    pub flags: u32,
    pub _pad0: u32,
    pub pMemory: u64,
    pub limit: u64,
    pub status: u32,
    pub _pad1: u32,
}

/// `nv_ioctl_nvos02_parameters_with_fd`: NVOS02 plus the fd for an immediate mmap context.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_nvos02_parameters_with_fd {
    pub params: NVOS02_PARAMETERS,
    pub fd: i32,
    pub _pad0: u32,
}

/// `NVOS21_PARAMETERS` (RM_ALLOC without access rights).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS21_PARAMETERS {
    pub hRoot: u32,
    pub hObjectParent: u32,
    pub hObjectNew: u32,
    pub hClass: u32,
    pub pAllocParms: u64,
    pub paramsSize: u32,
    pub status: u32,
}

/// `NVOS64_PARAMETERS` (RM_ALLOC with requested access rights).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS64_PARAMETERS {
    pub hRoot: u32,
    pub hObjectParent: u32,
    pub hObjectNew: u32,
    pub hClass: u32,
    pub pAllocParms: u64,
    pub pRightsRequested: u64,
    pub paramsSize: u32,
    pub flags: u32,
    pub status: u32,
    pub _pad0: u32,
}

/// `NVOS33_PARAMETERS` (RM_MAP_MEMORY: CPU mapping).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS33_PARAMETERS {
    pub hClient: u32,
    pub hDevice: u32,
    pub hMemory: u32,
    pub _pad0: u32,
    pub offset: u64,
    pub length: u64,
    pub pLinearAddress: u64,
    pub status: u32,
    pub flags: u32,
}

/// `nv_ioctl_nvos33_parameters_with_fd`: `fd` is the file that will be mmapped, `/dev/nvidiaN`
/// for BAR mappings and `/dev/nvidiactl` for system memory (the driver keeps one mmap context per
/// open file, `rm_create_mmap_context`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_nvos33_parameters_with_fd {
    pub params: NVOS33_PARAMETERS,
    pub fd: i32,
    pub _pad0: u32,
}

/// `NVOS34_PARAMETERS` (RM_UNMAP_MEMORY).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS34_PARAMETERS {
    pub hClient: u32,
    pub hDevice: u32,
    pub hMemory: u32,
    pub _pad0: u32,
    pub pLinearAddress: u64,
    pub status: u32,
    pub flags: u32,
}

/// `NVOS46_PARAMETERS` (RM_MAP_MEMORY_DMA), **r580 layout** (64 bytes: `flags2` and
/// `kindOverride` first appeared in 580.65.06; 535/570 use 56 bytes, which 580 rejects with
/// EINVAL).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS46_PARAMETERS {
    pub hClient: u32,
    pub hDevice: u32,
    pub hDma: u32,
    pub hMemory: u32,
    pub offset: u64,
    pub length: u64,
    pub flags: u32,
    pub flags2: u32,
    pub kindOverride: u32,
    pub _pad0: u32,
    pub dmaOffset: u64,
    pub status: u32,
    pub _pad1: u32,
}

/// `NVOS47_PARAMETERS` (RM_UNMAP_MEMORY_DMA), 570/580 layout (48 bytes, with `size`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS47_PARAMETERS {
    pub hClient: u32,
    pub hDevice: u32,
    pub hDma: u32,
    pub hMemory: u32,
    pub flags: u32,
    pub _pad0: u32,
    pub dmaOffset: u64,
    pub size: u64,
    pub status: u32,
    pub _pad1: u32,
}

/// `NVOS54_PARAMETERS` (RM_CONTROL).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS54_PARAMETERS {
    pub hClient: u32,
    pub hObject: u32,
    pub cmd: u32,
    pub flags: u32,
    pub params: u64,
    pub paramsSize: u32,
    pub status: u32,
}

/// `NVOS55_PARAMETERS` (RM_DUP_OBJECT).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NVOS55_PARAMETERS {
    pub hClient: u32,
    pub hParent: u32,
    pub hObject: u32,
    pub hClientSrc: u32,
    pub hObjectSrc: u32,
    pub flags: u32,
    pub status: u32,
}

/// `nv_pci_info_t`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct nv_pci_info_t {
    pub domain: u32,
    pub bus: u8,
    pub slot: u8,
    pub function: u8,
    pub _pad0: u8,
    pub vendor_id: u16,
    pub device_id: u16,
}

/// `nv_ioctl_card_info_t` (one entry of `NV_ESC_CARD_INFO`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_card_info_t {
    /// NvBool.
    pub valid: u8,
    pub _pad0: [u8; 3],
    pub pci_info: nv_pci_info_t,
    pub gpu_id: u32,
    pub interrupt_line: u16,
    pub _pad1: [u8; 2],
    pub reg_address: u64,
    pub reg_size: u64,
    pub fb_address: u64,
    pub fb_size: u64,
    pub minor_number: u32,
    pub dev_name: [u8; 10],
    pub _pad2: [u8; 2],
}

/// `nv_ioctl_register_fd_t`: links a `/dev/nvidiaN` file to a control file.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_register_fd_t {
    pub ctl_fd: i32,
}

/// `nv_ioctl_rm_api_version_t` (`NV_ESC_CHECK_VERSION_STR`).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_rm_api_version_t {
    pub cmd: u32,
    pub reply: u32,
    pub versionString: [u8; NV_RM_API_VERSION_STRING_LENGTH],
}

/// `nv_ioctl_xfer_t`: carries arguments larger than `_IOC_SIZE` allows.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_xfer_t {
    pub cmd: u32,
    pub size: u32,
    pub ptr: u64,
}

/// `nv_ioctl_wait_open_complete_t` (570+): the result of the asynchronous part of opening
/// `/dev/nvidiaN` (`rc` is a negative errno, `adapterStatus` an NV_STATUS).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nv_ioctl_wait_open_complete_t {
    pub rc: i32,
    pub adapterStatus: u32,
}

// NVOS02 flags (`nvos.h`).
pub const NVOS02_FLAGS_PHYSICALITY_SHIFT: u32 = 4;
pub const NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS: u32 = 1;
pub const NVOS02_FLAGS_LOCATION_SHIFT: u32 = 8;
pub const NVOS02_FLAGS_LOCATION_PCI: u32 = 0;
pub const NVOS02_FLAGS_COHERENCY_SHIFT: u32 = 12;
pub const NVOS02_FLAGS_COHERENCY_CACHED: u32 = 1;
pub const NVOS02_FLAGS_MAPPING_SHIFT: u32 = 30;
pub const NVOS02_FLAGS_MAPPING_NO_MAP: u32 = 1;

// NVOS33 flags.
/// `NVOS33_FLAGS_ACCESS_READ_WRITE` (1:0 = 0).
pub const NVOS33_FLAGS_ACCESS_READ_WRITE: u32 = 0;

// NVOS46 flags (`nvos.h`).
pub const NVOS46_FLAGS_CACHE_SNOOP_SHIFT: u32 = 4;
pub const NVOS46_FLAGS_CACHE_SNOOP_ENABLE: u32 = 1;
pub const NVOS46_FLAGS_PAGE_SIZE_SHIFT: u32 = 8;
pub const NVOS46_FLAGS_PAGE_SIZE_4KB: u32 = 1;
pub const NVOS46_FLAGS_PAGE_SIZE_BIG: u32 = 2;
pub const NVOS46_FLAGS_PAGE_SIZE_HUGE: u32 = 4;
pub const NVOS46_FLAGS_DMA_OFFSET_FIXED_SHIFT: u32 = 15;
pub const NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    // Sizes and offsets: gcc 12 on x86-64 over the 580.142 headers (see the module docs).

    #[test]
    fn request_words() {
        // rm-abi.md §2.1 lists these words; they follow from `_IOWR('F', nr, sizeof)`.
        assert_eq!(
            nv_iowr(NV_ESC_RM_ALLOC, size_of::<NVOS21_PARAMETERS>()),
            0xC020_462B
        );
        assert_eq!(
            nv_iowr(NV_ESC_RM_ALLOC, size_of::<NVOS64_PARAMETERS>()),
            0xC030_462B
        );
        assert_eq!(
            nv_iowr(NV_ESC_RM_CONTROL, size_of::<NVOS54_PARAMETERS>()),
            0xC020_462A
        );
        assert_eq!(
            nv_iowr(NV_ESC_RM_FREE, size_of::<NVOS00_PARAMETERS>()),
            0xC010_4629
        );
        assert_eq!(
            nv_iowr(
                NV_ESC_RM_MAP_MEMORY,
                size_of::<nv_ioctl_nvos33_parameters_with_fd>()
            ),
            0xC038_464E
        );
        assert_eq!(
            nv_iowr(NV_ESC_RM_UNMAP_MEMORY, size_of::<NVOS34_PARAMETERS>()),
            0xC020_464F
        );
        assert_eq!(
            nv_iowr(
                NV_ESC_RM_ALLOC_MEMORY,
                size_of::<nv_ioctl_nvos02_parameters_with_fd>()
            ),
            0xC038_4627
        );
        assert_eq!(
            nv_iowr(NV_ESC_RM_MAP_MEMORY_DMA, size_of::<NVOS46_PARAMETERS>()),
            0xC040_4657
        );
        assert_eq!(
            nv_iowr(NV_ESC_RM_UNMAP_MEMORY_DMA, size_of::<NVOS47_PARAMETERS>()),
            0xC030_4658
        );
        assert_eq!(
            nv_iowr(NV_ESC_REGISTER_FD, size_of::<nv_ioctl_register_fd_t>()),
            0xC004_46C9
        );
        assert_eq!(
            nv_iowr(
                NV_ESC_CHECK_VERSION_STR,
                size_of::<nv_ioctl_rm_api_version_t>()
            ),
            0xC048_46D2
        );
        assert_eq!(
            nv_iowr(
                NV_ESC_CARD_INFO,
                NV_CARD_INFO_ENTRIES * size_of::<nv_ioctl_card_info_t>()
            ),
            0xD200_46C8
        );
        assert_eq!(
            nv_iowr(NV_ESC_IOCTL_XFER_CMD, size_of::<nv_ioctl_xfer_t>()),
            0xC010_46D3
        );
    }

    #[test]
    fn escape_numbers() {
        assert_eq!(NV_ESC_CARD_INFO, 200);
        assert_eq!(NV_ESC_REGISTER_FD, 201);
        assert_eq!(NV_ESC_CHECK_VERSION_STR, 210);
        assert_eq!(NV_ESC_IOCTL_XFER_CMD, 211);
        assert_eq!(NV_ESC_WAIT_OPEN_COMPLETE, 218);
    }

    #[test]
    fn rm_core_layouts() {
        assert_eq!(size_of::<NVOS00_PARAMETERS>(), 16);
        assert_eq!(offset_of!(NVOS00_PARAMETERS, hObjectOld), 8);
        assert_eq!(offset_of!(NVOS00_PARAMETERS, status), 12);

        assert_eq!(size_of::<NVOS21_PARAMETERS>(), 32);
        assert_eq!(offset_of!(NVOS21_PARAMETERS, hClass), 12);
        assert_eq!(offset_of!(NVOS21_PARAMETERS, pAllocParms), 16);
        assert_eq!(offset_of!(NVOS21_PARAMETERS, paramsSize), 24);
        assert_eq!(offset_of!(NVOS21_PARAMETERS, status), 28);

        assert_eq!(size_of::<NVOS64_PARAMETERS>(), 48);
        assert_eq!(offset_of!(NVOS64_PARAMETERS, pAllocParms), 16);
        assert_eq!(offset_of!(NVOS64_PARAMETERS, pRightsRequested), 24);
        assert_eq!(offset_of!(NVOS64_PARAMETERS, paramsSize), 32);
        assert_eq!(offset_of!(NVOS64_PARAMETERS, flags), 36);
        assert_eq!(offset_of!(NVOS64_PARAMETERS, status), 40);

        assert_eq!(size_of::<NVOS54_PARAMETERS>(), 32);
        assert_eq!(offset_of!(NVOS54_PARAMETERS, cmd), 8);
        assert_eq!(offset_of!(NVOS54_PARAMETERS, flags), 12);
        assert_eq!(offset_of!(NVOS54_PARAMETERS, params), 16);
        assert_eq!(offset_of!(NVOS54_PARAMETERS, paramsSize), 24);
        assert_eq!(offset_of!(NVOS54_PARAMETERS, status), 28);

        assert_eq!(size_of::<NVOS55_PARAMETERS>(), 28);
        assert_eq!(offset_of!(NVOS55_PARAMETERS, hObjectSrc), 16);
        assert_eq!(offset_of!(NVOS55_PARAMETERS, status), 24);
    }

    #[test]
    fn memory_layouts() {
        assert_eq!(size_of::<NVOS02_PARAMETERS>(), 48);
        assert_eq!(offset_of!(NVOS02_PARAMETERS, flags), 16);
        assert_eq!(offset_of!(NVOS02_PARAMETERS, pMemory), 24);
        assert_eq!(offset_of!(NVOS02_PARAMETERS, limit), 32);
        assert_eq!(offset_of!(NVOS02_PARAMETERS, status), 40);
        assert_eq!(size_of::<nv_ioctl_nvos02_parameters_with_fd>(), 56);
        assert_eq!(offset_of!(nv_ioctl_nvos02_parameters_with_fd, fd), 48);

        assert_eq!(size_of::<NVOS33_PARAMETERS>(), 48);
        assert_eq!(offset_of!(NVOS33_PARAMETERS, hMemory), 8);
        assert_eq!(offset_of!(NVOS33_PARAMETERS, offset), 16);
        assert_eq!(offset_of!(NVOS33_PARAMETERS, length), 24);
        assert_eq!(offset_of!(NVOS33_PARAMETERS, pLinearAddress), 32);
        assert_eq!(offset_of!(NVOS33_PARAMETERS, status), 40);
        assert_eq!(offset_of!(NVOS33_PARAMETERS, flags), 44);
        assert_eq!(size_of::<nv_ioctl_nvos33_parameters_with_fd>(), 56);
        assert_eq!(offset_of!(nv_ioctl_nvos33_parameters_with_fd, fd), 48);

        assert_eq!(size_of::<NVOS34_PARAMETERS>(), 32);
        assert_eq!(offset_of!(NVOS34_PARAMETERS, pLinearAddress), 16);
        assert_eq!(offset_of!(NVOS34_PARAMETERS, status), 24);
        assert_eq!(offset_of!(NVOS34_PARAMETERS, flags), 28);

        // r580: 64 bytes (535/570: 56, dmaOffset at 40, status at 48).
        assert_eq!(size_of::<NVOS46_PARAMETERS>(), 64);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, offset), 16);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, length), 24);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, flags), 32);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, flags2), 36);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, kindOverride), 40);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, dmaOffset), 48);
        assert_eq!(offset_of!(NVOS46_PARAMETERS, status), 56);

        // 570/580: 48 bytes (535: 40, no `size`).
        assert_eq!(size_of::<NVOS47_PARAMETERS>(), 48);
        assert_eq!(offset_of!(NVOS47_PARAMETERS, flags), 16);
        assert_eq!(offset_of!(NVOS47_PARAMETERS, dmaOffset), 24);
        assert_eq!(offset_of!(NVOS47_PARAMETERS, size), 32);
        assert_eq!(offset_of!(NVOS47_PARAMETERS, status), 40);
    }

    #[test]
    fn os_interface_layouts() {
        assert_eq!(size_of::<nv_pci_info_t>(), 12);
        assert_eq!(offset_of!(nv_pci_info_t, bus), 4);
        assert_eq!(offset_of!(nv_pci_info_t, slot), 5);
        assert_eq!(offset_of!(nv_pci_info_t, function), 6);
        assert_eq!(offset_of!(nv_pci_info_t, vendor_id), 8);
        assert_eq!(offset_of!(nv_pci_info_t, device_id), 10);

        assert_eq!(size_of::<nv_ioctl_card_info_t>(), 72);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, pci_info), 4);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, gpu_id), 16);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, interrupt_line), 20);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, reg_address), 24);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, reg_size), 32);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, fb_address), 40);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, fb_size), 48);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, minor_number), 56);
        assert_eq!(offset_of!(nv_ioctl_card_info_t, dev_name), 60);

        assert_eq!(size_of::<nv_ioctl_register_fd_t>(), 4);
        assert_eq!(size_of::<nv_ioctl_rm_api_version_t>(), 72);
        assert_eq!(offset_of!(nv_ioctl_rm_api_version_t, reply), 4);
        assert_eq!(offset_of!(nv_ioctl_rm_api_version_t, versionString), 8);
        assert_eq!(size_of::<nv_ioctl_xfer_t>(), 16);
        assert_eq!(size_of::<nv_ioctl_wait_open_complete_t>(), 8);
        assert_eq!(offset_of!(nv_ioctl_wait_open_complete_t, adapterStatus), 4);
        assert_eq!(offset_of!(nv_ioctl_xfer_t, ptr), 8);
    }
}
