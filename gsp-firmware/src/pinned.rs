//! The r570.144 firmware files: where each chip's live, and the sha256 of every one.
//!
//! The list is the repository's `firmware/r570.144.sha256` (the fetch script checks the cache
//! against the same file), compiled in. [`verify`] tells the boot code whether the bytes it
//! read are exactly the file it asked for, and names the file they are when they are another
//! chip's.

use alloc::format;
use alloc::string::String;

use nvbare_core::chip::{Architecture, BootMethod, Chipset};
use sha2::{Digest, Sha256};

use crate::{Error, FIRMWARE_VERSION};

/// `firmware/r570.144.sha256`: `<sha256>  <path under /lib/firmware>[ -> <symlink target>]`.
pub const SHA256_LIST: &str = include_str!("../firmware/r570.144.sha256");

/// One pinned file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedFile {
    /// Path under the firmware directory, e.g. `nvidia/gh100/gsp/fmc-570.144.bin`.
    pub path: &'static str,
    /// Its sha256.
    pub sha256: [u8; 32],
    /// The symlink target in the package, if the file is a link there.
    pub link: Option<&'static str>,
}

/// Every pinned file (lines of [`SHA256_LIST`] that do not parse are skipped; a test checks
/// that there are none).
pub fn pinned_files() -> impl Iterator<Item = PinnedFile> {
    SHA256_LIST.lines().filter_map(parse_line)
}

fn parse_line(line: &'static str) -> Option<PinnedFile> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut words = line.split_whitespace();
    let hex = words.next()?;
    let path = words.next()?;
    let link = match (words.next(), words.next()) {
        (Some("->"), Some(t)) => Some(t),
        _ => None,
    };
    let mut sha256 = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, b) in sha256.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(PinnedFile { path, sha256, link })
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8]) -> String {
    let mut s = String::with_capacity(digest.len() * 2);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The pinned files whose content is `bytes` (several when the package links one file under
/// several chips).
pub fn identify(bytes: &[u8]) -> impl Iterator<Item = PinnedFile> {
    let digest = sha256(bytes);
    pinned_files().filter(move |p| p.sha256 == digest)
}

/// Checks that `bytes` are the pinned file `path` (e.g. `nvidia/gh100/gsp/fmc-570.144.bin`).
///
/// [`Error::WrongFile`] when they are another pinned file (another chip's or another kind),
/// [`Error::NotPinned`] when they match nothing (corrupt or another version), and
/// [`Error::Missing`] when `path` is not in the list.
pub fn verify(path: &str, bytes: &[u8]) -> Result<(), Error> {
    let want = pinned_files()
        .find(|p| p.path == path)
        .ok_or(Error::Missing {
            what: "pinned sha256 for this path (not an r570.144 file of firmware/r570.144.sha256)",
        })?;
    let digest = sha256(bytes);
    if digest == want.sha256 {
        return Ok(());
    }
    let mut found = String::new();
    for p in pinned_files().filter(|p| p.sha256 == digest) {
        if !found.is_empty() {
            found.push_str(", ");
        }
        found.push_str(p.path);
    }
    if found.is_empty() {
        Err(Error::NotPinned {
            expected: String::from(path),
        })
    } else {
        Err(Error::WrongFile {
            expected: String::from(path),
            found,
        })
    }
}

/// The kinds of firmware file under `nvidia/<chip>/gsp/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FirmwareKind {
    /// `gsp-*.bin`: the GSP-RM image ([`crate::GspFirmware`]).
    Gsp,
    /// `bootloader-*.bin`: the GSP RISC-V bootloader ([`crate::RiscvBootloader`]).
    Bootloader,
    /// `booter_load-*.bin`: SEC2 HS ucode that loads GSP-RM into WPR2 ([`crate::BooterImage`]).
    BooterLoad,
    /// `booter_unload-*.bin`: SEC2 HS ucode that tears WPR2 down.
    BooterUnload,
    /// `gen_bootloader-*.bin`: falcon loader for FWSEC on Turing/GA100 ([`crate::GenericBootloader`]).
    GenBootloader,
    /// `fmc-*.bin`: the GSP-FMC for the FSP chain of trust ([`crate::FmcImage`]).
    Fmc,
    /// `scrubber-*.bin`: SEC2 HS memory scrubber (AD102; not needed to boot).
    Scrubber,
}

impl FirmwareKind {
    /// The file-name stem, e.g. `booter_load`.
    pub fn stem(self) -> &'static str {
        match self {
            FirmwareKind::Gsp => "gsp",
            FirmwareKind::Bootloader => "bootloader",
            FirmwareKind::BooterLoad => "booter_load",
            FirmwareKind::BooterUnload => "booter_unload",
            FirmwareKind::GenBootloader => "gen_bootloader",
            FirmwareKind::Fmc => "fmc",
            FirmwareKind::Scrubber => "scrubber",
        }
    }

    /// The kind of a file name like `fmc-570.144.bin`.
    pub fn from_file_name(name: &str) -> Option<Self> {
        let stem = name.strip_suffix(".bin")?.rsplit_once('-')?.0;
        [
            FirmwareKind::Gsp,
            FirmwareKind::Bootloader,
            FirmwareKind::BooterLoad,
            FirmwareKind::BooterUnload,
            FirmwareKind::GenBootloader,
            FirmwareKind::Fmc,
            FirmwareKind::Scrubber,
        ]
        .into_iter()
        .find(|k| k.stem() == stem)
    }
}

/// `nvidia/<firmware_dir>/gsp/<kind>-570.144.bin` for `chip`, relative to the firmware
/// directory (`$NVBARE_FIRMWARE_DIR`, or `/lib/firmware`).
pub fn firmware_path(chip: Chipset, kind: FirmwareKind) -> String {
    format!(
        "nvidia/{}/gsp/{}-{}.bin",
        chip.info().firmware_dir,
        kind.stem(),
        FIRMWARE_VERSION
    )
}

/// The files `chip` needs to boot GSP-RM (nova-core `boot_firmware_files()`): GSP-RM and its
/// bootloader everywhere; booter load/unload on the SEC2 path, plus the generic bootloader
/// for FWSEC on Turing and GA100; the FMC on the FSP path.
pub fn boot_files(chip: Chipset) -> &'static [FirmwareKind] {
    use FirmwareKind::*;
    let info = chip.info();
    match info.boot {
        BootMethod::FspChainOfTrust => &[Gsp, Bootloader, Fmc],
        BootMethod::Booter
            if info.architecture == Architecture::Turing || chip == Chipset::GA100 =>
        {
            &[Gsp, Bootloader, BooterLoad, BooterUnload, GenBootloader]
        }
        BootMethod::Booter => &[Gsp, Bootloader, BooterLoad, BooterUnload],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn the_list_parses_completely() {
        let lines = SHA256_LIST
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        let files: Vec<_> = pinned_files().collect();
        assert_eq!(files.len(), lines);
        assert_eq!(files.len(), 33);
        assert!(files.iter().all(|f| f.path.ends_with("-570.144.bin")));
        let gh100_gsp = files
            .iter()
            .find(|f| f.path == "nvidia/gh100/gsp/gsp-570.144.bin")
            .unwrap();
        assert_eq!(gh100_gsp.link, Some("../../ga102/gsp/gsp-570.144.bin"));
        assert_eq!(&hex(&gh100_gsp.sha256)[..12], "a8c3ebeed280");
    }

    #[test]
    fn sha256_known_answer() {
        // FIPS 180-2 example "abc".
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn every_boot_file_of_every_chip_is_pinned() {
        for info in nvbare_core::chip::CHIPS {
            for &kind in boot_files(info.chipset) {
                let path = firmware_path(info.chipset, kind);
                assert!(
                    pinned_files().any(|p| p.path == path),
                    "{} needs {path}, which is not pinned",
                    info.name
                );
            }
        }
    }

    #[test]
    fn verify_reports_unknown_paths_and_bytes() {
        assert!(matches!(
            verify("nvidia/xx100/gsp/gsp-570.144.bin", b""),
            Err(Error::Missing { .. })
        ));
        assert!(matches!(
            verify("nvidia/gh100/gsp/fmc-570.144.bin", b"not firmware"),
            Err(Error::NotPinned { .. })
        ));
    }

    #[test]
    fn kinds_round_trip_file_names() {
        for k in [
            FirmwareKind::Gsp,
            FirmwareKind::Bootloader,
            FirmwareKind::BooterLoad,
            FirmwareKind::BooterUnload,
            FirmwareKind::GenBootloader,
            FirmwareKind::Fmc,
            FirmwareKind::Scrubber,
        ] {
            let name = format!("{}-570.144.bin", k.stem());
            assert_eq!(FirmwareKind::from_file_name(&name), Some(k));
        }
        assert_eq!(FirmwareKind::from_file_name("gsp_ga10x.bin"), None);
    }
}
