//! Control commands device bring-up and fault reporting use: command numbers and param structs.
//!
//! Names are NVIDIA's (`ctrl/ctrl*/*.h`); command numbers are identical in 570.144 and 580.142.
//! 580 checks every control's param size exactly and rejects the old size with
//! `NV_ERR_INVALID_ARGUMENT`, so the structs whose size changed between 570 and 580 exist twice
//! (`_R570`, `_R580`) with an enum that picks the layout for an [`RmAbi`].
//!
//! Controls whose params hold a pointer (`GR_GET_INFO`, `GET_CLASSLIST`) work through the
//! kernel driver only; over GSP RPC use the flat `_V2` forms.
#![allow(non_camel_case_types, non_snake_case)]
#![allow(missing_docs)] // field names are NVIDIA's; the header named on each struct documents them

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::RmAbi;
use super::alloc::zeroed_default;

// ----------------------------------------------------------------------------------------------
// Command numbers.

/// `NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2` (on the client).
pub const NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2: u32 = 0x13e;
/// `NV0080_CTRL_CMD_GPU_GET_CLASSLIST` (on the device; params hold a pointer).
pub const NV0080_CTRL_CMD_GPU_GET_CLASSLIST: u32 = 0x0080_0201;
/// `NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2` (on the device; flat).
pub const NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2: u32 = 0x0080_0292;
/// `NV2080_CTRL_CMD_GPU_GET_GID_INFO` (on the subdevice).
pub const NV2080_CTRL_CMD_GPU_GET_GID_INFO: u32 = 0x2080_014a;
/// `NV2080_CTRL_CMD_GR_GET_INFO` (on the subdevice; params hold a pointer).
pub const NV2080_CTRL_CMD_GR_GET_INFO: u32 = 0x2080_1201;
/// `NV2080_CTRL_CMD_GR_GET_INFO_V2` (on the subdevice; flat).
pub const NV2080_CTRL_CMD_GR_GET_INFO_V2: u32 = 0x2080_1228;
/// `NV2080_CTRL_CMD_MC_GET_ARCH_INFO` (on the subdevice).
pub const NV2080_CTRL_CMD_MC_GET_ARCH_INFO: u32 = 0x2080_1701;
/// `NV2080_CTRL_CMD_PERF_BOOST` (on the subdevice).
pub const NV2080_CTRL_CMD_PERF_BOOST: u32 = 0x2080_200a;
/// `NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN` (on a channel of any Volta+ GPFIFO class).
pub const NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: u32 = 0xc36f_0108;
/// `NVA06C_CTRL_CMD_GPFIFO_SCHEDULE` (on a channel group).
pub const NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: u32 = 0xa06c_0101;
/// `NVA06C_CTRL_CMD_SET_TIMESLICE` (on a channel group).
pub const NVA06C_CTRL_CMD_SET_TIMESLICE: u32 = 0xa06c_0103;
/// `NVA06C_CTRL_CMD_GET_TIMESLICE` (on a channel group).
pub const NVA06C_CTRL_CMD_GET_TIMESLICE: u32 = 0xa06c_0104;
/// `NVA06F_CTRL_CMD_GPFIFO_SCHEDULE` (on a channel; same params as the TSG form).
pub const NVA06F_CTRL_CMD_GPFIFO_SCHEDULE: u32 = 0xa06f_0103;
/// `NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES` (on a `GT200_DEBUGGER`).
pub const NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES: u32 = 0x83de_030c;
/// `NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES` (on a `GT200_DEBUGGER`).
pub const NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES: u32 = 0x83de_0310;
/// `NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO` (on a `GT200_DEBUGGER`).
pub const NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO: u32 = 0x83de_0328;

/// Name of a control command nvbare knows, for error messages and traces.
pub fn ctrl_name(cmd: u32) -> Option<&'static str> {
    Some(match cmd {
        NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2 => {
            "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2"
        }
        NV0080_CTRL_CMD_GPU_GET_CLASSLIST => "NV0080_CTRL_CMD_GPU_GET_CLASSLIST",
        NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2 => "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2",
        NV2080_CTRL_CMD_GPU_GET_GID_INFO => "NV2080_CTRL_CMD_GPU_GET_GID_INFO",
        NV2080_CTRL_CMD_GR_GET_INFO => "NV2080_CTRL_CMD_GR_GET_INFO",
        NV2080_CTRL_CMD_GR_GET_INFO_V2 => "NV2080_CTRL_CMD_GR_GET_INFO_V2",
        NV2080_CTRL_CMD_MC_GET_ARCH_INFO => "NV2080_CTRL_CMD_MC_GET_ARCH_INFO",
        NV2080_CTRL_CMD_PERF_BOOST => "NV2080_CTRL_CMD_PERF_BOOST",
        NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN => {
            "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN"
        }
        NVA06C_CTRL_CMD_GPFIFO_SCHEDULE => "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE",
        NVA06C_CTRL_CMD_SET_TIMESLICE => "NVA06C_CTRL_CMD_SET_TIMESLICE",
        NVA06C_CTRL_CMD_GET_TIMESLICE => "NVA06C_CTRL_CMD_GET_TIMESLICE",
        NVA06F_CTRL_CMD_GPFIFO_SCHEDULE => "NVA06F_CTRL_CMD_GPFIFO_SCHEDULE",
        NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES => {
            "NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES"
        }
        NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES => {
            "NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES"
        }
        NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO => "NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO",
        _ => return None,
    })
}

// ----------------------------------------------------------------------------------------------
// Engine types and RC error codes.

/// `NV2080_ENGINE_TYPE_GRAPHICS` (`cl2080_notification.h`): the graphics/compute engine.
pub const NV2080_ENGINE_TYPE_GRAPHICS: u32 = 1;
/// `NV2080_ENGINE_TYPE_COPY0`; copy engine `i < 10` is `COPY0 + i`.
pub const NV2080_ENGINE_TYPE_COPY0: u32 = 9;

/// `ROBUST_CHANNEL_*` error codes written to a channel's error notifier (`nverror.h`); the
/// same numbers appear as "Xid" in kernel logs.
pub mod rc {
    /// `ROBUST_CHANNEL_GR_EXCEPTION` (Xid 13): an SM/GR exception, e.g. an illegal instruction.
    pub const ROBUST_CHANNEL_GR_EXCEPTION: u32 = 13;
    /// `ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT` (Xid 31): an MMU fault.
    pub const ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT: u32 = 31;
    /// `ROBUST_CHANNEL_PBDMA_ERROR` (Xid 32): a malformed pushbuffer or GPFIFO entry.
    pub const ROBUST_CHANNEL_PBDMA_ERROR: u32 = 32;
    /// `ROBUST_CHANNEL_CE0_ERROR` (Xid 39).
    pub const ROBUST_CHANNEL_CE0_ERROR: u32 = 39;
    /// `ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR` (Xid 43): the channel was reset.
    pub const ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR: u32 = 43;
    /// `ROBUST_CHANNEL_PREEMPTIVE_REMOVAL` (Xid 45): the channel was removed (e.g. freed busy).
    pub const ROBUST_CHANNEL_PREEMPTIVE_REMOVAL: u32 = 45;

    /// NVIDIA's name for an RC code nvbare knows.
    pub fn name(code: u32) -> Option<&'static str> {
        Some(match code {
            ROBUST_CHANNEL_GR_EXCEPTION => "ROBUST_CHANNEL_GR_EXCEPTION",
            ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT => "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
            ROBUST_CHANNEL_PBDMA_ERROR => "ROBUST_CHANNEL_PBDMA_ERROR",
            ROBUST_CHANNEL_CE0_ERROR => "ROBUST_CHANNEL_CE0_ERROR",
            ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR => "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
            ROBUST_CHANNEL_PREEMPTIVE_REMOVAL => "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
            _ => return None,
        })
    }
}

/// `NvNotification` (`nvgputypes.h`): a 16-byte notifier. A channel's error notifier (the memory
/// named by `hObjectError`) receives one when RM tears the channel down ("RC"):
/// `info32` = `ROBUST_CHANNEL_*` code, `info16` = `NV2080_ENGINE_TYPE_*`, `status` = 0xffff
/// (`krcErrorSetNotifier`, `kernel_rc_notification.c`). The client zeroes it beforehand.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NvNotification {
    /// `timeStamp.nanoseconds[2]` (high word first, as RM writes it).
    pub timeStamp: [u32; 2],
    pub info32: u32,
    pub info16: u16,
    pub status: u16,
}

/// `NV_CHANNELGPFIFO_NOTIFICATION_TYPE_ERROR`: index of the error notifier in the notifier
/// array of a channel (`nvos.h`); `NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1` = 3 entries.
pub const NV_CHANNELGPFIFO_NOTIFICATION_TYPE_ERROR: usize = 0;
/// `NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1`.
pub const NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1: usize = 3;

// ----------------------------------------------------------------------------------------------
// Param structs.

/// `NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE`.
pub const NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE: usize = 256;

/// `NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS` (`ctrl0000system.h`): 1032 bytes in 570 and
/// 580 (`driverBranch` was inserted in 570).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS {
    pub driverVersionBuffer: [u8; NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE],
    pub versionBuffer: [u8; NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE],
    pub driverBranch: [u8; NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE],
    pub titleBuffer: [u8; NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE],
    pub changelistNumber: u32,
    pub officialChangelistNumber: u32,
}

/// The text of a NUL-terminated C string buffer (up to the first NUL; invalid UTF-8 gives
/// `None`).
pub fn c_str(buf: &[u8]) -> Option<&str> {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    core::str::from_utf8(buf.get(..end)?).ok()
}

/// Copies `s` into a NUL-terminated C string buffer, truncating if needed.
pub fn set_c_str(buf: &mut [u8], s: &str) {
    buf.fill(0);
    let n = s.len().min(buf.len().saturating_sub(1));
    if let (Some(dst), Some(src)) = (buf.get_mut(..n), s.as_bytes().get(..n)) {
        dst.copy_from_slice(src);
    }
}

/// `NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS` (`ctrl0080gpu.h`): `classList` is a user pointer
/// (call with 0 to learn `numClasses`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS {
    pub numClasses: u32,
    pub _pad0: u32,
    pub classList: u64,
}

/// `NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE` at 570.144 (100; it was 160 at 535 and is 200 at 580).
pub const NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R570: usize = 100;
/// `NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE` at 580.142.
pub const NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R580: usize = 200;

/// `NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS` at 570.144: 404 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570 {
    pub numClasses: u32,
    pub classList: [u32; NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R570],
}

/// `NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS` at 580.142: 804 bytes (580 rejects 404).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580 {
    pub numClasses: u32,
    pub classList: [u32; NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE_R580],
}

/// `GET_CLASSLIST_V2` params in the layout of one RM version.
// Boxing would need alloc; the variants are control params used once at bring-up.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassListV2 {
    /// 404-byte layout.
    R570(NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570),
    /// 804-byte layout.
    R580(NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580),
}

impl ClassListV2 {
    /// Empty params in the layout `abi` expects.
    pub fn new(abi: RmAbi) -> Self {
        match abi {
            RmAbi::R570 => ClassListV2::R570(FromZeros::new_zeroed()),
            RmAbi::R580 => ClassListV2::R580(FromZeros::new_zeroed()),
        }
    }

    /// The bytes to pass to `Rm::control`.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        match self {
            ClassListV2::R570(p) => p.as_mut_bytes(),
            ClassListV2::R580(p) => p.as_mut_bytes(),
        }
    }

    /// The classes RM returned (`numClasses` clamped to the array).
    pub fn classes(&self) -> &[u32] {
        let (n, list): (u32, &[u32]) = match self {
            ClassListV2::R570(p) => (p.numClasses, &p.classList),
            ClassListV2::R580(p) => (p.numClasses, &p.classList),
        };
        let n = (n as usize).min(list.len());
        list.get(..n).unwrap_or(&[])
    }

    /// Fills the list (for RM models): returns `false` if `classes` does not fit.
    pub fn set_classes(&mut self, classes: &[u32]) -> bool {
        let (n, list): (&mut u32, &mut [u32]) = match self {
            ClassListV2::R570(p) => (&mut p.numClasses, &mut p.classList),
            ClassListV2::R580(p) => (&mut p.numClasses, &mut p.classList),
        };
        let Some(dst) = list.get_mut(..classes.len()) else {
            return false;
        };
        dst.copy_from_slice(classes);
        *n = classes.len() as u32;
        true
    }

    /// Parses params of either layout (by size), for RM models.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if let Ok(p) = NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580::read_from_bytes(bytes) {
            return Some(ClassListV2::R580(p));
        }
        NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570::read_from_bytes(bytes)
            .ok()
            .map(ClassListV2::R570)
    }

    /// The bytes, read-only.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ClassListV2::R570(p) => p.as_bytes(),
            ClassListV2::R580(p) => p.as_bytes(),
        }
    }
}

/// `NV0080_CTRL_GR_INFO` / `NV2080_CTRL_GR_INFO` (`NVXXXX_CTRL_XXX_INFO`): one index/value pair.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_GR_INFO {
    pub index: u32,
    pub data: u32,
}

/// `NV0080_CTRL_GR_ROUTE_INFO` / `NV2080_CTRL_GR_ROUTE_INFO`: which GR engine (MIG); zero = default.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_GR_ROUTE_INFO {
    pub flags: u32,
    pub _pad0: u32,
    pub route: u64,
}

/// `NV2080_CTRL_GR_GET_INFO_PARAMS` (`ctrl2080gr.h`): `grInfoList` is a user pointer.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_GR_GET_INFO_PARAMS {
    pub grInfoListSize: u32,
    pub _pad0: u32,
    pub grInfoList: u64,
    pub grRouteInfo: NV2080_CTRL_GR_ROUTE_INFO,
}

/// `NV0080_CTRL_GR_INFO_MAX_SIZE` at 570.144 and 580.142 (`INDEX_MAX` 0x39 + 1).
pub const NV0080_CTRL_GR_INFO_MAX_SIZE: usize = 0x3a;

/// `NV2080_CTRL_GR_GET_INFO_V2_PARAMS`: 488 bytes in 570 and 580 (448 in 535).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV2080_CTRL_GR_GET_INFO_V2_PARAMS {
    pub grInfoListSize: u32,
    pub grInfoList: [NV2080_CTRL_GR_INFO; NV0080_CTRL_GR_INFO_MAX_SIZE],
    pub _pad0: u32,
    pub grRouteInfo: NV2080_CTRL_GR_ROUTE_INFO,
}

impl NV2080_CTRL_GR_GET_INFO_V2_PARAMS {
    /// Params asking for `indices` (at most [`NV0080_CTRL_GR_INFO_MAX_SIZE`]; extra ones are
    /// dropped).
    pub fn query(indices: &[u32]) -> Self {
        let mut p: Self = FromZeros::new_zeroed();
        let n = indices.len().min(NV0080_CTRL_GR_INFO_MAX_SIZE);
        for (slot, &i) in p.grInfoList.iter_mut().zip(indices.iter().take(n)) {
            slot.index = i;
        }
        p.grInfoListSize = n as u32;
        p
    }

    /// The value RM returned for `index`, if it was asked for.
    pub fn value(&self, index: u32) -> Option<u32> {
        let n = (self.grInfoListSize as usize).min(NV0080_CTRL_GR_INFO_MAX_SIZE);
        self.grInfoList
            .get(..n)?
            .iter()
            .find(|e| e.index == index)
            .map(|e| e.data)
    }
}

/// GR info indices (`NV0080_CTRL_GR_INFO_INDEX_*`, `ctrl0080gr.h`; same in 535/570/580).
pub mod gr_info {
    /// `SHADER_PIPE_SUB_COUNT`: enabled TPCs.
    pub const SHADER_PIPE_SUB_COUNT: u32 = 0x09;
    /// `SM_VERSION`: `NV2080_CTRL_GR_INFO_SM_VERSION_*`, e.g. 0x900 for sm_90.
    pub const SM_VERSION: u32 = 0x0c;
    /// `MAX_WARPS_PER_SM`.
    pub const MAX_WARPS_PER_SM: u32 = 0x0d;
    /// `MAX_THREADS_PER_WARP`.
    pub const MAX_THREADS_PER_WARP: u32 = 0x0e;
    /// `LITTER_NUM_GPCS`.
    pub const LITTER_NUM_GPCS: u32 = 0x14;
    /// `LITTER_NUM_TPC_PER_GPC`.
    pub const LITTER_NUM_TPC_PER_GPC: u32 = 0x17;
    /// `LITTER_NUM_SM_PER_TPC`.
    pub const LITTER_NUM_SM_PER_TPC: u32 = 0x20;
    /// `MAX_SUBCONTEXT_COUNT`.
    pub const MAX_SUBCONTEXT_COUNT: u32 = 0x2c;

    /// `NV2080_CTRL_GR_INFO_SM_VERSION_10_04` (0xA04): the id RM reports for sm_120 parts
    /// before `SM_VERSION_12_00` (0xC00) replaced it (`ctrl2080gr.h`, "TODO Bug 4333440").
    pub const SM_VERSION_10_04: u32 = 0xa04;

    /// Shader model `major * 10 + minor` for an `SM_VERSION` value (0x900 → 90, 0x809 → 89,
    /// 0xA04 and 0xC00 → 120).
    pub fn sm_from_version(v: u32) -> u32 {
        if v == SM_VERSION_10_04 {
            return 120;
        }
        ((v >> 8) & 0xff) * 10 + (v & 0xff)
    }
}

/// `NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS` (`ctrl2080mc.h`): 16 bytes.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
    /// `NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_*`, e.g. 0x180 for GH100 (= `NV_PMC_BOOT_42`
    /// architecture << 4).
    pub architecture: u32,
    /// `NV2080_CTRL_MC_ARCH_INFO_IMPLEMENTATION_*`, e.g. 2 for AD102.
    pub implementation: u32,
    pub revision: u32,
    pub subRevision: u8,
    pub _pad0: [u8; 3],
}

impl NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
    /// The chip id in `NV_PMC_BOOT_42` form (architecture | implementation), e.g. 0x192.
    pub fn chip_id(&self) -> u16 {
        ((self.architecture & 0xff0) | (self.implementation & 0xf)) as u16
    }
}

/// `NV2080_GPU_MAX_GID_LENGTH`.
pub const NV2080_GPU_MAX_GID_LENGTH: usize = 0x100;
/// `NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY`: return the 16-byte UUID in binary.
pub const NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY: u32 = 2;

/// `NV2080_CTRL_GPU_GET_GID_INFO_PARAMS` (`ctrl2080gpu.h`): 268 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV2080_CTRL_GPU_GET_GID_INFO_PARAMS {
    pub index: u32,
    pub flags: u32,
    pub length: u32,
    pub data: [u8; NV2080_GPU_MAX_GID_LENGTH],
}

/// `NV2080_CTRL_PERF_BOOST_PARAMS` (`ctrl2080perf.h`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV2080_CTRL_PERF_BOOST_PARAMS {
    /// `NV2080_CTRL_PERF_BOOST_FLAGS_*`.
    pub flags: u32,
    /// Seconds (≤ 3600) or `NV2080_CTRL_PERF_BOOST_DURATION_INFINITE`.
    pub duration: u32,
}

/// `NV2080_CTRL_PERF_BOOST_FLAGS_CMD_BOOST_TO_MAX` (1:0).
pub const NV2080_CTRL_PERF_BOOST_FLAGS_CMD_BOOST_TO_MAX: u32 = 2;
/// `NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_YES` (4:4).
pub const NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_YES: u32 = 1 << 4;
/// `NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_PRIORITY_HIGH` (6:6).
pub const NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_PRIORITY_HIGH: u32 = 1 << 6;
/// `NV2080_CTRL_PERF_BOOST_DURATION_INFINITE`.
pub const NV2080_CTRL_PERF_BOOST_DURATION_INFINITE: u32 = 0xffff_ffff;

/// `NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS` (`ctrlc36f.h`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS {
    pub workSubmitToken: u32,
}

/// `NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS` (= `NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS`) at 570.144.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570 {
    pub bEnable: u8,
    pub bSkipSubmit: u8,
}

/// `NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS` at 580.142: `bSkipEnable` appended (575.51.02 on); 580
/// rejects the 2-byte form with `NV_ERR_INVALID_ARGUMENT`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580 {
    pub bEnable: u8,
    pub bSkipSubmit: u8,
    pub bSkipEnable: u8,
}

/// `GPFIFO_SCHEDULE` params in the layout of one RM version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleParams {
    /// 2-byte layout.
    R570(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570),
    /// 3-byte layout.
    R580(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580),
}

impl ScheduleParams {
    /// `bEnable = enable` in the layout `abi` expects.
    pub fn new(abi: RmAbi, enable: bool) -> Self {
        let e = enable as u8;
        match abi {
            RmAbi::R570 => ScheduleParams::R570(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570 {
                bEnable: e,
                bSkipSubmit: 0,
            }),
            RmAbi::R580 => ScheduleParams::R580(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580 {
                bEnable: e,
                bSkipSubmit: 0,
                bSkipEnable: 0,
            }),
        }
    }

    /// The bytes to pass to `Rm::control`.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        match self {
            ScheduleParams::R570(p) => p.as_mut_bytes(),
            ScheduleParams::R580(p) => p.as_mut_bytes(),
        }
    }

    /// `bEnable` of params in `abi`'s layout, or `None` if the size is wrong for `abi`.
    pub fn enable_of(abi: RmAbi, bytes: &[u8]) -> Option<bool> {
        match abi {
            RmAbi::R570 => NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570::read_from_bytes(bytes)
                .ok()
                .map(|p| p.bEnable != 0),
            RmAbi::R580 => NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580::read_from_bytes(bytes)
                .ok()
                .map(|p| p.bEnable != 0),
        }
    }
}

/// `NVA06C_CTRL_TIMESLICE_PARAMS` (`ctrla06c.h`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NVA06C_CTRL_TIMESLICE_PARAMS {
    pub timesliceUs: u64,
}

/// `NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL`.
pub const NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL: usize = 100;

/// `NV83DE_SM_ERROR_STATE_REGISTERS` (`ctrl83dedebug.h`): 48 bytes.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV83DE_SM_ERROR_STATE_REGISTERS {
    pub hwwGlobalEsr: u32,
    pub hwwWarpEsr: u32,
    pub hwwWarpEsrPc: u32,
    pub hwwGlobalEsrReportMask: u32,
    pub hwwWarpEsrReportMask: u32,
    pub _pad0: u32,
    pub hwwEsrAddr: u64,
    pub hwwWarpEsrPc64: u64,
    pub hwwCgaEsr: u32,
    pub hwwCgaEsrReportMask: u32,
}

/// `NV83DE_MMU_FAULT_INFO`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV83DE_MMU_FAULT_INFO {
    pub valid: u8,
    pub _pad0: [u8; 3],
    pub faultInfo: u32,
}

/// `NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS`: 4824 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS {
    pub hTargetChannel: u32,
    pub numSMsToRead: u32,
    pub smErrorStateArray: [NV83DE_SM_ERROR_STATE_REGISTERS; NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL],
    pub mmuFaultInfo: u32,
    pub mmuFault: NV83DE_MMU_FAULT_INFO,
    pub startingSM: u32,
}

/// `NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS {
    pub hTargetChannel: u32,
    pub numSMsToClear: u32,
}

/// `NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_MAX_ENTRIES`.
pub const NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_MAX_ENTRIES: usize = 4;

/// `NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY {
    pub faultAddress: u64,
    /// `NV_PFAULT_FAULT_TYPE_*` ([`fault_type_name`]).
    pub faultType: u32,
    /// `NV_PFAULT_ACCESS_TYPE_*` ([`access_type_name`]).
    pub accessType: u32,
}

/// `NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS`: 72 bytes.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS {
    pub mmuFaultInfoList: [NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY;
        NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_MAX_ENTRIES],
    pub count: u32,
    pub _pad0: u32,
}

/// `NV_PFAULT_FAULT_TYPE_*` names (`hwref/*/dev_fault.h`, same Turing to Blackwell).
pub fn fault_type_name(t: u32) -> &'static str {
    match t {
        0x0 => "PDE",
        0x1 => "PDE_SIZE",
        0x2 => "PTE",
        0x3 => "VA_LIMIT_VIOLATION",
        0x4 => "UNBOUND_INST_BLOCK",
        0x5 => "PRIV_VIOLATION",
        0x6 => "RO_VIOLATION",
        0x7 => "WO_VIOLATION",
        0x8 => "PITCH_MASK_VIOLATION",
        0x9 => "WORK_CREATION",
        0xa => "UNSUPPORTED_APERTURE",
        0xb => "COMPRESSION_FAILURE",
        0xc => "UNSUPPORTED_KIND",
        0xd => "REGION_VIOLATION",
        0xe => "POISONED",
        0xf => "ATOMIC_VIOLATION",
        _ => "UNKNOWN",
    }
}

/// `NV_PFAULT_ACCESS_TYPE_*` names.
pub fn access_type_name(t: u32) -> &'static str {
    match t {
        0x0 => "VIRT_READ",
        0x1 => "VIRT_WRITE",
        0x2 => "VIRT_ATOMIC",
        0x3 => "VIRT_PREFETCH",
        0x4 => "VIRT_ATOMIC_WEAK",
        0x8 => "PHYS_READ",
        0x9 => "PHYS_WRITE",
        0xa => "PHYS_ATOMIC",
        0xb => "PHYS_PREFETCH",
        _ => "UNKNOWN",
    }
}

/// SM warp error codes in `hwwWarpEsr` bits 15:0 (`NV_PGRAPH_PRI_GPC0_TPC0_SM0_HWW_WARP_ESR_ERROR`;
/// not in NVIDIA's published headers; numbering as nouveau's `gf100_mp_warp_error`).
pub mod warp_esr {
    /// `ILLEGAL_INSTR_ENCODING`.
    pub const ILLEGAL_INSTR_ENCODING: u32 = 0x09;
    /// `ILLEGAL_INSTR_PARAM`.
    pub const ILLEGAL_INSTR_PARAM: u32 = 0x0b;
    /// `OOR_ADDR`: an address out of range.
    pub const OOR_ADDR: u32 = 0x0e;
    /// `MISALIGNED_ADDR`.
    pub const MISALIGNED_ADDR: u32 = 0x0f;

    /// Name of a warp error code.
    pub fn name(code: u32) -> &'static str {
        match code & 0xffff {
            0x01 => "STACK_ERROR",
            0x02 => "API_STACK_ERROR",
            0x03 => "RET_EMPTY_STACK_ERROR",
            0x04 => "PC_WRAP",
            0x05 => "MISALIGNED_PC",
            0x06 => "PC_OVERFLOW",
            0x07 => "MISALIGNED_IMMC_ADDR",
            0x08 => "MISALIGNED_REG",
            ILLEGAL_INSTR_ENCODING => "ILLEGAL_INSTR_ENCODING",
            0x0a => "ILLEGAL_SPH_INSTR_COMBO",
            ILLEGAL_INSTR_PARAM => "ILLEGAL_INSTR_PARAM",
            0x0c => "INVALID_CONST_ADDR",
            0x0d => "OOR_REG",
            OOR_ADDR => "OOR_ADDR",
            MISALIGNED_ADDR => "MISALIGNED_ADDR",
            0x10 => "INVALID_ADDR_SPACE",
            _ => "UNKNOWN",
        }
    }
}

zeroed_default!(
    NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS,
    NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570,
    NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580,
    NV2080_CTRL_GR_GET_INFO_V2_PARAMS,
    NV2080_CTRL_GPU_GET_GID_INFO_PARAMS,
    NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS,
);

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    // Sizes and offsets: open-gpu-kernel-modules 570.144 / 580.142 headers (rm-abi.md §3).

    #[test]
    fn build_version_v2() {
        type T = NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS;
        assert_eq!(size_of::<T>(), 1032);
        assert_eq!(offset_of!(T, versionBuffer), 256);
        assert_eq!(offset_of!(T, driverBranch), 512);
        assert_eq!(offset_of!(T, titleBuffer), 768);
        assert_eq!(offset_of!(T, changelistNumber), 1024);
        assert_eq!(offset_of!(T, officialChangelistNumber), 1028);
        let mut p = T::default();
        set_c_str(&mut p.driverVersionBuffer, "580.159.04");
        assert_eq!(c_str(&p.driverVersionBuffer), Some("580.159.04"));
        let mut tiny = [0u8; 4];
        set_c_str(&mut tiny, "abcdef");
        assert_eq!(c_str(&tiny), Some("abc"));
    }

    #[test]
    fn classlist() {
        assert_eq!(size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS>(), 16);
        assert_eq!(
            offset_of!(NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS, classList),
            8
        );
        assert_eq!(
            size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570>(),
            404
        );
        assert_eq!(
            size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580>(),
            804
        );
        let mut l = ClassListV2::new(RmAbi::R580);
        assert_eq!(l.as_mut_bytes().len(), 804);
        assert!(l.set_classes(&[0xcbc0, 0xc86f]));
        let back = ClassListV2::from_bytes(l.as_bytes()).unwrap();
        assert_eq!(back.classes(), &[0xcbc0, 0xc86f]);
        let mut l = ClassListV2::new(RmAbi::R570);
        assert_eq!(l.as_mut_bytes().len(), 404);
        assert!(!l.set_classes(&[0; 101]));
        // A lying numClasses is clamped, not trusted.
        let mut raw = [0u8; 404];
        raw[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ClassListV2::from_bytes(&raw).unwrap().classes().len(), 100);
    }

    #[test]
    fn gr_info() {
        assert_eq!(size_of::<NV2080_CTRL_GR_INFO>(), 8);
        assert_eq!(size_of::<NV2080_CTRL_GR_ROUTE_INFO>(), 16);
        type T = NV2080_CTRL_GR_GET_INFO_PARAMS;
        assert_eq!(size_of::<T>(), 32);
        assert_eq!(offset_of!(T, grInfoList), 8);
        assert_eq!(offset_of!(T, grRouteInfo), 16);
        type V = NV2080_CTRL_GR_GET_INFO_V2_PARAMS;
        assert_eq!(size_of::<V>(), 488);
        assert_eq!(offset_of!(V, grInfoList), 4);
        assert_eq!(offset_of!(V, grRouteInfo), 472);
        let mut q = V::query(&[gr_info::SM_VERSION, gr_info::LITTER_NUM_GPCS]);
        q.grInfoList[0].data = 0x900;
        assert_eq!(q.value(gr_info::SM_VERSION), Some(0x900));
        assert_eq!(q.value(gr_info::MAX_WARPS_PER_SM), None);
        assert_eq!(gr_info::sm_from_version(0x900), 90);
        assert_eq!(gr_info::sm_from_version(0x809), 89);
        assert_eq!(gr_info::sm_from_version(0xa04), 120);
        assert_eq!(gr_info::sm_from_version(0xc00), 120);
    }

    #[test]
    fn misc_subdevice_controls() {
        assert_eq!(size_of::<NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS>(), 16);
        assert_eq!(
            offset_of!(NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS, subRevision),
            12
        );
        let a = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
            architecture: 0x190,
            implementation: 2,
            ..Default::default()
        };
        assert_eq!(a.chip_id(), 0x192);
        type G = NV2080_CTRL_GPU_GET_GID_INFO_PARAMS;
        assert_eq!(size_of::<G>(), 268);
        assert_eq!(offset_of!(G, length), 8);
        assert_eq!(offset_of!(G, data), 12);
        assert_eq!(size_of::<NV2080_CTRL_PERF_BOOST_PARAMS>(), 8);
        assert_eq!(
            size_of::<NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS>(),
            4
        );
        assert_eq!(size_of::<NVA06C_CTRL_TIMESLICE_PARAMS>(), 8);
    }

    #[test]
    fn schedule_by_abi() {
        assert_eq!(size_of::<NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R570>(), 2);
        assert_eq!(size_of::<NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS_R580>(), 3);
        let mut p = ScheduleParams::new(RmAbi::R580, true);
        assert_eq!(p.as_mut_bytes(), &[1, 0, 0]);
        let mut p = ScheduleParams::new(RmAbi::R570, true);
        assert_eq!(p.as_mut_bytes(), &[1, 0]);
        assert_eq!(ScheduleParams::enable_of(RmAbi::R580, &[1, 0]), None);
        assert_eq!(
            ScheduleParams::enable_of(RmAbi::R580, &[1, 0, 0]),
            Some(true)
        );
    }

    #[test]
    fn debugger_controls() {
        type S = NV83DE_SM_ERROR_STATE_REGISTERS;
        assert_eq!(size_of::<S>(), 48);
        assert_eq!(offset_of!(S, hwwWarpEsrReportMask), 16);
        assert_eq!(offset_of!(S, hwwEsrAddr), 24);
        assert_eq!(offset_of!(S, hwwWarpEsrPc64), 32);
        assert_eq!(offset_of!(S, hwwCgaEsr), 40);
        assert_eq!(offset_of!(S, hwwCgaEsrReportMask), 44);
        type T = NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS;
        assert_eq!(size_of::<T>(), 4824);
        assert_eq!(offset_of!(T, numSMsToRead), 4);
        assert_eq!(offset_of!(T, smErrorStateArray), 8);
        assert_eq!(offset_of!(T, mmuFaultInfo), 4808);
        assert_eq!(offset_of!(T, mmuFault), 4812);
        assert_eq!(offset_of!(T, startingSM), 4820);
        assert_eq!(
            size_of::<NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS>(),
            8
        );
        type M = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS;
        assert_eq!(size_of::<NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_ENTRY>(), 16);
        assert_eq!(size_of::<M>(), 72);
        assert_eq!(offset_of!(M, count), 64);
    }

    #[test]
    fn notifier() {
        assert_eq!(size_of::<NvNotification>(), 16);
        assert_eq!(offset_of!(NvNotification, info32), 8);
        assert_eq!(offset_of!(NvNotification, info16), 12);
        assert_eq!(offset_of!(NvNotification, status), 14);
        assert_eq!(rc::name(31), Some("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT"));
        assert_eq!(fault_type_name(2), "PTE");
        assert_eq!(access_type_name(1), "VIRT_WRITE");
        assert_eq!(warp_esr::name(0x09), "ILLEGAL_INSTR_ENCODING");
        assert_eq!(
            ctrl_name(0xa06c_0101),
            Some("NVA06C_CTRL_CMD_GPFIFO_SCHEDULE")
        );
    }
}
