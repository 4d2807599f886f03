//! The few VFIO ioctls vfio-ioctls does not offer in a form we can use: device reset with its
//! error, the IOMMU's usable IOVA ranges, and the no-IOMMU group path (vfio-ioctls hard-codes
//! `/dev/vfio/<group>` and type1, see rust-vmm/vfio#152).
//!
//! Numbers and layouts are `include/uapi/linux/vfio.h`'s (`VFIO_TYPE` ';', `VFIO_BASE` 100),
//! taken from vfio-bindings.

use std::ffi::{CString, c_void};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};
use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_TYPE,
    vfio_group_status, vfio_region_info,
};

/// `VFIO_GET_API_VERSION`.
const GET_API_VERSION: u32 = VFIO_BASE;
/// `VFIO_CHECK_EXTENSION`.
const CHECK_EXTENSION: u32 = VFIO_BASE + 1;
/// `VFIO_SET_IOMMU`.
const SET_IOMMU: u32 = VFIO_BASE + 2;
/// `VFIO_GROUP_GET_STATUS`.
const GROUP_GET_STATUS: u32 = VFIO_BASE + 3;
/// `VFIO_GROUP_SET_CONTAINER`.
const GROUP_SET_CONTAINER: u32 = VFIO_BASE + 4;
/// `VFIO_GROUP_GET_DEVICE_FD`.
const GROUP_GET_DEVICE_FD: u32 = VFIO_BASE + 6;
/// `VFIO_DEVICE_GET_REGION_INFO`.
const DEVICE_GET_REGION_INFO: u32 = VFIO_BASE + 8;
/// `VFIO_DEVICE_RESET`.
const DEVICE_RESET: u32 = VFIO_BASE + 11;
/// `VFIO_IOMMU_GET_INFO`.
const IOMMU_GET_INFO: u32 = VFIO_BASE + 12;

/// `VFIO_API_VERSION`.
const API_VERSION: i32 = 0;
/// `VFIO_NOIOMMU_IOMMU`.
const NOIOMMU_IOMMU: usize = 8;
/// `VFIO_GROUP_FLAGS_VIABLE`.
const GROUP_FLAGS_VIABLE: u32 = 1;

/// A VFIO ioctl (`_IO(';', nr)`: VFIO encodes no size or direction) with a pointer or integer
/// argument, returning the syscall's integer result.
struct Raw {
    nr: u32,
    arg: *mut c_void,
}

// SAFETY: `Raw` is built only by `ioctl` below, whose callers promise that `arg` is what the
// VFIO ioctl `nr` takes (a pointer to its live struct with `argsz` set, or an integer); VFIO
// encodes no direction, and the kernel may write the struct, so the call is declared mutating.
// The output is the syscall's plain return value, read from no pointer.
unsafe impl Ioctl for Raw {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        opcode::none(VFIO_TYPE, self.nr as u8)
    }

    fn as_ptr(&mut self) -> *mut c_void {
        self.arg
    }

    // SAFETY: the pointer is not touched; the result is the integer the syscall returned, so
    // nothing the caller must uphold for `output_from_ptr` is relied on.
    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

/// Issues VFIO ioctl `nr` on `fd` with `arg`, returning the syscall's result.
///
/// # Safety
/// `arg` must be what ioctl `nr` takes: an integer, or a pointer to a live, writable struct of
/// the type the ioctl expects (with `argsz` set to its size where it has one), valid for the
/// kernel's reads and writes for the whole call. `fd` must be the kind of VFIO file
/// (container, group, device) the ioctl belongs to, or a file of no VFIO kind at all: ';' is
/// VFIO's type in the kernel's ioctl registry, so other drivers refuse it (ENOTTY).
unsafe fn ioctl(fd: BorrowedFd<'_>, nr: u32, arg: *mut c_void) -> io::Result<i32> {
    // SAFETY: `Raw`'s contract is this function's, passed on to the caller.
    Ok(unsafe { rustix::ioctl::ioctl(fd, Raw { nr, arg }) }?)
}

/// `VFIO_DEVICE_RESET`: function-level reset (or the reset the kernel picks for the device).
pub fn device_reset(device: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: VFIO_DEVICE_RESET takes no argument; the null pointer is not read.
    unsafe { ioctl(device, DEVICE_RESET, std::ptr::null_mut()) }.map(|_| ())
}

/// What `VFIO_DEVICE_GET_REGION_INFO` says about a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// Offset of the region in the device fd.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// `VFIO_DEVICE_GET_REGION_INFO` without capabilities.
pub fn region_info(device: BorrowedFd<'_>, index: u32) -> io::Result<RegionInfo> {
    let mut info = vfio_region_info {
        argsz: std::mem::size_of::<vfio_region_info>() as u32,
        index,
        ..Default::default()
    };
    // SAFETY: `info` is a live vfio_region_info with argsz = its size, which is what
    // VFIO_DEVICE_GET_REGION_INFO reads and writes (capabilities need a larger argsz).
    unsafe { ioctl(device, DEVICE_GET_REGION_INFO, (&raw mut info).cast()) }?;
    Ok(RegionInfo {
        flags: info.flags,
        offset: info.offset,
        size: info.size,
    })
}

/// The IOVA ranges the IOMMU accepts (`VFIO_IOMMU_GET_INFO`, capability
/// `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`), as inclusive `(start, end)` pairs. `None` when the
/// kernel reports no such capability.
pub fn iommu_iova_ranges(container: BorrowedFd<'_>) -> io::Result<Option<Vec<(u64, u64)>>> {
    #[repr(C, align(8))]
    struct Buf([u8; 4096]);
    let mut buf = Buf([0; 4096]);
    buf.0[..4].copy_from_slice(&4096u32.to_ne_bytes());
    // SAFETY: `buf` is a live, 8-byte aligned 4096-byte buffer whose first field (argsz) says
    // 4096; VFIO_IOMMU_GET_INFO writes vfio_iommu_type1_info and its capabilities within argsz.
    unsafe { ioctl(container, IOMMU_GET_INFO, (&raw mut buf).cast()) }?;
    Ok(parse_iova_ranges(&buf.0))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    let lo = u64::from(u32_at(b, off)?);
    let hi = u64::from(u32_at(b, off + 4)?);
    Some(if cfg!(target_endian = "little") {
        lo | hi << 32
    } else {
        hi | lo << 32
    })
}

/// Walks the capability chain of a `vfio_iommu_type1_info` buffer (kernel-provided, but
/// bounds-checked all the same).
pub fn parse_iova_ranges(b: &[u8]) -> Option<Vec<(u64, u64)>> {
    let flags = u32_at(b, 4)?;
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return None;
    }
    // vfio_iommu_type1_info: argsz, flags, iova_pgsizes (u64), cap_offset, pad.
    let mut off = u32_at(b, 16)? as usize;
    for _ in 0..32 {
        if off == 0 {
            return None;
        }
        // vfio_info_cap_header: id u16, version u16, next u32.
        let idver = u32_at(b, off)?;
        let next = u32_at(b, off + 4)? as usize;
        if idver & 0xffff == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            let n = u32_at(b, off + 8)? as usize;
            let mut out = Vec::new();
            for i in 0..n.min(256) {
                let e = off + 16 + i * 16;
                out.push((u64_at(b, e)?, u64_at(b, e + 8)?));
            }
            return Some(out);
        }
        if next <= off {
            return None;
        }
        off = next;
    }
    None
}

/// A device opened in VFIO's no-IOMMU mode: container, group and device fds (dropped device
/// first).
#[derive(Debug)]
pub struct NoIommuDevice {
    /// The device.
    pub device: OwnedFd,
    /// `/dev/vfio/noiommu-N`.
    pub group: File,
    /// `/dev/vfio/vfio`.
    pub container: File,
}

fn rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

/// Opens `bdf` through `/dev/vfio/noiommu-<group>` with the `VFIO_NOIOMMU_IOMMU` backend.
pub fn open_noiommu(dev_dir: &Path, group: u32, bdf: &str) -> Result<NoIommuDevice, NoIommuError> {
    let container_path = dev_dir.join("vfio");
    let container = rw(&container_path).map_err(|e| NoIommuError::Open(container_path, e))?;
    // SAFETY: VFIO_GET_API_VERSION takes no argument; the null pointer is not read.
    let version = unsafe { ioctl(container.as_fd(), GET_API_VERSION, std::ptr::null_mut()) }
        .map_err(|e| NoIommuError::Ioctl("VFIO_GET_API_VERSION", e))?;
    if version != API_VERSION {
        return Err(NoIommuError::Unsupported("VFIO API version"));
    }
    // SAFETY: VFIO_CHECK_EXTENSION takes the extension number as an integer, not a pointer.
    let ext = unsafe {
        ioctl(
            container.as_fd(),
            CHECK_EXTENSION,
            NOIOMMU_IOMMU as *mut c_void,
        )
    }
    .map_err(|e| NoIommuError::Ioctl("VFIO_CHECK_EXTENSION", e))?;
    if ext != 1 {
        return Err(NoIommuError::Unsupported(
            "VFIO no-IOMMU mode (load vfio with enable_unsafe_noiommu_mode=1)",
        ));
    }
    let group_path = dev_dir.join(format!("noiommu-{group}"));
    let group_file = rw(&group_path).map_err(|e| NoIommuError::Open(group_path, e))?;
    let mut status = vfio_group_status {
        argsz: std::mem::size_of::<vfio_group_status>() as u32,
        flags: 0,
    };
    // SAFETY: `status` is a live vfio_group_status with argsz = its size, which
    // VFIO_GROUP_GET_STATUS fills in.
    unsafe {
        ioctl(
            group_file.as_fd(),
            GROUP_GET_STATUS,
            (&raw mut status).cast(),
        )
    }
    .map_err(|e| NoIommuError::Ioctl("VFIO_GROUP_GET_STATUS", e))?;
    if status.flags & GROUP_FLAGS_VIABLE == 0 {
        return Err(NoIommuError::NotViable);
    }
    let mut cfd: i32 = std::os::fd::AsRawFd::as_raw_fd(&container);
    // SAFETY: VFIO_GROUP_SET_CONTAINER reads an int (the container fd) through the pointer;
    // `cfd` is a live i32 holding the fd of `container`, which outlives the call.
    unsafe {
        ioctl(
            group_file.as_fd(),
            GROUP_SET_CONTAINER,
            (&raw mut cfd).cast(),
        )
    }
    .map_err(|e| NoIommuError::Ioctl("VFIO_GROUP_SET_CONTAINER", e))?;
    // SAFETY: VFIO_SET_IOMMU takes the IOMMU type as an integer, not a pointer.
    unsafe { ioctl(container.as_fd(), SET_IOMMU, NOIOMMU_IOMMU as *mut c_void) }
        .map_err(|e| NoIommuError::Ioctl("VFIO_SET_IOMMU(NOIOMMU)", e))?;
    let name = CString::new(bdf).map_err(|_| NoIommuError::Unsupported("device name"))?;
    // SAFETY: VFIO_GROUP_GET_DEVICE_FD only reads a NUL-terminated device name through the
    // pointer; `name` is a live CString, so the const-to-mut cast is never written through.
    let fd = unsafe {
        ioctl(
            group_file.as_fd(),
            GROUP_GET_DEVICE_FD,
            name.as_ptr().cast_mut().cast(),
        )
    }
    .map_err(|e| NoIommuError::Ioctl("VFIO_GROUP_GET_DEVICE_FD", e))?;
    // SAFETY: VFIO_GROUP_GET_DEVICE_FD returned a new file descriptor that nothing else owns.
    let device = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(NoIommuDevice {
        device,
        group: group_file,
        container,
    })
}

/// Why the no-IOMMU open failed.
#[derive(Debug, thiserror::Error)]
pub enum NoIommuError {
    /// A node could not be opened.
    #[error("cannot open {path}: {err}", path = .0.display(), err = .1)]
    Open(std::path::PathBuf, #[source] io::Error),
    /// An ioctl failed.
    #[error("{0} failed: {1}")]
    Ioctl(&'static str, #[source] io::Error),
    /// The kernel lacks something.
    #[error("the kernel does not support {0}")]
    Unsupported(&'static str),
    /// The group is not viable.
    #[error("the no-IOMMU group is not viable: bind every device in it to vfio-pci")]
    NotViable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_iova_range_capability() {
        let mut b = vec![0u8; 128];
        let put32 =
            |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
        let put64 =
            |b: &mut Vec<u8>, o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
        put32(&mut b, 0, 128);
        put32(&mut b, 4, VFIO_IOMMU_INFO_CAPS | 1);
        put32(&mut b, 16, 24);
        // A foreign capability at 24 pointing at the IOVA one at 40.
        put32(&mut b, 24, 2 | (1 << 16));
        put32(&mut b, 28, 40);
        put32(&mut b, 40, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE | (1 << 16));
        put32(&mut b, 44, 0);
        put32(&mut b, 48, 2);
        put64(&mut b, 56, 0);
        put64(&mut b, 64, 0xfedf_ffff);
        put64(&mut b, 72, 0xfef0_0000);
        put64(&mut b, 80, (1 << 48) - 1);
        assert_eq!(
            parse_iova_ranges(&b),
            Some(vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 48) - 1)])
        );
        // Truncated, looping or capability-less buffers give None, never a panic.
        assert_eq!(parse_iova_ranges(&b[..60]), None);
        put32(&mut b, 28, 24);
        put32(&mut b, 40, 7);
        assert_eq!(parse_iova_ranges(&b), None);
        put32(&mut b, 4, 1);
        assert_eq!(parse_iova_ranges(&b), None);
        assert_eq!(parse_iova_ranges(&[]), None);
    }

    #[test]
    fn noiommu_open_without_vfio_says_which_node() {
        let e = open_noiommu(Path::new("/nonexistent/vfio-dev"), 3, "0000:01:00.0").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/vfio-dev/vfio"), "{e}");
    }
}
