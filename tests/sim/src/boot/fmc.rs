//! The GSP-FMC handshake (Hopper on): what it checks of its boot parameters, how it starts
//! GSP-RM or fails, and its halt.

use super::*;

impl Model {
    /// What the GSP-FMC will find: `Ok` or its MAILBOX0 error code.
    pub(super) fn fmc_check(
        &mut self,
        core: &SimCore,
        params_addr: u64,
        frts_off: u64,
    ) -> Result<(), u32> {
        let Some(p): Option<GSP_FMC_BOOT_PARAMS> = Self::read_host(core, params_addr) else {
            self.error("GSP-FMC: boot parameters unreadable".into());
            return Err(err::FMC_DMA);
        };
        let b = p.bootGspRmParams;
        let r = p.gspRmParams;
        self.stats.fmc_targets.push((b.target, r.target));
        if !fmc_targets_ok(b.target, r.target)
            || b.gspRmDescSize != 256
            || b.bIsGspRmBoot != 1
            || r.bootArgsOffset == 0
        {
            self.error(format!("GSP-FMC: bad GSP_FMC_BOOT_PARAMS {p:?}"));
            return Err(err::FMC_BOOT_PARAMS);
        }
        let meta = match self.check_meta(core, b.gspRmDescOffset, true) {
            Ok(m) => m,
            Err((code, why)) => {
                self.error(format!("GSP-FMC: {why}"));
                return Err(code);
            }
        };
        // ACR places WPR2 below FRTS, top down (kgspCalculateFbLayout_GH100's picture).
        let frts_end = self.fb_size - frts_off;
        let frts = frts_end - (1 << 20);
        let mut at = frts - meta.sizeOfBootloader;
        at = (at - meta.sizeOfRadix3Elf) & !0xffff;
        at = (at - meta.gspFwHeapSize) & !0xf_ffff;
        let wpr_start = at - (1 << 20);
        self.fsp.boot_params = r.bootArgsOffset;
        self.fsp.meta_addr = b.gspRmDescOffset;
        self.wpr2 = Some((wpr_start, frts_end));
        Ok(())
    }

    pub(super) fn fmc_finish(&mut self, core: &mut SimCore, outcome: Result<(), u32>) {
        match outcome {
            Err(code) => {
                self.gsp.set_reg(off::MAILBOX0, code);
                self.gsp.set_reg(off::MAILBOX1, 0);
                self.wpr2 = None;
                // It goes on running (and reading its boot memory) for a while before its core
                // halts; how long is not public.
                let t = core
                    .unknowns
                    .pick(unknown::FMC_ERROR_HALT, &unknown::FMC_ERROR_HALT_TIMES);
                let params = self.fsp.cot_params;
                let meta = self.fsp.meta_addr;
                self.fsp.fmc_halt_at = Some((Self::now(core) + t, params, meta));
            }
            Ok(()) => {
                self.gsp.set_reg(off::MAILBOX0, 0);
                self.gsp.set_reg(off::MAILBOX1, 0);
                self.fsp.lockdown = false;
                // The GSP-FMC hands the core to GSP-RM (or, with RiscvNeverActive, stops).
                self.gsp.riscv = Riscv::Halted;
                let libos = self.fsp.boot_params;
                self.start_gsp_rm(core, libos);
            }
        }
    }

    /// A GSP-FMC that failed halts; its last reads are of its boot parameters and the WPR
    /// metadata, which the driver must not have freed yet.
    pub(super) fn fmc_halt(&mut self, core: &SimCore, params: u64, meta: u64) {
        for (what, addr, len) in [
            (
                "boot parameters",
                params,
                std::mem::size_of::<GSP_FMC_BOOT_PARAMS>(),
            ),
            ("WPR metadata", meta, std::mem::size_of::<GspFwWprMeta>()),
        ] {
            if addr != 0 && core.host.read(addr, &mut vec![0u8; len]).is_err() {
                self.error(format!(
                    "GSP-FMC: its {what} at {addr:#x} were freed while it still ran (the driver \
                     must wait for the GSP RISC-V core to halt before freeing its boot memory)"
                ));
            }
        }
        self.gsp.riscv = Riscv::Halted;
        self.phase("GSP-FMC halted after its error");
    }
}
