//! The usermode register block (doorbell) through nvidia.ko: an RM usermode object
//! (`HOPPER_USERMODE_A` etc., a child of the subdevice) mapped into this process with
//! `NV_ESC_RM_MAP_MEMORY` + mmap. Its registers sit at the offsets of
//! [`nvbare_core::regs::usermode::MappedUsermode`]: `NVC361_NOTIFY_CHANNEL_PENDING` at 0x90,
//! `NVC361_TIME_0/1` at 0x80/0x84. Allocated without params, the object maps the BAR0 VF page
//! (`usrmodeConstruct_IMPL`, `src/nvidia/src/kernel/gpu/fifo/usermode_api.c`).

use std::sync::Arc;

use nvbare_core::hal::Mmio;
use nvbare_core::regs::usermode::USERMODE_BLOCK_SIZE;
use nvbare_core::rm::{Handle, Rm};

use super::abi::NVOS33_FLAGS_ACCESS_READ_WRITE;
use super::driver::GpuNode;
use super::error::KmodError;
use super::memory::CpuMapping;
use super::rm::{Client, KernelRm};

/// A mapped usermode block; an [`Mmio`] window of 64 KiB. Unmaps and frees its RM object on
/// drop.
#[derive(Debug)]
pub struct UsermodeWindow {
    map: Option<CpuMapping>,
    object: Handle,
    client: Arc<Client>,
}

impl UsermodeWindow {
    /// The RM usermode object.
    pub fn object(&self) -> Handle {
        self.object
    }
}

impl Mmio for UsermodeWindow {
    fn size(&self) -> usize {
        self.map.as_ref().map_or(0, CpuMapping::len)
    }

    fn read32(&self, offset: usize) -> u32 {
        self.map
            .as_ref()
            .and_then(|m| m.read32(offset).ok())
            .unwrap_or(0xffff_ffff)
    }

    fn write32(&self, offset: usize, value: u32) {
        if let Some(m) = &self.map {
            let _ = m.write32(offset, value);
        }
    }

    /// `sfence` on x86-64: the rings and command memory are write-combined BAR1 mappings (or
    /// cached host memory, which x86-TSO keeps in order), and a store fence is what orders
    /// write-combined stores before the `GPPut` store and that before the uncached doorbell.
    fn store_barrier(&self) {
        use std::sync::atomic::{Ordering, compiler_fence};
        compiler_fence(Ordering::SeqCst);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `sfence` takes no operands and has no preconditions; SSE is part of x86-64.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(Ordering::SeqCst);
        compiler_fence(Ordering::SeqCst);
    }
}

impl Drop for UsermodeWindow {
    fn drop(&mut self) {
        // Unmap before freeing the object the mapping belongs to.
        drop(self.map.take());
        if let Err(e) = self.client.free(self.object) {
            log::debug!("freeing usermode object {}: {e}", self.object);
        }
    }
}

impl KernelRm {
    /// Allocates usermode class `class` under `subdevice` and maps its register block.
    pub fn map_usermode(
        &mut self,
        gpu: &GpuNode,
        subdevice: Handle,
        class: u32,
    ) -> Result<UsermodeWindow, KmodError> {
        let object = self.alloc(subdevice, class, &mut [])?;
        let map = match self.map_cpu(
            gpu,
            subdevice,
            object,
            0,
            USERMODE_BLOCK_SIZE as u64,
            NVOS33_FLAGS_ACCESS_READ_WRITE,
            None,
        ) {
            Ok(m) => m,
            Err(e) => {
                let _ = self.free(object);
                return Err(e);
            }
        };
        Ok(UsermodeWindow {
            map: Some(map),
            object,
            client: self.client.clone(),
        })
    }
}
