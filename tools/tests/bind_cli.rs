//! `nvbare bind` / `nvbare unbind` and `--device vfio:` as a user runs them, against fixture
//! sysfs trees (`NVBARE_SYSFS_ROOT`).
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::{Command, Output};

use nvbare_integration::sysfs_fixture::SysfsFixture;

fn nvbare(args: &[&str], sysfs: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(args)
        .env_remove("NVBARE_LOG")
        .env_remove("NVBARE_VFIO_NOIOMMU");
    match sysfs {
        Some(p) => c.env("NVBARE_SYSFS_ROOT", p),
        None => c.env_remove("NVBARE_SYSFS_ROOT"),
    };
    c.output().expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn bind_dry_run_prints_the_exact_writes_and_writes_nothing() {
    let fx = SysfsFixture::bind_tree();
    let o = nvbare(&["bind", "--dry-run", "0000:01:00.0"], Some(fx.root()));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let r = fx.root().display();
    let writes: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        writes,
        [
            format!("write {r}/bus/pci/devices/0000:01:00.0/driver_override vfio-pci"),
            format!("write {r}/bus/pci/devices/0000:01:00.1/driver_override vfio-pci"),
            format!("write {r}/bus/pci/devices/0000:01:00.0/driver/unbind 0000:01:00.0"),
            format!("write {r}/bus/pci/devices/0000:01:00.1/driver/unbind 0000:01:00.1"),
            format!("write {r}/bus/pci/devices/0000:01:00.0/resource1_resize 15"),
            format!("write {r}/bus/pci/drivers_probe 0000:01:00.0"),
            format!("write {r}/bus/pci/drivers_probe 0000:01:00.1"),
        ],
        "{out}"
    );
    assert!(out.contains("IOMMU group 12"), "{out}");
    let ov = std::fs::read_to_string(fx.device_dir("0000:01:00.0").join("driver_override"));
    assert_eq!(ov.unwrap(), "(null)\n", "dry run wrote nothing");

    let o = nvbare(
        &["bind", "0000:01:00.0", "--dry-run", "--no-resize"],
        Some(fx.root()),
    );
    assert!(!text(&o.stdout).contains("resource1_resize"));
}

#[test]
fn bind_refuses_a_shared_group_and_a_machine_without_iommu() {
    let fx = SysfsFixture::bind_tree();
    let o = nvbare(&["bind", "--dry-run", "0000:03:00.0"], Some(fx.root()));
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("0000:04:00.0 8086:1533"), "{err}");
    assert!(err.contains("ACS"), "{err}");

    let fx = SysfsFixture::no_iommu();
    let o = nvbare(&["bind", "--dry-run", "0000:01:00.0"], Some(fx.root()));
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("intel_iommu=on"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bind_for_real_writes_then_reports_that_no_kernel_bound_it() {
    let fx = SysfsFixture::bind_tree();
    let o = nvbare(&["bind", "0000:02:00.0"], Some(fx.root()));
    let out = text(&o.stdout);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("write ")).count(),
        3,
        "{out}"
    );
    assert!(err.contains("vfio-pci did not take 0000:02:00.0"), "{err}");
    let ov = std::fs::read_to_string(fx.device_dir("0000:02:00.0").join("driver_override"));
    assert_eq!(ov.unwrap(), "vfio-pci");
}

#[test]
fn unbind_dry_run_reverses_every_function() {
    let fx = SysfsFixture::bind_tree();
    let o = nvbare(&["unbind", "--dry-run", "0000:06:00.0"], Some(fx.root()));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("write ")).count(),
        12,
        "{out}"
    );
    assert!(out.contains("driver_override \"\\n\""), "{out}");
    let o = nvbare(&["unbind", "0000:01:00.0"], Some(fx.root()));
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("nothing to undo"));
}

#[test]
fn bad_addresses_are_usage_errors() {
    let o = nvbare(&["bind", "01:00"], None);
    assert_eq!(o.status.code(), Some(2));
    let fx = SysfsFixture::bind_tree();
    let o = nvbare(&["bind", "--dry-run", "0000:0a:00.0"], Some(fx.root()));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("no PCI device 0000:0a:00.0"));
}

#[test]
fn vfio_device_on_this_machine_says_vfio_is_unavailable() {
    if Path::new("/dev/vfio/vfio").exists() {
        eprintln!("skipped: this machine has VFIO");
        return;
    }
    let o = nvbare(&["info", "--device", "vfio:0000:01:00.0"], None);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    for want in [
        "VFIO is not available",
        "modprobe vfio-pci",
        "intel_iommu=on",
        "nvbare bind",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
}
