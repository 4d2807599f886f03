//! Where the GSP firmware of bare-metal devices comes from.
//!
//! The files live in a directory (`$NVBARE_FIRMWARE_DIR`, else `~/.cache/nvbare/firmware`,
//! the fetch script's rule) as `nvidia/<chip>/gsp/<name>-570.144.bin`. When one a chip needs
//! is missing, [`FirmwareSource::ensure`] runs the fetch script embedded in this crate (the
//! repository's `tools/fetch-firmware.sh`: Debian's package, every file checked against the
//! pinned sha256 list) once, progress on stderr, unless fetching is off
//! ([`NO_FETCH_ENV`], `nvbare::Options::fetch_firmware`); then the error says what to run.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nvbare_core::chip::Chipset;
use nvbare_gsp_firmware::boot::ReadError;
use nvbare_gsp_firmware::pinned::{SHA256_LIST, boot_files};
use nvbare_gsp_firmware::{FIRMWARE_VERSION, FirmwareSet, firmware_path};

use super::input::{self, InputError};

/// Set (to anything but `0`) to skip the automatic firmware fetch.
pub const NO_FETCH_ENV: &str = "NVBARE_NO_FETCH";

/// The fetch script, embedded so that an installed binary or library can fetch on its own.
pub const FETCH_SCRIPT: &str = include_str!("../../fetch-firmware.sh");

/// Why the firmware is not there, or not usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FirmwareError {
    /// A file the chip needs is not in the directory, and fetching is off.
    #[error("{}", missing_message(.path, .dir))]
    Missing {
        /// The first missing file.
        path: PathBuf,
        /// The directory looked in.
        dir: PathBuf,
    },
    /// The fetch script ran but left a file missing.
    #[error(
        "the firmware fetch finished but {} is still missing; run `nvbare fw fetch --force`",
        .path.display()
    )]
    StillMissing {
        /// The file.
        path: PathBuf,
    },
    /// The fetch script failed (its messages went to stderr).
    #[error("the firmware fetch failed ({status}); see its messages above")]
    FetchFailed {
        /// How it exited.
        status: String,
    },
    /// The fetch script could not be started.
    #[error("{0}")]
    Io(String),
    /// The files are there but do not load (wrong size, corrupt, not the pinned version).
    #[error("{message} (firmware directory {})", .dir.display())]
    Load {
        /// What the loader said.
        message: String,
        /// The directory.
        dir: PathBuf,
    },
}

fn missing_message(path: &Path, dir: &Path) -> String {
    let env = if dir == default_dir() {
        String::new()
    } else {
        format!("NVBARE_FIRMWARE_DIR={} ", dir.display())
    };
    format!(
        "GSP firmware r570.144 is missing ({} not found); run `{env}nvbare fw fetch` (or \
         `{env}bash tools/fetch-firmware.sh`) to download and verify it, or point \
         NVBARE_FIRMWARE_DIR (nvbare::Options::firmware_dir) at a directory that holds it",
        path.display()
    )
}

/// The default firmware directory: `$NVBARE_FIRMWARE_DIR`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/nvbare/firmware` (the fetch script's rule).
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NVBARE_FIRMWARE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"))
        .join("nvbare")
        .join("firmware")
}

/// Whether [`NO_FETCH_ENV`] turns the automatic fetch off.
pub fn fetch_disabled_by_env() -> bool {
    std::env::var_os(NO_FETCH_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Where to find the firmware, and whether a missing file may be fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareSource {
    /// The directory holding `nvidia/<chip>/gsp/...`.
    pub dir: PathBuf,
    /// Fetch missing files (with the embedded script) instead of failing.
    pub fetch: bool,
}

impl Default for FirmwareSource {
    /// [`default_dir`], fetching unless [`NO_FETCH_ENV`] says not to.
    fn default() -> Self {
        FirmwareSource {
            dir: default_dir(),
            fetch: !fetch_disabled_by_env(),
        }
    }
}

impl FirmwareSource {
    /// The first file `chip` needs that the directory lacks.
    pub fn missing(&self, chip: Chipset) -> Option<PathBuf> {
        boot_files(chip)
            .iter()
            .map(|k| self.dir.join(firmware_path(chip, *k)))
            .find(|p| !p.is_file())
    }

    /// The directory, with `chip`'s files present (fetched now if they were not and fetching
    /// is on).
    pub fn ensure(&self, chip: Chipset) -> Result<PathBuf, FirmwareError> {
        let Some(first) = self.missing(chip) else {
            return Ok(self.dir.clone());
        };
        if !self.fetch {
            return Err(FirmwareError::Missing {
                path: first,
                dir: self.dir.clone(),
            });
        }
        eprintln!(
            "GSP firmware r570.144 for {chip} is not in {} yet: fetching it (as `nvbare fw \
             fetch` does; set {NO_FETCH_ENV}=1 to skip)",
            self.dir.display()
        );
        run_fetch_script(Some(&self.dir), FetchMode::Fetch, true)?;
        match self.missing(chip) {
            None => Ok(self.dir.clone()),
            Some(path) => Err(FirmwareError::StillMissing { path }),
        }
    }

    /// [`FirmwareSource::ensure`], then loads and checks `chip`'s files.
    pub fn load(&self, chip: Chipset) -> Result<(PathBuf, FirmwareSet), FirmwareError> {
        let dir = self.ensure(chip)?;
        let fw = load_firmware(chip, &dir)?;
        Ok((dir, fw))
    }
}

/// What the fetch script is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchMode {
    /// Fetch if needed, then verify.
    Fetch,
    /// Verify the directory only; never use the network.
    Check,
    /// Download and reinstall even if the directory verifies.
    Force,
}

impl fmt::Display for FetchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FetchMode::Fetch => "fetch",
            FetchMode::Check => "check",
            FetchMode::Force => "force",
        })
    }
}

/// What the fetch script is doing, for a progress display ([`set_fetch_progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchEvent<'a> {
    /// The script printed a line; `to_stderr` says where it belongs (stdout otherwise).
    Line {
        /// The line, without its newline.
        text: &'a str,
        /// Whether it belongs on stderr.
        to_stderr: bool,
    },
    /// The script ended.
    Done,
}

/// A receiver of [`FetchEvent`]s.
pub type FetchProgress = fn(FetchEvent<'_>);

static FETCH_PROGRESS: std::sync::OnceLock<FetchProgress> = std::sync::OnceLock::new();

/// Routes the fetch script's output through `f` from now on, so that a program can show it
/// with a spinner (the CLI does on a terminal); without it the script writes to the terminal
/// itself. Returns false if a receiver was already set (the first one stays).
pub fn set_fetch_progress(f: FetchProgress) -> bool {
    FETCH_PROGRESS.set(f).is_ok()
}

/// Runs `cmd`, passing each line of its stdout to `progress`.
fn status_with_progress(
    cmd: &mut Command,
    progress: FetchProgress,
    to_stderr: bool,
) -> std::io::Result<std::process::ExitStatus> {
    use std::io::BufRead;
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn()?;
    if let Some(stdout) = child.stdout.take() {
        let mut r = std::io::BufReader::new(stdout);
        let mut line = Vec::new();
        while r.read_until(b'\n', &mut line)? > 0 {
            let text = String::from_utf8_lossy(&line);
            progress(FetchEvent::Line {
                text: text.trim_end_matches(['\n', '\r']),
                to_stderr,
            });
            line.clear();
        }
    }
    let status = child.wait();
    progress(FetchEvent::Done);
    status
}

/// Runs the embedded fetch script with bash, the pinned list in a temporary file, into `dir`
/// (`None`: the script's own rule, as [`default_dir`]). With `progress_to_stderr` its output
/// goes to stderr (for commands whose stdout is their report).
pub fn run_fetch_script(
    dir: Option<&Path>,
    mode: FetchMode,
    progress_to_stderr: bool,
) -> Result<(), FirmwareError> {
    let sums = std::env::temp_dir().join(format!(
        "nvbare-r{FIRMWARE_VERSION}-{}.sha256",
        std::process::id()
    ));
    std::fs::write(&sums, SHA256_LIST)
        .map_err(|e| FirmwareError::Io(format!("writing {}: {e}", sums.display())))?;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(FETCH_SCRIPT)
        .arg("fetch-firmware.sh")
        .env("NVBARE_FIRMWARE_SUMS", &sums);
    if let Some(dir) = dir {
        cmd.env("NVBARE_FIRMWARE_DIR", dir);
    }
    match mode {
        FetchMode::Fetch => {}
        FetchMode::Check => {
            cmd.arg("--check");
        }
        FetchMode::Force => {
            cmd.arg("--force");
        }
    }
    let status = match FETCH_PROGRESS.get() {
        Some(p) => status_with_progress(&mut cmd, *p, progress_to_stderr),
        None => {
            if progress_to_stderr {
                cmd.stdout(std::io::stderr());
            }
            cmd.status()
        }
    };
    let _ = std::fs::remove_file(&sums);
    let status = status
        .map_err(|e| FirmwareError::Io(format!("cannot run bash for the fetch script: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(FirmwareError::FetchFailed {
            status: status.to_string(),
        })
    }
}

/// Loads and checks a chip's firmware files from `dir`.
pub fn load_firmware(chip: Chipset, dir: &Path) -> Result<FirmwareSet, FirmwareError> {
    FirmwareSet::load(chip, |p| read_firmware_file(&dir.join(p))).map_err(|e| FirmwareError::Load {
        message: e.to_string(),
        dir: dir.to_path_buf(),
    })
}

/// One firmware file, at most [`input::MAX_FIRMWARE_BYTES`] of it.
fn read_firmware_file(path: &Path) -> Result<Vec<u8>, ReadError> {
    input::read_at_most(path, input::MAX_FIRMWARE_BYTES, input::FIRMWARE).map_err(|e| match e {
        InputError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ReadError::NotFound
        }
        InputError::Io { source, .. } => ReadError::Io(source.to_string()),
        e @ InputError::Size { .. } => ReadError::Io(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_gsp_firmware::pinned::pinned_files;

    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    fn record(e: FetchEvent<'_>) {
        let line = match e {
            FetchEvent::Line { text, to_stderr } => format!("{text} {to_stderr}"),
            FetchEvent::Done => "done".into(),
        };
        SEEN.lock().unwrap().push(line);
    }

    #[test]
    fn a_progress_receiver_gets_every_line_then_done() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo 'step 1'; printf 'step 2'; exit 3");
        let status = status_with_progress(&mut cmd, record, true).unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(
            *SEEN.lock().unwrap(),
            ["step 1 true", "step 2 true", "done"]
        );
    }

    #[test]
    fn the_embedded_script_is_the_repository_script() {
        let on_disk =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fetch-firmware.sh"))
                .unwrap();
        assert_eq!(FETCH_SCRIPT, on_disk);
        assert!(
            FETCH_SCRIPT
                .contains("438dea065c930a4626c9cb711635149507471307f9d7ede9b981c61f963e0d68")
        );
    }

    #[test]
    fn missing_files_without_fetching_say_what_to_run_and_where_to_point() {
        let dir = std::env::temp_dir().join(format!("nvbare-fw-missing-{}", std::process::id()));
        let src = FirmwareSource {
            dir: dir.clone(),
            fetch: false,
        };
        let e = src.ensure(Chipset::GH100).unwrap_err();
        assert!(matches!(e, FirmwareError::Missing { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("nvidia/gh100/gsp/"), "{m}");
        assert!(
            m.contains(&format!(
                "NVBARE_FIRMWARE_DIR={} nvbare fw fetch",
                dir.display()
            )),
            "{m}"
        );
        assert!(m.contains("Options::firmware_dir"), "{m}");
        assert!(!dir.exists(), "nothing was created");
    }

    #[test]
    fn an_oversized_firmware_file_is_refused_unread() {
        let dir = std::env::temp_dir().join(format!("nvbare-fw-oversized-{}", std::process::id()));
        // Sparse files one byte over the limit: refused by their length, nothing read.
        for p in pinned_files().filter(|p| p.path.starts_with("nvidia/gh100/")) {
            let path = dir.join(p.path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(input::MAX_FIRMWARE_BYTES + 1).unwrap();
        }
        let e = load_firmware(Chipset::GH100, &dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("holds 268435457 bytes"), "{e}");
        assert!(e.contains("at most 268435456 bytes (256 MiB)"), "{e}");
        assert!(e.contains("firmware directory"), "{e}");
    }
}
