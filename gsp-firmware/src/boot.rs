//! The files one chip boots with, checked and ready for `nvbare_core::gsp::boot`.
//!
//! [`FirmwareSet::load`] reads each file the chip needs ([`crate::pinned::boot_files`]) through
//! a caller-supplied reader (the std side reads the firmware cache), verifies it against the
//! pinned sha256 list (so a file of another version, chip or kind is named as such), parses it,
//! and checks that the GSP-RM image carries this chip's signature. Everything that can fail
//! on the files fails here, with [`FileError`]s naming the file; what remains for boot time
//! is what depends on the GPU (fuse versions, the VBIOS).
//!
//! [`FirmwareSet`] implements [`BootFirmware`]: the core's boot code asks it for the radix3
//! image, the bootloader, booters patched for a fuse version and the FMC.

use alloc::string::String;
use alloc::vec::Vec;

use nvbare_core::chip::Chipset;
use nvbare_core::falcon::{BromParams, GenericBl, HsLoad, HsLoaderLoad};
use nvbare_core::gsp::boot::firmware::{
    BootFirmware, BooterKind, FirmwareError, FmcDesc, FuseSelector, FwsecCommand,
    GenericBootloaderDesc, HsUcode, LoaderUcode, RiscvBootloaderDesc, VbiosFirmware,
    booter_load_layout,
};

use crate::error::{Error, FileError};
use crate::fwsec::FwsecUcode;
use crate::pinned::{FirmwareKind, boot_files, firmware_path, verify};
use crate::vbios::MAX_ROM_SIZE;
use crate::{BooterImage, FmcImage, GenericBootloader, GspFirmware, RiscvBootloader, Vbios};

/// Why a firmware file could not be read (returned by the reader given to
/// [`FirmwareSet::load`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The file does not exist.
    NotFound,
    /// It could not be read; the message says why.
    Io(String),
}

/// Why [`FirmwareSet::load`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// A file the chip needs is not there.
    Missing {
        /// Its path relative to the firmware directory.
        path: String,
    },
    /// A file could not be read.
    Io {
        /// Its path.
        path: String,
        /// Why.
        message: String,
    },
    /// A file is not the pinned r570.144 file, or does not parse.
    File(FileError),
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::Missing { path } => write!(
                f,
                "firmware file {path} is missing: run tools/fetch-firmware.sh (or `nvbare fw \
                 fetch`), or point NVBARE_FIRMWARE_DIR at a directory that has it"
            ),
            LoadError::Io { path, message } => write!(f, "cannot read {path}: {message}"),
            LoadError::File(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for LoadError {}

impl From<FileError> for LoadError {
    fn from(e: FileError) -> Self {
        LoadError::File(e)
    }
}

/// The checked firmware files of one chip.
#[derive(Clone)]
pub struct FirmwareSet {
    chip: Chipset,
    gsp: Vec<u8>,
    bootloader: Vec<u8>,
    booter_load: Option<Vec<u8>>,
    booter_unload: Option<Vec<u8>>,
    fmc: Option<Vec<u8>>,
    gen_bootloader: Option<Vec<u8>>,
}

impl core::fmt::Debug for FirmwareSet {
    // Sizes only: the GSP-RM image alone is tens of megabytes.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let len = |b: &Option<Vec<u8>>| b.as_ref().map(Vec::len);
        f.debug_struct("FirmwareSet")
            .field("chip", &self.chip)
            .field("gsp_len", &self.gsp.len())
            .field("bootloader_len", &self.bootloader.len())
            .field("booter_load_len", &len(&self.booter_load))
            .field("booter_unload_len", &len(&self.booter_unload))
            .field("fmc_len", &len(&self.fmc))
            .field("gen_bootloader_len", &len(&self.gen_bootloader))
            .finish()
    }
}

fn file_err(path: &str, e: Error) -> FileError {
    e.in_file(path)
}

impl FirmwareSet {
    /// Reads, verifies and parses the files `chip` needs. `read(path)` gets a path relative to
    /// the firmware directory, e.g. `nvidia/ad102/gsp/booter_load-570.144.bin`.
    ///
    /// # Errors
    ///
    /// [`LoadError`] naming the file: missing, unreadable, not the pinned r570.144 file
    /// (`WrongFile`/`NotPinned`), unparsable (e.g. another `.fwversion`), or a GSP-RM image
    /// without this chip's signature.
    pub fn load(
        chip: Chipset,
        mut read: impl FnMut(&str) -> Result<Vec<u8>, ReadError>,
    ) -> Result<FirmwareSet, LoadError> {
        Self::load_with(chip, &mut read, true)
    }

    /// As [`FirmwareSet::load`], without the pinned-hash check (for firmware built elsewhere;
    /// the parsers and the version check still apply).
    ///
    /// # Errors
    ///
    /// See [`FirmwareSet::load`].
    pub fn load_unpinned(
        chip: Chipset,
        mut read: impl FnMut(&str) -> Result<Vec<u8>, ReadError>,
    ) -> Result<FirmwareSet, LoadError> {
        Self::load_with(chip, &mut read, false)
    }

    fn load_with(
        chip: Chipset,
        read: &mut dyn FnMut(&str) -> Result<Vec<u8>, ReadError>,
        pinned: bool,
    ) -> Result<FirmwareSet, LoadError> {
        let mut get = |kind: FirmwareKind| -> Result<Option<Vec<u8>>, LoadError> {
            if !boot_files(chip).contains(&kind) {
                return Ok(None);
            }
            let path = firmware_path(chip, kind);
            let bytes = match read(&path) {
                Ok(b) => b,
                Err(ReadError::NotFound) => return Err(LoadError::Missing { path }),
                Err(ReadError::Io(message)) => return Err(LoadError::Io { path, message }),
            };
            if pinned {
                verify(&path, &bytes).map_err(|e| file_err(&path, e))?;
            }
            Ok(Some(bytes))
        };
        let gsp = get(FirmwareKind::Gsp)?.unwrap_or_default();
        let bootloader = get(FirmwareKind::Bootloader)?.unwrap_or_default();
        let set = FirmwareSet {
            chip,
            gsp,
            bootloader,
            booter_load: get(FirmwareKind::BooterLoad)?,
            booter_unload: get(FirmwareKind::BooterUnload)?,
            fmc: get(FirmwareKind::Fmc)?,
            gen_bootloader: get(FirmwareKind::GenBootloader)?,
        };
        set.check()?;
        Ok(set)
    }

    /// Parses every file once, so later calls cannot fail on them.
    fn check(&self) -> Result<(), FileError> {
        let gp = firmware_path(self.chip, FirmwareKind::Gsp);
        let g = GspFirmware::parse(&self.gsp).map_err(|e| file_err(&gp, e))?;
        g.signature(self.chip).map_err(|e| file_err(&gp, e))?;
        let bp = firmware_path(self.chip, FirmwareKind::Bootloader);
        RiscvBootloader::parse(&self.bootloader).map_err(|e| file_err(&bp, e))?;
        for (kind, f) in [
            (FirmwareKind::BooterLoad, &self.booter_load),
            (FirmwareKind::BooterUnload, &self.booter_unload),
        ] {
            if let Some(b) = f {
                let p = firmware_path(self.chip, kind);
                let img = BooterImage::parse(b).map_err(|e| file_err(&p, e))?;
                if img.load.num_apps.get() < 1 {
                    return Err(file_err(
                        &p,
                        Error::Missing {
                            what: "booter application",
                        },
                    ));
                }
            }
        }
        if let Some(f) = &self.fmc {
            let p = firmware_path(self.chip, FirmwareKind::Fmc);
            FmcImage::parse(f).map_err(|e| file_err(&p, e))?;
        }
        if let Some(f) = &self.gen_bootloader {
            let p = firmware_path(self.chip, FirmwareKind::GenBootloader);
            let bl = GenericBootloader::parse(f).map_err(|e| file_err(&p, e))?;
            if bl.desc.code_size.get() == 0 {
                return Err(file_err(
                    &p,
                    Error::Missing {
                        what: "generic bootloader code (code_size 0)",
                    },
                ));
            }
        }
        Ok(())
    }

    /// The chip.
    pub fn chip(&self) -> Chipset {
        self.chip
    }

    /// The raw bytes of a loaded file.
    pub fn file(&self, kind: FirmwareKind) -> Option<&[u8]> {
        match kind {
            FirmwareKind::Gsp => Some(&self.gsp),
            FirmwareKind::Bootloader => Some(&self.bootloader),
            FirmwareKind::BooterLoad => self.booter_load.as_deref(),
            FirmwareKind::BooterUnload => self.booter_unload.as_deref(),
            FirmwareKind::Fmc => self.fmc.as_deref(),
            FirmwareKind::GenBootloader => self.gen_bootloader.as_deref(),
            _ => None,
        }
    }

    fn booter_bytes(&self, kind: BooterKind) -> Result<&[u8], FirmwareError> {
        let f = match kind {
            BooterKind::Load => &self.booter_load,
            BooterKind::Unload => &self.booter_unload,
        };
        f.as_deref()
            .ok_or(FirmwareError::Missing { file: kind.file() })
    }
}

fn invalid(file: &'static str) -> impl Fn(Error) -> FirmwareError {
    move |_| FirmwareError::Invalid {
        file,
        what: "no longer parses (it was checked when loaded)",
    }
}

impl BootFirmware for FirmwareSet {
    type Image = Vec<u8>;
    type Vbios = ParsedVbios;

    fn chipset(&self) -> Chipset {
        self.chip
    }

    fn gsp_image(&self) -> &[u8] {
        GspFirmware::parse(&self.gsp)
            .map(|g| g.image())
            .unwrap_or(&[])
    }

    fn gsp_signature(&self) -> &[u8] {
        GspFirmware::parse(&self.gsp)
            .and_then(|g| g.signature(self.chip))
            .unwrap_or(&[])
    }

    fn bootloader(&self) -> RiscvBootloaderDesc<'_> {
        match RiscvBootloader::parse(&self.bootloader) {
            Ok(b) => RiscvBootloaderDesc {
                image: b.image(),
                code_offset: b.code_offset(),
                data_offset: b.data_offset(),
                manifest_offset: b.manifest_offset(),
                app_version: b.app_version(),
            },
            Err(_) => RiscvBootloaderDesc {
                image: &[],
                code_offset: 0,
                data_offset: 0,
                manifest_offset: 0,
                app_version: 0,
            },
        }
    }

    fn booter_fuse(&self, kind: BooterKind) -> Result<FuseSelector, FirmwareError> {
        let b = BooterImage::parse(self.booter_bytes(kind)?).map_err(invalid(kind.file()))?;
        Ok(FuseSelector {
            engine_id_mask: b.engine_id_mask(),
            ucode_id: b.ucode_id(),
        })
    }

    fn booter(
        &self,
        kind: BooterKind,
        fuse_version: u32,
    ) -> Result<HsUcode<Vec<u8>>, FirmwareError> {
        let b = BooterImage::parse(self.booter_bytes(kind)?).map_err(invalid(kind.file()))?;
        let image = b
            .patched_image(fuse_version)
            .map_err(|_| FirmwareError::NoSignature {
                file: kind.file(),
                fuse_version,
            })?;
        let l = &b.load;
        Ok(HsUcode {
            image,
            load: booter_load_layout(
                l.app_code_offset.get(),
                l.app_code_size.get(),
                l.os_data_offset.get(),
                l.os_data_size.get(),
                b.patch_loc,
                b.engine_id_mask(),
                b.ucode_id(),
            ),
            direct: b.direct_load(),
        })
    }

    fn fmc(&self) -> Result<FmcDesc<'_>, FirmwareError> {
        let f = self
            .fmc
            .as_deref()
            .ok_or(FirmwareError::Missing { file: "fmc" })?;
        let fmc = FmcImage::parse(f).map_err(invalid("fmc"))?;
        Ok(FmcDesc {
            image: fmc.image,
            hash: fmc.cot_hash(),
            public_key: fmc.cot_public_key(),
            signature: fmc.cot_signature(),
        })
    }

    fn generic_bootloader(&self) -> Result<GenericBootloaderDesc<'_>, FirmwareError> {
        let f = self
            .gen_bootloader
            .as_deref()
            .ok_or(FirmwareError::Missing {
                file: "gen_bootloader",
            })?;
        let bl = GenericBootloader::parse(f).map_err(invalid("gen_bootloader"))?;
        Ok(GenericBootloaderDesc {
            code: bl.code(),
            desc: GenericBl {
                start_tag: bl.desc.start_tag.get(),
                code_size: bl.desc.code_size.get(),
            },
        })
    }

    fn parse_vbios(
        &self,
        read32: &mut dyn FnMut(usize) -> Option<u32>,
    ) -> Result<ParsedVbios, FirmwareError> {
        let mut rom = Vec::with_capacity(MAX_ROM_SIZE as usize);
        let mut off = 0usize;
        while off < MAX_ROM_SIZE as usize {
            match read32(off) {
                Some(w) => rom.extend_from_slice(&w.to_le_bytes()),
                None => break,
            }
            off += 4;
        }
        ParsedVbios::new(rom)
    }
}

/// A VBIOS read from the GPU, with its FWSEC ucode.
#[derive(Clone)]
pub struct ParsedVbios {
    rom: Vec<u8>,
}

impl core::fmt::Debug for ParsedVbios {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ParsedVbios")
            .field("rom_len", &self.rom.len())
            .finish()
    }
}

impl ParsedVbios {
    /// Checks that `rom` holds a VBIOS with a usable FWSEC.
    ///
    /// # Errors
    ///
    /// [`FirmwareError::Invalid`] naming what is missing.
    pub fn new(rom: Vec<u8>) -> Result<ParsedVbios, FirmwareError> {
        let v = Vbios::parse(&rom).map_err(|_| FirmwareError::Invalid {
            file: "VBIOS",
            what: "no valid PCI expansion ROM image chain in the PROM window",
        })?;
        // TU10x/GA100 carry FWSEC with a FALCON_UCODE_DESC_V2 (RM's
        // s_vbiosFillFlcnUcodeFromDescV2, loaded through the generic bootloader).
        if v.fwsec().is_err() && v.fwsec_v2().is_err() {
            return Err(FirmwareError::Invalid {
                file: "VBIOS",
                what: "no FWSEC (falcon ucode table entry FWSEC_PROD) with a v3 or v2 descriptor",
            });
        }
        Ok(ParsedVbios { rom })
    }

    /// The ROM bytes read.
    pub fn rom(&self) -> &[u8] {
        &self.rom
    }
}

fn fwsec_load(u: FwsecUcode) -> HsUcode<Vec<u8>> {
    // kernel_gsp_fwsec.c s_vbiosFillFlcnUcodeFromDescV3: code at 0, data after IMEM, DMEM
    // without a virtual tag.
    let load = HsLoad {
        code_offset: 0,
        imem_pa: u.imem_phys_base,
        imem_va: u.imem_virt_base,
        imem_size: u.imem_load_size,
        data_offset: u.imem_load_size,
        dmem_pa: u.dmem_phys_base,
        dmem_size: u.dmem_load_size,
        brom: BromParams {
            pkc_data_offset: u.pkc_data_offset,
            engine_id_mask: u.engine_id_mask as u32,
            ucode_id: u.ucode_id as u32,
        },
    };
    HsUcode {
        image: u.image,
        load,
        direct: Default::default(),
    }
}

impl VbiosFirmware for ParsedVbios {
    type Image = Vec<u8>;

    fn fwsec_fuse(&self) -> FuseSelector {
        match Vbios::parse(&self.rom).and_then(|v| v.fwsec()) {
            Ok(f) => FuseSelector {
                engine_id_mask: f.desc.EngineIdMask.get() as u32,
                ucode_id: f.desc.UcodeId as u32,
            },
            Err(_) => FuseSelector {
                engine_id_mask: 0,
                ucode_id: 0,
            },
        }
    }

    fn fwsec(
        &self,
        cmd: FwsecCommand,
        fuse_version: u32,
    ) -> Result<HsUcode<Vec<u8>>, FirmwareError> {
        let v = Vbios::parse(&self.rom).map_err(invalid("VBIOS"))?;
        let f = v.fwsec().map_err(invalid("VBIOS"))?;
        let r = match cmd {
            FwsecCommand::Frts { offset, size } => f.patch_frts(offset, size, fuse_version),
            FwsecCommand::Sb => f.patch_sb(fuse_version),
        };
        r.map(fwsec_load).map_err(|e| match e {
            Error::NoSignatureForFuse { .. } => FirmwareError::NoSignature {
                file: "FWSEC",
                fuse_version,
            },
            _ => FirmwareError::Invalid {
                file: "FWSEC",
                what: "the DMEM command interface cannot take the command",
            },
        })
    }

    fn fwsec_with_loader(&self, cmd: FwsecCommand) -> Result<LoaderUcode<Vec<u8>>, FirmwareError> {
        let v = Vbios::parse(&self.rom).map_err(invalid("VBIOS"))?;
        let f = v.fwsec_v2().map_err(|e| match e {
            Error::UnsupportedVersion { .. } => FirmwareError::Invalid {
                file: "VBIOS",
                what: "its FWSEC has no FALCON_UCODE_DESC_V2, which this chip's falcon needs \
                       (it cannot boot from heavy-secure ROM)",
            },
            _ => FirmwareError::Invalid {
                file: "VBIOS",
                what: "its v2 FWSEC descriptor points outside the ROM",
            },
        })?;
        let r = match cmd {
            FwsecCommand::Frts { offset, size } => f.patch_frts(offset, size),
            FwsecCommand::Sb => f.patch_sb(),
        };
        let u = r.map_err(|_| FirmwareError::Invalid {
            file: "FWSEC",
            what: "the DMEM command interface cannot take the command",
        })?;
        Ok(LoaderUcode {
            load: HsLoaderLoad {
                ns_offset: u.ns_offset,
                ns_size: u.ns_size,
                sec_offset: u.sec_offset,
                sec_size: u.sec_size,
                dmem_size: u.dmem_size,
            },
            code: u.code,
            data: u.data,
        })
    }
}
