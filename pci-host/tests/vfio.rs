//! Opening a GPU through VFIO: every error path this machine can reach (it has no /dev/vfio,
//! no IOMMU and no reserved hugepages), with fixture sysfs trees and a fake /dev/vfio.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nvbare_integration::sysfs_fixture::{FakeFunction, SysfsFixture};
use nvbare_pci_host::vfio::peer::VfioPeerGroup;
use nvbare_pci_host::vfio::{OpenOptions, VfioError, VfioGpu, preflight};
use nvbare_pci_host::{Bdf, Sysfs};

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

/// A fake `/dev/vfio` with the container node and the given group nodes.
struct FakeDev(PathBuf);

impl FakeDev {
    fn new(tag: &str, nodes: &[&str]) -> Self {
        let d = std::env::temp_dir().join(format!("nvbare-devvfio-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("vfio"), "").unwrap();
        for n in nodes {
            fs::write(d.join(n), "").unwrap();
        }
        FakeDev(d)
    }
    fn opts(&self) -> OpenOptions {
        OpenOptions {
            vfio_dev: self.0.clone(),
            ..OpenOptions::default()
        }
    }
}

impl Drop for FakeDev {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn rebind(fx: &SysfsFixture, b: &str, driver: &str) {
    let link = fx.device_dir(b).join("driver");
    let _ = fs::remove_file(&link);
    symlink(fx.add_driver(driver), link).unwrap();
}

#[test]
fn this_machine_has_no_vfio_and_says_what_to_do() {
    if Path::new("/dev/vfio/vfio").exists() {
        eprintln!("skipped: this machine has /dev/vfio/vfio");
        return;
    }
    let fx = SysfsFixture::bind_tree();
    let e = VfioGpu::open_with(
        &Sysfs::new(fx.root()),
        bdf("0000:01:00.0"),
        &OpenOptions::default(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, VfioError::NoVfio { .. }), "{msg}");
    for want in [
        "/dev/vfio/vfio does not exist",
        "modprobe vfio-pci",
        "intel_iommu=on",
        "amd_iommu=on",
        "nvbare bind",
    ] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    // The plain entry point (real /sys) fails the same way, before looking at the device.
    assert!(matches!(
        VfioGpu::open(bdf("0000:01:00.0")),
        Err(VfioError::NoVfio { .. })
    ));
}

#[test]
fn device_checks_come_before_the_group() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let dev = FakeDev::new("checks", &[]);
    let e = preflight(&s, bdf("0000:01:00.0"), &dev.opts()).unwrap_err();
    assert!(
        matches!(&e, VfioError::NotBound { driver: Some(d), .. } if d == "nvidia"),
        "{e}"
    );
    assert!(e.to_string().contains("nvbare bind 0000:01:00.0"), "{e}");
    let e = preflight(&s, bdf("0000:04:00.0"), &dev.opts()).unwrap_err();
    assert!(matches!(e, VfioError::NotNvidiaGpu { .. }), "{e}");
    let e = preflight(&s, bdf("0000:06:00.1"), &dev.opts()).unwrap_err();
    assert!(matches!(e, VfioError::NotNvidiaGpu { .. }), "audio: {e}");
    let e = preflight(&s, bdf("0000:0a:00.0"), &dev.opts()).unwrap_err();
    assert!(e.to_string().contains("no PCI device 0000:0a:00.0"), "{e}");
}

#[test]
fn no_iommu_group_is_refused() {
    let fx = SysfsFixture::no_iommu();
    rebind(&fx, "0000:01:00.0", "vfio-pci");
    let dev = FakeDev::new("noiommu", &[]);
    let e = preflight(&Sysfs::new(fx.root()), bdf("0000:01:00.0"), &dev.opts()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, VfioError::NoIommuGroup { .. }), "{msg}");
    assert!(msg.contains("NVBARE_VFIO_NOIOMMU=1"), "{msg}");
}

#[test]
fn missing_group_node_and_unsafe_noiommu_group() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let gpu = bdf("0000:06:00.0");
    let dev = FakeDev::new("nodes", &[]);
    let e = preflight(&s, gpu, &dev.opts()).unwrap_err();
    assert!(
        matches!(&e, VfioError::GroupNodeMissing { group: 16, .. }),
        "{e}"
    );
    // The kernel made only a no-IOMMU group: refused unless asked for.
    let dev = FakeDev::new("noiommu-node", &["noiommu-16"]);
    let e = preflight(&s, gpu, &dev.opts()).unwrap_err();
    assert!(matches!(e, VfioError::NoIommuRefused { .. }), "{e}");
    assert!(e.to_string().contains("all host memory"), "{e}");
    // Asked for: the checks pass, and opening fails at the first ioctl on the fake node.
    let opts = OpenOptions {
        noiommu: true,
        ..dev.opts()
    };
    preflight(&s, gpu, &opts).unwrap();
    let e = VfioGpu::open_with(&s, gpu, &opts).unwrap_err();
    assert!(matches!(e, VfioError::NoIommu(_)), "{e}");
    assert!(e.to_string().contains("VFIO_GET_API_VERSION"), "{e}");
}

#[test]
fn group_with_a_foreign_driver_is_not_viable() {
    let fx = SysfsFixture::bind_tree();
    rebind(&fx, "0000:03:00.0", "vfio-pci");
    rebind(&fx, "0000:03:00.1", "vfio-pci");
    let dev = FakeDev::new("viable", &["14"]);
    let s = Sysfs::new(fx.root());
    let e = preflight(&s, bdf("0000:03:00.0"), &dev.opts()).unwrap_err();
    match &e {
        VfioError::GroupNotViable {
            group, offenders, ..
        } => {
            assert_eq!(*group, 14);
            // The root port on pcieport does not count; the NIC on igb does.
            assert_eq!(offenders, &[(bdf("0000:04:00.0"), "igb".to_owned())]);
        }
        _ => panic!("{e}"),
    }
    assert!(e.to_string().contains("0000:04:00.0 (igb)"), "{e}");
    // With the NIC released, the checks pass; this machine then has no real VFIO.
    fs::remove_file(fx.device_dir("0000:04:00.0").join("driver")).unwrap();
    preflight(&s, bdf("0000:03:00.0"), &dev.opts()).unwrap();
    if !Path::new("/dev/vfio/vfio").exists() {
        let e = VfioGpu::open_with(&s, bdf("0000:03:00.0"), &dev.opts()).unwrap_err();
        assert!(
            matches!(e, VfioError::NoVfio { ref path } if path == Path::new("/dev/vfio/vfio")),
            "{e}"
        );
    }
}

#[test]
fn a_function_added_later_to_the_group_is_checked_too() {
    let fx = SysfsFixture::bind_tree();
    fx.add(&FakeFunction {
        bdf: "0000:07:00.0",
        vendor: 0x1b21,
        device: 0x2142,
        class: 0x0c0330,
        driver: Some("xhci_hcd"),
        iommu_group: Some(16),
        bars: vec![(0, 32 << 10)],
    });
    let dev = FakeDev::new("later", &["16"]);
    let e = preflight(&Sysfs::new(fx.root()), bdf("0000:06:00.0"), &dev.opts()).unwrap_err();
    assert!(e.to_string().contains("0000:07:00.0 (xhci_hcd)"), "{e}");
}

/// Two GPUs ready for VFIO in the bind tree: 0000:03:00.0 (group 14) and 0000:06:00.0 (16).
fn two_gpus() -> SysfsFixture {
    let fx = SysfsFixture::bind_tree();
    rebind(&fx, "0000:03:00.0", "vfio-pci");
    rebind(&fx, "0000:03:00.1", "vfio-pci");
    fs::remove_file(fx.device_dir("0000:04:00.0").join("driver")).unwrap();
    fx
}

#[test]
fn a_peer_group_checks_every_gpu_then_fails_clearly_without_vfio() {
    let fx = two_gpus();
    let s = Sysfs::new(fx.root());
    let (a, b) = (bdf("0000:03:00.0"), bdf("0000:06:00.0"));
    let dev = FakeDev::new("peer", &["14", "16"]);
    let e = VfioPeerGroup::open_with(&s, &[a], &dev.opts()).unwrap_err();
    assert!(e.to_string().contains("at least two GPUs"), "{e}");
    let e = VfioPeerGroup::open_with(&s, &[a, a], &dev.opts()).unwrap_err();
    assert!(matches!(e, VfioError::PeerGroup { .. }), "{e}");
    assert!(
        e.to_string().contains("0000:03:00.0 is listed twice"),
        "{e}"
    );
    // Every GPU is checked before anything is opened: the one still on nvidia is named.
    let e = VfioPeerGroup::open_with(&s, &[a, bdf("0000:01:00.0")], &dev.opts()).unwrap_err();
    assert!(
        matches!(&e, VfioError::NotBound { bdf: x, .. } if *x == bdf("0000:01:00.0")),
        "{e}"
    );
    // Both pass the checks; this machine then has no VFIO container to share.
    if !Path::new("/dev/vfio/vfio").exists() {
        let e = VfioPeerGroup::open_with(&s, &[a, b], &dev.opts()).unwrap_err();
        assert!(matches!(e, VfioError::NoVfio { .. }), "{e}");
        assert!(e.to_string().contains("modprobe vfio-pci"), "{e}");
        assert!(matches!(
            VfioPeerGroup::open(&[a, b]),
            Err(VfioError::NoVfio { .. })
        ));
    }
    // No-IOMMU mode opens each GPU on its own container (sharing one DMA pool) and fails at
    // the first ioctl on the fake node.
    let dev = FakeDev::new("peer-noiommu", &["noiommu-14", "noiommu-16"]);
    let opts = OpenOptions {
        noiommu: true,
        ..dev.opts()
    };
    let e = VfioPeerGroup::open_with(&s, &[a, b], &opts).unwrap_err();
    assert!(matches!(e, VfioError::NoIommu(_)), "{e}");
}
