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
        if let Some(d) = f.driver {
            let ddir = self.root.join("bus/pci/drivers").join(d);
            fs::create_dir_all(&ddir).expect("create driver dir");
            symlink(&ddir, dir.join("driver")).expect("symlink driver");
        }
        if let Some(g) = f.iommu_group {
            let gdir = self.root.join("kernel/iommu_groups").join(g.to_string());
            fs::create_dir_all(gdir.join("devices")).expect("create group dir");
            let _ = symlink(&dir, gdir.join("devices").join(f.bdf));
            symlink(&gdir, dir.join("iommu_group")).expect("symlink group");
        }
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
