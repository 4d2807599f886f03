//! The RPC message format: `rpc_message_header_v03_00`, function numbers and names, the
//! payload structs of the RPCs nvbare sends, and how a reply's result and status decode.

use core::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::gsp::GspError;
use crate::gsp::events::NV_VGPU_MSG_EVENT_FIRST_EVENT;
use crate::gsp::msgq::GSP_MSG_QUEUE_RPC_SIZE_MAX;
use crate::rm::{RmAbi, RmStatus};

/// Bytes of `rpc_message_header_v03_00`.
pub const RPC_HEADER_SIZE: usize = 32;
/// `header_version`: `NV_VGPU_MSG_HEADER_VERSION_MAJOR_TOT` 3 in 31:24, minor 0.
pub const NV_VGPU_MSG_HEADER_VERSION: u32 = 0x0300_0000;
/// `NV_VGPU_MSG_SIGNATURE_VALID` ("VRPC" little-endian).
pub const NV_VGPU_MSG_SIGNATURE_VALID: u32 = 0x4350_5256;
/// `NV_VGPU_MSG_RESULT_RPC_PENDING`: what `rpc_result` holds until GSP-RM answers.
pub const NV_VGPU_MSG_RESULT_RPC_PENDING: u32 = 0xffff_ffff;

/// `NV_VGPU_MSG_FUNCTION_FREE`.
pub const NV_VGPU_MSG_FUNCTION_FREE: u32 = 10;
/// `NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER`.
pub const NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER: u32 = 47;
/// `NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO`.
pub const NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO: u32 = 65;
/// `NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD`.
pub const NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD: u32 = 71;
/// `NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO`.
pub const NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO: u32 = 72;
/// `NV_VGPU_MSG_FUNCTION_SET_REGISTRY`.
pub const NV_VGPU_MSG_FUNCTION_SET_REGISTRY: u32 = 73;
/// `NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL`.
pub const NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL: u32 = 76;
/// `NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC`.
pub const NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC: u32 = 103;
/// `NV_VGPU_MSG_FUNCTION_NUM_FUNCTIONS` (r570).
pub const NV_VGPU_MSG_FUNCTION_NUM_FUNCTIONS: u32 = 227;

/// `RMAPI_RPC_FLAGS_COPYOUT_ON_ERROR`: copy params back even when the control fails.
pub const RMAPI_RPC_FLAGS_COPYOUT_ON_ERROR: u32 = 1;
/// `RMAPI_RPC_FLAGS_SERIALIZED`: params are FINN-serialized (nvbare never sends these).
pub const RMAPI_RPC_FLAGS_SERIALIZED: u32 = 2;

/// `UNLOADING_GUEST_DRIVER` `newLevel` of the open driver's normal unload
/// (`NV2080_CTRL_GPU_SET_POWER_STATE_GPU_LEVEL_0`: `gpuStateDestroy` →
/// `kgspUnloadRm(KGSP_UNLOAD_MODE_NORMAL, LEVEL_0)`), after which it boots GSP-RM again without
/// a reset (module reload). What nvbare sends.
pub const UNLOAD_LEVEL_0: u32 = 0;

/// `GPU_STATE_FLAGS_FAST_UNLOAD` (`1 << 6`) as `newLevel`: the open driver sends it only on
/// system shutdown (`gpuEnterShutdown`: "this skips rmDestruct in GSP"); tinygrad sends it at
/// every unload and resets the GPU before its next boot. Not for an unload that boots again.
pub const UNLOAD_LEVEL_FAST: u32 = 1 << 6;

/// Largest payload a continuation record carries.
pub const CONTINUATION_PAYLOAD_MAX: usize = GSP_MSG_QUEUE_RPC_SIZE_MAX - RPC_HEADER_SIZE;

/// Names of `NV_VGPU_MSG_FUNCTION_*` 0..=226 (`rpc_global_enums.h`, 570.144).
const FUNCTION_NAMES: [&str; 227] = [
    "NOP",
    "SET_GUEST_SYSTEM_INFO",
    "ALLOC_ROOT",
    "ALLOC_DEVICE",
    "ALLOC_MEMORY",
    "ALLOC_CTX_DMA",
    "ALLOC_CHANNEL_DMA",
    "MAP_MEMORY",
    "BIND_CTX_DMA",
    "ALLOC_OBJECT",
    "FREE",
    "LOG",
    "ALLOC_VIDMEM",
    "UNMAP_MEMORY",
    "MAP_MEMORY_DMA",
    "UNMAP_MEMORY_DMA",
    "GET_EDID",
    "ALLOC_DISP_CHANNEL",
    "ALLOC_DISP_OBJECT",
    "ALLOC_SUBDEVICE",
    "ALLOC_DYNAMIC_MEMORY",
    "DUP_OBJECT",
    "IDLE_CHANNELS",
    "ALLOC_EVENT",
    "SEND_EVENT",
    "REMAPPER_CONTROL",
    "DMA_CONTROL",
    "DMA_FILL_PTE_MEM",
    "MANAGE_HW_RESOURCE",
    "BIND_ARBITRARY_CTX_DMA",
    "CREATE_FB_SEGMENT",
    "DESTROY_FB_SEGMENT",
    "ALLOC_SHARE_DEVICE",
    "DEFERRED_API_CONTROL",
    "REMOVE_DEFERRED_API",
    "SIM_ESCAPE_READ",
    "SIM_ESCAPE_WRITE",
    "SIM_MANAGE_DISPLAY_CONTEXT_DMA",
    "FREE_VIDMEM_VIRT",
    "PERF_GET_PSTATE_INFO",
    "PERF_GET_PERFMON_SAMPLE",
    "PERF_GET_VIRTUAL_PSTATE_INFO",
    "PERF_GET_LEVEL_INFO",
    "MAP_SEMA_MEMORY",
    "UNMAP_SEMA_MEMORY",
    "SET_SURFACE_PROPERTIES",
    "CLEANUP_SURFACE",
    "UNLOADING_GUEST_DRIVER",
    "TDR_SET_TIMEOUT_STATE",
    "SWITCH_TO_VGA",
    "GPU_EXEC_REG_OPS",
    "GET_STATIC_INFO",
    "ALLOC_VIRTMEM",
    "UPDATE_PDE_2",
    "SET_PAGE_DIRECTORY",
    "GET_STATIC_PSTATE_INFO",
    "TRANSLATE_GUEST_GPU_PTES",
    "RESERVED_57",
    "RESET_CURRENT_GR_CONTEXT",
    "SET_SEMA_MEM_VALIDATION_STATE",
    "GET_ENGINE_UTILIZATION",
    "UPDATE_GPU_PDES",
    "GET_ENCODER_CAPACITY",
    "VGPU_PF_REG_READ32",
    "SET_GUEST_SYSTEM_INFO_EXT",
    "GET_GSP_STATIC_INFO",
    "RMFS_INIT",
    "RMFS_CLOSE_QUEUE",
    "RMFS_CLEANUP",
    "RMFS_TEST",
    "UPDATE_BAR_PDE",
    "CONTINUATION_RECORD",
    "GSP_SET_SYSTEM_INFO",
    "SET_REGISTRY",
    "GSP_INIT_POST_OBJGPU",
    "SUBDEV_EVENT_SET_NOTIFICATION",
    "GSP_RM_CONTROL",
    "GET_STATIC_INFO2",
    "DUMP_PROTOBUF_COMPONENT",
    "UNSET_PAGE_DIRECTORY",
    "GET_CONSOLIDATED_STATIC_INFO",
    "GMMU_REGISTER_FAULT_BUFFER",
    "GMMU_UNREGISTER_FAULT_BUFFER",
    "GMMU_REGISTER_CLIENT_SHADOW_FAULT_BUFFER",
    "GMMU_UNREGISTER_CLIENT_SHADOW_FAULT_BUFFER",
    "CTRL_SET_VGPU_FB_USAGE",
    "CTRL_NVFBC_SW_SESSION_UPDATE_INFO",
    "CTRL_NVENC_SW_SESSION_UPDATE_INFO",
    "CTRL_RESET_CHANNEL",
    "CTRL_RESET_ISOLATED_CHANNEL",
    "CTRL_GPU_HANDLE_VF_PRI_FAULT",
    "CTRL_CLK_GET_EXTENDED_INFO",
    "CTRL_PERF_BOOST",
    "CTRL_PERF_VPSTATES_GET_CONTROL",
    "CTRL_GET_ZBC_CLEAR_TABLE",
    "CTRL_SET_ZBC_COLOR_CLEAR",
    "CTRL_SET_ZBC_DEPTH_CLEAR",
    "CTRL_GPFIFO_SCHEDULE",
    "CTRL_SET_TIMESLICE",
    "CTRL_PREEMPT",
    "CTRL_FIFO_DISABLE_CHANNELS",
    "CTRL_SET_TSG_INTERLEAVE_LEVEL",
    "CTRL_SET_CHANNEL_INTERLEAVE_LEVEL",
    "GSP_RM_ALLOC",
    "CTRL_GET_P2P_CAPS_V2",
    "CTRL_CIPHER_AES_ENCRYPT",
    "CTRL_CIPHER_SESSION_KEY",
    "CTRL_CIPHER_SESSION_KEY_STATUS",
    "CTRL_DBG_CLEAR_ALL_SM_ERROR_STATES",
    "CTRL_DBG_READ_ALL_SM_ERROR_STATES",
    "CTRL_DBG_SET_EXCEPTION_MASK",
    "CTRL_GPU_PROMOTE_CTX",
    "CTRL_GR_CTXSW_PREEMPTION_BIND",
    "CTRL_GR_SET_CTXSW_PREEMPTION_MODE",
    "CTRL_GR_CTXSW_ZCULL_BIND",
    "CTRL_GPU_INITIALIZE_CTX",
    "CTRL_VASPACE_COPY_SERVER_RESERVED_PDES",
    "CTRL_FIFO_CLEAR_FAULTED_BIT",
    "CTRL_GET_LATEST_ECC_ADDRESSES",
    "CTRL_MC_SERVICE_INTERRUPTS",
    "CTRL_DMA_SET_DEFAULT_VASPACE",
    "CTRL_GET_CE_PCE_MASK",
    "CTRL_GET_ZBC_CLEAR_TABLE_ENTRY",
    "CTRL_GET_NVLINK_PEER_ID_MASK",
    "CTRL_GET_NVLINK_STATUS",
    "CTRL_GET_P2P_CAPS",
    "CTRL_GET_P2P_CAPS_MATRIX",
    "RESERVED_0",
    "CTRL_RESERVE_PM_AREA_SMPC",
    "CTRL_RESERVE_HWPM_LEGACY",
    "CTRL_B0CC_EXEC_REG_OPS",
    "CTRL_BIND_PM_RESOURCES",
    "CTRL_DBG_SUSPEND_CONTEXT",
    "CTRL_DBG_RESUME_CONTEXT",
    "CTRL_DBG_EXEC_REG_OPS",
    "CTRL_DBG_SET_MODE_MMU_DEBUG",
    "CTRL_DBG_READ_SINGLE_SM_ERROR_STATE",
    "CTRL_DBG_CLEAR_SINGLE_SM_ERROR_STATE",
    "CTRL_DBG_SET_MODE_ERRBAR_DEBUG",
    "CTRL_DBG_SET_NEXT_STOP_TRIGGER_TYPE",
    "CTRL_ALLOC_PMA_STREAM",
    "CTRL_PMA_STREAM_UPDATE_GET_PUT",
    "CTRL_FB_GET_INFO_V2",
    "CTRL_FIFO_SET_CHANNEL_PROPERTIES",
    "CTRL_GR_GET_CTX_BUFFER_INFO",
    "CTRL_KGR_GET_CTX_BUFFER_PTES",
    "CTRL_GPU_EVICT_CTX",
    "CTRL_FB_GET_FS_INFO",
    "CTRL_GRMGR_GET_GR_FS_INFO",
    "CTRL_STOP_CHANNEL",
    "CTRL_GR_PC_SAMPLING_MODE",
    "CTRL_PERF_RATED_TDP_GET_STATUS",
    "CTRL_PERF_RATED_TDP_SET_CONTROL",
    "CTRL_FREE_PMA_STREAM",
    "CTRL_TIMER_SET_GR_TICK_FREQ",
    "CTRL_FIFO_SETUP_VF_ZOMBIE_SUBCTX_PDB",
    "GET_CONSOLIDATED_GR_STATIC_INFO",
    "CTRL_DBG_SET_SINGLE_SM_SINGLE_STEP",
    "CTRL_GR_GET_TPC_PARTITION_MODE",
    "CTRL_GR_SET_TPC_PARTITION_MODE",
    "UVM_PAGING_CHANNEL_ALLOCATE",
    "UVM_PAGING_CHANNEL_DESTROY",
    "UVM_PAGING_CHANNEL_MAP",
    "UVM_PAGING_CHANNEL_UNMAP",
    "UVM_PAGING_CHANNEL_PUSH_STREAM",
    "UVM_PAGING_CHANNEL_SET_HANDLES",
    "UVM_METHOD_STREAM_GUEST_PAGES_OPERATION",
    "CTRL_INTERNAL_QUIESCE_PMA_CHANNEL",
    "DCE_RM_INIT",
    "REGISTER_VIRTUAL_EVENT_BUFFER",
    "CTRL_EVENT_BUFFER_UPDATE_GET",
    "GET_PLCABLE_ADDRESS_KIND",
    "CTRL_PERF_LIMITS_SET_STATUS_V2",
    "CTRL_INTERNAL_SRIOV_PROMOTE_PMA_STREAM",
    "CTRL_GET_MMU_DEBUG_MODE",
    "CTRL_INTERNAL_PROMOTE_FAULT_METHOD_BUFFERS",
    "CTRL_FLCN_GET_CTX_BUFFER_SIZE",
    "CTRL_FLCN_GET_CTX_BUFFER_INFO",
    "DISABLE_CHANNELS",
    "CTRL_FABRIC_MEMORY_DESCRIBE",
    "CTRL_FABRIC_MEM_STATS",
    "SAVE_HIBERNATION_DATA",
    "RESTORE_HIBERNATION_DATA",
    "CTRL_INTERNAL_MEMSYS_SET_ZBC_REFERENCED",
    "CTRL_EXEC_PARTITIONS_CREATE",
    "CTRL_EXEC_PARTITIONS_DELETE",
    "CTRL_GPFIFO_GET_WORK_SUBMIT_TOKEN",
    "CTRL_GPFIFO_SET_WORK_SUBMIT_TOKEN_NOTIF_INDEX",
    "PMA_SCRUBBER_SHARED_BUFFER_GUEST_PAGES_OPERATION",
    "CTRL_MASTER_GET_VIRTUAL_FUNCTION_ERROR_CONT_INTR_MASK",
    "SET_SYSMEM_DIRTY_PAGE_TRACKING_BUFFER",
    "CTRL_SUBDEVICE_GET_P2P_CAPS",
    "CTRL_BUS_SET_P2P_MAPPING",
    "CTRL_BUS_UNSET_P2P_MAPPING",
    "CTRL_FLA_SETUP_INSTANCE_MEM_BLOCK",
    "CTRL_GPU_MIGRATABLE_OPS",
    "CTRL_GET_TOTAL_HS_CREDITS",
    "CTRL_GET_HS_CREDITS",
    "CTRL_SET_HS_CREDITS",
    "CTRL_PM_AREA_PC_SAMPLER",
    "INVALIDATE_TLB",
    "CTRL_GPU_QUERY_ECC_STATUS",
    "ECC_NOTIFIER_WRITE_ACK",
    "CTRL_DBG_GET_MODE_MMU_DEBUG",
    "RM_API_CONTROL",
    "CTRL_CMD_INTERNAL_GPU_START_FABRIC_PROBE",
    "CTRL_NVLINK_GET_INBAND_RECEIVED_DATA",
    "GET_STATIC_DATA",
    "RESERVED_208",
    "CTRL_GPU_GET_INFO_V2",
    "GET_BRAND_CAPS",
    "CTRL_CMD_NVLINK_INBAND_SEND_DATA",
    "UPDATE_GPM_GUEST_BUFFER_INFO",
    "CTRL_CMD_INTERNAL_CONTROL_GSP_TRACE",
    "CTRL_SET_ZBC_STENCIL_CLEAR",
    "CTRL_SUBDEVICE_GET_VGPU_HEAP_STATS",
    "CTRL_SUBDEVICE_GET_LIBOS_HEAP_STATS",
    "CTRL_DBG_SET_MODE_MMU_GCC_DEBUG",
    "CTRL_DBG_GET_MODE_MMU_GCC_DEBUG",
    "CTRL_RESERVE_HES",
    "CTRL_RELEASE_HES",
    "CTRL_RESERVE_CCU_PROF",
    "CTRL_RELEASE_CCU_PROF",
    "RESERVED",
    "CTRL_CMD_GET_CHIPLET_HS_CREDIT_POOL",
    "CTRL_CMD_GET_HS_CREDITS_MAPPING",
    "CTRL_EXEC_PARTITIONS_EXPORT",
];

/// Names of `NV_VGPU_MSG_EVENT_*` 0x1001..=0x1022 (570.144).
const EVENT_NAMES: [&str; 34] = [
    "GSP_INIT_DONE",
    "GSP_RUN_CPU_SEQUENCER",
    "POST_EVENT",
    "RC_TRIGGERED",
    "MMU_FAULT_QUEUED",
    "OS_ERROR_LOG",
    "RG_LINE_INTR",
    "GPUACCT_PERFMON_UTIL_SAMPLES",
    "SIM_READ",
    "SIM_WRITE",
    "SEMAPHORE_SCHEDULE_CALLBACK",
    "UCODE_LIBOS_PRINT",
    "VGPU_GSP_PLUGIN_TRIGGERED",
    "PERF_GPU_BOOST_SYNC_LIMITS_CALLBACK",
    "PERF_BRIDGELESS_INFO_UPDATE",
    "VGPU_CONFIG",
    "DISPLAY_MODESET",
    "EXTDEV_INTR_SERVICE",
    "NVLINK_INBAND_RECEIVED_DATA_256",
    "NVLINK_INBAND_RECEIVED_DATA_512",
    "NVLINK_INBAND_RECEIVED_DATA_1024",
    "NVLINK_INBAND_RECEIVED_DATA_2048",
    "NVLINK_INBAND_RECEIVED_DATA_4096",
    "TIMED_SEMAPHORE_RELEASE",
    "NVLINK_IS_GPU_DEGRADED",
    "PFM_REQ_HNDLR_STATE_SYNC_CALLBACK",
    "NVLINK_FAULT_UP",
    "GSP_LOCKDOWN_NOTICE",
    "MIG_CI_CONFIG_UPDATE",
    "UPDATE_GSP_TRACE",
    "NVLINK_FATAL_ERROR_RECOVERY",
    "GSP_POST_NOCAT_RECORD",
    "FECS_ERROR",
    "RECOVERY_ACTION",
];

/// NVIDIA's name of an RPC function or event number, if it has one (r570 numbering).
pub fn function_name(function: u32) -> Option<&'static str> {
    if function < NV_VGPU_MSG_FUNCTION_NUM_FUNCTIONS {
        FUNCTION_NAMES.get(function as usize).copied()
    } else if function > NV_VGPU_MSG_EVENT_FIRST_EVENT {
        EVENT_NAMES
            .get((function - NV_VGPU_MSG_EVENT_FIRST_EVENT - 1) as usize)
            .copied()
    } else {
        None
    }
}

/// Displays a function or event number with its name, e.g. `GSP_RM_CONTROL (76)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionName(pub u32);

impl fmt::Display for FunctionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match function_name(self.0) {
            Some(n) if self.0 >= NV_VGPU_MSG_EVENT_FIRST_EVENT => {
                write!(f, "event {n} ({:#x})", self.0)
            }
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "RPC function {:#x}", self.0),
        }
    }
}

/// NVIDIA's name for an `rpc_result`: an `NV_STATUS` below 0xff000000, else an
/// `NV_VGPU_MSG_RESULT_VMIOP_*` / `_RPC_*` code (`rpc_headers.h`).
pub fn rpc_result_name(result: u32) -> Option<&'static str> {
    if result < 0xff00_0000 {
        return RmStatus(result).name();
    }
    Some(match result {
        0xff00_0001 => "NV_VGPU_MSG_RESULT_VMIOP_INVAL",
        0xff00_0002 => "NV_VGPU_MSG_RESULT_VMIOP_RESOURCE",
        0xff00_0003 => "NV_VGPU_MSG_RESULT_VMIOP_RANGE",
        0xff00_0004 => "NV_VGPU_MSG_RESULT_VMIOP_READ_ONLY",
        0xff00_0005 => "NV_VGPU_MSG_RESULT_VMIOP_NOT_FOUND",
        0xff00_0006 => "NV_VGPU_MSG_RESULT_VMIOP_NO_ADDRESS_SPACE",
        0xff00_0007 => "NV_VGPU_MSG_RESULT_VMIOP_TIMEOUT",
        0xff00_0008 => "NV_VGPU_MSG_RESULT_VMIOP_NOT_ALLOWED_IN_CALLBACK",
        0xff00_0009 => "NV_VGPU_MSG_RESULT_VMIOP_ECC_MISMATCH",
        0xff00_000a => "NV_VGPU_MSG_RESULT_VMIOP_NOT_SUPPORTED",
        0xff10_0001 => "NV_VGPU_MSG_RESULT_RPC_UNKNOWN_FUNCTION",
        0xff10_0002 => "NV_VGPU_MSG_RESULT_RPC_INVALID_MESSAGE_FORMAT",
        0xff10_0003 => "NV_VGPU_MSG_RESULT_RPC_HANDLE_NOT_FOUND",
        0xff10_0004 => "NV_VGPU_MSG_RESULT_RPC_HANDLE_EXISTS",
        0xff10_0005 => "NV_VGPU_MSG_RESULT_RPC_UNKNOWN_RM_ERROR",
        0xff10_0006 => "NV_VGPU_MSG_RESULT_RPC_UNKNOWN_VMIOP_ERROR",
        0xff10_0007 => "NV_VGPU_MSG_RESULT_RPC_RESERVED_HANDLE",
        0xffff_ffff => "NV_VGPU_MSG_RESULT_RPC_PENDING",
        _ => return None,
    })
}

/// Turns a non-zero `rpc_result` into the error RM would return (`_issueRpcAndWait`).
pub fn rpc_result_error(function: u32, result: u32) -> GspError {
    if result < 0xff00_0000 {
        GspError::Status {
            function,
            status: RmStatus(result),
        }
    } else {
        GspError::RpcResult { function, result }
    }
}

/// `rpc_message_header_v03_00` (`g_rpc-message-header.h`).
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_message_header_v03_00 {
    pub header_version: u32,
    pub signature: u32,
    /// Header plus payload bytes in this record.
    pub length: u32,
    pub function: u32,
    pub rpc_result: u32,
    pub rpc_result_private: u32,
    pub sequence: u32,
    /// `u.spare` / `u.cpuRmGfid` (0).
    pub spare: u32,
}

impl rpc_message_header_v03_00 {
    /// A request header as `rpcWriteCommonHeader` fills it.
    pub fn request(function: u32, length: usize, sequence: u32) -> Self {
        rpc_message_header_v03_00 {
            header_version: NV_VGPU_MSG_HEADER_VERSION,
            signature: NV_VGPU_MSG_SIGNATURE_VALID,
            length: length as u32,
            function,
            rpc_result: NV_VGPU_MSG_RESULT_RPC_PENDING,
            rpc_result_private: NV_VGPU_MSG_RESULT_RPC_PENDING,
            sequence,
            spare: 0,
        }
    }
}

/// `rpc_gsp_rm_alloc_v03_00` up to `params[]` (same layout in r535, r570 and r580).
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_gsp_rm_alloc_v03_00 {
    pub hClient: u32,
    pub hParent: u32,
    pub hObject: u32,
    pub hClass: u32,
    pub status: u32,
    pub paramsSize: u32,
    pub flags: u32,
    pub reserved: [u8; 4],
}

/// The r570 (and r535) layout of `rpc_gsp_rm_control_v03_00`: 24 bytes before `params[]`.
pub mod r570 {
    use super::*;

    /// `rpc_gsp_rm_control_v03_00` at 570.144.
    #[allow(non_snake_case, non_camel_case_types, missing_docs)]
    #[repr(C)]
    #[derive(
        Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
    )]
    pub struct rpc_gsp_rm_control_v03_00 {
        pub hClient: u32,
        pub hObject: u32,
        pub cmd: u32,
        pub status: u32,
        pub paramsSize: u32,
        /// `RMAPI_RPC_FLAGS_*`.
        pub flags: u32,
    }
}

/// The r580 layout of `rpc_gsp_rm_control_v03_00` (first seen at 575.51.02): 40 bytes.
pub mod r580 {
    use super::*;

    /// `rpc_gsp_rm_control_v03_00` at 580.142.
    #[allow(non_snake_case, non_camel_case_types, missing_docs)]
    #[repr(C)]
    #[derive(
        Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
    )]
    pub struct rpc_gsp_rm_control_v03_00 {
        pub hClient: u32,
        pub hObject: u32,
        pub cmd: u32,
        pub status: u32,
        pub paramsSize: u32,
        pub rmapiRpcFlags: u32,
        pub rmctrlFlags: u32,
        pub rmctrlAccessRight: u32,
        pub reserved0: u64,
    }
}

/// Bytes of `rpc_gsp_rm_control_v03_00` before `params[]` in a release's layout.
pub fn rm_control_header_size(abi: RmAbi) -> usize {
    match abi {
        RmAbi::R570 => core::mem::size_of::<r570::rpc_gsp_rm_control_v03_00>(),
        RmAbi::R580 => core::mem::size_of::<r580::rpc_gsp_rm_control_v03_00>(),
    }
}

/// `NVOS00_PARAMETERS_v03_00` = `rpc_free_v03_00`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct NVOS00_PARAMETERS_v03_00 {
    pub hRoot: u32,
    pub hObjectParent: u32,
    pub hObjectOld: u32,
    pub status: u32,
}

/// `rpc_unloading_guest_driver_v1F_07`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rpc_unloading_guest_driver_v1F_07 {
    pub bInPMTransition: u8,
    pub bGc6Entering: u8,
    pub _pad: [u8; 2],
    pub newLevel: u32,
}

/// `NV0000_ALLOC_PARAMETERS` (`cl0000.h`): what RM sends when allocating a client.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NV0000_ALLOC_PARAMETERS {
    pub hClient: u32,
    pub processID: u32,
    pub processName: [u8; 100],
    pub _pad: [u8; 4],
    pub pOsPidInfo: u64,
}

pub(super) fn status_at(fixed: &[u8], off: usize) -> u32 {
    match fixed.get(off..off + 4) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// RM's order: the RPC result first, then the status the handler put in the payload.
pub(super) fn check_status(function: u32, rpc_result: u32, status: u32) -> Result<(), GspError> {
    if rpc_result != 0 {
        // GSP-RM copies the handler's status into rpc_result; prefer the specific one.
        if status != 0 {
            return Err(GspError::Status {
                function,
                status: RmStatus(status),
            });
        }
        return Err(rpc_result_error(function, rpc_result));
    }
    if status != 0 {
        return Err(GspError::Status {
            function,
            status: RmStatus(status),
        });
    }
    Ok(())
}
