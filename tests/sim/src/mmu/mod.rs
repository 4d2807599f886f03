//! The simulated GMMU: page-table walker, TLB and the invalidate registers.
//!
//! * [`GmmuAddressSpace`] is an [`AddressSpace`] over page tables the driver built (GMMU v2 or
//!   v3, in VRAM or host memory): every GPU access through it is translated by walking those
//!   tables ([`walker`]), and an invalid entry raises an [`MmuFault`].
//! * A TLB sits in front of the walk: successful translations are cached and dropped **only**
//!   by an invalidate through `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE` (ALL_VA, for the named
//!   PDB or ALL_PDB). A driver that forgets to invalidate keeps reaching memory it unmapped,
//!   as on hardware. Every TLB hit is also checked against a fresh walk; a mismatch is counted
//!   as a stale hit ([`MmuStats::stale_hits`]) so tests can assert none happened.
//! * [`MmuInvalidateEngine`] claims `..._INVALIDATE_PDB` (0xb830a0), `_UPPER_PDB` (0xb830a4)
//!   and `_INVALIDATE` (0xb830b0); TRIGGER reads 1 until the invalidate completes (after
//!   [`MmuConfig::invalidate_latency`] of simulated time), then self-clears.
//!
//! The TLB is one level standing for the GPC and hub TLBs together: `HUBTLB_ONLY`
//! invalidates do not reach it, and invalidates without `ALL_VA` (targeted VA ranges, whose
//! registers are not modelled) drop nothing. Both are logged.

pub mod walker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::regs::Register;
use nvbare_core::regs::mmu::{
    NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE, NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB,
    NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB,
};

use crate::SimGpu;
use crate::bar0::{MmioEngine, SimCore};
use crate::gpu_mem::{Access, AddressSpace, Aperture, FaultKind, MmuFault, Translation};
pub use walker::{GmmuFormat, TableLoc, WalkedPage, walk};

/// How the MMU model behaves.
#[derive(Debug, Clone, Copy)]
pub struct MmuConfig {
    /// Cache translations until invalidated (off: every access walks the tables, so a missing
    /// invalidate is invisible).
    pub tlb: bool,
    /// Simulated time an invalidate takes; TRIGGER reads 1 until then.
    pub invalidate_latency: Duration,
}

impl Default for MmuConfig {
    fn default() -> Self {
        MmuConfig {
            tlb: true,
            invalidate_latency: Duration::from_micros(1),
        }
    }
}

/// Counters of the MMU model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MmuStats {
    /// Invalidates triggered through `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE`.
    pub invalidate_requests: u64,
    /// Invalidates that completed.
    pub invalidations: u64,
    /// Translations served from the TLB.
    pub tlb_hits: u64,
    /// Translations that walked the tables.
    pub tlb_misses: u64,
    /// TLB hits that disagreed with the tables (a missing invalidate).
    pub stale_hits: u64,
    /// Entries in the TLB now.
    pub tlb_entries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TlbKey {
    /// PDB in host memory (the invalidate registers only tell VID from SYS).
    pdb_sys: bool,
    pdb_addr: u64,
    va: u64,
    size: u64,
}

fn is_sys(a: Aperture) -> bool {
    a != Aperture::Vram
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    due_ns: u64,
    all_pdb: bool,
    pdb_sys: bool,
    pdb_addr: u64,
    all_va: bool,
    hub_only: bool,
}

#[derive(Debug)]
struct State {
    config: MmuConfig,
    tlb: HashMap<TlbKey, WalkedPage>,
    pdb_reg: u32,
    upper_pdb_reg: u32,
    invalidate_reg: u32,
    pending: Option<Pending>,
    stats: MmuStats,
}

impl State {
    fn complete(&mut self, p: Pending) {
        self.stats.invalidations += 1;
        if !p.all_va {
            log::warn!(
                "sim mmu: invalidate without ALL_VA (targeted VA is not modelled): nothing dropped"
            );
            return;
        }
        if p.hub_only {
            log::warn!(
                "sim mmu: HUBTLB_ONLY invalidate does not reach the GPC TLBs: nothing dropped"
            );
            return;
        }
        let before = self.tlb.len();
        if p.all_pdb {
            self.tlb.clear();
        } else {
            self.tlb
                .retain(|k, _| !(k.pdb_addr == p.pdb_addr && k.pdb_sys == p.pdb_sys));
        }
        log::trace!(
            "sim mmu: invalidate dropped {} of {before} TLB entries",
            before - self.tlb.len()
        );
    }

    fn complete_if_due(&mut self, now_ns: u64) {
        if let Some(p) = self.pending
            && now_ns >= p.due_ns
        {
            self.pending = None;
            self.complete(p);
        }
    }
}

/// The MMU model shared by the invalidate engine and the address spaces.
#[derive(Debug)]
pub struct SimMmu {
    state: Mutex<State>,
}

impl SimMmu {
    /// A model with `config`; add [`SimMmu::engine`] to a GPU to make it reachable.
    pub fn new(config: MmuConfig) -> Arc<SimMmu> {
        Arc::new(SimMmu {
            state: Mutex::new(State {
                config,
                tlb: HashMap::new(),
                pdb_reg: 0,
                upper_pdb_reg: 0,
                invalidate_reg: 0,
                pending: None,
                stats: MmuStats::default(),
            }),
        })
    }

    /// A model installed in `gpu` (its invalidate registers answer from now on).
    pub fn install(gpu: &SimGpu, config: MmuConfig) -> Arc<SimMmu> {
        let mmu = SimMmu::new(config);
        gpu.add_engine(mmu.engine());
        mmu
    }

    /// The BAR0 engine for the invalidate registers.
    pub fn engine(self: &Arc<Self>) -> Box<dyn MmioEngine> {
        Box::new(MmuInvalidateEngine { mmu: self.clone() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The address space whose root directory is `pdb`, in format `format`.
    pub fn address_space(self: &Arc<Self>, format: GmmuFormat, pdb: TableLoc) -> GmmuAddressSpace {
        GmmuAddressSpace {
            mmu: self.clone(),
            format,
            pdb,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> MmuStats {
        let st = self.lock();
        MmuStats {
            tlb_entries: st.tlb.len() as u64,
            ..st.stats
        }
    }

    /// Turns TLB modelling on or off (off also empties it).
    pub fn set_tlb(&self, on: bool) {
        let mut st = self.lock();
        st.config.tlb = on;
        if !on {
            st.tlb.clear();
        }
    }
}

/// `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB`/`_UPPER_PDB`/`_INVALIDATE` in BAR0.
#[derive(Debug)]
pub struct MmuInvalidateEngine {
    mmu: Arc<SimMmu>,
}

const PDB: u32 = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::OFFSET;
const UPPER_PDB: u32 = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB::OFFSET;
const INVALIDATE: u32 = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::OFFSET;

impl MmioEngine for MmuInvalidateEngine {
    fn name(&self) -> &'static str {
        "mmu-invalidate"
    }

    /// A function-level reset empties the TLBs and drops a pending invalidate.
    fn reset(&mut self, _core: &mut SimCore) {
        let mut st = self.mmu.lock();
        st.tlb.clear();
        st.pending = None;
        st.pdb_reg = 0;
        st.upper_pdb_reg = 0;
        st.invalidate_reg = 0;
    }

    fn claims(&self, offset: u32) -> bool {
        matches!(offset, PDB | UPPER_PDB | INVALIDATE)
    }

    fn read(&mut self, core: &mut SimCore, offset: u32) -> u32 {
        let now = core.clock.nanos();
        let mut st = self.mmu.lock();
        st.complete_if_due(now);
        match offset {
            PDB => st.pdb_reg,
            UPPER_PDB => st.upper_pdb_reg,
            _ => NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::from(st.invalidate_reg)
                .with_trigger(st.pending.is_some())
                .into(),
        }
    }

    fn write(&mut self, core: &mut SimCore, offset: u32, value: u32) {
        let now = core.clock.nanos();
        let mut st = self.mmu.lock();
        match offset {
            PDB => st.pdb_reg = value,
            UPPER_PDB => st.upper_pdb_reg = value,
            _ => {
                let v = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::from(value);
                st.invalidate_reg = v.with_trigger(false).into();
                if !v.trigger() {
                    return;
                }
                // A new trigger while one is running: the earlier one finishes first.
                if let Some(p) = st.pending.take() {
                    st.complete(p);
                }
                let pdb = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::from(st.pdb_reg);
                let upper =
                    NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB::from(st.upper_pdb_reg);
                let p = Pending {
                    due_ns: now.saturating_add(st.config.invalidate_latency.as_nanos() as u64),
                    all_pdb: v.all_pdb(),
                    pdb_sys: pdb.aperture_sys(),
                    pdb_addr: ((upper.addr() as u64) << 40) | ((pdb.addr() as u64) << 12),
                    all_va: v.all_va(),
                    hub_only: v.hubtlb_only(),
                };
                st.stats.invalidate_requests += 1;
                drop(st);
                core.trace(format!(
                    "mmu: invalidate {} (pdb {:#x}{})",
                    if p.all_pdb { "ALL_PDB" } else { "one PDB" },
                    p.pdb_addr,
                    if p.pdb_sys { " sys" } else { "" }
                ));
                let mut st = self.mmu.lock();
                if st.config.invalidate_latency.is_zero() {
                    st.complete(p);
                } else {
                    st.pending = Some(p);
                }
            }
        }
    }
}

/// A GPU address space translated by walking the driver's page tables through the TLB.
#[derive(Debug, Clone)]
pub struct GmmuAddressSpace {
    mmu: Arc<SimMmu>,
    format: GmmuFormat,
    pdb: TableLoc,
}

impl GmmuAddressSpace {
    /// The root directory.
    pub fn pdb(&self) -> TableLoc {
        self.pdb
    }

    /// The format.
    pub fn format(&self) -> GmmuFormat {
        self.format
    }

    /// Walks the tables for `va` without the TLB.
    pub fn walk(&self, core: &SimCore, va: u64) -> Result<WalkedPage, FaultKind> {
        walk(core, self.format, self.pdb, va)
    }

    fn cached(&self, st: &State, va: u64) -> Option<WalkedPage> {
        [1u64 << 12, 1 << 16, 1 << 21, 1 << 29]
            .into_iter()
            .find_map(|size| {
                st.tlb
                    .get(&TlbKey {
                        pdb_sys: is_sys(self.pdb.aperture),
                        pdb_addr: self.pdb.addr,
                        va: va & !(size - 1),
                        size,
                    })
                    .copied()
            })
    }
}

impl AddressSpace for GmmuAddressSpace {
    fn translate(&self, core: &SimCore, va: u64, access: Access) -> Result<Translation, MmuFault> {
        let fault = |kind| MmuFault { va, access, kind };
        let now = core.clock.nanos();
        let mut st = self.mmu.lock();
        st.complete_if_due(now);
        let page = match self.cached(&st, va).filter(|_| st.config.tlb) {
            Some(hit) => {
                st.stats.tlb_hits += 1;
                let fresh = self.walk(core, va);
                if fresh != Ok(hit) {
                    st.stats.stale_hits += 1;
                    log::warn!(
                        "sim mmu: stale TLB entry used for VA {va:#x}: cached {hit:?}, tables say \
                         {fresh:?} (missing TLB invalidate)"
                    );
                }
                hit
            }
            None => {
                st.stats.tlb_misses += 1;
                let page = self.walk(core, va).map_err(fault)?;
                if st.config.tlb {
                    st.tlb.insert(
                        TlbKey {
                            pdb_sys: is_sys(self.pdb.aperture),
                            pdb_addr: self.pdb.addr,
                            va: page.va,
                            size: page.size,
                        },
                        page,
                    );
                }
                page
            }
        };
        if page.read_only && matches!(access, Access::Write | Access::Atomic) {
            return Err(fault(FaultKind::ReadOnly));
        }
        let off = va - page.va;
        Ok(Translation {
            aperture: page.aperture,
            phys: page.phys + off,
            contiguous: page.size - off,
        })
    }
}

#[cfg(test)]
mod tests;
