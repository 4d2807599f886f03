//! The bare-metal [`Backend`]: GSP boot, GSP RPC, our own page tables and the usermode
//! doorbell in BAR0, over the `hal` traits only.
//!
//! [`BareMetalBackend::open`] takes the hardware of a [`BarePlatform`] (BAR0, BAR1, DMA memory,
//! clock, PCI config: `VfioGpu`'s `bar0()/bar1()/dma()/clock()/pci()`, or the simulator's) and
//! the firmware, and:
//!
//! 1. checks BAR1 covers the framebuffer (CPU access to VRAM goes through BAR1 in physical
//!    mode; small-BAR systems get [`BareMetalError::SmallBar`] with what to do);
//! 2. boots GSP-RM ([`crate::gsp::boot::boot`]);
//! 3. puts BAR1 in physical mode (GSP-RM leaves it translated by its own tables);
//! 4. builds the memory manager: a VRAM allocator over the FB layout the boot produced (the
//!    GSP's reservations excluded), a VA allocator, and a [`crate::mm::Mapper`] with its tables
//!    in VRAM (through BAR1) or host memory;
//! 5. allocates our RM client, reads from GSP-RM's internal client what the kernel RM reads at
//!    load (GR context buffer sizes, the GR runlist, the fault method buffer size), and
//!    creates the golden context image (see the `gr` submodule).
//!
//! Then the device layer runs over it ([`crate::device::Device::open`]): its `Rm` is
//! [`BareRm`] (GSP RPCs, r570 layouts, plus the kernel RM's work: channel memory descriptors,
//! GR context promotion, work-submit tokens with the runlist), `attach` points GSP-RM at our
//! page directory with SET_PAGE_DIRECTORY, memory comes from our allocators, the doorbell is
//! the usermode block at BAR0 0xbb0000, and GSP events (RC, MMU faults, Xids) become
//! [`RmEvent`]s. Dropping the backend (or [`BareMetalBackend::unload`]) shuts GSP-RM down so
//! the next boot works without a reset.

mod gr;
mod memory;
mod peer;
mod rm;

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use core::fmt;

use zerocopy::{FromZeros, IntoBytes};

pub use memory::{BareMemory, TablePlacement};
pub use peer::PeerPlatform;
pub use rm::BareRm;

use super::{
    Backend, BackendError, Location, MemoryRequest, PeerMapping, PeerPathInfo, PhysRange, RmEvent,
    RmObjects, VaWindow,
};
use crate::chip::identify_mmio;
use crate::chip::{Architecture, ChipError, ChipInfo, Chipset};
use crate::gsp::GspError;
use crate::gsp::boot::firmware::BootFirmware;
use crate::gsp::boot::sequencer::BootEvents;
use crate::gsp::boot::{
    BootError, BootHw, BootObserver, BootOptions, BootPhase, BootState, NoObserver, UnloadReport,
    boot,
};
use crate::gsp::rpc::{ClientConfig, GspRm, GspRpc, NV0000_ALLOC_PARAMETERS};
use crate::gsp::sysinfo::GspStaticConfigInfo;
use crate::hal::{Clock, DmaAllocator, HalError, Mmio, PciConfig};
use crate::mm::vram::FbSizeSource;
use crate::mm::{
    AllocError, FbLayout, FbOwner, MmError, MmuFormat, MmuInvalidate, PageDirectoryBase,
};
use crate::regs::Register;
use crate::regs::pbus::{NV_PBUS_BAR1_BLOCK, NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR};
use crate::regs::usermode::USERMODE_BLOCK_SIZE;
use crate::rm::alloc::{NV_CHANNEL_ALLOC_PARAMS, VaSpaceAlloc};
use crate::rm::class::NV01_ROOT;
use crate::rm::{Handle, RmError};
use memory::{Mm, Owner};

/// The host side a bare-metal GPU runs on: BAR0, BAR1, DMA memory, a clock and PCI
/// configuration space. One type names all five (`VfioPlatform` on Linux, the simulator's
/// `SimPlatform`), so the backend, its RM and their impls take one parameter instead of five.
pub trait BarePlatform {
    /// BAR0: registers and the usermode doorbell.
    type Bar0: Mmio + Clone;
    /// BAR1 in physical mode: the CPU's window into video memory.
    type Bar1: Mmio + Clone;
    /// DMA memory (GSP-RM's queues, host-memory page tables and buffers).
    type Dma: DmaAllocator;
    /// Time, for every timeout.
    type Clock: Clock + Clone;
    /// PCI configuration space.
    type Pci: PciConfig;
}

/// The boot hardware of platform `H` (what [`BareMetalBackend::open`] takes).
pub type BareHw<H> = BootHw<
    <H as BarePlatform>::Bar0,
    <H as BarePlatform>::Dma,
    <H as BarePlatform>::Clock,
    <H as BarePlatform>::Pci,
>;

/// A DMA buffer of platform `H`.
pub type DmaBuf<H> = <<H as BarePlatform>::Dma as DmaAllocator>::Buffer;

/// The GSP RPC transport of platform `H`.
pub type BareRpc<H> =
    GspRpc<DmaBuf<H>, <H as BarePlatform>::Bar0, <H as BarePlatform>::Clock, BootEvents>;

/// The GPU memory the backend of platform `H` hands out.
pub type BareMem<H> = BareMemory<<H as BarePlatform>::Bar1, DmaBuf<H>>;

/// BAR0 offset of the usermode block (`NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET + 0x30000`).
pub const USERMODE_BAR0_OFFSET: usize = 0x00bb_0000;

/// Settings of the bare-metal backend.
#[derive(Debug, Clone)]
pub struct BareMetalOptions {
    /// What [`Backend::describe`] says, e.g. `vfio:0000:01:00.0 (H200, bare metal)`: the
    /// device spec, then a description in parentheses (peer errors name a GPU by the part
    /// before ` (`).
    pub label: String,
    /// Our RM client and where its handles start.
    pub client: ClientConfig,
    /// First handle for the objects nvbare creates in GSP-RM's internal client.
    pub internal_first_handle: u32,
    /// The GPU VA window memory is mapped into (default [`VaWindow::DEFAULT`]); a
    /// [`VaWindow`] ends at or below 2^40, as GP entries and semaphores need, and inside every
    /// MMU format's VA space.
    pub va_window: VaWindow,
    /// Bytes of page-table memory (every 4 KiB mapped with small pages costs 8 bytes).
    pub table_bytes: u64,
    /// Where the page tables live.
    pub tables: TablePlacement,
    /// Create the golden context image after boot (the kernel RM always does).
    pub golden_image: bool,
    /// Where the GPU sits among the host's GPUs (its DMA address space, where its BAR1 is
    /// visible to the others); `None` for a GPU opened on its own, which has no peers.
    pub peer: Option<PeerPlatform>,
}

impl Default for BareMetalOptions {
    fn default() -> Self {
        BareMetalOptions {
            label: String::from("bare metal"),
            client: ClientConfig::default(),
            internal_first_handle: 0xcf80_0000,
            va_window: VaWindow::DEFAULT,
            table_bytes: 16 << 20,
            tables: TablePlacement::Vram,
            golden_image: true,
            peer: None,
        }
    }
}

/// The smallest BAR1 nvbare starts with: its page tables, channels and the runtime's memory
/// must fit below its end.
pub const MIN_BAR1: u64 = 64 << 20;

/// The reservation of the VRAM beyond a BAR1 smaller than the framebuffer.
pub const BEYOND_BAR1: &str = "beyond BAR1";

/// Why the bare-metal backend could not start or do something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BareMetalError {
    /// The GSP boot (or unload) failed.
    Boot(BootError),
    /// The chip is not one nvbare knows.
    Chip(ChipError),
    /// BAR1 does not reach the memory nvbare needs the CPU to see.
    SmallBar {
        /// BAR1 bytes.
        bar1: u64,
        /// Bytes it would have to cover.
        needed: u64,
    },
    /// Talking to GSP-RM failed.
    Gsp(GspError),
    /// An RM call failed.
    Rm(RmError),
    /// Page tables.
    Mm(MmError),
    /// VRAM or VA allocator.
    Alloc(AllocError),
    /// A hardware access failed.
    Hal(HalError),
    /// Out of memory of this kind.
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// Where.
        location: Location,
    },
    /// GSP-RM reported a size larger than nvbare accepts for a buffer it allocates from it
    /// (the limits are in `docs/limits.md`).
    GspSizeTooLarge {
        /// What the size is for.
        what: &'static str,
        /// The size GSP-RM reported.
        value: u64,
        /// The largest accepted.
        max: u64,
    },
    /// Anything else.
    Setup(&'static str),
}

impl fmt::Display for BareMetalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BareMetalError::Boot(e) => write!(f, "{e}"),
            BareMetalError::Chip(e) => write!(f, "{e}"),
            BareMetalError::SmallBar { bar1, needed } => write!(
                f,
                "BAR1 is {} MiB but nvbare needs it to cover {} MiB of video memory (it reaches \
                 VRAM through BAR1 in physical mode, and hands out only VRAM below BAR1's end); \
                 enable \"Above 4G decoding\" and \"Resizable BAR\" in the firmware setup, \
                 then `nvbare unbind` and `nvbare bind` the GPU to grow BAR1 (docs/vfio.md, \
                 section 5)",
                bar1 >> 20,
                needed.div_ceil(1 << 20)
            ),
            BareMetalError::Gsp(e) => write!(f, "GSP-RM: {e}"),
            BareMetalError::Rm(e) => write!(f, "{e}"),
            BareMetalError::Mm(e) => write!(f, "page tables: {e}"),
            BareMetalError::Alloc(e) => write!(f, "memory allocator: {e}"),
            BareMetalError::Hal(e) => write!(f, "{e}"),
            BareMetalError::OutOfMemory {
                requested,
                location,
            } => write!(
                f,
                "out of {location}: {requested} bytes requested; free buffers or ask for less"
            ),
            BareMetalError::GspSizeTooLarge { what, value, max } => write!(
                f,
                "GSP-RM reported {value:#x} bytes for {what}, more than the {max:#x} nvbare \
                 accepts (docs/limits.md): its answer is corrupt or this firmware is not one \
                 nvbare supports; reset the GPU, and report it if the firmware is r570.144"
            ),
            BareMetalError::Setup(s) => f.write_str(s),
        }
    }
}

impl core::error::Error for BareMetalError {}

macro_rules! from_err {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for BareMetalError {
            fn from(e: $t) -> Self {
                BareMetalError::$v(e)
            }
        }
    )*};
}
from_err!(BootError => Boot, ChipError => Chip, GspError => Gsp, RmError => Rm, MmError => Mm,
    AllocError => Alloc, HalError => Hal);

impl From<BareMetalError> for BackendError {
    fn from(e: BareMetalError) -> Self {
        match e {
            BareMetalError::Rm(r) => BackendError::Rm(r),
            BareMetalError::Hal(h) => BackendError::Hal(h),
            BareMetalError::OutOfMemory {
                requested,
                location,
            } => BackendError::OutOfMemory {
                requested,
                location,
            },
            other => BackendError::Other(other.to_string()),
        }
    }
}

/// The usermode block in BAR0, with the block's own offsets (doorbell at 0x90).
#[derive(Debug, Clone)]
pub struct UsermodeWindow<M> {
    bar0: M,
}

impl<M: Mmio> Mmio for UsermodeWindow<M> {
    fn size(&self) -> usize {
        USERMODE_BLOCK_SIZE
    }
    fn read32(&self, offset: usize) -> u32 {
        if offset >= USERMODE_BLOCK_SIZE {
            return u32::MAX;
        }
        self.bar0.read32(USERMODE_BAR0_OFFSET + offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        if offset < USERMODE_BLOCK_SIZE {
            self.bar0.write32(USERMODE_BAR0_OFFSET + offset, value)
        }
    }
}

/// Puts BAR1 in physical mode (a linear window onto VRAM), as tinygrad does after
/// GSP_INIT_DONE and `kbusTeardownMailbox_GH100` does on Hopper.
pub fn set_bar1_physical<M: Mmio + ?Sized>(bar0: &M, chip: &ChipInfo) {
    match chip.architecture {
        Architecture::Turing | Architecture::Ampere | Architecture::Ada => {
            NV_PBUS_BAR1_BLOCK::new().write(bar0);
        }
        Architecture::Hopper | Architecture::Blackwell => {
            NV_VIRTUAL_FUNCTION_PRIV_FUNC_BAR1_BLOCK_LOW_ADDR::update(bar0, |v| {
                v.with_mode_virtual(false).with_target(0)
            });
        }
    }
}

/// A GPU driven bare metal: GSP-RM, our page tables, our allocators. See the
/// [module documentation](self).
pub struct BareMetalBackend<H: BarePlatform> {
    /// On the heap, as `state`: ~15 KiB (memory manager, GR setup, channel records).
    rm: Box<BareRm<H>>,
    /// On the heap: GSP-RM's static info and the boot records make it ~4 KiB, and a backend
    /// is moved by value (into [`crate::device::Device::open`], and along every caller's
    /// path, a slot per move in a debug build's frame).
    state: Option<Box<BootState<DmaBuf<H>>>>,
    label: String,
    client_allocated: bool,
    /// From [`BareMetalOptions::peer`].
    peer: Option<PeerPlatform>,
    /// BAR1 bus addresses of the peers [`Backend::enable_peer`] enabled.
    peers_enabled: alloc::vec::Vec<u64>,
}

impl<H: BarePlatform> fmt::Debug for BareMetalBackend<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BareMetalBackend")
            .field("label", &self.label)
            .field("rm", &self.rm)
            .field("loaded", &self.state.is_some())
            .finish_non_exhaustive()
    }
}

impl<H: BarePlatform> BareMetalBackend<H> {
    /// Boots GSP-RM on `hw` with `fw` and sets everything up (see the module documentation).
    /// Boot phases go to `obs`. On failure after the boot, GSP-RM is unloaded again.
    pub fn open<F, O>(
        hw: BareHw<H>,
        bar1: H::Bar1,
        fw: &F,
        boot_opts: &BootOptions<'_>,
        obs: &mut O,
        opts: BareMetalOptions,
    ) -> Result<Self, BareMetalError>
    where
        F: BootFirmware,
        O: BootObserver + ?Sized,
    {
        // The size register is the chip's (`FbSizeSource`); an unknown chip is left for `boot`
        // to name, and read as GA102 on to tell a lost device from it.
        let source = identify_mmio(&hw.bar0).map_or(FbSizeSource::UsableFbSizeInMb, |c| {
            FbSizeSource::for_chip(c.info)
        });
        let raw = hw.bar0.try_read32(source.offset())?;
        if raw == u32::MAX {
            return Err(BareMetalError::Hal(HalError::DeviceLost));
        }
        let bar1_size = bar1.size() as u64;
        if bar1_size < MIN_BAR1 {
            return Err(BareMetalError::SmallBar {
                bar1: bar1_size,
                needed: source.decode(raw).min(MIN_BAR1),
            });
        }
        let vram = source.decode(raw);
        if bar1_size < vram {
            // Printed under the first boot phase; the reservation follows the boot.
            obs.detail(
                BootPhase::Identify,
                format_args!(
                    "BAR1 is {} MiB: device memory is limited to the first {} MiB of {} MiB of \
                     VRAM (a larger BAR1, through Resizable BAR where the GPU has it, lifts this)",
                    bar1_size >> 20,
                    bar1_size >> 20,
                    vram >> 20
                ),
            );
        }
        let booted = boot(&hw, fw, boot_opts, obs)?;
        let (rpc, state) = booted.split();
        let chip = state.chip().info;
        let fmt = MmuFormat::for_chip(chip);
        set_bar1_physical(&hw.bar0, chip);
        let inval = MmuInvalidate::new(hw.bar0.clone(), hw.clock.clone());
        // The CPU reaches VRAM through BAR1 in physical mode: with a BAR1 smaller than the
        // framebuffer (Turing has no Resizable BAR), only VRAM below its end is handed out.
        let mut layout = state.fb_layout().clone();
        let fb = layout.fb_size();
        let capped = if bar1_size < fb {
            layout.reserve(bar1_size, fb - bar1_size, FbOwner::Other(BEYOND_BAR1))
        } else {
            Ok(())
        };
        let mm = match capped.map_err(BareMetalError::from).and_then(|()| {
            Mm::new(
                fmt,
                &layout,
                bar1,
                &hw.dma,
                inval,
                opts.tables,
                opts.table_bytes,
                (opts.va_window.base(), opts.va_window.size()),
            )
        }) {
            Ok(m) => m,
            Err(e) => {
                if let Err(u) = state.unload(rpc, &hw.bar0, &hw.clock, obs, None) {
                    log::warn!("unloading GSP-RM after a failed start: {u}");
                }
                return Err(e);
            }
        };
        let internal = (
            Handle(state.static_info().hInternalClient),
            Handle(state.static_info().hInternalSubdevice),
        );
        let gsp = GspRm::with_existing_client(rpc, opts.client);
        let mut rm = BareRm::new(hw, gsp, opts.client.client, chip, mm);
        rm.gr.internal_client = internal.0;
        rm.gr.internal_subdevice = internal.1;
        rm.gr.next_internal = opts.internal_first_handle;
        let mut be = BareMetalBackend {
            rm: Box::new(rm),
            state: Some(Box::new(state)),
            label: opts.label.clone(),
            client_allocated: false,
            peer: opts.peer.clone(),
            peers_enabled: alloc::vec::Vec::new(),
        };
        // On failure `be` drops, which unloads GSP-RM.
        be.setup(&opts)?;
        Ok(be)
    }

    fn setup(&mut self, opts: &BareMetalOptions) -> Result<(), BareMetalError> {
        let client = opts.client.client;
        let mut p = NV0000_ALLOC_PARAMETERS::new_zeroed();
        p.hClient = client.0;
        p.processName[..6].copy_from_slice(b"nvbare");
        self.rm
            .rpc()?
            .rm_alloc(client, Handle(0), client, NV01_ROOT, p.as_mut_bytes())?;
        self.client_allocated = true;
        self.rm.query_internal()?;
        if opts.golden_image {
            let c = self.rm.chip.classes;
            self.rm.create_golden_image(c.gpfifo, c.compute)?;
        }
        Ok(())
    }

    /// The chip.
    pub fn chip(&self) -> &'static ChipInfo {
        self.rm.chip
    }

    /// GSP-RM's static info (`None` once unloaded).
    pub fn static_info(&self) -> Option<&GspStaticConfigInfo> {
        self.state.as_ref().map(|s| s.static_info())
    }

    /// The framebuffer reservations the VRAM allocator excludes (`None` once unloaded).
    pub fn fb_layout(&self) -> Option<&FbLayout> {
        self.state.as_ref().map(|s| s.fb_layout())
    }

    /// Time per boot phase.
    pub fn boot_timings(&self) -> &[(BootPhase, core::time::Duration)] {
        self.state.as_ref().map_or(&[], |s| s.timings())
    }

    /// Our root page directory.
    pub fn page_directory(&self) -> PageDirectoryBase {
        self.rm.mm.root()
    }

    /// The page-table format.
    pub fn mmu_format(&self) -> MmuFormat {
        self.rm.mm.mapper.format()
    }

    /// Page tables in use and free, and the page-table region in VRAM (if there).
    pub fn page_tables(&self) -> (u32, u32, Option<u64>) {
        (
            self.rm.mm.mapper.tables_in_use(),
            self.rm.mm.mapper.tables_free(),
            self.rm.mm.table_vram(),
        )
    }

    /// Map statistics (TLB invalidates, PTEs written...).
    pub fn map_stats(&self) -> crate::mm::MapStats {
        self.rm.mm.mapper.stats()
    }

    /// Free VRAM and the end of the VRAM the backend hands out: the framebuffer's, or BAR1's
    /// where BAR1 is smaller.
    pub fn vram(&self) -> (u64, u64) {
        let end = self.rm.mm.fb_end().min(self.rm.mm.bar1_size());
        (self.rm.mm.vram_free(), end)
    }

    /// The GR runlist (ORed into work-submit tokens).
    pub fn runlist(&self) -> u32 {
        self.rm.runlist
    }

    /// Whether the golden context image exists.
    pub fn golden_image(&self) -> bool {
        self.rm.gr.golden.is_some()
    }

    /// The hardware.
    pub fn hw(&self) -> &BareHw<H> {
        &self.rm.hw
    }

    /// The GSP RPC transport, for diagnostics and tests (`None` once unloaded).
    pub fn transport(&mut self) -> Option<&mut BareRpc<H>> {
        self.rm.gsp.as_mut().map(|g| g.rpc())
    }

    /// Hands every GSP event since the last call to `out`, in order (for watchers such as
    /// `nvbare events`; the device layer still gets the events it reports). The first call
    /// starts keeping copies; `Ok(false)` once GSP-RM is unloaded.
    pub fn watch_gsp_events(
        &mut self,
        out: &mut dyn FnMut(&crate::gsp::events::GspEvent),
    ) -> Result<bool, crate::gsp::GspError> {
        self.rm.watch_events(out)
    }

    /// Decodes what GSP-RM's LIBOS logs gained since `cursor` (records named by `image`, the
    /// firmware's logging sections, when given; raw words otherwise).
    pub fn read_new_logs(
        &self,
        cursor: &mut crate::gsp::boot::LogCursor,
        image: Option<&dyn crate::gsp::log::LogImage>,
        out: &mut dyn FnMut(core::fmt::Arguments<'_>),
    ) {
        if let Some(s) = &self.state {
            s.read_new_logs(cursor, image, out);
        }
    }

    /// Our RM client and GSP-RM's internal client.
    pub fn clients(&self) -> (Handle, Handle) {
        (self.rm.client, self.rm.gr.internal_client)
    }

    /// Shuts GSP-RM down (UNLOADING_GUEST_DRIVER, then the per-family teardown) so the next
    /// boot works without a reset. Objects left in GSP-RM are freed first.
    pub fn unload<O: BootObserver + ?Sized>(
        mut self,
        obs: &mut O,
    ) -> Result<UnloadReport, BareMetalError> {
        self.shutdown(obs)?
            .ok_or(BareMetalError::Setup("GSP-RM was already unloaded"))
    }

    fn shutdown<O: BootObserver + ?Sized>(
        &mut self,
        obs: &mut O,
    ) -> Result<Option<UnloadReport>, BareMetalError> {
        let Some(state) = self.state.take() else {
            return Ok(None);
        };
        self.rm.detach();
        self.rm.release_gr();
        if self.client_allocated {
            self.client_allocated = false;
            let c = self.rm.client;
            if let Ok(rpc) = self.rm.rpc()
                && let Err(e) = rpc.rm_free(c, c)
            {
                log::warn!("freeing the RM client before unload: {e}");
            }
        }
        let Some(gsp) = self.rm.gsp.take() else {
            return Err(BareMetalError::Setup(
                "no GSP transport left to unload with",
            ));
        };
        let rpc = match gsp.close() {
            Ok(r) => r,
            Err(e) => e.rpc,
        };
        let hw = &self.rm.hw;
        Ok(Some((*state).unload(rpc, &hw.bar0, &hw.clock, obs, None)?))
    }
}

impl<H: BarePlatform> Drop for BareMetalBackend<H> {
    fn drop(&mut self) {
        if self.state.is_some() {
            match self.shutdown(&mut NoObserver) {
                Ok(_) => log::info!("{}: GSP-RM unloaded", self.label),
                Err(e) => log::warn!("{}: unloading GSP-RM failed: {e}", self.label),
            }
        }
    }
}

impl<H: BarePlatform> Backend for BareMetalBackend<H> {
    type Rm = BareRm<H>;
    type Memory = BareMem<H>;
    type Usermode = UsermodeWindow<H::Bar0>;
    type Clock = H::Clock;

    fn describe(&self) -> String {
        self.label.clone()
    }

    fn rm(&mut self) -> &mut Self::Rm {
        &mut self.rm
    }

    fn memory_info(&self) -> Option<(u64, u64)> {
        Some(self.vram())
    }

    fn clock(&self) -> &H::Clock {
        &self.rm.hw.clock
    }

    fn chipset(&self) -> Option<Chipset> {
        Some(self.rm.chip.chipset)
    }

    fn vaspace_params(&self) -> VaSpaceAlloc {
        gr::vaspace_alloc(self.rm.mm.mapper.format().va_limit())
    }

    fn attach(&mut self, objects: &RmObjects) -> Result<(), BackendError> {
        let pd = gr::page_directory_params(
            self.rm.mm.root(),
            self.rm.mm.mapper.format().root_entries(),
            objects.vaspace,
        );
        self.rm
            .rpc()?
            .set_page_directory(objects.client, objects.device, &pd)
            .map_err(BareMetalError::from)?;
        self.rm.user = Some(*objects);
        Ok(())
    }

    fn alloc_memory(&mut self, req: &MemoryRequest) -> Result<Self::Memory, BackendError> {
        if self.rm.user.is_none() {
            return Err(BackendError::Unsupported("allocating memory before attach"));
        }
        Ok(self.rm.mm.alloc(&self.rm.hw.dma, req, Owner::User)?)
    }

    fn free_memory(&mut self, mem: Self::Memory) -> Result<(), BackendError> {
        Ok(self.rm.mm.free(mem)?)
    }

    fn map_usermode(&mut self, class: u32) -> Result<Self::Usermode, BackendError> {
        // No RM object: on bare metal the doorbell is simply BAR0's usermode block.
        let _ = class;
        Ok(UsermodeWindow {
            bar0: self.rm.hw.bar0.clone(),
        })
    }

    fn prepare_channel(
        &mut self,
        params: &mut NV_CHANNEL_ALLOC_PARAMS,
        ring: &Self::Memory,
        userd_offset: u64,
        notifier: &Self::Memory,
    ) -> Result<(), BackendError> {
        Ok(self
            .rm
            .prepare_channel(params, ring, userd_offset, notifier)?)
    }

    fn detach(&mut self) {
        self.rm.detach();
    }

    fn poll_events(&mut self) -> Option<RmEvent> {
        self.rm.poll_event()
    }

    fn enable_peer(&mut self, peer: &Self) -> Result<PeerPathInfo, BackendError> {
        self.peer_enable(peer)
    }

    fn map_peer_memory(
        &mut self,
        peer: &Self,
        mem: &Self::Memory,
    ) -> Result<PeerMapping, BackendError> {
        self.peer_map(peer, mem)
    }

    fn unmap_peer_memory(&mut self, mapping: PeerMapping) -> Result<(), BackendError> {
        self.peer_unmap(mapping)
    }
}

/// Where a piece of memory is, for messages.
pub fn describe_phys(p: &PhysRange) -> String {
    alloc::format!("{} {:#x}+{:#x}", p.location, p.base, p.size)
}
