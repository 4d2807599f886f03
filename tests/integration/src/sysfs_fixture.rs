//! Builds fake `/sys` trees for tests of PCI enumeration (`NVBARE_SYSFS_ROOT`).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A PCI function to put in the fixture.
#[derive(Debug, Clone)]
pub struct FakeFunction {
    /// `DDDD:BB:DD.F`.
    pub bdf: &'static str,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// 24-bit class code.
    pub class: u32,
    /// Bound driver name.
    pub driver: Option<&'static str>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// `(bar index, size)` of memory BARs.
    pub bars: Vec<(u8, u64)>,
}

/// A temporary sysfs tree, removed on drop.
#[derive(Debug)]
pub struct SysfsFixture {
    root: PathBuf,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl SysfsFixture {
    /// An empty tree with `bus/pci/devices`.
    pub fn new() -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("nvbare-sysfs-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("bus/pci/devices")).expect("create fixture");
        fs::create_dir_all(root.join("bus/pci/drivers")).expect("create fixture");
        fs::create_dir_all(root.join("kernel/iommu_groups")).expect("create fixture");
        fs::write(root.join("bus/pci/drivers_probe"), "").expect("create fixture");
        SysfsFixture { root }
    }

    /// A tree with several GPUs: an H200 on nvidia, an RTX 4090 + its audio function on
    /// vfio-pci sharing IOMMU group 30, an unknown NVIDIA device with no driver and no IOMMU
    /// group, and a non-NVIDIA device.
    pub fn several_gpus() -> Self {
        let f = SysfsFixture::new();
        f.add(&FakeFunction {
            bdf: "0000:01:00.0",
            vendor: 0x10de,
            device: 0x2335,
            class: 0x030200,
            driver: Some("nvidia"),
            iommu_group: Some(12),
            bars: vec![(0, 16 << 20), (1, 256 << 30), (3, 32 << 20)],
        });
        f.add(&FakeFunction {
            bdf: "0000:41:00.0",
            vendor: 0x10de,
            device: 0x2684,
            class: 0x030000,
            driver: Some("vfio-pci"),
            iommu_group: Some(30),
            bars: vec![(0, 16 << 20), (1, 32 << 30), (3, 32 << 20)],
        });
        f.add(&FakeFunction {
            bdf: "0000:41:00.1",
            vendor: 0x10de,
            device: 0x22ba,
            class: 0x040300,
            driver: Some("snd_hda_intel"),
            iommu_group: Some(30),
            bars: vec![(0, 16 << 10)],
        });
        f.add(&FakeFunction {
            bdf: "0000:81:00.0",
            vendor: 0x10de,
            device: 0xfff0,
            class: 0x030200,
            driver: None,
            iommu_group: None,
            bars: vec![(0, 16 << 20)],
        });
        f.add(&FakeFunction {
            bdf: "0000:00:1f.0",
            vendor: 0x8086,
            device: 0x7a04,
            class: 0x060100,
            driver: None,
            iommu_group: Some(1),
            bars: vec![],
        });
        f
    }

    /// The directory that stands for `/sys`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of one function.
    pub fn device_dir(&self, bdf: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(bdf)
    }

    /// Adds a function.
    pub fn add(&self, f: &FakeFunction) {
        let dir = self.device_dir(f.bdf);
        fs::create_dir_all(&dir).expect("create device dir");
        fs::write(dir.join("vendor"), format!("0x{:04x}\n", f.vendor)).expect("write");
        fs::write(dir.join("device"), format!("0x{:04x}\n", f.device)).expect("write");
        fs::write(dir.join("class"), format!("0x{:06x}\n", f.class)).expect("write");
        let mut resource = String::new();
        let mut next = 0xf000_0000u64;
        for i in 0..13u8 {
            match f.bars.iter().find(|(idx, _)| *idx == i) {
                Some(&(_, size)) => {
                    let start = next.next_multiple_of(size);
                    resource.push_str(&format!(
                        "0x{start:016x} 0x{:016x} 0x{:016x}\n",
                        start + size - 1,
                        0x0014_220cu64
                    ));
                    next = start + size;
                }
                None => resource.push_str(&format!("0x{0:016x} 0x{0:016x} 0x{0:016x}\n", 0)),
            }
        }
        fs::write(dir.join("resource"), resource).expect("write");
        fs::write(dir.join("config"), fake_config(f)).expect("write");
        fs::write(dir.join("driver_override"), "(null)\n").expect("write");
        fs::write(dir.join("reset"), "").expect("write");
        fs::write(dir.join("reset_method"), "flr bus\n").expect("write");
        if let Some(d) = f.driver {
            let ddir = self.add_driver(d);
            symlink(&ddir, dir.join("driver")).expect("symlink driver");
        }
        if let Some(g) = f.iommu_group {
            let gdir = self.root.join("kernel/iommu_groups").join(g.to_string());
            fs::create_dir_all(gdir.join("devices")).expect("create group dir");
            let _ = symlink(&dir, gdir.join("devices").join(f.bdf));
            symlink(&gdir, dir.join("iommu_group")).expect("symlink group");
        }
    }

    /// Registers a driver (`bus/pci/drivers/<name>` with `bind` and `unbind`) and returns its
    /// directory.
    pub fn add_driver(&self, name: &str) -> PathBuf {
        let ddir = self.root.join("bus/pci/drivers").join(name);
        fs::create_dir_all(&ddir).expect("create driver dir");
        for f in ["bind", "unbind", "new_id"] {
            if !ddir.join(f).exists() {
                fs::write(ddir.join(f), "").expect("write");
            }
        }
        ddir
    }

    /// Offers BAR `bar` resizing: `resource<bar>_resize` holds `sizes` (bit n = 2^n MiB) and the
    /// config space gets a Resizable BAR capability with `current` (log2 MiB) programmed.
    pub fn set_resize(&self, bdf: &str, bar: u8, sizes: u64, current: u8) {
        let dir = self.device_dir(bdf);
        fs::write(
            dir.join(format!("resource{bar}_resize")),
            format!("{sizes:016x}\n"),
        )
        .expect("write");
        let mut cfg = fs::read(dir.join("config")).expect("read config");
        // VC at 0x100 now points at the ReBAR capability at 0x250.
        put32(&mut cfg, 0x100, 0x0001_0002 | (0x250 << 20));
        put32(&mut cfg, 0x250, 0x0001_0015);
        put32(&mut cfg, 0x254, ((sizes & 0x0fff_ffff) as u32) << 4);
        put32(
            &mut cfg,
            0x258,
            u32::from(bar & 7)
                | (1 << 5)
                | (u32::from(current & 0x3f) << 8)
                | (((sizes >> 28) as u32 & 0xffff) << 16),
        );
        fs::write(dir.join("config"), cfg).expect("write config");
    }

    /// Sets `reset_method` (`None` removes it and `reset`, like a function the kernel cannot
    /// reset).
    pub fn set_reset_methods(&self, bdf: &str, methods: Option<&str>) {
        let dir = self.device_dir(bdf);
        match methods {
            Some(m) => {
                fs::write(dir.join("reset_method"), format!("{m}\n")).expect("write");
                fs::write(dir.join("reset"), "").expect("write");
            }
            None => {
                let _ = fs::remove_file(dir.join("reset_method"));
                let _ = fs::remove_file(dir.join("reset"));
            }
        }
    }

    /// Sets an IOMMU group's `reserved_regions` text.
    pub fn set_reserved_regions(&self, group: u32, text: &str) {
        let g = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string());
        fs::create_dir_all(&g).expect("create group");
        fs::write(g.join("reserved_regions"), text).expect("write");
    }

    /// A tree for binding: vfio-pci loaded, and
    /// * `0000:01:00.0` RTX 4090 on nvidia + `01:00.1` audio on snd_hda_intel, IOMMU group 12,
    ///   BAR1 256 MiB, resizable 256 MiB .. 32 GiB;
    /// * `0000:02:00.0` H200 on nvidia, alone in group 13, BAR1 256 GiB, no resize;
    /// * `0000:03:00.0` RTX 3090 + `03:00.1` audio, sharing group 14 with an Intel NIC
    ///   `0000:04:00.0` on igb and the root port `0000:00:1c.0` on pcieport;
    /// * `0000:05:00.0` L4 on nvidia with no IOMMU group;
    /// * `0000:06:00.0` RTX 2080 Ti with audio, USB and UCSI functions `.1`-`.3`, all on
    ///   vfio-pci with `driver_override` set, group 16.
    pub fn bind_tree() -> Self {
        let f = SysfsFixture::new();
        f.add_driver("vfio-pci");
        let fun = |bdf, vendor, device, class, driver, group: Option<u32>, bars| FakeFunction {
            bdf,
            vendor,
            device,
            class,
            driver,
            iommu_group: group,
            bars,
        };
        let gpu_bars = |bar1: u64| vec![(0, 16 << 20), (1, bar1), (3, 32 << 20)];
        f.add(&fun(
            "0000:01:00.0",
            0x10de,
            0x2684,
            0x030000,
            Some("nvidia"),
            Some(12),
            gpu_bars(256 << 20),
        ));
        f.add(&fun(
            "0000:01:00.1",
            0x10de,
            0x22ba,
            0x040300,
            Some("snd_hda_intel"),
            Some(12),
            vec![(0, 16 << 10)],
        ));
        f.set_resize("0000:01:00.0", 1, 0xff00, 8);
        f.add(&fun(
            "0000:02:00.0",
            0x10de,
            0x2335,
            0x030200,
            Some("nvidia"),
            Some(13),
            gpu_bars(256 << 30),
        ));
        f.add(&fun(
            "0000:03:00.0",
            0x10de,
            0x2204,
            0x030000,
            Some("nvidia"),
            Some(14),
            gpu_bars(256 << 20),
        ));
        f.add(&fun(
            "0000:03:00.1",
            0x10de,
            0x1aef,
            0x040300,
            Some("snd_hda_intel"),
            Some(14),
            vec![(0, 16 << 10)],
        ));
        f.add(&fun(
            "0000:04:00.0",
            0x8086,
            0x1533,
            0x020000,
            Some("igb"),
            Some(14),
            vec![(0, 1 << 20)],
        ));
        f.add(&fun(
            "0000:00:1c.0",
            0x8086,
            0xa33c,
            0x060400,
            Some("pcieport"),
            Some(14),
            vec![],
        ));
        f.add(&fun(
            "0000:05:00.0",
            0x10de,
            0x27b8,
            0x030200,
            Some("nvidia"),
            None,
            gpu_bars(32 << 30),
        ));
        f.add(&fun(
            "0000:06:00.0",
            0x10de,
            0x1e07,
            0x030000,
            Some("vfio-pci"),
            Some(16),
            gpu_bars(256 << 20),
        ));
        f.add(&fun(
            "0000:06:00.1",
            0x10de,
            0x10f7,
            0x040300,
            Some("vfio-pci"),
            Some(16),
            vec![(0, 16 << 10)],
        ));
        f.add(&fun(
            "0000:06:00.2",
            0x10de,
            0x1ad6,
            0x0c0330,
            Some("vfio-pci"),
            Some(16),
            vec![(0, 256 << 10)],
        ));
        f.add(&fun(
            "0000:06:00.3",
            0x10de,
            0x1ad7,
            0x0c8000,
            Some("vfio-pci"),
            Some(16),
            vec![(0, 4 << 10)],
        ));
        for b in [
            "0000:06:00.0",
            "0000:06:00.1",
            "0000:06:00.2",
            "0000:06:00.3",
        ] {
            fs::write(f.device_dir(b).join("driver_override"), "vfio-pci\n").expect("write");
        }
        f
    }

    /// A machine with the IOMMU off: an RTX 4090 and its audio function on their usual
    /// drivers, no IOMMU groups, vfio-pci not loaded.
    pub fn no_iommu() -> Self {
        let f = SysfsFixture::new();
        for (bdf, device, class, driver) in [
            ("0000:01:00.0", 0x2684, 0x030000, "nvidia"),
            ("0000:01:00.1", 0x22ba, 0x040300, "snd_hda_intel"),
        ] {
            f.add(&FakeFunction {
                bdf,
                vendor: 0x10de,
                device,
                class,
                driver: Some(driver),
                iommu_group: None,
                bars: vec![(0, 16 << 20), (1, 256 << 20)],
            });
        }
        f
    }

    /// Makes one attribute of a device unreadable (replaces the file with a directory, which
    /// fails to read even as root).
    pub fn break_attribute(&self, bdf: &str, attr: &str) {
        let p = self.device_dir(bdf).join(attr);
        let _ = fs::remove_file(&p);
        fs::create_dir_all(&p).expect("create dir in place of attribute");
    }
}

impl Default for SysfsFixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SysfsFixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn put32(cfg: &mut [u8], off: usize, v: u32) {
    if let Some(d) = cfg.get_mut(off..off + 4) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// A 4096-byte PCIe config space for `f`: ids, class, BARs at the addresses `add` gives them,
/// and a capability list PM -> MSI -> PCIe, then the extended VC capability.
fn fake_config(f: &FakeFunction) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    put32(
        &mut c,
        0x00,
        u32::from(f.vendor) | u32::from(f.device) << 16,
    );
    put32(&mut c, 0x04, 0x0010_0006); // memory + bus master on; capability list
    put32(&mut c, 0x08, (f.class << 8) | 0xa1);
    let bridge = f.class >> 8 == 0x0604;
    put32(&mut c, 0x0c, if bridge { 0x0001_0000 } else { 0 });
    let mut bars = f.bars.clone();
    bars.sort();
    let mut next = 0xf000_0000u64;
    for &(i, size) in &bars {
        let start = next.next_multiple_of(size);
        next = start + size;
        let reg = 0x10 + 4 * usize::from(i);
        if i == 0 || i >= 5 {
            put32(&mut c, reg, start as u32);
        } else {
            put32(&mut c, reg, start as u32 | 0xc);
            put32(&mut c, reg + 4, (start >> 32) as u32);
        }
    }
    put32(&mut c, 0x2c, u32::from(f.vendor) | 0x1234 << 16);
    put32(&mut c, 0x34, 0x60);
    put32(&mut c, 0x60, 0x0003_6801); // PM -> 0x68
    put32(&mut c, 0x68, 0x0080_7805); // MSI -> 0x78
    put32(&mut c, 0x78, 0x0002_0010); // PCIe v2, end
    put32(&mut c, 0x100, 0x0001_0002); // VC, end
    c
}
