//! The RM model as GSP-RM sees its clients (bare metal): what the kernel RM normally does is
//! the client's job, and GSP-RM checks it.
//!
//! [`RmModel::set_gsp_mode`] switches the model to it. Then, following what OpenRM 570.144's
//! GSP-client paths send and how GSP-RM uses it:
//!
//! * **Internal client.** GSP-RM's own client, device and subdevice exist (the handles
//!   `GET_GSP_STATIC_INFO` reports); the internal controls the kernel RM reads at load answer
//!   only there: `KGR_GET_CONTEXT_BUFFERS_INFO` (sizes below), and on any subdevice
//!   `FIFO_GET_DEVICE_INFO_TABLE` (runlists) and `CE_GET_FAULT_METHOD_BUFFER_SIZE`.
//! * **SET_PAGE_DIRECTORY** (RPC 54, `gvaspaceExternalRootDirCommit_IMPL`): only on a VA space
//!   allocated `IS_EXTERNALLY_OWNED` or `SHARED_MANAGEMENT` (`NV_ERR_NOT_SUPPORTED`), once
//!   (`NV_ERR_INVALID_STATE`), aperture from the flags, `numEntries` within the root directory
//!   (`NV_ERR_INVALID_ARGUMENT`). From then on every GPU access in that VA space walks the
//!   driver's page tables through the simulated GMMU (contract D), not RM's mapping table; RM
//!   no longer maps memory there (`NV_ERR_NOT_SUPPORTED`: it owns no page tables of it). A
//!   subcontext or channel on an externally owned VA space without a page directory is
//!   `NV_ERR_INVALID_STATE` ("create subcontext only after SetPageDirectory()").
//! * **Channels** take physical descriptors (`_kchannelDescribeMemDescsFromParams`): instance
//!   block (4 KiB, 4 KiB aligned), RAMFC inside it, USERD, the fault method buffer (size and
//!   base non-zero), the error notifier when `internalFlags` says MEMORY. Each must exist
//!   (`NV_ERR_INVALID_ARGUMENT` otherwise). GSP-RM writes the instance block; the host checks
//!   before every run that it still holds what was written (a driver reusing that memory gets
//!   its channel torn down). Error notifiers are written at the physical address.
//!   `GET_WORK_SUBMIT_TOKEN` answers GSP-RM's internal token, the channel id, or (an unknown,
//!   see `unknowns`) the kernel RM's format; the doorbell takes only the kernel RM's format
//!   (runlist ORed in, `RUNLIST_DOORBELL` on GB20x).
//! * **RM-owned VA spaces** get the client's tables by `COPY_SERVER_RESERVED_PDES` before a
//!   channel may use them; GSP-RM then maps a page of its own in the server-reserved range
//!   and checks it stays reachable (see `copy_server_reserved_pdes`).
//! * **GR context** (`NV2080_CTRL_CMD_GPU_PROMOTE_CTX`): buffers initialised (physical,
//!   `bInitialize`; at least the size GSP-RM reported, zeroed by the client as the header
//!   demands) and promoted (VA). A launch needs the golden context image (the first channel
//!   whose compute object got MAIN, PATCH and the global buffers: what the kernel RM's golden
//!   channel does) and, for its own channel, MAIN and PATCH initialised with their VAs mapping
//!   to them and the global buffers' VAs promoted and mapped; otherwise the launch fails with
//!   a GR exception (Xid 13), or an MMU fault (Xid 31) at the context VA that is not mapped.
//! * **RCs** are reported as events (MMU_FAULT_QUEUED, OS_ERROR_LOG, RC_TRIGGERED).
//!
//! Context buffer sizes, the runlist ids and the method buffer size are the simulator's
//! choices (the real values come from GSP-RM at run time; the driver must use what it is
//! told). The requirement of a golden image before the first launch is the simulator's
//! reading of why the kernel RM creates one at load; what GSP-RM does without it is not
//! documented.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use nvbare_core::chip::Chipset;
use nvbare_core::gsp::client::{
    ENGINE_INFO_TYPE_RM_ENGINE_TYPE, ENGINE_INFO_TYPE_RUNLIST, ERROR_NOTIFIER_TYPE_MEMORY,
    GMMU_APERTURE_SYS_COH, GMMU_APERTURE_SYS_NONCOH, GMMU_APERTURE_VIDEO,
    INITIALIZE_CTX_APERTURE_COH_SYS, INITIALIZE_CTX_APERTURE_NCOH_SYS,
    INITIALIZE_CTX_APERTURE_VIDMEM, NV_VGPU_MSG_FUNCTION_SET_PAGE_DIRECTORY,
    NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES,
    NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS,
    NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS,
    NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE, NV2080_CTRL_CMD_FIFO_GET_DEVICE_INFO_TABLE,
    NV2080_CTRL_CMD_GPU_PROMOTE_CTX, NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO,
    NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_INFO, NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS,
    NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS, NV2080_CTRL_INTERNAL_STATIC_GR_GET_INFO_PARAMS,
    NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS, ctx_engine_id,
    decode_channel_internal_flags, promote_id, rpc_set_page_directory_v1E_05, work_submit_token,
};
use nvbare_core::rm::alloc::{
    ADDR_FBMEM, ADDR_SYSMEM, NV_CHANNEL_ALLOC_PARAMS, NV_MEMORY_DESC_PARAMS,
    NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
};
use nvbare_core::rm::class::{NV01_DEVICE_0, NV01_ROOT, NV20_SUBDEVICE_0};
use nvbare_core::rm::ctrl::{NV2080_ENGINE_TYPE_COPY0, NV2080_ENGINE_TYPE_GRAPHICS, rc};
use nvbare_core::rm::{Handle, RmAbi, RmStatus};
use zerocopy::FromBytes;

use super::{Kind, Object, RmModel, ctrl_params, write_back};
use crate::bar0::SimCore;
use crate::fifo::{ChannelDesc, GrCheck, PhysLoc, RcInfo};
use crate::gpu_mem::{Access, AddressSpace, Aperture};
use crate::gsp::emulator::{INTERNAL_CLIENT, INTERNAL_DEVICE, INTERNAL_SUBDEVICE};
use crate::mmu::{GmmuFormat, SimMmu, TableLoc};

mod server_pdes;

pub(crate) use server_pdes::ServerMapping;

/// `NV_VASPACE_ALLOCATION_FLAGS_SHARED_MANAGEMENT`.
const SHARED_MANAGEMENT: u32 = 1 << 2;
/// `NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_FLAGS_APERTURE` (1:0).
const PD_APERTURE_MASK: u32 = 3;

/// Per-channel buffers.
const PER_CHANNEL: [u16; 2] = [promote_id::MAIN, promote_id::PATCH];
/// Global buffers the kernel RM initialises.
const GLOBAL_INIT: [u16; 3] = [
    promote_id::FECS_EVENT,
    promote_id::PRIV_ACCESS_MAP,
    promote_id::UNRESTRICTED_PRIV_ACCESS_MAP,
];
/// Global buffers every GR channel needs mapped (what the golden channel promotes).
const GLOBAL_VA: [u16; 6] = [
    promote_id::BUFFER_BUNDLE_CB,
    promote_id::PAGEPOOL,
    promote_id::ATTRIBUTE_CB,
    promote_id::RTV_CB_GLOBAL,
    promote_id::FECS_EVENT,
    promote_id::UNRESTRICTED_PRIV_ACCESS_MAP,
];

/// The simulator's context buffer sizes and alignments per
/// `NV0080_CTRL_FIFO_GET_ENGINE_CONTEXT_PROPERTIES_ENGINE_ID_*` (0 = not supported).
pub fn context_buffer_sizes(chip: Chipset) -> [(u32, u32); 0x1a] {
    let mut t = [(0u32, 0u32); 0x1a];
    let hopper = chip == Chipset::GH100;
    let main = match chip {
        Chipset::GH100 => 0x9_0000,
        Chipset::AD102 => 0x7_8000,
        _ => 0x8_8000,
    };
    t[ctx_engine_id::GRAPHICS] = (main, 0x1000);
    // No larger than PATCH: tinygrad initialises PM with PATCH's size and runs on real GPUs
    // (whether GSP-RM checks promoted sizes is not public; the simulator does).
    t[ctx_engine_id::GRAPHICS_PM] = (0x1_0000, 0x1000);
    t[ctx_engine_id::GRAPHICS_PATCH] = (0x1_0000, 0x1000);
    t[ctx_engine_id::GRAPHICS_BUNDLE_CB] = (0x6_0000, 0x100);
    t[ctx_engine_id::GRAPHICS_PAGEPOOL_GLOBAL] = (0x8_0000, 0x1000);
    t[ctx_engine_id::GRAPHICS_ATTRIBUTE_CB] = (0x10_0000, 0x1000);
    // H100/H200 have no 3D pipe worth the name: no RTV circular buffer, no graphics
    // preemption buffers. Ada and Blackwell have them (tinygrad, on real GPUs, rounds every
    // size of entries 0x11-0x18 up to its alignment, so none of those alignments is 0 there).
    t[ctx_engine_id::GRAPHICS_RTV_CB_GLOBAL] = if hopper { (0, 0) } else { (0x8000, 0x1000) };
    if !hopper {
        t[ctx_engine_id::GRAPHICS_GFXP_POOL] = (0x10_0000, 0x1000);
        t[ctx_engine_id::GRAPHICS_GFXP_CTRL_BLK] = (0x1_0000, 0x1000);
    }
    t[ctx_engine_id::GRAPHICS_FECS_EVENT] = (0x1000, 0x1000);
    t[ctx_engine_id::GRAPHICS_PRIV_ACCESS_MAP] = (0x3000, 0x1000);
    t
}

/// The runlist of the GR engine: 0 on every chip. The H200's tokens 0xa/0xb carry runlist 0,
/// and tinygrad, which writes runlist 0 into every compute and copy token, runs on real
/// Ampere, Ada and Blackwell GPUs. The copy engines have runlists of their own (1-4), so a
/// driver must still take the runlist from the device info table.
pub fn gr_runlist(chip: Chipset) -> u32 {
    let _ = chip;
    0
}

/// The CE fault method buffer size (tinygrad's 0x5000).
pub const FAULT_METHOD_BUFFER_SIZE: u32 = 0x5000;

/// Bytes a promote buffer `id` must have at least, with `max_subctx` subcontext headers.
fn required_size(chip: Chipset, id: u16, max_subctx: u64) -> Option<u64> {
    let (size, _) = *context_buffer_sizes(chip).get(ctx_engine_id::for_promote_id(id)?)?;
    if size == 0 {
        return None;
    }
    let mut s = size as u64;
    if id == promote_id::MAIN {
        s = s.next_multiple_of(4096) + 4096 * max_subctx;
    }
    Some(s)
}

#[derive(Debug, Clone, Copy)]
struct PhysBuf {
    loc: PhysLoc,
    size: u64,
}

#[derive(Debug, Default)]
struct ChanCtx {
    phys: HashMap<u16, PhysBuf>,
    va: HashMap<u16, u64>,
    compute: bool,
    /// GSP-RM's own mapping in the channel's VA space, if it has one.
    server: Option<ServerMapping>,
}

/// GR context state GSP-RM keeps.
#[derive(Debug, Default)]
pub(crate) struct GrState {
    globals: HashMap<u16, PhysBuf>,
    chans: HashMap<u32, ChanCtx>,
    golden: bool,
    /// Buffer ids the chip has (non-zero size).
    supported: Vec<u16>,
}

impl GrState {
    fn needed(&self, ids: &[u16]) -> Vec<u16> {
        ids.iter()
            .copied()
            .filter(|i| self.supported.contains(i))
            .collect()
    }

    fn golden_complete(&self, ctx: &ChanCtx) -> bool {
        ctx.compute
            && self
                .needed(&PER_CHANNEL)
                .iter()
                .all(|i| ctx.phys.contains_key(i) && ctx.va.contains_key(i))
            && self
                .needed(&GLOBAL_INIT)
                .iter()
                .all(|i| self.globals.contains_key(i))
            && self
                .needed(&GLOBAL_VA)
                .iter()
                .all(|i| ctx.va.contains_key(i))
    }
}

fn lock(g: &Mutex<GrState>) -> MutexGuard<'_, GrState> {
    g.lock().unwrap_or_else(|e| e.into_inner())
}

/// What GSP mode adds to the model.
pub(crate) struct GspMode {
    mmu: Arc<SimMmu>,
    gr: Arc<Mutex<GrState>>,
    /// Pages of [`SERVER_POOL`] GSP-RM has used for its own tables and pages.
    server_pages: u64,
}

impl std::fmt::Debug for GspMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GspMode").finish_non_exhaustive()
    }
}

fn gr_rc(reason: String) -> RcInfo {
    RcInfo {
        code: rc::ROBUST_CHANNEL_GR_EXCEPTION,
        engine_type: NV2080_ENGINE_TYPE_GRAPHICS,
        reason,
        mmu_fault: None,
        sm_error: None,
    }
}

/// The launch-time check of channel `chid`'s GR context.
fn gr_check(gr: Arc<Mutex<GrState>>, chid: u32) -> GrCheck {
    Arc::new(move |core: &SimCore, space: &dyn AddressSpace| {
        let g = lock(&gr);
        if !g.golden {
            return Err(gr_rc(
                "GR context load failed: no golden context image exists (the kernel RM creates \
                 one at load with a channel whose context buffers are all promoted)"
                    .into(),
            ));
        }
        let Some(ctx) = g.chans.get(&chid) else {
            return Err(gr_rc(format!(
                "GR context load failed: channel {chid}'s context was never promoted \
                 (NV2080_CTRL_CMD_GPU_PROMOTE_CTX)"
            )));
        };
        for id in g
            .needed(&PER_CHANNEL)
            .into_iter()
            .chain(g.needed(&GLOBAL_VA))
        {
            let name = promote_id::name(id);
            let phys = if promote_id::is_per_channel(id) {
                Some(*ctx.phys.get(&id).ok_or_else(|| {
                    gr_rc(format!(
                        "GR context load failed: {name} of channel {chid} was never initialised"
                    ))
                })?)
            } else {
                g.globals.get(&id).copied()
            };
            let va = *ctx.va.get(&id).ok_or_else(|| {
                gr_rc(format!(
                    "GR context load failed: the VA of {name} was never promoted for channel \
                     {chid}"
                ))
            })?;
            let size = phys.map_or(4096, |p| p.size);
            for off in [0, size.saturating_sub(1)] {
                let t = space
                    .translate(core, va + off, Access::Read)
                    .map_err(|f| RcInfo::mmu(NV2080_ENGINE_TYPE_GRAPHICS, f, "GR context load"))?;
                if let Some(p) = phys
                    && (t.aperture != p.loc.aperture || t.phys != p.loc.addr + off)
                {
                    return Err(gr_rc(format!(
                        "GR context load failed: {name} VA {:#x} maps {:?} {:#x}, but the buffer \
                         GSP-RM initialised is at {:?} {:#x}",
                        va + off,
                        t.aperture,
                        t.phys,
                        p.loc.aperture,
                        p.loc.addr + off
                    )));
                }
            }
        }
        Ok(())
    })
}

fn aperture_of(d: &NV_MEMORY_DESC_PARAMS) -> Result<Aperture, RmStatus> {
    match d.addressSpace {
        ADDR_FBMEM => Ok(Aperture::Vram),
        ADDR_SYSMEM => Ok(Aperture::SysCoherent),
        _ => Err(RmStatus::NV_ERR_INVALID_ARGUMENT),
    }
}

/// Whether `len` bytes at `loc` exist (VRAM in range, host memory mapped for DMA).
fn exists(core: &SimCore, loc: PhysLoc, len: u64) -> bool {
    let mut b = [0u8; 1];
    len > 0 && loc.read(core, 0, &mut b).is_ok() && loc.read(core, len - 1, &mut b).is_ok()
}

impl RmModel {
    /// Switches the model to GSP-RM's view of its clients (see the module documentation):
    /// `mmu` walks the page tables of externally owned VA spaces. Creates GSP-RM's internal
    /// client.
    pub fn set_gsp_mode(&mut self, mmu: Arc<SimMmu>) {
        let gr = GrState {
            supported: (0..=promote_id::GLOBAL_PRIV_ACCESS_MAP)
                .filter(|&i| required_size(self.model.chipset, i, 0).is_some())
                .collect(),
            ..Default::default()
        };
        self.gsp = Some(GspMode {
            mmu,
            gr: Arc::new(Mutex::new(gr)),
            server_pages: 0,
        });
        crate::fifo::lock(&self.fifo).report_rcs(true);
        self.create_internal_client();
    }

    /// Whether the model plays GSP-RM.
    pub fn gsp_mode(&self) -> bool {
        self.gsp.is_some()
    }

    /// GSP-RM restarts: every client, object and channel is gone, GR state too; the internal
    /// client is created again.
    pub fn reset_for_boot(&mut self) {
        self.clients.clear();
        self.heap = super::heap::Heap::new(
            super::VRAM_RESERVED,
            ((self.model.vram_mib as u64) << 20).saturating_sub(super::VRAM_RESERVED),
        );
        self.next_chid = 0;
        self.next_tsg = 1;
        crate::fifo::lock(&self.fifo).clear();
        if let Some(g) = &mut self.gsp {
            g.server_pages = 0;
            let mut s = lock(&g.gr);
            s.globals.clear();
            s.chans.clear();
            s.golden = false;
        }
        if self.gsp.is_some() {
            self.create_internal_client();
        }
    }

    /// Whether the golden context image exists.
    pub fn golden_image(&self) -> bool {
        self.gsp.as_ref().is_some_and(|g| lock(&g.gr).golden)
    }

    fn create_internal_client(&mut self) {
        let c = Handle(INTERNAL_CLIENT);
        let mut cl = super::Client::default();
        let obj = |parent, class, kind, children| Object {
            parent,
            class,
            kind,
            children,
        };
        cl.objects.insert(
            c,
            obj(
                Handle(0),
                NV01_ROOT,
                Kind::Client,
                vec![Handle(INTERNAL_DEVICE)],
            ),
        );
        cl.objects.insert(
            Handle(INTERNAL_DEVICE),
            obj(
                c,
                NV01_DEVICE_0,
                Kind::Device,
                vec![Handle(INTERNAL_SUBDEVICE)],
            ),
        );
        cl.objects.insert(
            Handle(INTERNAL_SUBDEVICE),
            obj(
                Handle(INTERNAL_DEVICE),
                NV20_SUBDEVICE_0,
                Kind::Subdevice,
                Vec::new(),
            ),
        );
        self.clients.insert(c, cl);
    }

    /// The controls GSP mode answers; `None` for the others.
    pub(super) fn gsp_control(
        &mut self,
        core: &mut SimCore,
        client: Handle,
        object: Handle,
        cmd: u32,
        p: &mut [u8],
    ) -> Option<Result<(), RmStatus>> {
        let g = self.gsp.as_ref()?;
        let gr = g.gr.clone();
        let is_subdevice = self
            .object(client, object)
            .is_ok_and(|o| o.class == NV20_SUBDEVICE_0);
        let r = match cmd {
            // An internal control: GSP-RM serves it to any client of the kernel RM (every RPC
            // caller has kernel privilege), as tinygrad, which asks on its own client, shows on
            // real GPUs.
            NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO => {
                if !is_subdevice {
                    return Some(Err(RmStatus::NV_ERR_NOT_SUPPORTED));
                }
                (|| {
                    let mut q: NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS =
                        ctrl_params(p)?;
                    let sizes = context_buffer_sizes(self.model.chipset);
                    if let Some(e0) = q.engineContextBuffersInfo.first_mut() {
                        for (d, (size, align)) in e0.engine.iter_mut().zip(sizes) {
                            d.size = size;
                            d.alignment = align;
                        }
                    }
                    write_back(p, &q);
                    Ok(())
                })()
            }
            NV2080_CTRL_CMD_FIFO_GET_DEVICE_INFO_TABLE => {
                if !is_subdevice {
                    return Some(Err(RmStatus::NV_ERR_NOT_SUPPORTED));
                }
                (|| {
                    let mut t: NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS = ctrl_params(p)?;
                    if !t.baseIndex.is_multiple_of(32) {
                        return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                    }
                    let gr_rl = gr_runlist(self.model.chipset);
                    // GR0 and four copy engines, each on its own runlist.
                    let all: Vec<(u32, u32, &str)> =
                        std::iter::once((NV2080_ENGINE_TYPE_GRAPHICS, gr_rl, "GR0"))
                            .chain(
                                (0..4).map(|i| (NV2080_ENGINE_TYPE_COPY0 + i, gr_rl + 1 + i, "CE")),
                            )
                            .collect();
                    let base = t.baseIndex as usize;
                    let page: Vec<_> = all.iter().skip(base).take(32).collect();
                    t.entries = Default::default();
                    for (e, (ty, rl, name)) in t.entries.iter_mut().zip(&page) {
                        e.engineData[ENGINE_INFO_TYPE_RM_ENGINE_TYPE] = *ty;
                        e.engineData[ENGINE_INFO_TYPE_RUNLIST] = *rl;
                        e.numPbdmas = 1;
                        e.engineName[..name.len()].copy_from_slice(name.as_bytes());
                    }
                    t.numEntries = page.len() as u32;
                    t.bMore = (all.len() > base + page.len()) as u8;
                    write_back(p, &t);
                    Ok(())
                })()
            }
            NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE => {
                if !is_subdevice {
                    return Some(Err(RmStatus::NV_ERR_NOT_SUPPORTED));
                }
                (|| {
                    let mut q: NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS = ctrl_params(p)?;
                    q.size = FAULT_METHOD_BUFFER_SIZE;
                    write_back(p, &q);
                    Ok(())
                })()
            }
            NV2080_CTRL_CMD_GPU_PROMOTE_CTX => {
                if !is_subdevice {
                    return Some(Err(RmStatus::NV_ERR_NOT_SUPPORTED));
                }
                self.promote_ctx(core, client, &gr, p)
            }
            // The GR facts table the kernel RM caches (kgraphicsLoadStaticInfo), each entry
            // at its index, for GR engine 0.
            NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_INFO => {
                if !is_subdevice {
                    return Some(Err(RmStatus::NV_ERR_NOT_SUPPORTED));
                }
                let facts = self.rm.gr;
                (|| {
                    let mut q: NV2080_CTRL_INTERNAL_STATIC_GR_GET_INFO_PARAMS = ctrl_params(p)?;
                    if let Some(e0) = q.engineInfo.first_mut() {
                        for (i, e) in e0.infoList.iter_mut().enumerate() {
                            e.index = i as u32;
                            e.data = facts.value(i as u32).unwrap_or(0);
                        }
                    }
                    write_back(p, &q);
                    Ok(())
                })()
            }
            NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES => {
                self.copy_server_reserved_pdes(core, client, object, p)
            }
            _ => return None,
        };
        Some(r)
    }

    fn promote_ctx(
        &mut self,
        core: &SimCore,
        client: Handle,
        gr: &Arc<Mutex<GrState>>,
        p: &[u8],
    ) -> Result<(), RmStatus> {
        let q: NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS = ctrl_params(p)?;
        let chan_client = if q.hChanClient == 0 {
            client
        } else {
            Handle(q.hChanClient)
        };
        let (chid, _, _) = self.chid_of(chan_client, Handle(q.hObject))?;
        if q.engineType != NV2080_ENGINE_TYPE_GRAPHICS {
            return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
        }
        // GSP-RM builds the context through the channel's VA space, its own mapping included.
        let server = lock(gr).chans.get(&chid).and_then(|c| c.server);
        if let Some(m) = server {
            m.check(core, &format!("promoting channel {chid}'s context"))?;
        }
        let n = q.entryCount as usize;
        let entries = q
            .promoteEntry
            .get(..n)
            .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
        let max_subctx = self
            .rm
            .gr
            .value(nvbare_core::rm::ctrl::gr_info::MAX_SUBCONTEXT_COUNT)
            .unwrap_or(0) as u64;
        // Check everything first, then record (a failed control changes nothing).
        let mut phys = Vec::new();
        let mut virt = Vec::new();
        for e in entries {
            let id = e.bufferId;
            let need = required_size(self.model.chipset, id, max_subctx)
                .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
            if e.bNonmapped != 0 && e.bInitialize == 0 {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            if e.bInitialize != 0 {
                let aperture = match e.physAttr & 3 {
                    INITIALIZE_CTX_APERTURE_VIDMEM => Aperture::Vram,
                    INITIALIZE_CTX_APERTURE_COH_SYS => Aperture::SysCoherent,
                    INITIALIZE_CTX_APERTURE_NCOH_SYS => Aperture::SysNonCoherent,
                    _ => return Err(RmStatus::NV_ERR_INVALID_ARGUMENT),
                };
                let loc = PhysLoc {
                    aperture,
                    addr: e.gpuPhysAddr,
                };
                if e.size < need
                    || !e.gpuPhysAddr.is_multiple_of(4096)
                    || !exists(core, loc, e.size)
                {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                // "The client must clear (memset) the buffer to 0x0 prior to initialization."
                let mut head = vec![0u8; 4096.min(e.size as usize)];
                let mut tail = vec![0u8; head.len()];
                let tail_at = e.size - tail.len() as u64;
                if loc.read(core, 0, &mut head).is_err()
                    || loc.read(core, tail_at, &mut tail).is_err()
                    || head.iter().chain(&tail).any(|&b| b != 0)
                {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                phys.push((id, PhysBuf { loc, size: e.size }));
            }
            if e.bNonmapped == 0 {
                if e.gpuVirtAddr == 0 || !e.gpuVirtAddr.is_multiple_of(4096) {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                virt.push((id, e.gpuVirtAddr));
            }
        }
        let mut g = lock(gr);
        let g = &mut *g;
        let ctx = g.chans.entry(chid).or_default();
        for (id, b) in phys {
            if promote_id::is_per_channel(id) {
                ctx.phys.insert(id, b);
            } else {
                g.globals.insert(id, b);
            }
        }
        for (id, va) in virt {
            ctx.va.insert(id, va);
        }
        let ctx_ref = g.chans.get(&chid);
        if !g.golden && ctx_ref.is_some_and(|c| g.golden_complete(c)) {
            g.golden = true;
            core_trace_golden(chid);
        }
        Ok(())
    }

    /// SET_PAGE_DIRECTORY.
    pub(super) fn set_page_directory(
        &mut self,
        core: &SimCore,
        payload: &[u8],
    ) -> Result<(), RmStatus> {
        let g = self.gsp.as_ref().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?;
        let mmu = g.mmu.clone();
        let r = rpc_set_page_directory_v1E_05::read_from_bytes(payload)
            .map_err(|_| RmStatus::NV_ERR_INVALID_PARAM_STRUCT)?;
        let (c, device) = (Handle(r.hClient), Handle(r.hDevice));
        if self.object(c, device)?.class != NV01_DEVICE_0 {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
        }
        let p = r.params;
        // UVM always sends unicast ("always do unicast by passing non-zero subDeviceId",
        // nvGpuOpsSetPageDirectory), tinygrad too; whether GSP-RM takes a broadcast (0) on a
        // bare-metal system is not public.
        if p.subDeviceId == 0 && core.unknowns.hard("gsp.set_page_directory.unicast_only") {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let vaspace = if p.hVASpace != 0 {
            Handle(p.hVASpace)
        } else {
            self.default_vaspace(c)?
        };
        let vo = self.object(c, vaspace)?;
        if vo.parent != device {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
        }
        let Kind::VaSpace {
            flags, external, ..
        } = &vo.kind
        else {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
        };
        if flags & (NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED | SHARED_MANAGEMENT) == 0 {
            return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
        }
        if external.is_some() {
            return Err(RmStatus::NV_ERR_INVALID_STATE);
        }
        let aperture = match p.flags & PD_APERTURE_MASK {
            0 => Aperture::Vram,
            1 => Aperture::SysCoherent,
            2 => Aperture::SysNonCoherent,
            _ => return Err(RmStatus::NV_ERR_INVALID_ARGUMENT),
        };
        let info = self.model.chipset.info();
        let fmt = nvbare_core::mm::MmuFormat::for_chip(info);
        if p.numEntries == 0 || p.numEntries > fmt.root_entries() {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let root = TableLoc {
            aperture,
            addr: p.physAddress,
        };
        let loc = PhysLoc {
            aperture,
            addr: p.physAddress,
        };
        // Root entries are 8 bytes in both formats.
        if !p.physAddress.is_multiple_of(4096) || !exists(core, loc, p.numEntries as u64 * 8) {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let space: Arc<dyn AddressSpace> =
            Arc::new(mmu.address_space(GmmuFormat::for_chip(info), root));
        if let Kind::VaSpace {
            space: s, external, ..
        } = &mut self.object_mut(c, vaspace)?.kind
        {
            *s = space;
            *external = Some(root);
        }
        Ok(())
    }

    /// A GPFIFO channel as GSP-RM allocates it for a client that owns the channel memory.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn alloc_channel_gsp(
        &mut self,
        core: &mut SimCore,
        a: &NV_CHANNEL_ALLOC_PARAMS,
        class: u32,
        tsg: u64,
        engine_type: u32,
        space: Arc<dyn AddressSpace>,
        first_of_tsg: bool,
        server: Option<ServerMapping>,
    ) -> Result<Kind, RmStatus> {
        let entries = a.gpFifoEntries;
        let phys = |d: &NV_MEMORY_DESC_PARAMS, min: u64, align: u64| -> Result<PhysLoc, RmStatus> {
            let loc = PhysLoc {
                aperture: aperture_of(d)?,
                addr: d.base,
            };
            if d.size < min || !d.base.is_multiple_of(align) || !exists(core, loc, d.size) {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            Ok(loc)
        };
        let instance = phys(&a.instanceMem, 4096, 4096)?;
        let ramfc = phys(&a.ramfcMem, 0x200, 4)?;
        if ramfc.aperture != instance.aperture
            || ramfc.addr < instance.addr
            || ramfc.addr + a.ramfcMem.size > instance.addr + a.instanceMem.size
        {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        // USERD: RM takes the described memory as it is (memdescCreate, alignment 1, any size);
        // the channel's pointer to it keeps bits 31:9 only (the RAMFC USERD field is 512-byte
        // granular), so the host uses the 512-byte block the base falls in.
        let described = phys(&a.userdMem, 1, 1)?;
        let userd = PhysLoc {
            aperture: described.aperture,
            addr: described.addr & !0x1ff,
        };
        if first_of_tsg {
            // _kchannelDescribeMemDescsFromParams: NV_ASSERT(size > 0), NV_ASSERT(base != 0).
            if a.mthdbufMem.size == 0 || a.mthdbufMem.base == 0 {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            phys(&a.mthdbufMem, 1, 4)?;
        }
        let (_, notifier_type, _) = decode_channel_internal_flags(a.internalFlags);
        // A null hObjectError makes the notifier type NONE whatever the flags say
        // (kchannelConstruct, kernel_channel.c).
        let notifier = if notifier_type == ERROR_NOTIFIER_TYPE_MEMORY && a.hObjectError != 0 {
            let n = (nvbare_core::rm::ctrl::NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1 * 16) as u64;
            Some(phys(&a.errorNotifierMem, n, 4)?)
        } else {
            None
        };
        let chid = self.next_chid;
        let token = work_submit_token(self.model.chipset, chid, gr_runlist(self.model.chipset))
            .ok_or(RmStatus::NV_ERR_NO_MEMORY)?;
        self.next_chid += 1;
        // What GSP-RM writes into the instance block (its own record here, not RAMFC's layout).
        let mut written = Vec::with_capacity(48);
        written.extend_from_slice(b"sim RAMIN\0\0\0");
        written.extend_from_slice(&chid.to_le_bytes());
        written.extend_from_slice(&a.gpFifoOffset.to_le_bytes());
        written.extend_from_slice(&entries.to_le_bytes());
        written.extend_from_slice(&0u32.to_le_bytes());
        written.extend_from_slice(&userd.addr.to_le_bytes());
        written.extend_from_slice(&ramfc.addr.to_le_bytes());
        instance
            .write(core, 0, &written)
            .map_err(|_| RmStatus::NV_ERR_INVALID_ARGUMENT)?;
        // GSP-RM clears USERD (GPGet = GPPut = 0) in system memory only (kchannelConstruct:
        // kfifoSetupUserD for SYSMEM, or FB under full SR-IOV); one in video memory is the
        // client's to initialise.
        if described.aperture != Aperture::Vram {
            let _ = userd.write(core, 0, &[0u8; 0x200]);
        }
        let mut f = crate::fifo::lock(&self.fifo);
        f.add_channel(ChannelDesc {
            chid,
            token,
            tsg,
            class,
            engine_type,
            space,
            gpfifo_va: a.gpFifoOffset,
            entries,
            userd,
            notifier,
        });
        f.set_instance(chid, instance, written);
        drop(f);
        if let Some(g) = &self.gsp {
            lock(&g.gr).chans.entry(chid).or_default().server = server;
        }
        // What GSP-RM's GET_WORK_SUBMIT_TOKEN answers is not public: its internal token (the
        // channel id, what kfifoGenerateWorkSubmitToken builds under GSP-RM) or one already in
        // the kernel RM's doorbell format. The driver must build the doorbell's value itself.
        let answer = core
            .unknowns
            .pick("gsp.work_submit_token.format", &[chid, token]);
        Ok(Kind::Channel {
            chid,
            token: answer,
            tsg,
        })
    }

    /// A compute object was allocated on channel `chid`: GR contexts are GSP-RM's to check.
    pub(super) fn gsp_compute_object(&mut self, chid: u32) {
        if let Some(g) = &self.gsp {
            lock(&g.gr).chans.entry(chid).or_default().compute = true;
            let check = gr_check(g.gr.clone(), chid);
            crate::fifo::lock(&self.fifo).set_gr_check(chid, check);
        }
    }

    /// Channel `chid` is gone: so is its context.
    pub(super) fn gsp_channel_freed(&mut self, chid: u32) {
        if let Some(g) = &self.gsp {
            lock(&g.gr).chans.remove(&chid);
        }
    }

    /// Other RPCs GSP mode answers.
    pub(super) fn gsp_rpc(
        &mut self,
        core: &mut SimCore,
        abi: RmAbi,
        function: u32,
        payload: &mut [u8],
    ) -> Option<Result<(), RmStatus>> {
        self.gsp.as_ref()?;
        let _ = abi;
        match function {
            NV_VGPU_MSG_FUNCTION_SET_PAGE_DIRECTORY => Some(self.set_page_directory(core, payload)),
            _ => None,
        }
    }
}

fn core_trace_golden(chid: u32) {
    log::debug!("sim GSP-RM: golden context image created from channel {chid}");
}
