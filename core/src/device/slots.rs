//! Memory slots (user buffers and module images, by slot and generation), module loads and
//! the local-memory buffer kernels run with.

use alloc::vec::Vec;

use super::backend::{Backend, GpuMemory, Location, MemoryRequest, Purpose};
use super::error::DeviceError;
use super::ops::{Inner, Slot};
use super::program::Program;
use super::{DeviceInfo, DeviceOptions};
use crate::channel::gpfifo::GP_ADDRESS_LIMIT;
use crate::channel::launch::{self, SlmGeometry};
use crate::kernel::Kernel;

/// Alignment of program images (QMD program and constant-bank addresses need 256).
const IMAGE_ALIGN: u64 = 256;

/// Memory from the backend, checked to be as large as asked and below the GP address limit.
pub(super) fn alloc_mem<B: Backend>(
    backend: &mut B,
    size: u64,
    location: Location,
    cpu_access: bool,
    purpose: Purpose,
) -> Result<B::Memory, DeviceError> {
    let req = MemoryRequest {
        size,
        location,
        cpu_access,
        align: 4096,
        purpose,
    };
    let m = backend.alloc_memory(&req)?;
    let end = m.gpu_va().checked_add(m.size());
    if m.size() < size || end.is_none_or(|e| e > GP_ADDRESS_LIMIT) {
        let (va, got) = (m.gpu_va(), m.size());
        let _ = backend.free_memory(m);
        return Err(DeviceError::BadRange(alloc::format!(
            "the backend returned {got} bytes at GPU VA {va:#x} for a {size}-byte request; \
             device memory must lie below 2^40 (a backend bug)"
        )));
    }
    Ok(m)
}

impl<B: Backend> Inner<B> {
    pub(super) fn alloc_slot(
        &mut self,
        size: u64,
        location: Location,
        purpose: Purpose,
    ) -> Result<(usize, u32, u64), DeviceError> {
        self.check_alive()?;
        let mem = alloc_mem(
            &mut self.backend,
            size,
            location,
            location == Location::Host,
            purpose,
        )?;
        let va = mem.gpu_va();
        let i = match self.slots.iter().position(|s| s.mem.is_none()) {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    mem: None,
                    kernels: Vec::new(),
                });
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[i];
        s.generation = s.generation.wrapping_add(1);
        s.mem = Some(mem);
        s.kernels.clear();
        Ok((i, s.generation, va))
    }

    pub(super) fn release_slot(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        slot: usize,
        generation: u32,
    ) {
        let live = self
            .slots
            .get(slot)
            .is_some_and(|s| s.generation == generation && s.mem.is_some());
        if !live {
            return;
        }
        // The GPU may still use it: finish everything first.
        if self.dead.is_none()
            && let Err(e) = self.synchronize(info, opts)
        {
            log::warn!("freeing device memory after a failed wait: {e}");
        }
        if self.last_kernel.is_some_and(|(s, _)| s == slot) {
            self.last_kernel = None;
        }
        if let Some(m) = self.slots.get_mut(slot).and_then(|s| s.mem.take())
            && let Err(e) = self.backend.free_memory(m)
        {
            log::warn!("freeing device memory failed: {e}");
        }
    }

    pub(super) fn slot_va(&self, slot: usize, generation: u32) -> Result<(u64, u64), DeviceError> {
        match self.slots.get(slot) {
            Some(s) if s.generation == generation => s
                .mem
                .as_ref()
                .map(|m| (m.gpu_va(), m.size()))
                .ok_or(DeviceError::ForeignObject("buffer")),
            _ => Err(DeviceError::ForeignObject("buffer")),
        }
    }

    /// The memory of a live slot.
    pub(super) fn slot_mem(&self, slot: usize, generation: u32) -> Result<&B::Memory, DeviceError> {
        match self.slots.get(slot) {
            Some(s) if s.generation == generation => {
                s.mem.as_ref().ok_or(DeviceError::ForeignObject("buffer"))
            }
            _ => Err(DeviceError::ForeignObject("buffer")),
        }
    }

    pub(super) fn buffer_va(
        &self,
        slot: usize,
        generation: u32,
    ) -> Result<(u64, u64), DeviceError> {
        self.slot_va(slot, generation)
    }

    // ------------------------------------------------------------------------------------------
    // Programs.

    pub(super) fn load_module<P: Program + ?Sized>(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        program: &P,
    ) -> Result<(usize, u32, u64, Vec<Kernel>), DeviceError> {
        self.check_alive()?;
        let sm = program.sm();
        if sm / 10 != info.sm / 10 || sm % 10 > info.sm % 10 {
            return Err(DeviceError::WrongSm {
                cubin: sm,
                device: info.sm,
            });
        }
        let size = program.image_size().max(IMAGE_ALIGN);
        let (slot, generation, base) = self.alloc_slot(size, Location::Device, Purpose::Program)?;
        let r = (|| {
            let image = program.image(base)?;
            if image.len() as u64 > size {
                return Err(DeviceError::Program(alloc::format!(
                    "the image is {} bytes, more than the {size} the program said",
                    image.len()
                )));
            }
            self.htod(info, opts, base, &image)?;
            // Any stream may launch it next: the code must be in place before that.
            let ci = self.copy_ci();
            self.wait_channel(info, opts, ci)?;
            Ok::<(), DeviceError>(())
        })();
        if let Err(e) = r {
            self.release_slot(info, opts, slot, generation);
            return Err(e);
        }
        let kernels = program.kernels();
        if let Some(s) = self.slots.get_mut(slot) {
            s.kernels = kernels.iter().map(|k| k.name.clone()).collect();
        }
        for c in &mut self.chans {
            c.caches_dirty = true;
        }
        Ok((slot, generation, base, kernels))
    }

    /// Makes sure the local-memory buffer holds `per_thread` bytes per thread.
    pub(super) fn ensure_local_memory(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        per_thread: u32,
    ) -> Result<(), DeviceError> {
        if self.local.as_ref().is_some_and(|l| l.2 >= per_thread) {
            return Ok(());
        }
        let g = SlmGeometry {
            max_warps_per_sm: info.gr.max_warps_per_sm,
            sms_per_tpc: info.gr.sm_per_tpc,
            tpcs_per_gpc: info.gr.tpc_per_gpc,
            gpcs: info.gr.gpcs,
        };
        let size = launch::slm_size(per_thread, &g)?;
        self.synchronize(info, opts)?;
        if let Some((old, _, _)) = self.local.take() {
            self.backend.free_memory(old)?;
        }
        let mem = alloc_mem(
            &mut self.backend,
            size.total.max(4096),
            Location::Device,
            false,
            Purpose::LocalMemory,
        )?;
        let va = mem.gpu_va();
        self.local = Some((mem, size.bytes_per_tpc, size.per_thread));
        let sm_count = info.gr.sm_count();
        // Every stream's compute channel launches with it.
        for ci in (0..self.chans.len()).step_by(2) {
            let v = self.submit(info, opts, ci, 0, |pb, _, _| {
                pb.set_local_memory(va, size.bytes_per_tpc, sm_count)?;
                Ok(false)
            })?;
            self.wait(info, opts, ci, v, "local memory setup")?;
        }
        Ok(())
    }
}
