//! [`VfioConfig`]: PCI config space through the VFIO config region.

use std::sync::Arc;

use nvbare_core::hal::{HalError, PciConfig};

use super::{DeviceHandle, sys};

/// Config space through the VFIO config region.
#[derive(Debug)]
pub struct VfioConfig {
    pub(super) device: Arc<DeviceHandle>,
    pub(super) offset: u64,
    pub(super) size: u64,
}

/// Where in the device fd an access of `size` bytes at `offset` of config space goes, for a
/// config region of `region_size` bytes at `region_offset`: 1, 2 or 4 bytes, aligned to their
/// size, inside the region and its first 4 KiB (PCIe config space).
pub(super) fn config_access(
    region_offset: u64,
    region_size: u64,
    offset: u16,
    size: u8,
) -> Result<u64, HalError> {
    if !matches!(size, 1 | 2 | 4) {
        return Err(HalError::Unsupported(
            "a config access of other than 1, 2 or 4 bytes",
        ));
    }
    if !offset.is_multiple_of(size.into()) {
        return Err(HalError::Misaligned {
            offset: offset.into(),
            align: size.into(),
        });
    }
    nvbare_core::hal::check_range(offset.into(), size.into(), region_size.min(4096))?;
    region_offset
        .checked_add(offset.into())
        .ok_or(HalError::OutOfRange {
            offset: offset.into(),
            len: size.into(),
            limit: region_size.min(4096),
        })
}

impl VfioConfig {
    fn check(&self, offset: u16) -> Result<u64, HalError> {
        config_access(self.offset, self.size, offset, 4)
    }

    /// Reads `size` (1, 2 or 4) bytes at `offset`, aligned to `size`, in one access of that
    /// width (what `nvbare serve` answers CFG_READ with).
    pub fn read_sized(&self, offset: u16, size: u8) -> Result<u32, HalError> {
        let at = config_access(self.offset, self.size, offset, size)?;
        let mut b = [0u8; 4];
        let n = usize::from(size);
        match rustix::io::pread(self.device.fd(), &mut b[..n], at) {
            Ok(got) if got == n => Ok(u32::from_le_bytes(b)),
            Ok(_) => Err(HalError::DeviceLost),
            Err(e) => Err(os("reading PCI config space through VFIO", e)),
        }
    }

    /// Writes the low `size` (1, 2 or 4) bytes of `value` at `offset`, aligned to `size`, in
    /// one access of that width: the neighbouring bytes are not rewritten (a read-modify-write
    /// of the whole dword would write back status bits that clear when written as 1).
    pub fn write_sized(&self, offset: u16, size: u8, value: u32) -> Result<(), HalError> {
        let at = config_access(self.offset, self.size, offset, size)?;
        let n = usize::from(size);
        match rustix::io::pwrite(self.device.fd(), &value.to_le_bytes()[..n], at) {
            Ok(got) if got == n => Ok(()),
            Ok(_) => Err(HalError::DeviceLost),
            Err(e) => Err(os("writing PCI config space through VFIO", e)),
        }
    }
}

fn os(op: &'static str, e: rustix::io::Errno) -> HalError {
    HalError::Os {
        op,
        errno: e.raw_os_error(),
    }
}

impl PciConfig for VfioConfig {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        let at = self.check(offset)?;
        let mut b = [0u8; 4];
        match rustix::io::pread(self.device.fd(), &mut b, at) {
            Ok(4) => Ok(u32::from_le_bytes(b)),
            Ok(_) => Err(HalError::DeviceLost),
            Err(e) => Err(os("reading PCI config space through VFIO", e)),
        }
    }

    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
        let at = self.check(offset)?;
        match rustix::io::pwrite(self.device.fd(), &value.to_le_bytes(), at) {
            Ok(4) => Ok(()),
            Ok(_) => Err(HalError::DeviceLost),
            Err(e) => Err(os("writing PCI config space through VFIO", e)),
        }
    }

    fn reset_function(&self) -> Result<(), HalError> {
        sys::device_reset(self.device.fd()).map_err(|e| HalError::Os {
            op: "VFIO_DEVICE_RESET",
            errno: e.raw_os_error().unwrap_or(0),
        })
    }
}
