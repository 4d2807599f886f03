//! The bind planner against fixture sysfs trees: the exact writes, in order, and every refusal.

use std::fs;

use nvbare_integration::sysfs_fixture::SysfsFixture;
use nvbare_pci_host::bind::{
    Action, BindError, BindOptions, BindSnapshot, execute, plan_bind, plan_unbind, verify_bound,
};
use nvbare_pci_host::{Bdf, Sysfs, SysfsError};

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

fn writes(root: &std::path::Path, plan: &nvbare_pci_host::bind::Plan) -> Vec<String> {
    plan.actions
        .iter()
        .map(|a| match a {
            Action::Write { path, value } => {
                format!("{} {value:?}", path.strip_prefix(root).unwrap().display())
            }
            Action::ResizeBar { path, candidates } => format!(
                "{} resize {candidates:?}",
                path.strip_prefix(root).unwrap().display()
            ),
        })
        .collect()
}

#[test]
fn bind_moves_the_gpu_and_its_audio_and_grows_bar1() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:01:00.0")).unwrap();
    assert_eq!(snap.group, Some(12));
    assert_eq!(snap.members.len(), 2);
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    assert_eq!(plan.functions, [bdf("0000:01:00.0"), bdf("0000:01:00.1")]);
    assert_eq!(
        writes(fx.root(), &plan),
        [
            "bus/pci/devices/0000:01:00.0/driver_override \"vfio-pci\"",
            "bus/pci/devices/0000:01:00.1/driver_override \"vfio-pci\"",
            "bus/pci/devices/0000:01:00.0/driver/unbind \"0000:01:00.0\"",
            "bus/pci/devices/0000:01:00.1/driver/unbind \"0000:01:00.1\"",
            "bus/pci/devices/0000:01:00.0/resource1_resize resize [15, 14, 13, 12, 11, 10, 9]",
            "bus/pci/drivers_probe \"0000:01:00.0\"",
            "bus/pci/drivers_probe \"0000:01:00.1\"",
        ]
    );
    // The dry-run text: every write as `write <path> <value>`, in order.
    let text = plan.to_string();
    let root = fx.root().display();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("write ")).collect();
    assert_eq!(
        lines,
        [
            format!("write {root}/bus/pci/devices/0000:01:00.0/driver_override vfio-pci"),
            format!("write {root}/bus/pci/devices/0000:01:00.1/driver_override vfio-pci"),
            format!("write {root}/bus/pci/devices/0000:01:00.0/driver/unbind 0000:01:00.0"),
            format!("write {root}/bus/pci/devices/0000:01:00.1/driver/unbind 0000:01:00.1"),
            format!("write {root}/bus/pci/devices/0000:01:00.0/resource1_resize 15"),
            format!("write {root}/bus/pci/drivers_probe 0000:01:00.0"),
            format!("write {root}/bus/pci/drivers_probe 0000:01:00.1"),
        ]
    );
    assert!(text.contains("resize BAR1 to 32 GiB"), "{text}");
    assert!(text.contains("retry with 14 (16 GiB)"), "{text}");

    // Without resizing.
    let plan = plan_bind(&snap, BindOptions { resize_bar1: false }).unwrap();
    assert_eq!(plan.actions.len(), 6);
}

#[test]
fn executing_the_plan_writes_exactly_those_values() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:01:00.0")).unwrap();
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    let out = execute(&plan, true).unwrap();
    assert_eq!(out.done.len(), 7);
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let dev = fx.device_dir("0000:01:00.0");
    assert_eq!(
        fs::read_to_string(dev.join("driver_override")).unwrap(),
        "vfio-pci"
    );
    assert_eq!(
        fs::read_to_string(dev.join("resource1_resize")).unwrap(),
        "15"
    );
    // Both functions were unbound from their own drivers (the driver links point there).
    let nvidia = fx.root().join("bus/pci/drivers/nvidia/unbind");
    assert_eq!(fs::read_to_string(nvidia).unwrap(), "0000:01:00.0");
    let snd = fx.root().join("bus/pci/drivers/snd_hda_intel/unbind");
    assert_eq!(fs::read_to_string(snd).unwrap(), "0000:01:00.1");
    // drivers_probe saw the last function written.
    let probe = fx.root().join("bus/pci/drivers_probe");
    assert_eq!(fs::read_to_string(probe).unwrap(), "0000:01:00.1");
    // A fixture has no kernel behind it: the GPU is still on nvidia, which verify reports.
    let e = verify_bound(&s, bdf("0000:01:00.0")).unwrap_err();
    assert!(matches!(e, BindError::DidNotBind { .. }));
    assert!(e.to_string().contains("dmesg"), "{e}");
}

#[test]
fn refused_resize_falls_back_then_warns() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:01:00.0")).unwrap();
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    // A directory where the attribute was: every resize write fails, the rest goes on.
    fx.break_attribute("0000:01:00.0", "resource1_resize");
    let out = execute(&plan, true).unwrap();
    assert_eq!(out.done.len(), 6);
    assert_eq!(out.warnings.len(), 1);
    assert!(
        out.warnings[0].contains("Above 4G decoding"),
        "{:?}",
        out.warnings
    );
}

#[test]
fn a_failed_write_stops_with_the_path_and_advice() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:01:00.0")).unwrap();
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    fx.break_attribute("0000:01:00.1", "driver_override");
    let e = execute(&plan, true).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, BindError::Sysfs(SysfsError::Write { .. })),
        "{msg}"
    );
    assert!(msg.contains("0000:01:00.1/driver_override"), "{msg}");
    // The first write happened, nothing after the failing one did.
    let nvidia_unbind = fx.root().join("bus/pci/drivers/nvidia/unbind");
    assert_eq!(fs::read_to_string(nvidia_unbind).unwrap(), "");
}

#[test]
fn vfio_pci_must_be_loaded_to_execute() {
    let fx = SysfsFixture::bind_tree();
    fs::remove_dir_all(fx.root().join("bus/pci/drivers/vfio-pci")).unwrap();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:02:00.0")).unwrap();
    assert!(!snap.vfio_pci_loaded);
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    assert!(plan.to_string().contains("modprobe vfio-pci"));
    let e = execute(&plan, snap.vfio_pci_loaded).unwrap_err();
    assert!(matches!(e, BindError::VfioPciNotLoaded), "{e}");
    assert!(e.to_string().contains("modprobe vfio-pci"));
}

#[test]
fn a_gpu_alone_in_its_group_with_a_full_size_bar() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:02:00.0")).unwrap();
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    assert_eq!(
        writes(fx.root(), &plan),
        [
            "bus/pci/devices/0000:02:00.0/driver_override \"vfio-pci\"",
            "bus/pci/devices/0000:02:00.0/driver/unbind \"0000:02:00.0\"",
            "bus/pci/drivers_probe \"0000:02:00.0\"",
        ]
    );
    assert!(
        plan.notes.iter().any(|n| n.contains("offers no resize")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn a_shared_group_is_refused_naming_the_foreign_devices() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:03:00.0")).unwrap();
    assert_eq!(snap.members.len(), 4);
    let e = plan_bind(&snap, BindOptions::default()).unwrap_err();
    let msg = e.to_string();
    match &e {
        BindError::GroupShared { group, others, .. } => {
            assert_eq!(*group, 14);
            // The NIC blocks; the root port on pcieport does not.
            assert_eq!(others.len(), 1, "{others:?}");
            assert!(
                others[0].starts_with("0000:04:00.0 8086:1533"),
                "{others:?}"
            );
            assert!(others[0].contains("Ethernet controller, driver igb"));
        }
        _ => panic!("{msg}"),
    }
    assert!(msg.contains("ACS"), "{msg}");
    assert!(msg.contains("CPU root port"), "{msg}");
    // Once the NIC is on vfio-pci (the user's choice), binding works.
    fs::remove_file(fx.device_dir("0000:04:00.0").join("driver")).unwrap();
    let snap = BindSnapshot::read(&s, bdf("0000:03:00.0")).unwrap();
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    assert_eq!(plan.functions, [bdf("0000:03:00.0"), bdf("0000:03:00.1")]);
}

#[test]
fn no_iommu_is_refused_with_the_kernel_parameters() {
    let fx = SysfsFixture::no_iommu();
    let s = Sysfs::new(fx.root());
    assert!(!s.iommu_enabled());
    let snap = BindSnapshot::read(&s, bdf("0000:01:00.0")).unwrap();
    assert_eq!(snap.group, None);
    assert_eq!(snap.members.len(), 2, "the slot's functions");
    let e = plan_bind(&snap, BindOptions::default()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, BindError::NoIommu { .. }), "{msg}");
    for want in ["intel_iommu=on", "amd_iommu=on", "NVBARE_VFIO_NOIOMMU"] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    // Unbinding has nothing to undo.
    let plan = plan_unbind(&snap).unwrap();
    assert!(plan.actions.is_empty());
    assert!(plan.notes[0].contains("nothing to undo"));
}

#[test]
fn wrong_targets_are_refused() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:01:00.1")).unwrap();
    let e = plan_bind(&snap, BindOptions::default()).unwrap_err();
    assert!(e.to_string().contains("bind 0000:01:00.0 instead"), "{e}");
    let snap = BindSnapshot::read(&s, bdf("0000:04:00.0")).unwrap();
    assert!(matches!(
        plan_bind(&snap, BindOptions::default()),
        Err(BindError::NotNvidia { vendor: 0x8086, .. })
    ));
    assert!(matches!(
        BindSnapshot::read(&s, bdf("0000:09:00.0")),
        Err(BindError::Sysfs(SysfsError::NoSuchDevice { .. }))
    ));
}

#[test]
fn already_bound_gpu_needs_no_writes_and_unbind_reverses_all_four_functions() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let snap = BindSnapshot::read(&s, bdf("0000:06:00.0")).unwrap();
    let plan = plan_bind(&snap, BindOptions::default()).unwrap();
    assert!(plan.actions.is_empty());
    assert!(plan.notes[0].contains("already bound"), "{:?}", plan.notes);
    verify_bound(&s, bdf("0000:06:00.0")).unwrap();

    let plan = plan_unbind(&snap).unwrap();
    let mut want = Vec::new();
    for f in 0..4 {
        want.push(format!(
            "bus/pci/devices/0000:06:00.{f}/driver_override \"\\n\""
        ));
    }
    for f in 0..4 {
        want.push(format!(
            "bus/pci/devices/0000:06:00.{f}/driver/unbind \"0000:06:00.{f}\""
        ));
    }
    for f in 0..4 {
        want.push(format!("bus/pci/drivers_probe \"0000:06:00.{f}\""));
    }
    assert_eq!(writes(fx.root(), &plan), want);
    let text = plan.to_string();
    assert!(
        text.contains(&format!(
            "write {}/bus/pci/devices/0000:06:00.0/driver_override \"\\n\"",
            fx.root().display()
        )),
        "{text}"
    );
    execute(&plan, true).unwrap();
    assert_eq!(
        fs::read_to_string(fx.device_dir("0000:06:00.3").join("driver_override")).unwrap(),
        "\n"
    );
    let unbind = fx.root().join("bus/pci/drivers/vfio-pci/unbind");
    assert_eq!(fs::read_to_string(unbind).unwrap(), "0000:06:00.3");
}

#[test]
fn unreadable_group_is_a_sysfs_error() {
    let fx = SysfsFixture::bind_tree();
    let dir = fx.root().join("kernel/iommu_groups/12/devices");
    fs::remove_dir_all(&dir).unwrap();
    fs::write(&dir, "").unwrap();
    let e = BindSnapshot::read(&Sysfs::new(fx.root()), bdf("0000:01:00.0")).unwrap_err();
    assert!(e.to_string().contains("iommu_groups/12/devices"), "{e}");
}
