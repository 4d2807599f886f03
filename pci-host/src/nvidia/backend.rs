//! [`KernelBackend`]: the device layer's [`Backend`] over nvidia.ko (`--device nvidia:N`).
//!
//! The device layer (`nvbare_core::device`) does the RM object tree, channels, pushbuffers,
//! launches and fault reports; this backend supplies what differs on the kernel driver
//! (docs/device.md, "For the kernel-driver adapter"):
//!
//! * the RM: [`KernelRm`](super::KernelRm) (`NV_ESC_RM_ALLOC` / `_CONTROL` / `_FREE` on `/dev/nvidiactl`), with
//!   the device and subdevice [`KernelGpu`] already holds ([`Backend::existing_device`]);
//! * memory: video memory is `NV01_MEMORY_LOCAL_USER`; host memory is this process's own
//!   anonymous pages registered as `NV01_MEMORY_SYSTEM_OS_DESCRIPTOR` (RM pins them; the CPU
//!   reads and writes them as ordinary cached memory, which is what spin-waits on semaphores
//!   need), with `NV01_MEMORY_SYSTEM` + a control-file CPU mapping as the fallback;
//! * GPU virtual addresses, one of two ways ([`VaMode`]):
//!   - [`VaMode::Rm`] (default): an RM-owned VA space; memory is mapped with
//!     `NV_ESC_RM_MAP_MEMORY_DMA` into an `NV01_MEMORY_VIRTUAL` window `[64 GiB, 1 TiB)` (RM
//!     picks the address inside it). MMU faults are then non-replayable and handled by RM: the
//!     channel is torn down with Xid 31 and the debugger reports the address.
//!   - [`VaMode::Uvm`]: what CUDA and tinygrad do: the VA space is handed to UVM
//!     (`ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED`), memory is mapped as UVM external ranges
//!     at addresses of our own choosing (reserved in this process's address space, below
//!     2^40), and every channel is registered with UVM;
//! * rings (GPFIFO + USERD) and command memory (pushbuffers, QMDs, constant bank 0) in video
//!   memory that the CPU writes through a write-combined BAR1 mapping, as tinygrad places its
//!   GPFIFO area: the GPU fetches them from its own memory instead of across PCIe
//!   (`NVBARE_KMOD_CMDS=host` keeps them in host memory, `vram4k` uses 4 KiB GPU pages instead of
//!   64 KiB);
//! * the doorbell: the usermode object mapped through `/dev/nvidiaN` ([`UsermodeWindow`]);
//! * a [`HostClock`].
//!
//! `NVBARE_KMOD_VA=uvm` selects the UVM mode (`rm` is the default).

use std::sync::{Arc, Mutex};

use nvbare_core::device::{
    Backend, BackendError, Location, MemoryRequest as DeviceMemoryRequest, PeerMapping,
    PeerPathInfo, Purpose, RmObjects, VaWindow,
};
use nvbare_core::mm::{FitPolicy, RangeAllocator};
use nvbare_core::rm::alloc::{
    NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING,
    NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED, NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
    VaSpaceAlloc,
};
use nvbare_core::rm::class::NV01_MEMORY_VIRTUAL;
use nvbare_core::rm::{Handle, Rm, RmError, RmStatus};
use zerocopy::IntoBytes;

use super::abi::{
    NVOS46_FLAGS_CACHE_SNOOP_ENABLE, NVOS46_FLAGS_CACHE_SNOOP_SHIFT, NVOS46_FLAGS_PAGE_SIZE_4KB,
    NVOS46_FLAGS_PAGE_SIZE_SHIFT,
};
use super::error::KmodError;
use super::gpu::KernelGpu;
use super::memory::{
    GpuPageSize, HostMemory, MemoryLocation, MemoryRequest, PAGE_SIZE, VaReservation,
};
use super::usermode::UsermodeWindow;
use super::uvm::{GpuUuid, Uvm};
use super::vaspace::{VA_SPACE_BASE, VA_SPACE_SIZE};
use crate::clock::HostClock;

mod allocation;

pub use allocation::KernelMemory;
use allocation::{GpuMap, HostBacking};

/// First GPU VA the backend hands out (64 GiB, tinygrad's low range): clear of the low
/// addresses RM and the CPU use.
pub const VA_WINDOW_BASE: u64 = 0x10_0000_0000;
/// End of the GPU VA window: the device layer needs every address below 2^40 (40-bit GP entries
/// and semaphore addresses).
pub const VA_WINDOW_END: u64 = 0x100_0000_0000;
/// The GPU VA windows [`KernelBackend::open_in`] accepts: `[VA_WINDOW_BASE, VA_WINDOW_END)`.
/// In UVM mode GPU VAs are also CPU addresses of this process (UVM external ranges share its
/// address space), which is reserved for them; below `VA_WINDOW_BASE` live the addresses RM and
/// the CPU use.
pub const KMOD_VA_WINDOW: VaWindow =
    match VaWindow::new(VA_WINDOW_BASE, VA_WINDOW_END - VA_WINDOW_BASE) {
        Ok(w) => w,
        Err(_) => panic!("VA_WINDOW_BASE..VA_WINDOW_END is not a VA window"),
    };
/// GPU VA given to UVM for each channel's RM-owned buffers (tinygrad gives 64 MiB).
const UVM_CHANNEL_VA: u64 = 64 << 20;
/// `NVOS46_FLAGS_GPU_CACHEABLE` (18:17) `_NO`: host memory the CPU writes (pushbuffers, rings,
/// semaphores) must not be served from a stale GPU L2 line.
const NVOS46_FLAGS_GPU_CACHEABLE_NO: u32 = 2 << 17;
/// Most live allocations in the UVM window.
const VA_BLOCKS: usize = 8192;

/// How GPU virtual addresses are managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VaMode {
    /// RM owns the VA space and the page tables (`NV_ESC_RM_MAP_MEMORY_DMA`).
    Rm,
    /// UVM owns them (external ranges), as under CUDA.
    Uvm,
}

impl VaMode {
    /// `NVBARE_KMOD_VA` (`rm` or `uvm`), default [`VaMode::Rm`].
    pub fn from_env() -> Result<VaMode, KmodError> {
        Self::parse(std::env::var("NVBARE_KMOD_VA").ok().as_deref())
    }

    /// The mode a value of `NVBARE_KMOD_VA` names (`None` or empty: the default).
    pub fn parse(value: Option<&str>) -> Result<VaMode, KmodError> {
        match value {
            None | Some("") | Some("rm") => Ok(VaMode::Rm),
            Some("uvm") => Ok(VaMode::Uvm),
            Some(other) => Err(KmodError::Invalid(format!(
                "NVBARE_KMOD_VA={other:?}: use `rm` (RM-managed GPU VA, the default) or `uvm` \
                 (UVM external ranges, as CUDA)"
            ))),
        }
    }
}

impl std::fmt::Display for VaMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VaMode::Rm => "RM-managed VA",
            VaMode::Uvm => "UVM external ranges",
        })
    }
}

/// The UVM side of [`VaMode::Uvm`].
#[derive(Debug)]
struct UvmState {
    /// The UVM VA space: this backend's own, or its [`PeerGroup`]'s.
    uvm: Arc<Uvm>,
    uuid: GpuUuid,
    /// Registered channels and the VA UVM got for each.
    channels: Vec<(Handle, u64)>,
}

/// Which of the CPU-written GPU structures live in video memory (through BAR1) rather than in
/// host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VramFor {
    /// GPFIFO rings with USERD, and command memory (the default).
    Both,
    /// Rings only.
    Rings,
    /// Command memory only.
    Commands,
    /// Neither.
    Neither,
}

impl VramFor {
    fn covers(self, purpose: Purpose) -> bool {
        matches!(
            (self, purpose),
            (VramFor::Both, Purpose::Ring | Purpose::Commands)
                | (VramFor::Rings, Purpose::Ring)
                | (VramFor::Commands, Purpose::Commands)
        )
    }
}

/// Where rings and command memory go, and the GPU page size of the video memory for them, by
/// the value of `NVBARE_KMOD_CMDS` (unset or empty: the default).
fn placement(value: Option<&str>) -> Result<(VramFor, GpuPageSize), KmodError> {
    Ok(match value {
        // 64 KiB pages measured faster on the H200 than 4 KiB ones (docs/performance.md,
        // "Rings and commands in video memory").
        None | Some("") | Some("vram") => (VramFor::Both, GpuPageSize::Big),
        Some("vram4k") => (VramFor::Both, GpuPageSize::Small),
        Some("vram2m") => (VramFor::Both, GpuPageSize::Huge),
        Some("host") => (VramFor::Neither, GpuPageSize::Small),
        Some("ring-host") => (VramFor::Commands, GpuPageSize::Big),
        Some("cmds-host") => (VramFor::Rings, GpuPageSize::Big),
        Some(other) => {
            return Err(KmodError::Invalid(format!(
                "NVBARE_KMOD_CMDS={other:?}: use `vram` (rings and command memory in video \
                 memory with 64 KiB GPU pages, the default), `vram4k` (4 KiB pages), `vram2m` \
                 (2 MiB pages), `host` (both in host memory), `ring-host` (rings in host \
                 memory, commands in video memory) or `cmds-host` (the reverse)"
            )));
        }
    })
}

/// The kernel-driver backend: one GPU opened through nvidia.ko.
#[derive(Debug)]
pub struct KernelBackend {
    // Field order is drop order: UVM state (its fd) before the RM client, the window
    // reservation after everything mapped in it.
    uvm: Option<UvmState>,
    gpu: KernelGpu,
    clock: HostClock,
    mode: VaMode,
    objs: Option<RmObjects>,
    /// `NV01_MEMORY_VIRTUAL` window ([`VaMode::Rm`]).
    virt: Option<Handle>,
    /// VA allocator over the window ([`VaMode::Uvm`]).
    va: Box<RangeAllocator<VA_BLOCKS>>,
    /// What `va` hands out.
    window: VaWindow,
    /// The window, reserved in this process's address space ([`VaMode::Uvm`]).
    reservation: Option<VaReservation>,
    /// Host allocations that fell back to `NV01_MEMORY_SYSTEM` (reported once).
    fallback_warned: bool,
    /// Put GPFIFO rings (with USERD) and command memory in video memory, written by the CPU
    /// through BAR1, as tinygrad does: the GPU then fetches GP entries, pushbuffers, QMDs and
    /// constant banks from its own memory instead of across PCIe. `NVBARE_KMOD_CMDS` picks
    /// other placements to measure what each costs.
    vram_for: VramFor,
    /// GPU page size of that video memory.
    cmds_page: GpuPageSize,
    index: u32,
    /// The backends opened together with this one ([`KernelBackend::open_group`]); last, so
    /// the shared UVM fd and window reservation outlive this backend's RM client.
    group: Option<Arc<PeerGroup>>,
}

/// What [`KernelBackend`]s opened together share so that they can be peers (docs/multi-gpu.md):
///
/// * one UVM VA space (one `/dev/nvidia-uvm` fd): UVM maps one GPU's memory for another only
///   when both are registered in the same VA space, and enables peers per VA space
///   (`UVM_ENABLE_PEER_ACCESS`; NVLink peers when the second GPU registers);
/// * the process's VA window, reserved once and split between the backends, because external
///   ranges of one UVM VA space live in one address space: a buffer is mapped for its peer at
///   the VA its owner uses.
#[derive(Debug)]
pub struct PeerGroup {
    uvm: Arc<Uvm>,
    /// GPU pairs `UVM_ENABLE_PEER_ACCESS` succeeded for (unordered).
    enabled: Mutex<Vec<(GpuUuid, GpuUuid)>>,
    _reservation: Option<VaReservation>,
}

impl PeerGroup {
    fn is_enabled(&self, a: GpuUuid, b: GpuUuid) -> bool {
        self.enabled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|&p| p == (a, b) || p == (b, a))
    }

    fn set_enabled(&self, a: GpuUuid, b: GpuUuid, on: bool) {
        let mut e = self.enabled.lock().unwrap_or_else(|e| e.into_inner());
        e.retain(|&p| p != (a, b) && p != (b, a));
        if on {
            e.push((a, b));
        }
    }
}

fn peer_unsupported(reason: impl Into<String>) -> BackendError {
    BackendError::PeerUnsupported {
        reason: reason.into(),
    }
}

impl KernelBackend {
    /// Opens GPUs `indices` as a group that can be peers: UVM VA mode (whatever
    /// `NVBARE_KMOD_VA` says), one shared UVM VA space, the VA window split between them.
    pub fn open_group(indices: &[u32]) -> Result<Vec<KernelBackend>, KmodError> {
        let n = indices.len() as u64;
        if n == 0 {
            return Err(KmodError::Invalid("a group needs at least one GPU".into()));
        }
        let mut backends = Vec::with_capacity(indices.len());
        for &i in indices {
            backends.push(Self::open_with(i, VaMode::Uvm)?);
        }
        let uvm = match backends.first() {
            Some(b) => Arc::new(Uvm::open(b.gpu.driver())?),
            None => return Err(KmodError::Invalid("a group needs at least one GPU".into())),
        };
        let group = Arc::new(PeerGroup {
            uvm,
            enabled: Mutex::new(Vec::new()),
            _reservation: reserve_window(KMOD_VA_WINDOW),
        });
        for (k, b) in backends.iter_mut().enumerate() {
            let w = group_window(k as u64, n)?;
            b.va = va_allocator(w)?;
            b.window = w;
            b.group = Some(group.clone());
        }
        Ok(backends)
    }

    /// The peer group of this backend and `peer`, and both GPUs' UUIDs, or why they are not
    /// peers.
    fn peer_of<'a>(
        &'a self,
        peer: &KernelBackend,
    ) -> Result<(&'a Arc<PeerGroup>, GpuUuid, GpuUuid), BackendError> {
        let hint = "open both GPUs together (KernelBackend::open_group; `nvbare bench p2p` \
                    does): peers share one UVM VA space";
        let (Some(g), Some(pg)) = (&self.group, &peer.group) else {
            return Err(peer_unsupported(format!(
                "nvidia:{} and nvidia:{} were opened separately; {hint}",
                self.index, peer.index
            )));
        };
        if !Arc::ptr_eq(g, pg) {
            return Err(peer_unsupported(format!(
                "nvidia:{} and nvidia:{} belong to different groups; {hint}",
                self.index, peer.index
            )));
        }
        let (Some(a), Some(b)) = (&self.uvm, &peer.uvm) else {
            return Err(peer_unsupported(
                "peer access before both devices are attached to UVM",
            ));
        };
        Ok((g, a.uuid, b.uuid))
    }

    /// Opens GPU `index` (`/dev/nvidiaN`) with the VA mode from `NVBARE_KMOD_VA`.
    pub fn open(index: u32) -> Result<KernelBackend, KmodError> {
        Self::open_with(index, VaMode::from_env()?)
    }

    /// Opens GPU `index` with VA mode `mode` and the whole [`KMOD_VA_WINDOW`].
    pub fn open_with(index: u32, mode: VaMode) -> Result<KernelBackend, KmodError> {
        Self::open_in(index, mode, KMOD_VA_WINDOW)
    }

    /// Opens GPU `index` with VA mode `mode`, handing out GPU VAs from `window`, which must
    /// lie inside [`KMOD_VA_WINDOW`] ([`KmodError::VaWindow`] otherwise). In UVM mode the
    /// backend reserves `window` of the process's CPU addresses, so backends opened with
    /// disjoint windows reserve disjoint ranges.
    pub fn open_in(index: u32, mode: VaMode, window: VaWindow) -> Result<KernelBackend, KmodError> {
        let window = check_window(window)?;
        let gpu = KernelGpu::open(index)?;
        let va = va_allocator(window)?;
        let (vram_for, cmds_page) = placement(std::env::var("NVBARE_KMOD_CMDS").ok().as_deref())?;
        log::debug!("nvidia:{index}: {mode}, video memory for {vram_for:?}");
        Ok(KernelBackend {
            uvm: None,
            gpu,
            clock: HostClock::new(),
            mode,
            objs: None,
            virt: None,
            va,
            window,
            reservation: None,
            fallback_warned: false,
            vram_for,
            cmds_page,
            index,
            group: None,
        })
    }

    /// The GPU (for queries such as VRAM or the RM object counts).
    pub fn gpu(&mut self) -> &mut KernelGpu {
        &mut self.gpu
    }

    /// The VA mode in use.
    pub fn mode(&self) -> VaMode {
        self.mode
    }

    fn objs(&self) -> Result<RmObjects, BackendError> {
        self.objs.ok_or(BackendError::Unsupported(
            "allocating memory before the VA space is attached",
        ))
    }

    /// Allocates the RM memory object (and, for host memory, its CPU side).
    fn alloc_object(
        &mut self,
        req: &DeviceMemoryRequest,
        device: Handle,
    ) -> Result<(Handle, u64, Option<HostBacking>, GpuPageSize), BackendError> {
        let size = req.size.max(1).checked_next_multiple_of(PAGE_SIZE).ok_or(
            BackendError::OutOfMemory {
                requested: req.size,
                location: req.location,
            },
        )?;
        match req.location {
            Location::Device => {
                let page = GpuPageSize::for_buffer(size, MemoryLocation::Vidmem, false);
                let r = MemoryRequest {
                    size,
                    location: MemoryLocation::Vidmem,
                    page_size: page,
                    contiguous: false,
                };
                let rounded = r.rounded_size().ok_or(BackendError::OutOfMemory {
                    requested: req.size,
                    location: req.location,
                })?;
                let h = self
                    .gpu
                    .rm()
                    .alloc_memory(device, &r)
                    .map_err(|e| kmod_to_backend(e, req))?;
                Ok((h, rounded, None, page))
            }
            Location::Host => {
                let host = HostMemory::new(size).map_err(|e| BackendError::Other(e.to_string()))?;
                let (rm, node) = self.gpu.rm_and_node();
                match rm.register_host_memory(node, device, &host) {
                    Ok(h) => {
                        let len = host.len() as u64;
                        Ok((h, len, Some(HostBacking::Pages(host)), GpuPageSize::Small))
                    }
                    Err(e) => {
                        if !self.fallback_warned {
                            log::warn!(
                                "registering host pages with RM failed ({e}); using \
                                 NV01_MEMORY_SYSTEM for host memory"
                            );
                            self.fallback_warned = true;
                        }
                        drop(host);
                        let r = MemoryRequest {
                            size,
                            location: MemoryLocation::Sysmem,
                            page_size: GpuPageSize::Small,
                            contiguous: false,
                        };
                        let h = self
                            .gpu
                            .rm()
                            .alloc_memory(device, &r)
                            .map_err(|e| kmod_to_backend(e, req))?;
                        match self.gpu.rm().map_cpu_system(device, h, 0, size, 0, None) {
                            Ok(m) => {
                                Ok((h, size, Some(HostBacking::Mapped(m)), GpuPageSize::Small))
                            }
                            Err(e) => {
                                let _ = self.gpu.rm().free(h);
                                Err(BackendError::Other(format!(
                                    "mapping host memory for the CPU: {e}"
                                )))
                            }
                        }
                    }
                }
            }
        }
    }

    /// Maps `handle` (`size` bytes) into the GPU VA space.
    fn map_gpu(
        &mut self,
        req: &DeviceMemoryRequest,
        handle: Handle,
        size: u64,
        page: GpuPageSize,
        objs: RmObjects,
    ) -> Result<(u64, GpuMap), BackendError> {
        let host = req.location == Location::Host;
        match self.mode {
            VaMode::Rm => {
                let virt = self
                    .virt
                    .ok_or(BackendError::Unsupported("memory before attach"))?;
                let flags = if host {
                    (NVOS46_FLAGS_PAGE_SIZE_4KB << NVOS46_FLAGS_PAGE_SIZE_SHIFT)
                        | (NVOS46_FLAGS_CACHE_SNOOP_ENABLE << NVOS46_FLAGS_CACHE_SNOOP_SHIFT)
                        | NVOS46_FLAGS_GPU_CACHEABLE_NO
                } else {
                    // PAGE_SIZE_DEFAULT: the allocation's own page size.
                    0
                };
                let m = self
                    .gpu
                    .rm()
                    .map_dma(objs.device, virt, handle, 0, size, flags, 0)
                    .map_err(|e| BackendError::Other(format!("mapping memory for the GPU: {e}")))?;
                if !m.gpu_va.is_multiple_of(req.align.max(PAGE_SIZE)) {
                    let _ = self.gpu.rm().unmap_dma(objs.device, virt, handle, m);
                    return Err(BackendError::Other(format!(
                        "RM mapped memory at GPU VA {:#x}, not {:#x}-aligned",
                        m.gpu_va, req.align
                    )));
                }
                Ok((m.gpu_va, GpuMap::Rm(m)))
            }
            VaMode::Uvm => {
                let align = req.align.max(page.bytes());
                let va = self
                    .va
                    .alloc(size, align)
                    .map_err(|_| BackendError::OutOfMemory {
                        requested: size,
                        location: req.location,
                    })?;
                let Some(u) = self.uvm.as_ref() else {
                    let _ = self.va.free(va);
                    return Err(BackendError::Unsupported("memory before attach"));
                };
                let mapped = u.uvm.create_external_range(va, size).and_then(|()| {
                    u.uvm
                        .map_external_allocation(
                            u.uuid,
                            self.gpu.rm_ref(),
                            handle,
                            va,
                            size,
                            0,
                            host,
                        )
                        .inspect_err(|_| {
                            let _ = u.uvm.free(va, size);
                        })
                });
                if let Err(e) = mapped {
                    let _ = self.va.free(va);
                    return Err(BackendError::Other(format!(
                        "mapping memory for the GPU: {e}"
                    )));
                }
                Ok((va, GpuMap::Uvm))
            }
        }
    }

    /// Video memory the CPU writes through BAR1, for rings and command memory.
    fn alloc_vram_for_cpu(
        &mut self,
        req: &DeviceMemoryRequest,
        objs: RmObjects,
    ) -> Result<KernelMemory, BackendError> {
        let size = req.size.max(1).checked_next_multiple_of(PAGE_SIZE).ok_or(
            BackendError::OutOfMemory {
                requested: req.size,
                location: Location::Device,
            },
        )?;
        let r = MemoryRequest {
            size,
            location: MemoryLocation::Vidmem,
            page_size: self.cmds_page,
            contiguous: true,
        };
        let size = r.rounded_size().ok_or(BackendError::OutOfMemory {
            requested: req.size,
            location: Location::Device,
        })?;
        let device_req = DeviceMemoryRequest {
            location: Location::Device,
            ..*req
        };
        let handle = self
            .gpu
            .rm()
            .alloc_memory(objs.device, &r)
            .map_err(|e| kmod_to_backend(e, &device_req))?;
        let cpu = {
            let (rm, node) = self.gpu.rm_and_node();
            rm.map_cpu(node, objs.device, handle, 0, size, 0, None)
        };
        let cpu = match cpu {
            Ok(c) => c,
            Err(e) => {
                let _ = self.gpu.rm().free(handle);
                return Err(BackendError::Other(format!(
                    "mapping video memory for the CPU (BAR1): {e}"
                )));
            }
        };
        match self.map_gpu(&device_req, handle, size, self.cmds_page, objs) {
            Ok((va, map)) => Ok(KernelMemory {
                handle,
                va,
                size,
                location: Location::Device,
                map,
                host: Some(HostBacking::Mapped(cpu)),
            }),
            Err(e) => {
                drop(cpu);
                let _ = self.gpu.rm().free(handle);
                Err(e)
            }
        }
    }

    fn alloc_uvm_va(&mut self, len: u64) -> Result<u64, BackendError> {
        self.va
            .alloc(len, 2 << 20)
            .map_err(|_| BackendError::OutOfMemory {
                requested: len,
                location: Location::Device,
            })
    }
}

fn kmod_to_backend(e: KmodError, req: &DeviceMemoryRequest) -> BackendError {
    match e {
        KmodError::Rm(RmError::Status { status, .. })
            if status == RmStatus::NV_ERR_NO_MEMORY
                || status == RmStatus::NV_ERR_INSUFFICIENT_RESOURCES =>
        {
            BackendError::OutOfMemory {
                requested: req.size,
                location: req.location,
            }
        }
        KmodError::Rm(r) => BackendError::Rm(r),
        other => BackendError::Other(other.to_string()),
    }
}

impl Backend for KernelBackend {
    type Rm = super::rm::KernelRm;
    type Memory = KernelMemory;
    type Usermode = UsermodeWindow;
    type Clock = HostClock;

    fn describe(&self) -> String {
        format!(
            "nvidia:{} ({}, nvidia.ko {}, {})",
            self.index,
            self.gpu.card(),
            self.gpu.driver().version(),
            self.mode
        )
    }

    fn rm(&mut self) -> &mut Self::Rm {
        self.gpu.rm()
    }

    fn clock(&self) -> &HostClock {
        &self.clock
    }

    fn existing_device(&self) -> Option<(Handle, Handle)> {
        Some((self.gpu.device(), self.gpu.subdevice()))
    }

    fn vaspace_params(&self) -> VaSpaceAlloc {
        match self.mode {
            // UVM refuses a VA space without these two flags (NV_ERR_INVALID_FLAGS).
            VaMode::Uvm => VaSpaceAlloc {
                index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
                flags: NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING
                    | NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
                va_size: VA_SPACE_SIZE,
                va_base: VA_SPACE_BASE,
                big_page_size: 0,
                pasid: 0,
            },
            // RM's own page tables, no replayable faults: an MMU fault is reported by RM.
            VaMode::Rm => VaSpaceAlloc {
                index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
                flags: 0,
                va_size: VA_SPACE_SIZE,
                va_base: VA_SPACE_BASE,
                big_page_size: 0,
                pasid: 0,
            },
        }
    }

    fn attach(&mut self, objects: &RmObjects) -> Result<(), BackendError> {
        self.detach();
        match self.mode {
            VaMode::Rm => {
                let mut v = NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS {
                    offset: self.window.base(),
                    limit: self.window.end() - 1,
                    hVASpace: objects.vaspace.0,
                    _pad0: 0,
                };
                let virt =
                    self.gpu
                        .rm()
                        .alloc(objects.device, NV01_MEMORY_VIRTUAL, v.as_mut_bytes())?;
                self.virt = Some(virt);
            }
            VaMode::Uvm => {
                if self.reservation.is_none() && self.group.is_none() {
                    self.reservation = reserve_window(self.window);
                }
                let uuid = self
                    .gpu
                    .uuid()
                    .map_err(|e| BackendError::Other(e.to_string()))?;
                let uvm = match &self.group {
                    Some(g) => g.uvm.clone(),
                    None => Arc::new(
                        Uvm::open(self.gpu.driver())
                            .map_err(|e| BackendError::Other(e.to_string()))?,
                    ),
                };
                uvm.register_gpu(uuid, self.gpu.rm_ref())
                    .and_then(|()| {
                        uvm.register_gpu_va_space(uuid, self.gpu.rm_ref(), objects.vaspace)
                    })
                    .map_err(|e| BackendError::Other(e.to_string()))?;
                self.uvm = Some(UvmState {
                    uvm,
                    uuid,
                    channels: Vec::new(),
                });
            }
        }
        self.objs = Some(*objects);
        Ok(())
    }

    fn alloc_memory(&mut self, req: &DeviceMemoryRequest) -> Result<KernelMemory, BackendError> {
        let objs = self.objs()?;
        if req.location == Location::Host && self.vram_for.covers(req.purpose) {
            match self.alloc_vram_for_cpu(req, objs) {
                Ok(m) => return Ok(m),
                Err(e) => {
                    log::warn!(
                        "rings and command memory stay in host memory: video memory for them \
                         failed ({e})"
                    );
                    self.vram_for = VramFor::Neither;
                }
            }
        }
        let (handle, size, host, page) = self.alloc_object(req, objs.device)?;
        match self.map_gpu(req, handle, size, page, objs) {
            Ok((va, map)) => {
                log::trace!(
                    "{:?} {} bytes ({}) at GPU VA {va:#x}, object {handle}",
                    req.purpose,
                    size,
                    req.location
                );
                Ok(KernelMemory {
                    handle,
                    va,
                    size,
                    location: req.location,
                    map,
                    host,
                })
            }
            Err(e) => {
                let _ = self.gpu.rm().free(handle);
                drop(host);
                Err(e)
            }
        }
    }

    fn free_memory(&mut self, mut mem: KernelMemory) -> Result<(), BackendError> {
        let objs = self.objs()?;
        let mut first_err = None;
        // An RM CPU mapping goes before its object (as `stress` and the usermode window do);
        // our own pages go after it (RM unpins them when the OS descriptor is freed).
        if matches!(mem.host, Some(HostBacking::Mapped(_))) {
            drop(mem.host.take());
        }
        match mem.map {
            GpuMap::Rm(m) => {
                if let Some(virt) = self.virt
                    && let Err(e) = self.gpu.rm().unmap_dma(objs.device, virt, mem.handle, m)
                {
                    first_err.get_or_insert(BackendError::Other(e.to_string()));
                }
            }
            GpuMap::Uvm => {
                if let Some(u) = &self.uvm
                    && let Err(e) = u.uvm.free(mem.va, mem.size)
                {
                    first_err.get_or_insert(BackendError::Other(e.to_string()));
                }
                let _ = self.va.free(mem.va);
            }
        }
        if let Err(e) = self.gpu.rm().free(mem.handle) {
            first_err.get_or_insert(BackendError::Rm(e));
        }
        // The CPU side (and with it the OS descriptor's pages) goes last.
        drop(mem.host);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn map_usermode(&mut self, class: u32) -> Result<UsermodeWindow, BackendError> {
        let subdevice = self.gpu.subdevice();
        let (rm, node) = self.gpu.rm_and_node();
        rm.map_usermode(node, subdevice, class)
            .map_err(|e| BackendError::Other(format!("mapping the usermode block: {e}")))
    }

    fn channel_created(&mut self, channel: Handle) -> Result<(), BackendError> {
        if self.mode != VaMode::Uvm {
            return Ok(());
        }
        // Channels freed since (a recovery frees the channel group): let UVM drop them.
        let stale: Vec<(Handle, u64)> = match &self.uvm {
            Some(u) => u
                .channels
                .iter()
                .copied()
                .filter(|(h, _)| !self.gpu.rm_ref().is_live(*h))
                .collect(),
            None => return Err(BackendError::Unsupported("a channel before attach")),
        };
        for (h, va) in stale {
            if let Some(u) = &self.uvm
                && let Err(e) = u.uvm.unregister_channel(u.uuid, self.gpu.rm_ref(), h)
            {
                log::debug!("UVM_UNREGISTER_CHANNEL {h}: {e}");
            }
            let _ = self.va.free(va);
            if let Some(u) = &mut self.uvm {
                u.channels.retain(|(c, _)| *c != h);
            }
        }
        let base = self.alloc_uvm_va(UVM_CHANNEL_VA)?;
        let Some(u) = &mut self.uvm else {
            let _ = self.va.free(base);
            return Err(BackendError::Unsupported("a channel before attach"));
        };
        if let Err(e) =
            u.uvm
                .register_channel(u.uuid, self.gpu.rm_ref(), channel, base, UVM_CHANNEL_VA)
        {
            let _ = self.va.free(base);
            return Err(BackendError::Other(format!("registering the channel: {e}")));
        }
        u.channels.push((channel, base));
        Ok(())
    }

    fn detach(&mut self) {
        if let Some(u) = self.uvm.take() {
            for (h, va) in &u.channels {
                if let Err(e) = u.uvm.unregister_channel(u.uuid, self.gpu.rm_ref(), *h) {
                    log::debug!("UVM_UNREGISTER_CHANNEL {h}: {e}");
                }
                let _ = self.va.free(*va);
            }
            if let Err(e) = u.uvm.unregister_gpu_va_space(u.uuid) {
                log::debug!("UVM_UNREGISTER_GPU_VASPACE: {e}");
            }
            if let Some(g) = &self.group {
                // The shared fd stays open: unregister the GPU (UVM disables its peers).
                if let Err(e) = u.uvm.unregister_gpu(u.uuid) {
                    log::debug!("UVM_UNREGISTER_GPU: {e}");
                }
                let pairs: Vec<_> = g
                    .enabled
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .copied()
                    .filter(|&(a, b)| a == u.uuid || b == u.uuid)
                    .collect();
                for (a, b) in pairs {
                    g.set_enabled(a, b, false);
                }
            }
            // Closing the UVM fd (the last user of it) releases the rest.
            drop(u);
        }
        if let Some(v) = self.virt.take() {
            let _ = self.gpu.rm().free(v);
        }
        self.objs = None;
    }

    fn enable_peer(&mut self, peer: &KernelBackend) -> Result<PeerPathInfo, BackendError> {
        let (g, a, b) = self.peer_of(peer)?;
        let g = g.clone();
        let ids = [self.gpu.card().gpu_id, peer.gpu.card().gpu_id];
        let caps = super::peer::p2p_caps(self.gpu.rm(), ids)
            .map_err(|e| peer_unsupported(format!("RM's P2P capability query failed ({e})")))?;
        let link = caps.link().ok_or_else(|| {
            peer_unsupported(format!(
                "nvidia:{} and nvidia:{}: {} (`nvidia-smi topo -p2p rw` shows the same)",
                self.index,
                peer.index,
                caps.why_not()
            ))
        })?;
        if caps.needs_uvm_enable() && !g.is_enabled(a, b) {
            g.uvm.enable_peer_access(a, b).map_err(|e| {
                peer_unsupported(format!(
                    "RM reports {link} between nvidia:{} and nvidia:{}, but UVM refused peer \
                     access: {e}",
                    self.index, peer.index
                ))
            })?;
            g.set_enabled(a, b, true);
        }
        Ok(PeerPathInfo {
            link: link.to_string(),
            peer_id: caps.peer_ids[0].and_then(|id| u8::try_from(id).ok()),
        })
    }

    fn map_peer_memory(
        &mut self,
        peer: &KernelBackend,
        mem: &KernelMemory,
    ) -> Result<PeerMapping, BackendError> {
        let (g, a, _) = self.peer_of(peer)?;
        if !matches!(mem.map, GpuMap::Uvm) {
            return Err(peer_unsupported(
                "the peer's memory is not in a UVM range (open both GPUs with open_group)",
            ));
        }
        // The owner's external range exists; this adds this GPU's mapping of it, at the same VA.
        g.uvm
            .map_external_allocation(
                a,
                peer.gpu.rm_ref(),
                mem.handle,
                mem.va,
                mem.size,
                0,
                mem.location == Location::Host,
            )
            .map_err(|e| {
                BackendError::Other(format!(
                    "mapping {} bytes of nvidia:{}'s {} at GPU VA {:#x} for nvidia:{}: {e}",
                    mem.size, peer.index, mem.location, mem.va, self.index
                ))
            })?;
        Ok(PeerMapping {
            va: mem.va,
            size: mem.size,
            location: mem.location,
            token: 0,
        })
    }

    fn unmap_peer_memory(&mut self, mapping: PeerMapping) -> Result<(), BackendError> {
        let (Some(g), Some(u)) = (&self.group, &self.uvm) else {
            return Err(peer_unsupported("no peer mappings outside a group"));
        };
        g.uvm
            .unmap_external(u.uuid, mapping.va, mapping.size)
            .map_err(|e| BackendError::Other(format!("removing a peer mapping: {e}")))
    }
}

/// `window`, if the adapter can use it: inside [`KMOD_VA_WINDOW`].
fn check_window(window: VaWindow) -> Result<VaWindow, KmodError> {
    Ok(window.inside(KMOD_VA_WINDOW)?)
}

/// The allocator of GPU VAs in `window` (4 KiB granules), made in place (it is too large for
/// a thread's stack).
fn va_allocator(window: VaWindow) -> Result<Box<RangeAllocator<VA_BLOCKS>>, KmodError> {
    let mut a = Box::new(RangeAllocator::empty());
    a.reset(window.base(), window.size(), PAGE_SIZE, FitPolicy::FirstFit)
        .map_err(|e| KmodError::Invalid(format!("{window}: {e:?}")))?;
    Ok(a)
}

/// The part of [`KMOD_VA_WINDOW`] GPU `k` of a group of `n` allocates from: equal,
/// 2 MiB-aligned, disjoint ([`VaWindow::slice`]; one UVM VA space holds them all).
fn group_window(k: u64, n: u64) -> Result<VaWindow, KmodError> {
    Ok(KMOD_VA_WINDOW.slice(k, n)?)
}

/// Reserves `window` of this process's address space, so nothing the CPU maps lands where UVM
/// ranges live (UVM external ranges share the process's VA space).
fn reserve_window(window: VaWindow) -> Option<VaReservation> {
    match VaReservation::at(window.base(), window.size()) {
        Ok(r) => Some(r),
        Err(e) => {
            log::warn!(
                "could not reserve CPU addresses {:#x}..{:#x} for UVM ranges ({e}); continuing \
                 without the reservation",
                window.base(),
                window.end()
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
