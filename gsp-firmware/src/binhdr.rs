//! `nvfw_bin_hdr`: the 24-byte header of the booter, bootloader, scrubber and generic-bootloader
//! files (nouveau's `include/nvfw/fw.h`; written by NVIDIA's `nouveau/extract-firmware-nouveau.py`).
//!
//! ```text
//! 0  bin_magic      0x10de
//! 4  bin_ver        1
//! 8  bin_size       total size, rounded up to 256
//! 12 header_offset  the file-kind specific header (HS header, RM_RISCV_UCODE_DESC, nvfw_bl_desc)
//! 16 data_offset    the ucode image
//! 20 data_size
//! ```

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::Error;
use crate::bytes::{read, round_up, slice};

/// `bin_magic`: NVIDIA's PCI vendor id.
pub const BIN_MAGIC: u32 = 0x10de;
/// The only `bin_ver` in use.
pub const BIN_VERSION: u32 = 1;

/// `struct nvfw_bin_hdr`.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct NvfwBinHdr {
    /// [`BIN_MAGIC`].
    pub bin_magic: U32,
    /// [`BIN_VERSION`].
    pub bin_ver: U32,
    /// Size of the whole file, rounded up to 256 bytes.
    pub bin_size: U32,
    /// File offset of the kind-specific header.
    pub header_offset: U32,
    /// File offset of the ucode image.
    pub data_offset: U32,
    /// Size of the ucode image.
    pub data_size: U32,
}

/// A file with a checked `nvfw_bin_hdr`: the header region and the image are inside the file.
#[derive(Debug, Clone, Copy)]
pub struct BinFile<'a> {
    /// The header as stored.
    pub hdr: NvfwBinHdr,
    /// The whole file.
    pub bytes: &'a [u8],
    /// `data_offset..data_offset + data_size`: the ucode image.
    pub image: &'a [u8],
    /// `header_offset..data_offset`: the kind-specific header (and, for booters, signatures).
    pub header: &'a [u8],
}

impl<'a> BinFile<'a> {
    /// Checks the header of `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let hdr: NvfwBinHdr = *read::<NvfwBinHdr>(bytes, "nvfw_bin_hdr", 0)?;
        if hdr.bin_magic.get() != BIN_MAGIC {
            return Err(Error::BadMagic {
                what: "nvfw_bin_hdr.bin_magic",
                found: hdr.bin_magic.get() as u64,
                expected: BIN_MAGIC as u64,
            });
        }
        if hdr.bin_ver.get() != BIN_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "nvfw_bin_hdr.bin_ver",
                version: hdr.bin_ver.get() as u64,
            });
        }
        let hoff = hdr.header_offset.get() as u64;
        let doff = hdr.data_offset.get() as u64;
        let dsize = hdr.data_size.get() as u64;
        if hoff < core::mem::size_of::<NvfwBinHdr>() as u64 || hoff > doff {
            return Err(Error::Invalid {
                what: "nvfw_bin_hdr.header_offset",
                value: hoff,
                why: "the header must follow nvfw_bin_hdr and precede the image",
            });
        }
        let image = slice(
            bytes,
            "ucode image (nvfw_bin_hdr.data_offset/data_size)",
            doff,
            dsize,
        )?;
        let header = slice(bytes, "nvfw_bin_hdr header region", hoff, doff - hoff)?;
        let end = doff + dsize;
        let size = hdr.bin_size.get() as u64;
        // The producer rounds the real size up to 256; a smaller bin_size cannot hold the image,
        // a larger one than the rounded file size means bytes are missing.
        let file_rounded = round_up(bytes.len() as u64, 256).unwrap_or(u64::MAX);
        if size < end || size > file_rounded {
            return Err(Error::Invalid {
                what: "nvfw_bin_hdr.bin_size",
                value: size,
                why: "does not match the file (truncated, or not this header)",
            });
        }
        Ok(BinFile {
            hdr,
            bytes,
            image,
            header,
        })
    }

    /// `header_offset`.
    pub fn header_offset(&self) -> u32 {
        self.hdr.header_offset.get()
    }

    /// `data_offset`.
    pub fn data_offset(&self) -> u32 {
        self.hdr.data_offset.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_nvfw_fw_h() {
        assert_eq!(size_of::<NvfwBinHdr>(), 24);
        assert_eq!(offset_of!(NvfwBinHdr, bin_magic), 0);
        assert_eq!(offset_of!(NvfwBinHdr, bin_ver), 4);
        assert_eq!(offset_of!(NvfwBinHdr, bin_size), 8);
        assert_eq!(offset_of!(NvfwBinHdr, header_offset), 12);
        assert_eq!(offset_of!(NvfwBinHdr, data_offset), 16);
        assert_eq!(offset_of!(NvfwBinHdr, data_size), 20);
    }
}
