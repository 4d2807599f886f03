//! `--json` on `list`, `info` and `boot`, `list`'s readiness report against fake sysfs trees,
//! and `info` without a device, as a user runs them.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nvbare_gsp_firmware::testutil;
use nvbare_integration::sysfs_fixture::{FakeFunction, SysfsFixture};
use serde_json::Value;

/// Runs nvbare with `sysfs` standing for /sys, `dev` for /dev (no nvidia.ko nodes there unless
/// a test makes them) and `firmware` as the firmware directory.
fn nvbare(args: &[&str], sysfs: &Path, dev: &Path, firmware: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .args(args)
        .env_remove("NVBARE_LOG")
        .env_remove("NVBARE_PROC_ROOT")
        .env("NVBARE_SYSFS_ROOT", sysfs)
        .env("NVBARE_DEV_ROOT", dev)
        .env("NVBARE_FIRMWARE_DIR", firmware)
        .env("NVBARE_NO_FETCH", "1")
        .output()
        .expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(&o.stdout)))
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("nvbare-json-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn gpu(
    bdf: &'static str,
    device: u16,
    driver: Option<&'static str>,
    group: Option<u32>,
    bar1: u64,
) -> FakeFunction {
    FakeFunction {
        bdf,
        vendor: 0x10de,
        device,
        class: 0x030000,
        driver,
        iommu_group: group,
        bars: vec![(0, 16 << 20), (1, bar1), (3, 32 << 20)],
    }
}

#[test]
fn info_of_a_simulated_chip_as_json() {
    let (sys, dev) = (Scratch::new("info-sys"), Scratch::new("info-dev"));
    let o = nvbare(
        &["info", "--device", "sim:ad102", "--json"],
        &sys.0,
        &dev.0,
        &testutil::firmware_dir(),
    );
    let v = json(&o);
    assert_eq!(v["device"], "sim:ad102");
    assert_eq!(v["chip"]["name"], "AD102");
    assert_eq!(v["chip"]["compute"]["name"], "ADA_COMPUTE_A");
    assert_eq!(v["chip"]["compute"]["id"], 0xc9c0);
    assert_eq!(v["chip"]["qmd"], "V03_00");
    assert!(v["vram_mib"].as_u64().unwrap() > 0, "{v}");
    assert!(v["gr"]["sms"].as_u64().unwrap() > 0, "{v}");
    let classes = v["classes"].as_array().unwrap();
    assert!(classes.iter().any(|c| c["id"] == 0xc9c0), "{v}");
    // The text form is still the text form.
    let o = nvbare(
        &["info", "--device", "sim:ad102"],
        &sys.0,
        &dev.0,
        &testutil::firmware_dir(),
    );
    let out = text(&o.stdout);
    assert!(out.starts_with("device    sim:ad102 (simulated"), "{out}");
    assert!(out.contains("compute   ADA_COMPUTE_A (0xc9c0)"), "{out}");
}

#[test]
fn list_as_json() {
    let fx = SysfsFixture::several_gpus();
    let dev = Scratch::new("list-dev");
    let v = json(&nvbare(
        &["list", "--json"],
        fx.root(),
        &dev.0,
        &testutil::firmware_dir(),
    ));
    let f = v["functions"].as_array().unwrap();
    assert_eq!(f.len(), 4, "{v}");
    assert_eq!(f[0]["bdf"], "0000:01:00.0");
    assert_eq!(f[0]["name"], "NVIDIA H200");
    assert_eq!(f[0]["bars"][1]["size"], 256u64 << 30);
    assert_eq!(f[0]["readiness"]["driver"], "nvidia");
    // The audio function has no readiness of its own.
    assert_eq!(f[2]["gpu"], false);
    assert!(f[2]["readiness"].is_null(), "{v}");
    assert_eq!(f[3]["readiness"]["chip"], Value::Null);
}

#[test]
fn list_says_what_each_gpu_needs() {
    let fx = SysfsFixture::new();
    fx.add_driver("vfio-pci");
    let g = 1u64 << 30;
    // Ready: on vfio-pci, its group node there, BAR1 over the 4090's 24 GiB.
    fx.add(&gpu(
        "0000:41:00.0",
        0x2684,
        Some("vfio-pci"),
        Some(30),
        32 * g,
    ));
    // On nvidia.ko.
    fx.add(&gpu(
        "0000:01:00.0",
        0x2335,
        Some("nvidia"),
        Some(12),
        256 * g,
    ));
    // BAR1 256 MiB, resizable up to 32 GiB.
    fx.add(&gpu(
        "0000:02:00.0",
        0x2684,
        Some("vfio-pci"),
        Some(31),
        256 << 20,
    ));
    fx.set_resize("0000:02:00.0", 1, 0xff00, 8);
    // BAR1 256 MiB and no resize.
    fx.add(&gpu("0000:03:00.0", 0x27b8, None, Some(32), 256 << 20));
    // No IOMMU group.
    fx.add(&gpu("0000:05:00.0", 0x27b8, Some("nvidia"), None, 32 * g));
    // A VM's layout: BAR0 64-bit, the VRAM window at BAR2.
    fx.add(&FakeFunction {
        bars: vec![(0, 16 << 20), (2, 256 * g), (4, 32 << 20)],
        ..gpu("0000:06:00.0", 0x2335, Some("nvidia"), None, 0)
    });
    // A GTX 1660 Ti (TU116) ready in every other way: not a chip nvbare boots bare metal.
    fx.add(&gpu(
        "0000:07:00.0",
        0x2182,
        Some("vfio-pci"),
        Some(33),
        32 * g,
    ));
    let dev = Scratch::new("ready-dev");
    std::fs::create_dir_all(dev.0.join("vfio")).unwrap();
    for group in ["30", "31", "33"] {
        std::fs::write(dev.0.join("vfio").join(group), "").unwrap();
    }
    let fw = testutil::require_firmware_dir();
    let o = nvbare(&["list"], fx.root(), &dev.0, &fw);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let block = |bdf: &str| -> String {
        let start = out
            .find(&format!("{bdf}  "))
            .unwrap_or_else(|| panic!("{bdf}:\n{out}"));
        let rest = &out[start..];
        let end = rest[1..].find("\n0000:").map_or(rest.len(), |e| e + 1);
        rest[..end].to_string()
    };
    let ready = block("0000:41:00.0");
    assert!(
        ready.contains("ready for nvbare: --device vfio:0000:41:00.0"),
        "{ready}"
    );
    assert!(ready.contains("/vfio/30 present"), "{ready}");
    assert!(ready.contains("covers VRAM"), "{ready}");
    assert!(!ready.contains("to do"), "{ready}");

    let nv = block("0000:01:00.0");
    assert!(nv.contains("not ready for nvbare"), "{nv}");
    assert!(
        nv.contains("run `nvbare bind 0000:01:00.0` to move it to vfio-pci"),
        "{nv}"
    );
    assert!(nv.contains("/vfio/12 absent"), "{nv}");

    let small = block("0000:02:00.0");
    assert!(
        small.contains(
            "BAR1 is 256 MiB, smaller than VRAM (24 GiB for this model): run `nvbare unbind \
             0000:02:00.0` then `nvbare bind 0000:02:00.0`, which resizes it to 32 GiB"
        ),
        "{small}"
    );
    // No resize: it works, with device memory limited to what BAR1 covers.
    let fixed = block("0000:03:00.0");
    assert!(
        fixed.contains("smaller than VRAM and not resizable: bare metal uses only the VRAM"),
        "{fixed}"
    );
    assert!(!fixed.contains("BAR1 is 256 MiB"), "{fixed}");
    assert!(
        fixed.contains("driver none: run `nvbare bind 0000:03:00.0`"),
        "{fixed}"
    );

    let no_group = block("0000:05:00.0");
    assert!(
        no_group.contains("no IOMMU group: the IOMMU is off"),
        "{no_group}"
    );
    assert!(
        no_group.contains("iommu     none (IOMMU off)"),
        "{no_group}"
    );

    let vm = block("0000:06:00.0");
    assert!(
        vm.contains("bar1      256 GiB, VRAM at most 141 GiB: covers VRAM"),
        "{vm}"
    );
    assert!(vm.contains("the VRAM window is BAR2, not BAR1"), "{vm}");

    check_more(&block, &fx, &dev, &fw);
}

/// The rest of `list_says_what_each_gpu_needs`: a chip nvbare does not boot, and the JSON.
fn check_more(block: &dyn Fn(&str) -> String, fx: &SysfsFixture, dev: &Scratch, fw: &Path) {
    let tu116 = block("0000:07:00.0");
    assert!(tu116.contains("not ready for nvbare"), "{tu116}");
    assert!(
        tu116.contains(
            "TU116 is not yet supported for bare metal (nvbare boots TU102, TU104, GA100, AD102, \
             GH100, GB202)"
        ),
        "{tu116}"
    );

    // The same as JSON fields.
    let v = json(&nvbare(&["list", "--json"], fx.root(), &dev.0, fw));
    let by = |bdf: &str| -> Value {
        v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["bdf"] == bdf)
            .unwrap_or_else(|| panic!("{bdf} in {v}"))["readiness"]
            .clone()
    };
    let r = by("0000:41:00.0");
    assert_eq!(r["ready"], true, "{r}");
    assert_eq!(r["vfio_node_exists"], true);
    assert_eq!(r["bar1"], "covers");
    assert_eq!(r["firmware_present"], true);
    assert_eq!(r["device"], "vfio:0000:41:00.0");
    let r = by("0000:02:00.0");
    assert_eq!(r["ready"], false);
    assert_eq!(r["bar1"], "too-small");
    assert_eq!(r["bar1_max_bytes"], 32u64 << 30);
    assert_eq!(by("0000:06:00.0")["bar1_index"], 2);
    assert_eq!(by("0000:41:00.0")["bar1_index"], 1);
    let r = by("0000:05:00.0");
    assert_eq!(r["iommu_group"], Value::Null);
    assert!(r["advice"][0].as_str().unwrap().contains("IOMMU"), "{r}");

    // Without the firmware, the ready GPU is not, and the fetch is the advice.
    let empty = Scratch::new("ready-nofw");
    let o = nvbare(&["list"], fx.root(), &dev.0, &empty.0);
    let out = text(&o.stdout);
    assert!(out.contains("firmware  AD102: missing from"), "{out}");
    assert!(
        out.contains("run `nvbare fw fetch` (or `bash tools/fetch-firmware.sh`)"),
        "{out}"
    );
    assert!(!out.contains("ready for nvbare: --device"), "{out}");
}

#[test]
fn info_without_gpus_says_how_to_use_the_simulator() {
    let fx = SysfsFixture::new();
    let dev = Scratch::new("none-dev");
    let o = nvbare(&["info"], fx.root(), &dev.0, &testutil::firmware_dir());
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(out.contains("no GPUs found"), "{out}");
    assert!(out.contains("`nvbare info --device sim:gh100`"), "{out}");
    let v = json(&nvbare(
        &["info", "--json"],
        fx.root(),
        &dev.0,
        &testutil::firmware_dir(),
    ));
    assert_eq!(v["gpus"].as_array().unwrap().len(), 0, "{v}");
    assert!(v["hint"].as_str().unwrap().contains("sim:gh100"), "{v}");
    // A tree without a PCI bus at all (a container) is the same: nothing visible.
    let o = nvbare(&["info"], &dev.0, &dev.0, &testutil::firmware_dir());
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("no GPUs found"));
}

#[test]
fn boot_as_json_has_every_phase() {
    let fw = testutil::require_firmware_dir();
    let (sys, dev) = (Scratch::new("boot-sys"), Scratch::new("boot-dev"));
    let v = json(&nvbare(
        &["boot", "--device", "sim:gh100", "--json"],
        &sys.0,
        &dev.0,
        &fw,
    ));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["device"], "sim:gh100");
    let cycles = v["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 2, "{v}");
    for c in cycles {
        let phases: Vec<&str> = c["boot"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        for want in ["identify", "FSP chain of trust", "wait for GSP_INIT_DONE"] {
            assert!(phases.contains(&want), "{want} not in {phases:?}");
        }
        assert!(
            c["boot"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["ms"].is_number())
        );
        assert!(!c["unload"].as_array().unwrap().is_empty(), "{c}");
        assert_eq!(c["static_info"]["fb_mib"], 143771);
        assert!(!c["fb_reservations"].as_array().unwrap().is_empty());
    }
    assert_eq!(v["starts"], 2);
    assert_eq!(v["unloads"], 2);
}

#[test]
fn boot_json_on_a_kernel_driver_device_fails_cleanly() {
    let (sys, dev) = (Scratch::new("bootnv-sys"), Scratch::new("bootnv-dev"));
    let o = nvbare(
        &["boot", "--device", "nvidia:0", "--json"],
        &sys.0,
        &dev.0,
        &testutil::firmware_dir(),
    );
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON even on failure");
    assert_eq!(v["ok"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("nvidia kernel driver"),
        "{v}"
    );
}
