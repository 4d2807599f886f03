//! `nvbare boot` as a user runs it: the simulated GPUs with the real r570.144 firmware.
#![forbid(unsafe_code)]

use std::process::{Command, Output};

use nvbare_gsp_firmware::testutil;

fn nvbare(args: &[&str], firmware: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .args(args)
        .env_remove("NVBARE_LOG")
        .env("NVBARE_FIRMWARE_DIR", firmware)
        .output()
        .expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn boot_prints_phases_static_info_and_boots_again_after_unload() {
    let dir = testutil::require_firmware_dir();
    for (dev, phase, name) in [
        ("sim:tu102", "FWSEC-FRTS (GSP falcon)", "TU102"),
        ("sim:tu104", "FWSEC-FRTS (GSP falcon)", "TU104"),
        ("sim:ga100", "booter_load (SEC2)", "GA100"),
        ("sim:ad102", "booter_load (SEC2)", "AD102"),
        ("sim:gh100", "FSP chain of trust", "GH100"),
        ("sim:gb202", "FSP chain of trust", "GB202"),
    ] {
        let o = nvbare(&["boot", "--device", dev], &dir);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{dev}: {out}\n{}", text(&o.stderr));
        for want in [
            "boot 1/2",
            "unload 1/2",
            "boot 2/2",
            "unload 2/2",
            "GSP static info",
            "GSP-RM running after",
            name,
            phase,
            "2 GSP-RM start(s), 2 unload(s), 0 GPU reset(s)",
        ] {
            assert!(out.contains(want), "{dev}: missing {want:?} in\n{out}");
        }
    }
}

#[test]
fn ga100_and_tu102_boot_through_their_booter_phases_also_with_pessimistic_unknowns() {
    // GA100: no FWSEC-FRTS (no FRTS region), booter_load by PIO. TU102: FWSEC-FRTS through the
    // generic bootloader. Both run FWSEC-SB through it at unload.
    let dir = testutil::require_firmware_dir();
    let ga100: &[&str] = &["GA100 (Ampere)", "no FRTS region", "NVIDIA A100 SXM4 40GB"];
    let tu102: &[&str] = &[
        "TU102 (Turing)",
        "FWSEC-FRTS (GSP falcon)",
        "FWSEC through the generic bootloader (start tag 0xfd",
        "WPR2 up at",
        "NVIDIA TITAN RTX",
    ];
    for (dev, own) in [("sim:ga100", ga100), ("sim:tu102", tu102)] {
        for unknowns in ["helpful", "pessimistic"] {
            let o = Command::new(env!("CARGO_BIN_EXE_nvbare"))
                .args(["boot", "--device", dev])
                .env_remove("NVBARE_LOG")
                .env("NVBARE_FIRMWARE_DIR", &dir)
                .env("NVBARE_SIM_UNKNOWNS", unknowns)
                .output()
                .expect("run nvbare");
            let out = text(&o.stdout);
            assert!(
                o.status.success(),
                "{dev} {unknowns}: {out}\n{}",
                text(&o.stderr)
            );
            for want in own.iter().chain(&[
                "read VBIOS / FWSEC",
                "booter_load (SEC2)",
                "booter_load done",
                "wait for GSP_INIT_DONE",
                "FWSEC-SB (GSP falcon)",
                "booter_unload (SEC2)",
                "2 GSP-RM start(s), 2 unload(s), 0 GPU reset(s)",
            ]) {
                assert!(
                    out.contains(want),
                    "{dev} {unknowns}: missing {want:?} in\n{out}"
                );
            }
            if dev == "sim:ga100" {
                assert!(!out.contains("FWSEC-FRTS"), "{unknowns}: {out}");
            }
        }
    }
}

#[test]
fn missing_firmware_names_the_file_and_the_fetch_script() {
    let empty = std::env::temp_dir().join(format!("nvbare-boot-cli-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = nvbare(&["boot", "--device", "sim:ad102"], &empty);
    let err = text(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("fetch-firmware.sh"), "{err}");
    assert!(err.contains("ad102"), "{err}");
    let _ = std::fs::remove_dir(&empty);
}

#[test]
fn devices_the_boot_cannot_run_on_are_usage_errors() {
    let dir = testutil::require_firmware_dir();
    let o = nvbare(&["boot", "--device", "nvidia:0"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("boots GSP-RM itself"),
        "{}",
        text(&o.stderr)
    );
}
