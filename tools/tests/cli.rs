//! The `nvbare` binary as a user runs it.

use std::process::{Command, Output};

use nvbare_integration::sysfs_fixture::SysfsFixture;

fn nvbare(args: &[&str], sysfs: Option<&std::path::Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(args).env_remove("NVBARE_LOG");
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
fn info_identifies_every_simulated_chip() {
    for (dev, chip, compute, mmu, qmd) in [
        (
            "sim:gh100",
            "GH100 (Hopper)",
            "HOPPER_COMPUTE_A (0xcbc0)",
            "GMMU v3",
            "V04_00",
        ),
        (
            "sim:ad102",
            "AD102 (Ada)",
            "ADA_COMPUTE_A (0xc9c0)",
            "GMMU v2",
            "V03_00",
        ),
        (
            "sim:gb202",
            "GB202 (Blackwell)",
            "BLACKWELL_COMPUTE_B (0xcec0)",
            "GMMU v3",
            "V05_00",
        ),
    ] {
        let o = nvbare(&["info", "--device", dev], None);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{dev}: {}", text(&o.stderr));
        for want in [chip, compute, mmu, qmd] {
            assert!(out.contains(want), "{dev}: missing {want:?} in\n{out}");
        }
    }
}

#[test]
fn info_defaults_to_the_simulated_gh100() {
    let o = nvbare(&["info"], None);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("GH100 (Hopper)"));
}

#[test]
fn bad_device_strings_are_usage_errors() {
    for bad in ["gpu0", "sim:tu102", "nvidia:x", "vfio:zz"] {
        let o = nvbare(&["info", "--device", bad], None);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = text(&o.stderr);
        assert!(err.contains("valid forms"), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
}

#[test]
fn unavailable_backends_fail_cleanly() {
    for dev in ["nvidia:0", "vfio:0000:01:00.0"] {
        let o = nvbare(&["info", "--device", dev], None);
        assert!(!o.status.success(), "{dev}");
        let err = text(&o.stderr);
        assert!(err.starts_with("error: "), "{dev}: {err}");
        assert!(!err.contains("panicked"), "{dev}: {err}");
    }
}

#[test]
fn list_reads_the_fixture_tree() {
    let fx = SysfsFixture::several_gpus();
    let o = nvbare(&["list"], Some(fx.root()));
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with("0000:01:00.0  10de:2335  NVIDIA H200"),
        "{out}"
    );
    assert!(
        lines[0].contains("driver=nvidia") && lines[0].contains("iommu_group=12"),
        "{out}"
    );
    assert!(lines[0].contains("BAR0=16M BAR1=256G BAR3=32M"), "{out}");
    assert!(
        lines[2].contains("audio") && lines[2].contains("iommu_group=30"),
        "{out}"
    );
    assert!(lines[3].contains("unknown NVIDIA GPU") && lines[3].contains("iommu_group=none"));
    assert!(!out.contains("8086"), "{out}");
}

#[test]
fn list_without_gpus_says_so() {
    let fx = SysfsFixture::new();
    let o = nvbare(&["list"], Some(fx.root()));
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("no NVIDIA PCI devices found"));
}

#[test]
fn list_reports_unreadable_sysfs() {
    let o = nvbare(&["list"], Some(std::path::Path::new("/nonexistent/nvbare")));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("is sysfs mounted"));

    let fx = SysfsFixture::several_gpus();
    fx.break_attribute("0000:01:00.0", "device");
    let o = nvbare(&["list"], Some(fx.root()));
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("0000:01:00.0/device"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
