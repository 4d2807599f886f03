//! `nvbare decode ...`: print GPU data structures from raw bytes with NVIDIA's field names.
//!
//! One [`DecodeCommand`] variant per structure; adding one is a variant, an args struct and
//! a function.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use nvbare_core::channel::qmd::{Qmd, QmdVersion};
use nvbare_core::chip::{CHIPS, Chipset};

use crate::CliError;
use crate::input::{self, Kind};

/// What to decode.
#[derive(Subcommand, Debug, Clone)]
pub enum DecodeCommand {
    /// Decode a raw QMD (compute queue meta-data) and print every non-zero field.
    Qmd(QmdArgs),
    /// Decode a pushbuffer (32-bit method words) and print every method with its class name.
    Pushbuf(super::decode_pushbuf::PushbufArgs),
}

/// QMD layouts, as named on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum QmdLayout {
    /// V03_00: Ampere, Ada (256 bytes).
    V03,
    /// V04_00: Hopper (384 bytes).
    V04,
    /// V05_00: Blackwell (384 bytes).
    V05,
}

impl From<QmdLayout> for QmdVersion {
    fn from(l: QmdLayout) -> QmdVersion {
        match l {
            QmdLayout::V03 => QmdVersion::V03_00,
            QmdLayout::V04 => QmdVersion::V04_00,
            QmdLayout::V05 => QmdVersion::V05_00,
        }
    }
}

/// `nvbare decode qmd`.
#[derive(Args, Debug, Clone)]
pub struct QmdArgs {
    /// QMD layout.
    #[arg(
        long,
        value_enum,
        required_unless_present = "chip",
        conflicts_with = "chip"
    )]
    pub version: Option<QmdLayout>,
    /// Take the layout from a chip instead (e.g. gh100, ad102, gb202).
    #[arg(long)]
    pub chip: Option<String>,
    /// File with the raw QMD bytes (exactly the layout's size; `-` reads standard input).
    pub file: PathBuf,
}

/// Runs `nvbare decode ...`.
pub fn run(out: &mut dyn Write, cmd: DecodeCommand) -> Result<(), CliError> {
    match cmd {
        DecodeCommand::Qmd(a) => qmd(out, &a),
        DecodeCommand::Pushbuf(a) => super::decode_pushbuf::run(out, &a),
    }
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// The layout `--version` or `--chip` names.
pub fn qmd_version(a: &QmdArgs) -> Result<QmdVersion, CliError> {
    if let Some(l) = a.version {
        return Ok(l.into());
    }
    let name = a.chip.as_deref().unwrap_or_default();
    let cs = Chipset::from_name(name).ok_or_else(|| {
        let known: Vec<String> = CHIPS.iter().map(|c| c.name.to_ascii_lowercase()).collect();
        CliError::Usage(format!(
            "unknown chip {name:?}; known: {}",
            known.join(", ")
        ))
    })?;
    let v = cs.info().qmd;
    if v.fields().is_empty() {
        return Err(CliError::Usage(format!(
            "{cs} uses QMD {v:?}, which nvbare does not decode (Ampere and later only)"
        )));
    }
    Ok(v)
}

/// A QMD file, for messages: it must hold exactly one QMD of the layout.
const QMD: Kind = Kind {
    what: "the QMD",
    hint: "pass one raw QMD of the layout's size (--version or --chip picks the layout)",
};

/// Decodes and prints one QMD.
pub fn qmd(out: &mut dyn Write, a: &QmdArgs) -> Result<(), CliError> {
    let v = qmd_version(a)?;
    let bytes = input::read_exactly(&a.file, v.size() as u64, QMD)?;
    let q = Qmd::from_bytes(v, &bytes)
        .map_err(|e| CliError::Runtime(format!("{}: {e}", a.file.display())))?;
    writeln!(
        out,
        "QMD {v:?} ({} bytes) from {}",
        v.size(),
        a.file.display()
    )
    .map_err(io)?;
    if let Err(e) = q.check_version() {
        writeln!(out, "warning: {e}").map_err(io)?;
    }
    let fields: Vec<_> = v.fields().iter().filter(|f| q.get_field(f) != 0).collect();
    let width = fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for f in &fields {
        let raw = q.get_field(f);
        let bits = if f.hi == f.lo {
            format!("{}", f.lo)
        } else {
            format!("{}:{}", f.hi, f.lo)
        };
        write!(out, "{:<width$}  {:>9}  {raw:#x}", f.name, bits).map_err(io)?;
        if f.shift != 0 {
            write!(out, " (= {:#x})", raw << f.shift).map_err(io)?;
        }
        writeln!(out).map_err(io)?;
    }
    if fields.is_empty() {
        writeln!(out, "(all fields zero)").map_err(io)?;
    }
    if let Ok(d) = q.launch_desc() {
        writeln!(
            out,
            "launch: program {:#x}, grid {}x{}x{}, block {}x{}x{}, {} registers, {} bytes shared",
            d.program_address,
            d.grid[0],
            d.grid[1],
            d.grid[2],
            d.block[0],
            d.block[1],
            d.block[2],
            d.register_count,
            d.shared_memory_size
        )
        .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use nvbare_core::channel::qmd::LaunchDesc;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: DecodeCommand,
    }

    fn parse(args: &[&str]) -> Result<DecodeCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("decode").chain(args.iter().copied())).map(|c| c.cmd)
    }

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("nvbare-decode-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn decode(args: &[&str]) -> Result<String, CliError> {
        let mut out = Vec::new();
        run(&mut out, parse(args).unwrap())?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn decodes_every_layout() {
        for (flag, v) in [
            ("v03", QmdVersion::V03_00),
            ("v04", QmdVersion::V04_00),
            ("v05", QmdVersion::V05_00),
        ] {
            let d = LaunchDesc {
                program_address: 0x7000_0000,
                register_count: 24,
                block: [128, 1, 1],
                grid: [40, 2, 1],
                sass_version: 0x90,
                ..LaunchDesc::default()
            };
            let q = Qmd::build(v, &d).unwrap();
            let f = temp(flag, q.as_bytes());
            let s = decode(&["qmd", "--version", flag, f.to_str().unwrap()]).unwrap();
            assert!(s.contains(&format!("QMD {v:?}")), "{s}");
            assert!(s.contains("QMD_MAJOR_VERSION"), "{s}");
            assert!(s.contains("CTA_THREAD_DIMENSION0"), "{s}");
            let grid = if v == QmdVersion::V03_00 {
                "CTA_RASTER_WIDTH"
            } else {
                "GRID_WIDTH"
            };
            let line = s.lines().find(|l| l.starts_with(grid)).unwrap();
            assert!(line.ends_with("0x28"), "{line}");
            assert!(!s.contains("warning"), "{s}");
            assert!(
                s.contains("grid 40x2x1, block 128x1x1, 24 registers"),
                "{s}"
            );
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn shifted_fields_show_the_value() {
        let d = LaunchDesc {
            program_address: 0x1000,
            block: [1, 1, 1],
            grid: [1, 1, 1],
            cbufs: [
                Some((0x4000, 0x220)),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            ],
            ..LaunchDesc::default()
        };
        let q = Qmd::build(QmdVersion::V04_00, &d).unwrap();
        let f = temp("shift", q.as_bytes());
        let s = decode(&["qmd", "--chip", "gh100", f.to_str().unwrap()]).unwrap();
        let line = s
            .lines()
            .find(|l| l.starts_with("CONSTANT_BUFFER_SIZE_SHIFTED4(0)"))
            .unwrap();
        assert!(line.ends_with("0x22 (= 0x220)"), "{line}");
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let f = temp("short", &[0u8; 100]);
        let e = decode(&["qmd", "--version", "v04", f.to_str().unwrap()]).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, CliError::Usage(_)), "{msg}");
        assert!(
            msg.contains("holds 100 bytes") && msg.contains("exactly 384 bytes"),
            "{msg}"
        );
        // A V03 QMD read as V05: the size is wrong too.
        let q = Qmd::new(QmdVersion::V03_00);
        let g = temp("v3", q.as_bytes());
        assert!(decode(&["qmd", "--chip", "gb202", g.to_str().unwrap()]).is_err());
        // Same size, wrong layout: decoded with a warning.
        let q = Qmd::new(QmdVersion::V05_00);
        let h = temp("v5", q.as_bytes());
        let s = decode(&["qmd", "--version", "v04", h.to_str().unwrap()]).unwrap();
        assert!(s.contains("warning: QMD says version"), "{s}");
        assert!(matches!(
            decode(&["qmd", "--chip", "tu102", f.to_str().unwrap()]),
            Err(CliError::Usage(_))
        ));
        assert!(matches!(
            decode(&["qmd", "--chip", "gx999", f.to_str().unwrap()]),
            Err(CliError::Usage(_))
        ));
        assert!(decode(&["qmd", "--version", "v04", "/nonexistent/qmd.bin"]).is_err());
        for p in [f, g, h] {
            std::fs::remove_file(p).unwrap();
        }
        // Exactly one of --version / --chip.
        assert!(parse(&["qmd", "x.bin"]).is_err());
        assert!(parse(&["qmd", "--version", "v03", "--chip", "ad102", "x.bin"]).is_err());
        assert!(parse(&["qmd", "--version", "v09", "x.bin"]).is_err());
    }
}
