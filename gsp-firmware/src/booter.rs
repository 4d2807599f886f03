//! Heavy-secure (HS) falcon ucode files: `booter_load`, `booter_unload` and `scrubber`.
//!
//! Layout, as `extract-firmware-nouveau.py` (`booter()`, `scrubber()`) writes it from OpenRM's
//! bindata archives (`image_prod`, `header_prod`, `sig_prod`, `patch_loc`, `patch_sig`,
//! `patch_meta`, `num_sigs`):
//!
//! ```text
//! nvfw_bin_hdr            header_offset -> nvfw_hs_header_v2, data_offset/size -> image
//! nvfw_hs_header_v2       sig_prod_offset/size -> signatures (num_sig of equal size)
//!                         patch_loc -> u32: image offset where the chosen signature goes
//!                         patch_sig -> u32: must be 0
//!                         meta_data_offset/size -> {fuse_ver, engine_id_mask, ucode_id}
//!                         num_sig -> u32
//!                         header_offset/size -> nvfw_hs_load_header_v2
//! nvfw_hs_load_header_v2  os code/data offset+size, num_apps = 1, app code/data offset+size
//! ```
//!
//! How OpenRM loads it on SEC2 (`s_allocateUcodeFromBinArchive`, `kernel_gsp_booter.c`, boot
//! from HS): IMEM gets the app code (`app_code_offset`/`app_code_size`, IMEM PA 0, VA
//! `app_code_offset`); DMEM gets the OS data (`os_data_offset`/`os_data_size`, DMEM PA 0); the
//! BROM's PKC data offset is `patch_loc - os_data_offset`; engine id mask and ucode id come from
//! the meta data. The signature matching the GPU's fuse version is copied to `patch_loc` first
//! ([`BooterImage::patched_image`]).

use alloc::format;
use alloc::vec::Vec;

use nvbare_core::falcon::HsDirectLoad;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::Error;
use crate::binhdr::BinFile;
use crate::bytes::{range, read, slice, u32_at};

/// `struct nvfw_hs_header_v2`: every field is a file offset or size.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct NvfwHsHeaderV2 {
    /// File offset of the signatures.
    pub sig_prod_offset: U32,
    /// Total size of the signatures.
    pub sig_prod_size: U32,
    /// File offset of a `u32`: the image offset the signature is patched to.
    pub patch_loc: U32,
    /// File offset of a `u32`: the signature index offset (always 0).
    pub patch_sig: U32,
    /// File offset of [`HsSignatureParams`].
    pub meta_data_offset: U32,
    /// Size of [`HsSignatureParams`] (12).
    pub meta_data_size: U32,
    /// File offset of a `u32`: the number of signatures.
    pub num_sig: U32,
    /// File offset of [`NvfwHsLoadHeaderV2`].
    pub header_offset: U32,
    /// Size of [`NvfwHsLoadHeaderV2`] (36 for one app).
    pub header_size: U32,
}

/// The `patch_meta` triple (`HsSignatureParams` in nova-core).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct HsSignatureParams {
    /// The ucode's own fuse version (the newest signature's version).
    pub fuse_ver: U32,
    /// Engines that may run it (`NV_PFALCON2_FALCON_BROM_ENGIDMASK`).
    pub engine_id_mask: U32,
    /// `NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID`; also selects the fuse register.
    pub ucode_id: U32,
}

/// `struct nvfw_hs_load_header_v2` with its single app (OpenRM reads it as nine `u32`:
/// osCode/osData offset+size, numApps, appCode/appData offset+size).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct NvfwHsLoadHeaderV2 {
    /// Image offset of the non-secure OS code.
    pub os_code_offset: U32,
    /// Size of the non-secure OS code.
    pub os_code_size: U32,
    /// Image offset of the data loaded into DMEM.
    pub os_data_offset: U32,
    /// Size of the DMEM data.
    pub os_data_size: U32,
    /// Number of apps; OpenRM requires 1.
    pub num_apps: U32,
    /// Image offset of the secure app code (loaded into IMEM).
    pub app_code_offset: U32,
    /// Size of the secure app code.
    pub app_code_size: U32,
    /// Image offset of the app data.
    pub app_data_offset: U32,
    /// Size of the app data.
    pub app_data_size: U32,
}

/// A parsed HS ucode file (booter load/unload, scrubber).
#[derive(Debug, Clone, Copy)]
pub struct BooterImage<'a> {
    /// The file's `nvfw_bin_hdr` and image.
    pub bin: BinFile<'a>,
    /// The HS header.
    pub hs: NvfwHsHeaderV2,
    /// The load header.
    pub load: NvfwHsLoadHeaderV2,
    /// Signature parameters.
    pub meta: HsSignatureParams,
    /// Image offset where the signature is patched.
    pub patch_loc: u32,
    /// Number of signatures.
    pub num_sigs: u32,
    signatures: &'a [u8],
}

impl<'a> BooterImage<'a> {
    /// Parses and checks a booter/scrubber file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let bin = BinFile::parse(bytes)?;
        let hs: NvfwHsHeaderV2 = *read(bytes, "nvfw_hs_header_v2", bin.header_offset() as u64)?;
        let data_offset = bin.data_offset() as u64;
        // Everything the HS header points at lives between it and the image.
        let header_end = bin.header_offset() as u64 + core::mem::size_of::<NvfwHsHeaderV2>() as u64;
        let in_header = |what: &'static str, off: u64, len: u64| -> Result<(), Error> {
            if off < header_end || off.saturating_add(len) > data_offset {
                return Err(Error::OutOfBounds {
                    what,
                    offset: off,
                    len,
                    limit: data_offset,
                });
            }
            Ok(())
        };
        let sig_off = hs.sig_prod_offset.get() as u64;
        let sig_size = hs.sig_prod_size.get() as u64;
        in_header("HS signatures (sig_prod_offset/size)", sig_off, sig_size)?;
        let signatures = slice(bytes, "HS signatures", sig_off, sig_size)?;
        for (what, off) in [
            ("HS patch_loc", hs.patch_loc.get()),
            ("HS patch_sig", hs.patch_sig.get()),
            ("HS num_sig", hs.num_sig.get()),
        ] {
            in_header(what, off as u64, 4)?;
        }
        let patch_loc = u32_at(bytes, "HS patch_loc", hs.patch_loc.get() as u64)?;
        let patch_sig = u32_at(bytes, "HS patch_sig", hs.patch_sig.get() as u64)?;
        let num_sigs = u32_at(bytes, "HS num_sig", hs.num_sig.get() as u64)?;
        if hs.meta_data_size.get() as usize != core::mem::size_of::<HsSignatureParams>() {
            return Err(Error::BadSize {
                what: "HS meta data (meta_data_size)",
                size: hs.meta_data_size.get() as u64,
                expected: "12 (fuse_ver, engine_id_mask, ucode_id)",
            });
        }
        in_header("HS meta data", hs.meta_data_offset.get() as u64, 12)?;
        let meta: HsSignatureParams =
            *read(bytes, "HS meta data", hs.meta_data_offset.get() as u64)?;
        if hs.header_size.get() as usize != core::mem::size_of::<NvfwHsLoadHeaderV2>() {
            return Err(Error::BadSize {
                what: "nvfw_hs_load_header_v2 (header_size)",
                size: hs.header_size.get() as u64,
                expected: "36 (one app)",
            });
        }
        in_header("nvfw_hs_load_header_v2", hs.header_offset.get() as u64, 36)?;
        let load: NvfwHsLoadHeaderV2 = *read(
            bytes,
            "nvfw_hs_load_header_v2",
            hs.header_offset.get() as u64,
        )?;

        if patch_sig != 0 {
            return Err(Error::Invalid {
                what: "HS patch_sig",
                value: patch_sig as u64,
                why: "OpenRM requires 0",
            });
        }
        if num_sigs == 0 || sig_size == 0 || !sig_size.is_multiple_of(num_sigs as u64) {
            return Err(Error::Invalid {
                what: "HS num_sig",
                value: num_sigs as u64,
                why: "signatures must be one or more of equal size",
            });
        }
        if load.num_apps.get() != 1 {
            return Err(Error::Invalid {
                what: "nvfw_hs_load_header_v2.num_apps",
                value: load.num_apps.get() as u64,
                why: "OpenRM supports exactly one app",
            });
        }
        let image_len = bin.image.len();
        for (what, off, len) in [
            ("booter OS code", load.os_code_offset, load.os_code_size),
            ("booter OS data", load.os_data_offset, load.os_data_size),
            ("booter app code", load.app_code_offset, load.app_code_size),
            ("booter app data", load.app_data_offset, load.app_data_size),
        ] {
            range(what, off.get() as u64, len.get() as u64, image_len)?;
        }
        let sig_len = sig_size / num_sigs as u64;
        range(
            "HS signature patch location",
            patch_loc as u64,
            sig_len,
            image_len,
        )?;
        // The signature goes into DMEM: it must lie inside the OS data.
        let data_start = load.os_data_offset.get() as u64;
        let data_end = data_start + load.os_data_size.get() as u64;
        if (patch_loc as u64) < data_start || patch_loc as u64 + sig_len > data_end {
            return Err(Error::OutOfBounds {
                what: "HS signature patch location (outside the DMEM data)",
                offset: patch_loc as u64,
                len: sig_len,
                limit: data_end,
            });
        }
        Ok(BooterImage {
            bin,
            hs,
            load,
            meta,
            patch_loc,
            num_sigs,
            signatures,
        })
    }

    /// The unpatched ucode image.
    pub fn image(&self) -> &'a [u8] {
        self.bin.image
    }

    /// All signatures, concatenated.
    pub fn signatures(&self) -> &'a [u8] {
        self.signatures
    }

    /// Bytes per signature (16: Turing AES; 384: RSA-3K).
    pub fn signature_size(&self) -> usize {
        self.signatures.len() / self.num_sigs as usize
    }

    /// Signature `index`.
    pub fn signature(&self, index: u32) -> Option<&'a [u8]> {
        let n = self.signature_size();
        self.signatures.chunks_exact(n).nth(index as usize)
    }

    /// Index of the signature for a GPU whose fuse version for this ucode is `fuse_version`
    /// (read from `NV_FUSE_OPT_FPF_*_UCODE<ucode_id>_VERSION`), as OpenRM's
    /// `s_patchBooterUcodeSignature`: with one signature, that one; otherwise signature
    /// `num_sigs - 1 - fuse_version`, which must exist.
    pub fn signature_index(&self, fuse_version: u32) -> Result<u32, Error> {
        if self.num_sigs == 1 {
            return Ok(0);
        }
        if fuse_version > self.num_sigs - 1 {
            return Err(Error::NoSignatureForFuse {
                fuse_version,
                available: format!(
                    "the ucode has {} signatures, for fuse versions 0 to {}",
                    self.num_sigs,
                    self.num_sigs - 1
                ),
            });
        }
        Ok(self.num_sigs - 1 - fuse_version)
    }

    /// The signature for `fuse_version`.
    pub fn signature_for_fuse(&self, fuse_version: u32) -> Result<&'a [u8], Error> {
        let i = self.signature_index(fuse_version)?;
        self.signature(i).ok_or(Error::Missing {
            what: "booter signature",
        })
    }

    /// The image with the signature for `fuse_version` copied to `patch_loc`: what is DMA-loaded.
    pub fn patched_image(&self, fuse_version: u32) -> Result<Vec<u8>, Error> {
        let sig = self.signature_for_fuse(fuse_version)?;
        let mut image = self.bin.image.to_vec();
        let r = range(
            "HS signature patch location",
            self.patch_loc as u64,
            sig.len() as u64,
            image.len(),
        )?;
        if let Some(dst) = image.get_mut(r) {
            dst.copy_from_slice(sig);
        }
        Ok(image)
    }

    /// The BROM's PKC data offset in DMEM: `patch_loc - os_data_offset`.
    pub fn pkc_data_offset(&self) -> u32 {
        // parse() checked patch_loc >= os_data_offset.
        self.patch_loc
            .saturating_sub(self.load.os_data_offset.get())
    }

    /// Where the parts go when the falcon loads the image by PIO, on TU10x and GA100 (no boot
    /// from HS: `s_allocateUcodeFromBinArchive`'s BOOT_DIRECT case): the OS code non-secure, the
    /// app code secure, the OS data at DMEM 0; the signature is already patched in.
    pub fn direct_load(&self) -> HsDirectLoad {
        let l = &self.load;
        HsDirectLoad::booter(
            (l.os_code_offset.get(), l.os_code_size.get()),
            (l.app_code_offset.get(), l.app_code_size.get()),
            (l.os_data_offset.get(), l.os_data_size.get()),
        )
    }

    /// `NV_PFALCON2_FALCON_BROM_ENGIDMASK`.
    pub fn engine_id_mask(&self) -> u32 {
        self.meta.engine_id_mask.get()
    }

    /// `NV_PFALCON2_FALCON_BROM_CURR_UCODE_ID`.
    pub fn ucode_id(&self) -> u32 {
        self.meta.ucode_id.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nvfw_hs_h() {
        // nouveau include/nvfw/hs.h; sizes as extract-firmware-nouveau.py packs them ("<9L").
        assert_eq!(size_of::<NvfwHsHeaderV2>(), 36);
        assert_eq!(offset_of!(NvfwHsHeaderV2, patch_loc), 8);
        assert_eq!(offset_of!(NvfwHsHeaderV2, meta_data_offset), 16);
        assert_eq!(offset_of!(NvfwHsHeaderV2, num_sig), 24);
        assert_eq!(offset_of!(NvfwHsHeaderV2, header_size), 32);
        assert_eq!(size_of::<HsSignatureParams>(), 12);
        assert_eq!(size_of::<NvfwHsLoadHeaderV2>(), 36);
        assert_eq!(offset_of!(NvfwHsLoadHeaderV2, os_data_offset), 8);
        assert_eq!(offset_of!(NvfwHsLoadHeaderV2, num_apps), 16);
        assert_eq!(offset_of!(NvfwHsLoadHeaderV2, app_code_offset), 20);
        assert_eq!(offset_of!(NvfwHsLoadHeaderV2, app_data_size), 32);
    }
}
