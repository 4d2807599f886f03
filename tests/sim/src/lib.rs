//! nvbare-sim: a simulated NVIDIA GPU at the interface the real one offers the driver.
//!
//! [`SimGpu`] is a GPU: BAR0 registers with the identity of a real chip ([`models`]), video
//! memory behind BAR1, host memory reached by DMA with fake bus addresses, PCI config space and
//! a clock. It implements the core's `hal` traits through [`SimBar0`], [`SimBar1`],
//! [`host::SimDma`], [`SimPci`] and [`clock::SimClock`], so the driver runs on it unchanged.
//!
//! Hardware blocks that act on what the driver writes are [`bar0::MmioEngine`]s added with
//! [`SimGpu::add_engine`]; each subsystem (GSP, MMU, GPFIFO host, copy engine) lives in its own
//! module.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, MutexGuard};

use nvbare_core::chip;
use nvbare_core::hal::{HalError, Mmio, PciConfig, check_mmio};
use nvbare_core::regs::pgc6::{
    GFW_BOOT_PROGRESS_COMPLETED, NV_PGC6_AON_SECURE_SCRATCH_GROUP_05,
    NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK, NV_PGC6_AON_SECURE_SCRATCH_GROUP_42,
};
use nvbare_core::regs::pmc::{NV_PMC_BOOT_0, NV_PMC_BOOT_42};
use nvbare_core::regs::{Register, RegisterArray};

pub mod backend;
pub mod bar0;
pub mod baremetal;
pub mod baremetal_system;
pub mod boot;
pub mod ce;
pub mod clock;
pub mod compute;
pub mod fifo;
pub mod gpu_mem;
pub mod gsp;
pub mod host;
pub mod mmu;
pub mod models;
pub mod pci;
#[cfg(test)]
mod regs_check;
pub mod rm;
pub mod rm_service;
pub mod system;
pub mod trace;
pub mod unknowns;
pub mod vram;
pub mod wc;

pub use bar0::{BAR0_SIZE, MmioEngine, SimCore};
pub use clock::SimClock;
pub use host::{HostMemory, SimDma, SimDmaBuffer};
pub use models::ChipModel;
pub use vram::Vram;

/// Options for building a simulated GPU.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The board to play.
    pub model: ChipModel,
    /// Use virtual time (tests) instead of wall-clock time.
    pub virtual_time: bool,
    /// Most host DMA memory the simulated system will hand out.
    pub host_memory_limit: u64,
    /// How unknowns are answered (docs/assumptions.md).
    pub unknowns: unknowns::Mode,
}

impl SimConfig {
    /// Defaults for `model`: real time, 4 GiB of host DMA memory, unknowns answered as
    /// `NVBARE_SIM_UNKNOWNS` says (panics with the accepted values if it names no mode; the
    /// CLI checks it first).
    pub fn new(model: ChipModel) -> Self {
        SimConfig {
            model,
            virtual_time: false,
            host_memory_limit: 4 << 30,
            unknowns: unknowns::Mode::from_env().unwrap_or_else(|e| panic!("{e}")),
        }
    }

    /// Answers unknowns in `mode`, whatever the environment says.
    pub fn with_unknowns(mut self, mode: unknowns::Mode) -> Self {
        self.unknowns = mode;
        self
    }

    /// Switches to virtual time.
    pub fn with_virtual_time(mut self) -> Self {
        self.virtual_time = true;
        self
    }
}

struct State {
    core: SimCore,
    engines: Vec<Box<dyn MmioEngine>>,
}

/// A simulated GPU.
pub struct SimGpu {
    model: ChipModel,
    state: Mutex<State>,
    pci: Mutex<pci::ConfigSpace>,
    vram: Arc<Vram>,
    host: Arc<HostMemory>,
    clock: Arc<SimClock>,
    peers: Arc<system::PeerPorts>,
}

impl std::fmt::Debug for SimGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimGpu")
            .field("model", &self.model.board)
            .finish_non_exhaustive()
    }
}

impl SimGpu {
    /// A freshly powered-on GPU: VBIOS devinit done, no GSP running.
    pub fn new(config: SimConfig) -> Arc<Self> {
        let host = HostMemory::new(config.host_memory_limit);
        let clock = Arc::new(if config.virtual_time {
            SimClock::virtual_time()
        } else {
            SimClock::real()
        });
        let gpu = Self::new_in(config.model, host, clock);
        gpu.with_core(|c| c.unknowns = Arc::new(unknowns::Unknowns::new(config.unknowns)));
        gpu
    }

    /// A GPU of `model` in a host it shares with other GPUs: its DMA reaches `host` and it
    /// keeps time with `clock` (see [`system::SimSystem`]).
    pub fn new_in(model: ChipModel, host: Arc<HostMemory>, clock: Arc<SimClock>) -> Arc<Self> {
        let m = model;
        let vram = Arc::new(Vram::new((m.vram_mib as u64) << 20));
        let peers = Arc::new(system::PeerPorts::default());
        let mut regs = bar0::RegisterFile::default();
        let (boot0, boot42) = chip::boot_registers(m.chipset, m.revision.0, m.revision.1);
        regs.set(NV_PMC_BOOT_0::OFFSET, boot0);
        regs.set(NV_PMC_BOOT_42::OFFSET, boot42);
        // Where devinit leaves the usable size depends on the chip: TU10x and GA100 have no
        // NV_USABLE_FB_SIZE_IN_MB (ga102's dev_gc6_island.h on), only
        // NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE (gp102 dev_fb.h, kmemsysReadUsableFbSize_GP102).
        if m.has_local_memory_range_only() {
            regs.set(
                nvbare_core::regs::pfb::NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::OFFSET,
                local_memory_range(m.vram_mib),
            );
        } else {
            regs.set(NV_PGC6_AON_SECURE_SCRATCH_GROUP_42::OFFSET, m.vram_mib);
        }
        regs.set(
            NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK::OFFSET,
            NV_PGC6_AON_SECURE_SCRATCH_GROUP_05_PRIV_LEVEL_MASK::new()
                .with_read_protection_level0(true)
                .into(),
        );
        regs.set(
            NV_PGC6_AON_SECURE_SCRATCH_GROUP_05::BASE,
            GFW_BOOT_PROGRESS_COMPLETED as u32,
        );
        let core = SimCore {
            regs,
            vram: vram.clone(),
            host: host.clone(),
            clock: clock.clone(),
            peers: peers.clone(),
            trace: Vec::new(),
            unknowns: Arc::new(unknowns::Unknowns::from_env()),
        };
        let engines: Vec<Box<dyn MmioEngine>> = vec![Box::new(bar0::UsermodeTimer)];
        let rev = (m.revision.0 << 4) | m.revision.1;
        Arc::new(SimGpu {
            model: m,
            state: Mutex::new(State { core, engines }),
            pci: Mutex::new(pci::ConfigSpace::new(
                0x10de,
                m.device_id,
                m.class,
                m.subsystem,
                rev,
            )),
            vram,
            host,
            clock,
            peers,
        })
    }

    /// The board this GPU plays.
    pub fn model(&self) -> &ChipModel {
        &self.model
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a hardware block; it sees accesses to the offsets it claims from now on.
    pub fn add_engine(&self, engine: Box<dyn MmioEngine>) {
        self.lock().engines.push(engine);
    }

    /// Runs `f` with the GPU's internals (for engines' tests and fault injection).
    pub fn with_core<R>(&self, f: impl FnOnce(&mut SimCore) -> R) -> R {
        f(&mut self.lock().core)
    }

    /// BAR0 as the driver sees it.
    pub fn bar0(self: &Arc<Self>) -> SimBar0 {
        SimBar0 { gpu: self.clone() }
    }

    /// BAR1 (the VRAM aperture) as the driver sees it.
    pub fn bar1(self: &Arc<Self>) -> SimBar1 {
        SimBar1 { gpu: self.clone() }
    }

    /// The DMA allocator the driver uses for host memory.
    pub fn dma(&self) -> SimDma {
        SimDma::new(self.host.clone())
    }

    /// PCI configuration space as the driver sees it.
    pub fn pci(self: &Arc<Self>) -> SimPci {
        SimPci { gpu: self.clone() }
    }

    /// The clock (implements the core's `Clock`).
    pub fn clock(&self) -> Arc<SimClock> {
        self.clock.clone()
    }

    /// The clock, borrowed.
    pub fn clock_ref(&self) -> &SimClock {
        &self.clock
    }

    /// Video memory.
    pub fn vram(&self) -> &Arc<Vram> {
        &self.vram
    }

    /// Host memory as the GPU sees it.
    pub fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }

    /// The GPU's peer ports (other GPUs' video memory by peer id).
    pub fn peer_ports(&self) -> &Arc<system::PeerPorts> {
        &self.peers
    }

    /// The GPU's trace lines so far.
    pub fn trace(&self) -> Vec<String> {
        self.lock().core.trace.clone()
    }

    /// Returns every engine to its power-on state (a PCI function reset).
    fn reset_engines(&self) {
        let mut st = self.lock();
        let State { core, engines } = &mut *st;
        for e in engines.iter_mut() {
            e.reset(core);
        }
    }

    fn mmio_read(&self, offset: usize) -> u32 {
        if check_mmio(offset, BAR0_SIZE).is_err() {
            return u32::MAX;
        }
        let off = offset as u32;
        let mut st = self.lock();
        let State { core, engines } = &mut *st;
        match engines.iter_mut().find(|e| e.claims(off)) {
            Some(e) => e.read(core, off),
            None => core.regs.get(off),
        }
    }

    fn mmio_write(&self, offset: usize, value: u32) {
        if check_mmio(offset, BAR0_SIZE).is_err() {
            log::warn!("sim: dropped BAR0 write {value:#x} at out-of-range offset {offset:#x}");
            return;
        }
        let off = offset as u32;
        let mut st = self.lock();
        let State { core, engines } = &mut *st;
        match engines.iter_mut().find(|e| e.claims(off)) {
            Some(e) => e.write(core, off, value),
            None => core.regs.set(off, value),
        }
    }
}

/// BAR0 of a [`SimGpu`] (implements `Mmio`).
#[derive(Debug, Clone)]
pub struct SimBar0 {
    gpu: Arc<SimGpu>,
}

impl Mmio for SimBar0 {
    fn size(&self) -> usize {
        BAR0_SIZE
    }
    fn read32(&self, offset: usize) -> u32 {
        self.gpu.mmio_read(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.gpu.mmio_write(offset, value)
    }
}

/// BAR1 of a [`SimGpu`]: a physical window onto VRAM (implements `Mmio`).
#[derive(Debug, Clone)]
pub struct SimBar1 {
    gpu: Arc<SimGpu>,
}

impl Mmio for SimBar1 {
    fn size(&self) -> usize {
        usize::try_from(self.gpu.model.bar1_size.min(self.gpu.vram.size())).unwrap_or(usize::MAX)
    }
    fn read32(&self, offset: usize) -> u32 {
        if check_mmio(offset, self.size()).is_err() {
            return u32::MAX;
        }
        if self.gpu.vram.bar1_virtual() {
            self.gpu.vram.note_bar1_virtual_access();
            return u32::MAX;
        }
        self.gpu.vram.read_u32(offset as u64).unwrap_or(u32::MAX)
    }
    fn write32(&self, offset: usize, value: u32) {
        if self.gpu.vram.bar1_virtual() {
            self.gpu.vram.note_bar1_virtual_access();
            return;
        }
        if check_mmio(offset, self.size()).is_ok() {
            let _ = self.gpu.vram.write_u32(offset as u64, value);
        }
    }
}

/// PCI config space of a [`SimGpu`] (implements `PciConfig`).
#[derive(Debug, Clone)]
pub struct SimPci {
    gpu: Arc<SimGpu>,
}

impl PciConfig for SimPci {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        let c = self.gpu.pci.lock().unwrap_or_else(|e| e.into_inner());
        c.read32(offset).ok_or(HalError::OutOfRange {
            offset: offset as u64,
            len: 4,
            limit: 4096,
        })
    }

    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
        let mut c = self.gpu.pci.lock().unwrap_or_else(|e| e.into_inner());
        if c.write32(offset, value) {
            Ok(())
        } else {
            Err(HalError::OutOfRange {
                offset: offset as u64,
                len: 4,
                limit: 4096,
            })
        }
    }

    fn reset_function(&self) -> Result<(), HalError> {
        self.gpu
            .pci
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .resets += 1;
        self.gpu.reset_engines();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::hal::{DmaAllocator, DmaBuffer};

    #[test]
    fn every_model_identifies_through_core() {
        for m in models::MODELS {
            let gpu = SimGpu::new(SimConfig::new(m).with_virtual_time());
            let c = chip::identify_mmio(&gpu.bar0()).unwrap();
            assert_eq!(c.chipset(), m.chipset);
            let vram = if m.has_local_memory_range_only() {
                nvbare_core::regs::pfb::NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::read(&gpu.bar0())
                    .usable_bytes()
            } else {
                NV_PGC6_AON_SECURE_SCRATCH_GROUP_42::read(&gpu.bar0()).vram_bytes()
            };
            assert_eq!(vram, gpu.vram().size(), "{}", m.board);
        }
    }

    #[test]
    fn bar0_out_of_range_reads_all_ones() {
        let gpu = SimGpu::new(SimConfig::new(models::GH100));
        let b = gpu.bar0();
        assert_eq!(b.read32(BAR0_SIZE), u32::MAX);
        assert_eq!(b.read32(3), u32::MAX);
        b.write32(BAR0_SIZE + 4, 1); // dropped, no panic
        assert!(b.try_read32(BAR0_SIZE).is_err());
    }

    #[test]
    fn timer_advances() {
        let gpu = SimGpu::new(SimConfig::new(models::AD102).with_virtual_time());
        let b = gpu.bar0();
        let t0 = b.read32(0xbb_0080);
        gpu.clock().advance(std::time::Duration::from_micros(5));
        assert!(b.read32(0xbb_0080).wrapping_sub(t0) >= 5000);
    }

    #[test]
    fn bar1_reaches_vram_and_pci_config_identifies() {
        let gpu = SimGpu::new(SimConfig::new(models::GB202));
        gpu.bar1().write32(0x1000, 0x1234_5678);
        assert_eq!(gpu.vram().read_u32(0x1000).unwrap(), 0x1234_5678);
        let pci = gpu.pci();
        assert_eq!(pci.read_config32(0).unwrap(), 0x2b85_10de);
        pci.set_bus_master(true).unwrap();
        assert_eq!(pci.read_config16(4).unwrap() & 4, 4);
        assert!(pci.read_config32(4096).is_err());
        let dma = gpu.dma();
        let buf = dma.alloc_dma(4096).unwrap();
        assert!(buf.dev_addr() >= host::DMA_BASE);
    }
}

/// `NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE` (gp102 dev_fb.h: LOWER_SCALE 3:0, LOWER_MAG 9:4, ECC
/// off) for `mib`, rounded down to what the field can say (`mag << scale` MiB, `mag` < 64;
/// exact for the power-of-two-ish sizes of real TU10x and GA100 boards).
fn local_memory_range(mib: u32) -> u32 {
    let scale = (0..16).find(|&s| mib >> s < 64).unwrap_or(15);
    ((mib >> scale) << 4) | scale
}

#[cfg(test)]
mod local_memory_range_tests {
    use nvbare_core::regs::pfb::NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE;

    #[test]
    fn encodes_what_the_core_decodes() {
        for mib in [16_384u32, 40_960, 81_920, 24_576] {
            let r = NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::from(super::local_memory_range(mib));
            assert_eq!(r.usable_bytes(), (mib as u64) << 20, "{mib}");
        }
        // Not representable: rounded down (24,564 MiB -> 47 << 9 = 24,064).
        let r = NV_PFB_PRI_MMU_LOCAL_MEMORY_RANGE::from(super::local_memory_range(24_564));
        assert_eq!(r.usable_bytes(), 24_064 << 20);
    }
}
