//! Falcon and RISC-V engine registers (`dev_falcon_v4.h`, `dev_falcon_second_pri.h`,
//! `dev_riscv_pri.h`, `dev_fbif_v4.h` of GA102 and GH100; `dev_gsp.h`, `dev_sec_pri.h`).
//!
//! Every falcon has the same register blocks at different bases, so the registers are declared
//! relative to a family and read through an instance:
//!
//! | family | block | GSP | SEC2 |
//! |---|---|---|---|
//! | [`PFalconBase`] | `NV_PFALCON_FALCON_*` | 0x110000 (`NV_PGSP`) | 0x840000 (`NV_PSEC`) |
//! | [`PFalcon2Base`] | `NV_PFALCON2_FALCON_*` (BROM) | 0x111000 (`NV_FALCON2_GSP_BASE`) | 0x841000 |
//! | [`PRiscvBase`] | `NV_PRISCV_RISCV_*` | 0x111000 | 0x841000 |
//! | [`PFbifBase`] | `NV_PFALCON_FBIF_*` | 0x110600 (`NV_PGSP_FBIF_BASE`) | 0x840600 |
//!
//! The IMEM/DMEM access ports are arrays in the headers (`IMEMC(i)`); nvbare uses port 0 only
//! and declares that port's registers.

use crate::register;
use crate::regs::{RegisterBase, RegisterFamily};

/// `NV_PFALCON_FALCON_*`: the falcon core's registers.
#[derive(Debug)]
pub struct PFalconBase;
impl RegisterFamily for PFalconBase {
    const NAME: &'static str = "NV_PFALCON";
}

/// `NV_PFALCON2_FALCON_*`: the second register block (boot ROM parameters).
#[derive(Debug)]
pub struct PFalcon2Base;
impl RegisterFamily for PFalcon2Base {
    const NAME: &'static str = "NV_PFALCON2";
}

/// `NV_PRISCV_RISCV_*`: the RISC-V core (Peregrine) next to the falcon.
#[derive(Debug)]
pub struct PRiscvBase;
impl RegisterFamily for PRiscvBase {
    const NAME: &'static str = "NV_PRISCV";
}

/// `NV_PFALCON_FBIF_*`: the falcon's memory interface (DMA apertures).
#[derive(Debug)]
pub struct PFbifBase;
impl RegisterFamily for PFbifBase {
    const NAME: &'static str = "NV_PFALCON_FBIF";
}

/// The GSP falcon (`NV_PGSP`, 0x110000): runs FWSEC on Turing-Ada and GSP-RM on RISC-V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gsp;
impl RegisterBase<PFalconBase> for Gsp {
    const BASE: u32 = 0x0011_0000;
}
impl RegisterBase<PFalcon2Base> for Gsp {
    const BASE: u32 = 0x0011_1000;
}
impl RegisterBase<PRiscvBase> for Gsp {
    const BASE: u32 = 0x0011_1000;
}
impl RegisterBase<PFbifBase> for Gsp {
    const BASE: u32 = 0x0011_0600;
}

/// The SEC2 falcon (`NV_PSEC`, 0x840000): runs the booter on Turing-Ada.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sec2;
impl RegisterBase<PFalconBase> for Sec2 {
    const BASE: u32 = 0x0084_0000;
}
impl RegisterBase<PFalcon2Base> for Sec2 {
    const BASE: u32 = 0x0084_1000;
}
impl RegisterBase<PRiscvBase> for Sec2 {
    const BASE: u32 = 0x0084_1000;
}
impl RegisterBase<PFbifBase> for Sec2 {
    const BASE: u32 = 0x0084_0600;
}

register! {
    /// Clears interrupts (write 1).
    pub NV_PFALCON_FALCON_IRQSCLR @ PFalconBase + 0x004 {
        #[bits(4)] __: u8,
        /// 4:4 HALT
        #[bits(1)] pub halt: bool,
        #[bits(1)] __: u8,
        /// 6:6 SWGEN0 (the GSP's message-queue interrupt)
        #[bits(1)] pub swgen0: bool,
        #[bits(25)] __: u32,
    }

    /// Pending interrupts.
    pub NV_PFALCON_FALCON_IRQSTAT @ PFalconBase + 0x008 {
        #[bits(4)] __: u8,
        /// 4:4 HALT
        #[bits(1)] pub halt: bool,
        #[bits(1)] __: u8,
        /// 6:6 SWGEN0
        #[bits(1)] pub swgen0: bool,
        #[bits(25)] __: u32,
    }

    /// Mailbox 0: arguments in, results out (booter: 0 = success; GSP-FMC: error code).
    pub NV_PFALCON_FALCON_MAILBOX0 @ PFalconBase + 0x040 {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }

    /// Mailbox 1.
    pub NV_PFALCON_FALCON_MAILBOX1 @ PFalconBase + 0x044 {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }

    /// The OS version (GSP-RM's `RM_RISCV_UCODE_DESC.appVersion` is written here after boot).
    pub NV_PFALCON_FALCON_OS @ PFalconBase + 0x080 {
        /// 31:0 VERSION
        #[bits(32)] pub version: u32,
    }

    /// RM writes `NV_PMC_BOOT_0` here after a falcon reset.
    pub NV_PFALCON_FALCON_RM @ PFalconBase + 0x084 {
        /// 31:0
        #[bits(32)] pub value: u32,
    }

    /// Hardware configuration 2.
    pub NV_PFALCON_FALCON_HWCFG2 @ PFalconBase + 0x0f4 {
        #[bits(10)] __: u16,
        /// 10:10 RISCV (a RISC-V core is present)
        #[bits(1)] pub riscv: bool,
        #[bits(1)] __: u8,
        /// 12:12 MEM_SCRUBBING (1 = pending, 0 = done)
        #[bits(1)] pub mem_scrubbing: bool,
        /// 13:13 RISCV_BR_PRIV_LOCKDOWN (1 = LOCK): held by the boot ROM until the GSP-FMC
        /// releases it (GH100 on)
        #[bits(1)] pub riscv_br_priv_lockdown: bool,
        #[bits(17)] __: u32,
        /// 31:31 RESET_READY (`ga102/dev_falcon_v4_addendum.h`; GA10x/AD10x only: on GH100
        /// bits 31:24 are PRGN_RSVD_FUSE)
        #[bits(1)] pub reset_ready: bool,
    }

    /// CPU control.
    pub NV_PFALCON_FALCON_CPUCTL @ PFalconBase + 0x100 {
        #[bits(1)] __: u8,
        /// 1:1 STARTCPU (write 1)
        #[bits(1)] pub startcpu: bool,
        #[bits(2)] __: u8,
        /// 4:4 HALTED
        #[bits(1)] pub halted: bool,
        #[bits(1)] __: u8,
        /// 6:6 ALIAS_EN: when set, the CPU is started through CPUCTL_ALIAS
        #[bits(1)] pub alias_en: bool,
        #[bits(25)] __: u32,
    }

    /// Where the falcon starts executing (IMEM virtual address).
    pub NV_PFALCON_FALCON_BOOTVEC @ PFalconBase + 0x104 {
        /// 31:0
        #[bits(32)] pub vec: u32,
    }

    /// Hardware configuration.
    pub NV_PFALCON_FALCON_HWCFG @ PFalconBase + 0x108 {
        /// 8:0 IMEM_SIZE (256-byte blocks)
        #[bits(9)] pub imem_size: u16,
        #[bits(23)] __: u32,
    }

    /// DMA control.
    pub NV_PFALCON_FALCON_DMACTL @ PFalconBase + 0x10c {
        /// 0:0 REQUIRE_CTX
        #[bits(1)] pub require_ctx: bool,
        /// 1:1 DMEM_SCRUBBING
        #[bits(1)] pub dmem_scrubbing: bool,
        /// 2:2 IMEM_SCRUBBING
        #[bits(1)] pub imem_scrubbing: bool,
        #[bits(29)] __: u32,
    }

    /// DMA source base, bits 39:8 of the address.
    pub NV_PFALCON_FALCON_DMATRFBASE @ PFalconBase + 0x110 {
        /// 31:0 BASE
        #[bits(32)] pub base: u32,
    }

    /// DMA destination offset in IMEM/DMEM.
    pub NV_PFALCON_FALCON_DMATRFMOFFS @ PFalconBase + 0x114 {
        /// 23:0 OFFS
        #[bits(24)] pub offs: u32,
        #[bits(8)] __: u8,
    }

    /// DMA command: writing it starts a transfer.
    pub NV_PFALCON_FALCON_DMATRFCMD @ PFalconBase + 0x118 {
        /// 0:0 FULL (request queue full)
        #[bits(1)] pub full: bool,
        /// 1:1 IDLE
        #[bits(1)] pub idle: bool,
        /// 3:2 SEC
        #[bits(2)] pub sec: u8,
        /// 4:4 IMEM (1 = to IMEM, 0 = to DMEM)
        #[bits(1)] pub imem: bool,
        /// 5:5 WRITE (1 = falcon memory to system)
        #[bits(1)] pub write: bool,
        #[bits(2)] __: u8,
        /// 10:8 SIZE (6 = 256 bytes)
        #[bits(3)] pub size: u8,
        #[bits(1)] __: u8,
        /// 14:12 CTXDMA (index of the FBIF_TRANSCFG aperture)
        #[bits(3)] pub ctxdma: u8,
        #[bits(1)] __: u8,
        /// 16:16 SET_DMTAG
        #[bits(1)] pub set_dmtag: bool,
        #[bits(15)] __: u16,
    }

    /// DMA source offset added to the base.
    pub NV_PFALCON_FALCON_DMATRFFBOFFS @ PFalconBase + 0x11c {
        /// 31:0 OFFS
        #[bits(32)] pub offs: u32,
    }

    /// DMA source base, bits 48:40 of the address.
    pub NV_PFALCON_FALCON_DMATRFBASE1 @ PFalconBase + 0x128 {
        /// 8:0 BASE
        #[bits(9)] pub base: u16,
        #[bits(23)] __: u32,
    }

    /// Starts the CPU when CPUCTL.ALIAS_EN is set.
    pub NV_PFALCON_FALCON_CPUCTL_ALIAS @ PFalconBase + 0x130 {
        #[bits(1)] __: u8,
        /// 1:1 STARTCPU
        #[bits(1)] pub startcpu: bool,
        #[bits(30)] __: u32,
    }

    /// IMEM access port 0 control (`IMEMC(0)`).
    pub NV_PFALCON_FALCON_IMEMC @ PFalconBase + 0x180 {
        #[bits(2)] __: u8,
        /// 7:2 OFFS (word in the block)
        #[bits(6)] pub offs: u8,
        /// 23:8 BLK (256-byte block)
        #[bits(16)] pub blk: u16,
        /// 24:24 AINCW (auto-increment on write)
        #[bits(1)] pub aincw: bool,
        /// 25:25 AINCR (auto-increment on read)
        #[bits(1)] pub aincr: bool,
        #[bits(2)] __: u8,
        /// 28:28 SECURE
        #[bits(1)] pub secure: bool,
        #[bits(3)] __: u8,
    }

    /// IMEM access port 0 data (`IMEMD(0)`).
    pub NV_PFALCON_FALCON_IMEMD @ PFalconBase + 0x184 {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }

    /// IMEM access port 0 tag (`IMEMT(0)`): the virtual block of the next 256 bytes written.
    pub NV_PFALCON_FALCON_IMEMT @ PFalconBase + 0x188 {
        /// 15:0 TAG
        #[bits(16)] pub tag: u16,
        #[bits(16)] __: u16,
    }

    /// DMEM access port 0 control (`DMEMC(0)`).
    pub NV_PFALCON_FALCON_DMEMC @ PFalconBase + 0x1c0 {
        #[bits(2)] __: u8,
        /// 7:2 OFFS
        #[bits(6)] pub offs: u8,
        /// 23:8 BLK
        #[bits(16)] pub blk: u16,
        /// 24:24 AINCW
        #[bits(1)] pub aincw: bool,
        /// 25:25 AINCR
        #[bits(1)] pub aincr: bool,
        #[bits(6)] __: u8,
    }

    /// DMEM access port 0 data (`DMEMD(0)`).
    pub NV_PFALCON_FALCON_DMEMD @ PFalconBase + 0x1c4 {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }

    /// Engine reset (`NV_PGSP_FALCON_ENGINE` 0x1103c0, `NV_PSEC_FALCON_ENGINE` 0x8403c0).
    pub NV_PFALCON_FALCON_ENGINE @ PFalconBase + 0x3c0 {
        /// 0:0 RESET (1 = assert)
        #[bits(1)] pub reset: bool,
        #[bits(7)] __: u8,
        /// 10:8 RESET_STATUS (GH100: 0 ASSERTED, 2 DEASSERTED)
        #[bits(3)] pub reset_status: u8,
        #[bits(21)] __: u32,
    }
}

register! {
    /// Boot ROM signature algorithm (1 = RSA-3K).
    pub NV_PFALCON2_FALCON_MOD_SEL @ PFalcon2Base + 0x180 {
        /// 7:0 ALGO
        #[bits(8)] pub algo: u8,
        #[bits(24)] __: u32,
    }

    /// Boot ROM: which ucode id the signature is for.
    pub NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID @ PFalcon2Base + 0x198 {
        /// 7:0 VAL
        #[bits(8)] pub val: u8,
        #[bits(24)] __: u32,
    }

    /// Boot ROM: engine id mask of the ucode.
    pub NV_PFALCON2_FALCON_BROM_ENGIDMASK @ PFalcon2Base + 0x19c {
        /// 31:0
        #[bits(32)] pub val: u32,
    }

    /// Boot ROM: DMEM offset of the signature (`BROM_PARAADDR(0)`).
    pub NV_PFALCON2_FALCON_BROM_PARAADDR @ PFalcon2Base + 0x210 {
        /// 31:0
        #[bits(32)] pub val: u32,
    }
}

/// `NV_PFALCON2_FALCON_MOD_SEL_ALGO_RSA3K`.
pub const MOD_SEL_ALGO_RSA3K: u8 = 1;
/// `NV_PFALCON_FALCON_DMATRFCMD_SIZE_256B`.
pub const DMATRFCMD_SIZE_256B: u8 = 6;
/// `NV_PFALCON_FALCON_ENGINE_RESET_STATUS_ASSERTED` (GH100).
pub const ENGINE_RESET_STATUS_ASSERTED: u8 = 0;
/// `NV_PFALCON_FALCON_ENGINE_RESET_STATUS_DEASSERTED` (GH100).
pub const ENGINE_RESET_STATUS_DEASSERTED: u8 = 2;

register! {
    /// RISC-V interrupt mask (GA102 on; TU10x and GA100 have it at 0x2b4).
    pub NV_PRISCV_RISCV_IRQMASK @ PRiscvBase + 0x528 {
        /// 31:0
        #[bits(32)] pub mask: u32,
    }

    /// RISC-V CPU control and status.
    pub NV_PRISCV_RISCV_CPUCTL @ PRiscvBase + 0x388 {
        /// 0:0 STARTCPU (GH100; write 1)
        #[bits(1)] pub startcpu: bool,
        #[bits(3)] __: u8,
        /// 4:4 HALTED
        #[bits(1)] pub halted: bool,
        /// 5:5 STOPPED
        #[bits(1)] pub stopped: bool,
        #[bits(1)] __: u8,
        /// 7:7 ACTIVE_STAT (1 = the RISC-V core runs)
        #[bits(1)] pub active_stat: bool,
        #[bits(24)] __: u32,
    }

    /// Boot configuration: which core (falcon or RISC-V) the engine boots.
    pub NV_PRISCV_RISCV_BCR_CTRL @ PRiscvBase + 0x668 {
        /// 0:0 VALID
        #[bits(1)] pub valid: bool,
        #[bits(3)] __: u8,
        /// 4:4 CORE_SELECT (0 FALCON, 1 RISCV)
        #[bits(1)] pub core_select_riscv: bool,
        #[bits(3)] __: u8,
        /// 8:8 BRFETCH (the boot ROM fetches the image)
        #[bits(1)] pub brfetch: bool,
        #[bits(23)] __: u32,
    }

    /// Boot ROM DMA configuration (GH100).
    pub NV_PRISCV_RISCV_BCR_DMACFG @ PRiscvBase + 0x66c {
        /// 1:0 TARGET (0 LOCAL_FB, 1 COHERENT_SYSMEM, 2 NONCOHERENT_SYSMEM)
        #[bits(2)] pub target: u8,
        #[bits(26)] __: u32,
        /// 28:28 POINTER_WALKING
        #[bits(1)] pub pointer_walking: bool,
        #[bits(2)] __: u8,
        /// 31:31 LOCK
        #[bits(1)] pub lock: bool,
    }

    /// Boot ROM: PKC parameters (manifest) address >> 8, low word (GH100).
    pub NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_LO @ PRiscvBase + 0x670 {
        #[bits(32)] pub val: u32,
    }
    /// High bits 11:0.
    pub NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_HI @ PRiscvBase + 0x674 {
        #[bits(12)] pub val: u16,
        #[bits(20)] __: u32,
    }
    /// Boot ROM: FMC code address >> 8, low word (GH100).
    pub NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_LO @ PRiscvBase + 0x678 {
        #[bits(32)] pub val: u32,
    }
    /// High bits 11:0.
    pub NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_HI @ PRiscvBase + 0x67c {
        #[bits(12)] pub val: u16,
        #[bits(20)] __: u32,
    }
    /// Boot ROM: FMC data address >> 8, low word (GH100).
    pub NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_LO @ PRiscvBase + 0x680 {
        #[bits(32)] pub val: u32,
    }
    /// High bits 11:0.
    pub NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_HI @ PRiscvBase + 0x684 {
        #[bits(12)] pub val: u16,
        #[bits(20)] __: u32,
    }
}

register! {
    /// Whether the RISC-V core runs, on chips without `NV_PRISCV_RISCV_CPUCTL` (TU10x and
    /// GA100: `tu102/dev_riscv_pri.h`, `ga100/dev_riscv_pri.h`; `kflcnIsRiscvActive_TU102`).
    pub NV_PRISCV_RISCV_CORE_SWITCH_RISCV_STATUS @ PRiscvBase + 0x240 {
        /// 0:0 ACTIVE_STAT (1 = ACTIVE)
        #[bits(1)] pub active_stat: bool,
        #[bits(31)] __: u32,
    }
}

/// The TU10x layouts of registers whose fields or offsets differ from GA102's
/// (`tu102/dev_falcon_v4.h`, `tu102/dev_riscv_pri.h`): the falcon HAL uses these types on
/// [`crate::falcon::FalconHal::Tu102`], so a value that does not fit the narrower field is
/// refused rather than written into bits the header does not define.
pub mod tu102 {
    use super::{PFalconBase, PRiscvBase};
    use crate::register;

    register! {
        /// RISC-V interrupt mask at its TU10x/GA100 offset (GA102 on: 0x528).
        pub NV_PRISCV_RISCV_IRQMASK @ PRiscvBase + 0x2b4 {
            /// 31:0
            #[bits(32)] pub mask: u32,
        }

        /// DMA destination offset in IMEM/DMEM; TU10x's OFFS is 15:0 (GA100 on: 23:0).
        pub NV_PFALCON_FALCON_DMATRFMOFFS @ PFalconBase + 0x114 {
            /// 15:0 OFFS
            #[bits(16)] pub offs: u16,
            #[bits(16)] __: u16,
        }

        /// IMEM access port 0 control with TU10x's BLK 15:8 (GA100 on: 23:8).
        pub NV_PFALCON_FALCON_IMEMC @ PFalconBase + 0x180 {
            #[bits(2)] __: u8,
            /// 7:2 OFFS
            #[bits(6)] pub offs: u8,
            /// 15:8 BLK
            #[bits(8)] pub blk: u8,
            #[bits(8)] __: u8,
            /// 24:24 AINCW
            #[bits(1)] pub aincw: bool,
            #[bits(3)] __: u8,
            /// 28:28 SECURE
            #[bits(1)] pub secure: bool,
            #[bits(3)] __: u8,
        }

        /// DMEM access port 0 control with TU10x's BLK 15:8 (GA100 on: 23:8).
        pub NV_PFALCON_FALCON_DMEMC @ PFalconBase + 0x1c0 {
            #[bits(2)] __: u8,
            /// 7:2 OFFS
            #[bits(6)] pub offs: u8,
            /// 15:8 BLK
            #[bits(8)] pub blk: u8,
            #[bits(8)] __: u8,
            /// 24:24 AINCW
            #[bits(1)] pub aincw: bool,
            /// 25:25 AINCR
            #[bits(1)] pub aincr: bool,
            #[bits(6)] __: u8,
        }
    }
}

/// `NV_PRISCV_RISCV_BCR_DMACFG_TARGET_COHERENT_SYSMEM`.
pub const BCR_DMACFG_TARGET_COHERENT_SYSMEM: u8 = 1;

register! {
    /// DMA aperture 0 (`TRANSCFG(0)`, the one the boot code uses as CTXDMA 0).
    pub NV_PFALCON_FBIF_TRANSCFG @ PFbifBase + 0x000 {
        /// 1:0 TARGET (0 local FB, 1 COHERENT_SYSMEM, 2 NONCOHERENT_SYSMEM)
        #[bits(2)] pub target: u8,
        /// 2:2 MEM_TYPE (1 = PHYSICAL)
        #[bits(1)] pub mem_type_physical: bool,
        #[bits(29)] __: u32,
    }

    /// FBIF control.
    pub NV_PFALCON_FBIF_CTL @ PFbifBase + 0x024 {
        #[bits(7)] __: u8,
        /// 7:7 ALLOW_PHYS_NO_CTX
        #[bits(1)] pub allow_phys_no_ctx: bool,
        #[bits(24)] __: u32,
    }
}

/// `NV_PFALCON_FBIF_TRANSCFG_TARGET_LOCAL_FB`.
pub const TRANSCFG_TARGET_LOCAL_FB: u8 = 0;
/// `NV_PFALCON_FBIF_TRANSCFG_TARGET_COHERENT_SYSMEM`.
pub const TRANSCFG_TARGET_COHERENT_SYSMEM: u8 = 1;

register! {
    /// GSP scratch mailboxes (`NV_PGSP_MAILBOX(i)`, `dev_gsp.h`; the CPU sequencer and the
    /// GSP-FMC use them).
    pub NV_PGSP_MAILBOX @ 0x0011_0804 [4; 4] {
        /// 31:0 DATA
        #[bits(32)] pub data: u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::RelativeRegister;

    #[test]
    fn offsets_match_the_headers() {
        // dev_gsp.h (ga102, gh100): NV_PGSP_FALCON_MAILBOX0/1, NV_PGSP_FALCON_ENGINE.
        assert_eq!(NV_PFALCON_FALCON_MAILBOX0::offset_of::<Gsp>(), 0x11_0040);
        assert_eq!(NV_PFALCON_FALCON_MAILBOX1::offset_of::<Gsp>(), 0x11_0044);
        assert_eq!(NV_PFALCON_FALCON_ENGINE::offset_of::<Gsp>(), 0x11_03c0);
        // dev_sec_pri.h: NV_PSEC_FALCON_ENGINE; dev_sec_addendum.h: NV_PSEC_FBIF_BASE.
        assert_eq!(NV_PFALCON_FALCON_ENGINE::offset_of::<Sec2>(), 0x84_03c0);
        assert_eq!(NV_PFALCON_FBIF_TRANSCFG::offset_of::<Sec2>(), 0x84_0600);
        assert_eq!(NV_PFALCON_FBIF_CTL::offset_of::<Gsp>(), 0x11_0624);
        // dev_falcon_second_pri.h: NV_FALCON2_GSP_BASE + BROM registers.
        assert_eq!(
            NV_PFALCON2_FALCON_BROM_PARAADDR::offset_of::<Gsp>(),
            0x11_1210
        );
        assert_eq!(NV_PFALCON2_FALCON_MOD_SEL::offset_of::<Sec2>(), 0x84_1180);
        // dev_riscv_pri.h.
        assert_eq!(NV_PRISCV_RISCV_CPUCTL::offset_of::<Gsp>(), 0x11_1388);
        assert_eq!(NV_PRISCV_RISCV_BCR_CTRL::offset_of::<Gsp>(), 0x11_1668);
        assert_eq!(
            NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_HI::offset_of::<Gsp>(),
            0x11_1684
        );
        assert_eq!(NV_PFALCON_FALCON_DMEMD::offset_of::<Sec2>(), 0x84_01c4);
        assert_eq!(NV_PFALCON_FALCON_CPUCTL_ALIAS::OFFSET, 0x130);
    }

    #[test]
    fn fields_match_the_headers() {
        let h = NV_PFALCON_FALCON_HWCFG2::from(1 << 10 | 1 << 12 | 1 << 13 | 1 << 31);
        assert!(h.riscv() && h.mem_scrubbing() && h.riscv_br_priv_lockdown() && h.reset_ready());
        let c = NV_PFALCON_FALCON_DMATRFCMD::new()
            .with_imem(true)
            .with_sec(1)
            .with_size(DMATRFCMD_SIZE_256B)
            .with_set_dmtag(true);
        assert_eq!(c.into_bits(), (1 << 4) | (1 << 2) | (6 << 8) | (1 << 16));
        let m = NV_PFALCON_FALCON_IMEMC::new()
            .with_blk(3)
            .with_offs(5)
            .with_aincw(true)
            .with_secure(true);
        assert_eq!(m.into_bits(), (3 << 8) | (5 << 2) | (1 << 24) | (1 << 28));
        let b = NV_PRISCV_RISCV_BCR_CTRL::new()
            .with_valid(true)
            .with_core_select_riscv(true)
            .with_brfetch(true);
        assert_eq!(b.into_bits(), 0x111);
        assert!(NV_PRISCV_RISCV_CPUCTL::from(0x80).active_stat());
        assert_eq!(
            NV_PFALCON_FBIF_CTL::new()
                .with_allow_phys_no_ctx(true)
                .into_bits(),
            0x80
        );
        assert!(NV_PFALCON_FALCON_CPUCTL::from(0x40).alias_en());
        assert_eq!(NV_PFALCON_FALCON_ENGINE::from(0x200).reset_status(), 2);
    }
}
