//! The simulated GPU as a bare-metal GPU: boot hardware, GSP-RM emulator serving the full RM
//! model in GSP mode, the GMMU walker, the BAR1 block and the doorbell, all behind the `hal`
//! traits, so `nvbare_core::device::baremetal::BareMetalBackend` runs on it exactly as on a
//! `VfioGpu`.
//!
//! ```text
//! BareMetalBackend ── hal ──> SimBar0 / SimBar1 / SimDma / GspClock / SimPci
//!                                │
//!   BootModel (falcons, FSP, booter checks on the real firmware)
//!   GspEmulator ── SharedRm ──> RmModel (GSP mode: internal client, SET_PAGE_DIRECTORY,
//!                               physical channel descriptors, GR context promotion)
//!   SimMmu (GMMU walker + TLB over the driver's tables)   Fifo (doorbell at 0xbb0090)
//! ```
//!
//! Every GSP-RM start resets the RM model (a fresh GSP-RM knows no clients). [`GspClock`] lets
//! the emulated GSP-RM run whenever the driver waits, as the real one runs concurrently: that
//! is how RC events reach the driver while it polls.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::device::baremetal::{
    BareHw, BareMetalBackend, BareMetalError, BareMetalOptions, BarePlatform,
};
use nvbare_core::gsp::boot::firmware::BootFirmware;
use nvbare_core::gsp::boot::{BootHw, BootObserver, BootOptions};
use nvbare_core::hal::Clock;

use crate::boot::{BootModel, BootSimConfig, SimFirmware};
use crate::clock::SimClock;
use crate::mmu::{MmuConfig, SimMmu};
use crate::rm::{RmModel, SharedRm};
use crate::rm_service::RmService;
use crate::{ChipModel, SimBar0, SimBar1, SimConfig, SimDma, SimGpu, SimPci};

/// A clock that lets the emulated GSP-RM run while the driver waits (each `delay` advances
/// the simulator's clock, then pumps the running emulator, if any).
#[derive(Clone)]
pub struct GspClock {
    clock: Arc<SimClock>,
    gpu: Arc<SimGpu>,
    boot: BootModel,
    /// In a [`crate::baremetal_system::BareMetalSystem`]: runs every GPU's blocked channels
    /// (the other GPUs run while this driver waits).
    kick: Option<Kick>,
}

/// What a GPU runs after the driver waited: its own blocked channels, or a system's GPUs.
pub use crate::fifo::Kick;

impl std::fmt::Debug for GspClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GspClock").finish_non_exhaustive()
    }
}

impl Clock for GspClock {
    fn now(&self) -> Duration {
        self.clock.now()
    }

    fn delay(&self, d: Duration) {
        self.clock.delay(d);
        self.gpu.with_core(|core| self.boot.settle(core));
        if let Some(emu) = self.boot.emulator() {
            self.gpu.with_core(|core| emu.pump(core));
        }
        if let Some(k) = &self.kick {
            (k.0)();
        }
    }
}

/// The simulator's side of the bare-metal backend.
#[derive(Debug, Clone, Copy)]
pub struct SimPlatform;

impl BarePlatform for SimPlatform {
    type Bar0 = SimBar0;
    type Bar1 = SimBar1;
    type Dma = SimDma;
    type Clock = GspClock;
    type Pci = SimPci;
}

/// The hardware the bare-metal backend gets on the simulator.
pub type SimBareHw = BareHw<SimPlatform>;

/// The bare-metal backend on the simulator.
pub type SimBareMetal = BareMetalBackend<SimPlatform>;

/// A simulated GPU wired for the bare-metal path.
#[derive(Clone)]
pub struct BareMetalSim {
    gpu: Arc<SimGpu>,
    boot: BootModel,
    mmu: Arc<SimMmu>,
    rm: Arc<Mutex<RmModel>>,
    kick: Option<Kick>,
}

impl std::fmt::Debug for BareMetalSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareMetalSim")
            .field("chip", &self.gpu.model().chipset)
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<RmModel>) -> MutexGuard<'_, RmModel> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl BareMetalSim {
    /// A powered-on `model` GPU whose boot hardware checks against `firmware`, on virtual time
    /// if `virtual_time`.
    pub fn new(
        model: ChipModel,
        firmware: Arc<SimFirmware>,
        virtual_time: bool,
    ) -> Result<Self, String> {
        Self::with_config(model, BootSimConfig::new(firmware), virtual_time)
    }

    /// The same with boot hardware settings of your own (faults, fuses); its `rm` factory is
    /// replaced by the shared RM model.
    pub fn with_config(
        model: ChipModel,
        cfg: BootSimConfig,
        virtual_time: bool,
    ) -> Result<Self, String> {
        let mut sc = SimConfig::new(model);
        sc.virtual_time = virtual_time;
        Self::on(SimGpu::new(sc), cfg)
    }

    /// A `model` GPU in a host it shares with other GPUs (its DMA reaches `host`, it keeps
    /// time with `clock`); see [`crate::baremetal_system::BareMetalSystem`].
    pub fn in_host(
        model: ChipModel,
        cfg: BootSimConfig,
        host: Arc<crate::HostMemory>,
        clock: Arc<SimClock>,
    ) -> Result<Self, String> {
        Self::on(SimGpu::new_in(model, host, clock), cfg)
    }

    fn on(gpu: Arc<SimGpu>, mut cfg: BootSimConfig) -> Result<Self, String> {
        let rm = RmModel::install(&gpu)?;
        let mmu = SimMmu::install(&gpu, MmuConfig::default());
        lock(&rm).set_gsp_mode(mmu.clone());
        let shared = rm.clone();
        cfg.rm = Arc::new(move |_m: &ChipModel| {
            // A freshly started GSP-RM knows nothing of the previous one's objects.
            lock(&shared).reset_for_boot();
            Box::new(SharedRm(shared.clone())) as Box<dyn RmService>
        });
        let boot = BootModel::install(&gpu, cfg);
        // The host engine retries a failed acquire on its own; the simulator does it whenever
        // the driver waits (a system replaces this with a kick of all its GPUs).
        let (g, r) = (gpu.clone(), rm.clone());
        let retry = Kick(Arc::new(move || {
            crate::fifo::run_channels(&g, &r);
        }));
        Ok(BareMetalSim {
            gpu,
            boot,
            mmu,
            rm,
            kick: Some(retry),
        })
    }

    /// Runs `kick` whenever the driver of this GPU waits (set by the system it belongs to,
    /// instead of re-running this GPU's blocked channels alone).
    pub(crate) fn set_kick(&mut self, kick: Kick) {
        self.kick = Some(kick);
    }

    /// The RM model, shared.
    pub(crate) fn rm_shared(&self) -> &Arc<Mutex<RmModel>> {
        &self.rm
    }

    /// BAR0, DMA memory, clock and PCI config space as the backend gets them.
    pub fn hw(&self) -> SimBareHw {
        BootHw {
            bar0: self.gpu.bar0(),
            dma: self.gpu.dma(),
            clock: self.clock(),
            pci: self.gpu.pci(),
        }
    }

    /// The clock that pumps the emulated GSP-RM.
    pub fn clock(&self) -> GspClock {
        GspClock {
            clock: self.gpu.clock(),
            gpu: self.gpu.clone(),
            boot: self.boot.clone(),
            kick: self.kick.clone(),
        }
    }

    /// BAR1.
    pub fn bar1(&self) -> SimBar1 {
        self.gpu.bar1()
    }

    /// Boots GSP-RM with `fw` and opens the bare-metal backend.
    pub fn open<F: BootFirmware, O: BootObserver + ?Sized>(
        &self,
        fw: &F,
        boot_opts: &BootOptions<'_>,
        obs: &mut O,
        opts: BareMetalOptions,
    ) -> Result<SimBareMetal, BareMetalError> {
        BareMetalBackend::open(self.hw(), self.bar1(), fw, boot_opts, obs, opts)
    }

    /// The GPU.
    pub fn gpu(&self) -> &Arc<SimGpu> {
        &self.gpu
    }

    /// The boot hardware (its `errors()` include the emulator's).
    pub fn boot(&self) -> &BootModel {
        &self.boot
    }

    /// The MMU model (TLB statistics, stale hits).
    pub fn mmu(&self) -> &Arc<SimMmu> {
        &self.mmu
    }

    /// The RM model behind the emulated GSP-RM.
    pub fn rm(&self) -> MutexGuard<'_, RmModel> {
        lock(&self.rm)
    }

    /// Everything the simulated hardware found wrong so far: boot checks, the emulator's
    /// protocol errors, BAR1 accesses in virtual mode.
    pub fn errors(&self) -> Vec<String> {
        let mut e = self.boot.errors();
        let n = self.gpu.vram().bar1_virtual_accesses();
        if n > 0 {
            e.push(format!(
                "{n} CPU access(es) through BAR1 while it was in virtual mode (BAR1 was not put \
                 back into physical mode after GSP-RM started)"
            ));
        }
        e
    }
}
