//! The [`Backend`] contract: what differs between driving a GPU bare metal, through the nvidia
//! kernel driver, and in the simulator.
//!
//! The device layer ([`super::Device`]) does everything that is the same everywhere: the RM
//! object tree (device, subdevice, VA space, channel group, subcontext, channels, engine
//! objects, debugger), pushbuffers, GPFIFO submission, semaphores, copies, program loading,
//! launches and fault reports. A backend supplies:
//!
//! * an [`Rm`] to allocate, control and free RM objects (GSP RPCs, kernel ioctls, or an RM
//!   model answering directly);
//! * GPU memory: allocation, a GPU virtual address in the device's VA space, and CPU access
//!   ([`GpuMemory`]);
//! * the usermode (doorbell) window, as an [`Mmio`] with the block's own offsets
//!   (`NOTIFY_CHANNEL_PENDING` at 0x90);
//! * a [`Clock`];
//! * hooks at the points where the three worlds differ: VA space flags and registration
//!   ([`Backend::vaspace_params`], [`Backend::attach`]), channel memory descriptors
//!   ([`Backend::prepare_channel`], [`Backend::channel_created`]) and asynchronous RM events
//!   ([`Backend::poll_events`]).
//!
//! How each implementation fills it in (see `docs/device.md` for the full contract):
//!
//! | | simulator (`nvbare-sim`) | kernel driver (`nvidia:N`) | bare metal (`vfio:`) |
//! |---|---|---|---|
//! | `Rm` | RM model called directly | `NV_ESC_RM_ALLOC/CONTROL/FREE` ioctls | GSP-RM RPCs |
//! | memory | `NV01_MEMORY_LOCAL_USER`/`_SYSTEM` + model `MAP_MEMORY_DMA` | same + `NV_ESC_RM_MAP_MEMORY` + mmap, `MAP_MEMORY_DMA` or UVM external ranges | own VRAM allocator + page tables; sysmem via `hal::DmaAllocator` |
//! | `rm_handle` | memory object | memory object | `None` |
//! | `phys` | — | — | physical range (for `prepare_channel`) |
//! | usermode | BAR0 0xbb0000 of the simulated GPU | usermode object + mmap | BAR0 0xbb0000 |
//! | `attach` | nothing | `NV01_MEMORY_VIRTUAL` window (RM VA) or UVM register GPU + VA space | `SET_PAGE_DIRECTORY` |
//! | `prepare_channel` | nothing | nothing | `instanceMem`/`ramfcMem`/`userdMem`/`mthdbufMem`/`errorNotifierMem` |
//! | `channel_created` | nothing | `UVM_REGISTER_CHANNEL` (UVM VA) | nothing |
//! | `enable_peer` | peer ports of a `SimSystem` | `UVM_ENABLE_PEER_ACCESS` (PCIe peers) | the peer's BAR1 window (`PeerPlatform`) |
//! | `map_peer_memory` | import the peer's memory object, `MAP_MEMORY_DMA` | UVM external mapping for this GPU's UUID | `PteAttrs::peer_bar1` PTEs in our tables |
//!
//! Peer hooks default to [`BackendError::PeerUnsupported`], so a backend without them keeps
//! working alone and two of its devices get a clear error instead of a link.

use alloc::string::String;
use core::fmt;

use crate::chip::Chipset;
use crate::hal::{Clock, HalError, Mmio};
use crate::rm::alloc::{NV_CHANNEL_ALLOC_PARAMS, VaSpaceAlloc};
use crate::rm::{Handle, Rm, RmError};

/// Where memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// Video memory.
    Device,
    /// Host memory the GPU reaches over PCIe (snooped).
    Host,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Location::Device => "device memory",
            Location::Host => "host memory",
        })
    }
}

/// What the device layer uses a piece of memory for (backends may place or map it
/// differently, e.g. uncached for notifiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A user buffer.
    Buffer,
    /// A loaded program image.
    Program,
    /// GPFIFO ring + USERD.
    Ring,
    /// Pushbuffers, QMDs and constant bank 0.
    Commands,
    /// Semaphores and error notifiers (read by the CPU while the GPU runs).
    Notifier,
    /// Copy staging.
    Staging,
    /// Local memory (per-thread stacks).
    LocalMemory,
}

/// An allocation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRequest {
    /// Bytes (the backend may round up; [`GpuMemory::size`] says how much it gave).
    pub size: u64,
    /// Where.
    pub location: Location,
    /// Whether the CPU must be able to read and write it.
    pub cpu_access: bool,
    /// Minimum alignment of the GPU VA (a power of two, at least 4 KiB).
    pub align: u64,
    /// What it is for.
    pub purpose: Purpose,
}

/// A physical range (bare metal only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysRange {
    /// Physical (VRAM) or bus (host) address.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// VRAM or host memory.
    pub location: Location,
}

/// One allocation of GPU memory.
///
/// CPU access copies (the GPU may change the memory at any time, so no references into it are
/// handed out). Backends implement `read`/`write` with volatile copies over their mapping.
pub trait GpuMemory {
    /// Bytes.
    fn size(&self) -> u64;
    /// GPU virtual address of byte 0 in the device's VA space.
    fn gpu_va(&self) -> u64;
    /// Where it lives.
    fn location(&self) -> Location;
    /// The RM memory object, when RM owns the memory (simulator, kernel driver).
    fn rm_handle(&self) -> Option<Handle> {
        None
    }
    /// The physical range, when the backend owns physically contiguous memory (bare metal).
    fn phys(&self) -> Option<PhysRange> {
        None
    }
    /// Where the CPU reaches host memory directly: plain memory of this process, mapped for
    /// the allocation's lifetime (`None` for video memory, and where host memory lives
    /// elsewhere, as behind `remote:`). A host library hands it to a program as that
    /// program's own pinned memory; the device layer itself never uses it.
    fn cpu_ptr(&self) -> Option<core::ptr::NonNull<u8>> {
        None
    }
    /// Copies `dst.len()` bytes at `offset` out (fails if the memory has no CPU mapping).
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), HalError>;
    /// Copies `src` in at `offset`.
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), HalError>;

    /// Reads a little-endian u32.
    fn read_u32(&self, offset: u64) -> Result<u32, HalError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    /// Writes a little-endian u32.
    fn write_u32(&self, offset: u64, v: u32) -> Result<(), HalError> {
        self.write(offset, &v.to_le_bytes())
    }
    /// Reads a little-endian u64.
    fn read_u64(&self, offset: u64) -> Result<u64, HalError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Writes a little-endian u64.
    fn write_u64(&self, offset: u64, v: u64) -> Result<(), HalError> {
        self.write(offset, &v.to_le_bytes())
    }
    /// Fills `len` bytes at `offset` with zeros.
    fn zero(&self, offset: u64, len: u64) -> Result<(), HalError> {
        let z = [0u8; 512];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(z.len() as u64) as usize;
            self.write(offset + done, &z[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

/// The RM objects a backend may need (memory objects live under `device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmObjects {
    /// The client.
    pub client: Handle,
    /// `NV01_DEVICE_0`.
    pub device: Handle,
    /// `NV20_SUBDEVICE_0`.
    pub subdevice: Handle,
    /// `FERMI_VASPACE_A`.
    pub vaspace: Handle,
}

/// An asynchronous RM event (GSP `RC_TRIGGERED` / `MMU_FAULT_QUEUED`, kernel events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RmEvent {
    /// `ROBUST_CHANNEL_*` code, if the event is an RC.
    pub rc: Option<u32>,
    /// Channel id the event names, if any.
    pub chid: Option<u32>,
    /// Faulting address, for MMU faults.
    pub fault_address: Option<u64>,
    /// Anything else, in words.
    pub text: String,
}

/// Why a backend operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// An RM call failed.
    Rm(RmError),
    /// A hardware access failed.
    Hal(HalError),
    /// Out of memory of this kind.
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// Where.
        location: Location,
    },
    /// The backend cannot do this (yet).
    Unsupported(&'static str),
    /// Peer-to-peer access between two devices is not possible (no P2P path, GPUs in
    /// different IOMMU domains, different chips, or a backend without peer support).
    PeerUnsupported {
        /// Why, in words.
        reason: String,
    },
    /// Anything else, with a message saying what to do.
    Other(String),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Rm(e) => write!(f, "{e}"),
            BackendError::Hal(e) => write!(f, "{e}"),
            BackendError::OutOfMemory {
                requested,
                location,
            } => write!(
                f,
                "out of {location}: {requested} bytes requested; free buffers or ask for less"
            ),
            BackendError::Unsupported(what) => write!(f, "{what} is not supported by this backend"),
            BackendError::PeerUnsupported { reason } => {
                write!(f, "peer-to-peer access is not possible: {reason}")
            }
            BackendError::Other(s) => f.write_str(s),
        }
    }
}

impl core::error::Error for BackendError {}

impl From<RmError> for BackendError {
    fn from(e: RmError) -> Self {
        BackendError::Rm(e)
    }
}

impl From<HalError> for BackendError {
    fn from(e: HalError) -> Self {
        BackendError::Hal(e)
    }
}

/// How a backend reaches a peer GPU (what [`Backend::enable_peer`] reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPathInfo {
    /// The link, in words (`NVLink`, `PCIe P2P`, `PCIe BAR1 P2P`, `simulated P2P`).
    pub link: String,
    /// The peer id this GPU's page tables use for the peer (PTE `PEER_ID`), when the path uses
    /// the PEER aperture; `None` for BAR1 (SYS aperture) paths or when RM does not say.
    pub peer_id: Option<u8>,
}

/// Another device's memory mapped into this device's VA space
/// ([`Backend::map_peer_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerMapping {
    /// GPU VA in this device's VA space (below 2^40, like every other mapping).
    pub va: u64,
    /// Bytes mapped.
    pub size: u64,
    /// Where the memory lives: the peer's video memory or host memory.
    pub location: Location,
    /// The backend's own bookkeeping (an RM handle, a VA), handed back on unmap.
    pub token: u64,
}

/// What the device layer needs from the platform. See the [device module](crate::device) and
/// `docs/device.md`.
pub trait Backend {
    /// The RM.
    type Rm: Rm;
    /// An allocation.
    type Memory: GpuMemory;
    /// The usermode (doorbell) window.
    type Usermode: Mmio;
    /// Time.
    type Clock: Clock;

    /// Short description for messages, e.g. `sim:gh100` or `nvidia:0`.
    fn describe(&self) -> String;

    /// The RM (its client exists already; the device layer allocates everything under it).
    fn rm(&mut self) -> &mut Self::Rm;

    /// The clock every wait uses.
    fn clock(&self) -> &Self::Clock;

    /// The chip, if the backend knows it without asking RM (bare metal reads `NV_PMC_BOOT_42`);
    /// otherwise the device layer asks RM (`NV2080_CTRL_CMD_MC_GET_ARCH_INFO`).
    fn chipset(&self) -> Option<Chipset> {
        None
    }

    /// `deviceId` for `NV01_DEVICE_0` (which GPU of the RM).
    fn device_instance(&self) -> u32 {
        0
    }

    /// `subDeviceId` for `NV20_SUBDEVICE_0`.
    fn subdevice_instance(&self) -> u32 {
        0
    }

    /// The `NV01_DEVICE_0` and `NV20_SUBDEVICE_0` (in that order) the backend already holds
    /// under its client, if it opened them itself (the kernel-driver adapter's `KernelGpu`
    /// does). Then the device layer uses them instead of allocating its own, and on close (or
    /// a failed open) frees only the objects it created under them (VA space, channel group,
    /// debugger) instead of the device object. `None` (the default): the device layer allocates
    /// both and frees the device object, and everything under it, when it closes.
    fn existing_device(&self) -> Option<(Handle, Handle)> {
        None
    }

    /// The `FERMI_VASPACE_A` the device layer allocates: flags and range. The kernel driver
    /// needs `ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED` for UVM; bare metal owns the page
    /// tables (`IS_EXTERNALLY_OWNED`).
    fn vaspace_params(&self) -> VaSpaceAlloc;

    /// Called once device, subdevice and VA space exist, before any memory is allocated:
    /// register the VA space with UVM, point GSP-RM at our page tables, create a VA range
    /// object. Also called again after [`Backend::detach`] if the device layer re-creates them.
    fn attach(&mut self, objects: &RmObjects) -> Result<(), BackendError>;

    /// Allocates memory mapped at a GPU VA in the attached VA space (below 2^40: pushbuffers
    /// and semaphores must be reachable by every supported host class).
    fn alloc_memory(&mut self, req: &MemoryRequest) -> Result<Self::Memory, BackendError>;

    /// Frees memory (unmaps it from the GPU and the CPU).
    fn free_memory(&mut self, mem: Self::Memory) -> Result<(), BackendError>;

    /// Maps the usermode block of usermode class `class` (the newest of the class list).
    fn map_usermode(&mut self, class: u32) -> Result<Self::Usermode, BackendError>;

    /// Completes the GPFIFO allocation params before the channel is allocated. The device
    /// layer has set `gpFifoOffset`, `gpFifoEntries`, `hContextShare`, `hUserdMemory[0]` /
    /// `userdOffset[0]` (from `ring.rm_handle()`) and `hObjectError` (from the notifier's
    /// handle); bare metal replaces the handles with physical descriptors.
    fn prepare_channel(
        &mut self,
        params: &mut NV_CHANNEL_ALLOC_PARAMS,
        ring: &Self::Memory,
        userd_offset: u64,
        notifier: &Self::Memory,
    ) -> Result<(), BackendError> {
        let _ = (params, ring, userd_offset, notifier);
        Ok(())
    }

    /// Called after a channel, its engine object and its work-submit token exist, before the
    /// channel group is scheduled (kernel driver: `UVM_REGISTER_CHANNEL`, which maps the
    /// channel's context buffers into a UVM-owned VA space).
    fn channel_created(&mut self, channel: Handle) -> Result<(), BackendError> {
        let _ = channel;
        Ok(())
    }

    /// Called when the device closes (or a failed open gives up), before the device object is
    /// freed. The device layer passes user buffers, modules and local memory to
    /// [`Backend::free_memory`] first; the memory it uses internally (rings, notifiers, command
    /// memory, staging, semaphores) is not: release it here if freeing the RM device object
    /// does not (bare metal: return it to the allocator and unmap it).
    fn detach(&mut self) {}

    /// Asynchronous RM events since the last call (RC, MMU faults). Backends without an event
    /// stream return nothing; the device layer also reads the channels' error notifiers.
    fn poll_events(&mut self) -> Option<RmEvent> {
        None
    }

    /// Video memory as `(free, total)` bytes, where the backend keeps count (bare metal: its
    /// VRAM allocator); `None` elsewhere. For `cuMemGetInfo`-style queries.
    fn memory_info(&self) -> Option<(u64, u64)> {
        None
    }

    /// Makes the peer's video memory reachable from this GPU (kernel driver:
    /// `UVM_ENABLE_PEER_ACCESS` for PCIe peers, nothing for NVLink peers, which UVM enables at
    /// registration; bare metal: a BAR1 or NVLink path; simulator: a peer port). The device
    /// layer calls it in both directions ([`Device::enable_peer_access`]), so it must succeed
    /// when access is already enabled. When there is no direct path it fails with
    /// [`BackendError::PeerUnsupported`], saying why; it never falls back to host memory.
    ///
    /// [`Device::enable_peer_access`]: super::Device::enable_peer_access
    fn enable_peer(&mut self, peer: &Self) -> Result<PeerPathInfo, BackendError> {
        let _ = peer;
        Err(BackendError::PeerUnsupported {
            reason: alloc::format!("the {} backend has no peer support", self.describe()),
        })
    }

    /// Maps `mem`, an allocation of `peer`, into this device's VA space below 2^40. Video
    /// memory needs [`Backend::enable_peer`] first; host memory of the peer does not (it is
    /// system memory both GPUs reach). Freed with [`Backend::unmap_peer_memory`] before `mem`
    /// is freed by its owner.
    fn map_peer_memory(
        &mut self,
        peer: &Self,
        mem: &Self::Memory,
    ) -> Result<PeerMapping, BackendError> {
        let _ = (peer, mem);
        Err(BackendError::PeerUnsupported {
            reason: alloc::format!("the {} backend cannot map a peer's memory", self.describe()),
        })
    }

    /// Removes a mapping made by [`Backend::map_peer_memory`] (the device layer has waited for
    /// every use of it).
    fn unmap_peer_memory(&mut self, mapping: PeerMapping) -> Result<(), BackendError> {
        let _ = mapping;
        Err(BackendError::PeerUnsupported {
            reason: alloc::format!("the {} backend has no peer mappings", self.describe()),
        })
    }
}
