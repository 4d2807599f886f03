//! A VBIOS ROM synthesizer for tests and the simulator: no real VBIOS dumps are available or
//! committable, so ROMs are built here following the documented layout (OpenRM
//! `pci_exp_table.h`, `kernel_gsp_fwsec.c`, `kernel_gsp_frts_tu102.c`). Offsets are written
//! independently of the parser's code.
//!
//! The ROM: `[IFR header?][PC-AT base image with the BIT][EFI image][0xE0 image with the falcon
//! ucode table, an FWSEC descriptor v3 with three signatures (or a v2 without), and the ucode]`, then 0xff padding
//! as the PROM window reads past the ROM. The FWSEC ucode is a pattern, not runnable code.
#![allow(missing_docs)]

use std::vec;
use std::vec::Vec;

pub const BASE_LEN: usize = 0x1000;
pub const EFI_LEN: usize = 0x800;
pub const SIG_FILLS: [u8; 3] = [0xa0, 0xa1, 0xa3];
pub const SIG_VERSIONS: u16 = 0b1011;
pub const IMEM: usize = 0x400;
pub const DMEM: usize = 0x600;
pub const INTERFACE: usize = 0x100;
pub const MAPPER: usize = 0x200;
pub const CMD_IN: usize = 0x280;
pub const PKC: usize = 0x300;
/// v2: where the secure half of IMEM starts (`IMEMSecBase`).
pub const IMEM_SEC_BASE: usize = 0x200;
/// `FALCON_UCODE_DESC_V2_SIZE_60`.
pub const DESC_V2_SIZE: usize = 60;

/// Knobs for making broken ROMs; [`RomSpec::default`] is a well-formed ROM.
#[derive(Debug, Clone)]
pub struct RomSpec {
    pub ifr: Option<u8>,
    pub token_size: u8,
    pub desc_version: u8,
    pub appif_entries: Vec<(u32, u32)>,
    pub cmd_in_size: u32,
    pub cmd_in_offset: u32,
    pub stored_size: u32,
    pub bit_checksum_ok: bool,
    pub npde_last_flag: bool,
    /// v2 only: `DMEMOffset` (the data follows the code).
    pub v2_dmem_offset: u32,
}

impl Default for RomSpec {
    fn default() -> Self {
        RomSpec {
            ifr: None,
            token_size: 8,
            desc_version: 3,
            appif_entries: vec![(1, 0x180), (4, MAPPER as u32), (7, 0)],
            cmd_in_size: 0x80,
            cmd_in_offset: CMD_IN as u32,
            stored_size: (IMEM + DMEM) as u32,
            bit_checksum_ok: true,
            npde_last_flag: true,
            v2_dmem_offset: IMEM as u32,
        }
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// One PCI ROM image of `len` bytes with PCIR at 0x40 and NPDE at 0x60.
fn image(len: usize, code_type: u8, last: bool, npde_last_flag: bool) -> Vec<u8> {
    let mut b = vec![0u8; len];
    put16(&mut b, 0, 0xaa55);
    put16(&mut b, 0x18, 0x40);
    // PCIR
    b[0x40..0x44].copy_from_slice(b"PCIR");
    put16(&mut b, 0x44, 0x10de);
    put16(&mut b, 0x46, 0x2684);
    put16(&mut b, 0x4a, 0x18);
    b[0x4c] = 3;
    b[0x4f] = 3; // class 0x030000
    put16(&mut b, 0x50, (len / 512) as u16);
    b[0x54] = code_type;
    b[0x55] = if last { 0x80 } else { 0 };
    // NPDE at (0x40 + 0x18 + 15) & !15 = 0x60
    b[0x60..0x64].copy_from_slice(b"NPDE");
    put16(&mut b, 0x64, 0x101);
    put16(&mut b, 0x66, if npde_last_flag { 0x0c } else { 0x08 });
    put16(&mut b, 0x68, (len / 512) as u16);
    b[0x6a] = if last { 0x80 } else { 0 };
    b
}

/// The signature for `index`.
pub fn signature(index: usize) -> Vec<u8> {
    vec![SIG_FILLS[index]; 384]
}

/// The unpatched ucode image (IMEM then DMEM) the ROM carries.
pub fn ucode(spec: &RomSpec) -> Vec<u8> {
    let mut u: Vec<u8> = (0..IMEM + DMEM).map(|i| (i * 7) as u8).collect();
    let d = IMEM;
    // Application interface header {version 1, header 4, entry 8, count}
    u[d + INTERFACE] = 1;
    u[d + INTERFACE + 1] = 4;
    u[d + INTERFACE + 2] = 8;
    u[d + INTERFACE + 3] = spec.appif_entries.len() as u8;
    for (i, &(id, off)) in spec.appif_entries.iter().enumerate() {
        put32(&mut u, d + INTERFACE + 4 + 8 * i, id);
        put32(&mut u, d + INTERFACE + 8 + 8 * i, off);
    }
    // DMEM mapper v3
    let m = d + MAPPER;
    u[m..m + 4].copy_from_slice(b"DMAP");
    put16(&mut u, m + 4, 3);
    put16(&mut u, m + 6, 64);
    put32(&mut u, m + 8, spec.cmd_in_offset);
    put32(&mut u, m + 12, spec.cmd_in_size);
    put32(&mut u, m + 44, 0); // init_cmd
    u
}

/// Offsets of interest in a built ROM.
#[derive(Debug, Clone)]
pub struct Rom {
    pub bytes: Vec<u8>,
    /// Where the FWSEC image (IMEM) starts in `bytes`.
    pub ucode_at: usize,
    pub ext_offset: usize,
}

/// FALCON_UCODE_DESC_V3 (44 bytes) and three signatures at `desc`; returns the size.
fn write_desc_v3(ext: &mut [u8], desc: usize, spec: &RomSpec) -> usize {
    let desc_size = 44 + 3 * 384;
    let vdesc = 1 | ((spec.desc_version as u32) << 8) | ((desc_size as u32) << 16);
    put32(ext, desc, vdesc);
    put32(ext, desc + 4, spec.stored_size);
    put32(ext, desc + 8, PKC as u32);
    put32(ext, desc + 12, INTERFACE as u32);
    put32(ext, desc + 16, 0); // IMEMPhysBase
    put32(ext, desc + 20, IMEM as u32);
    put32(ext, desc + 24, 0); // IMEMVirtBase
    put32(ext, desc + 28, 0); // DMEMPhysBase
    put32(ext, desc + 32, DMEM as u32);
    put16(ext, desc + 36, 0x400); // EngineIdMask (GSP)
    ext[desc + 38] = 9; // UcodeId
    ext[desc + 39] = 3; // SignatureCount
    put16(ext, desc + 40, SIG_VERSIONS);
    for i in 0..3 {
        let at = desc + 44 + 384 * i;
        ext[at..at + 384].copy_from_slice(&signature(i));
    }
    desc_size
}

/// FALCON_UCODE_DESC_V2 (60 bytes, no signatures) at `desc`; returns the size. The ucode is
/// the same bytes as v3's: IMEM `[0, IMEM)` (the upper half secure), DMEM after it.
fn write_desc_v2(ext: &mut [u8], desc: usize, spec: &RomSpec) -> usize {
    let vdesc = 1 | ((spec.desc_version as u32) << 8) | ((DESC_V2_SIZE as u32) << 16);
    put32(ext, desc, vdesc);
    put32(ext, desc + 4, spec.stored_size);
    put32(ext, desc + 8, spec.stored_size); // UncompressedSize
    put32(ext, desc + 12, 0); // VirtualEntry
    put32(ext, desc + 16, INTERFACE as u32);
    put32(ext, desc + 20, 0); // IMEMPhysBase
    put32(ext, desc + 24, IMEM as u32); // IMEMLoadSize
    put32(ext, desc + 28, 0); // IMEMVirtBase
    put32(ext, desc + 32, IMEM_SEC_BASE as u32);
    put32(ext, desc + 36, (IMEM - IMEM_SEC_BASE) as u32); // IMEMSecSize
    put32(ext, desc + 40, spec.v2_dmem_offset); // DMEMOffset
    put32(ext, desc + 44, 0); // DMEMPhysBase
    put32(ext, desc + 48, DMEM as u32);
    DESC_V2_SIZE
}

/// Builds: [IFR?][base image with BIT][EFI image][0xE0 image with the falcon ucode table].
pub fn build(spec: &RomSpec) -> Rom {
    let mut base = image(BASE_LEN, 0x00, false, spec.npde_last_flag);
    let efi = image(EFI_LEN, 0x03, false, spec.npde_last_flag);
    let ext_len = 0x1800;
    let mut ext = image(ext_len, 0xe0, true, spec.npde_last_flag);

    // The E0 image: table at 0x100, descriptor at 0x200, ucode after desc + signatures.
    let ext_offset = BASE_LEN + EFI_LEN;
    let expansion = ext_offset - BASE_LEN; // OpenRM: ext offset - base size
    let table = 0x100;
    ext[table] = 1; // Version
    ext[table + 1] = 6; // HeaderSize
    ext[table + 2] = 6; // EntrySize
    ext[table + 3] = 2; // EntryCount
    ext[table + 4] = 3;
    ext[table + 5] = 44;
    let desc = 0x200;
    let desc_abs = ext_offset + desc;
    // entry 0: FWSEC_DBG pointing nowhere useful; entry 1: FWSEC_PROD.
    ext[table + 6] = 0x45;
    put32(&mut ext, table + 8, 0xdead);
    ext[table + 12] = 0x85;
    put32(&mut ext, table + 14, (desc_abs - expansion) as u32);
    let desc_size = if spec.desc_version == 2 {
        write_desc_v2(&mut ext, desc, spec)
    } else {
        write_desc_v3(&mut ext, desc, spec)
    };
    let ucode_rel = desc + desc_size;
    let u = ucode(spec);
    ext[ucode_rel..ucode_rel + u.len()].copy_from_slice(&u);

    // BIT in the base image at 0x1b0: 12-byte header + 2 tokens.
    let bit = 0x1b0;
    put16(&mut base, bit, 0xb8ff);
    base[bit + 2..bit + 6].copy_from_slice(b"BIT\0");
    put16(&mut base, bit + 6, 0x0100);
    base[bit + 8] = 12;
    base[bit + 9] = spec.token_size;
    base[bit + 10] = 2;
    let sum = base[bit..bit + 11]
        .iter()
        .fold(0u8, |s, &b| s.wrapping_add(b));
    base[bit + 11] = 0u8
        .wrapping_sub(sum)
        .wrapping_add(if spec.bit_checksum_ok { 0 } else { 1 });
    let biosdata = 0x300;
    let falcon = 0x310;
    let tok = |i: usize| bit + 12 + i * spec.token_size as usize;
    let write_token = |base: &mut Vec<u8>, i: usize, id: u8, ver: u8, size: u16, ptr: u32| {
        let t = tok(i);
        base[t] = id;
        base[t + 1] = ver;
        put16(base, t + 2, size);
        if spec.token_size >= 8 {
            put32(base, t + 4, ptr);
        } else {
            put16(base, t + 4, ptr as u16);
        }
    };
    write_token(&mut base, 0, 0x42, 2, 8, biosdata as u32);
    write_token(&mut base, 1, 0x70, 2, 4, falcon as u32);
    put32(&mut base, biosdata, 0x9502_1200);
    base[biosdata + 4] = 0x07;
    put32(&mut base, falcon, (ext_offset + table - expansion) as u32);

    let mut rom = Vec::new();
    let mut prefix = 0;
    if let Some(v) = spec.ifr {
        // IFR header, then the PCI ROM at 0x400.
        prefix = 0x400;
        let mut ifr = vec![0u8; prefix];
        ifr[0..4].copy_from_slice(b"NVGI");
        match v {
            1 | 2 => {
                let ext = 0x40u32;
                put32(&mut ifr, 4, ((v as u32) << 8) | (ext << 16));
                put32(&mut ifr, ext as usize + 4, prefix as u32);
            }
            _ => {
                // v3: total data size -> flash status offset; ROM directory 4 KiB after it.
                // Keep the directory inside the prefix region by using a larger prefix.
                put32(&mut ifr, 4, 3 << 8);
                put32(&mut ifr, 8, 0x20);
                put32(&mut ifr, 0x20, 0); // flash status offset 0 -> directory at 0x1000
            }
        }
        if v >= 3 {
            prefix = 0x2000;
            ifr.resize(prefix, 0);
            ifr[0x1000..0x1004].copy_from_slice(b"RFRD");
            put32(&mut ifr, 0x1008, prefix as u32);
        }
        rom.extend_from_slice(&ifr);
    }
    rom.extend_from_slice(&base);
    rom.extend_from_slice(&efi);
    rom.extend_from_slice(&ext);
    // The PROM window reads past the ROM: 0xff fill.
    rom.resize(rom.len() + 0x800, 0xff);
    Rom {
        bytes: rom,
        ucode_at: prefix + ext_offset + ucode_rel,
        ext_offset,
    }
}
