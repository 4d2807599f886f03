//! PCI devices as Linux shows them under `/sys/bus/pci/devices`.
//!
//! [`Sysfs::from_env`] honours `NVBARE_SYSFS_ROOT`, a directory that stands in for `/sys`, so
//! tests and `nvbare list` can run against a fixture tree.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::NVIDIA_VENDOR_ID;

/// Errors reading sysfs.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// The PCI device directory does not exist.
    #[error("{path} does not exist: is sysfs mounted? (set NVBARE_SYSFS_ROOT to use another tree)")]
    NoPciBus {
        /// The directory that was expected.
        path: PathBuf,
    },
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}{hint}")]
    Read {
        /// What was read.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
        /// Advice for the user (may be empty).
        hint: &'static str,
    },
    /// A file held something unexpected.
    #[error("{path}: expected {what}, found {found:?}")]
    Parse {
        /// What was read.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
        /// What the file held.
        found: String,
    },
    /// No PCI function with this address.
    #[error("no PCI device {bdf} (see `nvbare list`)")]
    NoSuchDevice {
        /// The address asked for.
        bdf: Bdf,
    },
}

fn read_error(path: &Path, source: io::Error) -> SysfsError {
    let hint = if source.kind() == io::ErrorKind::PermissionDenied {
        " (run as root, or grant read access to this file)"
    } else {
        ""
    };
    SysfsError::Read {
        path: path.to_owned(),
        source,
        hint,
    }
}

/// A PCI address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bdf {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub device: u8,
    /// Function number (0..8).
    pub function: u8,
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Why a string is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a PCI address: expected DOMAIN:BUS:DEVICE.FUNCTION, e.g. 0000:01:00.0")]
pub struct BdfParseError(pub String);

impl FromStr for Bdf {
    type Err = BdfParseError;

    /// Parses `DDDD:BB:DD.F` (the form sysfs uses); `BB:DD.F` means domain 0.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || BdfParseError(s.to_owned());
        let (head, function) = s.rsplit_once('.').ok_or_else(err)?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return Err(err()),
        };
        let hex = |t: &str, max: u32| -> Result<u32, BdfParseError> {
            if t.is_empty() || t.len() > 8 {
                return Err(err());
            }
            let v = u32::from_str_radix(t, 16).map_err(|_| err())?;
            if v > max { Err(err()) } else { Ok(v) }
        };
        Ok(Bdf {
            domain: hex(domain, 0xffff_ffff)?,
            bus: hex(bus, 0xff)? as u8,
            device: hex(device, 0x1f)? as u8,
            function: hex(function, 0x7)? as u8,
        })
    }
}

/// One memory or I/O BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    /// BAR index (0..6; a 64-bit BAR takes the index of its low half).
    pub index: u8,
    /// Bus address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// The resource flags sysfs reports (`IORESOURCE_*`).
    pub flags: u64,
}

impl Bar {
    /// Whether this is a prefetchable memory BAR (`IORESOURCE_PREFETCH`).
    pub fn prefetchable(&self) -> bool {
        self.flags & 0x2000 != 0
    }
}

/// A PCI function as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address.
    pub bdf: Bdf,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Class code (base class, subclass, programming interface).
    pub class: u32,
    /// The driver bound to it, if any.
    pub driver: Option<String>,
    /// Its IOMMU group, if the IOMMU is on.
    pub iommu_group: Option<u32>,
    /// Memory BARs with a non-zero size.
    pub bars: Vec<Bar>,
    /// The directory in sysfs.
    pub path: PathBuf,
}

impl PciFunction {
    /// Product name from NVIDIA's table, for NVIDIA devices.
    pub fn name(&self) -> Option<&'static str> {
        if self.vendor == NVIDIA_VENDOR_ID {
            crate::nvidia_device_name(self.device)
        } else {
            None
        }
    }

    /// Whether this is a display controller (a GPU), not e.g. its HDMI audio function.
    pub fn is_gpu(&self) -> bool {
        self.class >> 16 == 0x03
    }

    /// A short description of the class ("3D controller", "audio", ...).
    pub fn class_name(&self) -> &'static str {
        match self.class >> 8 {
            0x0300 => "VGA controller",
            0x0302 => "3D controller",
            0x0380 => "display controller",
            0x0403 => "audio",
            0x0c03 => "USB controller",
            0x0c80 => "serial bus controller",
            0x0604 => "PCI bridge",
            0x0680 => "bridge",
            _ => "other",
        }
    }

    /// The BAR with this index, if present.
    pub fn bar(&self, index: u8) -> Option<&Bar> {
        self.bars.iter().find(|b| b.index == index)
    }
}

/// The sysfs tree to read.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::new("/sys")
    }
}

impl Sysfs {
    /// The environment variable that replaces `/sys`.
    pub const ROOT_ENV: &'static str = "NVBARE_SYSFS_ROOT";

    /// A tree rooted at `root` (which stands for `/sys`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    /// `/sys`, or `$NVBARE_SYSFS_ROOT` when set.
    pub fn from_env() -> Self {
        match std::env::var_os(Self::ROOT_ENV) {
            Some(r) if !r.is_empty() => Sysfs::new(r),
            _ => Sysfs::default(),
        }
    }

    /// The directory that stands for `/sys`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `…/bus/pci/devices`.
    pub fn devices_dir(&self) -> PathBuf {
        self.root.join("bus/pci/devices")
    }

    /// Every PCI function, sorted by address.
    pub fn list(&self) -> Result<Vec<PciFunction>, SysfsError> {
        let dir = self.devices_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SysfsError::NoPciBus { path: dir });
            }
            Err(e) => return Err(read_error(&dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| read_error(&dir, e))?;
            let name = entry.file_name();
            let Some(bdf) = name.to_str().and_then(|n| n.parse::<Bdf>().ok()) else {
                log::debug!("ignoring {:?} in {}", name, dir.display());
                continue;
            };
            out.push(self.read_function(bdf)?);
        }
        out.sort_by_key(|f| f.bdf);
        Ok(out)
    }

    /// Every NVIDIA function (GPUs and their audio/USB companions), sorted by address.
    pub fn list_nvidia(&self) -> Result<Vec<PciFunction>, SysfsError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|f| f.vendor == NVIDIA_VENDOR_ID)
            .collect())
    }

    /// One function by address.
    pub fn function(&self, bdf: Bdf) -> Result<PciFunction, SysfsError> {
        if !self.devices_dir().join(bdf.to_string()).exists() {
            return Err(SysfsError::NoSuchDevice { bdf });
        }
        self.read_function(bdf)
    }

    fn read_function(&self, bdf: Bdf) -> Result<PciFunction, SysfsError> {
        let path = self.devices_dir().join(bdf.to_string());
        let vendor = read_hex(&path.join("vendor"), "a hex vendor id")? as u16;
        let device = read_hex(&path.join("device"), "a hex device id")? as u16;
        let class = read_hex(&path.join("class"), "a hex class code")? as u32;
        let driver = link_name(&path.join("driver"))?;
        let iommu_group = match link_name(&path.join("iommu_group"))? {
            Some(g) => Some(g.parse::<u32>().map_err(|_| SysfsError::Parse {
                path: path.join("iommu_group"),
                what: "a link to an IOMMU group number",
                found: g,
            })?),
            None => None,
        };
        let bars = read_resources(&path.join("resource"))?;
        Ok(PciFunction {
            bdf,
            vendor,
            device,
            class,
            driver,
            iommu_group,
            bars,
            path,
        })
    }
}

fn read_text(path: &Path) -> Result<String, SysfsError> {
    fs::read_to_string(path).map_err(|e| read_error(path, e))
}

fn parse_hex(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u64::from_str_radix(t, 16).ok()
}

fn read_hex(path: &Path, what: &'static str) -> Result<u64, SysfsError> {
    let s = read_text(path)?;
    parse_hex(&s).ok_or_else(|| SysfsError::Parse {
        path: path.to_owned(),
        what,
        found: s,
    })
}

/// The file name a symlink points to, or `None` when there is no link.
fn link_name(path: &Path) -> Result<Option<String>, SysfsError> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(read_error(path, e)),
    }
}

/// Parses the `resource` file: one `start end flags` line per resource; lines 0-5 are BARs.
fn read_resources(path: &Path) -> Result<Vec<Bar>, SysfsError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_error(path, e)),
    };
    let mut bars = Vec::new();
    for (index, line) in text.lines().take(6).enumerate() {
        let fields: Vec<u64> = line.split_whitespace().filter_map(parse_hex).collect();
        let [start, end, flags] = fields[..] else {
            return Err(SysfsError::Parse {
                path: path.to_owned(),
                what: "three hex numbers per line (start end flags)",
                found: line.to_owned(),
            });
        };
        if end > start {
            bars.push(Bar {
                index: index as u8,
                start,
                size: end - start + 1,
                flags,
            });
        }
    }
    Ok(bars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_parse_and_display() {
        let b: Bdf = "0000:01:00.0".parse().unwrap();
        assert_eq!(
            b,
            Bdf {
                domain: 0,
                bus: 1,
                device: 0,
                function: 0
            }
        );
        assert_eq!(b.to_string(), "0000:01:00.0");
        assert_eq!(
            "3b:00.1".parse::<Bdf>().unwrap().to_string(),
            "0000:3b:00.1"
        );
        for bad in [
            "",
            "0000:01:00",
            "0000:01:20.0",
            "0000:01:00.8",
            "zz:00.0",
            "0:1:2:3.0",
        ] {
            assert!(bad.parse::<Bdf>().is_err(), "{bad}");
        }
    }
}
