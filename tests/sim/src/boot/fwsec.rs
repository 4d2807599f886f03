//! The FWSEC handshake on the GSP falcon: which FWSEC command ran (FRTS or SB) and what it
//! leaves behind (WPR2 and the VBIOS scratch error codes).

use super::*;

impl Model {
    pub(super) fn classify_gsp(&mut self, core: &SimCore) -> Job {
        let f = &self.gsp;
        if f.riscv_selected() {
            self.error("GSP falcon CPU started with the RISC-V core selected".into());
            return Job::Rejected;
        }
        if f.imem.iter().all(|&b| b == 0) {
            return Job::Empty;
        }
        if f.layout == RegLayout::Tu102 {
            // No boot ROM verifies a ucode here: FWSEC (v2) comes in through the generic
            // bootloader, which checks nothing itself; FWSEC's own signature does.
            return match self.run_generic_bootloader(core) {
                Ok(()) => Job::Fwsec,
                Err(e) => {
                    self.error(e);
                    Job::Rejected
                }
            };
        }
        let fuse = Self::fuse_version(self.cfg.gsp_fuse);
        let dmem = match self.expected_fwsec_dmem(&self.gsp.dmem, Some(fuse)) {
            Ok(d) => d,
            Err(e) => {
                self.error(e);
                return Job::Rejected;
            }
        };
        let r = super::ucode_load::brom_check(
            &self.gsp,
            0,
            &self.fwsec.imem,
            &dmem,
            SimFwsec::PKC as u32,
            SimFwsec::ENGINE_ID_MASK,
            SimFwsec::UCODE_ID,
        );
        match r {
            Ok(()) => Job::Fwsec,
            Err(e) => {
                self.error(e);
                Job::Rejected
            }
        }
    }

    /// The DMEM FWSEC must have been given, for the command `dmem` asks for: the command at
    /// DMEMMAPPER, its argument and (v3, `fuse` given) the signature for the fuse version.
    pub(super) fn expected_fwsec_dmem(
        &self,
        dmem: &[u8],
        fuse: Option<u32>,
    ) -> Result<Vec<u8>, String> {
        let word = |at: usize| {
            dmem.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
                .unwrap_or(0)
        };
        let init_cmd = word(nvbare_gsp_firmware::testutil::vbios::MAPPER + 44);
        let c = nvbare_gsp_firmware::testutil::vbios::CMD_IN;
        let fw = &self.fwsec;
        let expected = match init_cmd {
            // frtsRegionDesc starts at dword 6 of the command: version, size, offset4K, size4K.
            0x15 => fw.dmem_frts(
                (word(c + 32) as u64) << 12,
                (word(c + 36) as u64) << 12,
                fuse,
            ),
            0x19 => fw.dmem_sb(fuse),
            _ => None,
        };
        // FWSECLIC_FRTS_CMD is 44 bytes of fields padded to 48 by its u64
        // (kernel_gsp_frts_tu102.c): RM copies 48, tinygrad 44 (packed). FWSEC reads the fields
        // only, so the padding is whatever the DMEM held.
        let expected = expected.map(|mut d| {
            if init_cmd == 0x15 {
                let p = c + 44;
                if let (Some(dst), Some(src)) = (d.get_mut(p..p + 4), dmem.get(p..p + 4)) {
                    dst.copy_from_slice(src);
                }
            }
            d
        });
        expected.ok_or_else(|| match fuse {
            Some(fuse) => format!(
                "GSP: FWSEC with init_cmd {init_cmd:#x} (or no signature for fuse version {fuse})"
            ),
            None => format!("GSP: FWSEC with init_cmd {init_cmd:#x}"),
        })
    }

    pub(super) fn fwsec_done(&mut self) {
        let c = nvbare_gsp_firmware::testutil::vbios::CMD_IN;
        let d = &self.gsp.dmem;
        let w =
            |i: usize| u32::from_le_bytes(d[c + i * 4..c + i * 4 + 4].try_into().unwrap_or([0; 4]));
        let init_cmd = u32::from_le_bytes(
            d[nvbare_gsp_firmware::testutil::vbios::MAPPER + 44..][..4]
                .try_into()
                .unwrap_or([0; 4]),
        );
        if init_cmd == 0x19 {
            self.scratch_15 = 0;
            self.sb_since_load = true;
            self.stats.fwsec_sb += 1;
            self.phase("FWSEC-SB ran");
            return;
        }
        let (offset, size) = ((w(8) as u64) << 12, (w(9) as u64) << 12);
        if self.wpr2.is_some() {
            // FWSEC refuses to set FRTS up twice: the GPU needs a reset.
            self.scratch_0e = (err::FRTS_WPR2_UP as u32) << 16;
            self.stats.fwsec_refused += 1;
            self.phase("FWSEC-FRTS refused (WPR2 already up)");
            return;
        }
        if offset == 0 || size != 1 << 20 || offset + size > self.fb_size {
            self.scratch_0e = (err::FRTS_BAD_REGION as u32) << 16;
            self.error(format!(
                "FWSEC-FRTS region {offset:#x}+{size:#x} outside FB"
            ));
            return;
        }
        self.scratch_0e = 0;
        self.wpr2 = Some((offset, offset + size));
        self.stats.fwsec_frts += 1;
        self.phase("FWSEC-FRTS ran: WPR2 up");
    }
}
