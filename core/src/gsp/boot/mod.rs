//! Bare-metal GSP boot: from a GPU fresh out of reset to a running GSP-RM that answers RPCs,
//! and back (unload) so that the next boot works without a reset.
//!
//! [`boot`] runs the whole sequence over the `hal` traits (so it runs on the simulator and on
//! `VfioGpu` alike) and returns a [`BootedGsp`]: the RPC transport to GSP-RM, the framebuffer
//! layout to hand to [`crate::mm`], GSP-RM's static info, and what [`BootedGsp::unload`] needs.
//!
//! Turing-Ada (`BootMethod::Booter`, `kgspBootstrap_TU102`):
//! 1. wait for GFW boot (PGC6 scratch), then refuse or reset if WPR2 is already up (WPR2 is
//!    read only once GFW boot is done, as `kgspInitRm` does: a read before then may be a PRI
//!    error); point the sysmem flush registers at a page of ours ([`flush`]);
//! 2. read the VBIOS through the PROM window, extract FWSEC;
//! 3. compute the FB layout, fill DMA memory, queue SET_SYSTEM_INFO and SET_REGISTRY;
//! 4. FWSEC-FRTS on the GSP falcon (WPR2 comes up at the FRTS offset);
//! 5. reset the GSP into RISC-V with the LIBOS arguments in its mailboxes;
//! 6. booter_load on SEC2 with the WPR metadata address (MAILBOX0 must come back 0);
//! 7. write the OS version, check RISC-V runs, wait for GSP_INIT_DONE while running the CPU
//!    sequencer scripts GSP-RM sends; GET_GSP_STATIC_INFO.
//!
//! Hopper/Blackwell (`BootMethod::FspChainOfTrust`, `kgspBootstrap_GH100`):
//! 1. wait for the FSP's secure boot (I2CS scratch = 0xff), then refuse or reset if WPR2 is
//!    up; the sysmem flush page;
//! 2. as above, but the WPR metadata carries only sizes (the GSP-FMC places WPR2);
//! 3. `GSP_FMC_BOOT_PARAMS` + the `NVDM_PAYLOAD_COT` message to the FSP (FMC image, hash,
//!    key, signature, FRTS placement), check the FSP's answer;
//! 4. wait for the PRIV target mask and the RISC-V lockdown to be released (or an FMC error
//!    in MAILBOX0);
//! 5. as step 7 above (no sequencer on these chips).
//!
//! Unload ([`BootedGsp::unload`], `kgspUnloadRm`): UNLOADING_GUEST_DRIVER with
//! `newLevel` = [`UNLOAD_LEVEL_0`] (not PM, not GC6), wait for `MAILBOX0 = 0x80000000`, then
//! FWSEC-SB and booter_unload (WPR2 must go down) on Turing-Ada, or wait for the RISC-V halt
//! (the GSP-FMC tears WPR2 down) on Hopper on; the flush page goes last.
//!
//! A boot that fails stops what it started before its memory is freed: on Turing-Ada
//! FWSEC-SB and booter_unload (the GSP falcon reset stops GSP-RM), on Hopper on a wait of up to
//! [`FAILED_BOOT_HALT_TIMEOUT`] for the GSP RISC-V to halt (nova-core), and bus mastering off
//! if it does not.
//!
//! The shared steps are here; the steps in which the two methods differ are in `booter`
//! (Turing-Ada) and `cot` (Hopper on), behind one internal trait, and `run` keeps the phases,
//! the failure report and what a failed boot must stop.
//!
//! Every wait is a [`poll_until`] with a named timeout; every failure is a [`BootError`] naming
//! the phase; the [`BootReport`] of registers and the GSP's last log lines goes to
//! [`BootObserver::failed`].

pub mod abi;
mod booter;
mod cot;
pub mod firmware;
pub mod flush;
pub mod fsp;
pub mod layout;
pub mod memory;
pub mod report;
mod run;
pub mod sequencer;

use core::fmt;
use core::time::Duration;

use zerocopy::{FromZeros, IntoBytes};

use crate::chip::{BootMethod, Chip, ChipInfo, Chipset, identify_mmio};
use crate::falcon::{Falcon, FalconHal, FuseEngine, RISCV_ACTIVE_TIMEOUT};
use crate::gsp::GspError;
use crate::gsp::events::NV_VGPU_MSG_EVENT_GSP_INIT_DONE;
use crate::gsp::log::LogImage;
use crate::gsp::msgq::{MsgQueue, SharedMemLayout};
use crate::gsp::registry::{self, DEFAULT_REGISTRY, RegistryEntry};
use crate::gsp::rpc::{GspConfig, GspRpc, UNLOAD_LEVEL_0};
use crate::gsp::sysinfo::{GspStaticConfigInfo, GspSystemInfo};
use crate::hal::{
    Clock, DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig, PollError, is_register_value,
    poll_until,
};
use crate::mm::vram::FbSizeSource;
use crate::mm::{FbLayout, FbOwner};
use crate::regs::Register;
use crate::regs::falcon::Gsp;
use crate::regs::pfb::{NV_PFB_PRI_MMU_WPR2_ADDR_HI, NV_PFB_PRI_MMU_WPR2_ADDR_LO};

use abi::GspFwWprMeta;
use booter::{Booter, UnloadBundle};
use cot::{ChainOfTrust, FmcMemory};
use firmware::{BootFirmware, FirmwareError};
use flush::SysmemFlush;
use layout::WprParams;
use memory::BootMemory;
pub use memory::LogCursor;
pub use report::{BootError, BootErrorKind, BootObserver, BootPhase, BootReport, NoObserver};
use run::Run;
use sequencer::BootEvents;

/// How long the VBIOS devinit (or the FSP's secure boot) may take (`kfspWaitForSecureBoot_GH100`:
/// 4 s; FB training alone takes 2-3 s on HBM parts).
pub const GFW_BOOT_TIMEOUT: Duration = Duration::from_secs(4);
/// How long to leave the GPU alone after a function reset (tinygrad: 100 ms; GPUs may stop
/// answering while they reset).
pub const RESET_SETTLE: Duration = Duration::from_millis(100);
/// How long WPR2 may take to go down after a reset or an unload.
pub const WPR2_CLEAR_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the FSP may hold the GSP's PRIV target mask after the chain of trust
/// (`kfspWaitForGspTargetMaskReleased_GH100`: the default GPU timeout).
pub const TARGET_MASK_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the GSP-FMC may take to release the RISC-V lockdown (nova-core: 30 s).
pub const LOCKDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long GSP-RM may take to create its status queue and send GSP_INIT_DONE (nova-core:
/// 10 s).
pub const INIT_DONE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long GSP-RM may take to suspend its processor after UNLOADING_GUEST_DRIVER.
pub const SUSPEND_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the GSP RISC-V core may take to halt at unload (Hopper on; `kgspTeardown_GH100`
/// waits `GPU_TIMEOUT_DEFAULT`, 4 s on Linux).
pub const HALT_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a failed Hopper-on boot waits for the GSP RISC-V core to halt before its memory is
/// freed (nova-core: 5 s); if it does not, bus mastering goes off first.
pub const FAILED_BOOT_HALT_TIMEOUT: Duration = Duration::from_secs(5);
/// `LIBOS_INTERRUPT_PROCESSOR_SUSPENDED` in GSP MAILBOX0 (`_kgspIsProcessorSuspended`).
pub const PROCESSOR_SUSPENDED: u32 = 0x8000_0000;
/// PRIV error reads while the GSP is locked to the FSP (`_kfspIsGspTargetMaskReleased`).
const PRIV_TARGET_LOCKED: u32 = 0xbadf_4100;

/// The hardware the boot runs on: BAR0, DMA memory, time, PCI config space. The same shape as
/// `VfioGpu`'s `bar0()/dma()/pci()/clock()` and the simulator's `SimGpu`.
#[derive(Debug, Clone)]
pub struct BootHw<M, D, C, P> {
    /// BAR0.
    pub bar0: M,
    /// Host memory the GPU can reach.
    pub dma: D,
    /// Time.
    pub clock: C,
    /// PCI config space and function reset.
    pub pci: P,
}

/// What to do when a GSP is found running (WPR2 up) before boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningGsp {
    /// Stop with [`BootErrorKind::GspRunning`] and instructions (default).
    Refuse,
    /// Reset the PCI function ([`PciConfig::reset_function`]) and wait for WPR2 to go down.
    Reset,
    /// Boot anyway (diagnostics): the firmware refuses, as on hardware (FWSEC-FRTS reports an
    /// error, the FSP answers `FSP_ERR_IFS_ERR_INVALID_STATE`).
    Attempt,
}

/// Addresses GSP-RM wants in `GspSystemInfo` (0 when the embedder does not know them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemAddrs {
    /// BAR0 bus address.
    pub bar0: u64,
    /// BAR1 bus address.
    pub bar1: u64,
    /// BAR2/3 bus address.
    pub bar3: u64,
    /// `bus << 8 | device << 3 | function`.
    pub bdf: u64,
}

/// Boot options.
#[derive(Debug, Clone, Copy)]
pub struct BootOptions<'a> {
    /// What to do with a GSP left running.
    pub running_gsp: RunningGsp,
    /// BAR and bus addresses for `GspSystemInfo`.
    pub addrs: SystemAddrs,
    /// Registry keys for SET_REGISTRY.
    pub registry: &'a [RegistryEntry<'a>],
    /// RPC transport settings.
    pub gsp: GspConfig,
    /// How long to wait for GSP_INIT_DONE.
    pub init_done_timeout: Duration,
    /// Decodes the GSP's log records (without it, logs are raw words).
    pub log_image: Option<&'a dyn LogImage>,
}

impl fmt::Debug for dyn LogImage + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogImage")
    }
}

impl Default for BootOptions<'_> {
    fn default() -> Self {
        BootOptions {
            running_gsp: RunningGsp::Refuse,
            addrs: SystemAddrs::default(),
            registry: DEFAULT_REGISTRY,
            gsp: GspConfig::default(),
            init_done_timeout: INIT_DONE_TIMEOUT,
            log_image: None,
        }
    }
}

/// The transport type of a booted GSP.
pub type BootRpc<B, M, C> = GspRpc<B, M, C, BootEvents>;

/// What a booted GSP keeps of its boot method, for the reservations and the unload.
#[derive(Debug)]
enum MethodState<B> {
    /// Turing-Ada: FWSEC-SB and booter_unload, prepared before WPR2 went up.
    Booter(UnloadBundle<B>),
    /// Hopper on: the GSP-FMC image and boot parameters.
    ChainOfTrust(FmcMemory<B>),
}

/// Everything but the RPC transport of a booted GSP: memory GSP-RM keeps using, the layout,
/// and what the unload needs.
#[derive(Debug)]
pub struct BootState<B> {
    chip: Chip,
    hal: FalconHal,
    mem: BootMemory<B>,
    flush: SysmemFlush<B>,
    method: MethodState<B>,
    wpr_meta: GspFwWprMeta,
    fb_layout: FbLayout,
    static_info: GspStaticConfigInfo,
    timings: heapless::Vec<(BootPhase, Duration), 24>,
}

/// A running GSP-RM: the RPC transport plus [`BootState`].
#[derive(Debug)]
pub struct BootedGsp<B: DmaBuffer, M: Mmio, C: Clock> {
    rpc: BootRpc<B, M, C>,
    state: BootState<B>,
}

/// What an unload did.
#[derive(Debug, Clone, Default)]
pub struct UnloadReport {
    /// Time per phase.
    pub timings: heapless::Vec<(BootPhase, Duration), 8>,
    /// GSP-RM did not report its processor suspended in time (the teardown went ahead, as
    /// OpenRM's does).
    pub suspend_timed_out: bool,
}

/// The steps in which the two boot methods differ ([`booter`]: Turing-Ada, [`cot`]: Hopper
/// on). [`boot_with`] runs the shared steps around them, in the order of the methods here;
/// [`MethodState`] is what a method leaves for the unload.
trait Method<D: DmaAllocator, F: BootFirmware>: Sized {
    /// Waits for the GPU's own boot firmware: the VBIOS devinit or the FSP's secure boot.
    fn wait_gfw_boot<M: Mmio + ?Sized, C: Clock + ?Sized>(
        bar0: &M,
        clock: &C,
        info: &ChipInfo,
    ) -> Result<(), BootErrorKind>;

    /// Reads what the method needs from the GPU before the layout is computed.
    fn prepare<M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized>(
        fw: &F,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<Self, BootError>;

    /// Places the GSP's framebuffer regions in the WPR metadata (in the ComputeLayout phase).
    fn layout<M: Mmio + ?Sized, C: Clock + ?Sized, O: BootObserver + ?Sized>(
        &self,
        meta: &mut GspFwWprMeta,
        params: &WprParams,
        fb_size: u64,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<(), BootError>;

    /// Runs the secure firmware that loads GSP-RM from the prepared memory, up to where the
    /// GSP RISC-V core may start.
    fn start<M: Mmio, C: Clock, P: PciConfig, O: BootObserver + ?Sized>(
        self,
        hw: &BootHw<M, D, C, P>,
        fw: &F,
        prepared: &Prepared<'_, D::Buffer>,
        run: &mut Run<'_, '_, M, C, O>,
    ) -> Result<MethodState<D::Buffer>, BootError>;
}

/// What the shared steps have prepared when a method starts GSP-RM.
struct Prepared<'a, B> {
    info: &'static ChipInfo,
    hal: FalconHal,
    params: &'a WprParams,
    meta: &'a GspFwWprMeta,
    mem: &'a BootMemory<B>,
}

/// WPR2 as (start, last page, up). A read that did not reach the register (all ones, or a
/// PRI error such as one before GFW boot completes) is not "up".
fn wpr2<M: Mmio + ?Sized>(bar0: &M) -> (u64, u64, bool) {
    let lo = NV_PFB_PRI_MMU_WPR2_ADDR_LO::read(bar0);
    let hi = NV_PFB_PRI_MMU_WPR2_ADDR_HI::read(bar0);
    let raw: u32 = hi.into();
    (
        lo.address(),
        hi.address(),
        is_register_value(raw) && hi.is_active(),
    )
}

/// The raw `NV_PFB_PRI_MMU_WPR2_ADDR_HI` if it did not read as a register value.
fn wpr2_unreadable<M: Mmio + ?Sized>(bar0: &M) -> Option<u32> {
    let raw = bar0.read32(NV_PFB_PRI_MMU_WPR2_ADDR_HI::OFFSET as usize);
    (!is_register_value(raw)).then_some(raw)
}

fn poll<C: Clock + ?Sized>(
    clock: &C,
    t: Duration,
    interval: Duration,
    what: &'static str,
    mut cond: impl FnMut() -> bool,
) -> Result<(), BootErrorKind> {
    let r: Result<(), PollError> =
        poll_until(clock, t, interval, what, || Ok(cond().then_some(())));
    r.map_err(|e| BootErrorKind::Timeout {
        what: e.what,
        waited: e.waited,
    })
}

fn fw_err(e: FirmwareError) -> BootErrorKind {
    BootErrorKind::Firmware(e)
}

fn hal_err(e: HalError) -> BootErrorKind {
    BootErrorKind::Hal(e)
}

fn gsp_err(e: GspError) -> BootErrorKind {
    match e {
        GspError::Hal(h) => BootErrorKind::Hal(h),
        e => BootErrorKind::Gsp(e),
    }
}

/// Reads the fuse version for a ucode's signature (none on TU10x: `FalconHal::ucode_fuse_version`).
fn fuse_for<M: Mmio + ?Sized>(bar0: &M, hal: FalconHal, sel: firmware::FuseSelector) -> u32 {
    match FuseEngine::from_engine_id_mask(sel.engine_id_mask) {
        Some(engine) => hal.ucode_fuse_version(bar0, engine, sel.ucode_id),
        None => 0,
    }
}

/// The chips [`boot`] accepts: those whose boot path has run end to end against a simulator
/// model of the chip (`tests/sim/src/models.rs`, which checks it has a model of each). Every
/// other chip `chip::identify` knows is refused with [`BootErrorKind::NotSupported`]. TU102
/// and TU104 ([`FalconHal::Tu102`]) runs FWSEC-FRTS through the generic bootloader; GA100 runs no
/// FWSEC-FRTS (no FRTS region) and loads its booters by PIO ([`FalconHal::Ga100`]).
pub const BARE_METAL_CHIPS: [Chipset; 6] = [
    Chipset::TU102,
    Chipset::TU104,
    Chipset::GA100,
    Chipset::AD102,
    Chipset::GH100,
    Chipset::GB202,
];

/// Boots GSP-RM; see the [module documentation](self) for the sequence.
///
/// # Errors
///
/// A [`BootError`] naming the phase that failed, with registers and GSP log lines. Nothing
/// panics on device data or firmware bytes; every wait is bounded.
pub fn boot<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    opts: &BootOptions<'_>,
    obs: &mut O,
) -> Result<BootedGsp<D::Buffer, M, C>, BootError>
where
    M: Mmio + Clone,
    D: DmaAllocator,
    C: Clock + Clone,
    P: PciConfig,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let mut run = Run::new(&hw.bar0, &hw.clock, obs, opts.log_image);
    run.pci = Some(&hw.pci);
    let chip = identify(hw, fw, &mut run)?;
    match chip.info.boot {
        BootMethod::Booter => {
            boot_with::<Booter<F::Vbios>, _, _, _, _, _, _>(hw, fw, opts, chip, &mut run)
        }
        BootMethod::FspChainOfTrust => {
            boot_with::<ChainOfTrust, _, _, _, _, _, _>(hw, fw, opts, chip, &mut run)
        }
    }
}

/// Identifies the chip, checks the firmware set is its, and turns bus mastering on.
fn identify<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<Chip, BootError>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    P: PciConfig,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let none: Option<&BootMemory<D::Buffer>> = None;
    run.begin(BootPhase::Identify);
    let chip = identify_mmio(&hw.bar0).map_err(|e| run.fail(BootErrorKind::Chip(e), none))?;
    run.chip = Some(chip.info);
    let info = chip.info;
    if !BARE_METAL_CHIPS.contains(&info.chipset) {
        let chip = info.chipset;
        return Err(run.fail(BootErrorKind::NotSupported { chip }, none));
    }
    if fw.chipset().info().firmware_dir != info.firmware_dir {
        return Err(run.fail(
            BootErrorKind::WrongFirmware {
                firmware: fw.chipset(),
                gpu: info.chipset,
            },
            none,
        ));
    }
    run.detail(format_args!("{chip}, boot via {:?}", info.boot));

    // Bus mastering on (tinygrad does so at every start): a failed boot may have turned it off
    // to keep a GSP that did not halt away from freed memory.
    if hw.pci.read_config32(0x04).is_ok_and(|c| c & 0x4 == 0) && hw.pci.set_bus_master(true).is_ok()
    {
        run.detail(format_args!("bus mastering was off: turned on"));
    }
    run.end();
    Ok(chip)
}

/// The boot after identification, with the steps of boot method `T`.
fn boot_with<T, M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    opts: &BootOptions<'_>,
    chip: Chip,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<BootedGsp<D::Buffer, M, C>, BootError>
where
    T: Method<D, F>,
    M: Mmio + Clone,
    D: DmaAllocator,
    C: Clock + Clone,
    P: PciConfig,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let bar0 = &hw.bar0;
    let clock = &hw.clock;
    let info = chip.info;
    let hal = FalconHal::for_chip(info);
    let none: Option<&BootMemory<D::Buffer>> = None;

    // GFW boot first: WPR2 is read only after it (`kgspInitRm` waits for GFW_BOOT before
    // `_kgspBootGspRm` checks WPR2), so a PRI error read while devinit or the FSP still run is
    // not taken for "WPR2 up".
    run.begin(BootPhase::WaitGfwBoot);
    T::wait_gfw_boot(bar0, clock, info).map_err(|k| run.fail(k, none))?;
    run.end();
    check_running_gsp::<T, _, _, _, _, _, _>(hw, opts, info, run)?;

    let method = T::prepare(fw, run)?;

    // Layout.
    run.begin(BootPhase::ComputeLayout);
    let fb_size = FbSizeSource::for_chip(info).read(bar0);
    let params = WprParams::for_chip(info);
    let bl = fw.bootloader();
    let mut meta = GspFwWprMeta {
        sizeOfRadix3Elf: fw.gsp_image().len() as u64,
        sizeOfBootloader: bl.image.len() as u64,
        bootloaderCodeOffset: bl.code_offset as u64,
        bootloaderDataOffset: bl.data_offset as u64,
        bootloaderManifestOffset: bl.manifest_offset as u64,
        sizeOfSignature: fw.gsp_signature().len() as u64,
        ..GspFwWprMeta::new_zeroed()
    };
    method.layout(&mut meta, &params, fb_size, run)?;
    run.end();

    let (flush, msgq, mem) = prepare_memory(hw, fw, bl.image, info, &mut meta, run)?;

    // SET_SYSTEM_INFO and SET_REGISTRY, queued before GSP-RM runs.
    run.begin(BootPhase::QueueRpcs);
    let handler = BootEvents::new(hal, mem.libos.dev_addr(), bl.app_version);
    let mut rpc = GspRpc::new(msgq, hw.bar0.clone(), hw.clock.clone(), handler, opts.gsp);
    let sysinfo = system_info(&hw.pci, info, &opts.addrs);
    rpc.set_system_info(&sysinfo)
        .map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    let mut table = [0u8; 4096];
    let n =
        registry::pack(opts.registry, &mut table).map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    rpc.set_registry(table.get(..n).unwrap_or(&[]))
        .map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    run.end();

    let prepared = Prepared {
        info,
        hal,
        params: &params,
        meta: &meta,
        mem: &mem,
    };
    let kept = method.start(hw, fw, &prepared, run)?;

    // RISC-V.
    run.begin(BootPhase::StartRiscv);
    let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, hal);
    gsp.write_os_version(bl.app_version);
    gsp.wait_riscv_active(RISCV_ACTIVE_TIMEOUT)
        .map_err(|_| run.fail(BootErrorKind::RiscvNotActive, Some(&mem)))?;
    run.end();

    wait_init_done(&mut rpc, opts, &mem, run)?;

    // Static info.
    run.begin(BootPhase::StaticInfo);
    let static_info = rpc
        .get_gsp_static_info()
        .map_err(|e| run.fail(gsp_err(e), Some(&mem)))?;
    let fb_layout = final_layout(bar0, info, &kept, &params, &meta, &static_info)
        .map_err(|k| run.fail(k, Some(&mem)))?;
    run.end();

    let timings = run.timings.clone();
    Ok(BootedGsp {
        rpc,
        state: BootState {
            chip,
            hal,
            mem,
            flush,
            method: kept,
            wpr_meta: meta,
            fb_layout,
            static_info,
            timings,
        },
    })
}

/// Checks for a GSP left running (WPR2 up) and refuses, boots anyway, or resets the function,
/// as [`BootOptions::running_gsp`] says.
fn check_running_gsp<T, M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    opts: &BootOptions<'_>,
    info: &ChipInfo,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<(), BootError>
where
    T: Method<D, F>,
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    P: PciConfig,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let bar0 = &hw.bar0;
    let clock = &hw.clock;
    let none: Option<&BootMemory<D::Buffer>> = None;
    run.begin(BootPhase::CheckRunningGsp);
    if let Some(raw) = wpr2_unreadable(bar0) {
        let kind = if raw == u32::MAX {
            BootErrorKind::Hal(HalError::DeviceLost)
        } else {
            BootErrorKind::Wpr2Unreadable { raw }
        };
        return Err(run.fail(kind, none));
    }
    let (lo, hi, up) = wpr2(bar0);
    run.end();
    if !up {
        return Ok(());
    }
    match opts.running_gsp {
        RunningGsp::Refuse => {
            run.begin(BootPhase::CheckRunningGsp);
            Err(run.fail(
                BootErrorKind::GspRunning {
                    wpr2_lo: lo,
                    wpr2_hi: hi,
                },
                none,
            ))
        }
        RunningGsp::Attempt => {
            run.begin(BootPhase::CheckRunningGsp);
            run.detail(format_args!("WPR2 {lo:#x}..{hi:#x} is up; booting anyway"));
            run.end();
            Ok(())
        }
        RunningGsp::Reset => {
            run.begin(BootPhase::ResetGpu);
            run.detail(format_args!(
                "WPR2 {lo:#x}..{hi:#x} is up: resetting the function"
            ));
            let r = hw
                .pci
                .set_bus_master(false)
                .and_then(|_| hw.pci.reset_function());
            if let Err(e) = r {
                return Err(run.fail(BootErrorKind::ResetFailed(e), none));
            }
            clock.delay(RESET_SETTLE);
            if let Err(e) = hw.pci.set_bus_master(true) {
                return Err(run.fail(BootErrorKind::ResetFailed(e), none));
            }
            run.end();
            // The reset restarts devinit / the FSP's secure boot; WPR2 reads only after it.
            run.begin(BootPhase::WaitGfwBoot);
            T::wait_gfw_boot(bar0, clock, info).map_err(|k| run.fail(k, none))?;
            run.end();
            run.begin(BootPhase::CheckRunningGsp);
            if poll(
                clock,
                WPR2_CLEAR_TIMEOUT,
                Duration::from_millis(1),
                "WPR2 to go down after the reset",
                || wpr2_unreadable(bar0).is_none() && !wpr2(bar0).2,
            )
            .is_err()
            {
                let hi = wpr2(bar0).1;
                return Err(run.fail(BootErrorKind::Wpr2StillUp { wpr2_hi: hi }, none));
            }
            run.end();
            Ok(())
        }
    }
}

/// The boot's DMA memory: the sysmem flush page first (before any falcon is reset, as
/// nova-core does, and GSP-RM asserts it is set when it starts:
/// `kmemsysAssertSysmemFlushBufferValid_*`), then the message queues, the GSP-RM image and
/// the rest of [`BootMemory`], whose addresses go into `meta`.
#[allow(clippy::type_complexity)]
fn prepare_memory<M, D, C, P, F, O>(
    hw: &BootHw<M, D, C, P>,
    fw: &F,
    bootloader: &[u8],
    info: &ChipInfo,
    meta: &mut GspFwWprMeta,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<
    (
        SysmemFlush<D::Buffer>,
        MsgQueue<D::Buffer>,
        BootMemory<D::Buffer>,
    ),
    BootError,
>
where
    M: Mmio,
    D: DmaAllocator,
    C: Clock,
    F: BootFirmware,
    O: BootObserver + ?Sized,
{
    let bar0 = &hw.bar0;
    let none: Option<&BootMemory<D::Buffer>> = None;
    run.begin(BootPhase::PrepareMemory);
    let flush =
        SysmemFlush::register(bar0, &hw.dma, info).map_err(|e| run.fail(hal_err(e), none))?;
    run.flush = Some((flush.regs(), flush.addr()));
    run.detail(format_args!(
        "sysmem flush page at {:#x} ({:?} registers)",
        flush.addr(),
        flush.regs()
    ));
    let layout = SharedMemLayout::default();
    let qbuf = hw
        .dma
        .alloc_dma(layout.total_size())
        .map_err(|e| run.fail(hal_err(e), none))?;
    let msgq = MsgQueue::new(qbuf, layout).map_err(|e| run.fail(gsp_err(e), none))?;
    let mem = BootMemory::new(
        &hw.dma,
        fw.gsp_image(),
        fw.gsp_signature(),
        bootloader,
        msgq.init_arguments(),
    )
    .map_err(|e| run.fail(hal_err(e), none))?;
    meta.sysmemAddrOfRadix3Elf = mem.radix3.dev_addr();
    meta.sysmemAddrOfBootloader = mem.bootloader.dev_addr();
    meta.sysmemAddrOfSignature = mem.signature.dev_addr();
    if let Err(e) = mem.wpr_meta.write(0, meta.as_bytes()) {
        return Err(run.fail(hal_err(e), Some(&mem)));
    }
    run.detail(format_args!(
        "GSP-RM image {} KiB via radix3 at {:#x}; WPR meta at {:#x}; LIBOS args at {:#x}; \
         queues at {:#x}",
        meta.sizeOfRadix3Elf >> 10,
        meta.sysmemAddrOfRadix3Elf,
        mem.wpr_meta.dev_addr(),
        mem.libos.dev_addr(),
        msgq.init_arguments().sharedMemPhysAddr
    ));
    run.end();
    Ok((flush, msgq, mem))
}

/// Waits for GSP_INIT_DONE; CPU-sequencer scripts run inside the wait (see [`BootEvents`]).
fn wait_init_done<B, M, C, O>(
    rpc: &mut BootRpc<B, M, C>,
    opts: &BootOptions<'_>,
    mem: &BootMemory<B>,
    run: &mut Run<'_, '_, M, C, O>,
) -> Result<(), BootError>
where
    B: DmaBuffer,
    M: Mmio,
    C: Clock,
    O: BootObserver + ?Sized,
{
    run.begin(BootPhase::WaitInitDone);
    // The status queue is linked (msgqRxLink) lazily by the first receive.
    match rpc.wait_event(NV_VGPU_MSG_EVENT_GSP_INIT_DONE, opts.init_done_timeout) {
        Ok(_) => {}
        Err(e) => {
            let mut kind = init_err(rpc, e);
            if !rpc.msgq().is_linked()
                && let BootErrorKind::Timeout { waited, .. } = kind
            {
                kind = BootErrorKind::Timeout {
                    what: "GSP-RM to create its status queue (it never started)",
                    waited,
                };
            }
            return Err(run.fail(kind, Some(mem)));
        }
    }
    let scripts = rpc.handler_mut().scripts_run();
    if scripts > 0 {
        let cmds = rpc.handler_mut().commands_run();
        run.detail(format_args!(
            "ran {scripts} CPU-sequencer script(s), {cmds} commands"
        ));
    }
    run.end();
    Ok(())
}

fn init_err<B: DmaBuffer, M: Mmio, C: Clock>(
    rpc: &mut BootRpc<B, M, C>,
    e: GspError,
) -> BootErrorKind {
    if let Some(s) = rpc.handler_mut().last_error() {
        return BootErrorKind::Sequencer(s);
    }
    match e {
        GspError::Timeout { what, waited, .. } => BootErrorKind::Timeout { what, waited },
        GspError::Status { status, .. } => BootErrorKind::InitFailed { status: status.0 },
        GspError::RpcResult { result, .. } => BootErrorKind::InitFailed { status: result },
        e => gsp_err(e),
    }
}

/// `NVDM_PAYLOAD_COT.version`: 1 on GH100, 2 on Blackwell (`g_kern_fsp_nvoc.c`).
pub fn cot_version(info: &ChipInfo) -> u16 {
    match info.architecture {
        crate::chip::Architecture::Hopper => 1,
        _ => 2,
    }
}

/// `GspSystemInfo` as r570 wants it (`r570_gsp_set_system_info`, tinygrad's values).
pub fn system_info<P: PciConfig>(pci: &P, info: &ChipInfo, addrs: &SystemAddrs) -> GspSystemInfo {
    let mut s = GspSystemInfo::new_zeroed();
    s.gpuPhysAddr = addrs.bar0;
    s.gpuPhysFbAddr = addrs.bar1;
    s.gpuPhysInstAddr = addrs.bar3;
    s.nvDomainBusDeviceFunc = addrs.bdf;
    s.maxUserVa = 0x7fff_ffff_f000;
    s.pciConfigMirrorBase = info.pci_config_mirror;
    s.pciConfigMirrorSize = 0x1000;
    s.PCIDeviceID = pci.read_config32(0x00).unwrap_or(0);
    s.PCISubDeviceID = pci.read_config32(0x2c).unwrap_or(0);
    s.PCIRevisionID = pci.read_config32(0x08).map(|v| v & 0xff).unwrap_or(0);
    s.bIsPassthru = 1;
    s.bIsPrimary = 0;
    s.bPreserveVideoMemoryAllocations = 0;
    s.hostPageSize = 4096;
    s
}

/// The reservations to hand `core::mm` after boot: the computed layout (Turing-Ada) or what
/// WPR2 and GSP-RM report (Hopper on), plus every FB region GSP-RM reports reserved or
/// protected.
fn final_layout<M: Mmio + ?Sized, B>(
    bar0: &M,
    info: &ChipInfo,
    method: &MethodState<B>,
    params: &WprParams,
    meta: &GspFwWprMeta,
    si: &GspStaticConfigInfo,
) -> Result<FbLayout, BootErrorKind> {
    let fb_size = FbSizeSource::for_chip(info).read(bar0);
    let mut l = match method {
        MethodState::Booter(_) => booter::fb_layout(meta)?,
        MethodState::ChainOfTrust(_) => cot::fb_layout(bar0, fb_size, params, si)?,
    };
    let regions = &si.fbRegionInfoParams;
    for r in regions
        .fbRegion
        .iter()
        .take((regions.numFBRegions as usize).min(regions.fbRegion.len()))
    {
        if (r.reserved != 0 || r.bProtected != 0) && r.limit >= r.base && r.limit < l.fb_size() {
            let _ = l.reserve(r.base, r.limit - r.base + 1, FbOwner::RmReserved);
        }
    }
    Ok(l)
}

impl<B: DmaBuffer, M: Mmio, C: Clock> BootedGsp<B, M, C> {
    /// The RPC transport to GSP-RM.
    pub fn rpc(&mut self) -> &mut BootRpc<B, M, C> {
        &mut self.rpc
    }

    /// The rest of the boot state.
    pub fn state(&self) -> &BootState<B> {
        &self.state
    }

    /// Splits off the transport (to build a `GspRm` on it); [`BootState::unload`] takes it
    /// back.
    pub fn split(self) -> (BootRpc<B, M, C>, BootState<B>) {
        (self.rpc, self.state)
    }

    /// Puts a split booted GSP back together.
    pub fn join(rpc: BootRpc<B, M, C>, state: BootState<B>) -> Self {
        BootedGsp { rpc, state }
    }

    /// GSP-RM's static info.
    pub fn static_info(&self) -> &GspStaticConfigInfo {
        &self.state.static_info
    }

    /// The framebuffer reservations to give [`crate::mm::VramAllocator`].
    pub fn fb_layout(&self) -> &FbLayout {
        &self.state.fb_layout
    }

    /// Shuts GSP-RM down so the next boot works without a reset.
    ///
    /// # Errors
    ///
    /// A [`BootError`] naming the unload phase; WPR2 staying up is
    /// [`BootErrorKind::Wpr2StillUp`] (the GPU then needs a reset).
    pub fn unload<D, P, O>(
        self,
        hw: &BootHw<M, D, C, P>,
        obs: &mut O,
        log_image: Option<&dyn LogImage>,
    ) -> Result<UnloadReport, BootError>
    where
        D: DmaAllocator<Buffer = B>,
        P: PciConfig,
        O: BootObserver + ?Sized,
    {
        self.state
            .unload(self.rpc, &hw.bar0, &hw.clock, obs, log_image)
    }
}

impl<B: DmaBuffer> BootState<B> {
    /// The chip.
    pub fn chip(&self) -> &Chip {
        &self.chip
    }

    /// The WPR metadata as the CPU wrote it.
    pub fn wpr_meta(&self) -> &GspFwWprMeta {
        &self.wpr_meta
    }

    /// The framebuffer reservations.
    pub fn fb_layout(&self) -> &FbLayout {
        &self.fb_layout
    }

    /// GSP-RM's static info.
    pub fn static_info(&self) -> &GspStaticConfigInfo {
        &self.static_info
    }

    /// Time per boot phase.
    pub fn timings(&self) -> &[(BootPhase, Duration)] {
        &self.timings
    }

    /// Decodes the GSP's LIBOS logs (see [`BootMemory::read_logs`]).
    pub fn read_logs(&self, image: Option<&dyn LogImage>, out: &mut dyn FnMut(fmt::Arguments<'_>)) {
        self.mem.read_logs(image, out)
    }

    /// Decodes what the LIBOS logs gained since `cursor` (see [`BootMemory::read_new_logs`]).
    pub fn read_new_logs(
        &self,
        cursor: &mut LogCursor,
        image: Option<&dyn LogImage>,
        out: &mut dyn FnMut(fmt::Arguments<'_>),
    ) {
        self.mem.read_new_logs(cursor, image, out)
    }

    /// Device address of the sysmem flush page (owned until the unload ends).
    pub fn sysmem_flush_addr(&self) -> u64 {
        self.flush.addr()
    }

    /// Device address of the GSP-FMC image and boot parameters (Hopper on).
    pub fn fmc_addresses(&self) -> Option<(u64, u64)> {
        match &self.method {
            MethodState::Booter(_) => None,
            MethodState::ChainOfTrust(f) => Some((f.image.dev_addr(), f.params.dev_addr())),
        }
    }

    /// Unloads with the transport split off earlier (see [`BootedGsp::unload`]).
    ///
    /// # Errors
    ///
    /// See [`BootedGsp::unload`].
    pub fn unload<M: Mmio, C: Clock, O: BootObserver + ?Sized>(
        self,
        mut rpc: BootRpc<B, M, C>,
        bar0: &M,
        clock: &C,
        obs: &mut O,
        log_image: Option<&dyn LogImage>,
    ) -> Result<UnloadReport, BootError> {
        let mut run = Run::new(bar0, clock, obs, log_image);
        run.chip = Some(self.chip.info);
        let mem = Some(&self.mem);
        let mut out = UnloadReport::default();

        run.begin(BootPhase::UnloadRpc);
        // `gpuStateDestroy` → `kgspUnloadRm(KGSP_UNLOAD_MODE_NORMAL, LEVEL_0)`: not in a PM
        // transition, not entering GC6, power level 0 (GSP-RM tears down fully and the next
        // boot needs no reset). tinygrad's FAST_UNLOAD is the open driver's shutdown-only value.
        rpc.unloading_guest_driver(false, false, UNLOAD_LEVEL_0)
            .map_err(|e| run.fail(gsp_err(e), mem))?;
        run.end();

        run.begin(BootPhase::WaitSuspend);
        let gsp: Falcon<'_, Gsp, M, C> = Falcon::new(bar0, clock, self.hal);
        if poll(
            clock,
            SUSPEND_TIMEOUT,
            Duration::from_micros(100),
            "GSP-RM to suspend (MAILBOX0 = 0x80000000)",
            || gsp.mailboxes().0 == PROCESSOR_SUSPENDED,
        )
        .is_err()
        {
            // kgspUnloadRm ignores this too and tears down anyway.
            out.suspend_timed_out = true;
            run.detail(format_args!(
                "GSP-RM did not report suspended (MAILBOX0 {:#x}); tearing down anyway",
                gsp.mailboxes().0
            ));
        }
        run.end();
        // The transport is no longer needed; the queues stay allocated until we return.
        drop(rpc);

        match &self.method {
            MethodState::Booter(bundle) => booter::unload(bundle, self.hal, &mut run, mem)?,
            MethodState::ChainOfTrust(_) => cot::unload(self.hal, &mut run, mem)?,
        }
        // Nothing on the GPU flushes any more: the flush page can go (nova-core clears the
        // registers if they still point at it).
        if !self.flush.unregister(bar0) {
            run.detail(format_args!(
                "the sysmem flush registers no longer pointed at our page"
            ));
        }
        for t in run.timings.iter().take(8) {
            let _ = out.timings.push(*t);
        }
        Ok(out)
    }
}
