//! The sysmem flush page: a page of host memory whose address the GPU's sysmembar flush reads
//! (a zero-byte read of system memory that orders the GPU's earlier writes to it).
//!
//! The open driver allocates it when the memory system is constructed, long before GSP-RM
//! boots ("it's required for the GPU to perform a system flush. One such case is resetting GPU
//! FALCONs", `kmemsysConstructEngine_IMPL`), and programs it itself
//! (`kmemsysProgramSysmemFlushBuffer_*`); GSP-RM only asserts that the register is set
//! (`kmemsysAssertSysmemFlushBufferValid_*`, "RM offloaded to ucode won't program the register
//! itself but will assert that its contents are valid", `kmemsysStatePreLoad_IMPL`). nova-core
//! registers its page before any falcon is reset (`SysmemFlush::register`) and clears the
//! register when it lets the page go, if it still holds its page.
//!
//! The register and its format differ per chip (`g_kern_mem_sys_nvoc.c` picks the HAL):
//!
//! | chips | HAL | registers (published headers) | value |
//! |---|---|---|---|
//! | TU10x | `_GM107` | `NV_PFB_NISO_FLUSH_SYSMEM_ADDR` 0x100c10 | address >> 8 (40-bit address) |
//! | GA100, GA10x, AD10x | `_GA100` | `NV_PFB_NISO_FLUSH_SYSMEM_ADDR_HI` 0x100c40, then `_ADDR` 0x100c10 (`ampere/ga100/dev_fb.h`) | address >> 8: bits 46:40 in HI (mask 0x7f), 39:8 in LO |
//! | GH100 | `_GH100` | `NV_PFB_FBHUB_PCIE_FLUSH_SYSMEM_ADDR_HI` 0x100a38, then `_LO` 0x100a34 (`hopper/gh100/dev_fb.h`) | address bits 51:32 in HI (mask 0xfffff), 31:0 in LO (256-byte aligned) |
//! | GB100, GB102 | `_GB100` | HSHUB0 (0x870000) `NV_PFB_HSHUB_PCIE_FLUSH_SYSMEM_ADDR_HI/LO` +0xe54/+0xe50 and `_EG_` +0x6c4/+0x6c0, both pairs the same (`blackwell/gb100/dev_hshub_base.h`) | as GH100 |
//! | GB20x | `_GB10B` | `NV_PFB_FBHUB0_PCIE_FLUSH_SYSMEM_ADDR_HI` 0x8a1d5c, then `_LO` 0x8a1d58 (`blackwell/gb10b/dev_fbhub.h`) | as GH100 |

use crate::chip::{Architecture, ChipInfo, Chipset};
use crate::hal::{DmaAllocator, DmaBuffer, HalError, Mmio};

/// HSHUB0's PRI base on GB100/GB102 (`NV_PFB_HSHUB0`, hard-coded in
/// `_kmemsysInitHshub0Aperture_GB100`).
const HSHUB0_BASE: usize = 0x87_0000;

/// Where a chip takes its sysmem flush address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushRegs {
    /// Turing: one register, the address >> 8.
    Gm107,
    /// Ampere and Ada: the address >> 8 in a HI/LO pair.
    Ga100,
    /// Hopper: the address in the FBHUB HI/LO pair.
    Gh100,
    /// GB100/GB102: the address in HSHUB0's two HI/LO pairs.
    Gb100,
    /// GB20x: the address in the FBHUB0 HI/LO pair.
    Gb10b,
}

impl FlushRegs {
    /// The registers of `info`'s chip.
    pub fn for_chip(info: &ChipInfo) -> FlushRegs {
        match (info.architecture, info.chipset) {
            (Architecture::Turing, _) => FlushRegs::Gm107,
            (Architecture::Ampere | Architecture::Ada, _) => FlushRegs::Ga100,
            (Architecture::Hopper, _) => FlushRegs::Gh100,
            (_, Chipset::GB100 | Chipset::GB102) => FlushRegs::Gb100,
            (Architecture::Blackwell, _) => FlushRegs::Gb10b,
        }
    }

    /// (LO, HI) BAR0 offsets of each register pair, in the order they are programmed (HI is
    /// `None` on Turing).
    pub fn pairs(self) -> &'static [(usize, Option<usize>)] {
        match self {
            FlushRegs::Gm107 => &[(0x10_0c10, None)],
            FlushRegs::Ga100 => &[(0x10_0c10, Some(0x10_0c40))],
            FlushRegs::Gh100 => &[(0x10_0a34, Some(0x10_0a38))],
            FlushRegs::Gb100 => &[
                (HSHUB0_BASE + 0xe50, Some(HSHUB0_BASE + 0xe54)),
                (HSHUB0_BASE + 0x6c0, Some(HSHUB0_BASE + 0x6c4)),
            ],
            FlushRegs::Gb10b => &[(0x8a_1d58, Some(0x8a_1d5c))],
        }
    }

    /// One past the highest address the registers hold.
    pub fn address_limit(self) -> u64 {
        match self {
            FlushRegs::Gm107 => 1 << 40,
            FlushRegs::Ga100 => 1 << 47,
            _ => 1 << 52,
        }
    }

    /// The (LO, HI) register values for `addr` (256-byte aligned, below
    /// [`Self::address_limit`]).
    pub fn encode(self, addr: u64) -> (u32, u32) {
        match self {
            FlushRegs::Gm107 | FlushRegs::Ga100 => {
                let a = addr >> 8;
                (a as u32, ((a >> 32) & 0x7f) as u32)
            }
            _ => (addr as u32, ((addr >> 32) & 0xf_ffff) as u32),
        }
    }

    /// The address (LO, HI) register values hold.
    pub fn decode(self, lo: u32, hi: u32) -> u64 {
        match self {
            FlushRegs::Gm107 => (lo as u64) << 8,
            FlushRegs::Ga100 => ((hi as u64 & 0x7f) << 40) | ((lo as u64) << 8),
            _ => ((hi as u64 & 0xf_ffff) << 32) | (lo & 0xffff_ff00) as u64,
        }
    }

    /// Programs `addr` into every register pair, HI first (as the open driver writes them);
    /// 0 clears them.
    ///
    /// # Errors
    ///
    /// [`HalError::OutOfRange`] for an address the registers cannot hold,
    /// [`HalError::Misaligned`] for one not 256-byte aligned.
    pub fn program<M: Mmio + ?Sized>(self, bar0: &M, addr: u64) -> Result<(), HalError> {
        if addr >= self.address_limit() {
            return Err(HalError::OutOfRange {
                offset: addr,
                len: 4096,
                limit: self.address_limit(),
            });
        }
        if addr & 0xff != 0 {
            return Err(HalError::Misaligned {
                offset: addr,
                align: 256,
            });
        }
        let (lo, hi) = self.encode(addr);
        for &(lo_off, hi_off) in self.pairs() {
            if let Some(h) = hi_off {
                bar0.write32(h, hi);
            }
            bar0.write32(lo_off, lo);
        }
        Ok(())
    }

    /// The address the (first) register pair holds now.
    pub fn read<M: Mmio + ?Sized>(self, bar0: &M) -> u64 {
        let (lo_off, hi_off) = self.pairs()[0];
        let hi = hi_off.map_or(0, |h| bar0.read32(h));
        self.decode(bar0.read32(lo_off), hi)
    }
}

/// The sysmem flush page of one GPU: the page and the registers that point at it.
#[derive(Debug)]
pub struct SysmemFlush<B> {
    regs: FlushRegs,
    page: B,
}

impl<B: DmaBuffer> SysmemFlush<B> {
    /// Allocates a page and points the chip's flush registers at it.
    ///
    /// # Errors
    ///
    /// The allocation failed, or its address does not fit the registers.
    pub fn register<M, D>(bar0: &M, dma: &D, info: &ChipInfo) -> Result<Self, HalError>
    where
        M: Mmio + ?Sized,
        D: DmaAllocator<Buffer = B>,
    {
        let regs = FlushRegs::for_chip(info);
        let page = dma.alloc_dma(4096)?;
        regs.program(bar0, page.dev_addr())?;
        Ok(SysmemFlush { regs, page })
    }

    /// Device address of the page.
    pub fn addr(&self) -> u64 {
        self.page.dev_addr()
    }

    /// The registers.
    pub fn regs(&self) -> FlushRegs {
        self.regs
    }

    /// Whether the registers still point at this page.
    pub fn is_registered<M: Mmio + ?Sized>(&self, bar0: &M) -> bool {
        self.regs.read(bar0) == self.addr()
    }

    /// Lets the page go: clears the registers if they still point at it (nova-core's
    /// `SysmemFlush` drop); returns whether they did. Call it only once nothing on the GPU
    /// can flush any more (GSP halted, or bus mastering off).
    pub fn unregister<M: Mmio + ?Sized>(self, bar0: &M) -> bool {
        let ours = self.is_registered(bar0);
        if ours {
            let _ = self.regs.program(bar0, 0);
        }
        ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chip_has_its_registers_and_encoding() {
        let f = |c: Chipset| FlushRegs::for_chip(c.info());
        assert_eq!(f(Chipset::TU102), FlushRegs::Gm107);
        assert_eq!(f(Chipset::GA100), FlushRegs::Ga100);
        assert_eq!(f(Chipset::AD102), FlushRegs::Ga100);
        assert_eq!(f(Chipset::GH100), FlushRegs::Gh100);
        assert_eq!(f(Chipset::GB100), FlushRegs::Gb100);
        assert_eq!(f(Chipset::GB202), FlushRegs::Gb10b);
        assert_eq!(f(Chipset::GB207), FlushRegs::Gb10b);
        let a = 0x0000_5a12_3456_7800u64;
        assert_eq!(FlushRegs::Ga100.encode(a), (0x1234_5678, 0x5a));
        assert_eq!(FlushRegs::Gh100.encode(a), (0x3456_7800, 0x5a12));
        for r in [
            FlushRegs::Gm107,
            FlushRegs::Ga100,
            FlushRegs::Gh100,
            FlushRegs::Gb100,
            FlushRegs::Gb10b,
        ] {
            let a = 0xab_cdef_1200 & (r.address_limit() - 1) & !0xff;
            let (lo, hi) = r.encode(a);
            assert_eq!(r.decode(lo, hi), a, "{r:?}");
        }
        assert_eq!(FlushRegs::Gb100.pairs()[1], (0x87_06c0, Some(0x87_06c4)));
        // Out of range and misaligned addresses are refused.
        struct Nop;
        impl Mmio for Nop {
            fn size(&self) -> usize {
                16 << 20
            }
            fn read32(&self, _o: usize) -> u32 {
                0
            }
            fn write32(&self, _o: usize, _v: u32) {}
        }
        assert!(FlushRegs::Gm107.program(&Nop, 1 << 40).is_err());
        assert!(FlushRegs::Gh100.program(&Nop, 0x1080).is_err());
        assert!(FlushRegs::Gh100.program(&Nop, 0x1000).is_ok());
    }

    #[test]
    fn register_addresses_are_the_published_headers() {
        // 570.144 src/common/inc/swref/published/...:
        // maxwell/gm107/dev_fb.h and ampere/ga100/dev_fb.h: NV_PFB_NISO_FLUSH_SYSMEM_ADDR
        // 0x00100C10; ampere/ga100/dev_fb.h: NV_PFB_NISO_FLUSH_SYSMEM_ADDR_HI 0x00100C40.
        assert_eq!(FlushRegs::Gm107.pairs(), &[(0x0010_0c10, None)]);
        assert_eq!(
            FlushRegs::Ga100.pairs(),
            &[(0x0010_0c10, Some(0x0010_0c40))]
        );
        // hopper/gh100/dev_fb.h: NV_PFB_FBHUB_PCIE_FLUSH_SYSMEM_ADDR_LO 0x00100A34, _HI
        // 0x00100A38.
        assert_eq!(
            FlushRegs::Gh100.pairs(),
            &[(0x0010_0a34, Some(0x0010_0a38))]
        );
        // blackwell/gb100/dev_hshub_base.h (relative to HSHUB0, 0x870000 in
        // _kmemsysInitHshub0Aperture_GB100): NV_PFB_HSHUB_PCIE_FLUSH_SYSMEM_ADDR_LO 0xE50, _HI
        // 0xE54; NV_PFB_HSHUB_EG_PCIE_FLUSH_SYSMEM_ADDR_LO 0x6C0, _HI 0x6C4.
        assert_eq!(
            FlushRegs::Gb100.pairs(),
            &[
                (0x0087_0e50, Some(0x0087_0e54)),
                (0x0087_06c0, Some(0x0087_06c4))
            ]
        );
        // blackwell/gb10b/dev_fbhub.h: NV_PFB_FBHUB0_PCIE_FLUSH_SYSMEM_ADDR_LO 0x008a1d58, _HI
        // 0x008a1d5c.
        assert_eq!(
            FlushRegs::Gb10b.pairs(),
            &[(0x008a_1d58, Some(0x008a_1d5c))]
        );
    }
}
