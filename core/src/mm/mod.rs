//! GPU virtual memory for the bare-metal path.
//!
//! On the bare-metal path nobody else builds the GPU's page tables: we do. This module has
//! everything needed for that, without a heap:
//!
//! * [`format`]: the page-table formats (GMMU version 2 for Turing to Ada, version 3 for Hopper
//!   on), their levels and page sizes, chosen from [`crate::chip::ChipInfo`].
//! * [`entry`]: the entries as `bitfield-struct` types named after `dev_mmu.h`
//!   ([`entry::NV_MMU_VER2_PTE`], [`entry::NV_MMU_VER3_DUAL_PDE`], ...) and format-independent
//!   encode/decode.
//! * [`table_mem`]: where page tables live: VRAM through a BAR1 [`crate::hal::Mmio`] window
//!   ([`table_mem::Bar1Tables`]) or host memory through a [`crate::hal::DmaBuffer`]
//!   ([`table_mem::DmaTables`]), behind the [`table_mem::PageTableMemory`] trait.
//! * [`mapper`]: the page-table tree: map and unmap ranges with the largest page size alignment
//!   allows, table allocation and release, and TLB invalidation after every change.
//! * [`tlb`]: TLB invalidation through `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE`.
//! * [`peer`]: another GPU's memory: its BAR1 window as a PCIe peer reaches it
//!   ([`peer::PeerBar1Window`]), with [`PteAttrs::peer`] / [`PteAttrs::peer_bar1`] entries.
//! * [`range`], [`vram`], [`va`]: fixed-capacity allocators for physical VRAM (respecting the
//!   regions GSP and firmware own, given as an [`vram::FbLayout`]) and for GPU virtual addresses.
//!
//! See `docs/mm.md` for the design and measured numbers.

use core::fmt;

use crate::hal::{HalError, PollError};

pub mod entry;
pub mod format;
pub mod mapper;
pub mod peer;
pub mod range;
pub mod table_mem;
#[cfg(test)]
mod tests;
pub mod tlb;
pub mod va;
pub mod vram;

pub use entry::{PteAperture, PteAttrs, TableAperture};
pub use format::{MmuFormat, PageSize};
pub use mapper::{Batch, MapStats, Mapper, Mapping, PageDirectoryBase, ReservedLevel, TableSlot};
pub use peer::PeerBar1Window;
pub use range::{AllocError, FitPolicy, RangeAllocator};
pub use table_mem::{Bar1Tables, DmaTables, PageTableMemory};
pub use tlb::{InvalidateKind, MmuInvalidate, TlbInvalidate};
pub use va::VaAllocator;
pub use vram::{FbLayout, FbOwner, FbReservation, VramAllocator};

/// 4 KiB: the smallest page and the granule of every address and size the mapper takes.
pub const PAGE_4K: u64 = 1 << 12;

/// Why a page-table operation failed. Bad-input errors leave the page tables unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmError {
    /// An address or size is not a multiple of the required alignment.
    Misaligned {
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: u64,
        /// Required alignment in bytes.
        align: u64,
    },
    /// A size of zero.
    ZeroSize,
    /// The range reaches beyond the format's virtual address space.
    VaOutOfRange {
        /// First byte.
        va: u64,
        /// Bytes.
        size: u64,
        /// Size of the address space (1 << VA bits).
        limit: u64,
    },
    /// Part of the range is already mapped (unmap it first).
    AlreadyMapped {
        /// A mapped address inside the range.
        va: u64,
    },
    /// Part of the range is not mapped (double unmap, or a range never mapped).
    NotMapped {
        /// An unmapped address inside the range.
        va: u64,
    },
    /// The range cuts through a larger page; unmap whole pages.
    SplitsPage {
        /// Start of the page that would be split.
        page_va: u64,
        /// Its size in bytes.
        page_size: u64,
    },
    /// A physical address does not fit the entry's address field.
    AddressTooWide {
        /// The address.
        addr: u64,
        /// Bits the field can hold (the address must be below 1 << bits).
        bits: u32,
    },
    /// An attribute value does not fit its field (kind, peer id).
    BadAttribute {
        /// Which attribute.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// The page-table memory pool is full.
    OutOfTableMemory {
        /// Tables the operation needs.
        needed: u32,
        /// Tables free in the pool.
        free: u32,
    },
    /// A page-table entry read back from device memory makes no sense (points outside the pool
    /// or at a free table): the tables were corrupted or the device returned garbage.
    CorruptTable {
        /// Address of the offending entry.
        entry_addr: u64,
        /// The raw (low) entry value.
        raw: u64,
    },
    /// The page-table region or slot storage given to the mapper cannot be used.
    BadPool(&'static str),
    /// Peer video memory outside what the peer's BAR1 window exposes (a small BAR1, or an
    /// address beyond the window).
    OutsidePeerWindow {
        /// Peer VRAM address.
        addr: u64,
        /// Bytes.
        len: u64,
        /// VRAM the window starts at.
        window_base: u64,
        /// Window size.
        window_size: u64,
    },
    /// Reading or writing page-table memory failed.
    Hal(HalError),
    /// A TLB invalidate did not complete.
    InvalidateTimeout(PollError),
}

impl fmt::Display for MmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Misaligned { what, value, align } => write!(
                f,
                "{what} {value:#x} is not a multiple of {align:#x}: GPU mappings work in whole \
                 4 KiB pages; round the buffer to page boundaries"
            ),
            Self::ZeroSize => write!(f, "cannot map or unmap zero bytes"),
            Self::VaOutOfRange { va, size, limit } => write!(
                f,
                "range {va:#x}+{size:#x} is outside the {limit:#x}-byte GPU virtual address space; \
                 take addresses from the VA allocator"
            ),
            Self::AlreadyMapped { va } => write!(
                f,
                "GPU VA {va:#x} is already mapped; unmap it first (the page tables are unchanged)"
            ),
            Self::NotMapped { va } => write!(
                f,
                "GPU VA {va:#x} is not mapped (double unmap?); the page tables are unchanged"
            ),
            Self::SplitsPage { page_va, page_size } => write!(
                f,
                "the range cuts the {page_size:#x}-byte page at {page_va:#x}; unmap whole pages \
                 (or map with a smaller maximum page size)"
            ),
            Self::AddressTooWide { addr, bits } => write!(
                f,
                "physical address {addr:#x} does not fit the {bits}-bit address field of this \
                 page-table format"
            ),
            Self::BadAttribute { what, value } => {
                write!(f, "{what} {value:#x} does not fit its page-table field")
            }
            Self::OutOfTableMemory { needed, free } => write!(
                f,
                "page-table memory exhausted: {needed} tables needed, {free} free; give the \
                 mapper a larger table region (1/512 of the mapped size at 4 KiB pages)"
            ),
            Self::CorruptTable { entry_addr, raw } => write!(
                f,
                "page-table entry at {entry_addr:#x} reads {raw:#018x}, which no table of ours \
                 contains: the tables were overwritten or the device is returning garbage"
            ),
            Self::BadPool(why) => write!(f, "unusable page-table pool: {why}"),
            Self::OutsidePeerWindow {
                addr,
                len,
                window_base,
                window_size,
            } => write!(
                f,
                "peer VRAM {addr:#x}+{len:#x} is outside the peer's BAR1 window (VRAM \
                 {window_base:#x}+{window_size:#x}): BAR1 P2P reaches only what the peer's BAR1 \
                 maps; resize BAR1 (`nvbare bind` grows it) or use an NVLink peer mapping"
            ),
            Self::Hal(e) => write!(f, "page-table memory access failed: {e}"),
            Self::InvalidateTimeout(e) => write!(
                f,
                "TLB invalidate did not finish ({e}); the GPU may be hung - check for MMU \
                 faults and reset it"
            ),
        }
    }
}

impl core::error::Error for MmError {}

impl From<HalError> for MmError {
    fn from(e: HalError) -> Self {
        MmError::Hal(e)
    }
}

impl From<PollError> for MmError {
    fn from(e: PollError) -> Self {
        MmError::InvalidateTimeout(e)
    }
}
