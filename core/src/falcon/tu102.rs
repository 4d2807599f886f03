//! The TU10x/GA100 side of the falcon HAL: what RM's `kernel_falcon_tu102.c` and
//! `kernel_gsp_falcon_tu102.c` do where the GA102 code would touch registers the tu102 and
//! ga100 headers do not define (`NV_PRISCV_RISCV_CPUCTL`, `BCR_CTRL`, `HWCFG2.MEM_SCRUBBING`,
//! `NV_PFALCON2_FALCON_{MOD_SEL,BROM_*}`), and the narrower TU10x fields
//! ([`crate::regs::falcon::tu102`]).

use core::time::Duration;

use super::{FLCN_BLK_ALIGNMENT, Falcon, FalconEngine, FalconError, FalconHal, HS_HALT_TIMEOUT};
use crate::hal::{Clock, DmaBuffer, HalError, Mmio, is_register_value};
use crate::regs::RelativeRegister;
use crate::regs::falcon::{
    NV_PFALCON_FALCON_BOOTVEC, NV_PFALCON_FALCON_DMACTL, NV_PFALCON_FALCON_DMATRFMOFFS,
    NV_PFALCON_FALCON_DMEMC, NV_PFALCON_FALCON_IMEMC, NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS,
    tu102,
};

/// A heavy-secure ucode loaded by PIO, the `KGSP_FLCN_UCODE_BOOT_DIRECT` case of RM's
/// `s_allocateUcodeFromBinArchive` (`kernel_gsp_booter.c`, falcons without `bBootFromHs`):
/// non-secure code at IMEM 0, secure code after it, data at `dmem_pa`; offsets are into the
/// (signature-patched) image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HsDirectLoad {
    /// `imemNsPa`: offset of the non-secure code (also its IMEM tag).
    pub ns_offset: u32,
    /// `imemNsSize`.
    pub ns_size: u32,
    /// `imemSecPa`: offset of the secure code (also its IMEM tag).
    pub sec_offset: u32,
    /// `imemSecSize`.
    pub sec_size: u32,
    /// `dataOffset`.
    pub data_offset: u32,
    /// `dmemPa`.
    pub dmem_pa: u32,
    /// `dmemSize`.
    pub dmem_size: u32,
}

impl HsDirectLoad {
    /// The layout RM uses for an `nvfw_hs_load_header_v2` booter image without boot-from-HS:
    /// OS code non-secure, app 0 code secure, OS data at DMEM 0.
    pub fn booter(os_code: (u32, u32), app_code: (u32, u32), os_data: (u32, u32)) -> HsDirectLoad {
        HsDirectLoad {
            ns_offset: os_code.0,
            ns_size: os_code.1,
            sec_offset: app_code.0,
            sec_size: app_code.1,
            data_offset: os_data.0,
            dmem_pa: 0,
            dmem_size: os_data.1,
        }
    }
}

impl<E: FalconEngine, M: Mmio + ?Sized, C: Clock + ?Sized> Falcon<'_, E, M, C> {
    pub(super) fn unsupported(&self, what: &'static str) -> FalconError {
        FalconError::Unsupported {
            engine: E::NAME,
            what,
        }
    }

    /// `_kflcnMemScrubbingFinished`: DMACTL's DMEM_SCRUBBING (1:1) and IMEM_SCRUBBING (2:2)
    /// both read DONE (0).
    pub(super) fn wait_scrubbing_dmactl(&self) -> Result<(), FalconError> {
        let off = NV_PFALCON_FALCON_DMACTL::offset_of::<E>();
        self.poll(
            super::MEM_SCRUB_TIMEOUT,
            Duration::from_micros(10),
            "IMEM/DMEM scrubbing (DMACTL.IMEM_SCRUBBING/DMEM_SCRUBBING)",
            || {
                let raw = self.bar0.read32(off);
                let d = NV_PFALCON_FALCON_DMACTL::from(raw);
                is_register_value(raw) && !d.dmem_scrubbing() && !d.imem_scrubbing()
            },
        )
    }

    /// `kflcnIsRiscvActive_TU102`: `CORE_SWITCH_RISCV_STATUS.ACTIVE_STAT`. A read that did not
    /// reach the register is not "active".
    pub(super) fn is_riscv_active_tu102(&self) -> bool {
        let raw = self
            .bar0
            .read32(NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS::offset_of::<E>());
        is_register_value(raw) && NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS::from(raw).active_stat()
    }

    fn narrow(&self, what: &'static str) -> FalconError {
        FalconError::BadLoad {
            engine: E::NAME,
            what,
        }
    }

    /// DMATRFMOFFS, in TU10x's 15:0 OFFS where the chip has only that.
    pub(super) fn write_dmatrfmoffs(&self, offs: u32) -> Result<(), FalconError> {
        if self.hal == FalconHal::Tu102 {
            let o = u16::try_from(offs).map_err(|_| self.narrow("DMA offset beyond 15:0"))?;
            tu102::NV_PFALCON_FALCON_DMATRFMOFFS::new()
                .with_offs(o)
                .write_of::<E, _>(self.bar0);
        } else {
            NV_PFALCON_FALCON_DMATRFMOFFS::new()
                .with_offs(offs)
                .write_of::<E, _>(self.bar0);
        }
        Ok(())
    }

    /// IMEMC(0) with auto-increment on write, in TU10x's 15:8 BLK where the chip has only that
    /// (`kflcnMaskImemAddr_TU102` against `_GA100`).
    pub(super) fn write_imemc(&self, imem_pa: u32, secure: bool) -> Result<(), FalconError> {
        if self.hal == FalconHal::Tu102 {
            let blk = u8::try_from(imem_pa >> 8).map_err(|_| self.narrow("IMEM block > 15:8"))?;
            tu102::NV_PFALCON_FALCON_IMEMC::new()
                .with_blk(blk)
                .with_aincw(true)
                .with_secure(secure)
                .write_of::<E, _>(self.bar0);
        } else {
            NV_PFALCON_FALCON_IMEMC::new()
                .with_blk((imem_pa >> 8) as u16)
                .with_aincw(true)
                .with_secure(secure)
                .write_of::<E, _>(self.bar0);
        }
        Ok(())
    }

    /// DMEMC(0) at `dmem_pa` (4-byte aligned), in TU10x's 15:8 BLK where the chip has only
    /// that (`kflcnMaskDmemAddr_TU102` against `_GA100`).
    pub(super) fn write_dmemc(
        &self,
        dmem_pa: u32,
        aincw: bool,
        aincr: bool,
    ) -> Result<(), FalconError> {
        let offs = ((dmem_pa & 0xff) >> 2) as u8;
        if self.hal == FalconHal::Tu102 {
            let blk = u8::try_from(dmem_pa >> 8).map_err(|_| self.narrow("DMEM block > 15:8"))?;
            tu102::NV_PFALCON_FALCON_DMEMC::new()
                .with_blk(blk)
                .with_offs(offs)
                .with_aincw(aincw)
                .with_aincr(aincr)
                .write_of::<E, _>(self.bar0);
        } else {
            NV_PFALCON_FALCON_DMEMC::new()
                .with_blk((dmem_pa >> 8) as u16)
                .with_offs(offs)
                .with_aincw(aincw)
                .with_aincr(aincr)
                .write_of::<E, _>(self.bar0);
        }
        Ok(())
    }

    /// Runs a heavy-secure ucode loaded by PIO and waits for it to halt; returns the mailboxes
    /// (`kgspExecuteHsFalcon_TU102` with `s_prepareHsFalconDirect`): DMA without a context,
    /// non-secure code at IMEM 0, secure code at the next 256-byte block, data into DMEM,
    /// BOOTVEC 0, mailboxes, start. No boot-ROM register is written: the signature is already
    /// patched into the image. The caller resets the falcon first.
    pub fn execute_hs_direct(
        &self,
        image: &[u8],
        load: &HsDirectLoad,
        mailboxes: Option<(u32, u32)>,
    ) -> Result<(u32, u32), FalconError> {
        self.execute_direct_from(&SliceSource(image), load, mailboxes)
    }

    /// [`Falcon::execute_hs_direct`] of an image kept in a DMA buffer (the booter_unload the
    /// boot prepares before WPR2 goes up), read block by block.
    pub fn execute_hs_direct_dma<B: DmaBuffer + ?Sized>(
        &self,
        buf: &B,
        load: &HsDirectLoad,
        mailboxes: Option<(u32, u32)>,
    ) -> Result<(u32, u32), FalconError> {
        self.execute_direct_from(&DmaSource(buf), load, mailboxes)
    }

    fn execute_direct_from(
        &self,
        src: &dyn Source,
        load: &HsDirectLoad,
        mailboxes: Option<(u32, u32)>,
    ) -> Result<(u32, u32), FalconError> {
        if self.hal.boots_from_hs() {
            return Err(self.unsupported("the PIO heavy-secure load (this chip boots from HS)"));
        }
        let inside = |off: u32, len: u32, what| {
            if (off as u64) + (len as u64) > src.len() as u64 {
                Err(FalconError::BadLoad {
                    engine: E::NAME,
                    what,
                })
            } else {
                Ok(())
            }
        };
        inside(
            load.ns_offset,
            load.ns_size,
            "non-secure code outside the image",
        )?;
        inside(
            load.sec_offset,
            load.sec_size,
            "secure code outside the image",
        )?;
        inside(load.data_offset, load.dmem_size, "data outside the image")?;
        if load.sec_size == 0 {
            return Err(self.narrow("no secure code"));
        }
        // RM tags blocks with `offset >> 8`.
        let tag = |off: u32| off & !(FLCN_BLK_ALIGNMENT - 1);
        self.disable_ctx_req();
        if load.ns_size != 0 {
            self.load_imem_from(
                0,
                tag(load.ns_offset),
                src,
                load.ns_offset,
                load.ns_size,
                false,
            )?;
        }
        let sec_pa = load.ns_size.next_multiple_of(FLCN_BLK_ALIGNMENT);
        let sec_tag = tag(load.sec_offset);
        self.load_imem_from(sec_pa, sec_tag, src, load.sec_offset, load.sec_size, true)?;
        self.load_dmem_from(load.dmem_pa, src, load.data_offset, load.dmem_size)?;
        NV_PFALCON_FALCON_BOOTVEC::new()
            .with_vec(0)
            .write_of::<E, _>(self.bar0);
        if let Some((m0, m1)) = mailboxes {
            self.write_mailboxes(m0, m1);
        }
        self.start_cpu();
        self.wait_halted(HS_HALT_TIMEOUT)?;
        Ok(self.mailboxes())
    }

    /// [`Falcon::load_imem_pio`] of `src[off..off + len]`, one 256-byte block at a time.
    fn load_imem_from(
        &self,
        imem_pa: u32,
        imem_va: u32,
        src: &dyn Source,
        off: u32,
        len: u32,
        secure: bool,
    ) -> Result<(), FalconError> {
        let mut block = [0u8; FLCN_BLK_ALIGNMENT as usize];
        let mut done = 0u32;
        let mut pa = imem_pa;
        let mut va = imem_va;
        while done < len {
            let n = (len - done).min(FLCN_BLK_ALIGNMENT);
            block.fill(0);
            src.read(off + done, &mut block[..n as usize])
                .map_err(FalconError::Hal)?;
            self.load_imem_pio(pa, va, &block[..n as usize], secure)?;
            done += n;
            pa += FLCN_BLK_ALIGNMENT;
            va += FLCN_BLK_ALIGNMENT;
        }
        Ok(())
    }

    /// [`Falcon::load_dmem_pio`] of `src[off..off + len]`, 256 bytes at a time.
    fn load_dmem_from(
        &self,
        dmem_pa: u32,
        src: &dyn Source,
        off: u32,
        len: u32,
    ) -> Result<(), FalconError> {
        let mut chunk = [0u8; FLCN_BLK_ALIGNMENT as usize];
        let mut done = 0u32;
        while done < len {
            let n = (len - done).min(FLCN_BLK_ALIGNMENT);
            src.read(off + done, &mut chunk[..n as usize])
                .map_err(FalconError::Hal)?;
            self.load_dmem_pio(dmem_pa + done, &chunk[..n as usize])?;
            done += n;
        }
        Ok(())
    }
}

/// Where a PIO load reads the image from.
trait Source {
    fn len(&self) -> usize;
    fn read(&self, off: u32, dst: &mut [u8]) -> Result<(), HalError>;
}

struct SliceSource<'i>(&'i [u8]);

impl Source for SliceSource<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, off: u32, dst: &mut [u8]) -> Result<(), HalError> {
        let src = (off as usize)
            .checked_add(dst.len())
            .and_then(|end| self.0.get(off as usize..end))
            .ok_or(HalError::OutOfRange {
                offset: off as u64,
                len: dst.len() as u64,
                limit: self.0.len() as u64,
            })?;
        dst.copy_from_slice(src);
        Ok(())
    }
}

struct DmaSource<'b, B: ?Sized>(&'b B);

impl<B: DmaBuffer + ?Sized> Source for DmaSource<'_, B> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, off: u32, dst: &mut [u8]) -> Result<(), HalError> {
        self.0.read(off as usize, dst)
    }
}
