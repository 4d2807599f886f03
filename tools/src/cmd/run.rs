//! `nvbare run`: launch any kernel of a cubin with arguments from the command line.
//!
//! Argument syntax (one `--arg` per kernel parameter, in order):
//!
//! * scalars: `TYPE:VALUE`, TYPE one of `u8 u16 u32 i32 u64 i64 f32 f64`, e.g. `u32:1024`,
//!   `f32:-0.5`, `u64:0x1000`;
//! * buffers: `buf:TYPExLEN[=INIT]`, a device buffer of LEN elements passed as a pointer, INIT
//!   `zeros` (default), `iota` (0, 1, 2, ...), a number every element gets (checked against
//!   TYPE as a scalar is) or `@FILE` (exactly LEN raw little-endian elements), e.g.
//!   `buf:u32x1024=iota`, `buf:f32x256=1.5`.
//!
//! After the kernel finishes, every buffer's first elements are printed. Buffers never pass
//! through one host allocation of their size: they are filled, printed and saved through
//! [`STAGING_BYTES`] of host memory at a time, so a buffer may be as large as the device can
//! allocate.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use nvbare_core::device::{
    Arg, Backend, Device, DeviceBuffer, DeviceError, DeviceOptions, DeviceRepr, LaunchConfig,
};
use nvbare_gsp_firmware::program::LoadCubin;
use zerocopy::IntoBytes;

use crate::input::{self, Input, Kind, Size};
use crate::open::{CliBackend, open_device};
use crate::with_device;
use crate::{CliError, DeviceSpec};

/// Host memory a buffer is filled, printed and saved through, a piece at a time: large enough
/// that a 1 GiB copy takes 16 round trips, small enough to cost nothing next to the device.
pub const STAGING_BYTES: usize = 64 << 20;

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
fn buffer_bytes(ty: ElemType, len: usize) -> Result<u64, String> {
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

fn scalar(ty: ElemType, n: Number) -> Result<Arg<'static>, String> {
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
        enum AnyBuf<'d, B: Backend> {
            $($v(DeviceBuffer<'d, B, $t>),)*
        }

        impl<'d, B: Backend> AnyBuf<'d, B> {
            fn new(dev: &'d Device<B>, ty: ElemType, len: usize, init: &Init, what: &str)
                -> Result<Self, CliError> {
                Ok(match ty {
                    $(ElemType::$v => AnyBuf::$v(make(dev, len, init, what, STAGING_BYTES)?),)*
                })
            }

            fn arg(&self) -> Arg<'static> {
                match self {
                    $(AnyBuf::$v(b) => b.arg(),)*
                }
            }

            /// Writes all of the buffer to `save` (raw little-endian) when given, then its
            /// first `n` elements to `out`.
            fn show(&self, dev: &Device<B>, out: &mut dyn Write, n: usize, save: Option<&Path>)
                -> Result<(), CliError> {
                match self {
                    $(AnyBuf::$v(b) => {
                        if let Some(path) = save {
                            save_to(dev, b, path, STAGING_BYTES)?;
                        }
                        print_head(dev, b, out, n, STAGING_BYTES)
                    })*
                }
            }
        }
    };
}

buffers!(U8 u8, U16 u16, U32 u32, I32 i32, U64 u64, I64 i64, F32 f32, F64 f64);

/// What `nvbare run` needs of a buffer's element type.
trait Elem: DeviceRepr + Default + fmt::Display {
    /// `n`, which [`scalar`] accepted for this type.
    fn from_number(n: Number) -> Self;
    /// Element `i` of `iota` (`i as T`).
    fn from_index(i: usize) -> Self;
    /// Between little-endian (files) and native order.
    fn swap_le(self) -> Self;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn from_number(n: Number) -> Self {
                match n {
                    Number::Int(v) => v as $t,
                    Number::Float(f) => f as $t,
                }
            }
            fn from_index(i: usize) -> Self {
                i as $t
            }
            fn swap_le(self) -> Self {
                <$t>::from_le_bytes(self.to_ne_bytes())
            }
        }
    )*};
}
elem!(u8, u16, u32, i32, u64, i64, f32, f64);

fn copy_err(what: &'static str) -> impl Fn(DeviceError) -> CliError {
    move |e| CliError::Runtime(format!("{what}: {e}"))
}

/// A device buffer of `len` elements filled as `init` says, through `staging` bytes of host
/// memory at a time. `what` names the argument in messages.
fn make<'d, B: Backend, T: Elem>(
    dev: &'d Device<B>,
    len: usize,
    init: &Init,
    what: &str,
    staging: usize,
) -> Result<DeviceBuffer<'d, B, T>, CliError> {
    let bytes = len
        .checked_mul(size_of::<T>())
        .ok_or_else(|| CliError::Usage(format!("{what}: {len} elements do not fit 64 bits")))?;
    // A file of the wrong size is refused before the device allocates anything.
    let mut file = match init {
        Init::File(path) => Some(Input::open(path, Size::Exactly(bytes as u64), AT_FILE)?),
        _ => None,
    };
    let alloc = match init {
        Init::Zeros => dev.alloc_zeros::<T>(len),
        _ => dev.alloc::<T>(len),
    };
    let mut buf = alloc.map_err(|e| {
        let e = e.to_string();
        let hint = if e.contains("ask for less") {
            ""
        } else {
            "; ask for a smaller buffer"
        };
        CliError::Usage(format!(
            "{what} needs {}, which the device cannot allocate: {e}{hint}",
            input::bytes(bytes as u64)
        ))
    })?;
    if matches!(init, Init::Zeros) {
        return Ok(buf);
    }
    let mut host = vec![T::default(); (staging / size_of::<T>()).clamp(1, len)];
    if let Init::Value(n) = init {
        host.fill(T::from_number(*n));
    }
    let mut at = 0;
    while at < len {
        let n = host.len().min(len - at);
        let h = &mut host[..n];
        match (init, &mut file) {
            (Init::Iota, _) => {
                for (k, x) in h.iter_mut().enumerate() {
                    *x = T::from_index(at + k);
                }
            }
            (Init::File(_), Some(f)) => {
                if f.read_chunk(h.as_mut_bytes())? < n * size_of::<T>() {
                    break; // too short: `finish` says so
                }
                h.iter_mut().for_each(|x| *x = x.swap_le());
            }
            _ => {}
        }
        dev.htod_copy_at(h, &mut buf, at)
            .map_err(copy_err("copying the buffer in"))?;
        at += n;
    }
    if let Some(f) = file {
        f.finish()?;
    }
    Ok(buf)
}

/// `@FILE`, for messages.
const AT_FILE: Kind = Kind {
    what: "the buffer's file",
    hint: "give the buffer as many elements as the file holds (LEN = bytes / element size), \
           or pass a file of that size",
};

/// Writes all of `b` to `path` (raw little-endian), `staging` bytes at a time.
fn save_to<B: Backend, T: Elem>(
    dev: &Device<B>,
    b: &DeviceBuffer<'_, B, T>,
    path: &Path,
    staging: usize,
) -> Result<(), CliError> {
    let werr = |e: std::io::Error| CliError::Runtime(format!("writing {}: {e}", path.display()));
    let mut f = std::fs::File::create(path).map_err(werr)?;
    let mut host = vec![T::default(); (staging / size_of::<T>()).clamp(1, b.len())];
    let mut at = 0;
    while at < b.len() {
        let n = host.len().min(b.len() - at);
        let h = &mut host[..n];
        dev.dtoh_copy_at(b, at, h).map_err(copy_err("copy out"))?;
        h.iter_mut().for_each(|x| *x = x.swap_le());
        f.write_all(h.as_bytes()).map_err(werr)?;
        at += n;
    }
    Ok(())
}

/// Writes the first `n` elements of `b` to `out` as `[a, b, ..., ... (k more)]`, reading
/// `staging` bytes at a time.
fn print_head<B: Backend, T: Elem>(
    dev: &Device<B>,
    b: &DeviceBuffer<'_, B, T>,
    out: &mut dyn Write,
    n: usize,
    staging: usize,
) -> Result<(), CliError> {
    let shown = n.min(b.len());
    let mut host = vec![T::default(); (staging / size_of::<T>()).clamp(1, shown.max(1))];
    write!(out, "[").map_err(io)?;
    let mut at = 0;
    while at < shown {
        let k = host.len().min(shown - at);
        let h = &mut host[..k];
        dev.dtoh_copy_at(b, at, h).map_err(copy_err("copy out"))?;
        for (j, x) in h.iter().enumerate() {
            let sep = if at + j > 0 { ", " } else { "" };
            write!(out, "{sep}{x}").map_err(io)?;
        }
        at += k;
    }
    if b.len() > shown {
        write!(out, ", ... ({} more)", b.len() - shown).map_err(io)?;
    }
    write!(out, "]").map_err(io)
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Runs `nvbare run`.
pub fn run(out: &mut dyn Write, device: DeviceSpec, o: RunOptions) -> Result<(), CliError> {
    let bytes = input::read_at_most(&o.cubin, input::MAX_CUBIN_BYTES, input::CUBIN)?;
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
                a.check()
                    .map_err(|e| CliError::Usage(format!("--arg {i}: {e}")))?;
                let b = AnyBuf::new(dev, *ty, *len, init, &format!("--arg {i} buf:{ty}x{len}"))?;
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
        write!(out, "arg {i} buf:{ty}x{len} = ").map_err(io)?;
        b.show(dev, out, o.print, save.as_deref())?;
        writeln!(out).map_err(io)?;
    }
    Ok(())
}

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

    use nvbare_sim::backend::SimBackend;
    use nvbare_sim::models::GH100;

    fn sim() -> Device<SimBackend> {
        let opts = DeviceOptions {
            staging_bytes: 64 << 10,
            ..Default::default()
        };
        Device::open(SimBackend::new(GH100, true).expect("simulated GPU"), opts).expect("opens")
    }

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nvbare-run-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn head<T: Elem>(
        dev: &Device<SimBackend>,
        b: &DeviceBuffer<'_, SimBackend, T>,
        n: usize,
    ) -> String {
        let mut out = Vec::new();
        // Two elements of host memory at a time: every piece boundary gets crossed.
        print_head(dev, b, &mut out, n, 2 * size_of::<T>()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn buffers_are_filled_printed_and_saved_a_piece_at_a_time() {
        let dev = sim();
        // Three elements of host memory at a time, so ten take four pieces, the last short.
        let b: DeviceBuffer<'_, _, u32> = make(&dev, 10, &Init::Iota, "t", 12).unwrap();
        assert_eq!(dev.dtoh_copy(&b).unwrap(), (0..10).collect::<Vec<u32>>());
        assert_eq!(head(&dev, &b, 5), "[0, 1, 2, 3, 4, ... (5 more)]");
        assert_eq!(head(&dev, &b, 100), "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]");
        let v: DeviceBuffer<'_, _, i64> =
            make(&dev, 7, &Init::Value(Number::Int(-9)), "t", 16).unwrap();
        assert_eq!(dev.dtoh_copy(&v).unwrap(), vec![-9i64; 7]);
        let z: DeviceBuffer<'_, _, f32> = make(&dev, 5, &Init::Zeros, "t", 4).unwrap();
        assert_eq!(head(&dev, &z, 2), "[0, 0, ... (3 more)]");

        // @FILE: little-endian elements in, the same bytes out through --save.
        let bytes: Vec<u8> = (0..20u16).flat_map(|i| (i * 1000).to_le_bytes()).collect();
        let f = temp("in.bin", &bytes);
        let b: DeviceBuffer<'_, _, u16> = make(&dev, 20, &Init::File(f.clone()), "t", 6).unwrap();
        assert_eq!(head(&dev, &b, 3), "[0, 1000, 2000, ... (17 more)]");
        let saved = f.with_extension("out");
        save_to(&dev, &b, &saved, 14).unwrap();
        assert_eq!(std::fs::read(&saved).unwrap(), bytes);

        // A file of another size is refused: a regular file by its length, before any byte is
        // read; a device by what it yields.
        for (path, len, holds) in [
            (f.clone(), 21, "holds 40 bytes"),
            (f.clone(), 19, "holds 40 bytes"),
            (PathBuf::from("/dev/zero"), 16, "holds more than 32 bytes"),
            (PathBuf::from("/dev/null"), 16, "holds 0 bytes"),
        ] {
            let e = make::<_, u16>(&dev, len, &Init::File(path.clone()), "t", 6).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, CliError::Usage(_)), "{msg}");
            assert!(
                msg.contains(holds) && msg.contains(&path.display().to_string()),
                "{msg}"
            );
            assert!(msg.contains(&format!("exactly {} bytes", len * 2)), "{msg}");
        }
        for p in [f, saved] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn a_buffer_the_device_cannot_allocate_is_a_usage_error() {
        let dev = sim();
        let e = make::<_, u32>(
            &dev,
            1 << 40,
            &Init::Zeros,
            "--arg 0 buf:u32x1099511627776",
            64,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, CliError::Usage(_)), "{msg}");
        assert!(
            msg.contains("--arg 0 buf:u32x1099511627776 needs 4398046511104 bytes (4096 GiB)"),
            "{msg}"
        );
        assert!(msg.contains("ask for"), "{msg}");
    }

    #[test]
    fn offset_copies_reach_the_middle_of_a_buffer() {
        let dev = sim();
        let mut b = dev.alloc_zeros::<u32>(10).unwrap();
        dev.htod_copy_at(&[7, 8, 9], &mut b, 5).unwrap();
        dev.htod_copy_at(&[1], &mut b, 9).unwrap();
        assert_eq!(dev.dtoh_copy(&b).unwrap(), [0, 0, 0, 0, 0, 7, 8, 9, 0, 1]);
        let mut mid = [0u32; 4];
        dev.dtoh_copy_at(&b, 4, &mut mid).unwrap();
        assert_eq!(mid, [0, 7, 8, 9]);
        dev.dtoh_copy_at(&b, 10, &mut []).unwrap();
        assert!(matches!(
            dev.htod_copy_at(&[1, 2], &mut b, 9),
            Err(DeviceError::BadRange(_))
        ));
        assert!(matches!(
            dev.dtoh_copy_at(&b, usize::MAX, &mut mid),
            Err(DeviceError::BadRange(_))
        ));
        // Through more than one staging half (32 KiB each here) at an offset.
        let n = 40_000;
        let mut big = dev.alloc_zeros::<u32>(n + 3).unwrap();
        let host: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        dev.htod_copy_at(&host, &mut big, 3).unwrap();
        let mut back = vec![0u32; n];
        dev.dtoh_copy_at(&big, 3, &mut back).unwrap();
        assert_eq!(back, host);
    }
}
