//! PCI enumeration against fixture sysfs trees.
#![forbid(unsafe_code)]

use nvbare_integration::sysfs_fixture::SysfsFixture;
use nvbare_pci_host::{Bdf, Sysfs, SysfsError};

#[test]
fn lists_only_nvidia_functions_with_their_attributes() {
    let fx = SysfsFixture::several_gpus();
    let funcs = Sysfs::new(fx.root()).list_nvidia().unwrap();
    let bdfs: Vec<String> = funcs.iter().map(|f| f.bdf.to_string()).collect();
    assert_eq!(
        bdfs,
        [
            "0000:01:00.0",
            "0000:41:00.0",
            "0000:41:00.1",
            "0000:81:00.0"
        ]
    );

    let h200 = &funcs[0];
    assert_eq!(h200.name(), Some("NVIDIA H200"));
    assert!(h200.is_gpu());
    assert_eq!(h200.driver.as_deref(), Some("nvidia"));
    assert_eq!(h200.iommu_group, Some(12));
    assert_eq!(h200.bar(1).map(|b| b.size), Some(256 << 30));
    assert_eq!(h200.bar(0).map(|b| b.size), Some(16 << 20));
    assert!(h200.bar(2).is_none());

    let audio = &funcs[2];
    assert!(!audio.is_gpu());
    assert_eq!(audio.class_name(), "audio");
    assert_eq!(audio.iommu_group, funcs[1].iommu_group);

    let unknown = &funcs[3];
    assert_eq!(unknown.name(), None);
    assert_eq!(unknown.driver, None);
    assert_eq!(unknown.iommu_group, None);
}

#[test]
fn one_function_by_address() {
    let fx = SysfsFixture::several_gpus();
    let s = Sysfs::new(fx.root());
    let f = s.function("0000:41:00.0".parse().unwrap()).unwrap();
    assert_eq!(f.device, 0x2684);
    let missing: Bdf = "0000:09:00.0".parse().unwrap();
    assert!(matches!(
        s.function(missing),
        Err(SysfsError::NoSuchDevice { .. })
    ));
}

#[test]
fn missing_tree_is_a_clear_error() {
    let s = Sysfs::new("/nonexistent/nvbare-sysfs");
    let e = s.list_nvidia().unwrap_err();
    assert!(matches!(e, SysfsError::NoPciBus { .. }));
    assert!(e.to_string().contains("is sysfs mounted"), "{e}");
}

#[test]
fn unreadable_attribute_names_the_file() {
    let fx = SysfsFixture::several_gpus();
    fx.break_attribute("0000:41:00.0", "vendor");
    let e = Sysfs::new(fx.root()).list_nvidia().unwrap_err();
    assert!(matches!(e, SysfsError::Read { .. }));
    assert!(e.to_string().contains("0000:41:00.0/vendor"), "{e}");
}

#[test]
fn garbage_attribute_is_a_parse_error() {
    let fx = SysfsFixture::several_gpus();
    std::fs::write(fx.device_dir("0000:01:00.0").join("class"), "not-hex\n").unwrap();
    let e = Sysfs::new(fx.root()).list_nvidia().unwrap_err();
    assert!(matches!(e, SysfsError::Parse { .. }), "{e}");
    std::fs::write(fx.device_dir("0000:01:00.0").join("class"), "0x030200\n").unwrap();
    std::fs::write(fx.device_dir("0000:01:00.0").join("resource"), "0x1 0x2\n").unwrap();
    let e = Sysfs::new(fx.root()).list_nvidia().unwrap_err();
    assert!(e.to_string().contains("start end flags"), "{e}");
}

#[test]
fn empty_tree_lists_nothing() {
    let fx = SysfsFixture::new();
    assert!(Sysfs::new(fx.root()).list_nvidia().unwrap().is_empty());
}
