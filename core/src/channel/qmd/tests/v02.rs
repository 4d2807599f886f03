use super::*;

/// Every field the V02 setters use, with its `MW(hi:lo)` from open-gpu-doc c8607fe
/// `classes/compute/clc3c0qmd.h` (`NVC3C0_QMDV02_02_*`), written out by hand so a wrong table
/// fails.
#[test]
fn v02_fields_match_the_header() {
    use QmdVersion::V02_02;
    let checks: &[(&str, u16, u16)] = &[
        ("QMD_GROUP_ID", 133, 128),
        ("SM_GLOBAL_CACHING_ENABLE", 134, 134),
        ("SEMAPHORE_RELEASE_ENABLE0", 138, 138),
        ("SEMAPHORE_RELEASE_ENABLE1", 139, 139),
        ("DEPENDENT_QMD_SCHEDULE_ENABLE", 141, 141),
        ("DEPENDENT_QMD_TYPE", 142, 142),
        ("INVALIDATE_TEXTURE_HEADER_CACHE", 186, 186),
        ("INVALIDATE_SHADER_DATA_CACHE", 189, 189),
        ("PROGRAM_OFFSET", 287, 256),
        ("RELEASE_MEMBAR_TYPE", 366, 366),
        ("CWD_MEMBAR_TYPE", 369, 368),
        ("API_VISIBLE_CALL_LIMIT", 378, 378),
        ("SAMPLER_INDEX", 382, 382),
        ("CTA_RASTER_WIDTH", 415, 384),
        ("CTA_RASTER_HEIGHT", 431, 416),
        ("CTA_RASTER_DEPTH", 463, 448),
        ("DEPENDENT_QMD_POINTER", 511, 480),
        ("SHARED_MEMORY_SIZE", 561, 544),
        ("MIN_SM_CONFIG_SHARED_MEM_SIZE", 568, 562),
        ("MAX_SM_CONFIG_SHARED_MEM_SIZE", 575, 569),
        ("QMD_VERSION", 579, 576),
        ("QMD_MAJOR_VERSION", 583, 580),
        ("CTA_THREAD_DIMENSION0", 607, 592),
        ("CTA_THREAD_DIMENSION1", 623, 608),
        ("CTA_THREAD_DIMENSION2", 639, 624),
        ("CONSTANT_BUFFER_VALID(0)", 640, 640),
        ("CONSTANT_BUFFER_VALID(7)", 647, 647),
        ("REGISTER_COUNT_V", 656, 648),
        ("TARGET_SM_CONFIG_SHARED_MEM_SIZE", 663, 657),
        ("RELEASE0_ADDRESS_LOWER", 767, 736),
        ("RELEASE0_ADDRESS_UPPER", 775, 768),
        ("RELEASE0_STRUCTURE_SIZE", 799, 799),
        ("RELEASE0_PAYLOAD", 831, 800),
        ("RELEASE1_ADDRESS_LOWER", 863, 832),
        ("RELEASE1_ADDRESS_UPPER", 871, 864),
        ("RELEASE1_STRUCTURE_SIZE", 895, 895),
        ("RELEASE1_PAYLOAD", 927, 896),
        ("SHADER_LOCAL_MEMORY_LOW_SIZE", 951, 928),
        ("BARRIER_COUNT", 959, 955),
        ("SHADER_LOCAL_MEMORY_HIGH_SIZE", 983, 960),
        ("REGISTER_COUNT", 991, 984),
        ("SHADER_LOCAL_MEMORY_CRS_SIZE", 1015, 992),
        ("SASS_VERSION", 1023, 1016),
        ("CONSTANT_BUFFER_ADDR_LOWER(0)", 1055, 1024),
        ("CONSTANT_BUFFER_ADDR_UPPER(0)", 1072, 1056),
        ("CONSTANT_BUFFER_INVALIDATE(0)", 1074, 1074),
        ("CONSTANT_BUFFER_SIZE_SHIFTED4(0)", 1087, 1075),
        ("CONSTANT_BUFFER_ADDR_LOWER(7)", 1055 + 448, 1024 + 448),
        ("CONSTANT_BUFFER_SIZE_SHIFTED4(7)", 1087 + 448, 1075 + 448),
        ("PROGRAM_ADDRESS_LOWER", 1567, 1536),
        ("PROGRAM_ADDRESS_UPPER", 1584, 1568),
        ("DEBUG_ID_LOWER", 2047, 2016),
    ];
    for &(name, hi, lo) in checks {
        assert_eq!(range(V02_02, name), (hi, lo), "{name}");
    }
    // The typed roles are those fields.
    assert_eq!(V02::REGISTER_COUNT.name, "REGISTER_COUNT_V");
    assert_eq!(V02::RELEASE[1].enable.name, "SEMAPHORE_RELEASE_ENABLE1");
    assert_eq!(V02::RELEASE[0].membar_type, V02::RELEASE[1].membar_type);
    assert!(V02::RELEASE[0].payload_upper.is_none() && V02::RELEASE[0].payload64b.is_none());
    assert!(V02::PROGRAM_PREFETCH.is_none() && V02::DEPENDENT_QMD0.prefetch.is_none());
    // Raw bits: major 2 / minor 2 at word 18 (583:576); the grid width is word 12.
    let mut q = Qmd::new(V02_02);
    assert_eq!(q.words()[18], 0x22);
    q.set("CTA_RASTER_WIDTH", 0x1234_5678).unwrap();
    assert_eq!(q.words()[12], 0x1234_5678);
    assert_eq!(q.as_bytes().len(), 256);
}

#[test]
fn v02_has_no_fields_of_the_later_layouts() {
    use QmdVersion::V02_02;
    for name in [
        "PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED",
        "PROGRAM_PREFETCH_SIZE",
        "RELEASE0_PAYLOAD64B",
        "RELEASE0_PAYLOAD_LOWER",
        "RELEASE0_ENABLE",
        "RELEASE0_MEMBAR_TYPE",
        "DEPENDENT_QMD0_POINTER",
        "DEPENDENT_QMD0_ACTION",
        "DEPENDENT_QMD0_PREFETCH",
        "CONSTANT_BUFFER_PREFETCH_POST(0)",
        "GRID_WIDTH",
        "QMD_TYPE",
        "CWD_MEMBAR_TASK_CHASING_ENABLE",
    ] {
        assert!(V02_02.field(name).is_none(), "{name}");
    }
    // ... and the later layouts lack V02's.
    for name in [
        "PROGRAM_OFFSET",
        "RELEASE0_PAYLOAD",
        "SEMAPHORE_RELEASE_ENABLE0",
    ] {
        assert!(QmdVersion::V03_00.field(name).is_none(), "{name}");
    }
}

#[test]
fn v02_build_sets_the_turing_fields() {
    let v = QmdVersion::V02_02;
    let d = sample(v);
    let q = Qmd::build(v, &d).unwrap();
    let g = |n: &str| q.get(n).unwrap();
    assert_eq!((g("QMD_MAJOR_VERSION"), g("QMD_VERSION")), (2, 2));
    assert_eq!(g("PROGRAM_ADDRESS_LOWER"), 0x3456_7880);
    assert_eq!(g("PROGRAM_ADDRESS_UPPER"), 0x12);
    // The program is addressed absolutely: PROGRAM_OFFSET (relative to a code region) stays 0.
    assert_eq!(g("PROGRAM_OFFSET"), 0);
    assert_eq!(g("REGISTER_COUNT_V"), 37);
    assert_eq!(g("REGISTER_COUNT"), 0);
    assert_eq!(g("BARRIER_COUNT"), 3);
    assert_eq!(g("SASS_VERSION"), 0x90);
    assert_eq!(g("SHADER_LOCAL_MEMORY_LOW_SIZE"), 0x30);
    assert_eq!(g("SHADER_LOCAL_MEMORY_HIGH_SIZE"), 0x260);
    assert_eq!(g("CTA_RASTER_WIDTH"), 0x7fff_fffe);
    assert_eq!(g("SM_GLOBAL_CACHING_ENABLE"), 1);
    assert_eq!(g("CONSTANT_BUFFER_ADDR_UPPER(7)"), 0x7f);
    assert_eq!(g("CONSTANT_BUFFER_VALID(3)"), 1);
    assert_eq!(g("SEMAPHORE_RELEASE_ENABLE0"), 1);
    assert_eq!(g("SEMAPHORE_RELEASE_ENABLE1"), 1);
    assert_eq!(g("RELEASE0_PAYLOAD"), 0x5566_7788);
    assert_eq!(g("RELEASE0_ADDRESS_LOWER"), 0x0000_1230);
    assert_eq!(g("RELEASE0_ADDRESS_UPPER"), 0x10);
    assert_eq!(g("RELEASE0_STRUCTURE_SIZE"), 0); // FOUR_WORDS
    assert_eq!(g("RELEASE_MEMBAR_TYPE"), 1); // FE_SYSMEMBAR
    assert_eq!(g("DEPENDENT_QMD_POINTER"), 0x4455_6677);
    assert_eq!(g("DEPENDENT_QMD_SCHEDULE_ENABLE"), 1);
    assert_eq!(g("DEPENDENT_QMD_TYPE"), 1); // GRID
    assert_eq!(g("CWD_MEMBAR_TYPE"), 1);
    // The release membar is one field: turning it off for release 1 turns it off for both.
    let mut q2 = q.clone();
    V02::set_release_membar(&mut q2, 1, ReleaseMembar::FeNone).unwrap();
    assert_eq!(q2.get("RELEASE_MEMBAR_TYPE").unwrap(), 0);
    // A program prefetch asked for is not written anywhere.
    let mut a = V02::empty();
    V02::set_program(&mut a, 0x10_0000_1000, 0x4000).unwrap();
    let mut b = V02::empty();
    V02::set_program(&mut b, 0x10_0000_1000, 0).unwrap();
    assert_eq!(a, b);
}

#[test]
fn v02_rejects_what_turing_cannot_say() {
    let v = QmdVersion::V02_02;
    // A 64-bit payload: the release payload is 32 bits.
    let mut d = sample(v);
    d.release[1] = Some((0x10_0000_0000, 1 << 32));
    assert_eq!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "RELEASE1_PAYLOAD",
            value: 1 << 32,
            bits: 32
        })
    );
    let mut q = Qmd::build(v, &sample(v)).unwrap();
    let before = q.clone();
    assert!(matches!(
        V02::set_release_payload(&mut q, 0, u64::MAX),
        Err(QmdError::ValueTooLarge {
            field: "RELEASE0_PAYLOAD",
            ..
        })
    ));
    assert_eq!(q, before, "a refused payload changes nothing");
    // A release above 2^40 (8-bit upper address), misaligned, or a third one.
    let mut d = sample(v);
    d.release[0] = Some((1 << 40, 1));
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "RELEASE0_ADDRESS_UPPER",
            ..
        })
    ));
    let mut d = sample(v);
    d.release[0] = Some((0x10_0000_1234, 1));
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::Misaligned { align: 16, .. })
    ));
    assert!(matches!(
        V02::set_release(&mut q, 2, 0x1000, 1, ReleaseMembar::FeNone),
        Err(QmdError::NoSuchIndex { count: 2, .. })
    ));
    // Carveout fields are 7 bits; registers 9 bits; block dimensions 16 bits.
    let mut d = sample(v);
    d.sm_config.target = 0x80;
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "TARGET_SM_CONFIG_SHARED_MEM_SIZE",
            bits: 7,
            ..
        })
    ));
    let mut d = sample(v);
    d.register_count = 512;
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::ValueTooLarge {
            field: "REGISTER_COUNT_V",
            ..
        })
    ));
    let mut d = sample(v);
    d.block[0] = 0x1_0000;
    assert!(Qmd::build(v, &d).is_err());
    // A dependent QMD must be 256-byte aligned.
    let mut d = sample(v);
    d.dependent_qmd = Some(0x1080);
    assert!(matches!(
        Qmd::build(v, &d),
        Err(QmdError::Misaligned { align: 256, .. })
    ));
    // Another layout's QMD through V02's setters, and V02's through V03's.
    let mut o = V03::empty();
    assert!(matches!(
        V02::set_grid(&mut o, [1, 1, 1]),
        Err(QmdError::LayoutMismatch { .. })
    ));
    let mut t = V02::empty();
    assert!(matches!(
        V03::set_grid(&mut t, [1, 1, 1]),
        Err(QmdError::LayoutMismatch { .. })
    ));
}

#[test]
fn v02_bytes_are_checked() {
    let v = QmdVersion::V02_02;
    assert_eq!(
        Qmd::from_bytes(v, &[0; 384]),
        Err(QmdError::WrongSize {
            version: v,
            expected: 256,
            got: 384
        })
    );
    // A V03 QMD read as V02 (same size, same version bits): 3.0 is not 2.2.
    let v3 = Qmd::build(QmdVersion::V03_00, &sample(QmdVersion::V03_00)).unwrap();
    let q = Qmd::from_bytes(v, v3.as_bytes()).unwrap();
    assert!(matches!(
        q.launch_desc(),
        Err(QmdError::VersionMismatch {
            major: 3,
            minor: 0,
            ..
        })
    ));
    // All zero: version 0.0.
    let z = Qmd::from_bytes(v, &[0; 256]).unwrap();
    assert!(z.check_version().is_err());
    // Round trip through bytes.
    let q = Qmd::build(v, &sample(v)).unwrap();
    let back = Qmd::from_bytes(v, q.as_bytes()).unwrap();
    assert_eq!(back.launch_desc().unwrap().release[0], sample(v).release[0]);
}
