//! `nvbare run`'s argument syntax: one `--arg` per kernel parameter, in order.
//!
//! * scalars: `TYPE:VALUE`, TYPE one of `u8 u16 u32 i32 u64 i64 f32 f64`, e.g. `u32:1024`,
//!   `f32:-0.5`, `u64:0x1000`;
//! * buffers: `buf:TYPExLEN[=INIT]`, a device buffer of LEN elements passed as a pointer, INIT
//!   `zeros` (default), `iota` (0, 1, 2, ...), a number every element gets (checked against
//!   TYPE as a scalar is) or `@FILE` (exactly LEN raw little-endian elements), e.g.
//!   `buf:u32x1024=iota`, `buf:f32x256=1.5`;
//! * raw bytes: `bytes:HEX` or `bytes:@FILE`, a parameter passed by value whatever its size (a
//!   struct): the bytes in memory order, HEX two digits a byte (`bytes:0100000002000000` is
//!   the struct `{u32 a = 1; u32 b = 2;}`), FILE read as it is (`@-`: standard input), at
//!   most [`MAX_BYTES_ARG`] bytes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use nvbare_core::device::Arg;

use crate::CliError;
use crate::input::{self, Kind};

/// Most bytes a `bytes:` argument may hold: the largest parameter space a kernel can have
/// (CUDA 12.1's 32,764 bytes on Volta and later), rounded up.
pub const MAX_BYTES_ARG: u64 = 32 << 10;

/// Element types of scalars and buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemType {
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl FromStr for ElemType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "u8" => ElemType::U8,
            "u16" => ElemType::U16,
            "u32" => ElemType::U32,
            "i32" => ElemType::I32,
            "u64" => ElemType::U64,
            "i64" => ElemType::I64,
            "f32" => ElemType::F32,
            "f64" => ElemType::F64,
            _ => {
                return Err(format!(
                    "unknown type {s:?} (use u8, u16, u32, i32, u64, i64, f32 or f64)"
                ));
            }
        })
    }
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::U8 => 1,
            ElemType::U16 => 2,
            ElemType::U32 | ElemType::I32 | ElemType::F32 => 4,
            ElemType::U64 | ElemType::I64 | ElemType::F64 => 8,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ElemType::U8 => "u8",
            ElemType::U16 => "u16",
            ElemType::U32 => "u32",
            ElemType::I32 => "i32",
            ElemType::U64 => "u64",
            ElemType::I64 => "i64",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
        })
    }
}

/// A number as typed on the command line (integer, possibly hex, or float).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
}

impl FromStr for Number {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (neg, digits) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let int = if let Some(h) = digits.strip_prefix("0x") {
            i128::from_str_radix(h, 16).ok()
        } else {
            digits.parse::<i128>().ok()
        };
        if let Some(v) = int {
            return Ok(Number::Int(if neg { -v } else { v }));
        }
        s.parse::<f64>()
            .map(Number::Float)
            .map_err(|_| format!("{s:?} is not a number"))
    }
}

/// How a buffer starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// All zero.
    Zeros,
    /// 0, 1, 2, ...
    Iota,
    /// Every element this value.
    Value(Number),
    /// Raw little-endian elements read from this file (`=@PATH`, `=@-` for standard input; it
    /// must hold exactly LEN).
    File(PathBuf),
}

/// The bytes of a `bytes:` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawBytes {
    /// Given in hex on the command line.
    Hex(Vec<u8>),
    /// Read from this file when the kernel is launched (`@-`: standard input).
    File(PathBuf),
}

/// One `--arg`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunArg {
    /// A parameter passed by value as raw bytes (a struct).
    Bytes(RawBytes),
    /// A scalar.
    Scalar(ElemType, Number),
    /// A device buffer.
    Buffer {
        /// Element type.
        ty: ElemType,
        /// Elements.
        len: usize,
        /// Initial contents.
        init: Init,
    },
}

impl FromStr for RunArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "use TYPE:VALUE (e.g. u32:5), buf:TYPExLEN[=zeros|iota|VALUE|@FILE] \
                     (e.g. buf:u32x1024=iota) or bytes:HEX|@FILE (a struct by value)";
        let (head, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("argument {s:?}: {usage}"))?;
        if head == "bytes" {
            return parse_bytes(rest)
                .map(RunArg::Bytes)
                .map_err(|e| format!("argument {s:?}: {e}"));
        }
        if head == "buf" {
            let (shape, init) = match rest.split_once('=') {
                Some((a, b)) => (a, Some(b)),
                None => (rest, None),
            };
            let (ty, len) = shape
                .split_once('x')
                .ok_or_else(|| format!("buffer {s:?}: {usage}"))?;
            let ty: ElemType = ty.parse()?;
            let len: usize =
                len.parse().ok().filter(|&l| l > 0).ok_or_else(|| {
                    format!("buffer {s:?}: the length must be a positive integer")
                })?;
            let init = match init {
                None | Some("zeros") => Init::Zeros,
                Some("iota") => Init::Iota,
                Some(p) if p.starts_with('@') && p.len() > 1 => Init::File(PathBuf::from(&p[1..])),
                Some(v) => Init::Value(v.parse()?),
            };
            let a = RunArg::Buffer { ty, len, init };
            a.check().map_err(|e| format!("buffer {s:?}: {e}"))?;
            return Ok(a);
        }
        let ty: ElemType = head
            .parse()
            .map_err(|e| format!("argument {s:?}: {e}; {usage}"))?;
        let a = RunArg::Scalar(ty, rest.parse()?);
        a.check().map_err(|e| format!("argument {s:?}: {e}"))?;
        Ok(a)
    }
}

impl RunArg {
    /// Whether the argument can be built: a scalar (or a buffer's fill value) that fits its
    /// type, a buffer whose size in bytes fits 64 bits.
    pub fn check(&self) -> Result<(), String> {
        match self {
            RunArg::Scalar(ty, n) => scalar(*ty, *n).map(drop),
            RunArg::Bytes(_) => Ok(()),
            RunArg::Buffer { ty, len, init } => {
                buffer_bytes(*ty, *len)?;
                match init {
                    Init::Value(n) => scalar(*ty, *n).map(drop),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Bytes of a buffer of `len` elements of `ty`, if that fits 64 bits.
pub(super) fn buffer_bytes(ty: ElemType, len: usize) -> Result<u64, String> {
    len.checked_mul(ty.size())
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| {
            format!(
                "{len} elements of {} bytes do not fit a 64-bit size; ask for fewer",
                ty.size()
            )
        })
}

fn as_int(n: Number, ty: ElemType, lo: i128, hi: i128) -> Result<i128, String> {
    let v = match n {
        Number::Int(v) => v,
        Number::Float(f) if f.fract() == 0.0 => f as i128,
        Number::Float(f) => return Err(format!("{f} is not an integer for {ty}")),
    };
    if v < lo || v > hi {
        return Err(format!("{v} does not fit {ty}"));
    }
    Ok(v)
}

fn as_float(n: Number) -> f64 {
    match n {
        Number::Int(v) => v as f64,
        Number::Float(f) => f,
    }
}

/// `n` as an `f32`; a finite number beyond `f32`'s range is an error, not infinity.
fn as_f32(n: Number) -> Result<f32, String> {
    let f = as_float(n);
    let g = f as f32;
    if f.is_finite() && g.is_infinite() {
        return Err(format!("{f} does not fit f32"));
    }
    Ok(g)
}

pub(super) fn scalar(ty: ElemType, n: Number) -> Result<Arg<'static>, String> {
    Ok(match ty {
        ElemType::U8 => Arg::U8(as_int(n, ty, 0, u8::MAX as i128)? as u8),
        ElemType::U16 => Arg::U16(as_int(n, ty, 0, u16::MAX as i128)? as u16),
        ElemType::U32 => Arg::U32(as_int(n, ty, 0, u32::MAX as i128)? as u32),
        ElemType::I32 => Arg::I32(as_int(n, ty, i32::MIN as i128, i32::MAX as i128)? as i32),
        ElemType::U64 => Arg::U64(as_int(n, ty, 0, u64::MAX as i128)? as u64),
        ElemType::I64 => Arg::I64(as_int(n, ty, i64::MIN as i128, i64::MAX as i128)? as i64),
        ElemType::F32 => Arg::F32(as_f32(n)?),
        ElemType::F64 => Arg::F64(as_float(n)),
    })
}

/// Parses `X[,Y[,Z]]`.
pub fn parse_dim(s: &str) -> Result<[u32; 3], String> {
    let mut d = [1u32; 3];
    let parts: Vec<&str> = s.split(',').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("{s:?}: use X, X,Y or X,Y,Z"));
    }
    for (slot, p) in d.iter_mut().zip(&parts) {
        *slot = p
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {p:?} is not a non-negative integer"))?;
    }
    Ok(d)
}

/// `HEX` or `@FILE` of `bytes:HEX|@FILE`.
fn parse_bytes(s: &str) -> Result<RawBytes, String> {
    if let Some(p) = s.strip_prefix('@') {
        if p.is_empty() {
            return Err("name the file after @ (bytes:@FILE; @- reads standard input)".into());
        }
        return Ok(RawBytes::File(PathBuf::from(p)));
    }
    parse_hex(s).map(RawBytes::Hex)
}

/// Hex digits, two a byte, first byte first (an optional `0x` in front).
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    if digits.is_empty() {
        return Err("no bytes: give two hex digits a byte (bytes:01000000) or bytes:@FILE".into());
    }
    if let Some((i, c)) = digits.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(format!(
            "{c:?} at position {i} is not a hex digit; give two hex digits (0-9, a-f) a byte"
        ));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits: a byte takes two, so the count must be even (pad with a leading 0?)",
            digits.len()
        ));
    }
    if digits.len() as u64 / 2 > MAX_BYTES_ARG {
        return Err(format!(
            "{} bytes; a parameter holds at most {MAX_BYTES_ARG}",
            digits.len() / 2
        ));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            digits
                .get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("bad hex at position {i}"))
        })
        .collect()
}

/// `bytes:@FILE`, for messages.
const BYTES_FILE: Kind = Kind {
    what: "a bytes: argument",
    hint: "pass the struct's bytes only (a kernel's parameters hold at most 32764 bytes)",
};

/// The bytes of a `bytes:` argument (`what` names it in messages): the hex as given, or the
/// file read with its size checked before anything is allocated.
pub fn raw_bytes(b: &RawBytes, what: &str) -> Result<Vec<u8>, CliError> {
    match b {
        RawBytes::Hex(v) => Ok(v.clone()),
        RawBytes::File(p) => read_bytes_file(p, what),
    }
}

fn read_bytes_file(p: &Path, what: &str) -> Result<Vec<u8>, CliError> {
    let v = input::read_at_most(p, MAX_BYTES_ARG, BYTES_FILE)
        .map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
    if v.is_empty() {
        return Err(CliError::Usage(format!(
            "{what}: {} is empty; a by-value parameter needs its bytes",
            p.display()
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg_syntax() {
        assert_eq!(
            "u32:5".parse::<RunArg>(),
            Ok(RunArg::Scalar(ElemType::U32, Number::Int(5)))
        );
        assert_eq!(
            "f32:-0.5".parse::<RunArg>(),
            Ok(RunArg::Scalar(ElemType::F32, Number::Float(-0.5)))
        );
        assert_eq!(
            "u64:0x1000".parse::<RunArg>(),
            Ok(RunArg::Scalar(ElemType::U64, Number::Int(0x1000)))
        );
        assert_eq!(
            "buf:u32x1024=iota".parse::<RunArg>(),
            Ok(RunArg::Buffer {
                ty: ElemType::U32,
                len: 1024,
                init: Init::Iota
            })
        );
        assert_eq!(
            "buf:f32x4".parse::<RunArg>(),
            Ok(RunArg::Buffer {
                ty: ElemType::F32,
                len: 4,
                init: Init::Zeros
            })
        );
        for bad in [
            "5",
            "u31:4",
            "buf:u32",
            "buf:u32x0",
            "buf:u32x-1",
            "u32:abc",
            "buf:q8x4",
        ] {
            assert!(bad.parse::<RunArg>().is_err(), "{bad}");
        }
        assert!(scalar(ElemType::U8, Number::Int(256)).is_err());
        assert!(scalar(ElemType::U32, Number::Int(-1)).is_err());
        assert!(scalar(ElemType::U32, Number::Float(1.5)).is_err());
        assert!(scalar(ElemType::F32, Number::Float(1e39)).is_err());
        assert!(scalar(ElemType::F32, Number::Float(f64::INFINITY)).is_ok());
        assert_eq!(parse_dim("4"), Ok([4, 1, 1]));
        assert_eq!(parse_dim("4,2,3"), Ok([4, 2, 3]));
        assert!(parse_dim("1,2,3,4").is_err());
        assert!(parse_dim("x").is_err());
    }

    #[test]
    fn buffer_sizes_and_fill_values_are_checked_when_parsed() {
        // LEN * element size must fit 64 bits (it used to panic, "capacity overflow").
        for bad in [
            "buf:u32x18446744073709551615",
            "buf:u32x4611686018427387904",
            "buf:f64x2305843009213693952",
        ] {
            let e = bad.parse::<RunArg>().unwrap_err();
            assert!(e.contains("do not fit a 64-bit size"), "{bad}: {e}");
        }
        assert!("buf:u8x18446744073709551615".parse::<RunArg>().is_ok());
        // Fill values are checked as scalars are (99999999999 used to fill 1215752191).
        for (bad, why) in [
            ("buf:u32x16=99999999999", "does not fit u32"),
            ("buf:u8x4=256", "does not fit u8"),
            ("buf:u32x4=-1", "does not fit u32"),
            ("buf:i32x4=2147483648", "does not fit i32"),
            ("buf:u32x4=1.5", "not an integer for u32"),
            ("buf:u64x4=nan", "not an integer for u64"),
            ("buf:f32x4=1e39", "does not fit f32"),
            ("u32:4294967296", "does not fit u32"),
        ] {
            let e = bad.parse::<RunArg>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for good in [
            "buf:u32x16=4294967295",
            "buf:i32x4=-2147483648",
            "buf:u32x4=2.0",
            "buf:u64x4=0xffffffffffffffff",
            "buf:f64x2=1e300",
            "buf:f32x2=-0.5",
        ] {
            assert!(good.parse::<RunArg>().is_ok(), "{good}");
        }
        // Arguments built in code get the same checks.
        let a = RunArg::Buffer {
            ty: ElemType::U16,
            len: 4,
            init: Init::Value(Number::Int(70_000)),
        };
        assert!(a.check().is_err());
    }

    #[test]
    fn bytes_arguments() {
        assert_eq!(
            "bytes:0100000002000000".parse::<RunArg>(),
            Ok(RunArg::Bytes(RawBytes::Hex(vec![1, 0, 0, 0, 2, 0, 0, 0])))
        );
        assert_eq!(
            "bytes:0xFFee".parse::<RunArg>(),
            Ok(RunArg::Bytes(RawBytes::Hex(vec![0xff, 0xee])))
        );
        assert_eq!(
            "bytes:@s.bin".parse::<RunArg>(),
            Ok(RunArg::Bytes(RawBytes::File("s.bin".into())))
        );
        for (bad, why) in [
            ("bytes:123", "3 hex digits"),
            ("bytes:12g4", "'g' at position 2 is not a hex digit"),
            ("bytes:", "no bytes"),
            ("bytes:0x", "no bytes"),
            ("bytes:@", "name the file"),
            ("bytes:12 34", "' ' at position 2"),
        ] {
            let e = bad.parse::<RunArg>().unwrap_err();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
        let big = format!("bytes:{}", "00".repeat(MAX_BYTES_ARG as usize + 1));
        let e = big.parse::<RunArg>().unwrap_err();
        assert!(e.contains("at most 32768"), "{e}");
        assert!(
            format!("bytes:{}", "ab".repeat(MAX_BYTES_ARG as usize))
                .parse::<RunArg>()
                .is_ok()
        );
    }

    #[test]
    fn bytes_files_are_size_checked_before_they_are_read() {
        let e = raw_bytes(&RawBytes::File("/dev/zero".into()), "--arg 1").unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.exit_code(), 2, "{msg}");
        assert!(
            msg.starts_with("--arg 1: /dev/zero holds more than 32768 bytes"),
            "{msg}"
        );
        let e = raw_bytes(&RawBytes::File("/dev/null".into()), "--arg 0").unwrap_err();
        assert!(e.to_string().contains("/dev/null is empty"), "{e}");
        let e = raw_bytes(&RawBytes::File("/nonexistent/s.bin".into()), "--arg 2").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--arg 2: cannot read /nonexistent/s.bin"),
            "{e}"
        );
        let p = std::env::temp_dir().join(format!("nvbare-bytes-{}.bin", std::process::id()));
        std::fs::write(&p, [7u8; 256]).unwrap();
        assert_eq!(
            raw_bytes(&RawBytes::File(p.clone()), "x").unwrap(),
            [7u8; 256]
        );
        std::fs::remove_file(p).unwrap();
    }
}
