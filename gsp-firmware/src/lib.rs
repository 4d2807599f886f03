//! Parsers for the files nvbare loads: GSP-RM firmware, booter/bootloader/FMC images, VBIOS and
//! CUDA cubins. `no_std` + `alloc`; every parser takes bytes and returns typed errors.
//!
//! # What the boot code uses
//!
//! | file (under `nvidia/<chip>/gsp/`) | type | what it gives |
//! |---|---|---|
//! | `gsp-570.144.bin` | [`GspFirmware`] | `.fwimage` bytes, version, signature per chip, [`Radix3`] tables |
//! | `booter_load/unload-570.144.bin`, `scrubber-570.144.bin` | [`BooterImage`] | HS ucode, load layout, signature for the fuse version, patched image |
//! | `bootloader-570.144.bin` | [`RiscvBootloader`] | `RM_RISCV_UCODE_DESC`: code/data/manifest offsets, app version |
//! | `gen_bootloader-570.144.bin` | [`GenericBootloader`] | `nvfw_bl_desc` falcon loader (Turing/GA100 FWSEC) |
//! | `fmc-570.144.bin` (GH100, GB10x, GB20x) | [`FmcImage`] | image, SHA-384 hash, public key, signature for the FSP chain of trust |
//! | VBIOS ROM (read from the GPU) | [`Vbios`] → [`Fwsec`] | FWSEC-FRTS/SB ucode with the DMEM command and signature patched |
//! | VBIOS ROM of TU10x/GA100 | [`Vbios`] → [`FwsecV2`] | FWSEC-FRTS/SB code and data buffers for the generic bootloader |
//!
//! [`FirmwareFile::detect`] tells these apart; [`pinned`] knows the sha256 of every r570.144 file
//! and [`firmware_path`] where each chip's files live.
//!
//! # Errors
//!
//! Every parser returns [`Error`]: what is wrong and where (offsets, sizes, expected values).
//! [`Error::in_file`] attaches the file name for reporting ([`FileError`]). No parser panics
//! or allocates an amount derived from an unchecked length field; every walk is bounded by the
//! input size or a fixed limit.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "testutil")]
extern crate std;

mod bytes;
mod crc32;
mod error;

pub mod binhdr;
pub mod boot;
pub mod booter;
pub mod bootloader;
pub mod cubin;
pub mod detect;
pub mod elf;
pub mod fmc;
pub mod fwsec;
pub mod fwsec_v2;
pub mod gsp;
pub mod pinned;
#[cfg(feature = "device")]
pub mod program;
pub mod radix3;
pub mod vbios;

#[cfg(feature = "testutil")]
pub mod testutil;

pub use boot::FirmwareSet;
pub use booter::BooterImage;
pub use bootloader::{GenericBootloader, RiscvBootloader};
pub use detect::FirmwareFile;
pub use error::{Error, FileError};
pub use fmc::FmcImage;
pub use fwsec::{Fwsec, FwsecUcode};
pub use fwsec_v2::{FwsecLoaderUcode, FwsecV2};
pub use gsp::GspFirmware;
pub use pinned::{FirmwareKind, firmware_path};
pub use radix3::Radix3;
pub use vbios::Vbios;

/// The GSP-RM firmware version nvbare's RM ABI is written for (`.fwversion` of the GSP image,
/// and the `-570.144` suffix of every file name).
pub const FIRMWARE_VERSION: &str = "570.144";
