//! PCI configuration space: register offsets, capability walking and the Resizable BAR
//! capability, over any [`PciConfig`] (sysfs `config` file, VFIO config region, simulator).
//!
//! Offsets and bit layouts are the PCI Local Bus / PCIe base specification's, with the names
//! Linux uses in `include/uapi/linux/pci_regs.h` so they can be grepped.

use nvbare_core::hal::{HalError, PciConfig};

/// `PCI_COMMAND`: the command register (16 bits).
pub const PCI_COMMAND: u16 = 0x04;
/// `PCI_COMMAND_MEMORY`: the function decodes its memory BARs.
pub const PCI_COMMAND_MEMORY: u16 = 0x2;
/// `PCI_COMMAND_MASTER`: the function may master the bus (DMA).
pub const PCI_COMMAND_MASTER: u16 = 0x4;
/// `PCI_STATUS`: the status register (16 bits).
pub const PCI_STATUS: u16 = 0x06;
/// `PCI_STATUS_CAP_LIST`: the capability list at `PCI_CAPABILITY_LIST` is valid.
pub const PCI_STATUS_CAP_LIST: u16 = 0x10;
/// `PCI_CAPABILITY_LIST`: offset of the first standard capability (8 bits).
pub const PCI_CAPABILITY_LIST: u16 = 0x34;
/// `PCI_CFG_SPACE_SIZE`: the conventional configuration space.
pub const PCI_CFG_SPACE_SIZE: u16 = 256;
/// `PCI_CFG_SPACE_EXP_SIZE`: PCIe extended configuration space.
pub const PCI_CFG_SPACE_EXP_SIZE: u16 = 4096;

/// `PCI_CAP_ID_PM`: power management.
pub const PCI_CAP_ID_PM: u8 = 0x01;
/// `PCI_CAP_ID_MSI`: message signalled interrupts.
pub const PCI_CAP_ID_MSI: u8 = 0x05;
/// `PCI_CAP_ID_EXP`: PCI Express.
pub const PCI_CAP_ID_EXP: u8 = 0x10;
/// `PCI_CAP_ID_MSIX`: MSI-X.
pub const PCI_CAP_ID_MSIX: u8 = 0x11;

/// `PCI_EXT_CAP_ID_ERR`: advanced error reporting.
pub const PCI_EXT_CAP_ID_ERR: u16 = 0x01;
/// `PCI_EXT_CAP_ID_VC`: virtual channel.
pub const PCI_EXT_CAP_ID_VC: u16 = 0x02;
/// `PCI_EXT_CAP_ID_ACS`: access control services (what isolates IOMMU groups).
pub const PCI_EXT_CAP_ID_ACS: u16 = 0x0d;
/// `PCI_EXT_CAP_ID_REBAR`: resizable BAR.
pub const PCI_EXT_CAP_ID_REBAR: u16 = 0x15;

/// `PCI_REBAR_CAP`: per-BAR capability register (supported sizes in bits 31:4).
pub const PCI_REBAR_CAP: u16 = 4;
/// `PCI_REBAR_CTRL`: per-BAR control register.
pub const PCI_REBAR_CTRL: u16 = 8;
/// `PCI_REBAR_CTRL_BAR_IDX`: which BAR this entry controls.
pub const PCI_REBAR_CTRL_BAR_IDX: u32 = 0x7;
/// `PCI_REBAR_CTRL_NBAR_MASK`: number of resizable BARs (first entry only).
pub const PCI_REBAR_CTRL_NBAR_MASK: u32 = 0xe0;
/// `PCI_REBAR_CTRL_BAR_SIZE`: the current size, encoded as log2(size / 1 MiB).
pub const PCI_REBAR_CTRL_BAR_SIZE: u32 = 0x3f00;

/// A capability found in configuration space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// Capability id (8 bits for standard, 16 bits for extended capabilities).
    pub id: u16,
    /// Offset of its header.
    pub offset: u16,
    /// Whether it is a PCIe extended capability (offset >= 0x100).
    pub extended: bool,
}

/// Reads one byte of configuration space.
pub fn read_config8<P: PciConfig + ?Sized>(pci: &P, offset: u16) -> Result<u8, HalError> {
    let dword = pci.read_config32(offset & !3)?;
    Ok((dword >> ((offset & 3) * 8)) as u8)
}

/// Writes the 16-bit command register without touching the status register beside it
/// (its error bits are write-one-to-clear).
pub fn write_command<P: PciConfig + ?Sized>(pci: &P, command: u16) -> Result<(), HalError> {
    pci.write_config32(PCI_COMMAND, u32::from(command))
}

/// Sets or clears bits of the command register.
pub fn update_command<P: PciConfig + ?Sized>(
    pci: &P,
    set: u16,
    clear: u16,
) -> Result<u16, HalError> {
    let cmd = pci.read_config16(PCI_COMMAND)?;
    let new = (cmd | set) & !clear;
    if new != cmd {
        write_command(pci, new)?;
    }
    Ok(new)
}

/// Every capability of the function: the standard list, then the extended list.
///
/// Both lists come from the device, so they are treated as hostile: pointers outside config
/// space, misaligned pointers and loops end the walk instead of hanging or panicking. A
/// function whose config space is cut short (a non-root reader of sysfs sees 64 bytes, a
/// conventional PCI function has no extended space) yields what could be read.
pub fn capabilities<P: PciConfig + ?Sized>(pci: &P) -> Result<Vec<Capability>, HalError> {
    let mut caps = Vec::new();
    let status = pci.read_config16(PCI_STATUS)?;
    if status != 0xffff && status & PCI_STATUS_CAP_LIST != 0 {
        let mut ptr = u16::from(read_config8(pci, PCI_CAPABILITY_LIST)?) & !3;
        // 48 capabilities of 4 bytes fill the 192 bytes after the header: more means a loop.
        for _ in 0..48 {
            if !(0x40..PCI_CFG_SPACE_SIZE).contains(&ptr) {
                break;
            }
            let Ok(header) = pci.read_config16(ptr) else {
                break;
            };
            let id = header & 0xff;
            if id == 0xff {
                break;
            }
            caps.push(Capability {
                id,
                offset: ptr,
                extended: false,
            });
            ptr = (header >> 8) & !3;
        }
    }
    let mut ptr = PCI_CFG_SPACE_SIZE;
    // (4096 - 256) / 8: the most extended capabilities that fit.
    for _ in 0..480 {
        let Ok(header) = pci.read_config32(ptr) else {
            break;
        };
        if header == 0 || header == 0xffff_ffff {
            break;
        }
        caps.push(Capability {
            id: (header & 0xffff) as u16,
            offset: ptr,
            extended: true,
        });
        let next = ((header >> 20) as u16) & !3;
        if next < PCI_CFG_SPACE_SIZE || next <= ptr {
            break;
        }
        ptr = next;
    }
    Ok(caps)
}

/// The first standard capability with this id.
pub fn find_capability<P: PciConfig + ?Sized>(pci: &P, id: u8) -> Result<Option<u16>, HalError> {
    Ok(capabilities(pci)?
        .into_iter()
        .find(|c| !c.extended && c.id == u16::from(id))
        .map(|c| c.offset))
}

/// The first extended capability with this id.
pub fn find_ext_capability<P: PciConfig + ?Sized>(
    pci: &P,
    id: u16,
) -> Result<Option<u16>, HalError> {
    Ok(capabilities(pci)?
        .into_iter()
        .find(|c| c.extended && c.id == id)
        .map(|c| c.offset))
}

/// One BAR's entry in the Resizable BAR capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebarEntry {
    /// The BAR it controls.
    pub bar: u8,
    /// Supported sizes: bit n set means 2^n MiB is supported (the encoding of sysfs
    /// `resourceN_resize`).
    pub sizes: u64,
    /// The size programmed now, as log2(size / 1 MiB).
    pub current: u8,
}

impl RebarEntry {
    /// The largest supported size in bytes.
    pub fn largest(&self) -> Option<u64> {
        largest_size(self.sizes)
    }

    /// The size programmed now, in bytes.
    pub fn current_bytes(&self) -> u64 {
        rebar_size_bytes(self.current)
    }
}

/// The size in bytes for a ReBAR size index (log2 of MiB).
pub fn rebar_size_bytes(index: u8) -> u64 {
    1u64.checked_shl(u32::from(index) + 20).unwrap_or(u64::MAX)
}

/// The largest size in bytes in a `resourceN_resize` style bitmask.
pub fn largest_size(sizes: u64) -> Option<u64> {
    (sizes != 0).then(|| rebar_size_bytes(63 - sizes.leading_zeros() as u8))
}

/// The supported sizes of a bitmask as size indices, largest first.
pub fn size_indices_desc(sizes: u64) -> Vec<u8> {
    (0..64u8).rev().filter(|i| sizes >> i & 1 == 1).collect()
}

/// Decodes the Resizable BAR capability (`PCI_EXT_CAP_ID_REBAR`), or `None` if absent.
pub fn rebar_entries<P: PciConfig + ?Sized>(pci: &P) -> Result<Option<Vec<RebarEntry>>, HalError> {
    let Some(cap) = find_ext_capability(pci, PCI_EXT_CAP_ID_REBAR)? else {
        return Ok(None);
    };
    let first_ctrl = pci.read_config32(cap + PCI_REBAR_CTRL)?;
    let nbars = ((first_ctrl & PCI_REBAR_CTRL_NBAR_MASK) >> 5).clamp(1, 6) as u16;
    let mut out = Vec::new();
    for i in 0..nbars {
        let base = cap + i * 8;
        if base + PCI_REBAR_CTRL + 4 > PCI_CFG_SPACE_EXP_SIZE {
            break;
        }
        let capr = pci.read_config32(base + PCI_REBAR_CAP)?;
        let ctrl = pci.read_config32(base + PCI_REBAR_CTRL)?;
        // Bits 31:4 of the capability: 1 MiB .. 128 TiB; bits 31:16 of control (PCIe 6): larger.
        let sizes = u64::from(capr >> 4) | (u64::from(ctrl >> 16) << 28);
        out.push(RebarEntry {
            bar: (ctrl & PCI_REBAR_CTRL_BAR_IDX) as u8,
            sizes,
            current: ((ctrl & PCI_REBAR_CTRL_BAR_SIZE) >> 8) as u8,
        });
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Config space as plain bytes.
    struct Cfg(RefCell<Vec<u8>>);
    impl Cfg {
        fn new(len: usize) -> Self {
            Cfg(RefCell::new(vec![0; len]))
        }
        fn put32(&self, off: usize, v: u32) {
            self.0.borrow_mut()[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        fn put16(&self, off: usize, v: u16) {
            self.0.borrow_mut()[off..off + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    impl PciConfig for Cfg {
        fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
            let o = offset as usize;
            let b = self.0.borrow();
            let s = b.get(o..o + 4).ok_or(HalError::OutOfRange {
                offset: o as u64,
                len: 4,
                limit: b.len() as u64,
            })?;
            Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        }
        fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
            self.put32(offset as usize, value);
            Ok(())
        }
    }

    #[test]
    fn walks_standard_and_extended_lists() {
        let c = Cfg::new(4096);
        c.put16(6, PCI_STATUS_CAP_LIST);
        c.put16(0x34, 0x60);
        c.put16(0x60, 0x6801); // PM -> 0x68
        c.put16(0x68, 0x7805); // MSI -> 0x78
        c.put16(0x78, 0x0010); // PCIe, end
        c.put32(0x100, 0x1_0002 | (0x250 << 20)); // VC -> 0x250
        c.put32(0x250, 0x1_0015); // ReBAR, end
        let caps = capabilities(&c).unwrap();
        let ids: Vec<(u16, u16, bool)> =
            caps.iter().map(|c| (c.id, c.offset, c.extended)).collect();
        assert_eq!(
            ids,
            [
                (1, 0x60, false),
                (5, 0x68, false),
                (0x10, 0x78, false),
                (2, 0x100, true),
                (0x15, 0x250, true)
            ]
        );
        assert_eq!(find_capability(&c, PCI_CAP_ID_EXP).unwrap(), Some(0x78));
        assert_eq!(find_capability(&c, PCI_CAP_ID_MSIX).unwrap(), None);
        assert_eq!(
            find_ext_capability(&c, PCI_EXT_CAP_ID_REBAR).unwrap(),
            Some(0x250)
        );
    }

    #[test]
    fn hostile_lists_end_without_hanging() {
        let c = Cfg::new(4096);
        c.put16(6, PCI_STATUS_CAP_LIST);
        c.put16(0x34, 0x40);
        c.put16(0x40, 0x4001); // points at itself
        c.put32(0x100, 0x1_0001 | (0x100 << 20)); // points at itself
        let caps = capabilities(&c).unwrap();
        assert!(caps.len() <= 48 + 1, "{caps:?}");
        assert_eq!(caps.iter().filter(|c| c.extended).count(), 1);

        // Only 64 bytes readable (non-root sysfs reader): no capabilities, no error.
        let short = Cfg::new(64);
        short.put16(6, PCI_STATUS_CAP_LIST);
        short.put16(0x34, 0x60);
        assert_eq!(capabilities(&short).unwrap(), []);

        // A dead device reads all ones.
        let dead = Cfg(RefCell::new(vec![0xff; 4096]));
        assert_eq!(capabilities(&dead).unwrap(), []);
    }

    #[test]
    fn decodes_rebar() {
        let c = Cfg::new(4096);
        c.put32(0x100, 0x1_0015);
        // BAR1 supports 64 MiB .. 32 GiB (bits 6..15), now 256 MiB (index 8), 2 resizable BARs.
        let sizes: u32 = (6..=15).map(|b| 1u32 << b).sum();
        c.put32(0x104, sizes << 4);
        c.put32(0x108, 1 | (2 << 5) | (8 << 8));
        // BAR3: 32 MiB only, plus a PCIe 6 size bit in the control register (256 TiB).
        c.put32(0x10c, (1 << 5) << 4);
        c.put32(0x110, 3 | (5 << 8) | (1 << 16));
        let e = rebar_entries(&c).unwrap().unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].bar, 1);
        assert_eq!(e[0].sizes, u64::from(sizes));
        assert_eq!(e[0].current_bytes(), 256 << 20);
        assert_eq!(e[0].largest(), Some(32 << 30));
        assert_eq!(e[1].bar, 3);
        assert_eq!(e[1].sizes, (1 << 5) | (1 << 28));
        assert_eq!(e[1].largest(), Some(1 << 48));
        assert_eq!(size_indices_desc(0b1010_0000), [7, 5]);
        assert_eq!(largest_size(0), None);
        assert_eq!(rebar_entries(&Cfg::new(4096)).unwrap(), None);
    }
}
