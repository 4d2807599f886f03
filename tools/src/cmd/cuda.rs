//! `nvbare cuda env`: the shell lines that make programs load nvbare's `libcuda.so.1`
//! (crate `nvbare-libcuda`, docs/libcuda.md) instead of NVIDIA's.
//!
//! The library is built as `libcuda.so` (SONAME `libcuda.so.1`) under the cargo target
//! directory; programs look for `libcuda.so.1`, so the command makes a directory holding
//! `libcuda.so.1` and `libcuda.so` links to it and prints the `LD_LIBRARY_PATH` line naming that
//! directory: `eval "$(nvbare cuda env)"`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde::Serialize;

use crate::CliError;

/// The file `cargo build -p nvbare-libcuda` writes.
pub const LIBRARY: &str = "libcuda.so";
/// The names the link directory holds: the SONAME programs load, and the link-time name.
pub const LINKS: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// `nvbare cuda` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum CudaCommand {
    /// Print the `export LD_LIBRARY_PATH=...` line (and an NVBARE_DEVICE hint) that makes
    /// CUDA programs load nvbare's libcuda.so.1; makes the directory of `libcuda.so.1` links
    /// it names. Use as `eval "$(nvbare cuda env)"`.
    Env {
        /// The cargo target directory to find `release/libcuda.so` (else `debug/`) in
        /// (default: $CARGO_TARGET_DIR, else the one this nvbare was built in, else ./target).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<PathBuf>,
        /// The library itself, instead of looking in the target directory.
        #[arg(long, value_name = "FILE", conflicts_with = "target_dir")]
        lib: Option<PathBuf>,
        /// Where to make the `libcuda.so.1` links (default: `nvbare-cuda` beside the library).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Also print `export NVBARE_DEVICE=SPEC` (e.g. sim:gh100, nvidia:0, vfio:BDF).
        #[arg(long, short, value_name = "SPEC")]
        device: Option<String>,
        /// Print one JSON object instead of shell lines.
        #[arg(long)]
        json: bool,
    },
}

/// What `nvbare cuda env` found and made.
#[derive(Debug, Clone, Serialize)]
pub struct EnvReport {
    /// The built library.
    pub library: PathBuf,
    /// The directory of `libcuda.so.1` / `libcuda.so` links.
    pub dir: PathBuf,
    /// The line to run (or `eval`).
    pub ld_library_path: String,
    /// `export NVBARE_DEVICE=...` when `--device` was given.
    pub nvbare_device: Option<String>,
}

/// Runs `nvbare cuda ...`.
pub fn run(out: &mut dyn Write, cmd: CudaCommand) -> Result<(), CliError> {
    let CudaCommand::Env {
        target_dir,
        lib,
        dir,
        device,
        json,
    } = cmd;
    let library = match lib {
        Some(l) => existing(&l)?,
        None => find_library(&target_dir.unwrap_or_else(default_target_dir))?,
    };
    let dir = match dir {
        Some(d) => d,
        None => library
            .parent()
            .map(|p| p.join("nvbare-cuda"))
            .unwrap_or_else(|| PathBuf::from("nvbare-cuda")),
    };
    let dir = make_links(&library, &dir)?;
    let r = EnvReport {
        ld_library_path: format!(
            "export LD_LIBRARY_PATH={}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
            shell_quote(&dir.to_string_lossy())
        ),
        nvbare_device: device.map(|d| format!("export NVBARE_DEVICE={}", shell_quote(&d))),
        library,
        dir,
    };
    let w = |e: std::io::Error| CliError::Runtime(format!("writing output: {e}"));
    if json {
        let s = serde_json::to_string_pretty(&r)
            .map_err(|e| CliError::Runtime(format!("writing JSON: {e}")))?;
        return writeln!(out, "{s}").map_err(w);
    }
    writeln!(out, "# nvbare's libcuda.so.1: {}", r.library.display()).map_err(w)?;
    writeln!(out, "{}", r.ld_library_path).map_err(w)?;
    match &r.nvbare_device {
        Some(d) => writeln!(out, "{d}").map_err(w),
        None => writeln!(
            out,
            "# devices: NVBARE_DEVICE=SPEC[,SPEC...] (e.g. export NVBARE_DEVICE=sim:gh100); \
             default every GPU bound to vfio-pci"
        )
        .map_err(w),
    }
}

/// $CARGO_TARGET_DIR, else the target directory this binary runs from
/// (`<target>/<profile>/nvbare`), else `./target`.
fn default_target_dir() -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    let from_exe = std::env::current_exe().ok().and_then(|e| {
        let profile = e.parent()?;
        let t = profile.parent()?;
        t.join("release")
            .join(LIBRARY)
            .exists()
            .then(|| t.to_path_buf())
    });
    from_exe.unwrap_or_else(|| PathBuf::from("target"))
}

fn not_built(what: &str) -> CliError {
    CliError::Usage(format!(
        "{what}: nvbare's libcuda is not built; build it with `cargo build --release -p \
         nvbare-libcuda` (or name the library with --lib, the target directory with \
         --target-dir)"
    ))
}

fn existing(p: &Path) -> Result<PathBuf, CliError> {
    if !p.is_file() {
        return Err(not_built(&format!("{} does not exist", p.display())));
    }
    std::path::absolute(p)
        .map_err(|e| CliError::Runtime(format!("the absolute path of {}: {e}", p.display())))
}

/// `release/libcuda.so` of `target`, else `debug/libcuda.so`.
pub fn find_library(target: &Path) -> Result<PathBuf, CliError> {
    let tried: Vec<PathBuf> = ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join(LIBRARY))
        .collect();
    match tried.iter().find(|p| p.is_file()) {
        Some(p) => existing(p),
        None => Err(not_built(&format!(
            "neither {} nor {} exists",
            tried[0].display(),
            tried[1].display()
        ))),
    }
}

/// Makes `dir` with `libcuda.so.1` and `libcuda.so` links to `library` (links already there
/// are replaced; any other file of those names is left alone and refused). Returns `dir`,
/// absolute.
pub fn make_links(library: &Path, dir: &Path) -> Result<PathBuf, CliError> {
    let fail = |what: String, e: std::io::Error| CliError::Runtime(format!("{what}: {e}"));
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("creating {}", dir.display()), e))?;
    let dir = std::path::absolute(dir)
        .map_err(|e| fail(format!("the absolute path of {}", dir.display()), e))?;
    for name in LINKS {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                if std::fs::read_link(&link).ok().as_deref() == Some(library) {
                    continue;
                }
                std::fs::remove_file(&link)
                    .map_err(|e| fail(format!("replacing {}", link.display()), e))?;
            }
            Ok(_) => {
                return Err(CliError::Usage(format!(
                    "{} exists and is not a link; remove it or choose another --dir",
                    link.display()
                )));
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(library, &link).map_err(|e| {
            fail(
                format!("linking {} to {}", link.display(), library.display()),
                e,
            )
        })?;
    }
    Ok(dir)
}

/// `s` as one shell word: as is when it is plain, else in single quotes.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,=@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn paths_are_quoted_only_when_they_need_it() {
        assert_eq!(shell_quote("/a/b-c_1.d"), "/a/b-c_1.d");
        assert_eq!(shell_quote("/a b"), "'/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
