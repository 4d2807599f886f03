//! Pre-armed launches ([`DeviceOptions::armed_launches`]): while the CPU waits for the GPU
//! anyway, the compute channel gets a submission whose only methods are a host semaphore
//! acquire on a flag in command memory and `SEND_PCAS` of a QMD that is not written yet.
//! The host fetches it and stops at the acquire. The next launch then writes constant bank 0
//! and the QMD into that submission's space and sets the flag: no pushbuffer, no GP entry and
//! no doorbell on the launch path, and the host, already holding the methods, starts the
//! launch as soon as the flag's write reaches video memory.
//!
//! Any other compute-channel submission must not queue behind the acquire, so it first
//! consumes the armed submission with a launch that does nothing (the copy kernel with zero
//! bytes, [`Inner::disarm`]). A launch that needs methods the armed submission lacks (a
//! shader-cache invalidate after loading a module, a wait for the copy channel) or a larger
//! constant bank disarms the same way and takes the ordinary path.
//!
//! The acquire has `ACQUIRE_SWITCH_TSG` disabled: with it enabled the host switches the idle
//! channel group out and back, and an armed launch took 6-9 µs instead of 2 on the H200
//! (docs/benchmarks.md). The cost is that the channel group stays scheduled while armed, so
//! other processes' channels wait for its timeslice to end (~1 ms per launch of theirs on the
//! H200): hence opt-in, for a GPU the process has to itself.

use zerocopy::IntoBytes;

use super::backend::{Backend, GpuMemory};
use super::chan::RingView;
use super::module::Arg;
use super::ops::{COMPUTE, COPY, Inner};
use super::{DeviceError, DeviceInfo, DeviceOptions};
use crate::channel::gpfifo::GpEntry;
use crate::channel::methods::host::sem_execute::{OPERATION_ACQ_CIRC_GEQ, PAYLOAD_SIZE_64BIT};
use crate::channel::pushbuf::PushBuffer;
use crate::hal::Mmio;

/// Offset of the armed submission's pushbuffer in its region (the flag is at 0).
const PB_OFFSET: u64 = 64;
/// Offset of the QMD in the region.
const QMD_OFFSET: u64 = 256;
/// Bytes of constant bank 0 an armed launch has room for: the driver area and up to
/// ~3.5 KiB of parameters; kernels with more take the ordinary path.
pub(super) const CB_BYTES: u64 = 4096;

/// A submission waiting at its acquire for the next launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Armed {
    /// Offset of its region in the compute channel's command memory.
    pub off: u64,
    /// The timeline value its launch releases.
    pub value: u64,
    /// Offset of constant bank 0 in the region (after the QMD).
    pub cb_offset: u64,
    /// Offset of the flag in command memory.
    pub flag: u64,
}

impl Armed {
    pub(super) fn qmd_offset(&self) -> u64 {
        self.off + QMD_OFFSET
    }
    pub(super) fn cb_offset(&self) -> u64 {
        self.off + self.cb_offset
    }
}

impl<B: Backend> Inner<B> {
    /// Arms the compute channel if armed launches are on, none is armed and a no-op launch
    /// exists to disarm with. Never waits: when command memory has no room now, it does
    /// nothing.
    pub(super) fn arm(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if !opts.armed_launches
            || self.armed.is_some()
            || self.copy_kernel.is_none()
            || self.dead.is_some()
        {
            return Ok(());
        }
        let cb_offset = QMD_OFFSET + (info.qmd.size() as u64).next_multiple_of(256);
        let size = cb_offset + CB_BYTES;
        let done = self.sem.read_u64(self.chans[COMPUTE].sem_offset)?;
        let Inner {
            chans,
            usermode,
            backend,
            ..
        } = self;
        let c = &mut chans[COMPUTE];
        let value = c.submitted + 1;
        c.arena.retire(done);
        let Some(off) = c.arena.alloc(size, value) else {
            return Ok(());
        };
        let va = c.cmds.gpu_va() + off;
        let flag = off;
        let r = (|| -> Result<(), DeviceError> {
            let mut words = [0u32; 16];
            let mut pb = PushBuffer::new(&mut words);
            pb.host_semaphore(
                c.cmds.gpu_va() + flag,
                value,
                OPERATION_ACQ_CIRC_GEQ | PAYLOAD_SIZE_64BIT,
            )?;
            pb.compute_launch(va + QMD_OFFSET)?;
            let len = pb.len();
            // The region held older commands: clear the flag before the host can read it.
            c.cmds.write_u64(flag, 0)?;
            c.cmds
                .write(off + PB_OFFSET, words.get(..len).unwrap_or(&[]).as_bytes())?;
            let entry = GpEntry::new(va + PB_OFFSET, len as u32)?;
            let view = RingView {
                mem: &c.ring,
                userd: c.userd_offset,
            };
            c.fifo
                .push(&view, usermode, backend.clock(), opts.timeout, entry)?;
            c.fifo.kick(&view, usermode)?;
            Ok(())
        })();
        if let Err(e) = r {
            c.arena.cancel_last();
            return Err(e);
        }
        self.armed = Some(Armed {
            off,
            value,
            cb_offset,
            flag,
        });
        Ok(())
    }

    /// Arms the compute channel if a kernel was launched since it was last armed: the caller
    /// is about to wait for it (on hardware the GPU is still running it, so the stores and the
    /// doorbell cost no latency), and a program that launches and waits is likely to launch
    /// again.
    pub(super) fn arm_after_launch(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if !opts.armed_launches || !self.launched_since_arm || self.armed.is_some() {
            return Ok(());
        }
        self.check_alive()?;
        self.launched_since_arm = false;
        self.arm(info, opts)
    }

    /// Whether a launch can use the armed submission (it has no room or methods for more).
    pub(super) fn armed_fits(&self, cb_size: u64) -> bool {
        self.disarming
            || (!self.caches_dirty
                && cb_size <= CB_BYTES
                && self.chans[COPY].submitted <= self.chans[COMPUTE].synced_other)
    }

    /// Sets the armed submission's flag after its QMD and constant bank were written: the
    /// launch starts.
    pub(super) fn fire(&mut self, a: Armed) -> Result<(), DeviceError> {
        let c = &mut self.chans[COMPUTE];
        self.usermode.store_barrier();
        c.cmds.write_u64(a.flag, a.value)?;
        self.usermode.store_barrier();
        c.submitted = a.value;
        self.armed = None;
        if !self.disarming {
            self.armed_fired += 1;
        }
        Ok(())
    }

    /// Consumes an armed submission with a launch that does nothing (the copy kernel copying
    /// zero bytes), so the next compute submission does not queue behind its acquire.
    pub(super) fn disarm(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        if self.armed.is_none() {
            return Ok(());
        }
        let Some(ck) = self.copy_kernel.take() else {
            return Err(DeviceError::Dead(
                "an armed launch without a copy kernel to disarm it".into(),
            ));
        };
        self.disarming = true;
        let r = self.launch(
            info,
            opts,
            (ck.slot, ck.generation, ck.sass_version),
            ck.index,
            &ck.info,
            [1, 1, 1],
            [32, 1, 1],
            0,
            &[Arg::U64(0), Arg::U64(0), Arg::U64(0)],
            0,
        );
        self.disarming = false;
        self.copy_kernel = Some(ck);
        r?;
        if self.armed.is_some() {
            return Err(DeviceError::Dead(
                "disarming launch did not use the armed submission".into(),
            ));
        }
        Ok(())
    }
}
