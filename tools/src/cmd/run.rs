//! `nvbare run`: launch any kernel of a cubin with arguments from the command line.
//!
//! Argument syntax (one `--arg` per kernel parameter, in order):
//!
//! * scalars: `TYPE:VALUE`, TYPE one of `u8 u16 u32 i32 u64 i64 f32 f64`, e.g. `u32:1024`,
//!   `f32:-0.5`, `u64:0x1000`;
//! * buffers: `buf:TYPExLEN[=INIT]`, a device buffer of LEN elements passed as a pointer, INIT
//!   `zeros` (default), `iota` (0, 1, 2, ...) or a number every element gets, e.g.
//!   `buf:u32x1024=iota`, `buf:f32x256=1.5`.
//!
//! After the kernel finishes, every buffer is copied back and its first elements printed.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use nvbare_core::device::{Arg, Device, DeviceBuffer, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;

use crate::open::{CliBackend, open_device};
use crate::with_device;
use crate::{CliError, DeviceSpec};

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
    /// Raw little-endian elements read from this file (`=@PATH`; it must hold exactly LEN).
    File(PathBuf),
}

/// One `--arg`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunArg {
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
        let usage = "use TYPE:VALUE (e.g. u32:5) or buf:TYPExLEN[=zeros|iota|VALUE|@FILE] \
                     (e.g. buf:u32x1024=iota)";
        let (head, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("argument {s:?}: {usage}"))?;
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
            return Ok(RunArg::Buffer { ty, len, init });
        }
        let ty: ElemType = head
            .parse()
            .map_err(|e| format!("argument {s:?}: {e}; {usage}"))?;
        Ok(RunArg::Scalar(ty, rest.parse()?))
    }
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

fn scalar(ty: ElemType, n: Number) -> Result<Arg<'static>, String> {
    Ok(match ty {
        ElemType::U8 => Arg::U8(as_int(n, ty, 0, u8::MAX as i128)? as u8),
        ElemType::U16 => Arg::U16(as_int(n, ty, 0, u16::MAX as i128)? as u16),
        ElemType::U32 => Arg::U32(as_int(n, ty, 0, u32::MAX as i128)? as u32),
        ElemType::I32 => Arg::I32(as_int(n, ty, i32::MIN as i128, i32::MAX as i128)? as i32),
        ElemType::U64 => Arg::U64(as_int(n, ty, 0, u64::MAX as i128)? as u64),
        ElemType::I64 => Arg::I64(as_int(n, ty, i64::MIN as i128, i64::MAX as i128)? as i64),
        ElemType::F32 => Arg::F32(as_float(n) as f32),
        ElemType::F64 => Arg::F64(as_float(n)),
    })
}

/// Options of `nvbare run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The cubin.
    pub cubin: PathBuf,
    /// The kernel.
    pub kernel: String,
    /// Grid.
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub shared: u32,
    /// Arguments.
    pub args: Vec<RunArg>,
    /// Elements of each buffer to print.
    pub print: usize,
    /// Wait timeout.
    pub timeout: Duration,
    /// Directory to write every buffer to afterwards (`arg<N>.bin`, raw little-endian).
    pub save: Option<PathBuf>,
    /// [`DeviceOptions::stack_size`].
    pub stack_size: u32,
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

macro_rules! buffers {
    ($($v:ident $t:ty),*) => {
        enum AnyBuf<'d, B: CliBackend> {
            $($v(DeviceBuffer<'d, B, $t>),)*
        }

        impl<'d, B: CliBackend> AnyBuf<'d, B> {
            fn new(dev: &'d Device<B>, ty: ElemType, len: usize, init: &Init)
                -> Result<Self, CliError> {
                let e = |e: nvbare_core::device::DeviceError| CliError::Runtime(format!("buffer: {e}"));
                Ok(match ty {
                    $(ElemType::$v => {
                        let host: Vec<$t> = match init {
                            Init::Zeros => vec![<$t>::default(); len],
                            Init::Iota => (0..len).map(|i| i as $t).collect(),
                            Init::Value(n) => vec![number_as::<$t>(*n); len],
                            Init::File(path) => read_elems::<$t>(path, len)?,
                        };
                        AnyBuf::$v(dev.htod_copy(&host).map_err(e)?)
                    })*
                })
            }

            fn arg(&self) -> Arg<'static> {
                match self {
                    $(AnyBuf::$v(b) => b.arg(),)*
                }
            }

            /// Copies the buffer out; prints its first `n` elements, and writes all of it to
            /// `save` (raw little-endian) when given.
            fn show(&self, dev: &Device<B>, n: usize, save: Option<&std::path::Path>)
                -> Result<String, CliError> {
                let e = |e: nvbare_core::device::DeviceError| CliError::Runtime(format!("copy out: {e}"));
                Ok(match self {
                    $(AnyBuf::$v(b) => {
                        let v = dev.dtoh_copy(b).map_err(e)?;
                        if let Some(path) = save {
                            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                            std::fs::write(path, bytes).map_err(|e| {
                                CliError::Runtime(format!("writing {}: {e}", path.display()))
                            })?;
                        }
                        let shown: Vec<String> = v.iter().take(n).map(|x| format!("{x}")).collect();
                        let more = if v.len() > n { format!(", ... ({} more)", v.len() - n) } else { String::new() };
                        format!("[{}{}]", shown.join(", "), more)
                    })*
                })
            }
        }
    };
}

buffers!(U8 u8, U16 u16, U32 u32, I32 i32, U64 u64, I64 i64, F32 f32, F64 f64);

fn number_as<T: FromNumber>(n: Number) -> T {
    T::from_number(n)
}

trait FromNumber {
    fn from_number(n: Number) -> Self;
}

macro_rules! from_number {
    ($($t:ty),*) => {$(
        impl FromNumber for $t {
            fn from_number(n: Number) -> Self {
                match n {
                    Number::Int(v) => v as $t,
                    Number::Float(f) => f as $t,
                }
            }
        }
    )*};
}
from_number!(u8, u16, u32, i32, u64, i64, f32, f64);

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Runs `nvbare run`.
pub fn run(out: &mut dyn Write, device: DeviceSpec, o: RunOptions) -> Result<(), CliError> {
    let bytes = std::fs::read(&o.cubin)
        .map_err(|e| CliError::Runtime(format!("reading {}: {e}", o.cubin.display())))?;
    let opts = DeviceOptions {
        timeout: o.timeout,
        stack_size: o.stack_size,
        ..Default::default()
    };
    let any = open_device(device, opts)?;
    with_device!(&any, dev => run_on(out, dev, &o, &bytes))
}

fn run_on<B: CliBackend>(
    out: &mut dyn Write,
    dev: &Device<B>,
    o: &RunOptions,
    bytes: &[u8],
) -> Result<(), CliError> {
    let m = dev
        .load_cubin(bytes)
        .map_err(|e| CliError::Runtime(format!("{}: {e}", o.cubin.display())))?;
    let f = m
        .function(&o.kernel)
        .map_err(|e| CliError::Usage(format!("{e}; the cubin has: {}", kernel_list(&m))))?;
    let mut bufs: Vec<(usize, AnyBuf<'_, B>)> = Vec::new();
    let mut args: Vec<Arg<'static>> = Vec::new();
    for (i, a) in o.args.iter().enumerate() {
        match a {
            RunArg::Scalar(ty, n) => {
                args.push(scalar(*ty, *n).map_err(|e| CliError::Usage(format!("--arg {i}: {e}")))?)
            }
            RunArg::Buffer { ty, len, init } => {
                let b = AnyBuf::new(dev, *ty, *len, init)?;
                args.push(b.arg());
                bufs.push((i, b));
            }
        }
    }
    let cfg = LaunchConfig {
        grid: o.grid,
        block: o.block,
        shared_mem_bytes: o.shared,
    };
    let t = Instant::now();
    dev.launch(&f, cfg, &args)
        .map_err(|e| CliError::Runtime(format!("launching {}: {e}", o.kernel)))?;
    dev.synchronize()
        .map_err(|e| CliError::Runtime(format!("running {}: {e}", o.kernel)))?;
    writeln!(
        out,
        "{} on {}: grid {:?} x block {:?}, finished in {:.1} µs",
        o.kernel,
        dev.info().backend,
        o.grid,
        o.block,
        t.elapsed().as_secs_f64() * 1e6
    )
    .map_err(io)?;
    for (i, b) in &bufs {
        let Some(RunArg::Buffer { ty, len, .. }) = o.args.get(*i) else {
            continue;
        };
        let save = o.save.as_ref().map(|d| d.join(format!("arg{i}.bin")));
        let shown = b.show(dev, o.print, save.as_deref())?;
        writeln!(out, "arg {i} buf:{ty}x{len} = {shown}").map_err(io)?;
    }
    Ok(())
}

/// Reads exactly `len` little-endian elements from `path`.
fn read_elems<T: FromLe>(path: &std::path::Path, len: usize) -> Result<Vec<T>, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Runtime(format!("reading {}: {e}", path.display())))?;
    let want = len.checked_mul(T::SIZE);
    if want != Some(bytes.len()) {
        return Err(CliError::Usage(format!(
            "{} holds {} bytes; a buffer of {len} elements of {} bytes needs {}",
            path.display(),
            bytes.len(),
            T::SIZE,
            len.saturating_mul(T::SIZE)
        )));
    }
    Ok(bytes.chunks_exact(T::SIZE).map(T::from_le).collect())
}

trait FromLe: Sized {
    const SIZE: usize;
    fn from_le(b: &[u8]) -> Self;
}

macro_rules! from_le {
    ($($t:ty),*) => {$(
        impl FromLe for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; core::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..core::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
from_le!(u8, u16, u32, i32, u64, i64, f32, f64);

fn kernel_list<B: CliBackend>(m: &nvbare_core::device::Module<'_, B>) -> String {
    m.kernels()
        .iter()
        .map(|k| k.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
        assert_eq!(parse_dim("4"), Ok([4, 1, 1]));
        assert_eq!(parse_dim("4,2,3"), Ok([4, 2, 3]));
        assert!(parse_dim("1,2,3,4").is_err());
        assert!(parse_dim("x").is_err());
    }
}
