//! The GSP-FMC image for the FSP chain of trust (`fmc-570.144.bin`: GH100, GB10x, GB20x).
//!
//! `extract-firmware-nouveau.py` (`fmc()`, open-gpu-kernel-modules 580.x) wraps OpenRM's bindata
//! `kgspBinArchiveGspRmFmcGfwProdSigned_<chip>` (`ucode_image`, `ucode_hash`, `ucode_sig`,
//! `ucode_pkey`) in an ELF32 container with sections `hash`, `signature`, `publickey` and
//! `image`, each with `sh_flags` 0xfff00102 and the CRC-32 of its data in `sh_info`.
//!
//! The CPU copies the image to memory and sends the FSP an NVDM COT message
//! (`NVDM_PAYLOAD_COT`, `kern_fsp_cot_payload.h`) carrying `hash384[12]`, `publicKey[96]` and
//! `signature[96]` (`u32` arrays: 48, 384 and 384 bytes). GH100 uses RSA-3K (384-byte key
//! and signature); GB10x/GB20x use ECDSA P-384 (a 96-byte signature and a 97-byte public key),
//! zero-padded into the same arrays. The hash is the SHA-384 of the image, which [`FmcImage::parse`]
//! checks.

use sha2::{Digest, Sha384};

use crate::Error;
use crate::crc32::crc32;
use crate::elf::Elf;

/// Section names in the FMC container.
pub const SECTION_IMAGE: &str = "image";
/// The SHA-384 of the image.
pub const SECTION_HASH: &str = "hash";
/// The image's signature.
pub const SECTION_SIGNATURE: &str = "signature";
/// The key that verifies the signature.
pub const SECTION_PUBLIC_KEY: &str = "publickey";
/// `sh_flags` the extraction script writes; the CRC in `sh_info` is checked when present.
pub const SECTION_FLAGS_NOUVEAU: u64 = 0xfff0_0102;
/// `sizeof(hash384)` in `NVDM_PAYLOAD_COT`.
pub const COT_HASH_SIZE: usize = 48;
/// `sizeof(publicKey)` in `NVDM_PAYLOAD_COT` (96 × u32).
pub const COT_PUBLIC_KEY_SIZE: usize = 384;
/// `sizeof(signature)` in `NVDM_PAYLOAD_COT` (96 × u32).
pub const COT_SIGNATURE_SIZE: usize = 384;

/// A parsed FMC image, borrowing the file's bytes.
#[derive(Debug, Clone)]
pub struct FmcImage<'a> {
    elf: Elf<'a>,
    /// The FMC ucode, copied to memory and pointed at by `gspFmcSysmemOffset`.
    pub image: &'a [u8],
    /// SHA-384 of the image (48 bytes).
    pub hash: &'a [u8],
    /// The public key (384 bytes RSA-3K on GH100, 97 bytes ECDSA P-384 on Blackwell).
    pub public_key: &'a [u8],
    /// The signature (384 bytes RSA-3K on GH100, 96 bytes ECDSA P-384 on Blackwell).
    pub signature: &'a [u8],
}

impl<'a> FmcImage<'a> {
    /// Parses an FMC container, checks sizes against the COT payload, the section CRCs and
    /// that `hash` is the SHA-384 of `image`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let elf = Elf::parse(bytes)?;
        let get = |name: &'static str| -> Result<&'a [u8], Error> {
            let s = elf.unique_section(name)?;
            if s.flags == SECTION_FLAGS_NOUVEAU {
                let found = crc32(s.data);
                if found != s.info {
                    return Err(Error::Checksum {
                        what: match name {
                            SECTION_IMAGE => "FMC section 'image' CRC-32",
                            SECTION_HASH => "FMC section 'hash' CRC-32",
                            SECTION_SIGNATURE => "FMC section 'signature' CRC-32",
                            _ => "FMC section 'publickey' CRC-32",
                        },
                        expected: s.info as u64,
                        found: found as u64,
                    });
                }
            }
            Ok(s.data)
        };
        let image = get(SECTION_IMAGE)?;
        let hash = get(SECTION_HASH)?;
        let signature = get(SECTION_SIGNATURE)?;
        let public_key = get(SECTION_PUBLIC_KEY)?;
        if image.is_empty() {
            return Err(Error::BadSize {
                what: "FMC section 'image'",
                size: 0,
                expected: "a non-empty ucode image",
            });
        }
        if hash.len() != COT_HASH_SIZE {
            return Err(Error::BadSize {
                what: "FMC section 'hash'",
                size: hash.len() as u64,
                expected: "48 bytes (SHA-384, NVDM_PAYLOAD_COT.hash384)",
            });
        }
        if signature.is_empty() || signature.len() > COT_SIGNATURE_SIZE {
            return Err(Error::BadSize {
                what: "FMC section 'signature'",
                size: signature.len() as u64,
                expected: "1 to 384 bytes (NVDM_PAYLOAD_COT.signature)",
            });
        }
        if public_key.is_empty() || public_key.len() > COT_PUBLIC_KEY_SIZE {
            return Err(Error::BadSize {
                what: "FMC section 'publickey'",
                size: public_key.len() as u64,
                expected: "1 to 384 bytes (NVDM_PAYLOAD_COT.publicKey)",
            });
        }
        if Sha384::digest(image).as_slice() != hash {
            return Err(Error::HashMismatch {
                what: "FMC image (SHA-384 in section 'hash')",
            });
        }
        Ok(FmcImage {
            elf,
            image,
            hash,
            public_key,
            signature,
        })
    }

    /// `NVDM_PAYLOAD_COT.hash384` bytes.
    pub fn cot_hash(&self) -> [u8; COT_HASH_SIZE] {
        padded(self.hash)
    }

    /// `NVDM_PAYLOAD_COT.publicKey` bytes: the key, zero-padded to 384.
    pub fn cot_public_key(&self) -> [u8; COT_PUBLIC_KEY_SIZE] {
        padded(self.public_key)
    }

    /// `NVDM_PAYLOAD_COT.signature` bytes: the signature, zero-padded to 384.
    pub fn cot_signature(&self) -> [u8; COT_SIGNATURE_SIZE] {
        padded(self.signature)
    }

    /// The signature scheme the sizes indicate.
    pub fn scheme(&self) -> SignatureScheme {
        match (self.signature.len(), self.public_key.len()) {
            (384, 384) => SignatureScheme::Rsa3k,
            (96, 97) => SignatureScheme::EcdsaP384,
            _ => SignatureScheme::Unknown,
        }
    }

    /// The ELF container (section list for inspection).
    pub fn elf(&self) -> &Elf<'a> {
        &self.elf
    }
}

/// How the FMC image is signed, judged by the key and signature sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureScheme {
    /// 384-byte RSA-3K key and signature (GH100).
    Rsa3k,
    /// 97-byte uncompressed P-384 point and 96-byte (r, s) signature (GB10x, GB20x).
    EcdsaP384,
    /// Other sizes.
    Unknown,
}

fn padded<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    for (d, s) in out.iter_mut().zip(src) {
        *d = *s;
    }
    out
}
