//! The Turing-Ada boot (`BootMethod::Booter`, `kgspBootstrap_TU102`): FWSEC-FRTS on the GSP
//! falcon puts WPR2 up at the FRTS offset, booter_load on SEC2 loads GSP-RM into it; at unload
//! FWSEC-SB and booter_unload take it down again.

use core::time::Duration;

use crate::chip::ChipInfo;
use crate::falcon::{Falcon, FalconEngine, FalconHal, GenericBl, HsDirectLoad, HsLoaderLoad};
use crate::hal::{Clock, DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig, is_register_value};
use crate::mm::FbLayout;
use crate::regs::falcon::{
    Gsp, NV_PFALCON_FALCON_CPUCTL, NV_PFALCON_FALCON_MAILBOX0, NV_PFALCON_FALCON_MAILBOX1, Sec2,
    TRANSCFG_TARGET_COHERENT_SYSMEM,
};
use crate::regs::pbus::{
    FWSECLIC_SCRATCH_INDEX_0E, FWSECLIC_SCRATCH_INDEX_15, NV_PBUS_VBIOS_SCRATCH, NV_PROM_DATA,
    PROM_WINDOW_SIZE, frts_err_code, sb_err_code,
};
use crate::regs::pgc6::{
    GFW_BOOT_PROGRESS_COMPLETED, NV_PGC6_AON_SECURE_SCRATCH_GROUP_05,
    NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK,
};
use crate::regs::{Register, RegisterArray, RelativeRegister};

use super::abi::GspFwWprMeta;
use super::firmware::{
    BootFirmware, BooterKind, FwsecCommand, HsUcode, LoaderUcode, VbiosFirmware,
};
use super::layout::{self, FRTS_SIZE, WprParams};
use super::memory::{BootMemory, copy_to_dma};
use super::run::{Quiesce, Run};
use super::{
    BootError, BootErrorKind, BootHw, BootObserver, BootPhase, GFW_BOOT_TIMEOUT, Method,
    MethodState, Prepared, fuse_for, fw_err, hal_err, poll, wpr2,
};

/// A heavy-secure ucode kept in DMA memory for the unload.
#[derive(Debug)]
pub(super) struct PreparedUcode<B> {
    buf: B,
    load: crate::falcon::HsLoad,
    direct: HsDirectLoad,
}

impl<B: DmaBuffer> PreparedUcode<B> {
    fn at(&self) -> UcodeAt {
        (self.buf.dev_addr(), self.buf.len(), self.load)
    }

    /// Runs it on falcon `E` as the chip loads heavy-secure ucode: DMA through the boot ROM
    /// (`kgspExecuteHsFalcon_GA102`) or PIO from this buffer (`kgspExecuteHsFalcon_TU102`).
    fn execute<E: FalconEngine, M: Mmio + ?Sized, C: Clock + ?Sized>(
        &self,
        falcon: &Falcon<'_, E, M, C>,
        hal: FalconHal,
        mailboxes: Option<(u32, u32)>,
    ) -> Result<(u32, u32), crate::falcon::FalconError> {
        if hal.boots_from_hs() {
            falcon.execute_hs(
                self.buf.dev_addr(),
                self.buf.len(),
                &self.load,
                mailboxes,
                TRANSCFG_TARGET_COHERENT_SYSMEM,
            )
        } else {
            falcon.execute_hs_direct_dma(&self.buf, &self.direct, mailboxes)
        }
    }
}

/// FWSEC for the generic bootloader (TU10x, GA100), kept in DMA memory: the bootloader's code
/// and the ucode's code and data buffers.
#[derive(Debug)]
pub(super) struct LoaderPrepared<B> {
    bl: B,
    bl_desc: GenericBl,
    code: B,
    data: B,
    load: HsLoaderLoad,
}

impl<B: DmaBuffer> LoaderPrepared<B> {
    fn execute<E: FalconEngine, M: Mmio + ?Sized, C: Clock + ?Sized>(
        &self,
        falcon: &Falcon<'_, E, M, C>,
    ) -> Result<(u32, u32), crate::falcon::FalconError> {
        falcon.execute_hs_with_loader(
            &self.bl,
            &self.bl_desc,
            self.code.dev_addr(),
            self.data.dev_addr(),
            &self.load,
        )
    }
}

/// FWSEC-SB as the chip runs it.
#[derive(Debug)]
pub(super) enum FwsecSb<B> {
    /// Booted from heavy-secure ROM (GA102 on).
    Hs(PreparedUcode<B>),
    /// Through the generic bootloader (TU10x, GA100).
    Loader(LoaderPrepared<B>),
}

/// What the Turing-Ada unload runs (prepared at boot, as nova-core's `UnloadBundle`).
#[derive(Debug)]
pub(super) struct UnloadBundle<B> {
    fwsec_sb: FwsecSb<B>,
    booter_unload: PreparedUcode<B>,
}

/// A heavy-secure ucode in DMA memory the boot still owns: (device address, bytes, load).
pub(super) type UcodeAt = (u64, usize, crate::falcon::HsLoad);

/// The booter boot between its steps: the parsed VBIOS (FWSEC comes from it).
pub(super) struct Booter<V> {
    vbios: V,
}

/// Puts FWSEC for the generic bootloader, and the bootloader, in DMA memory.
fn prepare_loader<D: DmaAllocator, F: BootFirmware>(
    dma: &D,
    fw: &F,
    u: LoaderUcode<<F::Vbios as VbiosFirmware>::Image>,
) -> Result<LoaderPrepared<D::Buffer>, BootErrorKind> {
    let bl = fw.generic_bootloader().map_err(fw_err)?;
    Ok(LoaderPrepared {
        bl: copy_to_dma(dma, bl.code).map_err(BootErrorKind::Hal)?,
        bl_desc: bl.desc,
        code: copy_to_dma(dma, u.code.as_ref()).map_err(BootErrorKind::Hal)?,
        data: copy_to_dma(dma, u.data.as_ref()).map_err(BootErrorKind::Hal)?,
        load: u.load,
    })
}

/// Puts a prepared ucode in DMA memory.
fn prepare<D: DmaAllocator, I: AsRef<[u8]>>(
    dma: &D,
    u: HsUcode<I>,
) -> Result<PreparedUcode<D::Buffer>, HalError> {
    Ok(PreparedUcode {
        buf: copy_to_dma(dma, u.image.as_ref())?,
        load: u.load,
        direct: u.direct,
    })
}

impl<D: DmaAllocator, F: BootFirmware> Method<D, F> for Booter<F::Vbios> {
    fn wait_gfw_boot<M: Mmio + ?Sized, C: Clock + ?Sized>(
        bar0: &M,
        clock: &C,
        _info: &ChipInfo,
    ) -> Result<(), BootErrorKind> {
        poll(
            clock,
            GFW_BOOT_TIMEOUT,
            Duration::from_millis(1),
            "GFW boot (PGC6 SCRATCH_GROUP_05 PLM and GFW_BOOT progress 0xff)",
            || {
                let plm = NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK::read(bar0);
                is_register_value(u32::from(plm))
                    && plm.read_protection_level0()
                    && NV_PGC6_AON_SECURE_SCRATCH_GROUP_05::try_read(bar0, 0)
                        .is_ok_and(|v| v.progress() == GFW_BOOT_PROGRESS_COMPLETED)
            },
        )
    }

    /// Reads the VBIOS through the PROM window.
    fn prepare<M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized>(
        fw: &F,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<Self, BootError> {
        let none: Option<&BootMemory<D::Buffer>> = None;
        run.begin(BootPhase::ReadVbios);
        let bar0 = run.bar0;
        let mut read32 = |off: usize| -> Option<u32> {
            if off >= PROM_WINDOW_SIZE as usize {
                return None;
            }
            bar0.try_read32(NV_PROM_DATA as usize + off).ok()
        };
        let vbios = fw
            .parse_vbios(&mut read32)
            .map_err(|e| run.fail(fw_err(e), none))?;
        run.end();
        Ok(Booter { vbios })
    }

    fn layout<M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized>(
        &self,
        meta: &mut GspFwWprMeta,
        params: &WprParams,
        fb_size: u64,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<(), BootError> {
        let none: Option<&BootMemory<D::Buffer>> = None;
        let lock = match run.chip {
            Some(info) => layout::read_mmu_lock(run.bar0, info)
                .map_err(|e| run.fail(BootErrorKind::Layout(e), none))?,
            None => None,
        };
        if let Some((lo, hi)) = lock {
            run.detail(format_args!(
                "VBIOS MMU lock {lo:#x}..={:#x}: WPR ends below it",
                hi + 0xfff
            ));
        }
        layout::layout_tu102(meta, params, fb_size, lock)
            .map_err(|e| run.fail(BootErrorKind::Layout(e), none))?;
        run.detail(format_args!(
            "FB {} MiB; GSP carve-out {:#x}..{:#x} ({} MiB); {}; WPR heap {} MiB",
            fb_size >> 20,
            meta.gspFwRsvdStart,
            meta.fbSize,
            (meta.fbSize - meta.gspFwRsvdStart) >> 20,
            Frts(meta.frtsOffset, meta.frtsSize),
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
        // kgspBootstrap_TU102 runs FWSEC-FRTS only for a non-empty FRTS region (none on
        // GA100: kgspGetFrtsSize_4a4dee); there booter_load puts WPR2 up itself. FWSEC-SB runs
        // at every unload (kgspTeardown_TU102).
        let bundle = if p.meta.frtsSize > 0 {
            fwsec_frts(&self.vbios, hw, fw, p, run)?
        } else {
            let mem = Some(p.mem);
            let sb = self
                .vbios
                .fwsec_with_loader(FwsecCommand::Sb)
                .map_err(|e| run.fail(fw_err(e), mem))?;
            let sb = prepare_loader(&hw.dma, fw, sb).map_err(|e| run.fail(e, mem))?;
            unload_bundle(hw, fw, p, run, FwsecSb::Loader(sb))?
        };
        booter_load(hw, fw, p, run)?;
        Ok(MethodState::Booter(bundle))
    }
}

/// "FRTS at ..." or, where the chip has no FRTS region (GA100), "no FRTS region".
struct Frts(u64, u64);

impl core::fmt::Display for Frts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.1 == 0 {
            f.write_str("no FRTS region")
        } else {
            write!(f, "FRTS at {:#x}", self.0)
        }
    }
}

/// FWSEC-FRTS on the GSP falcon: WPR2 must come up at the FRTS offset. The unload bundle is
/// prepared first, so that a failure from here on can take WPR2 down again.
fn fwsec_frts<M, D, C, P, F, O>(
    vbios: &F::Vbios,
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    p: &Prepared<'_, D::Buffer>,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<UnloadBundle<D::Buffer>, BootError>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let bar0 = &hw.bar0;
    let mem = Some(p.mem);
    let meta = p.meta;
    run.begin(BootPhase::FwsecFrts);
    let cmd = FwsecCommand::Frts {
        offset: meta.frtsOffset,
        size: FRTS_SIZE,
    };
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, &hw.clock, p.hal);
    let (bundle, fuse) = if p.hal.boots_from_hs() {
        let fuse = fuse_for(bar0, p.hal, vbios.fwsec_fuse());
        let frts = vbios
            .fwsec(cmd, fuse)
            .map_err(|e| run.fail(fw_err(e), mem))?;
        let sb = vbios
            .fwsec(FwsecCommand::Sb, fuse)
            .map_err(|e| run.fail(fw_err(e), mem))?;
        let frts = prepare(&hw.dma, frts).map_err(|e| run.fail(hal_err(e), mem))?;
        let fwsec_sb = prepare(&hw.dma, sb).map_err(|e| run.fail(hal_err(e), mem))?;
        let bundle = unload_bundle(hw, fw, p, run, FwsecSb::Hs(fwsec_sb))?;
        gsp.reset()
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
        gsp.execute_hs(
            frts.buf.dev_addr(),
            frts.buf.len(),
            &frts.load,
            None,
            TRANSCFG_TARGET_COHERENT_SYSMEM,
        )
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
        (bundle, Some(fuse))
    } else {
        // TU10x: FWSEC has a FALCON_UCODE_DESC_V2 and runs through the generic bootloader
        // (kgspExecuteHsFalcon_TU102, s_prepareHsFalconWithLoader); it carries its signature.
        let frts = vbios
            .fwsec_with_loader(cmd)
            .map_err(|e| run.fail(fw_err(e), mem))?;
        let sb = vbios
            .fwsec_with_loader(FwsecCommand::Sb)
            .map_err(|e| run.fail(fw_err(e), mem))?;
        let frts = prepare_loader(&hw.dma, fw, frts).map_err(|e| run.fail(e, mem))?;
        let sb = prepare_loader(&hw.dma, fw, sb).map_err(|e| run.fail(e, mem))?;
        let bundle = unload_bundle(hw, fw, p, run, FwsecSb::Loader(sb))?;
        gsp.reset()
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
        run.detail(format_args!(
            "FWSEC through the generic bootloader (start tag {:#x}, {} bytes)",
            frts.bl_desc.start_tag, frts.bl_desc.code_size
        ));
        frts.execute(&gsp)
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
        (bundle, None)
    };
    let scratch = NV_PBUS_VBIOS_SCRATCH::try_read(bar0, FWSECLIC_SCRATCH_INDEX_0E)
        .map(u32::from)
        .unwrap_or(u32::MAX);
    let (lo, _hi, up) = wpr2(bar0);
    let err = frts_err_code(scratch);
    if err != 0 || !up || lo != meta.frtsOffset {
        return Err(run.fail(
            BootErrorKind::FwsecFrts {
                err_code: err,
                wpr2_lo: lo,
                expected: meta.frtsOffset,
            },
            mem,
        ));
    }
    match fuse {
        Some(fuse) => run.detail(format_args!("WPR2 up at {lo:#x}; fuse version {fuse}")),
        None => run.detail(format_args!("WPR2 up at {lo:#x}")),
    }
    run.end();
    Ok(bundle)
}

/// The unload bundle, prepared before WPR2 goes up (nova-core's UnloadBundle), and the
/// teardown a failure from here on runs.
fn unload_bundle<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    p: &Prepared<'_, D::Buffer>,
    run: &mut Run<'_, '_, M, C, O>,
    fwsec_sb: FwsecSb<D::Buffer>,
) -> Result<UnloadBundle<D::Buffer>, BootError>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let mem = Some(p.mem);
    let sel_u = fw
        .booter_fuse(BooterKind::Unload)
        .map_err(|e| run.fail(fw_err(e), mem))?;
    let unload_uc = fw
        .booter(BooterKind::Unload, fuse_for(&hw.bar0, p.hal, sel_u))
        .map_err(|e| run.fail(fw_err(e), mem))?;
    let booter_unload = prepare(&hw.dma, unload_uc).map_err(|e| run.fail(hal_err(e), mem))?;
    run.quiesce = Quiesce::Teardown {
        hal: p.hal,
        // Only a boot-ROM FWSEC-SB runs from device addresses alone after a failure.
        fwsec_sb: match &fwsec_sb {
            FwsecSb::Hs(u) => Some(u.at()),
            FwsecSb::Loader(_) => None,
        },
        booter_unload: booter_unload.at(),
    };
    Ok(UnloadBundle {
        fwsec_sb,
        booter_unload,
    })
}

/// booter_load on SEC2 with the WPR metadata address; SEC2 MAILBOX0 must come back 0.
fn booter_load<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    p: &Prepared<'_, D::Buffer>,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<(), BootError>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let bar0 = &hw.bar0;
    let mem = Some(p.mem);
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, &hw.clock, p.hal);
    let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, &hw.clock, p.hal);
    run.begin(BootPhase::BooterLoad);
    let sel = fw
        .booter_fuse(BooterKind::Load)
        .map_err(|e| run.fail(fw_err(e), mem))?;
    let fuse = fuse_for(bar0, p.hal, sel);
    let load = fw
        .booter(BooterKind::Load, fuse)
        .map_err(|e| run.fail(fw_err(e), mem))?;
    let load = prepare(&hw.dma, load).map_err(|e| run.fail(hal_err(e), mem))?;
    // kgspBootstrap_TU102: the GSP goes into RISC-V with the LIBOS arguments in its
    // mailboxes before the booter runs.
    let libos_addr = p.mem.libos.dev_addr();
    gsp.reset_into_riscv()
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
    gsp.write_mailboxes(libos_addr as u32, (libos_addr >> 32) as u32);
    sec2.reset()
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
    let meta_addr = p.mem.wpr_meta.dev_addr();
    let (m0, _) = load
        .execute(
            &sec2,
            p.hal,
            Some((meta_addr as u32, (meta_addr >> 32) as u32)),
        )
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
    if m0 != 0 {
        return Err(run.fail(
            BootErrorKind::Booter {
                kind: BooterKind::Load,
                mailbox0: m0,
            },
            mem,
        ));
    }
    run.detail(format_args!("booter_load done (SEC2 fuse version {fuse})"));
    run.end();
    Ok(())
}

/// The reservations after boot: the layout computed before it.
pub(super) fn fb_layout(meta: &GspFwWprMeta) -> Result<FbLayout, BootErrorKind> {
    layout::fb_layout_tu102(meta).map_err(BootErrorKind::Layout)
}

/// The unload once GSP-RM has suspended: FWSEC-SB on the GSP falcon, then booter_unload on
/// SEC2 if WPR2 is still up; WPR2 must be down afterwards.
pub(super) fn unload<M, C, O, B>(
    bundle: &UnloadBundle<B>,
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
    let bar0 = run.bar0;
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, run.clock, hal);
    let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, run.clock, hal);
    run.begin(BootPhase::FwsecSb);
    // kgspTeardown_TU102: the GSP falcon reset stops GSP-RM before FWSEC-SB.
    gsp.reset()
        .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
    match &bundle.fwsec_sb {
        FwsecSb::Hs(u) => u.execute(&gsp, hal, None),
        FwsecSb::Loader(u) => u.execute(&gsp),
    }
    .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
    let scratch = NV_PBUS_VBIOS_SCRATCH::try_read(bar0, FWSECLIC_SCRATCH_INDEX_15)
        .map(u32::from)
        .unwrap_or(u32::MAX);
    if sb_err_code(scratch) != 0 {
        return Err(run.fail(
            BootErrorKind::FwsecSb {
                err_code: sb_err_code(scratch),
            },
            mem,
        ));
    }
    run.end();

    run.begin(BootPhase::BooterUnload);
    if wpr2(bar0).2 {
        sec2.reset()
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
        let (m0, _) = bundle
            .booter_unload
            .execute(&sec2, hal, Some((0xff, 0xff)))
            .map_err(|e| run.fail(BootErrorKind::Falcon(e), mem))?;
        if m0 != 0 {
            return Err(run.fail(
                BootErrorKind::Booter {
                    kind: BooterKind::Unload,
                    mailbox0: m0,
                },
                mem,
            ));
        }
    }
    let (_, hi, up) = wpr2(bar0);
    if up {
        return Err(run.fail(BootErrorKind::Wpr2StillUp { wpr2_hi: hi }, mem));
    }
    run.end();
    Ok(())
}

/// What [`teardown_wpr2`] achieved.
struct Teardown {
    /// The GSP falcon was reset (so GSP-RM no longer runs).
    gsp_reset: bool,
    /// WPR2 is down.
    wpr2_down: bool,
}

/// FWSEC-SB and booter_unload without a running GSP-RM (best effort: booter_unload refuses
/// while GSP-RM has not suspended).
fn teardown_wpr2<M: Mmio + ?Sized, C: Clock + ?Sized>(
    bar0: &M,
    clock: &C,
    hal: FalconHal,
    fwsec_sb: Option<&UcodeAt>,
    booter_unload: &UcodeAt,
) -> Teardown {
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, hal);
    let sec2: Falcon<'_, Sec2, M, C> = Falcon::new(bar0, clock, hal);
    let gsp_reset = gsp.reset().is_ok();
    if let (true, Some((addr, len, load))) = (gsp_reset, fwsec_sb) {
        let _ = gsp.execute_hs(*addr, *len, load, None, TRANSCFG_TARGET_COHERENT_SYSMEM);
    }
    // Only a boot-ROM (DMA) load can run from a device address; the PIO booter_unload of
    // TU10x/GA100 needs its bytes, which the failed boot has already let go.
    if hal.boots_from_hs() && wpr2(bar0).2 && sec2.reset().is_ok() {
        let (addr, len, load) = booter_unload;
        let _ = sec2.execute_hs(
            *addr,
            *len,
            load,
            Some((0xff, 0xff)),
            TRANSCFG_TARGET_COHERENT_SYSMEM,
        );
    }
    Teardown {
        gsp_reset,
        wpr2_down: !wpr2(bar0).2,
    }
}

/// After a failed boot: takes WPR2 down (the GSP falcon reset stops GSP-RM). Returns whether
/// the GSP was stopped.
pub(super) fn stop_after_failure<M, C, O>(
    run: &mut Run<'_, '_, M, C, O>,
    hal: FalconHal,
    fwsec_sb: Option<&UcodeAt>,
    booter_unload: &UcodeAt,
) -> bool
where
    M: Mmio + ?Sized,
    C: Clock + ?Sized,
    O: BootObserver + ?Sized,
{
    let t = teardown_wpr2(run.bar0, run.clock, hal, fwsec_sb, booter_unload);
    run.detail(format_args!(
        "after the failure: {}",
        if t.wpr2_down {
            "WPR2 torn down (FWSEC-SB + booter_unload); the next boot needs no reset"
        } else {
            "WPR2 is still up; reset the GPU before the next boot"
        }
    ));
    t.gsp_reset
}

/// The SEC2 and FWSEC registers of a failure report.
pub(super) fn snapshot(put: &mut dyn FnMut(&'static str, usize)) {
    put(
        "NV_PSEC_FALCON_MAILBOX0",
        NV_PFALCON_FALCON_MAILBOX0::offset_of::<Sec2>(),
    );
    put(
        "NV_PSEC_FALCON_MAILBOX1",
        NV_PFALCON_FALCON_MAILBOX1::offset_of::<Sec2>(),
    );
    put(
        "NV_PSEC_FALCON_CPUCTL",
        NV_PFALCON_FALCON_CPUCTL::offset_of::<Sec2>(),
    );
    for (name, i) in [
        (
            "NV_PBUS_VBIOS_SCRATCH(0x0e) (FRTS)",
            FWSECLIC_SCRATCH_INDEX_0E,
        ),
        (
            "NV_PBUS_VBIOS_SCRATCH(0x15) (SB)",
            FWSECLIC_SCRATCH_INDEX_15,
        ),
    ] {
        if let Ok(o) = NV_PBUS_VBIOS_SCRATCH::offset(i) {
            put(name, o);
        }
    }
}
