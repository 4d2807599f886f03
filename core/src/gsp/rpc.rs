//! RPCs to GSP-RM over the message queues.
//!
//! An RPC message is `rpc_message_header_v03_00` (32 bytes) plus a function-specific payload.
//! Messages longer than [`GSP_MSG_QUEUE_RPC_SIZE_MAX`] are split: the first record carries the
//! header and as much payload as fits, then `NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD` (71)
//! records carry the rest (`_issueRpcLarge`, `rpc.c`); replies to large bidirectional RPCs come
//! back split the same way and are reassembled straight into the caller's buffers.
//!
//! Replies are matched by function, as the kernel RM (`_kgspRpcDrainOneEvent`, kernel_gsp.c)
//! and tinygrad match them: whether GSP-RM echoes the header's `sequence` is not public (RM
//! never sets it for GSP). nvbare still numbers its RPCs, and uses an echo when there is one:
//! a reply whose sequence is that of an RPC that already ended (it timed out, or this is a
//! duplicate) is discarded and counted, and a reply with this RPC's sequence but another
//! function is a [`GspError::ReplyMismatch`]. A reply with sequence 0 (no echo) or any other
//! value is taken by its function alone.
//!
//! Events that arrive while waiting are dispatched ([`super::events`]), never dropped.
//!
//! [`GspRpc`] is the transport with the typed RPCs boot needs; [`GspRm`] adds a client, a
//! handle counter and object tracking and implements [`Rm`].

use core::fmt;
use core::time::Duration;

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::GspError;
use super::events::{
    Disposition, EventContext, EventHandler, EventQueue, GspEvent, NV_VGPU_MSG_EVENT_FIRST_EVENT,
    NoHandler, OsErrorLog, PayloadRead, RawEvent, RcTriggered,
};
use super::msgq::{GSP_MSG_QUEUE_RPC_SIZE_MAX, MsgQueue, Record};
use super::sysinfo::{GspStaticConfigInfo, GspSystemInfo};
use crate::hal::{Clock, DmaBuffer, Mmio, poll_until};
use crate::rm::{Handle, Rm, RmAbi, RmError, RmOp, RmStatus, class};

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

/// Tunables of the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GspConfig {
    /// Struct layouts GSP-RM speaks (r570.144 firmware: [`RmAbi::R570`]).
    pub abi: RmAbi,
    /// How long to wait for a reply (RM: 1.5 x its default timeout).
    pub reply_timeout: Duration,
    /// How long to wait for command-queue space (RM: 1 s).
    pub send_timeout: Duration,
    /// Pause between polls of the status queue.
    pub poll_interval: Duration,
}

impl Default for GspConfig {
    fn default() -> Self {
        GspConfig {
            abi: RmAbi::R570,
            reply_timeout: Duration::from_secs(6),
            send_timeout: Duration::from_secs(1),
            poll_interval: Duration::from_micros(1),
        }
    }
}

/// Counters of the RPC layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// RPCs answered.
    pub rpcs: u64,
    /// RPCs sent without waiting (SET_SYSTEM_INFO, SET_REGISTRY).
    pub async_sends: u64,
    /// Continuation records sent.
    pub continuations_sent: u64,
    /// Continuation records received.
    pub continuations_received: u64,
    /// Events received.
    pub events: u64,
    /// Replies nobody waited for (older sequence, or no RPC in flight), discarded.
    pub stale_replies: u64,
    /// Continuation records with no message to continue, discarded.
    pub stray_continuations: u64,
    /// RC_TRIGGERED events.
    pub rc_triggered: u64,
    /// MMU_FAULT_QUEUED events.
    pub mmu_faults_queued: u64,
    /// OS_ERROR_LOG (Xid) events.
    pub xids: u64,
    /// Received messages whose header signature was not "VRPC".
    pub bad_signatures: u64,
}

/// The header of an answered RPC and how many payload bytes came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The first record's RPC header.
    pub header: rpc_message_header_v03_00,
    /// Payload bytes received (all records).
    pub len: usize,
}

/// An awaited event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventInfo {
    /// Its header's `rpc_result`.
    pub rpc_result: u32,
    /// Its parsed payload.
    pub event: GspEvent,
}

/// Decides from the reply header and fixed part whether params are copied back.
type CopyPolicy = fn(&rpc_message_header_v03_00, &[u8]) -> bool;

struct ReplyState<'a> {
    function: u32,
    seq: u32,
    fixed: &'a mut [u8],
    params: &'a mut [u8],
    /// Fewest payload bytes a successful reply may have.
    min: usize,
    policy: CopyPolicy,
    copy_params: bool,
    got: usize,
    first: Option<rpc_message_header_v03_00>,
}

impl ReplyState<'_> {
    fn expected(&self) -> usize {
        self.fixed.len() + self.params.len()
    }

    /// Copies `n` payload bytes of `rec` starting at payload offset `from` to body offset `at`.
    fn copy<B: DmaBuffer>(
        &mut self,
        q: &MsgQueue<B>,
        rec: &Record,
        from: usize,
        at: usize,
        n: usize,
    ) -> Result<(), GspError> {
        let f = self.fixed.len();
        // Part in `fixed`.
        if at < f {
            let k = (f - at).min(n);
            if let Some(dst) = self.fixed.get_mut(at..at + k) {
                q.read(rec, RPC_HEADER_SIZE + from, dst)?;
            }
        }
        // Part in `params`.
        let end = at + n;
        if self.copy_params && end > f {
            let p0 = at.max(f) - f;
            let p1 = end - f;
            let src = from + (at.max(f) - at);
            if let Some(dst) = self.params.get_mut(p0..p1) {
                q.read(rec, RPC_HEADER_SIZE + src, dst)?;
            }
        }
        Ok(())
    }
}

#[allow(clippy::large_enum_variant)]
enum Want<'a> {
    Nothing,
    Reply(ReplyState<'a>),
    Event {
        function: u32,
        got: Option<EventInfo>,
    },
}

/// The part of [`GspRpc`] that polls (separate from the clock so a poll closure can borrow
/// both).
struct Core<B: DmaBuffer, M: Mmio, H: EventHandler> {
    msgq: MsgQueue<B>,
    bar0: M,
    handler: H,
    next_seq: u32,
    /// Sequence numbers of the last RPCs that ended (answered or timed out): an echo of one
    /// of them is a stale or duplicated reply.
    ended: heapless::Deque<u32, 16>,
    events: EventQueue,
    last_rc: Option<RcTriggered>,
    last_os_error: Option<OsErrorLog>,
    stats: RpcStats,
}

/// Reads an event payload out of the status queue.
struct RecordPayload<'q, B: DmaBuffer> {
    q: &'q MsgQueue<B>,
    rec: &'q Record,
}

impl<B: DmaBuffer> PayloadRead for RecordPayload<'_, B> {
    fn read_payload(&self, offset: usize, dst: &mut [u8]) -> Result<(), GspError> {
        let at = offset
            .checked_add(RPC_HEADER_SIZE)
            .ok_or(GspError::Malformed {
                function: self.rec.rpc.function,
                len: self.rec.payload_len(),
                need: usize::MAX,
            })?;
        self.q.read(self.rec, at, dst)
    }
}

/// How one [`Core::pump`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pumped {
    /// What was wanted arrived.
    Satisfied,
    /// The status queue is empty.
    Drained,
    /// A ring's worth of messages was handled and more are waiting.
    Budget,
}

impl<B: DmaBuffer, M: Mmio, H: EventHandler> Core<B, M, H> {
    /// Handles status-queue messages until `want` is satisfied, the queue is empty, or one
    /// ring's worth (the status queue's element count) has been handled. The bound keeps a GSP
    /// that refills the queue as fast as it is read from holding the caller past its deadline.
    /// `deadline` (clock time) is handed to event handlers; `records` counts what was handled.
    fn pump<C: Clock + ?Sized>(
        &mut self,
        clock: &C,
        want: &mut Want<'_>,
        deadline: Duration,
        records: &mut u64,
    ) -> Result<Pumped, GspError> {
        for _ in 0..self.msgq.rx_msg_count().max(1) {
            let Some(rec) = self.msgq.receive()? else {
                return Ok(Pumped::Drained);
            };
            *records += 1;
            let f = rec.rpc.function;
            let s = rec.rpc.sequence;
            if rec.rpc.signature != NV_VGPU_MSG_SIGNATURE_VALID {
                self.stats.bad_signatures += 1;
                log::warn!(
                    "gsp: message {} has signature {:#x}",
                    rec.seq,
                    rec.rpc.signature
                );
            }
            if let Want::Reply(st) = want {
                // An echo of an RPC that already ended is stale; anything else may be ours.
                let seq_ok = s == st.seq || s == 0 || !self.ended.iter().any(|&e| e == s);
                if st.first.is_none() && f == st.function && seq_ok {
                    let r = self.take_first(st, &rec);
                    self.msgq.consume(&rec)?;
                    r?;
                    // Only a full record can be continued.
                    let last = rec.rpc.length as usize != GSP_MSG_QUEUE_RPC_SIZE_MAX;
                    if st.got >= st.expected()
                        || last
                        || st.first.is_some_and(|h| h.rpc_result != 0)
                    {
                        return Ok(Pumped::Satisfied);
                    }
                    continue;
                }
                if st.first.is_some() && f == NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD && seq_ok {
                    let n = rec.payload_len().min(st.expected() - st.got);
                    let at = st.got;
                    let r = st.copy(&self.msgq, &rec, 0, at, n);
                    self.msgq.consume(&rec)?;
                    r?;
                    st.got += n;
                    self.stats.continuations_received += 1;
                    if st.got >= st.expected() {
                        return Ok(Pumped::Satisfied);
                    }
                    if rec.rpc.length as usize != GSP_MSG_QUEUE_RPC_SIZE_MAX {
                        return Err(GspError::ReplyTooShort {
                            function: st.function,
                            expected: st.expected(),
                            got: st.got,
                        });
                    }
                    continue;
                }
                if f < NV_VGPU_MSG_EVENT_FIRST_EVENT
                    && f != NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD
                    && s == st.seq
                    && st.first.is_none()
                {
                    self.msgq.consume(&rec)?;
                    return Err(GspError::ReplyMismatch {
                        expected_function: st.function,
                        function: f,
                        sequence: s,
                    });
                }
            }
            if f >= NV_VGPU_MSG_EVENT_FIRST_EVENT {
                if let Want::Event { function, got } = want
                    && *function == f
                {
                    let ev = {
                        let r = RecordPayload {
                            q: &self.msgq,
                            rec: &rec,
                        };
                        GspEvent::parse(f, rec.rpc.rpc_result, rec.payload_len(), &r)
                    };
                    self.msgq.consume(&rec)?;
                    self.stats.events += 1;
                    *got = Some(EventInfo {
                        rpc_result: rec.rpc.rpc_result,
                        event: ev,
                    });
                    return Ok(Pumped::Satisfied);
                }
                self.dispatch(clock, deadline, &rec)?;
                continue;
            }
            self.msgq.consume(&rec)?;
            if f == NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD {
                self.stats.stray_continuations += 1;
                log::warn!("gsp: discarding continuation record nobody waits for");
            } else {
                self.stats.stale_replies += 1;
                log::warn!(
                    "gsp: discarding reply {} seq {s} nobody waits for",
                    FunctionName(f)
                );
                self.events.push(GspEvent::UnexpectedReply {
                    function: f,
                    sequence: s,
                });
            }
        }
        Ok(Pumped::Budget)
    }

    fn take_first(&mut self, st: &mut ReplyState<'_>, rec: &Record) -> Result<(), GspError> {
        let len = rec.payload_len();
        let n = len.min(st.expected());
        // The fixed part first: the copy policy looks at its status field.
        let nf = n.min(st.fixed.len());
        if let Some(dst) = st.fixed.get_mut(..nf) {
            self.msgq.read(rec, RPC_HEADER_SIZE, dst)?;
        }
        st.copy_params = (st.policy)(&rec.rpc, st.fixed);
        if n > nf {
            st.copy(&self.msgq, rec, nf, nf, n - nf)?;
        }
        st.got = n;
        st.first = Some(rec.rpc);
        if n < st.min.min(st.expected())
            && rec.rpc.rpc_result == 0
            && rec.rpc.length as usize != GSP_MSG_QUEUE_RPC_SIZE_MAX
        {
            return Err(GspError::ReplyTooShort {
                function: st.function,
                expected: st.expected(),
                got: n,
            });
        }
        Ok(())
    }

    /// Parses an event, offers it to the handler, records it, and consumes it.
    fn dispatch<C: Clock + ?Sized>(
        &mut self,
        clock: &C,
        deadline: Duration,
        rec: &Record,
    ) -> Result<(), GspError> {
        let f = rec.rpc.function;
        let len = rec.payload_len();
        let r = RecordPayload { q: &self.msgq, rec };
        let parsed = GspEvent::parse(f, rec.rpc.rpc_result, len, &r);
        let raw = RawEvent::new(f, rec.rpc.rpc_result, len, &parsed, &r);
        let disp = self.handler.on_event(
            EventContext {
                bar0: &self.bar0,
                clock,
                deadline,
            },
            &raw,
        );
        self.msgq.consume(rec)?;
        self.stats.events += 1;
        match &parsed {
            GspEvent::RcTriggered(rc) => {
                self.stats.rc_triggered += 1;
                log::error!(
                    "gsp: channel {} reset (RC, exception {}) on engine type {}",
                    rc.chid,
                    rc.except_type,
                    rc.engine_type
                );
                self.last_rc = Some(*rc);
            }
            GspEvent::OsErrorLog(x) => {
                self.stats.xids += 1;
                log::error!("gsp: Xid {}: {}", x.except_type, x.text);
                self.last_os_error = Some(x.clone());
            }
            GspEvent::MmuFaultQueued => self.stats.mmu_faults_queued += 1,
            GspEvent::Malformed {
                function,
                len,
                need,
            } => log::warn!(
                "gsp: {} payload of {len} bytes, layout needs {need}",
                FunctionName(*function)
            ),
            _ => log::debug!("gsp: {}", FunctionName(f)),
        }
        match disp? {
            Disposition::Handled => {}
            Disposition::Queue => self.events.push(parsed),
        }
        Ok(())
    }
}

/// The RPC transport to GSP-RM over a [`MsgQueue`], with the typed RPCs boot needs.
///
/// `M` is BAR0 (for the doorbell; use `&Bar0` to share it with the boot code), `C` the clock,
/// `H` the [`EventHandler`] that services events synchronously.
pub struct GspRpc<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler = NoHandler> {
    clock: C,
    cfg: GspConfig,
    core: Core<B, M, H>,
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> fmt::Debug for GspRpc<B, M, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GspRpc")
            .field("cfg", &self.cfg)
            .field("stats", &self.core.stats)
            .field("msgq", self.core.msgq.stats())
            .finish_non_exhaustive()
    }
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> GspRpc<B, M, C, H> {
    /// A transport over `msgq`.
    pub fn new(msgq: MsgQueue<B>, bar0: M, clock: C, handler: H, cfg: GspConfig) -> Self {
        GspRpc {
            clock,
            cfg,
            core: Core {
                msgq,
                bar0,
                handler,
                next_seq: 1,
                ended: heapless::Deque::new(),
                events: EventQueue::default(),
                last_rc: None,
                last_os_error: None,
                stats: RpcStats::default(),
            },
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GspConfig {
        &self.cfg
    }

    /// Changes the configuration (e.g. a longer timeout for boot).
    pub fn config_mut(&mut self) -> &mut GspConfig {
        &mut self.cfg
    }

    /// The message queues.
    pub fn msgq(&self) -> &MsgQueue<B> {
        &self.core.msgq
    }

    /// The event handler.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.core.handler
    }

    /// BAR0.
    pub fn bar0(&self) -> &M {
        &self.core.bar0
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// RPC-layer counters.
    pub fn stats(&self) -> &RpcStats {
        &self.core.stats
    }

    /// Takes the queued events (and their dropped count), leaving an empty queue.
    pub fn take_events(&mut self) -> EventQueue {
        core::mem::take(&mut self.core.events)
    }

    /// The queued events.
    pub fn events(&self) -> &EventQueue {
        &self.core.events
    }

    /// The most recent channel reset, if any (kept apart from the queue).
    pub fn last_rc(&self) -> Option<RcTriggered> {
        self.core.last_rc
    }

    /// The most recent Xid, if any.
    pub fn last_os_error(&self) -> Option<&OsErrorLog> {
        self.core.last_os_error.as_ref()
    }

    fn next_seq(&mut self) -> u32 {
        let s = self.core.next_seq;
        // 0 is what a firmware that ignores the field would echo; never use it.
        self.core.next_seq = match s.wrapping_add(1) {
            0 => 1,
            n => n,
        };
        s
    }

    /// Sends one RPC (splitting it into continuation records when large) without waiting.
    fn send(
        &mut self,
        function: u32,
        seq: u32,
        fixed: &[u8],
        params: &[u8],
    ) -> Result<(), GspError> {
        let body = fixed.len() + params.len();
        let total = RPC_HEADER_SIZE + body;
        let first = total.min(GSP_MSG_QUEUE_RPC_SIZE_MAX);
        if fixed.len() > first - RPC_HEADER_SIZE {
            return Err(GspError::MessageTooLarge {
                len: fixed.len(),
                max: CONTINUATION_PAYLOAD_MAX,
            });
        }
        let in_first = first - RPC_HEADER_SIZE - fixed.len();
        let (p1, mut rest) = params.split_at(in_first.min(params.len()));
        let hdr = rpc_message_header_v03_00::request(function, first, seq);
        let (t, i) = (self.cfg.send_timeout, self.cfg.poll_interval);
        let c = &mut self.core;
        c.msgq
            .send(&c.bar0, &self.clock, t, i, &[hdr.as_bytes(), fixed, p1])?;
        while !rest.is_empty() {
            let (chunk, r) = rest.split_at(rest.len().min(CONTINUATION_PAYLOAD_MAX));
            let h = rpc_message_header_v03_00::request(
                NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD,
                RPC_HEADER_SIZE + chunk.len(),
                seq,
            );
            c.msgq
                .send(&c.bar0, &self.clock, t, i, &[h.as_bytes(), chunk])?;
            c.stats.continuations_sent += 1;
            rest = r;
        }
        Ok(())
    }

    /// Sends an RPC whose payload is `fixed ++ params` and waits for its reply, copying the
    /// reply's payload back over `fixed` and (when `policy` allows) `params`.
    pub fn call(
        &mut self,
        function: u32,
        fixed: &mut [u8],
        params: &mut [u8],
        policy: fn(&rpc_message_header_v03_00, &[u8]) -> bool,
    ) -> Result<Reply, GspError> {
        let min = fixed.len() + params.len();
        self.call_min(function, fixed, params, policy, min)
    }

    /// [`GspRpc::call`] accepting a successful reply of at least `min` payload bytes; what a
    /// shorter reply leaves out of `fixed ++ params` keeps what was sent.
    fn call_min(
        &mut self,
        function: u32,
        fixed: &mut [u8],
        params: &mut [u8],
        policy: fn(&rpc_message_header_v03_00, &[u8]) -> bool,
        min: usize,
    ) -> Result<Reply, GspError> {
        let seq = self.next_seq();
        self.send(function, seq, fixed, params)?;
        let mut want = Want::Reply(ReplyState {
            function,
            seq,
            fixed,
            params,
            min,
            policy,
            copy_params: false,
            got: 0,
            first: None,
        });
        let r = self.wait(
            &mut want,
            self.cfg.reply_timeout,
            "a reply from GSP-RM",
            function,
        );
        let ended = &mut self.core.ended;
        if ended.is_full() {
            ended.pop_front();
        }
        let _ = ended.push_back(seq);
        let Want::Reply(st) = want else {
            return Err(GspError::Handler("internal: reply state lost"));
        };
        r?;
        self.core.stats.rpcs += 1;
        let header = st
            .first
            .ok_or(GspError::Handler("internal: reply without header"))?;
        Ok(Reply {
            header,
            len: st.got,
        })
    }

    /// Sends an RPC GSP-RM does not answer (SET_SYSTEM_INFO, SET_REGISTRY).
    pub fn send_async(&mut self, function: u32, payload: &[u8]) -> Result<(), GspError> {
        let seq = self.next_seq();
        self.send(function, seq, &[], payload)?;
        self.core.stats.async_sends += 1;
        Ok(())
    }

    fn wait(
        &mut self,
        want: &mut Want<'_>,
        timeout: Duration,
        what: &'static str,
        function: u32,
    ) -> Result<(), GspError> {
        let clock = &self.clock;
        let cfg = &self.cfg;
        let core = &mut self.core;
        let deadline = clock.now().saturating_add(timeout);
        let (mut records, mut flooding) = (0u64, false);
        let r: Result<(), GspError> = poll_until(clock, timeout, cfg.poll_interval, what, || {
            let p = core.pump(clock, want, deadline, &mut records)?;
            flooding = p == Pumped::Budget;
            Ok((p == Pumped::Satisfied).then_some(()))
        });
        r.map_err(|e| match e {
            GspError::Timeout { what, waited, .. } if flooding => GspError::Flood {
                what,
                function,
                records,
                waited,
            },
            GspError::Timeout { what, waited, .. } => GspError::Timeout {
                what,
                function,
                waited,
            },
            e => e,
        })
    }

    /// Handles what GSP-RM has sent, without waiting (at most one ring's worth of messages, so
    /// a flooding GSP cannot keep the caller here); returns the events now queued. Event
    /// handlers get [`GspConfig::reply_timeout`] from now as their deadline.
    pub fn poll_events(&mut self) -> Result<usize, GspError> {
        let mut want = Want::Nothing;
        let deadline = self.clock.now().saturating_add(self.cfg.reply_timeout);
        self.core.pump(&self.clock, &mut want, deadline, &mut 0)?;
        Ok(self.core.events.len())
    }

    /// Waits for event `function` (e.g. GSP_INIT_DONE), dispatching everything before it.
    /// The awaited event is returned, not queued; a non-zero `rpc_result` in it is an error.
    pub fn wait_event(&mut self, function: u32, timeout: Duration) -> Result<EventInfo, GspError> {
        let mut want = Want::Event {
            function,
            got: None,
        };
        self.wait(&mut want, timeout, "an event from GSP-RM", function)?;
        let Want::Event { got: Some(ev), .. } = want else {
            return Err(GspError::Handler("internal: event lost"));
        };
        if ev.rpc_result != 0 {
            return Err(rpc_result_error(function, ev.rpc_result));
        }
        Ok(ev)
    }

    /// GSP_SET_SYSTEM_INFO (72): queued before boot, not answered.
    pub fn set_system_info(&mut self, info: &GspSystemInfo) -> Result<(), GspError> {
        self.send_async(NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO, info.as_bytes())
    }

    /// SET_REGISTRY (73) with a table built by [`super::registry::pack`]: not answered.
    pub fn set_registry(&mut self, table: &[u8]) -> Result<(), GspError> {
        self.send_async(NV_VGPU_MSG_FUNCTION_SET_REGISTRY, table)
    }

    /// GET_GSP_STATIC_INFO (65).
    pub fn get_gsp_static_info(&mut self) -> Result<GspStaticConfigInfo, GspError> {
        let mut info = GspStaticConfigInfo::new_zeroed();
        let f = NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO;
        let r = self.call(f, &mut [], info.as_mut_bytes(), |h, _| h.rpc_result == 0)?;
        if r.header.rpc_result != 0 {
            return Err(rpc_result_error(f, r.header.rpc_result));
        }
        Ok(info)
    }

    /// UNLOADING_GUEST_DRIVER (47): asks GSP-RM to shut down (`newLevel`: [`UNLOAD_LEVEL_0`]
    /// for an unload after which GSP-RM boots again, as `kgspUnloadRm` sends).
    pub fn unloading_guest_driver(
        &mut self,
        in_pm_transition: bool,
        gc6_entering: bool,
        new_level: u32,
    ) -> Result<(), GspError> {
        let mut p = rpc_unloading_guest_driver_v1F_07 {
            bInPMTransition: in_pm_transition as u8,
            bGc6Entering: gc6_entering as u8,
            _pad: [0; 2],
            newLevel: new_level,
        };
        let f = NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER;
        let r = self.call(f, p.as_mut_bytes(), &mut [], |_, _| false)?;
        if r.header.rpc_result != 0 {
            return Err(rpc_result_error(f, r.header.rpc_result));
        }
        Ok(())
    }

    /// GSP_RM_ALLOC (103): allocates `object` of `class` under `parent` in `client`, with the
    /// class's alloc params (copied back on success).
    pub fn rm_alloc(
        &mut self,
        client: Handle,
        parent: Handle,
        object: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<(), GspError> {
        let mut a = rpc_gsp_rm_alloc_v03_00 {
            hClient: client.0,
            hParent: parent.0,
            hObject: object.0,
            hClass: class,
            status: 0,
            paramsSize: params.len() as u32,
            flags: 0,
            reserved: [0; 4],
        };
        let f = NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC;
        // The kernel RM copies paramsSize bytes back without checking the reply's length
        // (rpcRmApiAlloc_GSP): a reply with the fixed part only is a success, and the
        // parameters keep what was sent.
        let min = size_of::<rpc_gsp_rm_alloc_v03_00>();
        let r = self.call_min(
            f,
            a.as_mut_bytes(),
            params,
            |h, fixed| h.rpc_result == 0 && status_at(fixed, 16) == 0,
            min,
        )?;
        check_status(f, r.header.rpc_result, a.status)
    }

    /// GSP_RM_CONTROL (76): runs control `cmd` on `object`; params are copied back on success
    /// (or when GSP-RM sets `RMAPI_RPC_FLAGS_COPYOUT_ON_ERROR`).
    pub fn rm_control(
        &mut self,
        client: Handle,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), GspError> {
        let f = NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL;
        fn policy(h: &rpc_message_header_v03_00, fixed: &[u8]) -> bool {
            let ok = h.rpc_result == 0 && status_at(fixed, 12) == 0;
            ok || status_at(fixed, 20) & RMAPI_RPC_FLAGS_COPYOUT_ON_ERROR != 0
        }
        let (result, status) = match self.cfg.abi {
            RmAbi::R570 => {
                let mut c = r570::rpc_gsp_rm_control_v03_00 {
                    hClient: client.0,
                    hObject: object.0,
                    cmd,
                    status: 0,
                    paramsSize: params.len() as u32,
                    flags: 0,
                };
                let r = self.call(f, c.as_mut_bytes(), params, policy)?;
                (r.header.rpc_result, c.status)
            }
            RmAbi::R580 => {
                let mut c = r580::rpc_gsp_rm_control_v03_00 {
                    hClient: client.0,
                    hObject: object.0,
                    cmd,
                    paramsSize: params.len() as u32,
                    ..Default::default()
                };
                let r = self.call(f, c.as_mut_bytes(), params, policy)?;
                (r.header.rpc_result, c.status)
            }
        };
        check_status(f, result, status)
    }

    /// FREE (10): frees `object` (and what is under it) in `client`.
    pub fn rm_free(&mut self, client: Handle, object: Handle) -> Result<(), GspError> {
        // rpcRmApiFree_GSP passes NV01_NULL_OBJECT as the parent.
        let mut p = NVOS00_PARAMETERS_v03_00 {
            hRoot: client.0,
            hObjectParent: 0,
            hObjectOld: object.0,
            status: 0,
        };
        let f = NV_VGPU_MSG_FUNCTION_FREE;
        let r = self.call(f, p.as_mut_bytes(), &mut [], |_, _| false)?;
        check_status(f, r.header.rpc_result, p.status)
    }
}

fn status_at(fixed: &[u8], off: usize) -> u32 {
    match fixed.get(off..off + 4) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// RM's order: the RPC result first, then the status the handler put in the payload.
fn check_status(function: u32, rpc_result: u32, status: u32) -> Result<(), GspError> {
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

/// Most objects a [`GspRm`] tracks.
pub const MAX_TRACKED_OBJECTS: usize = 1024;

/// Which client a [`GspRm`] uses and where its handle counter starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// The client handle (chosen by the caller, as GSP-RM expects; tinygrad uses 0xc1000000).
    pub client: Handle,
    /// First object handle handed out (tinygrad: 0xcf000000).
    pub first_handle: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client: Handle(0xc100_0000),
            first_handle: 0xcf00_0000,
        }
    }
}

/// [`GspRm::open`] failed; the transport is handed back.
pub struct OpenError<T> {
    /// The transport.
    pub rpc: T,
    /// Why.
    pub error: GspError,
}

impl<T> fmt::Debug for OpenError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// The Resource Manager in GSP-RM, reached by RPC: implements [`Rm`] (r570 layouts).
///
/// Handles are chosen here (GSP-RM takes the handle the client names) from a counter that
/// skips handles still in use; live objects are tracked with their parents so that freeing an
/// object forgets its descendants too, as RM frees them.
pub struct GspRm<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler = NoHandler> {
    rpc: GspRpc<B, M, C, H>,
    client: Handle,
    owns_client: bool,
    next_handle: u32,
    first_handle: u32,
    objects: heapless::Vec<(Handle, Handle), MAX_TRACKED_OBJECTS>,
    last_error: Option<GspError>,
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> fmt::Debug for GspRm<B, M, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GspRm")
            .field("client", &self.client)
            .field("objects", &self.objects.len())
            .field("rpc", &self.rpc)
            .finish_non_exhaustive()
    }
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> GspRm<B, M, C, H> {
    /// Allocates client `cfg.client` (NV01_ROOT) and returns an [`Rm`] over it.
    // The error hands the transport back (no heap to box it in).
    #[allow(clippy::result_large_err)]
    pub fn open(
        mut rpc: GspRpc<B, M, C, H>,
        cfg: ClientConfig,
    ) -> Result<Self, OpenError<GspRpc<B, M, C, H>>> {
        let mut p = NV0000_ALLOC_PARAMETERS::new_zeroed();
        p.hClient = cfg.client.0;
        p.processName[..6].copy_from_slice(b"nvbare");
        match rpc.rm_alloc(
            cfg.client,
            Handle(0),
            cfg.client,
            class::NV01_ROOT,
            p.as_mut_bytes(),
        ) {
            Ok(()) => Ok(Self::with_client(rpc, cfg, true)),
            Err(error) => Err(OpenError { rpc, error }),
        }
    }

    /// An [`Rm`] over a client that already exists (e.g. GSP-RM's internal client,
    /// `GspStaticConfigInfo::hInternalClient`). It is not freed by [`GspRm::close`].
    pub fn with_existing_client(rpc: GspRpc<B, M, C, H>, cfg: ClientConfig) -> Self {
        Self::with_client(rpc, cfg, false)
    }

    fn with_client(rpc: GspRpc<B, M, C, H>, cfg: ClientConfig, owns_client: bool) -> Self {
        GspRm {
            rpc,
            client: cfg.client,
            owns_client,
            next_handle: cfg.first_handle,
            first_handle: cfg.first_handle,
            objects: heapless::Vec::new(),
            last_error: None,
        }
    }

    /// The transport (events, statistics, typed RPCs).
    pub fn rpc(&mut self) -> &mut GspRpc<B, M, C, H> {
        &mut self.rpc
    }

    /// Takes the queued events; see [`GspRpc::take_events`].
    pub fn take_events(&mut self) -> EventQueue {
        self.rpc.take_events()
    }

    /// The most recent channel reset; see [`GspRpc::last_rc`].
    pub fn last_rc(&self) -> Option<RcTriggered> {
        self.rpc.last_rc()
    }

    /// The detailed error behind the last [`RmError`] this `Rm` returned.
    pub fn last_error(&self) -> Option<GspError> {
        self.last_error
    }

    /// Live objects and their parents.
    pub fn objects(&self) -> &[(Handle, Handle)] {
        &self.objects
    }

    /// Frees the client (if this `Rm` allocated it) and returns the transport.
    #[allow(clippy::result_large_err, clippy::type_complexity)]
    pub fn close(mut self) -> Result<GspRpc<B, M, C, H>, OpenError<GspRpc<B, M, C, H>>> {
        if self.owns_client
            && let Err(error) = self.rpc.rm_free(self.client, self.client)
        {
            return Err(OpenError {
                rpc: self.rpc,
                error,
            });
        }
        Ok(self.rpc)
    }

    fn new_handle(&mut self) -> Result<Handle, GspError> {
        for _ in 0..=MAX_TRACKED_OBJECTS + 1 {
            let h = self.next_handle;
            self.next_handle = match h.checked_add(1) {
                Some(n) => n,
                None => self.first_handle,
            };
            let used = h == self.client.0 || self.objects.iter().any(|o| o.0.0 == h);
            if !used && h != 0 {
                return Ok(Handle(h));
            }
        }
        Err(GspError::HandlesExhausted)
    }

    fn forget(&mut self, object: Handle) {
        // Remove the object, then repeatedly everything whose parent is gone.
        self.objects.retain(|o| o.0 != object);
        loop {
            let before = self.objects.len();
            let snapshot = self.objects.clone();
            self.objects
                .retain(|o| o.1 == self.client || snapshot.iter().any(|p| p.0 == o.1));
            if self.objects.len() == before {
                break;
            }
        }
    }

    fn fail(&mut self, op: RmOp, e: GspError) -> RmError {
        self.last_error = Some(e);
        to_rm_error(op, e)
    }
}

/// Maps a transport error to the [`Rm`] trait's error.
pub fn to_rm_error(op: RmOp, e: GspError) -> RmError {
    match e {
        GspError::Status { status, .. } => RmError::Status { op, status },
        GspError::Timeout { .. } => RmError::Timeout { op },
        GspError::QueueFull { .. } => RmError::Transport {
            op,
            what: "GSP command queue full (GSP-RM stopped consuming)",
            errno: None,
        },
        GspError::RpcResult { .. } => RmError::Transport {
            op,
            what: "GSP-RM rejected the RPC",
            errno: None,
        },
        GspError::TooManyObjects => RmError::Transport {
            op,
            what: "too many live RM objects in this client",
            errno: None,
        },
        GspError::MessageTooLarge { .. } => RmError::Transport {
            op,
            what: "params too large for the GSP message queue",
            errno: None,
        },
        _ => RmError::Transport {
            op,
            what: "GSP message queue failure (see GspRm::last_error)",
            errno: None,
        },
    }
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> Rm for GspRm<B, M, C, H> {
    fn client(&self) -> Handle {
        self.client
    }

    fn abi(&self) -> RmAbi {
        self.rpc.cfg.abi
    }

    fn alloc(&mut self, parent: Handle, class: u32, params: &mut [u8]) -> Result<Handle, RmError> {
        let op = RmOp::Alloc { parent, class };
        if self.objects.is_full() {
            return Err(self.fail(op, GspError::TooManyObjects));
        }
        let h = self.new_handle().map_err(|e| self.fail(op, e))?;
        let client = self.client;
        self.rpc
            .rm_alloc(client, parent, h, class, params)
            .map_err(|e| self.fail(op, e))?;
        // Cannot fail: checked for room above.
        let _ = self.objects.push((h, parent));
        Ok(h)
    }

    fn control(&mut self, object: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmError> {
        let op = RmOp::Control { object, cmd };
        let client = self.client;
        self.rpc
            .rm_control(client, object, cmd, params)
            .map_err(|e| self.fail(op, e))
    }

    fn free(&mut self, object: Handle) -> Result<(), RmError> {
        let op = RmOp::Free { object };
        let client = self.client;
        let r = self.rpc.rm_free(client, object);
        match r {
            Ok(()) => {
                self.forget(object);
                Ok(())
            }
            Err(e) => Err(self.fail(op, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn abi_layouts() {
        // g_rpc-message-header.h; gsp_abi_check.c (570.144).
        assert_eq!(size_of::<rpc_message_header_v03_00>(), RPC_HEADER_SIZE);
        assert_eq!(offset_of!(rpc_message_header_v03_00, length), 8);
        assert_eq!(offset_of!(rpc_message_header_v03_00, function), 12);
        assert_eq!(offset_of!(rpc_message_header_v03_00, rpc_result), 16);
        assert_eq!(offset_of!(rpc_message_header_v03_00, sequence), 24);
        assert_eq!(size_of::<rpc_gsp_rm_alloc_v03_00>(), 32);
        assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, status), 16);
        assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, paramsSize), 20);
        assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, flags), 24);
        assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, reserved), 28);
        // r570: params at 24; r580: at 40.
        assert_eq!(size_of::<r570::rpc_gsp_rm_control_v03_00>(), 24);
        assert_eq!(offset_of!(r570::rpc_gsp_rm_control_v03_00, status), 12);
        assert_eq!(offset_of!(r570::rpc_gsp_rm_control_v03_00, flags), 20);
        assert_eq!(size_of::<r580::rpc_gsp_rm_control_v03_00>(), 40);
        assert_eq!(
            offset_of!(r580::rpc_gsp_rm_control_v03_00, rmapiRpcFlags),
            20
        );
        assert_eq!(offset_of!(r580::rpc_gsp_rm_control_v03_00, rmctrlFlags), 24);
        assert_eq!(
            offset_of!(r580::rpc_gsp_rm_control_v03_00, rmctrlAccessRight),
            28
        );
        assert_eq!(offset_of!(r580::rpc_gsp_rm_control_v03_00, reserved0), 32);
        assert_eq!(rm_control_header_size(RmAbi::R570), 24);
        assert_eq!(rm_control_header_size(RmAbi::R580), 40);
        assert_eq!(size_of::<NVOS00_PARAMETERS_v03_00>(), 16);
        assert_eq!(size_of::<rpc_unloading_guest_driver_v1F_07>(), 8);
        assert_eq!(offset_of!(rpc_unloading_guest_driver_v1F_07, newLevel), 4);
        assert_eq!(size_of::<NV0000_ALLOC_PARAMETERS>(), 120);
        assert_eq!(offset_of!(NV0000_ALLOC_PARAMETERS, pOsPidInfo), 112);
    }

    /// A GSP that sends a new event each time the CPU publishes its read pointer: a call with
    /// a 1 ms virtual timeout ends at its deadline, having read a bounded number of messages.
    #[test]
    fn an_event_flood_ends_the_wait_at_its_deadline() {
        use crate::gsp::events::NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD;
        use crate::gsp::msgq::SharedMemLayout;
        use crate::gsp::testutil::{Doorbell, FloodDma, StepClock};
        let dma = FloodDma::new(NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD);
        let q = MsgQueue::new(&dma, SharedMemLayout::default()).unwrap();
        dma.start();
        let cfg = GspConfig {
            reply_timeout: Duration::from_millis(1),
            poll_interval: Duration::from_micros(100),
            ..GspConfig::default()
        };
        let ring = q.rx_msg_count() as u64;
        let mut rpc = GspRpc::new(q, Doorbell::default(), StepClock::default(), NoHandler, cfg);
        let mut fixed = [0u8; 24];
        let e = rpc
            .call(
                NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL,
                &mut fixed,
                &mut [],
                |_, _| true,
            )
            .unwrap_err();
        let GspError::Flood {
            function, records, ..
        } = e
        else {
            panic!("expected a flood error, got {e:?}");
        };
        assert_eq!(function, NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL);
        // One pump per poll: 1 ms / 100 µs polls, plus the first and the one after the
        // deadline, each at most a ring's worth.
        assert!(records <= 12 * ring, "{records} messages handled");
        assert!(records >= ring, "the flood was read ({records})");
        assert!(rpc.clock().now() <= Duration::from_millis(2));
        extern crate std;
        use std::string::ToString;
        assert!(e.to_string().contains("flooding"), "{e}");
        // Polling without a wait takes at most one ring's worth too.
        let before = dma.sent.get();
        rpc.poll_events().unwrap();
        assert!(
            dma.sent.get() - before <= ring,
            "{}",
            dma.sent.get() - before
        );
        assert!(
            rpc.events().dropped() > 0,
            "queued events beyond the queue are counted"
        );
    }

    #[test]
    fn names() {
        assert_eq!(function_name(76), Some("GSP_RM_CONTROL"));
        assert_eq!(function_name(103), Some("GSP_RM_ALLOC"));
        assert_eq!(function_name(71), Some("CONTINUATION_RECORD"));
        assert_eq!(function_name(226), Some("CTRL_EXEC_PARTITIONS_EXPORT"));
        assert_eq!(function_name(0x1001), Some("GSP_INIT_DONE"));
        assert_eq!(function_name(0x101c), Some("GSP_LOCKDOWN_NOTICE"));
        assert_eq!(function_name(0x1022), Some("RECOVERY_ACTION"));
        assert_eq!(function_name(0x1023), None);
        assert_eq!(function_name(0x1000), None);
        assert_eq!(
            rpc_result_name(0xff10_0001),
            Some("NV_VGPU_MSG_RESULT_RPC_UNKNOWN_FUNCTION")
        );
        assert_eq!(rpc_result_name(0x1f), Some("NV_ERR_INVALID_ARGUMENT"));
    }
}
