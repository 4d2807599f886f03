//! Moving a GPU to vfio-pci and back, as a plan of sysfs writes.
//!
//! VFIO hands out whole IOMMU groups, so binding a GPU means binding every function in its
//! group: the GPU, and its companions (HDMI audio, USB-C controller, UCSI). Planning is pure:
//! [`BindSnapshot::read`] takes a snapshot of sysfs, [`plan_bind`] / [`plan_unbind`] turn it
//! into the exact writes, which `nvbare bind --dry-run` prints and [`execute`] performs.
//!
//! The kernel interface used: `driver_override` (which driver may take the function),
//! `driver/unbind` (release it from its driver), `resourceN_resize` (Resizable BAR, only while
//! no driver is bound) and `bus/pci/drivers_probe` (bind it again, honouring the override).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::{rebar_size_bytes, size_indices_desc};
use crate::sysfs::{BridgeWindow, driver_keeps_group_viable, write_attr};
use crate::{Bdf, NVIDIA_VENDOR_ID, PciFunction, Sysfs, SysfsError};

/// The driver VFIO users bind to.
pub const VFIO_PCI: &str = "vfio-pci";

/// Why a GPU cannot be moved to or from vfio-pci.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Reading or writing sysfs failed.
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    /// The function is not an NVIDIA device.
    #[error(
        "{bdf} is not an NVIDIA device (vendor {vendor:04x}); nvbare only binds NVIDIA GPUs \
         (see `nvbare list`)"
    )]
    NotNvidia {
        /// The function asked for.
        bdf: Bdf,
        /// Its vendor id.
        vendor: u16,
    },
    /// The function is a companion (audio, USB), not the GPU itself.
    #[error("{bdf} is the GPU's {class} function, not the GPU: bind {gpu} instead (it takes its companion functions along)", gpu = gpu.map(|g| g.to_string()).unwrap_or_else(|| "the GPU (function .0)".into()))]
    NotAGpu {
        /// The function asked for.
        bdf: Bdf,
        /// What it is.
        class: &'static str,
        /// The GPU on the same slot, when there is one.
        gpu: Option<Bdf>,
    },
    /// The device has no IOMMU group: the IOMMU is off.
    #[error(
        "{bdf} has no IOMMU group: the IOMMU is off, and VFIO needs it.\n\
         Enable VT-d (Intel) or AMD-Vi / IOMMU (AMD) in the firmware setup, boot with \
         `intel_iommu=on iommu=pt` (Intel) or `amd_iommu=on iommu=pt` (AMD) on the kernel \
         command line, reboot, and check that /sys/kernel/iommu_groups is not empty.\n\
         nvbare does not use VFIO's unsafe no-IOMMU mode unless you ask for it \
         (NVBARE_VFIO_NOIOMMU=1; see docs/vfio.md for why that is dangerous)."
    )]
    NoIommu {
        /// The function asked for.
        bdf: Bdf,
    },
    /// Devices that are not part of the GPU share its IOMMU group.
    #[error(
        "IOMMU group {group} of {bdf} also holds devices that are not part of this GPU:\n{list}\n\
         VFIO can only take a whole group, and nvbare will not take these devices from their \
         drivers. Options:\n\
         * move the GPU to a slot wired directly to a CPU root port (it then gets its own group);\n\
         * enable ACS (Access Control Services) in the firmware setup if it offers it, so the \
           IOMMU can isolate the slot;\n\
         * if the host can do without those devices, bind them to vfio-pci yourself (nvbare bind \
           only moves the GPU's own functions).\n\
         The `pcie_acs_override` kernel patch splits groups without real isolation: devices can \
         still reach each other's memory; do not use it on a machine you care about.",
        list = others.iter().map(|o| format!("  {o}")).collect::<Vec<_>>().join("\n")
    )]
    GroupShared {
        /// The GPU.
        bdf: Bdf,
        /// Its IOMMU group.
        group: u32,
        /// One line per foreign device: address, ids, class, driver.
        others: Vec<String>,
    },
    /// The vfio-pci driver is not loaded.
    #[error(
        "the vfio-pci driver is not loaded: run `modprobe vfio-pci` (add `vfio-pci` to \
         /etc/modules-load.d/vfio.conf to load it at boot), then run `nvbare bind` again"
    )]
    VfioPciNotLoaded,
    /// After the writes, the GPU is not on vfio-pci.
    #[error(
        "vfio-pci did not take {bdf} (its driver is now {driver}): check `dmesg | tail` for the \
         reason; `nvbare bind --dry-run {bdf}` shows what was written"
    )]
    DidNotBind {
        /// The GPU.
        bdf: Bdf,
        /// The driver it has now.
        driver: String,
    },
}

/// One function of the group, as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionState {
    /// Address, ids, driver, group, BARs.
    pub function: PciFunction,
    /// `driver_override`, when set.
    pub driver_override: Option<String>,
    /// `resource1_resize` (bit n = 2^n MiB), when the kernel offers BAR1 resizing.
    pub bar1_resize: Option<u64>,
}

/// What the planner needs to know about a GPU and its IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindSnapshot {
    /// The sysfs root that paths in the plan start from (`/sys`).
    pub root: PathBuf,
    /// The function asked for.
    pub target: Bdf,
    /// Its IOMMU group.
    pub group: Option<u32>,
    /// Every function of the group (or, without an IOMMU, the functions of the target's slot).
    pub members: Vec<FunctionState>,
    /// Whether `bus/pci/drivers/vfio-pci` exists.
    pub vfio_pci_loaded: bool,
    /// The 64-bit prefetchable window of the bridge above the target, when known.
    pub bridge_window: Option<BridgeWindow>,
}

impl BindSnapshot {
    /// Reads the snapshot for `target` from sysfs.
    pub fn read(sysfs: &Sysfs, target: Bdf) -> Result<Self, BindError> {
        let f = sysfs.function(target)?;
        let bdfs = match f.iommu_group {
            Some(g) => sysfs.iommu_group_members(g)?,
            None => sysfs
                .list()?
                .into_iter()
                .filter(|o| same_slot(o.bdf, target))
                .map(|o| o.bdf)
                .collect(),
        };
        let mut members = Vec::new();
        for bdf in bdfs {
            let function = if bdf == target {
                f.clone()
            } else {
                sysfs.function(bdf)?
            };
            members.push(FunctionState {
                driver_override: sysfs.driver_override(bdf)?,
                bar1_resize: sysfs.resize_sizes(bdf, 1)?,
                function,
            });
        }
        if !members.iter().any(|m| m.function.bdf == target) {
            // The group's device list lags the device itself (or a broken fixture): keep the
            // target in the plan anyway.
            members.push(FunctionState {
                driver_override: sysfs.driver_override(target)?,
                bar1_resize: sysfs.resize_sizes(target, 1)?,
                function: f.clone(),
            });
        }
        let bridge_window = match sysfs.parent_bridge(target) {
            Some(b) => sysfs
                .bridge_windows(b)
                .unwrap_or_default()
                .into_iter()
                .find(BridgeWindow::is_prefetchable_64),
            None => None,
        };
        Ok(BindSnapshot {
            root: sysfs.root().to_owned(),
            target,
            group: f.iommu_group,
            members,
            vfio_pci_loaded: sysfs.vfio_pci_loaded(),
            bridge_window,
        })
    }

    fn member(&self, bdf: Bdf) -> Option<&FunctionState> {
        self.members.iter().find(|m| m.function.bdf == bdf)
    }

    fn device_attr(&self, bdf: Bdf, attr: &str) -> PathBuf {
        self.root
            .join("bus/pci/devices")
            .join(bdf.to_string())
            .join(attr)
    }

    fn probe_path(&self) -> PathBuf {
        self.root.join("bus/pci/drivers_probe")
    }
}

fn same_slot(a: Bdf, b: Bdf) -> bool {
    a.domain == b.domain && a.bus == b.bus && a.device == b.device
}

fn is_vfio(driver: Option<&str>) -> bool {
    driver.is_some_and(|d| d.contains("vfio"))
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `value` to the attribute at `path`.
    Write {
        /// The attribute.
        path: PathBuf,
        /// What to write.
        value: String,
    },
    /// Resize a BAR through `resourceN_resize`: try each size index in turn (largest first)
    /// until the kernel accepts one (it refuses sizes the bridges above cannot forward).
    ResizeBar {
        /// The `resourceN_resize` attribute.
        path: PathBuf,
        /// Size indices (2^n MiB) to try, in order.
        candidates: Vec<u8>,
    },
}

/// The writes that move a GPU to vfio-pci (or back), in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The functions the plan moves.
    pub functions: Vec<Bdf>,
    /// The writes.
    pub actions: Vec<Action>,
    /// Remarks for the user (printed as `# ...` lines).
    pub notes: Vec<String>,
    /// Whether vfio-pci must be loaded before the plan can work.
    pub needs_vfio_pci: bool,
}

fn show_value(v: &str) -> String {
    if v.is_empty() || v.contains(char::is_whitespace) {
        format!("{v:?}")
    } else {
        v.to_owned()
    }
}

impl fmt::Display for Plan {
    /// The `--dry-run` form: `write <path> <value>` per write, `# ...` for remarks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.notes {
            writeln!(f, "# {n}")?;
        }
        for a in &self.actions {
            match a {
                Action::Write { path, value } => {
                    writeln!(f, "write {} {}", path.display(), show_value(value))?
                }
                Action::ResizeBar { path, candidates } => {
                    let Some((first, rest)) = candidates.split_first() else {
                        continue;
                    };
                    writeln!(
                        f,
                        "# resize BAR1 to {} (largest size the GPU supports)",
                        human(rebar_size_bytes(*first))
                    )?;
                    writeln!(f, "write {} {first}", path.display())?;
                    if !rest.is_empty() {
                        let r: Vec<String> = rest
                            .iter()
                            .map(|i| format!("{i} ({})", human(rebar_size_bytes(*i))))
                            .collect();
                        writeln!(
                            f,
                            "#   if the kernel refuses (the bridge window cannot grow): retry \
                             with {}",
                            r.join(", ")
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A byte count as `256 MiB`, `32 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024 && v.is_multiple_of(1024) && u + 1 < UNITS.len() {
        v /= 1024;
        u += 1;
    }
    format!("{v} {}", UNITS[u])
}

/// Options for [`plan_bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindOptions {
    /// Resize BAR1 to the largest size the GPU supports while it has no driver.
    pub resize_bar1: bool,
}

impl Default for BindOptions {
    fn default() -> Self {
        BindOptions { resize_bar1: true }
    }
}

fn foreign_line(f: &FunctionState) -> String {
    let func = &f.function;
    format!(
        "{} {:04x}:{:04x} ({}, driver {})",
        func.bdf,
        func.vendor,
        func.device,
        func.class_name(),
        func.driver.as_deref().unwrap_or("none")
    )
}

/// Checks that `target` is an NVIDIA GPU and splits the group into the GPU's own functions and
/// foreign devices that block VFIO.
fn split_group(snap: &BindSnapshot) -> Result<(Vec<&FunctionState>, Vec<String>), BindError> {
    let target = snap.target;
    let t = snap
        .member(target)
        .ok_or(SysfsError::NoSuchDevice { bdf: target })?;
    if t.function.vendor != NVIDIA_VENDOR_ID {
        return Err(BindError::NotNvidia {
            bdf: target,
            vendor: t.function.vendor,
        });
    }
    if !t.function.is_gpu() {
        let gpu = snap
            .members
            .iter()
            .find(|m| {
                m.function.is_gpu()
                    && m.function.vendor == NVIDIA_VENDOR_ID
                    && same_slot(m.function.bdf, target)
            })
            .map(|m| m.function.bdf);
        return Err(BindError::NotAGpu {
            bdf: target,
            class: t.function.class_name(),
            gpu,
        });
    }
    let Some(_) = snap.group else {
        return Err(BindError::NoIommu { bdf: target });
    };
    let mut own = vec![t];
    let mut foreign = Vec::new();
    for m in &snap.members {
        let f = &m.function;
        if f.bdf == target {
            continue;
        }
        // The GPU's companions: NVIDIA functions of the same slot, or NVIDIA non-GPU functions.
        let companion = f.vendor == NVIDIA_VENDOR_ID && (same_slot(f.bdf, target) || !f.is_gpu());
        if companion {
            own.push(m);
        } else if !driver_keeps_group_viable(f.driver.as_deref()) {
            foreign.push(foreign_line(m));
        }
    }
    Ok((own, foreign))
}

/// Plans moving `snap.target` and its companion functions to vfio-pci.
pub fn plan_bind(snap: &BindSnapshot, opts: BindOptions) -> Result<Plan, BindError> {
    let (own, foreign) = split_group(snap)?;
    let group = snap.group.unwrap_or_default();
    if !foreign.is_empty() {
        return Err(BindError::GroupShared {
            bdf: snap.target,
            group,
            others: foreign,
        });
    }
    let mut plan = Plan {
        needs_vfio_pci: true,
        ..Plan::default()
    };
    if !snap.vfio_pci_loaded {
        plan.notes
            .push("vfio-pci is not loaded: run `modprobe vfio-pci` before these writes".into());
    }
    let moving: Vec<&FunctionState> = own
        .iter()
        .copied()
        .filter(|m| !is_vfio(m.function.driver.as_deref()))
        .collect();
    if moving.is_empty() {
        plan.notes.push(format!(
            "{} and its companion functions are already bound to vfio-pci (IOMMU group {group})",
            snap.target
        ));
        return Ok(plan);
    }
    plan.notes.push(format!(
        "IOMMU group {group}: {}",
        own.iter()
            .map(|m| format!(
                "{} ({}, driver {})",
                m.function.bdf,
                m.function.class_name(),
                m.function.driver.as_deref().unwrap_or("none")
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    plan.functions = moving.iter().map(|m| m.function.bdf).collect();
    for m in &moving {
        if m.driver_override.as_deref() != Some(VFIO_PCI) {
            plan.actions.push(Action::Write {
                path: snap.device_attr(m.function.bdf, "driver_override"),
                value: VFIO_PCI.into(),
            });
        }
    }
    for m in &moving {
        if m.function.driver.is_some() {
            plan.actions.push(Action::Write {
                path: snap.device_attr(m.function.bdf, "driver/unbind"),
                value: m.function.bdf.to_string(),
            });
        }
    }
    if opts.resize_bar1 {
        plan_resize(snap, &own, &moving, &mut plan);
    }
    for m in &moving {
        plan.actions.push(Action::Write {
            path: snap.probe_path(),
            value: m.function.bdf.to_string(),
        });
    }
    Ok(plan)
}

fn plan_resize(
    snap: &BindSnapshot,
    own: &[&FunctionState],
    moving: &[&FunctionState],
    plan: &mut Plan,
) {
    let Some(t) = snap.member(snap.target) else {
        return;
    };
    let current = t.function.bar(1).map(|b| b.size).unwrap_or(0);
    let Some(mask) = t.bar1_resize else {
        plan.notes.push(format!(
            "BAR1 is {}; the kernel offers no resize for it (no Resizable BAR capability, \
             ReBAR off in the firmware setup, or a kernel older than 6.1)",
            human(current)
        ));
        return;
    };
    let candidates: Vec<u8> = size_indices_desc(mask)
        .into_iter()
        .filter(|i| rebar_size_bytes(*i) > current)
        .collect();
    if candidates.is_empty() {
        plan.notes.push(format!(
            "BAR1 is {} already, the largest size the GPU supports",
            human(current)
        ));
        return;
    }
    // The kernel resizes only while no function of the device has a driver.
    let still_bound: Vec<String> = own
        .iter()
        .filter(|m| !moving.iter().any(|x| x.function.bdf == m.function.bdf))
        .filter(|m| m.function.driver.is_some())
        .map(|m| m.function.bdf.to_string())
        .collect();
    if !still_bound.is_empty() {
        plan.notes.push(format!(
            "BAR1 is {} and could grow to {}, but {} stays bound to vfio-pci; run `nvbare unbind` \
             then `nvbare bind` to resize",
            human(current),
            human(rebar_size_bytes(candidates[0])),
            still_bound.join(", ")
        ));
        return;
    }
    if let Some(w) = snap.bridge_window {
        plan.notes.push(format!(
            "the bridge above forwards a {} prefetchable window; the kernel grows it if the \
             bridges above can",
            human(w.size)
        ));
    }
    plan.actions.push(Action::ResizeBar {
        path: snap.device_attr(snap.target, "resource1_resize"),
        candidates,
    });
}

/// Plans moving `snap.target` and its companions from vfio-pci back to their usual drivers.
pub fn plan_unbind(snap: &BindSnapshot) -> Result<Plan, BindError> {
    let own = match split_group(snap) {
        Ok((own, _)) => own,
        // Without an IOMMU nothing can be on vfio-pci; unbinding the slot is still well defined.
        Err(BindError::NoIommu { .. }) => snap
            .members
            .iter()
            .filter(|m| m.function.vendor == NVIDIA_VENDOR_ID)
            .collect(),
        Err(e) => return Err(e),
    };
    let mut plan = Plan::default();
    let moving: Vec<&FunctionState> = own
        .into_iter()
        .filter(|m| {
            is_vfio(m.function.driver.as_deref()) || m.driver_override.as_deref() == Some(VFIO_PCI)
        })
        .collect();
    if moving.is_empty() {
        plan.notes.push(format!(
            "{} is not bound to vfio-pci (driver {}): nothing to undo",
            snap.target,
            snap.member(snap.target)
                .and_then(|m| m.function.driver.as_deref())
                .unwrap_or("none")
        ));
        return Ok(plan);
    }
    plan.functions = moving.iter().map(|m| m.function.bdf).collect();
    for m in &moving {
        if m.driver_override.is_some() {
            // A newline clears the override (an empty write would never reach the kernel).
            plan.actions.push(Action::Write {
                path: snap.device_attr(m.function.bdf, "driver_override"),
                value: "\n".into(),
            });
        }
    }
    for m in &moving {
        if m.function.driver.is_some() {
            plan.actions.push(Action::Write {
                path: snap.device_attr(m.function.bdf, "driver/unbind"),
                value: m.function.bdf.to_string(),
            });
        }
    }
    for m in &moving {
        plan.actions.push(Action::Write {
            path: snap.probe_path(),
            value: m.function.bdf.to_string(),
        });
    }
    plan.notes.push(
        "the kernel then probes the usual drivers (nvidia or nouveau, snd_hda_intel); a function \
         whose driver is not loaded stays unbound"
            .into(),
    );
    Ok(plan)
}

/// What [`execute`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The writes made, as `write <path> <value>` lines.
    pub done: Vec<String>,
    /// Things that did not work but did not stop the plan (a refused BAR resize).
    pub warnings: Vec<String>,
}

/// Performs a plan's writes in order. A refused BAR resize tries the next smaller size and,
/// if none is accepted, becomes a warning; any other failed write stops the plan.
pub fn execute(plan: &Plan, vfio_pci_loaded: bool) -> Result<Outcome, BindError> {
    if plan.needs_vfio_pci && !vfio_pci_loaded && !plan.actions.is_empty() {
        return Err(BindError::VfioPciNotLoaded);
    }
    let mut out = Outcome::default();
    for a in &plan.actions {
        match a {
            Action::Write { path, value } => {
                write_attr(path, value)?;
                out.done
                    .push(format!("write {} {}", path.display(), show_value(value)));
            }
            Action::ResizeBar { path, candidates } => {
                resize(path, candidates, &mut out);
            }
        }
    }
    Ok(out)
}

fn resize(path: &Path, candidates: &[u8], out: &mut Outcome) {
    let mut errors = Vec::new();
    for i in candidates {
        match write_attr(path, &i.to_string()) {
            Ok(()) => {
                out.done.push(format!("write {} {i}", path.display()));
                if !errors.is_empty() {
                    out.warnings.push(format!(
                        "BAR1 resized to {} only (larger sizes refused: {})",
                        human(rebar_size_bytes(*i)),
                        errors.join("; ")
                    ));
                }
                return;
            }
            Err(e) => errors.push(format!("{}: {e}", human(rebar_size_bytes(*i)))),
        }
    }
    out.warnings.push(format!(
        "BAR1 could not be resized (the bridge windows above the GPU are probably too small; \
         enable \"Above 4G decoding\" and \"Resizable BAR\" in the firmware setup): {}",
        errors.join("; ")
    ));
}

/// Checks, after [`execute`], that the GPU ended up on vfio-pci.
pub fn verify_bound(sysfs: &Sysfs, bdf: Bdf) -> Result<(), BindError> {
    let f = sysfs.function(bdf)?;
    if is_vfio(f.driver.as_deref()) {
        Ok(())
    } else {
        Err(BindError::DidNotBind {
            bdf,
            driver: f.driver.unwrap_or_else(|| "none".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(256 << 20), "256 MiB");
        assert_eq!(human(32 << 30), "32 GiB");
        assert_eq!(human(1000), "1000 B");
        assert_eq!(human(1 << 50), "1 PiB");
    }

    #[test]
    fn values_are_shown_unambiguously() {
        assert_eq!(show_value("vfio-pci"), "vfio-pci");
        assert_eq!(show_value("\n"), "\"\\n\"");
        assert_eq!(show_value(""), "\"\"");
    }
}
