//! Memory through nvidia.ko: RM memory objects (video memory, system memory, registered host
//! pages), their CPU mappings, GPU DMA mappings, and CPU address-space reservations.
//!
//! CPU mappings of GPU-visible memory are never exposed as Rust references: the GPU may change
//! them at any time. [`CpuMapping`] and [`HostMemory`] copy in and out with volatile accesses,
//! like [`nvbare_core::hal::DmaBuffer`].
//!
//! A CPU mapping of an RM memory object is two steps (`escape.c` `NV_ESC_RM_MAP_MEMORY`,
//! `kernel-open/nvidia/nv-mmap.c`): `NV_ESC_RM_MAP_MEMORY` on the control file names a
//! `/dev/nvidiaN` file, on which RM records an mmap context; then `mmap` of that file at offset
//! 0 and exactly the mapped length. The context lives in the open file, so every mapping gets
//! its own freshly opened and registered `/dev/nvidiaN` file.

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::dma::pages::volatile_copy;
use nvbare_core::hal::{HalError, check_range};
use nvbare_core::rm::{Handle, Rm, RmError, RmStatus, class};
use rustix::mm::{MapFlags, ProtFlags};
use zerocopy::IntoBytes;

use super::abi::{
    NV_ESC_RM_ALLOC_MEMORY, NV_ESC_RM_MAP_MEMORY, NV_ESC_RM_MAP_MEMORY_DMA, NV_ESC_RM_UNMAP_MEMORY,
    NV_ESC_RM_UNMAP_MEMORY_DMA, NVOS02_FLAGS_COHERENCY_CACHED, NVOS02_FLAGS_COHERENCY_SHIFT,
    NVOS02_FLAGS_MAPPING_NO_MAP, NVOS02_FLAGS_MAPPING_SHIFT,
    NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS, NVOS02_FLAGS_PHYSICALITY_SHIFT, NVOS02_PARAMETERS,
    NVOS33_PARAMETERS, NVOS34_PARAMETERS, NVOS46_PARAMETERS, NVOS47_PARAMETERS,
    nv_ioctl_nvos02_parameters_with_fd, nv_ioctl_nvos33_parameters_with_fd,
};
use super::driver::GpuNode;
use super::error::KmodError;
use super::ioctl::{nv_escape, nv_escape_plain};
use super::params::*;
use super::rm::{Client, KernelRm};

/// 4 KiB: the CPU page size the adapter assumes (x86-64).
pub const PAGE_SIZE: u64 = 4096;

/// Where an RM memory object lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLocation {
    /// GPU video memory (`NV01_MEMORY_LOCAL_USER`).
    Vidmem,
    /// System memory RM allocates and pins (`NV01_MEMORY_SYSTEM`).
    Sysmem,
}

/// GPU page size of an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPageSize {
    /// 4 KiB.
    Small,
    /// 64 KiB ("big").
    Big,
    /// 2 MiB ("huge").
    Huge,
}

impl GpuPageSize {
    /// Bytes.
    pub fn bytes(self) -> u64 {
        match self {
            GpuPageSize::Small => 4 << 10,
            GpuPageSize::Big => 64 << 10,
            GpuPageSize::Huge => 2 << 20,
        }
    }

    /// The page size tinygrad and CUDA-like allocators pick: 2 MiB pages for buffers of 8 MiB
    /// or more, 4 KiB for CPU-visible or system memory, 64 KiB otherwise.
    pub fn for_buffer(size: u64, location: MemoryLocation, cpu_visible: bool) -> GpuPageSize {
        if location == MemoryLocation::Sysmem {
            GpuPageSize::Small
        } else if size >= 8 << 20 {
            GpuPageSize::Huge
        } else if cpu_visible {
            GpuPageSize::Small
        } else {
            GpuPageSize::Big
        }
    }
}

/// An RM memory allocation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRequest {
    /// Bytes (rounded up to the page size).
    pub size: u64,
    /// Video or system memory.
    pub location: MemoryLocation,
    /// GPU page size.
    pub page_size: GpuPageSize,
    /// Physically contiguous.
    pub contiguous: bool,
}

impl MemoryRequest {
    /// The rounded size of this request.
    pub fn rounded_size(&self) -> Option<u64> {
        let p = self.page_size.bytes();
        self.size.checked_add(p - 1).map(|s| s & !(p - 1))
    }
}

/// Builds `NV_MEMORY_ALLOCATION_PARAMS` for a request (the attributes tinygrad uses on the
/// kernel driver: `tinygrad/runtime/ops_nv.py` NVKIface.alloc).
pub fn memory_alloc_params(
    client: Handle,
    req: &MemoryRequest,
) -> Option<NV_MEMORY_ALLOCATION_PARAMS> {
    let size = req.rounded_size()?;
    if size == 0 {
        return None;
    }
    let huge = req.page_size == GpuPageSize::Huge;
    let physicality = if req.contiguous {
        NVOS32_ATTR_PHYSICALITY_CONTIGUOUS
    } else {
        NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS
    };
    let page = match req.page_size {
        GpuPageSize::Small => NVOS32_ATTR_PAGE_SIZE_4KB,
        GpuPageSize::Big => NVOS32_ATTR_PAGE_SIZE_BIG,
        GpuPageSize::Huge => NVOS32_ATTR_PAGE_SIZE_HUGE,
    };
    let (location, cacheable, r#type, coherency) = match req.location {
        MemoryLocation::Vidmem => (
            NVOS32_ATTR_LOCATION_VIDMEM,
            NVOS32_ATTR2_GPU_CACHEABLE_YES,
            NVOS32_TYPE_IMAGE,
            NVOS32_ATTR_COHERENCY_UNCACHED,
        ),
        MemoryLocation::Sysmem => (
            NVOS32_ATTR_LOCATION_PCI,
            NVOS32_ATTR2_GPU_CACHEABLE_NO,
            NVOS32_TYPE_NOTIFIER,
            NVOS32_ATTR_COHERENCY_CACHED,
        ),
    };
    let attr = (physicality << NVOS32_ATTR_PHYSICALITY_SHIFT)
        | (page << NVOS32_ATTR_PAGE_SIZE_SHIFT)
        | (location << NVOS32_ATTR_LOCATION_SHIFT)
        | (coherency << NVOS32_ATTR_COHERENCY_SHIFT);
    let attr2 = NVOS32_ATTR2_ZBC_PREFER_NO_ZBC
        | (cacheable << NVOS32_ATTR2_GPU_CACHEABLE_SHIFT)
        | if huge {
            NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB << NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT
        } else {
            0
        };
    let mut flags = NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED
        | NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED
        | NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE
        | NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT;
    if huge {
        flags |= NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM;
    }
    Some(NV_MEMORY_ALLOCATION_PARAMS {
        owner: client.0,
        r#type,
        flags,
        attr,
        attr2,
        // NV_MMU_PTE_KIND_GENERIC_MEMORY-style pitch format tinygrad passes.
        format: 6,
        size,
        alignment: req.page_size.bytes(),
        limit: size - 1,
        ..Default::default()
    })
}

fn rm_call_error(op: &'static str, object: Handle, status: u32) -> KmodError {
    KmodError::RmCall {
        op,
        object,
        status: RmStatus(status),
    }
}

/// A range of CPU address space with nothing mapped in it (`PROT_NONE`), for placing mappings
/// at chosen addresses and for UVM external ranges (GPU VA = CPU VA, as tinygrad does).
///
/// Clones share the range; it is unmapped when the last clone and the last [`CpuMapping`]
/// placed in it are gone.
#[derive(Debug, Clone)]
pub struct VaReservation {
    inner: Arc<Reserved>,
}

#[derive(Debug)]
struct Reserved {
    base: NonNull<c_void>,
    len: usize,
}

// SAFETY: the reservation is a plain address range; nothing is accessed through it.
unsafe impl Send for Reserved {}
// SAFETY: as above; shared access only reads the addresses.
unsafe impl Sync for Reserved {}

impl Drop for Reserved {
    fn drop(&mut self) {
        // SAFETY: the range is ours, and nothing placed in it outlives this (mappings placed
        // in it hold an `Arc<Reserved>` and restore PROT_NONE before letting go).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr(), self.len) };
    }
}

impl VaReservation {
    /// Reserves `len` bytes aligned to `align` (a power of two, at least 4 KiB) anywhere.
    pub fn new(len: u64, align: u64) -> Result<VaReservation, KmodError> {
        if len == 0
            || !len.is_multiple_of(PAGE_SIZE)
            || !align.is_power_of_two()
            || align < PAGE_SIZE
        {
            return Err(KmodError::Invalid(format!(
                "VA reservation of {len:#x} bytes aligned to {align:#x}: need page multiples"
            )));
        }
        let total = len
            .checked_add(align - PAGE_SIZE)
            .and_then(|t| usize::try_from(t).ok())
            .ok_or_else(|| KmodError::Invalid(format!("VA reservation of {len:#x} bytes")))?;
        let len = len as usize;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel picks touches
        // no existing memory.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                total,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|errno| KmodError::Os {
            op: "reserving CPU address space (mmap PROT_NONE)",
            errno,
        })?;
        let start = p as usize;
        let aligned = (start + (align as usize - 1)) & !(align as usize - 1);
        // Give back the slack before and after the aligned range.
        if aligned > start {
            // SAFETY: [start, aligned) is part of the mapping just made and holds nothing.
            let _ = unsafe { rustix::mm::munmap(p, aligned - start) };
        }
        let end = aligned + len;
        if start + total > end {
            // SAFETY: [end, start + total) is the unused tail of the same mapping.
            let _ = unsafe { rustix::mm::munmap(end as *mut c_void, start + total - end) };
        }
        let base = NonNull::new(aligned as *mut c_void).ok_or(KmodError::Os {
            op: "reserving CPU address space",
            errno: rustix::io::Errno::NOMEM,
        })?;
        Ok(VaReservation {
            inner: Arc::new(Reserved { base, len }),
        })
    }

    /// Reserves exactly `[addr, addr + len)` (page multiples), failing if anything is mapped
    /// there already (`MAP_FIXED_NOREPLACE`: nothing of the process is replaced).
    pub fn at(addr: u64, len: u64) -> Result<VaReservation, KmodError> {
        let bad = || KmodError::Invalid(format!("VA reservation of {len:#x} bytes at {addr:#x}"));
        if len == 0 || !len.is_multiple_of(PAGE_SIZE) || !addr.is_multiple_of(PAGE_SIZE) {
            return Err(bad());
        }
        let n = usize::try_from(len).map_err(|_| bad())?;
        let hint = usize::try_from(addr).map_err(|_| bad())?;
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the new mapping is
        // anonymous and PROT_NONE.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                hint as *mut c_void,
                n,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED_NOREPLACE,
            )
        }
        .map_err(|errno| KmodError::Os {
            op: "reserving CPU address space at a fixed address (mmap PROT_NONE)",
            errno,
        })?;
        if p as usize != hint {
            // Kernels before 4.17 treat the flag as a hint.
            // SAFETY: the mapping was just made by us and holds nothing.
            let _ = unsafe { rustix::mm::munmap(p, n) };
            return Err(KmodError::Os {
                op: "reserving CPU address space at a fixed address",
                errno: rustix::io::Errno::EXIST,
            });
        }
        let base = NonNull::new(p).ok_or_else(bad)?;
        Ok(VaReservation {
            inner: Arc::new(Reserved { base, len: n }),
        })
    }

    /// First address.
    pub fn base(&self) -> u64 {
        self.inner.base.as_ptr() as u64
    }

    /// Bytes.
    pub fn len(&self) -> u64 {
        self.inner.len as u64
    }

    /// Whether the reservation is empty (never: [`VaReservation::new`] refuses zero).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Whether `[addr, addr + len)` lies inside.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.base()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base() + self.len())
    }
}

/// What to do with a mapping's address range when it goes away.
#[derive(Debug)]
enum Placement {
    /// The kernel picked the address: munmap.
    Anywhere,
    /// Placed inside a reservation: put PROT_NONE back so the hole is not reused, and keep the
    /// reservation alive until then.
    Reserved {
        /// Held only to keep the range reserved.
        _keep: Arc<Reserved>,
    },
}

/// A CPU mapping of an RM memory object (video memory through BAR1, system memory, or a
/// register window). Accessed only through volatile copies; unmapped on drop.
#[derive(Debug)]
pub struct CpuMapping {
    ptr: NonNull<u8>,
    len: usize,
    placement: Placement,
    device: Handle,
    memory: Handle,
    linear: u64,
    client: Arc<Client>,
    _file: OwnedFd,
}

// SAFETY: the mapping is process-wide memory reached only through volatile copies taking
// `&self`; no Rust reference into it exists, so moving or sharing the handle across threads
// creates no aliasing (concurrent writers race like the GPU does, at the hardware level).
unsafe impl Send for CpuMapping {}
// SAFETY: as above.
unsafe impl Sync for CpuMapping {}

impl CpuMapping {
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The CPU virtual address of byte 0.
    pub fn cpu_addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The CPU pointer to byte 0 (never turn it into a reference: the GPU may write the
    /// memory at any time).
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The RM memory object mapped.
    pub fn memory(&self) -> Handle {
        self.memory
    }

    /// Copies `dst.len()` bytes at `offset` out of the mapping.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        // SAFETY: the range was checked against the live mapping of `len` bytes.
        unsafe { volatile_copy::read(self.ptr.as_ptr().add(offset), dst) };
        Ok(())
    }

    /// Copies `src` into the mapping at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        // SAFETY: the range was checked against the live, writable mapping.
        unsafe { volatile_copy::write(self.ptr.as_ptr().add(offset), src) };
        Ok(())
    }

    /// Reads an aligned 32-bit word with one volatile load (for registers).
    pub fn read32(&self, offset: usize) -> Result<u32, HalError> {
        nvbare_core::hal::check_mmio(offset, self.len)?;
        // SAFETY: in range and 4-byte aligned (checked; the mapping is page-aligned).
        Ok(unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().read_volatile() })
    }

    /// Writes an aligned 32-bit word with one volatile store (for registers).
    pub fn write32(&self, offset: usize, value: u32) -> Result<(), HalError> {
        nvbare_core::hal::check_mmio(offset, self.len)?;
        // SAFETY: in range and 4-byte aligned (checked).
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset)
                .cast::<u32>()
                .write_volatile(value)
        };
        Ok(())
    }
}

impl Drop for CpuMapping {
    fn drop(&mut self) {
        let p = self.ptr.as_ptr().cast::<c_void>();
        // SAFETY: we own this mapping of `len` bytes and no reference into it exists.
        let r = unsafe {
            match self.placement {
                Placement::Anywhere => rustix::mm::munmap(p, self.len),
                Placement::Reserved { .. } => rustix::mm::mmap_anonymous(
                    p,
                    self.len,
                    ProtFlags::empty(),
                    MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED,
                )
                .map(|_| ()),
            }
        };
        if let Err(e) = r {
            log::warn!("unmapping CPU mapping at {p:p}: {e}");
        }
        let mut u = NVOS34_PARAMETERS {
            hClient: self.client.handle,
            hDevice: self.device.0,
            hMemory: self.memory.0,
            pLinearAddress: self.linear,
            ..Default::default()
        };
        match nv_escape_plain(self.client.ctl.as_fd(), NV_ESC_RM_UNMAP_MEMORY, &mut u) {
            Ok(()) if u.status == 0 => {}
            Ok(()) => log::debug!("NV_ESC_RM_UNMAP_MEMORY: {}", RmStatus(u.status)),
            Err(e) => log::debug!("NV_ESC_RM_UNMAP_MEMORY: {e}"),
        }
    }
}

/// Page-aligned host memory owned by this process, for registering with RM as an OS
/// descriptor (pinned host memory the GPU can reach, like `cuMemHostRegister`). Accessed only
/// through volatile copies; unmapped on drop.
#[derive(Debug)]
pub struct HostMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: see `CpuMapping`.
unsafe impl Send for HostMemory {}
// SAFETY: see `CpuMapping`.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Maps `len` bytes (rounded up to 4 KiB) of zeroed, populated anonymous memory.
    pub fn new(len: u64) -> Result<HostMemory, KmodError> {
        let len = len
            .checked_add(PAGE_SIZE - 1)
            .map(|l| l & !(PAGE_SIZE - 1))
            .filter(|&l| l > 0)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| KmodError::Invalid(format!("host memory of {len} bytes")))?;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
            )
        }
        .map_err(|errno| KmodError::Os {
            op: "allocating host memory (mmap)",
            errno,
        })?;
        Ok(HostMemory {
            ptr: NonNull::new(p.cast()).ok_or(KmodError::Os {
                op: "allocating host memory",
                errno: rustix::io::Errno::NOMEM,
            })?,
            len,
        })
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// CPU address of byte 0.
    pub fn cpu_addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The CPU pointer to byte 0 (never turn it into a reference: the GPU may write the
    /// memory at any time).
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Copies out of the buffer.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        // SAFETY: checked range of our live mapping.
        unsafe { volatile_copy::read(self.ptr.as_ptr().add(offset), dst) };
        Ok(())
    }

    /// Copies into the buffer.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        // SAFETY: checked range of our live, writable mapping.
        unsafe { volatile_copy::write(self.ptr.as_ptr().add(offset), src) };
        Ok(())
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: our mapping; no reference into it exists. If RM still holds an OS
        // descriptor of these pages, it pinned them (os_lock_user_pages), so the kernel keeps
        // them alive until that object is freed.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A GPU virtual address range RM mapped with `NV_ESC_RM_MAP_MEMORY_DMA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaMapping {
    /// The GPU VA of the mapping (RM's `dmaOffset`).
    pub gpu_va: u64,
    /// Bytes.
    pub length: u64,
}

impl KernelRm {
    /// Allocates video or system memory under `device` (`NV01_MEMORY_LOCAL_USER` /
    /// `NV01_MEMORY_SYSTEM`).
    pub fn alloc_memory(
        &mut self,
        device: Handle,
        req: &MemoryRequest,
    ) -> Result<Handle, KmodError> {
        let client = self.client();
        let mut p = memory_alloc_params(client, req).ok_or_else(|| {
            KmodError::Invalid(format!("memory request of {:#x} bytes", req.size))
        })?;
        let cls = match req.location {
            MemoryLocation::Vidmem => class::NV01_MEMORY_LOCAL_USER,
            MemoryLocation::Sysmem => class::NV01_MEMORY_SYSTEM,
        };
        Ok(self.alloc(device, cls, p.as_mut_bytes())?)
    }

    /// Registers `host` as an RM memory object under `device` (`NV01_MEMORY_SYSTEM_OS_DESCRIPTOR`
    /// through `NV_ESC_RM_ALLOC_MEMORY` on the GPU's node). RM pins the pages. Free the object
    /// (with [`Rm::free`]) before dropping `host`.
    pub fn register_host_memory(
        &mut self,
        gpu: &GpuNode,
        device: Handle,
        host: &HostMemory,
    ) -> Result<Handle, KmodError> {
        let h = self.client.alloc_handle();
        let mut p = nv_ioctl_nvos02_parameters_with_fd {
            params: NVOS02_PARAMETERS {
                hRoot: self.client.handle,
                hObjectParent: device.0,
                hObjectNew: h,
                hClass: class::NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                flags: (NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS << NVOS02_FLAGS_PHYSICALITY_SHIFT)
                    | (NVOS02_FLAGS_COHERENCY_CACHED << NVOS02_FLAGS_COHERENCY_SHIFT)
                    | (NVOS02_FLAGS_MAPPING_NO_MAP << NVOS02_FLAGS_MAPPING_SHIFT),
                pMemory: host.cpu_addr(),
                limit: host.len() as u64 - 1,
                ..Default::default()
            },
            fd: -1,
            _pad0: 0,
        };
        // SAFETY: pMemory/limit describe `host`, a live anonymous mapping of `len` bytes that
        // RM pins (get_user_pages); the pins keep the pages alive even if `host` is dropped
        // before the object is freed.
        unsafe { nv_escape(gpu.as_fd(), NV_ESC_RM_ALLOC_MEMORY, &mut p) }.map_err(|errno| {
            KmodError::Ioctl {
                op: "NV_ESC_RM_ALLOC_MEMORY",
                path: gpu.path(),
                errno,
            }
        })?;
        if p.params.status != 0 {
            return Err(RmError::Status {
                op: nvbare_core::rm::RmOp::Alloc {
                    parent: device,
                    class: class::NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                },
                status: RmStatus(p.params.status),
            }
            .into());
        }
        self.client.record(p.params.hObjectNew, device.0);
        Ok(Handle(p.params.hObjectNew))
    }

    /// Maps `length` bytes at `offset` of `memory` into this process (`NV_ESC_RM_MAP_MEMORY`,
    /// then mmap). `device` is the device or subdevice the object belongs to; `flags` are
    /// `NVOS33_FLAGS_*`. With `at = Some((reservation, addr))`, the mapping is placed at `addr`,
    /// which must lie in `reservation` (so GPU VA and CPU VA can be equal).
    ///
    /// This is for objects RM maps through a GPU BAR: video memory (BAR1) and register windows
    /// such as the usermode block (BAR0). System memory needs [`KernelRm::map_cpu_system`].
    #[allow(clippy::too_many_arguments)]
    pub fn map_cpu(
        &mut self,
        gpu: &GpuNode,
        device: Handle,
        memory: Handle,
        offset: u64,
        length: u64,
        flags: u32,
        at: Option<(&VaReservation, u64)>,
    ) -> Result<CpuMapping, KmodError> {
        let file = gpu.open_another()?;
        self.map_cpu_on(file, device, memory, offset, length, flags, at)
    }

    /// [`KernelRm::map_cpu`] for system memory (`NV01_MEMORY_SYSTEM`).
    ///
    /// RM records the mmap context of a system-memory mapping on the *control* device: when the
    /// address is in none of the GPU's BARs, `RmCreateMmapContextLocked`
    /// (`src/nvidia/arch/nvalloc/unix/src/osapi.c`) switches to `nv_get_ctl_state()`, and
    /// `nv_add_mapping_context_to_file` (`kernel-open/nvidia/nv-usermap.c`) then accepts only
    /// an fd of `/dev/nvidiactl` (`nv_get_file_private(fd, ctl = true)`), answering
    /// `NV_ERR_INVALID_ARGUMENT` for a `/dev/nvidiaN` fd. So the mapping gets a freshly opened
    /// control file, which `nvidia_mmap_helper` (`kernel-open/nvidia/nv-mmap.c`) maps from the
    /// allocation's page list.
    #[allow(clippy::too_many_arguments)]
    pub fn map_cpu_system(
        &mut self,
        device: Handle,
        memory: Handle,
        offset: u64,
        length: u64,
        flags: u32,
        at: Option<(&VaReservation, u64)>,
    ) -> Result<CpuMapping, KmodError> {
        let path = self.client.ctl.paths.ctl();
        let file = rustix::fs::open(
            &path,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| super::error::open_error(path, e))?;
        self.map_cpu_on(file, device, memory, offset, length, flags, at)
    }

    #[allow(clippy::too_many_arguments)]
    fn map_cpu_on(
        &mut self,
        file: OwnedFd,
        device: Handle,
        memory: Handle,
        offset: u64,
        length: u64,
        flags: u32,
        at: Option<(&VaReservation, u64)>,
    ) -> Result<CpuMapping, KmodError> {
        let len = usize::try_from(length)
            .ok()
            .filter(|&l| l > 0 && (l as u64).is_multiple_of(PAGE_SIZE))
            .ok_or_else(|| KmodError::Invalid(format!("CPU mapping of {length:#x} bytes")))?;
        if let Some((res, addr)) = at
            && (!res.contains(addr, length) || !addr.is_multiple_of(PAGE_SIZE))
        {
            return Err(KmodError::Invalid(format!(
                "CPU mapping at {addr:#x}+{length:#x} is outside the reservation \
                 {:#x}+{:#x}",
                res.base(),
                res.len()
            )));
        }
        let mut p = nv_ioctl_nvos33_parameters_with_fd {
            params: NVOS33_PARAMETERS {
                hClient: self.client.handle,
                hDevice: device.0,
                hMemory: memory.0,
                offset,
                length,
                flags,
                ..Default::default()
            },
            fd: file.as_raw_fd(),
            _pad0: 0,
        };
        nv_escape_plain(self.ctl(), NV_ESC_RM_MAP_MEMORY, &mut p).map_err(|errno| {
            KmodError::Ioctl {
                op: "NV_ESC_RM_MAP_MEMORY",
                path: self.client.ctl.paths.ctl(),
                errno,
            }
        })?;
        if p.params.status != 0 {
            return Err(rm_call_error(
                "NV_ESC_RM_MAP_MEMORY",
                memory,
                p.params.status,
            ));
        }
        let (hint, mflags, placement) = match at {
            Some((res, addr)) => (
                addr as *mut c_void,
                MapFlags::SHARED | MapFlags::FIXED,
                Placement::Reserved {
                    _keep: res.inner.clone(),
                },
            ),
            None => (std::ptr::null_mut(), MapFlags::SHARED, Placement::Anywhere),
        };
        // SAFETY: the fd's mmap context was just created by RM for exactly `len` bytes at file
        // offset 0 (nv-mmap.c requires both); a fixed address lies inside a reservation we own
        // (checked above), so MAP_FIXED replaces only our own PROT_NONE pages.
        let mapped = unsafe {
            rustix::mm::mmap(
                hint,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                mflags,
                file.as_fd(),
                0,
            )
        };
        let mapped = match mapped {
            Ok(m) => m,
            Err(errno) => {
                let mut u = NVOS34_PARAMETERS {
                    hClient: self.client.handle,
                    hDevice: device.0,
                    hMemory: memory.0,
                    pLinearAddress: p.params.pLinearAddress,
                    ..Default::default()
                };
                let _ = nv_escape_plain(self.ctl(), NV_ESC_RM_UNMAP_MEMORY, &mut u);
                return Err(KmodError::Os {
                    op: "mmap of an RM memory mapping",
                    errno,
                });
            }
        };
        Ok(CpuMapping {
            ptr: NonNull::new(mapped.cast()).ok_or(KmodError::Os {
                op: "mmap of an RM memory mapping",
                errno: rustix::io::Errno::NOMEM,
            })?,
            len,
            placement,
            device,
            memory,
            linear: p.params.pLinearAddress,
            client: self.client.clone(),
            _file: file,
        })
    }

    /// Maps `length` bytes at `offset` of `memory` into the GPU VA range of `dma` (an
    /// `NV01_MEMORY_VIRTUAL` object) with `NV_ESC_RM_MAP_MEMORY_DMA` (64-byte r580 NVOS46).
    /// `flags` are `NVOS46_FLAGS_*`; with `DMA_OFFSET_FIXED`, `dma_offset` is the absolute GPU VA.
    #[allow(clippy::too_many_arguments)]
    pub fn map_dma(
        &mut self,
        device: Handle,
        dma: Handle,
        memory: Handle,
        offset: u64,
        length: u64,
        flags: u32,
        dma_offset: u64,
    ) -> Result<DmaMapping, KmodError> {
        let mut p = NVOS46_PARAMETERS {
            hClient: self.client.handle,
            hDevice: device.0,
            hDma: dma.0,
            hMemory: memory.0,
            offset,
            length,
            flags,
            dmaOffset: dma_offset,
            ..Default::default()
        };
        nv_escape_plain(self.ctl(), NV_ESC_RM_MAP_MEMORY_DMA, &mut p).map_err(|errno| {
            KmodError::Ioctl {
                op: "NV_ESC_RM_MAP_MEMORY_DMA",
                path: self.client.ctl.paths.ctl(),
                errno,
            }
        })?;
        if p.status != 0 {
            return Err(rm_call_error("NV_ESC_RM_MAP_MEMORY_DMA", memory, p.status));
        }
        Ok(DmaMapping {
            gpu_va: p.dmaOffset,
            length,
        })
    }

    /// Undoes [`KernelRm::map_dma`] (`NV_ESC_RM_UNMAP_MEMORY_DMA`, 48-byte NVOS47). RM
    /// invalidates the GPU TLB unless asked not to.
    pub fn unmap_dma(
        &mut self,
        device: Handle,
        dma: Handle,
        memory: Handle,
        mapping: DmaMapping,
    ) -> Result<(), KmodError> {
        let mut p = NVOS47_PARAMETERS {
            hClient: self.client.handle,
            hDevice: device.0,
            hDma: dma.0,
            hMemory: memory.0,
            dmaOffset: mapping.gpu_va,
            size: mapping.length,
            ..Default::default()
        };
        nv_escape_plain(self.ctl(), NV_ESC_RM_UNMAP_MEMORY_DMA, &mut p).map_err(|errno| {
            KmodError::Ioctl {
                op: "NV_ESC_RM_UNMAP_MEMORY_DMA",
                path: self.client.ctl.paths.ctl(),
                errno,
            }
        })?;
        if p.status != 0 {
            return Err(rm_call_error(
                "NV_ESC_RM_UNMAP_MEMORY_DMA",
                memory,
                p.status,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_policy() {
        use GpuPageSize::*;
        use MemoryLocation::*;
        assert_eq!(GpuPageSize::for_buffer(1 << 30, Vidmem, false), Huge);
        assert_eq!(GpuPageSize::for_buffer(8 << 20, Vidmem, true), Huge);
        assert_eq!(GpuPageSize::for_buffer(4096, Vidmem, true), Small);
        assert_eq!(GpuPageSize::for_buffer(4096, Vidmem, false), Big);
        assert_eq!(GpuPageSize::for_buffer(1 << 30, Sysmem, false), Small);
    }

    #[test]
    fn vidmem_params() {
        let req = MemoryRequest {
            size: (8 << 20) + 1,
            location: MemoryLocation::Vidmem,
            page_size: GpuPageSize::Huge,
            contiguous: false,
        };
        let p = memory_alloc_params(Handle(0xc1d0_0001), &req).unwrap();
        assert_eq!(p.owner, 0xc1d0_0001);
        assert_eq!(p.size, 10 << 20); // rounded to 2 MiB
        assert_eq!(p.limit, (10 << 20) - 1);
        assert_eq!(p.alignment, 2 << 20);
        assert_eq!(p.r#type, NVOS32_TYPE_IMAGE);
        // ALLOW_NONCONTIGUOUS (3) at 28:27, PAGE_SIZE_HUGE (3) at 24:23, VIDMEM (0) at 26:25.
        assert_eq!(p.attr, (3 << 27) | (3 << 23));
        // PREFER_NO_ZBC 1:0, GPU_CACHEABLE_YES 3:2, PAGE_SIZE_HUGE_2MB 21:20.
        assert_eq!(p.attr2, 1 | (1 << 2) | (1 << 20));
        assert_eq!(p.flags, 0x8000 | 0x4000 | 0x100 | 0x1 | 0x10000);
    }

    #[test]
    fn sysmem_params() {
        let req = MemoryRequest {
            size: 4096,
            location: MemoryLocation::Sysmem,
            page_size: GpuPageSize::Small,
            contiguous: true,
        };
        let p = memory_alloc_params(Handle(1), &req).unwrap();
        assert_eq!(p.r#type, NVOS32_TYPE_NOTIFIER);
        // CONTIGUOUS (2) 28:27, 4KB (1) 24:23, PCI (1) 26:25, COHERENCY_CACHED (1) 31:29.
        assert_eq!(p.attr, (2 << 27) | (1 << 23) | (1 << 25) | (1 << 29));
        assert_eq!(p.attr2, 1 | (2 << 2));
        assert_eq!(p.flags & NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM, 0);
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut req = MemoryRequest {
            size: 0,
            location: MemoryLocation::Vidmem,
            page_size: GpuPageSize::Small,
            contiguous: false,
        };
        assert!(memory_alloc_params(Handle(1), &req).is_none());
        req.size = u64::MAX;
        assert!(memory_alloc_params(Handle(1), &req).is_none());
    }

    #[test]
    fn volatile_copies_round_trip_at_every_alignment() {
        let host = HostMemory::new(100).unwrap();
        assert_eq!(host.len(), 4096);
        let data: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..9 {
            host.write(off, &data).unwrap();
            let mut back = vec![0u8; data.len()];
            host.read(off, &mut back).unwrap();
            assert_eq!(back, data, "offset {off}");
        }
        assert!(host.write(4000, &data).is_err());
        assert!(host.read(4096, &mut [0u8; 1]).is_err());
        let mut one = [0u8; 1];
        host.read(4095, &mut one).unwrap();
    }

    #[test]
    fn fixed_reservations_do_not_replace_mappings() {
        let r = VaReservation::new(8 << 20, 2 << 20).unwrap();
        // Taken already: refused, and the existing reservation is untouched.
        assert!(VaReservation::at(r.base(), 4096).is_err());
        let (base, len) = (r.base(), r.len());
        drop(r);
        // Free again: reserved exactly there.
        let again = VaReservation::at(base, len).unwrap();
        assert_eq!((again.base(), again.len()), (base, len));
        assert!(VaReservation::at(base + 1, 4096).is_err());
        assert!(VaReservation::at(base, 0).is_err());
    }

    #[test]
    fn reservations_are_aligned_and_bounded() {
        let r = VaReservation::new(4 << 20, 2 << 20).unwrap();
        assert_eq!(r.base() % (2 << 20), 0);
        assert_eq!(r.len(), 4 << 20);
        assert!(r.contains(r.base(), 4 << 20));
        assert!(!r.contains(r.base() + 4096, 4 << 20));
        assert!(!r.contains(r.base().wrapping_sub(4096), 4096));
        assert!(VaReservation::new(0, 4096).is_err());
        assert!(VaReservation::new(4096, 3).is_err());
        assert!(VaReservation::new(100, 4096).is_err());
    }
}
