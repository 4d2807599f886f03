//! Test helpers (feature `testutil`, std): find the firmware cache that
//! `tools/fetch-firmware.sh` fills, and fail loudly when it is missing.
//!
//! Tests that need real firmware must fail, not skip, without it: a skipped test proves
//! nothing. Every helper here panics with a message that names the fetch script.
//!
//! ```no_run
//! use nvbare_core::chip::Chipset;
//! use nvbare_gsp_firmware::{FirmwareKind, GspFirmware, testutil};
//!
//! let bytes = testutil::read_firmware(Chipset::GH100, FirmwareKind::Gsp);
//! let fw = GspFirmware::parse(&bytes).unwrap();
//! ```

pub mod vbios;

use std::path::PathBuf;
use std::string::String;
use std::vec::Vec;

use nvbare_core::chip::Chipset;

use crate::pinned::{FirmwareKind, firmware_path, pinned_files};

/// What to run when firmware is missing.
pub const FETCH_HINT: &str = "run tools/fetch-firmware.sh from the repository root (or `nvbare fw fetch`) \
     to download and verify GSP firmware r570.144 into the cache, then rerun the tests";

/// The cache directory: `$NVBARE_FIRMWARE_DIR`, else `$XDG_CACHE_HOME/nvbare/firmware`, else
/// `$HOME/.cache/nvbare/firmware` (the same rule as the fetch script). Not checked.
pub fn firmware_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NVBARE_FIRMWARE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("nvbare").join("firmware")
}

/// The cache directory, after checking that every pinned file is present; panics with
/// [`FETCH_HINT`] otherwise. (Contents are not hashed here; tests that need that call
/// [`crate::pinned::verify`].)
pub fn require_firmware_dir() -> PathBuf {
    let dir = firmware_dir();
    let missing: Vec<String> = pinned_files()
        .filter(|p| !dir.join(p.path).is_file())
        .map(|p| String::from(p.path))
        .collect();
    if !missing.is_empty() {
        panic!(
            "GSP firmware missing from {}: {} of {} files, e.g. {}; {FETCH_HINT}",
            dir.display(),
            missing.len(),
            pinned_files().count(),
            missing.first().map(String::as_str).unwrap_or(""),
        );
    }
    dir
}

/// The bytes of `path` (relative to the cache, e.g. `nvidia/gh100/gsp/fmc-570.144.bin`);
/// panics with [`FETCH_HINT`] when it cannot be read.
pub fn read_path(path: &str) -> Vec<u8> {
    let full = firmware_dir().join(path);
    match std::fs::read(&full) {
        Ok(b) => b,
        Err(e) => panic!(
            "cannot read firmware file {}: {e}; {FETCH_HINT}",
            full.display()
        ),
    }
}

/// The bytes of `chip`'s `kind` file; panics with [`FETCH_HINT`] when it cannot be read.
pub fn read_firmware(chip: Chipset, kind: FirmwareKind) -> Vec<u8> {
    read_path(&firmware_path(chip, kind))
}
