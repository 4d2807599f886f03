//! The booter handshake on SEC2: booter_load (GSP-RM into WPR2), booter_unload, and the
//! reload for the CPU sequencer's CORE_RESUME.

use super::*;

impl Model {
    pub(super) fn classify_sec2(&mut self) -> Job {
        // A second start of a halted booter_load without a reset: the CORE_RESUME reload.
        if self.sec2.cpu == Cpu::Halted && self.sec2_loaded == Some(self.sec2.resets) {
            return Job::Reload;
        }
        let fuse = Self::fuse_version(self.cfg.sec2_fuse);
        let fw = self.cfg.firmware.clone();
        for (b, job) in [
            (&fw.booter_load, Job::BooterLoad),
            (&fw.booter_unload, Job::BooterUnload),
        ] {
            let Some(b) = b else { continue };
            let (va, len) = b.code;
            let Some(code) = b.image.get(va as usize..(va + len) as usize) else {
                continue;
            };
            if self.sec2.imem_by_va(va, code.len()).as_deref() != Some(code) {
                continue;
            }
            let Some(img) = b.patched(fuse) else {
                self.error(format!("SEC2: no booter signature for fuse version {fuse}"));
                return Job::Rejected;
            };
            let (doff, dlen) = b.data;
            let dmem = img
                .get(doff as usize..(doff + dlen) as usize)
                .unwrap_or(&[]);
            let code = img.get(va as usize..(va + len) as usize).unwrap_or(&[]);
            let r = if self.sec2.layout == RegLayout::Tu102 {
                // No boot ROM: the falcon enters the non-secure OS code at 0, which jumps to
                // the secure app code (`s_prepareHsFalconDirect`, BOOTVEC 0).
                let (ova, olen) = b.os_code;
                let os = img.get(ova as usize..(ova + olen) as usize).unwrap_or(&[]);
                super::ucode_load::direct_check(&self.sec2, (ova, os), (va, code), dmem)
            } else {
                super::ucode_load::brom_check(
                    &self.sec2,
                    va,
                    code,
                    dmem,
                    b.patch_loc.wrapping_sub(doff),
                    b.engine_id_mask,
                    b.ucode_id,
                )
            };
            return match r {
                Ok(()) => job,
                Err(e) => {
                    self.error(e);
                    Job::Rejected
                }
            };
        }
        self.error("SEC2: started with IMEM holding neither booter".into());
        Job::Rejected
    }

    pub(super) fn booter_load_done(&mut self, core: &mut SimCore) {
        let (m0, m1) = self.sec2.mailboxes();
        let addr = (m1 as u64) << 32 | m0 as u64;
        let meta = match self.check_meta(core, addr, false) {
            Ok(m) => m,
            Err((code, why)) => {
                self.error(format!("booter_load: {why}"));
                self.sec2.set_reg(off::MAILBOX0, code);
                return;
            }
        };
        if let Some((lock, _)) = self.mmu_lock
            && meta.gspFwWprEnd > lock
        {
            // kgspCalculateFbLayout_TU102: WPR ends below the VBIOS's MMU lock.
            self.error(format!(
                "booter_load: WPR ends at {:#x}, above the VBIOS MMU lock at {lock:#x}",
                meta.gspFwWprEnd
            ));
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_LAYOUT);
            return;
        }
        if self.model.chipset == Chipset::GA100 {
            // GA100 has no FRTS region (kgspGetFrtsSize_4a4dee) and runs no FWSEC-FRTS: WPR2
            // must be down and the metadata must ask for none. What its booter does with a
            // non-zero frtsSize is unknown: the sim refuses it.
            if self.wpr2.is_some() || meta.frtsSize != 0 {
                self.error(format!(
                    "booter_load (GA100): WPR2 {:x?} already up or frtsSize {:#x} (GA100 has no \
                     FRTS)",
                    self.wpr2, meta.frtsSize
                ));
                self.sec2.set_reg(off::MAILBOX0, err::BOOTER_LAYOUT);
                return;
            }
        } else {
            match self.wpr2 {
                Some((lo, _)) if lo == meta.frtsOffset => {}
                _ => {
                    self.error(
                        "booter_load: FRTS/WPR2 not set up at frtsOffset (FWSEC-FRTS missing)"
                            .into(),
                    );
                    self.sec2.set_reg(off::MAILBOX0, err::BOOTER_NO_FRTS);
                    return;
                }
            }
        }
        let (g0, g1) = self.gsp.mailboxes();
        let libos = (g1 as u64) << 32 | g0 as u64;
        // TU10x/GA100 have no core switch: after a reset the core runs RISC-V code
        // (kflcnResetIntoRiscv_TU102).
        let selected = self.gsp.layout == RegLayout::Tu102 || self.gsp.riscv_selected();
        if !selected || self.gsp.riscv != Riscv::Off || libos == 0 {
            self.error("booter_load: the GSP is not reset into RISC-V with the LIBOS arguments in its mailboxes".into());
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_GSP_NOT_READY);
            return;
        }
        self.wpr2 = Some((meta.gspFwWprStart, meta.gspFwWprEnd));
        self.sb_since_load = false;
        self.stats.booter_load += 1;
        self.phase("booter_load ran: GSP-RM loaded into WPR2");
        self.sec2.set_reg(off::MAILBOX0, 0);
        self.sec2_loaded = Some(self.sec2.resets);
        self.start_gsp_rm(core, libos);
    }

    pub(super) fn booter_unload_done(&mut self) {
        if self.sec2.mailboxes() != (0xff, 0xff) {
            self.error(format!(
                "booter_unload: mailboxes {:x?}, expected (0xff, 0xff)",
                self.sec2.mailboxes()
            ));
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_UNLOAD_ARGS);
            return;
        }
        if self.rm.as_ref().is_some_and(|r| !r.suspended) {
            self.error("booter_unload while GSP-RM runs (no UNLOADING_GUEST_DRIVER?)".into());
            self.sec2.set_reg(off::MAILBOX0, err::BOOTER_GSP_RUNNING);
            return;
        }
        if self.state_kept && self.rm.is_some() {
            self.phase("booter_unload refused: GSP-RM kept its state (WPR2 stays up)");
            self.sec2
                .set_reg(off::MAILBOX0, err::BOOTER_UNLOAD_STATE_KEPT);
            return;
        }
        if !self.sb_since_load {
            self.warning(
                "booter_unload without FWSEC-SB since booter_load (kgspTeardown_TU102 runs it \
                 first): the VBIOS pre-OS apps stay off until a GPU reset"
                    .into(),
            );
        }
        self.wpr2 = None;
        self.rm = None;
        self.stats.booter_unload += 1;
        self.phase("booter_unload ran: WPR2 down");
        self.sec2.set_reg(off::MAILBOX0, 0);
    }

    /// SEC2 reloaded GSP-RM for the sequencer's CORE_RESUME.
    pub(super) fn reload_done(&mut self, core: &mut SimCore) {
        let (g0, g1) = self.gsp.mailboxes();
        let libos = (g1 as u64) << 32 | g0 as u64;
        let expected = self.rm.as_ref().map(|r| r.libos_args);
        let selected = self.gsp.layout == RegLayout::Tu102 || self.gsp.riscv_selected();
        if !selected || self.gsp.riscv != Riscv::Off || Some(libos) != expected {
            self.error(
                "SEC2 reload: the GSP is not reset into RISC-V with the LIBOS arguments".into(),
            );
            self.sec2.set_reg(off::MAILBOX0, err::RELOAD_GSP_NOT_READY);
            return;
        }
        self.bsi14 |= 1 << 26;
        self.sec2.set_reg(off::MAILBOX0, 0);
        self.gsp.riscv = Riscv::Active;
        self.seq.resume = true;
        let s = &self.seq;
        let mut missing = String::new();
        for (ok, what) in [
            (s.write_ok, "REG_WRITE"),
            (s.modify_ok, "REG_MODIFY"),
            (s.poll_satisfied_at.is_some(), "REG_POLL"),
            (s.delay_ok, "DELAY_US"),
            (s.core_reset, "CORE_RESET"),
            (s.core_start, "CORE_START"),
            (s.halt_waited, "CORE_WAIT_FOR_HALT"),
        ] {
            if !ok {
                let _ = write!(missing, " {what}");
            }
        }
        if missing.is_empty() {
            self.stats.sequencer_ok += 1;
            self.phase("CPU-sequencer script executed as expected");
            self.send_init_done(core);
        } else {
            self.error(format!("CPU sequencer not executed correctly:{missing}"));
            if let Some(rm) = &self.rm {
                rm.emu.log_fault_code(core, 0x5e0);
            }
        }
    }
}
