//! The RM-level test backend: the core's [`Backend`] over a simulated GPU whose RM answers
//! directly ([`RmModel`]), like an RM living in a kernel.
//!
//! It speaks the r580 layouts (what the kernel-driver adapter will send) and does what that
//! adapter will do, minus the ioctls: memory is an RM memory object (`NV01_MEMORY_LOCAL_USER`
//! or `NV01_MEMORY_SYSTEM`) mapped into the device's VA space with `MAP_MEMORY_DMA` inside an
//! `NV01_MEMORY_VIRTUAL` range, CPU access comes from the RM's CPU mapping, and the doorbell
//! is the usermode block at BAR0 0xbb0000 after allocating the usermode class. Everything the
//! GPU then does (GPFIFO fetch, copies, launches, faults) happens in the simulator's engines.
//!
//! Backends of one [`SimSystem`] (`SimSystem::backend`) are peers: `enable_peer` connects peer
//! ports when the system's topology allows P2P, and `map_peer_memory` imports the other GPU's
//! memory object into this GPU's RM (video memory behind `Aperture::Peer(id)`, host memory as
//! it is) and maps it with `MAP_MEMORY_DMA`, as RM maps a dup'ed peer allocation.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::device::{
    Backend, BackendError, GpuMemory, Location, MemoryRequest, PeerMapping, PeerPathInfo, Purpose,
    RmObjects, VaWindow,
};
use nvbare_core::hal::{DmaBuffer, HalError, Mmio};
use nvbare_core::regs::usermode::USERMODE_BLOCK_SIZE;
use nvbare_core::rm::alloc::{
    NV_MEMORY_ALLOCATION_PARAMS, NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS,
    NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING,
    NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED, NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
    NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE, NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT,
    NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED, NVOS32_TYPE_IMAGE, NVOS32_TYPE_NOTIFIER, VaSpaceAlloc,
    attr,
};
use nvbare_core::rm::class::{NV01_MEMORY_LOCAL_USER, NV01_MEMORY_SYSTEM, NV01_MEMORY_VIRTUAL};
use nvbare_core::rm::{Handle, Rm, RmAbi, RmError, RmOp};
use zerocopy::IntoBytes;

use crate::clock::SimClock;
use crate::fifo::{Fifo, Kick};
use crate::models::ChipModel;
use crate::rm::{CpuMapping, RmModel};
use crate::rm_service::{RmCaller, RmService};
use crate::system::SimSystem;
use crate::wc::WcBuffer;
use crate::{SimBar0, SimConfig, SimGpu};

/// BAR0 offset of the usermode block.
pub const USERMODE_BASE: usize = 0x00bb_0000;
/// The VA window the backend maps memory into unless told otherwise
/// ([`SimBackend::with_va_window`]) as (base, last address): [64 GiB, 1 TiB),
/// [`VaWindow::DEFAULT`], below the 2^40 limit of GP entries and semaphore addresses.
pub const VA_WINDOW: (u64, u64) = (VaWindow::DEFAULT.base(), VaWindow::DEFAULT.end() - 1);
/// First handle the backend hands out (client-chosen handles, as over GSP).
const FIRST_HANDLE: u32 = 0xcf00_0000;
/// The client handle.
pub const CLIENT: Handle = Handle(0xc1d0_0001);

/// The RM of the simulated GPU, called directly.
pub struct SimRm {
    gpu: Arc<SimGpu>,
    model: Arc<Mutex<RmModel>>,
    client: Handle,
    next: u32,
    abi: RmAbi,
}

impl std::fmt::Debug for SimRm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRm")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<RmModel>) -> MutexGuard<'_, RmModel> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimRm {
    fn caller(&self) -> RmCaller {
        RmCaller {
            abi: self.abi,
            client: self.client,
        }
    }

    /// Runs `f` on the model with the GPU's internals, in the lock order the engines use.
    fn with_model<R>(&self, f: impl FnOnce(&mut RmModel, &mut crate::SimCore) -> R) -> R {
        self.gpu.with_core(|core| f(&mut lock(&self.model), core))
    }
}

impl Rm for SimRm {
    fn client(&self) -> Handle {
        self.client
    }

    fn abi(&self) -> RmAbi {
        self.abi
    }

    fn alloc(&mut self, parent: Handle, class: u32, params: &mut [u8]) -> Result<Handle, RmError> {
        let h = Handle(self.next);
        self.next += 1;
        let caller = self.caller();
        self.with_model(|m, core| m.alloc(core, caller, parent, h, class, params))
            .map_err(|status| RmError::Status {
                op: RmOp::Alloc { parent, class },
                status,
            })?;
        Ok(h)
    }

    fn control(&mut self, object: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmError> {
        let caller = self.caller();
        self.with_model(|m, core| m.control(core, caller, object, cmd, params))
            .map_err(|status| RmError::Status {
                op: RmOp::Control { object, cmd },
                status,
            })
    }

    fn free(&mut self, object: Handle) -> Result<(), RmError> {
        let caller = self.caller();
        self.with_model(|m, core| m.free(core, caller, Handle(0), object))
            .map_err(|status| RmError::Status {
                op: RmOp::Free { object },
                status,
            })
    }
}

/// Memory of the simulated GPU, as the device layer sees it.
#[derive(Debug)]
pub struct SimMemory {
    handle: Handle,
    va: u64,
    size: u64,
    location: Location,
    cpu: Option<CpuMapping>,
    /// For semaphore memory: what a CPU write wakes up (the host engine retries an acquire
    /// until it is satisfied; the simulator runs only when something happens).
    kick: Option<Kick>,
    /// The CPU's write-combining buffers, for memory it writes through a write-combined
    /// mapping ([`crate::wc`]).
    wc: Option<Arc<WcBuffer>>,
}

impl GpuMemory for SimMemory {
    fn size(&self) -> u64 {
        self.size
    }
    fn gpu_va(&self) -> u64 {
        self.va
    }
    fn location(&self) -> Location {
        self.location
    }
    fn rm_handle(&self) -> Option<Handle> {
        Some(self.handle)
    }
    fn cpu_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        // Write-combined memory keeps CPU stores in the model's buffers: not plain memory.
        match (&self.cpu, &self.wc, self.location) {
            (Some(CpuMapping::Host(b)), None, Location::Host) => b.cpu_ptr(),
            _ => None,
        }
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        match &self.cpu {
            Some(m) => {
                m.read(offset, dst)?;
                if let Some(wc) = &self.wc {
                    wc.overlay(self.handle, offset, dst);
                }
                Ok(())
            }
            None => Err(HalError::Unsupported(
                "CPU access to device memory allocated without cpu_access",
            )),
        }
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), HalError> {
        match &self.cpu {
            Some(m) => match &self.wc {
                Some(wc) => wc.store(self.handle, m, offset, src, self.kick.clone()),
                None => {
                    m.write(offset, src)?;
                    if let Some(k) = &self.kick {
                        (k.0)();
                    }
                    Ok(())
                }
            },
            None => Err(HalError::Unsupported(
                "CPU access to device memory allocated without cpu_access",
            )),
        }
    }
}

/// The usermode block of the simulated GPU (BAR0 + 0xbb0000).
#[derive(Debug, Clone)]
pub struct SimUsermode {
    bar0: SimBar0,
    /// The CPU's write-combining buffers: drained by a store barrier and by the (uncached)
    /// doorbell store.
    wc: Arc<WcBuffer>,
    /// In a system: the other GPUs run after this one's doorbell (its releases may unblock
    /// them).
    system: Option<Arc<SimSystem>>,
}

impl Mmio for SimUsermode {
    fn size(&self) -> usize {
        USERMODE_BLOCK_SIZE
    }
    fn read32(&self, offset: usize) -> u32 {
        if offset >= USERMODE_BLOCK_SIZE {
            return u32::MAX;
        }
        self.bar0.read32(USERMODE_BASE + offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        if offset < USERMODE_BLOCK_SIZE {
            // An uncached store drains the write-combining buffers first (in no set order).
            self.wc.drain();
            self.bar0.write32(USERMODE_BASE + offset, value);
            if let Some(sys) = &self.system {
                sys.kick();
            }
        }
    }
    fn store_barrier(&self) {
        self.wc.drain();
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// The simulator as a device-layer backend.
pub struct SimBackend {
    gpu: Arc<SimGpu>,
    model: Arc<Mutex<RmModel>>,
    rm: SimRm,
    objs: Option<RmObjects>,
    virt: Option<Handle>,
    usermode: Option<Handle>,
    existing: Option<(Handle, Handle)>,
    /// Where the RM places memory (the virtual memory object's range).
    window: VaWindow,
    /// The system this GPU belongs to and its index there.
    system: Option<(Arc<SimSystem>, usize)>,
    /// This process's write-combining buffers.
    wc: Arc<WcBuffer>,
    /// The clock the driver reads.
    clock: DriverClock,
}

/// The clock the driver reads: the GPU's. With [`SimBackend::run_lazily`] the GPU only runs
/// when time passes for the driver, i.e. when it reads this clock or delays.
#[derive(Debug)]
pub struct DriverClock {
    clock: Arc<SimClock>,
    lazy: std::sync::atomic::AtomicBool,
    catch_up: Kick,
}

impl DriverClock {
    fn catch_up(&self) {
        if self.lazy.load(std::sync::atomic::Ordering::Relaxed) {
            (self.catch_up.0)();
        }
    }
}

impl nvbare_core::hal::Clock for DriverClock {
    fn now(&self) -> std::time::Duration {
        self.catch_up();
        self.clock.now()
    }

    fn delay(&self, d: std::time::Duration) {
        self.catch_up();
        self.clock.delay(d);
    }
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend")
            .field("chip", &self.gpu.model().chipset)
            .finish_non_exhaustive()
    }
}

impl SimBackend {
    /// A fresh simulated GPU of `model` (virtual time if `virtual_time`) with its RM and a
    /// client.
    pub fn new(model: ChipModel, virtual_time: bool) -> Result<Self, String> {
        let mut cfg = SimConfig::new(model);
        cfg.virtual_time = virtual_time;
        let gpu = SimGpu::new(cfg);
        let rm = RmModel::install(&gpu)?;
        Self::on(gpu, rm)
    }

    /// A backend over an existing GPU and RM (the client is created here).
    pub fn on(gpu: Arc<SimGpu>, model: Arc<Mutex<RmModel>>) -> Result<Self, String> {
        let rm = SimRm {
            gpu: gpu.clone(),
            model: model.clone(),
            client: CLIENT,
            next: FIRST_HANDLE,
            abi: RmAbi::R580,
        };
        let caller = rm.caller();
        rm.with_model(|m, core| {
            m.alloc(
                core,
                caller,
                Handle(0),
                CLIENT,
                nvbare_core::rm::class::NV01_ROOT,
                &mut [],
            )
        })
        .map_err(|s| format!("creating the RM client failed: {s}"))?;
        let (g, m) = (gpu.clone(), model.clone());
        let clock = DriverClock {
            clock: gpu.clock(),
            lazy: std::sync::atomic::AtomicBool::new(false),
            catch_up: Kick(Arc::new(move || {
                let fifo = m.lock().unwrap_or_else(|e| e.into_inner()).fifo().clone();
                g.with_core(|core| crate::fifo::lock(&fifo).catch_up(core));
            })),
        };
        Ok(SimBackend {
            gpu,
            model,
            rm,
            objs: None,
            virt: None,
            usermode: None,
            existing: None,
            window: VaWindow::DEFAULT,
            system: None,
            wc: Arc::new(WcBuffer::default()),
            clock,
        })
    }

    /// Makes this backend GPU `index` of `system` (what [`SimSystem::backend`] does): peer
    /// hooks work between backends of one system, and other GPUs run after each doorbell.
    pub(crate) fn in_system(mut self, system: Arc<SimSystem>, index: usize) -> Self {
        self.system = Some((system, index));
        self
    }

    /// The system and this GPU's index in it, if it belongs to one.
    pub fn system(&self) -> Option<(&Arc<SimSystem>, usize)> {
        self.system.as_ref().map(|(s, i)| (s, *i))
    }

    /// What runs blocked channels after a CPU write to a semaphore.
    fn kicker(&self) -> Kick {
        match &self.system {
            Some((sys, _)) => {
                let sys = sys.clone();
                Kick(Arc::new(move || sys.kick()))
            }
            None => {
                let (gpu, model) = (self.gpu.clone(), self.model.clone());
                Kick(Arc::new(move || {
                    crate::fifo::run_channels(&gpu, &model);
                }))
            }
        }
    }

    /// This GPU and `peer` as indices of one system, or why they are not peers.
    fn pair(&self, peer: &SimBackend) -> Result<(&Arc<SimSystem>, usize, usize), BackendError> {
        let unsupported = |reason: String| BackendError::PeerUnsupported { reason };
        let (sys, me) = self.system.as_ref().ok_or_else(|| {
            unsupported(format!(
                "{} is a stand-alone simulated GPU; open both GPUs from one \
                 nvbare_sim::system::SimSystem (one simulated host)",
                self.describe()
            ))
        })?;
        let (psys, other) = peer.system.as_ref().ok_or_else(|| {
            unsupported(format!(
                "{} is a stand-alone simulated GPU; open both GPUs from one \
                 nvbare_sim::system::SimSystem (one simulated host)",
                peer.describe()
            ))
        })?;
        if !Arc::ptr_eq(sys, psys) {
            return Err(unsupported(
                "the simulated GPUs belong to different simulated hosts".into(),
            ));
        }
        Ok((sys, *me, *other))
    }

    /// Maps memory at GPU VAs in `window` (the range of the `NV01_MEMORY_VIRTUAL` object the
    /// RM allocates VAs from), as the kernel-driver adapter's RM mode does.
    pub fn with_va_window(mut self, window: VaWindow) -> Self {
        self.window = window;
        self
    }

    /// Speaks the `abi` struct layouts to the RM (default r580, what the kernel-driver adapter
    /// sends; r570 is what GSP-RM firmware 570.144, and so the bare-metal path, expects).
    pub fn with_abi(mut self, abi: RmAbi) -> Self {
        self.rm.abi = abi;
        self
    }

    /// Allocates `NV01_DEVICE_0` and `NV20_SUBDEVICE_0` here and hands them to the device
    /// layer through [`Backend::existing_device`], as the kernel-driver adapter (whose
    /// `KernelGpu` owns them) will. They outlive the `Device`.
    pub fn with_existing_device(mut self) -> Result<Self, String> {
        let mut p0080 = nvbare_core::rm::alloc::NV0080_ALLOC_PARAMETERS {
            hClientShare: CLIENT.0,
            vaMode: nvbare_core::rm::alloc::NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES,
            ..Default::default()
        };
        let device = self
            .rm
            .alloc(
                CLIENT,
                nvbare_core::rm::class::NV01_DEVICE_0,
                p0080.as_mut_bytes(),
            )
            .map_err(|e| e.to_string())?;
        let mut p2080 = nvbare_core::rm::alloc::NV2080_ALLOC_PARAMETERS { subDeviceId: 0 };
        let subdevice = self
            .rm
            .alloc(
                device,
                nvbare_core::rm::class::NV20_SUBDEVICE_0,
                p2080.as_mut_bytes(),
            )
            .map_err(|e| e.to_string())?;
        self.existing = Some((device, subdevice));
        Ok(self)
    }

    /// The simulated GPU.
    pub fn gpu(&self) -> &Arc<SimGpu> {
        &self.gpu
    }

    /// The RM model.
    pub fn model(&self) -> MutexGuard<'_, RmModel> {
        lock(&self.model)
    }

    /// The RM model, shared (it outlives the backend).
    pub fn model_arc(&self) -> Arc<Mutex<RmModel>> {
        self.model.clone()
    }

    /// The host (channels) of the GPU.
    pub fn fifo(&self) -> Arc<Mutex<Fifo>> {
        self.model().fifo().clone()
    }

    /// The channel id of channel object `h`.
    pub fn chid(&self, h: Handle) -> Option<u32> {
        self.model().chid(CLIENT, h)
    }

    /// Runs `f` on the host with channel object `h`'s channel id; `None` if `h` is no channel.
    fn with_fifo_channel<T>(&self, h: Handle, f: impl FnOnce(&mut Fifo, u32) -> T) -> Option<T> {
        let chid = self.chid(h)?;
        Some(f(&mut crate::fifo::lock(&self.fifo()), chid))
    }

    /// Fault injection: the host stops fetching channel `h` (its `GPGet` freezes).
    pub fn freeze_channel(&self, h: Handle) -> bool {
        self.with_fifo_channel(h, |f, chid| f.freeze(chid))
            .is_some()
    }

    /// Fault injection: the next `n` doorbells of channel `h` are lost
    /// ([`crate::fifo::Fifo::lose_doorbells`]).
    pub fn lose_doorbells(&self, h: Handle, n: u32) -> bool {
        self.with_fifo_channel(h, |f, chid| f.lose_doorbells(chid, n))
            .is_some()
    }

    /// Fault injection: channel `h`'s QMD cache launches stale copies
    /// ([`crate::fifo::Fifo::keep_stale_qmds`]).
    pub fn keep_stale_qmds(&self, h: Handle, on: bool) -> bool {
        self.with_fifo_channel(h, |f, chid| f.keep_stale_qmds(chid, on))
            .unwrap_or(false)
    }

    /// Fault injection: the next launch on channel `h` releases an older timeline value
    /// ([`crate::fifo::Fifo::stale_release`]).
    pub fn stale_release(&self, h: Handle, back: u64) -> bool {
        self.with_fifo_channel(h, |f, chid| f.stale_release(chid, back))
            .unwrap_or(false)
    }

    /// Fault injection: write-combined stores become visible last first when drained, the
    /// worst of the orders hardware may pick ([`crate::wc`]).
    pub fn reorder_wc_stores(&self, on: bool) {
        self.wc.set_last_first(on);
    }

    /// Fault injection: the host switches channel `h` in, reloading its `GPPut` from USERD,
    /// after every write-combined store that lands, as the H200's scheduler does at some moment
    /// when another process's channel shares the GPU ([`crate::fifo::Fifo::switch_in_on_stores`]).
    pub fn switch_in_on_stores(&self, h: Handle, on: bool) -> bool {
        let Some(()) = self.with_fifo_channel(h, |f, chid| f.switch_in_on_stores(chid, on)) else {
            return false;
        };
        let (gpu, fifo) = (self.gpu.clone(), self.fifo());
        let hook = Kick(Arc::new(move || {
            gpu.with_core(|core| crate::fifo::lock(&fifo).switch_in(core));
        }));
        self.wc.set_switch_in(Some(hook));
        true
    }

    /// Write-combined stores not yet visible to the GPU.
    pub fn pending_wc_stores(&self) -> usize {
        self.wc.pending()
    }

    /// CPU reads of write-combined memory (rings, USERD, command memory) so far: each is an
    /// uncached round trip across PCIe on hardware.
    pub fn wc_reads(&self) -> u64 {
        self.wc.reads()
    }

    /// Doorbells of channel `h` still to be lost.
    pub fn doorbells_to_lose(&self, h: Handle) -> Option<u32> {
        self.with_fifo_channel(h, |f, chid| f.doorbells_to_lose(chid))
    }

    /// Fault injection: the GPU falls behind the driver ([`Fifo::run_lazily`]): work published
    /// by a doorbell runs only when time passes for the driver (it reads the clock or
    /// delays, as every wait does), not before the driver's next instruction. A driver that
    /// reads results it has not waited for sees them unwritten. One GPU only: `false` for a
    /// GPU of a [`SimSystem`] (whose GPUs run one another's work after each doorbell).
    pub fn run_lazily(&self, on: bool) -> bool {
        if self.system.is_some() {
            return false;
        }
        crate::fifo::lock(&self.fifo()).run_lazily(on);
        self.clock
            .lazy
            .store(on, std::sync::atomic::Ordering::Relaxed);
        if !on {
            (self.clock.catch_up.0)();
        }
        true
    }

    /// Undoes [`SimBackend::freeze_channel`] and lets the host run again.
    pub fn thaw_channel(&self, h: Handle) -> bool {
        self.thawer(h).map(|thaw| thaw()).is_some()
    }

    /// [`SimBackend::thaw_channel`] for another thread to call (while this one waits for the
    /// channel in the device): tests that work does not read results before the GPU wrote them.
    pub fn thawer(&self, h: Handle) -> Option<impl FnOnce() + Send + use<>> {
        let chid = self.chid(h)?;
        let (gpu, fifo) = (self.gpu.clone(), self.fifo());
        Some(move || {
            gpu.with_core(|core| {
                let mut f = crate::fifo::lock(&fifo);
                f.thaw(chid);
                f.run_all(core);
            })
        })
    }

    /// Freezes channel `h` ([`SimBackend::freeze_channel`]) and thaws it from another thread
    /// after `after` of wall time: a wait made meanwhile must outlast the stall. `None` if `h`
    /// is no channel; join the handle before checking what the thaw let run.
    pub fn freeze_for(&self, h: Handle, after: Duration) -> Option<std::thread::JoinHandle<()>> {
        let thaw = self.thawer(h)?;
        self.freeze_channel(h);
        Some(std::thread::spawn(move || {
            std::thread::sleep(after);
            thaw();
        }))
    }

    /// Lets a lazily running GPU ([`SimBackend::run_lazily`]) run what it can, from outside
    /// the device: the real GPU runs while the program does something else, and tests of
    /// what the driver does without being called need that to happen between two calls.
    pub fn runner(&self) -> impl Fn() + Send + use<> {
        let catch_up = self.clock.catch_up.0.clone();
        move || catch_up()
    }

    /// Writes `bytes` at GPU VA `va` of the device's VA space (as another agent would).
    pub fn write_gpu(&self, va: u64, bytes: &[u8]) -> Result<(), String> {
        let objs = self.objs.ok_or("not attached")?;
        let space = self
            .model()
            .address_space(CLIENT, objs.vaspace)
            .map_err(|s| s.to_string())?;
        let fifo = self.fifo();
        self.gpu.with_core(|core| {
            crate::gpu_mem::gpu_write(core, &*space, va, bytes, crate::gpu_mem::Access::Write)
                .map_err(|f| f.to_string())?;
            // A write other agents can see: re-evaluate blocked and spinning channels.
            crate::fifo::lock(&fifo).run_all(core);
            Ok::<(), String>(())
        })?;
        if let Some((sys, _)) = &self.system {
            sys.kick();
        }
        Ok(())
    }

    /// Reads `len` bytes at GPU VA `va` of the device's VA space (as the GPU would see them).
    pub fn read_gpu(&self, va: u64, len: usize) -> Result<Vec<u8>, String> {
        let space = self.address_space()?;
        let mut out = vec![0u8; len];
        self.gpu.with_core(|core| {
            crate::gpu_mem::gpu_read(core, &*space, va, &mut out, crate::gpu_mem::Access::Read)
                .map_err(|f| f.to_string())
        })?;
        Ok(out)
    }

    /// The translation of the device's VA space (tests look up where a VA leads).
    pub fn address_space(&self) -> Result<Arc<dyn crate::gpu_mem::AddressSpace>, String> {
        let objs = self.objs.ok_or("not attached")?;
        self.model()
            .address_space(CLIENT, objs.vaspace)
            .map_err(|s| s.to_string())
    }

    /// Where GPU VA `va` of the device's VA space leads.
    pub fn translate(&self, va: u64) -> Result<crate::gpu_mem::Translation, String> {
        let space = self.address_space()?;
        self.gpu
            .with_core(|core| space.translate(core, va, crate::gpu_mem::Access::Read))
            .map_err(|f| f.to_string())
    }

    /// The clock.
    pub fn sim_clock(&self) -> Arc<SimClock> {
        self.gpu.clock()
    }
}

impl Backend for SimBackend {
    type Rm = SimRm;
    type Memory = SimMemory;
    type Usermode = SimUsermode;
    type Clock = DriverClock;

    fn describe(&self) -> String {
        let chip = self.gpu.model().chipset.name().to_ascii_lowercase();
        match &self.system {
            Some((sys, i)) => format!(
                "sim:{chip}#{i} (simulated {}, GPU {i} of {})",
                self.gpu.model().board,
                sys.len()
            ),
            None => format!("sim:{chip} (simulated {})", self.gpu.model().board),
        }
    }

    fn rm(&mut self) -> &mut SimRm {
        &mut self.rm
    }

    fn clock(&self) -> &DriverClock {
        &self.clock
    }

    fn chipset(&self) -> Option<Chipset> {
        // Like the kernel driver, the backend learns the chip from RM (MC_GET_ARCH_INFO).
        None
    }

    fn existing_device(&self) -> Option<(Handle, Handle)> {
        self.existing
    }

    fn detach(&mut self) {
        // The RM objects this backend created under the device (they go with the device
        // object when the device layer frees it, but not when the device is ours).
        for h in [self.usermode.take(), self.virt.take()]
            .into_iter()
            .flatten()
        {
            let _ = self.rm.free(h);
        }
        self.objs = None;
    }

    fn vaspace_params(&self) -> VaSpaceAlloc {
        // What the kernel-driver adapter sends (UVM needs these flags), so the sim exercises
        // the same struct.
        VaSpaceAlloc {
            index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
            flags: NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING
                | NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
            va_size: 0x1_ffff_fb00_0000,
            va_base: 0x1000,
            big_page_size: 0,
            pasid: 0,
        }
    }

    fn attach(&mut self, objects: &RmObjects) -> Result<(), BackendError> {
        let mut v = NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS {
            offset: self.window.base(),
            limit: self.window.end() - 1,
            hVASpace: objects.vaspace.0,
            _pad0: 0,
        };
        let virt = self
            .rm
            .alloc(objects.device, NV01_MEMORY_VIRTUAL, v.as_mut_bytes())?;
        self.objs = Some(*objects);
        self.virt = Some(virt);
        Ok(())
    }

    fn alloc_memory(&mut self, req: &MemoryRequest) -> Result<SimMemory, BackendError> {
        let objs = self.objs.ok_or(BackendError::Unsupported(
            "allocating memory before the VA space exists",
        ))?;
        let virt = self
            .virt
            .ok_or(BackendError::Unsupported("memory before attach"))?;
        let size = req.size.max(1).next_multiple_of(4096);
        let huge = size >= 8 << 20;
        let (class, mut attr_bits, ty) = match req.location {
            Location::Device => (
                NV01_MEMORY_LOCAL_USER,
                attr::PHYSICALITY_CONTIGUOUS | attr::LOCATION_VIDMEM,
                NVOS32_TYPE_IMAGE,
            ),
            Location::Host => (
                NV01_MEMORY_SYSTEM,
                attr::PHYSICALITY_CONTIGUOUS | attr::LOCATION_PCI | attr::COHERENCY_CACHED,
                if req.purpose == Purpose::Notifier {
                    NVOS32_TYPE_NOTIFIER
                } else {
                    NVOS32_TYPE_IMAGE
                },
            ),
        };
        if huge {
            attr_bits |= attr::PAGE_SIZE_HUGE;
        } else {
            attr_bits |= attr::PAGE_SIZE_4KB;
        }
        let mut p = NV_MEMORY_ALLOCATION_PARAMS {
            owner: objs.client.0,
            r#type: ty,
            flags: NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT
                | NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE
                | NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED,
            attr: attr_bits,
            attr2: attr::ATTR2_GPU_CACHEABLE_YES,
            size,
            alignment: req.align.max(4096),
            ..Default::default()
        };
        let h = self.rm.alloc(objs.device, class, p.as_mut_bytes())?;
        let size = p.size;
        let client = objs.client;
        let mapped = lock(&self.model).map_memory_dma(client, virt, h, 0, size, 0, 0);
        let va = match mapped {
            Ok(va) => va,
            Err(status) => {
                let _ = self.rm.free(h);
                return Err(BackendError::Rm(RmError::Status {
                    op: RmOp::Alloc {
                        parent: objs.device,
                        class,
                    },
                    status,
                }));
            }
        };
        let cpu = if req.cpu_access || req.location == Location::Host {
            Some(
                lock(&self.model)
                    .cpu_map(client, h)
                    .map_err(|s| BackendError::Other(format!("CPU mapping failed: {s}")))?,
            )
        } else {
            None
        };
        // A CPU write to memory the host may be polling (a semaphore, or a flag in command
        // memory an acquire waits for) lets blocked channels run, as the host's retries would.
        let kick =
            matches!(req.purpose, Purpose::Notifier | Purpose::Commands).then(|| self.kicker());
        // The CPU writes video memory through BAR1, write-combined; the kernel-driver adapter
        // puts rings and command memory there even when asked for host memory, so they are
        // written write-combined here too.
        let write_combined = matches!(cpu, Some(CpuMapping::Vram { .. }))
            || matches!(req.purpose, Purpose::Ring | Purpose::Commands);
        Ok(SimMemory {
            handle: h,
            va,
            size,
            location: req.location,
            cpu,
            kick,
            wc: write_combined.then(|| self.wc.clone()),
        })
    }

    fn free_memory(&mut self, mem: SimMemory) -> Result<(), BackendError> {
        // Unmapping is a system call, which drains the write-combining buffers: no store
        // lands in memory after it was freed.
        self.wc.drain();
        let client = self.rm.client;
        let _ = lock(&self.model).unmap_memory_dma(client, mem.handle, mem.va);
        self.rm.free(mem.handle)?;
        Ok(())
    }

    fn map_usermode(&mut self, class: u32) -> Result<SimUsermode, BackendError> {
        let parent = match self.existing {
            Some((_, subdevice)) => subdevice,
            None => self.objs_or_subdevice()?,
        };
        self.usermode = Some(self.rm.alloc(parent, class, &mut [])?);
        Ok(SimUsermode {
            bar0: self.gpu.bar0(),
            wc: self.wc.clone(),
            system: self.system.as_ref().map(|(s, _)| s.clone()),
        })
    }

    fn enable_peer(&mut self, peer: &SimBackend) -> Result<PeerPathInfo, BackendError> {
        let (sys, me, other) = self.pair(peer)?;
        let id = sys
            .connect(me, other)
            .map_err(|reason| BackendError::PeerUnsupported { reason })?;
        Ok(PeerPathInfo {
            link: "simulated P2P".into(),
            peer_id: Some(id),
        })
    }

    fn map_peer_memory(
        &mut self,
        peer: &SimBackend,
        mem: &SimMemory,
    ) -> Result<PeerMapping, BackendError> {
        let (sys, me, other) = self.pair(peer)?;
        let peer_id = sys.peer_id(me, other);
        let objs = self.objs.ok_or(BackendError::Unsupported(
            "peer mappings before the VA space exists",
        ))?;
        let virt = self
            .virt
            .ok_or(BackendError::Unsupported("peer mappings before attach"))?;
        let rm_err = |op, status| BackendError::Rm(RmError::Status { op, status });
        let exported = peer
            .model()
            .export_memory(CLIENT, mem.handle)
            .map_err(|s| {
                BackendError::Other(format!(
                    "the peer's RM cannot export memory object {}: {s}",
                    mem.handle
                ))
            })?;
        if mem.location == Location::Device && peer_id.is_none() {
            return Err(BackendError::PeerUnsupported {
                reason: format!(
                    "peer access from GPU {me} to GPU {other} is not enabled (enable_peer \
                     first)"
                ),
            });
        }
        let h = Handle(self.rm.next);
        self.rm.next += 1;
        let size = mem.size;
        self.model()
            .import_peer_memory(CLIENT, objs.device, h, exported, peer_id)
            .map_err(|s| {
                rm_err(
                    RmOp::Alloc {
                        parent: objs.device,
                        class: nvbare_core::rm::class::NV01_MEMORY_LOCAL_USER,
                    },
                    s,
                )
            })?;
        let mapped = self.model().map_memory_dma(CLIENT, virt, h, 0, size, 0, 0);
        match mapped {
            Ok(va) => Ok(PeerMapping {
                va,
                size,
                location: mem.location,
                token: h.0 as u64,
            }),
            Err(status) => {
                let _ = self.rm.free(h);
                Err(rm_err(
                    RmOp::Alloc {
                        parent: objs.device,
                        class: nvbare_core::rm::class::NV01_MEMORY_LOCAL_USER,
                    },
                    status,
                ))
            }
        }
    }

    fn unmap_peer_memory(&mut self, mapping: PeerMapping) -> Result<(), BackendError> {
        let h = Handle(
            u32::try_from(mapping.token)
                .map_err(|_| BackendError::Other("not a peer mapping of this backend".into()))?,
        );
        let _ = self.model().unmap_memory_dma(CLIENT, h, mapping.va);
        self.rm.free(h)?;
        Ok(())
    }
}

impl SimBackend {
    fn objs_or_subdevice(&self) -> Result<Handle, BackendError> {
        // map_usermode runs before attach: find the subdevice the device layer created.
        self.model()
            .first_of_class(CLIENT, nvbare_core::rm::class::NV20_SUBDEVICE_0)
            .ok_or(BackendError::Unsupported(
                "usermode before the subdevice exists",
            ))
    }
}
