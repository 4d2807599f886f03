//! `nvbare info --device DEV --json`: the facts `info` prints, as one object (`InfoReport`).

use std::collections::BTreeMap;

use nvbare_core::chip::{BootMethod, Chip, MmuVersion};
use nvbare_core::device::{DeviceInfo, DeviceOptions};
use nvbare_core::rm::class::class_name;
use serde::Serialize;

use crate::open::open_device;
use crate::{CliError, DeviceSpec};

/// A class id with its name from NVIDIA's headers, when known.
#[derive(Debug, Clone, Serialize)]
pub struct ClassRef {
    /// The class number.
    pub id: u32,
    /// Its name (`HOPPER_COMPUTE_A`).
    pub name: Option<&'static str>,
}

impl ClassRef {
    /// `id` with its name.
    pub fn new(id: u32) -> ClassRef {
        ClassRef {
            id,
            name: class_name(id),
        }
    }
}

/// What the core knows about an identified chip.
#[derive(Debug, Clone, Serialize)]
pub struct ChipFacts {
    /// `GH100`.
    pub name: &'static str,
    /// `Hopper`.
    pub architecture: String,
    /// `A1`.
    pub revision: String,
    /// `NV_PMC_BOOT_0`.
    pub boot0: u32,
    /// `NV_PMC_BOOT_42`.
    pub boot42: u32,
    /// Shader model (90 for sm_90).
    pub sm: u32,
    /// Compute class.
    pub compute: ClassRef,
    /// GPFIFO channel class.
    pub gpfifo: ClassRef,
    /// Copy engine class.
    pub copy: ClassRef,
    /// Usermode (doorbell) class.
    pub usermode: ClassRef,
    /// `GMMU v2` / `GMMU v3`.
    pub mmu: &'static str,
    /// QMD layout (`V04_00`).
    pub qmd: String,
    /// QMD bytes.
    pub qmd_bytes: usize,
    /// How GSP boots.
    pub gsp_boot: &'static str,
    /// `nvidia/<dir>/gsp/` in the firmware tree.
    pub firmware_dir: &'static str,
}

impl ChipFacts {
    /// The facts of `chip`.
    pub fn of(chip: &Chip) -> ChipFacts {
        let i = chip.info;
        ChipFacts {
            name: i.name,
            architecture: i.architecture.to_string(),
            revision: format!("{:X}{:X}", chip.major_revision, chip.minor_revision),
            boot0: chip.boot0,
            boot42: chip.boot42,
            sm: i.sm.into(),
            compute: ClassRef::new(i.classes.compute),
            gpfifo: ClassRef::new(i.classes.gpfifo),
            copy: ClassRef::new(i.classes.copy),
            usermode: ClassRef::new(i.classes.usermode),
            mmu: match i.mmu {
                MmuVersion::V2 => "GMMU v2",
                MmuVersion::V3 => "GMMU v3",
            },
            qmd: format!("{:?}", i.qmd),
            qmd_bytes: i.qmd.size(),
            gsp_boot: match i.boot {
                BootMethod::Booter => "FWSEC-FRTS + booter on SEC2",
                BootMethod::FspChainOfTrust => "FSP chain of trust + GSP-FMC",
            },
            firmware_dir: i.firmware_dir,
        }
    }
}

/// GR facts RM reports.
#[derive(Debug, Clone, Serialize)]
pub struct GrFacts {
    /// Raw `SM_VERSION`.
    pub sm_version: u32,
    /// Enabled SMs.
    pub sms: u32,
    /// Enabled TPCs.
    pub tpcs: u32,
    /// SMs per TPC.
    pub sm_per_tpc: u32,
    /// GPCs.
    pub gpcs: u32,
    /// TPCs per GPC, at most.
    pub tpc_per_gpc: u32,
    /// Warps per SM, at most.
    pub max_warps_per_sm: u32,
}

/// The object `nvbare info --device DEV --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct InfoReport {
    /// The device string.
    pub device: String,
    /// What it is (`simulated NVIDIA GeForce RTX 4090`, the card, the server's name).
    pub description: String,
    /// PCI `vendor:device`, hex.
    pub pci_id: Option<String>,
    /// PCI subsystem `vendor:device`, hex.
    pub pci_subsystem: Option<String>,
    /// VRAM in MiB, when known.
    pub vram_mib: Option<u64>,
    /// The chip.
    pub chip: Option<ChipFacts>,
    /// GR facts (from opening the device).
    pub gr: Option<GrFacts>,
    /// RM's version, when it reported one.
    pub rm_version: Option<String>,
    /// Every class RM offers.
    pub classes: Vec<ClassRef>,
    /// What else this kind of device tells (BARs, DMA, IOMMU group, UUID, driver, doorbell).
    pub extra: BTreeMap<&'static str, String>,
}

impl InfoReport {
    /// An empty report for `device`.
    pub fn new(device: &DeviceSpec, description: String) -> InfoReport {
        InfoReport {
            device: device.to_string(),
            description,
            pci_id: None,
            pci_subsystem: None,
            vram_mib: None,
            chip: None,
            gr: None,
            rm_version: None,
            classes: Vec::new(),
            extra: BTreeMap::new(),
        }
    }

    /// Sets the PCI ids from config dwords 0 and 0x2c.
    pub fn set_pci(&mut self, id: u32, sub: u32) {
        self.pci_id = Some(format!("{:04x}:{:04x}", id & 0xffff, id >> 16));
        self.pci_subsystem = Some(format!("{:04x}:{:04x}", sub & 0xffff, sub >> 16));
    }

    /// Adds what the device layer reports after opening the device.
    pub fn set_device_info(&mut self, i: &DeviceInfo) {
        let g = i.gr;
        self.gr = Some(GrFacts {
            sm_version: g.sm_version,
            sms: g.sm_count(),
            tpcs: g.tpcs,
            sm_per_tpc: g.sm_per_tpc,
            gpcs: g.gpcs,
            tpc_per_gpc: g.tpc_per_gpc,
            max_warps_per_sm: g.max_warps_per_sm,
        });
        self.rm_version = i.driver_version.clone();
        self.classes = i.class_list.iter().map(|c| ClassRef::new(*c)).collect();
    }

    /// Opens `device` with the device layer and adds what RM reports.
    pub fn add_rm_view(&mut self, device: DeviceSpec) -> Result<(), CliError> {
        let dev = open_device(device, DeviceOptions::default())?;
        self.set_device_info(dev.info());
        Ok(())
    }

    /// The report as pretty JSON, with a newline.
    pub fn to_json(&self) -> Result<String, CliError> {
        serde_json::to_string_pretty(self)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Runtime(format!("encoding JSON: {e}")))
    }
}
