//! The client side of tinygrad's remote PCI protocol: a GPU on another machine (or in another
//! process) as nvbare's `hal` traits, what `--device remote:HOST:PORT[:N]` opens.
//!
//! [`RemoteGpu::connect`] opens a TCP connection (with a connect timeout, `TCP_NODELAY`), asks
//! the server for its NVIDIA display-class devices (PROBE) and picks one. Its BARs are
//! [`RemoteBar`]s ([`Mmio`]: MMIO_READ / MMIO_WRITE of 4 bytes), its config space is
//! [`RemotePci`] ([`PciConfig`]: CFG_READ / CFG_WRITE, RESET), and host memory the GPU can
//! reach is [`RemoteDma`] ([`DmaAllocator`]: MAP_SYSMEM, then SYSMEM_READ / SYSMEM_WRITE in
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

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nvbare_core::hal::{
    DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig, check_mmio, check_range,
};

use super::wire::{Cmd, RESPONSE_SIZE, Request, Response, encode_probe_filters};
use crate::Bdf;
use crate::clock::HostClock;

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

/// `EIO`: what a request the server refused reports as a [`HalError::Os`].
const EIO: i32 = 5;

/// Why talking to a remote GPU server failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The host name did not resolve.
    #[error("cannot resolve {addr}: {reason}")]
    Resolve {
        /// `HOST:PORT`.
        addr: String,
        /// What the resolver said.
        reason: String,
    },
    /// No TCP connection could be made.
    #[error(
        "cannot connect to {addr} within {}: {reason}. Is a server running there (`nvbare \
         serve` or tinygrad's extra/remote/serve.py), listening on that address and port, with \
         no firewall in between?",
        secs(*timeout)
    )]
    Connect {
        /// `HOST:PORT`.
        addr: String,
        /// The connect timeout.
        timeout: Duration,
        /// What went wrong (for each address the name resolved to).
        reason: String,
    },
    /// The server closed the connection.
    #[error("{addr} closed the connection during {during}: the server stopped or dropped us")]
    Closed {
        /// `HOST:PORT`.
        addr: String,
        /// The request under way.
        during: Cmd,
    },
    /// The server did not answer in time.
    #[error(
        "{addr} did not answer {during} within {}: the server hangs or the network is down",
        secs(*timeout)
    )]
    Timeout {
        /// `HOST:PORT`.
        addr: String,
        /// The request under way.
        during: Cmd,
        /// The I/O timeout.
        timeout: Duration,
    },
    /// Reading or writing the socket failed.
    #[error("the connection to {addr} failed during {during}: {reason}")]
    Io {
        /// `HOST:PORT`.
        addr: String,
        /// The request under way.
        during: Cmd,
        /// The OS error.
        reason: String,
    },
    /// The server answered with an error (status != 0).
    #[error("{addr} refused {cmd}: {message}")]
    Server {
        /// `HOST:PORT`.
        addr: String,
        /// The request.
        cmd: Cmd,
        /// The server's error text (lossy UTF-8; "unknown error" when it sent none).
        message: String,
    },
    /// An answer was longer than the client accepts.
    #[error(
        "{addr} answered {cmd} with {len} bytes of {what}, more than the {limit} nvbare accepts \
         (docs/limits.md): not a server of tinygrad's remote PCI protocol, or a broken one"
    )]
    TooLarge {
        /// `HOST:PORT`.
        addr: String,
        /// The request.
        cmd: Cmd,
        /// What was too large.
        what: &'static str,
        /// Bytes announced.
        len: u64,
        /// Bytes accepted.
        limit: u64,
    },
    /// An answer's length was not the one the request called for.
    #[error(
        "{addr} answered {cmd} with {len} bytes of {what} where {expected} were due: not a \
         server of tinygrad's remote PCI protocol, or a broken one"
    )]
    WrongLength {
        /// `HOST:PORT`.
        addr: String,
        /// The request.
        cmd: Cmd,
        /// What was announced.
        what: &'static str,
        /// Bytes announced.
        len: u64,
        /// Bytes due.
        expected: u64,
    },
    /// An answer made no sense.
    #[error("{addr} answered {cmd} wrongly: {reason}")]
    BadAnswer {
        /// `HOST:PORT`.
        addr: String,
        /// The request.
        cmd: Cmd,
        /// What was wrong.
        reason: String,
    },
    /// The server has no NVIDIA GPU at the index asked for.
    #[error(
        "{addr} has no NVIDIA GPU {index}: {}",
        if available.is_empty() {
            "it offers none (is the GPU bound where the server looks for it?)".to_string()
        } else {
            format!(
                "it offers {} ({}); use remote:HOST:PORT:N with N below {}",
                available.len(),
                available
                    .iter()
                    .enumerate()
                    .map(|(i, n)| format!("{i}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                available.len()
            )
        }
    )]
    NoDevice {
        /// `HOST:PORT`.
        addr: String,
        /// The index asked for.
        index: u32,
        /// The server's names for the devices it has.
        available: Vec<String>,
    },
    /// MAP_SYSMEM returned pages that are not one contiguous bus range.
    #[error(
        "{addr} returned {size} bytes of host memory whose pages are not contiguous in bus \
         address (page {page} at {got:#x}, not {expected:#x}): nvbare's DMA buffers need one \
         device address each. A server without an IOMMU hands out physical pages, contiguous \
         only up to 2 MiB (tinygrad's serve.py); run the server with the IOMMU on (`nvbare \
         serve --device vfio:BDF`, which maps every buffer at one IOVA range)"
    )]
    NotContiguous {
        /// `HOST:PORT`.
        addr: String,
        /// Bytes asked for.
        size: u64,
        /// The first page out of place.
        page: u64,
        /// Its bus address.
        got: u64,
        /// Where it should have been.
        expected: u64,
    },
}

fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

impl RemoteError {
    /// Whether the connection is unusable after this error: it broke, or the stream is out of
    /// step (everything but a refusal by the server, a NoDevice answer, a bad value in an
    /// otherwise complete answer and a non-contiguous allocation).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            RemoteError::Resolve { .. }
                | RemoteError::Connect { .. }
                | RemoteError::Closed { .. }
                | RemoteError::Timeout { .. }
                | RemoteError::Io { .. }
                | RemoteError::TooLarge { .. }
                | RemoteError::WrongLength { .. }
        )
    }

    /// The [`HalError`] a `hal` call reports for this error: [`HalError::DeviceLost`] when the
    /// connection is gone, [`HalError::Os`] (EIO) naming the request when the server refused
    /// it. [`RemoteGpu::last_error`] keeps the whole text.
    pub fn to_hal(&self) -> HalError {
        if self.is_fatal() {
            return HalError::DeviceLost;
        }
        let cmd = match self {
            RemoteError::Server { cmd, .. } | RemoteError::BadAnswer { cmd, .. } => *cmd,
            RemoteError::NotContiguous { .. } => Cmd::MapSysmem,
            _ => Cmd::Ping,
        };
        HalError::Os {
            op: refused_op(cmd),
            errno: EIO,
        }
    }
}

/// How a refused request is named in a [`HalError::Os`].
fn refused_op(cmd: Cmd) -> &'static str {
    match cmd {
        Cmd::Probe => "PROBE on the remote GPU server",
        Cmd::MapBar => "MAP_BAR on the remote GPU server",
        Cmd::MapSysmemFd => "MAP_SYSMEM_FD on the remote GPU server",
        Cmd::CfgRead => "CFG_READ (config space) on the remote GPU server",
        Cmd::CfgWrite => "CFG_WRITE (config space) on the remote GPU server",
        Cmd::Reset => "RESET (function reset) on the remote GPU server",
        Cmd::MmioRead => "MMIO_READ on the remote GPU server",
        Cmd::MmioWrite => "MMIO_WRITE on the remote GPU server",
        Cmd::MapSysmem => "MAP_SYSMEM (DMA memory) on the remote GPU server",
        Cmd::SysmemRead => "SYSMEM_READ (DMA memory) on the remote GPU server",
        Cmd::SysmemWrite => "SYSMEM_WRITE (DMA memory) on the remote GPU server",
        Cmd::ResizeBar => "RESIZE_BAR on the remote GPU server",
        Cmd::Ping => "PING on the remote GPU server",
    }
}

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

    /// DMA memory the GPU can reach (a [`DmaAllocator`]).
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

/// Host memory of a remote GPU's server (MAP_SYSMEM, contiguous).
#[derive(Debug, Clone)]
pub struct RemoteDma {
    shared: Arc<Shared>,
}

impl RemoteDma {
    /// Allocates `size` bytes (rounded up to 4 KiB), with the error's whole text.
    pub fn alloc(&self, size: usize) -> Result<RemoteBuffer, RemoteError> {
        let pages = (size.max(1) as u64).div_ceil(SYSMEM_PAGE);
        let len = usize::try_from(pages * SYSMEM_PAGE).map_err(|_| RemoteError::BadAnswer {
            addr: self.shared.addr.clone(),
            cmd: Cmd::MapSysmem,
            reason: format!("{size} bytes do not fit this host"),
        })?;
        let reused = {
            let mut c = self.shared.lock();
            c.free
                .iter()
                .position(|f| f.len == len)
                .map(|i| c.free.swap_remove(i))
        };
        if let Some(f) = reused {
            let b = RemoteBuffer {
                shared: self.shared.clone(),
                handle: f.handle,
                dev_addr: f.dev_addr,
                len,
            };
            b.fill_chunked(0, len, 0)?;
            return Ok(b);
        }
        let (handle, dev_addr) = self
            .shared
            .run(Report::Now, |c, s| map_sysmem(c, s, pages))?;
        Ok(RemoteBuffer {
            shared: self.shared.clone(),
            handle,
            dev_addr,
            len,
        })
    }
}

/// MAP_SYSMEM of `pages` contiguous pages: reads the whole address list (in pieces, so the
/// stream stays in step) and checks it.
fn map_sysmem(c: &mut Conn, s: &Shared, pages: u64) -> Result<(u32, u64), RemoteError> {
    let size = pages * SYSMEM_PAGE;
    let r = c.call(s, Cmd::MapSysmem, 0, [size, 1, 0], &[])?;
    let want = pages * 8;
    if r.r0 != want {
        // The stream cannot be resynchronised without reading what the server announced.
        return Err(RemoteError::WrongLength {
            addr: s.addr.clone(),
            cmd: Cmd::MapSysmem,
            what: "bus addresses (8 per 4 KiB page asked for)",
            len: r.r0,
            expected: want,
        });
    }
    let mut first = None;
    let mut misplaced = None;
    let mut page = 0u64;
    let mut chunk = vec![0u8; 4096];
    while page < pages {
        let n = (pages - page).min(512) as usize;
        let piece = &mut chunk[..n * 8];
        c.read_exact(s, Cmd::MapSysmem, piece)?;
        for w in piece.chunks_exact(8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            let got = u64::from_le_bytes(a);
            let base = *first.get_or_insert(got);
            let expected = base.wrapping_add(page * SYSMEM_PAGE);
            if misplaced.is_none() && got != expected {
                misplaced = Some((page, got, expected));
            }
            page += 1;
        }
    }
    let base = first.unwrap_or(0);
    let bad = |reason: String| RemoteError::BadAnswer {
        addr: s.addr.clone(),
        cmd: Cmd::MapSysmem,
        reason,
    };
    if let Some((page, got, expected)) = misplaced {
        return Err(RemoteError::NotContiguous {
            addr: s.addr.clone(),
            size,
            page,
            got,
            expected,
        });
    }
    if !base.is_multiple_of(SYSMEM_PAGE) || base.checked_add(size).is_none() {
        return Err(bad(format!(
            "bus address {base:#x} for {size} bytes is not a 4 KiB-aligned range"
        )));
    }
    let handle = u32::try_from(r.r1)
        .map_err(|_| bad(format!("handle {:#x} does not fit the request's u32", r.r1)))?;
    Ok((handle, base))
}

impl DmaAllocator for RemoteDma {
    type Buffer = RemoteBuffer;

    fn alloc_dma(&self, size: usize) -> Result<RemoteBuffer, HalError> {
        self.alloc(size).map_err(|e| match e {
            e if e.is_fatal() => HalError::DeviceLost,
            RemoteError::Server { .. } | RemoteError::NotContiguous { .. } => HalError::NoMemory {
                requested: size as u64,
            },
            e => e.to_hal(),
        })
    }
}

/// Host memory on the server, contiguous at [`DmaBuffer::dev_addr`]; read and written with
/// SYSMEM_READ / SYSMEM_WRITE of at most [`SYSMEM_CHUNK`] bytes each. Dropped, it is kept
/// for a later allocation of the same size (the protocol cannot free it).
pub struct RemoteBuffer {
    shared: Arc<Shared>,
    handle: u32,
    dev_addr: u64,
    len: usize,
}

impl fmt::Debug for RemoteBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteBuffer")
            .field("addr", &self.shared.addr)
            .field("handle", &self.handle)
            .field("dev_addr", &format_args!("{:#x}", self.dev_addr))
            .field("len", &self.len)
            .finish()
    }
}

impl RemoteBuffer {
    /// The server's handle for it (the `bar` of SYSMEM_READ / SYSMEM_WRITE).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    fn write_chunks(&self, offset: usize, src: &[u8]) -> Result<(), RemoteError> {
        self.shared.run(Report::Now, |c, s| {
            for (i, piece) in src.chunks(SYSMEM_CHUNK).enumerate() {
                let at = (offset + i * SYSMEM_CHUNK) as u64;
                let req = Request::new(
                    Cmd::SysmemWrite,
                    s.dev_id,
                    self.handle,
                    [at, piece.len() as u64, 0],
                );
                c.send(s, req, piece)?;
            }
            Ok(())
        })
    }

    fn fill_chunked(&self, offset: usize, len: usize, byte: u8) -> Result<(), RemoteError> {
        let chunk = vec![byte; len.min(SYSMEM_CHUNK)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write_chunks(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }
}

impl DmaBuffer for RemoteBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn dev_addr(&self) -> u64 {
        self.dev_addr
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        self.shared
            .run(Report::Now, |c, s| {
                for (i, piece) in dst.chunks_mut(SYSMEM_CHUNK).enumerate() {
                    let at = (offset + i * SYSMEM_CHUNK) as u64;
                    c.call(
                        s,
                        Cmd::SysmemRead,
                        self.handle,
                        [at, piece.len() as u64, 0],
                        &[],
                    )?;
                    c.read_exact(s, Cmd::SysmemRead, piece)?;
                }
                Ok(())
            })
            .map_err(|e| e.to_hal())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        self.write_chunks(offset, src).map_err(|e| e.to_hal())
    }

    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        check_range(offset as u64, len as u64, self.len as u64)?;
        self.fill_chunked(offset, len, byte).map_err(|e| e.to_hal())
    }
}

impl Drop for RemoteBuffer {
    fn drop(&mut self) {
        let mut c = self.shared.lock();
        if c.broken.is_none() {
            c.free.push(FreeBuffer {
                handle: self.handle,
                dev_addr: self.dev_addr,
                len: self.len,
            });
        }
    }
}

#[cfg(test)]
mod tests;
