//! What the simulated RM reports per chip: the class list and the GR facts.
//!
//! Class lists: the engine classes of `gpuGetEngClassDescriptorList_<CHIP>` in
//! `src/nvidia/generated/g_gpu_class_list.c` (open-gpu-kernel-modules 580.142), ids from the
//! `class/cl*.h` headers, plus the chip-independent classes every RM client uses (root, device,
//! subdevice, system memory, events, debugger) which RM publishes from other tables. The H200
//! with 580.159.04 reports 103 classes; this list has the ones RM's class descriptors name for
//! GH100 and the common ones nvbare allocates, so it is shorter but agrees on every class both
//! contain (e.g. no AMPERE_COMPUTE_B or ADA_COMPUTE_A on GH100).
//!
//! GR facts (`NV2080_CTRL_CMD_GR_GET_INFO`):
//! * GH100 / H200: observed on the H200 (rm-abi.md §0): SM_VERSION 0x900, 64 warps/SM, 8 GPCs,
//!   9 TPCs/GPC, 2 SMs/TPC, 66 TPCs enabled (132 SMs).
//! * AD102 / RTX 4090: AD102 has 12 GPCs x 6 TPCs x 2 SMs (144 SMs); the 4090 enables 64 TPCs
//!   (128 SMs). sm_89 runs 48 warps (1536 threads) per SM. SM_VERSION 0x809.
//! * GB202 / RTX 5090: GB202 has 12 GPCs x 8 TPCs x 2 SMs (192 SMs); the 5090 enables 85 TPCs
//!   (170 SMs), 48 warps per SM. SM_VERSION 0xA04 (`NV2080_CTRL_GR_INFO_SM_VERSION_10_04`, what
//!   RM reports for sm_120 parts; tinygrad maps 0xa04 to sm_120).
//!
//! * GA100 / A100 SXM4: GA100 has 8 GPCs x 8 TPCs x 2 SMs (128 SMs); the A100 enables 54 TPCs
//!   (108 SMs). sm_80 runs 64 warps (2048 threads) per SM. SM_VERSION 0x800.
//!
//! The AD102, GB202 and GA100 numbers are public board specifications, not observations. The
//! GA100 engine classes are `gpuGetClassDescriptorList_GA100` of 570.144 (there is no GA100
//! list of its own in 580's engine tables the other lists cite).

use nvbare_core::chip::Chipset;
use nvbare_core::rm::class::*;
use nvbare_core::rm::ctrl::gr_info;

/// Classes every chip's RM publishes besides its engine classes (from RM's common tables).
const COMMON: &[u32] = &[
    NV01_ROOT,
    0x0000_0001, // NV01_ROOT_NON_PRIV
    NV01_ROOT_CLIENT,
    NV01_DEVICE_0,
    NV20_SUBDEVICE_0,
    NV01_MEMORY_SYSTEM,
    NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
    NV01_EVENT_OS_EVENT,
    GT200_DEBUGGER,
];

/// The 103 classes `NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2` returned on an H200 with the open
/// kernel module 580.159.04 (`nvbare info --device nvidia:0`, 2026-11-29), in RM's order.
pub const H200_OBSERVED: &[u32] = &[
    0x0100, 0x0101, 0x0002, 0x0080, 0x0005, 0x0078, 0x007e, 0x0079, 0x0081, 0x003e, 0x0071, 0x0000,
    0x0041, 0x0001, 0x2080, 0xc639, 0xc638, 0xc640, 0xc637, 0x000f, 0x906f, 0x90cc, 0x83de, 0xc863,
    0x0090, 0xb1cc, 0xb2cc, 0xc763, 0x900e, 0x0020, 0x0092, 0x90ce, 0x00f3, 0x0076, 0x00b1, 0x0082,
    0x0083, 0x00c2, 0x003f, 0x0004, 0x2081, 0x2082, 0x208f, 0x30f1, 0x00db, 0x402c, 0x9010, 0xa0bc,
    0xa0bd, 0x0050, 0xcbca, 0x90cd, 0x00f1, 0x00e0, 0x0042, 0x00f8, 0x00fb, 0x00f9, 0x00fe, 0x00fd,
    0x00da, 0xc574, 0xc365, 0xc56f, 0xc561, 0x9067, 0x902d, 0x90f1, 0x844c, 0x90e7, 0x90e6, 0x9074,
    0x9096, 0xc076, 0xcb97, 0xc86f, 0xcbc0, 0xc8b5, 0xcba2, 0xc661, 0xa06c, 0xa080, 0xa140, 0xc369,
    0x0060, 0x0040, 0x0070, 0x007d, 0x5080, 0x50a0, 0x503b, 0x503c, 0xa081, 0xa084, 0xb8b0, 0xb8d1,
    0xb8fa, 0xcb33, 0x00de, 0xc46f, 0xc461, 0xc36f, 0xc361,
];

/// TU102 (and TU104, whose list is the same) engine classes (`halTU102ClassDescriptorList`, `g_gpu_class_list.c` of 570.144, its
/// GR, CE, FIFO, DMA, bus, video and GPU-level classes; display classes left out as for the
/// other chips).
const TU102: &[u32] = &[
    0xc365, // ACCESS_COUNTER_NOTIFY_BUFFER
    0xc597, // TURING_A
    TURING_COMPUTE_A,
    TURING_CHANNEL_GPFIFO_A,
    TURING_DMA_COPY_A,
    TURING_USERMODE_A,
    NV50_MEMORY_VIRTUAL,
    0x503b, // NV50_P2P
    0x503c, // NV50_THIRD_PARTY_P2P
    0xa081, // NVA081_VGPU_CONFIG
    0xa084, // NVA084_KERNEL_HOST_VGPU_DEVICE
    0xc4b0, // NVC4B0_VIDEO_DECODER
    0xc4b7, // NVC4B7_VIDEO_ENCODER
    0x00de, // RM_USER_SHARED_DATA
    VOLTA_CHANNEL_GPFIFO_A,
    VOLTA_USERMODE_A,
];

/// GA100 engine classes (`halGA100ClassDescriptorList`, `g_gpu_class_list.c` of 570.144): no
/// display, no video encoder, AMPERE_DMA_COPY_A (not _B).
const GA100: &[u32] = &[
    0xc365, // ACCESS_COUNTER_NOTIFY_BUFFER
    0xc697, // AMPERE_A
    AMPERE_COMPUTE_A,
    AMPERE_CHANNEL_GPFIFO_A,
    AMPERE_DMA_COPY_A,
    AMPERE_USERMODE_A,
    NV50_MEMORY_VIRTUAL,
    0x503b, // NV50_P2P
    0x503c, // NV50_THIRD_PARTY_P2P
    0xa081, // NVA081_VGPU_CONFIG
    0xa084, // NVA084_KERNEL_HOST_VGPU_DEVICE
    0xc4d1, // NVC4D1_VIDEO_NVJPG
    0xc6b0, // NVC6B0_VIDEO_DECODER
    0xc6fa, // NVC6FA_VIDEO_OFA
    0xcb33, // NV_CONFIDENTIAL_COMPUTE
    0x00de, // RM_USER_SHARED_DATA
    TURING_CHANNEL_GPFIFO_A,
    TURING_USERMODE_A,
    VOLTA_CHANNEL_GPFIFO_A,
    VOLTA_USERMODE_A,
];

/// AD102 engine classes (`gpuGetEngClassDescriptorList_AD102`).
const AD102: &[u32] = &[
    0xc365, // ACCESS_COUNTER_NOTIFY_BUFFER
    0xc997, // ADA_A
    ADA_COMPUTE_A,
    AMPERE_CHANNEL_GPFIFO_A,
    AMPERE_DMA_COPY_B,
    AMPERE_USERMODE_A,
    0x00fc, // FABRIC_VASPACE_A
    FERMI_CONTEXT_SHARE_A,
    0x902d, // FERMI_TWOD_A
    FERMI_VASPACE_A,
    0x844c, // G84_PERFBUFFER
    0x9072, // GF100_DISP_SW
    0x90ec, // GF100_HDACODEC
    0x90e7, // GF100_SUBDEVICE_INFOROM
    0x90e6, // GF100_SUBDEVICE_MASTER
    0x9074, // GF100_TIMED_SEMAPHORE_SW
    0x9096, // GF100_ZBC_CLEAR
    0xc076, // GP100_UVM_SW
    0x00f2, // IO_VASPACE_A
    KEPLER_CHANNEL_GROUP_A,
    0xa080, // KEPLER_DEVICE_VGPU
    0xa140, // KEPLER_INLINE_TO_MEMORY_B
    0xb0cc, // MAXWELL_PROFILER
    0xc369, // MMU_FAULT_BUFFER
    0x0060, // NV0060_SYNC_GPU_BOOST
    NV01_MEMORY_LOCAL_USER,
    NV01_MEMORY_VIRTUAL,
    0x0073, // NV04_DISPLAY_COMMON
    0x007d, // NV04_SOFTWARE_TEST
    0x506f, // NV50_CHANNEL_GPFIFO
    0x5080, // NV50_DEFERRED_API_CLASS
    NV50_MEMORY_VIRTUAL,
    0x503b, // NV50_P2P
    0x503c, // NV50_THIRD_PARTY_P2P
    0xa081, // NVA081_VGPU_CONFIG
    0xa084, // NVA084_KERNEL_HOST_VGPU_DEVICE
    0xc372, // NVC372_DISPLAY_SW
    0xc67a, // NVC67A_CURSOR_IMM_CHANNEL_PIO
    0xc67b, // NVC67B_WINDOW_IMM_CHANNEL_DMA
    0xc67e, // NVC67E_WINDOW_CHANNEL_DMA
    0xc770, // NVC770_DISPLAY
    0xc771, // NVC771_DISP_SF_USER
    0xc773, // NVC773_DISP_CAPABILITIES
    0xc77d, // NVC77D_CORE_CHANNEL_DMA
    0xc77f, // NVC77F_ANY_CHANNEL_DMA
    0xc9b0, // NVC9B0_VIDEO_DECODER
    0xc9b7, // NVC9B7_VIDEO_ENCODER
    0xc9d1, // NVC9D1_VIDEO_NVJPG
    0xc9fa, // NVC9FA_VIDEO_OFA
    0xcb33, // NV_CONFIDENTIAL_COMPUTE
    0x00de, // RM_USER_SHARED_DATA
    TURING_CHANNEL_GPFIFO_A,
    TURING_USERMODE_A,
    VOLTA_CHANNEL_GPFIFO_A,
    VOLTA_USERMODE_A,
];

/// GH100 engine classes (`gpuGetEngClassDescriptorList_GH100`), less the four the H200 does not
/// publish with 580.159.04 (checked against [`H200_OBSERVED`]): `IO_VASPACE_A` 0x00f2,
/// `FABRIC_VASPACE_A` 0x00fc, `NV50_CHANNEL_GPFIFO` 0x506f and `MAXWELL_PROFILER` 0xb0cc (RM
/// filters them on this board: no IOMMU VA space, no fabric, legacy channel and profiler classes
/// off).
const GH100: &[u32] = &[
    0xc365, // ACCESS_COUNTER_NOTIFY_BUFFER
    AMPERE_CHANNEL_GPFIFO_A,
    AMPERE_USERMODE_A,
    FERMI_CONTEXT_SHARE_A,
    0x902d, // FERMI_TWOD_A
    FERMI_VASPACE_A,
    0x844c, // G84_PERFBUFFER
    0x90e7, // GF100_SUBDEVICE_INFOROM
    0x90e6, // GF100_SUBDEVICE_MASTER
    0x9074, // GF100_TIMED_SEMAPHORE_SW
    0x9096, // GF100_ZBC_CLEAR
    0xc076, // GP100_UVM_SW
    0xcb97, // HOPPER_A
    HOPPER_CHANNEL_GPFIFO_A,
    HOPPER_COMPUTE_A,
    HOPPER_DMA_COPY_A,
    0xcba2, // HOPPER_SEC2_WORK_LAUNCH_A
    HOPPER_USERMODE_A,
    KEPLER_CHANNEL_GROUP_A,
    0xa080, // KEPLER_DEVICE_VGPU
    0xa140, // KEPLER_INLINE_TO_MEMORY_B
    0xc369, // MMU_FAULT_BUFFER
    0x0060, // NV0060_SYNC_GPU_BOOST
    NV01_MEMORY_LOCAL_USER,
    NV01_MEMORY_VIRTUAL,
    0x007d, // NV04_SOFTWARE_TEST
    0x5080, // NV50_DEFERRED_API_CLASS
    NV50_MEMORY_VIRTUAL,
    0x503b, // NV50_P2P
    0x503c, // NV50_THIRD_PARTY_P2P
    0xa081, // NVA081_VGPU_CONFIG
    0xa084, // NVA084_KERNEL_HOST_VGPU_DEVICE
    0xb8b0, // NVB8B0_VIDEO_DECODER
    0xb8d1, // NVB8D1_VIDEO_NVJPG
    0xb8fa, // NVB8FA_VIDEO_OFA
    0xcb33, // NV_CONFIDENTIAL_COMPUTE
    0x00de, // RM_USER_SHARED_DATA
    TURING_CHANNEL_GPFIFO_A,
    TURING_USERMODE_A,
    VOLTA_CHANNEL_GPFIFO_A,
    VOLTA_USERMODE_A,
];

/// GB202 engine classes (`gpuGetEngClassDescriptorList_GB202`).
const GB202: &[u32] = &[
    0xc365, // ACCESS_COUNTER_NOTIFY_BUFFER
    AMPERE_CHANNEL_GPFIFO_A,
    AMPERE_USERMODE_A,
    0xce97, // BLACKWELL_B
    BLACKWELL_CHANNEL_GPFIFO_A,
    BLACKWELL_CHANNEL_GPFIFO_B,
    BLACKWELL_COMPUTE_B,
    BLACKWELL_DMA_COPY_B,
    0xcd40, // BLACKWELL_INLINE_TO_MEMORY_A
    BLACKWELL_USERMODE_A,
    0x00fc, // FABRIC_VASPACE_A
    FERMI_CONTEXT_SHARE_A,
    0x902d, // FERMI_TWOD_A
    FERMI_VASPACE_A,
    0x844c, // G84_PERFBUFFER
    0x9072, // GF100_DISP_SW
    0x90ec, // GF100_HDACODEC
    0x90e7, // GF100_SUBDEVICE_INFOROM
    0x90e6, // GF100_SUBDEVICE_MASTER
    0x9074, // GF100_TIMED_SEMAPHORE_SW
    0x9096, // GF100_ZBC_CLEAR
    0xc076, // GP100_UVM_SW
    HOPPER_CHANNEL_GPFIFO_A,
    0xcba2, // HOPPER_SEC2_WORK_LAUNCH_A
    HOPPER_USERMODE_A,
    0x00f2, // IO_VASPACE_A
    KEPLER_CHANNEL_GROUP_A,
    0xa080, // KEPLER_DEVICE_VGPU
    0xb0cc, // MAXWELL_PROFILER
    0xc369, // MMU_FAULT_BUFFER
    0x0060, // NV0060_SYNC_GPU_BOOST
    NV01_MEMORY_LOCAL_USER,
    NV01_MEMORY_VIRTUAL,
    0x0073, // NV04_DISPLAY_COMMON
    0x007d, // NV04_SOFTWARE_TEST
    0x506f, // NV50_CHANNEL_GPFIFO
    0x5080, // NV50_DEFERRED_API_CLASS
    NV50_MEMORY_VIRTUAL,
    0x503b, // NV50_P2P
    0x503c, // NV50_THIRD_PARTY_P2P
    0xa081, // NVA081_VGPU_CONFIG
    0xa084, // NVA084_KERNEL_HOST_VGPU_DEVICE
    0xc372, // NVC372_DISPLAY_SW
    0xc77f, // NVC77F_ANY_CHANNEL_DMA
    0xca70, // NVCA70_DISPLAY
    0xca71, // NVCA71_DISP_SF_USER
    0xca73, // NVCA73_DISP_CAPABILITIES
    0xca7a, // NVCA7A_CURSOR_IMM_CHANNEL_PIO
    0xca7b, // NVCA7B_WINDOW_IMM_CHANNEL_DMA
    0xca7d, // NVCA7D_CORE_CHANNEL_DMA
    0xca7e, // NVCA7E_WINDOW_CHANNEL_DMA
    0xcfb0, // NVCFB0_VIDEO_DECODER
    0xcfb7, // NVCFB7_VIDEO_ENCODER
    0xcfd1, // NVCFD1_VIDEO_NVJPG
    0xcffa, // NVCFFA_VIDEO_OFA
    0xcb33, // NV_CONFIDENTIAL_COMPUTE
    0x00de, // RM_USER_SHARED_DATA
    TURING_CHANNEL_GPFIFO_A,
    TURING_USERMODE_A,
    VOLTA_CHANNEL_GPFIFO_A,
    VOLTA_USERMODE_A,
];

/// GR facts of a board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrFacts {
    /// `SM_VERSION`.
    pub sm_version: u32,
    /// `MAX_WARPS_PER_SM`.
    pub max_warps_per_sm: u32,
    /// `LITTER_NUM_GPCS`.
    pub gpcs: u32,
    /// `LITTER_NUM_TPC_PER_GPC`.
    pub tpc_per_gpc: u32,
    /// `LITTER_NUM_SM_PER_TPC`.
    pub sm_per_tpc: u32,
    /// `SHADER_PIPE_SUB_COUNT`: TPCs enabled on the board.
    pub tpcs: u32,
}

impl GrFacts {
    /// SMs enabled on the board.
    pub fn sm_count(&self) -> u32 {
        self.tpcs * self.sm_per_tpc
    }

    /// The value of GR info `index`, or `None` for indices the model does not answer (RM
    /// returns 0 for those).
    pub fn value(&self, index: u32) -> Option<u32> {
        Some(match index {
            gr_info::SHADER_PIPE_SUB_COUNT => self.tpcs,
            gr_info::SM_VERSION => self.sm_version,
            gr_info::MAX_WARPS_PER_SM => self.max_warps_per_sm,
            gr_info::MAX_THREADS_PER_WARP => 32,
            gr_info::LITTER_NUM_GPCS => self.gpcs,
            gr_info::LITTER_NUM_TPC_PER_GPC => self.tpc_per_gpc,
            gr_info::LITTER_NUM_SM_PER_TPC => self.sm_per_tpc,
            gr_info::MAX_SUBCONTEXT_COUNT => 64,
            _ => return None,
        })
    }
}

/// What the RM of a simulated chip reports.
#[derive(Debug, Clone, Copy)]
pub struct ChipRm {
    /// Engine classes from the class descriptor list.
    pub engine_classes: &'static [u32],
    /// GR facts.
    pub gr: GrFacts,
}

impl ChipRm {
    /// The table for `chipset`, if the simulator models it.
    pub fn for_chipset(chipset: Chipset) -> Option<ChipRm> {
        Some(match chipset {
            // TITAN RTX: the full TU102 (6 GPCs x 6 TPCs x 2 SMs = 72 SMs), sm_75 with 32
            // warps (1024 threads) per SM (CUDA programming guide, compute capability 7.5).
            Chipset::TU102 => ChipRm {
                engine_classes: TU102,
                gr: GrFacts {
                    sm_version: 0x705,
                    max_warps_per_sm: 32,
                    gpcs: 6,
                    tpc_per_gpc: 6,
                    sm_per_tpc: 2,
                    tpcs: 36,
                },
            },
            // Tesla T4: 40 SMs of TU104's 6 GPCs x 4 TPCs x 2 (20 TPCs enabled).
            Chipset::TU104 => ChipRm {
                engine_classes: TU102,
                gr: GrFacts {
                    sm_version: 0x705,
                    max_warps_per_sm: 32,
                    gpcs: 6,
                    tpc_per_gpc: 4,
                    sm_per_tpc: 2,
                    tpcs: 20,
                },
            },
            Chipset::GA100 => ChipRm {
                engine_classes: GA100,
                gr: GrFacts {
                    sm_version: 0x800,
                    max_warps_per_sm: 64,
                    gpcs: 8,
                    tpc_per_gpc: 8,
                    sm_per_tpc: 2,
                    tpcs: 54,
                },
            },
            Chipset::AD102 => ChipRm {
                engine_classes: AD102,
                gr: GrFacts {
                    sm_version: 0x809,
                    max_warps_per_sm: 48,
                    gpcs: 12,
                    tpc_per_gpc: 6,
                    sm_per_tpc: 2,
                    tpcs: 64,
                },
            },
            Chipset::GH100 => ChipRm {
                engine_classes: GH100,
                gr: GrFacts {
                    sm_version: 0x900,
                    max_warps_per_sm: 64,
                    gpcs: 8,
                    tpc_per_gpc: 9,
                    sm_per_tpc: 2,
                    tpcs: 66,
                },
            },
            Chipset::GB202 => ChipRm {
                engine_classes: GB202,
                gr: GrFacts {
                    sm_version: gr_info::SM_VERSION_10_04,
                    max_warps_per_sm: 48,
                    gpcs: 12,
                    tpc_per_gpc: 8,
                    sm_per_tpc: 2,
                    tpcs: 85,
                },
            },
            _ => return None,
        })
    }

    /// The published class list: common classes then engine classes, sorted, no duplicates.
    pub fn class_list(&self) -> Vec<u32> {
        let mut v: Vec<u32> = COMMON.iter().chain(self.engine_classes).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether RM offers `class` on this chip.
    pub fn has_class(&self, class: u32) -> bool {
        COMMON.contains(&class) || self.engine_classes.contains(&class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::rm::class::{ClassKind, class_kind};

    fn newest(list: &[u32], kind: ClassKind) -> Option<u32> {
        list.iter()
            .copied()
            .filter(|c| class_kind(*c) == Some(kind))
            .max()
    }

    #[test]
    fn newest_class_of_each_kind_matches_the_chip_table() {
        for cs in [
            Chipset::TU102,
            Chipset::TU104,
            Chipset::GA100,
            Chipset::AD102,
            Chipset::GH100,
            Chipset::GB202,
        ] {
            let rm = ChipRm::for_chipset(cs).unwrap();
            let l = rm.class_list();
            let c = cs.info().classes;
            assert_eq!(newest(&l, ClassKind::Compute), Some(c.compute), "{cs}");
            assert_eq!(newest(&l, ClassKind::Gpfifo), Some(c.gpfifo), "{cs}");
            assert_eq!(newest(&l, ClassKind::Copy), Some(c.copy), "{cs}");
            assert_eq!(newest(&l, ClassKind::Usermode), Some(c.usermode), "{cs}");
            assert!(l.len() <= 200, "fits the r580 CLASSLIST_V2 array");
        }
    }

    #[test]
    fn the_gh100_model_publishes_only_classes_the_h200_lists() {
        assert_eq!(H200_OBSERVED.len(), 103);
        let h = ChipRm::for_chipset(Chipset::GH100).unwrap();
        let extra: Vec<u32> = h
            .class_list()
            .into_iter()
            .filter(|c| !H200_OBSERVED.contains(c))
            .collect();
        assert!(extra.is_empty(), "not on the H200: {extra:#x?}");
        // The classes picked from the hardware's list are the model's.
        let c = Chipset::GH100.info().classes;
        for kind in [
            ClassKind::Compute,
            ClassKind::Gpfifo,
            ClassKind::Copy,
            ClassKind::Usermode,
        ] {
            assert_eq!(newest(H200_OBSERVED, kind), newest(&h.class_list(), kind));
        }
        assert_eq!(newest(H200_OBSERVED, ClassKind::Compute), Some(c.compute));
    }

    #[test]
    fn hopper_has_no_ampere_or_ada_engines() {
        let h = ChipRm::for_chipset(Chipset::GH100).unwrap();
        for c in [
            AMPERE_COMPUTE_B,
            ADA_COMPUTE_A,
            AMPERE_DMA_COPY_B,
            AMPERE_DMA_COPY_A,
        ] {
            assert!(!h.has_class(c), "{c:#x}");
        }
        assert!(h.has_class(HOPPER_COMPUTE_A));
        assert_eq!(h.gr.sm_count(), 132);
        assert_eq!(
            ChipRm::for_chipset(Chipset::AD102).unwrap().gr.sm_count(),
            128
        );
        assert_eq!(
            ChipRm::for_chipset(Chipset::GB202).unwrap().gr.sm_count(),
            170
        );
        assert_eq!(
            ChipRm::for_chipset(Chipset::GA100).unwrap().gr.sm_count(),
            108
        );
    }
}
