//! The wire format of tinygrad's remote PCI protocol (tinygrad 0.14
//! `runtime/support/system.py`, `RemotePCIDevice`; reference server `extra/remote/serve.py`).
//!
//! Every request is a 33-byte little-endian header, `u8 cmd, u32 dev_id, u32 bar, u64 arg0,
//! u64 arg1, u64 arg2`, followed by a payload for PROBE (`arg1` bytes of `(mask, device)` u32
//! pairs) and for the two writes (`arg1` bytes of data). Every request except the writes gets
//! a 17-byte response, `u8 status, u64 r0, u64 r1`, then data: on success what the command
//! returns (`arg1` bytes for the reads, `r0` bytes for PROBE and MAP_SYSMEM), on failure
//! (`status != 0`) `r0` bytes of UTF-8 error text.
//!
//! This module only encodes and decodes; it checks nothing about devices. Payload sizes come
//! from the peer, so [`Request::payload_len`] is checked against a limit before anything is
//! read or allocated.

use std::fmt;

/// Bytes of a request header.
pub const REQUEST_SIZE: usize = 33;
/// Bytes of a response header.
pub const RESPONSE_SIZE: usize = 17;
/// tinygrad's default port (`REMOTE=host` without a port).
pub const DEFAULT_PORT: u16 = 6667;

/// A command (`RemoteCmd` in tinygrad, numbered from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cmd {
    /// List devices: `arg0` PCI base class (0 = any), `arg1` payload bytes, `arg2` vendor;
    /// payload `(mask, device)` u32 pairs. Answers `r0` bytes of `\n`-separated names whose
    /// last `:`-separated field is the device index.
    Probe = 0,
    /// BAR `bar`: answers `r0` = its bus address, `r1` = its size.
    MapBar = 1,
    /// Host memory as a file descriptor over a Unix socket (macOS only in tinygrad).
    MapSysmemFd = 2,
    /// Config space: `arg0` offset, `arg1` size (1, 2 or 4); answers `r0` = the value.
    CfgRead = 3,
    /// Config space: `arg0` offset, `arg1` size, `arg2` value.
    CfgWrite = 4,
    /// Function-level reset.
    Reset = 5,
    /// BAR `bar`: `arg0` offset, `arg1` size; answers the bytes.
    MmioRead = 6,
    /// BAR `bar`: `arg0` offset, `arg1` size, then the bytes. No response.
    MmioWrite = 7,
    /// Host memory: `arg0` size, `arg1` contiguous; answers `r0` bytes of u64 bus addresses
    /// (one per 4 KiB page) and `r1` = a handle for SYSMEM_READ/WRITE (named in `bar`).
    MapSysmem = 8,
    /// Host memory `bar` (a handle): `arg0` offset, `arg1` size; answers the bytes.
    SysmemRead = 9,
    /// Host memory `bar`: `arg0` offset, `arg1` size, then the bytes. No response.
    SysmemWrite = 10,
    /// Resize BAR `bar` to its largest size.
    ResizeBar = 11,
    /// Liveness check.
    Ping = 12,
}

impl Cmd {
    /// The command numbered `n`.
    pub fn from_u8(n: u8) -> Option<Cmd> {
        Some(match n {
            0 => Cmd::Probe,
            1 => Cmd::MapBar,
            2 => Cmd::MapSysmemFd,
            3 => Cmd::CfgRead,
            4 => Cmd::CfgWrite,
            5 => Cmd::Reset,
            6 => Cmd::MmioRead,
            7 => Cmd::MmioWrite,
            8 => Cmd::MapSysmem,
            9 => Cmd::SysmemRead,
            10 => Cmd::SysmemWrite,
            11 => Cmd::ResizeBar,
            12 => Cmd::Ping,
            _ => return None,
        })
    }

    /// tinygrad's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Cmd::Probe => "PROBE",
            Cmd::MapBar => "MAP_BAR",
            Cmd::MapSysmemFd => "MAP_SYSMEM_FD",
            Cmd::CfgRead => "CFG_READ",
            Cmd::CfgWrite => "CFG_WRITE",
            Cmd::Reset => "RESET",
            Cmd::MmioRead => "MMIO_READ",
            Cmd::MmioWrite => "MMIO_WRITE",
            Cmd::MapSysmem => "MAP_SYSMEM",
            Cmd::SysmemRead => "SYSMEM_READ",
            Cmd::SysmemWrite => "SYSMEM_WRITE",
            Cmd::ResizeBar => "RESIZE_BAR",
            Cmd::Ping => "PING",
        }
    }

    /// Whether a payload of `arg1` bytes follows the header.
    pub fn has_payload(self) -> bool {
        matches!(self, Cmd::Probe | Cmd::MmioWrite | Cmd::SysmemWrite)
    }

    /// Whether the peer waits for a response (everything but the two writes).
    pub fn has_response(self) -> bool {
        !matches!(self, Cmd::MmioWrite | Cmd::SysmemWrite)
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The command byte as sent (see [`Request::cmd`]).
    pub cmd: u8,
    /// The device index (from PROBE's answer).
    pub dev_id: u32,
    /// BAR index or sysmem handle.
    pub bar: u32,
    /// Arguments.
    pub args: [u64; 3],
}

/// Why a request header could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer than [`REQUEST_SIZE`] bytes.
    Truncated {
        /// Bytes given.
        len: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { len } => {
                write!(f, "request header truncated: {len} of {REQUEST_SIZE} bytes")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Request {
    /// A request.
    pub fn new(cmd: Cmd, dev_id: u32, bar: u32, args: [u64; 3]) -> Self {
        Request {
            cmd: cmd as u8,
            dev_id,
            bar,
            args,
        }
    }

    /// Decodes the first [`REQUEST_SIZE`] bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<Request, DecodeError> {
        let Some(b) = b.get(..REQUEST_SIZE) else {
            return Err(DecodeError::Truncated { len: b.len() });
        };
        Ok(Request {
            cmd: b[0],
            dev_id: u32_at(b, 1),
            bar: u32_at(b, 5),
            args: [u64_at(b, 9), u64_at(b, 17), u64_at(b, 25)],
        })
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; REQUEST_SIZE] {
        let mut b = [0u8; REQUEST_SIZE];
        b[0] = self.cmd;
        b[1..5].copy_from_slice(&self.dev_id.to_le_bytes());
        b[5..9].copy_from_slice(&self.bar.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[9 + 8 * i..17 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b
    }

    /// The command, if the byte names one.
    pub fn cmd(&self) -> Option<Cmd> {
        Cmd::from_u8(self.cmd)
    }

    /// Bytes of payload that follow the header (`arg1` for PROBE and the writes, else 0).
    pub fn payload_len(&self) -> u64 {
        match self.cmd() {
            Some(c) if c.has_payload() => self.args[1],
            _ => 0,
        }
    }
}

/// A response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// 0 for success.
    pub status: u8,
    /// First result (error text length on failure).
    pub r0: u64,
    /// Second result.
    pub r1: u64,
}

impl Response {
    /// A success with results `r0`, `r1`.
    pub fn ok(r0: u64, r1: u64) -> Self {
        Response { status: 0, r0, r1 }
    }

    /// The header of a failure whose text is `text_len` bytes.
    pub fn error(text_len: usize) -> Self {
        Response {
            status: 1,
            r0: text_len as u64,
            r1: 0,
        }
    }

    /// Decodes the first [`RESPONSE_SIZE`] bytes of `b`.
    pub fn decode(b: &[u8]) -> Option<Response> {
        let b = b.get(..RESPONSE_SIZE)?;
        Some(Response {
            status: b[0],
            r0: u64_at(b, 1),
            r1: u64_at(b, 9),
        })
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; RESPONSE_SIZE] {
        let mut b = [0u8; RESPONSE_SIZE];
        b[0] = self.status;
        b[1..9].copy_from_slice(&self.r0.to_le_bytes());
        b[9..17].copy_from_slice(&self.r1.to_le_bytes());
        b
    }
}

/// PROBE's payload: `(mask, device)` pairs; a device id matches when `id & mask == device`.
/// Trailing bytes that do not make a whole pair are ignored.
pub fn probe_filters(payload: &[u8]) -> Vec<(u32, u32)> {
    payload
        .chunks_exact(8)
        .map(|c| (u32_at(c, 0), u32_at(c, 4)))
        .collect()
}

/// Encodes PROBE's payload.
pub fn encode_probe_filters(filters: &[(u32, u32)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(filters.len() * 8);
    for (m, d) in filters {
        v.extend_from_slice(&m.to_le_bytes());
        v.extend_from_slice(&d.to_le_bytes());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_tinygrad_s_struct_formats() {
        // struct.pack('<BIIQQQ', 6, 1, 2, 0x10, 0x20, 0x30)
        let r = Request::new(Cmd::MmioRead, 1, 2, [0x10, 0x20, 0x30]);
        let b = r.encode();
        assert_eq!(b.len(), 33);
        assert_eq!(b[0], 6);
        assert_eq!(&b[1..5], &[1, 0, 0, 0]);
        assert_eq!(&b[5..9], &[2, 0, 0, 0]);
        assert_eq!(b[9], 0x10);
        assert_eq!(b[17], 0x20);
        assert_eq!(b[25], 0x30);
        assert_eq!(Request::decode(&b), Ok(r));
        assert_eq!(
            Request::decode(&b[..32]),
            Err(DecodeError::Truncated { len: 32 })
        );
        // struct.unpack('<BQQ', ...)
        let s = Response::ok(0xdead, 0xbeef).encode();
        assert_eq!(s.len(), 17);
        assert_eq!(Response::decode(&s), Some(Response::ok(0xdead, 0xbeef)));
        assert_eq!(Response::decode(&s[..16]), None);
        assert_eq!(Response::error(5).status, 1);
    }

    #[test]
    fn commands_are_numbered_as_tinygrad_s_enum() {
        let names = [
            "PROBE",
            "MAP_BAR",
            "MAP_SYSMEM_FD",
            "CFG_READ",
            "CFG_WRITE",
            "RESET",
            "MMIO_READ",
            "MMIO_WRITE",
            "MAP_SYSMEM",
            "SYSMEM_READ",
            "SYSMEM_WRITE",
            "RESIZE_BAR",
            "PING",
        ];
        for (i, n) in names.iter().enumerate() {
            let c = Cmd::from_u8(i as u8).unwrap();
            assert_eq!(c as u8, i as u8);
            assert_eq!(c.name(), *n);
        }
        assert_eq!(Cmd::from_u8(13), None);
        assert!(!Cmd::MmioWrite.has_response() && !Cmd::SysmemWrite.has_response());
        assert!(Cmd::Probe.has_payload() && Cmd::Probe.has_response());
        let w = Request::new(Cmd::SysmemWrite, 0, 3, [0, 77, 0]);
        assert_eq!(w.payload_len(), 77);
        let r = Request::new(Cmd::SysmemRead, 0, 3, [0, 77, 0]);
        assert_eq!(r.payload_len(), 0);
        assert_eq!(Request { cmd: 200, ..r }.payload_len(), 0);
    }

    #[test]
    fn probe_payload_round_trips() {
        let f = [(0xff00, 0x2200), (0xff00, 0x2b00)];
        let b = encode_probe_filters(&f);
        assert_eq!(b.len(), 16);
        assert_eq!(probe_filters(&b), f);
        assert_eq!(probe_filters(&b[..12]), f[..1]);
    }
}
