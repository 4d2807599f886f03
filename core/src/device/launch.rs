//! The plain launch path: check the call against the kernel, assemble constant bank 0, build
//! the QMD and submit both with the launch's pushbuffer.
//!
//! The latency machinery (`device/fast/`) is asked at two named points whether it can make
//! the launch more cheaply ([`fast::launch_repeat`] before anything is built,
//! [`fast::launch_built`] once it is), chooses the pushbuffer's form
//! ([`fast::launch_form`]) and is told what was submitted ([`fast::launched`]). Nothing else
//! of it is seen here.

use super::backend::{Backend, GpuMemory};
use super::chan::ARENA_ALIGN;
use super::fast;
use super::module::{Arg, KernelInfo};
use super::ops::Inner;
use super::qmd::LaunchKey;
use super::{DeviceError, DeviceInfo, DeviceOptions};
use crate::channel::launch::{
    self, DEFAULT_LOCAL_WINDOW, DEFAULT_SHARED_WINDOW, DriverArea, DriverAreaValues,
};
use crate::channel::qmd::{LaunchDesc, Qmd};
use crate::chip::QmdVersion;

/// What one launch put on the GPU, for tools that show it (`nvbare run --dump-qmd`):
/// [`super::Device::launch_recorded`].
#[derive(Debug, Clone)]
pub struct LaunchRecord {
    /// The QMD as written to command memory.
    pub qmd: Qmd,
    /// GPU VA of the QMD.
    pub qmd_va: u64,
    /// The launch's methods on the compute channel (shader-cache invalidate if code was
    /// loaded, `WAIT_FOR_IDLE`, `SEND_PCAS_A`, `SEND_SIGNALING_PCAS2_B`), without the
    /// cross-channel acquires a submission may start with.
    pub methods: alloc::vec::Vec<u32>,
}

/// What a launch call was given: the kernel (launch key: module slot and generation, kernel
/// index, dynamic shared memory), the shape and the arguments.
pub(super) struct CallInputs<'a> {
    pub key: LaunchKey,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: &'a [Arg<'a>],
    /// [`super::Device::id`] of the device launched on.
    pub device_id: u32,
}

/// A launch as built: its launch key, the QMD's description without the parts that differ
/// per submission (constant bank 0's address and the release are `None`), and constant bank
/// 0's bound size and the bytes the kernel can read.
#[derive(Clone, Copy)]
pub(super) struct Built<'a> {
    pub key: LaunchKey,
    pub desc: &'a LaunchDesc,
    pub cb_size: u32,
    pub cb: &'a [u8],
}

/// How an ordinary launch's pushbuffer is written ([`fast::launch_form`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct LaunchForm {
    /// Prefetch the QMD before `WAIT_FOR_IDLE` (the grid before may still run, and the fetch
    /// overlaps it; `PushBuffer::compute_launch_prefetched`).
    pub prefetch: bool,
    /// Leave the word a launch chained to this one turns into the sked-cache invalidate
    /// (`PushBuffer::sked_invalidate_slot`), and hand back a [`Head`].
    pub chain_head: bool,
}

/// An ordinary launch submitted with [`LaunchForm::chain_head`]: what a chain grows from.
pub(super) struct Head {
    /// Its timeline value.
    pub value: u64,
    /// Command-memory offset of its QMD.
    pub qmd_off: u64,
    /// GPU VA of its constant bank 0.
    pub cb_va: u64,
    /// Its QMD as written.
    pub qmd: Qmd,
    /// Command-memory offset of the word left for the sked-cache invalidate.
    pub sked_off: u64,
}

/// The QMD of `l` with its constant bank 0 at `cb_va`, releasing `value` at `sem`.
fn qmd_of(
    version: QmdVersion,
    l: &Built<'_>,
    cb_va: u64,
    (sem, value): (u64, u64),
) -> Result<Qmd, DeviceError> {
    let mut desc = *l.desc;
    desc.cbufs[0] = Some((cb_va, l.cb_size));
    desc.release[0] = Some((sem, value));
    Ok(super::qmd::build(version, &desc)?)
}

impl<B: Backend> Inner<B> {
    /// Queues one grid (`Device::launch`) of kernel `k` (in a module built for
    /// `sass_version`), with the deferral automatic deferral gives it
    /// (`device/fast/flusher.rs`; held work due is published as the call ends, `InnerGuard`).
    pub(super) fn launch(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        k: &KernelInfo,
        sass_version: u32,
        call: &CallInputs<'_>,
    ) -> Result<(), DeviceError> {
        self.as_launch(opts, call, |i| {
            i.launch_grid(info, opts, k, sass_version, call)
        })
    }

    /// [`Inner::launch`] of a launch built before (a graph's): submitted as an ordinary
    /// launch is, through the latency machinery if it takes it.
    pub(super) fn launch_built(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        l: &Built<'_>,
        call: &CallInputs<'_>,
    ) -> Result<(), DeviceError> {
        self.as_launch(opts, call, |i| i.submit_built(info, opts, l, call))
    }

    /// Runs `submit` as the program's launch `call`: the call checked to be this device's,
    /// with the deferral automatic deferral gives it, and its kernel the one fault reports
    /// name once it is queued.
    fn as_launch(
        &mut self,
        opts: &DeviceOptions,
        call: &CallInputs<'_>,
        submit: impl FnOnce(&mut Self) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let key = call.key;
        self.check_call(key)?;
        self.defer = fast::launch_defer(self, opts)?;
        let r = submit(self);
        self.defer = opts.tuning.deferred_submits;
        if r.is_ok() {
            self.last_kernel = Some((key.slot, key.kernel));
        }
        r
    }

    /// [`Inner::launch`] once the call is known to be this device's: a repeat the latency
    /// machinery makes without building, or the launch built and submitted.
    fn launch_grid(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        k: &KernelInfo,
        sass_version: u32,
        call: &CallInputs<'_>,
    ) -> Result<(), DeviceError> {
        if fast::launch_repeat(self, info, opts, k, call)? {
            return Ok(());
        }
        let (desc, cb_size) = self.build_launch(info, opts, k, sass_version, call)?;
        // Bank 0 is in the scratch buffer, taken out while the launch is submitted.
        let cb = core::mem::take(&mut self.scratch);
        let l = Built {
            key: call.key,
            desc: &desc,
            cb_size,
            cb: &cb,
        };
        let r = self.submit_built(info, opts, &l, call);
        self.scratch = cb;
        r
    }

    /// Submits launch `l`: through the latency machinery if it takes it, else as an ordinary
    /// submission in the form it asks for.
    pub(super) fn submit_built(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        l: &Built<'_>,
        call: &CallInputs<'_>,
    ) -> Result<(), DeviceError> {
        if fast::launch_built(self, info, opts, l, call)? {
            return Ok(());
        }
        let form = fast::launch_form(self, opts);
        let head = self.submit_launch(info, opts, l, form, &mut |_, _, _| {})?;
        self.after_launch(opts, l, form, head, call);
        Ok(())
    }

    /// The device alive and the call's module this device's, loaded now.
    pub(super) fn check_call(&self, key: LaunchKey) -> Result<(), DeviceError> {
        self.check_alive()?;
        self.slot_va(key.slot, key.generation)
            .map_err(|_| DeviceError::ForeignObject("module"))?;
        Ok(())
    }

    /// What follows an ordinary submission of `l`: caches counted invalid, the latency
    /// machinery told.
    fn after_launch(
        &mut self,
        opts: &DeviceOptions,
        l: &Built<'_>,
        form: LaunchForm,
        head: Option<Head>,
        call: &CallInputs<'_>,
    ) {
        self.caches_invalidated();
        fast::launched(self, opts, l, form, head, call);
    }

    /// Checks the call against kernel `k` and the device, sizes local memory, and assembles
    /// constant bank 0 (driver area and parameters) in the scratch buffer. Returns the QMD's
    /// description without its per-submission parts, and bank 0's bound size.
    pub(super) fn build_launch(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        k: &KernelInfo,
        sass_version: u32,
        call: &CallInputs<'_>,
    ) -> Result<(LaunchDesc, u32), DeviceError> {
        let &CallInputs {
            key,
            grid,
            block,
            args,
            device_id,
        } = call;
        launch::validate_launch(block, grid, k.regcount, k.max_threads)?;
        if let Some(req) = k.required_block
            && req != block
        {
            return Err(DeviceError::BadRange(alloc::format!(
                "kernel `{}` requires block {req:?} (.reqntid), the launch asks for {block:?}",
                k.name
            )));
        }
        if args.len() != k.params.len() {
            return Err(DeviceError::Arguments(alloc::format!(
                "kernel `{}` takes {} parameters, {} were given",
                k.name,
                k.params.len(),
                args.len()
            )));
        }
        if let Some(c) = k.cluster_dims
            && c != [1, 1, 1]
        {
            // Launched as ordinary blocks it would run, wrongly (every block its own
            // cluster: `cluster.block_rank()` 0 everywhere, seen on the H200).
            return Err(DeviceError::Unsupported(alloc::format!(
                "kernel `{}` is compiled for thread-block clusters of {c:?} (__cluster_dims__); \
                 nvbare does not launch clusters yet: build it without __cluster_dims__",
                k.name
            )));
        }
        let shared = launch::block_shared_memory(info.sm, k.shared_size, key.dynamic_shared)?;
        let sm_config = launch::sm_shared_config(
            info.sm,
            shared,
            block,
            info.gr.max_warps_per_sm.saturating_mul(32),
        )?;
        // Every kernel gets the stack limit, as under CUDA (ptxas 13.0 reports no stack for
        // some recursive kernels, which then need it); one whose stack the compiler could not
        // size gets it on top of its frame.
        let local = if k.stack_unknown {
            k.local_size.saturating_add(opts.stack_size)
        } else {
            k.local_size.max(opts.stack_size)
        };
        let per_thread = launch::local_memory_per_thread(local)?;
        self.ensure_local_memory(info, opts, per_thread)?;

        // Constant bank 0: the driver area and the parameters. Only the bytes the kernel can
        // read are written; the bank is bound with its rounded-up size (`cbuf0_size` checked
        // the sum).
        let area = DriverArea::for_sm(info.sm);
        let cb_size = launch::cbuf0_size(area, k.param_base, k.param_size)?;
        let cb_used = (u64::from(k.param_base) + u64::from(k.param_size))
            .max(area.size().into())
            .min(cb_size.into());
        self.scratch.clear();
        self.scratch.resize(cb_used as usize, 0);
        for (i, (p, a)) in k.params.iter().zip(args).enumerate() {
            if a.size() != p.size as usize {
                return Err(DeviceError::Arguments(alloc::format!(
                    "parameter {i} of `{}` is {} bytes, the argument ({a}) is {}",
                    k.name,
                    p.size,
                    a.size()
                )));
            }
            if let Arg::Ptr { device, .. } = a
                && *device != device_id
            {
                return Err(DeviceError::ForeignObject("buffer passed as an argument"));
            }
            let mut tmp = [0u8; 8];
            let bytes = a.bytes(&mut tmp);
            launch::write_param(
                &mut self.scratch,
                k.param_base,
                k.param_size,
                p.offset,
                bytes,
            )?;
        }
        // The other constant banks, from the module image.
        let mut cbufs = [None; 8];
        for b in &k.const_banks {
            let slot_b = cbufs.get_mut(b.bank as usize).ok_or_else(|| {
                DeviceError::BadRange(alloc::format!(
                    "kernel `{}` uses constant bank {}; QMDs bind banks 0..7",
                    k.name,
                    b.bank
                ))
            })?;
            *slot_b = Some((b.image_offset, b.size as u32));
        }
        let module_base = self.slot_va(key.slot, key.generation)?.0;
        // The driver area (apart from the parameters above), with bank 3's address as the
        // QMD binds it below.
        launch::write_driver_area(
            area,
            &mut self.scratch,
            &DriverAreaValues {
                block,
                grid,
                shared_window: DEFAULT_SHARED_WINDOW,
                local_window: DEFAULT_LOCAL_WINDOW,
                const_bank3: cbufs[3].map_or(0, |(off, _)| module_base + off),
            },
        )?;
        let mut desc = LaunchDesc {
            program_address: k.program_address,
            register_count: k.regcount,
            shared_memory_size: shared,
            block,
            grid,
            shader_local_memory_low_size: 0,
            shader_local_memory_high_size: per_thread,
            barrier_count: k.num_barriers,
            sass_version,
            program_size: k.code_size.min(u32::MAX as u64) as u32,
            sm_config,
            ..LaunchDesc::default()
        };
        for (i, cb) in cbufs.iter().enumerate().skip(1) {
            if let (Some((off, size)), Some(d)) = (cb, desc.cbufs.get_mut(i)) {
                *d = Some((module_base + off, *size));
            }
        }
        Ok((desc, cb_size))
    }

    /// Submits `l` on the compute channel: constant bank 0 and the QMD in a slot of the command
    /// arena, then `[acquire?] [INVALIDATE_SHADER_CACHES_NO_WFI if code was loaded]
    /// WAIT_FOR_IDLE SEND_PCAS_A SEND_SIGNALING_PCAS2_B` (in `form`). The QMD's release
    /// completes it on the timeline. `seen` is shown the QMD, its VA and the methods
    /// (`Device::launch_recorded`; a no-op the compiler drops on the plain path).
    fn submit_launch(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        l: &Built<'_>,
        form: LaunchForm,
        seen: &mut impl FnMut(&Qmd, u64, &[u32]),
    ) -> Result<Option<Head>, DeviceError> {
        let cb_size = u64::from(l.cb_size);
        let extra = cb_size + (info.qmd.size() as u64).next_multiple_of(ARENA_ALIGN);
        let sem = self.sem.gpu_va() + self.chans[self.compute_ci()].sem_offset;
        let dirty = self.caches_dirty();
        let mut head = None;
        let r = self.submit(
            info,
            opts,
            self.compute_ci(),
            extra,
            |pb, va, (cmds, off, value, at)| {
                let qmd = qmd_of(info.qmd, l, va, (sem, value))?;
                let qmd_va = va + cb_size;
                cmds.write(off, l.cb)?;
                cmds.write(off + cb_size, qmd.as_bytes())?;
                if dirty {
                    pb.invalidate_shader_caches()?;
                }
                let sked_off = if form.chain_head {
                    Some(at + (pb.sked_invalidate_slot()? * 4) as u64)
                } else {
                    None
                };
                if form.prefetch {
                    pb.compute_launch_prefetched(qmd_va)?;
                } else {
                    pb.compute_launch_on(qmd_va, info.chip.has_pcas2())?;
                }
                seen(&qmd, qmd_va, pb.words());
                if let Some(sked_off) = sked_off {
                    head = Some(Head {
                        value,
                        qmd_off: off + cb_size,
                        cb_va: va,
                        qmd,
                        sked_off,
                    });
                }
                Ok(true)
            },
        );
        r.map(|_| head)
    }

    /// [`Inner::launch`] as an ordinary submission (never repeated, written ahead or chained
    /// by the latency machinery, which is told of it as of any ordinary launch), returning
    /// what it put on the GPU.
    pub(super) fn launch_recorded(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
        k: &KernelInfo,
        sass_version: u32,
        call: &CallInputs<'_>,
    ) -> Result<LaunchRecord, DeviceError> {
        let key = call.key;
        self.check_call(key)?;
        let (desc, cb_size) = self.build_launch(info, opts, k, sass_version, call)?;
        let cb = core::mem::take(&mut self.scratch);
        let l = Built {
            key,
            desc: &desc,
            cb_size,
            cb: &cb,
        };
        let form = LaunchForm::default();
        let mut record = None;
        let r = self.submit_launch(info, opts, &l, form, &mut |qmd, qmd_va, words| {
            record = Some(LaunchRecord {
                qmd: qmd.clone(),
                qmd_va,
                methods: words.to_vec(),
            })
        });
        let r = r.map(|head| {
            self.after_launch(opts, &l, form, head, call);
            self.last_kernel = Some((key.slot, key.kernel));
        });
        self.scratch = cb;
        r?;
        record.ok_or_else(|| DeviceError::Unsupported("the launch wrote no QMD".into()))
    }

    /// The QMD of `l` with its constant bank 0 at `cb_va`, releasing compute timeline value
    /// `value` (for launches the latency machinery writes itself).
    pub(super) fn launch_qmd(
        &mut self,
        info: &DeviceInfo,
        l: &Built<'_>,
        cb_va: u64,
        value: u64,
    ) -> Result<Qmd, DeviceError> {
        let sem = self.sem.gpu_va() + self.chans[self.compute_ci()].sem_offset;
        qmd_of(info.qmd, l, cb_va, (sem, value))
    }
}
