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

mod alloc;
pub mod chips;
mod control;
mod escape;
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
