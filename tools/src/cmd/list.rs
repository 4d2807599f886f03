//! `nvbare list`: NVIDIA PCI functions from sysfs.

use std::io::Write;

use nvbare_pci_host::{PciFunction, Sysfs};

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

fn row(f: &PciFunction) -> String {
    let name = f.name().unwrap_or(if f.is_gpu() {
        "unknown NVIDIA GPU"
    } else {
        f.class_name()
    });
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
        name,
        f.driver.as_deref().unwrap_or("none"),
        f.iommu_group.map_or("none".to_string(), |g| g.to_string()),
        if bars.is_empty() {
            "no BARs".to_string()
        } else {
            bars.join(" ")
        },
    )
}

/// Runs `nvbare list`.
pub fn run(out: &mut dyn Write, sysfs: &Sysfs) -> Result<(), CliError> {
    let funcs = sysfs.list_nvidia()?;
    let w = |out: &mut dyn Write, s: String| {
        writeln!(out, "{s}").map_err(|e| CliError::Runtime(format!("writing output: {e}")))
    };
    if funcs.is_empty() {
        return w(
            out,
            format!(
                "no NVIDIA PCI devices found under {} (is the GPU installed and powered? \
                 `lspci -d 10de:` lists what the kernel sees)",
                sysfs.devices_dir().display()
            ),
        );
    }
    for f in &funcs {
        w(out, row(f))?;
    }
    Ok(())
}
