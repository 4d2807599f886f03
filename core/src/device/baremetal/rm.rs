//! [`BareRm`]: the `Rm` of the bare-metal backend, doing what the kernel RM does around the
//! calls it forwards to GSP-RM.
//!
//! GSP-RM expects its client (normally CPU-RM in the nvidia kernel module) to own channel
//! memory, GR context buffers and the user page tables. So, around the plain GSP RPCs:
//!
//! * GPFIFO channels get the physical memory descriptors filled in by
//!   [`BareRm::prepare_channel`] (instance block + RAMFC in VRAM, USERD inside the ring
//!   memory, the fault method buffer, the error notifier), as `kchannelConstruct_IMPL`;
//! * a compute object gets its GR context buffers allocated, physically initialised and then
//!   mapped into our address space and promoted (`kgrobjPromoteContext_IMPL` plus UVM's
//!   channel binding), see [`super::gr`];
//! * `GET_WORK_SUBMIT_TOKEN` answers come back as GSP-RM's internal token (the channel id);
//!   the runlist is ORed in as `kfifoGenerateWorkSubmitTokenHal_*` does;
//! * freeing an object releases what was allocated for the channels under it.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use zerocopy::{FromBytes, IntoBytes};

use super::gr::{GrContext, GrSetup};
use super::memory::{Mm, VramBlock};
use super::{BareHw, BareMem, BareMetalError, BarePlatform, BareRpc, DmaBuf};
use crate::chip::ChipInfo;
use crate::device::{GpuMemory, Location, RmEvent, RmObjects};
use crate::gsp::boot::sequencer::BootEvents;
use crate::gsp::client::{
    ERROR_NOTIFIER_TYPE_MEMORY, ERROR_NOTIFIER_TYPE_NONE, INTERNALFLAGS_PRIVILEGE_USER,
    channel_internal_flags, work_submit_token,
};
use crate::gsp::events::GspEvent;
use crate::gsp::rpc::GspRm;
use crate::hal::{DmaAllocator, DmaBuffer};
use crate::rm::alloc::{ADDR_FBMEM, ADDR_SYSMEM, NV_CHANNEL_ALLOC_PARAMS, NV_MEMORY_DESC_PARAMS};
use crate::rm::class::{ClassKind, class_kind};
use crate::rm::ctrl::{
    NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
    NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS,
};
use crate::rm::{Handle, Rm, RmAbi, RmError, RmOp};

/// `NV_MEMORY_CACHED` (`nv_memory_type.h`).
pub(crate) const NV_MEMORY_CACHED: u32 = 0;
/// `NV_MEMORY_UNCACHED`.
pub(crate) const NV_MEMORY_UNCACHED: u32 = 1;
/// `NV_RAMIN_ALLOC_SIZE` (`dev_ram.h`): an instance block, 4 KiB aligned.
pub(crate) const RAMIN_SIZE: u64 = 4096;
/// Bytes of RAMFC at the start of the instance block (`DRF_SIZE(NV_RAMIN_RAMFC) / 8`).
pub(crate) const RAMFC_SIZE: u64 = 0x200;

/// The transport type of a booted GSP.
pub(crate) type Gsp<H> =
    GspRm<DmaBuf<H>, <H as BarePlatform>::Bar0, <H as BarePlatform>::Clock, BootEvents>;

/// Memory of one channel that only GSP-RM uses.
#[derive(Debug)]
pub(crate) struct ChannelMem<B> {
    pub instance: VramBlock,
    /// Held until the channel is freed: GSP-RM has the copy engine save faulted methods here.
    #[allow(dead_code)]
    pub mthdbuf: B,
}

/// A channel allocated through this RM.
#[derive(Debug)]
struct ChannelRec<B1, B> {
    handle: Handle,
    mem: ChannelMem<B>,
    gr: Option<GrContext<B1, B>>,
}

/// The bare-metal backend's `Rm`: GSP-RM RPCs plus the kernel RM's part.
pub struct BareRm<H: BarePlatform> {
    pub(crate) hw: BareHw<H>,
    pub(crate) gsp: Option<Gsp<H>>,
    pub(crate) client: Handle,
    pub(crate) chip: &'static ChipInfo,
    /// Runlist of the GR engine (from GSP-RM's device info table).
    pub(crate) runlist: u32,
    /// Bytes of the CE fault method buffer per channel.
    pub(crate) mthdbuf_size: u32,
    pub(crate) mm: Mm<H::Bar1, DmaBuf<H>, H::Bar0, H::Clock>,
    pub(crate) gr: GrSetup<H::Bar1, DmaBuf<H>>,
    /// The device layer's objects, once attached.
    pub(crate) user: Option<RmObjects>,
    pending_channel: Option<ChannelMem<DmaBuf<H>>>,
    channels: Vec<ChannelRec<H::Bar1, DmaBuf<H>>>,
    events: VecDeque<RmEvent>,
    /// Copies of every GSP event for a watcher ([`BareRm::watch_events`]), once one asked.
    watched: Option<VecDeque<GspEvent>>,
}

impl<H: BarePlatform> core::fmt::Debug for BareRm<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BareRm")
            .field("client", &self.client)
            .field("chip", &self.chip.name)
            .field("runlist", &self.runlist)
            .field("channels", &self.channels.len())
            .finish_non_exhaustive()
    }
}

fn unloaded(op: RmOp) -> RmError {
    RmError::Transport {
        op,
        what: "GSP-RM is unloaded",
        errno: None,
    }
}

/// The error-notifier handle sent with every channel: GSP-RM only compares it with null (and
/// looks it up as a context DMA, which nvbare never allocates), the descriptor says where the
/// notifier is. Outside the range nvbare's RM client hands out (0xcf000000 up).
pub(crate) const ERROR_NOTIFIER_HANDLE: Handle = Handle(0xc0de_0e00);

impl<H: BarePlatform> BareRm<H> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        hw: BareHw<H>,
        gsp: Gsp<H>,
        client: Handle,
        chip: &'static ChipInfo,
        mm: Mm<H::Bar1, DmaBuf<H>, H::Bar0, H::Clock>,
    ) -> Self {
        BareRm {
            hw,
            gsp: Some(gsp),
            client,
            chip,
            runlist: 0,
            mthdbuf_size: 0,
            mm,
            gr: GrSetup::default(),
            user: None,
            pending_channel: None,
            channels: Vec::new(),
            events: VecDeque::new(),
            watched: None,
        }
    }

    /// The RPC transport (`Err` once unloaded).
    pub(crate) fn rpc(&mut self) -> Result<&mut BareRpc<H>, BareMetalError> {
        self.gsp
            .as_mut()
            .map(|g| g.rpc())
            .ok_or(BareMetalError::Setup("GSP-RM is unloaded"))
    }

    /// Fills the physical memory descriptors of a channel about to be allocated.
    pub(crate) fn prepare_channel(
        &mut self,
        params: &mut NV_CHANNEL_ALLOC_PARAMS,
        ring: &BareMem<H>,
        userd_offset: u64,
        notifier: &BareMem<H>,
    ) -> Result<(), BareMetalError>
    where
        DmaBuf<H>: DmaBuffer,
    {
        if let Some(old) = self.pending_channel.take() {
            // A channel prepared but never allocated (the alloc was not attempted).
            self.mm.free_vram_block(old.instance);
        }
        let (ring_phys, notifier_phys) = match (ring.phys(), notifier.phys()) {
            (Some(r), Some(n)) => (r, n),
            _ => {
                return Err(BareMetalError::Setup(
                    "channel memory without a physical range",
                ));
            }
        };
        let userd = ring_phys
            .base
            .checked_add(userd_offset)
            .filter(|e| {
                e.checked_add(crate::channel::gpfifo::USERD_SIZE)
                    .is_some_and(|end| end <= ring_phys.base + ring_phys.size)
            })
            .ok_or(BareMetalError::Setup("USERD lies outside the ring memory"))?;
        let instance = self.mm.alloc_vram_block(RAMIN_SIZE, RAMIN_SIZE)?;
        let mthd_len = (self.mthdbuf_size as usize)
            .max(4096)
            .next_multiple_of(4096);
        let mthdbuf = match self.hw.dma.alloc_dma(mthd_len) {
            Ok(b) => b,
            Err(e) => {
                self.mm.free_vram_block(instance);
                return Err(e.into());
            }
        };
        let _ = mthdbuf.fill(0, mthd_len, 0);
        let desc = |base, size, location| NV_MEMORY_DESC_PARAMS {
            base,
            size,
            addressSpace: match location {
                Location::Device => ADDR_FBMEM,
                Location::Host => ADDR_SYSMEM,
            },
            cacheAttrib: match location {
                Location::Device => NV_MEMORY_UNCACHED,
                Location::Host => NV_MEMORY_CACHED,
            },
        };
        params.instanceMem = desc(instance.addr, RAMIN_SIZE, Location::Device);
        params.ramfcMem = desc(instance.addr, RAMFC_SIZE, Location::Device);
        params.userdMem = desc(
            userd,
            crate::channel::gpfifo::USERD_SIZE,
            ring_phys.location,
        );
        params.mthdbufMem = desc(mthdbuf.dev_addr(), mthd_len as u64, Location::Host);
        params.errorNotifierMem = desc(
            notifier_phys.base,
            notifier_phys.size,
            notifier_phys.location,
        );
        params.internalFlags = channel_internal_flags(
            INTERNALFLAGS_PRIVILEGE_USER,
            ERROR_NOTIFIER_TYPE_MEMORY,
            ERROR_NOTIFIER_TYPE_NONE,
        );
        // Handles of memory objects mean nothing to GSP-RM: the descriptors replace them. But
        // a null error-notifier handle makes GSP-RM take the notifier type as NONE whatever
        // internalFlags say (kchannelConstruct, kernel_channel.c), so a non-null one goes, as
        // the kernel RM sends its notifier's (_kchannelSendChannelAllocRpc).
        params.hObjectError = ERROR_NOTIFIER_HANDLE.0;
        params.hObjectBuffer = 0;
        params.hUserdMemory = [0; 8];
        self.pending_channel = Some(ChannelMem { instance, mthdbuf });
        Ok(())
    }

    /// Releases everything the device layer's objects still hold (memory it did not free,
    /// channel memory of channels it did not free).
    pub(crate) fn detach(&mut self) {
        if let Some(p) = self.pending_channel.take() {
            self.mm.free_vram_block(p.instance);
        }
        let recs: Vec<_> = self.channels.drain(..).collect();
        for r in recs {
            self.release_channel(r);
        }
        self.mm.release_all_user();
        self.user = None;
    }

    fn release_channel(&mut self, r: ChannelRec<H::Bar1, DmaBuf<H>>) {
        self.mm.free_vram_block(r.mem.instance);
        if let Some(g) = r.gr {
            g.release(&mut self.mm);
        }
    }

    /// Handles and parents of `object` and everything under it (GspRm's view).
    fn subtree(&self, object: Handle) -> Vec<Handle> {
        let Some(g) = self.gsp.as_ref() else {
            return Vec::new();
        };
        let objs = g.objects();
        let mut out = alloc::vec![object];
        loop {
            let before = out.len();
            for (h, p) in objs {
                if out.contains(p) && !out.contains(h) {
                    out.push(*h);
                }
            }
            if out.len() == before {
                return out;
            }
        }
    }

    /// Pulls GSP-RM's events and converts the ones the device layer reports.
    pub(crate) fn poll_event(&mut self) -> Option<RmEvent> {
        if self.events.is_empty()
            && let Err(e) = self.pull_events()
        {
            log::warn!("reading GSP-RM events: {e}");
        }
        self.events.pop_front()
    }

    /// Moves what GSP-RM sent into the device layer's queue (and the watcher's copy).
    fn pull_events(&mut self) -> Result<(), crate::gsp::GspError> {
        let Some(g) = self.gsp.as_mut() else {
            return Ok(());
        };
        let r = g.rpc().poll_events().map(drop);
        let mut q = g.take_events();
        while let Some(ev) = q.pop() {
            if let Some(e) = convert_event(&ev) {
                self.events.push_back(e);
            }
            if let Some(w) = self.watched.as_mut() {
                if w.len() >= MAX_WATCHED {
                    w.pop_front();
                }
                w.push_back(ev);
            }
        }
        r
    }

    /// Every GSP event since the last call, in order, for a watcher (`nvbare events`); the
    /// device layer still gets the ones it reports. The first call starts the copying (events
    /// before it are not kept); at most [`MAX_WATCHED`] wait between calls.
    pub(crate) fn watch_events(
        &mut self,
        out: &mut dyn FnMut(&GspEvent),
    ) -> Result<bool, crate::gsp::GspError> {
        if self.gsp.is_none() {
            return Ok(false);
        }
        self.watched.get_or_insert_with(VecDeque::new);
        self.pull_events()?;
        if let Some(w) = self.watched.as_mut() {
            while let Some(ev) = w.pop_front() {
                out(&ev);
            }
        }
        Ok(true)
    }

    fn fix_token(&self, params: &mut [u8]) -> Result<(), RmError> {
        let op = RmOp::Control {
            object: Handle(0),
            cmd: NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
        };
        let Ok(mut t) =
            NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS::read_from_bytes(params)
        else {
            return Ok(());
        };
        let internal = t.workSubmitToken;
        let runlist_field = (internal >> 16) & 0x7f;
        if runlist_field != 0 && runlist_field != self.runlist {
            log::warn!(
                "GSP-RM's work-submit token {internal:#x} names runlist {runlist_field}, the \
                 device info table says {}",
                self.runlist
            );
        }
        let chid = internal & 0xfff;
        t.workSubmitToken =
            work_submit_token(self.chip.chipset, chid, self.runlist).ok_or(RmError::Transport {
                op,
                what: "work-submit token fields out of range",
                errno: None,
            })?;
        if let Some(dst) = params.get_mut(..4) {
            dst.copy_from_slice(t.as_bytes());
        }
        Ok(())
    }
}

/// Most GSP events kept for a watcher between two of its calls.
pub const MAX_WATCHED: usize = 256;

/// An event for the device layer's fault report, if it is one it reports.
fn convert_event(ev: &GspEvent) -> Option<RmEvent> {
    Some(match ev {
        GspEvent::RcTriggered(rc) => RmEvent {
            rc: Some(rc.except_type),
            chid: Some(rc.chid),
            fault_address: (rc.mmu_fault_addr != 0).then_some(rc.mmu_fault_addr),
            text: format!(
                "GSP-RM RC_TRIGGERED: {} on channel {} (engine {:#x}{})",
                crate::rm::ctrl::rc::name(rc.except_type).unwrap_or("RC"),
                rc.chid,
                rc.engine_type,
                if rc.mmu_fault_addr != 0 {
                    format!(", fault address {:#x}", rc.mmu_fault_addr)
                } else {
                    String::new()
                }
            ),
        },
        GspEvent::MmuFaultQueued => RmEvent {
            rc: None,
            chid: None,
            fault_address: None,
            text: String::from("GSP-RM MMU_FAULT_QUEUED"),
        },
        GspEvent::OsErrorLog(x) => RmEvent {
            rc: Some(x.except_type),
            chid: Some(x.chid),
            fault_address: None,
            text: format!(
                "GSP-RM Xid {}: {}",
                x.except_type,
                x.text.as_str().trim_end()
            ),
        },
        _ => return None,
    })
}

impl<H: BarePlatform> Rm for BareRm<H> {
    fn client(&self) -> Handle {
        self.client
    }

    fn abi(&self) -> RmAbi {
        RmAbi::R570
    }

    fn alloc(&mut self, parent: Handle, class: u32, params: &mut [u8]) -> Result<Handle, RmError> {
        let op = RmOp::Alloc { parent, class };
        let kind = class_kind(class);
        if kind == Some(ClassKind::Gpfifo) {
            let mem = self.pending_channel.take();
            let gsp = self.gsp.as_mut().ok_or(unloaded(op))?;
            return match gsp.alloc(parent, class, params) {
                Ok(h) => {
                    match mem {
                        Some(mem) => self.channels.push(ChannelRec {
                            handle: h,
                            mem,
                            gr: None,
                        }),
                        None => log::warn!(
                            "channel {h:?} allocated without prepared memory descriptors"
                        ),
                    }
                    Ok(h)
                }
                Err(e) => {
                    if let Some(m) = mem {
                        self.mm.free_vram_block(m.instance);
                    }
                    Err(e)
                }
            };
        }
        let gsp = self.gsp.as_mut().ok_or(unloaded(op))?;
        let h = gsp.alloc(parent, class, params)?;
        if kind == Some(ClassKind::Compute)
            && let Some(i) = self.channels.iter().position(|c| c.handle == parent)
        {
            match self.promote_user_context(parent) {
                Ok(ctx) => {
                    if let Some(rec) = self.channels.get_mut(i)
                        && let Some(old) = rec.gr.replace(ctx)
                    {
                        old.release(&mut self.mm);
                    }
                }
                Err(e) => {
                    log::warn!("GR context of channel {parent:?}: {e}");
                    if let Some(g) = self.gsp.as_mut() {
                        let _ = g.free(h);
                    }
                    return Err(match e {
                        BareMetalError::Rm(r) => r,
                        _ => RmError::Transport {
                            op,
                            what: "setting up the GR context buffers failed (see the log)",
                            errno: None,
                        },
                    });
                }
            }
        }
        Ok(h)
    }

    fn control(&mut self, object: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmError> {
        let op = RmOp::Control { object, cmd };
        let gsp = self.gsp.as_mut().ok_or(unloaded(op))?;
        gsp.control(object, cmd, params)?;
        if cmd == NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN {
            self.fix_token(params)?;
        }
        Ok(())
    }

    fn free(&mut self, object: Handle) -> Result<(), RmError> {
        let op = RmOp::Free { object };
        let subtree = self.subtree(object);
        let gsp = self.gsp.as_mut().ok_or(unloaded(op))?;
        gsp.free(object)?;
        let mut i = 0;
        while i < self.channels.len() {
            if self
                .channels
                .get(i)
                .is_some_and(|c| subtree.contains(&c.handle))
            {
                let r = self.channels.remove(i);
                self.release_channel(r);
            } else {
                i += 1;
            }
        }
        Ok(())
    }
}
