//! Several simulated GPUs in one host: shared host memory and clock, peer ports, BAR1 windows.
//!
//! A [`SimSystem`] owns its GPUs (each with its RM model) and what a real host gives them in
//! common:
//!
//! * one [`HostMemory`]: every GPU's DMA reaches the same system memory, so a buffer one GPU's
//!   RM allocated can be mapped into another GPU's VA space;
//! * one clock;
//! * a [`Topology`]: with [`Topology::P2p`] (GPUs on NVLink, or PCIe P2P under one root complex
//!   and one IOMMU domain) GPUs of the same chip can reach each other's video memory, two ways
//!   the hardware offers:
//!   - the PEER aperture: once peer access is enabled ([`SimSystem::connect`]), each GPU has a
//!     peer port (`Aperture::Peer(id)` in a PTE, [`PeerPorts`]) that leads to the other GPU's
//!     VRAM; this is what RM/UVM peer mappings use;
//!   - the other GPU's BAR1 at a bus address ([`SimSystem::bar1_base`]): a SYS-aperture access
//!     there lands in that GPU's VRAM (PCIe BAR1 P2P, what a bare-metal driver maps with its
//!     own page tables).
//!
//!   With [`Topology::NoP2p`] (no P2P path, or GPUs in different IOMMU domains) neither exists:
//!   enabling peer access fails, a BAR1 address is a DMA fault, and only host memory is shared.
//!   Different chips never get a P2P path (RM marks GPUs of a different architecture or
//!   implementation incapable of P2P: `areGpusP2PCompatible` in
//!   `src/nvidia/src/kernel/platform/p2p/p2p_caps.c`).
//!
//! Execution stays synchronous: a GPU runs inside its doorbell write. When one GPU releases a
//! semaphore another GPU is blocked on, nothing rings the other's doorbell, so the system
//! re-runs every GPU's blocked channels ([`SimSystem::kick`]) after each doorbell and after the
//! CPU writes a semaphore, until none makes progress, like the host engine retrying an acquire.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::SimGpu;
use crate::backend::SimBackend;
use crate::clock::SimClock;
use crate::host::HostMemory;
use crate::models::ChipModel;
use crate::rm::RmModel;
use crate::vram::Vram;

/// Peer ids a GPU has (`NV_MMU_VER2_PTE_ADDRESS_VID_PEER` / `NV_MMU_VER3_PTE_PEER_ID` are 3
/// bits).
pub const MAX_PEERS: usize = 8;
/// Bus address of GPU 0's BAR1 as other PCIe agents see it (far above the DMA range).
pub const PEER_BAR1_BASE: u64 = 0x1000_0000_0000;
/// Distance between the BAR1 windows of consecutive GPUs.
pub const PEER_BAR1_STRIDE: u64 = 1 << 40;
/// Host DMA memory per GPU of a system.
const HOST_MEMORY_PER_GPU: u64 = 4 << 30;
/// Most rounds of [`SimSystem::kick`] (each runs every GPU until it is idle).
const MAX_KICK_ROUNDS: usize = 64;

/// The other GPUs' video memory a GPU reaches by peer id.
#[derive(Debug, Default)]
pub struct PeerPorts {
    ports: RwLock<[Option<Arc<Vram>>; MAX_PEERS]>,
}

impl PeerPorts {
    /// Connects peer id `id` to `vram`.
    pub fn connect(&self, id: u8, vram: Arc<Vram>) -> Result<(), String> {
        let mut p = self.ports.write().unwrap_or_else(|e| e.into_inner());
        let slot = p
            .get_mut(id as usize)
            .ok_or_else(|| format!("peer id {id} is out of range (0..{MAX_PEERS})"))?;
        *slot = Some(vram);
        Ok(())
    }

    /// Disconnects peer id `id`.
    pub fn disconnect(&self, id: u8) {
        let mut p = self.ports.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = p.get_mut(id as usize) {
            *slot = None;
        }
    }

    /// The memory behind peer id `id`.
    pub fn get(&self, id: u8) -> Option<Arc<Vram>> {
        let p = self.ports.read().unwrap_or_else(|e| e.into_inner());
        p.get(id as usize).cloned().flatten()
    }

    /// The lowest peer id not connected.
    pub fn free_id(&self) -> Option<u8> {
        let p = self.ports.read().unwrap_or_else(|e| e.into_inner());
        p.iter().position(Option::is_none).map(|i| i as u8)
    }

    /// A read through peer id `id` (an unconnected id is an error, as an access through a peer
    /// aperture nobody set up faults on hardware).
    pub fn read(&self, id: u8, addr: u64, dst: &mut [u8]) -> Result<(), String> {
        let v = self
            .get(id)
            .ok_or_else(|| format!("peer id {id} is not connected"))?;
        v.read(addr, dst).map_err(|e| e.to_string())
    }

    /// A write through peer id `id`.
    pub fn write(&self, id: u8, addr: u64, src: &[u8]) -> Result<(), String> {
        let v = self
            .get(id)
            .ok_or_else(|| format!("peer id {id} is not connected"))?;
        v.write(addr, src).map_err(|e| e.to_string())
    }
}

/// Whether the GPUs of a system can reach each other's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// NVLink or PCIe P2P (one root complex, one IOMMU domain): GPUs of the same chip are
    /// peers.
    P2p,
    /// No peer-to-peer path (PCIe P2P unsupported, or GPUs in different IOMMU domains): only
    /// host memory is shared.
    NoP2p,
}

struct Node {
    gpu: Arc<SimGpu>,
    rm: Arc<Mutex<RmModel>>,
    bar1: u64,
}

#[derive(Debug, Clone, Copy)]
struct Link {
    a: usize,
    b: usize,
    id_in_a: u8,
    id_in_b: u8,
}

/// Several simulated GPUs sharing one host (see the [module docs](self)).
pub struct SimSystem {
    host: Arc<HostMemory>,
    clock: Arc<SimClock>,
    topology: Topology,
    nodes: Vec<Node>,
    links: Mutex<Vec<Link>>,
}

impl std::fmt::Debug for SimSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let boards: Vec<&str> = self.nodes.iter().map(|n| n.gpu.model().board).collect();
        f.debug_struct("SimSystem")
            .field("gpus", &boards)
            .field("topology", &self.topology)
            .finish_non_exhaustive()
    }
}

impl SimSystem {
    /// A host with one GPU per entry of `models` (each with its RM and host engine), sharing
    /// host memory and a clock (virtual time if `virtual_time`).
    pub fn new(
        models: &[ChipModel],
        topology: Topology,
        virtual_time: bool,
    ) -> Result<Arc<SimSystem>, String> {
        if models.is_empty() {
            return Err("a system needs at least one GPU".into());
        }
        let host = HostMemory::new(HOST_MEMORY_PER_GPU * models.len() as u64);
        let clock = Arc::new(if virtual_time {
            SimClock::virtual_time()
        } else {
            SimClock::real()
        });
        let mut nodes = Vec::with_capacity(models.len());
        for (i, &m) in models.iter().enumerate() {
            let gpu = SimGpu::new_in(m, host.clone(), clock.clone());
            let rm = RmModel::install(&gpu)?;
            let bar1 = PEER_BAR1_BASE + i as u64 * PEER_BAR1_STRIDE;
            if topology == Topology::P2p {
                let size = m.bar1_size.min(gpu.vram().size()).min(PEER_BAR1_STRIDE);
                host.add_peer_window(bar1, size, gpu.vram().clone())?;
            }
            nodes.push(Node { gpu, rm, bar1 });
        }
        Ok(Arc::new(SimSystem {
            host,
            clock,
            topology,
            nodes,
            links: Mutex::new(Vec::new()),
        }))
    }

    /// GPUs in the system.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the system has no GPU (never: [`SimSystem::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The topology.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// The shared host memory.
    pub fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }

    /// The shared clock.
    pub fn clock(&self) -> &Arc<SimClock> {
        &self.clock
    }

    /// GPU `i`.
    pub fn gpu(&self, i: usize) -> Option<&Arc<SimGpu>> {
        self.nodes.get(i).map(|n| &n.gpu)
    }

    /// GPU `i`'s RM model.
    pub fn rm(&self, i: usize) -> Option<&Arc<Mutex<RmModel>>> {
        self.nodes.get(i).map(|n| &n.rm)
    }

    /// The bus address of GPU `i`'s BAR1 as the other GPUs reach it (`None` without P2P: the
    /// window does not exist for them).
    pub fn bar1_base(&self, i: usize) -> Option<u64> {
        let n = self.nodes.get(i)?;
        (self.topology == Topology::P2p).then_some(n.bar1)
    }

    /// The device-layer backend of GPU `i` (one per GPU: it creates the RM client).
    pub fn backend(self: &Arc<Self>, i: usize) -> Result<SimBackend, String> {
        let n = self
            .nodes
            .get(i)
            .ok_or_else(|| format!("the system has {} GPUs, no GPU {i}", self.nodes.len()))?;
        Ok(SimBackend::on(n.gpu.clone(), n.rm.clone())?.in_system(self.clone(), i))
    }

    fn node(&self, i: usize) -> Result<&Node, String> {
        self.nodes
            .get(i)
            .ok_or_else(|| format!("no GPU {i} in the system"))
    }

    /// Whether GPU `a` can reach GPU `b`'s memory directly; `Err` says why not.
    pub fn p2p_capability(&self, a: usize, b: usize) -> Result<(), String> {
        let (na, nb) = (self.node(a)?, self.node(b)?);
        let (ma, mb) = (na.gpu.model(), nb.gpu.model());
        if a == b {
            return Err(format!("GPU {a} cannot be its own peer"));
        }
        if self.topology == Topology::NoP2p {
            return Err(format!(
                "the simulated host has no P2P path between GPU {a} ({}) and GPU {b} ({}): no \
                 NVLink, and PCIe P2P is not possible (different IOMMU domains or an \
                 unsupported root complex)",
                ma.board, mb.board
            ));
        }
        if ma.chipset != mb.chipset {
            return Err(format!(
                "GPU {a} is a {} and GPU {b} a {}: RM allows P2P only between GPUs of the same \
                 architecture and implementation",
                ma.chipset, mb.chipset
            ));
        }
        Ok(())
    }

    fn links(&self) -> MutexGuard<'_, Vec<Link>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enables peer access between GPUs `a` and `b` (both directions; again is a no-op):
    /// each gets a peer id for the other and a peer port to its VRAM. Returns the id GPU `a`
    /// uses for GPU `b`.
    pub fn connect(&self, a: usize, b: usize) -> Result<u8, String> {
        self.p2p_capability(a, b)?;
        if let Some(id) = self.peer_id(a, b) {
            return Ok(id);
        }
        let (na, nb) = (self.node(a)?, self.node(b)?);
        let (pa, pb) = (na.gpu.peer_ports(), nb.gpu.peer_ports());
        let id_in_a = pa
            .free_id()
            .ok_or_else(|| format!("GPU {a} has all {MAX_PEERS} peer ids in use"))?;
        let id_in_b = pb
            .free_id()
            .ok_or_else(|| format!("GPU {b} has all {MAX_PEERS} peer ids in use"))?;
        pa.connect(id_in_a, nb.gpu.vram().clone())?;
        pb.connect(id_in_b, na.gpu.vram().clone())?;
        self.links().push(Link {
            a,
            b,
            id_in_a,
            id_in_b,
        });
        Ok(id_in_a)
    }

    /// The peer id GPU `a` uses for GPU `b`, if peer access is enabled between them.
    pub fn peer_id(&self, a: usize, b: usize) -> Option<u8> {
        self.links().iter().find_map(|l| {
            if (l.a, l.b) == (a, b) {
                Some(l.id_in_a)
            } else if (l.a, l.b) == (b, a) {
                Some(l.id_in_b)
            } else {
                None
            }
        })
    }

    /// Runs every GPU's runnable channels, round after round, until none makes progress (a
    /// semaphore one GPU released may unblock another). Must not be called while a GPU of the
    /// system is locked (from inside an engine).
    pub fn kick(&self) {
        for _ in 0..MAX_KICK_ROUNDS {
            let mut progress = false;
            for n in &self.nodes {
                progress |= crate::fifo::run_channels(&n.gpu, &n.rm);
            }
            if !progress {
                return;
            }
        }
        log::warn!("sim system: GPUs still making progress after {MAX_KICK_ROUNDS} rounds");
    }
}

#[cfg(test)]
mod tests {
    //! The bare-metal style: `nvbare_core::mm` builds GPU 0's page tables (in its VRAM, through
    //! BAR1) with PTEs that point at GPU 1 by the PEER aperture and through GPU 1's BAR1, and
    //! the simulated GMMU walker translates every access.

    use nvbare_core::chip::Chipset;
    use nvbare_core::hal::Mmio;
    use nvbare_core::mm::{
        Bar1Tables, Mapper, MmError, MmuFormat, MmuInvalidate, PeerBar1Window, PteAttrs, TableSlot,
    };

    use super::*;
    use crate::gpu_mem::{Access, Aperture, FaultKind, gpu_read, gpu_write};
    use crate::mmu::{GmmuFormat, MmuConfig, SimMmu, TableLoc};
    use crate::models::{AD102, GB202, GH100};

    const TABLES: u64 = 0x1000_0000;
    const TABLES_LEN: u64 = 16 << 20;
    /// Where GPU 1's data lives in its VRAM.
    const PEER_DATA: u64 = 0x4000_0000;

    fn system(model: ChipModel, topology: Topology) -> Arc<SimSystem> {
        SimSystem::new(&[model, model], topology, true).unwrap()
    }

    /// Maps one 64 KiB page on GPU 0 for each of: PEER aperture to GPU 1's `PEER_DATA`, GPU 1's
    /// BAR1 at the same VRAM address, and writes/reads through both.
    fn peer_ptes(model: ChipModel) {
        let sys = system(model, Topology::P2p);
        let (g0, g1) = (sys.gpu(0).unwrap().clone(), sys.gpu(1).unwrap().clone());
        let mmu = SimMmu::install(&g0, MmuConfig::default());
        let clock = sys.clock().clone();
        let fmt = MmuFormat::for_chip(model.chipset.info());
        let mem = Bar1Tables::new(g0.bar1(), TABLES, TABLES, TABLES_LEN).unwrap();
        let slots = vec![TableSlot::INIT; (TABLES_LEN / 4096) as usize];
        let mut m = Mapper::new(fmt, mem, slots, MmuInvalidate::new(g0.bar0(), &*clock)).unwrap();
        let space = mmu.address_space(
            GmmuFormat::for_chip(model.chipset.info()),
            TableLoc {
                aperture: Aperture::Vram,
                addr: m.root().addr,
            },
        );

        let id = sys.connect(0, 1).unwrap();
        let bar1 = sys.bar1_base(1).unwrap();
        let window = PeerBar1Window::new(bar1, model.bar1_size.min(g1.vram().size()), 0).unwrap();
        let (va_peer, va_bar1) = (0x20_0000_0000u64, 0x20_1000_0000u64);
        m.map(va_peer, PEER_DATA, 64 << 10, &PteAttrs::peer(id))
            .unwrap();
        let bus = window.bus_address(PEER_DATA, 64 << 10).unwrap();
        m.map(va_bar1, bus, 64 << 10, &window.attrs()).unwrap();

        g1.vram().write(PEER_DATA + 0x100, b"peer!").unwrap();
        let walked = g0.with_core(|core| space.walk(core, va_peer)).unwrap();
        assert_eq!(walked.aperture, Aperture::Peer(id));
        let walked = g0.with_core(|core| space.walk(core, va_bar1)).unwrap();
        assert_eq!(walked.aperture, Aperture::SysNonCoherent);
        assert_eq!(walked.phys, bus);
        g0.with_core(|core| {
            let mut b = [0u8; 5];
            gpu_read(core, &space, va_peer + 0x100, &mut b, Access::Read).unwrap();
            assert_eq!(&b, b"peer!", "{}: PEER aperture", model.board);
            let mut b = [0u8; 5];
            gpu_read(core, &space, va_bar1 + 0x100, &mut b, Access::Read).unwrap();
            assert_eq!(&b, b"peer!", "{}: BAR1", model.board);
            gpu_write(core, &space, va_bar1 + 0x2000, b"bar1", Access::Write).unwrap();
            gpu_write(core, &space, va_peer + 0x3000, b"nvlk", Access::Write).unwrap();
        });
        let mut b = [0u8; 4];
        g1.vram().read(PEER_DATA + 0x2000, &mut b).unwrap();
        assert_eq!(&b, b"bar1");
        g1.vram().read(PEER_DATA + 0x3000, &mut b).unwrap();
        assert_eq!(&b, b"nvlk");
        // GPU 0's own VRAM at that address is untouched.
        g0.vram().read(PEER_DATA + 0x2000, &mut b).unwrap();
        assert_eq!(b, [0; 4]);

        // Beyond the BAR1 window there is nothing to map.
        let beyond = window.size();
        assert!(matches!(
            window.bus_address(beyond, 4096),
            Err(MmError::OutsidePeerWindow { .. })
        ));

        // Unmapped again, both fault (the mapper invalidated the TLB and, the tables being
        // empty, released them).
        m.unmap(va_peer, 64 << 10).unwrap();
        m.unmap(va_bar1, 64 << 10).unwrap();
        g0.with_core(|core| {
            let mut b = [0u8; 4];
            let f = gpu_read(core, &space, va_bar1, &mut b, Access::Read).unwrap_err();
            assert_eq!(f.kind, FaultKind::InvalidPde);
            let f = gpu_read(core, &space, va_peer, &mut b, Access::Read).unwrap_err();
            assert_eq!(f.kind, FaultKind::InvalidPde);
        });
        assert_eq!(mmu.stats().stale_hits, 0);
    }

    #[test]
    fn core_mm_peer_and_bar1_ptes_reach_the_other_gpu() {
        for model in [GH100, AD102, GB202] {
            peer_ptes(model);
        }
    }

    #[test]
    fn without_p2p_neither_path_exists() {
        let sys = system(GH100, Topology::NoP2p);
        assert!(sys.bar1_base(1).is_none());
        let e = sys.connect(0, 1).unwrap_err();
        assert!(e.contains("no P2P path"), "{e}");
        // A DMA to where GPU 1's BAR1 would be is a fault, not a silent success.
        assert!(
            sys.host()
                .read(PEER_BAR1_BASE + PEER_BAR1_STRIDE, &mut [0; 4])
                .is_err()
        );
        // A PEER PTE without a connected port faults as a bad physical address.
        let g0 = sys.gpu(0).unwrap();
        assert!(g0.peer_ports().get(0).is_none());
        let tbl = crate::rm::vaspace::VaTable::new(0x1000, 1 << 40);
        tbl.map(crate::rm::vaspace::Mapping {
            va: 0x10_0000,
            size: 4096,
            aperture: Aperture::Peer(0),
            phys: 0,
            read_only: false,
        })
        .unwrap();
        g0.with_core(|core| {
            let f = gpu_read(core, &tbl, 0x10_0000, &mut [0; 4], Access::Read).unwrap_err();
            assert_eq!(f.kind, FaultKind::BadPhysical);
        });
    }

    #[test]
    fn peer_ids_are_per_pair_and_chips_must_match() {
        let sys = SimSystem::new(&[GH100, GH100, GH100, AD102], Topology::P2p, true).unwrap();
        let a = sys.connect(0, 1).unwrap();
        assert_eq!(sys.connect(0, 1).unwrap(), a, "again is a no-op");
        assert_eq!(sys.peer_id(1, 0), Some(0));
        let b = sys.connect(0, 2).unwrap();
        assert_ne!(a, b, "GPU 0 uses a different id for each peer");
        assert!(sys.connect(0, 0).is_err());
        let e = sys.connect(0, 3).unwrap_err();
        assert!(e.contains("same architecture"), "{e}");
        assert_eq!(sys.gpu(3).unwrap().model().chipset, Chipset::AD102);
        // GPU 0 writes GPU 2's memory through its port.
        sys.gpu(0)
            .unwrap()
            .peer_ports()
            .write(b, 0x5000, &[1, 2, 3])
            .unwrap();
        let mut x = [0u8; 3];
        sys.gpu(2).unwrap().vram().read(0x5000, &mut x).unwrap();
        assert_eq!(x, [1, 2, 3]);
        // BAR1 of GPU 2 through host memory (as GPU 0's DMA sees it).
        let bar1 = sys.bar1_base(2).unwrap();
        sys.host().write(bar1 + 0x6000, &[4, 5]).unwrap();
        sys.gpu(2)
            .unwrap()
            .vram()
            .read(0x6000, &mut x[..2])
            .unwrap();
        assert_eq!(&x[..2], &[4, 5]);
        let _ = sys.gpu(2).unwrap().bar1().read32(0x6000);
    }
}
