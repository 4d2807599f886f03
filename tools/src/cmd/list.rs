//! `nvbare list`: NVIDIA PCI functions from sysfs, and whether each GPU is ready for nvbare
//! (`cmd::readiness`).

use std::io::Write;

use nvbare::backend::firmware::FirmwareSource;
use nvbare_pci_host::bind::human;
use nvbare_pci_host::{PciFunction, Sysfs};
use serde::Serialize;

use super::readiness::{self, Bar1Verdict, Context, Readiness};
use crate::CliError;

/// Formats a byte count as the largest whole binary unit ("16M", "256G").
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (u, shift) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{u}", bytes >> shift);
        }
    }
    format!("{bytes}")
}

/// One PCI function of `nvbare list --json`.
#[derive(Debug, Serialize)]
pub struct Function {
    /// `DOMAIN:BUS:DEV.FN`.
    pub bdf: String,
    /// Vendor id, hex.
    pub vendor: String,
    /// Device id, hex.
    pub device: String,
    /// Product name, or the class for companions.
    pub name: String,
    /// Class code, hex.
    pub class: String,
    /// Whether this is a GPU (a display controller).
    pub gpu: bool,
    /// The bound driver.
    pub driver: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// Memory BARs.
    pub bars: Vec<BarSize>,
    /// For GPUs: what nvbare needs and what is missing.
    pub readiness: Option<Readiness>,
}

/// A BAR of [`Function`].
#[derive(Debug, Serialize)]
pub struct BarSize {
    /// BAR index.
    pub index: u8,
    /// Size in bytes.
    pub size: u64,
}

/// The object `nvbare list --json` prints.
#[derive(Debug, Serialize)]
pub struct ListReport {
    /// The PCI devices directory read.
    pub sysfs: String,
    /// NVIDIA functions, by address.
    pub functions: Vec<Function>,
}

fn name(f: &PciFunction) -> &'static str {
    f.name().unwrap_or(if f.is_gpu() {
        "unknown NVIDIA GPU"
    } else {
        f.class_name()
    })
}

fn row(f: &PciFunction) -> String {
    let bars: Vec<String> = f
        .bars
        .iter()
        .map(|b| format!("BAR{}={}", b.index, human_size(b.size)))
        .collect();
    format!(
        "{}  {:04x}:{:04x}  {:<28} driver={:<10} iommu_group={:<5} {}",
        f.bdf,
        f.vendor,
        f.device,
        name(f),
        f.driver.as_deref().unwrap_or("none"),
        f.iommu_group.map_or("none".to_string(), |g| g.to_string()),
        if bars.is_empty() {
            "no BARs".to_string()
        } else {
            bars.join(" ")
        },
    )
}

/// The readiness lines under a GPU's row.
fn readiness_lines(r: &Readiness) -> Vec<String> {
    let mut v = vec![if r.ready {
        format!("    ready for nvbare: --device {}", r.device)
    } else {
        "    not ready for nvbare:".to_string()
    }];
    let group = match (r.iommu_group, &r.vfio_node) {
        (Some(g), Some(p)) => format!(
            "group {g}, {} {}",
            p.display(),
            if r.vfio_node_exists {
                "present"
            } else {
                "absent"
            }
        ),
        _ => "none (IOMMU off)".to_string(),
    };
    let bar1 = r.bar1_bytes.map_or("none".to_string(), human);
    let vram = r
        .vram_bytes
        .map_or("unknown (checked when opened)".to_string(), |v| {
            format!("at most {}", human(v))
        });
    let verdict = match r.bar1 {
        Bar1Verdict::Covers => "covers VRAM",
        Bar1Verdict::TooSmall => "smaller than VRAM",
        Bar1Verdict::Limits => {
            "smaller than VRAM and not resizable: bare metal uses only the VRAM BAR1 covers"
        }
        Bar1Verdict::Unknown => "VRAM not known",
    };
    let fw = match (&r.chip, r.firmware_present) {
        (Some(c), Some(true)) => format!("{c}: present in {}", r.firmware_dir.display()),
        (Some(c), _) => format!("{c}: missing from {}", r.firmware_dir.display()),
        (None, _) => "chip unknown".to_string(),
    };
    v.push(format!(
        "      driver    {}",
        r.driver_name.as_deref().unwrap_or("none")
    ));
    v.push(format!("      iommu     {group}"));
    v.push(format!("      bar1      {bar1}, VRAM {vram}: {verdict}"));
    v.push(format!("      firmware  {fw}"));
    for a in &r.advice {
        v.push(format!("      to do     {a}"));
    }
    v
}

/// `nvidia:N` of each GPU nvidia.ko drives, by address (empty without the driver).
pub fn nvidia_indices() -> Vec<(nvbare_pci_host::Bdf, u32)> {
    #[cfg(feature = "nvidia-kmod")]
    {
        use nvbare_pci_host::nvidia::NvidiaDriver;
        let Ok(cards) = NvidiaDriver::open().and_then(|d| d.cards()) else {
            return Vec::new();
        };
        cards
            .iter()
            .map(|c| {
                let bdf = nvbare_pci_host::Bdf {
                    domain: c.domain,
                    bus: c.bus,
                    device: c.slot,
                    function: c.function,
                };
                (bdf, c.minor)
            })
            .collect()
    }
    #[cfg(not(feature = "nvidia-kmod"))]
    Vec::new()
}

/// The report for `funcs`, NVIDIA functions read from `sysfs`.
pub fn report(sysfs: &Sysfs, funcs: &[PciFunction]) -> ListReport {
    let firmware = FirmwareSource::default();
    let dev = readiness::dev_root();
    let ctx = Context {
        sysfs,
        dev: &dev,
        firmware: &firmware,
    };
    let indices = if funcs.iter().any(|f| f.driver.as_deref() == Some("nvidia")) {
        nvidia_indices()
    } else {
        Vec::new()
    };
    let functions = funcs
        .iter()
        .map(|f| Function {
            bdf: f.bdf.to_string(),
            vendor: format!("{:04x}", f.vendor),
            device: format!("{:04x}", f.device),
            name: name(f).to_string(),
            class: format!("{:06x}", f.class),
            gpu: f.is_gpu(),
            driver: f.driver.clone(),
            iommu_group: f.iommu_group,
            bars: f
                .bars
                .iter()
                .map(|b| BarSize {
                    index: b.index,
                    size: b.size,
                })
                .collect(),
            readiness: f.is_gpu().then(|| {
                let n = indices.iter().find(|(b, _)| *b == f.bdf).map(|(_, n)| *n);
                readiness::assess(&ctx, f, n)
            }),
        })
        .collect();
    ListReport {
        sysfs: sysfs.devices_dir().display().to_string(),
        functions,
    }
}

/// Runs `nvbare list [--json]`.
pub fn run(out: &mut dyn Write, sysfs: &Sysfs, json: bool) -> Result<(), CliError> {
    let w = |out: &mut dyn Write, s: &str| {
        writeln!(out, "{s}").map_err(|e| CliError::Runtime(format!("writing output: {e}")))
    };
    let funcs = sysfs.list_nvidia()?;
    if json {
        let s = serde_json::to_string_pretty(&report(sysfs, &funcs))
            .map_err(|e| CliError::Runtime(format!("encoding JSON: {e}")))?;
        return w(out, &s);
    }
    if funcs.is_empty() {
        return w(
            out,
            &format!(
                "no NVIDIA PCI devices found under {} (is the GPU installed and powered? \
                 `lspci -d 10de:` lists what the kernel sees)",
                sysfs.devices_dir().display()
            ),
        );
    }
    let r = report(sysfs, &funcs);
    for (f, j) in funcs.iter().zip(&r.functions) {
        w(out, &row(f))?;
        if let Some(ready) = &j.readiness {
            for l in readiness_lines(ready) {
                w(out, &l)?;
            }
        }
    }
    Ok(())
}
