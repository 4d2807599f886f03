//! Hostile PCI config space (capability lists, the ReBAR capability) and hostile
//! `VFIO_IOMMU_GET_INFO` buffers: parsing must end, without panicking, on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::hal::{HalError, PciConfig, check_range};
use nvbare_pci_host::config;
use nvbare_pci_host::vfio::sys::parse_iova_ranges;

struct Bytes<'a>(&'a [u8]);

impl PciConfig for Bytes<'_> {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        check_range(offset.into(), 4, self.0.len() as u64)?;
        let o = usize::from(offset);
        let s = self.0.get(o..o + 4).ok_or(HalError::DeviceLost)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn write_config32(&self, _: u16, _: u32) -> Result<(), HalError> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = Bytes(&data[..data.len().min(4096)]);
    if let Ok(caps) = config::capabilities(&cfg) {
        assert!(caps.len() <= 48 + 480);
    }
    let _ = config::rebar_entries(&cfg);
    let _ = parse_iova_ranges(data);
});
