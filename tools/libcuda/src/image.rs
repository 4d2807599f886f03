//! What `cuModuleLoadData` is handed: a cubin (ELF), a fatbin, a fatbin wrapper, or PTX text.
//! The call passes no size, so each kind's size is read from its own header.
//!
//! The fatbin container is not described by cuda.h; its layout here (a 16-byte header, then
//! entries with a 64-byte header each: kind at 0, header size at 4, payload size at 8, SM at
//! 28, flags at 40) is the one NVIDIA's tools write as documented by the community
//! (`fatbinary_section.h` in the toolkit gives only the wrapper and its magic). A compressed
//! entry (flag 0x2000: an LZ4 block, what nvcc 12 writes by default and nvcc 13's
//! `--compress-mode=speed`; flag 0x8000: a zstd frame, nvcc 13's default for PTX and its
//! `--compress-mode=size`) keeps the compressed length at 16 and the plain length at 56 of its
//! header; both are checked before anything is allocated. The layout was read off fatbins
//! nvcc 13.0 wrote (`tests/fixtures/cubins/kernels_*.fatbin`, tests below).

use std::borrow::Cow;
use std::io::Read;

use crate::abi::*;
use crate::error::{CuResult, err};

/// The ELF magic.
pub const ELF_MAGIC: [u8; 4] = *b"\x7fELF";
/// A fatbin's first word (`0xBA55ED50`, little-endian).
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// `FATBINC_MAGIC` (`fatbinary_section.h`): a `__fatBinC_Wrapper_t` pointing at a fatbin.
pub const FATBINC_MAGIC: u32 = 0x4662_43B1;
/// Largest image accepted (bounds what the header sizes make us read).
pub const MAX_IMAGE: u64 = 1 << 30;

/// Fatbin entry kinds.
const ENTRY_PTX: u16 = 1;
const ENTRY_ELF: u16 = 2;
/// An entry's payload is an LZ4 block.
const ENTRY_LZ4: u64 = 0x2000;
/// An entry's payload is a zstd frame.
const ENTRY_ZSTD: u64 = 0x8000;

/// What an image is, from its first four bytes (fewer if it has a NUL sooner: text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A cubin.
    Elf,
    /// A fatbin.
    Fatbin,
    /// A `__fatBinC_Wrapper_t`.
    Wrapper,
    /// NUL-terminated text (PTX, if it is an image at all).
    Text,
}

/// The kind of an image starting with `prefix`.
pub fn kind(prefix: &[u8]) -> Kind {
    if prefix.len() < 4 {
        return Kind::Text;
    }
    let word = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if prefix[..4] == ELF_MAGIC {
        Kind::Elf
    } else if word == FATBIN_MAGIC {
        Kind::Fatbin
    } else if word == FATBINC_MAGIC {
        Kind::Wrapper
    } else {
        Kind::Text
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .unwrap_or(0)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .unwrap_or(0)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

fn invalid(why: impl Into<String>) -> crate::error::CuError {
    err(CUDA_ERROR_INVALID_IMAGE, why)
}

fn bounded(n: u64) -> CuResult<usize> {
    if n > MAX_IMAGE {
        return Err(invalid(format!(
            "an image of {n} bytes (at most {MAX_IMAGE})"
        )));
    }
    Ok(n as usize)
}

/// Where an ELF64 file's section header table is: `(offset, bytes)`, from its 64-byte header.
pub fn elf_section_table(header: &[u8]) -> CuResult<(usize, usize)> {
    if header.len() < 64 || header[..4] != ELF_MAGIC || header[4] != 2 {
        return Err(invalid("not a 64-bit ELF file"));
    }
    let shoff = u64_at(header, 0x28);
    let shentsize = u16_at(header, 0x3a) as u64;
    let shnum = u16_at(header, 0x3c) as u64;
    if shentsize != 64 {
        return Err(invalid(format!("ELF section headers of {shentsize} bytes")));
    }
    Ok((bounded(shoff)?, bounded(shnum * shentsize)?))
}

/// An ELF64 file's size: the furthest end of its headers, program headers and sections.
pub fn elf_size(header: &[u8], sections: &[u8]) -> CuResult<usize> {
    let (shoff, shlen) = elf_section_table(header)?;
    let phoff = u64_at(header, 0x20);
    let phlen = u16_at(header, 0x36) as u64 * u16_at(header, 0x38) as u64;
    let mut end = (shoff as u64 + shlen as u64)
        .max(phoff.saturating_add(phlen))
        .max(64);
    for s in sections.chunks_exact(64) {
        const SHT_NOBITS: u32 = 8;
        if u32_at(s, 4) != SHT_NOBITS {
            end = end.max(u64_at(s, 0x18).saturating_add(u64_at(s, 0x20)));
        }
    }
    bounded(end)
}

/// A fatbin's size from its 16-byte header.
pub fn fatbin_size(header: &[u8]) -> CuResult<usize> {
    if header.len() < 16 || u32_at(header, 0) != FATBIN_MAGIC {
        return Err(invalid("not a fatbin"));
    }
    let hsize = u16_at(header, 6) as u64;
    bounded(hsize.saturating_add(u64_at(header, 8)))
}

/// The image of a fatbin to load on shader model `sm`.
#[derive(Debug, PartialEq, Eq)]
pub enum Chosen<'a> {
    /// A cubin built for `sm`.
    Cubin(Cow<'a, [u8]>),
    /// PTX (the newest one not newer than `sm`), to compile.
    Ptx(Cow<'a, [u8]>),
}

/// One fatbin entry: its header's facts and its payload as stored.
struct Entry<'a> {
    kind: u16,
    arch: u32,
    flags: u64,
    header: &'a [u8],
    payload: &'a [u8],
}

impl<'a> Entry<'a> {
    /// The payload, decompressed if it is compressed.
    fn contents(&self) -> CuResult<Cow<'a, [u8]>> {
        if self.flags & (ENTRY_LZ4 | ENTRY_ZSTD) == 0 {
            return Ok(Cow::Borrowed(self.payload));
        }
        let stored = u32_at(self.header, 16) as usize;
        let plain = bounded(u64_at(self.header, 56))?;
        let data = self.payload.get(..stored).ok_or_else(|| {
            invalid(format!(
                "a compressed fatbin entry of {stored} bytes in a payload of {}",
                self.payload.len()
            ))
        })?;
        let mut out = Vec::new();
        out.try_reserve_exact(plain).map_err(|_| {
            err(
                CUDA_ERROR_OUT_OF_MEMORY,
                format!("{plain} bytes to decompress into"),
            )
        })?;
        if self.flags & ENTRY_LZ4 != 0 {
            out.resize(plain, 0);
            let n = lz4_flex::block::decompress_into(data, &mut out)
                .map_err(|e| invalid(format!("an LZ4 fatbin entry does not decompress: {e}")))?;
            out.truncate(n);
        } else {
            let mut dec = ruzstd::decoding::StreamingDecoder::new(data)
                .map_err(|e| invalid(format!("a zstd fatbin entry does not decompress: {e}")))?;
            (&mut dec)
                .take(plain as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| invalid(format!("a zstd fatbin entry does not decompress: {e}")))?;
        }
        if out.len() != plain {
            return Err(invalid(format!(
                "a compressed fatbin entry gives {} bytes, its header says {plain}",
                out.len()
            )));
        }
        Ok(Cow::Owned(out))
    }
}

/// The entries of a fatbin, each checked to lie inside it.
fn entries(fatbin: &[u8]) -> CuResult<Vec<Entry<'_>>> {
    let total = fatbin_size(fatbin)?;
    let body = fatbin
        .get(u16_at(fatbin, 6) as usize..total)
        .ok_or_else(|| invalid("a fatbin shorter than its header says"))?;
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 64 <= body.len() {
        let e = &body[at..];
        let (hsize, size) = (u32_at(e, 4) as usize, u64_at(e, 8));
        if hsize < 64 {
            return Err(invalid(format!("a fatbin entry header of {hsize} bytes")));
        }
        let payload = usize::try_from(size)
            .ok()
            .and_then(|n| e.get(hsize..hsize.checked_add(n)?))
            .ok_or_else(|| invalid("a fatbin entry past the fatbin's end"))?;
        out.push(Entry {
            kind: u16_at(e, 0),
            arch: u32_at(e, 28),
            flags: u64_at(e, 40),
            header: &e[..hsize],
            payload,
        });
        at += hsize + payload.len();
    }
    Ok(out)
}

/// Picks the cubin for `sm` from a fatbin, else its PTX; a compressed one is decompressed.
pub fn choose(fatbin: &[u8], sm: u32) -> CuResult<Chosen<'_>> {
    let all = entries(fatbin)?;
    if let Some(c) = all.iter().find(|e| e.kind == ENTRY_ELF && e.arch == sm) {
        return Ok(Chosen::Cubin(c.contents()?));
    }
    let ptx = all
        .iter()
        .filter(|e| e.kind == ENTRY_PTX && e.arch <= sm)
        .max_by_key(|e| e.arch);
    match ptx {
        Some(p) => Ok(Chosen::Ptx(p.contents()?)),
        None => Err(err(
            CUDA_ERROR_NO_BINARY_FOR_GPU,
            format!("the fatbin has no cubin for sm_{sm} and no PTX for it"),
        )),
    }
}

/// Whether NUL-terminated text looks like PTX (a `.version` or `.target` directive).
pub fn is_ptx(text: &[u8]) -> bool {
    let t = String::from_utf8_lossy(text);
    t.contains(".version") || t.contains(".target")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: u16, arch: u32, flags: u64, payload: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[0..2].copy_from_slice(&kind.to_le_bytes());
        e[4..8].copy_from_slice(&64u32.to_le_bytes());
        e[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        e[28..32].copy_from_slice(&arch.to_le_bytes());
        e[40..48].copy_from_slice(&flags.to_le_bytes());
        e.extend_from_slice(payload);
        e
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut f = vec![0u8; 16];
        f[0..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f[4..6].copy_from_slice(&1u16.to_le_bytes());
        f[6..8].copy_from_slice(&16u16.to_le_bytes());
        f[8..16].copy_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    #[test]
    fn fatbin_gives_the_cubin_for_the_sm_else_ptx() {
        let f = fatbin(&[
            entry(ENTRY_ELF, 80, 0, b"sm80"),
            entry(ENTRY_PTX, 70, 0, b"ptx70"),
            entry(ENTRY_ELF, 90, 0, b"sm90"),
            entry(ENTRY_PTX, 80, 0, b"ptx80"),
        ]);
        assert_eq!(kind(&f), Kind::Fatbin);
        assert_eq!(fatbin_size(&f).unwrap(), f.len());
        let b = |s: &'static [u8]| Cow::Borrowed(s);
        assert_eq!(choose(&f, 90).unwrap(), Chosen::Cubin(b(b"sm90")));
        assert_eq!(choose(&f, 89).unwrap(), Chosen::Ptx(b(b"ptx80")));
        assert_eq!(choose(&f, 75).unwrap(), Chosen::Ptx(b(b"ptx70")));
        assert_eq!(
            choose(&f, 60).unwrap_err().code,
            CUDA_ERROR_NO_BINARY_FOR_GPU
        );
        // Compressed entries whose data is not what the header says.
        for flag in [ENTRY_LZ4, ENTRY_ZSTD] {
            let mut e = entry(ENTRY_ELF, 90, flag, b"xxxxxxxx");
            e[16..20].copy_from_slice(&8u32.to_le_bytes());
            e[56..64].copy_from_slice(&100u64.to_le_bytes());
            let c = fatbin(&[e.clone()]);
            assert_eq!(choose(&c, 90).unwrap_err().code, CUDA_ERROR_INVALID_IMAGE);
            // A stored length past the payload, a plain length past any image.
            e[16..20].copy_from_slice(&9u32.to_le_bytes());
            assert_eq!(
                choose(&fatbin(&[e.clone()]), 90).unwrap_err().code,
                CUDA_ERROR_INVALID_IMAGE
            );
            e[16..20].copy_from_slice(&8u32.to_le_bytes());
            e[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
            assert_eq!(
                choose(&fatbin(&[e]), 90).unwrap_err().code,
                CUDA_ERROR_INVALID_IMAGE
            );
        }
        // An entry claiming more than the fatbin holds.
        let mut bad = fatbin(&[entry(ENTRY_ELF, 90, 0, b"sm90")]);
        bad[16 + 8] = 0xff;
        assert_eq!(choose(&bad, 90).unwrap_err().code, CUDA_ERROR_INVALID_IMAGE);
    }

    fn fixture(name: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/cubins/");
        std::fs::read(format!("{dir}{name}")).unwrap()
    }

    /// nvcc 13.0's fatbins of kernels.ptx (sm_90 cubin + compute_80 PTX) with
    /// `--compress-mode=speed` (LZ4 PTX), `=size` (zstd cubin and PTX) and the default (zstd
    /// PTX, plain cubin) give the same cubin and the PTX of `--compress-mode=none`.
    #[test]
    fn compressed_fatbin_entries_decompress_to_the_plain_ones() {
        let (default, none) = (
            fixture("kernels_default.fatbin"),
            fixture("kernels_ptx_none.fatbin"),
        );
        let (Chosen::Cubin(cubin), Chosen::Ptx(ptx)) =
            (choose(&default, 90).unwrap(), choose(&none, 89).unwrap())
        else {
            panic!("an sm_90 cubin, and compute_80 PTX");
        };
        assert!(matches!(cubin, Cow::Borrowed(_)) && matches!(ptx, Cow::Borrowed(_)));
        assert_eq!(kind(&cubin), Kind::Elf);
        assert!(is_ptx(&ptx));
        for name in [
            "kernels_speed.fatbin",
            "kernels_size.fatbin",
            "kernels_default.fatbin",
        ] {
            let f = fixture(name);
            assert_eq!(
                choose(&f, 90).unwrap(),
                Chosen::Cubin(cubin.clone()),
                "{name}"
            );
            let Chosen::Ptx(p) = choose(&f, 89).unwrap() else {
                panic!("{name}: sm_89 takes the PTX");
            };
            // The plain entry is padded to 8 bytes; the decompressed one is not.
            assert_eq!(&ptx[..p.len()], &p[..], "{name}");
            assert!(ptx[p.len()..].iter().all(|&b| b == 0), "{name}");
        }
        // A truncated compressed entry is an invalid image, not a panic.
        let mut cut = fixture("kernels_size.fatbin");
        let at = 16 + 64 + 100;
        cut[at..at + 200].fill(0x55);
        assert_eq!(choose(&cut, 90).unwrap_err().code, CUDA_ERROR_INVALID_IMAGE);
    }

    #[test]
    fn elf_size_matches_the_fixture_cubin() {
        let cubin = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
        ))
        .unwrap();
        assert_eq!(kind(&cubin), Kind::Elf);
        let (off, len) = elf_section_table(&cubin[..64]).unwrap();
        assert_eq!(
            elf_size(&cubin[..64], &cubin[off..off + len]).unwrap(),
            cubin.len()
        );
    }

    #[test]
    fn text_kinds() {
        assert_eq!(kind(b"\0"), Kind::Text);
        assert!(is_ptx(b".version 8.0\n.target sm_90\n"));
        assert!(!is_ptx(b"hello"));
    }
}
