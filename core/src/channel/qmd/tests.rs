extern crate std;
use std::format;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

const VERSIONS: [QmdVersion; 4] = [
    QmdVersion::V02_02,
    QmdVersion::V03_00,
    QmdVersion::V04_00,
    QmdVersion::V05_00,
];

/// The name-based builder the typed setters replaced, kept as the reference they must
/// match bit for bit: every field set through the name table ([`Qmd::set`]).
mod by_name;

/// QMD V02_02 (Turing): header values, what differs from V03, bad input.
mod v02;

/// A launch description from proptest's numbers: mostly valid, sometimes not (misaligned,
/// too large), so errors are compared too.
fn arb_desc() -> impl Strategy<Value = LaunchDesc> {
    let addr = prop_oneof![
        (0u64..1 << 16).prop_map(|a| 0x10_0000_0000 + (a << 8)),
        any::<u64>().prop_map(|a| a & ((1 << 49) - 1)),
        any::<u64>(),
    ];
    (
        (
            addr.clone(),
            0u32..600,
            any::<u32>(),
            0u32..2048,
            0u32..0x3_0000,
        ),
        (
            [1u32..1100, 1..70, 1..70],
            [1u32..0x1_0000, 1..0x1_1000, 1..0x1_1000],
        ),
        proptest::collection::vec(proptest::option::of((addr.clone(), 0u32..0x1_2000)), 8),
        (0u32..0x1000, 0u32..0x2000, 0u32..40, 0u32..0x140),
        (
            [
                proptest::option::of((addr.clone(), any::<u64>())),
                proptest::option::of((addr.clone(), any::<u64>())),
            ],
            proptest::option::of(addr),
            [0u32..70, 0..70, 0..70],
        ),
    )
        .prop_map(|(p, shape, cbufs, mem, (release, dependent_qmd, sm))| {
            let mut d = LaunchDesc {
                program_address: p.0,
                register_count: p.1,
                program_size: p.2 % 0x3_0000,
                sass_version: p.3 % 300,
                shared_memory_size: p.4 & !0x7f | (p.4 & 1) << 6,
                block: shape.0,
                grid: shape.1,
                shader_local_memory_low_size: mem.0 & !0xf,
                shader_local_memory_high_size: mem.1,
                barrier_count: mem.2,
                release,
                dependent_qmd,
                sm_config: SmSharedConfig {
                    min: sm[0],
                    max: sm[1],
                    target: sm[2],
                },
                ..LaunchDesc::default()
            };
            let _ = mem.3;
            for (slot, cb) in d.cbufs.iter_mut().zip(cbufs) {
                *slot = cb;
            }
            d
        })
}

proptest! {
    #[test]
    fn typed_build_equals_the_name_table_builder(d in arb_desc()) {
        for v in VERSIONS {
            let typed = Qmd::build(v, &d);
            prop_assert_eq!(&typed, &by_name::build(v, &d), "{:?}", v);
            if let Ok(q) = typed {
                prop_assert_eq!(q.launch_desc(), by_name::launch_desc(&q), "{:?}", v);
                let mut a = q.clone();
                let mut b = q;
                let next = d.program_address & !0xff;
                prop_assert_eq!(a.schedule_after(next), by_name::schedule_after(&mut b, next));
                prop_assert_eq!(a, b, "{:?}", v);
            }
        }
    }
}

/// The typed fields of layout `L`, by the role the setters give them.
fn roles<L: QmdLayout>() -> Vec<QmdField> {
    let mut f = Vec::new();
    f.extend([L::QMD_MAJOR_VERSION, L::QMD_MINOR_VERSION]);
    f.extend(L::GRID);
    f.extend(L::CTA_THREAD_DIMENSION);
    f.extend([L::REGISTER_COUNT, L::BARRIER_COUNT, L::SASS_VERSION]);
    f.push(L::SHARED_MEMORY_SIZE);
    f.extend(L::SM_CONFIG_SHARED_MEM_SIZE);
    f.extend(L::SHADER_LOCAL_MEMORY_SIZE);
    f.extend(L::PROGRAM_ADDRESS);
    f.extend(L::PROGRAM_PREFETCH.into_iter().flatten());
    f.extend(L::CONSTANT_BUFFER_ADDR_LOWER);
    f.extend(L::CONSTANT_BUFFER_ADDR_UPPER);
    f.extend(L::CONSTANT_BUFFER_SIZE_SHIFTED4);
    f.extend(L::CONSTANT_BUFFER_VALID);
    f.extend(L::CONSTANT_BUFFER_INVALIDATE);
    if let Some((a, b)) = L::CONSTANT_BUFFER_PREFETCH_PRE {
        f.extend([a, b]);
    }
    for r in L::RELEASE {
        f.extend(r.address);
        f.push(r.payload);
        f.extend(r.payload_upper);
        f.extend(r.payload64b);
        f.extend([r.enable, r.structure_size, r.membar_type]);
    }
    let d = L::DEPENDENT_QMD0;
    f.extend([d.pointer, d.enable, d.action, L::CWD_MEMBAR_TYPE]);
    f.extend(d.prefetch);
    f.extend(L::CWD_MEMBAR_TASK_CHASING_ENABLE);
    f.extend(L::FIXED.iter().map(|(f, _)| *f));
    f
}

#[test]
fn every_typed_field_is_the_name_tables_field_of_that_name() {
    fn check<L: QmdLayout>() {
        for f in roles::<L>() {
            assert_eq!(
                L::VERSION.field(f.name),
                Some(&f),
                "{:?} {}",
                L::VERSION,
                f.name
            );
        }
        assert_eq!(L::VERSION.fields(), L::FIELDS);
    }
    check::<V02>();
    check::<V03>();
    check::<V04>();
    check::<V05>();
    // Spot checks of the generated constants against the headers.
    assert_eq!((v04_00::GRID_WIDTH.hi, v04_00::GRID_WIDTH.lo), (1055, 1024));
    assert_eq!(
        (v04_00::RELEASE_ENABLE[1].hi, v04_00::RELEASE_ENABLE[1].lo),
        (336, 336)
    );
    assert_eq!(v04_00::RELEASE_ENABLE[2].name, "RELEASE_ENABLE(2)");
    assert_eq!(v03_00::CONSTANT_BUFFER_SIZE_SHIFTED4[7].hi, 1087 + 448);
    assert_eq!(v05_00::TPC_DISABLE_MASK.len(), 8);
    assert_eq!(v04_00::TPC_DISABLE_MASK[17].lo, 2976);
    assert_eq!(v05_00::SHARED_MEMORY_SIZE_SHIFTED7.shift, 7);
}

/// Every bit outside `f` is as in `before`, and `f` holds `value`.
fn only_field_changed(before: &Qmd, after: &Qmd, f: &QmdField, value: u64) {
    let mut want = before.clone();
    want.set_field(f, value).unwrap();
    assert_eq!(after, &want, "{}", f.name);
}

proptest! {
    #[test]
    fn each_typed_setter_writes_exactly_its_named_fields(
        seed in any::<u32>(),
        x in any::<u64>(),
        y in any::<u64>(),
        i in 0usize..8,
    ) {
        fn check<L: QmdLayout>(seed: u32, x: u64, y: u64, i: usize) {
            // A QMD of this layout with every other bit random: a setter must not touch
            // them.
            let mut q = L::empty();
            for (k, w) in q.words.iter_mut().enumerate().take(L::VERSION.size() / 4) {
                *w = seed.rotate_left(k as u32) ^ (k as u32).wrapping_mul(0x9e37_79b9);
            }
            let by = |q: &mut Qmd, writes: &[(QmdField, u64)]| {
                for (f, v) in writes {
                    let t = L::VERSION.field(f.name).unwrap();
                    q.set(t.name, *v).unwrap();
                }
            };
            let g = [x as u32 & 0xffff, (x >> 16) as u32 & 0xffff, (x >> 32) as u32 & 0xffff];
            let mut a = q.clone();
            L::set_grid(&mut a, g).unwrap();
            let mut b = q.clone();
            by(&mut b, &[(L::GRID[0], g[0].into()), (L::GRID[1], g[1].into()), (L::GRID[2], g[2].into())]);
            assert_eq!(a, b);
            let blk = [g[0] & 0xff, g[1] & 0xff, g[2] & 0xff];
            let mut a = q.clone();
            L::set_block(&mut a, blk).unwrap();
            let mut b = q.clone();
            let t = L::CTA_THREAD_DIMENSION;
            by(&mut b, &[(t[0], blk[0].into()), (t[1], blk[1].into()), (t[2], blk[2].into())]);
            assert_eq!(a, b);
            let mut a = q.clone();
            L::set_register_count(&mut a, (x & 0xff) as u32).unwrap();
            only_field_changed(&q, &a, &L::REGISTER_COUNT, x & 0xff);
            // Constant bank i: address, size, valid, invalidate (and bank 0's prefetch).
            let addr = x & ((1 << 49) - 1) & !0x3f;
            let size = (y & 0xffff) as u32;
            let mut a = q.clone();
            L::set_constant_bank(&mut a, i, addr, size).unwrap();
            let mut b = q.clone();
            let lo = L::CONSTANT_BUFFER_ADDR_LOWER[i];
            let sh = addr >> lo.shift;
            let mut w = vec![
                (lo, sh & 0xffff_ffff),
                (L::CONSTANT_BUFFER_ADDR_UPPER[i], sh >> 32),
                (L::CONSTANT_BUFFER_SIZE_SHIFTED4[i], u64::from(size).div_ceil(16)),
                (L::CONSTANT_BUFFER_VALID[i], 1),
                (L::CONSTANT_BUFFER_INVALIDATE[i], 1),
            ];
            if let (0, Some((p, m))) = (i, L::CONSTANT_BUFFER_PREFETCH_PRE) {
                w.extend([(p, 1), (m, u64::from(size).div_ceil(256).min(63))]);
            }
            by(&mut b, &w);
            assert_eq!(a, b);
            let mut a = q.clone();
            L::set_constant_bank_address(&mut a, i, addr).unwrap();
            let mut b = q.clone();
            by(&mut b, &w[..2]);
            assert_eq!(a, b);
            // Release r: address, payload, enable, 64-bit payload, four words, membar.
            let r = i % 2;
            let rel = L::RELEASE[r];
            let raddr = x & ((1 << 40) - 1) & !0xf;
            // A 32-bit payload where the layout has no upper half (V02_02).
            let y = if rel.payload_upper.is_some() { y } else { y & 0xffff_ffff };
            let mut pw = vec![(rel.payload, y & 0xffff_ffff)];
            pw.extend(rel.payload_upper.map(|f| (f, y >> 32)));
            let mut a = q.clone();
            L::set_release(&mut a, r, raddr, y, ReleaseMembar::FeNone).unwrap();
            let mut b = q.clone();
            let mut w = vec![(rel.address[0], raddr & 0xffff_ffff), (rel.address[1], raddr >> 32)];
            w.extend(pw.iter().copied());
            w.push((rel.enable, 1));
            w.extend(rel.payload64b.map(|f| (f, 1)));
            w.extend([(rel.structure_size, 0), (rel.membar_type, 0)]);
            by(&mut b, &w);
            assert_eq!(a, b);
            let mut a = q.clone();
            L::set_release_payload(&mut a, r, y).unwrap();
            let mut b = q.clone();
            by(&mut b, &pw);
            assert_eq!(a, b);
            let mut a = q.clone();
            L::set_release_enable(&mut a, r, false).unwrap();
            only_field_changed(&q, &a, &rel.enable, 0);
            let mut a = q.clone();
            L::set_release_membar(&mut a, r, ReleaseMembar::FeSysmembar).unwrap();
            only_field_changed(&q, &a, &rel.membar_type, 1);
            // Dependent QMD 0 and the CTA-end membar.
            let next = raddr & !0xff;
            let mut a = q.clone();
            L::schedule_after(&mut a, next).unwrap();
            let dep = L::DEPENDENT_QMD0;
            let mut c = q.clone();
            let mut w = vec![(dep.pointer, next >> 8), (dep.enable, 1), (dep.action, dep.schedule)];
            w.extend(dep.prefetch.map(|f| (f, 1)));
            by(&mut c, &w);
            assert_eq!(a, c);
            let mut a = q.clone();
            L::set_cwd_membar(&mut a, CwdMembar::L1Membar, true).unwrap();
            let mut b = q.clone();
            let mut w = vec![(L::CWD_MEMBAR_TYPE, 3)];
            w.extend(L::CWD_MEMBAR_TASK_CHASING_ENABLE.map(|f| (f, 1)));
            by(&mut b, &w);
            assert_eq!(a, b);
            // Shared memory, carveout, local memory, program.
            let mut a = q.clone();
            L::set_shared_memory_size(&mut a, (y as u32 & 0x7ff) << 7).unwrap();
            let f = L::SHARED_MEMORY_SIZE;
            only_field_changed(&q, &a, &f, u64::from((y as u32 & 0x7ff) << 7) >> f.shift);
            let mut a = q.clone();
            let c = SmSharedConfig { min: (x & 0x3f) as u32, max: (y & 0x3f) as u32, target: 5 };
            L::set_sm_config(&mut a, c).unwrap();
            let mut b = q.clone();
            let s = L::SM_CONFIG_SHARED_MEM_SIZE;
            by(&mut b, &[(s[0], c.min.into()), (s[1], c.max.into()), (s[2], 5)]);
            assert_eq!(a, b);
            let mut a = q.clone();
            let pa = x & ((1 << 49) - 1) & !0xf;
            L::set_program(&mut a, pa, 0x2345).unwrap();
            let mut b = q.clone();
            let [lo, hi] = L::PROGRAM_ADDRESS;
            let mut w = vec![(lo, (pa >> lo.shift) & 0xffff_ffff), (hi, (pa >> lo.shift) >> 32)];
            if let Some([plo, phi, psz]) = L::PROGRAM_PREFETCH {
                w.extend([(plo, (pa >> 8) & 0xffff_ffff), (phi, pa >> 40), (psz, 0x23)]);
            }
            by(&mut b, &w);
            assert_eq!(a, b);
            // The wrong layout's QMD and a bank past the eighth are refused.
            let other = if L::VERSION == QmdVersion::V04_00 { V05::empty() } else { V04::empty() };
            let mut o = other.clone();
            assert!(matches!(L::set_grid(&mut o, [1, 1, 1]), Err(QmdError::LayoutMismatch { .. })));
            assert_eq!(o, other);
            assert!(matches!(
                L::set_constant_bank(&mut q.clone(), 8, 0, 16),
                Err(QmdError::NoSuchIndex { index: 8, count: 8, .. })
            ));
        }
        check::<V02>(seed, x, y, i);
        check::<V03>(seed, x, y, i);
        check::<V04>(seed, x, y, i);
        check::<V05>(seed, x, y, i);
    }
}

/// QMDs of a few fixture launches, byte for byte, against the name-table builder.
#[test]
fn fixture_launches_build_the_bytes_they_always_did() {
    let mut small = sample(QmdVersion::V04_00);
    small.cbufs = [None; 8];
    small.cbufs[0] = Some((0x10_0000_2000, 0x300));
    small.release = [Some((0x10_0000_0000, 9)), None];
    small.dependent_qmd = None;
    let mut chained = small;
    chained.dependent_qmd = Some(0x20_0000_1200);
    let plain = LaunchDesc {
        program_address: 0x10_0000_1000,
        block: [1, 1, 1],
        grid: [1, 1, 1],
        ..LaunchDesc::default()
    };
    for v in VERSIONS {
        for d in [sample(v), small, chained, plain] {
            let q = Qmd::build(v, &d).unwrap();
            assert_eq!(
                q.as_bytes(),
                by_name::build(v, &d).unwrap().as_bytes(),
                "{v:?}"
            );
        }
    }
}

fn range(v: QmdVersion, name: &str) -> (u16, u16) {
    let f = v
        .field(name)
        .unwrap_or_else(|| panic!("{v:?} has no {name}"));
    (f.hi, f.lo)
}

#[test]
fn tables_are_consistent() {
    for v in VERSIONS {
        let t = v.fields();
        let least = if v == QmdVersion::V02_02 { 120 } else { 150 };
        assert!(t.len() > least, "{v:?}: {} fields", t.len());
        for f in t {
            assert!(f.hi >= f.lo, "{}", f.name);
            assert!(usize::from(f.hi) < v.size() * 8, "{} past the end", f.name);
            assert!(f.bits() <= 32, "{}", f.name);
        }
        for w in t.windows(2) {
            assert!(
                w[1].lo > w[0].hi,
                "{:?}: {} overlaps {}",
                v,
                w[0].name,
                w[1].name
            );
        }
        let mut names: Vec<_> = t.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), t.len(), "{v:?}: duplicate names");
    }
}

#[test]
fn bit_ranges_match_the_headers() {
    // Spot checks against open-gpu-doc (see rm-abi.md §1.2), written out by hand so a
    // wrong table fails.
    use QmdVersion::*;
    let checks: &[(QmdVersion, &str, u16, u16)] = &[
        (V03_00, "QMD_MAJOR_VERSION", 583, 580),
        (V03_00, "QMD_VERSION", 579, 576),
        (V03_00, "CTA_RASTER_WIDTH", 415, 384),
        (V03_00, "CTA_RASTER_HEIGHT", 431, 416),
        (V03_00, "CTA_RASTER_DEPTH", 463, 448),
        (V03_00, "REGISTER_COUNT_V", 656, 648),
        (V03_00, "SHARED_MEMORY_SIZE", 561, 544),
        (V03_00, "TARGET_SM_CONFIG_SHARED_MEM_SIZE", 662, 657),
        (V03_00, "CTA_THREAD_DIMENSION0", 607, 592),
        (V03_00, "CONSTANT_BUFFER_VALID(3)", 643, 643),
        (
            V03_00,
            "CONSTANT_BUFFER_ADDR_LOWER(2)",
            1055 + 128,
            1024 + 128,
        ),
        (
            V03_00,
            "CONSTANT_BUFFER_SIZE_SHIFTED4(7)",
            1087 + 448,
            1075 + 448,
        ),
        (V03_00, "PROGRAM_ADDRESS_LOWER", 1567, 1536),
        (V03_00, "RELEASE0_ENABLE", 823, 823),
        (V03_00, "RELEASE1_PAYLOAD_LOWER", 991, 960),
        (V03_00, "DEPENDENT_QMD0_POINTER", 511, 480),
        (V03_00, "SASS_VERSION", 1663, 1656),
        (V03_00, "SHADER_LOCAL_MEMORY_HIGH_SIZE", 1623, 1600),
        (V04_00, "QMD_MAJOR_VERSION", 583, 580),
        (V04_00, "QMD_TYPE", 25, 23),
        (V04_00, "GRID_WIDTH", 1055, 1024),
        (V04_00, "GRID_DEPTH", 1103, 1088),
        (V04_00, "REGISTER_COUNT", 1208, 1200),
        (V04_00, "BARRIER_COUNT", 1215, 1211),
        (V04_00, "SHARED_MEMORY_SIZE", 601, 584),
        (V04_00, "MIN_SM_CONFIG_SHARED_MEM_SIZE", 613, 608),
        (V04_00, "CTA_THREAD_DIMENSION2", 1199, 1184),
        (V04_00, "CONSTANT_BUFFER_VALID(2)", 424, 424),
        (V04_00, "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(1)", 1631, 1600),
        (V04_00, "CONSTANT_BUFFER_SIZE_SHIFTED4(0)", 1599, 1587),
        (V04_00, "RELEASE_ENABLE(1)", 336, 336),
        (V04_00, "RELEASE_STRUCTURE_SIZE(0)", 322, 321),
        (V04_00, "DEPENDENT_QMD_ENABLE(0)", 368, 368),
        (V04_00, "DEPENDENT_QMD_ACTION(1)", 376, 374),
        (V04_00, "PROGRAM_ADDRESS_UPPER", 1272, 1248),
        (V04_00, "SHADER_LOCAL_MEMORY_HIGH_SIZE", 567, 544),
        (V04_00, "SASS_VERSION", 543, 536),
        (V04_00, "OUTER_STICKY_OVERFLOW", 3071, 3071),
        (V05_00, "QMD_MAJOR_VERSION", 471, 468),
        (V05_00, "QMD_TYPE", 153, 151),
        (V05_00, "GRID_WIDTH", 1279, 1248),
        (V05_00, "REGISTER_COUNT", 1136, 1128),
        (V05_00, "CTA_THREAD_DIMENSION2", 1127, 1120),
        (V05_00, "SHARED_MEMORY_SIZE_SHIFTED7", 1162, 1152),
        (V05_00, "PROGRAM_ADDRESS_LOWER_SHIFTED4", 1055, 1024),
        (V05_00, "CONSTANT_BUFFER_VALID(7)", 1884, 1884),
        (V05_00, "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)", 1394, 1376),
        (V05_00, "RELEASE_ENABLE(0)", 288, 288),
        (V05_00, "DEPENDENT_QMD0_POINTER", 415, 384),
        (V05_00, "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4", 1215, 1200),
    ];
    for &(v, name, hi, lo) in checks {
        assert_eq!(range(v, name), (hi, lo), "{v:?} {name}");
    }
    assert_eq!(
        V05_00.field("SHARED_MEMORY_SIZE_SHIFTED7").unwrap().shift,
        7
    );
    assert_eq!(
        V04_00
            .field("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(5)")
            .unwrap()
            .shift,
        6
    );
    assert_eq!(V04_00.field("GRID_WIDTH").unwrap().shift, 0);
    // Names that belong to other layouts are absent.
    assert!(V03_00.field("GRID_WIDTH").is_none());
    assert!(V04_00.field("CTA_RASTER_WIDTH").is_none());
    assert!(V05_00.field("REGISTER_COUNT_V").is_none());
}

#[test]
fn raw_bits_land_where_the_header_says() {
    let word = |q: &Qmd, i: usize| {
        let b = q.as_bytes();
        u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    };
    let mut q = Qmd::new(QmdVersion::V04_00);
    q.set("GRID_WIDTH", 0xdead_beef).unwrap(); // 1055:1024 = word 32
    assert_eq!(word(&q, 32), 0xdead_beef);
    q.set("REGISTER_COUNT", 0x1ff).unwrap(); // 1208:1200 = word 37 bits 16..24
    assert_eq!(word(&q, 37), 0x01ff_0000);
    // Major 4 at 583:580 = word 18 bits 4..7.
    assert_eq!(word(&q, 18), 0x40);
    let mut q = Qmd::new(QmdVersion::V03_00);
    q.set("CTA_RASTER_WIDTH", 0x1234_5678).unwrap(); // 415:384 = word 12
    assert_eq!(word(&q, 12), 0x1234_5678);
    assert_eq!(word(&q, 18), 0x30);
    assert_eq!(q.as_bytes().len(), 256);
    let mut q = Qmd::new(QmdVersion::V05_00);
    q.set("CTA_THREAD_DIMENSION2", 0xff).unwrap(); // 1127:1120 = word 35 bits 0..7
    assert_eq!(word(&q, 35), 0xff);
    assert_eq!(word(&q, 14), 0x0050_0000); // major 5 at 471:468 = word 14 bits 20..23
    assert_eq!(q.as_bytes().len(), 384);
}

#[test]
fn set_rejects_what_does_not_fit() {
    let mut q = Qmd::new(QmdVersion::V05_00);
    assert_eq!(
        q.set("CTA_THREAD_DIMENSION2", 0x100),
        Err(QmdError::ValueTooLarge {
            field: "CTA_THREAD_DIMENSION2",
            value: 0x100,
            bits: 8
        })
    );
    let e = q.set("NO_SUCH_FIELD", 1).unwrap_err();
    assert!(matches!(&e, QmdError::UnknownField { field, .. } if field == "NO_SUCH_FIELD"));
    assert!(format!("{e}").contains("NO_SUCH_FIELD"));
    assert!(q.get("CTA_RASTER_WIDTH").is_err());
    // A failed set leaves the QMD unchanged.
    assert_eq!(q, Qmd::new(QmdVersion::V05_00));
}

/// A launch using most of what a QMD can say; on V02_02 (32-bit release payloads) the first
/// release's payload is 32-bit.
fn sample(v: QmdVersion) -> LaunchDesc {
    let payload = if v == QmdVersion::V02_02 {
        0x5566_7788
    } else {
        0x1122_3344_5566_7788
    };
    LaunchDesc {
        program_address: 0x12_3456_7880,
        register_count: 37,
        shared_memory_size: 0x2300,
        block: [96, 3, 2],
        grid: [0x7fff_fffe, 513, 7],
        cbufs: [
            Some((0x20_0000_0040, 0x21c)),
            None,
            None,
            Some((0x1_0000_0c00, 0x100)),
            Some((0x3_4000, 0x10)),
            None,
            None,
            Some((0x7f_ffff_ffc0, 0x1_0000)),
        ],
        shader_local_memory_low_size: 0x30,
        shader_local_memory_high_size: 0x260,
        barrier_count: 3,
        sass_version: 0x90,
        release: [Some((0x10_0000_1230, payload)), Some((0xff_ffff_fff0, 9))],
        dependent_qmd: Some(0x44_5566_7700),
        program_size: 0x1_2300,
        sm_config: SmSharedConfig {
            min: 5,
            max: 26,
            target: 9,
        },
    }
}

#[test]
fn build_and_decode_round_trip() {
    for v in VERSIONS {
        let d = sample(v);
        let q = Qmd::build(v, &d).unwrap();
        let bytes = q.as_bytes().to_vec();
        assert_eq!(bytes.len(), v.size());
        let back = Qmd::from_bytes(v, &bytes).unwrap();
        assert_eq!(back, q);
        back.check_version().unwrap();
        let mut want = d;
        // Sizes are rounded up to 16 bytes.
        want.cbufs[0] = Some((0x20_0000_0040, 0x220));
        if v == QmdVersion::V02_02 {
            // No program prefetch to carry the code size.
            want.program_size = 0;
        }
        assert_eq!(back.launch_desc().unwrap(), want, "{v:?}");
    }
}

#[test]
fn build_sets_each_field_by_name() {
    // Independent of launch_desc: read the fields by their header names.
    let d = sample(QmdVersion::V04_00);
    let q = Qmd::build(QmdVersion::V04_00, &d).unwrap();
    let g = |n: &str| q.get(n).unwrap();
    assert_eq!(g("QMD_MAJOR_VERSION"), 4);
    assert_eq!(g("QMD_TYPE"), 2);
    assert_eq!(g("GRID_WIDTH"), 0x7fff_fffe);
    assert_eq!(g("GRID_HEIGHT"), 513);
    assert_eq!(g("CTA_THREAD_DIMENSION0"), 96);
    assert_eq!(g("REGISTER_COUNT"), 37);
    assert_eq!(g("PROGRAM_ADDRESS_LOWER"), 0x3456_7880);
    assert_eq!(g("PROGRAM_ADDRESS_UPPER"), 0x12);
    assert_eq!(
        g("PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED"),
        0x12_3456_7880 >> 8
    );
    assert_eq!(g("PROGRAM_PREFETCH_SIZE"), 0x123);
    assert_eq!(
        g("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(3)"),
        (0x1_0000_0c00u64 >> 6) & 0xffff_ffff
    );
    assert_eq!(
        g("CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(3)"),
        0x1_0000_0c00u64 >> 38
    );
    assert_eq!(g("CONSTANT_BUFFER_SIZE_SHIFTED4(7)"), 0x1000);
    assert_eq!(g("CONSTANT_BUFFER_VALID(1)"), 0);
    assert_eq!(g("CONSTANT_BUFFER_INVALIDATE(0)"), 1);
    // Bank 0 (0x21c bytes) prefetched before launch, three 256-byte units; others not.
    assert_eq!(g("CONSTANT_BUFFER_PREFETCH(0)"), 1);
    assert_eq!(g("CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8"), 3);
    assert_eq!(g("CONSTANT_BUFFER_PREFETCH(3)"), 0);
    assert_eq!(g("RELEASE_ENABLE(0)"), 1);
    assert_eq!(g("RELEASE_ENABLE(2)"), 0);
    assert_eq!(g("RELEASE_SEMAPHORE0_PAYLOAD_UPPER"), 0x1122_3344);
    assert_eq!(g("RELEASE_PAYLOAD64B(1)"), 1);
    assert_eq!(g("DEPENDENT_QMD0_POINTER"), 0x4455_6677);
    assert_eq!(g("DEPENDENT_QMD_ACTION(0)"), 1);
    assert_eq!(g("CWD_MEMBAR_TYPE"), 1);
    assert_eq!(g("API_VISIBLE_CALL_LIMIT"), 1);
    assert_eq!(g("SAMPLER_INDEX"), 1);
    assert_eq!(g("INVALIDATE_SHADER_DATA_CACHE"), 1);
    let names: Vec<_> = q.fields().map(|(n, _)| n).collect();
    assert!(names.contains(&"GRID_DEPTH"));
    assert!(!names.contains(&"CONSTANT_BUFFER_VALID(1)"));
    let v5 = Qmd::build(QmdVersion::V05_00, &sample(QmdVersion::V05_00)).unwrap();
    assert_eq!(
        v5.get("PROGRAM_ADDRESS_LOWER_SHIFTED4").unwrap(),
        (0x12_3456_7880u64 >> 4) & 0xffff_ffff
    );
    assert_eq!(v5.get("SHARED_MEMORY_SIZE_SHIFTED7").unwrap(), 0x2300 >> 7);
    assert_eq!(
        v5.get("SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4").unwrap(),
        0x26
    );
    assert_eq!(v5.get("DEPENDENT_QMD0_ENABLE").unwrap(), 1);
    assert_eq!(v5.get("CONSTANT_BUFFER_PREFETCH(0)").unwrap(), 1);
    assert_eq!(
        v5.get("CONSTANT_BANK_PREFETCH_PRE_MAX_SIZE_SHIFTED8")
            .unwrap(),
        3
    );
    // A bank larger than the field can say is prefetched up to its 63 x 256 bytes.
    let mut big = sample(QmdVersion::V04_00);
    big.cbufs[0] = Some((0x20_0000_0040, 0x1_0000));
    let qb = Qmd::build(QmdVersion::V04_00, &big).unwrap();
    assert_eq!(
        qb.get("CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8")
            .unwrap(),
        63
    );
    let v3 = Qmd::build(QmdVersion::V03_00, &sample(QmdVersion::V03_00)).unwrap();
    assert_eq!(v3.get("SM_GLOBAL_CACHING_ENABLE").unwrap(), 1);
    assert_eq!(v3.get("CONSTANT_BUFFER_ADDR_UPPER(7)").unwrap(), 0x7f);
    assert_eq!(v3.get("RELEASE1_ADDRESS_LOWER").unwrap(), 0xffff_fff0);
}

#[test]
fn build_rejects_bad_launches() {
    let v = QmdVersion::V04_00;
    let mut d = sample(v);
    d.register_count = 512;
    assert_eq!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "REGISTER_COUNT",
            value: 512,
            bits: 9
        })
    );
    let mut d = sample(v);
    d.cbufs[2] = Some((0x1000_0020, 0x100));
    assert_eq!(
        Qmd::build(v, &d),
        Err(QmdError::Misaligned {
            field: "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(2)",
            value: 0x1000_0020,
            align: 64
        })
    );
    // V03 takes an unshifted address.
    let mut d3 = sample(QmdVersion::V03_00);
    d3.cbufs[2] = Some((0x1000_0020, 0x100));
    assert!(Qmd::build(QmdVersion::V03_00, &d3).is_ok());
    let mut d = sample(v);
    d.grid[1] = 0x1_0000;
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "GRID_HEIGHT",
            ..
        })
    ));
    let mut d = sample(v);
    d.dependent_qmd = Some(0x1080);
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::Misaligned { align: 256, .. })
    ));
    let mut d = sample(QmdVersion::V05_00);
    d.shared_memory_size = 0x2340;
    assert!(matches!(
        Qmd::build(QmdVersion::V05_00, &d),
        Err(QmdError::Misaligned {
            field: "SHARED_MEMORY_SIZE_SHIFTED7",
            ..
        })
    ));
    let mut d = sample(v);
    d.program_address = 1 << 57;
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "PROGRAM_ADDRESS_UPPER",
            ..
        })
    ));
    assert!(matches!(
        Qmd::build(QmdVersion::V02_02, &d),
        Err(QmdError::ValueTooLarge {
            field: "PROGRAM_ADDRESS_UPPER",
            ..
        })
    ));
}

#[test]
fn from_bytes_checks_length_and_version() {
    assert_eq!(
        Qmd::from_bytes(QmdVersion::V04_00, &[0; 256]),
        Err(QmdError::WrongSize {
            version: QmdVersion::V04_00,
            expected: 384,
            got: 256
        })
    );
    let v3 = Qmd::new(QmdVersion::V03_00);
    let mut as_v4 = [0u8; 384];
    as_v4[..256].copy_from_slice(v3.as_bytes());
    let q = Qmd::from_bytes(QmdVersion::V04_00, &as_v4).unwrap();
    // V03's major version sits at the same bits as V04's: 3 != 4.
    assert!(matches!(
        q.launch_desc(),
        Err(QmdError::VersionMismatch { major: 3, .. })
    ));
}

/// Naive bit-by-bit model of a field write.
fn model_set(words: &mut [u32], hi: u16, lo: u16, value: u64) {
    for b in lo..=hi {
        let bit = (value >> (b - lo)) & 1;
        let (w, s) = (usize::from(b / 32), b % 32);
        words[w] = (words[w] & !(1 << s)) | ((bit as u32) << s);
    }
}

proptest! {
    #[test]
    fn bit_access_matches_a_model(
        lo in 0u16..3000,
        width in 1u16..=64,
        value in any::<u64>(),
        seed in any::<u32>(),
    ) {
        let hi = (lo + width - 1).min(3071);
        let width = hi - lo + 1;
        let value = if width == 64 { value } else { value & ((1u64 << width) - 1) };
        let mut a = [0u32; 96];
        for (i, w) in a.iter_mut().enumerate() {
            *w = seed.rotate_left(i as u32) ^ (i as u32).wrapping_mul(0x9e37_79b9);
        }
        let mut b = a;
        set_bits(&mut a, hi, lo, value);
        model_set(&mut b, hi, lo, value);
        prop_assert_eq!(a, b);
        prop_assert_eq!(get_bits(&a, hi, lo), value);
    }
}
