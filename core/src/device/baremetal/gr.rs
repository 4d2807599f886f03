//! GR (graphics/compute engine) context buffers, which the kernel RM owns on a GSP system.
//!
//! What OpenRM 570.144 does, and what nvbare does in its place:
//!
//! * Sizes come from GSP-RM's `NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO`
//!   on the internal client (`kgraphicsGetStaticInfo`); the main context also holds a 4 KiB
//!   header per subcontext (`kgraphicsGetMainCtxBufferSize_IMPL`: `MAX_SUBCONTEXT_COUNT`).
//! * For a compute object the kernel RM initialises (physically promotes, `bInitialize`,
//!   `bNonmapped`) MAIN and PATCH of the channel and the global FECS_EVENT / PRIV_ACCESS_MAP /
//!   UNRESTRICTED_PRIV_ACCESS_MAP buffers (`kgrobjGetPromoteIds_FWCLIENT`,
//!   `kgrctxPrepareInitializeCtxBuffer_IMPL`), but does *not* promote virtual addresses when
//!   the VA space is externally owned (`kgrctxPreparePromoteCtxBuffer_IMPL`): UVM maps the
//!   buffers into its page tables and promotes the VAs when it binds the channel. nvbare owns
//!   the page tables, so it does both steps, in that order, right after the object is
//!   allocated (as tinygrad does).
//! * The golden context image is created at GPU load from a channel the kernel RM makes for
//!   that purpose (`kgraphicsCreateGoldenImageChannel_IMPL`), in an RM-owned VA space whose
//!   tables are the kernel RM's, with the range GSP-RM manages handed over
//!   (`COPY_SERVER_RESERVED_PDES`). nvbare makes it once per boot in GSP-RM's internal client,
//!   with the global buffers (tinygrad's `init_golden_image`), and keeps it until unload.
//!
//! Every VA space nvbare hands GSP-RM uses the same page directory, so a global buffer has one
//! VA everywhere.

use alloc::vec::Vec;

use zerocopy::{FromZeros, IntoBytes};

use super::memory::{BareMemory, Mm, Owner, VramBlock};
use super::rm::{BareRm, NV_MEMORY_CACHED, NV_MEMORY_UNCACHED, RAMFC_SIZE, RAMIN_SIZE};
use super::{BareMem, BareMetalError, BarePlatform, DmaBuf};
use crate::device::{GpuMemory, Location, MemoryRequest, Purpose};
use crate::gsp::client::{
    ERROR_NOTIFIER_TYPE_NONE, GMMU_APERTURE_SYS_COH, GMMU_APERTURE_SYS_NONCOH, GMMU_APERTURE_VIDEO,
    INITIALIZE_CTX_APERTURE_COH_SYS, INITIALIZE_CTX_APERTURE_VIDMEM,
    INITIALIZE_CTX_GPU_CACHEABLE_NO, INTERNALFLAGS_PRIVILEGE_KERNEL,
    NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05,
    NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES,
    NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_LEVEL,
    NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS,
    NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS,
    NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE, NV2080_CTRL_CMD_FIFO_GET_DEVICE_INFO_TABLE,
    NV2080_CTRL_CMD_GPU_PROMOTE_CTX, NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO,
    NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS, NV2080_CTRL_GPU_PROMOTE_CONTEXT_MAX_ENTRIES,
    NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY, NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS,
    NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO,
    NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS,
    SET_PAGE_DIRECTORY_FLAGS_ALL_CHANNELS, channel_internal_flags, ctx_engine_id, promote_id,
};
use crate::hal::{Clock, DmaAllocator, DmaBuffer, Mmio};
use crate::mm::{PAGE_4K, PageDirectoryBase, ReservedLevel, TableAperture};
use crate::rm::alloc::{
    ADDR_FBMEM, ADDR_SYSMEM, NV_CHANNEL_ALLOC_PARAMS,
    NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES, NV_MEMORY_DESC_PARAMS,
    NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
    NV_VASPACE_ALLOCATION_FLAGS_PTETABLE_HEAP_MANAGED, NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
    NV0080_ALLOC_PARAMETERS, NV2080_ALLOC_PARAMETERS, VaSpaceAlloc,
};
use crate::rm::class::{FERMI_VASPACE_A, NV01_DEVICE_0, NV20_SUBDEVICE_0};
use crate::rm::ctrl::{NV2080_CTRL_CMD_GR_GET_INFO_V2, NV2080_CTRL_GR_GET_INFO_V2_PARAMS, gr_info};
use crate::rm::{Handle, RmAbi};

/// `NV2080_ENGINE_TYPE_GR0`.
const NV2080_ENGINE_TYPE_GR0: u32 = 1;

/// Buffers of one channel.
pub(crate) const PER_CHANNEL: [u16; 2] = [promote_id::MAIN, promote_id::PATCH];
/// Global buffers the kernel RM initialises (`kgrctxPrepareInitializeCtxBuffer_IMPL`).
pub(crate) const GLOBAL_INIT: [u16; 3] = [
    promote_id::FECS_EVENT,
    promote_id::PRIV_ACCESS_MAP,
    promote_id::UNRESTRICTED_PRIV_ACCESS_MAP,
];
/// Global buffers whose VA is promoted for every channel (tinygrad's golden-image set).
pub(crate) const GLOBAL_VA: [u16; 6] = [
    promote_id::BUFFER_BUNDLE_CB,
    promote_id::PAGEPOOL,
    promote_id::ATTRIBUTE_CB,
    promote_id::RTV_CB_GLOBAL,
    promote_id::FECS_EVENT,
    promote_id::UNRESTRICTED_PRIV_ACCESS_MAP,
];

/// Context buffers of one channel (MAIN, PATCH).
#[derive(Debug)]
pub(crate) struct GrContext<B1, B> {
    bufs: Vec<(u16, BareMemory<B1, B>)>,
}

impl<B1: Mmio + Clone, B: DmaBuffer> GrContext<B1, B> {
    /// Unmaps and frees the buffers.
    pub(crate) fn release<M: Mmio, C: Clock>(self, mm: &mut Mm<B1, B, M, C>) {
        for (_, m) in self.bufs {
            if let Err(e) = mm.free(m) {
                log::warn!("freeing a GR context buffer: {e}");
            }
        }
    }
}

/// The golden-image channel in GSP-RM's internal client.
#[derive(Debug)]
pub(crate) struct Golden<B1, B> {
    pub device: Handle,
    instance: VramBlock,
    userd: B,
    mthdbuf: B,
    ctx: GrContext<B1, B>,
}

/// Largest GR context buffer (size or alignment) accepted from GSP-RM's context-buffer info.
/// The simulator's are at most 1 MiB and RM's compute buffers are a few MiB (the main image,
/// the page pool, the attribute circular buffer); a larger answer would only waste VRAM.
pub const MAX_CTX_BUFFER: u64 = 256 << 20;
/// Largest CE fault method buffer accepted from `CE_GET_FAULT_METHOD_BUFFER_SIZE` (tinygrad
/// allocates 0x5000; RM sizes it per copy engine, a few KiB each). nvbare allocates it in host
/// memory for each channel.
pub const MAX_FAULT_METHOD_BUFFER: u64 = 1 << 20;

/// Checks the sizes GSP-RM reported before anything is allocated from them.
fn check_gsp_sizes(
    info: Option<&NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO>,
    mthdbuf_size: u32,
) -> Result<(), BareMetalError> {
    let too_large = |what, value: u64, max| {
        (value > max).then_some(BareMetalError::GspSizeTooLarge { what, value, max })
    };
    if let Some(e) = too_large(
        "the CE fault method buffer",
        mthdbuf_size.into(),
        MAX_FAULT_METHOD_BUFFER,
    ) {
        return Err(e);
    }
    for e in info.iter().flat_map(|i| i.engine.iter()) {
        if e.size == u32::MAX {
            continue; // "not supported"
        }
        let err = too_large("a GR context buffer", e.size.into(), MAX_CTX_BUFFER).or_else(|| {
            too_large(
                "a GR context buffer's alignment",
                e.alignment.into(),
                MAX_CTX_BUFFER,
            )
        });
        if let Some(err) = err {
            return Err(err);
        }
    }
    Ok(())
}

/// What the backend knows about GR context buffers.
#[derive(Debug)]
pub(crate) struct GrSetup<B1, B> {
    pub info: Option<NV2080_CTRL_INTERNAL_STATIC_GR_CONTEXT_BUFFERS_INFO>,
    pub max_subctx: u32,
    pub globals: Vec<(u16, BareMemory<B1, B>)>,
    pub golden: Option<Golden<B1, B>>,
    pub internal_client: Handle,
    pub internal_subdevice: Handle,
    pub next_internal: u32,
    /// The tables above the range GSP-RM manages in the golden VA space, once reserved.
    pub server_levels: Option<heapless::Vec<ReservedLevel, 6>>,
}

impl<B1, B> Default for GrSetup<B1, B> {
    fn default() -> Self {
        GrSetup {
            info: None,
            max_subctx: 0,
            globals: Vec::new(),
            golden: None,
            internal_client: Handle(0),
            internal_subdevice: Handle(0),
            next_internal: 0,
            server_levels: None,
        }
    }
}

impl<B1, B> GrSetup<B1, B> {
    /// Bytes and alignment of promote buffer `id`; `None` if GSP-RM reports it unsupported.
    pub(crate) fn size_of(&self, id: u16) -> Option<(u64, u64)> {
        let info = self.info.as_ref()?;
        let e = info.engine.get(ctx_engine_id::for_promote_id(id)?)?;
        if e.size == 0 || e.size == u32::MAX {
            return None;
        }
        let mut size = e.size as u64;
        if id == promote_id::MAIN {
            // kgraphicsGetMainCtxBufferSize_IMPL: a 4 KiB-aligned header per subcontext.
            size = size.next_multiple_of(PAGE_4K) + PAGE_4K * self.max_subctx as u64;
        }
        let align = if e.alignment.is_power_of_two() {
            (e.alignment as u64).max(PAGE_4K)
        } else {
            PAGE_4K
        };
        Some((size.next_multiple_of(PAGE_4K), align))
    }

    fn global(&self, id: u16) -> Option<&BareMemory<B1, B>> {
        self.globals.iter().find(|(i, _)| *i == id).map(|(_, m)| m)
    }
}

fn phys_entry<B1: Mmio, B: DmaBuffer>(
    id: u16,
    m: &BareMemory<B1, B>,
) -> NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY {
    let aperture = match m.location() {
        Location::Device => INITIALIZE_CTX_APERTURE_VIDMEM,
        Location::Host => INITIALIZE_CTX_APERTURE_COH_SYS,
    };
    NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY {
        gpuPhysAddr: m.phys().map_or(0, |p| p.base),
        gpuVirtAddr: 0,
        size: m.size(),
        physAttr: aperture | INITIALIZE_CTX_GPU_CACHEABLE_NO,
        bufferId: id,
        bInitialize: 1,
        bNonmapped: 1,
    }
}

/// A promote entry that initialises (`init`) and/or promotes the VA of (`va`) buffer `id`.
fn combined_entry<B1: Mmio, B: DmaBuffer>(
    id: u16,
    m: &BareMemory<B1, B>,
    init: bool,
    va: bool,
) -> NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY {
    let mut e = if init {
        phys_entry(id, m)
    } else {
        virt_entry(id, m)
    };
    if init && va {
        e.gpuVirtAddr = m.gpu_va();
        e.bNonmapped = 0;
    }
    e
}

fn virt_entry<B1: Mmio, B: DmaBuffer>(
    id: u16,
    m: &BareMemory<B1, B>,
) -> NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY {
    NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY {
        gpuVirtAddr: m.gpu_va(),
        bufferId: id,
        ..Default::default()
    }
}

/// SET_PAGE_DIRECTORY params for our root.
pub(crate) fn page_directory_params(
    root: PageDirectoryBase,
    root_entries: u32,
    vaspace: Handle,
) -> NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05 {
    use crate::gsp::client::{
        SET_PAGE_DIRECTORY_FLAGS_APERTURE_SYSMEM_COH,
        SET_PAGE_DIRECTORY_FLAGS_APERTURE_SYSMEM_NONCOH, SET_PAGE_DIRECTORY_FLAGS_APERTURE_VIDMEM,
    };
    let aperture = match root.aperture {
        TableAperture::Video => SET_PAGE_DIRECTORY_FLAGS_APERTURE_VIDMEM,
        TableAperture::SysCoherent => SET_PAGE_DIRECTORY_FLAGS_APERTURE_SYSMEM_COH,
        TableAperture::SysNonCoherent => SET_PAGE_DIRECTORY_FLAGS_APERTURE_SYSMEM_NONCOH,
    };
    NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05 {
        physAddress: root.addr,
        numEntries: root_entries,
        flags: aperture | SET_PAGE_DIRECTORY_FLAGS_ALL_CHANNELS,
        hVASpace: vaspace.0,
        chId: 0,
        // As UVM (nvGpuOpsSetPageDirectory): unicast to subdevice 0 ("always do unicast by
        // passing non-zero subDeviceId"), no PASID (-1 without ATS, gpu_get_internal_pasid).
        subDeviceId: 1,
        pasid: u32::MAX,
    }
}

/// `SPLIT_VAS_SERVER_RM_MANAGED_VA_START` (`gpu_vaspace.h`): where the kernel RM puts the
/// range GSP-RM manages in an RM-owned VA space (`gvaspaceReserveSplitVaSpace_IMPL`).
pub(crate) const SPLIT_VAS_SERVER_RM_MANAGED_VA_START: u64 = 0x1_0000_0000;
/// `SPLIT_VAS_SERVER_RM_MANAGED_VA_SIZE`: 512 MiB, one PD1 entry.
pub(crate) const SPLIT_VAS_SERVER_RM_MANAGED_VA_SIZE: u64 = 0x2000_0000;

/// `COPY_SERVER_RESERVED_PDES` params for the server-managed range above `levels`.
pub(crate) fn server_reserved_pdes_params(
    levels: &[ReservedLevel],
) -> NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS {
    let mut p = NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS {
        hSubDevice: 0,
        subDeviceId: 0,
        pageSize: SPLIT_VAS_SERVER_RM_MANAGED_VA_SIZE,
        virtAddrLo: SPLIT_VAS_SERVER_RM_MANAGED_VA_START,
        virtAddrHi: SPLIT_VAS_SERVER_RM_MANAGED_VA_START + SPLIT_VAS_SERVER_RM_MANAGED_VA_SIZE - 1,
        numLevelsToCopy: levels.len() as u32,
        ..Default::default()
    };
    for (dst, l) in p.levels.iter_mut().zip(levels) {
        *dst = NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_LEVEL {
            physAddress: l.table.addr,
            size: l.bytes,
            aperture: match l.table.aperture {
                TableAperture::Video => GMMU_APERTURE_VIDEO,
                TableAperture::SysCoherent => GMMU_APERTURE_SYS_COH,
                TableAperture::SysNonCoherent => GMMU_APERTURE_SYS_NONCOH,
            },
            pageShift: l.page_shift,
            _pad: [0; 3],
        };
    }
    p
}

/// The VA space params of the device layer's VA spaces: externally owned (SET_PAGE_DIRECTORY
/// gives GSP-RM our root), the whole range the format allows above the null page.
pub(crate) fn vaspace_alloc(va_limit: u64) -> VaSpaceAlloc {
    VaSpaceAlloc {
        index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
        flags: NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED,
        va_size: va_limit,
        va_base: PAGE_4K,
        big_page_size: 0,
        pasid: 0,
    }
}

impl<H: BarePlatform> BareRm<H> {
    fn internal_handle(&mut self) -> Handle {
        let h = self.gr.next_internal;
        self.gr.next_internal = h.wrapping_add(1);
        Handle(h)
    }

    /// Reads what the kernel RM reads from GSP-RM's internal client at load: context buffer
    /// sizes, the GR runlist and the fault method buffer size.
    pub(crate) fn query_internal(&mut self) -> Result<(), BareMetalError> {
        let (ic, isub) = (self.gr.internal_client, self.gr.internal_subdevice);
        let rpc = self.rpc()?;
        let mut info =
            NV2080_CTRL_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO_PARAMS::new_zeroed();
        rpc.rm_control(
            ic,
            isub,
            NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO,
            info.as_mut_bytes(),
        )?;
        let mut q = NV2080_CTRL_GR_GET_INFO_V2_PARAMS::query(&[gr_info::MAX_SUBCONTEXT_COUNT]);
        rpc.rm_control(ic, isub, NV2080_CTRL_CMD_GR_GET_INFO_V2, q.as_mut_bytes())?;
        let mut mb = NV2080_CTRL_CE_GET_FAULT_METHOD_BUFFER_SIZE_PARAMS::default();
        rpc.rm_control(
            ic,
            isub,
            NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE,
            mb.as_mut_bytes(),
        )?;
        let mut runlist = None;
        let mut base = 0u32;
        // The table has at most 256 devices, 32 per call.
        for _ in 0..8 {
            let mut t = NV2080_CTRL_FIFO_GET_DEVICE_INFO_TABLE_PARAMS {
                baseIndex: base,
                ..Default::default()
            };
            rpc.rm_control(
                ic,
                isub,
                NV2080_CTRL_CMD_FIFO_GET_DEVICE_INFO_TABLE,
                t.as_mut_bytes(),
            )?;
            if runlist.is_none() {
                runlist = t.runlist_of(NV2080_ENGINE_TYPE_GR0);
            }
            if t.bMore == 0 {
                break;
            }
            base += 32;
        }
        self.runlist = runlist.ok_or(BareMetalError::Setup(
            "GSP-RM's device info table has no GR0 engine (no runlist to ring)",
        ))?;
        if self.runlist > 0x7f {
            return Err(BareMetalError::Setup(
                "the GR runlist id does not fit the doorbell",
            ));
        }
        let gr = info.engineContextBuffersInfo.first().copied();
        check_gsp_sizes(gr.as_ref(), mb.size)?;
        self.gr.info = gr;
        self.gr.max_subctx = q.value(gr_info::MAX_SUBCONTEXT_COUNT).unwrap_or(0).min(256);
        self.mthdbuf_size = mb.size;
        if self.gr.size_of(promote_id::MAIN).is_none() {
            return Err(BareMetalError::Setup(
                "GSP-RM reports no size for the main GR context buffer",
            ));
        }
        Ok(())
    }

    /// A buffer for promote id `id`, zeroed (the client must clear buffers before
    /// initialisation), mapped in our VA space. `None` if the GPU has no such buffer.
    fn ctx_buffer(&mut self, id: u16) -> Result<Option<BareMem<H>>, BareMetalError> {
        let Some((size, align)) = self.gr.size_of(id) else {
            return Ok(None);
        };
        let req = MemoryRequest {
            size,
            location: Location::Device,
            cpu_access: true,
            align,
            purpose: Purpose::Buffer,
        };
        let m = self.mm.alloc(&self.hw.dma, &req, Owner::Backend)?;
        if let Err(e) = m.zero(0, m.size()) {
            let _ = self.mm.free(m);
            return Err(e.into());
        }
        Ok(Some(m))
    }

    fn promote(
        &mut self,
        client: Handle,
        subdevice: Handle,
        channel: Handle,
        entries: &[NV2080_CTRL_GPU_PROMOTE_CTX_BUFFER_ENTRY],
    ) -> Result<(), BareMetalError> {
        for chunk in entries.chunks(NV2080_CTRL_GPU_PROMOTE_CONTEXT_MAX_ENTRIES) {
            let mut p = NV2080_CTRL_GPU_PROMOTE_CTX_PARAMS {
                engineType: NV2080_ENGINE_TYPE_GR0,
                hChanClient: client.0,
                hObject: channel.0,
                entryCount: chunk.len() as u32,
                ..Default::default()
            };
            for (d, s) in p.promoteEntry.iter_mut().zip(chunk) {
                *d = *s;
            }
            self.rpc()?.rm_control(
                client,
                subdevice,
                NV2080_CTRL_CMD_GPU_PROMOTE_CTX,
                p.as_mut_bytes(),
            )?;
        }
        Ok(())
    }

    /// Initialises and promotes the context of a channel that just got a compute object.
    pub(crate) fn promote_user_context(
        &mut self,
        channel: Handle,
    ) -> Result<GrContext<H::Bar1, DmaBuf<H>>, BareMetalError> {
        let subdevice = self.user.map(|o| o.subdevice).ok_or(BareMetalError::Setup(
            "a compute object before the VA space was attached",
        ))?;
        let client = self.client;
        let mut ctx = GrContext { bufs: Vec::new() };
        let r = (|| {
            for id in PER_CHANNEL {
                if let Some(m) = self.ctx_buffer(id)? {
                    ctx.bufs.push((id, m));
                }
            }
            let phys: Vec<_> = ctx.bufs.iter().map(|(id, m)| phys_entry(*id, m)).collect();
            self.promote(client, subdevice, channel, &phys)?;
            let mut virt: Vec<_> = ctx.bufs.iter().map(|(id, m)| virt_entry(*id, m)).collect();
            for id in GLOBAL_VA {
                if let Some(m) = self.gr.global(id) {
                    virt.push(virt_entry(id, m));
                }
            }
            self.promote(client, subdevice, channel, &virt)
        })();
        match r {
            Ok(()) => Ok(ctx),
            Err(e) => {
                ctx.release(&mut self.mm);
                Err(e)
            }
        }
    }

    /// Reserves the server-managed range of the golden VA space (the first call; the tables
    /// stay pinned) and describes its levels as `COPY_SERVER_RESERVED_PDES` wants them
    /// (`_gvaspacePopulatePDEentries`): one `pageSize` entry at `SPLIT_VAS_SERVER_RM_MANAGED_VA_
    /// START`, every level from the root down to the one covering it.
    fn server_reserved_pdes(
        &mut self,
    ) -> Result<NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS, BareMetalError> {
        let levels = match &self.gr.server_levels {
            Some(l) => l.clone(),
            None => {
                let l = self.mm.reserve_server_range(
                    SPLIT_VAS_SERVER_RM_MANAGED_VA_START,
                    SPLIT_VAS_SERVER_RM_MANAGED_VA_SIZE,
                )?;
                self.gr.server_levels = Some(l.clone());
                l
            }
        };
        Ok(server_reserved_pdes_params(&levels))
    }

    /// Creates the golden context image: a channel with a compute object in GSP-RM's internal
    /// client, with the global buffers allocated, initialised and promoted.
    pub(crate) fn create_golden_image(
        &mut self,
        gpfifo_class: u32,
        compute_class: u32,
    ) -> Result<(), BareMetalError> {
        let ic = self.gr.internal_client;
        // Globals first: they outlive the golden channel.
        for id in GLOBAL_INIT.iter().chain(GLOBAL_VA.iter()).copied() {
            if self.gr.global(id).is_some() {
                continue;
            }
            if let Some(m) = self.ctx_buffer(id)? {
                self.gr.globals.push((id, m));
            }
        }
        let device = self.internal_handle();
        let mut p0080 = NV0080_ALLOC_PARAMETERS {
            deviceId: 0,
            hClientShare: ic.0,
            hTargetClient: 0,
            hTargetDevice: 0,
            flags: 0,
            _pad0: 0,
            vaSpaceSize: 0,
            vaStartInternal: 0,
            vaLimitInternal: 0,
            vaMode: NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES,
            _pad1: 0,
        };
        self.rpc()?
            .rm_alloc(ic, ic, device, NV01_DEVICE_0, p0080.as_mut_bytes())?;
        let r = self.golden_under(device, gpfifo_class, compute_class);
        if r.is_err()
            && let Ok(rpc) = self.rpc()
        {
            let _ = rpc.rm_free(ic, device);
        }
        r
    }

    fn golden_under(
        &mut self,
        device: Handle,
        gpfifo_class: u32,
        compute_class: u32,
    ) -> Result<(), BareMetalError> {
        let ic = self.gr.internal_client;
        let subdevice = self.internal_handle();
        let mut p2080 = NV2080_ALLOC_PARAMETERS { subDeviceId: 0 };
        self.rpc()?.rm_alloc(
            ic,
            device,
            subdevice,
            NV20_SUBDEVICE_0,
            p2080.as_mut_bytes(),
        )?;
        // An RM-owned VA space whose tables are ours, with the range GSP-RM manages handed
        // over, as the kernel RM builds it (kgraphicsCreateGoldenImageChannel_IMPL, then
        // gvaspaceCopyServerRmReservedPdesToServerRm_IMPL); tinygrad does the same.
        let vaspace = self.internal_handle();
        let mut vp = VaSpaceAlloc {
            index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
            flags: NV_VASPACE_ALLOCATION_FLAGS_PTETABLE_HEAP_MANAGED,
            ..Default::default()
        }
        .encode(RmAbi::R570);
        self.rpc()?
            .rm_alloc(ic, device, vaspace, FERMI_VASPACE_A, vp.as_mut_bytes())?;
        let mut pdes = self.server_reserved_pdes()?;
        self.rpc()?.rm_control(
            ic,
            vaspace,
            NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES,
            pdes.as_mut_bytes(),
        )?;

        // A bare channel (gpFifoOffset 0: no work is ever submitted on it, as in
        // kgraphicsCreateGoldenImageChannel_IMPL), kernel privilege, no error notifier.
        let instance = self.mm.alloc_vram_block(RAMIN_SIZE, RAMIN_SIZE)?;
        let bufs = (|| {
            let userd = self.hw.dma.alloc_dma(4096)?;
            userd.fill(0, 4096, 0)?;
            let mlen = (self.mthdbuf_size as usize)
                .max(4096)
                .next_multiple_of(4096);
            let mthdbuf = self.hw.dma.alloc_dma(mlen)?;
            mthdbuf.fill(0, mlen, 0)?;
            Ok::<_, BareMetalError>((userd, mthdbuf, mlen))
        })();
        let (userd, mthdbuf, mlen) = match bufs {
            Ok(b) => b,
            Err(e) => {
                self.mm.free_vram_block(instance);
                return Err(e);
            }
        };
        let mut cp = NV_CHANNEL_ALLOC_PARAMS {
            gpFifoOffset: 0,
            gpFifoEntries: 32,
            hVASpace: vaspace.0,
            engineType: NV2080_ENGINE_TYPE_GR0,
            internalFlags: channel_internal_flags(
                INTERNALFLAGS_PRIVILEGE_KERNEL,
                ERROR_NOTIFIER_TYPE_NONE,
                ERROR_NOTIFIER_TYPE_NONE,
            ),
            ..Default::default()
        };
        let vid = |base, size| NV_MEMORY_DESC_PARAMS {
            base,
            size,
            addressSpace: ADDR_FBMEM,
            cacheAttrib: NV_MEMORY_UNCACHED,
        };
        let sys = |base, size| NV_MEMORY_DESC_PARAMS {
            base,
            size,
            addressSpace: ADDR_SYSMEM,
            cacheAttrib: NV_MEMORY_CACHED,
        };
        cp.instanceMem = vid(instance.addr, RAMIN_SIZE);
        cp.ramfcMem = vid(instance.addr, RAMFC_SIZE);
        cp.userdMem = sys(userd.dev_addr(), crate::channel::gpfifo::USERD_SIZE);
        cp.mthdbufMem = sys(mthdbuf.dev_addr(), mlen as u64);
        let channel = self.internal_handle();
        let mut golden = Golden {
            device,
            instance,
            userd,
            mthdbuf,
            ctx: GrContext { bufs: Vec::new() },
        };
        let r = (|| {
            self.rpc()?
                .rm_alloc(ic, device, channel, gpfifo_class, cp.as_mut_bytes())?;
            let object = self.internal_handle();
            self.rpc()?
                .rm_alloc(ic, channel, object, compute_class, &mut [])?;
            for id in PER_CHANNEL {
                if let Some(m) = self.ctx_buffer(id)? {
                    golden.ctx.bufs.push((id, m));
                }
            }
            // One promote with each buffer's initialisation and VA together, as the kernel RM
            // sends it for an RM-owned VA space (kgrobjPromoteContext_IMPL; tinygrad too).
            let mut entries: Vec<_> = golden
                .ctx
                .bufs
                .iter()
                .map(|(id, m)| combined_entry(*id, m, true, true))
                .collect();
            let mut globals: Vec<u16> = GLOBAL_INIT.to_vec();
            globals.extend(GLOBAL_VA.iter().filter(|id| !GLOBAL_INIT.contains(id)));
            for id in globals {
                if let Some(m) = self.gr.global(id) {
                    entries.push(combined_entry(
                        id,
                        m,
                        GLOBAL_INIT.contains(&id),
                        GLOBAL_VA.contains(&id),
                    ));
                }
            }
            if entries.len() > NV2080_CTRL_GPU_PROMOTE_CONTEXT_MAX_ENTRIES {
                return Err(BareMetalError::Setup(
                    "more golden-context buffers than one promote takes",
                ));
            }
            self.promote(ic, subdevice, channel, &entries)
        })();
        match r {
            Ok(()) => {
                self.gr.golden = Some(golden);
                Ok(())
            }
            Err(e) => {
                golden.release(&mut self.mm);
                Err(e)
            }
        }
    }

    /// Frees the golden channel (in GSP-RM and here) and the global buffers.
    pub(crate) fn release_gr(&mut self) {
        if let Some(g) = self.gr.golden.take() {
            let ic = self.gr.internal_client;
            if let Ok(rpc) = self.rpc()
                && let Err(e) = rpc.rm_free(ic, g.device)
            {
                log::warn!("freeing the golden-image channel: {e}");
            }
            g.release(&mut self.mm);
        }
        for (_, m) in core::mem::take(&mut self.gr.globals) {
            let _ = self.mm.free(m);
        }
    }
}

impl<B1: Mmio + Clone, B: DmaBuffer> Golden<B1, B> {
    fn release<M: Mmio, C: Clock>(self, mm: &mut Mm<B1, B, M, C>) {
        mm.free_vram_block(self.instance);
        self.ctx.release(mm);
        drop((self.userd, self.mthdbuf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::entry::TableRef;

    #[test]
    fn server_reserved_pdes_describe_the_kernel_rms_range_and_every_level() {
        // _gvaspacePopulatePDEentries: pageSize = NVBIT64(GMMU_PD1_VADDR_BIT_LO) (512 MiB), the
        // range [SPLIT_VAS_SERVER_RM_MANAGED_VA_START, + _SIZE), one level per table above.
        let lvl = |aperture, addr, bytes, page_shift| ReservedLevel {
            table: TableRef { aperture, addr },
            bytes,
            page_shift,
        };
        let levels = [
            lvl(TableAperture::Video, 0x10_0000, 4096, 47),
            lvl(TableAperture::SysCoherent, 0x20_0000, 4096, 38),
            lvl(TableAperture::SysNonCoherent, 0x30_0000, 4096, 29),
        ];
        let p = server_reserved_pdes_params(&levels);
        assert_eq!(p.pageSize, 1 << 29);
        assert_eq!(
            (p.virtAddrLo, p.virtAddrHi),
            (1 << 32, (1 << 32) + (1 << 29) - 1)
        );
        assert_eq!((p.hSubDevice, p.subDeviceId, p.numLevelsToCopy), (0, 0, 3));
        let got: Vec<_> = p.levels[..3]
            .iter()
            .map(|l| (l.physAddress, l.size, l.aperture, l.pageShift))
            .collect();
        assert_eq!(
            got,
            [
                (0x10_0000, 4096, 1, 47),
                (0x20_0000, 4096, 4, 38),
                (0x30_0000, 4096, 3, 29)
            ]
        );
        assert_eq!(p.levels[3], Default::default());
    }
}
