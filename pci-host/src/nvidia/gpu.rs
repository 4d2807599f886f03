//! [`KernelGpu`]: one GPU opened through nvidia.ko with its RM device and subdevice, plus the
//! queries `nvbare info` prints (class list, GR info, VRAM, UUID) and class selection.

use nvbare_core::chip::{Chip, Chipset};
use nvbare_core::rm::class::{ClassKind, class_kind};
use nvbare_core::rm::{Handle, Rm, RmError, class};
use zerocopy::{FromZeros, IntoBytes};

use super::driver::{CardInfo, GpuNode, NvidiaDriver};
use super::error::KmodError;
use super::params::*;
use super::rm::{GpuIds, KernelRm};
use super::uvm::GpuUuid;

/// The newest class of each kind a GPU offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SelectedClasses {
    /// `*_COMPUTE_*`.
    pub compute: Option<u32>,
    /// `*_CHANNEL_GPFIFO_*`.
    pub gpfifo: Option<u32>,
    /// `*_DMA_COPY_*`.
    pub copy: Option<u32>,
    /// `*_USERMODE_*`.
    pub usermode: Option<u32>,
}

/// Picks the numerically highest class of each kind, as UVM's `findDeviceClasses` does
/// (`src/nvidia/src/kernel/rmapi/nv_gpu_ops.c`). On an H200: 0xcbc0, 0xc86f, 0xc8b5, 0xc661.
pub fn select_classes(list: &[u32]) -> SelectedClasses {
    let mut s = SelectedClasses::default();
    for &c in list {
        let slot = match class_kind(c) {
            Some(ClassKind::Compute) => &mut s.compute,
            Some(ClassKind::Gpfifo) => &mut s.gpfifo,
            Some(ClassKind::Copy) => &mut s.copy,
            Some(ClassKind::Usermode) => &mut s.usermode,
            None => continue,
        };
        if slot.is_none_or(|old| c > old) {
            *slot = Some(c);
        }
    }
    s
}

/// Graphics-engine facts from `NV2080_CTRL_CMD_GR_GET_INFO_V2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrInfo {
    /// `SM_VERSION`, e.g. 0x900 for sm_90.
    pub sm_version: u32,
    /// `LITTER_NUM_GPCS`.
    pub gpcs: u32,
    /// `LITTER_NUM_TPC_PER_GPC` (the architectural maximum).
    pub tpc_per_gpc: u32,
    /// `LITTER_NUM_SM_PER_TPC`.
    pub sm_per_tpc: u32,
    /// `SHADER_PIPE_SUB_COUNT`: TPCs actually enabled.
    pub tpcs: u32,
    /// `MAX_WARPS_PER_SM`.
    pub max_warps_per_sm: u32,
}

impl GrInfo {
    /// Enabled SMs (enabled TPCs × SMs per TPC; 66 × 2 = 132 on an H200).
    pub fn sm_count(&self) -> u32 {
        self.tpcs.saturating_mul(self.sm_per_tpc)
    }

    /// `sm_XY` as a number: `SM_VERSION` is major << 8 | minor (`ctrl2080gr.h`
    /// `NV2080_CTRL_GR_INFO_SM_VERSION_8_09` = 0x809), so 0x900 → 90, 0xa01 → 101.
    pub fn sm(&self) -> u32 {
        (self.sm_version >> 8) * 10 + (self.sm_version & 0xff)
    }
}

/// Video memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VramInfo {
    /// `TOTAL_RAM_SIZE`.
    pub total: u64,
    /// `HEAP_SIZE`: usable by allocations.
    pub heap: u64,
    /// `HEAP_FREE`.
    pub free: u64,
}

/// Identifies the chip from RM's arch info (`architecture | implementation` = the
/// `NV_PMC_BOOT_42` chip id; `revision` read as major << 4 | minor).
pub fn chip_from_arch_info(p: &NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS) -> Result<Chip, KmodError> {
    let chip_id = u16::try_from(p.architecture | p.implementation).unwrap_or(u16::MAX);
    let cs = Chipset::from_chip_id(chip_id).ok_or_else(|| {
        KmodError::Invalid(format!(
            "RM reports architecture {:#x} implementation {:#x} (chip id {chip_id:#x}), which \
             nvbare does not know",
            p.architecture, p.implementation
        ))
    })?;
    Ok(Chip {
        info: cs.info(),
        major_revision: ((p.revision >> 4) & 0xf) as u8,
        minor_revision: (p.revision & 0xf) as u8,
        boot0: 0,
        boot42: 0,
    })
}

/// A GPU opened through nvidia.ko: the driver, its node, one RM client with an
/// `NV01_DEVICE_0` and `NV20_SUBDEVICE_0`. Dropping it frees the client (and everything under
/// it), then closes the node.
#[derive(Debug)]
pub struct KernelGpu {
    // Field order is drop order: the client goes before the node.
    rm: KernelRm,
    node: GpuNode,
    driver: NvidiaDriver,
    ids: GpuIds,
    device: Handle,
    subdevice: Handle,
}

impl KernelGpu {
    /// Opens GPU `index` (`/dev/nvidiaN`) of the driver at the system paths.
    pub fn open(index: u32) -> Result<KernelGpu, KmodError> {
        Self::open_with(&NvidiaDriver::open()?, index)
    }

    /// Opens GPU `index` of `driver`.
    pub fn open_with(driver: &NvidiaDriver, index: u32) -> Result<KernelGpu, KmodError> {
        let node = driver.open_gpu(index)?;
        let mut rm = KernelRm::new(driver)?;
        let ids = rm.gpu_ids(node.card().gpu_id)?;
        let client = rm.client();
        let mut dev = NV0080_ALLOC_PARAMETERS {
            deviceId: ids.device_instance,
            hClientShare: client.0,
            vaMode: NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES,
            ..Default::default()
        };
        let device = rm.alloc(client, class::NV01_DEVICE_0, dev.as_mut_bytes())?;
        let mut sub = NV2080_ALLOC_PARAMETERS {
            subDeviceId: ids.sub_device_instance,
        };
        let subdevice = rm.alloc(device, class::NV20_SUBDEVICE_0, sub.as_mut_bytes())?;
        Ok(KernelGpu {
            rm,
            node,
            driver: driver.clone(),
            ids,
            device,
            subdevice,
        })
    }

    /// The RM client.
    pub fn rm(&mut self) -> &mut KernelRm {
        &mut self.rm
    }

    /// The RM client, for calls that only read it.
    pub fn rm_ref(&self) -> &KernelRm {
        &self.rm
    }

    /// The GPU node.
    pub fn node(&self) -> &GpuNode {
        &self.node
    }

    /// The RM client and the GPU node together (mapping calls need both).
    pub fn rm_and_node(&mut self) -> (&mut KernelRm, &GpuNode) {
        (&mut self.rm, &self.node)
    }

    /// The driver.
    pub fn driver(&self) -> &NvidiaDriver {
        &self.driver
    }

    /// The card.
    pub fn card(&self) -> &CardInfo {
        self.node.card()
    }

    /// RM's instance numbers of this GPU.
    pub fn ids(&self) -> GpuIds {
        self.ids
    }

    /// The `NV01_DEVICE_0` object.
    pub fn device(&self) -> Handle {
        self.device
    }

    /// The `NV20_SUBDEVICE_0` object.
    pub fn subdevice(&self) -> Handle {
        self.subdevice
    }

    /// The classes the GPU offers (`NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2`).
    pub fn class_list(&mut self) -> Result<Vec<u32>, RmError> {
        let mut p = NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS::new_zeroed();
        self.rm.control(
            self.device,
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
            p.as_mut_bytes(),
        )?;
        let n = (p.numClasses as usize).min(p.classList.len());
        Ok(p.classList.get(..n).unwrap_or_default().to_vec())
    }

    /// GR facts (`NV2080_CTRL_CMD_GR_GET_INFO_V2`).
    pub fn gr_info(&mut self) -> Result<GrInfo, RmError> {
        let idx = [
            NV2080_CTRL_GR_INFO_INDEX_SM_VERSION,
            NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS,
            NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC,
            NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC,
            NV2080_CTRL_GR_INFO_INDEX_SHADER_PIPE_SUB_COUNT,
            NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM,
        ];
        let mut p = NV2080_CTRL_GR_GET_INFO_V2_PARAMS::new_zeroed();
        p.grInfoListSize = idx.len() as u32;
        for (slot, &i) in p.grInfoList.iter_mut().zip(idx.iter()) {
            slot.index = i;
        }
        self.rm.control(
            self.subdevice,
            NV2080_CTRL_CMD_GR_GET_INFO_V2,
            p.as_mut_bytes(),
        )?;
        let v = |k: usize| p.grInfoList.get(k).map_or(0, |e| e.data);
        Ok(GrInfo {
            sm_version: v(0),
            gpcs: v(1),
            tpc_per_gpc: v(2),
            sm_per_tpc: v(3),
            tpcs: v(4),
            max_warps_per_sm: v(5),
        })
    }

    /// Video memory sizes (`NV2080_CTRL_CMD_FB_GET_INFO_V2`).
    pub fn vram(&mut self) -> Result<VramInfo, RmError> {
        let idx = [
            NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE,
            NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE,
            NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE,
        ];
        let mut p = NV2080_CTRL_FB_GET_INFO_V2_PARAMS::new_zeroed();
        p.fbInfoListSize = idx.len() as u32;
        for (slot, &i) in p.fbInfoList.iter_mut().zip(idx.iter()) {
            slot.index = i;
        }
        self.rm.control(
            self.subdevice,
            NV2080_CTRL_CMD_FB_GET_INFO_V2,
            p.as_mut_bytes(),
        )?;
        let kib = |k: usize| p.fbInfoList.get(k).map_or(0, |e| e.data as u64) << 10;
        Ok(VramInfo {
            total: kib(0),
            heap: kib(1),
            free: kib(2),
        })
    }

    /// The chip (`NV2080_CTRL_CMD_MC_GET_ARCH_INFO`: BAR0 cannot be read while nvidia.ko owns
    /// the GPU, so the chip id comes from RM).
    pub fn chip(&mut self) -> Result<Chip, KmodError> {
        let mut p = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS::default();
        self.rm.control(
            self.subdevice,
            NV2080_CTRL_CMD_MC_GET_ARCH_INFO,
            p.as_mut_bytes(),
        )?;
        chip_from_arch_info(&p)
    }

    /// The GPU's UUID (`NV2080_CTRL_CMD_GPU_GET_GID_INFO`, binary format), which UVM calls
    /// take.
    pub fn uuid(&mut self) -> Result<GpuUuid, KmodError> {
        let mut p = NV2080_CTRL_GPU_GET_GID_INFO_PARAMS::new_zeroed();
        p.flags = NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY;
        self.rm.control(
            self.subdevice,
            NV2080_CTRL_CMD_GPU_GET_GID_INFO,
            p.as_mut_bytes(),
        )?;
        let raw = p
            .data
            .get(..16)
            .filter(|_| p.length == 16)
            .ok_or_else(|| KmodError::Invalid(format!("GPU UUID of {} bytes", p.length)))?;
        let mut u = [0u8; 16];
        u.copy_from_slice(raw);
        Ok(GpuUuid(u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::rm::class::*;

    #[test]
    fn h200_class_list_selects_the_hopper_classes() {
        // The relevant part of the 103 classes an H200 lists (rm-abi.md §0).
        let list = [
            0x90f1, 0xa06c, 0x9067, 0x83de, 0xc36f, 0xc46f, 0xc56f, 0xc86f, 0xc361, 0xc461, 0xc561,
            0xc661, 0xcb97, 0xcbc0, 0xc8b5, 0xcba2, 0xcb33, 0xcbca, 0xc863, 0xb8b0, 0xb8d1, 0xb8fa,
        ];
        let s = select_classes(&list);
        assert_eq!(s.compute, Some(HOPPER_COMPUTE_A));
        assert_eq!(s.gpfifo, Some(HOPPER_CHANNEL_GPFIFO_A));
        assert_eq!(s.copy, Some(HOPPER_DMA_COPY_A));
        assert_eq!(s.usermode, Some(HOPPER_USERMODE_A));
    }

    #[test]
    fn missing_kinds_stay_empty() {
        let s = select_classes(&[AMPERE_COMPUTE_A, AMPERE_COMPUTE_B, 0x90f1]);
        assert_eq!(s.compute, Some(AMPERE_COMPUTE_B));
        assert_eq!(s.copy, None);
        assert_eq!(select_classes(&[]), SelectedClasses::default());
    }

    #[test]
    fn arch_info_identifies_gh100() {
        let p = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
            architecture: 0x180,
            implementation: 0x0,
            revision: 0xa1,
            ..Default::default()
        };
        let c = chip_from_arch_info(&p).unwrap();
        assert_eq!(c.chipset(), Chipset::GH100);
        assert_eq!((c.major_revision, c.minor_revision), (0xa, 1));
        let unknown = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
            architecture: 0x100,
            ..Default::default()
        };
        assert!(chip_from_arch_info(&unknown).is_err());
    }

    #[test]
    fn gr_info_derived_values() {
        let g = GrInfo {
            sm_version: 0x900,
            sm_per_tpc: 2,
            tpcs: 66,
            ..Default::default()
        };
        assert_eq!(g.sm_count(), 132);
        assert_eq!(g.sm(), 90);
        assert_eq!(
            GrInfo {
                sm_version: 0x809,
                ..Default::default()
            }
            .sm(),
            89
        );
        assert_eq!(
            GrInfo {
                sm_version: 0xc00,
                ..Default::default()
            }
            .sm(),
            120
        );
    }
}
