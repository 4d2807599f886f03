//! Bring-up ([`Inner::open`]: the sequence in docs/device.md, "Bring-up sequence"), the
//! channels (created again by recovery, `wait.rs`) and teardown ([`Inner::close`]).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::time::Duration;

use zerocopy::IntoBytes;

use super::backend::{Backend, GpuMemory, Location, Purpose, RmObjects};
use super::chan::{Arena, Chan};
use super::error::{ChannelKind, DeviceError};
use super::fast::{self, Fast};
use super::ops::{COMPUTE, COPY, DoorbellRetries, Inner, channel_fifo};
use super::qmd::QmdPatch;
use super::slots::alloc_mem;
use super::{Classes, DeviceInfo, DeviceOptions, GrInfo, newest_class, qmd_version_for};
use crate::channel::gpfifo::{GpFifo, USERD_SIZE};
use crate::channel::launch::{self, DEFAULT_LOCAL_WINDOW, DEFAULT_SHARED_WINDOW};
use crate::channel::methods::{SUBC_COMPUTE, SUBC_COPY};
use crate::chip::{ChipInfo, Chipset, QmdVersion};
use crate::hal::Clock;
use crate::rm::alloc::*;
use crate::rm::class::*;
use crate::rm::ctrl::*;
use crate::rm::{Handle, Rm, RmAbi};

/// Bytes of the semaphore page: a 16-byte timeline slot per channel, each in its own 64-byte
/// cache line (the CPU polls one while the GPU writes the other).
const SEM_PAGE: u64 = 4096;
/// Bytes between two channels' timeline slots in the semaphore page.
const SEM_STRIDE: u64 = 64;
/// Most streams a device can be opened with ([`DeviceOptions::streams`]): two channels each,
/// every channel's timeline slot in the semaphore page.
pub const MAX_STREAMS: u32 = (SEM_PAGE / SEM_STRIDE / 2) as u32;
/// Most host staging memory (`DeviceOptions::staging_bytes`): two halves of at most 2 GiB, each
/// a single copy-engine transfer.
const MAX_STAGING_BYTES: u64 = 4 << 30;

/// Debug-logs how long each phase of opening (or re-creating the channels) took, so `-vv`
/// shows where a slow open goes.
struct Phases {
    last: Duration,
}

impl Phases {
    fn new(now: Duration) -> Self {
        Phases { last: now }
    }

    fn done(&mut self, now: Duration, what: impl core::fmt::Display) {
        let ms = now.saturating_sub(self.last).as_secs_f64() * 1e3;
        log::debug!("open: {what}: {ms:.2} ms");
        self.last = now;
    }
}

/// The RM objects bring-up starts from: the client, the device object, and the subdevice if
/// the backend holds the device already.
#[derive(Clone, Copy)]
struct Parent {
    abi: RmAbi,
    client: Handle,
    device: Handle,
    subdevice: Option<Handle>,
}

/// What bring-up created before the device's state exists, freed again if it fails.
struct Undo<M> {
    vaspace: Option<Handle>,
    /// Memory goes in here first, so a failure frees it through the backend.
    allocated: Vec<M>,
}

impl<M> Undo<M> {
    /// Frees the memory, detaches the backend and frees the device object (and with it every
    /// RM object under it), or only the VA space if the backend owns the device.
    fn run<B: Backend<Memory = M>>(self, backend: &mut B, parent: Parent) {
        for m in self.allocated {
            let _ = backend.free_memory(m);
        }
        backend.detach();
        if parent.subdevice.is_none() {
            let _ = backend.rm().free(parent.device);
        } else if let Some(v) = self.vaspace {
            let _ = backend.rm().free(v);
        }
    }
}

/// The chip as RM describes it.
struct Identity {
    subdevice: Handle,
    chip: &'static ChipInfo,
    classes: Classes,
    qmd: QmdVersion,
    class_list: Vec<u32>,
    gr: GrInfo,
    sm: u32,
}

/// Everything the device's state needs that bring-up makes before the channels.
struct Prepared<B: Backend> {
    id: Identity,
    usermode: B::Usermode,
    objs: RmObjects,
    sem: B::Memory,
    staging: B::Memory,
    chans: Vec<Chan<B::Memory>>,
    qmd_patch: QmdPatch,
    fast: Fast,
}

/// Refuses options bring-up cannot honour.
fn check_options(opts: &DeviceOptions) -> Result<(), DeviceError> {
    if opts.gpfifo_entries < 2 || !opts.gpfifo_entries.is_power_of_two() {
        return Err(DeviceError::BadRange(alloc::format!(
            "gpfifo_entries {} is not a power of two >= 2",
            opts.gpfifo_entries
        )));
    }
    if opts.streams == 0 || opts.streams > MAX_STREAMS {
        return Err(DeviceError::BadRange(alloc::format!(
            "streams {} is not between 1 and {MAX_STREAMS}; open the device with a number \
             in that range",
            opts.streams
        )));
    }
    // Each half of the staging memory is one copy-engine transfer (32-bit length).
    if opts.staging_bytes > MAX_STAGING_BYTES {
        return Err(DeviceError::BadRange(alloc::format!(
            "staging_bytes {} is above the {MAX_STAGING_BYTES} bytes one copy per half \
             allows; use at most that",
            opts.staging_bytes
        )));
    }
    Ok(())
}

/// RM's build version, if it reports one (informational).
fn driver_version<B: Backend>(backend: &mut B, client: Handle) -> Option<String> {
    let mut bv = NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS::default();
    backend
        .rm()
        .control(
            client,
            NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
            bv.as_mut_bytes(),
        )
        .ok()
        .and_then(|_| c_str(&bv.driverVersionBuffer).map(String::from))
}

/// The subdevice, the chip, the classes and the GR facts.
fn identify<B: Backend>(backend: &mut B, parent: Parent) -> Result<Identity, DeviceError> {
    let subdevice = match parent.subdevice {
        Some(subdevice) => subdevice,
        None => {
            let mut p2080 = NV2080_ALLOC_PARAMETERS {
                subDeviceId: backend.subdevice_instance(),
            };
            backend
                .rm()
                .alloc(parent.device, NV20_SUBDEVICE_0, p2080.as_mut_bytes())?
        }
    };
    let chip = chipset_of(backend, subdevice)?.info();
    let (classes, qmd, class_list) = pick_classes(backend, parent, chip)?;
    let (gr, sm) = read_gr_info(backend, subdevice, chip)?;
    Ok(Identity {
        subdevice,
        chip,
        classes,
        qmd,
        class_list,
        gr,
        sm,
    })
}

/// The chip: from the backend, or as RM reports its architecture.
fn chipset_of<B: Backend>(backend: &mut B, subdevice: Handle) -> Result<Chipset, DeviceError> {
    if let Some(c) = backend.chipset() {
        return Ok(c);
    }
    let mut a = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS::default();
    backend.rm().control(
        subdevice,
        NV2080_CTRL_CMD_MC_GET_ARCH_INFO,
        a.as_mut_bytes(),
    )?;
    Chipset::from_chip_id(a.chip_id()).ok_or_else(|| {
        DeviceError::UnsupportedChip(alloc::format!(
            "RM reports architecture {:#x} implementation {:#x}, a chip nvbare does \
             not know",
            a.architecture,
            a.implementation
        ))
    })
}

/// The newest class of each kind RM offers, the QMD layout they imply (checked against the
/// chip table), and the whole class list.
fn pick_classes<B: Backend>(
    backend: &mut B,
    parent: Parent,
    chip: &ChipInfo,
) -> Result<(Classes, QmdVersion, Vec<u32>), DeviceError> {
    let mut cl = ClassListV2::new(parent.abi);
    backend.rm().control(
        parent.device,
        NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
        cl.as_mut_bytes(),
    )?;
    let class_list = cl.classes().to_vec();
    let pick = |kind| newest_class(&class_list, kind).ok_or(DeviceError::NoClass { kind });
    let classes = Classes {
        compute: pick(ClassKind::Compute)?,
        gpfifo: pick(ClassKind::Gpfifo)?,
        copy: pick(ClassKind::Copy)?,
        usermode: pick(ClassKind::Usermode)?,
    };
    let qmd = qmd_version_for(classes.compute);
    if !chip.can_launch() || qmd != chip.qmd {
        return Err(DeviceError::UnsupportedChip(alloc::format!(
            "{} with compute class {:#x} uses QMD {:?}; nvbare launches with {:?} on this \
             chip",
            chip.name,
            classes.compute,
            qmd,
            chip.qmd
        )));
    }
    Ok((classes, qmd, class_list))
}

/// The GR facts and the SM version (checked against the chip table).
fn read_gr_info<B: Backend>(
    backend: &mut B,
    subdevice: Handle,
    chip: &ChipInfo,
) -> Result<(GrInfo, u32), DeviceError> {
    let mut q = NV2080_CTRL_GR_GET_INFO_V2_PARAMS::query(&[
        gr_info::SM_VERSION,
        gr_info::MAX_WARPS_PER_SM,
        gr_info::LITTER_NUM_GPCS,
        gr_info::LITTER_NUM_TPC_PER_GPC,
        gr_info::LITTER_NUM_SM_PER_TPC,
        gr_info::SHADER_PIPE_SUB_COUNT,
    ]);
    backend
        .rm()
        .control(subdevice, NV2080_CTRL_CMD_GR_GET_INFO_V2, q.as_mut_bytes())?;
    let g = |i| q.value(i).unwrap_or(0);
    let gr = GrInfo {
        sm_version: g(gr_info::SM_VERSION),
        max_warps_per_sm: g(gr_info::MAX_WARPS_PER_SM),
        gpcs: g(gr_info::LITTER_NUM_GPCS),
        tpc_per_gpc: g(gr_info::LITTER_NUM_TPC_PER_GPC),
        sm_per_tpc: g(gr_info::LITTER_NUM_SM_PER_TPC),
        tpcs: g(gr_info::SHADER_PIPE_SUB_COUNT),
    };
    let sm = gr_info::sm_from_version(gr.sm_version);
    if sm / 10 != chip.sm as u32 / 10 {
        return Err(DeviceError::UnsupportedChip(alloc::format!(
            "RM reports SM_VERSION {:#x} (sm_{sm}) for a {} (sm_{})",
            gr.sm_version,
            chip.name,
            chip.sm
        )));
    }
    Ok((gr, sm))
}

/// Clocks to the maximum for CUDA work; a refusal is only logged.
fn perf_boost<B: Backend>(backend: &mut B, subdevice: Handle) {
    let mut b = NV2080_CTRL_PERF_BOOST_PARAMS {
        flags: NV2080_CTRL_PERF_BOOST_FLAGS_CMD_BOOST_TO_MAX
            | NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_YES
            | NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_PRIORITY_HIGH,
        duration: NV2080_CTRL_PERF_BOOST_DURATION_INFINITE,
    };
    if let Err(e) = backend
        .rm()
        .control(subdevice, NV2080_CTRL_CMD_PERF_BOOST, b.as_mut_bytes())
    {
        log::warn!("perf boost refused ({e}); clocks stay as they are");
    }
}

/// Everything until the device's state exists: the chip, the doorbell window, the VA space
/// and the host memory of the semaphore page, staging and every channel. What it created is
/// in `undo` if it fails.
fn prepare<B: Backend>(
    backend: &mut B,
    opts: &DeviceOptions,
    parent: Parent,
    phases: &mut Phases,
    undo: &mut Undo<B::Memory>,
) -> Result<Prepared<B>, DeviceError> {
    let id = identify(backend, parent)?;
    phases.done(
        backend.clock().now(),
        "subdevice, chip, class list, GR info",
    );
    let usermode = backend.map_usermode(id.classes.usermode)?;
    if opts.perf_boost {
        perf_boost(backend, id.subdevice);
    }

    phases.done(backend.clock().now(), "usermode mapping, perf boost");
    let mut vp = backend.vaspace_params().encode(parent.abi);
    let vaspace = backend
        .rm()
        .alloc(parent.device, FERMI_VASPACE_A, vp.as_mut_bytes())?;
    undo.vaspace = Some(vaspace);
    phases.done(backend.clock().now(), "address space (FERMI_VASPACE_A)");
    let objs = RmObjects {
        client: parent.client,
        device: parent.device,
        subdevice: id.subdevice,
        vaspace,
    };
    backend.attach(&objs)?;
    phases.done(backend.clock().now(), "address space: backend attach");

    let entries = opts.gpfifo_entries;
    let userd_offset = (entries as u64 * 8).next_multiple_of(4096);
    alloc_host_memory(backend, opts, userd_offset, phases, &mut undo.allocated)?;
    let fifo = channel_fifo(opts, entries, 0)?;
    let qmd_patch = QmdPatch::new(id.qmd)?;
    let fast = Fast::new(id.qmd)?;
    // Nothing below fails.
    let mut mem = undo.allocated.drain(..);
    let (Some(sem), Some(staging)) = (mem.next(), mem.next()) else {
        return Err(DeviceError::Dead("channel memory".into()));
    };
    let chans = build_chans(opts, &mut mem, userd_offset, &fifo);
    Ok(Prepared {
        id,
        usermode,
        objs,
        sem,
        staging,
        chans,
        qmd_patch,
        fast,
    })
}

/// The semaphore page (zeroed), staging, and per channel its ring with USERD at
/// `userd_offset`, error notifier and command memory, in that order into `allocated`.
fn alloc_host_memory<B: Backend>(
    backend: &mut B,
    opts: &DeviceOptions,
    userd_offset: u64,
    phases: &mut Phases,
    allocated: &mut Vec<B::Memory>,
) -> Result<(), DeviceError> {
    let chan_plan = [
        (userd_offset + USERD_SIZE, Purpose::Ring),
        (4096, Purpose::Notifier),
        (opts.command_bytes.max(16 << 10), Purpose::Commands),
    ];
    let plan = [
        (SEM_PAGE, Purpose::Notifier),
        (opts.staging_bytes.max(8192), Purpose::Staging),
    ]
    .into_iter()
    .chain((0..2 * opts.streams).flat_map(|_| chan_plan));
    for (size, purpose) in plan {
        let m = alloc_mem(backend, size, Location::Host, true, purpose)?;
        allocated.push(m);
        phases.done(
            backend.clock().now(),
            format_args!("{purpose:?} memory, {size} bytes"),
        );
    }
    if let Some(sem) = allocated.first() {
        sem.zero(0, SEM_PAGE)?;
    }
    Ok(())
}

/// The channels' state from their memory (ring, notifier, commands per channel), before RM
/// creates them.
fn build_chans<M: GpuMemory>(
    opts: &DeviceOptions,
    mem: &mut impl Iterator<Item = M>,
    userd_offset: u64,
    fifo: &GpFifo,
) -> Vec<Chan<M>> {
    let mut chans = Vec::with_capacity(2 * opts.streams as usize);
    while let (Some(ring), Some(notifier), Some(cmds)) = (mem.next(), mem.next(), mem.next()) {
        let ci = chans.len();
        let kind = if ci % 2 == COMPUTE {
            ChannelKind::Compute
        } else {
            ChannelKind::Copy
        };
        // Compute channels keep the latency machinery's own command memory out of their
        // arenas (it follows the stream launched on).
        let kept = if ci % 2 == COMPUTE {
            fast::COMMAND_RESERVE
        } else {
            0
        };
        chans.push(Chan {
            kind,
            handle: Handle(0),
            object: Handle(0),
            class: 0,
            arena: Arena::new(cmds.size() - kept),
            ring,
            userd_offset,
            notifier,
            cmds,
            fifo: fifo.clone(),
            submitted: 0,
            sem_offset: ci as u64 * SEM_STRIDE,
            synced_other: 0,
            seen: 0,
            caches_dirty: true,
            unwritten: None,
            held_after: None,
            own_wait: None,
            own_waits: 0,
        });
    }
    chans
}

impl<B: Backend> Inner<B> {
    pub(super) fn open(
        mut backend: B,
        opts: &DeviceOptions,
    ) -> Result<(Self, DeviceInfo), DeviceError> {
        check_options(opts)?;
        let mut phases = Phases::new(backend.clock().now());
        let abi = backend.rm().abi();
        let client = backend.rm().client();
        let driver_version = driver_version(&mut backend, client);

        let existing = backend.existing_device();
        let device = match existing {
            Some((device, _)) => device,
            None => {
                let mut p0080 = NV0080_ALLOC_PARAMETERS {
                    deviceId: backend.device_instance(),
                    hClientShare: client.0,
                    vaMode: NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES,
                    ..Default::default()
                };
                backend
                    .rm()
                    .alloc(client, NV01_DEVICE_0, p0080.as_mut_bytes())?
            }
        };
        phases.done(backend.clock().now(), "driver version, device object");
        let parent = Parent {
            abi,
            client,
            device,
            subdevice: existing.map(|(_, subdevice)| subdevice),
        };
        let mut undo = Undo {
            vaspace: None,
            allocated: Vec::with_capacity(8),
        };
        let p = match prepare(&mut backend, opts, parent, &mut phases, &mut undo) {
            Ok(p) => p,
            Err(e) => {
                undo.run(&mut backend, parent);
                return Err(e);
            }
        };
        let mut inner = Inner {
            backend,
            objs: p.objs,
            abi,
            classes: p.id.classes,
            usermode: p.usermode,
            tsg: Handle(0),
            debugger: None,
            chans: p.chans,
            cur: 0,
            sem: p.sem,
            staging: p.staging,
            staging_last: [(COPY, 0); 2],
            slots: Vec::new(),
            local: None,
            scratch: Vec::new(),
            qmd_patch: p.qmd_patch,
            last_kernel: None,
            dead: None,
            recovering: false,
            copy_kernel: None,
            doorbell_retries: DoorbellRetries::default(),
            pending_events: Vec::new(),
            defer: opts.tuning.deferred_submits,
            fast: p.fast,
            stamps: None,
            stamp_seq: 0,
        };
        let info = DeviceInfo {
            backend: inner.backend.describe(),
            chip: p.id.chip,
            sm: p.id.sm,
            gr: p.id.gr,
            classes: p.id.classes,
            qmd: p.id.qmd,
            class_list: p.id.class_list,
            driver_version,
            tokens: [0; 2],
        };
        if let Err(e) = inner.start(&info, opts) {
            inner.dead = Some(e.to_string());
            drop(inner.close(&info, opts));
            return Err(e);
        }
        let mut info = info;
        info.tokens = [inner.chans[0].fifo.token(), inner.chans[1].fifo.token()];
        Ok((inner, info))
    }

    /// The channels, then local memory for kernels that need no more than the stack limit
    /// every launch provides, so the first launch does not have to stop the pipeline to set
    /// it up.
    fn start(&mut self, info: &DeviceInfo, opts: &DeviceOptions) -> Result<(), DeviceError> {
        self.create_channels(info, opts)?;
        let base_local = launch::local_memory_per_thread(opts.stack_size).map_err(|_| {
            DeviceError::BadRange(alloc::format!(
                "DeviceOptions::stack_size {} is more than a thread's local memory can \
                 hold ({} bytes with the reserve above the stack); choose a smaller one",
                opts.stack_size,
                launch::STACK_POINTER_INIT
            ))
        })?;
        let mut phases = Phases::new(self.backend.clock().now());
        self.ensure_local_memory(info, opts, base_local)?;
        phases.done(self.backend.clock().now(), "local memory");
        Ok(())
    }

    /// Channel group, subcontext, both channels with their engine objects, the debugger,
    /// work-submit tokens, scheduling, and the first pushbuffers (object binding, windows).
    pub(super) fn create_channels(
        &mut self,
        info: &DeviceInfo,
        opts: &DeviceOptions,
    ) -> Result<(), DeviceError> {
        let mut phases = Phases::new(self.backend.clock().now());
        let objs = self.objs;
        let classes = self.classes;
        let mut g = NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS {
            hObjectError: 0,
            hObjectEccError: 0,
            hVASpace: objs.vaspace.0,
            engineType: NV2080_ENGINE_TYPE_GRAPHICS,
            bIsCallingContextVgpuPlugin: 0,
            _pad0: [0; 3],
        };
        let tsg = self
            .backend
            .rm()
            .alloc(objs.device, KEPLER_CHANNEL_GROUP_A, g.as_mut_bytes())?;
        self.tsg = tsg;
        let mut cs = NV_CTXSHARE_ALLOCATION_PARAMETERS {
            hVASpace: objs.vaspace.0,
            flags: NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC,
            subctxId: 0,
        };
        let ctxshare = self
            .backend
            .rm()
            .alloc(tsg, FERMI_CONTEXT_SHARE_A, cs.as_mut_bytes())?;
        for ci in 0..self.chans.len() {
            let engine_class = match self.chans[ci].kind {
                ChannelKind::Compute => classes.compute,
                ChannelKind::Copy => classes.copy,
            };
            let c = &self.chans[ci];
            let mut p = NV_CHANNEL_ALLOC_PARAMS {
                hObjectError: c.notifier.rm_handle().map_or(0, |h| h.0),
                gpFifoOffset: c.ring.gpu_va(),
                gpFifoEntries: c.fifo.entries(),
                hContextShare: ctxshare.0,
                engineType: NV2080_ENGINE_TYPE_GRAPHICS,
                ..Default::default()
            };
            p.hUserdMemory[0] = c.ring.rm_handle().map_or(0, |h| h.0);
            p.userdOffset[0] = c.userd_offset;
            let (ring, userd_offset, notifier) = (&c.ring, c.userd_offset, &c.notifier);
            self.backend
                .prepare_channel(&mut p, ring, userd_offset, notifier)?;
            let h = self
                .backend
                .rm()
                .alloc(tsg, classes.gpfifo, p.as_mut_bytes())?;
            let obj = self.backend.rm().alloc(h, engine_class, &mut [])?;
            let mut t = NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS::default();
            self.backend.rm().control(
                h,
                NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
                t.as_mut_bytes(),
            )?;
            // After the engine object: its context buffers exist by now, and UVM maps them
            // when the channel is registered (the order CUDA and tinygrad use).
            self.backend.channel_created(h)?;
            let c = &mut self.chans[ci];
            c.handle = h;
            c.object = obj;
            c.class = engine_class;
            c.fifo = channel_fifo(opts, c.fifo.entries(), t.workSubmitToken)?;
            phases.done(
                self.backend.clock().now(),
                match (ci, self.chans[ci].kind) {
                    (COMPUTE, _) => "channel group, compute channel and engine object",
                    (_, ChannelKind::Compute) => "another stream's compute channel",
                    (_, ChannelKind::Copy) => "copy channel and engine object",
                },
            );
        }
        let mut d = NV83DE_ALLOC_PARAMETERS {
            hDebuggerClient_Obsolete: 0,
            hAppClient: objs.client.0,
            hClass3dObject: self.chans[COMPUTE].object.0,
        };
        self.debugger = match self
            .backend
            .rm()
            .alloc(objs.device, GT200_DEBUGGER, d.as_mut_bytes())
        {
            Ok(h) => Some(h),
            Err(e) => {
                log::warn!("no GT200_DEBUGGER ({e}): fault reports will lack SM error states");
                None
            }
        };
        let mut s = ScheduleParams::new(self.abi, true);
        self.backend
            .rm()
            .control(tsg, NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, s.as_mut_bytes())?;
        phases.done(self.backend.clock().now(), "debugger, scheduling");

        // Bind the engine objects and program the windows (and local memory, if any).
        let compute_class = classes.compute;
        let local = self
            .local
            .as_ref()
            .map(|(m, per_tpc, _)| (m.gpu_va(), *per_tpc));
        let sm_count = info.gr.sm_count();
        let copy_class = classes.copy;
        let mut started = Vec::with_capacity(self.chans.len());
        for ci in 0..self.chans.len() {
            let v = match self.chans[ci].kind {
                ChannelKind::Compute => self.submit(info, opts, ci, 0, |pb, _, _| {
                    pb.set_object(SUBC_COMPUTE, compute_class)?;
                    pb.set_memory_windows(DEFAULT_SHARED_WINDOW, DEFAULT_LOCAL_WINDOW)?;
                    if let Some((va, per_tpc)) = local {
                        pb.set_local_memory(va, per_tpc, sm_count)?;
                    }
                    Ok(false)
                })?,
                ChannelKind::Copy => self.submit(info, opts, ci, 0, |pb, _, _| {
                    pb.set_object(SUBC_COPY, copy_class)?;
                    Ok(false)
                })?,
            };
            started.push(v);
        }
        for (ci, v) in started.into_iter().enumerate() {
            let what = match self.chans[ci].kind {
                ChannelKind::Compute => "the compute channel to start",
                ChannelKind::Copy => "the copy channel to start",
            };
            self.wait(info, opts, ci, v, what)?;
        }
        phases.done(
            self.backend.clock().now(),
            "first submissions on every channel",
        );
        Ok(())
    }

    // ------------------------------------------------------------------------------------------
    // Teardown.

    /// Frees everything the device layer created, memory through the backend, then the device
    /// object (or, if the backend holds the device, the VA space), and returns the backend.
    pub(super) fn close(mut self, info: &DeviceInfo, opts: &DeviceOptions) -> B {
        if self.dead.is_none() {
            let short = DeviceOptions {
                timeout: opts.timeout.min(Duration::from_secs(1)),
                ..*opts
            };
            if let Err(e) = self.synchronize(info, &short) {
                log::warn!("closing the device with work outstanding: {e}");
            }
        }
        if let Some(d) = self.debugger.take() {
            let _ = self.backend.rm().free(d);
        }
        let _ = self.backend.rm().free(self.tsg);
        let mut mems: Vec<B::Memory> = Vec::new();
        for s in &mut self.slots {
            if let Some(m) = s.mem.take() {
                mems.push(m);
            }
        }
        if let Some((m, _, _)) = self.local.take() {
            mems.push(m);
        }
        mems.extend(self.stamps.take());
        let Inner {
            mut backend,
            objs,
            chans,
            sem,
            staging,
            ..
        } = self;
        mems.extend([sem, staging]);
        for c in chans {
            mems.extend([c.ring, c.notifier, c.cmds]);
        }
        for m in mems {
            let _ = backend.free_memory(m);
        }
        backend.detach();
        if backend.existing_device().is_some() {
            let _ = backend.rm().free(objs.vaspace);
        } else {
            let _ = backend.rm().free(objs.device);
        }
        backend
    }
}
