//! [`KernelMemory`]: one allocation of the kernel-driver backend, and the CPU access to it.

use nvbare_core::device::{GpuMemory, Location};
use nvbare_core::hal::{HalError, check_range};
use nvbare_core::rm::Handle;

use super::super::memory::{CpuMapping, DmaMapping, HostMemory};

/// What gives the CPU access to an allocation.
#[derive(Debug)]
pub(super) enum HostBacking {
    /// Our own pages, registered with RM as an OS descriptor.
    Pages(HostMemory),
    /// An RM mapping: `NV01_MEMORY_SYSTEM` through a control file, or video memory through
    /// BAR1 (write-combined).
    Mapped(CpuMapping),
}

impl HostBacking {
    pub(super) fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let off = usize::try_from(offset).map_err(|_| HalError::OutOfRange {
            offset,
            len: dst.len() as u64,
            limit: self.len() as u64,
        })?;
        match self {
            HostBacking::Pages(h) => h.read(off, dst),
            HostBacking::Mapped(m) => m.read(off, dst),
        }
    }

    pub(super) fn write(&self, offset: u64, src: &[u8]) -> Result<(), HalError> {
        let off = usize::try_from(offset).map_err(|_| HalError::OutOfRange {
            offset,
            len: src.len() as u64,
            limit: self.len() as u64,
        })?;
        match self {
            HostBacking::Pages(h) => h.write(off, src),
            HostBacking::Mapped(m) => m.write(off, src),
        }
    }

    /// Where the CPU reaches the memory: our pages, or RM's CPU mapping of its system memory.
    pub(super) fn cpu_ptr(&self) -> core::ptr::NonNull<u8> {
        match self {
            HostBacking::Pages(h) => h.as_ptr(),
            HostBacking::Mapped(m) => m.as_ptr(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            HostBacking::Pages(h) => h.len(),
            HostBacking::Mapped(m) => m.len(),
        }
    }
}

/// How an allocation is mapped into the GPU VA space.
#[derive(Debug, Clone, Copy)]
pub(super) enum GpuMap {
    /// `NV_ESC_RM_MAP_MEMORY_DMA` into the window object.
    Rm(DmaMapping),
    /// A UVM external range at this VA (allocated from the backend's window).
    Uvm,
}

/// One allocation: an RM memory object mapped at a GPU VA, with CPU access for host memory.
#[derive(Debug)]
pub struct KernelMemory {
    pub(super) handle: Handle,
    pub(super) va: u64,
    pub(super) size: u64,
    pub(super) location: Location,
    pub(super) map: GpuMap,
    // Our own pages are dropped after the RM object is freed (RM pinned them for the OS
    // descriptor); an RM CPU mapping is dropped before its object.
    pub(super) host: Option<HostBacking>,
}

impl GpuMemory for KernelMemory {
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

    fn cpu_ptr(&self) -> Option<core::ptr::NonNull<u8>> {
        // Video memory's CPU mapping is BAR1, write-combined: not memory to hand out.
        match (&self.host, self.location) {
            (Some(h), Location::Host) => Some(h.cpu_ptr()),
            _ => None,
        }
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset, dst.len() as u64, self.size)?;
        match &self.host {
            Some(h) => h.read(offset, dst),
            None => Err(HalError::Unsupported(
                "CPU access to video memory (the device layer copies it with the copy engine)",
            )),
        }
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<(), HalError> {
        check_range(offset, src.len() as u64, self.size)?;
        match &self.host {
            Some(h) => h.write(offset, src),
            None => Err(HalError::Unsupported(
                "CPU access to video memory (the device layer copies it with the copy engine)",
            )),
        }
    }
}
