//! Heavy-secure ucode through the generic falcon bootloader (`KGSP_FLCN_UCODE_BOOT_WITH_LOADER`):
//! how TU10x and GA100 run the VBIOS's FWSEC (`FALCON_UCODE_DESC_V2`) on the GSP falcon,
//! following RM's `s_prepareHsFalconWithLoader` (`kernel_gsp_falcon_tu102.c`):
//!
//! 1. DMA without a context (`kflcnDisableCtxReq`), aperture `ctxDma` 4 set to physical
//!    coherent system memory (`NV_PFALCON_FBIF_TRANSCFG(4)`).
//! 2. [`RmFlcnBlDmemDesc`] by PIO at DMEM 0: where the ucode's code and data buffers are and
//!    which parts of the code are secure.
//! 3. The bootloader (`gen_bootloader-*.bin`, its code rounded up to 256 bytes) by PIO at the
//!    top of IMEM (`HWCFG.IMEM_SIZE` blocks minus its own), tagged from `blStartTag << 8`.
//! 4. BOOTVEC = `blStartTag << 8`, start, wait for the halt. The bootloader DMAs the ucode in
//!    and jumps to it; the ucode carries its own signature.

use super::{FLCN_BLK_ALIGNMENT, Falcon, FalconEngine, FalconError, HS_HALT_TIMEOUT};
use crate::hal::{Clock, DmaBuffer, Mmio, is_register_value};
use crate::regs::RelativeRegister;
use crate::regs::falcon::{
    NV_PFALCON_FALCON_BOOTVEC, NV_PFALCON_FALCON_HWCFG, NV_PFALCON_FBIF_TRANSCFG,
    TRANSCFG_TARGET_COHERENT_SYSMEM,
};

/// The DMA index RM hands the bootloader (`blDmemDesc.ctxDma = 4`, "dmaIdx for
/// PHYS_SYS_NCOH"); RM programs that aperture as coherent system memory. It is
/// `NV_PFALCON_FBIF_TRANSCFG(4)` (`dev_fbif_v4.h`: eight apertures, stride 4).
pub const BL_CTX_DMA: u32 = 4;

/// What the loader needs from the generic bootloader's descriptor (`RM_FLCN_BL_DESC`,
/// `rmflcnbl.h`; `nvfw_bl_desc` in the firmware file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GenericBl {
    /// `blStartTag`: the IMEM tag (virtual address >> 8) the bootloader runs at.
    pub start_tag: u32,
    /// `blImgHeader.blCodeSize`: bytes of bootloader code.
    pub code_size: u32,
}

/// Where the bootloader finds the ucode in its two buffers (`KernelGspFlcnUcodeBootWithLoader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HsLoaderLoad {
    /// `imemNsPa`: offset of the non-secure code in the code buffer.
    pub ns_offset: u32,
    /// `imemNsSize`.
    pub ns_size: u32,
    /// `imemSecPa`: offset of the secure code in the code buffer.
    pub sec_offset: u32,
    /// `imemSecSize`.
    pub sec_size: u32,
    /// `dmemSize`: bytes of data.
    pub dmem_size: u32,
}

/// `RM_FLCN_BL_DMEM_DESC` (`rmflcnbl.h`, 84 bytes; `RM_FLCN_U64` is two 32-bit words, low
/// first). `reserved` and `signature` are written as zeros, as RM does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RmFlcnBlDmemDesc {
    /// `ctxDma`: the FBIF aperture the bootloader DMAs through.
    pub ctx_dma: u32,
    /// `codeDmaBase`: device address of the code buffer (256-byte aligned).
    pub code_dma_base: u64,
    /// `nonSecureCodeOff`.
    pub non_secure_code_off: u32,
    /// `nonSecureCodeSize`.
    pub non_secure_code_size: u32,
    /// `secureCodeOff`.
    pub secure_code_off: u32,
    /// `secureCodeSize`.
    pub secure_code_size: u32,
    /// `codeEntryPoint` (RM: 0).
    pub code_entry_point: u32,
    /// `dataDmaBase`: device address of the data buffer (256-byte aligned).
    pub data_dma_base: u64,
    /// `dataSize`.
    pub data_size: u32,
    /// `argc`.
    pub argc: u32,
    /// `argv`.
    pub argv: u32,
}

impl RmFlcnBlDmemDesc {
    /// `sizeof(RM_FLCN_BL_DMEM_DESC)`.
    pub const SIZE: usize = 84;
    /// Offset of `ctxDma` (after `reserved[4]` and `signature[4]`).
    pub const CTX_DMA: usize = 32;

    /// The descriptor RM writes for a ucode in buffers at `code` and `data`.
    pub fn for_ucode(code: u64, data: u64, load: &HsLoaderLoad) -> Self {
        RmFlcnBlDmemDesc {
            ctx_dma: BL_CTX_DMA,
            code_dma_base: code,
            non_secure_code_off: load.ns_offset,
            non_secure_code_size: load.ns_size,
            secure_code_off: load.sec_offset,
            secure_code_size: load.sec_size,
            code_entry_point: 0,
            data_dma_base: data,
            data_size: load.dmem_size,
            argc: 0,
            argv: 0,
        }
    }

    /// The little-endian bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        let words = [
            self.ctx_dma,
            self.code_dma_base as u32,
            (self.code_dma_base >> 32) as u32,
            self.non_secure_code_off,
            self.non_secure_code_size,
            self.secure_code_off,
            self.secure_code_size,
            self.code_entry_point,
            self.data_dma_base as u32,
            (self.data_dma_base >> 32) as u32,
            self.data_size,
            self.argc,
            self.argv,
        ];
        for (i, w) in words.iter().enumerate() {
            let at = Self::CTX_DMA + 4 * i;
            b[at..at + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Parses the bytes (`None` if short); the simulator reads DMEM with it.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let w = |i: usize| -> Option<u32> {
            let at = Self::CTX_DMA + 4 * i;
            Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        let q = |i: usize| -> Option<u64> { Some(w(i)? as u64 | (w(i + 1)? as u64) << 32) };
        Some(RmFlcnBlDmemDesc {
            ctx_dma: w(0)?,
            code_dma_base: q(1)?,
            non_secure_code_off: w(3)?,
            non_secure_code_size: w(4)?,
            secure_code_off: w(5)?,
            secure_code_size: w(6)?,
            code_entry_point: w(7)?,
            data_dma_base: q(8)?,
            data_size: w(10)?,
            argc: w(11)?,
            argv: w(12)?,
        })
    }
}

impl<E: FalconEngine, M: Mmio + ?Sized, C: Clock + ?Sized> Falcon<'_, E, M, C> {
    /// Runs a heavy-secure ucode through the generic bootloader and waits for it to halt;
    /// returns the mailboxes. `bl_code` holds the bootloader's code (at least
    /// `bl.code_size` bytes); `code` and `data` are the device addresses of the ucode's
    /// buffers (system memory, 256-byte aligned). The caller resets the falcon first.
    pub fn execute_hs_with_loader<B: DmaBuffer + ?Sized>(
        &self,
        bl_code: &B,
        bl: &GenericBl,
        code: u64,
        data: u64,
        load: &HsLoaderLoad,
    ) -> Result<(u32, u32), FalconError> {
        let bad = |what| FalconError::BadLoad {
            engine: E::NAME,
            what,
        };
        if self.hal.boots_from_hs() {
            return Err(self.unsupported("the generic-bootloader load (this chip boots from HS)"));
        }
        if code & 0xff != 0 || data & 0xff != 0 {
            return Err(bad("loader buffers must be 256-byte aligned"));
        }
        if bl.code_size == 0 || (bl_code.len() as u64) < bl.code_size as u64 {
            return Err(bad(
                "generic bootloader code shorter than its descriptor says",
            ));
        }
        if load.sec_size == 0 {
            return Err(bad("no secure code"));
        }
        let bl_blocks = bl.code_size.div_ceil(FLCN_BLK_ALIGNMENT);
        let hwcfg = self.bar0.read32(NV_PFALCON_FALCON_HWCFG::offset_of::<E>());
        if !is_register_value(hwcfg) {
            return Err(bad("HWCFG did not answer (IMEM size unknown)"));
        }
        let imem_blocks = NV_PFALCON_FALCON_HWCFG::from(hwcfg).imem_size() as u32;
        let dst_blk = imem_blocks
            .checked_sub(bl_blocks)
            .ok_or(bad("generic bootloader larger than IMEM"))?;
        let virt = bl
            .start_tag
            .checked_mul(FLCN_BLK_ALIGNMENT)
            .filter(|v| *v <= u16::MAX as u32)
            .ok_or(bad("generic bootloader start tag out of range"))?;

        self.disable_ctx_req();
        let transcfg = NV_PFALCON_FBIF_TRANSCFG::offset_of::<E>() + 4 * BL_CTX_DMA as usize;
        let t = NV_PFALCON_FBIF_TRANSCFG::from(self.bar0.read32(transcfg))
            .with_target(TRANSCFG_TARGET_COHERENT_SYSMEM)
            .with_mem_type_physical(true);
        self.bar0.write32(transcfg, t.into());
        let desc = RmFlcnBlDmemDesc::for_ucode(code, data, load);
        self.load_dmem_pio(0, &desc.to_bytes())?;
        let mut block = [0u8; FLCN_BLK_ALIGNMENT as usize];
        for i in 0..bl_blocks {
            let off = i * FLCN_BLK_ALIGNMENT;
            let n = (bl.code_size - off).min(FLCN_BLK_ALIGNMENT);
            block.fill(0);
            bl_code
                .read(off as usize, &mut block[..n as usize])
                .map_err(FalconError::Hal)?;
            self.load_imem_pio(
                (dst_blk + i) * FLCN_BLK_ALIGNMENT,
                virt + off,
                &block,
                false,
            )?;
        }
        NV_PFALCON_FALCON_BOOTVEC::new()
            .with_vec(virt)
            .write_of::<E, _>(self.bar0);
        self.start_cpu();
        self.wait_halted(HS_HALT_TIMEOUT)?;
        Ok(self.mailboxes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::falcon::Gsp;

    #[test]
    fn dmem_desc_matches_rmflcnbl_h() {
        // reserved[4], signature[4], ctxDma, codeDmaBase (2 words), nonSecureCodeOff,
        // nonSecureCodeSize, secureCodeOff, secureCodeSize, codeEntryPoint, dataDmaBase
        // (2 words), dataSize, argc, argv.
        let d = RmFlcnBlDmemDesc {
            ctx_dma: 4,
            code_dma_base: 0x1_2345_6700,
            non_secure_code_off: 0x11,
            non_secure_code_size: 0x22,
            secure_code_off: 0x33,
            secure_code_size: 0x44,
            code_entry_point: 0x55,
            data_dma_base: 0x2_0000_0100,
            data_size: 0x66,
            argc: 7,
            argv: 8,
        };
        let b = d.to_bytes();
        let w = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        assert!(b[..32].iter().all(|&x| x == 0));
        assert_eq!(w(32), 4);
        assert_eq!((w(36), w(40)), (0x2345_6700, 1));
        assert_eq!(w(44), 0x11);
        assert_eq!(w(48), 0x22);
        assert_eq!(w(52), 0x33);
        assert_eq!(w(56), 0x44);
        assert_eq!(w(60), 0x55);
        assert_eq!((w(64), w(68)), (0x100, 2));
        assert_eq!(w(72), 0x66);
        assert_eq!((w(76), w(80)), (7, 8));
        assert_eq!(RmFlcnBlDmemDesc::from_bytes(&b), Some(d));
        assert_eq!(RmFlcnBlDmemDesc::from_bytes(&b[..83]), None);
    }

    #[test]
    fn transcfg_4_is_where_dev_fbif_v4_puts_it() {
        // NV_PFALCON_FBIF_TRANSCFG(i) = 0x0 + i*4 from the GSP's FBIF base 0x110600.
        assert_eq!(
            NV_PFALCON_FBIF_TRANSCFG::offset_of::<Gsp>() + 4 * BL_CTX_DMA as usize,
            0x11_0610
        );
    }
}
