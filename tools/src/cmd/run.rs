//! `nvbare run`: launch any kernel of a cubin with arguments from the command line.
//!
//! One `--arg` per kernel parameter, in order (syntax: [`super::run_args`]): scalars
//! (`u32:5`), device buffers (`buf:u32x1024=iota`) and raw bytes for a parameter passed by
//! value (`bytes:HEX`, `bytes:@FILE`). Arguments of the wrong count or size are refused by the
//! device layer's own check, and the message shows the kernel's parameter table.
//!
//! After the kernel finishes, every buffer's first elements are printed (`--json`: one JSON
//! object). Buffers never pass through one host allocation of their size: they are filled,
//! printed and saved through [`STAGING_BYTES`] of host memory at a time, so a buffer may be as
//! large as the device can allocate. `--dump-qmd FILE` launches through
//! `Device::launch_recorded` and writes the QMD to FILE and the launch's methods to
//! FILE.pushbuf, for `nvbare decode qmd` and `nvbare decode pushbuf`.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nvbare_core::channel::methods::SUBC_COMPUTE;
use nvbare_core::chip::QmdVersion;
use nvbare_core::device::{
    Arg, Backend, Device, DeviceBuffer, DeviceError, DeviceOptions, DeviceRepr, Function,
    LaunchConfig, LaunchRecord,
};
use nvbare_gsp_firmware::program::LoadCubin;
use serde::Serialize;
use zerocopy::IntoBytes;

use super::cubin::{ParamReport, param_table};
pub use super::run_args::{ElemType, Init, MAX_BYTES_ARG, Number, RawBytes, RunArg, parse_dim};
use super::run_args::{raw_bytes, scalar};
use crate::input::{self, Input, Kind, Size};
use crate::open::{CliBackend, open_device};
use crate::with_device;
use crate::{CliError, DeviceSpec};

/// Host memory a buffer is filled, printed and saved through, a piece at a time: large enough
/// that a 1 GiB copy takes 16 round trips, small enough to cost nothing next to the device.
pub const STAGING_BYTES: usize = 64 << 20;

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
    /// Write the launch's QMD here and its methods to this path plus `.pushbuf`.
    pub dump_qmd: Option<PathBuf>,
    /// Print one JSON object instead of text.
    pub json: bool,
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

            /// Writes all of the buffer to `save` (when given) and returns its first `n`
            /// elements as JSON values.
            fn values(&self, dev: &Device<B>, n: usize, save: Option<&Path>)
                -> Result<Vec<serde_json::Value>, CliError> {
                match self {
                    $(AnyBuf::$v(b) => {
                        if let Some(path) = save {
                            save_to(dev, b, path, STAGING_BYTES)?;
                        }
                        Ok(read_head(dev, b, n, STAGING_BYTES)?
                            .into_iter()
                            .map(|x| serde_json::to_value(x).unwrap_or_default())
                            .collect())
                    })*
                }
            }

            fn len(&self) -> usize {
                match self {
                    $(AnyBuf::$v(b) => b.len(),)*
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
trait Elem: DeviceRepr + Default + fmt::Display + Serialize {
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

/// The first `n` elements of `b`, read `staging` bytes at a time.
fn read_head<B: Backend, T: Elem>(
    dev: &Device<B>,
    b: &DeviceBuffer<'_, B, T>,
    n: usize,
    staging: usize,
) -> Result<Vec<T>, CliError> {
    let shown = n.min(b.len());
    let mut v = vec![T::default(); shown];
    let step = (staging / size_of::<T>()).max(1);
    for (k, piece) in v.chunks_mut(step).enumerate() {
        dev.dtoh_copy_at(b, k * step, piece)
            .map_err(copy_err("copy out"))?;
    }
    Ok(v)
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

/// What `nvbare run --json` prints.
#[derive(Debug, Serialize)]
struct RunReport {
    kernel: String,
    device: String,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    /// From the launch call to the end of the wait.
    #[serde(serialize_with = "super::json::places3")]
    elapsed_us: f64,
    /// The kernel's parameter table.
    params: Vec<ParamReport>,
    buffers: Vec<BufferReport>,
    dump: Option<DumpReport>,
}

/// One buffer argument afterwards.
#[derive(Debug, Serialize)]
struct BufferReport {
    /// Its `--arg` position.
    arg: usize,
    #[serde(rename = "type")]
    ty: String,
    len: usize,
    /// Its first `--print` elements.
    head: Vec<serde_json::Value>,
    /// Where `--save` wrote all of it.
    saved: Option<String>,
}

/// What `--dump-qmd` wrote.
#[derive(Debug, Serialize)]
struct DumpReport {
    qmd_file: String,
    qmd_version: String,
    qmd_va: u64,
    pushbuf_file: String,
    method_words: usize,
    /// The commands that decode them.
    decode: [String; 2],
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
    // Raw bytes are read (and size-checked) before any buffer is allocated; other arguments
    // get none.
    let mut raw: Vec<Vec<u8>> = Vec::with_capacity(o.args.len());
    for (i, a) in o.args.iter().enumerate() {
        raw.push(match a {
            RunArg::Bytes(b) => raw_bytes(b, &format!("--arg {i}"))?,
            _ => Vec::new(),
        });
    }
    let mut bufs: Vec<(usize, AnyBuf<'_, B>)> = Vec::new();
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(o.args.len());
    for (i, (a, r)) in o.args.iter().zip(&raw).enumerate() {
        match (a, r) {
            (RunArg::Scalar(ty, n), _) => {
                args.push(scalar(*ty, *n).map_err(|e| CliError::Usage(format!("--arg {i}: {e}")))?)
            }
            (RunArg::Bytes(_), b) => args.push(Arg::Bytes(b)),
            (RunArg::Buffer { ty, len, init }, _) => {
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
    let launched = match o.dump_qmd {
        Some(_) => dev.launch_recorded(&f, cfg, &args).map(Some),
        None => dev.launch(&f, cfg, &args).map(|()| None),
    };
    let record = launched.map_err(|e| launch_error(&f, &o.kernel, e))?;
    dev.synchronize()
        .map_err(|e| CliError::Runtime(format!("running {}: {e}", o.kernel)))?;
    let elapsed = t.elapsed();
    let dump = match (&o.dump_qmd, &record) {
        (Some(path), Some(r)) => Some(dump_launch(path, r, dev.info().classes.compute)?),
        _ => None,
    };
    if o.json {
        return print_json(out, dev, o, &f, elapsed, &bufs, dump);
    }
    writeln!(
        out,
        "{} on {}: grid {:?} x block {:?}, finished in {:.1} µs",
        o.kernel,
        dev.info().backend,
        o.grid,
        o.block,
        elapsed.as_secs_f64() * 1e6
    )
    .map_err(io)?;
    if let Some(d) = &dump {
        writeln!(
            out,
            "QMD {} written to {} ({}); {} launch method words to {} ({})",
            d.qmd_version, d.qmd_file, d.decode[0], d.method_words, d.pushbuf_file, d.decode[1]
        )
        .map_err(io)?;
    }
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

/// A launch error; arguments of the wrong count or size (the device layer's check) come with
/// the kernel's parameter table and what to pass.
fn launch_error<B: Backend>(f: &Function<'_, '_, B>, name: &str, e: DeviceError) -> CliError {
    match e {
        DeviceError::Arguments(m) => {
            let params: Vec<ParamReport> = f.info().params.iter().map(ParamReport::from).collect();
            let table = if params.is_empty() {
                "  (no parameters)".to_string()
            } else {
                param_table(&params)
            };
            CliError::Usage(format!(
                "{m}:\n{table}\npass one --arg per parameter, of its size (TYPE:VALUE, \
                 buf:... for a pointer, bytes:HEX or bytes:@FILE for a struct by value)"
            ))
        }
        e => CliError::Runtime(format!("launching {name}: {e}")),
    }
}

/// `decode qmd --version`'s name of a layout.
fn qmd_flag(v: QmdVersion) -> &'static str {
    match v {
        QmdVersion::V03_00 => "v03",
        QmdVersion::V04_00 => "v04",
        _ => "v05",
    }
}

/// Writes `r`'s QMD to `path` and its methods (little-endian words) to `path.pushbuf`.
fn dump_launch(path: &Path, r: &LaunchRecord, compute: u32) -> Result<DumpReport, CliError> {
    let werr = |p: &Path| {
        let p = p.display().to_string();
        move |e: std::io::Error| {
            CliError::Runtime(format!("writing {p}: {e}; check that its directory exists"))
        }
    };
    let mut pb = path.as_os_str().to_owned();
    pb.push(".pushbuf");
    let pb = PathBuf::from(pb);
    std::fs::write(path, r.qmd.as_bytes()).map_err(werr(path))?;
    let words: Vec<u8> = r.methods.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&pb, words).map_err(werr(&pb))?;
    let v = r.qmd.version();
    Ok(DumpReport {
        qmd_file: path.display().to_string(),
        qmd_version: format!("{v:?}"),
        qmd_va: r.qmd_va,
        pushbuf_file: pb.display().to_string(),
        method_words: r.methods.len(),
        decode: [
            format!(
                "nvbare decode qmd --version {} {}",
                qmd_flag(v),
                path.display()
            ),
            format!(
                "nvbare decode pushbuf --class {SUBC_COMPUTE}={compute:x} {}",
                pb.display()
            ),
        ],
    })
}

fn print_json<B: CliBackend>(
    out: &mut dyn Write,
    dev: &Device<B>,
    o: &RunOptions,
    f: &Function<'_, '_, B>,
    elapsed: Duration,
    bufs: &[(usize, AnyBuf<'_, B>)],
    dump: Option<DumpReport>,
) -> Result<(), CliError> {
    let mut buffers = Vec::with_capacity(bufs.len());
    for (i, b) in bufs {
        let Some(RunArg::Buffer { ty, .. }) = o.args.get(*i) else {
            continue;
        };
        let save = o.save.as_ref().map(|d| d.join(format!("arg{i}.bin")));
        buffers.push(BufferReport {
            arg: *i,
            ty: ty.to_string(),
            len: b.len(),
            head: b.values(dev, o.print, save.as_deref())?,
            saved: save.map(|p| p.display().to_string()),
        });
    }
    let r = RunReport {
        kernel: o.kernel.clone(),
        device: dev.info().backend.clone(),
        grid: o.grid,
        block: o.block,
        shared: o.shared,
        elapsed_us: elapsed.as_secs_f64() * 1e6,
        params: f.info().params.iter().map(ParamReport::from).collect(),
        buffers,
        dump,
    };
    let s = serde_json::to_string_pretty(&r)
        .map_err(|e| CliError::Runtime(format!("writing JSON: {e}")))?;
    writeln!(out, "{s}").map_err(io)
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

    fn add1_cubin() -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/cubins/kernels_sm90_cuda13.cubin");
        std::fs::read(p).unwrap()
    }

    #[test]
    fn argument_mismatches_show_the_parameter_table() {
        let dev = sim();
        let m = dev.load_cubin(&add1_cubin()).unwrap();
        let f = m.function("add1").unwrap();
        let b = dev.alloc_zeros::<u32>(4).unwrap();
        let cfg = LaunchConfig::for_num_elems(4);
        let e = dev.launch(&f, cfg, &[b.arg()]).unwrap_err();
        let msg = launch_error(&f, "add1", e).to_string();
        assert!(
            msg.starts_with(
                "kernel `add1` takes 2 parameters, 1 were given:\n  0  offset 0  8 bytes\n  1  offset 8  4 bytes\npass one --arg"
            ),
            "{msg}"
        );
        let e = dev
            .launch(&f, cfg, &[b.arg(), Arg::Bytes(&[1, 0])])
            .unwrap_err();
        let cli = launch_error(&f, "add1", e);
        assert_eq!(cli.exit_code(), 2);
        assert!(
            cli.to_string()
                .starts_with("parameter 1 of `add1` is 4 bytes, the argument (2 bytes) is 2:\n"),
            "{cli}"
        );
    }

    #[test]
    fn a_recorded_launch_runs_and_hands_back_its_qmd_and_methods() {
        let dev = sim();
        let m = dev.load_cubin(&add1_cubin()).unwrap();
        let f = m.function("add1").unwrap();
        let b = dev.htod_copy(&[10u32, 20, 30, 40]).unwrap();
        let cfg = LaunchConfig {
            grid: [2, 1, 1],
            block: [32, 1, 1],
            shared_mem_bytes: 0,
        };
        let n = 3u32.to_le_bytes();
        let r = dev
            .launch_recorded(&f, cfg, &[b.arg(), Arg::Bytes(&n)])
            .unwrap();
        dev.synchronize().unwrap();
        assert_eq!(dev.dtoh_copy(&b).unwrap(), [11, 21, 31, 40]);
        assert_eq!(r.qmd.version(), dev.info().qmd);
        let d = r.qmd.launch_desc().unwrap();
        assert_eq!((d.grid, d.block), ([2, 1, 1], [32, 1, 1]));
        assert_eq!(d.program_address, f.info().program_address);
        // The methods decode, and SEND_PCAS_A carries the QMD's address.
        let words = &r.methods;
        assert!(words.contains(&((r.qmd_va >> 8) as u32)), "{words:x?}");
        let dir = std::env::temp_dir().join(format!("nvbare-dump-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rep = dump_launch(&dir.join("q"), &r, dev.info().classes.compute).unwrap();
        assert_eq!(std::fs::read(dir.join("q")).unwrap(), r.qmd.as_bytes());
        assert_eq!(
            std::fs::read(dir.join("q.pushbuf")).unwrap().len(),
            words.len() * 4
        );
        assert_eq!(rep.method_words, words.len());
        let missing = dump_launch(&dir.join("no/such/q"), &r, 0).unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("check that its directory exists"),
            "{missing}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
