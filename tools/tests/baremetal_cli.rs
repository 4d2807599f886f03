//! The bare-metal path as a user runs it: `nvbare demo` (default device: the simulated GH100,
//! bare metal), the RM-level simulator for debugging, missing firmware, and `vfio:BDF` on a
//! machine without VFIO.
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::{Command, Output};

use nvbare_gsp_firmware::testutil;

fn nvbare(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(args).env_remove("NVBARE_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn demo_defaults_to_the_bare_metal_simulated_gh100() {
    let dir = testutil::require_firmware_dir();
    let o = nvbare(
        &["demo", "--elements", "4096"],
        &[("NVBARE_FIRMWARE_DIR", &dir)],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    for want in [
        "[1/7] booting GSP-RM on sim:gh100",
        "FSP chain of trust",
        "wait for GSP_INIT_DONE",
        "GSP_RM_ALLOC/CONTROL/FREE RPCs",
        "SET_PAGE_DIRECTORY",
        "[4/7] copying",
        "[5/7] add1",
        "all 4096 elements verified",
        "TLB invalidates",
        "UNLOADING_GUEST_DRIVER",
        "demo passed on sim:gh100 (simulated H200, bare metal)",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
}

#[test]
fn the_rm_level_simulator_is_not_a_cli_device() {
    // It stays a unit-test backend (nvbare_sim::backend::SimBackend); the CLI's simulated GPU
    // is driven bare metal.
    let o = nvbare(&["demo", "--device", "sim-rm:ad102"], &[]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("unit tests only") && err.contains("sim:CHIP"),
        "{err}"
    );
}

#[test]
fn missing_firmware_gives_the_fetch_instruction_when_fetching_is_off() {
    let empty = std::env::temp_dir().join(format!("nvbare-bm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = nvbare(
        &["demo", "--device", "sim:ad102"],
        &[
            ("NVBARE_FIRMWARE_DIR", &empty),
            ("NVBARE_NO_FETCH", Path::new("1")),
        ],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("nvbare fw fetch"), "{err}");
    assert!(err.contains("nvidia/ad102/gsp/"), "{err}");
    let _ = std::fs::remove_dir(&empty);
}

#[test]
fn vfio_devices_fail_with_what_to_do_when_vfio_is_unavailable() {
    let no_vfio = !Path::new("/dev/vfio/vfio").exists();
    for args in [
        &["demo", "--device", "vfio:0000:01:00.0"][..],
        &["boot", "--device", "vfio:0000:01:00.0"][..],
        &["bench", "--device", "vfio:0000:01:00.0"][..],
        &[
            "run",
            "--device",
            "vfio:0000:01:00.0",
            "/nonexistent.cubin",
            "add1",
        ][..],
    ] {
        let o = nvbare(args, &[]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.lines().any(|l| l.starts_with("error: ")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if args[0] != "run" {
            assert!(
                err.contains("VFIO") || err.contains("vfio"),
                "{args:?}: {err}"
            );
            if no_vfio {
                assert!(err.contains("VFIO is not available"), "{args:?}: {err}");
                assert!(err.contains("modprobe vfio-pci"), "{args:?}: {err}");
            }
        }
    }
}

#[test]
fn an_unknown_sim_unknowns_mode_is_refused_with_the_accepted_ones() {
    for bad in ["kind", "random:", "random:x", "Pessimistic"] {
        let o = Command::new(env!("CARGO_BIN_EXE_nvbare"))
            .args(["demo", "--device", "sim:ad102"])
            .env("NVBARE_SIM_UNKNOWNS", bad)
            .output()
            .expect("run nvbare");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        for want in [
            "NVBARE_SIM_UNKNOWNS",
            "helpful",
            "pessimistic",
            "random:SEED",
        ] {
            assert!(err.contains(want), "{bad}: {err}");
        }
    }
}

#[test]
fn demo_passes_on_the_simulated_a100_also_with_pessimistic_unknowns() {
    let dir = testutil::require_firmware_dir();
    for unknowns in ["helpful", "pessimistic"] {
        let o = Command::new(env!("CARGO_BIN_EXE_nvbare"))
            .args(["demo", "--elements", "4096", "--device", "sim:ga100"])
            .env_remove("NVBARE_LOG")
            .env("NVBARE_FIRMWARE_DIR", &dir)
            .env("NVBARE_SIM_UNKNOWNS", unknowns)
            .output()
            .expect("run nvbare");
        let out = text(&o.stdout);
        assert!(o.status.success(), "{unknowns}: {out}\n{}", text(&o.stderr));
        for want in [
            "booting GSP-RM on sim:ga100",
            "booter_load (SEC2)",
            "AMPERE_COMPUTE_A (0xc6c0)",
            "QMD V03_00",
            "GMMU v2",
            "kernels_sm80",
            "all 4096 elements verified",
            "demo passed on sim:ga100 (simulated A100 SXM4 40GB, bare metal)",
        ] {
            assert!(out.contains(want), "{unknowns}: missing {want:?} in\n{out}");
        }
    }
}

#[test]
fn demo_faults_passes_with_unknowns_drawn_from_a_seed_and_says_which() {
    let dir = testutil::require_firmware_dir();
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(["demo", "--faults", "--device", "sim:ad102"])
        .env_remove("NVBARE_LOG")
        .env("NVBARE_FIRMWARE_DIR", &dir)
        .env("NVBARE_SIM_UNKNOWNS", "random:7");
    let o = c.output().expect("run nvbare");
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("NVBARE_SIM_UNKNOWNS=random:7"), "{err}");
}
