//! The FSP handshake (Hopper on): the chain-of-trust message over the RM EMEM channel and
//! the FSP's checks of it.

use super::*;

impl Model {
    /// The chain-of-trust message arrived (QUEUE_HEAD written).
    pub(super) fn fsp_command(&mut self, core: &mut SimCore) {
        let words = (self.fsp.queue_tail / 4 + 1) as usize;
        let pkt: Vec<u8> = self
            .fsp
            .emem
            .iter()
            .take(words)
            .flat_map(|w| w.to_le_bytes())
            .collect();
        // The FSP consumed the packet.
        self.fsp.queue_head = self.fsp.queue_tail;
        let answer =
            |code: u32, ty: u32| -> Vec<u32> { vec![0xc000_0000, 0x1510_de7e, 0, ty, code] };
        if has(&self.faults, BootFault::FspNoResponse) {
            return;
        }
        let now = Self::now(core);
        let code = self.fsp_check_cot(core, &pkt);
        let code = self
            .faults
            .iter()
            .find_map(|f| match f {
                BootFault::FspError(c) => Some(*c),
                _ => None,
            })
            .unwrap_or(code);
        let answer_in = core
            .unknowns
            .pick(unknown::FSP_ANSWER_TIME, &unknown::FSP_TIMES);
        self.fsp.answer_at = Some((now + answer_in, answer(code, 0x14)));
        if code == 0 {
            self.stats.cot_accepted += 1;
            self.phase("FSP accepted the chain-of-trust message");
            let cot = NVDM_PAYLOAD_COT::read_from_bytes(&pkt[8..8 + 860]).ok();
            let params = cot.map(|c| c.gspBootArgsSysmemOffset).unwrap_or(0);
            self.fsp.boot_params = params;
            self.fsp.cot_params = params;
            // The FSP hands the GSP-FMC its arguments in the GSP mailboxes and locks the GSP's
            // PRIV target mask until its ROM has started.
            self.gsp.set_reg(off::MAILBOX0, params as u32);
            self.gsp.set_reg(off::MAILBOX1, (params >> 32) as u32);
            let mask = core
                .unknowns
                .pick(unknown::TARGET_MASK_TIME, &unknown::FSP_TIMES);
            let released = now + answer_in + mask;
            self.fsp.target_mask_until =
                Some(if has(&self.faults, BootFault::TargetMaskNeverReleased) {
                    Duration::MAX
                } else {
                    released
                });
            self.fsp.lockdown = true;
            // The GSP-FMC runs on the GSP's RISC-V core from now on.
            self.gsp.riscv = Riscv::Active;
            let outcome =
                self.fmc_check(core, params, cot.map(|c| c.frtsVidmemOffset).unwrap_or(0));
            let outcome = match self.faults.iter().find_map(|f| match f {
                BootFault::FmcError(c) => Some(*c),
                _ => None,
            }) {
                Some(c) => Err(c),
                None => outcome,
            };
            if has(&self.faults, BootFault::LockdownNeverReleased)
                || has(&self.faults, BootFault::TargetMaskNeverReleased)
            {
                return;
            }
            let fmc = core
                .unknowns
                .pick(unknown::FMC_BOOT_TIME, &unknown::FSP_TIMES);
            self.fsp.fmc_done_at = Some((released + fmc, outcome));
        }
    }

    /// Checks a COT packet as the FSP would; the `FSP_ERR_*` code (0 = accepted).
    pub(super) fn fsp_check_cot(&mut self, core: &SimCore, pkt: &[u8]) -> u32 {
        use nvbare_core::gsp::boot::abi::{
            FSP_ERR_IFS_ERR_INVALID_DATA as BAD, FSP_ERR_IFS_ERR_INVALID_STATE,
        };
        let w = |i: usize| {
            u32::from_le_bytes(
                pkt.get(i * 4..i * 4 + 4)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0; 4]),
            )
        };
        if w(0) >> 30 != 3 || w(1) & 0xff_ffff != 0x10_de7e || w(1) >> 24 != 0x14 {
            self.error(format!(
                "FSP: not a single-packet NVDM COT message ({:#x} {:#x})",
                w(0),
                w(1)
            ));
            return nvbare_core::gsp::boot::abi::FSP_ERR_IFS_ERR_NOT_SUPPORTED;
        }
        let Some(cot) = pkt
            .get(8..8 + 860)
            .and_then(|b| NVDM_PAYLOAD_COT::read_from_bytes(b).ok())
        else {
            self.error(format!(
                "FSP: COT payload of {} bytes, 860 expected",
                pkt.len().saturating_sub(8)
            ));
            return BAD;
        };
        // Up to a dword of padding after the payload is taken: tinygrad always pads the packet
        // (to 872 bytes) and its COT boots real Blackwell GPUs; RM sends exactly 868.
        if !(8 + 860..=8 + 860 + 4).contains(&pkt.len()) {
            self.error(format!("FSP: COT packet of {} bytes", pkt.len()));
            return BAD;
        }
        if self.wpr2.is_some() {
            return FSP_ERR_IFS_ERR_INVALID_STATE;
        }
        let want_version = if self.model.chipset.info().architecture == Architecture::Hopper {
            1
        } else {
            2
        };
        let (version, size) = (cot.version, cot.size);
        if version != want_version || size != 860 {
            self.error(format!(
                "FSP: COT version {version} size {size}, expected {want_version}/860"
            ));
            return BAD;
        }
        let Some(fmc) = self.cfg.firmware.fmc.clone() else {
            return BAD;
        };
        let mut img = vec![0u8; fmc.image.len()];
        let fmc_addr = cot.gspFmcSysmemOffset;
        if core.host.read(fmc_addr, &mut img).is_err() || img != fmc.image {
            self.error("FSP: the image at gspFmcSysmemOffset is not the real GSP-FMC".into());
            return BAD;
        }
        let hash = cot.hash384;
        if SimFirmware::sha384(&img) != hash || hash != fmc.hash {
            self.error("FSP: hash384 is not the FMC image's SHA-384".into());
            return BAD;
        }
        let (pk, sig) = (cot.publicKey, cot.signature);
        if pk != fmc.public_key || sig != fmc.signature {
            self.error("FSP: publicKey/signature are not the FMC's".into());
            return BAD;
        }
        let (off, sz) = (cot.frtsVidmemOffset, cot.frtsVidmemSize);
        if sz != 1 << 20 || off < 2 << 20 || off + (sz as u64) > self.fb_size {
            self.error(format!("FSP: FRTS {off:#x}/{sz:#x} from the end of FB"));
            return BAD;
        }
        0
    }
}
