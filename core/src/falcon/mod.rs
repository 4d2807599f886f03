//! Falcon and RISC-V engine control: reset, IMEM/DMEM loads (PIO and DMA), heavy-secure boot
//! through the boot ROM, mailboxes, and the RISC-V core's start and status.
//!
//! The GSP (0x110000) and SEC2 (0x840000) are falcons with a RISC-V core beside them (SEC2's is
//! unused here). The boot code drives them as OpenRM does (`kernel_falcon_tu102.c`,
//! `kernel_falcon_ga102.c`, `kernel_gsp_falcon_ga102.c`):
//!
//! * [`Falcon::reset`]: wait for RESET_READY (tolerating its absence), toggle the engine reset,
//!   wait for memory scrubbing, select the falcon core, write `NV_PMC_BOOT_0` to `FALCON_RM`.
//! * [`Falcon::reset_into_riscv`]: the same, selecting the RISC-V core (`BCR_CTRL`).
//! * [`Falcon::execute_hs`]: DMA a heavy-secure ucode into IMEM (secure) and DMEM, program the
//!   boot ROM's signature parameters, set the boot vector and mailboxes, start the CPU and wait
//!   for it to halt; returns the mailboxes.
//! * PIO loads ([`Falcon::load_imem_pio`], [`Falcon::load_dmem_pio`]) for code that is not
//!   DMA'd.
//!
//! The engine is a type parameter ([`Gsp`], [`Sec2`]): register
//! bases are compile-time constants. What differs between chips is in [`FalconHal`].
//! Every wait goes through [`poll_until`] with a named timeout.

use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;

use crate::chip::{Architecture, ChipInfo, Chipset};
use crate::hal::{Clock, HalError, Mmio, PollError, is_register_value, poll_until};
use crate::regs::falcon::*;
use crate::regs::fuse::{
    NV_FUSE_OPT_FPF_GSP_UCODE_VERSION, NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION,
    NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION, fuse_version,
};
use crate::regs::pmc::NV_PMC_BOOT_0;
use crate::regs::{Register, RegisterArray, RegisterBase, RelativeRegister};

mod loader;
mod tu102;
pub use loader::{BL_CTX_DMA, GenericBl, HsLoaderLoad, RmFlcnBlDmemDesc};
pub use tu102::HsDirectLoad;

/// How long RESET_READY may take to appear before the reset goes ahead anyway (nova-core and
/// OpenRM tolerate its absence: bug 3419321).
pub const RESET_READY_TIMEOUT: Duration = Duration::from_micros(150);
/// How long the engine reset state machine may take to report asserted/deasserted (GH100).
pub const RESET_STATUS_TIMEOUT: Duration = Duration::from_millis(1);
/// How long IMEM/DMEM scrubbing may take after a reset (nova-core: 20 ms).
pub const MEM_SCRUB_TIMEOUT: Duration = Duration::from_millis(20);
/// How long a core switch may take to report BCR_CTRL valid.
pub const CORE_SELECT_TIMEOUT: Duration = Duration::from_millis(10);
/// How long a DMA request may wait for queue space or completion.
pub const DMA_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a heavy-secure ucode (FWSEC, booter) may run before it must halt: the open
/// driver's `GPU_TIMEOUT_DEFAULT` (`kgspExecuteHsFalcon_GA102` → `kflcnWaitForHalt_HAL`; 4 s on
/// Linux, `osGetTimeoutParams`). nova-core waits 2 s ("firmwares should complete in less than
/// 2 seconds").
pub const HS_HALT_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the RISC-V core may take to become active after it was started.
pub const RISCV_ACTIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Register reads between asserting and deasserting the engine reset on GA10x
/// (`FLCN_RESET_PROPAGATION_DELAY_COUNT`).
const RESET_PROPAGATION_READS: u32 = 10;
/// Bytes per falcon DMA transfer (`FLCN_BLK_ALIGNMENT`, DMATRFCMD size 256B).
pub const FLCN_BLK_ALIGNMENT: u32 = 256;

/// Why a falcon operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FalconError {
    /// A wait timed out.
    Timeout {
        /// The engine.
        engine: &'static str,
        /// What was awaited.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// A load does not fit the image or the falcon's memory.
    BadLoad {
        /// The engine.
        engine: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// The chip's falcon HAL has no such operation (e.g. the boot-ROM HS load on TU10x).
    Unsupported {
        /// The engine.
        engine: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// Register or DMA access failed.
    Hal(HalError),
}

impl fmt::Display for FalconError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FalconError::Timeout {
                engine,
                what,
                waited,
            } => write!(
                f,
                "{engine} falcon: timed out after {waited:?} waiting for {what}; the engine may \
                 be hung or held by firmware: reset the GPU (PCI function reset) and retry"
            ),
            FalconError::BadLoad { engine, what } => write!(
                f,
                "{engine} falcon: cannot load the ucode: {what} (corrupt firmware file?)"
            ),
            FalconError::Unsupported { engine, what } => write!(
                f,
                "{engine} falcon: {what} is not what this chip's falcon does (a driver bug)"
            ),
            FalconError::Hal(e) => write!(f, "falcon register access: {e}"),
        }
    }
}

impl core::error::Error for FalconError {}

impl From<HalError> for FalconError {
    fn from(e: HalError) -> Self {
        FalconError::Hal(e)
    }
}

/// A falcon engine: the bases of its register blocks and its name.
pub trait FalconEngine:
    RegisterBase<PFalconBase>
    + RegisterBase<PFalcon2Base>
    + RegisterBase<PRiscvBase>
    + RegisterBase<PFbifBase>
{
    /// Name for messages ("GSP", "SEC2").
    const NAME: &'static str;
}

impl FalconEngine for Gsp {
    const NAME: &'static str = "GSP";
}

impl FalconEngine for Sec2 {
    const NAME: &'static str = "SEC2";
}

/// What differs between chip generations in falcon handling: which of RM's falcon and GSP HAL
/// functions a chip uses (`g_kernel_falcon_nvoc.c`, `g_kernel_gsp_nvoc.c` of 570.144).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FalconHal {
    /// TU102-TU117: no core switch (`kflcnSwitchToFalcon_TU102`), RISC-V status in
    /// `CORE_SWITCH_RISCV_STATUS` (`kflcnIsRiscvActive_TU102`), scrubbing in DMACTL
    /// (`kflcnWaitForResetToFinish_TU102`), HS ucode by PIO (`kgspExecuteHsFalcon_TU102`),
    /// no ucode fuse versions (`kgspReadUcodeFuseVersion_b2b553`), narrower IMEMC/DMEMC BLK.
    Tu102,
    /// GA100: the TU102 falcon functions, but GA100's wider IMEMC/DMEMC (`kflcnMaskImemAddr_GA100`)
    /// and fuse versions (`kgspReadUcodeFuseVersion_GA100`).
    Ga100,
    /// GA102 to Ada (`kflcnResetHw` toggles `FALCON_ENGINE.RESET` with propagation reads; BCR
    /// core switch; HS ucode through the boot ROM, `kgspExecuteHsFalcon_GA102`).
    Ga102,
    /// Hopper and Blackwell (the reset state machine reports RESET_STATUS, `kgspResetHw_GH100`).
    Gh100,
}

impl FalconHal {
    /// The HAL for a chip (RM's ChipHal masks: TU102|TU104|TU106|TU116|TU117, GA100, then
    /// GA102 on).
    pub fn for_chip(info: &ChipInfo) -> FalconHal {
        match info.architecture {
            Architecture::Turing => FalconHal::Tu102,
            Architecture::Ampere if info.chipset == Chipset::GA100 => FalconHal::Ga100,
            Architecture::Ampere | Architecture::Ada => FalconHal::Ga102,
            Architecture::Hopper | Architecture::Blackwell => FalconHal::Gh100,
        }
    }

    /// Whether the engine has a BCR core switch (`NV_PRISCV_RISCV_BCR_CTRL`, ga102 on); TU10x
    /// and GA100 have none and come out of reset ready for either core
    /// (`kflcnResetIntoRiscv_TU102`).
    pub fn has_core_switch(self) -> bool {
        matches!(self, FalconHal::Ga102 | FalconHal::Gh100)
    }

    /// Whether RISC-V activity is read from `CORE_SWITCH_RISCV_STATUS` rather than
    /// `NV_PRISCV_RISCV_CPUCTL` (`kflcnIsRiscvActive_TU102` on TU10x and GA100).
    pub fn riscv_status_in_core_switch(self) -> bool {
        matches!(self, FalconHal::Tu102 | FalconHal::Ga100)
    }

    /// Whether scrubbing is awaited in DMACTL (`kflcnWaitForResetToFinish_TU102`) rather than
    /// HWCFG2.MEM_SCRUBBING, which tu102/ga100's headers do not define.
    pub fn scrub_in_dmactl(self) -> bool {
        matches!(self, FalconHal::Tu102 | FalconHal::Ga100)
    }

    /// Whether RESET_READY is polled before a reset: HWCFG2 bit 31 is defined only in
    /// `ga102/dev_falcon_v4_addendum.h` (RM's `kflcnPreResetWait_GA102`, GA10x/AD10x; nvbare
    /// keeps the bounded poll on Hopper on as well).
    pub fn waits_for_reset_ready(self) -> bool {
        matches!(self, FalconHal::Ga102 | FalconHal::Gh100)
    }

    /// Whether heavy-secure ucode is DMA'd and checked by the boot ROM (`bBootFromHs`,
    /// `kgspExecuteHsFalcon_GA102`); TU10x and GA100 load it by PIO
    /// ([`Falcon::execute_hs_direct`]).
    pub fn boots_from_hs(self) -> bool {
        matches!(self, FalconHal::Ga102 | FalconHal::Gh100)
    }

    /// Whether the ucode fuse versions are read: TU10x returns 0 without a read
    /// (`kgspReadUcodeFuseVersion_b2b553`; `tu102/dev_fuse.h` has no such registers).
    pub fn reads_ucode_fuses(self) -> bool {
        !matches!(self, FalconHal::Tu102)
    }

    /// The fuse version a heavy-secure ucode's signature must match on this HAL.
    pub fn ucode_fuse_version<M: Mmio + ?Sized>(
        self,
        bar0: &M,
        engine: FuseEngine,
        ucode_id: u32,
    ) -> u32 {
        if self.reads_ucode_fuses() {
            ucode_fuse_version(bar0, engine, ucode_id)
        } else {
            0
        }
    }
}

/// The boot ROM's signature-check parameters of a heavy-secure ucode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BromParams {
    /// `BROM_PARAADDR(0)`: DMEM offset of the signature (`hsSigDmemAddr`).
    pub pkc_data_offset: u32,
    /// `BROM_ENGIDMASK`.
    pub engine_id_mask: u32,
    /// `BROM_CURR_UCODE_ID`.
    pub ucode_id: u32,
}

/// Where a heavy-secure ucode's parts go (`KernelGspFlcnUcodeBootFromHs`). DMEM is loaded
/// without a virtual tag (`FLCN_DMEM_VA_INVALID`), as both FWSEC and the booters are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HsLoad {
    /// Offset of the code in the image.
    pub code_offset: u32,
    /// IMEM physical destination.
    pub imem_pa: u32,
    /// IMEM virtual address (the IMEM tag and the boot vector).
    pub imem_va: u32,
    /// Code bytes.
    pub imem_size: u32,
    /// Offset of the data in the image.
    pub data_offset: u32,
    /// DMEM physical destination.
    pub dmem_pa: u32,
    /// Data bytes.
    pub dmem_size: u32,
    /// Boot ROM parameters.
    pub brom: BromParams,
}

impl HsLoad {
    /// Checks that both parts lie inside an image of `image_len` bytes, with the 256-byte DMA
    /// granule (the last transfer of each part reads up to the next 256-byte boundary).
    pub fn check(&self, image_len: usize, engine: &'static str) -> Result<(), FalconError> {
        let part = |off: u32, len: u32, what| {
            let end = (len as u64).next_multiple_of(FLCN_BLK_ALIGNMENT as u64) + off as u64;
            if len == 0 || end > image_len as u64 {
                Err(FalconError::BadLoad { engine, what })
            } else {
                Ok(())
            }
        };
        part(self.code_offset, self.imem_size, "code outside the image")?;
        part(self.data_offset, self.dmem_size, "data outside the image")?;
        if !self.imem_pa.is_multiple_of(FLCN_BLK_ALIGNMENT)
            || !self.imem_va.is_multiple_of(FLCN_BLK_ALIGNMENT)
            || !self.dmem_pa.is_multiple_of(FLCN_BLK_ALIGNMENT)
        {
            return Err(FalconError::BadLoad {
                engine,
                what: "IMEM/DMEM destinations must be 256-byte aligned",
            });
        }
        Ok(())
    }
}

/// A falcon engine `E` reached through BAR0.
pub struct Falcon<'a, E, M: ?Sized, C: ?Sized> {
    bar0: &'a M,
    clock: &'a C,
    hal: FalconHal,
    _engine: PhantomData<E>,
}

impl<E, M: ?Sized, C: ?Sized> fmt::Debug for Falcon<'_, E, M, C>
where
    E: FalconEngine,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Falcon")
            .field("engine", &E::NAME)
            .field("hal", &self.hal)
            .finish()
    }
}

fn timeout(engine: &'static str) -> impl Fn(PollError) -> FalconError {
    move |e| FalconError::Timeout {
        engine,
        what: e.what,
        waited: e.waited,
    }
}

impl<'a, E: FalconEngine, M: Mmio + ?Sized, C: Clock + ?Sized> Falcon<'a, E, M, C> {
    /// The falcon `E` of a chip using `hal`.
    pub fn new(bar0: &'a M, clock: &'a C, hal: FalconHal) -> Self {
        Falcon {
            bar0,
            clock,
            hal,
            _engine: PhantomData,
        }
    }

    fn poll(
        &self,
        t: Duration,
        interval: Duration,
        what: &'static str,
        mut cond: impl FnMut() -> bool,
    ) -> Result<(), FalconError> {
        let r: Result<(), PollError> =
            poll_until(self.clock, t, interval, what, || Ok(cond().then_some(())));
        r.map_err(timeout(E::NAME))
    }

    /// `NV_PFALCON_FALCON_HWCFG2`.
    pub fn hwcfg2(&self) -> NV_PFALCON_FALCON_HWCFG2 {
        NV_PFALCON_FALCON_HWCFG2::read_of::<E, _>(self.bar0)
    }

    /// Raw `NV_PFALCON_FALCON_HWCFG2` (0xbadf41xx while the PRIV target mask locks the engine
    /// to the FSP).
    pub fn hwcfg2_raw(&self) -> u32 {
        self.bar0.read32(NV_PFALCON_FALCON_HWCFG2::offset_of::<E>())
    }

    fn pre_reset_wait(&self) -> Result<(), FalconError> {
        if !self.hal.waits_for_reset_ready() {
            return Ok(());
        }
        // Bug 3419321: RESET_READY may never appear; OpenRM and nova-core go ahead anyway.
        let _ = self.poll(
            RESET_READY_TIMEOUT,
            Duration::from_micros(1),
            "HWCFG2.RESET_READY",
            || self.hwcfg2().reset_ready(),
        );
        Ok(())
    }

    fn reset_hw(&self) -> Result<(), FalconError> {
        let engine = |reset| NV_PFALCON_FALCON_ENGINE::new().with_reset(reset);
        match self.hal {
            FalconHal::Tu102 | FalconHal::Ga100 | FalconHal::Ga102 => {
                engine(true).write_of::<E, _>(self.bar0);
                for _ in 0..RESET_PROPAGATION_READS {
                    let _ = NV_PFALCON_FALCON_ENGINE::read_of::<E, _>(self.bar0);
                }
                engine(false).write_of::<E, _>(self.bar0);
                for _ in 0..RESET_PROPAGATION_READS {
                    let _ = NV_PFALCON_FALCON_ENGINE::read_of::<E, _>(self.bar0);
                }
                Ok(())
            }
            FalconHal::Gh100 => {
                let status = || NV_PFALCON_FALCON_ENGINE::read_of::<E, _>(self.bar0).reset_status();
                engine(true).write_of::<E, _>(self.bar0);
                self.poll(
                    RESET_STATUS_TIMEOUT,
                    Duration::from_micros(1),
                    "FALCON_ENGINE.RESET_STATUS = ASSERTED",
                    || status() == ENGINE_RESET_STATUS_ASSERTED,
                )?;
                engine(false).write_of::<E, _>(self.bar0);
                self.poll(
                    RESET_STATUS_TIMEOUT,
                    Duration::from_micros(1),
                    "FALCON_ENGINE.RESET_STATUS = DEASSERTED",
                    || status() == ENGINE_RESET_STATUS_DEASSERTED,
                )
            }
        }
    }

    fn wait_scrubbing(&self) -> Result<(), FalconError> {
        if self.hal.scrub_in_dmactl() {
            return self.wait_scrubbing_dmactl();
        }
        self.poll(
            MEM_SCRUB_TIMEOUT,
            Duration::from_micros(10),
            "IMEM/DMEM scrubbing (HWCFG2.MEM_SCRUBBING)",
            || {
                let h = self.hwcfg2_raw();
                is_register_value(h) && !NV_PFALCON_FALCON_HWCFG2::from(h).mem_scrubbing()
            },
        )
    }

    /// Resets the engine into falcon mode (`kflcnReset_TU102`, with the GA102 core switch where
    /// the chip has one).
    pub fn reset(&self) -> Result<(), FalconError> {
        self.pre_reset_wait()?;
        self.reset_hw()?;
        self.wait_scrubbing()?;
        if self.hal.has_core_switch() && self.hwcfg2().riscv() {
            let bcr = NV_PRISCV_RISCV_BCR_CTRL::read_of::<E, _>(self.bar0);
            if bcr.core_select_riscv() {
                NV_PRISCV_RISCV_BCR_CTRL::new().write_of::<E, _>(self.bar0);
                self.poll(
                    CORE_SELECT_TIMEOUT,
                    Duration::from_micros(1),
                    "BCR_CTRL.VALID after selecting the falcon core",
                    || NV_PRISCV_RISCV_BCR_CTRL::read_of::<E, _>(self.bar0).valid(),
                )?;
            }
        }
        let boot0: u32 = NV_PMC_BOOT_0::read(self.bar0).into();
        NV_PFALCON_FALCON_RM::new()
            .with_value(boot0)
            .write_of::<E, _>(self.bar0);
        Ok(())
    }

    /// Resets the engine and selects the RISC-V core with boot-ROM fetch
    /// (`kflcnResetIntoRiscv_GA102`; on TU10x/GA100 the plain reset, `kflcnResetIntoRiscv_TU102`).
    pub fn reset_into_riscv(&self) -> Result<(), FalconError> {
        if !self.hal.has_core_switch() {
            // `kflcnResetIntoRiscv_TU102`: no core switch, the plain reset leaves the core
            // ready to run RISC-V.
            return self.reset();
        }
        self.pre_reset_wait()?;
        self.reset_hw()?;
        self.wait_scrubbing()?;
        NV_PRISCV_RISCV_BCR_CTRL::new()
            .with_core_select_riscv(true)
            .with_valid(true)
            .with_brfetch(true)
            .write_of::<E, _>(self.bar0);
        Ok(())
    }

    /// Lets DMA use physical addresses without a bound context (`kflcnDisableCtxReq_TU102`).
    pub fn disable_ctx_req(&self) {
        NV_PFALCON_FBIF_CTL::update_of::<E, _>(self.bar0, |c| c.with_allow_phys_no_ctx(true));
        NV_PFALCON_FALCON_DMACTL::new().write_of::<E, _>(self.bar0);
    }

    /// Sets DMA aperture 0 to physical addresses in `target`
    /// ([`TRANSCFG_TARGET_COHERENT_SYSMEM`] for host memory).
    pub fn set_dma_target(&self, target: u8) {
        NV_PFALCON_FBIF_TRANSCFG::update_of::<E, _>(self.bar0, |t| {
            t.with_target(target).with_mem_type_physical(true)
        });
    }

    /// One DMA run of `len` bytes (`s_dmaTransfer_GA102`): source `src` (a device address,
    /// the base programmed once), `mem_off` added per block, destination `dest` in IMEM/DMEM.
    fn dma_transfer(
        &self,
        dest: u32,
        mem_off: u32,
        src: u64,
        len: u32,
        cmd: NV_PFALCON_FALCON_DMATRFCMD,
    ) -> Result<(), FalconError> {
        let cmd_reg = || NV_PFALCON_FALCON_DMATRFCMD::read_of::<E, _>(self.bar0);
        let not_full = || {
            self.poll(
                DMA_TIMEOUT,
                Duration::from_micros(1),
                "DMATRFCMD.FULL to clear",
                || {
                    let c = cmd_reg();
                    is_register_value(u32::from(c)) && !c.full()
                },
            )
        };
        not_full()?;
        if src & 0xff != 0 || src >> 49 != 0 {
            return Err(FalconError::BadLoad {
                engine: E::NAME,
                what: "DMA source must be 256-byte aligned and below 2^49",
            });
        }
        NV_PFALCON_FALCON_DMATRFBASE::new()
            .with_base((src >> 8) as u32)
            .write_of::<E, _>(self.bar0);
        NV_PFALCON_FALCON_DMATRFBASE1::new()
            .with_base(((src >> 40) & 0x1ff) as u16)
            .write_of::<E, _>(self.bar0);
        let mut done = 0u32;
        while done < len {
            not_full()?;
            let (d, m) = (dest.checked_add(done), mem_off.checked_add(done));
            let (Some(d), Some(m)) = (d, m) else {
                return Err(FalconError::BadLoad {
                    engine: E::NAME,
                    what: "DMA offsets overflow",
                });
            };
            self.write_dmatrfmoffs(d)?;
            NV_PFALCON_FALCON_DMATRFFBOFFS::new()
                .with_offs(m)
                .write_of::<E, _>(self.bar0);
            cmd.write_of::<E, _>(self.bar0);
            done = done.saturating_add(FLCN_BLK_ALIGNMENT);
        }
        self.poll(
            DMA_TIMEOUT,
            Duration::from_micros(1),
            "DMATRFCMD.IDLE",
            || {
                let c = cmd_reg();
                is_register_value(u32::from(c)) && c.idle()
            },
        )
    }

    /// DMAs the two parts of a heavy-secure ucode from `image_addr` (device address of the
    /// image in memory the falcon reaches through aperture 0).
    pub fn dma_load_hs(&self, image_addr: u64, load: &HsLoad) -> Result<(), FalconError> {
        let base = NV_PFALCON_FALCON_DMATRFCMD::new()
            .with_size(DMATRFCMD_SIZE_256B)
            .with_ctxdma(0);
        // IMEM: the source is biased by -imem_va so that the per-block offset can be the
        // virtual address (the IMEM tag).
        let src = image_addr
            .checked_add(load.code_offset as u64)
            .and_then(|a| a.checked_sub(load.imem_va as u64))
            .ok_or(FalconError::BadLoad {
                engine: E::NAME,
                what: "IMEM virtual address beyond the image address",
            })?;
        self.dma_transfer(
            load.imem_pa,
            load.imem_va,
            src,
            load.imem_size,
            base.with_imem(true).with_sec(1),
        )?;
        let src = image_addr
            .checked_add(load.data_offset as u64)
            .ok_or(FalconError::BadLoad {
                engine: E::NAME,
                what: "data offset overflows",
            })?;
        self.dma_transfer(load.dmem_pa, 0, src, load.dmem_size, base.with_imem(false))
    }

    /// Programs the boot ROM's signature parameters (`kgspExecuteHsFalcon_GA102`); TU10x and
    /// GA100 have none of these registers (`kgspExecuteHsFalcon_TU102` never writes them).
    pub fn program_brom(&self, p: &BromParams) -> Result<(), FalconError> {
        if !self.hal.boots_from_hs() {
            return Err(self.unsupported("programming the boot ROM (BROM_*, MOD_SEL)"));
        }
        NV_PFALCON2_FALCON_BROM_PARAADDR::new()
            .with_val(p.pkc_data_offset)
            .write_of::<E, _>(self.bar0);
        NV_PFALCON2_FALCON_BROM_ENGIDMASK::new()
            .with_val(p.engine_id_mask)
            .write_of::<E, _>(self.bar0);
        NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID::new()
            .with_val(p.ucode_id as u8)
            .write_of::<E, _>(self.bar0);
        NV_PFALCON2_FALCON_MOD_SEL::new()
            .with_algo(MOD_SEL_ALGO_RSA3K)
            .write_of::<E, _>(self.bar0);
        Ok(())
    }

    /// Writes both mailboxes.
    pub fn write_mailboxes(&self, mbox0: u32, mbox1: u32) {
        NV_PFALCON_FALCON_MAILBOX0::new()
            .with_data(mbox0)
            .write_of::<E, _>(self.bar0);
        NV_PFALCON_FALCON_MAILBOX1::new()
            .with_data(mbox1)
            .write_of::<E, _>(self.bar0);
    }

    /// Reads both mailboxes.
    pub fn mailboxes(&self) -> (u32, u32) {
        (
            NV_PFALCON_FALCON_MAILBOX0::read_of::<E, _>(self.bar0).data(),
            NV_PFALCON_FALCON_MAILBOX1::read_of::<E, _>(self.bar0).data(),
        )
    }

    /// Starts the falcon CPU (through CPUCTL_ALIAS when ALIAS_EN is set; `kflcnStartCpu_TU102`).
    pub fn start_cpu(&self) {
        if NV_PFALCON_FALCON_CPUCTL::read_of::<E, _>(self.bar0).alias_en() {
            NV_PFALCON_FALCON_CPUCTL_ALIAS::new()
                .with_startcpu(true)
                .write_of::<E, _>(self.bar0);
        } else {
            NV_PFALCON_FALCON_CPUCTL::new()
                .with_startcpu(true)
                .write_of::<E, _>(self.bar0);
        }
    }

    /// Whether the falcon CPU has halted (a PRI-error or all-ones read is not a halt).
    pub fn is_halted(&self) -> bool {
        let c = self.bar0.read32(NV_PFALCON_FALCON_CPUCTL::offset_of::<E>());
        is_register_value(c) && NV_PFALCON_FALCON_CPUCTL::from(c).halted()
    }

    /// Waits for the falcon CPU to halt.
    pub fn wait_halted(&self, t: Duration) -> Result<(), FalconError> {
        self.poll(
            t,
            Duration::from_micros(10),
            "the falcon CPU to halt",
            || self.is_halted(),
        )
    }

    /// Runs a heavy-secure ucode whose image is at device address `image_addr` (`image_len`
    /// bytes, in memory aperture 0 reaches) and waits for it to halt; returns the mailboxes.
    /// The caller resets the falcon first, as OpenRM's callers do.
    pub fn execute_hs(
        &self,
        image_addr: u64,
        image_len: usize,
        load: &HsLoad,
        mailboxes: Option<(u32, u32)>,
        target: u8,
    ) -> Result<(u32, u32), FalconError> {
        if !self.hal.boots_from_hs() {
            return Err(self.unsupported("the boot-ROM (DMA) heavy-secure load"));
        }
        load.check(image_len, E::NAME)?;
        self.disable_ctx_req();
        self.set_dma_target(target);
        self.dma_load_hs(image_addr, load)?;
        self.program_brom(&load.brom)?;
        NV_PFALCON_FALCON_BOOTVEC::new()
            .with_vec(load.imem_va)
            .write_of::<E, _>(self.bar0);
        if let Some((m0, m1)) = mailboxes {
            self.write_mailboxes(m0, m1);
        }
        self.start_cpu();
        self.wait_halted(HS_HALT_TIMEOUT)?;
        Ok(self.mailboxes())
    }

    /// Loads `data` into IMEM at `imem_pa` by PIO, tagging each 256-byte block with the virtual
    /// address `imem_va` onwards; `secure` marks the blocks secure. `data` is zero-padded to
    /// 256 bytes.
    pub fn load_imem_pio(
        &self,
        imem_pa: u32,
        imem_va: u32,
        data: &[u8],
        secure: bool,
    ) -> Result<(), FalconError> {
        if !imem_pa.is_multiple_of(FLCN_BLK_ALIGNMENT)
            || !imem_va.is_multiple_of(FLCN_BLK_ALIGNMENT)
        {
            return Err(FalconError::BadLoad {
                engine: E::NAME,
                what: "IMEM PIO addresses must be 256-byte aligned",
            });
        }
        self.write_imemc(imem_pa, secure)?;
        for (i, block) in data.chunks(FLCN_BLK_ALIGNMENT as usize).enumerate() {
            NV_PFALCON_FALCON_IMEMT::new()
                .with_tag(((imem_va >> 8) as usize + i) as u16)
                .write_of::<E, _>(self.bar0);
            for w in 0..(FLCN_BLK_ALIGNMENT as usize / 4) {
                let mut b = [0u8; 4];
                if let Some(src) = block.get(w * 4..) {
                    let n = src.len().min(4);
                    b[..n].copy_from_slice(&src[..n]);
                }
                NV_PFALCON_FALCON_IMEMD::new()
                    .with_data(u32::from_le_bytes(b))
                    .write_of::<E, _>(self.bar0);
            }
        }
        Ok(())
    }

    /// Loads `data` into DMEM at `dmem_pa` (4-byte aligned) by PIO; the last word is
    /// zero-padded.
    pub fn load_dmem_pio(&self, dmem_pa: u32, data: &[u8]) -> Result<(), FalconError> {
        if !dmem_pa.is_multiple_of(4) {
            return Err(FalconError::BadLoad {
                engine: E::NAME,
                what: "DMEM PIO address must be 4-byte aligned",
            });
        }
        self.write_dmemc(dmem_pa, true, false)?;
        for c in data.chunks(4) {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            NV_PFALCON_FALCON_DMEMD::new()
                .with_data(u32::from_le_bytes(b))
                .write_of::<E, _>(self.bar0);
        }
        Ok(())
    }

    /// Reads DMEM at `dmem_pa` (4-byte aligned) by PIO into `out`.
    pub fn read_dmem_pio(&self, dmem_pa: u32, out: &mut [u8]) -> Result<(), FalconError> {
        if !dmem_pa.is_multiple_of(4) {
            return Err(FalconError::BadLoad {
                engine: E::NAME,
                what: "DMEM PIO address must be 4-byte aligned",
            });
        }
        self.write_dmemc(dmem_pa, false, true)?;
        for c in out.chunks_mut(4) {
            let w = NV_PFALCON_FALCON_DMEMD::read_of::<E, _>(self.bar0).data();
            let n = c.len();
            c.copy_from_slice(&w.to_le_bytes()[..n]);
        }
        Ok(())
    }

    /// `NV_PRISCV_RISCV_CPUCTL`, on the chips that have it (GA102 on).
    pub fn riscv_cpuctl(&self) -> Option<NV_PRISCV_RISCV_CPUCTL> {
        (!self.hal.riscv_status_in_core_switch())
            .then(|| NV_PRISCV_RISCV_CPUCTL::read_of::<E, _>(self.bar0))
    }

    /// Whether the RISC-V core runs (`kflcnIsRiscvActive_GA102`). A read that did not reach
    /// the register (all ones, or a PRI error such as `0xbadf41xx` while the FSP holds the
    /// GSP's PRIV target mask) says nothing, so it is not "active".
    pub fn is_riscv_active(&self) -> bool {
        if self.hal.riscv_status_in_core_switch() {
            return self.is_riscv_active_tu102();
        }
        let c = self.bar0.read32(NV_PRISCV_RISCV_CPUCTL::offset_of::<E>());
        is_register_value(c) && NV_PRISCV_RISCV_CPUCTL::from(c).active_stat()
    }

    /// Whether the RISC-V core has halted (`CPUCTL.HALTED`, `kflcnWaitForHaltRiscv_GA102`). A
    /// read that did not reach the register is not a halt: the open driver tests bit 4 of
    /// whatever it reads, so a `0xbadf41xx` whose low byte has bit 4 set would count there.
    pub fn is_riscv_halted(&self) -> bool {
        if self.hal.riscv_status_in_core_switch() {
            // No RISC-V halt status on TU10x/GA100 (`kflcnWaitForHaltRiscv_5baef9` there).
            return false;
        }
        let c = self.bar0.read32(NV_PRISCV_RISCV_CPUCTL::offset_of::<E>());
        is_register_value(c) && NV_PRISCV_RISCV_CPUCTL::from(c).halted()
    }

    /// Waits until the RISC-V core runs.
    pub fn wait_riscv_active(&self, t: Duration) -> Result<(), FalconError> {
        self.poll(
            t,
            Duration::from_millis(1),
            "the RISC-V core to become active",
            || self.is_riscv_active(),
        )
    }

    /// Waits until the RISC-V core halts (`kflcnWaitForHaltRiscv_GA102`).
    pub fn wait_riscv_halted(&self, t: Duration) -> Result<(), FalconError> {
        if self.hal.riscv_status_in_core_switch() {
            return Err(self.unsupported("waiting for the RISC-V core to halt"));
        }
        self.poll(
            t,
            Duration::from_micros(100),
            "the RISC-V core to halt",
            || self.is_riscv_halted(),
        )
    }

    /// Points the RISC-V boot ROM at an FMC in host memory and starts the core: the GH100 boot
    /// without an FSP (`_kgspBootstrapGspFmc_GH100`). Addresses are device addresses.
    pub fn boot_fmc_direct(&self, code: u64, data: u64, manifest: u64) {
        let split = |a: u64| ((a >> 8) as u32, ((a >> 40) & 0xfff) as u16);
        let (lo, hi) = split(code);
        NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_LO::new()
            .with_val(lo)
            .write_of::<E, _>(self.bar0);
        NV_PRISCV_RISCV_BCR_DMAADDR_FMCCODE_HI::new()
            .with_val(hi)
            .write_of::<E, _>(self.bar0);
        let (lo, hi) = split(data);
        NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_LO::new()
            .with_val(lo)
            .write_of::<E, _>(self.bar0);
        NV_PRISCV_RISCV_BCR_DMAADDR_FMCDATA_HI::new()
            .with_val(hi)
            .write_of::<E, _>(self.bar0);
        let (lo, hi) = split(manifest);
        NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_LO::new()
            .with_val(lo)
            .write_of::<E, _>(self.bar0);
        NV_PRISCV_RISCV_BCR_DMAADDR_PKCPARAM_HI::new()
            .with_val(hi)
            .write_of::<E, _>(self.bar0);
        NV_PRISCV_RISCV_BCR_DMACFG::new()
            .with_target(BCR_DMACFG_TARGET_COHERENT_SYSMEM)
            .with_lock(true)
            .write_of::<E, _>(self.bar0);
        NV_PRISCV_RISCV_BCR_CTRL::new()
            .with_core_select_riscv(true)
            .with_valid(true)
            .with_brfetch(true)
            .write_of::<E, _>(self.bar0);
        NV_PRISCV_RISCV_CPUCTL::new()
            .with_startcpu(true)
            .write_of::<E, _>(self.bar0);
    }

    /// Writes `NV_PFALCON_FALCON_OS` (GSP-RM's app version after boot).
    pub fn write_os_version(&self, version: u32) {
        NV_PFALCON_FALCON_OS::new()
            .with_version(version)
            .write_of::<E, _>(self.bar0);
    }
}

/// Which fuse array holds the version of a ucode with engine id mask `engine_id_mask`
/// (nova-core: bit 0x1 SEC2, 0x4 NVDEC, 0x400 GSP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuseEngine {
    /// `NV_FUSE_OPT_FPF_SEC2_UCODE*_VERSION`.
    Sec2,
    /// `NV_FUSE_OPT_FPF_NVDEC_UCODE*_VERSION`.
    Nvdec,
    /// `NV_FUSE_OPT_FPF_GSP_UCODE*_VERSION`.
    Gsp,
}

impl FuseEngine {
    /// The fuse array for an engine id mask, if the mask names one.
    pub fn from_engine_id_mask(mask: u32) -> Option<FuseEngine> {
        if mask & 0x1 != 0 {
            Some(FuseEngine::Sec2)
        } else if mask & 0x4 != 0 {
            Some(FuseEngine::Nvdec)
        } else if mask & 0x400 != 0 {
            Some(FuseEngine::Gsp)
        } else {
            None
        }
    }
}

/// Reads the fuse version a heavy-secure ucode's signature must match (ucode ids are 1-based;
/// an id outside 1..=16 reads as version 0, as in OpenRM).
pub fn ucode_fuse_version<M: Mmio + ?Sized>(bar0: &M, engine: FuseEngine, ucode_id: u32) -> u32 {
    let Some(index) = ucode_id.checked_sub(1) else {
        return 0;
    };
    let raw: Result<u32, HalError> = match engine {
        FuseEngine::Sec2 => {
            NV_FUSE_OPT_FPF_SEC2_UCODE_VERSION::try_read(bar0, index).map(u32::from)
        }
        FuseEngine::Nvdec => {
            NV_FUSE_OPT_FPF_NVDEC_UCODE_VERSION::try_read(bar0, index).map(u32::from)
        }
        FuseEngine::Gsp => NV_FUSE_OPT_FPF_GSP_UCODE_VERSION::try_read(bar0, index).map(u32::from),
    };
    match raw {
        // The DATA field is 15:0; an unreadable register (all ones) means no GPU answered.
        Ok(v) if v != u32::MAX => fuse_version(v & 0xffff),
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_chip_registers;
