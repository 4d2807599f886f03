//! The bare-metal path: the simulated GPU (`sim:CHIP`), a GPU bound to vfio-pci
//! (`vfio:BDF`) and a GPU of a remote PCI server (`remote:HOST:PORT:N`), all through
//! `nvbare_core::device::baremetal::BareMetalBackend` with the r570.144 firmware.
//!
//! The firmware comes from a [`FirmwareSource`]: its directory, a missing file fetched once
//! (progress on stderr) unless fetching is off, which gives the one-line instruction instead.

use std::fmt;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::device::VaWindow;
use nvbare_core::device::baremetal::{
    BareHw, BareMetalBackend, BareMetalError, BareMetalOptions, BarePlatform, PeerPlatform,
};
use nvbare_core::gsp::boot::{
    BootError, BootHw, BootObserver, BootOptions, BootPhase, BootReport, SystemAddrs,
};
use nvbare_core::hal::{DmaAllocator, HalError, Mmio, PciConfig};
use nvbare_pci_host::Bdf;
use nvbare_pci_host::clock::HostClock;
use nvbare_pci_host::dma::{DmaPool, PoolBuffer};
use nvbare_pci_host::remote::client::{RemoteBar, RemoteDma, RemoteGpu, RemotePci};
use nvbare_pci_host::vfio::VfioGpu;
use nvbare_pci_host::vfio::peer::VfioPeerGroup;
use nvbare_sim::ChipModel;
use nvbare_sim::baremetal::{BareMetalSim, SimBareMetal};
use nvbare_sim::baremetal_system::BareMetalSystem;
use nvbare_sim::boot::SimFirmware;
use nvbare_sim::system::Topology;

use super::BackendError;
use super::firmware::FirmwareSource;

/// Prints boot and unload phases as they finish (or nothing).
pub struct PhasePrinter<'a> {
    out: Option<&'a mut dyn Write>,
    details: Vec<String>,
    indent: &'static str,
}

impl fmt::Debug for PhasePrinter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PhasePrinter").finish_non_exhaustive()
    }
}

impl<'a> PhasePrinter<'a> {
    /// Prints to `out`, each line starting with `indent`.
    pub fn new(out: &'a mut dyn Write, indent: &'static str) -> Self {
        PhasePrinter {
            out: Some(out),
            details: Vec::new(),
            indent,
        }
    }

    /// Prints nothing (phases still go to the log).
    pub fn quiet() -> Self {
        PhasePrinter {
            out: None,
            details: Vec::new(),
            indent: "",
        }
    }

    fn line(&mut self, s: fmt::Arguments<'_>) {
        match self.out.as_mut() {
            Some(o) => {
                let _ = writeln!(o, "{}{s}", self.indent);
            }
            None => log::info!("{s}"),
        }
    }
}

impl BootObserver for PhasePrinter<'_> {
    fn phase_finished(&mut self, phase: BootPhase, elapsed: Duration) {
        self.line(format_args!(
            "{:<40} {:>10.3} ms",
            phase.name(),
            elapsed.as_secs_f64() * 1e3
        ));
        for d in std::mem::take(&mut self.details) {
            self.line(format_args!("    {d}"));
        }
    }
    fn detail(&mut self, _phase: BootPhase, what: fmt::Arguments<'_>) {
        self.details.push(what.to_string());
    }
    fn failed(&mut self, error: &BootError, report: &BootReport) {
        self.line(format_args!("{:<40} FAILED", error.phase.name()));
        for d in std::mem::take(&mut self.details) {
            self.line(format_args!("    {d}"));
        }
        self.line(format_args!("{error}"));
        for l in report.to_string().lines() {
            self.line(format_args!("  {l}"));
        }
    }
}

fn bm_err(what: &str) -> impl Fn(BareMetalError) -> BackendError + '_ {
    move |e| BackendError::Runtime(format!("{what}: {e}"))
}

/// Boots GSP-RM on a new simulated `chip` and opens the bare-metal backend over it, its
/// memory at GPU VAs in `window`. Returns the backend and the simulator (whose `errors()` say
/// what the simulated hardware found wrong).
pub fn open_sim(
    chip: Chipset,
    window: VaWindow,
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
) -> Result<(SimBareMetal, BareMetalSim), BackendError> {
    let model = ChipModel::for_chipset(chip)
        .ok_or_else(|| BackendError::Usage(format!("the simulator has no {chip} model")))?;
    let (dir, fw) = firmware.load(chip)?;
    let sim_fw = SimFirmware::load(chip, &dir).map_err(BackendError::Runtime)?;
    let sim = BareMetalSim::new(model, Arc::new(sim_fw), false)
        .map_err(|e| BackendError::Runtime(format!("starting the simulated {chip}: {e}")))?;
    let opts = BareMetalOptions {
        label: format!(
            "sim:{} (simulated {}, bare metal)",
            chip.name().to_ascii_lowercase(),
            model.board
        ),
        va_window: window,
        ..Default::default()
    };
    match sim.open(&fw, &BootOptions::default(), obs, opts) {
        Ok(b) => Ok((b, sim)),
        Err(e) => {
            let hw = sim.errors();
            let extra = if hw.is_empty() {
                String::new()
            } else {
                format!("; the simulated hardware saw: {}", hw.join("; "))
            };
            Err(BackendError::Runtime(format!(
                "bare-metal bring-up of the simulated {chip}: {e}{extra}"
            )))
        }
    }
}

/// Boots two (or more) simulated GPUs of one simulated host, bare metal, and opens their
/// backends: they share host memory, and with [`Topology::P2p`] each one's BAR1 is a window
/// the others' DMA reaches (the bare-metal peer path). Keep the system alive while the
/// backends are used.
pub fn open_sim_group(
    chips: &[Chipset],
    topology: Topology,
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
) -> Result<(BareMetalSystem, Vec<SimBareMetal>), BackendError> {
    let mut gpus = Vec::with_capacity(chips.len());
    let mut fws = Vec::with_capacity(chips.len());
    for &chip in chips {
        let model = ChipModel::for_chipset(chip)
            .ok_or_else(|| BackendError::Usage(format!("the simulator has no {chip} model")))?;
        let (dir, fw) = firmware.load(chip)?;
        fws.push(fw);
        let sim_fw = SimFirmware::load(chip, &dir).map_err(BackendError::Runtime)?;
        gpus.push((model, Arc::new(sim_fw)));
    }
    let sys = BareMetalSystem::new(&gpus, topology, false)
        .map_err(|e| BackendError::Runtime(format!("starting the simulated host: {e}")))?;
    let mut backends = Vec::with_capacity(chips.len());
    for (i, fw) in fws.iter().enumerate() {
        let be = sys
            .open(
                i,
                fw,
                &BootOptions::default(),
                obs,
                BareMetalOptions::default(),
            )
            .map_err(|e| {
                let hw = sys.errors();
                BackendError::Runtime(format!(
                    "bare-metal bring-up of simulated GPU {i}: {e}{}",
                    if hw.is_empty() {
                        String::new()
                    } else {
                        format!("; the simulated hardware saw: {}", hw.join("; "))
                    }
                ))
            })?;
        backends.push(be);
    }
    Ok((sys, backends))
}

// ------------------------------------------------------------------------------------------------
// VFIO.

/// A BAR of a shared [`VfioGpu`] (cloneable, as the boot code and the backend need).
#[derive(Debug, Clone)]
pub struct VfioBar {
    gpu: Arc<VfioGpu>,
    index: u8,
}

impl VfioBar {
    fn bar(&self) -> &nvbare_pci_host::vfio::BarMmio {
        if self.index == 0 {
            self.gpu.bar0()
        } else {
            self.gpu.bar1()
        }
    }
}

impl Mmio for VfioBar {
    fn size(&self) -> usize {
        self.bar().size()
    }
    fn read32(&self, offset: usize) -> u32 {
        self.bar().read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.bar().write32(offset, value)
    }
}

/// DMA memory of a shared [`VfioGpu`].
#[derive(Debug, Clone)]
pub struct VfioDma(DmaPool);

impl DmaAllocator for VfioDma {
    type Buffer = PoolBuffer;
    fn alloc_dma(&self, size: usize) -> Result<PoolBuffer, HalError> {
        self.0.alloc_dma(size)
    }
}

/// PCI config space of a shared [`VfioGpu`].
#[derive(Debug, Clone)]
pub struct VfioPci(Arc<VfioGpu>);

impl PciConfig for VfioPci {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        self.0.pci().read_config32(offset)
    }
    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
        self.0.pci().write_config32(offset, value)
    }
    fn reset_function(&self) -> Result<(), HalError> {
        self.0.pci().reset_function()
    }
}

/// The host side of a GPU bound to vfio-pci.
#[derive(Debug, Clone, Copy)]
pub struct VfioPlatform;

impl BarePlatform for VfioPlatform {
    type Bar0 = VfioBar;
    type Bar1 = VfioBar;
    type Dma = VfioDma;
    type Clock = HostClock;
    type Pci = VfioPci;
}

/// The hardware of a GPU bound to vfio-pci, as the boot code wants it.
pub type VfioHw = BareHw<VfioPlatform>;

/// The bare-metal backend on a GPU bound to vfio-pci.
pub type VfioBareMetal = BareMetalBackend<VfioPlatform>;

/// The `hal` view of an opened GPU, and the addresses GSP-RM wants in `GspSystemInfo`.
pub fn vfio_hw(gpu: Arc<VfioGpu>) -> (VfioHw, VfioBar, SystemAddrs) {
    let f = gpu.function();
    let bar = |i: u8| f.bars.iter().find(|b| b.index == i).map_or(0, |b| b.start);
    let b = f.bdf;
    let addrs = SystemAddrs {
        bar0: bar(0),
        bar1: bar(1),
        bar3: bar(3),
        bdf: ((b.bus as u64) << 8) | ((b.device as u64) << 3) | b.function as u64,
    };
    let hw = BootHw {
        bar0: VfioBar {
            gpu: gpu.clone(),
            index: 0,
        },
        dma: VfioDma(gpu.dma().clone()),
        clock: gpu.clock(),
        pci: VfioPci(gpu.clone()),
    };
    (hw, VfioBar { gpu, index: 1 }, addrs)
}

/// Opens the GPU at `bdf` through VFIO, identifies it, boots GSP-RM and opens the bare-metal
/// backend, its memory at GPU VAs in `window`. Untested on real hardware (see docs/vfio.md).
pub fn open_vfio(
    bdf: Bdf,
    window: VaWindow,
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
) -> Result<VfioBareMetal, BackendError> {
    let gpu = Arc::new(super::spec::open_vfio(bdf)?);
    let chip = nvbare_core::chip::identify_mmio(gpu.bar0())?;
    let chipset = chip.chipset();
    let (_, fw) = firmware.load(chipset)?;
    let (hw, bar1, addrs) = vfio_hw(gpu);
    let boot = BootOptions {
        addrs,
        ..BootOptions::default()
    };
    let opts = BareMetalOptions {
        label: format!("vfio:{bdf} ({}, bare metal)", chip.info.name),
        va_window: window,
        ..Default::default()
    };
    BareMetalBackend::open(hw, bar1, &fw, &boot, obs, opts).map_err(bm_err(&format!("vfio:{bdf}")))
}

/// Opens the GPUs at `bdfs` through VFIO as one peer group (one container and DMA pool, each
/// BAR1 mapped for the others' DMA: `nvbare_pci_host::vfio::peer`), boots GSP-RM on each and
/// opens the bare-metal backends, each told where it sits ([`PeerPlatform`]). Keep the group
/// alive while the backends are used. Untested on real hardware (docs/multi-gpu.md).
pub fn open_vfio_group(
    bdfs: &[Bdf],
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
) -> Result<(Arc<VfioPeerGroup>, Vec<VfioBareMetal>), BackendError> {
    let group = Arc::new(VfioPeerGroup::open(bdfs)?);
    let mut backends = Vec::with_capacity(bdfs.len());
    for (i, gpu) in group.gpus().iter().enumerate() {
        let bdf = gpu.function().bdf;
        let chip = nvbare_core::chip::identify_mmio(gpu.bar0())?;
        let chipset = chip.chipset();
        let (_, fw) = firmware.load(chipset)?;
        let (hw, bar1, addrs) = vfio_hw(gpu.clone());
        let boot = BootOptions {
            addrs,
            ..BootOptions::default()
        };
        let opts = BareMetalOptions {
            label: format!("vfio:{bdf} ({}, bare metal)", chip.info.name),
            peer: Some(PeerPlatform {
                dma_space: group.dma_space(),
                bar1: group.bar1_bus(i),
                link: "PCIe BAR1 P2P (VFIO)".into(),
            }),
            ..Default::default()
        };
        backends.push(
            BareMetalBackend::open(hw, bar1, &fw, &boot, obs, opts)
                .map_err(bm_err(&format!("vfio:{bdf}")))?,
        );
    }
    Ok((group, backends))
}

// ------------------------------------------------------------------------------------------------
// Remote PCI servers (tinygrad's protocol).

/// The host side of a GPU of a remote PCI server: BARs, DMA memory and config space over TCP
/// (`nvbare_pci_host::remote::client`), the local clock.
#[derive(Debug, Clone, Copy)]
pub struct RemotePlatform;

impl BarePlatform for RemotePlatform {
    type Bar0 = RemoteBar;
    type Bar1 = RemoteBar;
    type Dma = RemoteDma;
    type Clock = HostClock;
    type Pci = RemotePci;
}

/// The hardware of a remote GPU, as the boot code wants it.
pub type RemoteHw = BareHw<RemotePlatform>;

/// The bare-metal backend on a remote GPU.
pub type RemoteBareMetal = BareMetalBackend<RemotePlatform>;

/// `error`, with why the connection to `gpu` broke or, if it did not, its latest error (the
/// server's text): `hal` errors carry no text.
pub fn remote_error(gpu: &RemoteGpu, what: &str, error: impl fmt::Display) -> BackendError {
    match gpu.broken().or_else(|| gpu.last_error()) {
        Some(r) => BackendError::Runtime(format!("{what}: {error} (remote: {r})")),
        None => BackendError::Runtime(format!("{what}: {error}")),
    }
}

/// The `hal` view of a remote GPU, and the addresses GSP-RM wants in `GspSystemInfo`: the
/// bus addresses MAP_BAR reports for BARs 0, 1 and 3 (0 for a BAR3 the server refuses), and
/// the PCI address in the server's name for the device when it has one (else 0).
pub fn remote_hw(gpu: &RemoteGpu) -> Result<(RemoteHw, RemoteBar, SystemAddrs), BackendError> {
    let bar3 = match gpu.map_bar(3) {
        Ok(b) => b.bus_addr(),
        Err(e) if !e.is_fatal() => {
            // Handled: not to be blamed for a later error.
            gpu.take_last_error();
            log::debug!("remote {}: no BAR3 ({e}); GSP-RM is told 0", gpu.addr());
            0
        }
        Err(e) => return Err(e.into()),
    };
    let bdf = gpu.device().bdf().map_or(0, |b| {
        ((b.bus as u64) << 8) | ((b.device as u64) << 3) | b.function as u64
    });
    let addrs = SystemAddrs {
        bar0: gpu.bar0().bus_addr(),
        bar1: gpu.bar1().bus_addr(),
        bar3,
        bdf,
    };
    let hw = BootHw {
        bar0: gpu.bar0().clone(),
        dma: gpu.dma(),
        clock: gpu.clock(),
        pci: gpu.pci(),
    };
    Ok((hw, gpu.bar1().clone(), addrs))
}

/// Connects to the remote PCI server at `host:port`, opens its GPU `index`, identifies it,
/// boots GSP-RM and opens the bare-metal backend, its memory at GPU VAs in `window`, as
/// [`open_vfio`] does locally.
pub fn open_remote(
    host: &str,
    port: u16,
    index: u32,
    window: VaWindow,
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
) -> Result<RemoteBareMetal, BackendError> {
    let spec = super::spec::DeviceSpec::Remote {
        host: host.to_string(),
        port,
        index,
    };
    let gpu = super::spec::open_remote(host, port, index)?;
    let chip = nvbare_core::chip::identify_mmio(gpu.bar0()).map_err(|e| {
        if gpu.last_error().is_some() {
            remote_error(&gpu, &format!("{spec}: identifying the GPU"), e)
        } else {
            e.into()
        }
    })?;
    let chipset = chip.chipset();
    let (_, fw) = firmware.load(chipset)?;
    let (hw, bar1, addrs) = remote_hw(&gpu)?;
    let boot = BootOptions {
        addrs,
        ..BootOptions::default()
    };
    let opts = BareMetalOptions {
        label: format!("{spec} ({}, bare metal over TCP)", chip.info.name),
        va_window: window,
        ..Default::default()
    };
    BareMetalBackend::open(hw, bar1, &fw, &boot, obs, opts)
        .map_err(|e| remote_error(&gpu, &spec.to_string(), e))
}

/// What a bare-metal backend set up, one line each.
pub fn summary<H: BarePlatform>(b: &BareMetalBackend<H>) -> Vec<String> {
    let mut v = Vec::new();
    let (client, internal) = b.clients();
    v.push(format!(
        "GSP-RM: our client {:#x} over GSP_RM_ALLOC/CONTROL/FREE RPCs (r570 layouts); internal \
         client {:#x} read for context buffer sizes, runlists, method buffer size; golden \
         context image {}",
        client.0,
        internal.0,
        if b.golden_image() {
            "created"
        } else {
            "not created"
        }
    ));
    let pd = b.page_directory();
    let fmt = b.mmu_format();
    let (used, free, region) = b.page_tables();
    let version = match fmt.version() {
        nvbare_core::chip::MmuVersion::V2 => 2,
        nvbare_core::chip::MmuVersion::V3 => 3,
    };
    v.push(format!(
        "page tables: ours, GMMU v{version} ({}-bit VA), root {:?} {:#x} given to GSP-RM by \
         SET_PAGE_DIRECTORY ({} entries); pool in {}, {used} tables in use, {free} free",
        fmt.va_bits(),
        pd.aperture,
        pd.addr,
        fmt.root_entries(),
        match region {
            Some(a) => format!("VRAM at {a:#x} (written through BAR1)"),
            None => "host memory".to_string(),
        },
    ));
    let (vram_free, fb) = b.vram();
    v.push(format!(
        "memory: VRAM {} MiB free of {} MiB (GSP-RM's reservations excluded), BAR1 in physical \
         mode; host memory from the DMA allocator",
        vram_free >> 20,
        fb >> 20
    ));
    v.push(format!(
        "doorbell: BAR0 0xbb0090, tokens = channel id | runlist {} << 16",
        b.runlist()
    ));
    v
}

/// The page-table counters of a bare-metal backend.
pub fn page_table_stats<H: BarePlatform>(b: &BareMetalBackend<H>) -> String {
    let s = b.map_stats();
    let (used, _, _) = b.page_tables();
    format!(
        "page tables: {} PTEs written, {} tables allocated and {} freed ({used} in use), {} TLB \
         invalidates",
        s.ptes_written, s.tables_allocated, s.tables_freed, s.invalidates
    )
}
