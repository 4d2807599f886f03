//! [`RemoteError`]: why talking to a remote GPU server failed, and how it reads as a
//! [`HalError`].

use std::time::Duration;

use nvbare_core::hal::HalError;

use super::super::wire::Cmd;

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
    /// it. [`RemoteGpu::last_error`](super::RemoteGpu::last_error) keeps the whole text.
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
