//! TLB invalidation.
//!
//! Every chip from Turing on invalidates through the virtual-function MMU block
//! (`kgmmuCommitTlbInvalidate_TU102`, used by GH100 too): wait for any earlier invalidate to
//! finish, write the page directory to invalidate into `..._INVALIDATE_PDB`/`_UPPER_PDB`, write
//! `..._INVALIDATE` with TRIGGER, then poll until TRIGGER reads 0
//! (`kgmmuCheckPendingInvalidates_TU102`). Downgrades (unmap, read-only, remap) also set
//! SYS_MEMBAR with ACK_GLOBALLY (`kgmmuSetTlbInvalidateMembarWarParameters_TU102`), so
//! outstanding accesses through the old translation are finished when the poll ends.

use core::time::Duration;

use super::MmError;
use super::mapper::PageDirectoryBase;
use crate::hal::{Clock, HalError, Mmio, poll_until};
use crate::regs::Register;
use crate::regs::mmu::{
    INVALIDATE_ACK_GLOBALLY, NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE,
    NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB, NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB,
};

/// Why translations must be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidateKind {
    /// Only new translations were added (`PTE_UPGRADE`): drop cached PDEs and invalid entries.
    Upgrade,
    /// Translations were removed or weakened (`PTE_DOWNGRADE`): also wait for accesses in flight.
    Downgrade,
}

/// Something that can drop the GPU's cached translations for one address space.
///
/// [`MmuInvalidate`] is the real one. The mapper calls it after every change, before the call
/// that made the change returns (or at the end of a [`super::Batch`]).
pub trait TlbInvalidate {
    /// Drops every cached translation of the address space rooted at `pdb` and returns when the
    /// GPU has done so.
    fn invalidate(&mut self, pdb: PageDirectoryBase, kind: InvalidateKind) -> Result<(), MmError>;
}

/// Invalidates through `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE*` in BAR0.
#[derive(Debug)]
pub struct MmuInvalidate<M, C> {
    bar0: M,
    clock: C,
    timeout: Duration,
}

impl<M: Mmio, C: Clock> MmuInvalidate<M, C> {
    /// RM's default for register polls is 2 s; an invalidate normally takes microseconds.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

    /// Invalidates through `bar0`, timing polls with `clock`.
    pub fn new(bar0: M, clock: C) -> Self {
        MmuInvalidate {
            bar0,
            clock,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// Sets how long to wait for TRIGGER to clear.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn wait_idle(&self, what: &'static str) -> Result<(), MmError> {
        poll_until(&self.clock, self.timeout, Duration::ZERO, what, || {
            let raw = self
                .bar0
                .read32(NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::OFFSET as usize);
            if raw == u32::MAX {
                return Err(MmError::Hal(HalError::DeviceLost));
            }
            Ok((!NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::from(raw).trigger()).then_some(()))
        })
    }
}

impl<M: Mmio, C: Clock> TlbInvalidate for MmuInvalidate<M, C> {
    fn invalidate(&mut self, pdb: PageDirectoryBase, kind: InvalidateKind) -> Result<(), MmError> {
        self.wait_idle("an earlier MMU invalidate to finish")?;
        let page = pdb.addr >> 12;
        NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::new()
            .with_aperture_sys(pdb.aperture.is_sys())
            .with_addr((page & 0x0fff_ffff) as u32)
            .write(&self.bar0);
        NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB::new()
            .with_addr(((page >> 28) & 0xf_ffff) as u32)
            .write(&self.bar0);
        let mut v = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::new()
            .with_all_va(true)
            .with_all_pdb(false)
            .with_trigger(true);
        if kind == InvalidateKind::Downgrade {
            v = v.with_sys_membar(true).with_ack(INVALIDATE_ACK_GLOBALLY);
        }
        v.write(&self.bar0);
        self.wait_idle("the MMU invalidate (TRIGGER) to clear")
    }
}

impl<T: TlbInvalidate + ?Sized> TlbInvalidate for &mut T {
    fn invalidate(&mut self, pdb: PageDirectoryBase, kind: InvalidateKind) -> Result<(), MmError> {
        (**self).invalidate(pdb, kind)
    }
}
