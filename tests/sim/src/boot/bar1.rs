//! The BAR1 block register: whether BAR1 is a linear window onto VRAM (physical mode, the
//! power-on state) or translated through an instance block's page tables (virtual mode).
//!
//! GSP-RM binds BAR1 to its own tables when it initialises (the BAR1 PDB it reports in
//! `GspStaticConfigInfo::bar1PdeBase`), which the simulator does not model: in virtual mode the
//! CPU reaches nothing through BAR1 ([`crate::vram::Vram::bar1_virtual`]). A bare-metal driver
//! must put BAR1 back into physical mode before it uses it (tinygrad writes
//! `NV_PBUS_BAR1_BLOCK` after GSP_INIT_DONE; OpenRM's `kbusTeardownMailbox_GH100` uses the
//! VF register on Hopper on).

use nvbare_core::regs::Register;
use nvbare_core::regs::pbus::{
    NV_PBUS_BAR1_BLOCK, NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR,
    NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR,
};

use crate::bar0::{MmioEngine, SimCore};

const PBUS: u32 = NV_PBUS_BAR1_BLOCK::OFFSET;
const VF_LOW: u32 = NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::OFFSET;
const VF_HIGH: u32 = NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_HIGH_ADDR::OFFSET;

/// The BAR1 block register of a Turing-Ada (`NV_PBUS_BAR1_BLOCK`) or Hopper-on
/// (`NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW/HIGH_ADDR`) GPU.
#[derive(Debug)]
pub struct Bar1BlockEngine {
    /// Hopper on: the VF registers.
    vf: bool,
}

impl Bar1BlockEngine {
    /// The engine for a chip that uses the VF registers (`vf`) or PBUS.
    pub fn new(vf: bool) -> Self {
        Bar1BlockEngine { vf }
    }
}

/// What GSP-RM does to BAR1 when it starts: binds it, in virtual mode, to an instance block
/// of its own in VRAM (`ptr` = that block >> 12).
pub fn gsp_binds_bar1(core: &mut SimCore, vf: bool, ptr: u32) {
    if vf {
        let v = NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::new()
            .with_mode_virtual(true)
            .with_ptr(ptr & 0xf_ffff);
        core.regs.set(VF_LOW, v.into());
        core.regs.set(VF_HIGH, ptr >> 20);
    } else {
        let v = NV_PBUS_BAR1_BLOCK::new()
            .with_mode_virtual(true)
            .with_ptr(ptr & 0xfff_ffff);
        core.regs.set(PBUS, v.into());
    }
    core.vram.set_bar1_virtual(true);
    core.trace(format!(
        "bar1: GSP-RM bound BAR1 (virtual mode, block {ptr:#x})"
    ));
}

impl MmioEngine for Bar1BlockEngine {
    fn name(&self) -> &'static str {
        "bar1-block"
    }

    fn claims(&self, offset: u32) -> bool {
        if self.vf {
            offset == VF_LOW || offset == VF_HIGH
        } else {
            offset == PBUS
        }
    }

    fn read(&mut self, core: &mut SimCore, offset: u32) -> u32 {
        // Binds complete at once: PENDING and OUTSTANDING read 0.
        core.regs.get(offset) & if offset == VF_LOW { !3 } else { !0 }
    }

    fn write(&mut self, core: &mut SimCore, offset: u32, value: u32) {
        core.regs.set(offset, value);
        let virtual_mode = match offset {
            VF_LOW => NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::from(value).mode_virtual(),
            PBUS => NV_PBUS_BAR1_BLOCK::from(value).mode_virtual(),
            _ => return,
        };
        core.vram.set_bar1_virtual(virtual_mode);
        core.trace(format!(
            "bar1: {} mode",
            if virtual_mode { "virtual" } else { "physical" }
        ));
    }

    fn reset(&mut self, core: &mut SimCore) {
        for o in [PBUS, VF_LOW, VF_HIGH] {
            core.regs.set(o, 0);
        }
        core.vram.set_bar1_virtual(false);
    }
}
