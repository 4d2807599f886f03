//! Several simulated GPUs in one host, driven bare metal: each a [`BareMetalSim`] (real GSP
//! boot, our page tables), all sharing one [`HostMemory`] and one clock, each GPU's BAR1 a
//! window in the shared host address space.
//!
//! ```text
//!  GPU 0 (BareMetalSim)                         GPU 1 (BareMetalSim)
//!  our PTE: SYS_NONCOHERENT,                    VRAM ◄──┐
//!  addr = PEER_BAR1_BASE + STRIDE + pa ──DMA──► host ──┘ window [PEER_BAR1_BASE + STRIDE, +BAR1)
//! ```
//!
//! This is what a VFIO peer group gives real GPUs: one IOMMU domain (the DMA buffers of either
//! GPU are valid for both) in which each GPU's BAR1 is mapped at a bus address the others'
//! DMA reaches. [`BareMetalSystem::open`] hands each backend its
//! [`PeerPlatform`] (the shared DMA space, where its BAR1 is), so the bare-metal backend's
//! peer hooks map peer VRAM as SYS-aperture memory at the BAR1 address, and the simulated GMMU
//! walker carries the access into the other GPU's VRAM.
//!
//! With [`Topology::NoP2p`] the windows do not exist (a DMA there is a fault, like an IOMMU
//! fault) and each GPU's platform says its BAR1 is unreachable, so `enable_peer` fails; host
//! memory stays shared. Different chips are never peers (RM's `areGpusP2PCompatible`); the
//! backend checks that itself.
//!
//! Execution stays synchronous: a GPU runs inside its doorbell write. A release by one GPU that
//! another is blocked on is picked up when a driver waits: every GPU's clock re-runs all GPUs'
//! runnable channels after each delay ([`BareMetalSystem::kick`]), as the host engines keep
//! retrying acquires while the CPU waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nvbare_core::device::baremetal::{BareMetalError, BareMetalOptions, PeerPlatform};
use nvbare_core::gsp::boot::firmware::BootFirmware;
use nvbare_core::gsp::boot::{BootObserver, BootOptions};

use crate::SimGpu;
use crate::baremetal::{BareMetalSim, Kick, SimBareMetal};
use crate::boot::{BootSimConfig, SimFirmware};
use crate::clock::SimClock;
use crate::host::HostMemory;
use crate::models::ChipModel;
use crate::rm::RmModel;
use crate::system::{PEER_BAR1_BASE, PEER_BAR1_STRIDE, Topology};

/// Host DMA memory per GPU.
const HOST_MEMORY_PER_GPU: u64 = 4 << 30;
/// Most rounds of [`BareMetalSystem::kick`].
const MAX_KICK_ROUNDS: usize = 64;

/// Distinct DMA address spaces for distinct simulated hosts.
static NEXT_SPACE: AtomicU64 = AtomicU64::new(1);

type Nodes = Vec<(Arc<SimGpu>, Arc<Mutex<RmModel>>)>;

/// Runs every GPU's runnable channels, round after round, until none makes progress.
fn kick_all(nodes: &Nodes) {
    for _ in 0..MAX_KICK_ROUNDS {
        let mut progress = false;
        for (gpu, rm) in nodes {
            progress |= crate::fifo::run_channels(gpu, rm);
        }
        if !progress {
            return;
        }
    }
    log::warn!("bare-metal sim host: GPUs still making progress after {MAX_KICK_ROUNDS} rounds");
}

/// Several bare-metal simulated GPUs in one host (see the [module docs](self)).
pub struct BareMetalSystem {
    host: Arc<HostMemory>,
    clock: Arc<SimClock>,
    topology: Topology,
    sims: Vec<BareMetalSim>,
    space: u64,
    nodes: Arc<Nodes>,
}

impl std::fmt::Debug for BareMetalSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let boards: Vec<&str> = self.sims.iter().map(|s| s.gpu().model().board).collect();
        f.debug_struct("BareMetalSystem")
            .field("gpus", &boards)
            .field("topology", &self.topology)
            .finish_non_exhaustive()
    }
}

impl BareMetalSystem {
    /// A host with one GPU per entry of `gpus` (the model and the firmware its boot hardware
    /// checks against), sharing host memory and a clock (virtual time if `virtual_time`).
    pub fn new(
        gpus: &[(ChipModel, Arc<SimFirmware>)],
        topology: Topology,
        virtual_time: bool,
    ) -> Result<BareMetalSystem, String> {
        if gpus.is_empty() {
            return Err("a system needs at least one GPU".into());
        }
        let host = HostMemory::new(HOST_MEMORY_PER_GPU * gpus.len() as u64);
        let clock = Arc::new(if virtual_time {
            SimClock::virtual_time()
        } else {
            SimClock::real()
        });
        let mut sims = Vec::with_capacity(gpus.len());
        for (i, (model, fw)) in gpus.iter().enumerate() {
            let sim = BareMetalSim::in_host(
                *model,
                BootSimConfig::new(fw.clone()),
                host.clone(),
                clock.clone(),
            )?;
            if topology == Topology::P2p {
                let g = sim.gpu();
                let size = model.bar1_size.min(g.vram().size()).min(PEER_BAR1_STRIDE);
                host.add_peer_window(Self::bar1_at(i), size, g.vram().clone())?;
            }
            sims.push(sim);
        }
        let nodes: Arc<Nodes> = Arc::new(
            sims.iter()
                .map(|s| (s.gpu().clone(), s.rm_shared().clone()))
                .collect(),
        );
        let n = nodes.clone();
        let kick = Kick(Arc::new(move || kick_all(&n)));
        for s in &mut sims {
            s.set_kick(kick.clone());
        }
        Ok(BareMetalSystem {
            host,
            clock,
            topology,
            sims,
            space: NEXT_SPACE.fetch_add(1, Ordering::Relaxed),
            nodes,
        })
    }

    fn bar1_at(i: usize) -> u64 {
        PEER_BAR1_BASE + i as u64 * PEER_BAR1_STRIDE
    }

    /// GPUs in the host.
    pub fn len(&self) -> usize {
        self.sims.len()
    }

    /// Whether the host has no GPU (never: [`BareMetalSystem::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.sims.is_empty()
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
    pub fn sim(&self, i: usize) -> Option<&BareMetalSim> {
        self.sims.get(i)
    }

    /// The bus address of GPU `i`'s BAR1 as the other GPUs' DMA reaches it (`None` without
    /// P2P).
    pub fn bar1_base(&self, i: usize) -> Option<u64> {
        (i < self.sims.len() && self.topology == Topology::P2p).then(|| Self::bar1_at(i))
    }

    /// What GPU `i`'s backend is told about its place in the host.
    pub fn peer_platform(&self, i: usize) -> Option<PeerPlatform> {
        let s = self.sims.get(i)?;
        let bar1 = match self.topology {
            Topology::P2p => Ok(Self::bar1_at(i)),
            Topology::NoP2p => Err(format!(
                "the simulated host has no P2P path to GPU {i} ({}): no NVLink, and PCIe P2P \
                 is not possible (different IOMMU domains or an unsupported root complex)",
                s.gpu().model().board
            )),
        };
        Some(PeerPlatform {
            dma_space: self.space,
            bar1,
            link: "simulated PCIe BAR1 P2P".into(),
        })
    }

    /// What `describe()` of GPU `i` says unless the caller chose a label.
    pub fn label(&self, i: usize) -> String {
        match self.sims.get(i) {
            Some(s) => {
                let m = s.gpu().model();
                format!(
                    "sim:{}#{i} (simulated {}, GPU {i} of {}, bare metal)",
                    m.chipset.name().to_ascii_lowercase(),
                    m.board,
                    self.sims.len()
                )
            }
            None => format!("no GPU {i}"),
        }
    }

    /// Boots GSP-RM on GPU `i` with `fw` and opens its bare-metal backend, told where it sits
    /// in the host ([`BareMetalSystem::peer_platform`]; `opts.peer` is replaced). The default
    /// label becomes [`BareMetalSystem::label`].
    pub fn open<F: BootFirmware, O: BootObserver + ?Sized>(
        &self,
        i: usize,
        fw: &F,
        boot_opts: &BootOptions<'_>,
        obs: &mut O,
        mut opts: BareMetalOptions,
    ) -> Result<SimBareMetal, BareMetalError> {
        let sim = self
            .sims
            .get(i)
            .ok_or(BareMetalError::Setup("no such GPU in the simulated host"))?;
        opts.peer = self.peer_platform(i);
        if opts.label == BareMetalOptions::default().label {
            opts.label = self.label(i);
        }
        sim.open(fw, boot_opts, obs, opts)
    }

    /// Runs every GPU's runnable channels until none makes progress (what each GPU's clock
    /// does after a delay). Must not be called while a GPU of the host is locked.
    pub fn kick(&self) {
        kick_all(&self.nodes);
    }

    /// Everything the simulated hardware of any GPU found wrong so far.
    pub fn errors(&self) -> Vec<String> {
        self.sims
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.errors().into_iter().map(move |e| format!("GPU {i}: {e}")))
            .collect()
    }
}
