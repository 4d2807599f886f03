//! PCI configuration space of the simulated function.

/// A 4 KiB configuration space with a standard type-0 header.
#[derive(Debug, Clone)]
pub struct ConfigSpace {
    bytes: Box<[u8; 4096]>,
    /// Number of function-level resets performed.
    pub resets: u32,
}

impl ConfigSpace {
    /// A header for `vendor:device` with `class` and subsystem ids.
    pub fn new(vendor: u16, device: u16, class: u32, subsys: (u16, u16), revision: u8) -> Self {
        let mut c = ConfigSpace {
            bytes: Box::new([0; 4096]),
            resets: 0,
        };
        c.put16(0x00, vendor);
        c.put16(0x02, device);
        c.bytes[0x08] = revision;
        c.bytes[0x09] = class as u8;
        c.bytes[0x0a] = (class >> 8) as u8;
        c.bytes[0x0b] = (class >> 16) as u8;
        c.put16(0x2c, subsys.0);
        c.put16(0x2e, subsys.1);
        c
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    /// Reads a dword; `None` if misaligned or beyond 4 KiB.
    pub fn read32(&self, offset: u16) -> Option<u32> {
        let o = offset as usize;
        if !o.is_multiple_of(4) || o + 4 > self.bytes.len() {
            return None;
        }
        Some(u32::from_le_bytes(self.bytes[o..o + 4].try_into().ok()?))
    }

    /// Writes a dword; only the command register (0x04) and the BAR/capability area are
    /// writable; `false` if misaligned or out of range.
    pub fn write32(&mut self, offset: u16, value: u32) -> bool {
        let o = offset as usize;
        if !o.is_multiple_of(4) || o + 4 > self.bytes.len() {
            return false;
        }
        match o {
            // Identity fields are read-only.
            0x00 | 0x08 | 0x2c => {}
            // Command is writable; status bits are write-one-to-clear (no status modelled).
            0x04 => self.bytes[4..6].copy_from_slice(&(value as u16).to_le_bytes()),
            _ => self.bytes[o..o + 4].copy_from_slice(&value.to_le_bytes()),
        }
        true
    }

    /// Whether bus mastering is enabled.
    pub fn bus_master(&self) -> bool {
        self.bytes[4] & 0x4 != 0
    }
}
