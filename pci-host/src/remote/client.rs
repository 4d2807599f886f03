//! The client side of tinygrad's remote PCI protocol: a GPU on another machine (or in another
//! process) as nvbare's `hal` traits, what `--device remote:HOST:PORT[:N]` opens.
//!
//! [`RemoteGpu::connect`] opens a TCP connection (with a connect timeout, `TCP_NODELAY`), asks
//! the server for its NVIDIA display-class devices (PROBE) and picks one. Its BARs are
//! [`RemoteBar`]s ([`Mmio`]: MMIO_READ / MMIO_WRITE of 4 bytes), its config space is
//! [`RemotePci`] ([`PciConfig`]: CFG_READ / CFG_WRITE, RESET), and host memory the GPU can
//! reach is [`RemoteDma`] ([`DmaAllocator`](nvbare_core::hal::DmaAllocator): MAP_SYSMEM, then SYSMEM_READ / SYSMEM_WRITE in
//! chunks of [`SYSMEM_CHUNK`] bytes).
//!
//! All of them share one connection and send one request at a time. A request that fails
//! because the connection broke (closed, reset, no answer within the I/O timeout, an answer the
//! client refuses) ends the connection: every later request fails at once with the same error.
//! [`Mmio::read32`] cannot report an error, so there it returns all ones (like a PCI master
//! abort) and the error is kept for the next fallible call ([`Mmio::try_read32`], a DMA access,
//! config space), which reports it; [`RemoteGpu::last_error`] keeps the whole text.
//!
//! nvbare's DMA buffers have one device address, so every MAP_SYSMEM asks for contiguous
//! memory and checks that the pages came back contiguous in bus address
//! ([`RemoteError::NotContiguous`] otherwise). The protocol cannot free host memory: a dropped
//! buffer is kept for a later allocation of the same size (zeroed again by the client), and
//! the server frees everything when the connection closes.
//!
//! Every length the server sends is checked before anything is allocated or read from it
//! ([`MAX_ANSWER_BYTES`] for PROBE's list and error text; MAP_SYSMEM's list must be exactly 8
//! bytes per page asked for). The protocol has no authentication: connect only to servers you
//! trust, over networks you trust (docs/remote.md).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::hal::{HalError, Mmio, PciConfig, check_mmio, check_range};

use super::wire::{Cmd, RESPONSE_SIZE, Request, Response, encode_probe_filters};
use crate::Bdf;
use crate::clock::HostClock;

mod dma;
mod error;

pub use self::dma::{RemoteBuffer, RemoteDma};
pub use self::error::RemoteError;

/// How long [`RemoteGpu::connect`] waits for the TCP connection by default (tinygrad's
/// `REMOTE_TIMEOUT`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one request may wait for the server by default (sending, then the answer): a
/// server that stops answering fails the request instead of hanging it. A function reset or a
/// large MAP_SYSMEM takes the server a second or two.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of PROBE's device list or of a server's error text the client reads.
pub const MAX_ANSWER_BYTES: u64 = 64 << 10;

/// SYSMEM_READ / SYSMEM_WRITE move at most this many bytes per request.
pub const SYSMEM_CHUNK: usize = 1 << 20;

/// The PCI base class PROBE asks for (display controllers).
pub const DISPLAY_CLASS: u64 = 0x03;

/// Host memory comes in pages of this size (MAP_SYSMEM answers one bus address per page).
pub const SYSMEM_PAGE: u64 = 4096;

/// `HOST:PORT`, IPv6 addresses in brackets.
pub fn format_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Connection settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteOptions {
    /// How long to wait for the TCP connection ([`CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// How long one request may wait for the server ([`IO_TIMEOUT`]).
    pub io_timeout: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            connect_timeout: CONNECT_TIMEOUT,
            io_timeout: IO_TIMEOUT,
        }
    }
}

/// A buffer given back, kept for reuse (the protocol cannot free host memory).
#[derive(Debug)]
struct FreeBuffer {
    handle: u32,
    dev_addr: u64,
    len: usize,
}

/// The connection and what it remembers.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// The error that ended the connection: every later request fails with it.
    broken: Option<RemoteError>,
    /// An error met by an access that cannot report one ([`Mmio::read32`], `write32`), for
    /// the next fallible call.
    unreported: Option<RemoteError>,
    /// The latest error of any kind.
    last: Option<RemoteError>,
    /// Dropped DMA buffers, for reuse.
    free: Vec<FreeBuffer>,
}

/// What every handle of one remote GPU shares.
#[derive(Debug)]
struct Shared {
    /// `HOST:PORT`.
    addr: String,
    /// The device index in requests (the last field of PROBE's name).
    dev_id: u32,
    io_timeout: Duration,
    conn: Mutex<Conn>,
}

/// Whether a failed request's error is reported by the caller or kept for later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    /// The caller returns it.
    Now,
    /// The caller cannot (an infallible MMIO access): keep it for the next fallible call.
    Later,
}

fn io_error(addr: &str, during: Cmd, timeout: Duration, e: io::Error) -> RemoteError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => RemoteError::Closed {
            addr: addr.to_string(),
            during,
        },
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => RemoteError::Timeout {
            addr: addr.to_string(),
            during,
            timeout,
        },
        _ => RemoteError::Io {
            addr: addr.to_string(),
            during,
            reason: e.to_string(),
        },
    }
}

impl Conn {
    /// Sends a request header and its payload (one write for small payloads).
    fn send(&mut self, s: &Shared, req: Request, payload: &[u8]) -> Result<(), RemoteError> {
        let cmd = req.cmd().unwrap_or(Cmd::Ping);
        let header = req.encode();
        let r = if payload.len() <= 4096 {
            let mut b = Vec::with_capacity(header.len() + payload.len());
            b.extend_from_slice(&header);
            b.extend_from_slice(payload);
            self.stream.write_all(&b)
        } else {
            self.stream
                .write_all(&header)
                .and_then(|()| self.stream.write_all(payload))
        };
        r.map_err(|e| io_error(&s.addr, cmd, s.io_timeout, e))
    }

    fn read_exact(&mut self, s: &Shared, cmd: Cmd, buf: &mut [u8]) -> Result<(), RemoteError> {
        self.stream
            .read_exact(buf)
            .map_err(|e| io_error(&s.addr, cmd, s.io_timeout, e))
    }

    /// Reads a response header; a failure's text becomes [`RemoteError::Server`].
    fn response(&mut self, s: &Shared, cmd: Cmd) -> Result<Response, RemoteError> {
        let mut h = [0u8; RESPONSE_SIZE];
        self.read_exact(s, cmd, &mut h)?;
        let Some(resp) = Response::decode(&h) else {
            return Err(RemoteError::BadAnswer {
                addr: s.addr.clone(),
                cmd,
                reason: "short response header".into(),
            });
        };
        if resp.status == 0 {
            return Ok(resp);
        }
        let text = self.read_limited(s, cmd, resp.r0, "error text")?;
        let message = if text.is_empty() {
            "unknown error".to_string()
        } else {
            String::from_utf8_lossy(&text).into_owned()
        };
        Err(RemoteError::Server {
            addr: s.addr.clone(),
            cmd,
            message,
        })
    }

    /// Reads `len` bytes of an answer, refusing more than [`MAX_ANSWER_BYTES`] unread.
    fn read_limited(
        &mut self,
        s: &Shared,
        cmd: Cmd,
        len: u64,
        what: &'static str,
    ) -> Result<Vec<u8>, RemoteError> {
        if len > MAX_ANSWER_BYTES {
            return Err(RemoteError::TooLarge {
                addr: s.addr.clone(),
                cmd,
                what,
                len,
                limit: MAX_ANSWER_BYTES,
            });
        }
        let mut v = vec![0u8; len as usize];
        self.read_exact(s, cmd, &mut v)?;
        Ok(v)
    }

    /// Sends a request that has a response and reads the response header.
    fn call(
        &mut self,
        s: &Shared,
        cmd: Cmd,
        bar: u32,
        args: [u64; 3],
        payload: &[u8],
    ) -> Result<Response, RemoteError> {
        self.send(s, Request::new(cmd, s.dev_id, bar, args), payload)?;
        self.response(s, cmd)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Conn> {
        // A panic while the lock was held leaves at worst a broken stream, which the next
        // request finds out.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one exchange on the connection, with the error bookkeeping of the module docs.
    fn run<T>(
        &self,
        report: Report,
        f: impl FnOnce(&mut Conn, &Shared) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        let mut c = self.lock();
        if report == Report::Now
            && let Some(e) = c.unreported.take()
        {
            return Err(e);
        }
        if let Some(e) = &c.broken {
            return Err(e.clone());
        }
        let r = f(&mut c, self);
        if let Err(e) = &r {
            if e.is_fatal() {
                log::error!("remote GPU: {e}");
                c.broken = Some(e.clone());
            } else if report == Report::Later {
                if c.unreported.is_none() {
                    log::warn!("remote GPU: {e}");
                    c.unreported = Some(e.clone());
                }
            } else {
                log::warn!("remote GPU: {e}");
            }
            c.last = Some(e.clone());
        }
        r
    }

    fn mmio_read(&self, report: Report, bar: u32, offset: usize) -> Result<u32, RemoteError> {
        self.run(report, |c, s| {
            c.call(s, Cmd::MmioRead, bar, [offset as u64, 4, 0], &[])?;
            let mut b = [0u8; 4];
            c.read_exact(s, Cmd::MmioRead, &mut b)?;
            Ok(u32::from_le_bytes(b))
        })
    }

    fn mmio_write(
        &self,
        report: Report,
        bar: u32,
        offset: usize,
        value: u32,
    ) -> Result<(), RemoteError> {
        self.run(report, |c, s| {
            c.send(
                s,
                Request::new(Cmd::MmioWrite, s.dev_id, bar, [offset as u64, 4, 0]),
                &value.to_le_bytes(),
            )
        })
    }

    fn simple(&self, cmd: Cmd, bar: u32, args: [u64; 3]) -> Result<Response, RemoteError> {
        self.run(Report::Now, |c, s| c.call(s, cmd, bar, args, &[]))
    }
}

/// One of the server's devices, as PROBE names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteDevice {
    /// The server's name for it (the line of PROBE's answer).
    pub name: String,
    /// The index requests name it by (the name's last `:`-separated field).
    pub dev_id: u32,
}

impl RemoteDevice {
    /// The PCI address in front of the index, when the name has one (`0000:01:00.0:0`).
    pub fn bdf(&self) -> Option<Bdf> {
        let (head, _) = self.name.rsplit_once(':')?;
        head.parse().ok()
    }
}

/// Parses PROBE's answer: `\n`-separated names, each ending in `:INDEX` (or being the index).
pub fn parse_probe(addr: &str, answer: &[u8]) -> Result<Vec<RemoteDevice>, RemoteError> {
    let bad = |reason: String| RemoteError::BadAnswer {
        addr: addr.to_string(),
        cmd: Cmd::Probe,
        reason,
    };
    let text =
        std::str::from_utf8(answer).map_err(|_| bad("the device list is not UTF-8 text".into()))?;
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|name| {
            let last = name.rsplit(':').next().unwrap_or(name);
            let dev_id = last
                .parse::<u32>()
                .map_err(|_| bad(format!("{name:?} does not end in a device index")))?;
            Ok(RemoteDevice {
                name: name.to_string(),
                dev_id,
            })
        })
        .collect()
}

/// A GPU on a remote server (tinygrad's remote PCI protocol), opened: everything the
/// bare-metal backend needs from the host, over one TCP connection.
#[derive(Debug)]
pub struct RemoteGpu {
    shared: Arc<Shared>,
    device: RemoteDevice,
    index: u32,
    bar0: RemoteBar,
    bar1: RemoteBar,
}

impl RemoteGpu {
    /// Connects to `host:port` within `timeout`, probes for NVIDIA display-class devices and
    /// opens the `index`-th one (BAR0 and BAR1 mapped), with the default I/O timeout.
    pub fn connect(
        host: &str,
        port: u16,
        index: u32,
        timeout: Duration,
    ) -> Result<Self, RemoteError> {
        let opts = RemoteOptions {
            connect_timeout: timeout,
            ..RemoteOptions::default()
        };
        Self::connect_with(host, port, index, &opts)
    }

    /// [`RemoteGpu::connect`] with every setting given.
    pub fn connect_with(
        host: &str,
        port: u16,
        index: u32,
        opts: &RemoteOptions,
    ) -> Result<Self, RemoteError> {
        let stream = open_stream(host, port, opts)?;
        let addr = format_addr(host, port);
        let mut shared = Shared {
            addr: addr.clone(),
            dev_id: 0,
            io_timeout: opts.io_timeout,
            conn: Mutex::new(Conn {
                stream,
                broken: None,
                unreported: None,
                last: None,
                free: Vec::new(),
            }),
        };
        let devices = probe_on(&shared)?;
        let Some(device) = devices.get(index as usize).cloned() else {
            return Err(RemoteError::NoDevice {
                addr,
                index,
                available: devices.into_iter().map(|d| d.name).collect(),
            });
        };
        shared.dev_id = device.dev_id;
        let shared = Arc::new(shared);
        let bar0 = RemoteBar::map(&shared, 0)?;
        let bar1 = RemoteBar::map(&shared, 1)?;
        log::info!(
            "remote GPU {addr}: device {index} is {:?} (dev_id {}), BAR0 {:#x} bytes, BAR1 {:#x} \
             bytes",
            device.name,
            device.dev_id,
            bar0.size,
            bar1.size
        );
        Ok(RemoteGpu {
            shared,
            device,
            index,
            bar0,
            bar1,
        })
    }

    /// Lists the NVIDIA display-class devices of the server at `host:port`.
    pub fn probe(
        host: &str,
        port: u16,
        opts: &RemoteOptions,
    ) -> Result<Vec<RemoteDevice>, RemoteError> {
        let stream = open_stream(host, port, opts)?;
        let shared = Shared {
            addr: format_addr(host, port),
            dev_id: 0,
            io_timeout: opts.io_timeout,
            conn: Mutex::new(Conn {
                stream,
                broken: None,
                unreported: None,
                last: None,
                free: Vec::new(),
            }),
        };
        probe_on(&shared)
    }

    /// `HOST:PORT` of the server.
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// The device on the server (its name and request index).
    pub fn device(&self) -> &RemoteDevice {
        &self.device
    }

    /// The position of the device in PROBE's list (the `N` of `remote:HOST:PORT:N`).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// BAR0: the GPU's registers.
    pub fn bar0(&self) -> &RemoteBar {
        &self.bar0
    }

    /// BAR1: the window onto VRAM.
    pub fn bar1(&self) -> &RemoteBar {
        &self.bar1
    }

    /// Maps BAR `index` (MAP_BAR): its bus address and size.
    pub fn map_bar(&self, index: u32) -> Result<RemoteBar, RemoteError> {
        RemoteBar::map(&self.shared, index)
    }

    /// DMA memory the GPU can reach (a [`DmaAllocator`](nvbare_core::hal::DmaAllocator)).
    pub fn dma(&self) -> RemoteDma {
        RemoteDma {
            shared: self.shared.clone(),
        }
    }

    /// Config space (a [`PciConfig`]; `reset_function` is RESET).
    pub fn pci(&self) -> RemotePci {
        RemotePci {
            shared: self.shared.clone(),
        }
    }

    /// A host clock (the GPU's timers are read over the connection like any register).
    pub fn clock(&self) -> HostClock {
        HostClock::new()
    }

    /// Resets the function (RESET).
    pub fn reset(&self) -> Result<(), RemoteError> {
        self.shared.simple(Cmd::Reset, 0, [0; 3]).map(|_| ())
    }

    /// Checks that the server answers (PING).
    pub fn ping(&self) -> Result<(), RemoteError> {
        self.shared.simple(Cmd::Ping, 0, [0; 3]).map(|_| ())
    }

    /// The latest error on the connection, with the server's text: what a [`HalError`] (which
    /// carries no text) stood for.
    pub fn last_error(&self) -> Option<RemoteError> {
        self.shared.lock().last.clone()
    }

    /// Takes the latest error (a later [`RemoteGpu::last_error`] sees only newer ones): for a
    /// caller that handled a refusal and does not want it blamed for what comes next.
    pub fn take_last_error(&self) -> Option<RemoteError> {
        self.shared.lock().last.take()
    }

    /// The error that ended the connection, if one did.
    pub fn broken(&self) -> Option<RemoteError> {
        self.shared.lock().broken.clone()
    }
}

fn open_stream(host: &str, port: u16, opts: &RemoteOptions) -> Result<TcpStream, RemoteError> {
    let addr = format_addr(host, port);
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| RemoteError::Resolve {
            addr: addr.clone(),
            reason: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(RemoteError::Resolve {
            addr,
            reason: "the name has no addresses".into(),
        });
    }
    let mut reasons = Vec::new();
    for a in &addrs {
        match TcpStream::connect_timeout(a, opts.connect_timeout) {
            Ok(s) => {
                let setup = s
                    .set_nodelay(true)
                    .and_then(|()| s.set_read_timeout(Some(opts.io_timeout)))
                    .and_then(|()| s.set_write_timeout(Some(opts.io_timeout)));
                return match setup {
                    Ok(()) => Ok(s),
                    Err(e) => Err(RemoteError::Connect {
                        addr,
                        timeout: opts.connect_timeout,
                        reason: format!("setting up the socket: {e}"),
                    }),
                };
            }
            Err(e) => {
                let why = match e.kind() {
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "no answer".to_string(),
                    _ => e.to_string(),
                };
                reasons.push(if addrs.len() > 1 {
                    format!("{a}: {why}")
                } else {
                    why
                });
            }
        }
    }
    Err(RemoteError::Connect {
        addr,
        timeout: opts.connect_timeout,
        reason: reasons.join("; "),
    })
}

/// PROBE: NVIDIA (vendor 0x10de) display-class devices, any device id.
fn probe_on(shared: &Shared) -> Result<Vec<RemoteDevice>, RemoteError> {
    let payload = encode_probe_filters(&[(0, 0)]);
    let answer = shared.run(Report::Now, |c, s| {
        let r = c.call(
            s,
            Cmd::Probe,
            0,
            [
                DISPLAY_CLASS,
                payload.len() as u64,
                u64::from(crate::NVIDIA_VENDOR_ID),
            ],
            &payload,
        )?;
        c.read_limited(s, Cmd::Probe, r.r0, "device list")
    })?;
    parse_probe(&shared.addr, &answer)
}

/// A BAR of a remote GPU as [`Mmio`]: each access is one request (MMIO_READ of 4 bytes, which
/// waits for the answer; MMIO_WRITE, which does not). Outside the BAR a read returns all ones
/// and a write is dropped without a request, like a PCI master abort; so does a read on a
/// broken connection (see the module docs).
#[derive(Debug, Clone)]
pub struct RemoteBar {
    shared: Arc<Shared>,
    index: u32,
    bus_addr: u64,
    size: usize,
}

impl RemoteBar {
    fn map(shared: &Arc<Shared>, index: u32) -> Result<Self, RemoteError> {
        let r = shared.simple(Cmd::MapBar, index, [0; 3])?;
        let size = usize::try_from(r.r1).map_err(|_| RemoteError::BadAnswer {
            addr: shared.addr.clone(),
            cmd: Cmd::MapBar,
            reason: format!("BAR{index} of {:#x} bytes does not fit this host", r.r1),
        })?;
        Ok(RemoteBar {
            shared: shared.clone(),
            index,
            bus_addr: r.r0,
            size,
        })
    }

    /// The BAR index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Its bus address on the server's machine (MAP_BAR's `r0`).
    pub fn bus_addr(&self) -> u64 {
        self.bus_addr
    }
}

impl Mmio for RemoteBar {
    fn size(&self) -> usize {
        self.size
    }

    fn read32(&self, offset: usize) -> u32 {
        if check_mmio(offset, self.size).is_err() {
            return u32::MAX;
        }
        self.shared
            .mmio_read(Report::Later, self.index, offset)
            .unwrap_or(u32::MAX)
    }

    fn write32(&self, offset: usize, value: u32) {
        if check_mmio(offset, self.size).is_err() {
            return;
        }
        let _ = self
            .shared
            .mmio_write(Report::Later, self.index, offset, value);
    }

    fn try_read32(&self, offset: usize) -> Result<u32, HalError> {
        check_mmio(offset, self.size)?;
        self.shared
            .mmio_read(Report::Now, self.index, offset)
            .map_err(|e| e.to_hal())
    }

    fn try_write32(&self, offset: usize, value: u32) -> Result<(), HalError> {
        check_mmio(offset, self.size)?;
        self.shared
            .mmio_write(Report::Now, self.index, offset, value)
            .map_err(|e| e.to_hal())
    }
}

/// Config space of a remote GPU (CFG_READ / CFG_WRITE of 4 bytes; reset is RESET).
#[derive(Debug, Clone)]
pub struct RemotePci {
    shared: Arc<Shared>,
}

fn check_config(offset: u16) -> Result<(), HalError> {
    if !offset.is_multiple_of(4) {
        return Err(HalError::Misaligned {
            offset: offset.into(),
            align: 4,
        });
    }
    check_range(offset.into(), 4, 4096)
}

impl PciConfig for RemotePci {
    fn read_config32(&self, offset: u16) -> Result<u32, HalError> {
        check_config(offset)?;
        let r = self
            .shared
            .simple(Cmd::CfgRead, 0, [offset.into(), 4, 0])
            .map_err(|e| e.to_hal())?;
        u32::try_from(r.r0).map_err(|_| {
            let e = RemoteError::BadAnswer {
                addr: self.shared.addr.clone(),
                cmd: Cmd::CfgRead,
                reason: format!("a 4-byte read at {offset:#x} gave {:#x}", r.r0),
            };
            log::warn!("remote GPU: {e}");
            let hal = e.to_hal();
            self.shared.lock().last = Some(e);
            hal
        })
    }

    fn write_config32(&self, offset: u16, value: u32) -> Result<(), HalError> {
        check_config(offset)?;
        self.shared
            .simple(Cmd::CfgWrite, 0, [offset.into(), 4, value.into()])
            .map(|_| ())
            .map_err(|e| e.to_hal())
    }

    fn reset_function(&self) -> Result<(), HalError> {
        match self.shared.simple(Cmd::Reset, 0, [0; 3]) {
            Ok(_) => Ok(()),
            Err(e) if e.is_fatal() => Err(HalError::DeviceLost),
            Err(_) => Err(HalError::Unsupported("PCI function reset")),
        }
    }
}

#[cfg(test)]
mod tests;
