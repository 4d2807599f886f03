//! Another GPU's memory, for a driver that builds its own page tables (the bare-metal path).
//!
//! Two hardware paths lead from one GPU to another's video memory:
//!
//! * **PEER aperture** (NVLink, or PCIe P2P set up as a peer link): the PTE's aperture is
//!   `PEER_MEMORY` with a 3-bit peer id and the address is the peer's VRAM address
//!   ([`PteAttrs::peer`]). The peer id must be programmed on both GPUs (RM's
//!   `kbusCreateP2PMapping`); that is the link setup, outside the page tables.
//! * **BAR1 P2P** (PCIe): the peer's BAR1 exposes (part of) its VRAM at a bus address, and this
//!   GPU maps that bus address as non-coherent system memory ([`PteAttrs::peer_bar1`]), which
//!   is what RM does on Hopper (`dmaAllocBar1P2PMapping_GH100`: "a normal SYSMEM mapping from
//!   source GPU VA to the target GPU BAR1 region", uncached, no snoop) and what tinygrad's PCI
//!   path does (`BAR1 base + paddr`, refused for small-BAR devices). With an IOMMU the bus
//!   address is the IOVA the peer's BAR was mapped at in this GPU's IOMMU domain (VFIO: the
//!   peer's BAR mmap registered with `VFIO_IOMMU_MAP_DMA` in this GPU's container); GPUs in
//!   different IOMMU domains without such a mapping cannot reach each other.
//!
//! [`PeerBar1Window`] turns a peer VRAM address into the bus address to put in the PTE and
//! refuses what the window does not cover.

use super::MmError;
use super::PteAttrs;

/// The part of a peer GPU's VRAM its BAR1 exposes, and where that BAR1 is on the bus (as this
/// GPU reaches it). nvbare's bare-metal BAR1 maps VRAM linearly from `vram_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerBar1Window {
    bus_base: u64,
    size: u64,
    vram_base: u64,
}

impl PeerBar1Window {
    /// A window of `size` bytes at bus address `bus_base` showing peer VRAM from `vram_base`.
    /// All three must be 4 KiB aligned and the ranges must not wrap.
    pub fn new(bus_base: u64, size: u64, vram_base: u64) -> Result<Self, MmError> {
        for (what, value) in [
            ("BAR1 bus address", bus_base),
            ("BAR1 size", size),
            ("BAR1 VRAM base", vram_base),
        ] {
            if !value.is_multiple_of(super::PAGE_4K) {
                return Err(MmError::Misaligned {
                    what,
                    value,
                    align: super::PAGE_4K,
                });
            }
        }
        if size == 0 {
            return Err(MmError::ZeroSize);
        }
        if bus_base.checked_add(size).is_none() || vram_base.checked_add(size).is_none() {
            return Err(MmError::BadAttribute {
                what: "BAR1 window end",
                value: size,
            });
        }
        Ok(PeerBar1Window {
            bus_base,
            size,
            vram_base,
        })
    }

    /// Bus address of the window's first byte.
    pub fn bus_base(&self) -> u64 {
        self.bus_base
    }

    /// Bytes the window covers.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Peer VRAM address the window starts at.
    pub fn vram_base(&self) -> u64 {
        self.vram_base
    }

    /// The bus address of `len` bytes of peer VRAM at `addr` (for a [`PteAttrs::peer_bar1`]
    /// mapping), or [`MmError::OutsidePeerWindow`] when the window does not cover all of them.
    pub fn bus_address(&self, addr: u64, len: u64) -> Result<u64, MmError> {
        let outside = MmError::OutsidePeerWindow {
            addr,
            len,
            window_base: self.vram_base,
            window_size: self.size,
        };
        let off = addr.checked_sub(self.vram_base).ok_or(outside)?;
        let end = off.checked_add(len).ok_or(outside)?;
        if len == 0 || end > self.size {
            return Err(outside);
        }
        Ok(self.bus_base + off)
    }

    /// The PTE attributes for memory reached through this window.
    pub const fn attrs(&self) -> PteAttrs {
        PteAttrs::peer_bar1()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chip::MmuVersion;
    use crate::mm::PteAperture;
    use crate::mm::entry::{decode_pte, encode_pte};

    #[test]
    fn bus_addresses_inside_the_window_only() {
        let w = PeerBar1Window::new(0x38_0000_0000, 256 << 20, 0x10_0000).unwrap();
        assert_eq!(w.bus_address(0x10_0000, 4096), Ok(0x38_0000_0000));
        assert_eq!(
            w.bus_address(0x10_0000 + (256 << 20) - 4096, 4096),
            Ok(0x38_0000_0000 + (256 << 20) - 4096)
        );
        for (a, l) in [
            (0xf_f000, 4096),                       // below the window
            (0x10_0000 + (256 << 20) - 4096, 8192), // runs off the end
            (0x10_0000 + (256 << 20), 1),           // past the end
            (0x10_0000, 0),                         // nothing
            (u64::MAX - 10, 100),                   // wraps
        ] {
            assert!(
                matches!(w.bus_address(a, l), Err(MmError::OutsidePeerWindow { .. })),
                "{a:#x}+{l:#x}"
            );
        }
        assert!(PeerBar1Window::new(0x1001, 4096, 0).is_err());
        assert!(PeerBar1Window::new(0, 0, 0).is_err());
        assert!(PeerBar1Window::new(u64::MAX - 4095, 8192, 0).is_err());
    }

    proptest::proptest! {
        /// Against a model: a range gets a bus address iff it lies inside the window, and then
        /// the address is the window's plus the offset.
        #[test]
        fn bus_address_matches_a_model(
            pages in 1u64..1 << 20,
            vram_base_pages in 0u64..1 << 24,
            off in 0u64..1 << 33,
            below in proptest::bool::ANY,
            len in 0u64..1 << 32,
        ) {
            let (bus, size, vb) = (0x30_0000_0000u64, pages << 12, vram_base_pages << 12);
            // Mostly near the window, sometimes below it.
            let addr = if below { vb.wrapping_sub(off + 1) } else { vb + off };
            let w = PeerBar1Window::new(bus, size, vb).unwrap();
            let inside = len > 0
                && addr >= vb
                && (addr as u128 + len as u128) <= vb as u128 + size as u128;
            match w.bus_address(addr, len) {
                Ok(b) => {
                    proptest::prop_assert!(inside);
                    proptest::prop_assert_eq!(b, bus + (addr - vb));
                }
                Err(e) => {
                    proptest::prop_assert!(!inside);
                    let is_outside = matches!(e, MmError::OutsidePeerWindow { .. });
                    proptest::prop_assert!(is_outside);
                }
            }
        }
    }

    #[test]
    fn peer_attributes_encode_as_the_headers_say() {
        // BAR1 P2P: v3 APERTURE 2:1 = SYSTEM_NON_COHERENT (3), PCF 7:3 = UNCACHED (bit 0) |
        // NO_ATOMIC (bit 3) | ACD (bit 4); v2 APERTURE 3, VOL (3:3) set, ATOMIC_DISABLE (7:7)
        // set.
        let a = PteAttrs::peer_bar1();
        let v3 = encode_pte(MmuVersion::V3, 0x38_0000_1000, &a).unwrap();
        assert_eq!((v3 >> 1) & 3, 3);
        assert_eq!((v3 >> 3) & 0x1f, 0b11001);
        assert_eq!(v3 >> 12 & ((1 << 40) - 1), 0x38_0000_1000 >> 12);
        let v2 = encode_pte(MmuVersion::V2, 0x38_0000_1000, &a).unwrap();
        assert_eq!((v2 >> 1) & 3, 3);
        assert_eq!((v2 >> 3) & 1, 1);
        assert_eq!((v2 >> 7) & 1, 1);
        // PEER: APERTURE 1, v3 PEER_ID 63:61, v2 ADDRESS_VID_PEER 35:33.
        let p = PteAttrs::peer(5);
        let v3 = encode_pte(MmuVersion::V3, 0x4000_0000, &p).unwrap();
        assert_eq!((v3 >> 1) & 3, 1);
        assert_eq!(v3 >> 61, 5);
        let d = decode_pte(MmuVersion::V3, v3).unwrap();
        assert_eq!(d.attrs.aperture, PteAperture::Peer(5));
        assert!(!d.attrs.cached);
        let v2 = encode_pte(MmuVersion::V2, 0x4000_0000, &p).unwrap();
        assert_eq!((v2 >> 33) & 7, 5);
        assert!(encode_pte(MmuVersion::V3, 0, &PteAttrs::peer(8)).is_err());
    }
}
