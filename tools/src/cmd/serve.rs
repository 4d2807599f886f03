//! `nvbare serve`: GPUs over tinygrad's remote PCI protocol (`REMOTE=host:port` in tinygrad
//! 0.14; wire format in `nvbare_pci_host::remote::wire`).
//!
//! A client sees each served device as a PCI function: BARs it reads and writes, config space,
//! a function-level reset, and host memory it allocates (MAP_SYSMEM) and the GPU reaches by DMA
//! at the bus addresses answered. For `sim:CHIP` devices all of that is the simulator's: the
//! boot hardware, the GSP-RM emulator, the GMMU and the engines run as the client drives them
//! (every request lets the simulated GPU run, as a real one runs beside its driver), and the
//! GPU reaches its own BAR1 by DMA at the BAR's bus address, as on a PCIe bus.
//!
//! The server is a trust boundary: every request is checked (device, BAR, offset + length
//! inside it, sysmem handle, sizes against [`ServeLimits`]), a bad one gets an error response
//! (or, for the writes, which have none, is dropped and logged), and nothing a client sends
//! can panic the server or make it allocate without bound. A client's host memory is freed
//! when it disconnects. The protocol has no authentication: the server listens on loopback
//! unless told otherwise.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::hal::{Clock, DmaAllocator, DmaBuffer, Mmio, PciConfig};
use nvbare_pci_host::remote::wire::{Cmd, REQUEST_SIZE, Request, Response, probe_filters};
use nvbare_sim::baremetal::BareMetalSim;
use nvbare_sim::boot::{BootSimConfig, SimFirmware};
use nvbare_sim::models::ChipModel;
use nvbare_sim::trace::Trace;

use crate::baremetal::ensure_firmware;
use crate::{CliError, DeviceSpec};

/// Bounds on what one client may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Largest single MAP_SYSMEM.
    pub max_sysmem_alloc: u64,
    /// Host memory one connection may hold at once.
    pub max_sysmem_per_connection: u64,
    /// Largest read or write payload of one request.
    pub max_transfer: u64,
    /// Largest PROBE payload.
    pub max_probe_payload: u64,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_sysmem_alloc: 1 << 30,
            max_sysmem_per_connection: 4 << 30,
            max_transfer: 256 << 20,
            max_probe_payload: 64 << 10,
        }
    }
}

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

/// A request the server refuses; its text goes back to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse<T>(s: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(s.into()))
}

/// Host memory a client allocated, as the device's DMA reaches it.
pub trait Sysmem: Send {
    /// Bytes.
    fn size(&self) -> u64;
    /// Copies out.
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), Refusal>;
    /// Copies in.
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), Refusal>;
}

/// A device as the protocol presents it.
pub trait ServedDevice: Send {
    /// What `nvbare serve` calls it (`sim:ad102`).
    fn name(&self) -> String;
    /// PCI vendor id.
    fn vendor(&self) -> u16;
    /// PCI device id.
    fn device_id(&self) -> u16;
    /// PCI class code (24 bits).
    fn class(&self) -> u32;
    /// Bus address and size of BAR `index`, if it has one.
    fn bar(&self, index: u32) -> Option<(u64, u64)>;
    /// Reads BAR `bar` at `offset` (already checked to lie inside it).
    fn mmio_read(&mut self, bar: u32, offset: u64, dst: &mut [u8]) -> Result<(), Refusal>;
    /// Writes BAR `bar` at `offset` (already checked).
    fn mmio_write(&mut self, bar: u32, offset: u64, src: &[u8]) -> Result<(), Refusal>;
    /// Reads `size` (1, 2 or 4) bytes of config space.
    fn cfg_read(&mut self, offset: u16, size: u8) -> Result<u32, Refusal>;
    /// Writes `size` bytes of config space.
    fn cfg_write(&mut self, offset: u16, size: u8, value: u32) -> Result<(), Refusal>;
    /// Function-level reset.
    fn reset(&mut self) -> Result<(), Refusal>;
    /// Allocates host memory the device reaches by DMA: the memory and each 4 KiB page's bus
    /// address.
    fn alloc_sysmem(
        &mut self,
        size: u64,
        contiguous: bool,
    ) -> Result<(Box<dyn Sysmem>, Vec<u64>), Refusal>;
    /// Lets the device run (called before every request is answered).
    fn tick(&mut self) {}
    /// What the device found wrong so far (the simulator's checks), for the log.
    fn errors(&self) -> Vec<String> {
        Vec::new()
    }
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
        let dir = ensure_firmware(chip)?;
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
                let b = self.sim.gpu().bar0();
                for (i, w) in dst.chunks_exact_mut(4).enumerate() {
                    let v = b.read32(offset as usize + 4 * i);
                    w.copy_from_slice(&v.to_le_bytes());
                }
                Ok(())
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
                let b = self.sim.gpu().bar0();
                for (i, w) in src.chunks_exact(4).enumerate() {
                    let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    b.write32(offset as usize + 4 * i, v);
                }
                Ok(())
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

fn aligned(offset: u64, len: usize) -> Result<(), Refusal> {
    if !offset.is_multiple_of(4) || !len.is_multiple_of(4) {
        return refuse(format!(
            "BAR0 takes 32-bit accesses: {len} bytes at {offset:#x} is not a whole number of \
             aligned words"
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// The server.

/// The devices, shared by every connection.
pub struct Devices {
    devices: Vec<Mutex<Box<dyn ServedDevice>>>,
}

impl fmt::Debug for Devices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Devices")
            .field("count", &self.devices.len())
            .finish()
    }
}

impl Devices {
    /// Serves `devices`.
    pub fn new(devices: Vec<Box<dyn ServedDevice>>) -> Arc<Self> {
        Arc::new(Devices {
            devices: devices.into_iter().map(Mutex::new).collect(),
        })
    }

    fn get(&self, i: u32) -> Result<MutexGuard<'_, Box<dyn ServedDevice>>, Refusal> {
        let d = self.devices.get(i as usize).ok_or_else(|| {
            Refusal(format!(
                "no device {i}: this server has {} (PROBE lists them)",
                self.devices.len()
            ))
        })?;
        Ok(d.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// One client's state: its host memory.
struct Connection {
    devices: Arc<Devices>,
    limits: ServeLimits,
    sysmem: HashMap<u32, (u32, Box<dyn Sysmem>)>,
    sysmem_bytes: u64,
    next_handle: u32,
    peer: String,
}

/// What to send back.
enum Answer {
    /// Nothing (a write).
    None,
    /// A success header and data.
    Ok(Response, Vec<u8>),
}

impl Connection {
    fn sysmem(&self, dev: u32, handle: u32) -> Result<&dyn Sysmem, Refusal> {
        match self.sysmem.get(&handle) {
            Some((d, m)) if *d == dev => Ok(m.as_ref()),
            Some(_) => refuse(format!(
                "sysmem handle {handle} belongs to another device than {dev}"
            )),
            None => refuse(format!(
                "no sysmem handle {handle} on this connection (MAP_SYSMEM gives them out)"
            )),
        }
    }

    fn check_transfer(&self, len: u64) -> Result<usize, Refusal> {
        if len > self.limits.max_transfer {
            return refuse(format!(
                "a transfer of {len} bytes is larger than the {} this server allows per request",
                self.limits.max_transfer
            ));
        }
        Ok(len as usize)
    }

    fn bar_range(dev: &dyn ServedDevice, bar: u32, offset: u64, len: u64) -> Result<(), Refusal> {
        let Some((_, size)) = dev.bar(bar) else {
            return refuse(format!("{} has no BAR{bar}", dev.name()));
        };
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return refuse(format!(
                "{len} bytes at {offset:#x} are outside BAR{bar} ({size:#x} bytes)"
            ));
        }
        Ok(())
    }

    /// Answers one request whose payload (if any) is `payload`.
    fn handle(&mut self, req: &Request, payload: &[u8]) -> Result<Answer, Refusal> {
        let Some(cmd) = req.cmd() else {
            return refuse(format!("unknown command {}", req.cmd));
        };
        if cmd == Cmd::Probe {
            return self.probe(req, payload);
        }
        if cmd == Cmd::Ping {
            return Ok(Answer::Ok(Response::ok(0, 0), Vec::new()));
        }
        let devices = self.devices.clone();
        let mut dev = devices.get(req.dev_id)?;
        dev.tick();
        let [a0, a1, a2] = req.args;
        match cmd {
            Cmd::Probe | Cmd::Ping => unreachable_ok(),
            Cmd::MapBar => match dev.bar(req.bar) {
                Some((addr, size)) => Ok(Answer::Ok(Response::ok(addr, size), Vec::new())),
                None => refuse(format!("{} has no BAR{}", dev.name(), req.bar)),
            },
            Cmd::MapSysmemFd => refuse(
                "MAP_SYSMEM_FD passes a file descriptor over a Unix socket (tinygrad uses it \
                 on macOS only); use MAP_SYSMEM",
            ),
            Cmd::CfgRead => {
                let (off, size) = cfg_args(a0, a1)?;
                let v = dev.cfg_read(off, size)?;
                Ok(Answer::Ok(Response::ok(v.into(), 0), Vec::new()))
            }
            Cmd::CfgWrite => {
                let (off, size) = cfg_args(a0, a1)?;
                let value = u32::try_from(a2)
                    .map_err(|_| Refusal(format!("config value {a2:#x} is wider than 32 bits")))?;
                dev.cfg_write(off, size, value)?;
                Ok(Answer::Ok(Response::ok(0, 0), Vec::new()))
            }
            Cmd::Reset => {
                dev.reset()?;
                Ok(Answer::Ok(Response::ok(0, 0), Vec::new()))
            }
            Cmd::ResizeBar => match dev.bar(req.bar) {
                // BARs are served at their largest size already.
                Some(_) => Ok(Answer::Ok(Response::ok(0, 0), Vec::new())),
                None => refuse(format!("{} has no BAR{}", dev.name(), req.bar)),
            },
            Cmd::MmioRead => {
                let n = self.check_transfer(a1)?;
                Self::bar_range(dev.as_ref(), req.bar, a0, a1)?;
                let mut data = vec![0u8; n];
                dev.mmio_read(req.bar, a0, &mut data)?;
                Ok(Answer::Ok(Response::ok(0, 0), data))
            }
            Cmd::MmioWrite => {
                Self::bar_range(dev.as_ref(), req.bar, a0, payload.len() as u64)?;
                dev.mmio_write(req.bar, a0, payload)?;
                Ok(Answer::None)
            }
            Cmd::MapSysmem => {
                drop(dev);
                self.map_sysmem(req.dev_id, a0, a1 != 0)
            }
            Cmd::SysmemRead => {
                let n = self.check_transfer(a1)?;
                drop(dev);
                let m = self.sysmem(req.dev_id, req.bar)?;
                if a0.checked_add(a1).is_none_or(|e| e > m.size()) {
                    return refuse(format!(
                        "{a1} bytes at {a0:#x} are outside sysmem {} ({} bytes)",
                        req.bar,
                        m.size()
                    ));
                }
                let mut data = vec![0u8; n];
                m.read(a0, &mut data)?;
                Ok(Answer::Ok(Response::ok(0, 0), data))
            }
            Cmd::SysmemWrite => {
                drop(dev);
                let m = self.sysmem(req.dev_id, req.bar)?;
                if a0
                    .checked_add(payload.len() as u64)
                    .is_none_or(|e| e > m.size())
                {
                    return refuse(format!(
                        "{} bytes at {a0:#x} are outside sysmem {} ({} bytes)",
                        payload.len(),
                        req.bar,
                        m.size()
                    ));
                }
                m.write(a0, payload)?;
                Ok(Answer::None)
            }
        }
    }

    fn probe(&mut self, req: &Request, payload: &[u8]) -> Result<Answer, Refusal> {
        let [base_class, _, vendor] = req.args;
        let filters = probe_filters(payload);
        let mut lines = Vec::new();
        for (i, d) in self.devices.devices.iter().enumerate() {
            let d = d.lock().unwrap_or_else(|p| p.into_inner());
            let id = u32::from(d.device_id());
            let ok_vendor = vendor == 0 || vendor == u64::from(d.vendor());
            let ok_class = base_class == 0 || base_class == u64::from(d.class() >> 16);
            let ok_id = filters.is_empty() || filters.iter().any(|&(m, v)| id & m == v);
            if ok_vendor && ok_class && ok_id {
                lines.push(format!("0000:{:02x}:00.0:{i}", i + 1));
            }
        }
        let text = lines.join("\n").into_bytes();
        Ok(Answer::Ok(Response::ok(text.len() as u64, 0), text))
    }

    fn map_sysmem(&mut self, dev_id: u32, size: u64, contiguous: bool) -> Result<Answer, Refusal> {
        if size == 0 {
            return refuse("MAP_SYSMEM of 0 bytes");
        }
        if size > self.limits.max_sysmem_alloc {
            return refuse(format!(
                "MAP_SYSMEM of {size} bytes is larger than the {} this server allows at once",
                self.limits.max_sysmem_alloc
            ));
        }
        let rounded = size.div_ceil(4096) * 4096;
        if self.sysmem_bytes.saturating_add(rounded) > self.limits.max_sysmem_per_connection {
            return refuse(format!(
                "this connection holds {} bytes of sysmem; {size} more would pass the {} \
                 allowed per connection",
                self.sysmem_bytes, self.limits.max_sysmem_per_connection
            ));
        }
        let devices = self.devices.clone();
        let (mem, pages) = devices.get(dev_id)?.alloc_sysmem(rounded, contiguous)?;
        let handle = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        self.sysmem_bytes += rounded;
        self.sysmem.insert(handle, (dev_id, mem));
        let mut data = Vec::with_capacity(pages.len() * 8);
        for p in pages {
            data.extend_from_slice(&p.to_le_bytes());
        }
        Ok(Answer::Ok(
            Response::ok(data.len() as u64, handle.into()),
            data,
        ))
    }
}

fn unreachable_ok() -> Result<Answer, Refusal> {
    refuse("internal: command handled twice")
}

fn cfg_args(offset: u64, size: u64) -> Result<(u16, u8), Refusal> {
    let size = match size {
        1 | 2 | 4 => size as u8,
        _ => return refuse(format!("config access of {size} bytes (1, 2 or 4)")),
    };
    if !offset.is_multiple_of(u64::from(size)) || offset + u64::from(size) > 4096 {
        return refuse(format!(
            "config access of {size} bytes at {offset:#x}: misaligned or beyond 4 KiB"
        ));
    }
    Ok((offset as u16, size))
}

/// Serves one client until it disconnects or breaks the protocol.
fn serve_connection(stream: TcpStream, devices: Arc<Devices>, limits: ServeLimits) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut rd = BufReader::with_capacity(1 << 20, read_half);
    let mut wr = BufWriter::with_capacity(1 << 20, stream);
    let mut conn = Connection {
        devices,
        limits,
        sysmem: HashMap::new(),
        sysmem_bytes: 0,
        next_handle: 1,
        peer,
    };
    log::info!("serve: {} connected", conn.peer);
    let why = loop {
        match serve_one(&mut conn, &mut rd, &mut wr) {
            Ok(true) => {}
            Ok(false) => break "disconnected".to_string(),
            Err(e) => break format!("connection closed: {e}"),
        }
    };
    log::info!(
        "serve: {} {why}; freeing its {} sysmem buffers ({} bytes)",
        conn.peer,
        conn.sysmem.len(),
        conn.sysmem_bytes
    );
}

/// Reads, answers and flushes one request; `Ok(false)` at a clean end of stream.
fn serve_one(conn: &mut Connection, rd: &mut impl Read, wr: &mut impl Write) -> io::Result<bool> {
    let mut hdr = [0u8; REQUEST_SIZE];
    if !read_exact_or_eof(rd, &mut hdr)? {
        return Ok(false);
    }
    let Ok(req) = Request::decode(&hdr) else {
        return Err(io::Error::other("bad header"));
    };
    let cmd = req.cmd();
    let plen = req.payload_len();
    let cap = match cmd {
        Some(Cmd::Probe) => conn.limits.max_probe_payload,
        _ => conn.limits.max_transfer,
    };
    if plen > cap {
        // The payload cannot be skipped safely without reading it all: close.
        return Err(io::Error::other(format!(
            "{} payload of {plen} bytes is larger than the {cap} allowed",
            cmd.map_or("?", |c| c.name())
        )));
    }
    let mut payload = vec![0u8; plen as usize];
    rd.read_exact(&mut payload)?;
    let answer = conn.handle(&req, &payload);
    let wants_response = cmd.is_none_or(|c| c.has_response());
    match answer {
        Ok(Answer::None) => {}
        Ok(Answer::Ok(resp, data)) => {
            wr.write_all(&resp.encode())?;
            wr.write_all(&data)?;
        }
        Err(Refusal(text)) if wants_response => {
            let b = text.into_bytes();
            wr.write_all(&Response::error(b.len()).encode())?;
            wr.write_all(&b)?;
        }
        Err(Refusal(text)) => {
            log::warn!(
                "serve: {}: dropped {} (no response to send): {text}",
                conn.peer,
                cmd.map_or("?", |c| c.name())
            );
        }
    }
    wr.flush()?;
    Ok(true)
}

/// Fills `buf`; `Ok(false)` if the stream ended before its first byte.
fn read_exact_or_eof(rd: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match rd.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("header truncated after {got} bytes"),
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Accepts clients on `listener` forever, each on its own thread.
pub fn serve_forever(listener: TcpListener, devices: Arc<Devices>, limits: ServeLimits) {
    for stream in listener.incoming() {
        match stream {
            Ok(s) => {
                let d = devices.clone();
                let spawned = std::thread::Builder::new()
                    .name("nvbare-serve".into())
                    .spawn(move || serve_connection(s, d, limits));
                if let Err(e) = spawned {
                    log::error!("serve: cannot start a thread for a client: {e}");
                }
            }
            Err(e) => log::warn!("serve: accept: {e}"),
        }
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

/// Opens the devices `specs` names; with `trace`, each records its boot and RPCs there.
pub fn open_devices(
    specs: &[DeviceSpec],
    trace: Option<&std::path::Path>,
) -> Result<Vec<Box<dyn ServedDevice>>, CliError> {
    let file = trace.map(trace_file).transpose()?;
    if specs.is_empty() {
        return Err(CliError::Usage(
            "name at least one device: --device sim:ad102 (or sim:gh100, sim:gb202, vfio:BDF)"
                .into(),
        ));
    }
    let mut out: Vec<Box<dyn ServedDevice>> = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        match s {
            DeviceSpec::Sim(chip) => {
                let t = file.as_ref().map(|f| device_trace(f, i, s.to_string()));
                out.push(Box::new(SimServed::new(*chip, i, t)?))
            }
            other => {
                return Err(CliError::Usage(format!(
                    "nvbare serve serves sim:CHIP devices; {other} cannot be served"
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
