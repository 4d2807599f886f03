//! `--device nvidia:N` as a user sees it on a machine without (a usable) nvidia driver.
#![cfg(feature = "nvidia-kmod")]
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::{Command, Output};

fn nvbare(args: &[&str], dev_root: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(args)
        .env_remove("NVBARE_LOG")
        .env_remove("NVBARE_PROC_ROOT");
    match dev_root {
        Some(p) => c.env("NVBARE_DEV_ROOT", p).env("NVBARE_PROC_ROOT", p),
        None => c.env_remove("NVBARE_DEV_ROOT"),
    };
    c.output().expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("nvbare-kmod-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
fn info_without_a_driver_explains_and_fails() {
    let root = scratch("nodriver");
    let o = nvbare(&["info", "--device", "nvidia:0"], Some(&root));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("no nvidia kernel driver is loaded"), "{err}");
    assert!(err.contains("lsmod | grep nvidia"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn info_on_a_fake_node_fails_cleanly() {
    let root = scratch("fake");
    std::fs::write(root.join("nvidiactl"), "").unwrap();
    let o = nvbare(&["info", "--device", "nvidia:0"], Some(&root));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is not an nvidia device node"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn info_on_this_machine_without_nvidia() {
    if Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: this machine has /dev/nvidiactl");
        return;
    }
    let o = nvbare(&["info", "--device", "nvidia:0"], None);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("nvidia"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn stress_without_a_driver_explains_and_fails() {
    let root = scratch("stress");
    let o = nvbare(&["stress", "--device", "nvidia:0", "--counts"], Some(&root));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no nvidia kernel driver is loaded"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn stress_refuses_non_nvidia_devices() {
    let o = nvbare(&["stress", "--device", "sim:gh100"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("nvidia:N"));
}

#[test]
fn device_commands_without_a_driver_explain_and_fail() {
    let root = scratch("devcmds");
    let cubin = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
    );
    for args in [
        &["demo", "--device", "nvidia:0"][..],
        &["bench", "--device", "nvidia:0", "--json"][..],
        &["run", "--device", "nvidia:0", cubin, "empty"][..],
        &[
            "stress",
            "--device",
            "nvidia:0",
            "--alloc-free",
            "1",
            "--launches",
            "1",
        ][..],
    ] {
        let o = nvbare(args, Some(&root));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("no nvidia kernel driver is loaded"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn an_unsupported_kmod_va_mode_is_a_clear_error() {
    let root = scratch("vamode");
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(["demo", "--device", "nvidia:0"])
        .env("NVBARE_DEV_ROOT", &root)
        .env("NVBARE_PROC_ROOT", &root)
        .env("NVBARE_KMOD_VA", "bogus");
    let o = c.output().expect("run nvbare");
    // The mode is checked before anything is opened.
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("NVBARE_KMOD_VA=\"bogus\""), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn bench_p2p_without_a_driver_explains_and_fails() {
    let root = scratch("p2p");
    let o = nvbare(
        &["bench", "p2p", "--devices", "nvidia:0,nvidia:1", "--json"],
        Some(&root),
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no nvidia kernel driver is loaded"), "{err}");
    assert!(o.stdout.is_empty(), "no JSON without a result");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}
