//! The sysmem flush page at GSP-RM's start (its registers left at 0 as tinygrad leaves them,
//! or pointing outside DMA memory) and the FMC's sysmem targets.

use nvbare_core::gsp::boot::{BootObserver, BootPhase, boot};

use super::tests::{opts, rig};
use super::{SimBar0, fmc_targets_ok};
use crate::models;

/// Clears or bends the sysmem flush registers when a phase starts (after the driver
/// programmed them, before GSP-RM runs).
struct FlushMeddler {
    bar0: SimBar0,
    at: BootPhase,
    regs: nvbare_core::gsp::boot::flush::FlushRegs,
    to: u64,
}

impl BootObserver for FlushMeddler {
    fn phase_started(&mut self, p: BootPhase) {
        if p == self.at {
            let (lo, hi) = self.regs.encode(self.to);
            for &(l, h) in self.regs.pairs() {
                if let Some(h) = h {
                    nvbare_core::hal::Mmio::write32(&self.bar0, h, hi);
                }
                nvbare_core::hal::Mmio::write32(&self.bar0, l, lo);
            }
        }
    }
}

#[test]
fn gsp_rm_checks_the_sysmem_flush_page_when_it_starts() {
    use nvbare_core::gsp::boot::flush::FlushRegs;
    for (model, at) in [
        (models::AD102, BootPhase::BooterLoad),
        (models::GH100, BootPhase::FspChainOfTrust),
        (models::GB202, BootPhase::FspChainOfTrust),
    ] {
        let regs = FlushRegs::for_chip(model.chipset.info());
        // Left at 0 (as tinygrad leaves it): GSP-RM's assert fails, it boots anyway.
        let r = rig(model);
        let mut m = FlushMeddler {
            bar0: r.hw.bar0.clone(),
            at,
            regs,
            to: 0,
        };
        let b = boot(&r.hw, &*r.fw, &opts(), &mut m).unwrap();
        assert!(r.boot.errors().is_empty(), "{:?}", r.boot.errors());
        let w = r.boot.warnings();
        assert!(
            w.iter().any(|w| w.contains("flush registers are 0")),
            "{w:?}"
        );
        drop(b);
        // Pointing at memory that is not DMA memory: its flushes fault.
        let r = rig(model);
        let mut m = FlushMeddler {
            bar0: r.hw.bar0.clone(),
            at,
            regs,
            to: 0x7_0000_0000,
        };
        let b = boot(&r.hw, &*r.fw, &opts(), &mut m).unwrap();
        let e = r.boot.errors();
        assert!(
            e.iter().any(|e| e.contains("not mapped DMA memory")),
            "{e:?}"
        );
        drop(b);
    }
}

#[test]
fn the_fmc_takes_both_sysmem_targets_the_proven_drivers_send() {
    // The open driver, nouveau and nova-core: (COHERENT, NONCOHERENT); tinygrad: (COHERENT,
    // COHERENT).
    assert!(fmc_targets_ok(1, 2) && fmc_targets_ok(1, 1) && fmc_targets_ok(2, 2));
    assert!(!fmc_targets_ok(0, 2) && !fmc_targets_ok(1, 0) && !fmc_targets_ok(3, 1));
}
