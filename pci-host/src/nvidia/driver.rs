//! Finding and opening nvidia.ko: device nodes, the driver version check, the card list, and
//! per-GPU nodes.
//!
//! Opening order (what the driver requires, `escape.c` / `nv.c` at 580.142):
//! 1. `/dev/nvidiactl`: RM clients live on a control file (`NV_CTL_DEVICE_ONLY` escapes).
//! 2. `NV_ESC_CHECK_VERSION_STR` with QUERY: the driver's version string. We refuse branches
//!    whose layouts we do not have *before* any RM call (a wrong alloc layout would be misread
//!    silently). `/proc/driver/nvidia/version` is the fallback.
//! 3. `NV_ESC_CARD_INFO`: the GPUs, with their minor numbers and `gpu_id`s.
//! 4. `/dev/nvidiaN` + `NV_ESC_REGISTER_FD(ctl)`: opening the GPU node initializes the adapter;
//!    RM refuses `NV01_DEVICE_0` (`NV_ERR_INSUFFICIENT_PERMISSIONS`) until a registered node of
//!    that GPU is open (observed on an H200 with 580.159.04).

use std::ffi::CStr;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvbare_core::rm::{RmAbi, RmStatus};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::abi::{
    NV_CARD_INFO_ENTRIES, NV_ESC_CARD_INFO, NV_ESC_CHECK_VERSION_STR, NV_ESC_REGISTER_FD,
    NV_ESC_WAIT_OPEN_COMPLETE, NV_RM_API_VERSION_CMD_QUERY, NV_RM_API_VERSION_REPLY_RECOGNIZED,
    NV_RM_API_VERSION_STRING_LENGTH, nv_ioctl_card_info_t, nv_ioctl_register_fd_t,
    nv_ioctl_rm_api_version_t, nv_ioctl_wait_open_complete_t,
};
use super::error::{KmodError, SUPPORTED_BRANCH, open_error};
use super::ioctl::nv_escape_plain;
use crate::sysfs::{MAX_ATTR_BYTES, SmallFileError, read_small_file};

/// Where the driver's files are. [`NvidiaPaths::from_env`] lets tests point them at a fixture
/// directory, like `NVBARE_SYSFS_ROOT` does for sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaPaths {
    /// Directory holding `nvidiactl`, `nvidiaN`, `nvidia-uvm` (normally `/dev`).
    pub dev: PathBuf,
    /// The driver's version file (normally `/proc/driver/nvidia/version`).
    pub proc_version: PathBuf,
}

impl Default for NvidiaPaths {
    fn default() -> Self {
        NvidiaPaths {
            dev: PathBuf::from("/dev"),
            proc_version: PathBuf::from("/proc/driver/nvidia/version"),
        }
    }
}

impl NvidiaPaths {
    /// The system paths, with `NVBARE_DEV_ROOT` replacing `/dev` and `NVBARE_PROC_ROOT`
    /// replacing `/proc` when set.
    pub fn from_env() -> Self {
        let mut p = NvidiaPaths::default();
        if let Some(dev) = std::env::var_os("NVBARE_DEV_ROOT") {
            p.dev = PathBuf::from(dev);
        }
        if let Some(proc_root) = std::env::var_os("NVBARE_PROC_ROOT") {
            p.proc_version = Path::new(&proc_root).join("driver/nvidia/version");
        }
        p
    }

    /// `/dev/nvidiactl`.
    pub fn ctl(&self) -> PathBuf {
        self.dev.join("nvidiactl")
    }

    /// `/dev/nvidiaN`.
    pub fn gpu(&self, minor: u32) -> PathBuf {
        self.dev.join(format!("nvidia{minor}"))
    }

    /// `/dev/nvidia-uvm`.
    pub fn uvm(&self) -> PathBuf {
        self.dev.join("nvidia-uvm")
    }
}

/// The driver branch whose layouts the adapter speaks (see [`SUPPORTED_BRANCH`]).
pub const SUPPORTED_MAJOR: u32 = 580;

/// A driver version such as `580.159.04`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverVersion {
    /// The version as the driver spells it.
    pub text: String,
    /// Branch number (580).
    pub major: u32,
    /// Second component.
    pub minor: u32,
}

impl DriverVersion {
    /// Parses `MAJOR.MINOR[.PATCH]`.
    pub fn parse(s: &str) -> Option<DriverVersion> {
        let s = s.trim();
        let mut parts = s.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        if let Some(p) = parts.next() {
            p.parse::<u32>().ok()?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some(DriverVersion {
            text: s.to_string(),
            major,
            minor,
        })
    }

    /// The RM layouts this version speaks, if the adapter supports it (the 580 branch only).
    pub fn abi(&self) -> Option<RmAbi> {
        (self.major == SUPPORTED_MAJOR).then_some(RmAbi::R580)
    }

    /// Checks that the adapter supports this version.
    pub fn check_supported(&self) -> Result<RmAbi, KmodError> {
        self.abi().ok_or_else(|| KmodError::UnsupportedDriver {
            found: self.text.clone(),
            supported: SUPPORTED_BRANCH,
        })
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Extracts the version from `/proc/driver/nvidia/version`, whose first line reads
/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...`
/// (or `... x86_64 Kernel Module  535.104.05  Sat Aug ...` for the proprietary module).
pub fn parse_proc_version(contents: &str) -> Option<DriverVersion> {
    let line = contents.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .filter(|w| w.contains('.'))
        .find_map(DriverVersion::parse)
}

/// One GPU as `NV_ESC_CARD_INFO` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardInfo {
    /// Minor number: the N of `/dev/nvidiaN` and of `--device nvidia:N`.
    pub minor: u32,
    /// RM's GPU id (for `NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2`).
    pub gpu_id: u32,
    /// PCI domain.
    pub domain: u32,
    /// PCI bus.
    pub bus: u8,
    /// PCI device (slot).
    pub slot: u8,
    /// PCI function.
    pub function: u8,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// BAR0 physical address.
    pub reg_address: u64,
    /// BAR0 size.
    pub reg_size: u64,
    /// BAR1 size.
    pub fb_size: u64,
}

impl CardInfo {
    fn from_raw(c: &nv_ioctl_card_info_t) -> CardInfo {
        CardInfo {
            minor: c.minor_number,
            gpu_id: c.gpu_id,
            domain: c.pci_info.domain,
            bus: c.pci_info.bus,
            slot: c.pci_info.slot,
            function: c.pci_info.function,
            vendor_id: c.pci_info.vendor_id,
            device_id: c.pci_info.device_id,
            reg_address: c.reg_address,
            reg_size: c.reg_size,
            fb_size: c.fb_size,
        }
    }
}

impl fmt::Display for CardInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}  {:04x}:{:04x}",
            self.domain, self.bus, self.slot, self.function, self.vendor_id, self.device_id
        )?;
        if let Some(n) = crate::nvidia_device_name(self.device_id) {
            write!(f, "  {n}")?;
        }
        Ok(())
    }
}

/// Decodes the valid entries of an `NV_ESC_CARD_INFO` reply.
pub fn decode_cards(raw: &[nv_ioctl_card_info_t]) -> Vec<CardInfo> {
    raw.iter()
        .filter(|c| c.valid != 0)
        .map(CardInfo::from_raw)
        .collect()
}

/// The open control node. RM clients made on it die when it is closed.
#[derive(Debug)]
pub(crate) struct CtlFile {
    pub(crate) fd: OwnedFd,
    pub(crate) paths: NvidiaPaths,
}

impl CtlFile {
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn open_node(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
}

/// nvidia.ko, opened and version-checked.
#[derive(Debug, Clone)]
pub struct NvidiaDriver {
    pub(crate) ctl: Arc<CtlFile>,
    version: DriverVersion,
    abi: RmAbi,
}

impl NvidiaDriver {
    /// Opens the driver at the system paths (see [`NvidiaPaths::from_env`]).
    pub fn open() -> Result<NvidiaDriver, KmodError> {
        Self::open_at(NvidiaPaths::from_env())
    }

    /// Opens `/dev/nvidiactl` under `paths` and checks the driver version.
    pub fn open_at(paths: NvidiaPaths) -> Result<NvidiaDriver, KmodError> {
        let ctl_path = paths.ctl();
        let fd = match open_node(&ctl_path) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                return Err(match proc_version(&paths) {
                    Ok(v) => KmodError::NodeMissing {
                        path: ctl_path,
                        version: format!("version {v}"),
                        minor: 0,
                    },
                    Err(_) => KmodError::NoDriver { path: ctl_path },
                });
            }
            Err(Errno::NXIO | Errno::NODEV) => return Err(KmodError::NoDriver { path: ctl_path }),
            Err(e) => return Err(open_error(ctl_path, e)),
        };
        let ctl = CtlFile { fd, paths };
        let version = query_version(&ctl)?;
        let abi = version.check_supported()?;
        log::debug!("nvidia driver {version} at {}", ctl.paths.ctl().display());
        Ok(NvidiaDriver {
            ctl: Arc::new(ctl),
            version,
            abi,
        })
    }

    /// The driver's version.
    pub fn version(&self) -> &DriverVersion {
        &self.version
    }

    /// The RM layouts the driver speaks.
    pub fn abi(&self) -> RmAbi {
        self.abi
    }

    /// The paths in use.
    pub fn paths(&self) -> &NvidiaPaths {
        &self.ctl.paths
    }

    /// The GPUs the driver manages (`NV_ESC_CARD_INFO`).
    pub fn cards(&self) -> Result<Vec<CardInfo>, KmodError> {
        let mut raw = [nv_ioctl_card_info_t::default(); NV_CARD_INFO_ENTRIES];
        nv_escape_plain(self.ctl.as_fd(), NV_ESC_CARD_INFO, &mut raw).map_err(|errno| {
            KmodError::Ioctl {
                op: "NV_ESC_CARD_INFO",
                path: self.ctl.paths.ctl(),
                errno,
            }
        })?;
        Ok(decode_cards(&raw))
    }

    /// The card `nvidia:index`, or [`KmodError::NoSuchGpu`] listing the cards there are.
    pub fn card(&self, index: u32) -> Result<CardInfo, KmodError> {
        let cards = self.cards()?;
        match cards.iter().find(|c| c.minor == index) {
            Some(c) => Ok(c.clone()),
            None => Err(KmodError::NoSuchGpu {
                index,
                found: cards,
            }),
        }
    }

    /// Opens `/dev/nvidiaN` for GPU `index` and registers it with the control file.
    pub fn open_gpu(&self, index: u32) -> Result<GpuNode, KmodError> {
        let card = self.card(index)?;
        let fd = self.open_gpu_file(index)?;
        Ok(GpuNode {
            fd,
            card,
            ctl: self.ctl.clone(),
        })
    }

    /// Opens a fresh, registered `/dev/nvidiaN` file (each CPU mapping needs its own: the
    /// driver keeps one mmap context per open file).
    pub(crate) fn open_gpu_file(&self, index: u32) -> Result<OwnedFd, KmodError> {
        open_gpu_file(&self.ctl, index)
    }
}

pub(crate) fn open_gpu_file(ctl: &CtlFile, index: u32) -> Result<OwnedFd, KmodError> {
    let path = ctl.paths.gpu(index);
    let fd = match open_node(&path) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            return Err(KmodError::NodeMissing {
                version: proc_version(&ctl.paths)
                    .map(|v| format!("version {v}"))
                    .unwrap_or_else(|_| "version unknown".into()),
                path,
                minor: index,
            });
        }
        Err(e) => return Err(open_error(path, e)),
    };
    // Since 570 the adapter comes up asynchronously after open; this escape reports how that
    // went (older drivers do not know it, and other escapes wait for the open anyway).
    let mut wait = nv_ioctl_wait_open_complete_t::default();
    match nv_escape_plain(fd.as_fd(), NV_ESC_WAIT_OPEN_COMPLETE, &mut wait) {
        Ok(()) if wait.rc != 0 || wait.adapterStatus != 0 => {
            return Err(KmodError::GpuInitFailed {
                index,
                rc: wait.rc,
                status: RmStatus(wait.adapterStatus),
            });
        }
        Ok(()) => {}
        Err(e) => log::debug!("NV_ESC_WAIT_OPEN_COMPLETE on {}: {e}", path.display()),
    }
    let mut reg = nv_ioctl_register_fd_t { ctl_fd: ctl.raw() };
    nv_escape_plain(fd.as_fd(), NV_ESC_REGISTER_FD, &mut reg).map_err(|errno| {
        KmodError::Ioctl {
            op: "NV_ESC_REGISTER_FD",
            path: path.clone(),
            errno,
        }
    })?;
    Ok(fd)
}

/// An open, registered `/dev/nvidiaN`: while it is open the GPU stays initialized and RM lets
/// this process's clients allocate devices on it.
#[derive(Debug)]
pub struct GpuNode {
    fd: OwnedFd,
    card: CardInfo,
    pub(crate) ctl: Arc<CtlFile>,
}

impl GpuNode {
    /// The card this node belongs to.
    pub fn card(&self) -> &CardInfo {
        &self.card
    }

    /// The GPU index (minor number).
    pub fn index(&self) -> u32 {
        self.card.minor
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.ctl.paths.gpu(self.card.minor)
    }

    /// Opens another registered file of this GPU (for a CPU mapping).
    pub(crate) fn open_another(&self) -> Result<OwnedFd, KmodError> {
        open_gpu_file(&self.ctl, self.card.minor)
    }
}

fn proc_version(paths: &NvidiaPaths) -> Result<DriverVersion, String> {
    // `NVBARE_PROC_ROOT` can point anywhere, so the file is read like a sysfs attribute: a
    // regular file of at most MAX_ATTR_BYTES (the real one is a few hundred bytes).
    let text = read_small_file(&paths.proc_version, MAX_ATTR_BYTES).map_err(|e| {
        let hint = match e {
            SmallFileError::Io(_) => "",
            _ => " (is NVBARE_PROC_ROOT pointing at a proc tree?)",
        };
        format!("{}: {e}{hint}", paths.proc_version.display())
    })?;
    parse_proc_version(&text)
        .ok_or_else(|| format!("{}: no version found", paths.proc_version.display()))
}

/// Asks the driver for its version (`NV_ESC_CHECK_VERSION_STR`, QUERY), falling back to
/// `/proc/driver/nvidia/version`.
fn query_version(ctl: &CtlFile) -> Result<DriverVersion, KmodError> {
    let mut q = nv_ioctl_rm_api_version_t {
        cmd: NV_RM_API_VERSION_CMD_QUERY,
        reply: 0,
        versionString: [0; NV_RM_API_VERSION_STRING_LENGTH],
    };
    let ioctl_result = nv_escape_plain(ctl.as_fd(), NV_ESC_CHECK_VERSION_STR, &mut q);
    match ioctl_result {
        Ok(()) if q.reply == NV_RM_API_VERSION_REPLY_RECOGNIZED => {
            let s = CStr::from_bytes_until_nul(&q.versionString)
                .ok()
                .and_then(|c| c.to_str().ok())
                .unwrap_or("");
            if let Some(v) = DriverVersion::parse(s) {
                return Ok(v);
            }
            log::debug!("NV_ESC_CHECK_VERSION_STR returned {s:?}");
        }
        Ok(()) => log::debug!("NV_ESC_CHECK_VERSION_STR: reply {}", q.reply),
        Err(e @ (Errno::NOTTY | Errno::BADF)) => {
            return Err(KmodError::NotNvidiaNode {
                path: ctl.paths.ctl(),
                errno: e,
            });
        }
        Err(e) => log::debug!("NV_ESC_CHECK_VERSION_STR: {e}"),
    }
    proc_version(&ctl.paths).map_err(|detail| KmodError::VersionUnknown {
        detail: format!("the version query failed and {detail}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn supported_branch_constants_agree() {
        assert_eq!(SUPPORTED_MAJOR.to_string(), SUPPORTED_BRANCH);
    }

    #[test]
    fn versions_parse() {
        let v = DriverVersion::parse("580.159.04").unwrap();
        assert_eq!((v.major, v.minor), (580, 159));
        assert_eq!(v.abi(), Some(RmAbi::R580));
        assert_eq!(
            DriverVersion::parse("580.65").unwrap().abi(),
            Some(RmAbi::R580)
        );
        for bad in ["", "580", "x.1", "580.1.2.3", "580.1.x"] {
            assert_eq!(DriverVersion::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn other_branches_are_refused_by_name() {
        for found in ["535.104.05", "570.144", "575.51.02", "610.1"] {
            let v = DriverVersion::parse(found).unwrap();
            let e = v.check_supported().unwrap_err().to_string();
            assert!(e.contains(found) && e.contains("580"), "{e}");
        }
    }

    #[test]
    fn proc_version_file() {
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  \
                    Release Build  (dvs-builder@U16-I2-C03-12-4)  Thu Oct 30 2025\n\
                    GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
        assert_eq!(parse_proc_version(open).unwrap().text, "580.159.04");
        let closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 \
                      01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(parse_proc_version(closed).unwrap().text, "535.104.05");
        assert_eq!(parse_proc_version("GCC version: 12.2.0\n"), None);
        assert_eq!(parse_proc_version(""), None);
    }

    #[test]
    fn the_proc_version_file_is_read_within_a_limit() {
        let dir = std::env::temp_dir().join(format!("nvbare-procver-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let paths = NvidiaPaths {
            dev: dir.clone(),
            proc_version: dir.join("version"),
        };
        let line = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  \
                    Release Build\n";
        fs::write(&paths.proc_version, line).unwrap();
        assert_eq!(proc_version(&paths).unwrap().text, "580.159.04");
        // A valid first line followed by more than any proc file holds: refused.
        let mut big = line.to_owned();
        big.push_str(&" ".repeat(MAX_ATTR_BYTES));
        fs::write(&paths.proc_version, big).unwrap();
        let e = proc_version(&paths).unwrap_err();
        assert!(e.contains("larger than 65536 bytes"), "{e}");
        assert!(e.contains("NVBARE_PROC_ROOT"), "{e}");
        // A link to /dev/zero is not read at all.
        fs::remove_file(&paths.proc_version).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &paths.proc_version).unwrap();
        let e = proc_version(&paths).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // Missing: the OS error, without the hint.
        fs::remove_file(&paths.proc_version).unwrap();
        let e = proc_version(&paths).unwrap_err();
        assert!(!e.contains("NVBARE_PROC_ROOT"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn card_info_decodes_valid_entries_only() {
        let mut raw = [nv_ioctl_card_info_t::default(); 3];
        raw[0].valid = 1;
        raw[0].pci_info.bus = 0;
        raw[0].pci_info.slot = 6;
        raw[0].pci_info.vendor_id = 0x10de;
        raw[0].pci_info.device_id = 0x2335;
        raw[0].gpu_id = 6;
        raw[0].minor_number = 0;
        raw[2].valid = 1;
        raw[2].minor_number = 1;
        raw[2].pci_info.device_id = 0x2684;
        let cards = decode_cards(&raw);
        assert_eq!(cards.len(), 2);
        assert_eq!(cards[0].gpu_id, 6);
        assert_eq!(cards[0].to_string(), "0000:00:06.0  10de:2335  NVIDIA H200");
        assert_eq!(cards[1].minor, 1);
    }

    #[test]
    fn paths_follow_the_environment_roots() {
        let p = NvidiaPaths {
            dev: "/x".into(),
            proc_version: "/p".into(),
        };
        assert_eq!(p.ctl(), PathBuf::from("/x/nvidiactl"));
        assert_eq!(p.gpu(3), PathBuf::from("/x/nvidia3"));
        assert_eq!(p.uvm(), PathBuf::from("/x/nvidia-uvm"));
    }
}
