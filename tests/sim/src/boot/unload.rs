//! The unload as GSP-RM plays it: UNLOADING_GUEST_DRIVER, the suspend, and what the driver
//! must have done before the memory goes.

use super::gsp_rm::last_command;
use super::*;

impl Model {
    /// GSP-RM suspends some time after answering UNLOADING_GUEST_DRIVER, and (Hopper on) its
    /// core halts some time later, when the GSP-FMC/ACR takes WPR2 down.
    pub(super) fn settle_unload(&mut self, core: &mut SimCore, now: Duration) {
        let noticed = self
            .rm
            .as_ref()
            .is_some_and(|r| r.unload.is_none() && r.emu.stats().unloaded);
        if noticed {
            let keeps_state = self.note_unload_request(core);
            let suspend = core
                .unknowns
                .pick(unknown::SUSPEND_TIME, &unknown::UNLOAD_TIMES);
            let halt = core
                .unknowns
                .pick(unknown::HALT_TIME, &unknown::UNLOAD_TIMES);
            if let Some(r) = &mut self.rm {
                r.unload = Some(UnloadPlan {
                    suspend_at: now + suspend,
                    halt_at: now + suspend + halt,
                    keeps_state,
                });
            }
        }
        let Some(plan) = self.rm.as_ref().and_then(|r| r.unload) else {
            return;
        };
        let suspended = self.rm.as_ref().is_some_and(|r| r.suspended);
        if !suspended && now >= plan.suspend_at && !has(&self.faults, BootFault::NoSuspend) {
            if let Some(r) = &mut self.rm {
                r.suspended = true;
            }
            self.stats.suspends += 1;
            self.phase("GSP-RM suspended (UNLOADING_GUEST_DRIVER)");
            self.check_flush_page(core, "suspends");
            self.gsp.set_reg(off::MAILBOX0, 0x8000_0000);
            self.state_kept = plan.keeps_state;
            if !self.fsp_chip() {
                self.gsp.riscv = Riscv::Halted;
            }
        }
        let suspended = self.rm.as_ref().is_some_and(|r| r.suspended);
        let halted = self.rm.as_ref().is_some_and(|r| r.halted);
        if self.fsp_chip() && suspended && !halted && now >= plan.halt_at {
            if let Some(r) = &mut self.rm {
                r.halted = true;
            }
            self.gsp.riscv = Riscv::Halted;
            if plan.keeps_state {
                self.phase("GSP halted; WPR2 stays up (GSP-RM kept its state)");
            } else {
                // The GSP-FMC/ACR tears WPR2 down when GSP-RM halts (kgspTeardown_GH100).
                self.wpr2 = None;
                self.phase("GSP halted; WPR2 down");
            }
        }
    }

    /// Reads the UNLOADING_GUEST_DRIVER GSP-RM just consumed and judges it; whether GSP-RM
    /// keeps its state in WPR2 afterwards (so that the next boot needs a reset).
    pub(super) fn note_unload_request(&mut self, core: &mut SimCore) -> bool {
        let Some(init) = self.rm.as_ref().map(|r| r.init) else {
            return false;
        };
        let req = match last_command(core, &init) {
            Ok((function, body)) if function == NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER => {
                let u32_at = |o: usize| {
                    body.get(o..o + 4)
                        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                };
                UnloadRequest {
                    in_pm_transition: body.first().is_some_and(|&b| b != 0),
                    gc6_entering: body.get(1).is_some_and(|&b| b != 0),
                    new_level: u32_at(4),
                }
            }
            Ok((function, _)) => {
                self.error(format!(
                    "GSP-RM: the last command before the unload is function {function}, not                      UNLOADING_GUEST_DRIVER"
                ));
                return false;
            }
            Err(e) => {
                self.error(format!("GSP-RM: cannot read the unload request: {e}"));
                return false;
            }
        };
        self.stats.unloads.push(req);
        match req {
            // kgspUnloadRm(NORMAL, LEVEL_0): the unload after which RM boots GSP-RM again.
            UnloadRequest {
                in_pm_transition: false,
                gc6_entering: false,
                new_level: 0,
            } => false,
            UnloadRequest {
                in_pm_transition: false,
                gc6_entering: false,
                new_level: UNLOAD_LEVEL_FAST,
            } => {
                self.warning(
                    "UNLOADING_GUEST_DRIVER with FAST_UNLOAD: the open driver sends it only at \
                     system shutdown (\"skips rmDestruct in GSP\"); tinygrad resets the GPU \
                     before its next boot"
                        .into(),
                );
                core.unknowns.hard(unknown::FAST_UNLOAD_KEEPS_STATE)
            }
            r => {
                self.error(format!(
                    "UNLOADING_GUEST_DRIVER {r:?} asks GSP-RM to keep its state for a resume; \
                     an unload before a cold boot is (false, false, LEVEL_0)"
                ));
                true
            }
        }
    }
}
