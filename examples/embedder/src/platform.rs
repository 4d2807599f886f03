//! The `hal` traits over what the embedder's OS provides. **Skeleton**: every access is a
//! volatile load or store at an address the OS handed over in [`PlatformInfo`]; nothing here
//! maps memory, enumerates PCI or programs an IOMMU. That is the OS's job, and what the OS
//! must guarantee about each address is written next to the type that uses it (and in
//! docs/embedding.md).

use core::time::Duration;

use nvbare_core::device::baremetal::BarePlatform;
use nvbare_core::hal::{
    Clock, DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig, check_mmio, check_range,
};
use nvbare_core::mm::{FitPolicy, RangeAllocator};

/// What the OS knows about the GPU and hands to [`crate::nvbare_embedder_main`].
///
/// Every `*_virt` is a CPU virtual address the OS has mapped; every `*_bus` is the address the
/// GPU (or a PCI peer) uses for the same thing.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PlatformInfo {
    /// BAR0 (registers, 16 MiB or 32 MiB) mapped **uncached** (UC, strongly ordered).
    pub bar0_virt: usize,
    /// BAR0 bytes.
    pub bar0_size: usize,
    /// BAR0 bus address (for `GspSystemInfo`).
    pub bar0_bus: u64,
    /// BAR1 (the window onto VRAM) mapped uncached, or write-combined (see [`PhysMmio`]).
    /// It must cover all of VRAM, or the backend stops with `BareMetalError::SmallBar`.
    pub bar1_virt: usize,
    /// BAR1 bytes.
    pub bar1_size: usize,
    /// BAR1 bus address.
    pub bar1_bus: u64,
    /// BAR2/3 bus address (`GspSystemInfo.gpuPhysInstAddr`; 0 if unknown).
    pub bar3_bus: u64,
    /// The function's 4 KiB of PCIe configuration space (ECAM), mapped uncached.
    pub config_virt: usize,
    /// PCI bus, device and function numbers of the GPU.
    pub bus: u8,
    /// PCI device number.
    pub device: u8,
    /// PCI function number.
    pub function: u8,
    /// One range of host memory the GPU may reach by DMA: CPU-mapped write-back (x86 PCIe
    /// DMA snoops the caches), `dma_bus` the GPU's address of its first byte, contiguous in
    /// the GPU's address space (an IOVA range behind an IOMMU, physical memory without one).
    /// At least 80 MiB: the GSP-RM image alone takes 60.7 MiB in one buffer.
    pub dma_virt: usize,
    /// The GPU's address of `dma_virt`.
    pub dma_bus: u64,
    /// Bytes of the range (a multiple of 4 KiB, `dma_virt` and `dma_bus` 4 KiB aligned).
    pub dma_size: usize,
    /// TSC ticks per second (invariant TSC assumed).
    pub tsc_hz: u64,
    /// The r570.144 firmware files, `firmware_count` of them.
    pub firmware: *const FirmwareBlob,
    /// Entries at `firmware`.
    pub firmware_count: usize,
}

/// A firmware file in memory, by its path under the firmware directory (e.g.
/// `nvidia/ad102/gsp/gsp-570.144.bin`), as `FirmwareSet::load` asks for it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FirmwareBlob {
    /// UTF-8 path.
    pub path: *const u8,
    /// Bytes of the path.
    pub path_len: usize,
    /// The file.
    pub data: *const u8,
    /// Bytes of the file.
    pub len: usize,
}

impl PlatformInfo {
    /// The firmware file at `path`, if the OS provided it.
    ///
    /// # Safety
    ///
    /// `firmware` must point at `firmware_count` valid entries whose pointers are valid for
    /// their lengths and not written while the returned slice lives.
    pub unsafe fn firmware_file(&self, path: &str) -> Option<&'static [u8]> {
        if self.firmware.is_null() {
            return None;
        }
        // SAFETY: the caller's contract.
        let blobs = unsafe { core::slice::from_raw_parts(self.firmware, self.firmware_count) };
        blobs.iter().find_map(|b| {
            // SAFETY: the caller's contract.
            let p = unsafe { core::slice::from_raw_parts(b.path, b.path_len) };
            // SAFETY: the caller's contract.
            (p == path.as_bytes()).then(|| unsafe { core::slice::from_raw_parts(b.data, b.len) })
        })
    }
}

/// A BAR (or any register window) at a CPU virtual address: `size` bytes at `virt`.
///
/// What the OS must guarantee: the range is mapped for as long as the driver runs, to the
/// BAR's bus address, with a memory type that makes every access reach the device once and in
/// program order: **uncached** for BAR0 (what vfio-pci gives `nvbare-pci-host` for both BARs).
/// BAR1 may be write-combined (`write_combined`): the device layer orders its stores with
/// [`Mmio::store_barrier`] (a full fence by default) before each doorbell, and page tables in
/// VRAM are pushed out by reading BAR1 back (`Bar1Tables::flush`), so a write-combined window
/// fences before every read.
#[derive(Debug, Clone, Copy)]
pub struct PhysMmio {
    virt: usize,
    size: usize,
    write_combined: bool,
}

impl PhysMmio {
    /// The window of `size` bytes mapped at `virt` (write-combined if `write_combined`,
    /// uncached otherwise).
    ///
    /// # Safety
    ///
    /// `virt..virt + size` must stay mapped to device memory as described above while any
    /// copy of the value is used.
    pub const unsafe fn new(virt: usize, size: usize, write_combined: bool) -> Self {
        PhysMmio {
            virt,
            size,
            write_combined,
        }
    }
}

impl Mmio for PhysMmio {
    fn size(&self) -> usize {
        self.size
    }

    fn read32(&self, offset: usize) -> u32 {
        if check_mmio(offset, self.size).is_err() {
            return u32::MAX;
        }
        if self.write_combined {
            // Earlier write-combined stores are pushed out before this read.
            core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        }
        // SAFETY: `offset + 4 <= size` and 4-byte aligned (checked), inside the mapping
        // `new`'s contract keeps alive; a device register, accessed only by volatile loads.
        unsafe { ((self.virt + offset) as *const u32).read_volatile() }
    }

    fn write32(&self, offset: usize, value: u32) {
        if check_mmio(offset, self.size).is_ok() {
            // SAFETY: as in `read32`.
            unsafe { ((self.virt + offset) as *mut u32).write_volatile(value) }
        }
    }
}

/// PCIe configuration space through ECAM: the function's 4 KiB mapped at `virt`.
#[derive(Debug, Clone, Copy)]
pub struct EcamConfig {
    virt: usize,
}

impl EcamConfig {
    /// The function's configuration space mapped (uncached) at `virt`.
    ///
    /// # Safety
    ///
    /// `virt..virt + 4096` must stay mapped to the GPU function's ECAM page.
    pub const unsafe fn new(virt: usize) -> Self {
        EcamConfig { virt }
    }
}

impl PciConfig for EcamConfig {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        check_mmio(offset as usize, 4096)?;
        // SAFETY: aligned and inside the 4 KiB page (checked); `new`'s contract.
        Ok(unsafe { ((self.virt + offset as usize) as *const u32).read_volatile() })
    }

    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
        check_mmio(offset as usize, 4096)?;
        // SAFETY: as above.
        unsafe { ((self.virt + offset as usize) as *mut u32).write_volatile(value) };
        Ok(())
    }

    // `reset_function` keeps the default (`HalError::Unsupported`): implement a function-level
    // reset (PCIe capability, Device Control's "Initiate FLR", then 100 ms) to allow
    // `RunningGsp::Reset`.
}

/// Time from the TSC.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    hz: u64,
}

impl TscClock {
    /// A clock counting `hz` TSC ticks per second (an invariant TSC: constant rate, never
    /// stopped; the OS measures `hz`).
    pub const fn new(hz: u64) -> Self {
        TscClock {
            hz: if hz == 0 { 1 } else { hz },
        }
    }
}

impl Clock for TscClock {
    fn now(&self) -> Duration {
        // SAFETY: `rdtsc` has no preconditions on x86-64.
        let t = unsafe { core::arch::x86_64::_rdtsc() };
        let secs = t / self.hz;
        let nanos = ((t % self.hz) as u128 * 1_000_000_000 / self.hz as u128) as u32;
        Duration::new(secs, nanos)
    }

    fn delay(&self, d: Duration) {
        // Busy-waits; a kernel with a scheduler would sleep here for long delays.
        let end = self.now().saturating_add(d);
        while self.now() < end {
            core::hint::spin_loop();
        }
    }
}

/// Live DMA buffers at once (the allocator's fixed capacity, minus one).
const DMA_BLOCKS: usize = 1024;

/// The DMA range of [`PlatformInfo`] and an allocator over its bus addresses.
struct DmaArena {
    virt: usize,
    bus: u64,
    alloc: RangeAllocator<DMA_BLOCKS>,
}

static DMA: spin::Mutex<DmaArena> = spin::Mutex::new(DmaArena {
    virt: 0,
    bus: 0,
    alloc: RangeAllocator::empty(),
});

/// DMA memory carved out of the one range the OS gave ([`PlatformInfo::dma_virt`]).
///
/// Each buffer is contiguous in the GPU's address space, as [`DmaBuffer`] promises and the
/// driver relies on (the GSP-RM radix3 image, the message queues and the log buffers are each
/// one buffer, the largest 60.7 MiB). 4 KiB alignment is all the driver asks for.
#[derive(Debug, Clone, Copy)]
pub struct ArenaDma;

impl ArenaDma {
    /// Manages `size` bytes mapped at `virt`, which the GPU reaches at `bus`.
    ///
    /// # Safety
    ///
    /// The range must stay mapped, be used by nothing else, and be reachable by the GPU at
    /// `bus..bus + size` for as long as any buffer (or the GPU) uses it.
    pub unsafe fn init(virt: usize, bus: u64, size: usize) -> Result<Self, HalError> {
        let mut a = DMA.lock();
        a.alloc
            .reset(bus, size as u64, 4096, FitPolicy::FirstFit)
            .map_err(|_| HalError::Unsupported("a DMA range that is not 4 KiB aligned"))?;
        a.virt = virt;
        a.bus = bus;
        Ok(ArenaDma)
    }
}

impl DmaAllocator for ArenaDma {
    type Buffer = ArenaBuffer;

    fn alloc_dma(&self, size: usize) -> Result<ArenaBuffer, HalError> {
        let len = size.max(1).next_multiple_of(4096);
        let mut a = DMA.lock();
        let bus = a
            .alloc
            .alloc(len as u64, 4096)
            .map_err(|_| HalError::NoMemory {
                requested: len as u64,
            })?;
        let virt = a.virt + (bus - a.bus) as usize;
        drop(a);
        let buf = ArenaBuffer { virt, bus, len };
        buf.fill(0, len, 0)?;
        Ok(buf)
    }
}

/// A buffer of [`ArenaDma`]; returned to the arena when dropped.
#[derive(Debug)]
pub struct ArenaBuffer {
    virt: usize,
    bus: u64,
    len: usize,
}

impl DmaBuffer for ArenaBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn dev_addr(&self) -> u64 {
        self.bus
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        let src = (self.virt + offset) as *const u8;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: inside this buffer (checked), which `ArenaDma::init`'s contract keeps
            // mapped; volatile because the GPU may write it at any time.
            *d = unsafe { src.add(i).read_volatile() };
        }
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        let dst = (self.virt + offset) as *mut u8;
        for (i, s) in src.iter().enumerate() {
            // SAFETY: as in `read`.
            unsafe { dst.add(i).write_volatile(*s) };
        }
        Ok(())
    }
}

impl Drop for ArenaBuffer {
    fn drop(&mut self) {
        // The driver drops a buffer only once the GPU is done with it (GSP-RM unloaded, or
        // the device layer's wait); `free` cannot fail for a block it handed out.
        let _ = DMA.lock().alloc.free(self.bus);
    }
}

/// This embedder's hardware, as one type for the bare-metal backend.
#[derive(Debug, Clone, Copy)]
pub struct Embedder;

impl BarePlatform for Embedder {
    type Bar0 = PhysMmio;
    type Bar1 = PhysMmio;
    type Dma = ArenaDma;
    type Clock = TscClock;
    type Pci = EcamConfig;
}
