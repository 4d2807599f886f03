//! The Hopper and Blackwell boot (`BootMethod::FspChainOfTrust`, `kgspBootstrap_GH100`): the
//! FSP verifies the GSP-FMC named in an `NVDM_PAYLOAD_COT` message and starts it; the GSP-FMC
//! places WPR2 and starts GSP-RM; at unload it takes WPR2 down once the RISC-V core halts.

use core::time::Duration;

use zerocopy::IntoBytes;

use crate::chip::{ChipInfo, Chipset};
use crate::falcon::{Falcon, FalconHal};
use crate::gsp::sysinfo::GspStaticConfigInfo;
use crate::hal::{Clock, DmaAllocator, DmaBuffer, Mmio, PciConfig, is_register_value};
use crate::mm::FbLayout;
use crate::regs::falcon::Gsp;
use crate::regs::fsp::{
    FSP_BOOT_COMPLETE_SUCCESS, NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2, NV_PFSP_MSGQ_HEAD,
    NV_PFSP_MSGQ_TAIL, NV_PFSP_QUEUE_HEAD, NV_PFSP_QUEUE_TAIL, NV_THERM_I2CS_SCRATCH, ThermGb202,
    ThermGh100,
};
use crate::regs::{RegisterArray, RelativeRegister};

use super::abi::{
    GSP_ACR_BOOT_GSP_RM_PARAMS, GSP_DMA_TARGET_COHERENT_SYSTEM, GSP_DMA_TARGET_NONCOHERENT_SYSTEM,
    GSP_FMC_BOOT_PARAMS, GSP_RM_PARAMS, GspFwWprMeta, NVDM_PAYLOAD_COT, NVDM_TYPE_COT,
};
use super::firmware::BootFirmware;
use super::fsp::Fsp;
use super::layout::{self, FRTS_SIZE, WprParams};
use super::memory::{BootMemory, copy_to_dma};
use super::run::{Quiesce, Run};
use super::{
    BootError, BootErrorKind, BootHw, BootObserver, BootPhase, FAILED_BOOT_HALT_TIMEOUT,
    GFW_BOOT_TIMEOUT, HALT_TIMEOUT, LOCKDOWN_TIMEOUT, Method, MethodState, PRIV_TARGET_LOCKED,
    Prepared, TARGET_MASK_TIMEOUT, WPR2_CLEAR_TIMEOUT, cot_version, fw_err, hal_err, poll, wpr2,
};

/// The GSP-FMC image and its `GSP_FMC_BOOT_PARAMS`, which the GSP-FMC reads while it runs.
#[derive(Debug)]
pub(super) struct FmcMemory<B> {
    pub(super) image: B,
    pub(super) params: B,
}

/// The chain-of-trust boot between its steps (nothing to carry: the FMC comes from the
/// firmware set when the chain of trust starts).
pub(super) struct ChainOfTrust;

pub(super) fn is_gb20x(c: Chipset) -> bool {
    matches!(
        c,
        Chipset::GB202 | Chipset::GB203 | Chipset::GB205 | Chipset::GB206 | Chipset::GB207
    )
}

/// `NV_THERM_I2CS_SCRATCH`, where the FSP reports its secure boot.
fn i2cs_scratch(info: &ChipInfo) -> usize {
    if is_gb20x(info.chipset) {
        NV_THERM_I2CS_SCRATCH::offset_of::<ThermGb202>()
    } else {
        NV_THERM_I2CS_SCRATCH::offset_of::<ThermGh100>()
    }
}

impl<D: DmaAllocator, F: BootFirmware> Method<D, F> for ChainOfTrust {
    fn wait_gfw_boot<M: Mmio + ?Sized, C: Clock + ?Sized>(
        bar0: &M,
        clock: &C,
        info: &ChipInfo,
    ) -> Result<(), BootErrorKind> {
        let off = i2cs_scratch(info);
        poll(
            clock,
            GFW_BOOT_TIMEOUT,
            Duration::from_millis(1),
            "the FSP's secure boot (NV_THERM_I2CS_SCRATCH = 0xff)",
            || bar0.read32(off) == FSP_BOOT_COMPLETE_SUCCESS,
        )
    }

    fn prepare<M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized>(
        _fw: &F,
        _run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<Self, BootError> {
        Ok(ChainOfTrust)
    }

    fn layout<M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized>(
        &self,
        meta: &mut GspFwWprMeta,
        params: &WprParams,
        fb_size: u64,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<(), BootError> {
        layout::layout_gh100(meta, params, fb_size);
        run.detail(format_args!(
            "FB {} MiB; WPR heap {} MiB; the GSP-FMC places WPR2",
            fb_size >> 20,
            meta.gspFwHeapSize >> 20
        ));
        Ok(())
    }

    fn start<M: Mmio, C: Clock, P: PciConfig, O: BootObserver + ?Sized>(
        self,
        hw: &BootHw<M, D, C, P>,
        fw: &F,
        p: &Prepared<'_, D::Buffer>,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<MethodState<D::Buffer>, BootError> {
        let fmc = send_cot(hw, fw, p, run)?;
        wait_lockdown(hw, p, fmc.params.dev_addr(), run)?;
        Ok(MethodState::ChainOfTrust(fmc))
    }
}

/// Copies the FMC and its boot parameters to DMA memory and sends the FSP the chain of trust;
/// the FSP's answer must be success.
fn send_cot<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    p: &Prepared<'_, D::Buffer>,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<FmcMemory<D::Buffer>, BootError>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let mem = Some(p.mem);
    run.begin(BootPhase::FspChainOfTrust);
    let fmc = fw.fmc().map_err(|e| run.fail(fw_err(e), mem))?;
    let fmc_buf = copy_to_dma(&hw.dma, fmc.image).map_err(|e| run.fail(hal_err(e), mem))?;
    let params_buf = hw
        .dma
        .alloc_dma(4096)
        .map_err(|e| run.fail(hal_err(e), mem))?;
    // The targets as `kgspSetupGspFmcArgs_GH100` picks them (`_kgspMemdescToDmaTarget`):
    // the WPR metadata is cached sysmem (COHERENT), the LIBOS arguments uncached
    // (NONCOHERENT); nouveau and nova-core send the same. tinygrad sends COHERENT for both.
    let boot_params = GSP_FMC_BOOT_PARAMS {
        bootGspRmParams: GSP_ACR_BOOT_GSP_RM_PARAMS {
            target: GSP_DMA_TARGET_COHERENT_SYSTEM,
            gspRmDescSize: core::mem::size_of::<GspFwWprMeta>() as u32,
            gspRmDescOffset: p.mem.wpr_meta.dev_addr(),
            bIsGspRmBoot: 1,
            ..Default::default()
        },
        gspRmParams: GSP_RM_PARAMS {
            target: GSP_DMA_TARGET_NONCOHERENT_SYSTEM,
            _pad: 0,
            bootArgsOffset: p.mem.libos.dev_addr(),
        },
        ..Default::default()
    };
    params_buf
        .write(0, boot_params.as_bytes())
        .map_err(|e| run.fail(hal_err(e), mem))?;
    let cot = NVDM_PAYLOAD_COT {
        version: cot_version(p.info),
        size: core::mem::size_of::<NVDM_PAYLOAD_COT>() as u16,
        gspFmcSysmemOffset: fmc_buf.dev_addr(),
        frtsSysmemOffset: 0,
        frtsSysmemSize: 0,
        frtsVidmemOffset: p.params.frts_vidmem_offset(),
        frtsVidmemSize: FRTS_SIZE as u32,
        hash384: fmc.hash,
        publicKey: fmc.public_key,
        signature: fmc.signature,
        gspBootArgsSysmemOffset: params_buf.dev_addr(),
    };
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    // From here the FSP may start the GSP-FMC on this memory, whatever it answers.
    run.quiesce = Quiesce::WaitHalt(p.hal);
    let fsp = Fsp::new(&hw.bar0, &hw.clock);
    fsp.command(NVDM_TYPE_COT, cot.as_bytes())
        .map_err(|e| run.fail(BootErrorKind::Fsp(e), mem))?;
    run.detail(format_args!(
        "COT v{} accepted: FMC {} KiB at {:#x}, boot params at {:#x}, FRTS {:#x} from the \
         end of FB",
        cot_version(p.info),
        fmc.image.len() >> 10,
        fmc_buf.dev_addr(),
        params_buf.dev_addr(),
        p.params.frts_vidmem_offset()
    ));
    run.end();
    Ok(FmcMemory {
        image: fmc_buf,
        params: params_buf,
    })
}

/// Waits for the FSP to release the GSP's PRIV target mask, then for the GSP-FMC to release
/// the RISC-V lockdown; a non-zero MAILBOX0 other than the boot parameters is an FMC error.
fn wait_lockdown<M, D, C, P, O>(
    hw: &BootHw<M, D, C, P>,
    p: &Prepared<'_, D::Buffer>,
    params_addr: u64,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<(), BootError>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    O: BootObserver + ?Sized,
{
    let mem = Some(p.mem);
    let clock = &hw.clock;
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(&hw.bar0, clock, p.hal);
    run.begin(BootPhase::WaitLockdown);
    poll(
        clock,
        TARGET_MASK_TIMEOUT,
        Duration::from_micros(100),
        "the FSP to release the GSP's PRIV target mask",
        || {
            // `_kfspIsGspTargetMaskReleased` waits out 0xbadf41xx; any other PRI error says
            // as little about the GSP, so it is waited out too.
            let h = gsp.hwcfg2_raw();
            h != 0 && h & 0xffff_ff00 != PRIV_TARGET_LOCKED && is_register_value(h)
        },
    )
    .map_err(|k| run.fail(k, mem))?;
    poll(
        clock,
        LOCKDOWN_TIMEOUT,
        Duration::from_micros(100),
        "the GSP-FMC to release the RISC-V lockdown (HWCFG2.RISCV_BR_PRIV_LOCKDOWN)",
        || {
            let (m0, m1) = gsp.mailboxes();
            if !is_register_value(m0) || !is_register_value(gsp.hwcfg2_raw()) {
                return false;
            }
            if m0 != 0 {
                // Still the boot arguments the FSP put there, or an FMC error code.
                let args = m0 == params_addr as u32 && m1 == (params_addr >> 32) as u32;
                return !args;
            }
            !gsp.hwcfg2().riscv_br_priv_lockdown()
        },
    )
    .map_err(|k| run.fail(k, mem))?;
    let (m0, _) = gsp.mailboxes();
    if m0 != 0 {
        return Err(run.fail(BootErrorKind::FmcError { mailbox0: m0 }, mem));
    }
    run.end();
    Ok(())
}

/// The reservations after boot: WPR2 as the GSP-FMC placed it, and what GSP-RM reports.
pub(super) fn fb_layout<M: Mmio + ?Sized>(
    bar0: &M,
    fb_size: u64,
    params: &WprParams,
    si: &GspStaticConfigInfo,
) -> Result<FbLayout, BootErrorKind> {
    let (lo, hi, _) = wpr2(bar0);
    layout::fb_layout_gh100(
        fb_size,
        params,
        lo,
        hi.saturating_add(4096),
        Some(si.fwWprLayoutOffset[0]),
    )
    .map_err(BootErrorKind::Layout)
}

/// The unload once GSP-RM has suspended: the RISC-V core must halt, then the GSP-FMC takes
/// WPR2 down.
pub(super) fn unload<M, C, O, B>(
    hal: FalconHal,
    run: &mut Run<'_, '_, M, C, O>,
    mem: Option<&BootMemory<B>>,
) -> Result<(), BootError>
where
    M: Mmio + ?Sized,
    C: Clock + ?Sized,
    O: BootObserver + ?Sized,
    B: DmaBuffer,
{
    let (bar0, clock) = (run.bar0, run.clock);
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, hal);
    run.begin(BootPhase::WaitHalt);
    gsp.wait_riscv_halted(HALT_TIMEOUT)
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
    if poll(
        clock,
        WPR2_CLEAR_TIMEOUT,
        Duration::from_micros(100),
        "WPR2 to go down after the GSP halted",
        || !wpr2(bar0).2,
    )
    .is_err()
    {
        let hi = wpr2(bar0).1;
        return Err(run.fail(BootErrorKind::Wpr2StillUp { wpr2_hi: hi }, mem));
    }
    run.end();
    Ok(())
}

/// After a failed boot: waits for the GSP RISC-V core to halt, since the GSP-FMC or GSP-RM may
/// still read the boot's memory. Returns whether it halted.
pub(super) fn stop_after_failure<M, C, O>(run: &mut Run<'_, '_, M, C, O>, hal: FalconHal) -> bool
where
    M: Mmio + ?Sized,
    C: Clock + ?Sized,
    O: BootObserver + ?Sized,
{
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(run.bar0, run.clock, hal);
    let t0 = run.clock.now();
    let halted = poll(
        run.clock,
        FAILED_BOOT_HALT_TIMEOUT,
        Duration::from_millis(1),
        "the GSP RISC-V core to halt after the failure",
        || gsp.is_riscv_halted(),
    )
    .is_ok();
    if halted {
        let took = run.clock.now().saturating_sub(t0);
        run.detail(format_args!(
            "after the failure: the GSP RISC-V core halted ({took:?}); its boot memory is freed"
        ));
    }
    halted
}

/// The FSP registers of a failure report.
pub(super) fn snapshot(info: &ChipInfo, put: &mut dyn FnMut(&'static str, usize)) {
    put("NV_THERM_I2CS_SCRATCH (FSP boot)", i2cs_scratch(info));
    for (i, name) in [
        "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(0)",
        "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(1)",
        "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(2)",
        "NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2(3)",
    ]
    .into_iter()
    .enumerate()
    {
        if let Ok(o) = NV_PFSP_FALCON_COMMON_SCRATCH_GROUP_2::offset(i as u32) {
            put(name, o);
        }
    }
    for (name, off) in [
        ("NV_PFSP_QUEUE_HEAD(0)", NV_PFSP_QUEUE_HEAD::offset(0)),
        ("NV_PFSP_QUEUE_TAIL(0)", NV_PFSP_QUEUE_TAIL::offset(0)),
        ("NV_PFSP_MSGQ_HEAD(0)", NV_PFSP_MSGQ_HEAD::offset(0)),
        ("NV_PFSP_MSGQ_TAIL(0)", NV_PFSP_MSGQ_TAIL::offset(0)),
    ] {
        if let Ok(o) = off {
            put(name, o);
        }
    }
}
