//! The simulated Resource Manager (contract C): an object tree per client with the classes and
//! controls device bring-up uses, answering like the RM of the chip being played.
//!
//! [`RmModel`] implements [`RmService`], so it serves RM calls made directly (the RM-level test
//! backend, [`crate::backend::SimBackend`], standing in for an RM living in a kernel) and RM
//! calls carried by GSP RPCs (the GSP-RM emulator). Besides alloc/control/free it models the
//! two memory escapes of a kernel RM that have no RPC equivalent in `RmService`:
//! [`RmModel::map_memory_dma`] (`NV_ESC_RM_MAP_MEMORY_DMA`, NVOS46: map memory into a VA space)
//! and [`RmModel::cpu_map`] (`NV_ESC_RM_MAP_MEMORY` + mmap: CPU access).
//!
//! What it checks, as RM does:
//! * handles: a new handle must be non-zero and unused in the client (`NV_ERR_INSERT_DUPLICATE_NAME`),
//!   parents must exist and be of a class that may hold the child (`NV_ERR_INVALID_OBJECT_PARENT`);
//! * classes: only those the chip's RM publishes; a compute or copy class of another
//!   generation is `NV_ERR_NOT_SUPPORTED` (what the H200 answers for AMPERE_COMPUTE_B), an
//!   unknown id `NV_ERR_INVALID_CLASS`;
//! * params: each struct is checked for the size of the caller's [`RmAbi`] (stricter than a real
//!   RM for alloc params, which it over-reads silently; a wrong size is always a bug), controls
//!   exactly as 580 does (`NV_ERR_INVALID_ARGUMENT`);
//! * channels: a power-of-two ring that is mapped in the channel's VA space, USERD inside its
//!   memory object, an error notifier that is a memory object.
//!
//! VA spaces keep their mappings in a table ([`vaspace::VaTable`], contract D) that the host
//! and the engines translate through; [`RmModel::set_address_space`] replaces a VA space's
//! translation (e.g. with a GMMU walker over page tables the driver built).

pub mod chips;
mod gsp_client;
pub mod heap;
pub mod vaspace;

pub use gsp_client::{FAULT_METHOD_BUFFER_SIZE, context_buffer_sizes, gr_runlist};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nvbare_core::chip::Chipset;
use nvbare_core::hal::{DmaAllocator, DmaBuffer, HalError};
use nvbare_core::rm::alloc::*;
use nvbare_core::rm::class::*;
use nvbare_core::rm::ctrl::*;
use nvbare_core::rm::{Handle, RmAbi, RmStatus};
use zerocopy::{FromBytes, IntoBytes};

use crate::bar0::SimCore;
use crate::fifo::{ChannelDesc, DoorbellEngine, Fifo, PhysLoc};
use crate::gpu_mem::{AddressSpace, Aperture};
use crate::host::{SimDma, SimDmaBuffer};
use crate::models::ChipModel;
use crate::rm_service::{RmCaller, RmService};
use crate::vram::Vram;
use crate::{SimGpu, compute::KernelRegistry};

use chips::ChipRm;
use heap::Heap;
use vaspace::{MapError, Mapping, VaTable};

/// Default VA range of a `FERMI_VASPACE_A` with `vaSize` 0 (49 bits, as GMMU v2).
const DEFAULT_VA_LIMIT: u64 = (1 << 49) - 1;
/// VRAM below this is left to firmware and page tables.
const VRAM_RESERVED: u64 = 16 << 20;
/// `NVOS46_FLAGS_PAGE_SIZE` (11:8) values.
const NVOS46_PAGE_SIZE_4KB: u32 = 1;
const NVOS46_PAGE_SIZE_BIG: u32 = 2;
const NVOS46_PAGE_SIZE_HUGE: u32 = 4;
/// `NVOS46_FLAGS_DMA_OFFSET_FIXED` (15:15).
pub const NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE: u32 = 1 << 15;
/// `NVOS46_FLAGS_ACCESS_READ_ONLY` (1:0 = 1).
pub const NVOS46_FLAGS_ACCESS_READ_ONLY: u32 = 1;

/// Backing of a memory object.
#[derive(Debug, Clone)]
enum Backing {
    Vram {
        addr: u64,
    },
    Host(Arc<SimDmaBuffer>),
    /// Another GPU's video memory, reached through peer id `id` (an imported object).
    Peer {
        id: u8,
        addr: u64,
    },
}

#[derive(Debug, Clone)]
struct Memory {
    size: u64,
    backing: Backing,
    /// (VA space object, VA) of each DMA mapping.
    mappings: Vec<(Handle, u64)>,
}

impl Memory {
    fn loc(&self) -> PhysLoc {
        match &self.backing {
            Backing::Vram { addr } => PhysLoc {
                aperture: Aperture::Vram,
                addr: *addr,
            },
            Backing::Host(b) => PhysLoc {
                aperture: Aperture::SysCoherent,
                addr: b.dev_addr(),
            },
            Backing::Peer { id, addr } => PhysLoc {
                aperture: Aperture::Peer(*id),
                addr: *addr,
            },
        }
    }
}

#[derive(Clone)]
enum Kind {
    Client,
    Device,
    Subdevice,
    VaSpace {
        table: Arc<VaTable>,
        space: Arc<dyn AddressSpace>,
        /// `NV_VASPACE_ALLOCATION_FLAGS_*`.
        flags: u32,
        /// The client's root directory: set by SET_PAGE_DIRECTORY (externally owned) or
        /// `COPY_SERVER_RESERVED_PDES` (RM-owned), GSP mode.
        external: Option<crate::mmu::TableLoc>,
        /// What GSP-RM mapped for itself in the server-reserved range (GSP mode).
        server: Option<gsp_client::ServerMapping>,
    },
    /// `NV01_MEMORY_VIRTUAL`: a VA range of a VA space, bound when first used (the device's
    /// only VA space then, if `hVASpace` was 0), with `offset`/`limit` as asked (0 = whole).
    Virtual {
        vaspace: Option<Handle>,
        offset: u64,
        limit: u64,
    },
    Memory(Memory),
    ChannelGroup {
        tsg: u64,
        engine_type: u32,
        vaspace: Option<Handle>,
        timeslice_us: u64,
    },
    CtxShare {
        vaspace: Handle,
    },
    Channel {
        chid: u32,
        token: u32,
        tsg: u64,
    },
    Engine {
        chid: u32,
    },
    Usermode,
    Debugger {
        chid: Option<u32>,
    },
    Other,
}

#[derive(Clone)]
struct Object {
    parent: Handle,
    class: u32,
    kind: Kind,
    children: Vec<Handle>,
}

#[derive(Default)]
struct Client {
    objects: HashMap<Handle, Object>,
}

/// CPU access to a memory object (what `NV_ESC_RM_MAP_MEMORY` + mmap gives a process).
#[derive(Debug, Clone)]
pub enum CpuMapping {
    /// Video memory through BAR1.
    Vram {
        /// The framebuffer.
        vram: Arc<Vram>,
        /// Physical address of byte 0.
        addr: u64,
        /// Bytes.
        size: u64,
    },
    /// Host memory.
    Host(Arc<SimDmaBuffer>),
}

impl CpuMapping {
    /// Bytes mapped.
    pub fn size(&self) -> u64 {
        match self {
            CpuMapping::Vram { size, .. } => *size,
            CpuMapping::Host(b) => b.len() as u64,
        }
    }

    fn check(&self, off: u64, len: usize) -> Result<(), HalError> {
        nvbare_core::hal::check_range(off, len as u64, self.size())
    }

    /// Copies out.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), HalError> {
        self.check(off, dst.len())?;
        match self {
            CpuMapping::Vram { vram, addr, .. } => {
                vram.read(addr + off, dst).map_err(|_| HalError::DeviceLost)
            }
            CpuMapping::Host(b) => b.read(off as usize, dst),
        }
    }

    /// Copies in.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), HalError> {
        self.check(off, src.len())?;
        match self {
            CpuMapping::Vram { vram, addr, .. } => vram
                .write(addr + off, src)
                .map_err(|_| HalError::DeviceLost),
            CpuMapping::Host(b) => b.write(off as usize, src),
        }
    }
}

/// A memory object as another GPU's RM sees it ([`RmModel::export_memory`]).
#[derive(Debug, Clone)]
pub enum ExportedMemory {
    /// Video memory of the exporting GPU.
    Vram {
        /// Physical address.
        addr: u64,
        /// Bytes.
        size: u64,
    },
    /// Host memory (the GPUs of one system share it).
    Host(Arc<SimDmaBuffer>),
}

/// The simulated RM.
pub struct RmModel {
    model: ChipModel,
    rm: ChipRm,
    clients: HashMap<Handle, Client>,
    heap: Heap,
    fifo: Arc<Mutex<Fifo>>,
    dma: Option<SimDma>,
    vram: Option<Arc<Vram>>,
    next_chid: u32,
    next_tsg: u64,
    /// GSP-RM's view of its clients (bare metal), when set.
    gsp: Option<gsp_client::GspMode>,
}

impl std::fmt::Debug for RmModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmModel")
            .field("chip", &self.model.chipset)
            .field("clients", &self.clients.len())
            .finish_non_exhaustive()
    }
}

fn st(s: RmStatus) -> Result<(), RmStatus> {
    Err(s)
}

/// Reads params of exactly `T`'s size.
fn params<T: FromBytes>(p: &[u8]) -> Result<T, RmStatus> {
    T::read_from_bytes(p).map_err(|_| RmStatus::NV_ERR_INVALID_PARAM_STRUCT)
}

/// Reads control params of exactly `T`'s size (580 answers a wrong size with
/// `NV_ERR_INVALID_ARGUMENT`, `control.c`).
fn ctrl_params<T: FromBytes>(p: &[u8]) -> Result<T, RmStatus> {
    T::read_from_bytes(p).map_err(|_| RmStatus::NV_ERR_INVALID_ARGUMENT)
}

fn write_back<T: IntoBytes + zerocopy::Immutable>(p: &mut [u8], v: &T) {
    let b = v.as_bytes();
    if let Some(dst) = p.get_mut(..b.len()) {
        dst.copy_from_slice(b);
    }
}

impl RmModel {
    /// The RM of a `model` GPU whose host is `fifo`.
    pub fn new(model: ChipModel, fifo: Arc<Mutex<Fifo>>) -> Result<Self, String> {
        let rm = ChipRm::for_chipset(model.chipset)
            .ok_or_else(|| format!("no RM model for {}", model.chipset))?;
        let vram_size = (model.vram_mib as u64) << 20;
        Ok(RmModel {
            model,
            rm,
            clients: HashMap::new(),
            heap: Heap::new(VRAM_RESERVED, vram_size.saturating_sub(VRAM_RESERVED)),
            fifo,
            dma: None,
            vram: None,
            next_chid: 0,
            next_tsg: 1,
            gsp: None,
        })
    }

    /// Creates the RM and host of `gpu` and plugs the doorbell into its BAR0.
    pub fn install(gpu: &Arc<SimGpu>) -> Result<Arc<Mutex<RmModel>>, String> {
        let model = *gpu.model();
        let rm = ChipRm::for_chipset(model.chipset)
            .ok_or_else(|| format!("no RM model for {}", model.chipset))?;
        let kernels = Arc::new(KernelRegistry::fixtures()?);
        let fifo = Arc::new(Mutex::new(Fifo::new(model.chipset, rm, kernels)));
        gpu.add_engine(Box::new(DoorbellEngine::new(fifo.clone())));
        let mut m = RmModel::new(model, fifo)?;
        m.dma = Some(gpu.dma());
        m.vram = Some(gpu.vram().clone());
        Ok(Arc::new(Mutex::new(m)))
    }

    /// The host this RM registers channels with.
    pub fn fifo(&self) -> &Arc<Mutex<Fifo>> {
        &self.fifo
    }

    /// The chip.
    pub fn chipset(&self) -> Chipset {
        self.model.chipset
    }

    /// What this RM reports for the chip.
    pub fn chip_rm(&self) -> ChipRm {
        self.rm
    }

    /// Bytes of VRAM allocated.
    pub fn vram_used(&self) -> u64 {
        self.heap.used()
    }

    fn client(&self, c: Handle) -> Result<&Client, RmStatus> {
        self.clients.get(&c).ok_or(RmStatus::NV_ERR_INVALID_CLIENT)
    }

    fn client_mut(&mut self, c: Handle) -> Result<&mut Client, RmStatus> {
        self.clients
            .get_mut(&c)
            .ok_or(RmStatus::NV_ERR_INVALID_CLIENT)
    }

    fn object(&self, c: Handle, h: Handle) -> Result<&Object, RmStatus> {
        self.client(c)?
            .objects
            .get(&h)
            .ok_or(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE)
    }

    fn object_mut(&mut self, c: Handle, h: Handle) -> Result<&mut Object, RmStatus> {
        self.client_mut(c)?
            .objects
            .get_mut(&h)
            .ok_or(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE)
    }

    fn vaspace_table(&self, c: Handle, h: Handle) -> Result<Arc<VaTable>, RmStatus> {
        match &self.object(c, h)?.kind {
            Kind::VaSpace { table, .. } => Ok(table.clone()),
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    fn vaspace_space(&self, c: Handle, h: Handle) -> Result<Arc<dyn AddressSpace>, RmStatus> {
        match &self.object(c, h)?.kind {
            Kind::VaSpace { space, .. } => Ok(space.clone()),
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    /// In GSP mode a VA space must have the client's page tables before channels use it:
    /// SET_PAGE_DIRECTORY for an externally owned one ("create subcontext only after
    /// SetPageDirectory()"), `COPY_SERVER_RESERVED_PDES` for an RM-owned one (the kernel RM
    /// sends it when it constructs every RM-owned VA space, `gvaspaceCopyServerRmReserved
    /// PdesToServerRm_IMPL`; GSP-RM keeps no page tables of its own for them). GSP-RM's own
    /// mapping in the server-reserved range must still translate.
    fn check_external_ready(
        &self,
        core: &SimCore,
        c: Handle,
        vaspace: Handle,
    ) -> Result<(), RmStatus> {
        if self.gsp.is_none() {
            return Ok(());
        }
        match &self.object(c, vaspace)?.kind {
            Kind::VaSpace { external: None, .. } => Err(RmStatus::NV_ERR_INVALID_STATE),
            Kind::VaSpace {
                server: Some(m), ..
            } => m.check(core, &format!("a channel of VA space {:#x}", vaspace.0)),
            _ => Ok(()),
        }
    }

    /// Replaces the translation of VA space `vaspace` (the mapping table stays for
    /// [`RmModel::map_memory_dma`]); channels created afterwards use `space`.
    pub fn set_address_space(
        &mut self,
        client: Handle,
        vaspace: Handle,
        space: Arc<dyn AddressSpace>,
    ) -> Result<(), RmStatus> {
        match &mut self.object_mut(client, vaspace)?.kind {
            Kind::VaSpace { space: s, .. } => {
                *s = space;
                Ok(())
            }
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    /// The channel id of channel object `h` of `client`.
    pub fn chid(&self, client: Handle, h: Handle) -> Option<u32> {
        match self.object(client, h).ok()?.kind {
            Kind::Channel { chid, .. } => Some(chid),
            _ => None,
        }
    }

    /// The translation of VA space object `vaspace`.
    pub fn address_space(
        &self,
        client: Handle,
        vaspace: Handle,
    ) -> Result<Arc<dyn AddressSpace>, RmStatus> {
        self.vaspace_space(client, vaspace)
    }

    /// The class of object `h` of `client`, if it exists.
    pub fn class_of(&self, client: Handle, h: Handle) -> Option<u32> {
        self.object(client, h).ok().map(|o| o.class)
    }

    /// The objects of `client` (handle, class), sorted by handle.
    pub fn objects(&self, client: Handle) -> Vec<(Handle, u32)> {
        let mut v: Vec<(Handle, u32)> = self
            .clients
            .get(&client)
            .map(|c| c.objects.iter().map(|(h, o)| (*h, o.class)).collect())
            .unwrap_or_default();
        v.sort_by_key(|(h, _)| h.0);
        v
    }

    /// Objects `client` holds (itself included); 0 if there is no such client.
    pub fn object_count(&self, client: Handle) -> usize {
        self.clients.get(&client).map_or(0, |c| c.objects.len())
    }

    /// Some object of `class` in `client` (lowest handle).
    pub fn first_of_class(&self, client: Handle, class: u32) -> Option<Handle> {
        self.client(client)
            .ok()?
            .objects
            .iter()
            .filter(|(_, o)| o.class == class)
            .map(|(h, _)| *h)
            .min()
    }

    /// The only VA space of `client` under `device`, for `hVASpace = 0`.
    fn default_vaspace(&self, c: Handle) -> Result<Handle, RmStatus> {
        let cl = self.client(c)?;
        let mut it = cl
            .objects
            .iter()
            .filter(|(_, o)| matches!(o.kind, Kind::VaSpace { .. }));
        match (it.next(), it.next()) {
            (Some((h, _)), None) => Ok(*h),
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    fn memory(&self, c: Handle, h: Handle) -> Result<&Memory, RmStatus> {
        match &self.object(c, h)?.kind {
            Kind::Memory(m) => Ok(m),
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    // ------------------------------------------------------------------------------------------
    // Escapes of a kernel RM.

    /// `NV_ESC_RM_MAP_MEMORY_DMA` (NVOS46): maps `length` bytes at `offset` of memory `memory`
    /// into the VA range of `dma` (an `NV01_MEMORY_VIRTUAL` or a VA space). With
    /// `NVOS46_FLAGS_DMA_OFFSET_FIXED` the mapping goes at `dma_offset`; otherwise RM picks the
    /// lowest free range aligned to the page size. Returns the VA.
    #[allow(clippy::too_many_arguments)]
    pub fn map_memory_dma(
        &mut self,
        client: Handle,
        dma: Handle,
        memory: Handle,
        offset: u64,
        length: u64,
        flags: u32,
        dma_offset: u64,
    ) -> Result<u64, RmStatus> {
        let (vaspace, lo, hi) = match &self.object(client, dma)?.kind {
            Kind::Virtual {
                vaspace,
                offset,
                limit,
            } => {
                let v = match vaspace {
                    Some(v) => *v,
                    None => self.default_vaspace(client)?,
                };
                let t = self.vaspace_table(client, v)?;
                let lo = (*offset).max(t.base());
                let hi = if *limit == 0 {
                    t.limit()
                } else {
                    (*limit).min(t.limit())
                };
                if lo > hi {
                    return Err(RmStatus::NV_ERR_INVALID_LIMIT);
                }
                (v, lo, hi)
            }
            Kind::VaSpace { table, .. } => (dma, table.base(), table.limit()),
            _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        };
        if let Kind::VaSpace {
            external: Some(_), ..
        } = self.object(client, vaspace)?.kind
        {
            // RM owns no page tables of a VA space whose directory the client set.
            return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
        }
        let table = self.vaspace_table(client, vaspace)?;
        let mem = self.memory(client, memory)?.clone();
        let length = if length == 0 {
            mem.size.saturating_sub(offset)
        } else {
            length
        };
        if offset.checked_add(length).is_none_or(|e| e > mem.size) || length == 0 {
            return Err(RmStatus::NV_ERR_INVALID_LIMIT);
        }
        let page = match (flags >> 8) & 0xf {
            NVOS46_PAGE_SIZE_4KB => 4 << 10,
            NVOS46_PAGE_SIZE_BIG => 64 << 10,
            NVOS46_PAGE_SIZE_HUGE => 2 << 20,
            0 if length >= 2 << 20 => 2 << 20,
            0 if length >= 64 << 10 => 64 << 10,
            0 => 4 << 10,
            _ => return Err(RmStatus::NV_ERR_INVALID_FLAGS),
        };
        let va = if flags & NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE != 0 {
            if !dma_offset.is_multiple_of(4096) || dma_offset < lo || dma_offset > hi {
                return Err(RmStatus::NV_ERR_INVALID_OFFSET);
            }
            dma_offset
        } else {
            table
                .find_free(lo, hi, length, page)
                .map_err(|_| RmStatus::NV_ERR_NO_MEMORY)?
        };
        let loc = mem.loc();
        table
            .map(Mapping {
                va,
                size: length,
                aperture: loc.aperture,
                phys: loc.addr + offset,
                read_only: flags & 3 == NVOS46_FLAGS_ACCESS_READ_ONLY,
            })
            .map_err(|e| match e {
                MapError::Overlap => RmStatus::NV_ERR_STATE_IN_USE,
                _ => RmStatus::NV_ERR_INVALID_OFFSET,
            })?;
        if let Kind::Memory(m) = &mut self.object_mut(client, memory)?.kind {
            m.mappings.push((vaspace, va));
        }
        Ok(va)
    }

    /// `NV_ESC_RM_UNMAP_MEMORY_DMA` (NVOS47): removes the mapping of `memory` at `va`.
    pub fn unmap_memory_dma(
        &mut self,
        client: Handle,
        memory: Handle,
        va: u64,
    ) -> Result<(), RmStatus> {
        let Kind::Memory(m) = &self.object(client, memory)?.kind else {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
        };
        let Some(i) = m.mappings.iter().position(|&(_, v)| v == va) else {
            return Err(RmStatus::NV_ERR_INVALID_OFFSET);
        };
        let (vaspace, _) = m.mappings[i];
        if let Ok(t) = self.vaspace_table(client, vaspace) {
            t.unmap(va);
        }
        if let Kind::Memory(m) = &mut self.object_mut(client, memory)?.kind {
            m.mappings.remove(i);
        }
        Ok(())
    }

    /// `NV_ESC_RM_MAP_MEMORY` + mmap: CPU access to memory object `memory`.
    pub fn cpu_map(&self, client: Handle, memory: Handle) -> Result<CpuMapping, RmStatus> {
        let m = self.memory(client, memory)?;
        Ok(match &m.backing {
            Backing::Vram { addr } => CpuMapping::Vram {
                vram: self.vram.clone().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?,
                addr: *addr,
                size: m.size,
            },
            Backing::Host(b) => CpuMapping::Host(b.clone()),
            // The CPU reaches a peer's memory through that GPU, not this one.
            Backing::Peer { .. } => return Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        })
    }

    /// What memory object `memory` is, for another GPU's RM to import with
    /// [`RmModel::import_peer_memory`] (a real RM dups the object under the other device:
    /// `NV_ESC_RM_DUP_OBJECT`). Imported objects are not exported again.
    pub fn export_memory(
        &self,
        client: Handle,
        memory: Handle,
    ) -> Result<ExportedMemory, RmStatus> {
        let m = self.memory(client, memory)?;
        match &m.backing {
            Backing::Vram { addr } => Ok(ExportedMemory::Vram {
                addr: *addr,
                size: m.size,
            }),
            Backing::Host(b) => Ok(ExportedMemory::Host(b.clone())),
            Backing::Peer { .. } => Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        }
    }

    /// Creates memory object `handle` (under the device or subdevice `parent`) for memory of
    /// another GPU: video memory reached through `peer_id` (the peer port the system set up
    /// when peer access was enabled), or host memory both GPUs share. Map it with
    /// [`RmModel::map_memory_dma`]; freeing it leaves the other GPU's memory alone.
    pub fn import_peer_memory(
        &mut self,
        client: Handle,
        parent: Handle,
        handle: Handle,
        mem: ExportedMemory,
        peer_id: Option<u8>,
    ) -> Result<(), RmStatus> {
        self.expect_parent(client, parent, &[NV01_DEVICE_0, NV20_SUBDEVICE_0])?;
        if handle.0 == 0 {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_NEW);
        }
        if self.client(client)?.objects.contains_key(&handle) {
            return Err(RmStatus::NV_ERR_INSERT_DUPLICATE_NAME);
        }
        let (class, size, backing) = match mem {
            ExportedMemory::Vram { addr, size } => {
                // Peer access must be enabled: without a peer id there is no path.
                let id = peer_id.ok_or(RmStatus::NV_ERR_INVALID_STATE)?;
                (NV01_MEMORY_LOCAL_USER, size, Backing::Peer { id, addr })
            }
            ExportedMemory::Host(b) => (NV01_MEMORY_SYSTEM, b.len() as u64, Backing::Host(b)),
        };
        let kind = Kind::Memory(Memory {
            size,
            backing,
            mappings: Vec::new(),
        });
        let cl = self.client_mut(client)?;
        cl.objects.insert(
            handle,
            Object {
                parent,
                class,
                kind,
                children: Vec::new(),
            },
        );
        if let Some(p) = cl.objects.get_mut(&parent) {
            p.children.push(handle);
        }
        Ok(())
    }

    // ------------------------------------------------------------------------------------------
    // Allocation.

    fn check_class(&self, class: u32) -> Result<(), RmStatus> {
        if self.rm.has_class(class) {
            return Ok(());
        }
        if class_kind(class).is_some() {
            // Another generation's engine class: the H200 answers AMPERE_COMPUTE_B with this.
            st(RmStatus::NV_ERR_NOT_SUPPORTED)
        } else {
            st(RmStatus::NV_ERR_INVALID_CLASS)
        }
    }

    fn parent_class(&self, c: Handle, parent: Handle) -> Result<u32, RmStatus> {
        self.object(c, parent)
            .map(|o| o.class)
            .map_err(|_| RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
    }

    fn expect_parent(&self, c: Handle, parent: Handle, classes: &[u32]) -> Result<(), RmStatus> {
        let pc = self.parent_class(c, parent)?;
        if classes.contains(&pc) {
            Ok(())
        } else {
            st(RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
        }
    }

    fn alloc_memory(&mut self, class: u32, p: &mut [u8]) -> Result<Memory, RmStatus> {
        let mut a: NV_MEMORY_ALLOCATION_PARAMS = params(p)?;
        if a.size == 0 {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let huge = a.attr & (3 << 23) == attr::PAGE_SIZE_HUGE;
        let page: u64 = if huge { 2 << 20 } else { 4 << 10 };
        let size = a
            .size
            .checked_next_multiple_of(page)
            .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
        let align = a.alignment.max(page);
        if !align.is_power_of_two() {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let backing = if class == NV01_MEMORY_LOCAL_USER {
            if a.attr & attr::LOCATION_MASK == attr::LOCATION_PCI {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            let addr = self
                .heap
                .alloc(size, align)
                .ok_or(RmStatus::NV_ERR_NO_MEMORY)?;
            Backing::Vram { addr }
        } else {
            let dma = self.dma.as_ref().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?;
            let n = usize::try_from(size).map_err(|_| RmStatus::NV_ERR_NO_MEMORY)?;
            let b = dma.alloc_dma(n).map_err(|_| RmStatus::NV_ERR_NO_MEMORY)?;
            Backing::Host(Arc::new(b))
        };
        a.size = size;
        a.limit = size - 1;
        if let Backing::Vram { addr } = backing {
            a.offset = addr;
        }
        write_back(p, &a);
        Ok(Memory {
            size,
            backing,
            mappings: Vec::new(),
        })
    }

    fn alloc_channel(
        &mut self,
        core: &mut SimCore,
        c: Handle,
        parent: Handle,
        class: u32,
        p: &mut [u8],
    ) -> Result<Kind, RmStatus> {
        let a: NV_CHANNEL_ALLOC_PARAMS = params(p)?;
        let (tsg, tsg_engine, tsg_vaspace) = match &self.object(c, parent)?.kind {
            Kind::ChannelGroup {
                tsg,
                engine_type,
                vaspace,
                ..
            } => (*tsg, *engine_type, *vaspace),
            Kind::Device => {
                let t = self.next_tsg;
                self.next_tsg += 1;
                (t, a.engineType, None)
            }
            _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT),
        };
        let entries = a.gpFifoEntries;
        if entries < 2 || !entries.is_power_of_two() {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let vaspace = if a.hContextShare != 0 {
            match &self.object(c, Handle(a.hContextShare))?.kind {
                Kind::CtxShare { vaspace } => *vaspace,
                _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
            }
        } else if a.hVASpace != 0 {
            Handle(a.hVASpace)
        } else if let Some(v) = tsg_vaspace {
            v
        } else {
            self.default_vaspace(c)?
        };
        let table = self.vaspace_table(c, vaspace)?;
        let space = self.vaspace_space(c, vaspace)?;
        self.check_external_ready(core, c, vaspace)?;
        if self.gsp.is_some() {
            let first_of_tsg = !crate::fifo::lock(&self.fifo)
                .channels()
                .any(|ch| ch.desc().tsg == tsg);
            let engine_type = if tsg_engine == 0 {
                NV2080_ENGINE_TYPE_GRAPHICS
            } else {
                tsg_engine
            };
            let server = match self.object(c, vaspace)?.kind {
                Kind::VaSpace { server, .. } => server,
                _ => None,
            };
            return self.alloc_channel_gsp(
                core,
                &a,
                class,
                tsg,
                engine_type,
                space,
                first_of_tsg,
                server,
            );
        }
        let ring_end = a
            .gpFifoOffset
            .checked_add(entries as u64 * 8 - 1)
            .ok_or(RmStatus::NV_ERR_INVALID_OFFSET)?;
        if table.lookup(a.gpFifoOffset).is_none() || table.lookup(ring_end).is_none() {
            return Err(RmStatus::NV_ERR_INVALID_OFFSET);
        }
        let userd_mem = self.memory(c, Handle(a.hUserdMemory[0]))?;
        let userd_off = a.userdOffset[0];
        if userd_off
            .checked_add(nvbare_core::channel::gpfifo::USERD_SIZE)
            .is_none_or(|e| e > userd_mem.size)
            || !userd_off.is_multiple_of(512)
        {
            return Err(RmStatus::NV_ERR_INVALID_OFFSET);
        }
        let mut userd = userd_mem.loc();
        userd.addr += userd_off;
        let notifier = if a.hObjectError != 0 {
            let n = self.memory(c, Handle(a.hObjectError))?;
            if n.size < (NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1 * 16) as u64 {
                return Err(RmStatus::NV_ERR_INVALID_LIMIT);
            }
            Some(n.loc())
        } else {
            None
        };
        // A fresh channel starts with GPGet = GPPut = 0 (RM initializes USERD).
        {
            let mut f = crate::fifo::lock(&self.fifo);
            let chid = self.next_chid;
            self.next_chid += 1;
            let token = chid;
            f.add_channel(ChannelDesc {
                chid,
                token,
                tsg,
                class,
                engine_type: if tsg_engine == 0 {
                    NV2080_ENGINE_TYPE_GRAPHICS
                } else {
                    tsg_engine
                },
                space,
                gpfifo_va: a.gpFifoOffset,
                entries,
                userd,
                notifier,
            });
            Ok(Kind::Channel { chid, token, tsg })
        }
    }

    fn alloc_kind(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        class: u32,
        p: &mut [u8],
    ) -> Result<Kind, RmStatus> {
        let c = caller.client;
        let _ = core;
        Ok(match class {
            NV01_DEVICE_0 => {
                self.expect_parent(c, parent, &[NV01_ROOT, NV01_ROOT_CLIENT])?;
                let a: NV0080_ALLOC_PARAMETERS = params(p)?;
                if a.deviceId != 0 {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                Kind::Device
            }
            NV20_SUBDEVICE_0 => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                if !p.is_empty() {
                    let a: NV2080_ALLOC_PARAMETERS = params(p)?;
                    if a.subDeviceId != 0 {
                        return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                    }
                }
                Kind::Subdevice
            }
            FERMI_VASPACE_A => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                let expected = match caller.abi {
                    RmAbi::R570 => size_of::<NV_VASPACE_ALLOCATION_PARAMETERS_R570>(),
                    RmAbi::R580 => size_of::<NV_VASPACE_ALLOCATION_PARAMETERS_R580>(),
                };
                if p.len() != expected {
                    return Err(RmStatus::NV_ERR_INVALID_PARAM_STRUCT);
                }
                let a = VaSpaceAlloc::decode(p).ok_or(RmStatus::NV_ERR_INVALID_PARAM_STRUCT)?;
                if a.index != NV_VASPACE_ALLOCATION_INDEX_GPU_NEW {
                    return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
                }
                let base = a.va_base.max(0x1000);
                let limit = if a.va_size == 0 {
                    DEFAULT_VA_LIMIT
                } else {
                    base.checked_add(a.va_size - 1)
                        .ok_or(RmStatus::NV_ERR_INVALID_LIMIT)?
                };
                let table = Arc::new(VaTable::new(base, limit));
                Kind::VaSpace {
                    space: table.clone(),
                    table,
                    flags: a.flags,
                    external: None,
                    server: None,
                }
            }
            NV01_MEMORY_VIRTUAL => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                let a: NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS = params(p)?;
                // virtmemConstruct returns at once for this class: the VA space is looked up
                // when the range is used, so a device may have none yet.
                let vaspace = if a.hVASpace != 0 {
                    self.vaspace_table(c, Handle(a.hVASpace))?;
                    Some(Handle(a.hVASpace))
                } else {
                    None
                };
                if a.limit != 0 && a.offset > a.limit {
                    return Err(RmStatus::NV_ERR_INVALID_LIMIT);
                }
                Kind::Virtual {
                    vaspace,
                    offset: a.offset,
                    limit: a.limit,
                }
            }
            NV01_MEMORY_LOCAL_USER | NV01_MEMORY_SYSTEM => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0, NV20_SUBDEVICE_0])?;
                Kind::Memory(self.alloc_memory(class, p)?)
            }
            KEPLER_CHANNEL_GROUP_A => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                let a: NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS = params(p)?;
                let copy_engines = NV2080_ENGINE_TYPE_COPY0..NV2080_ENGINE_TYPE_COPY0 + 10;
                if a.engineType != NV2080_ENGINE_TYPE_GRAPHICS
                    && !copy_engines.contains(&a.engineType)
                {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                let vaspace = if a.hVASpace != 0 {
                    self.vaspace_table(c, Handle(a.hVASpace))?;
                    Some(Handle(a.hVASpace))
                } else {
                    None
                };
                let tsg = self.next_tsg;
                self.next_tsg += 1;
                Kind::ChannelGroup {
                    tsg,
                    engine_type: a.engineType,
                    vaspace,
                    timeslice_us: 1000,
                }
            }
            FERMI_CONTEXT_SHARE_A => {
                self.expect_parent(c, parent, &[KEPLER_CHANNEL_GROUP_A])?;
                let a: NV_CTXSHARE_ALLOCATION_PARAMETERS = params(p)?;
                let vaspace = if a.hVASpace != 0 {
                    Handle(a.hVASpace)
                } else if let Kind::ChannelGroup {
                    vaspace: Some(v), ..
                } = self.object(c, parent)?.kind
                {
                    v
                } else {
                    self.default_vaspace(c)?
                };
                self.vaspace_table(c, vaspace)?;
                self.check_external_ready(core, c, vaspace)?;
                Kind::CtxShare { vaspace }
            }
            GT200_DEBUGGER => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0, NV01_ROOT, NV01_ROOT_CLIENT])?;
                let a: NV83DE_ALLOC_PARAMETERS = params(p)?;
                if a.hDebuggerClient_Obsolete != 0 || Handle(a.hAppClient) != c {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                let chid = if a.hClass3dObject != 0 {
                    match self.object(c, Handle(a.hClass3dObject))?.kind {
                        Kind::Engine { chid } => Some(chid),
                        _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
                    }
                } else {
                    None
                };
                Kind::Debugger { chid }
            }
            _ => match class_kind(class) {
                Some(ClassKind::Gpfifo) => {
                    self.check_class(class)?;
                    self.expect_parent(c, parent, &[KEPLER_CHANNEL_GROUP_A, NV01_DEVICE_0])?;
                    self.alloc_channel(core, c, parent, class, p)?
                }
                Some(ClassKind::Compute) | Some(ClassKind::Copy) => {
                    self.check_class(class)?;
                    let Kind::Channel { chid, .. } = self
                        .object(c, parent)
                        .map_err(|_| RmStatus::NV_ERR_INVALID_OBJECT_PARENT)?
                        .kind
                    else {
                        return Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT);
                    };
                    crate::fifo::lock(&self.fifo).add_object(chid, class);
                    if class_kind(class) == Some(ClassKind::Compute) {
                        self.gsp_compute_object(chid);
                    }
                    Kind::Engine { chid }
                }
                Some(ClassKind::Usermode) => {
                    self.check_class(class)?;
                    self.expect_parent(c, parent, &[NV20_SUBDEVICE_0])?;
                    Kind::Usermode
                }
                None => {
                    self.check_class(class)?;
                    Kind::Other
                }
            },
        })
    }

    fn free_object(&mut self, c: Handle, h: Handle) {
        let Ok(o) = self.object(c, h).cloned() else {
            return;
        };
        for child in o.children.iter().rev() {
            self.free_object(c, *child);
        }
        match &o.kind {
            Kind::Memory(m) => {
                for (vs, va) in &m.mappings {
                    if let Ok(t) = self.vaspace_table(c, *vs) {
                        t.unmap(*va);
                    }
                }
                if let Backing::Vram { addr } = m.backing {
                    self.heap.free(addr, m.size);
                }
            }
            Kind::Channel { chid, .. } => {
                crate::fifo::lock(&self.fifo).remove_channel(*chid);
                self.gsp_channel_freed(*chid);
            }
            Kind::Engine { chid } => {
                crate::fifo::lock(&self.fifo).remove_object(*chid, o.class);
            }
            _ => {}
        }
        if let Ok(cl) = self.client_mut(c) {
            cl.objects.remove(&h);
            if let Some(p) = cl.objects.get_mut(&o.parent) {
                p.children.retain(|x| *x != h);
            }
        }
    }

    // ------------------------------------------------------------------------------------------
    // Controls.

    fn chid_of(&self, c: Handle, h: Handle) -> Result<(u32, u32, u64), RmStatus> {
        match self.object(c, h)?.kind {
            Kind::Channel { chid, token, tsg } => Ok((chid, token, tsg)),
            _ => Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        }
    }

    fn control_inner(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        object: Handle,
        cmd: u32,
        p: &mut [u8],
    ) -> Result<(), RmStatus> {
        let c = caller.client;
        if let Some(r) = self.gsp_control(core, c, object, cmd, p) {
            return r;
        }
        let class = self.object(c, object)?.class;
        let on = |classes: &[u32]| -> Result<(), RmStatus> {
            if classes.contains(&class) {
                Ok(())
            } else {
                Err(RmStatus::NV_ERR_NOT_SUPPORTED)
            }
        };
        match cmd {
            NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2 => {
                on(&[NV01_ROOT, NV01_ROOT_CLIENT])?;
                let mut v: NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS = ctrl_params(p)?;
                let ver = match caller.abi {
                    RmAbi::R570 => "570.144",
                    RmAbi::R580 => "580.142",
                };
                set_c_str(&mut v.driverVersionBuffer, ver);
                set_c_str(&mut v.versionBuffer, ver);
                set_c_str(&mut v.driverBranch, "nvbare-sim");
                set_c_str(&mut v.titleBuffer, "nvbare simulated RM");
                write_back(p, &v);
            }
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2 => {
                on(&[NV01_DEVICE_0])?;
                let expected = match caller.abi {
                    RmAbi::R570 => size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R570>(),
                    RmAbi::R580 => size_of::<NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS_R580>(),
                };
                if p.len() != expected {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                let mut l = ClassListV2::new(caller.abi);
                if !l.set_classes(&self.rm.class_list()) {
                    return Err(RmStatus::NV_ERR_BUFFER_TOO_SMALL);
                }
                p.copy_from_slice(l.as_bytes());
            }
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST | NV2080_CTRL_CMD_GR_GET_INFO => {
                // The pointer forms need the caller's address space; use the _V2 forms.
                return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
            }
            NV2080_CTRL_CMD_GR_GET_INFO_V2 => {
                on(&[NV20_SUBDEVICE_0])?;
                let mut q: NV2080_CTRL_GR_GET_INFO_V2_PARAMS = ctrl_params(p)?;
                if q.grInfoListSize as usize > NV0080_CTRL_GR_INFO_MAX_SIZE {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                let n = q.grInfoListSize as usize;
                for e in q.grInfoList.iter_mut().take(n) {
                    if e.index as usize >= NV0080_CTRL_GR_INFO_MAX_SIZE {
                        return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                    }
                    e.data = self.rm.gr.value(e.index).unwrap_or(0);
                }
                write_back(p, &q);
            }
            NV2080_CTRL_CMD_MC_GET_ARCH_INFO => {
                on(&[NV20_SUBDEVICE_0])?;
                let mut a: NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS = ctrl_params(p)?;
                let id = self.model.chipset.info().chip_id as u32;
                a.architecture = id & 0xff0;
                a.implementation = id & 0xf;
                a.revision = ((self.model.revision.0 as u32) << 4) | self.model.revision.1 as u32;
                a.subRevision = 0;
                write_back(p, &a);
            }
            NV2080_CTRL_CMD_GPU_GET_GID_INFO => {
                on(&[NV20_SUBDEVICE_0])?;
                let mut g: NV2080_CTRL_GPU_GET_GID_INFO_PARAMS = ctrl_params(p)?;
                let mut uuid = [0u8; 16];
                uuid[..2].copy_from_slice(&self.model.device_id.to_be_bytes());
                uuid[2..8].copy_from_slice(b"nvbare");
                uuid[8..10].copy_from_slice(&(self.model.chipset.info().chip_id).to_be_bytes());
                g.data = [0; NV2080_GPU_MAX_GID_LENGTH];
                if g.flags & 3 == NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY {
                    g.data[..16].copy_from_slice(&uuid);
                    g.length = 16;
                } else {
                    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
                    let s = format!(
                        "GPU-{}-{}-{}-{}-{}",
                        &hex[0..8],
                        &hex[8..12],
                        &hex[12..16],
                        &hex[16..20],
                        &hex[20..32]
                    );
                    g.data[..s.len()].copy_from_slice(s.as_bytes());
                    g.length = s.len() as u32 + 1;
                }
                write_back(p, &g);
            }
            NV2080_CTRL_CMD_PERF_BOOST => {
                on(&[NV20_SUBDEVICE_0])?;
                let b: NV2080_CTRL_PERF_BOOST_PARAMS = ctrl_params(p)?;
                if b.flags & 3 == 3
                    || (b.duration > 3600 && b.duration != NV2080_CTRL_PERF_BOOST_DURATION_INFINITE)
                {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
            }
            NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN => {
                let (_, token, _) = self.chid_of(c, object)?;
                let mut t: NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS = ctrl_params(p)?;
                t.workSubmitToken = token;
                write_back(p, &t);
            }
            NVA06C_CTRL_CMD_GPFIFO_SCHEDULE => {
                on(&[KEPLER_CHANNEL_GROUP_A])?;
                let enable = ScheduleParams::enable_of(caller.abi, p)
                    .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
                let Kind::ChannelGroup { tsg, .. } = self.object(c, object)?.kind else {
                    return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
                };
                crate::fifo::lock(&self.fifo).set_scheduled(tsg, enable);
                if enable {
                    crate::fifo::lock(&self.fifo).run_all(core);
                }
            }
            NVA06F_CTRL_CMD_GPFIFO_SCHEDULE => {
                let (_, _, tsg) = self.chid_of(c, object)?;
                let enable = ScheduleParams::enable_of(caller.abi, p)
                    .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
                crate::fifo::lock(&self.fifo).set_scheduled(tsg, enable);
            }
            NVA06C_CTRL_CMD_SET_TIMESLICE | NVA06C_CTRL_CMD_GET_TIMESLICE => {
                on(&[KEPLER_CHANNEL_GROUP_A])?;
                let mut t: NVA06C_CTRL_TIMESLICE_PARAMS = ctrl_params(p)?;
                if let Kind::ChannelGroup { timeslice_us, .. } =
                    &mut self.object_mut(c, object)?.kind
                {
                    if cmd == NVA06C_CTRL_CMD_SET_TIMESLICE {
                        if t.timesliceUs == 0 {
                            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                        }
                        *timeslice_us = t.timesliceUs;
                    } else {
                        t.timesliceUs = *timeslice_us;
                    }
                }
                write_back(p, &t);
            }
            NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES => {
                on(&[GT200_DEBUGGER])?;
                let mut q: NV83DE_CTRL_DEBUG_READ_ALL_SM_ERROR_STATES_PARAMS = ctrl_params(p)?;
                let (chid, _, _) = self.chid_of(c, Handle(q.hTargetChannel))?;
                let f = crate::fifo::lock(&self.fifo);
                let ch = f.channel(chid).ok_or(RmStatus::NV_ERR_INVALID_CHANNEL)?;
                let e = ch.errors();
                let sms = self.rm.gr.sm_count();
                let n = q
                    .numSMsToRead
                    .min(NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL as u32)
                    .min(sms.saturating_sub(q.startingSM));
                q.smErrorStateArray = [NV83DE_SM_ERROR_STATE_REGISTERS::default();
                    NV83DE_CTRL_DEBUG_MAX_SMS_PER_CALL];
                for i in 0..n {
                    if let Some(r) = e.sm_errors.get(&(q.startingSM + i))
                        && let Some(slot) = q.smErrorStateArray.get_mut(i as usize)
                    {
                        *slot = *r;
                    }
                }
                q.mmuFault.valid = e.mmu_fault_valid as u8;
                q.mmuFault.faultInfo = e.mmu_faults.last().map_or(0, |f| f.faultType);
                q.mmuFaultInfo = q.mmuFault.faultInfo;
                write_back(p, &q);
            }
            NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES => {
                on(&[GT200_DEBUGGER])?;
                let q: NV83DE_CTRL_DEBUG_CLEAR_ALL_SM_ERROR_STATES_PARAMS = ctrl_params(p)?;
                let (chid, _, _) = self.chid_of(c, Handle(q.hTargetChannel))?;
                if let Some(ch) = crate::fifo::lock(&self.fifo).channel_mut(chid) {
                    ch.clear_errors();
                }
            }
            NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO => {
                on(&[GT200_DEBUGGER])?;
                let _: NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS = ctrl_params(p)?;
                let Kind::Debugger { chid } = self.object(c, object)?.kind else {
                    return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
                };
                let mut q = NV83DE_CTRL_DEBUG_READ_MMU_FAULT_INFO_PARAMS::default();
                if let Some(chid) = chid {
                    let f = crate::fifo::lock(&self.fifo);
                    if let Some(ch) = f.channel(chid) {
                        for (slot, e) in q.mmuFaultInfoList.iter_mut().zip(&ch.errors().mmu_faults)
                        {
                            *slot = *e;
                            q.count += 1;
                        }
                    }
                }
                write_back(p, &q);
            }
            _ => return Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        }
        Ok(())
    }
}

impl RmService for RmModel {
    fn alloc(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        object: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus> {
        let c = caller.client;
        if class == NV01_ROOT || class == NV01_ROOT_CLIENT {
            // The new client's handle is the caller's hClient; hObject is ignored
            // (serverAllocClient sets hResource = hClient, rs_server.c).
            let _ = object;
            if c.0 == 0 {
                return Err(RmStatus::NV_ERR_INVALID_OBJECT_NEW);
            }
            if self.clients.contains_key(&c) {
                return Err(RmStatus::NV_ERR_INSERT_DUPLICATE_NAME);
            }
            let mut cl = Client::default();
            cl.objects.insert(
                c,
                Object {
                    parent: Handle(0),
                    class,
                    kind: Kind::Client,
                    children: Vec::new(),
                },
            );
            self.clients.insert(c, cl);
            return Ok(());
        }
        if object.0 == 0 {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_NEW);
        }
        if self.client(c)?.objects.contains_key(&object) {
            return Err(RmStatus::NV_ERR_INSERT_DUPLICATE_NAME);
        }
        if !self.client(c)?.objects.contains_key(&parent) {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT);
        }
        let kind = self.alloc_kind(core, caller, parent, class, params)?;
        let cl = self.client_mut(c)?;
        cl.objects.insert(
            object,
            Object {
                parent,
                class,
                kind,
                children: Vec::new(),
            },
        );
        if let Some(p) = cl.objects.get_mut(&parent) {
            p.children.push(object);
        }
        Ok(())
    }

    fn control(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus> {
        self.control_inner(core, caller, object, cmd, params)
    }

    fn free(
        &mut self,
        _core: &mut SimCore,
        caller: RmCaller,
        _parent: Handle,
        object: Handle,
    ) -> Result<(), RmStatus> {
        let c = caller.client;
        self.object(c, object)
            .map_err(|_| RmStatus::NV_ERR_OBJECT_NOT_FOUND)?;
        self.free_object(c, object);
        if object == c {
            self.clients.remove(&c);
        }
        Ok(())
    }

    fn rpc(
        &mut self,
        core: &mut SimCore,
        abi: RmAbi,
        function: u32,
        payload: &mut [u8],
    ) -> Option<Result<(), RmStatus>> {
        self.gsp_rpc(core, abi, function, payload)
    }

    fn take_notices(&mut self) -> Vec<crate::rm_service::RmNotice> {
        crate::fifo::lock(&self.fifo).take_notices()
    }
}

/// An [`RmModel`] shared between callers: give one to the GSP-RM emulator
/// (`GspEmulator::attach(.., Box::new(SharedRm(model.clone())))`) while a [`SimBackend`]
/// (`SimBackend::on`) or a test keeps using the same model, so objects created through GSP RPCs
/// run on the simulated host like those created directly.
///
/// [`SimBackend`]: crate::backend::SimBackend
#[derive(Debug, Clone)]
pub struct SharedRm(pub Arc<Mutex<RmModel>>);

impl SharedRm {
    fn lock(&self) -> std::sync::MutexGuard<'_, RmModel> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RmService for SharedRm {
    fn alloc(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        object: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus> {
        self.lock()
            .alloc(core, caller, parent, object, class, params)
    }

    fn control(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus> {
        self.lock().control(core, caller, object, cmd, params)
    }

    fn free(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        object: Handle,
    ) -> Result<(), RmStatus> {
        self.lock().free(core, caller, parent, object)
    }

    fn rpc(
        &mut self,
        core: &mut SimCore,
        abi: RmAbi,
        function: u32,
        payload: &mut [u8],
    ) -> Option<Result<(), RmStatus>> {
        self.lock().rpc(core, abi, function, payload)
    }

    fn take_notices(&mut self) -> Vec<crate::rm_service::RmNotice> {
        self.lock().take_notices()
    }
}

#[cfg(test)]
mod server_pdes_tests;
#[cfg(test)]
mod tests;
