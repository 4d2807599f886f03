//! How simulated engines reach memory by GPU virtual address.
//!
//! Every GPU-side access (copy engine, QMD fetch, kernel loads and stores, semaphores, GPFIFO
//! and pushbuffer fetches) goes through an [`AddressSpace`], which translates a virtual address
//! into an aperture and a physical address or raises an [`MmuFault`]. Two kinds exist:
//!
//! * a mapping table kept by the simulator's RM (used when RM calls are answered directly,
//!   before the bare-metal page tables exist);
//! * the GMMU walker, which reads the page tables the driver built in VRAM or host memory.
//!
//! [`gpu_read`] and [`gpu_write`] split an access at 4 KiB boundaries (the smallest page) and
//! dispatch each piece to VRAM or host memory.

use std::fmt;

use crate::bar0::SimCore;

/// Where a translated address points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aperture {
    /// Local video memory.
    Vram,
    /// Host memory, snooped.
    SysCoherent,
    /// Host memory, not snooped.
    SysNonCoherent,
    /// Another GPU's memory over the peer link (peer id).
    Peer(u8),
}

/// The kind of access, as the MMU reports it in a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Load.
    Read,
    /// Store.
    Write,
    /// Atomic read-modify-write.
    Atomic,
    /// Instruction or pushbuffer fetch.
    Fetch,
}

/// A successful translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// Target memory.
    pub aperture: Aperture,
    /// Physical (VRAM) or bus (host) address of the translated byte.
    pub phys: u64,
    /// Bytes from `phys` to the end of the page that maps it.
    pub contiguous: u64,
}

/// Why a translation failed (`NV_PFAULT_FAULT_TYPE_*` where the names exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A page-directory entry on the way was invalid (`PDE`).
    InvalidPde,
    /// The page-table entry was invalid (`PTE`).
    InvalidPte,
    /// A write or atomic hit a read-only page (`RO_VIOLATION`).
    ReadOnly,
    /// The address is outside the address space (`VA_LIMIT_VIOLATION`).
    VaLimit,
    /// The translated physical address does not exist (`UNBOUND_INST_BLOCK`-like).
    BadPhysical,
}

/// An MMU fault: what the GPU reports when an access cannot be translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmuFault {
    /// Faulting virtual address.
    pub va: u64,
    /// Access type.
    pub access: Access,
    /// Cause.
    pub kind: FaultKind,
}

impl fmt::Display for MmuFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MMU fault: {:?} at VA {:#x} ({:?})",
            self.access, self.va, self.kind
        )
    }
}

impl std::error::Error for MmuFault {}

/// A GPU virtual address space.
pub trait AddressSpace: Send + Sync {
    /// Translates `va` for `access`.
    fn translate(&self, core: &SimCore, va: u64, access: Access) -> Result<Translation, MmuFault>;
}

const SMALL_PAGE: u64 = 4096;

fn for_each_piece(
    core: &SimCore,
    space: &dyn AddressSpace,
    va: u64,
    len: usize,
    access: Access,
    mut f: impl FnMut(Translation, usize, usize) -> Result<(), FaultKind>,
) -> Result<(), MmuFault> {
    let mut done = 0usize;
    while done < len {
        let cur = va.checked_add(done as u64).ok_or(MmuFault {
            va,
            access,
            kind: FaultKind::VaLimit,
        })?;
        let t = space.translate(core, cur, access)?;
        let to_page_end = (SMALL_PAGE - cur % SMALL_PAGE).min(t.contiguous.max(1));
        let n = (len - done).min(to_page_end as usize);
        f(t, done, n).map_err(|kind| MmuFault {
            va: cur,
            access,
            kind,
        })?;
        done += n;
    }
    Ok(())
}

/// Reads `dst.len()` bytes at GPU virtual address `va`.
pub fn gpu_read(
    core: &SimCore,
    space: &dyn AddressSpace,
    va: u64,
    dst: &mut [u8],
    access: Access,
) -> Result<(), MmuFault> {
    let len = dst.len();
    for_each_piece(core, space, va, len, access, |t, off, n| {
        let buf = &mut dst[off..off + n];
        match t.aperture {
            Aperture::Vram => core
                .vram
                .read(t.phys, buf)
                .map_err(|_| FaultKind::BadPhysical),
            Aperture::SysCoherent | Aperture::SysNonCoherent => core
                .host
                .read(t.phys, buf)
                .map_err(|_| FaultKind::BadPhysical),
            Aperture::Peer(id) => core
                .peers
                .read(id, t.phys, buf)
                .map_err(|_| FaultKind::BadPhysical),
        }
    })
}

/// Writes `src` at GPU virtual address `va`.
pub fn gpu_write(
    core: &SimCore,
    space: &dyn AddressSpace,
    va: u64,
    src: &[u8],
    access: Access,
) -> Result<(), MmuFault> {
    for_each_piece(core, space, va, src.len(), access, |t, off, n| {
        let buf = &src[off..off + n];
        match t.aperture {
            Aperture::Vram => core
                .vram
                .write(t.phys, buf)
                .map_err(|_| FaultKind::BadPhysical),
            Aperture::SysCoherent | Aperture::SysNonCoherent => core
                .host
                .write(t.phys, buf)
                .map_err(|_| FaultKind::BadPhysical),
            Aperture::Peer(id) => core
                .peers
                .write(id, t.phys, buf)
                .map_err(|_| FaultKind::BadPhysical),
        }
    })
}
