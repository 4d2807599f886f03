//! The generic falcon bootloader on the GSP falcon of TU10x/GA100 (`gen_bootloader-*.bin`), as
//! RM's `s_prepareHsFalconWithLoader` (`kernel_gsp_falcon_tu102.c`) sets it up: the CPU
//! starts at BOOTVEC = `blStartTag << 8` in the bootloader's IMEM blocks, which read an
//! `RM_FLCN_BL_DMEM_DESC` from DMEM and DMA the ucode in through FBIF aperture `ctxDma`:
//! non-secure code to IMEM 0, the secure code after it (secure), the data to DMEM 0. What
//! the bootloader itself does beyond that is not public; the model checks what its inputs
//! must be for it to do it, and that the ucode is the VBIOS's FWSEC with the command patched
//! in (assumption C16).

use nvbare_core::falcon::RmFlcnBlDmemDesc;

use super::falcon::{MEM_SIZE, off};
use super::*;

impl Model {
    /// Runs the generic bootloader: `Err` says why it cannot load FWSEC (or what it loaded is
    /// not FWSEC).
    pub(super) fn run_generic_bootloader(&mut self, core: &SimCore) -> Result<(), String> {
        let fw = self.cfg.firmware.clone();
        let bl = fw
            .gen_bootloader
            .as_ref()
            .ok_or("GSP: started on a chip whose firmware set has no generic bootloader")?;
        let f = &self.gsp;
        let virt = bl.start_tag << 8;
        if f.reg(off::BOOTVEC) != virt {
            return Err(format!(
                "GSP: BOOTVEC {:#x}; the generic bootloader runs at its start tag, VA {virt:#x}",
                f.reg(off::BOOTVEC)
            ));
        }
        if f.imem_by_va(virt, bl.code.len()).as_deref() != Some(&bl.code[..]) {
            return Err(format!(
                "GSP: IMEM at VA {virt:#x} does not hold the generic bootloader's code"
            ));
        }
        let at = bl.dmem_desc_off as usize;
        let desc = f
            .dmem
            .get(at..at + RmFlcnBlDmemDesc::SIZE)
            .and_then(RmFlcnBlDmemDesc::from_bytes)
            .ok_or("GSP: DMEM too small for the bootloader's descriptor")?;
        self.check_bl_aperture(desc.ctx_dma)?;
        let ns_len = desc.non_secure_code_size as usize;
        let sec_len = desc.secure_code_size as usize;
        let data_len = desc.data_size as usize;
        let sec_pa = ns_len.next_multiple_of(256);
        if sec_len == 0 || sec_pa + sec_len > MEM_SIZE || data_len > MEM_SIZE {
            return Err(format!(
                "GSP: the bootloader's descriptor asks for {ns_len:#x}+{sec_len:#x} bytes of \
                 code and {data_len:#x} of data, which IMEM/DMEM cannot hold"
            ));
        }
        // The bootloader's own blocks must survive its loading the ucode from IMEM 0.
        let bl_phys = f
            .imem_tags
            .iter()
            .position(|t| *t == Some(bl.start_tag as u16))
            .unwrap_or(0);
        if bl_phys * 256 < sec_pa + sec_len {
            return Err(format!(
                "GSP: the generic bootloader at IMEM {:#x} would overwrite itself loading \
                 {:#x} bytes of ucode from IMEM 0",
                bl_phys * 256,
                sec_pa + sec_len
            ));
        }
        let read = |addr: u64, len: usize, what: &str| -> Result<Vec<u8>, String> {
            let mut b = vec![0u8; len];
            core.host.read(addr, &mut b).map_err(|_| {
                format!("GSP: the bootloader's DMA of the {what} at {addr:#x}+{len:#x} faults")
            })?;
            Ok(b)
        };
        if desc.code_dma_base & 0xff != 0 || desc.data_dma_base & 0xff != 0 {
            return Err("GSP: the bootloader's DMA bases are not 256-byte aligned".into());
        }
        let base = desc.code_dma_base;
        let ns = read(
            base + desc.non_secure_code_off as u64,
            ns_len,
            "non-secure code",
        )?;
        let sec = read(base + desc.secure_code_off as u64, sec_len, "secure code")?;
        let data = read(desc.data_dma_base, data_len, "data")?;
        self.check_fwsec_v2(&desc, &ns, &sec, &data)?;
        // What the bootloader leaves for FWSEC: its code in IMEM, its data in DMEM.
        let g = &mut self.gsp;
        g.imem[..ns_len].copy_from_slice(&ns);
        g.imem[sec_pa..sec_pa + sec_len].copy_from_slice(&sec);
        g.dmem[..data_len].copy_from_slice(&data);
        Ok(())
    }

    /// The aperture the bootloader DMAs through: a physical system-memory target, usable
    /// without a bound context.
    fn check_bl_aperture(&self, ctx: u32) -> Result<(), String> {
        let f = &self.gsp;
        if ctx >= 8 {
            return Err(format!(
                "GSP: the bootloader's ctxDma {ctx} is not an aperture"
            ));
        }
        let t = f.reg(off::FBIF_TRANSCFG0 + 4 * ctx);
        if t & 0x4 == 0 || t & 3 == 0 {
            return Err(format!(
                "GSP: FBIF_TRANSCFG({ctx}) {t:#x}: the bootloader needs physical system memory"
            ));
        }
        if f.reg(off::DMACTL) & 1 != 0 && f.reg(off::FBIF_CTL) & 0x80 == 0 {
            return Err(
                "GSP: DMACTL.REQUIRE_CTX set and no ALLOW_PHYS_NO_CTX: the bootloader's DMA \
                 is dropped"
                    .into(),
            );
        }
        Ok(())
    }

    /// What the bootloader fetched must be the VBIOS's v2 FWSEC: the non-secure and secure
    /// halves of its IMEM, entered at 0, and its DMEM with a command patched in (no signature:
    /// a v2 FWSEC carries its own).
    fn check_fwsec_v2(
        &self,
        desc: &RmFlcnBlDmemDesc,
        ns: &[u8],
        sec: &[u8],
        data: &[u8],
    ) -> Result<(), String> {
        use nvbare_gsp_firmware::testutil::vbios::IMEM_SEC_BASE;
        let imem = &self.fwsec.imem;
        if desc.code_entry_point != 0 {
            return Err(format!(
                "GSP: codeEntryPoint {:#x}; FWSEC's VirtualEntry is 0",
                desc.code_entry_point
            ));
        }
        if imem.get(..IMEM_SEC_BASE) != Some(ns) {
            return Err("GSP: the bootloader's non-secure code is not FWSEC's".into());
        }
        if imem.get(IMEM_SEC_BASE..IMEM_SEC_BASE + sec.len()) != Some(sec) {
            return Err("GSP: the bootloader's secure code is not FWSEC's".into());
        }
        let expected = self.expected_fwsec_dmem(data, None)?;
        if data.get(..expected.len()) != Some(&expected[..]) {
            return Err("GSP: the bootloader's data is not FWSEC's DMEM with the command".into());
        }
        Ok(())
    }
}
