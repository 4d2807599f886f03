//! sysfs device management against fixture trees: config space, capabilities, ReBAR, reset,
//! IOMMU groups; and the real `/sys` of this machine where it has something to read.

use std::fs;

use nvbare_core::hal::{HalError, PciConfig};
use nvbare_integration::sysfs_fixture::SysfsFixture;
use nvbare_pci_host::config::{
    self, PCI_CAP_ID_EXP, PCI_CAP_ID_MSI, PCI_CAP_ID_PM, PCI_COMMAND_MASTER, PCI_EXT_CAP_ID_REBAR,
    PCI_EXT_CAP_ID_VC,
};
use nvbare_pci_host::{Bdf, Sysfs, SysfsError};

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

#[test]
fn config_space_reads_ids_and_walks_capabilities() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let cfg = s.config(bdf("0000:01:00.0")).unwrap();
    assert_eq!(cfg.len(), 4096);
    assert_eq!(cfg.read_config32(0).unwrap(), 0x2684_10de);
    assert_eq!(cfg.read_config16(0x0a).unwrap(), 0x0300);
    // BAR1 is 64-bit prefetchable at the address in `resource`.
    let bar1 = s
        .function(bdf("0000:01:00.0"))
        .unwrap()
        .bar(1)
        .copied()
        .unwrap();
    let lo = cfg.read_config32(0x14).unwrap();
    let hi = cfg.read_config32(0x18).unwrap();
    assert_eq!(lo & 0xf, 0xc);
    assert_eq!(u64::from(hi) << 32 | u64::from(lo & !0xf), bar1.start);

    let caps = config::capabilities(&cfg).unwrap();
    let ids: Vec<(u16, bool)> = caps.iter().map(|c| (c.id, c.extended)).collect();
    assert_eq!(
        ids,
        [
            (u16::from(PCI_CAP_ID_PM), false),
            (u16::from(PCI_CAP_ID_MSI), false),
            (u16::from(PCI_CAP_ID_EXP), false),
            (PCI_EXT_CAP_ID_VC, true),
            (PCI_EXT_CAP_ID_REBAR, true),
        ]
    );
    assert_eq!(
        config::find_capability(&cfg, PCI_CAP_ID_EXP).unwrap(),
        Some(0x78)
    );
}

#[test]
fn config_writes_land_in_the_file_and_bad_offsets_are_errors() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let cfg = s.config(bdf("0000:02:00.0")).unwrap();
    cfg.set_bus_master(false).unwrap();
    assert_eq!(cfg.read_config16(4).unwrap() & PCI_COMMAND_MASTER, 0);
    config::update_command(&cfg, PCI_COMMAND_MASTER, 0).unwrap();
    let raw = fs::read(cfg.path()).unwrap();
    assert_eq!(raw[4] & 0x4, 0x4);
    assert!(matches!(
        cfg.read_config32(4096),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        cfg.read_config32(2),
        Err(HalError::Misaligned { .. })
    ));
    // A short config file (what a non-root reader sees): reads past it are out of range.
    fs::write(cfg.path(), &raw[..64]).unwrap();
    let short = s.config(bdf("0000:02:00.0")).unwrap();
    assert_eq!(short.read_config32(0).unwrap(), 0x2335_10de);
    assert!(matches!(
        short.read_config32(64),
        Err(HalError::OutOfRange { limit: 64, .. })
    ));
    assert_eq!(config::capabilities(&short).unwrap(), []);
}

#[test]
fn rebar_from_the_capability_and_the_resize_attribute_agree() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let gpu = bdf("0000:01:00.0");
    let cfg = s.config(gpu).unwrap();
    let e = config::rebar_entries(&cfg).unwrap().unwrap();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].bar, 1);
    assert_eq!(e[0].current_bytes(), 256 << 20);
    assert_eq!(Some(e[0].sizes), s.resize_sizes(gpu, 1).unwrap());
    assert_eq!(e[0].largest(), Some(32 << 30));
    // The H200 fixture has neither.
    let h200 = bdf("0000:02:00.0");
    assert_eq!(s.resize_sizes(h200, 1).unwrap(), None);
    assert_eq!(
        config::rebar_entries(&s.config(h200).unwrap()).unwrap(),
        None
    );
    fs::write(
        fx.device_dir("0000:02:00.0").join("resource1_resize"),
        "zz\n",
    )
    .unwrap();
    assert!(matches!(
        s.resize_sizes(h200, 1),
        Err(SysfsError::Parse { .. })
    ));
}

#[test]
fn reset_methods_and_reset() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let gpu = bdf("0000:01:00.0");
    assert_eq!(
        s.reset_methods(gpu).unwrap(),
        Some(vec!["flr".to_owned(), "bus".to_owned()])
    );
    s.reset(gpu).unwrap();
    assert_eq!(
        fs::read_to_string(fx.device_dir("0000:01:00.0").join("reset")).unwrap(),
        "1"
    );
    s.config(gpu).unwrap().reset_function().unwrap();
    fx.set_reset_methods("0000:01:00.0", None);
    assert_eq!(s.reset_methods(gpu).unwrap(), None);
    let e = s.reset(gpu).unwrap_err();
    assert!(e.to_string().contains("no reset method"), "{e}");
    fx.break_attribute("0000:01:00.0", "reset_method");
    assert!(matches!(s.reset_methods(gpu), Err(SysfsError::Read { .. })));
}

#[test]
fn iommu_groups_members_and_reserved_regions() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    assert!(s.iommu_enabled());
    assert!(s.vfio_pci_loaded());
    assert_eq!(
        s.iommu_group_members(14).unwrap(),
        [
            bdf("0000:00:1c.0"),
            bdf("0000:03:00.0"),
            bdf("0000:03:00.1"),
            bdf("0000:04:00.0")
        ]
    );
    assert_eq!(s.iommu_group_reserved(12).unwrap(), []);
    fx.set_reserved_regions(
        12,
        "0x00000000fee00000 0x00000000feefffff msi\n0x000000fd00000000 0x000000ffffffffff reserved\n",
    );
    assert_eq!(
        s.iommu_group_reserved(12).unwrap(),
        [(0xfee0_0000, 0xfeef_ffff), (0xfd_0000_0000, 0xff_ffff_ffff)]
    );
    fx.set_reserved_regions(12, "garbage\n");
    assert!(s.iommu_group_reserved(12).is_err());
    assert!(matches!(
        s.iommu_group_members(99),
        Err(SysfsError::Read { .. })
    ));
    assert_eq!(s.driver_override(bdf("0000:01:00.0")).unwrap(), None);
    assert_eq!(
        s.driver_override(bdf("0000:06:00.0")).unwrap().as_deref(),
        Some("vfio-pci")
    );
    // Fixture directories are not nested under bridges: no parent bridge to report.
    assert_eq!(s.parent_bridge(bdf("0000:01:00.0")), None);
}

#[test]
fn missing_or_broken_config_is_a_clear_error() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    fx.break_attribute("0000:01:00.0", "config");
    let e = s.config(bdf("0000:01:00.0")).unwrap_err();
    assert!(e.to_string().contains("0000:01:00.0/config"), "{e}");
    fs::remove_dir(fx.device_dir("0000:01:00.0").join("config")).unwrap();
    assert!(s.config(bdf("0000:01:00.0")).is_err());
}

/// This machine's own PCI devices: whatever is there must parse, and config space must walk.
#[test]
fn real_sysfs_parses_if_present() {
    let s = Sysfs::new("/sys");
    let Ok(list) = s.list() else {
        return;
    };
    for f in list {
        let _ = s.reset_methods(f.bdf).unwrap();
        let _ = s.driver_override(f.bdf).unwrap();
        for bar in 0..6 {
            let _ = s.resize_sizes(f.bdf, bar).unwrap();
        }
        if let Ok(cfg) = s.config(f.bdf) {
            let id = cfg.read_config32(0).unwrap();
            assert_eq!(id & 0xffff, u32::from(f.vendor), "{}", f.bdf);
            config::capabilities(&cfg).unwrap();
        }
        if let Some(g) = f.iommu_group {
            assert!(s.iommu_group_members(g).unwrap().contains(&f.bdf));
            s.iommu_group_reserved(g).unwrap();
        }
        if let Some(b) = s.parent_bridge(f.bdf) {
            s.bridge_windows(b).unwrap();
        }
    }
}

#[test]
fn bridge_windows_from_the_resource_file() {
    let fx = SysfsFixture::bind_tree();
    let s = Sysfs::new(fx.root());
    let port = bdf("0000:00:1c.0");
    let zero = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
    let mut text = zero.repeat(13);
    text.push_str("0x000000000000e000 0x000000000000efff 0x0000000000000101\n");
    text.push_str("0x00000000fb000000 0x00000000fc0fffff 0x0000000000000200\n");
    text.push_str("0x0000006000000000 0x00000067ffffffff 0x0000000000102201\n");
    text.push_str(zero);
    fs::write(fx.device_dir("0000:00:1c.0").join("resource"), &text).unwrap();
    let w = s.bridge_windows(port).unwrap();
    assert_eq!(w.len(), 3);
    let pref: Vec<_> = w.iter().filter(|w| w.is_prefetchable_64()).collect();
    assert_eq!(pref.len(), 1);
    assert_eq!(pref[0].start, 0x60_0000_0000);
    assert_eq!(pref[0].size, 32 << 30);
    // A kernel without SR-IOV support shows 11 lines; the windows are the last four.
    let short: String = text.lines().skip(6).map(|l| format!("{l}\n")).collect();
    fs::write(fx.device_dir("0000:00:1c.0").join("resource"), short).unwrap();
    assert_eq!(s.bridge_windows(port).unwrap(), w);
    // Anything else is not a bridge's resource file.
    fs::write(fx.device_dir("0000:00:1c.0").join("resource"), zero).unwrap();
    assert_eq!(s.bridge_windows(port).unwrap(), []);
}
