//! `.nv.info` attributes: EIATTR numbers and EIFMT record formats.
//!
//! `.nv.info` (module-wide, per-function records keyed by symbol index) and
//! `.nv.info.<kernel>` (section type [`super::SHT_CUDA_INFO`], `sh_info` = the kernel's `.text`
//! section) hold a sequence of TLV records: `u8 format, u8 attribute, u16 value-or-size`,
//! followed for [`EIFMT_SVAL`] by `size` payload bytes.
//!
//! The numbers were read from ptxas 12.9/13.5 output and named with `cuobjdump -elf` (CUDA
//! 13.5): [`name`] is the table cuobjdump printed for each attribute byte. Payloads of the
//! records the parser uses (all little endian):
//!
//! | attribute | where | format | payload |
//! |---|---|---|---|
//! | `EIATTR_REGCOUNT` 0x2f | `.nv.info` | SVAL 8 | u32 symbol, u32 registers |
//! | `EIATTR_FRAME_SIZE` 0x11 | `.nv.info` | SVAL 8 | u32 symbol, u32 bytes |
//! | `EIATTR_MIN_STACK_SIZE` 0x12 | `.nv.info` | SVAL 8 | u32 symbol, u32 bytes |
//! | `EIATTR_PARAM_CBANK` 0x0a | `.nv.info.<k>` | SVAL 8 | u32 symbol of `.nv.constant0.<k>`, u16 offset, u16 size |
//! | `EIATTR_CBANK_PARAM_SIZE` 0x19 | `.nv.info.<k>` | HVAL | u16 size |
//! | `EIATTR_KPARAM_INFO` 0x17 | `.nv.info.<k>` | SVAL 12 | u32 index, u16 ordinal, u16 offset, u32 (log2 align 0..7, space 8..11, cbank 12..16, size 18..31) |
//! | `EIATTR_MAX_THREADS` 0x05 | `.nv.info.<k>` | SVAL 12 | u32 x, y, z (`.maxntid`) |
//! | `EIATTR_REQNTID` 0x10 | `.nv.info.<k>` | SVAL 12 | u32 x, y, z (`.reqntid`) |
//! | `EIATTR_CTA_PER_CLUSTER` 0x3d | `.nv.info.<k>` | SVAL 12 | u32 x, y, z (`__cluster_dims__`) |
//! | `EIATTR_NUM_BARRIERS` 0x4c | `.nv.info.<k>` | BVAL | u8 count (low byte of the u16) |

/// Record without a value.
pub const EIFMT_NVAL: u8 = 1;
/// Record whose value is the low byte of the u16 field.
pub const EIFMT_BVAL: u8 = 2;
/// Record whose value is the u16 field.
pub const EIFMT_HVAL: u8 = 3;
/// Record whose u16 field is the size of the payload that follows.
pub const EIFMT_SVAL: u8 = 4;

/// `.maxntid` block dimensions.
pub const EIATTR_MAX_THREADS: u8 = 0x05;
/// Offset and size of the parameters in constant bank 0.
pub const EIATTR_PARAM_CBANK: u8 = 0x0a;
/// `.reqntid` block dimensions.
pub const EIATTR_REQNTID: u8 = 0x10;
/// A function's stack frame size.
pub const EIATTR_FRAME_SIZE: u8 = 0x11;
/// Stack a function needs including its callees.
pub const EIATTR_MIN_STACK_SIZE: u8 = 0x12;
/// One kernel parameter.
pub const EIATTR_KPARAM_INFO: u8 = 0x17;
/// Size of the parameters in constant bank 0.
pub const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
/// `.maxnreg` (0xff when not set).
pub const EIATTR_MAXREG_COUNT: u8 = 0x1b;
/// Offsets of the `EXIT` instructions.
pub const EIATTR_EXIT_INSTR_OFFSETS: u8 = 0x1c;
/// Registers per thread.
pub const EIATTR_REGCOUNT: u8 = 0x2f;
/// The CUDA API version the code was built for.
pub const EIATTR_CUDA_API_VERSION: u8 = 0x37;
/// Compile-time thread-block cluster shape (`.reqnctapercluster`, CUDA `__cluster_dims__`).
pub const EIATTR_CTA_PER_CLUSTER: u8 = 0x3d;
/// Named barriers used.
pub const EIATTR_NUM_BARRIERS: u8 = 0x4c;

/// cuobjdump's name for an attribute byte, if it has one.
pub fn name(attr: u8) -> Option<&'static str> {
    Some(match attr {
        0x0 => "EIATTR_ERROR",
        0x1 => "EIATTR_PAD",
        0x2 => "EIATTR_IMAGE_SLOT",
        0x3 => "EIATTR_JUMPTABLE_RELOCS",
        0x4 => "EIATTR_CTAIDZ_USED",
        0x5 => "EIATTR_MAX_THREADS",
        0x6 => "EIATTR_IMAGE_OFFSET",
        0x7 => "EIATTR_IMAGE_SIZE",
        0x8 => "EIATTR_TEXTURE_NORMALIZED",
        0x9 => "EIATTR_SAMPLER_INIT",
        0xa => "EIATTR_PARAM_CBANK",
        0xb => "EIATTR_SMEM_PARAM_OFFSETS",
        0xc => "EIATTR_CBANK_PARAM_OFFSETS",
        0xd => "EIATTR_SYNC_STACK",
        0xe => "EIATTR_TEXID_SAMPID_MAP",
        0xf => "EIATTR_EXTERNS",
        0x10 => "EIATTR_REQNTID",
        0x11 => "EIATTR_FRAME_SIZE",
        0x12 => "EIATTR_MIN_STACK_SIZE",
        0x13 => "EIATTR_SAMPLER_FORCE_UNNORMALIZED",
        0x14 => "EIATTR_BINDLESS_IMAGE_OFFSETS",
        0x15 => "EIATTR_BINDLESS_TEXTURE_BANK",
        0x16 => "EIATTR_BINDLESS_SURFACE_BANK",
        0x17 => "EIATTR_KPARAM_INFO",
        0x18 => "EIATTR_SMEM_PARAM_SIZE",
        0x19 => "EIATTR_CBANK_PARAM_SIZE",
        0x1a => "EIATTR_QUERY_NUMATTRIB",
        0x1b => "EIATTR_MAXREG_COUNT",
        0x1c => "EIATTR_EXIT_INSTR_OFFSETS",
        0x1d => "EIATTR_S2RCTAID_INSTR_OFFSETS",
        0x1e => "EIATTR_CRS_STACK_SIZE",
        0x1f => "EIATTR_NEED_CNP_WRAPPER",
        0x20 => "EIATTR_NEED_CNP_PATCH",
        0x21 => "EIATTR_EXPLICIT_CACHING",
        0x22 => "EIATTR_ISTYPEP_USED",
        0x23 => "EIATTR_MAX_STACK_SIZE",
        0x24 => "EIATTR_SUQ_USED",
        0x25 => "EIATTR_LD_CACHEMOD_INSTR_OFFSETS",
        0x26 => "EIATTR_LOAD_CACHE_REQUEST",
        0x27 => "EIATTR_ATOM_SYS_INSTR_OFFSETS",
        0x28 => "EIATTR_COOP_GROUP_INSTR_OFFSETS",
        0x29 => "EIATTR_COOP_GROUP_MASK_REGIDS",
        0x2b => "EIATTR_WMMA_USED",
        0x2c => "EIATTR_HAS_PRE_V10_OBJECT",
        0x2d => "EIATTR_ATOMF16_EMUL_INSTR_OFFSETS",
        0x2e => "EIATTR_ATOM16_EMUL_INSTR_REG_MAP",
        0x2f => "EIATTR_REGCOUNT",
        0x31 => "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS",
        0x32 => "EIATTR_SHARED_SCRATCH",
        0x33 => "EIATTR_STATISTICS",
        0x34 => "EIATTR_INDIRECT_BRANCH_TARGETS",
        0x36 => "EIATTR_SW_WAR",
        0x37 => "EIATTR_CUDA_API_VERSION",
        0x38 => "EIATTR_NUM_MBARRIERS",
        0x39 => "EIATTR_MBARRIER_INSTR_OFFSETS",
        0x3a => "EIATTR_COROUTINE_RESUME_ID_OFFSETS",
        0x3b => "EIATTR_SAM_REGION_STACK_SIZE",
        0x3c => "EIATTR_PER_REG_TARGET_PERF_STATS",
        0x3d => "EIATTR_CTA_PER_CLUSTER",
        0x3e => "EIATTR_EXPLICIT_CLUSTER",
        0x3f => "EIATTR_MAX_CLUSTER_RANK",
        0x40 => "EIATTR_INSTR_REG_MAP",
        0x41 => "EIATTR_RESERVED_SMEM_USED",
        0x42 => "EIATTR_RESERVED_SMEM_0_SIZE",
        0x43 => "EIATTR_UCODE_SECTION_DATA",
        0x44 => "EIATTR_UNUSED_LOAD_BYTE_OFFSET",
        0x45 => "EIATTR_KPARAM_INFO_V2",
        0x46 => "EIATTR_SYSCALL_OFFSETS",
        0x48 => "EIATTR_GRAPHICS_GLOBAL_CBANK",
        0x49 => "EIATTR_SHADER_TYPE",
        0x4a => "EIATTR_VRC_CTA_INIT_COUNT",
        0x4b => "EIATTR_TOOLS_PATCH_FUNC",
        0x4c => "EIATTR_NUM_BARRIERS",
        0x4d => "EIATTR_TEXMODE_INDEPENDENT",
        0x4e => "EIATTR_PERF_STATISTICS",
        0x4f => "EIATTR_AT_ENTRY_FRAGMENTS",
        0x50 => "EIATTR_SPARSE_MMA_MASK",
        0x51 => "EIATTR_TCGEN05_1CTA_USED",
        0x52 => "EIATTR_TCGEN05_2CTA_USED",
        0x53 => "EIATTR_GEN_ERRBAR_AT_EXIT",
        0x54 => "EIATTR_REG_RECONFIG",
        0x55 => "EIATTR_ANNOTATIONS",
        0x57 => "EIATTR_STACK_CANARY_TRAP_OFFSETS",
        0x58 => "EIATTR_STUB_FUNCTION_KIND",
        0x59 => "EIATTR_LOCAL_CTA_ASYNC_STORE_OFFSETS",
        0x5b => "EIATTR_BLOCKS_ARE_CLUSTERS",
        0x5c => "EIATTR_SANITIZE",
        0x5d => "EIATTR_SYSCALLS_FALLBACK",
        0x5e => "EIATTR_CUDA_REQ",
        0x61 => "EIATTR_RTCORE_ENTRY",
        0x62 => "EIATTR_CLUSTER_LAUNCH_CONTROL_USED",
        0x64 => "EIATTR_MIN_PER_CTA_MEMORY_SIZE",
        0x65 => "EIATTR_IGNOREOOB_CP_ASYNC_BULK_INSTR_OFFSETS",
        0x66 => "EIATTR_LANGUAGE",
        0x68 => "EIATTR_GRID_ATTRIBUTES",
        0x69 => "EIATTR_STACK_OFFSET",
        0x6a => "EIATTR_RT_LIVESTATE_SASS_MAP",
        0x6b => "EIATTR_NVSAL_SW_WAR",
        0x6c => "EIATTR_INSTR_OFFSETS",
        0x6d => "EIATTR_PREEXIT_USED",
        _ => return None,
    })
}
