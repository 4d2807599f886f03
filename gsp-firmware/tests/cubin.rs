//! Cubin parser tests against the fixture cubins in `tests/fixtures/cubins/`.
//!
//! The expected kernel facts in `cubin/facts.rs` were extracted from `cuobjdump -elf` (CUDA
//! 13.5) output by `tests/fixtures/cubins/cuobjdump_facts.py`, not from this parser.

use std::path::PathBuf;

use goblin::elf::Elf;
use nvbare_gsp_firmware::cubin::{
    Cubin, CubinError, IMAGE_ALIGN, IMAGE_TAIL_PAD, RelocTarget, STACK_SIZE_UNKNOWN, SectionKind,
    reloc, trap,
};

#[path = "cubin/facts.rs"]
mod facts;

/// One fixture's facts as cuobjdump printed them.
#[derive(Debug)]
pub struct CubinFacts {
    pub file: &'static str,
    pub sm: u32,
    pub abi: u8,
    pub relocatable: bool,
    pub kernels: &'static [KernelFacts],
    pub relocs: &'static [RelocFacts],
}

/// One kernel's facts as cuobjdump printed them.
#[derive(Debug)]
pub struct KernelFacts {
    pub name: &'static str,
    pub regcount: u32,
    /// `.text.<name>` `sh_info` bits 24..31 (0 in ABI v8 cubins).
    pub sh_info_regcount: u32,
    pub param_base: u32,
    pub param_size: u32,
    /// (ordinal, offset, size)
    pub params: &'static [(u32, u32, u32)],
    pub shared_size: u32,
    pub cbank0_size: u32,
    pub code_size: u64,
    pub frame_size: u32,
    pub min_stack_size: u32,
    pub max_threads: Option<[u32; 3]>,
    pub reqntid: Option<[u32; 3]>,
    pub num_barriers: u32,
}

/// One relocation of a loadable section as cuobjdump printed it.
#[derive(Debug)]
pub struct RelocFacts {
    pub section: &'static str,
    pub offset: u64,
    pub symbol: &'static str,
    pub r_type: &'static str,
    pub addend: i64,
}

const SETS: [&str; 7] = [
    "kernels",
    "reloc",
    "attrs",
    "globals_rel",
    "reloc_rel",
    "runtime",
    "assert",
];
const SMS: [u32; 5] = [80, 89, 90, 100, 120];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cubins")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn parse(name: &str) -> Cubin {
    Cubin::parse(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The raw bytes of section `name` in an ELF, read with goblin's full parser (an
/// independent path from `Cubin::parse`).
fn raw_section(bytes: &[u8], name: &str) -> Vec<u8> {
    let elf = Elf::parse(bytes).unwrap();
    let sh = elf
        .section_headers
        .iter()
        .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
        .unwrap_or_else(|| panic!("no section {name}"));
    bytes[sh.sh_offset as usize..(sh.sh_offset + sh.sh_size) as usize].to_vec()
}

/// File offset of section header `name`'s fields, for corrupting them.
fn section_header_offset(bytes: &[u8], name: &str) -> usize {
    let elf = Elf::parse(bytes).unwrap();
    let i = elf
        .section_headers
        .iter()
        .position(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
        .unwrap_or_else(|| panic!("no section {name}"));
    elf.header.e_shoff as usize + i * 64
}

#[test]
fn every_fixture_is_present_and_described() {
    for set in SETS {
        for sm in SMS {
            for cuda in [12, 13] {
                let f = format!("{set}_sm{sm}_cuda{cuda}.cubin");
                assert!(dir().join(&f).exists(), "{f} missing: run build.sh");
                assert!(facts::FACTS.iter().any(|c| c.file == f), "{f} has no facts");
            }
        }
    }
    assert_eq!(facts::FACTS.len(), SETS.len() * SMS.len() * 2);
}

#[test]
fn kernel_facts_match_cuobjdump() {
    for cf in facts::FACTS {
        let c = parse(cf.file);
        let f = cf.file;
        assert_eq!(c.sm, cf.sm, "{f}");
        assert_eq!(c.abi_version, cf.abi, "{f}");
        assert_eq!(c.os_abi, if cf.abi == 7 { 0x33 } else { 0x41 }, "{f}");
        assert_eq!(c.relocatable, cf.relocatable, "{f}");
        let mut names: Vec<_> = c.kernels.iter().map(|k| k.name.as_str()).collect();
        names.sort();
        let want: Vec<_> = cf.kernels.iter().map(|k| k.name).collect();
        assert_eq!(names, want, "{f}");
        for kf in cf.kernels {
            let k = c.kernel(kf.name).unwrap();
            let at = format!("{f}: {}", kf.name);
            assert_eq!(k.regcount, kf.regcount, "{at}");
            if kf.sh_info_regcount != 0 {
                assert_eq!(k.regcount, kf.sh_info_regcount, "{at}");
            }
            assert_eq!(k.param_base, kf.param_base, "{at}");
            assert_eq!(k.param_size, kf.param_size, "{at}");
            let params: Vec<_> = k
                .params
                .iter()
                .map(|p| (p.ordinal, p.offset, p.size))
                .collect();
            assert_eq!(params, kf.params, "{at}");
            assert_eq!(k.shared_size, kf.shared_size, "{at}");
            assert_eq!(k.cbank0_size, kf.cbank0_size, "{at}");
            assert_eq!(k.code_size, kf.code_size, "{at}");
            assert_eq!(k.frame_size, kf.frame_size, "{at}");
            assert_eq!(k.min_stack_size, kf.min_stack_size, "{at}");
            assert_eq!(k.local_size, kf.frame_size.max(kf.min_stack_size), "{at}");
            assert_eq!(k.max_block, kf.max_threads, "{at}");
            assert_eq!(k.required_block, kf.reqntid, "{at}");
            let limit = [kf.max_threads, kf.reqntid]
                .into_iter()
                .flatten()
                .map(|d| d[0] * d[1] * d[2])
                .min();
            assert_eq!(k.max_threads, limit, "{at}");
            assert_eq!(k.num_barriers, kf.num_barriers, "{at}");
        }
    }
}

#[test]
fn known_kernel_shapes() {
    // Spot checks a reader can verify against the PTX sources.
    let c = parse("kernels_sm90_cuda13.cubin");
    assert_eq!(c.sm, 90);
    assert_eq!(c.sass_version(), 0x90);
    let v = c.kernel("vector_add").unwrap();
    let p: Vec<_> = v.params.iter().map(|p| (p.offset, p.size)).collect();
    assert_eq!(p, [(0, 8), (8, 8), (16, 8), (24, 4)]);
    assert_eq!(v.param_size, 28);
    assert_eq!(v.param_base, 0x210); // sm_90 driver area
    assert!(c.kernel("empty").unwrap().params.is_empty());
    assert!(c.kernel("nope").is_none());
    let a = parse("attrs_sm89_cuda12.cubin");
    assert_eq!(a.sass_version(), 0x89);
    let s = a.kernel("smem_local").unwrap();
    // 4000 bytes of `tile`; sm_90 and later count the 1 KiB system-reserved area too.
    assert_eq!(s.shared_size, 4000);
    let h = parse("attrs_sm90_cuda12.cubin");
    assert_eq!(h.kernel("smem_local").unwrap().shared_size, 1024 + 4000);
    assert_eq!(s.local_size, 256);
    assert_eq!(s.required_block, Some([128, 1, 1]));
    assert_eq!(s.max_threads, Some(128));
    assert_eq!(s.num_barriers, 1);
    assert_eq!(s.param_base, 0x160); // sm_8x driver area
    let m = a.kernel("maxntid").unwrap();
    assert_eq!(m.max_threads, Some(256));
    let b = parse("attrs_sm120_cuda13.cubin");
    assert_eq!(b.sass_version(), 0xc0);
    assert_eq!(b.kernel("maxntid").unwrap().param_base, 0x380); // Blackwell driver area
}

#[test]
fn cuda12_and_cuda13_agree() {
    for set in SETS {
        for sm in SMS {
            let a = parse(&format!("{set}_sm{sm}_cuda12.cubin"));
            let b = parse(&format!("{set}_sm{sm}_cuda13.cubin"));
            assert_eq!(a.sm, b.sm);
            assert_eq!(a.kernels.len(), b.kernels.len(), "{set} sm_{sm}");
            for ka in &a.kernels {
                let kb = b.kernel(&ka.name).unwrap();
                let at = format!("{set} sm_{sm} {}", ka.name);
                assert_eq!(ka.regcount, kb.regcount, "{at}");
                assert_eq!(ka.params, kb.params, "{at}");
                assert_eq!(
                    (ka.param_base, ka.param_size),
                    (kb.param_base, kb.param_size),
                    "{at}"
                );
                assert_eq!(ka.shared_size, kb.shared_size, "{at}");
                assert_eq!(ka.local_size, kb.local_size, "{at}");
                assert_eq!(ka.cbank0_size, kb.cbank0_size, "{at}");
                assert_eq!(ka.max_threads, kb.max_threads, "{at}");
                assert_eq!(ka.num_barriers, kb.num_barriers, "{at}");
                let banks = |k: &nvbare_gsp_firmware::cubin::Kernel| {
                    k.const_banks
                        .iter()
                        .map(|b| (b.bank, b.size))
                        .collect::<Vec<_>>()
                };
                assert_eq!(banks(ka), banks(kb), "{at}");
            }
            let g = |c: &Cubin| {
                c.globals
                    .iter()
                    .map(|g| (g.name.clone(), g.size))
                    .collect::<Vec<_>>()
            };
            assert_eq!(g(&a), g(&b), "{set} sm_{sm}");
        }
    }
}

#[test]
fn image_layout() {
    for cf in facts::FACTS {
        let bytes = read(cf.file);
        let c = Cubin::parse(&bytes).unwrap();
        let mut end = 0;
        for s in &c.sections {
            assert_eq!(s.image_offset % IMAGE_ALIGN, 0, "{} {}", cf.file, s.name);
            assert!(s.image_offset >= end, "{} {} overlaps", cf.file, s.name);
            end = s.image_offset + s.size;
            assert!(!s.name.starts_with(".nv.shared"), "{}", s.name);
            assert!(!s.name.starts_with(".debug"), "{}", s.name);
        }
        assert_eq!(c.image_size() % IMAGE_ALIGN, 0);
        assert!(c.image_size() >= end + IMAGE_TAIL_PAD);
        let img = c.load_image(0x7f00_0000_0000).unwrap();
        assert_eq!(img.len() as u64, c.image_size());
        assert!(img[end as usize..].iter().all(|&b| b == 0));
        for k in &c.kernels {
            // Code is loaded verbatim (no relocation in .text of executables).
            let raw = raw_section(&bytes, &format!(".text.{}", k.name));
            if !cf.relocatable {
                assert_eq!(c.code(k, &img), &raw[..], "{} {}", cf.file, k.name);
            }
            assert_eq!(k.code_offset % 128, 0);
            for b in &k.const_banks {
                assert_ne!(b.bank, 0);
                assert_eq!(b.image_offset % IMAGE_ALIGN, 0);
            }
        }
        for s in &c.sections {
            if let SectionKind::Constant { bank } = s.kind {
                assert!(s.name.starts_with(&format!(".nv.constant{bank}")));
            }
        }
    }
    // Out-of-range code requests give empty slices, not panics.
    let c = parse("kernels_sm90_cuda13.cubin");
    assert!(c.code(&c.kernels[0], &[0u8; 16]).is_empty());
}

#[test]
fn relocations_match_cuobjdump() {
    for cf in facts::FACTS {
        let c = parse(cf.file);
        let mut got: Vec<_> = c
            .relocations
            .iter()
            .map(|r| {
                let sec = c.sections.iter().find(|s| s.name == r.section).unwrap();
                (
                    r.section.clone(),
                    r.image_offset - sec.image_offset,
                    r.symbol.clone(),
                    reloc::name(r.r_type).unwrap().to_string(),
                    r.addend,
                )
            })
            .collect();
        got.sort();
        let mut want: Vec<_> = cf
            .relocs
            .iter()
            .map(|r| {
                (
                    r.section.to_string(),
                    r.offset,
                    r.symbol.to_string(),
                    r.r_type.to_string(),
                    r.addend,
                )
            })
            .collect();
        want.sort();
        assert_eq!(got, want, "{}", cf.file);
    }
}

#[test]
fn r_cuda_64_in_constant_bank_4() {
    // `spin_forever` reads `spin_forever_release` through c[0x4][0x0]: the loader must put
    // the variable's GPU address there.
    for sm in SMS {
        for cuda in [12, 13] {
            let f = format!("kernels_sm{sm}_cuda{cuda}.cubin");
            let c = parse(&f);
            let g = c.global("spin_forever_release").unwrap();
            assert_eq!(g.size, 4);
            let global_sec = c.sections.iter().find(|s| s.name == ".nv.global").unwrap();
            assert_eq!(global_sec.kind, SectionKind::Global);
            assert!(g.image_offset >= global_sec.image_offset);
            let cb4 = c
                .sections
                .iter()
                .find(|s| s.name == ".nv.constant4")
                .unwrap();
            assert_eq!(cb4.kind, SectionKind::Constant { bank: 4 });
            let k = c.kernel("spin_forever").unwrap();
            assert!(
                k.const_banks
                    .iter()
                    .any(|b| b.bank == 4 && b.image_offset == cb4.image_offset)
            );
            for base in [0u64, 0x1_0000_0000, 0x7fff_ffff_f000] {
                let img = c.load_image(base).unwrap();
                let at = cb4.image_offset as usize;
                let v = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
                assert_eq!(v, base + g.image_offset, "{f} base {base:#x}");
                // The zero-filled global really is zero in the image.
                let go = g.image_offset as usize;
                assert_eq!(&img[go..go + 4], &[0, 0, 0, 0]);
            }
        }
    }
}

#[test]
fn initialised_globals_are_loaded() {
    let c = parse("reloc_sm90_cuda13.cubin");
    let t = c.global("table").unwrap();
    let img = c.load_image(0).unwrap();
    let o = t.image_offset as usize;
    let words: Vec<u32> = img[o..o + 16]
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(words, [1, 2, 3, 4]);
    assert!(c.global("counter").is_some());
    // Both globals are referenced from bank 4.
    let k = c.kernel("bump").unwrap();
    assert!(k.const_banks.iter().any(|b| b.bank == 4));
}

#[test]
fn abs32_lo_hi_relocations_patch_instructions() {
    for sm in SMS {
        for cuda in [12, 13] {
            let f = format!("globals_rel_sm{sm}_cuda{cuda}.cubin");
            let bytes = read(&f);
            let c = Cubin::parse(&bytes).unwrap();
            assert!(c.relocatable);
            let raw = raw_section(&bytes, ".text.read_globals");
            let text = c
                .sections
                .iter()
                .find(|s| s.name == ".text.read_globals")
                .unwrap();
            let base = 0x12_3456_7800u64; // high part non-zero, 256-aligned
            let img = c.load_image(base).unwrap();
            let mut patched = 0;
            for r in &c.relocations {
                let g = c.global(&r.symbol).unwrap();
                let addr = base + g.image_offset;
                let at = r.image_offset as usize + 4;
                let field = u32::from_le_bytes(img[at..at + 4].try_into().unwrap());
                match r.r_type {
                    reloc::R_CUDA_ABS32_LO_32 => assert_eq!(field, addr as u32, "{f}"),
                    reloc::R_CUDA_ABS32_HI_32 => assert_eq!(field, (addr >> 32) as u32, "{f}"),
                    t => panic!("{f}: unexpected relocation {t:#x}"),
                }
                assert!(matches!(r.target, RelocTarget::Image(_)));
                patched += 1;
            }
            assert_eq!(patched, 4, "{f}");
            // Everything outside the patched words is the file's code.
            let mut expect = raw.clone();
            for r in &c.relocations {
                let o = (r.image_offset - text.image_offset) as usize + 4;
                let at = r.image_offset as usize + 4;
                expect[o..o + 4].copy_from_slice(&img[at..at + 4]);
            }
            let t0 = text.image_offset as usize;
            assert_eq!(&img[t0..t0 + raw.len()], &expect[..], "{f}");
            assert_ne!(
                &img[t0..t0 + raw.len()],
                &raw[..],
                "{f}: nothing was patched"
            );
        }
    }
}

#[test]
fn call_relocations_point_at_the_callee() {
    // reloc_rel's `bump` calls `scale` in another section of a `ptxas -c` object: ptxas leaves
    // the call's target to the loader (R_CUDA_ABS47_34 before sm_90, R_CUDA_ABS55_16_34 from
    // sm_90; both layouts are checked against nvdisasm in the `reloc` unit tests).
    for sm in SMS {
        for cuda in [12, 13] {
            let f = format!("reloc_rel_sm{sm}_cuda{cuda}.cubin");
            let bytes = read(&f);
            let c = Cubin::parse(&bytes).unwrap();
            let want = if sm < 90 {
                reloc::R_CUDA_ABS47_34
            } else {
                reloc::R_CUDA_ABS55_16_34
            };
            let calls: Vec<_> = c.relocations.iter().filter(|r| r.r_type == want).collect();
            assert_eq!(calls.len(), 1, "{f}");
            let call = calls[0];
            assert_eq!(call.section, ".text.bump", "{f}");
            let RelocTarget::Image(callee) = call.target else {
                panic!("{f}: {:?}", call.target);
            };
            let scale = c.sections.iter().find(|s| s.name == ".text.scale").unwrap();
            assert_eq!(callee, scale.image_offset, "{f}");
            let text = c.sections.iter().find(|s| s.name == ".text.bump").unwrap();
            let raw = raw_section(&bytes, ".text.bump");
            for base in [0u64, 0x12_3456_7800, 0x7fff_ffff_f000] {
                let img = c.load_image(base).unwrap();
                let at = call.image_offset as usize;
                let insn = &img[at..at + 16];
                let target = reloc::read(want, insn).unwrap();
                assert_eq!(
                    target as i64,
                    (base + callee) as i64 + call.addend,
                    "{f} base {base:#x}"
                );
                // Only the call's instruction changed (and the ABS32 pair, if any).
                let t0 = text.image_offset as usize;
                let o = at - t0;
                let mut expect = raw.clone();
                expect[o..o + 16].copy_from_slice(insn);
                for r in c.relocations.iter().filter(|r| r.section == ".text.bump") {
                    if let Some((a, w)) = reloc::span(r.r_type) {
                        let ro = (r.image_offset - text.image_offset + a) as usize;
                        let ri = (r.image_offset + a) as usize;
                        expect[ro..ro + w as usize].copy_from_slice(&img[ri..ri + w as usize]);
                    }
                }
                assert_eq!(&img[t0..t0 + raw.len()], &expect[..], "{f}");
            }
        }
    }
}

#[test]
fn misaligned_load_address_is_rejected() {
    let c = parse("kernels_sm90_cuda13.cubin");
    assert_eq!(
        c.load_image(0x1080),
        Err(CubinError::MisalignedBase { base_va: 0x1080 })
    );
}

#[test]
fn header_errors() {
    let good = read("kernels_sm90_cuda13.cubin");
    let patch = |at: usize, v: &[u8]| {
        let mut b = good.clone();
        b[at..at + v.len()].copy_from_slice(v);
        Cubin::parse(&b)
    };
    assert_eq!(
        Cubin::parse(b"PTX!"),
        Err(CubinError::Truncated {
            what: "ELF identification"
        })
    );
    assert_eq!(patch(0, b"\x7fELG"), Err(CubinError::NotElf));
    assert_eq!(patch(4, &[1]), Err(CubinError::WrongClass { class: 1 }));
    assert_eq!(patch(5, &[2]), Err(CubinError::WrongEndian { data: 2 }));
    assert_eq!(
        patch(18, &62u16.to_le_bytes()),
        Err(CubinError::WrongMachine { machine: 62 })
    );
    assert_eq!(
        patch(16, &3u16.to_le_bytes()),
        Err(CubinError::UnsupportedType { e_type: 3 })
    );
    assert_eq!(
        patch(8, &[7]),
        Err(CubinError::UnsupportedAbi {
            os_abi: 0x41,
            abi_version: 7
        })
    );
    // Section header table past the end of the file.
    assert!(matches!(
        patch(0x28, &(good.len() as u64).to_le_bytes()),
        Err(CubinError::Elf { .. })
    ));
    // Every message says something useful.
    for e in [patch(18, &62u16.to_le_bytes()), patch(8, &[9])] {
        assert!(e.unwrap_err().to_string().len() > 30);
    }
}

#[test]
fn truncated_files_are_errors() {
    for f in ["kernels_sm89_cuda12.cubin", "reloc_sm120_cuda13.cubin"] {
        let good = read(f);
        // What the parser must have: every section's contents and the section header table
        // (program headers, which it does not read, may come after them).
        let elf = Elf::parse(&good).unwrap();
        let needed = elf
            .section_headers
            .iter()
            .filter(|s| s.sh_type != goblin::elf::section_header::SHT_NOBITS)
            .map(|s| s.sh_offset + s.sh_size)
            .chain([elf.header.e_shoff + 64 * u64::from(elf.header.e_shnum)])
            .max()
            .unwrap() as usize;
        assert!(Cubin::parse(&good[..needed]).is_ok());
        for len in 0..needed {
            if let Ok(c) = Cubin::parse(&good[..len]) {
                // Only the trailing bytes after all sections and headers may be dropped.
                panic!("{f} truncated to {len} parsed: {} kernels", c.kernels.len());
            }
        }
    }
}

#[test]
fn register_count_is_the_larger_of_nv_info_and_sh_info() {
    // ABI v7 (CUDA 12, sm_89): `.text` sh_info bits 24..31 hold the register count too. They
    // can differ from EIATTR_REGCOUNT, which also counts called functions (`nvcc -G`); a
    // launch needs the larger, whichever it is.
    let good = read("kernels_sm89_cuda12.cubin");
    let c = Cubin::parse(&good).unwrap();
    let regs = c.kernel("vector_add").unwrap().regcount;
    let sh = section_header_offset(&good, ".text.vector_add");
    let info_at = sh + 44; // sh_info
    let info = u32::from_le_bytes(good[info_at..info_at + 4].try_into().unwrap());
    assert_eq!(info >> 24, regs);
    for sh_regs in [regs + 2, regs - 2] {
        let mut b = good.clone();
        b[info_at..info_at + 4]
            .copy_from_slice(&((info & 0xff_ffff) | (sh_regs << 24)).to_le_bytes());
        let c = Cubin::parse(&b).unwrap();
        assert_eq!(c.kernel("vector_add").unwrap().regcount, regs.max(sh_regs));
    }
}

/// Overwrites the attribute byte of every `attr` record in `.nv.info` (records are walked
/// by hand here, independently of the parser).
fn rewrite_nv_info(bytes: &mut [u8], section: &str, f: impl Fn(&mut [u8])) {
    let sh = section_header_offset(bytes, section);
    let off = u64::from_le_bytes(bytes[sh + 24..sh + 32].try_into().unwrap()) as usize;
    let size = u64::from_le_bytes(bytes[sh + 32..sh + 40].try_into().unwrap()) as usize;
    f(&mut bytes[off..off + size]);
}

/// Calls `f` with every record of `section` (format, attribute, u16, payload), walked by hand.
fn rewrite_records(bytes: &mut [u8], section: &str, f: impl Fn(&mut [u8])) {
    rewrite_nv_info(bytes, section, |d| {
        let mut i = 0;
        while i + 4 <= d.len() {
            let len = 4 + if d[i] == 4 {
                u16::from_le_bytes([d[i + 2], d[i + 3]]) as usize
            } else {
                0
            };
            let end = (i + len).min(d.len());
            f(&mut d[i..end]);
            i += len;
        }
    });
}

#[test]
fn compile_time_cluster_dimensions_are_read() {
    // `maxntid`'s EIATTR_MAX_THREADS record retagged as EIATTR_CTA_PER_CLUSTER (0x3d, the same
    // 12-byte x, y, z payload nvcc writes for `__cluster_dims__`).
    let good = read("attrs_sm90_cuda13.cubin");
    let c = Cubin::parse(&good).unwrap();
    let m = c.kernel("maxntid").unwrap();
    assert_eq!(m.cluster_dims, None);
    let dims = m.max_block.unwrap();
    let mut b = good.clone();
    rewrite_records(&mut b, ".nv.info.maxntid", |r| {
        if r[0] == 4 && r[1] == 0x05 {
            r[1] = 0x3d;
        }
    });
    let c = Cubin::parse(&b).unwrap();
    let m = c.kernel("maxntid").unwrap();
    assert_eq!((m.cluster_dims, m.max_block), (Some(dims), None));
    // An 8-byte payload (EIATTR_PARAM_CBANK's, retagged) is a malformed attribute.
    let mut b = good.clone();
    rewrite_records(&mut b, ".nv.info.maxntid", |r| {
        if r[0] == 4 && r[1] == 0x0a {
            r[1] = 0x3d;
        }
    });
    assert!(
        matches!(
            Cubin::parse(&b),
            Err(CubinError::BadAttribute {
                attribute: 0x3d,
                ..
            })
        ),
        "{:?}",
        Cubin::parse(&b)
    );
}

#[test]
fn a_stack_ptxas_could_not_size_is_marked_unknown() {
    // Recursion makes ptxas write EIATTR_MIN_STACK_SIZE 0xffffffff ("cannot be statically
    // determined"): the kernel's need is its frame plus the device's stack limit (added at
    // launch), not a 4 GiB stack that no launch could have.
    let good = read("kernels_sm90_cuda13.cubin");
    let mut b = good.clone();
    rewrite_records(&mut b, ".nv.info", |r| {
        if r[0] == 4 && r[1] == 0x12 {
            r[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        }
    });
    let (c, before) = (Cubin::parse(&b).unwrap(), Cubin::parse(&good).unwrap());
    for (k, was) in c.kernels.iter().zip(&before.kernels) {
        assert_eq!(k.min_stack_size, STACK_SIZE_UNKNOWN, "{}", k.name);
        assert!(k.stack_unknown && !was.stack_unknown, "{}", k.name);
        assert_eq!(k.local_size, was.frame_size, "{}", k.name);
    }
}

#[test]
fn missing_register_count_is_an_error() {
    // ABI v8: no register count in sh_info, so removing EIATTR_REGCOUNT leaves none.
    let mut b = read("kernels_sm90_cuda13.cubin");
    rewrite_records(&mut b, ".nv.info", |r| {
        if r[1] == 0x2f {
            r[1] = 0x01; // EIATTR_PAD
        }
    });
    match Cubin::parse(&b) {
        Err(CubinError::MissingAttribute {
            attribute: "EIATTR_REGCOUNT",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_attributes_are_errors() {
    let good = read("kernels_sm90_cuda13.cubin");
    // Unknown EIFMT format byte.
    let mut b = good.clone();
    rewrite_nv_info(&mut b, ".nv.info.add1", |d| d[0] = 9);
    assert!(matches!(
        Cubin::parse(&b),
        Err(CubinError::BadAttribute { .. })
    ));
    // An SVAL record whose size runs past the end of the section.
    let mut b = good.clone();
    rewrite_nv_info(&mut b, ".nv.info.add1", |d| {
        d[0] = 4;
        d[2..4].copy_from_slice(&0xfff0u16.to_le_bytes());
    });
    assert!(matches!(
        Cubin::parse(&b),
        Err(CubinError::BadAttribute { .. })
    ));
    // A KPARAM_INFO that points outside the parameter area.
    let mut b = good.clone();
    rewrite_records(&mut b, ".nv.info.add1", |r| {
        if r[0] == 4 && r[1] == 0x17 {
            r[10..12].copy_from_slice(&0x4000u16.to_le_bytes());
        }
    });
    assert!(matches!(
        Cubin::parse(&b),
        Err(CubinError::BadAttribute {
            attribute: 0x17,
            ..
        })
    ));
}

#[test]
fn unknown_relocation_type_in_loaded_section() {
    // Turn the R_CUDA_64 in .rela.nv.constant4 into type 0x70 (R_CUDA_UNIFIED32_LO_32).
    let mut b = read("kernels_sm90_cuda13.cubin");
    let sh = section_header_offset(&b, ".rela.nv.constant4");
    let off = u64::from_le_bytes(b[sh + 24..sh + 32].try_into().unwrap()) as usize;
    b[off + 8] = 0x70;
    let c = Cubin::parse(&b).unwrap();
    match c.load_image(0) {
        Err(CubinError::UnsupportedRelocation {
            r_type: 0x70,
            name: Some("R_CUDA_UNIFIED32_LO_32"),
            section,
            offset: 0,
        }) => assert_eq!(section, ".nv.constant4"),
        other => panic!("{other:?}"),
    }
    // Out-of-range relocation offset.
    b[off + 8] = 0x02;
    b[off..off + 8].copy_from_slice(&0x100u64.to_le_bytes());
    assert!(matches!(
        Cubin::parse(&b),
        Err(CubinError::RelocationOutOfBounds { .. })
    ));
}

#[test]
fn byte_flips_never_panic() {
    // A cheap stand-in for the fuzzer in CI: flip every byte of the headers and tables.
    let good = read("attrs_sm90_cuda13.cubin");
    for i in 0..good.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut b = good.clone();
            b[i] ^= x;
            if let Ok(c) = Cubin::parse(&b)
                && c.image_size() < 1 << 24
            {
                let _ = c.load_image(0);
            }
        }
    }
}

#[test]
fn symbols_the_cuda_driver_provides_are_named_for_what_they_do() {
    let msg = |s: &str| {
        CubinError::UndefinedSymbol {
            symbol: s.to_string(),
        }
        .to_string()
    };
    for (sym, feature) in [
        ("vprintf", "printf"),
        ("__assertfail", "assert"),
        ("malloc", "malloc/free"),
        ("free", "malloc/free"),
    ] {
        let m = msg(sym);
        assert!(m.contains(feature) && m.contains("CUDA driver"), "{m}");
        assert!(!m.contains("nvlink"), "{m}");
    }
    assert!(msg("my_extern_function").contains("nvlink"));
    let m = CubinError::RelocationValue {
        symbol: "f".into(),
        name: reloc::name(reloc::R_CUDA_ABS47_34),
        value: 1 << 50,
        error: reloc::FieldError::TooWide,
    }
    .to_string();
    assert!(
        m.contains("R_CUDA_ABS47_34") && m.contains("0x4000000000000"),
        "{m}"
    );
}

#[test]
fn assert_calls_reach_a_trap_of_our_own() {
    for sm in SMS {
        for cuda in [12, 13] {
            let f = format!("assert_sm{sm}_cuda{cuda}.cubin");
            let c = parse(&f);
            let trap = c
                .sections
                .iter()
                .find(|s| s.name == trap::TRAP_SECTION)
                .unwrap_or_else(|| panic!("{f}: no trap section"));
            assert_eq!(trap.kind, SectionKind::Code);
            assert_eq!(trap.image_offset % IMAGE_ALIGN, 0);
            assert!(
                c.image_size() >= trap.image_offset + trap.size + IMAGE_TAIL_PAD,
                "{f}"
            );
            let calls: Vec<_> = c
                .relocations
                .iter()
                .filter(|r| r.symbol == trap::ASSERTFAIL)
                .collect();
            assert!(!calls.is_empty(), "{f}");
            let base = 0x12_3456_7800u64;
            let img = c.load_image(base).unwrap();
            let t = trap.image_offset as usize;
            assert_eq!(&img[t..t + 32], &trap::code(sm).unwrap(), "{f}");
            for r in calls {
                assert_eq!(r.target, RelocTarget::Image(trap.image_offset), "{f}");
                let (at, w) = reloc::span(r.r_type).unwrap();
                let p = (r.image_offset + at) as usize;
                let v = reloc::read(r.r_type, &img[p..p + w as usize]).unwrap();
                assert_eq!(v, base + trap.image_offset, "{f}");
            }
        }
    }
    // Without an encoding for the SM the symbol stays undefined, and loading names assert.
    assert_eq!(trap::code(75), None);
    assert!(trap::code(90).is_some() && trap::code(121).is_some() && trap::code(86).is_some());
}
