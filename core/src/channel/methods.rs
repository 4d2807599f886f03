//! Method offsets and fields of the classes nvbare drives, with NVIDIA's names.
//!
//! Offsets are byte offsets as in the class headers. The methods used here have the same
//! offsets in every class of a family that nvbare supports, so each family is named after the
//! header the values were read from:
//!
//! * host (GPFIFO) methods: `clc56f.h` (AMPERE_CHANNEL_GPFIFO_A); HOPPER_CHANNEL_GPFIFO_A
//!   (`clc86f.h`) and the Blackwell classes keep the offsets they publish (SET_OBJECT, MEM_OP,
//!   SEM_*, WFI). Host methods are those below 0x100 and work on any subchannel.
//! * compute: `clc6c0.h` (AMPERE_COMPUTE_A); `clc7c0`/`clc9c0`/`clcbc0`/`clcec0` (open-gpu-doc)
//!   keep these offsets.
//! * copy: `clc7b5.h` (AMPERE_DMA_COPY_B, the first with a 64-bit semaphore payload);
//!   `clc8b5`/`clcab5` keep these offsets.

/// Subchannel nvbare binds the compute object to (tinygrad and CUDA use 1).
pub const SUBC_COMPUTE: u8 = 1;
/// Subchannel nvbare binds the copy object to.
pub const SUBC_COPY: u8 = 4;
/// Subchannel nvbare sends host methods on.
pub const SUBC_HOST: u8 = 0;
/// Subchannels per channel (`NV906F_NUMBER_OF_SUBCHANNELS`).
pub const NUMBER_OF_SUBCHANNELS: u8 = 8;

/// Host (GPFIFO class) methods, `clc56f.h`.
pub mod host {
    /// `NVC56F_SET_OBJECT`: binds a class to the subchannel (`NVCLASS` 15:0, `ENGINE` 20:16).
    pub const SET_OBJECT: u32 = 0x0000;
    /// `NVC56F_ILLEGAL`.
    pub const ILLEGAL: u32 = 0x0004;
    /// `NVC56F_NOP`.
    pub const NOP: u32 = 0x0008;
    /// `NVC56F_SEMAPHOREA` (legacy; not published for C86F).
    pub const SEMAPHOREA: u32 = 0x0010;
    /// `NVC56F_SEMAPHOREB`.
    pub const SEMAPHOREB: u32 = 0x0014;
    /// `NVC56F_SEMAPHOREC`.
    pub const SEMAPHOREC: u32 = 0x0018;
    /// `NVC56F_SEMAPHORED`.
    pub const SEMAPHORED: u32 = 0x001c;
    /// `NVC56F_NON_STALL_INTERRUPT`.
    pub const NON_STALL_INTERRUPT: u32 = 0x0020;
    /// `NVC56F_FB_FLUSH` (deprecated).
    pub const FB_FLUSH: u32 = 0x0024;
    /// `NVC56F_MEM_OP_A`.
    pub const MEM_OP_A: u32 = 0x0028;
    /// `NVC56F_MEM_OP_B`.
    pub const MEM_OP_B: u32 = 0x002c;
    /// `NVC56F_MEM_OP_C`.
    pub const MEM_OP_C: u32 = 0x0030;
    /// `NVC56F_MEM_OP_D`.
    pub const MEM_OP_D: u32 = 0x0034;
    /// `NVC56F_SET_REFERENCE`.
    pub const SET_REFERENCE: u32 = 0x0050;
    /// `NVC56F_SEM_ADDR_LO` (`OFFSET` 31:2).
    pub const SEM_ADDR_LO: u32 = 0x005c;
    /// `NVC56F_SEM_ADDR_HI` (`OFFSET` 7:0 on C56F, 24:0 on C86F).
    pub const SEM_ADDR_HI: u32 = 0x0060;
    /// `NVC56F_SEM_PAYLOAD_LO`.
    pub const SEM_PAYLOAD_LO: u32 = 0x0064;
    /// `NVC56F_SEM_PAYLOAD_HI`.
    pub const SEM_PAYLOAD_HI: u32 = 0x0068;
    /// `NVC56F_SEM_EXECUTE`.
    pub const SEM_EXECUTE: u32 = 0x006c;
    /// `NVC56F_WFI`.
    pub const WFI: u32 = 0x0078;
    /// `NVC56F_YIELD`.
    pub const YIELD: u32 = 0x0080;
    /// `NVC56F_CLEAR_FAULTED`.
    pub const CLEAR_FAULTED: u32 = 0x0084;

    /// `SEM_EXECUTE_OPERATION` (2:0) values.
    pub mod sem_execute {
        /// `OPERATION_ACQUIRE`: wait until the semaphore equals the payload.
        pub const OPERATION_ACQUIRE: u32 = 0;
        /// `OPERATION_RELEASE`: write the payload.
        pub const OPERATION_RELEASE: u32 = 1;
        /// `OPERATION_ACQ_STRICT_GEQ`: wait until semaphore >= payload (unsigned).
        pub const OPERATION_ACQ_STRICT_GEQ: u32 = 2;
        /// `OPERATION_ACQ_CIRC_GEQ`: wait until semaphore >= payload, wrapping
        /// (`(sem - payload)` interpreted as signed is >= 0).
        pub const OPERATION_ACQ_CIRC_GEQ: u32 = 3;
        /// `OPERATION_ACQ_AND`: wait until `sem & payload != 0`.
        pub const OPERATION_ACQ_AND: u32 = 4;
        /// `OPERATION_ACQ_NOR`: wait until `!(sem | payload) != 0`.
        pub const OPERATION_ACQ_NOR: u32 = 5;
        /// `OPERATION_REDUCTION`.
        pub const OPERATION_REDUCTION: u32 = 6;
        /// Mask of `OPERATION`.
        pub const OPERATION_MASK: u32 = 0x7;
        /// `ACQUIRE_SWITCH_TSG_EN` (12:12).
        pub const ACQUIRE_SWITCH_TSG_EN: u32 = 1 << 12;
        /// `RELEASE_WFI_EN` (20:20): wait for the engine to go idle before releasing.
        pub const RELEASE_WFI_EN: u32 = 1 << 20;
        /// `PAYLOAD_SIZE_64BIT` (24:24).
        pub const PAYLOAD_SIZE_64BIT: u32 = 1 << 24;
        /// `RELEASE_TIMESTAMP_EN` (25:25): also write the GPU time at semaphore + 8.
        pub const RELEASE_TIMESTAMP_EN: u32 = 1 << 25;
    }

    /// `WFI_SCOPE_ALL` (0:0).
    pub const WFI_SCOPE_ALL: u32 = 1;
}

/// Compute class methods, `clc6c0.h`.
pub mod compute {
    /// `NVC6C0_SET_OBJECT`.
    pub const SET_OBJECT: u32 = 0x0000;
    /// `NVC6C0_NO_OPERATION`.
    pub const NO_OPERATION: u32 = 0x0100;
    /// `NVC6C0_WAIT_FOR_IDLE`.
    pub const WAIT_FOR_IDLE: u32 = 0x0110;
    /// `NVC6C0_PM_TRIGGER`.
    pub const PM_TRIGGER: u32 = 0x0140;
    /// `NVC6C0_INVALIDATE_SKED_CACHES`: drops the QMDs the scheduler cached (by address), so
    /// QMDs another QMD schedules are read from memory again (Mesa NVK sends it for
    /// `INVALIDATE_QMD_DATA`).
    pub const INVALIDATE_SKED_CACHES: u32 = 0x0298;
    /// `NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A` (`BASE_ADDRESS_UPPER` 16:0).
    pub const SET_SHADER_SHARED_MEMORY_WINDOW_A: u32 = 0x02a0;
    /// `NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_B` (`BASE_ADDRESS` 31:0).
    pub const SET_SHADER_SHARED_MEMORY_WINDOW_B: u32 = 0x02a4;
    /// `NVC6C0_SEND_PCAS_A` (`QMD_ADDRESS_SHIFTED8`).
    pub const SEND_PCAS_A: u32 = 0x02b4;
    /// `NVC6C0_SEND_PCAS_B`.
    pub const SEND_PCAS_B: u32 = 0x02b8;
    /// `NVC6C0_SEND_SIGNALING_PCAS2_B` (`PCAS_ACTION` 3:0).
    pub const SEND_SIGNALING_PCAS2_B: u32 = 0x02c0;
    /// `SEND_SIGNALING_PCAS_B` (Volta, Turing: the compute classes without
    /// `SEND_SIGNALING_PCAS2_B`): bit 0 `INVALIDATE`, bit 1 `SCHEDULE` (`clc5c0.h`).
    pub const SEND_SIGNALING_PCAS_B: u32 = 0x02bc;
    /// `SEND_SIGNALING_PCAS_B_INVALIDATE_TRUE` (bit 0).
    pub const PCAS_B_INVALIDATE: u32 = 0x1;
    /// `SEND_SIGNALING_PCAS_B_SCHEDULE_TRUE` (bit 1).
    pub const PCAS_B_SCHEDULE: u32 = 0x2;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A` (`SIZE_UPPER` 7:0).
    pub const SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A: u32 = 0x02e4;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B` (`SIZE_LOWER`).
    pub const SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B: u32 = 0x02e8;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C` (`MAX_SM_COUNT` 8:0).
    pub const SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C: u32 = 0x02ec;
    /// `NVC6C0_SET_INLINE_QMD_ADDRESS_A`.
    pub const SET_INLINE_QMD_ADDRESS_A: u32 = 0x0318;
    /// `NVC6C0_SET_INLINE_QMD_ADDRESS_B`.
    pub const SET_INLINE_QMD_ADDRESS_B: u32 = 0x031c;
    /// `NVC6C0_LOAD_INLINE_QMD_DATA(i)`, i < 64.
    pub const LOAD_INLINE_QMD_DATA: u32 = 0x0320;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_A` (`ADDRESS_UPPER`).
    pub const SET_SHADER_LOCAL_MEMORY_A: u32 = 0x0790;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_B` (`ADDRESS_LOWER`).
    pub const SET_SHADER_LOCAL_MEMORY_B: u32 = 0x0794;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A` (`BASE_ADDRESS_UPPER` 16:0).
    pub const SET_SHADER_LOCAL_MEMORY_WINDOW_A: u32 = 0x07b0;
    /// `NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_B` (`BASE_ADDRESS`).
    pub const SET_SHADER_LOCAL_MEMORY_WINDOW_B: u32 = 0x07b4;
    /// `NVC6C0_SET_SHADER_CACHE_CONTROL`.
    pub const SET_SHADER_CACHE_CONTROL: u32 = 0x0d94;
    /// `NVC6C0_SET_SM_TIMEOUT_INTERVAL`.
    pub const SET_SM_TIMEOUT_INTERVAL: u32 = 0x0de4;
    /// `NVC6C0_INVALIDATE_SHADER_CACHES_NO_WFI`.
    pub const INVALIDATE_SHADER_CACHES_NO_WFI: u32 = 0x1698;
    /// `NVC6C0_SET_REPORT_SEMAPHORE_A`.
    pub const SET_REPORT_SEMAPHORE_A: u32 = 0x1b00;
    /// `NVC6C0_SET_REPORT_SEMAPHORE_B`.
    pub const SET_REPORT_SEMAPHORE_B: u32 = 0x1b04;
    /// `NVC6C0_SET_REPORT_SEMAPHORE_C`.
    pub const SET_REPORT_SEMAPHORE_C: u32 = 0x1b08;
    /// `NVC6C0_SET_REPORT_SEMAPHORE_D`.
    pub const SET_REPORT_SEMAPHORE_D: u32 = 0x1b0c;

    /// `SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE`: drop any cached copy of the QMD at
    /// this address.
    pub const PCAS_ACTION_INVALIDATE: u32 = 0x1;
    /// `SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_COPY_SCHEDULE`.
    pub const PCAS_ACTION_INVALIDATE_COPY_SCHEDULE: u32 = 0x3;
    /// `SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH`: fetch the QMD at this address into the
    /// scheduler's cache without launching it.
    pub const PCAS_ACTION_PREFETCH: u32 = 0x8;
    /// `SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH_SCHEDULE` (what tinygrad sends; no
    /// invalidate of the QMD cache: see [`PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE`]):
    /// launch the cached copy, fetching it first if there is none.
    pub const PCAS_ACTION_PREFETCH_SCHEDULE: u32 = 0x9;
    /// `SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE`: drop any cached
    /// copy of the QMD at this address, fetch it, launch (what CUDA sends; Mesa NVK sends
    /// `INVALIDATE_COPY_SCHEDULE`). Command memory is reused, so a launch must not run a copy
    /// cached from an earlier QMD at the same address. (The stale launches seen on the H200
    /// while another process shared the GPU came from store order, not from this cache:
    /// docs/device.md.)
    pub const PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE: u32 = 0xa;
    /// `INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION_TRUE` (0:0).
    pub const INVALIDATE_INSTRUCTION: u32 = 1 << 0;
    /// `INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA_TRUE` (4:4).
    pub const INVALIDATE_GLOBAL_DATA: u32 = 1 << 4;
    /// `INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT_TRUE` (12:12).
    pub const INVALIDATE_CONSTANT: u32 = 1 << 12;
}

/// Copy-engine class methods, `clc7b5.h`.
pub mod copy {
    /// `NVC7B5_SET_OBJECT` (the host method on the copy subchannel).
    pub const SET_OBJECT: u32 = 0x0000;
    /// `NVC7B5_NOP`.
    pub const NOP: u32 = 0x0100;
    /// `NVC7B5_PM_TRIGGER`.
    pub const PM_TRIGGER: u32 = 0x0140;
    /// `NVC7B5_SET_SEMAPHORE_A` (`UPPER` 24:0).
    pub const SET_SEMAPHORE_A: u32 = 0x0240;
    /// `NVC7B5_SET_SEMAPHORE_B` (`LOWER`).
    pub const SET_SEMAPHORE_B: u32 = 0x0244;
    /// `NVC7B5_SET_SEMAPHORE_PAYLOAD`.
    pub const SET_SEMAPHORE_PAYLOAD: u32 = 0x0248;
    /// `NVC7B5_SET_SEMAPHORE_PAYLOAD_UPPER`.
    pub const SET_SEMAPHORE_PAYLOAD_UPPER: u32 = 0x024c;
    /// `NVC7B5_SET_SRC_PHYS_MODE`.
    pub const SET_SRC_PHYS_MODE: u32 = 0x0260;
    /// `NVC7B5_SET_DST_PHYS_MODE`.
    pub const SET_DST_PHYS_MODE: u32 = 0x0264;
    /// `NVC7B5_LAUNCH_DMA`.
    pub const LAUNCH_DMA: u32 = 0x0300;
    /// `NVC7B5_OFFSET_IN_UPPER` (`UPPER` 24:0).
    pub const OFFSET_IN_UPPER: u32 = 0x0400;
    /// `NVC7B5_OFFSET_IN_LOWER`.
    pub const OFFSET_IN_LOWER: u32 = 0x0404;
    /// `NVC7B5_OFFSET_OUT_UPPER`.
    pub const OFFSET_OUT_UPPER: u32 = 0x0408;
    /// `NVC7B5_OFFSET_OUT_LOWER`.
    pub const OFFSET_OUT_LOWER: u32 = 0x040c;
    /// `NVC7B5_PITCH_IN`.
    pub const PITCH_IN: u32 = 0x0410;
    /// `NVC7B5_PITCH_OUT`.
    pub const PITCH_OUT: u32 = 0x0414;
    /// `NVC7B5_LINE_LENGTH_IN` (bytes per line).
    pub const LINE_LENGTH_IN: u32 = 0x0418;
    /// `NVC7B5_LINE_COUNT`.
    pub const LINE_COUNT: u32 = 0x041c;

    /// `LAUNCH_DMA` fields.
    pub mod launch_dma {
        /// `DATA_TRANSFER_TYPE` (1:0) `_NONE`: only the semaphore.
        pub const DATA_TRANSFER_TYPE_NONE: u32 = 0;
        /// `DATA_TRANSFER_TYPE_PIPELINED`.
        pub const DATA_TRANSFER_TYPE_PIPELINED: u32 = 1;
        /// `DATA_TRANSFER_TYPE_NON_PIPELINED`: wait for earlier transfers first.
        pub const DATA_TRANSFER_TYPE_NON_PIPELINED: u32 = 2;
        /// Mask of `DATA_TRANSFER_TYPE`.
        pub const DATA_TRANSFER_TYPE_MASK: u32 = 0x3;
        /// `FLUSH_ENABLE_TRUE` (2:2).
        pub const FLUSH_ENABLE: u32 = 1 << 2;
        /// `SEMAPHORE_TYPE` (4:3) shift.
        pub const SEMAPHORE_TYPE_SHIFT: u32 = 3;
        /// `SEMAPHORE_TYPE_NONE`.
        pub const SEMAPHORE_TYPE_NONE: u32 = 0;
        /// `SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE` (= `RELEASE_SEMAPHORE_NO_TIMESTAMP`).
        pub const SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE: u32 = 1;
        /// `SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE` (= `RELEASE_SEMAPHORE_WITH_TIMESTAMP`):
        /// the payload, then the GPU time at +8.
        pub const SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE: u32 = 2;
        /// `INTERRUPT_TYPE` (6:5) shift.
        pub const INTERRUPT_TYPE_SHIFT: u32 = 5;
        /// `SRC_MEMORY_LAYOUT_PITCH` (7:7).
        pub const SRC_MEMORY_LAYOUT_PITCH: u32 = 1 << 7;
        /// `DST_MEMORY_LAYOUT_PITCH` (8:8).
        pub const DST_MEMORY_LAYOUT_PITCH: u32 = 1 << 8;
        /// `MULTI_LINE_ENABLE_TRUE` (9:9).
        pub const MULTI_LINE_ENABLE: u32 = 1 << 9;
        /// `REMAP_ENABLE_TRUE` (10:10).
        pub const REMAP_ENABLE: u32 = 1 << 10;
        /// `SRC_TYPE_PHYSICAL` (12:12).
        pub const SRC_TYPE_PHYSICAL: u32 = 1 << 12;
        /// `DST_TYPE_PHYSICAL` (13:13).
        pub const DST_TYPE_PHYSICAL: u32 = 1 << 13;
        /// `SEMAPHORE_REDUCTION_ENABLE_TRUE` (19:19).
        pub const SEMAPHORE_REDUCTION_ENABLE: u32 = 1 << 19;
        /// `MEMORY_SCRUB_ENABLE_TRUE` (23:23).
        pub const MEMORY_SCRUB_ENABLE: u32 = 1 << 23;
        /// `FLUSH_TYPE_GL` (25:25).
        pub const FLUSH_TYPE_GL: u32 = 1 << 25;
        /// `SEMAPHORE_PAYLOAD_SIZE_TWO_WORD` (27:27): 64-bit payload.
        pub const SEMAPHORE_PAYLOAD_SIZE_TWO_WORD: u32 = 1 << 27;
    }
}
