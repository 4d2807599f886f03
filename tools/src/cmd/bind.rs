//! `nvbare bind BDF` / `nvbare unbind BDF`: move a GPU (with its audio/USB functions) to
//! vfio-pci and back. `--dry-run` prints the sysfs writes, in order, without making them.

use std::io::Write;

use nvbare_pci_host::bind::{
    BindOptions, BindSnapshot, Plan, execute, plan_bind, plan_unbind, verify_bound,
};
use nvbare_pci_host::{Bdf, Sysfs};

use crate::CliError;

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

fn perform(
    out: &mut dyn Write,
    sysfs: &Sysfs,
    snap: &BindSnapshot,
    plan: &Plan,
    dry_run: bool,
    what: &str,
) -> Result<(), CliError> {
    if dry_run {
        writeln!(
            out,
            "# nvbare {what} {} --dry-run: these writes would be made, in order",
            snap.target
        )
        .map_err(io)?;
        return write!(out, "{plan}").map_err(io);
    }
    for n in &plan.notes {
        writeln!(out, "# {n}").map_err(io)?;
    }
    let outcome = execute(plan, sysfs.vfio_pci_loaded())?;
    for d in &outcome.done {
        writeln!(out, "{d}").map_err(io)?;
    }
    for w in &outcome.warnings {
        log::warn!("{w}");
    }
    Ok(())
}

/// Runs `nvbare bind BDF [--dry-run] [--no-resize]`.
pub fn run_bind(
    out: &mut dyn Write,
    sysfs: &Sysfs,
    bdf: Bdf,
    dry_run: bool,
    resize_bar1: bool,
) -> Result<(), CliError> {
    let snap = BindSnapshot::read(sysfs, bdf)?;
    let plan = plan_bind(&snap, BindOptions { resize_bar1 })?;
    perform(out, sysfs, &snap, &plan, dry_run, "bind")?;
    if !dry_run && !plan.actions.is_empty() {
        verify_bound(sysfs, bdf)?;
        let group = snap.group.map(|g| g.to_string()).unwrap_or_default();
        writeln!(
            out,
            "{bdf} is on vfio-pci: /dev/vfio/{group}; run nvbare with --device vfio:{bdf}"
        )
        .map_err(io)?;
    }
    Ok(())
}

/// Runs `nvbare unbind BDF [--dry-run]`.
pub fn run_unbind(
    out: &mut dyn Write,
    sysfs: &Sysfs,
    bdf: Bdf,
    dry_run: bool,
) -> Result<(), CliError> {
    let snap = BindSnapshot::read(sysfs, bdf)?;
    let plan = plan_unbind(&snap)?;
    perform(out, sysfs, &snap, &plan, dry_run, "unbind")?;
    if !dry_run && !plan.actions.is_empty() {
        let f = sysfs.function(bdf)?;
        writeln!(
            out,
            "{bdf} is now on {}",
            f.driver.as_deref().unwrap_or("no driver")
        )
        .map_err(io)?;
    }
    Ok(())
}
