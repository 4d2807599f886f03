//! Several GPUs in one process: peer access, peer mappings, copies from one GPU's memory to
//! another's, and cross-device waits.
//!
//! ```text
//! let a = Device::open(backend_a, opts)?;
//! let b = Device::open(backend_b, opts)?;
//! let link = a.enable_peer_access(&b, PeerMode::Direct)?;   // fails clearly without a P2P path
//! let src = a.htod_copy(&data)?;
//! let mut dst = b.alloc::<u32>(n)?;
//! link.copy(&src, &mut dst)?;                 // A's copy engine writes B's memory directly
//! let on_a = link.map(&dst)?;                 // B's buffer at a GPU VA of A (kernel argument,
//! link.copy_from_peer(&on_a, &mut other)?;    //   copy source or destination)
//! let ev = b.record_event()?;                 // everything B submitted so far ...
//! link.wait_event(&a, &ev)?;                  // ... comes before A's later work (GPU-side wait)
//! ```
//!
//! A link is symmetric: it enables access in both directions and maps each device's timeline
//! semaphore page (host memory) into the other, so each can wait for the other on the GPU
//! (`SEM_EXECUTE ACQ_CIRC_GEQ` on a semaphore the other device releases).
//!
//! Copies between the devices are ordered like `cudaMemcpyPeer`: after all work submitted
//! before on both devices, before all work submitted after on both. The copy runs on one
//! device's copy engine (the source's for [`PeerLink::copy`], the caller's for
//! [`Device::dtod_peer_copy`]); that device first acquires the other's timelines, and the other
//! device's next work acquires the copy's completion.
//!
//! Without a direct path ([`Backend::enable_peer`] fails: no P2P, different IOMMU domains,
//! different chips) [`PeerMode::Direct`] is an error ([`DeviceError::PeerUnavailable`]);
//! [`PeerMode::AllowHostStaging`] then copies through host memory (device → host → device,
//! synchronous) and waits on the CPU where the GPUs cannot wait for each other. Nothing falls
//! back to host memory unless asked for.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use super::Device;
use super::backend::{Backend, GpuMemory, Location, PeerMapping, PeerPathInfo, Purpose};
use super::error::{ChannelKind, DeviceError};
use super::memory::{DeviceBuffer, DeviceRepr};
use super::module::Arg;
use crate::channel::gpfifo::GP_ADDRESS_LIMIT;

/// Host memory used per step of a staged copy.
const STAGE_CHUNK: u64 = 64 << 20;

/// How two devices may exchange data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerMode {
    /// Only directly (peer mappings, copy engine over NVLink or PCIe P2P); an error when there
    /// is no direct path.
    #[default]
    Direct,
    /// Directly when possible, otherwise through host memory (explicitly slower).
    AllowHostStaging,
}

/// What a link uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerPath {
    /// Peer mappings and copy-engine copies between the GPUs.
    Direct(PeerPathInfo),
    /// Copies through host memory (allowed by [`PeerMode::AllowHostStaging`]).
    HostStaging {
        /// Why the direct path is not available.
        reason: String,
    },
}

impl fmt::Display for PeerPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerPath::Direct(i) => match i.peer_id {
                Some(id) => write!(f, "direct ({}, peer id {id})", i.link),
                None => write!(f, "direct ({})", i.link),
            },
            PeerPath::HostStaging { reason } => {
                write!(f, "host staging (no direct path: {reason})")
            }
        }
    }
}

/// A point in one device's stream: everything submitted on it before [`Device::record_event`]
/// (or [`Device::record_timed_event`], which also has the GPU note the time it got there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub(super) device: u32,
    pub(super) stream: u32,
    pub(super) values: [u64; 2],
    /// The timed event's sequence number (its GPU time's slot: `device/stamp.rs`); 0: untimed.
    pub(super) stamp: u64,
}

impl Event {
    /// [`Device::id`] of the device it was recorded on.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The stream it was recorded on ([`Device::with_stream`]).
    pub fn stream(&self) -> u32 {
        self.stream
    }

    /// Whether the GPU notes the time it reaches the event ([`Device::record_timed_event`]).
    pub fn is_timed(&self) -> bool {
        self.stamp != 0
    }
}

/// Two devices that can reach each other, from [`Device::enable_peer_access`]: peer mappings,
/// copies between them, cross-device events and semaphores (`docs/multi-gpu.md`).
pub struct PeerLink<'d, B: Backend> {
    devs: [&'d Device<B>; 2],
    path: PeerPath,
    /// `sem_maps[i]`: the timeline semaphore page of `devs[1 - i]` mapped into `devs[i]`
    /// (`None` on a staged link whose backend cannot map the other's host memory: then waits
    /// happen on the CPU).
    sem_maps: [Option<PeerMapping>; 2],
}

impl<B: Backend> fmt::Debug for PeerLink<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerLink")
            .field("a", &self.devs[0].info.backend)
            .field("b", &self.devs[1].info.backend)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn check_mapping(m: &PeerMapping, want: u64) -> Result<(), DeviceError> {
    let end = m.va.checked_add(m.size);
    if m.size < want || end.is_none_or(|e| e > GP_ADDRESS_LIMIT) {
        return Err(DeviceError::BadRange(alloc::format!(
            "the backend mapped {} bytes of peer memory at GPU VA {:#x} for {want} bytes; peer \
             mappings must lie below 2^40 (a backend bug)",
            m.size,
            m.va
        )));
    }
    Ok(())
}

/// Maps memory `mem` of `owner` into `accessor` (both borrowed for the call only).
fn map_into<B: Backend>(
    accessor: &Device<B>,
    owner: &Device<B>,
    mem: impl FnOnce(&super::ops::Inner<B>) -> Result<&B::Memory, DeviceError>,
) -> Result<PeerMapping, DeviceError> {
    let mut acc = accessor.inner()?;
    acc.check_alive()?;
    let own = owner.inner()?;
    let m = mem(&own)?;
    let want = m.size();
    let mapping = acc.backend.map_peer_memory(&own.backend, m)?;
    if let Err(e) = check_mapping(&mapping, want) {
        let _ = acc.backend.unmap_peer_memory(mapping);
        return Err(e);
    }
    Ok(mapping)
}

/// Waits for everything `dev` submitted, then removes `mapping` from it (errors are logged:
/// this runs in destructors).
fn unmap_from<B: Backend>(dev: &Device<B>, mapping: PeerMapping) {
    match dev.inner() {
        Ok(mut i) => {
            if i.check_alive().is_ok()
                && let Err(e) = i.synchronize(&dev.info, &dev.options)
            {
                log::warn!("removing a peer mapping after a failed wait: {e}");
            }
            if let Err(e) = i.backend.unmap_peer_memory(mapping) {
                log::warn!("removing a peer mapping failed: {e}");
            }
        }
        Err(_) => log::warn!(
            "peer mapping at GPU VA {:#x} leaked: device busy during drop",
            mapping.va
        ),
    }
}

impl<B: Backend> Device<B> {
    /// Lets this device and `peer` reach each other's memory (both directions) and wait for
    /// each other on the GPU. With [`PeerMode::Direct`] a missing direct path is
    /// [`DeviceError::PeerUnavailable`]; with [`PeerMode::AllowHostStaging`] the link falls
    /// back to copies through host memory ([`PeerLink::path`] says which).
    pub fn enable_peer_access<'d>(
        &'d self,
        peer: &'d Device<B>,
        mode: PeerMode,
    ) -> Result<PeerLink<'d, B>, DeviceError> {
        if core::ptr::eq(self, peer) {
            return Err(DeviceError::BadRange(
                "a device is not its own peer: use dtod_copy within one device".to_string(),
            ));
        }
        let direct = {
            let mut a = self.inner()?;
            let mut b = peer.inner()?;
            a.check_alive()?;
            b.check_alive()?;
            a.backend
                .enable_peer(&b.backend)
                .and_then(|info| b.backend.enable_peer(&a.backend).map(|_| info))
        };
        let path = match (direct, mode) {
            (Ok(info), _) => PeerPath::Direct(info),
            (Err(e), PeerMode::AllowHostStaging) => {
                log::warn!(
                    "{} and {}: no direct path ({e}); copies go through host memory as asked",
                    self.info.backend,
                    peer.info.backend
                );
                PeerPath::HostStaging {
                    reason: e.to_string(),
                }
            }
            (Err(e), PeerMode::Direct) => {
                return Err(DeviceError::PeerUnavailable {
                    from: self.info.backend.clone(),
                    to: peer.info.backend.clone(),
                    reason: e.to_string(),
                });
            }
        };
        let direct = matches!(path, PeerPath::Direct(_));
        let mut link = PeerLink {
            devs: [self, peer],
            path,
            sem_maps: [None, None],
        };
        for i in 0..2 {
            let (me, other) = (link.devs[i], link.devs[1 - i]);
            match map_into(me, other, |o| Ok(&o.sem)) {
                Ok(m) => link.sem_maps[i] = Some(m),
                Err(e) if direct => {
                    return Err(DeviceError::PeerUnavailable {
                        from: me.info.backend.clone(),
                        to: other.info.backend.clone(),
                        reason: alloc::format!(
                            "mapping the peer's semaphore page (host memory) failed: {e}"
                        ),
                    });
                }
                Err(e) => log::info!(
                    "{} cannot map {}'s semaphores ({e}): waits between them happen on the CPU",
                    me.info.backend,
                    other.info.backend
                ),
            }
        }
        Ok(link)
    }

    /// A point in this device's stream: everything submitted so far. Another device waits for
    /// it with [`PeerLink::wait_event`].
    pub fn record_event(&self) -> Result<Event, DeviceError> {
        let mut i = self.inner()?;
        i.check_alive()?;
        // Another device will wait for it: launches held by automatic deferral go now.
        i.publish_held(&self.options)?;
        Ok(Event {
            device: self.id,
            stream: i.cur as u32,
            values: i.submitted(i.cur),
            stamp: 0,
        })
    }

    /// Makes everything submitted on the current stream from now on wait, on the GPU, for
    /// `event` (recorded on this device, on any stream): a semaphore acquire of the event's
    /// timeline values, the host does not wait. An event of the current stream is already
    /// ordered and costs nothing. An event of another device waits through a [`PeerLink`]
    /// ([`PeerLink::wait_event`]).
    pub fn wait_event(&self, event: &Event) -> Result<(), DeviceError> {
        if event.device != self.id {
            return Err(DeviceError::ForeignObject(
                "event (recorded on another device: wait for it through a PeerLink)",
            ));
        }
        let mut i = self.inner()?;
        i.check_alive()?;
        if event.stream as usize == i.cur {
            return Ok(());
        }
        let s = event.stream as usize;
        // The recording stream's work must be published for the acquire to ever be met.
        let offs = i.sem_offsets(s);
        let base = i.sem.gpu_va();
        i.kick_stream(s)?;
        let acquires = [
            (base + offs[0], event.values[0]),
            (base + offs[1], event.values[1]),
        ];
        i.acquire(&self.info, &self.options, &acquires)
    }

    /// Whether everything submitted before `event` (recorded on this device) has finished.
    pub fn event_done(&self, event: &Event) -> Result<bool, DeviceError> {
        if event.device != self.id {
            return Err(DeviceError::ForeignObject(
                "event (recorded on another device)",
            ));
        }
        let [(_, compute), (_, copy)] = self.with_stream(event.stream, |d| d.timelines())??;
        Ok(compute >= event.values[0] && copy >= event.values[1])
    }

    /// Waits on the CPU until everything submitted before `event` (recorded on this device)
    /// has finished.
    pub fn synchronize_event(&self, event: &Event) -> Result<(), DeviceError> {
        if event.device != self.id {
            return Err(DeviceError::ForeignObject(
                "event (recorded on another device)",
            ));
        }
        self.with_stream(event.stream, |d| {
            d.wait_for(ChannelKind::Compute, event.values[0])?;
            d.wait_for(ChannelKind::Copy, event.values[1])
        })?
    }

    /// Copies all of `src` into `dst` where one buffer belongs to this device and the other to
    /// the link's other device, on **this** device's copy engine (pushing when `src` is local,
    /// pulling when `dst` is). The remote buffer is mapped for the copy and unmapped after it;
    /// returns when the copy is complete. Ordered like [`PeerLink::copy`].
    pub fn dtod_peer_copy<T: DeviceRepr>(
        &self,
        link: &PeerLink<'_, B>,
        src: &DeviceBuffer<'_, B, T>,
        dst: &mut DeviceBuffer<'_, B, T>,
    ) -> Result<(), DeviceError> {
        let me = link.side_of(self)?;
        let (s, d) = (link.side_of_buffer(src)?, link.side_of_buffer(dst)?);
        if s == d {
            return Err(DeviceError::BadRange(
                "both buffers belong to the same device: use dtod_copy".to_string(),
            ));
        }
        check_lengths(src.len, dst.len)?;
        if !link.is_direct() {
            return link.staged_copy(s, src, d, dst);
        }
        if s == me {
            let remote = link.map(dst)?;
            link.copy_to_peer(src, &remote)?;
            remote.finish()
        } else {
            let remote = link.map(src)?;
            link.copy_into(me, (remote.gpu_va(), remote.location()), dst, src.bytes())?;
            remote.finish()
        }
    }
}

fn check_lengths(src: usize, dst: usize) -> Result<(), DeviceError> {
    if src > dst {
        return Err(DeviceError::BadRange(alloc::format!(
            "copying {src} elements into a buffer of {dst}"
        )));
    }
    Ok(())
}

impl<'d, B: Backend> PeerLink<'d, B> {
    /// How the devices reach each other.
    pub fn path(&self) -> &PeerPath {
        &self.path
    }

    /// Whether copies and mappings are direct (GPU to GPU).
    pub fn is_direct(&self) -> bool {
        matches!(self.path, PeerPath::Direct(_))
    }

    /// Whether the devices wait for each other on the GPU (otherwise on the CPU).
    pub fn gpu_waits(&self) -> bool {
        self.sem_maps.iter().all(Option::is_some)
    }

    /// The two devices, in the order of [`Device::enable_peer_access`].
    pub fn devices(&self) -> (&'d Device<B>, &'d Device<B>) {
        (self.devs[0], self.devs[1])
    }

    fn side_of(&self, dev: &Device<B>) -> Result<usize, DeviceError> {
        self.devs
            .iter()
            .position(|d| core::ptr::eq(*d, dev))
            .ok_or(DeviceError::ForeignObject(
                "device (not part of this peer link)",
            ))
    }

    fn side_of_buffer<T: DeviceRepr>(
        &self,
        buf: &DeviceBuffer<'_, B, T>,
    ) -> Result<usize, DeviceError> {
        let side = self
            .devs
            .iter()
            .position(|d| core::ptr::eq(*d, buf.dev))
            .ok_or(DeviceError::ForeignObject(
                "buffer (of a device outside this peer link)",
            ))?;
        self.devs[side]
            .inner()?
            .buffer_va(buf.slot, buf.generation)?;
        Ok(side)
    }

    /// Maps `buf`, a buffer of one device of the link, into the other device: the result has a
    /// GPU VA there (a kernel argument of that device, or a copy source or destination). Needs
    /// a direct path for device memory; host buffers can be mapped on a staged link too when
    /// the backend supports it.
    pub fn map<'l, T: DeviceRepr>(
        &'l self,
        buf: &'l DeviceBuffer<'_, B, T>,
    ) -> Result<PeerBuffer<'l, 'd, B, T>, DeviceError> {
        let owner = self.side_of_buffer(buf)?;
        let accessor = 1 - owner;
        if !self.is_direct() && buf.location() == Location::Device {
            return Err(DeviceError::PeerUnavailable {
                from: self.devs[accessor].info.backend.clone(),
                to: self.devs[owner].info.backend.clone(),
                reason: alloc::format!("the link uses {}", self.path),
            });
        }
        let (slot, generation) = (buf.slot, buf.generation);
        let mapping = map_into(self.devs[accessor], self.devs[owner], |o| {
            o.slot_mem(slot, generation)
        })?;
        Ok(PeerBuffer {
            link: self,
            accessor,
            mapping: Some(mapping),
            len: buf.len,
            _buf: PhantomData,
        })
    }

    /// Copies all of `src` into `dst`, buffers of different devices of the link. Direct: on the
    /// source device's copy engine, writing the destination through a peer mapping made for the
    /// copy; staged: through host memory. Ordered after all work submitted so far on both
    /// devices and before all work submitted later on both (like `cudaMemcpyPeer`); returns
    /// when the copy is complete.
    pub fn copy<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        dst: &mut DeviceBuffer<'_, B, T>,
    ) -> Result<(), DeviceError> {
        let s = self.side_of_buffer(src)?;
        self.devs[s].dtod_peer_copy(self, src, dst)
    }

    /// Copies all of `src` (a buffer of the device `dst` is mapped into) into the peer buffer
    /// `dst`, on that device's copy engine (a push). Returns once queued; ordered like
    /// [`PeerLink::copy`].
    pub fn copy_to_peer<T: DeviceRepr>(
        &self,
        src: &DeviceBuffer<'_, B, T>,
        dst: &PeerBuffer<'_, '_, B, T>,
    ) -> Result<(), DeviceError> {
        let s = self.side_of_buffer(src)?;
        dst.check_link(self)?;
        if s != dst.accessor {
            return Err(DeviceError::ForeignObject(
                "source buffer (it must belong to the device the peer buffer is mapped into)",
            ));
        }
        check_lengths(src.len, dst.len)?;
        self.direct_copy(
            s,
            (src.va, src.location()),
            (dst.gpu_va(), dst.location()),
            src.bytes(),
        )
    }

    /// Copies the peer buffer `src` into `dst` (a buffer of the device `src` is mapped into),
    /// on that device's copy engine (a pull). Returns once queued; ordered like
    /// [`PeerLink::copy`].
    pub fn copy_from_peer<T: DeviceRepr>(
        &self,
        src: &PeerBuffer<'_, '_, B, T>,
        dst: &mut DeviceBuffer<'_, B, T>,
    ) -> Result<(), DeviceError> {
        src.check_link(self)?;
        check_lengths(src.len, dst.len)?;
        let bytes = (src.len * size_of::<T>()) as u64;
        self.copy_into(src.accessor, (src.gpu_va(), src.location()), dst, bytes)
    }

    /// A pull into `dst` from `src` = (VA in `dst`'s device, where the memory is).
    fn copy_into<T: DeviceRepr>(
        &self,
        engine: usize,
        src: (u64, Location),
        dst: &DeviceBuffer<'_, B, T>,
        bytes: u64,
    ) -> Result<(), DeviceError> {
        if self.side_of_buffer(dst)? != engine {
            return Err(DeviceError::ForeignObject(
                "destination buffer (it must belong to the device the peer buffer is mapped \
                 into)",
            ));
        }
        self.direct_copy(engine, src, (dst.va, dst.location()), bytes)
    }

    /// A copy by `devs[engine]` from `src` to `dst` (VA in that device, where the memory is),
    /// after everything submitted on the other device, and before anything the other device
    /// submits later. It runs on that device's copy kernel where [`CopyPath::Auto`] would
    /// (installed, both in video memory, large, 16-byte congruent addresses): the SMs drive the
    /// link with many streams where one copy-engine launch drives one. Otherwise on its copy
    /// engine.
    ///
    /// [`CopyPath::Auto`]: super::CopyPath::Auto
    fn direct_copy(
        &self,
        engine: usize,
        src: (u64, Location),
        dst: (u64, Location),
        bytes: u64,
    ) -> Result<(), DeviceError> {
        let other = 1 - engine;
        let (Some(other_sem), Some(engine_sem)) = (self.sem_maps[engine], self.sem_maps[other])
        else {
            return Err(DeviceError::PeerUnavailable {
                from: self.devs[engine].info.backend.clone(),
                to: self.devs[other].info.backend.clone(),
                reason: alloc::format!("the link uses {}", self.path),
            });
        };
        let (waits, offs) = {
            let o = self.devs[other].inner()?;
            o.check_alive()?;
            (o.submitted(o.cur), o.sem_offsets(o.cur))
        };
        let acquires = [
            (other_sem.va + offs[0], waits[0]),
            (other_sem.va + offs[1], waits[1]),
        ];
        let e = self.devs[engine];
        let (v, copy_off) = {
            let mut i = e.inner()?;
            if i.kernel_copy_applies(&e.options, src, dst, bytes) {
                // The copy channel waits for the other device; the compute channel's launch
                // waits for the copy channel (stream order), then copies.
                i.acquire(&e.info, &e.options, &acquires)?;
                i.copy_with_kernel(&e.info, &e.options, src.0, dst.0, bytes)?;
                let s = i.cur;
                (i.submitted(s)[0], i.sem_offsets(s)[0])
            } else {
                let v = i.copy_after(&e.info, &e.options, src.0, dst.0, bytes, &acquires)?;
                (v, i.sem_offsets(i.cur)[1])
            }
        };
        let o = self.devs[other];
        o.inner()?
            .acquire(&o.info, &o.options, &[(engine_sem.va + copy_off, v)])
    }

    fn staged_copy<T: DeviceRepr>(
        &self,
        s: usize,
        src: &DeviceBuffer<'_, B, T>,
        d: usize,
        dst: &DeviceBuffer<'_, B, T>,
    ) -> Result<(), DeviceError> {
        let bytes = src.bytes();
        let chunk = bytes.min(STAGE_CHUNK) as usize;
        let mut host: Vec<u8> = Vec::new();
        host.try_reserve_exact(chunk).map_err(|_| {
            DeviceError::BadRange(alloc::format!(
                "no host memory for a {chunk}-byte staging buffer"
            ))
        })?;
        host.resize(chunk, 0);
        let (sd, dd) = (self.devs[s], self.devs[d]);
        let mut done = 0u64;
        while done < bytes {
            let n = (bytes - done).min(chunk as u64) as usize;
            let part = host.get_mut(..n).ok_or(DeviceError::BadRange(
                "staging chunk out of range".to_string(),
            ))?;
            sd.inner()?
                .dtoh(&sd.info, &sd.options, src.va + done, part)?;
            dd.inner()?
                .htod(&dd.info, &dd.options, dst.va + done, part)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Makes all work `waiter` submits from now on wait for `event` (recorded on the other
    /// device of the link): a GPU-side semaphore acquire of the other device's timelines, or a
    /// CPU wait when the link has no GPU waits ([`PeerLink::gpu_waits`]). An event of `waiter`
    /// itself is already ordered.
    pub fn wait_event(&self, waiter: &Device<B>, event: &Event) -> Result<(), DeviceError> {
        let w = self.side_of(waiter)?;
        if event.device == waiter.id {
            return Ok(());
        }
        let o = self.devs[1 - w];
        if event.device != o.id {
            return Err(DeviceError::ForeignObject(
                "event (recorded on a device outside this peer link)",
            ));
        }
        match self.sem_maps[w] {
            Some(sem) => {
                let offs = {
                    let mut oi = o.inner()?;
                    oi.kick_stream(event.stream as usize)?;
                    oi.sem_offsets(event.stream as usize)
                };
                let acquires = [
                    (sem.va + offs[0], event.values[0]),
                    (sem.va + offs[1], event.values[1]),
                ];
                waiter
                    .inner()?
                    .acquire(&waiter.info, &waiter.options, &acquires)
            }
            None => o.synchronize_event(event),
        }
    }

    /// A 64-bit semaphore in `owner`'s host memory, mapped into the other device too: either
    /// device (or the CPU) releases it, either device waits for it on the GPU. Starts at 0.
    pub fn semaphore<'l>(
        &'l self,
        owner: &Device<B>,
    ) -> Result<PeerSemaphore<'l, 'd, B>, DeviceError> {
        let o = self.side_of(owner)?;
        let dev = self.devs[o];
        let (slot, generation, va) =
            dev.inner()?
                .alloc_slot(16, Location::Host, Purpose::Notifier)?;
        let zeroed = dev
            .inner()
            .and_then(|i| Ok(i.slot_mem(slot, generation)?.zero(0, 16)?));
        let mapped = zeroed.and_then(|()| {
            map_into(self.devs[1 - o], dev, |i| i.slot_mem(slot, generation)).map_err(|e| {
                DeviceError::PeerUnavailable {
                    from: self.devs[1 - o].info.backend.clone(),
                    to: dev.info.backend.clone(),
                    reason: alloc::format!(
                        "a semaphore in the peer's host memory cannot be mapped: {e}"
                    ),
                }
            })
        });
        match mapped {
            Ok(m) => Ok(PeerSemaphore {
                link: self,
                owner: o,
                slot,
                generation,
                va: [va, m.va],
                mapping: Some(m),
            }),
            Err(e) => {
                dev.release_slot(slot, generation);
                Err(e)
            }
        }
    }
}

impl<B: Backend> Drop for PeerLink<'_, B> {
    fn drop(&mut self) {
        for i in 0..2 {
            if let Some(m) = self.sem_maps[i].take() {
                unmap_from(self.devs[i], m);
            }
        }
    }
}

/// A buffer of one device mapped into the other device of a [`PeerLink`] (from
/// [`PeerLink::map`]); unmapped when dropped, after the device it is mapped into has finished
/// the work submitted so far.
///
/// Writes through a peer mapping are ordered by the devices' streams (copies through the link
/// order themselves; for kernels, use events), not by Rust borrows, as with CUDA peer pointers.
pub struct PeerBuffer<'l, 'd, B: Backend, T: DeviceRepr> {
    link: &'l PeerLink<'d, B>,
    /// Index in the link of the device the mapping belongs to.
    accessor: usize,
    mapping: Option<PeerMapping>,
    len: usize,
    _buf: PhantomData<&'l [T]>,
}

impl<B: Backend, T: DeviceRepr> fmt::Debug for PeerBuffer<'_, '_, B, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerBuffer")
            .field("va", &format_args!("{:#x}", self.gpu_va()))
            .field("len", &self.len)
            .field("mapped_into", &self.device().info.backend)
            .finish()
    }
}

impl<'l, 'd, B: Backend, T: DeviceRepr> PeerBuffer<'l, 'd, B, T> {
    /// The device this mapping belongs to (not the one whose memory it is).
    pub fn device(&self) -> &'d Device<B> {
        self.link.devs[self.accessor]
    }

    /// GPU VA of element 0 in [`PeerBuffer::device`]'s VA space.
    pub fn gpu_va(&self) -> u64 {
        self.mapping.map_or(0, |m| m.va)
    }

    /// Where the mapped memory lives: the peer's video memory or host memory.
    fn location(&self) -> Location {
        self.mapping.map_or(Location::Host, |m| m.location)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as a kernel argument of [`PeerBuffer::device`].
    pub fn arg(&self) -> Arg<'static> {
        Arg::Ptr {
            va: self.gpu_va(),
            device: self.device().id,
        }
    }

    fn check_link(&self, link: &PeerLink<'_, B>) -> Result<(), DeviceError> {
        let same = core::ptr::eq(self.link.devs[0], link.devs[0])
            && core::ptr::eq(self.link.devs[1], link.devs[1]);
        if same {
            Ok(())
        } else {
            Err(DeviceError::ForeignObject("peer buffer (of another link)"))
        }
    }

    /// Waits for the device it is mapped into, then unmaps it, reporting errors (dropping does
    /// the same and logs them).
    pub fn finish(mut self) -> Result<(), DeviceError> {
        let dev = self.device();
        let Some(m) = self.mapping.take() else {
            return Ok(());
        };
        let mut i = dev.inner()?;
        let synced = i.synchronize(&dev.info, &dev.options);
        let unmapped = i.backend.unmap_peer_memory(m);
        synced?;
        Ok(unmapped?)
    }
}

impl<B: Backend, T: DeviceRepr> Drop for PeerBuffer<'_, '_, B, T> {
    fn drop(&mut self) {
        if let Some(m) = self.mapping.take() {
            unmap_from(self.device(), m);
        }
    }
}

/// A 64-bit semaphore in one device's host memory, mapped into both devices of a link (from
/// [`PeerLink::semaphore`]): a device releases it after its earlier work, the other device's
/// channels acquire it, the CPU can read and set it.
pub struct PeerSemaphore<'l, 'd, B: Backend> {
    link: &'l PeerLink<'d, B>,
    owner: usize,
    slot: usize,
    generation: u32,
    /// GPU VA in the owner (`va[0]`) and in the other device (`va[1]`).
    va: [u64; 2],
    mapping: Option<PeerMapping>,
}

impl<B: Backend> fmt::Debug for PeerSemaphore<'_, '_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerSemaphore")
            .field("owner", &self.link.devs[self.owner].info.backend)
            .field("va", &self.va)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> PeerSemaphore<'_, '_, B> {
    fn va_on(&self, dev: &Device<B>) -> Result<u64, DeviceError> {
        let side = self.link.side_of(dev)?;
        Ok(if side == self.owner {
            self.va[0]
        } else {
            self.va[1]
        })
    }

    /// The current value (CPU read).
    pub fn value(&self) -> Result<u64, DeviceError> {
        let i = self.link.devs[self.owner].inner()?;
        Ok(i.slot_mem(self.slot, self.generation)?.read_u64(0)?)
    }

    /// Sets the value from the CPU (a host-side release).
    pub fn set(&self, value: u64) -> Result<(), DeviceError> {
        let i = self.link.devs[self.owner].inner()?;
        Ok(i.slot_mem(self.slot, self.generation)?
            .write_u64(0, value)?)
    }

    /// `dev` writes `value` after all work it has submitted so far (a flushed copy-engine
    /// release).
    pub fn release(&self, dev: &Device<B>, value: u64) -> Result<(), DeviceError> {
        let va = self.va_on(dev)?;
        dev.inner()?
            .release_after_all(&dev.info, &dev.options, va, value)
    }

    /// All work `dev` submits from now on waits until the semaphore reaches `value` (with
    /// wrap-around, `ACQ_CIRC_GEQ`).
    pub fn wait(&self, dev: &Device<B>, value: u64) -> Result<(), DeviceError> {
        let va = self.va_on(dev)?;
        dev.inner()?
            .acquire(&dev.info, &dev.options, &[(va, value)])
    }
}

impl<B: Backend> Drop for PeerSemaphore<'_, '_, B> {
    fn drop(&mut self) {
        if let Some(m) = self.mapping.take() {
            unmap_from(self.link.devs[1 - self.owner], m);
        }
        self.link.devs[self.owner].release_slot(self.slot, self.generation);
    }
}
