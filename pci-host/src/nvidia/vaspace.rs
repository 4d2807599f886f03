//! [`UvmVaSpace`]: a GPU virtual address space run by UVM, as CUDA sets one up on the kernel
//! driver: an RM `FERMI_VASPACE_A` with `ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED`, handed to
//! UVM, with memory objects mapped at chosen GPU VAs as UVM external ranges.
//!
//! GPU VAs are taken from a [`VaReservation`] of this process's CPU address space, so a GPU VA is
//! never also a CPU address of something else (UVM ranges live in the process's address space)
//! and a CPU mapping of the same memory can sit at the same address (tinygrad's layout).
//!
//! Order, as observed to work on an H200 with 580.159.04 (rm-abi.md §0): the VA space, then
//! `UVM_INITIALIZE`, `UVM_MM_INITIALIZE`, `UVM_REGISTER_GPU`, `UVM_REGISTER_GPU_VASPACE`.
//! Without the two flags UVM refuses the VA space with `NV_ERR_INVALID_FLAGS`.

use nvbare_core::rm::{Handle, Rm, class};
use zerocopy::IntoBytes;

use super::error::KmodError;
use super::gpu::KernelGpu;
use super::memory::VaReservation;
use super::params::{
    NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING,
    NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED, NV_VASPACE_ALLOCATION_PARAMETERS,
};
use super::rm::KernelRm;
use super::uvm::{GpuUuid, Uvm};

/// Lowest GPU VA of the RM VA space (tinygrad's `vaBase`).
pub const VA_SPACE_BASE: u64 = 0x1000;
/// Size of the RM VA space (tinygrad's `vaSize`, just under 2^49).
pub const VA_SPACE_SIZE: u64 = 0x1_ffff_fb00_0000;
// Every user-space address (below 2^47 on x86-64) is a valid GPU VA of this space.
const _: () = assert!(VA_SPACE_BASE + VA_SPACE_SIZE > 1 << 47);

/// Alignment of the GPU VA window (the largest GPU page used, 2 MiB).
pub const VA_WINDOW_ALIGN: u64 = 2 << 20;

/// The `FERMI_VASPACE_A` params UVM accepts.
pub fn uvm_va_space_params() -> NV_VASPACE_ALLOCATION_PARAMETERS {
    NV_VASPACE_ALLOCATION_PARAMETERS {
        flags: NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING
            | NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
        vaBase: VA_SPACE_BASE,
        vaSize: VA_SPACE_SIZE,
        ..Default::default()
    }
}

/// A GPU VA space registered with UVM, and a window of addresses to map memory at.
///
/// Dropping it closes the UVM context, which unmaps every external range and unregisters the GPU
/// and the VA space; the RM VA space object itself belongs to the device and is freed with it.
#[derive(Debug)]
pub struct UvmVaSpace {
    uvm: Uvm,
    uuid: GpuUuid,
    va_space: Handle,
    window: VaReservation,
}

impl UvmVaSpace {
    /// Creates the VA space on `gpu`'s device, registers it with UVM, and reserves a window of
    /// `window_len` bytes (a multiple of 2 MiB) of GPU VA.
    pub fn new(gpu: &mut KernelGpu, window_len: u64) -> Result<UvmVaSpace, KmodError> {
        let window = VaReservation::new(window_len, VA_WINDOW_ALIGN)?;
        let uuid = gpu.uuid()?;
        let device = gpu.device();
        let mut p = uvm_va_space_params();
        let va_space = gpu
            .rm()
            .alloc(device, class::FERMI_VASPACE_A, p.as_mut_bytes())?;
        let registered = Uvm::open(gpu.driver()).and_then(|uvm| {
            uvm.register_gpu(uuid, gpu.rm_ref())?;
            uvm.register_gpu_va_space(uuid, gpu.rm_ref(), va_space)?;
            Ok(uvm)
        });
        match registered {
            Ok(uvm) => Ok(UvmVaSpace {
                uvm,
                uuid,
                va_space,
                window,
            }),
            Err(e) => {
                let _ = gpu.rm().free(va_space);
                Err(e)
            }
        }
    }

    /// The RM VA space object (for `NV_CHANNEL_ALLOC_PARAMS.hVASpace`, context shares, ...).
    pub fn handle(&self) -> Handle {
        self.va_space
    }

    /// The GPU's UUID.
    pub fn uuid(&self) -> GpuUuid {
        self.uuid
    }

    /// The UVM context.
    pub fn uvm(&self) -> &Uvm {
        &self.uvm
    }

    /// The GPU VA window (also reserved in this process's CPU address space).
    pub fn window(&self) -> &VaReservation {
        &self.window
    }

    /// Maps `len` bytes at `offset` of RM memory `memory` at GPU VA `va` (inside the window,
    /// 4 KiB aligned; UVM then requires the allocation's page size alignment).
    pub fn map(
        &self,
        rm: &KernelRm,
        memory: Handle,
        va: u64,
        len: u64,
        offset: u64,
    ) -> Result<(), KmodError> {
        if !self.window.contains(va, len) || !va.is_multiple_of(4096) || !len.is_multiple_of(4096) {
            return Err(KmodError::Invalid(format!(
                "GPU mapping {va:#x}+{len:#x} is not a page-aligned range of the window {:#x}+{:#x}",
                self.window.base(),
                self.window.len()
            )));
        }
        self.uvm.create_external_range(va, len)?;
        if let Err(e) = self
            .uvm
            .map_external_allocation(self.uuid, rm, memory, va, len, offset, false)
        {
            let _ = self.uvm.free(va, len);
            return Err(e);
        }
        Ok(())
    }

    /// Unmaps and forgets the range at `va` (`UVM_FREE`).
    pub fn unmap(&self, va: u64, len: u64) -> Result<(), KmodError> {
        self.uvm.free(va, len)
    }

    /// Registers a channel with UVM; UVM maps the channel's RM-owned buffers in
    /// `[base, base + len)` of the window.
    pub fn register_channel(
        &self,
        rm: &KernelRm,
        channel: Handle,
        base: u64,
        len: u64,
    ) -> Result<(), KmodError> {
        if !self.window.contains(base, len) {
            return Err(KmodError::Invalid(format!(
                "channel range {base:#x}+{len:#x} is outside the window"
            )));
        }
        self.uvm.register_channel(self.uuid, rm, channel, base, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn va_space_params_are_what_uvm_accepts() {
        let p = uvm_va_space_params();
        // 0x48 = ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED (observed to be required).
        assert_eq!(p.flags, 0x48);
        assert_eq!(p.vaBase, 0x1000);
        assert_eq!(p.vaSize, 0x1_ffff_fb00_0000);
        assert_eq!(p.as_bytes().len(), 56);
    }
}
