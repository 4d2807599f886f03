//! `nvbare info` with no `--device`: every GPU this machine shows, one line each (like
//! `nvidia-smi -L`, plus chip, VRAM, driver, address and the `--device` to pass), or how to
//! get the simulator when there is none.
//!
//! GPUs come from sysfs (any driver) and from nvidia.ko's card list (with the `nvidia-kmod`
//! feature). A GPU on nvidia.ko is opened through the driver for its chip and VRAM (RM clients
//! are shared, so this disturbs no other program); one on vfio-pci is not opened (its group
//! can have one user at a time), so its chip and memory come from its PCI device id.

use std::io::Write;

use nvbare_pci_host::{Bdf, Sysfs, SysfsError};
use serde::Serialize;

use super::readiness::{DriverKind, chip_of_device_id, vram_of_device_id};
use crate::CliError;

/// What to run when no GPU is visible.
pub const SIMULATOR_HINT: &str = "no GPUs found: nvbare's simulator needs none; try `nvbare \
     info --device sim:gh100` (or sim:ad102, sim:gb202), `nvbare demo` or `nvbare boot`, which \
     run on it by default";

/// One visible GPU.
#[derive(Debug, Clone, Serialize)]
pub struct VisibleGpu {
    /// Position in this list.
    pub index: usize,
    /// Product name.
    pub name: String,
    /// PCI address.
    pub bdf: String,
    /// PCI `vendor:device`, hex.
    pub pci_id: String,
    /// The driver bound (`none` when none).
    pub driver: String,
    /// Its kind.
    pub driver_kind: DriverKind,
    /// What to pass as `--device`, when nvbare can use it as it is.
    pub device: Option<String>,
    /// The chip (from the driver, or the PCI device id's block).
    pub chip: Option<String>,
    /// VRAM bytes: the driver's total, or the model's size (an upper bound).
    pub vram_bytes: Option<u64>,
    /// Where `vram_bytes` came from: `nvidia.ko` or `model`.
    pub vram_source: Option<&'static str>,
    /// Whether `list` finds it ready for the bare-metal path.
    pub ready_for_vfio: bool,
    /// Why the driver could not be asked, when it could not.
    pub note: Option<String>,
}

/// The object `nvbare info --json` (no `--device`) prints.
#[derive(Debug, Clone, Serialize)]
pub struct VisibleReport {
    /// The GPUs.
    pub gpus: Vec<VisibleGpu>,
    /// The simulated devices, always available.
    pub simulated: Vec<String>,
    /// Set when no GPU was found: how to use the simulator.
    pub hint: Option<String>,
}

/// Chip and VRAM of `nvidia:index`, from the driver.
#[cfg(feature = "nvidia-kmod")]
fn from_driver(index: u32) -> Result<(String, u64), String> {
    use nvbare_pci_host::nvidia::KernelGpu;
    let mut gpu = KernelGpu::open(index).map_err(|e| e.to_string())?;
    let chip = gpu.chip().map_err(|e| e.to_string())?;
    let vram = gpu.vram().map_err(|e| e.to_string())?;
    Ok((chip.info.name.to_string(), vram.total))
}

#[cfg(not(feature = "nvidia-kmod"))]
fn from_driver(index: u32) -> Result<(String, u64), String> {
    Err(crate::kmod::not_built(index).to_string())
}

/// Every GPU of `sysfs` and of nvidia.ko.
pub fn visible(sysfs: &Sysfs) -> Result<VisibleReport, CliError> {
    let funcs = match sysfs.list_nvidia() {
        Ok(f) => f,
        // No PCI bus in sysfs (a container): only the driver can show GPUs.
        Err(SysfsError::NoPciBus { .. }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let cards = super::list::nvidia_indices();
    let report = super::list::report(sysfs, &funcs);
    let mut gpus = Vec::new();
    let mut seen: Vec<Bdf> = Vec::new();
    for (f, j) in funcs.iter().zip(&report.functions) {
        if !f.is_gpu() {
            continue;
        }
        seen.push(f.bdf);
        let minor = cards.iter().find(|(b, _)| *b == f.bdf).map(|(_, n)| *n);
        let kind = DriverKind::of(f.driver.as_deref());
        let ready = j.readiness.as_ref().is_some_and(|r| r.ready);
        let mut g = VisibleGpu {
            index: gpus.len(),
            name: f.name().unwrap_or("unknown NVIDIA GPU").to_string(),
            bdf: f.bdf.to_string(),
            pci_id: format!("{:04x}:{:04x}", f.vendor, f.device),
            driver: f.driver.clone().unwrap_or_else(|| "none".into()),
            driver_kind: kind,
            device: match (kind, minor) {
                (DriverKind::Nvidia, Some(n)) => Some(format!("nvidia:{n}")),
                (DriverKind::VfioPci, _) => Some(format!("vfio:{}", f.bdf)),
                _ => None,
            },
            chip: chip_of_device_id(f.device).map(|c| c.name().to_string()),
            vram_bytes: vram_of_device_id(f.device),
            vram_source: vram_of_device_id(f.device).map(|_| "model"),
            ready_for_vfio: ready,
            note: None,
        };
        if let (DriverKind::Nvidia, Some(n)) = (kind, minor) {
            match from_driver(n) {
                Ok((chip, vram)) => {
                    g.chip = Some(chip);
                    g.vram_bytes = Some(vram);
                    g.vram_source = Some("nvidia.ko");
                }
                Err(e) => g.note = Some(e),
            }
        }
        gpus.push(g);
    }
    for (bdf, n) in cards.iter().filter(|(b, _)| !seen.contains(b)) {
        let mut g = VisibleGpu {
            index: gpus.len(),
            name: "NVIDIA GPU".into(),
            bdf: bdf.to_string(),
            pci_id: String::new(),
            driver: "nvidia".into(),
            driver_kind: DriverKind::Nvidia,
            device: Some(format!("nvidia:{n}")),
            chip: None,
            vram_bytes: None,
            vram_source: None,
            ready_for_vfio: false,
            note: None,
        };
        match from_driver(*n) {
            Ok((chip, vram)) => {
                g.chip = Some(chip);
                g.vram_bytes = Some(vram);
                g.vram_source = Some("nvidia.ko");
            }
            Err(e) => g.note = Some(e),
        }
        gpus.push(g);
    }
    let hint = gpus.is_empty().then(|| SIMULATOR_HINT.to_string());
    Ok(VisibleReport {
        gpus,
        simulated: ["sim:gh100", "sim:ad102", "sim:gb202"]
            .map(String::from)
            .to_vec(),
        hint,
    })
}

fn line(g: &VisibleGpu) -> String {
    let vram = match (g.vram_bytes, g.vram_source) {
        (Some(v), Some("nvidia.ko")) => format!("{} MiB", v >> 20),
        (Some(v), _) => format!("at most {}", nvbare_pci_host::bind::human(v)),
        _ => "unknown".into(),
    };
    let device = match (&g.device, g.driver_kind) {
        (Some(d), _) => format!("--device {d}"),
        (None, DriverKind::Nvidia) => "--device nvidia:N (nvidia.ko's card list was not \
                                       readable)"
            .to_string(),
        (None, _) => format!("not usable yet: run `nvbare bind {}`", g.bdf),
    };
    let mut s = format!(
        "GPU {}: {} ({})  chip {}  VRAM {vram}  driver {}  {device}",
        g.index,
        g.name,
        g.bdf,
        g.chip.as_deref().unwrap_or("unknown"),
        g.driver,
    );
    if let Some(n) = &g.note {
        s.push_str(&format!("\n       (the driver could not be asked: {n})"));
    }
    s
}

/// Runs `nvbare info [--json]` without `--device`.
pub fn run(out: &mut dyn Write, sysfs: &Sysfs, json: bool) -> Result<(), CliError> {
    let io = |e: std::io::Error| CliError::Runtime(format!("writing output: {e}"));
    let r = visible(sysfs)?;
    if json {
        let s = serde_json::to_string_pretty(&r)
            .map_err(|e| CliError::Runtime(format!("encoding JSON: {e}")))?;
        return writeln!(out, "{s}").map_err(io);
    }
    for g in &r.gpus {
        writeln!(out, "{}", line(g)).map_err(io)?;
    }
    match &r.hint {
        Some(h) => writeln!(out, "{h}").map_err(io)?,
        None => writeln!(
            out,
            "`nvbare info --device DEV` shows one in full; `nvbare list` says what each needs \
             for the bare-metal path; simulated GPUs: --device sim:gh100, sim:ad102, sim:gb202"
        )
        .map_err(io)?,
    }
    Ok(())
}
