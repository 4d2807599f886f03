//! PCI devices as Linux shows them under `/sys/bus/pci/devices`.
//!
//! [`Sysfs::from_env`] honours `NVBARE_SYSFS_ROOT`, a directory that stands in for `/sys`, so
//! tests and `nvbare list` can run against a fixture tree.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use nvbare_core::hal::{HalError, PciConfig};

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
    /// A file where a sysfs attribute should be is larger than any attribute.
    #[error(
        "{path} holds more than {limit} bytes, more than any sysfs attribute, so it is not one \
         (is NVBARE_SYSFS_ROOT pointing at a sysfs tree?)"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The most nvbare reads ([`MAX_ATTR_BYTES`]).
        limit: usize,
    },
    /// A file where a sysfs attribute should be is a device, FIFO or socket.
    #[error(
        "{path} is not a regular file (a device, FIFO or socket), so it is not a sysfs \
         attribute (is NVBARE_SYSFS_ROOT pointing at a sysfs tree?)"
    )]
    NotAFile {
        /// The file.
        path: PathBuf,
    },
    /// Writing a sysfs attribute failed.
    #[error("cannot write {value:?} to {path}: {source}{hint}")]
    Write {
        /// The attribute written.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The OS error.
        source: io::Error,
        /// Advice for the user (may be empty).
        hint: &'static str,
    },
}

/// The most bytes read from a sysfs attribute (and from the other small kernel text files nvbare
/// reads, such as `/proc/driver/nvidia/version`). The kernel caps an attribute at one page
/// (4096 bytes); the margin is for fixture trees. `NVBARE_SYSFS_ROOT` can point at any tree,
/// where a "file" may be a link to `/dev/zero` or many gigabytes, so nothing is read past this.
pub const MAX_ATTR_BYTES: usize = 64 << 10;

/// Why [`read_small_file`] gave up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SmallFileError {
    /// Opening or reading failed (`NotFound` included, for callers that treat it as absent).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// More than the limit.
    #[error("larger than {0} bytes")]
    TooLarge(usize),
    /// A device, FIFO or socket: reading it could block or never end.
    #[error("not a regular file")]
    NotAFile,
}

/// Reads a whole small text file (a sysfs attribute, a procfs file) of at most `limit` bytes.
///
/// Devices, FIFOs and sockets are refused unopened (sysfs and procfs files are regular files):
/// `/dev/zero` would never end and a FIFO could block forever. A directory fails to read, with
/// the OS error. The read stops one byte past `limit`, so a huge file costs no more than that.
pub(crate) fn read_small_file(path: &Path, limit: usize) -> Result<String, SmallFileError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let plain = |m: fs::Metadata| m.is_file() || m.is_dir();
    if !plain(fs::metadata(path)?) {
        return Err(SmallFileError::NotAFile);
    }
    // O_NONBLOCK: if the path was swapped for a FIFO since, opening it does not hang.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !plain(file.metadata()?) {
        return Err(SmallFileError::NotAFile);
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(SmallFileError::TooLarge(limit));
    }
    String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
        .into()
    })
}

/// Reads a sysfs attribute; `Ok(None)` when it does not exist.
fn read_attr(path: &Path) -> Result<Option<String>, SysfsError> {
    match read_small_file(path, MAX_ATTR_BYTES) {
        Ok(t) => Ok(Some(t)),
        Err(SmallFileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(attr_error(path, e)),
    }
}

fn attr_error(path: &Path, e: SmallFileError) -> SysfsError {
    let path = path.to_owned();
    match e {
        SmallFileError::Io(source) => read_error(&path, source),
        SmallFileError::TooLarge(limit) => SysfsError::TooLarge { path, limit },
        SmallFileError::NotAFile => SysfsError::NotAFile { path },
    }
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
            0x0200 => "Ethernet controller",
            0x0207 => "InfiniBand controller",
            0x0106 => "SATA controller",
            0x0108 => "NVMe controller",
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

/// Reads a sysfs attribute that must exist.
fn read_text(path: &Path) -> Result<String, SysfsError> {
    read_small_file(path, MAX_ATTR_BYTES).map_err(|e| attr_error(path, e))
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
    let Some(text) = read_attr(path)? else {
        return Ok(Vec::new());
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

/// `IORESOURCE_MEM_64`: a 64-bit memory resource.
const IORESOURCE_MEM_64: u64 = 0x0010_0000;
/// `IORESOURCE_PREFETCH`.
const IORESOURCE_PREFETCH: u64 = 0x2000;
/// `IORESOURCE_MEM`.
const IORESOURCE_MEM: u64 = 0x200;

/// The drivers a device may be bound to without making its IOMMU group unusable for VFIO:
/// vfio drivers, `pci-stub`, and `pcieport` (bridges; the kernel lets their group be used).
pub fn driver_keeps_group_viable(driver: Option<&str>) -> bool {
    match driver {
        None => true,
        Some(d) => d == "pci-stub" || d == "pcieport" || d.contains("vfio"),
    }
}

/// A bridge's forwarding window (from lines 13.. of its `resource` file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeWindow {
    /// Bus address of the first byte.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// `IORESOURCE_*` flags.
    pub flags: u64,
}

impl BridgeWindow {
    /// Whether this is the 64-bit prefetchable memory window (where big BARs live).
    pub fn is_prefetchable_64(&self) -> bool {
        self.flags & (IORESOURCE_MEM | IORESOURCE_PREFETCH | IORESOURCE_MEM_64)
            == IORESOURCE_MEM | IORESOURCE_PREFETCH | IORESOURCE_MEM_64
    }
}

impl Sysfs {
    /// `…/bus/pci/devices/<bdf>`.
    pub fn device_dir(&self, bdf: Bdf) -> PathBuf {
        self.devices_dir().join(bdf.to_string())
    }

    /// `…/bus/pci/drivers`.
    pub fn drivers_dir(&self) -> PathBuf {
        self.root.join("bus/pci/drivers")
    }

    /// `…/kernel/iommu_groups`.
    pub fn iommu_groups_dir(&self) -> PathBuf {
        self.root.join("kernel/iommu_groups")
    }

    /// Whether the vfio-pci driver is registered (its module is loaded).
    pub fn vfio_pci_loaded(&self) -> bool {
        self.drivers_dir().join("vfio-pci").is_dir()
    }

    /// Whether the kernel created any IOMMU group (the IOMMU is on).
    pub fn iommu_enabled(&self) -> bool {
        fs::read_dir(self.iommu_groups_dir())
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
    }

    /// The functions in IOMMU group `group`, sorted.
    pub fn iommu_group_members(&self, group: u32) -> Result<Vec<Bdf>, SysfsError> {
        let dir = self
            .iommu_groups_dir()
            .join(group.to_string())
            .join("devices");
        let entries = fs::read_dir(&dir).map_err(|e| read_error(&dir, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| read_error(&dir, e))?;
            match entry.file_name().to_str().map(str::parse::<Bdf>) {
                Some(Ok(b)) => out.push(b),
                _ => log::debug!("ignoring {:?} in {}", entry.file_name(), dir.display()),
            }
        }
        out.sort();
        Ok(out)
    }

    /// The reserved IOVA ranges of an IOMMU group (`reserved_regions`: `start end type`), which
    /// DMA mappings must avoid (e.g. the MSI window at 0xfee00000 on x86).
    pub fn iommu_group_reserved(&self, group: u32) -> Result<Vec<(u64, u64)>, SysfsError> {
        let path = self
            .iommu_groups_dir()
            .join(group.to_string())
            .join("reserved_regions");
        let Some(text) = read_attr(&path)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            match (it.next().and_then(parse_hex), it.next().and_then(parse_hex)) {
                (Some(a), Some(b)) if b >= a => out.push((a, b)),
                _ => {
                    return Err(SysfsError::Parse {
                        path,
                        what: "`start end type` lines",
                        found: line.to_owned(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The `driver_override` of a function (`None` when unset or absent).
    pub fn driver_override(&self, bdf: Bdf) -> Result<Option<String>, SysfsError> {
        let path = self.device_dir(bdf).join("driver_override");
        Ok(read_attr(&path)?.and_then(|t| {
            let t = t.trim();
            (!t.is_empty() && t != "(null)").then(|| t.to_owned())
        }))
    }

    /// The reset methods the kernel will try, in order (`reset_method`), or `None` when the
    /// kernel has no such attribute (before 5.15) or the function cannot be reset.
    pub fn reset_methods(&self, bdf: Bdf) -> Result<Option<Vec<String>>, SysfsError> {
        let path = self.device_dir(bdf).join("reset_method");
        Ok(read_attr(&path)?.map(|t| t.split_whitespace().map(str::to_owned).collect()))
    }

    /// Resets a function through sysfs (`reset`), with whatever method `reset_method` allows.
    pub fn reset(&self, bdf: Bdf) -> Result<(), SysfsError> {
        let path = self.device_dir(bdf).join("reset");
        if !path.exists() {
            return Err(SysfsError::Write {
                path,
                value: "1".into(),
                source: io::ErrorKind::NotFound.into(),
                hint: " (the kernel knows no reset method for this function; try a bus reset of \
                       the slot or a reboot)",
            });
        }
        write_attr(&path, "1")
    }

    /// The sizes BAR `bar` may be resized to (`resourceN_resize`: bit n = 2^n MiB), or `None`
    /// when the kernel offers no resize (no ReBAR capability, or a kernel before 6.1).
    pub fn resize_sizes(&self, bdf: Bdf, bar: u8) -> Result<Option<u64>, SysfsError> {
        let path = self.device_dir(bdf).join(format!("resource{bar}_resize"));
        match read_attr(&path)? {
            Some(t) => match parse_hex(&t) {
                Some(v) => Ok(Some(v)),
                None => Err(SysfsError::Parse {
                    path,
                    what: "a hex bitmap of BAR sizes",
                    found: t,
                }),
            },
            None => Ok(None),
        }
    }

    /// The bridge directly above a function (from the real path of its sysfs directory).
    pub fn parent_bridge(&self, bdf: Bdf) -> Option<Bdf> {
        let real = fs::canonicalize(self.device_dir(bdf)).ok()?;
        real.parent()?.file_name()?.to_str()?.parse().ok()
    }

    /// A bridge's forwarding windows (I/O, memory, prefetchable memory), when it has them.
    pub fn bridge_windows(&self, bridge: Bdf) -> Result<Vec<BridgeWindow>, SysfsError> {
        let path = self.device_dir(bridge).join("resource");
        let Some(text) = read_attr(&path)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        // A bridge shows DEVICE_COUNT_RESOURCE lines: 6 BARs, the ROM, 6 SR-IOV BARs when the
        // kernel has CONFIG_PCI_IOV, then PCI_BRIDGE_RESOURCE_NUM (4) windows.
        let lines: Vec<&str> = text.lines().collect();
        let first = match lines.len() {
            17 => 13,
            11 => 7,
            _ => return Ok(out),
        };
        for line in lines.iter().skip(first) {
            let f: Vec<u64> = line.split_whitespace().filter_map(parse_hex).collect();
            if let [start, end, flags] = f[..]
                && end > start
            {
                out.push(BridgeWindow {
                    start,
                    size: end - start + 1,
                    flags,
                });
            }
        }
        Ok(out)
    }

    /// Opens a function's configuration space (`config`), for reading and, when allowed, writing.
    pub fn config(&self, bdf: Bdf) -> Result<SysfsConfig, SysfsError> {
        let path = self.device_dir(bdf).join("config");
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .or_else(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => fs::File::open(&path),
                _ => Err(e),
            })
            .map_err(|e| read_error(&path, e))?;
        let len = file.metadata().map_err(|e| read_error(&path, e))?.len();
        if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            return Err(read_error(
                &path,
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        Ok(SysfsConfig { file, path, len })
    }
}

/// Writes one sysfs attribute in a single `write`, as the kernel expects.
pub fn write_attr(path: &Path, value: &str) -> Result<(), SysfsError> {
    use std::io::Write;
    let err = |source: io::Error| {
        let hint = match source.raw_os_error() {
            Some(libc_errno::EACCES) | Some(libc_errno::EPERM) => {
                " (run as root: sysfs PCI attributes are writable only by root)"
            }
            Some(libc_errno::EBUSY) => " (the device is busy: stop the programs using it)",
            Some(libc_errno::ENODEV) => " (no driver accepted the device)",
            Some(libc_errno::EISDIR) => " (this is not an attribute file)",
            _ => "",
        };
        SysfsError::Write {
            path: path.to_owned(),
            value: value.to_owned(),
            source,
            hint,
        }
    };
    // O_TRUNC like the shell's `>`: sysfs ignores it, a fixture file ends up holding the value.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(err)?;
    f.write_all(value.as_bytes()).map_err(err)
}

/// The errno values the hints above tell apart (Linux numbers, all architectures we run on).
mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const ENODEV: i32 = 19;
    pub const EISDIR: i32 = 21;
}

/// A function's configuration space through its sysfs `config` file.
///
/// Root sees all of it (256 bytes, or 4096 for PCIe); other users see the first 64 bytes, and
/// reads beyond what the file offers report [`HalError::OutOfRange`].
#[derive(Debug)]
pub struct SysfsConfig {
    file: fs::File,
    path: PathBuf,
    len: u64,
}

impl SysfsConfig {
    /// The `config` file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many bytes of config space the file shows.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file shows nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn check_config(offset: u16, len: u64) -> Result<(), HalError> {
    if !offset.is_multiple_of(4) {
        return Err(HalError::Misaligned {
            offset: offset.into(),
            align: 4,
        });
    }
    nvbare_core::hal::check_range(offset.into(), 4, len.min(4096))
}

fn os_error(op: &'static str, e: &io::Error) -> HalError {
    HalError::Os {
        op,
        errno: e.raw_os_error().unwrap_or(0),
    }
}

impl PciConfig for SysfsConfig {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        use std::os::unix::fs::FileExt;
        check_config(offset, self.len)?;
        let mut b = [0u8; 4];
        self.file
            .read_exact_at(&mut b, offset.into())
            .map_err(|e| os_error("reading PCI config space", &e))?;
        Ok(u32::from_le_bytes(b))
    }

    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
        use std::os::unix::fs::FileExt;
        check_config(offset, self.len)?;
        self.file
            .write_all_at(&value.to_le_bytes(), offset.into())
            .map_err(|e| os_error("writing PCI config space", &e))
    }

    /// Resets through sysfs `reset` (the parent directory of `config`).
    fn reset_function(&self) -> Result<(), HalError> {
        let Some(dir) = self.path.parent() else {
            return Err(HalError::Unsupported("PCI function reset"));
        };
        let path = dir.join("reset");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| os_error("opening sysfs reset", &e))?;
        std::io::Write::write_all(&mut f, b"1").map_err(|e| os_error("sysfs reset", &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_integration::sysfs_fixture::SysfsFixture;
    use std::os::unix::fs::symlink;

    fn replace(path: &Path, with: impl FnOnce(&Path)) {
        fs::remove_file(path).unwrap();
        with(path);
    }

    #[test]
    fn attributes_that_are_devices_or_fifos_are_refused_unread() {
        let fx = SysfsFixture::several_gpus();
        let s = Sysfs::new(fx.root());
        let gpu: Bdf = "0000:01:00.0".parse().unwrap();
        let dir = fx.device_dir("0000:01:00.0");
        // `/dev/zero` never ends: reading it whole would exhaust memory.
        replace(&dir.join("vendor"), |p| symlink("/dev/zero", p).unwrap());
        let e = s.function(gpu).unwrap_err();
        assert!(
            matches!(&e, SysfsError::NotAFile { path } if path.ends_with("0000:01:00.0/vendor")),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains("0000:01:00.0/vendor"), "{msg}");
        assert!(msg.contains("NVBARE_SYSFS_ROOT"), "{msg}");
        assert!(matches!(s.list(), Err(SysfsError::NotAFile { .. })));
        // A FIFO would block the open forever.
        replace(&dir.join("driver_override"), |p| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                p,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap()
        });
        let e = s.driver_override(gpu).unwrap_err();
        assert!(matches!(e, SysfsError::NotAFile { .. }), "{e}");
        // A directory fails to read, with the OS error, as before.
        fx.break_attribute("0000:01:00.0", "device");
        assert!(matches!(
            read_attr(&dir.join("device")),
            Err(SysfsError::Read { .. })
        ));
    }

    #[test]
    fn oversized_attributes_are_refused_after_the_limit() {
        let fx = SysfsFixture::several_gpus();
        let s = Sysfs::new(fx.root());
        let gpu: Bdf = "0000:01:00.0".parse().unwrap();
        let dir = fx.device_dir("0000:01:00.0");
        // 1 GiB (sparse, so it costs no disk): only MAX_ATTR_BYTES + 1 bytes are read.
        fs::File::create(dir.join("class"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let e = s.function(gpu).unwrap_err();
        assert!(
            matches!(&e, SysfsError::TooLarge { path, limit: MAX_ATTR_BYTES }
                if path.ends_with("0000:01:00.0/class")),
            "{e}"
        );
        assert!(e.to_string().contains("65536 bytes"), "{e}");
        // The limit itself is fine, one byte more is not.
        let methods = "flr ".repeat(MAX_ATTR_BYTES / 4);
        fs::write(dir.join("reset_method"), &methods).unwrap();
        assert_eq!(
            s.reset_methods(gpu).unwrap().map(|m| m.len()),
            Some(MAX_ATTR_BYTES / 4)
        );
        fs::write(dir.join("reset_method"), format!("{methods} ")).unwrap();
        assert!(matches!(
            s.reset_methods(gpu),
            Err(SysfsError::TooLarge { .. })
        ));
        // Every other attribute reader goes through the same limit.
        fs::write(dir.join("resource1_resize"), "0".repeat(MAX_ATTR_BYTES + 1)).unwrap();
        assert!(matches!(
            s.resize_sizes(gpu, 1),
            Err(SysfsError::TooLarge { .. })
        ));
    }

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
