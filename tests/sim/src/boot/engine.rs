//! BAR0 for the boot model: which offsets it claims and what reads and writes of them do.

use super::*;

impl BootEngine {
    /// Registers outside the falcons that this chip's headers do not define, so it does not
    /// answer them: `NV_PGC6_AON_SECURE_SCRATCH_GROUP_42` (NV_USABLE_FB_SIZE_IN_MB, ga102's
    /// `dev_gc6_island.h` on) on TU10x/GA100, and the `NV_FUSE_OPT_FPF_*_UCODE*_VERSION` block
    /// (ga100's `dev_fuse.h` on) on TU10x.
    fn refused(&self, o: u32) -> bool {
        match self.chip.info().architecture {
            Architecture::Turing => o == SCRATCH_GROUP_42 || (FUSE_BASE..FUSE_END).contains(&o),
            _ if self.chip == Chipset::GA100 => o == SCRATCH_GROUP_42,
            _ => false,
        }
    }

    fn claims_fixed(&self, o: u32) -> bool {
        let ga100_lock =
            self.chip == Chipset::GA100 && matches!(o, MMU_LOCK_PLM | MMU_LOCK_LO | MMU_LOCK_HI);
        ga100_lock
            || self.refused(o)
            || matches!(
                o,
                WPR2_LO | WPR2_HI | GFW_PLM | BSI14 | VBIOS_SCRATCH_0E | VBIOS_SCRATCH_15
            )
            || self.flush_offs.contains(&o)
            || (GFW_GROUP05..GFW_GROUP05 + 16).contains(&o)
            || (FUSE_BASE..FUSE_END).contains(&o)
            || (!self.fsp && (PROM_BASE..PROM_BASE + PROM_SIZE).contains(&o))
            || (self.fsp && ((FSP_BASE..FSP_BASE + 0x4000).contains(&o) || o == self.therm))
    }
}

impl MmioEngine for BootEngine {
    fn name(&self) -> &'static str {
        "boot"
    }

    fn claims(&self, o: u32) -> bool {
        (GSP_BASE..GSP_BASE + 0x4000).contains(&o)
            || (SEC2_BASE..SEC2_BASE + 0x4000).contains(&o)
            || self.claims_fixed(o)
    }

    fn read(&mut self, core: &mut SimCore, o: u32) -> u32 {
        let mut g = self.model.lock();
        g.settle(core);
        if self.refused(o) {
            g.error(format!(
                "read of {o:#x}, a register the {} headers do not define",
                self.chip
            ));
            return falcon::PRI_ERROR;
        }
        let gfw_ready = g.gfw_ready_at.is_some_and(|t| Model::now(core) >= t);
        match o {
            // Whether the MMU's WPR registers answer while devinit / the FSP still train the
            // FB is not public: a PRI error, or the value.
            WPR2_LO | WPR2_HI
                if !gfw_ready
                    && core
                        .unknowns
                        .pick(unknown::WPR2_BEFORE_GFW, &unknown::WPR2_BEFORE_GFW_ANSWERS)
                        != 0 =>
            {
                core.unknowns.pick(
                    unknown::WPR2_BEFORE_GFW,
                    &unknown::WPR2_BEFORE_GFW_ANSWERS[1..],
                )
            }
            WPR2_LO => g.wpr2.map_or(0, |(lo, _)| ((lo >> 12) as u32) << 4),
            // GA100's VBIOS MMU lock: readable by the CPU, set by devinit.
            MMU_LOCK_PLM if self.chip == Chipset::GA100 => 1,
            MMU_LOCK_LO if self.chip == Chipset::GA100 => {
                g.mmu_lock.map_or(0, |(lo, _)| ((lo >> 12) as u32) << 4)
            }
            MMU_LOCK_HI if self.chip == Chipset::GA100 => {
                g.mmu_lock.map_or(0, |(_, hi)| ((hi >> 12) as u32) << 4)
            }
            WPR2_HI => g
                .wpr2
                .map_or(0, |(_, end)| (((end - 4096) >> 12) as u32) << 4),
            _ if g.flush.claims(o) => g.flush.values.get(&o).copied().unwrap_or(0),
            GFW_PLM => gfw_ready as u32,
            _ if o == GFW_GROUP05 => {
                if gfw_ready {
                    0xff
                } else {
                    0
                }
            }
            BSI14 => g.bsi14,
            VBIOS_SCRATCH_0E => g.scratch_0e,
            VBIOS_SCRATCH_15 => g.scratch_15,
            _ if o == self.therm && self.fsp => {
                if gfw_ready {
                    0xff
                } else {
                    0
                }
            }
            _ if (FUSE_BASE..FUSE_END).contains(&o) => {
                let idx = (o - FUSE_BASE) / 4;
                let sec2_id = g
                    .cfg
                    .firmware
                    .booter_load
                    .as_ref()
                    .map_or(0, |b| b.ucode_id);
                match idx {
                    // SEC2 array at +0x40, GSP array at +0xc0 (ids are 1-based).
                    i if (16..32).contains(&i) && i - 16 + 1 == sec2_id => g.cfg.sec2_fuse,
                    i if i >= 48 && i - 48 + 1 == SimFwsec::UCODE_ID => g.cfg.gsp_fuse,
                    _ => 0,
                }
            }
            _ if (PROM_BASE..PROM_BASE + PROM_SIZE).contains(&o) => {
                let at = (o - PROM_BASE) as usize;
                let b = &g.cfg.firmware.vbios.bytes;
                b.get(at..at + 4)
                    .map_or(u32::MAX, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            }
            _ if (FSP_BASE..FSP_BASE + 0x4000).contains(&o) => g.fsp_read(o),
            _ if (GSP_BASE..GSP_BASE + 0x4000).contains(&o) => {
                if g.fsp.target_mask_until.is_some() {
                    let lsb = core
                        .unknowns
                        .pick(unknown::TARGET_MASK_LSB, &unknown::TARGET_MASK_LSB_ANSWERS);
                    return 0xbadf_4100 | lsb;
                }
                let r = o - GSP_BASE;
                if r == PGSP_MAILBOX + 12 {
                    let now = Model::now(core);
                    let ready = !has(&g.faults, BootFault::SequencerPollNeverReady)
                        && g.seq.started_at.is_some_and(|t| now >= t + SEQ_POLL_READY);
                    if ready && g.seq.poll_satisfied_at.is_none() {
                        g.seq.poll_satisfied_at = Some(now);
                    }
                    return if ready { 0x600d } else { 0 };
                }
                if (QUEUE_HEAD0 - GSP_BASE..QUEUE_HEAD0 - GSP_BASE + 64).contains(&r)
                    && let Some(rm) = &mut g.rm
                {
                    return rm.doorbell.read(core, o);
                }
                let lockdown = g.fsp.lockdown;
                let v = g.gsp.read(core, r);
                if r == off::HWCFG2 && lockdown {
                    v | 1 << 13
                } else {
                    v
                }
            }
            _ => {
                let r = o - SEC2_BASE;
                g.sec2.read(core, r)
            }
        }
    }

    fn write(&mut self, core: &mut SimCore, o: u32, v: u32) {
        let mut g = self.model.lock();
        g.settle(core);
        if self.refused(o) {
            g.error(format!(
                "write of {o:#x}, a register the {} headers do not define",
                self.chip
            ));
            return;
        }
        if (FSP_BASE..FSP_BASE + 0x4000).contains(&o) && self.fsp {
            if g.fsp_write(o, v) {
                g.fsp_command(core);
            }
            return;
        }
        if g.flush.claims(o) {
            g.flush.values.insert(o, v);
            return;
        }
        let (idx, r) = if (GSP_BASE..GSP_BASE + 0x4000).contains(&o) {
            (0, o - GSP_BASE)
        } else if (SEC2_BASE..SEC2_BASE + 0x4000).contains(&o) {
            (1, o - SEC2_BASE)
        } else {
            // WPR2, scratch, fuses, PROM: not writable from the CPU.
            return;
        };
        if idx == 0 {
            if g.fsp.target_mask_until.is_some() {
                return;
            }
            if (QUEUE_HEAD0 - GSP_BASE..QUEUE_HEAD0 - GSP_BASE + 64).contains(&r) {
                g.gsp.set_reg(r, v);
                if let Some(rm) = &mut g.rm {
                    rm.doorbell.write(core, o, v);
                }
                return;
            }
            if r == off::ENGINE && v & 1 != 0 {
                g.note_gsp_reset(core);
            }
        }
        let f = if idx == 0 { &mut g.gsp } else { &mut g.sec2 };
        if f.write(core, r, v) {
            if idx == 0 && g.gsp.imem.iter().all(|&b| b == 0) && g.seq.core_reset {
                g.seq.core_start = true;
            }
            g.start(core, idx);
        }
    }

    fn reset(&mut self, core: &mut SimCore) {
        let mut g = self.model.lock();
        let now = Model::now(core);
        g.gsp.power_on_reset();
        g.sec2.power_on_reset();
        g.jobs = [None, None];
        g.wpr2 = None;
        g.rm = None;
        g.bsi14 = 0;
        g.scratch_0e = 0;
        g.scratch_15 = 0;
        g.seq = SeqState::default();
        g.sec2_loaded = None;
        g.state_kept = false;
        g.flush.values.clear();
        g.fsp = FspState {
            emem: vec![0; 256],
            ..Default::default()
        };
        // Devinit / the FSP's secure boot run again after the reset.
        let answers = [g.cfg.gfw_boot_time, Duration::from_millis(500), g.gfw_max()];
        let t = core.unknowns.pick(unknown::GFW_BOOT_TIME, &answers);
        g.gfw_ready_at = (!has(&g.faults, BootFault::GfwBootNeverCompletes)).then_some(now + t);
        g.stats.resets += 1;
        g.phase("function-level reset: WPR2, falcons and GSP-RM back to cold");
    }
}

impl Model {
    /// The GSP engine reset is being asserted: the sequencer's CORE_RESET or CORE_RESUME.
    fn note_gsp_reset(&mut self, core: &SimCore) {
        if self.seq.started_at.is_none() || self.seq.resume {
            return;
        }
        let now = Self::now(core);
        if !self.seq.core_reset {
            self.seq.core_reset = true;
            self.seq.write_ok = self.gsp.reg(PGSP_MAILBOX) == 0xcafe_0001;
            self.seq.modify_ok = self.gsp.reg(PGSP_MAILBOX + 4) == 0xffff;
            self.seq.delay_ok = self
                .seq
                .poll_satisfied_at
                .is_some_and(|t| now >= t + Duration::from_micros(SEQ_DELAY_US as u64));
        } else if self.seq.core_start {
            // CORE_RESUME resets into RISC-V; the empty program must have halted first.
            self.seq.halt_waited = self.gsp.cpu == Cpu::Halted;
            if !self.seq.halt_waited {
                self.seq.core_start = false;
            }
        }
    }

    fn emem_index(&self) -> usize {
        let c = self.fsp.ememc;
        (((c >> 8) & 0xff) * 64 + ((c >> 2) & 0x3f)) as usize
    }

    fn set_emem_index(&mut self, i: usize) {
        let i = i as u32;
        let flags = self.fsp.ememc & 0x0300_0000;
        self.fsp.ememc = flags | (((i / 64) & 0xff) << 8) | ((i % 64) << 2);
    }

    fn fsp_read(&mut self, o: u32) -> u32 {
        match o {
            0x8f_2ac0 => self.fsp.ememc,
            0x8f_2ac4 => {
                let i = self.emem_index();
                let v = self.fsp.emem.get(i).copied().unwrap_or(0);
                if self.fsp.ememc & (1 << 25) != 0 {
                    self.set_emem_index(i + 1);
                }
                v
            }
            0x8f_2c00 => self.fsp.queue_head,
            0x8f_2c04 => self.fsp.queue_tail,
            0x8f_2c80 => self.fsp.msgq_head,
            0x8f_2c84 => self.fsp.msgq_tail,
            _ => 0,
        }
    }

    /// Returns `true` when the write interrupts the FSP (QUEUE_HEAD(0)).
    fn fsp_write(&mut self, o: u32, v: u32) -> bool {
        match o {
            0x8f_2ac0 => {
                self.fsp.ememc = v & 0x0300_fffc;
                false
            }
            0x8f_2ac4 => {
                let i = self.emem_index();
                match self.fsp.emem.get_mut(i) {
                    Some(e) => *e = v,
                    None => self.error(format!(
                        "FSP: EMEM write beyond the 1 KiB channel at dword {i}"
                    )),
                }
                if self.fsp.ememc & (1 << 24) != 0 {
                    self.set_emem_index(i + 1);
                }
                false
            }
            0x8f_2c04 => {
                self.fsp.queue_tail = v;
                false
            }
            0x8f_2c00 => {
                self.fsp.queue_head = v;
                if v > self.fsp.queue_tail || self.fsp.queue_tail as usize >= 1024 {
                    self.error(format!(
                        "FSP: queue head {v:#x} tail {:#x}",
                        self.fsp.queue_tail
                    ));
                    return false;
                }
                true
            }
            0x8f_2c80 => {
                self.fsp.msgq_head = v;
                false
            }
            0x8f_2c84 => {
                self.fsp.msgq_tail = v;
                false
            }
            _ => false,
        }
    }
}
