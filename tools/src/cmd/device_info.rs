//! The RM's view of a device for `nvbare info`: the class list and the GR facts, from opening
//! it with the device layer.

use std::io::Write;

use nvbare_core::device::DeviceOptions;
use nvbare_core::rm::class::class_name;

use crate::open::open_device;
use crate::{CliError, DeviceSpec};

/// Prints what RM reports for `device` (opens it; cheap on the simulator).
pub fn print(out: &mut dyn Write, device: DeviceSpec) -> Result<(), CliError> {
    let io = |e: std::io::Error| CliError::Runtime(format!("writing output: {e}"));
    let dev = open_device(device, DeviceOptions::default())?;
    let i = dev.info();
    let g = i.gr;
    writeln!(
        out,
        "gr        SM_VERSION {:#x} (sm_{}), {} SMs = {} TPCs x {} SMs/TPC ({} GPCs x {} TPCs/GPC \
         max), {} warps/SM",
        g.sm_version,
        i.sm,
        g.sm_count(),
        g.tpcs,
        g.sm_per_tpc,
        g.gpcs,
        g.tpc_per_gpc,
        g.max_warps_per_sm
    )
    .map_err(io)?;
    if let Some(v) = &i.driver_version {
        writeln!(out, "rm        {v}").map_err(io)?;
    }
    writeln!(out, "classes   {} reported by RM:", i.class_list.len()).map_err(io)?;
    let mut line = String::new();
    for c in &i.class_list {
        let s = match class_name(*c) {
            Some(n) => format!("{c:#06x} {n}"),
            None => format!("{c:#06x}"),
        };
        if !line.is_empty() && line.len() + s.len() + 2 > 96 {
            writeln!(out, "          {line}").map_err(io)?;
            line.clear();
        }
        if !line.is_empty() {
            line.push_str(", ");
        }
        line.push_str(&s);
    }
    if !line.is_empty() {
        writeln!(out, "          {line}").map_err(io)?;
    }
    Ok(())
}
