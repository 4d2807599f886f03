//! What the simulated boot hardware knows about the firmware: the REAL r570.144 files from the
//! cache (what booter, FSP and GSP-FMC check the driver's memory against) and the synthesized
//! VBIOS it serves through the PROM window.
//!
//! Expected contents are computed here, independently of the driver's code: the booter
//! signature patch is done from the header fields (`num_sig - 1 - fuse` as
//! `s_patchBooterUcodeSignature`), the FWSEC DMEM patch from the synthesizer's constants and
//! `FWSECLIC_FRTS_CMD` as C lays it out, the FMC hash with SHA-384. The gsp-firmware parsers
//! are only used to find sections and header fields.

use std::path::Path;

use nvbare_core::chip::Chipset;
use nvbare_core::falcon::FalconHal;
use nvbare_gsp_firmware::pinned::{FirmwareKind, boot_files, firmware_path, verify};
use nvbare_gsp_firmware::testutil::vbios::{self as rom, RomSpec};
use nvbare_gsp_firmware::{BooterImage, FmcImage, GenericBootloader, GspFirmware, RiscvBootloader};
use sha2::{Digest, Sha256, Sha384};

/// A booter (HS ucode for SEC2) as the sim expects to find it in SEC2's IMEM/DMEM.
#[derive(Debug, Clone)]
pub struct SimBooter {
    /// The unpatched image.
    pub image: Vec<u8>,
    /// The signatures.
    pub signatures: Vec<Vec<u8>>,
    /// App 0 code offset (IMEM VA) and size.
    pub code: (u32, u32),
    /// OS code offset and size (the non-secure part of a PIO load on TU10x/GA100).
    pub os_code: (u32, u32),
    /// OS data offset and size (DMEM).
    pub data: (u32, u32),
    /// Where the signature goes in the image.
    pub patch_loc: u32,
    /// BROM engine id mask.
    pub engine_id_mask: u32,
    /// BROM ucode id.
    pub ucode_id: u32,
}

impl SimBooter {
    fn from_file(bytes: &[u8]) -> Result<Self, String> {
        let b = BooterImage::parse(bytes).map_err(|e| e.to_string())?;
        let n = b.num_sigs;
        let signatures = (0..n)
            .map(|i| b.signature(i).map(<[u8]>::to_vec).ok_or("signature"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SimBooter {
            image: b.image().to_vec(),
            signatures,
            code: (b.load.app_code_offset.get(), b.load.app_code_size.get()),
            os_code: (b.load.os_code_offset.get(), b.load.os_code_size.get()),
            data: (b.load.os_data_offset.get(), b.load.os_data_size.get()),
            patch_loc: b.patch_loc,
            engine_id_mask: b.meta.engine_id_mask.get(),
            ucode_id: b.meta.ucode_id.get(),
        })
    }

    /// The image the booter must have once patched for `fuse` (`None` if no signature).
    pub fn patched(&self, fuse: u32) -> Option<Vec<u8>> {
        let n = self.signatures.len() as u32;
        let idx = if n == 1 {
            0
        } else {
            n.checked_sub(1)?.checked_sub(fuse)?
        };
        let sig = self.signatures.get(idx as usize)?;
        let mut img = self.image.clone();
        let at = self.patch_loc as usize;
        img.get_mut(at..at + sig.len())?.copy_from_slice(sig);
        Some(img)
    }
}

/// The real files of one chip as the sim needs them.
#[derive(Debug, Clone)]
pub struct SimFirmware {
    /// The chip.
    pub chip: Chipset,
    /// SHA-256 of the `.fwimage` (the radix3 walk must produce the same bytes).
    pub gsp_image_sha256: [u8; 32],
    /// `.fwimage` size.
    pub gsp_image_len: u64,
    /// The chip's `.fwsignature_*` section.
    pub gsp_signature: Vec<u8>,
    /// The bootloader image.
    pub bootloader: Vec<u8>,
    /// (code, data, manifest) offsets and appVersion of the bootloader.
    pub bootloader_desc: (u32, u32, u32, u32),
    /// booter_load (Turing-Ada).
    pub booter_load: Option<SimBooter>,
    /// booter_unload (Turing-Ada).
    pub booter_unload: Option<SimBooter>,
    /// The FMC image, its hash and the zero-padded COT key and signature (Hopper on).
    pub fmc: Option<SimFmc>,
    /// The VBIOS ROM served at BAR0 0x300000.
    pub vbios: rom::Rom,
    /// The generic falcon bootloader (TU10x, GA100: it loads FWSEC).
    pub gen_bootloader: Option<SimGenBl>,
}

/// The generic falcon bootloader as the GSP falcon runs it: its code and `nvfw_bl_desc`.
#[derive(Debug, Clone)]
pub struct SimGenBl {
    /// `code_size` bytes of code.
    pub code: Vec<u8>,
    /// `start_tag`.
    pub start_tag: u32,
    /// `dmem_load_off`: where it reads its `RM_FLCN_BL_DMEM_DESC`.
    pub dmem_desc_off: u32,
}

/// The GSP-FMC as the FSP expects it.
#[derive(Debug, Clone)]
pub struct SimFmc {
    /// The image.
    pub image: Vec<u8>,
    /// The `hash` section (must be the SHA-384 of the image).
    pub hash: [u8; 48],
    /// `publicKey[96]` as the COT carries it.
    pub public_key: [u8; 384],
    /// `signature[96]` as the COT carries it.
    pub signature: [u8; 384],
}

fn padded<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = b.len().min(N);
    a[..n].copy_from_slice(&b[..n]);
    a
}

impl SimFirmware {
    /// Loads `chip`'s files from the firmware directory `dir` (checked against the pinned
    /// sha256 list).
    pub fn load(chip: Chipset, dir: &Path) -> Result<SimFirmware, String> {
        let read = |kind: FirmwareKind| -> Result<Option<Vec<u8>>, String> {
            if !boot_files(chip).contains(&kind) {
                return Ok(None);
            }
            let p = firmware_path(chip, kind);
            let b = std::fs::read(dir.join(&p)).map_err(|e| {
                format!(
                    "the simulator needs {} ({e}); run tools/fetch-firmware.sh",
                    dir.join(&p).display()
                )
            })?;
            verify(&p, &b).map_err(|e| format!("{p}: {e}"))?;
            Ok(Some(b))
        };
        let gsp = read(FirmwareKind::Gsp)?.unwrap_or_default();
        let g = GspFirmware::parse(&gsp).map_err(|e| e.to_string())?;
        let image = g.image();
        let gsp_image_sha256: [u8; 32] = Sha256::digest(image).into();
        let gsp_signature = g.signature(chip).map_err(|e| e.to_string())?.to_vec();
        let bl = read(FirmwareKind::Bootloader)?.unwrap_or_default();
        let b = RiscvBootloader::parse(&bl).map_err(|e| e.to_string())?;
        let booter = |k| -> Result<Option<SimBooter>, String> {
            read(k)?.map(|f| SimBooter::from_file(&f)).transpose()
        };
        let fmc = match read(FirmwareKind::Fmc)? {
            Some(f) => {
                let m = FmcImage::parse(&f).map_err(|e| e.to_string())?;
                Some(SimFmc {
                    image: m.image.to_vec(),
                    hash: padded(m.hash),
                    public_key: padded(m.public_key),
                    signature: padded(m.signature),
                })
            }
            None => None,
        };
        Ok(SimFirmware {
            chip,
            gsp_image_sha256,
            gsp_image_len: image.len() as u64,
            gsp_signature,
            bootloader: b.image().to_vec(),
            bootloader_desc: (
                b.code_offset(),
                b.data_offset(),
                b.manifest_offset(),
                b.app_version(),
            ),
            booter_load: booter(FirmwareKind::BooterLoad)?,
            booter_unload: booter(FirmwareKind::BooterUnload)?,
            fmc,
            gen_bootloader: match read(FirmwareKind::GenBootloader)? {
                Some(f) => {
                    let g = GenericBootloader::parse(&f).map_err(|e| e.to_string())?;
                    Some(SimGenBl {
                        code: g.code().to_vec(),
                        start_tag: g.desc.start_tag.get(),
                        dmem_desc_off: g.desc.dmem_load_off.get(),
                    })
                }
                None => None,
            },
            // TU10x/GA100 VBIOSes carry FWSEC with a FALCON_UCODE_DESC_V2 (their RM runs it
            // through the generic bootloader, kgspExecuteHsFalcon_TU102 takes no BOOT_FROM_HS
            // ucode); the synthesized ROM says so in its descriptor header.
            vbios: rom::build(&RomSpec {
                desc_version: if FalconHal::for_chip(chip.info()).boots_from_hs() {
                    3
                } else {
                    2
                },
                ..RomSpec::default()
            }),
        })
    }

    /// SHA-384 (what the FSP checks the FMC image in memory against).
    pub fn sha384(bytes: &[u8]) -> [u8; 48] {
        Sha384::digest(bytes).into()
    }
}

/// FWSEC as the synthesized ROM carries it: IMEM then DMEM (the ROM's `ucode`), descriptor
/// facts from `testutil::vbios`.
#[derive(Debug, Clone)]
pub struct SimFwsec {
    /// IMEM bytes.
    pub imem: Vec<u8>,
    /// Unpatched DMEM bytes.
    pub dmem: Vec<u8>,
}

impl SimFwsec {
    /// The FWSEC of the default synthesized ROM.
    pub fn new() -> Self {
        let u = rom::ucode(&RomSpec::default());
        SimFwsec {
            imem: u[..rom::IMEM].to_vec(),
            dmem: u[rom::IMEM..rom::IMEM + rom::DMEM].to_vec(),
        }
    }

    /// `EngineIdMask` (GSP).
    pub const ENGINE_ID_MASK: u32 = 0x400;
    /// `UcodeId`.
    pub const UCODE_ID: u32 = 9;
    /// `PKCDataOffset`.
    pub const PKC: usize = rom::PKC;

    /// The signature FWSEC must carry for `fuse` (bit `fuse` of SignatureVersions set, the
    /// signatures of the lower set bits first), if any.
    pub fn signature(fuse: u32) -> Option<Vec<u8>> {
        let v = rom::SIG_VERSIONS as u32;
        if fuse >= 16 || v & (1 << fuse) == 0 {
            return None;
        }
        let below = (v & ((1 << fuse) - 1)).count_ones() as usize;
        Some(rom::signature(below))
    }

    /// The DMEM FWSEC must have for FRTS at `offset` (`size` bytes) and `fuse`: init_cmd 0x15
    /// at DMEMMAPPER+44, `FWSECLIC_FRTS_CMD` at the command buffer, the signature at PKC.
    pub fn dmem_frts(&self, offset: u64, size: u64, fuse: Option<u32>) -> Option<Vec<u8>> {
        let mut cmd = Vec::with_capacity(48);
        // FWSECLIC_READ_VBIOS_DESC {version 1, size 24, gfwImageOffset u64 0, size 0, flags 2}
        for w in [1u32, 24] {
            cmd.extend_from_slice(&w.to_le_bytes());
        }
        cmd.extend_from_slice(&0u64.to_le_bytes());
        cmd.extend_from_slice(&0u32.to_le_bytes());
        cmd.extend_from_slice(&2u32.to_le_bytes());
        // FWSECLIC_FRTS_REGION_DESC {version 1, size 20, offset4K, size4K, media FB=2}
        for w in [1u32, 20, (offset >> 12) as u32, (size >> 12) as u32, 2] {
            cmd.extend_from_slice(&w.to_le_bytes());
        }
        cmd.extend_from_slice(&0u32.to_le_bytes()); // padding to 48
        self.patched(0x15, &cmd, fuse)
    }

    /// The DMEM FWSEC must have for SB and `fuse`: init_cmd 0x19, the read-VBIOS descriptor.
    pub fn dmem_sb(&self, fuse: Option<u32>) -> Option<Vec<u8>> {
        let mut cmd = Vec::with_capacity(24);
        for w in [1u32, 24] {
            cmd.extend_from_slice(&w.to_le_bytes());
        }
        cmd.extend_from_slice(&0u64.to_le_bytes());
        cmd.extend_from_slice(&0u32.to_le_bytes());
        cmd.extend_from_slice(&2u32.to_le_bytes());
        self.patched(0x19, &cmd, fuse)
    }

    /// `fuse`: the signature to expect at PKC (v3); `None` for a v2 FWSEC, which carries its
    /// own.
    fn patched(&self, init_cmd: u32, cmd: &[u8], fuse: Option<u32>) -> Option<Vec<u8>> {
        let mut d = self.dmem.clone();
        let m = rom::MAPPER;
        d.get_mut(m + 44..m + 48)?
            .copy_from_slice(&init_cmd.to_le_bytes());
        let c = rom::CMD_IN;
        d.get_mut(c..c + cmd.len())?.copy_from_slice(cmd);
        if let Some(fuse) = fuse {
            let sig = Self::signature(fuse)?;
            d.get_mut(Self::PKC..Self::PKC + sig.len())?
                .copy_from_slice(&sig);
        }
        Some(d)
    }
}

impl Default for SimFwsec {
    fn default() -> Self {
        Self::new()
    }
}

/// The pinned r570.144 firmware of `chip` from the cache, as the simulator sees it and as the
/// driver loads it ([`nvbare_gsp_firmware::FirmwareSet`]); loaded once per chip per process
/// (SHA checks of ~100 MB). A test helper: it panics with the fetch script's name when the
/// cache is missing, and on firmware that does not load.
pub fn pinned_firmware(
    chip: Chipset,
) -> (
    std::sync::Arc<SimFirmware>,
    std::sync::Arc<nvbare_gsp_firmware::FirmwareSet>,
) {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Pair = (Arc<SimFirmware>, Arc<nvbare_gsp_firmware::FirmwareSet>);
    static CACHE: OnceLock<Mutex<HashMap<Chipset, Pair>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // A test that panicked while loading poisons the lock; the map is still consistent.
    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
    c.entry(chip)
        .or_insert_with(|| {
            let dir = nvbare_gsp_firmware::testutil::require_firmware_dir();
            let sim = SimFirmware::load(chip, &dir)
                .unwrap_or_else(|e| panic!("simulator firmware for {chip:?}: {e}"));
            let set = nvbare_gsp_firmware::FirmwareSet::load(chip, |p| {
                std::fs::read(dir.join(p))
                    .map_err(|e| nvbare_gsp_firmware::boot::ReadError::Io(e.to_string()))
            })
            .unwrap_or_else(|e| panic!("driver firmware set for {chip:?}: {e}"));
            (Arc::new(sim), Arc::new(set))
        })
        .clone()
}
