//! `nvbare cubin inspect FILE [--json]`: what a cubin holds as nvbare's loader sees it: the SM,
//! every kernel with its parameter table, registers, shared and local memory, constant banks
//! and block limits, the device globals and the relocations by type.
//!
//! The facts come from [`Cubin::parse`], the parser `nvbare run` and the library load with, so
//! what this prints is what a launch is checked against. The human output and the JSON are
//! written from one [`CubinReport`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use nvbare_gsp_firmware::FirmwareFile;
use nvbare_gsp_firmware::cubin::{Cubin, CubinError, EM_CUDA, Kernel, KernelParam, reloc};
use serde::Serialize;

use crate::CliError;
use crate::input::{self, InputError};

/// `nvbare cubin` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum CubinCommand {
    /// Print a cubin's SM, kernels (parameters: ordinal, offset, size; registers; shared,
    /// local memory; constant banks; block limits), globals and relocations.
    Inspect {
        /// The cubin (`nvcc -cubin`, `ptxas` or `cuobjdump -xelf` output; `-` reads standard
        /// input).
        file: PathBuf,
        /// Print one JSON object instead (the same facts).
        #[arg(long)]
        json: bool,
    },
}

/// Runs `nvbare cubin ...`.
pub fn run(out: &mut dyn Write, cmd: CubinCommand) -> Result<(), CliError> {
    match cmd {
        CubinCommand::Inspect { file, json } => {
            let report = inspect(&file)?;
            if json {
                let s = serde_json::to_string_pretty(&report)
                    .map_err(|e| CliError::Runtime(format!("writing JSON: {e}")))?;
                writeln!(out, "{s}").map_err(io)
            } else {
                print(out, &report).map_err(io)
            }
        }
    }
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Why a file could not be inspected as a cubin. Every case is the command line's to fix
/// (exit code 2): the message says what the file is and what to do.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The path cannot be read, or is too large for a cubin.
    #[error("{0}; check the path (nvbare cubin inspect takes a .cubin file)")]
    Read(#[from] InputError),
    /// The path is a directory.
    #[error("{0} is a directory, not a cubin; pass a .cubin file inside it")]
    Directory(String),
    /// The file is something else entirely.
    #[error("{path} is not a CUDA cubin: {looks_like}; {hint}")]
    NotCubin {
        /// The file.
        path: String,
        /// What the file looks like (empty, an x86-64 ELF, GSP firmware, ...).
        looks_like: String,
        /// What to do.
        hint: &'static str,
    },
    /// The file is a cubin (`EM_CUDA` ELF) but the parser refused it.
    #[error("{path} is a CUDA ELF (EM_CUDA) that nvbare cannot read: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's reason.
        source: CubinError,
    },
}

impl From<InspectError> for CliError {
    fn from(e: InspectError) -> CliError {
        CliError::Usage(e.to_string())
    }
}

/// What to do with a file that is not a cubin.
const REBUILD: &str = "build one with `nvcc -cubin -arch=sm_XX` (or `ptxas`), or extract one \
                       from an executable with `cuobjdump -xelf all`";

/// Reads and parses `path` into a [`CubinReport`].
pub fn inspect(path: &Path) -> Result<CubinReport, InspectError> {
    if path.is_dir() {
        return Err(InspectError::Directory(path.display().to_string()));
    }
    let bytes = input::read_at_most(path, input::MAX_CUBIN_BYTES, input::CUBIN)?;
    let cubin = parse(path, &bytes)?;
    Ok(CubinReport::new(path, bytes.len() as u64, &cubin))
}

/// [`Cubin::parse`], with a file that is not a cubin described for what it is.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Cubin, InspectError> {
    let name = path.display().to_string();
    match Cubin::parse(bytes) {
        Ok(c) => Ok(c),
        Err(e) => match looks_like(bytes) {
            Some((looks_like, hint)) => Err(InspectError::NotCubin {
                path: name,
                looks_like,
                hint,
            }),
            None => Err(InspectError::Parse {
                path: name,
                source: e,
            }),
        },
    }
}

/// What `bytes` are when they are not a cubin, and what to do; `None` for an `EM_CUDA` ELF
/// (a cubin the parser refused: its own error says why).
fn looks_like(bytes: &[u8]) -> Option<(String, &'static str)> {
    if bytes.is_empty() {
        return Some(("the file is empty".into(), REBUILD));
    }
    if FirmwareFile::detect(bytes).is_ok() {
        return Some((
            "it is an NVIDIA firmware file".into(),
            "use `nvbare fw inspect FILE`",
        ));
    }
    if !bytes.starts_with(b"\x7fELF") {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        let what = if bytes.len() >= 2 && bytes.starts_with(b"PK") {
            " (a zip archive: a Python wheel or a jar?)".to_string()
        } else {
            String::new()
        };
        return Some((
            format!(
                "it is not an ELF file (it starts with {}{what})",
                head.join(" ")
            ),
            REBUILD,
        ));
    }
    let machine = bytes.get(18..20).map(|b| u16::from_le_bytes([b[0], b[1]]));
    match machine {
        Some(EM_CUDA) => None,
        Some(m) => Some((
            format!("it is an ELF file for {} (e_machine {m})", machine_name(m)),
            "a cubin is an ELF for the GPU (e_machine 190, EM_CUDA): pass the .cubin, or \
             extract it from this program with `cuobjdump -xelf all`",
        )),
        None => Some(("it is an ELF file cut short".into(), REBUILD)),
    }
}

fn machine_name(m: u16) -> &'static str {
    match m {
        3 => "x86 (EM_386)",
        40 => "ARM (EM_ARM)",
        62 => "x86-64 (EM_X86_64)",
        183 => "AArch64 (EM_AARCH64)",
        243 => "RISC-V (EM_RISCV)",
        _ => "another machine",
    }
}

/// One line for `nvbare fw inspect` when `bytes` are a cubin: "this is a CUDA cubin (sm_90, 5
/// kernels): use `nvbare cubin inspect FILE`"; `None` when they are not.
pub fn cubin_note(path: &Path, bytes: &[u8]) -> Option<String> {
    let c = Cubin::parse(bytes).ok()?;
    Some(format!(
        "this is a CUDA cubin (sm_{}, {} kernel{}): use `nvbare cubin inspect {}`",
        c.sm,
        c.kernels.len(),
        if c.kernels.len() == 1 { "" } else { "s" },
        path.display()
    ))
}

/// Everything `nvbare cubin inspect` prints.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CubinReport {
    /// The file, as named.
    pub file: String,
    /// Its size in bytes.
    pub file_size: u64,
    /// Shader model, `major * 10 + minor` (90 for sm_90).
    pub sm: u32,
    /// `sm_90`.
    pub arch: String,
    /// ELF ABI version (7 or 8).
    pub abi_version: u8,
    /// `EI_OSABI` (0x33 or 0x41).
    pub os_abi: u8,
    /// `ET_EXEC` or `ET_REL`.
    pub elf_type: &'static str,
    /// Bytes of GPU memory the loaded image needs.
    pub image_size: u64,
    /// The kernels, in symbol-table order.
    pub kernels: Vec<KernelReport>,
    /// Device globals.
    pub globals: Vec<GlobalReport>,
    /// Relocations of loaded sections, counted by type.
    pub relocations: Vec<RelocCount>,
}

/// One kernel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KernelReport {
    /// Its name.
    pub name: String,
    /// Offset of its first instruction in the image.
    pub code_offset: u64,
    /// Bytes of code.
    pub code_size: u64,
    /// Registers per thread (`EIATTR_REGCOUNT`).
    pub registers: u32,
    /// Where the parameters start in constant bank 0 (`EIATTR_PARAM_CBANK`).
    pub param_base: u32,
    /// Bytes of parameters.
    pub param_size: u32,
    /// The parameters (`EIATTR_KPARAM_INFO`), by ordinal. The cubin records no alignment of
    /// a parameter itself; its offset is aligned for its type.
    pub params: Vec<ParamReport>,
    /// Static shared memory per block, bytes.
    pub shared_static: u32,
    /// Local memory per thread the compiler needs (larger of frame and stack), bytes.
    pub local: u32,
    /// `EIATTR_FRAME_SIZE`.
    pub frame_size: u32,
    /// `EIATTR_MIN_STACK_SIZE`.
    pub min_stack_size: u32,
    /// ptxas could not size the stack (recursion): a launch adds `--stack-size`.
    pub stack_unknown: bool,
    /// Constant banks: bank 0 (driver area and parameters, built per launch) and the image's.
    pub const_banks: Vec<BankReport>,
    /// Most threads per block (`.maxntid` / `.reqntid`).
    pub max_threads: Option<u32>,
    /// `.maxntid`.
    pub max_block: Option<[u32; 3]>,
    /// `.reqntid`.
    pub required_block: Option<[u32; 3]>,
    /// `__cluster_dims__`.
    pub cluster_dims: Option<[u32; 3]>,
    /// Named barriers.
    pub barriers: u32,
}

/// One parameter.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ParamReport {
    /// Position, from 0.
    pub ordinal: u32,
    /// Byte offset from the start of the parameters.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
}

impl From<&KernelParam> for ParamReport {
    fn from(p: &KernelParam) -> ParamReport {
        ParamReport {
            ordinal: p.ordinal,
            offset: p.offset,
            size: p.size,
        }
    }
}

/// One constant bank.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct BankReport {
    /// Bank number.
    pub bank: u32,
    /// Bytes.
    pub size: u64,
}

/// One device global.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GlobalReport {
    /// Symbol name.
    pub name: String,
    /// Offset in the image.
    pub image_offset: u64,
    /// Bytes.
    pub size: u64,
}

/// The relocations of one type.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RelocCount {
    /// `R_CUDA_*` name, or `type 0x..` for one nvbare has no name for.
    pub kind: String,
    /// The type number.
    pub r_type: u32,
    /// How many.
    pub count: usize,
}

impl CubinReport {
    /// The report of `c`, read from `path` (`file_size` bytes).
    pub fn new(path: &Path, file_size: u64, c: &Cubin) -> CubinReport {
        let mut by_type: BTreeMap<u32, usize> = BTreeMap::new();
        for r in &c.relocations {
            *by_type.entry(r.r_type).or_default() += 1;
        }
        CubinReport {
            file: path.display().to_string(),
            file_size,
            sm: c.sm,
            arch: format!("sm_{}", c.sm),
            abi_version: c.abi_version,
            os_abi: c.os_abi,
            elf_type: if c.relocatable { "ET_REL" } else { "ET_EXEC" },
            image_size: c.image_size(),
            kernels: c.kernels.iter().map(KernelReport::new).collect(),
            globals: c
                .globals
                .iter()
                .map(|g| GlobalReport {
                    name: g.name.clone(),
                    image_offset: g.image_offset,
                    size: g.size,
                })
                .collect(),
            relocations: by_type
                .into_iter()
                .map(|(r_type, count)| RelocCount {
                    kind: reloc::name(r_type)
                        .map_or_else(|| format!("type {r_type:#x}"), str::to_string),
                    r_type,
                    count,
                })
                .collect(),
        }
    }
}

impl KernelReport {
    fn new(k: &Kernel) -> KernelReport {
        let mut banks = vec![BankReport {
            bank: 0,
            size: k.cbank0_size.into(),
        }];
        banks.extend(
            k.const_banks
                .iter()
                .filter(|b| b.bank != 0)
                .map(|b| BankReport {
                    bank: b.bank,
                    size: b.size,
                }),
        );
        KernelReport {
            name: k.name.clone(),
            code_offset: k.code_offset,
            code_size: k.code_size,
            registers: k.regcount,
            param_base: k.param_base,
            param_size: k.param_size,
            params: k.params.iter().map(ParamReport::from).collect(),
            shared_static: k.shared_size,
            local: k.local_size,
            frame_size: k.frame_size,
            min_stack_size: k.min_stack_size,
            stack_unknown: k.stack_unknown,
            const_banks: banks,
            max_threads: k.max_threads,
            max_block: k.max_block,
            required_block: k.required_block,
            cluster_dims: k.cluster_dims,
            barriers: k.num_barriers,
        }
    }
}

/// A kernel's parameter table, one `  ORDINAL  offset OFFSET  SIZE bytes` line each (also in
/// `nvbare run`'s argument errors).
pub fn param_table(params: &[ParamReport]) -> String {
    let w = params
        .iter()
        .map(|p| p.ordinal.to_string().len())
        .max()
        .unwrap_or(1);
    let wo = params
        .iter()
        .map(|p| p.offset.to_string().len())
        .max()
        .unwrap_or(1);
    params
        .iter()
        .map(|p| {
            format!(
                "  {:>w$}  offset {:>wo$}  {} bytes",
                p.ordinal, p.offset, p.size
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn dims(d: Option<[u32; 3]>) -> String {
    d.map_or_else(|| "-".into(), |[x, y, z]| format!("{x}x{y}x{z}"))
}

/// Writes `r` for a person.
pub fn print(out: &mut dyn Write, r: &CubinReport) -> std::io::Result<()> {
    writeln!(out, "file        {} ({} bytes)", r.file, r.file_size)?;
    writeln!(
        out,
        "cubin       {}, ELF ABI v{} (OS-ABI {:#04x}), {}, image {} bytes",
        r.arch, r.abi_version, r.os_abi, r.elf_type, r.image_size
    )?;
    writeln!(out, "kernels     {}", r.kernels.len())?;
    for k in &r.kernels {
        print_kernel(out, k)?;
    }
    if !r.globals.is_empty() {
        writeln!(out, "globals     {}", r.globals.len())?;
        for g in &r.globals {
            writeln!(
                out,
                "  {:<24} image offset {:#x}, {} bytes",
                g.name, g.image_offset, g.size
            )?;
        }
    }
    let total: usize = r.relocations.iter().map(|c| c.count).sum();
    writeln!(out, "relocations {total}")?;
    for c in &r.relocations {
        writeln!(out, "  {:<24} ({:#04x})  {}", c.kind, c.r_type, c.count)?;
    }
    Ok(())
}

fn print_kernel(out: &mut dyn Write, k: &KernelReport) -> std::io::Result<()> {
    writeln!(out, "kernel {}", k.name)?;
    writeln!(
        out,
        "  parameters  {} ({} bytes at constant bank 0 offset {:#x})",
        k.params.len(),
        k.param_size,
        k.param_base
    )?;
    if !k.params.is_empty() {
        writeln!(out, "  {}", param_table(&k.params).replace('\n', "\n  "))?;
    }
    writeln!(out, "  registers   {}", k.registers)?;
    writeln!(out, "  shared      {} bytes (static)", k.shared_static)?;
    let stack = if k.stack_unknown {
        "unknown (recursion): a launch adds --stack-size".to_string()
    } else {
        k.min_stack_size.to_string()
    };
    writeln!(
        out,
        "  local       {} bytes per thread (frame {}, stack {stack})",
        k.local, k.frame_size
    )?;
    let banks: Vec<String> = k
        .const_banks
        .iter()
        .map(|b| format!("{}: {} bytes", b.bank, b.size))
        .collect();
    writeln!(out, "  const banks {}", banks.join(", "))?;
    match k.max_threads {
        Some(m) => writeln!(
            out,
            "  threads     at most {m} per block (.maxntid {}, .reqntid {})",
            dims(k.max_block),
            dims(k.required_block)
        )?,
        None => writeln!(
            out,
            "  threads     the device's limit (no .maxntid or .reqntid)"
        )?,
    }
    if k.cluster_dims.is_some() {
        writeln!(out, "  cluster     {}", dims(k.cluster_dims))?;
    }
    writeln!(out, "  barriers    {}", k.barriers)?;
    writeln!(
        out,
        "  code        image offset {:#x}, {} bytes",
        k.code_offset, k.code_size
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/cubins")
            .join(name)
    }

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nvbare-cubin-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn add1_has_two_parameters_of_8_and_4_bytes() {
        let r = inspect(&fixture("kernels_sm90_cuda13.cubin")).unwrap();
        assert_eq!((r.sm, r.arch.as_str(), r.abi_version), (90, "sm_90", 8));
        let add1 = r.kernels.iter().find(|k| k.name == "add1").unwrap();
        let p: Vec<(u32, u32, u32)> = add1
            .params
            .iter()
            .map(|p| (p.ordinal, p.offset, p.size))
            .collect();
        assert_eq!(p, [(0, 0, 8), (1, 8, 4)]);
        assert_eq!(add1.const_banks[0].bank, 0);
        // spin_forever's global is reached through one R_CUDA_64.
        assert!(
            r.relocations
                .iter()
                .any(|c| c.kind == "R_CUDA_64" && c.count >= 1),
            "{:?}",
            r.relocations
        );
        let mut out = Vec::new();
        print(&mut out, &r).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("kernel add1\n  parameters  2 (12 bytes"), "{s}");
        assert!(
            s.contains("    0  offset 0  8 bytes\n    1  offset 8  4 bytes"),
            "{s}"
        );
    }

    #[test]
    fn attributes_reach_the_report() {
        let r = inspect(&fixture("attrs_sm90_cuda13.cubin")).unwrap();
        let m = r.kernels.iter().find(|k| k.name == "maxntid").unwrap();
        let sizes: Vec<u32> = m.params.iter().map(|p| p.size).collect();
        assert_eq!(sizes, [1, 8, 2]);
        assert!(m.max_threads.is_some(), "{m:?}");
        let s = r.kernels.iter().find(|k| k.name == "smem_local").unwrap();
        assert!(s.shared_static > 0 && s.local > 0, "{s:?}");
        let rel = inspect(&fixture("globals_rel_sm90_cuda13.cubin")).unwrap();
        assert_eq!(rel.elf_type, "ET_REL");
        let kinds: Vec<&str> = rel.relocations.iter().map(|c| c.kind.as_str()).collect();
        assert!(kinds.contains(&"R_CUDA_ABS32_LO_32"), "{kinds:?}");
    }

    #[test]
    fn files_that_are_not_cubins_say_what_they_are() {
        let host_elf = std::env::current_exe().unwrap();
        let empty = temp("empty", b"");
        let random = temp("random", &[0x13, 0x37, 0xca, 0xfe, 9, 9, 9]);
        let dir = std::env::temp_dir();
        let missing = Path::new("/nonexistent/nvbare/x.cubin");
        for (p, want) in [
            (host_elf.as_path(), "is an ELF file for x86-64"),
            (empty.as_path(), "the file is empty"),
            (
                random.as_path(),
                "not an ELF file (it starts with 13 37 ca fe)",
            ),
            (dir.as_path(), "is a directory"),
            (missing, "cannot read /nonexistent/nvbare/x.cubin"),
        ] {
            let e = inspect(p).unwrap_err();
            let cli = CliError::from(e);
            assert_eq!(cli.exit_code(), 2, "{cli}");
            let msg = cli.to_string();
            assert!(msg.contains(want), "{}: {msg}", p.display());
        }
        // A cubin cut short is a CUDA ELF the parser explains.
        let bytes = std::fs::read(fixture("kernels_sm90_cuda13.cubin")).unwrap();
        let cut = temp("cut", &bytes[..200]);
        let msg = inspect(&cut).unwrap_err().to_string();
        assert!(
            msg.contains("is a CUDA ELF (EM_CUDA) that nvbare cannot read"),
            "{msg}"
        );
        for p in [empty, random, cut] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn the_fw_note_names_the_sm_and_the_kernels() {
        let p = fixture("kernels_sm90_cuda13.cubin");
        let bytes = std::fs::read(&p).unwrap();
        let n = cubin_note(&p, &bytes).unwrap();
        assert!(
            n.starts_with("this is a CUDA cubin (sm_90, 5 kernels)"),
            "{n}"
        );
        assert!(n.ends_with("kernels_sm90_cuda13.cubin`"), "{n}");
        assert_eq!(cubin_note(&p, b"junk"), None);
    }

    #[test]
    fn the_param_table_aligns_its_columns() {
        let p = |ordinal, offset, size| ParamReport {
            ordinal,
            offset,
            size,
        };
        let t = param_table(&[p(0, 0, 8), p(1, 8, 4), p(10, 128, 256)]);
        assert_eq!(
            t,
            "   0  offset   0  8 bytes\n   1  offset   8  4 bytes\n  10  offset 128  256 bytes"
        );
    }
}
