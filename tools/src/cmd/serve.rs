//! `nvbare serve`: GPUs over tinygrad's remote PCI protocol (`REMOTE=host:port` in tinygrad
//! 0.14; wire format in `nvbare_pci_host::remote::wire`, the server itself, which checks and
//! bounds every request, in `nvbare_pci_host::remote::server`).
//!
//! This module puts devices behind the server ([`ServedDevice`]):
//!
//! * `sim:CHIP` ([`SimServed`]): everything a client reaches is the simulator's: the boot
//!   hardware, the GSP-RM emulator, the GMMU and the engines run as the client drives them
//!   (every request lets the simulated GPU run, as a real one runs beside its driver), and the
//!   GPU reaches its own BAR1 by DMA at the BAR's bus address, as on a PCIe bus.
//! * `vfio:BDF` ([`VfioServed`]): a GPU bound to vfio-pci, with the IOMMU on: BAR0 and BAR1
//!   through their VFIO mappings, config space through the VFIO config region, RESET as
//!   `VFIO_DEVICE_RESET`, and MAP_SYSMEM from the device's DMA pool, answered with IOVAs
//!   (contiguous for every allocation), so the GPU reaches only the memory clients were given.
//!
//! The protocol has no authentication: the server listens on loopback unless told otherwise.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvbare_core::hal::{Clock, DmaAllocator, DmaBuffer, Mmio, PciConfig};
use nvbare_pci_host::Bdf;
use nvbare_pci_host::dma::PoolBuffer;
pub use nvbare_pci_host::remote::server::ServeLimits;
use nvbare_pci_host::remote::server::{
    Devices, Refusal, ServedDevice, Sysmem, refuse, serve_forever,
};
use nvbare_pci_host::vfio::VfioGpu;
use nvbare_sim::baremetal::BareMetalSim;
use nvbare_sim::boot::{BootSimConfig, SimFirmware};
use nvbare_sim::models::ChipModel;
use nvbare_sim::trace::Trace;

use crate::{CliError, DeviceSpec};
use nvbare::backend::FirmwareSource;

/// Options of `nvbare serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The devices, in the order PROBE lists them.
    pub devices: Vec<DeviceSpec>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where to write the trace, if anywhere.
    pub trace: Option<PathBuf>,
    /// Bounds per client.
    pub limits: ServeLimits,
}

// ------------------------------------------------------------------------------------------------
// The simulated GPU.

/// Bus address of BAR0 of the first simulated device (the next ones follow at 64 MiB steps).
const SIM_BAR0_BUS: u64 = 0xe000_0000;
/// Bus address of BAR3 (the instance-memory BAR: GSP-RM is told where it is, nothing maps it).
const SIM_BAR3_SIZE: u64 = 32 << 20;
/// BAR1 bus addresses: high above the simulator's DMA range (4 GiB + its host memory), one
/// TiB apart, as `nvbare_sim::system::PEER_BAR1_BASE`.
const SIM_BAR1_BUS: u64 = nvbare_sim::system::PEER_BAR1_BASE;
const SIM_BAR1_STRIDE: u64 = nvbare_sim::system::PEER_BAR1_STRIDE;

/// A simulated GPU served over the protocol.
#[derive(Debug)]
pub struct SimServed {
    name: String,
    model: ChipModel,
    sim: BareMetalSim,
    bar0: (u64, u64),
    bar1: (u64, u64),
    bar3: (u64, u64),
    /// Simulator errors already logged.
    reported: usize,
}

impl SimServed {
    /// A powered-on simulated `chip` (its boot hardware checks against the pinned firmware),
    /// as device number `index` of the server.
    /// `trace` gets every boot step and GSP-RM RPC of this device.
    pub fn new(
        chip: nvbare_core::chip::Chipset,
        index: usize,
        trace: Option<Trace>,
    ) -> Result<Self, CliError> {
        let model = ChipModel::for_chipset(chip)
            .ok_or_else(|| CliError::Usage(format!("the simulator has no {chip} model")))?;
        let dir = FirmwareSource::default().ensure(chip)?;
        let sim_fw = SimFirmware::load(chip, &dir).map_err(CliError::Runtime)?;
        let mut cfg = BootSimConfig::new(Arc::new(sim_fw));
        cfg.trace = trace;
        let sim = BareMetalSim::with_config(model, cfg, false)
            .map_err(|e| CliError::Runtime(format!("starting the simulated {chip}: {e}")))?;
        let i = index as u64;
        let bar0 = (SIM_BAR0_BUS + i * (64 << 20), nvbare_sim::BAR0_SIZE as u64);
        let bar3 = (bar0.0 + (32 << 20), SIM_BAR3_SIZE);
        let bar1 = (SIM_BAR1_BUS + i * SIM_BAR1_STRIDE, model.bar1_size);
        // The GPU's DMA to its own BAR1 lands in its VRAM, as through the PCIe fabric.
        let vram = sim.gpu().vram().clone();
        sim.gpu()
            .host()
            .add_peer_window(bar1.0, vram.size().min(bar1.1), vram)
            .map_err(|e| CliError::Runtime(format!("mapping the simulated BAR1: {e}")))?;
        Ok(SimServed {
            name: format!("sim:{}", chip.name().to_ascii_lowercase()),
            model,
            sim,
            bar0,
            bar1,
            bar3,
            reported: 0,
        })
    }

    /// The simulator.
    pub fn sim(&self) -> &BareMetalSim {
        &self.sim
    }
}

/// Host memory of the simulated host.
struct SimSysmem(nvbare_sim::SimDmaBuffer);

impl Sysmem for SimSysmem {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
        let off = usize::try_from(offset).map_err(|_| Refusal("offset too large".into()))?;
        self.0.read(off, dst).map_err(|e| Refusal(e.to_string()))
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), Refusal> {
        let off = usize::try_from(offset).map_err(|_| Refusal("offset too large".into()))?;
        self.0.write(off, src).map_err(|e| Refusal(e.to_string()))
    }
}

impl ServedDevice for SimServed {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn vendor(&self) -> u16 {
        0x10de
    }
    fn device_id(&self) -> u16 {
        self.model.device_id
    }
    fn class(&self) -> u32 {
        self.model.class
    }
    fn bar(&self, index: u32) -> Option<(u64, u64)> {
        match index {
            0 => Some(self.bar0),
            1 => Some(self.bar1),
            3 => Some(self.bar3),
            _ => None,
        }
    }

    fn mmio_read(&mut self, bar: u32, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
        match bar {
            0 => {
                aligned(offset, dst.len())?;
                read_words(&self.sim.gpu().bar0(), offset, dst)
            }
            1 => {
                let vram = self.sim.gpu().vram();
                if vram.bar1_virtual() {
                    // BAR1 translates through tables the simulator does not model: a driver
                    // that reads it before switching it to physical mode gets nothing.
                    vram.note_bar1_virtual_access();
                    dst.fill(0xff);
                    return Ok(());
                }
                if offset.saturating_add(dst.len() as u64) > vram.size() {
                    // Beyond VRAM (BAR1 is larger): reads float high, as an unclaimed access.
                    dst.fill(0xff);
                    return Ok(());
                }
                vram.read(offset, dst).map_err(|e| Refusal(e.to_string()))
            }
            _ => refuse(format!(
                "BAR{bar} of {} has nothing mapped behind it",
                self.name
            )),
        }
    }

    fn mmio_write(&mut self, bar: u32, offset: u64, src: &[u8]) -> Result<(), Refusal> {
        match bar {
            0 => {
                aligned(offset, src.len())?;
                write_words(&self.sim.gpu().bar0(), offset, src)
            }
            1 => {
                let vram = self.sim.gpu().vram();
                if vram.bar1_virtual() {
                    vram.note_bar1_virtual_access();
                    return Ok(());
                }
                if offset.saturating_add(src.len() as u64) > vram.size() {
                    return refuse(format!(
                        "BAR1 write of {} bytes at {offset:#x} is beyond the {:#x} bytes of VRAM",
                        src.len(),
                        vram.size()
                    ));
                }
                vram.write(offset, src).map_err(|e| Refusal(e.to_string()))
            }
            _ => refuse(format!(
                "BAR{bar} of {} has nothing mapped behind it",
                self.name
            )),
        }
    }

    fn cfg_read(&mut self, offset: u16, size: u8) -> Result<u32, Refusal> {
        let pci = self.sim.gpu().pci();
        let base = offset & !3;
        let shift = 8 * u32::from(offset & 3);
        let v = pci
            .read_config32(base)
            .map_err(|e| Refusal(e.to_string()))?;
        Ok(match size {
            4 => v,
            2 => (v >> shift) & 0xffff,
            _ => (v >> shift) & 0xff,
        })
    }

    fn cfg_write(&mut self, offset: u16, size: u8, value: u32) -> Result<(), Refusal> {
        let pci = self.sim.gpu().pci();
        let base = offset & !3;
        let shift = 8 * u32::from(offset & 3);
        let mask: u32 = match size {
            4 => u32::MAX,
            2 => 0xffff << shift,
            _ => 0xff << shift,
        };
        let old = if size == 4 {
            0
        } else {
            pci.read_config32(base)
                .map_err(|e| Refusal(e.to_string()))?
        };
        let new = (old & !mask) | ((value << shift) & mask);
        pci.write_config32(base, new)
            .map_err(|e| Refusal(e.to_string()))
    }

    fn reset(&mut self) -> Result<(), Refusal> {
        self.sim
            .gpu()
            .pci()
            .reset_function()
            .map_err(|e| Refusal(e.to_string()))
    }

    fn alloc_sysmem(
        &mut self,
        size: u64,
        _contiguous: bool,
    ) -> Result<(Box<dyn Sysmem>, Vec<u64>), Refusal> {
        let n = usize::try_from(size).map_err(|_| Refusal("size too large".into()))?;
        let rounded = n.div_ceil(4096) * 4096;
        let buf = self
            .sim
            .gpu()
            .dma()
            .alloc_dma(rounded)
            .map_err(|e| Refusal(format!("simulated host memory: {e}")))?;
        // The simulator's host memory is contiguous in bus address: every request is.
        let pages = (0..rounded as u64 / 4096)
            .map(|i| buf.dev_addr() + i * 4096)
            .collect();
        Ok((Box::new(SimSysmem(buf)), pages))
    }

    fn tick(&mut self) {
        self.sim.clock().delay(Duration::ZERO);
        let errors = self.sim.errors();
        for e in errors.iter().skip(self.reported) {
            log::warn!("serve: {}: the simulated hardware saw: {e}", self.name);
        }
        self.reported = self.reported.max(errors.len());
    }

    fn errors(&self) -> Vec<String> {
        self.sim.errors()
    }
}

/// BAR0 is registers: only whole, aligned 32-bit words (never a read-modify-write).
fn aligned(offset: u64, len: usize) -> Result<(), Refusal> {
    if !offset.is_multiple_of(4) || !len.is_multiple_of(4) {
        return refuse(format!(
            "BAR0 takes 32-bit accesses: {len} bytes at {offset:#x} is not a whole number of \
             aligned words"
        ));
    }
    Ok(())
}

/// The byte range `[offset, offset + len)` of a BAR of `size` bytes, as `usize`s. The server
/// checked it against the BAR's size already; this checks it again against the mapping.
fn bar_span(offset: u64, len: usize, size: usize) -> Result<(usize, usize), Refusal> {
    let start = usize::try_from(offset).ok();
    match start.and_then(|s| s.checked_add(len).map(|e| (s, e))) {
        Some((s, e)) if e <= size => Ok((s, e)),
        _ => refuse(format!(
            "{len} bytes at {offset:#x} are outside the {size:#x}-byte mapping"
        )),
    }
}

/// Reads `dst.len()` bytes at `offset` of `bar` with 32-bit reads of the words that cover
/// them (any offset and length: a word read of memory, as BAR1 is, has no side effect).
fn read_words<M: Mmio + ?Sized>(bar: &M, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
    let (start, end) = bar_span(offset, dst.len(), bar.size())?;
    let mut pos = start & !3;
    while pos < end {
        let w = bar.read32(pos).to_le_bytes();
        let (lo, hi) = (pos.max(start), (pos + 4).min(end));
        dst[lo - start..hi - start].copy_from_slice(&w[lo - pos..hi - pos]);
        pos += 4;
    }
    Ok(())
}

/// Writes `src` at `offset` of `bar` with 32-bit writes; a word only partly covered is read,
/// merged and written back (BAR1 only: a register must never be written that way, see
/// [`aligned`]).
fn write_words<M: Mmio + ?Sized>(bar: &M, offset: u64, src: &[u8]) -> Result<(), Refusal> {
    let (start, end) = bar_span(offset, src.len(), bar.size())?;
    let mut pos = start & !3;
    while pos < end {
        let (lo, hi) = (pos.max(start), (pos + 4).min(end));
        let mut w = if hi - lo == 4 {
            [0; 4]
        } else {
            bar.read32(pos).to_le_bytes()
        };
        w[lo - pos..hi - pos].copy_from_slice(&src[lo - start..hi - start]);
        bar.write32(pos, u32::from_le_bytes(w));
        pos += 4;
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// A GPU bound to vfio-pci.

/// A GPU bound to vfio-pci, behind its IOMMU, served over the protocol.
#[derive(Debug)]
pub struct VfioServed {
    name: String,
    gpu: VfioGpu,
    /// `(index, bus address, size)` of the memory BARs sysfs lists; BAR0 and BAR1 with the
    /// size of their VFIO mappings.
    bars: Vec<(u32, u64, u64)>,
}

impl VfioServed {
    /// Opens the GPU at `bdf` through VFIO (the same open path, and errors, as `--device
    /// vfio:BDF` everywhere). VFIO's no-IOMMU mode is refused: a client drives the GPU's DMA,
    /// and without an IOMMU that reaches all of this machine's memory.
    pub fn open(bdf: Bdf) -> Result<Self, CliError> {
        if nvbare_pci_host::vfio::OpenOptions::from_env().noiommu {
            return Err(CliError::Usage(format!(
                "nvbare serve keeps the IOMMU on: a client drives the GPU's DMA, and in VFIO's \
                 no-IOMMU mode that reaches all of this machine's memory; unset \
                 NVBARE_VFIO_NOIOMMU to serve vfio:{bdf} behind its IOMMU"
            )));
        }
        let gpu = crate::device::open_vfio(bdf)?;
        if gpu.noiommu() {
            return Err(CliError::Usage(format!(
                "vfio:{bdf} was opened without an IOMMU; nvbare serve serves GPUs behind one only"
            )));
        }
        Ok(Self::new(gpu))
    }

    fn new(gpu: VfioGpu) -> Self {
        let f = gpu.function();
        let bars = f
            .bars
            .iter()
            .map(|b| {
                let size = match b.index {
                    0 => gpu.bar0().size() as u64,
                    1 => gpu.bar1().size() as u64,
                    _ => b.size,
                };
                (u32::from(b.index), b.start, size)
            })
            .collect();
        VfioServed {
            name: format!("vfio:{}", f.bdf),
            gpu,
            bars,
        }
    }
}

/// Host memory from a VFIO device's DMA pool: mapped in its IOMMU at one IOVA range, freed
/// (and unmapped once its chunk is idle) when dropped.
struct PoolSysmem(PoolBuffer);

impl Sysmem for PoolSysmem {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
        let off = usize::try_from(offset).map_err(|_| Refusal("offset too large".into()))?;
        self.0.read(off, dst).map_err(|e| Refusal(e.to_string()))
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), Refusal> {
        let off = usize::try_from(offset).map_err(|_| Refusal("offset too large".into()))?;
        self.0.write(off, src).map_err(|e| Refusal(e.to_string()))
    }
}

impl ServedDevice for VfioServed {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn pci_address(&self) -> Option<String> {
        Some(self.gpu.function().bdf.to_string())
    }
    fn vendor(&self) -> u16 {
        self.gpu.function().vendor
    }
    fn device_id(&self) -> u16 {
        self.gpu.function().device
    }
    fn class(&self) -> u32 {
        self.gpu.function().class
    }
    fn bar(&self, index: u32) -> Option<(u64, u64)> {
        self.bars
            .iter()
            .find(|b| b.0 == index)
            .map(|&(_, addr, size)| (addr, size))
    }

    fn mmio_read(&mut self, bar: u32, offset: u64, dst: &mut [u8]) -> Result<(), Refusal> {
        match bar {
            0 => {
                aligned(offset, dst.len())?;
                read_words(self.gpu.bar0(), offset, dst)
            }
            1 => read_words(self.gpu.bar1(), offset, dst),
            _ => refuse(format!(
                "BAR{bar} of {} is not mapped by nvbare serve (BAR0 and BAR1 are)",
                self.name
            )),
        }
    }

    fn mmio_write(&mut self, bar: u32, offset: u64, src: &[u8]) -> Result<(), Refusal> {
        match bar {
            0 => {
                aligned(offset, src.len())?;
                write_words(self.gpu.bar0(), offset, src)
            }
            1 => write_words(self.gpu.bar1(), offset, src),
            _ => refuse(format!(
                "BAR{bar} of {} is not mapped by nvbare serve (BAR0 and BAR1 are)",
                self.name
            )),
        }
    }

    fn cfg_read(&mut self, offset: u16, size: u8) -> Result<u32, Refusal> {
        self.gpu
            .pci()
            .read_sized(offset, size)
            .map_err(|e| Refusal(format!("{}: config space: {e}", self.name)))
    }

    fn cfg_write(&mut self, offset: u16, size: u8, value: u32) -> Result<(), Refusal> {
        self.gpu
            .pci()
            .write_sized(offset, size, value)
            .map_err(|e| Refusal(format!("{}: config space: {e}", self.name)))
    }

    fn reset(&mut self) -> Result<(), Refusal> {
        self.gpu.reset().map_err(|e| Refusal(e.to_string()))
    }

    fn alloc_sysmem(
        &mut self,
        size: u64,
        _contiguous: bool,
    ) -> Result<(Box<dyn Sysmem>, Vec<u64>), Refusal> {
        let n = usize::try_from(size).map_err(|_| Refusal("size too large".into()))?;
        // One IOVA range per buffer: contiguous whatever the client asked for.
        let buf = self
            .gpu
            .dma()
            .alloc(n, 4096)
            .map_err(|e| Refusal(format!("{}: DMA memory: {e}", self.name)))?;
        let pages = (0..buf.len() as u64 / 4096)
            .map(|i| buf.dev_addr() + i * 4096)
            .collect();
        Ok((Box::new(PoolSysmem(buf)), pages))
    }
}

/// A trace file shared by the served devices: each line is prefixed with the device's
/// number and name, and flushed as it is written.
fn trace_file(path: &std::path::Path) -> Result<Arc<Mutex<std::fs::File>>, CliError> {
    let f = std::fs::File::create(path)
        .map_err(|e| CliError::Runtime(format!("cannot create {}: {e}", path.display())))?;
    Ok(Arc::new(Mutex::new(f)))
}

fn device_trace(file: &Arc<Mutex<std::fs::File>>, index: usize, name: String) -> Trace {
    let f = file.clone();
    Trace::new(move |line| {
        let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = writeln!(f, "{index} {name} {line}") {
            log::warn!("serve: trace: {e}");
        }
    })
}

/// Opens the devices `specs` names; with `trace`, each simulated one records its boot and
/// RPCs there.
pub fn open_devices(
    specs: &[DeviceSpec],
    trace: Option<&std::path::Path>,
) -> Result<Vec<Box<dyn ServedDevice>>, CliError> {
    if specs.is_empty() {
        return Err(CliError::Usage(
            "name at least one device: --device sim:ad102 (or sim:gh100, sim:gb202, vfio:BDF)"
                .into(),
        ));
    }
    let file = trace.map(trace_file).transpose()?;
    let mut out: Vec<Box<dyn ServedDevice>> = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        match s {
            DeviceSpec::Sim(chip) => {
                let t = file.as_ref().map(|f| device_trace(f, i, s.to_string()));
                out.push(Box::new(SimServed::new(*chip, i, t)?))
            }
            DeviceSpec::Vfio(bdf) => {
                if file.is_some() {
                    log::warn!(
                        "serve: --trace records simulated devices only: nothing of {s} is traced"
                    );
                }
                out.push(Box::new(VfioServed::open(*bdf)?))
            }
            other => {
                return Err(CliError::Usage(format!(
                    "nvbare serve serves sim:CHIP and vfio:BDF devices; {other} cannot be served"
                )));
            }
        }
    }
    Ok(out)
}

/// Runs `nvbare serve`.
pub fn run(out: &mut dyn Write, o: ServeOptions) -> Result<(), CliError> {
    let devices = Devices::new(open_devices(&o.devices, o.trace.as_deref())?);
    let listener = TcpListener::bind(o.listen)
        .map_err(|e| CliError::Runtime(format!("cannot listen on {}: {e}", o.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Runtime(format!("listening socket: {e}")))?;
    let io = |e: io::Error| CliError::Runtime(format!("writing output: {e}"));
    if !addr.ip().is_loopback() {
        writeln!(
            out,
            "warning: listening on {addr}, beyond this machine: the protocol has no \
             authentication, so anyone who reaches the port drives these GPUs"
        )
        .map_err(io)?;
    }
    let names: Vec<String> = o.devices.iter().map(|d| d.to_string()).collect();
    writeln!(
        out,
        "nvbare serve: listening on {addr} ({}); REMOTE={addr} DEV=PCI+NV for tinygrad, \
         --device remote:{addr} for nvbare",
        names.join(", ")
    )
    .map_err(io)?;
    out.flush().map_err(io)?;
    serve_forever(listener, devices, o.limits);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A BAR of memory that logs every access: `(write, offset, value)`.
    struct LogBar {
        words: RefCell<Vec<u32>>,
        log: RefCell<Vec<(bool, usize, u32)>>,
    }

    impl LogBar {
        fn new(words: usize) -> Self {
            LogBar {
                words: RefCell::new(
                    (0..words as u32)
                        .map(|i| 0x0302_0100 + i * 0x0404_0404)
                        .collect(),
                ),
                log: RefCell::new(Vec::new()),
            }
        }
    }

    impl Mmio for LogBar {
        fn size(&self) -> usize {
            self.words.borrow().len() * 4
        }
        fn read32(&self, offset: usize) -> u32 {
            assert!(
                offset.is_multiple_of(4) && offset < self.size(),
                "read at {offset:#x}"
            );
            let v = self.words.borrow()[offset / 4];
            self.log.borrow_mut().push((false, offset, v));
            v
        }
        fn write32(&self, offset: usize, value: u32) {
            assert!(
                offset.is_multiple_of(4) && offset < self.size(),
                "write at {offset:#x}"
            );
            self.words.borrow_mut()[offset / 4] = value;
            self.log.borrow_mut().push((true, offset, value));
        }
    }

    #[test]
    fn bar1_reads_of_any_offset_and_length_use_the_covering_words() {
        let bar = LogBar::new(16); // bytes 0..64 hold 0, 1, 2, ...
        for (off, len) in [
            (0, 64),
            (1, 1),
            (3, 2),
            (5, 10),
            (60, 4),
            (61, 3),
            (0, 0),
            (63, 1),
        ] {
            let mut d = vec![0u8; len];
            read_words(&bar, off as u64, &mut d).unwrap();
            let want: Vec<u8> = (off..off + len).map(|b| b as u8).collect();
            assert_eq!(d, want, "{off}+{len}");
        }
        bar.log.borrow_mut().clear();
        let mut d = [0u8; 6];
        read_words(&bar, 7, &mut d).unwrap();
        let reads: Vec<usize> = bar.log.borrow().iter().map(|l| l.1).collect();
        assert_eq!(reads, [4, 8, 12]);
    }

    #[test]
    fn bar1_writes_merge_partial_words_and_write_whole_ones_blind() {
        let bar = LogBar::new(4);
        write_words(&bar, 2, &[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11]).unwrap();
        let mut all = [0u8; 16];
        read_words(&bar, 0, &mut all).unwrap();
        assert_eq!(
            all,
            [
                0, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 9, 10, 11, 12, 13, 14, 15
            ]
        );
        bar.log.borrow_mut().clear();
        write_words(&bar, 4, &[1; 8]).unwrap();
        assert!(
            bar.log.borrow().iter().all(|l| l.0),
            "whole words are written without a read: {:?}",
            bar.log.borrow()
        );
    }

    #[test]
    fn accesses_outside_the_mapping_are_refused_not_made() {
        let bar = LogBar::new(4);
        let mut d = [0u8; 8];
        for off in [12u64, 16, u64::MAX - 3, u64::MAX, 1 << 40] {
            let e = read_words(&bar, off, &mut d).unwrap_err();
            assert!(e.0.contains("outside the 0x10-byte mapping"), "{e}");
            assert!(write_words(&bar, off, &d).is_err());
        }
        assert!(bar.log.borrow().is_empty(), "{:?}", bar.log.borrow());
        assert_eq!(bar_span(8, 8, 16), Ok((8, 16)));
        assert!(bar_span(9, 8, 16).is_err());
    }

    #[test]
    fn bar0_takes_whole_aligned_words_only() {
        assert!(aligned(0, 4).is_ok() && aligned(0x100, 64).is_ok() && aligned(8, 0).is_ok());
        for (off, len) in [(1, 4), (2, 4), (0, 2), (0, 5), (4, 1)] {
            let e = aligned(off, len).unwrap_err();
            assert!(e.0.contains("BAR0 takes 32-bit accesses"), "{e}");
        }
    }
}
