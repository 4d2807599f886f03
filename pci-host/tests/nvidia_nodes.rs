//! The kernel-driver adapter against fake device-node trees: what a user sees when the driver
//! is missing, half installed, or something else sits where the nodes should be.
#![cfg(feature = "nvidia-kmod")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nvbare_pci_host::nvidia::{KmodError, NvidiaDriver, NvidiaPaths};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "nvbare-kmod-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(p.join("dev")).unwrap();
        fs::create_dir_all(p.join("proc/driver/nvidia")).unwrap();
        Scratch(p)
    }

    fn paths(&self) -> NvidiaPaths {
        NvidiaPaths {
            dev: self.0.join("dev"),
            proc_version: self.0.join("proc/driver/nvidia/version"),
        }
    }

    fn write(&self, rel: &str, text: &str) {
        fs::write(self.0.join(rel), text).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn no_driver_says_so() {
    let s = Scratch::new("none");
    let e = NvidiaDriver::open_at(s.paths()).unwrap_err();
    assert!(matches!(e, KmodError::NoDriver { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.contains("no nvidia kernel driver is loaded"), "{m}");
    assert!(m.contains("lsmod | grep nvidia"), "{m}");
    assert!(m.contains("nvidiactl"), "{m}");
}

#[test]
fn loaded_module_without_nodes_points_at_nvidia_modprobe() {
    let s = Scratch::new("nonodes");
    s.write(
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n",
    );
    let e = NvidiaDriver::open_at(s.paths()).unwrap_err();
    assert!(matches!(e, KmodError::NodeMissing { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("580.159.04") && m.contains("nvidia-modprobe"),
        "{m}"
    );
}

#[test]
fn a_regular_file_is_not_an_nvidia_node() {
    let s = Scratch::new("regular");
    s.write("dev/nvidiactl", "");
    let e = NvidiaDriver::open_at(s.paths()).unwrap_err();
    assert!(matches!(e, KmodError::NotNvidiaNode { .. }), "{e:?}");
    assert!(e.to_string().contains("195:255"), "{e}");
}

#[test]
fn another_character_device_is_not_an_nvidia_node() {
    let s = Scratch::new("devnull");
    std::os::unix::fs::symlink("/dev/null", s.0.join("dev/nvidiactl")).unwrap();
    let e = NvidiaDriver::open_at(s.paths()).unwrap_err();
    assert!(matches!(e, KmodError::NotNvidiaNode { .. }), "{e:?}");
}

#[test]
fn unreadable_node_names_the_node_and_the_fix() {
    // Root ignores file modes, so this can only be checked as an ordinary user.
    if rustix::process::geteuid().is_root() {
        eprintln!("skipped: running as root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new("perm");
    s.write("dev/nvidiactl", "");
    let node = s.0.join("dev/nvidiactl");
    fs::set_permissions(&node, fs::Permissions::from_mode(0o000)).unwrap();
    let e = NvidiaDriver::open_at(s.paths()).unwrap_err();
    assert!(matches!(e, KmodError::PermissionDenied { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains(&node.display().to_string()) && m.contains("video"),
        "{m}"
    );
}

#[test]
fn this_machine_without_nvidia_reports_no_driver() {
    // On a machine with the driver this test has nothing to check.
    if Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipped: /dev/nvidiactl exists");
        return;
    }
    let e = NvidiaDriver::open_at(NvidiaPaths::default()).unwrap_err();
    assert!(
        matches!(
            e,
            KmodError::NoDriver { .. } | KmodError::NodeMissing { .. }
        ),
        "{e:?}"
    );
}
