//! What the boot code needs from the firmware files, as a trait.
//!
//! The parsers live in `nvbare-gsp-firmware` (which depends on this crate and needs `alloc`),
//! so the boot code asks for prepared pieces through [`BootFirmware`]; that crate's
//! `FirmwareSet` implements it. Two things depend on the GPU and are therefore asked for late:
//! the signature to patch into a heavy-secure ucode (chosen by a fuse version read from the
//! GPU) and FWSEC, which comes out of the VBIOS ROM read through BAR0 and is patched with the
//! FRTS location the boot code computed.

use core::fmt;

use crate::chip::Chipset;
use crate::falcon::{BromParams, GenericBl, HsDirectLoad, HsLoad, HsLoaderLoad};

/// Why the firmware could not provide something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirmwareError {
    /// A file the chip needs is missing from the set.
    Missing {
        /// The file ("booter_load", "fmc", ...).
        file: &'static str,
    },
    /// A file or the VBIOS is malformed.
    Invalid {
        /// The file, or "VBIOS".
        file: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// No signature matches the GPU's fuse version.
    NoSignature {
        /// The file, or "FWSEC".
        file: &'static str,
        /// The fuse version read from the GPU.
        fuse_version: u32,
    },
}

impl fmt::Display for FirmwareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FirmwareError::Missing { file } => write!(
                f,
                "firmware file {file} is missing: run tools/fetch-firmware.sh (or `nvbare fw \
                 fetch`)"
            ),
            FirmwareError::Invalid { file, what } => write!(
                f,
                "{file} is not usable: {what}; re-fetch the firmware (tools/fetch-firmware.sh \
                 --force) or, for the VBIOS, check that the GPU is the one you think"
            ),
            FirmwareError::NoSignature { file, fuse_version } => write!(
                f,
                "{file} has no signature for the GPU's fuse version {fuse_version}: this \
                 GPU needs newer firmware than r570.144"
            ),
        }
    }
}

impl core::error::Error for FirmwareError {}

/// A heavy-secure falcon ucode ready to DMA: the image (signature patched in) and where its
/// parts go.
#[derive(Debug, Clone)]
pub struct HsUcode<I> {
    /// The patched image.
    pub image: I,
    /// Load layout and boot ROM parameters (DMA through the boot ROM, GA102 on).
    pub load: HsLoad,
    /// Where the parts go in a PIO load (TU10x and GA100, no boot from HS); the default for a
    /// ucode that has no such layout (FWSEC from the VBIOS).
    pub direct: HsDirectLoad,
}

/// FWSEC for the generic falcon bootloader (TU10x, GA100): the two buffers the bootloader
/// DMAs from (command patched in) and where the parts lie in them.
#[derive(Debug, Clone)]
pub struct LoaderUcode<I> {
    /// The code buffer.
    pub code: I,
    /// The data buffer.
    pub data: I,
    /// The offsets the bootloader's DMEM descriptor carries.
    pub load: HsLoaderLoad,
}

/// The generic falcon bootloader (`gen_bootloader-*.bin`).
#[derive(Debug, Clone, Copy)]
pub struct GenericBootloaderDesc<'a> {
    /// Its code (`blImgHeader.blCodeSize` bytes).
    pub code: &'a [u8],
    /// Start tag and code size.
    pub desc: GenericBl,
}

/// Which booter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BooterKind {
    /// `booter_load`: puts GSP-RM into WPR2 and starts it.
    Load,
    /// `booter_unload`: tears WPR2 down.
    Unload,
}

impl BooterKind {
    /// The file stem.
    pub fn file(self) -> &'static str {
        match self {
            BooterKind::Load => "booter_load",
            BooterKind::Unload => "booter_unload",
        }
    }
}

/// What FWSEC should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FwsecCommand {
    /// FWSEC-FRTS: set up the FRTS region (and WPR2) at `offset` (bytes from the start of FB).
    Frts {
        /// FRTS offset, 4 KiB aligned.
        offset: u64,
        /// FRTS size (1 MiB).
        size: u64,
    },
    /// FWSEC-SB: put the pre-OS applications back (at unload).
    Sb,
}

/// Which fuse holds the version a ucode's signature must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuseSelector {
    /// The ucode's engine id mask (selects SEC2/NVDEC/GSP fuses).
    pub engine_id_mask: u32,
    /// The ucode id (1-based index into the fuse array).
    pub ucode_id: u32,
}

/// The GSP RISC-V bootloader (`RM_RISCV_UCODE_DESC`).
#[derive(Debug, Clone, Copy)]
pub struct RiscvBootloaderDesc<'a> {
    /// The image (loaded at `sysmemAddrOfBootloader`).
    pub image: &'a [u8],
    /// `monitorCodeOffset`.
    pub code_offset: u32,
    /// `monitorDataOffset`.
    pub data_offset: u32,
    /// `manifestOffset`.
    pub manifest_offset: u32,
    /// `appVersion`, written to `NV_PFALCON_FALCON_OS` after boot.
    pub app_version: u32,
}

/// The GSP-FMC and what the FSP needs to authenticate it.
#[derive(Debug, Clone, Copy)]
pub struct FmcDesc<'a> {
    /// The image.
    pub image: &'a [u8],
    /// SHA-384 of the image.
    pub hash: [u8; 48],
    /// The public key, zero-padded to `NVDM_PAYLOAD_COT.publicKey`.
    pub public_key: [u8; 384],
    /// The signature, zero-padded to `NVDM_PAYLOAD_COT.signature`.
    pub signature: [u8; 384],
}

/// The VBIOS's FWSEC, once read.
pub trait VbiosFirmware {
    /// Owned patched images.
    type Image: AsRef<[u8]>;

    /// Which fuse FWSEC's signature is chosen by.
    fn fwsec_fuse(&self) -> FuseSelector;

    /// FWSEC patched for `cmd` with the signature for `fuse_version`.
    fn fwsec(
        &self,
        cmd: FwsecCommand,
        fuse_version: u32,
    ) -> Result<HsUcode<Self::Image>, FirmwareError>;

    /// FWSEC patched for `cmd`, for the generic bootloader (a VBIOS whose FWSEC has a
    /// `FALCON_UCODE_DESC_V2`: TU10x, GA100).
    fn fwsec_with_loader(
        &self,
        cmd: FwsecCommand,
    ) -> Result<LoaderUcode<Self::Image>, FirmwareError>;
}

/// The firmware files of one chip.
pub trait BootFirmware {
    /// Owned patched images (booters).
    type Image: AsRef<[u8]>;
    /// The parsed VBIOS.
    type Vbios: VbiosFirmware;

    /// The chip the files are for.
    fn chipset(&self) -> Chipset;

    /// The GSP-RM image (`.fwimage`).
    fn gsp_image(&self) -> &[u8];

    /// The GSP-RM signature for this chip (`.fwsignature_<family>`).
    fn gsp_signature(&self) -> &[u8];

    /// The RISC-V bootloader.
    fn bootloader(&self) -> RiscvBootloaderDesc<'_>;

    /// Which fuse a booter's signature is chosen by.
    fn booter_fuse(&self, kind: BooterKind) -> Result<FuseSelector, FirmwareError>;

    /// A booter with the signature for `fuse_version` patched in.
    fn booter(
        &self,
        kind: BooterKind,
        fuse_version: u32,
    ) -> Result<HsUcode<Self::Image>, FirmwareError>;

    /// The GSP-FMC (Hopper, Blackwell).
    fn fmc(&self) -> Result<FmcDesc<'_>, FirmwareError>;

    /// The generic falcon bootloader (TU10x, GA100: it loads FWSEC).
    fn generic_bootloader(&self) -> Result<GenericBootloaderDesc<'_>, FirmwareError>;

    /// Parses a VBIOS ROM image: `read32(offset)` returns the ROM dword at byte `offset` of the
    /// PROM window (up to 1 MiB), or `None` past its end.
    fn parse_vbios(
        &self,
        read32: &mut dyn FnMut(usize) -> Option<u32>,
    ) -> Result<Self::Vbios, FirmwareError>;
}

/// The booter load layout OpenRM uses for an `nvfw_hs_load_header_v2` image
/// (`kernel_gsp_booter.c`, BOOT_FROM_HS): IMEM <- app 0 code at VA = its offset, DMEM <- OS data,
/// signature at `patch_loc - os_data_offset`.
pub fn booter_load_layout(
    app_code_offset: u32,
    app_code_size: u32,
    os_data_offset: u32,
    os_data_size: u32,
    patch_loc: u32,
    engine_id_mask: u32,
    ucode_id: u32,
) -> HsLoad {
    HsLoad {
        code_offset: app_code_offset,
        imem_pa: 0,
        imem_va: app_code_offset,
        imem_size: app_code_size,
        data_offset: os_data_offset,
        dmem_pa: 0,
        dmem_size: os_data_size,
        brom: BromParams {
            pkc_data_offset: patch_loc.wrapping_sub(os_data_offset),
            engine_id_mask,
            ucode_id,
        },
    }
}
