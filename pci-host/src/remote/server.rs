//! The server side of tinygrad's remote PCI protocol (what `nvbare serve` runs; wire format in
//! [`super::wire`]).
//!
//! A client sees each served device as a PCI function: BARs it reads and writes, config space,
//! a function-level reset, and host memory it allocates (MAP_SYSMEM) and the device reaches by
//! DMA at the bus addresses answered. What is behind a device (a simulated GPU, a GPU bound to
//! vfio-pci) is a [`ServedDevice`]; this module knows nothing about GPUs, only the protocol.
//!
//! The server is a trust boundary: every request is checked (device, BAR, offset + length
//! inside it, sysmem handle, sizes against [`ServeLimits`]) before a device sees it; a bad one
//! gets an error response (or, for the two writes, which have none, is dropped and logged),
//! and a request whose payload is larger than allowed closes the connection, since its bytes
//! cannot be skipped without reading them all. Nothing a client sends can panic the server or
//! make it allocate more than the limits (a payload is read as it arrives, not allocated from
//! the length the header claims). A client's host memory is freed when it disconnects. Each
//! connection has its own thread; a device is locked for the length of one request, never
//! while the server waits for a client's bytes or for a client to take its answer, so a client
//! that stops mid-request delays no other.
//!
//! The protocol has no authentication: whoever reaches the port drives the devices.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

use super::wire::{Cmd, REQUEST_SIZE, Request, Response, probe_filters};

/// Bounds on what one client may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Largest single MAP_SYSMEM, bytes.
    pub max_sysmem_alloc: u64,
    /// Host memory one connection may hold at once, bytes.
    pub max_sysmem_per_connection: u64,
    /// Largest read or write payload of one request (MMIO and sysmem), bytes.
    pub max_transfer: u64,
    /// Largest PROBE payload, bytes.
    pub max_probe_payload: u64,
}

impl ServeLimits {
    /// The defaults of `nvbare serve`: MAP_SYSMEM up to 1 GiB at once and 4 GiB per
    /// connection, transfers up to 256 MiB, PROBE payloads up to 64 KiB.
    pub const DEFAULT: ServeLimits = ServeLimits {
        max_sysmem_alloc: 1 << 30,
        max_sysmem_per_connection: 4 << 30,
        max_transfer: 256 << 20,
        max_probe_payload: 64 << 10,
    };
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits::DEFAULT
    }
}

/// A request the server refuses; its text goes back to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// `Err(Refusal(s))`.
pub fn refuse<T>(s: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(s.into()))
}

/// Host memory a client allocated, as the device's DMA reaches it. The server checks every
/// range against [`Sysmem::size`] before calling `read` or `write`. Dropping it frees it.
pub trait Sysmem: Send {
    /// Bytes.
    fn size(&self) -> u64;
    /// Copies out `dst.len()` bytes at `offset`.
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), Refusal>;
    /// Copies `src` in at `offset`.
    fn write(&self, offset: u64, src: &[u8]) -> Result<(), Refusal>;
}

/// A device as the protocol presents it. The server checks BAR ranges, config access sizes
/// and alignment, and sysmem sizes against [`ServeLimits`] before calling these.
pub trait ServedDevice: Send {
    /// What it is called in the log (`sim:ad102`, `vfio:0000:01:00.0`).
    fn name(&self) -> String;
    /// Its PCI address (`0000:01:00.0`) for PROBE's answer, when it has a real one; without
    /// one PROBE names device N `0000:0M:00.0` with M = N + 1.
    fn pci_address(&self) -> Option<String> {
        None
    }
    /// PCI vendor id.
    fn vendor(&self) -> u16;
    /// PCI device id.
    fn device_id(&self) -> u16;
    /// PCI class code (24 bits: base class, subclass, programming interface).
    fn class(&self) -> u32;
    /// Bus address and size of BAR `index`, if it has one.
    fn bar(&self, index: u32) -> Option<(u64, u64)>;
    /// Reads BAR `bar` at `offset` (already checked to lie inside it).
    fn mmio_read(&mut self, bar: u32, offset: u64, dst: &mut [u8]) -> Result<(), Refusal>;
    /// Writes BAR `bar` at `offset` (already checked).
    fn mmio_write(&mut self, bar: u32, offset: u64, src: &[u8]) -> Result<(), Refusal>;
    /// Reads `size` (1, 2 or 4) bytes of config space at `offset`, aligned to `size` and below
    /// 4096 (already checked).
    fn cfg_read(&mut self, offset: u16, size: u8) -> Result<u32, Refusal>;
    /// Writes the low `size` bytes of `value` to config space (checked as for `cfg_read`).
    fn cfg_write(&mut self, offset: u16, size: u8, value: u32) -> Result<(), Refusal>;
    /// Function-level reset.
    fn reset(&mut self) -> Result<(), Refusal>;
    /// Allocates `size` bytes (a non-zero multiple of 4 KiB, within the limits) of host memory
    /// the device reaches by DMA: the memory and each 4 KiB page's bus address. `contiguous`
    /// is what the client asked for; a device may hand out contiguous memory either way.
    fn alloc_sysmem(
        &mut self,
        size: u64,
        contiguous: bool,
    ) -> Result<(Box<dyn Sysmem>, Vec<u64>), Refusal>;
    /// Lets the device run: called, with the device locked, before every request that names
    /// it is answered.
    fn tick(&mut self) {}
    /// What the device found wrong so far (a simulator's checks), for the log.
    fn errors(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The devices, shared by every connection; each is locked for one request at a time.
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
    /// Serves `devices`, in the order PROBE lists them.
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

    /// Device `i`, locked (for a caller that wants to look at it between requests).
    pub fn lock(&self, i: usize) -> Option<MutexGuard<'_, Box<dyn ServedDevice>>> {
        let d = self.devices.get(i)?;
        Some(d.lock().unwrap_or_else(|p| p.into_inner()))
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

/// One client's state: its host memory, freed when the connection is dropped.
pub struct Connection {
    devices: Arc<Devices>,
    limits: ServeLimits,
    /// Handle -> (device, memory).
    sysmem: HashMap<u32, (u32, Box<dyn Sysmem>)>,
    sysmem_bytes: u64,
    next_handle: u32,
    peer: String,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("sysmem_buffers", &self.sysmem.len())
            .field("sysmem_bytes", &self.sysmem_bytes)
            .finish()
    }
}

/// What to send back.
enum Answer {
    /// Nothing (a write).
    None,
    /// A success header and data.
    Ok(Response, Vec<u8>),
}

impl Connection {
    /// A new client's state; `peer` names it in the log.
    pub fn new(devices: Arc<Devices>, limits: ServeLimits, peer: impl Into<String>) -> Self {
        Connection {
            devices,
            limits,
            sysmem: HashMap::new(),
            sysmem_bytes: 0,
            next_handle: 1,
            peer: peer.into(),
        }
    }

    /// The client, as the log names it.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Host memory buffers the client holds.
    pub fn sysmem_buffers(&self) -> usize {
        self.sysmem.len()
    }

    /// Bytes of host memory the client holds.
    pub fn sysmem_bytes(&self) -> u64 {
        self.sysmem_bytes
    }

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
        usize::try_from(len).map_err(|_| Refusal(format!("a transfer of {len} bytes")))
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

    fn sysmem_range(m: &dyn Sysmem, handle: u32, offset: u64, len: u64) -> Result<(), Refusal> {
        if offset.checked_add(len).is_none_or(|e| e > m.size()) {
            return refuse(format!(
                "{len} bytes at {offset:#x} are outside sysmem {handle} ({} bytes)",
                m.size()
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
            Cmd::Probe | Cmd::Ping => refuse("internal: command handled twice"),
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
                Self::sysmem_range(m, req.bar, a0, a1)?;
                let mut data = vec![0u8; n];
                m.read(a0, &mut data)?;
                Ok(Answer::Ok(Response::ok(0, 0), data))
            }
            Cmd::SysmemWrite => {
                drop(dev);
                let m = self.sysmem(req.dev_id, req.bar)?;
                Self::sysmem_range(m, req.bar, a0, payload.len() as u64)?;
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
                let addr = d
                    .pci_address()
                    .unwrap_or_else(|| format!("0000:{:02x}:00.0", i + 1));
                lines.push(format!("{addr}:{i}"));
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
        if pages.len() as u64 != rounded / 4096 || mem.size() < rounded {
            return refuse(format!(
                "internal: the device gave {} bytes in {} pages for a MAP_SYSMEM of {rounded}",
                mem.size(),
                pages.len()
            ));
        }
        // Handles are never 0 and never one still held (they wrap after 2^32 - 1).
        let mut handle = self.next_handle;
        while handle == 0 || self.sysmem.contains_key(&handle) {
            handle = handle.wrapping_add(1);
        }
        self.next_handle = handle.wrapping_add(1);
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

/// Checks a config access: 1, 2 or 4 bytes, aligned to its size, inside the 4 KiB of PCIe
/// config space.
fn cfg_args(offset: u64, size: u64) -> Result<(u16, u8), Refusal> {
    let size = match size {
        1 | 2 | 4 => size as u8,
        _ => return refuse(format!("config access of {size} bytes (1, 2 or 4)")),
    };
    if !offset.is_multiple_of(u64::from(size))
        || offset.checked_add(u64::from(size)).is_none_or(|e| e > 4096)
    {
        return refuse(format!(
            "config access of {size} bytes at {offset:#x}: misaligned or beyond 4 KiB"
        ));
    }
    Ok((offset as u16, size))
}

/// Reads, answers and flushes one request; `Ok(false)` at a clean end of stream (before a
/// request's first byte). An error means the connection cannot go on: the stream ended or
/// failed mid-request, or a payload was larger than the limits allow.
pub fn serve_one(
    conn: &mut Connection,
    rd: &mut impl Read,
    wr: &mut impl Write,
) -> io::Result<bool> {
    let mut hdr = [0u8; REQUEST_SIZE];
    if !read_exact_or_eof(rd, &mut hdr)? {
        return Ok(false);
    }
    let req = Request::decode(&hdr).map_err(io::Error::other)?;
    let cmd = req.cmd();
    let plen = req.payload_len();
    let cap = match cmd {
        Some(Cmd::Probe) => conn.limits.max_probe_payload,
        _ => conn.limits.max_transfer,
    };
    if plen > cap {
        // The payload cannot be skipped safely without reading it all: close.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} payload of {plen} bytes is larger than the {cap} allowed",
                cmd.map_or("?", |c| c.name())
            ),
        ));
    }
    let mut payload = Vec::new();
    read_payload(rd, plen, &mut payload)?;
    let answer = conn.handle(&req, &payload);
    drop(payload);
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

/// Serves requests from `rd` until the stream ends (`Ok(())`) or breaks the protocol.
pub fn serve_stream(
    conn: &mut Connection,
    rd: &mut impl Read,
    wr: &mut impl Write,
) -> io::Result<()> {
    while serve_one(conn, rd, wr)? {}
    Ok(())
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

/// How much more of a payload is allocated at a time: memory follows the bytes that arrive,
/// not the length a header claims.
const PAYLOAD_STEP: usize = 1 << 20;

/// Reads a payload of `len` bytes (already checked against the limits) into `buf`, growing
/// it [`PAYLOAD_STEP`] bytes at a time as they arrive.
fn read_payload(rd: &mut impl Read, len: u64, buf: &mut Vec<u8>) -> io::Result<()> {
    let len = usize::try_from(len).map_err(|_| io::Error::other("payload too large"))?;
    buf.clear();
    while buf.len() < len {
        let start = buf.len();
        let step = (len - start).min(PAYLOAD_STEP);
        buf.resize(start + step, 0);
        let mut got = 0;
        while got < step {
            match rd.read(&mut buf[start + got..start + step]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("payload truncated after {} of {len} bytes", start + got),
                    ));
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Serves one client until it disconnects or breaks the protocol; its host memory is freed
/// when this returns.
pub fn serve_connection(stream: TcpStream, devices: Arc<Devices>, limits: ServeLimits) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut rd = BufReader::with_capacity(1 << 20, read_half);
    let mut wr = BufWriter::with_capacity(1 << 20, stream);
    let mut conn = Connection::new(devices, limits, peer);
    log::info!("serve: {} connected", conn.peer);
    let why = match serve_stream(&mut conn, &mut rd, &mut wr) {
        Ok(()) => "disconnected".to_string(),
        Err(e) => format!("connection closed: {e}"),
    };
    log::info!(
        "serve: {} {why}; freeing its {} sysmem buffers ({} bytes)",
        conn.peer,
        conn.sysmem.len(),
        conn.sysmem_bytes
    );
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

#[cfg(any(test, feature = "testutil"))]
pub mod testutil;

#[cfg(test)]
mod tests;
