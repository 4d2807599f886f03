//! VBIOS and FWSEC on synthesized ROMs (no real VBIOS dumps are available or committable).

use nvbare_gsp_firmware::fwsec::{CMD_FRTS, CMD_SB};
use nvbare_gsp_firmware::testutil::vbios::{self as common, RomSpec, build};
use nvbare_gsp_firmware::vbios::{APPID_FWSEC_PROD, MAX_IMAGES};
use nvbare_gsp_firmware::{Error, FirmwareFile, Vbios};
use proptest::prelude::*;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn walks_images_and_finds_the_bit() {
    let rom = build(&RomSpec::default());
    let v = Vbios::parse(&rom.bytes).unwrap();
    let types: Vec<_> = v
        .images()
        .iter()
        .map(|i| (i.offset, i.len, i.code_type, i.last))
        .collect();
    assert_eq!(
        types,
        [
            (0, 0x1000, 0x00, false),
            (0x1000, 0x800, 0x03, false),
            (0x1800, 0x1800, 0xe0, true)
        ]
    );
    assert!(v.images().iter().all(|i| i.npde.is_some()));
    // ext image at 0x1800 minus the base image's 0x1000.
    assert_eq!(v.expansion_rom_offset, 0x800);
    assert_eq!(
        v.rom().len(),
        0x3000,
        "the 0xff tail is not part of the ROM"
    );
    assert_eq!(v.bit.map(|(o, _)| o), Some(0x1b0));
    assert_eq!(v.version(), Some((0x9502_1200, 0x07)));
    let (hdr, entries) = v.falcon_ucode_table().unwrap();
    assert_eq!(hdr.EntryCount, 2);
    assert_eq!(entries[1].app_id, APPID_FWSEC_PROD);
    assert!(matches!(
        FirmwareFile::detect(&rom.bytes),
        Ok(FirmwareFile::Vbios(_))
    ));
}

#[test]
fn six_byte_tokens_and_ifr_headers() {
    for spec in [
        RomSpec {
            token_size: 6,
            ..Default::default()
        },
        RomSpec {
            ifr: Some(1),
            ..Default::default()
        },
        RomSpec {
            ifr: Some(2),
            ..Default::default()
        },
        RomSpec {
            ifr: Some(3),
            ..Default::default()
        },
    ] {
        let rom = build(&spec);
        let v = Vbios::parse(&rom.bytes).unwrap();
        assert_eq!(v.images().len(), 3);
        let f = v.fwsec().unwrap();
        assert!(
            f.image() == &rom.bytes[rom.ucode_at..rom.ucode_at + common::IMEM + common::DMEM],
            "ifr {:?}",
            spec.ifr
        );
    }
    let rom = build(&RomSpec {
        ifr: Some(3),
        ..Default::default()
    });
    let v = Vbios::parse(&rom.bytes).unwrap();
    assert_eq!(v.ifr_offset, 0x2000);
}

#[test]
fn fwsec_frts_patch_writes_the_command_and_the_signature_for_the_fuse() {
    let spec = RomSpec::default();
    let rom = build(&spec);
    let v = Vbios::parse(&rom.bytes).unwrap();
    let f = v.fwsec().unwrap();
    assert_eq!(f.app_id, APPID_FWSEC_PROD);
    assert_eq!(f.desc.IMEMLoadSize.get(), 0x400);
    assert_eq!(f.signatures().len(), 3 * 384);
    let original = common::ucode(&spec);
    assert_eq!(f.image(), &original[..]);

    let frts_offset = 0x7fe0_0000u64;
    let u = f.patch_frts(frts_offset, 0x10_0000, 1).unwrap();
    assert_eq!(u.init_cmd, CMD_FRTS);
    assert_eq!(
        (u.pkc_data_offset, u.engine_id_mask, u.ucode_id),
        (0x300, 0x400, 9)
    );
    assert_eq!(u.code(), &original[..0x400]);
    let d = u.dmem();
    assert_eq!(d.len(), 0x600);
    // init_cmd at mapper + 44.
    assert_eq!(u32_at(d, common::MAPPER + 44), 0x15);
    // FWSECLIC_FRTS_CMD: read-VBIOS {1, 24, 0u64, 0, flags 2}, region {1, 20, off>>12,
    // size>>12, FB 2}, 4 bytes of padding (C sizeof = 48).
    let expect: Vec<u32> = vec![1, 24, 0, 0, 0, 2, 1, 20, 0x7fe00, 0x100, 2, 0];
    let got: Vec<u32> = (0..12).map(|i| u32_at(d, common::CMD_IN + 4 * i)).collect();
    assert_eq!(got, expect);
    // Fuse version 1: SignatureVersions 0b1011 has one set bit below bit 1 -> signature 1.
    assert_eq!(&d[0x300..0x300 + 384], &common::signature(1)[..]);
    // Nothing else changed.
    let mut expect_image = original.clone();
    expect_image[0x400 + common::MAPPER + 44..][..4].copy_from_slice(&0x15u32.to_le_bytes());
    for (i, w) in expect.iter().enumerate() {
        expect_image[0x400 + common::CMD_IN + 4 * i..][..4].copy_from_slice(&w.to_le_bytes());
    }
    expect_image[0x400 + 0x300..][..384].copy_from_slice(&common::signature(1));
    assert_eq!(u.image, expect_image);

    // Fuse 0 -> signature 0; fuse 3 -> two set bits below -> signature 2.
    let u0 = f.patch_frts(frts_offset, 0x10_0000, 0).unwrap();
    assert_eq!(&u0.dmem()[0x300..0x300 + 384], &common::signature(0)[..]);
    let u3 = f.patch_frts(frts_offset, 0x10_0000, 3).unwrap();
    assert_eq!(&u3.dmem()[0x300..0x300 + 384], &common::signature(2)[..]);
    // Fuse 2 is not in SignatureVersions, nor is anything >= 16.
    for fuse in [2, 4, 16, 99] {
        assert!(matches!(
            f.patch_frts(frts_offset, 0x10_0000, fuse),
            Err(Error::NoSignatureForFuse { .. })
        ));
    }

    let sb = f.patch_sb(1).unwrap();
    assert_eq!(sb.init_cmd, CMD_SB);
    assert_eq!(u32_at(sb.dmem(), common::MAPPER + 44), 0x19);
    let got: Vec<u32> = (0..6)
        .map(|i| u32_at(sb.dmem(), common::CMD_IN + 4 * i))
        .collect();
    assert_eq!(got, [1, 24, 0, 0, 0, 2]);
}

#[test]
fn frts_arguments_are_checked() {
    let rom = build(&RomSpec::default());
    let v = Vbios::parse(&rom.bytes).unwrap();
    let f = v.fwsec().unwrap();
    for (off, size) in [
        (0, 0x10_0000),
        (0x1234, 0x10_0000),
        (0x10_0000, 0),
        (0x10_0000, 0x800),
        (1 << 60, 0x1000),
    ] {
        assert!(
            matches!(f.patch_frts(off, size, 0), Err(Error::Invalid { .. })),
            "{off:#x} {size:#x}"
        );
    }
}

#[test]
fn broken_roms_give_typed_errors() {
    // No ROM signature at all.
    assert!(matches!(
        Vbios::parse(&[0u8; 4096]),
        Err(Error::BadMagic { .. })
    ));
    assert!(matches!(Vbios::parse(&[]), Err(Error::OutOfBounds { .. })));

    // Truncated anywhere: an error, never a panic.
    let rom = build(&RomSpec::default());
    for cut in (0..0x3000).step_by(61) {
        let r = Vbios::parse(&rom.bytes[..cut]).and_then(|v| v.fwsec().map(|_| ()));
        assert!(r.is_err(), "cut at {cut:#x}");
    }

    // Bad PCIR signature in the second image.
    let mut bad = rom.bytes.clone();
    bad[0x1000 + 0x40] = b'X';
    assert!(
        matches!(Vbios::parse(&bad), Err(Error::BadMagic { what, .. }) if what.contains("PCI data"))
    );

    // Zero-length image: OpenRM would loop forever here.
    let mut bad = rom.bytes.clone();
    bad[0x1000 + 0x68] = 0;
    bad[0x1000 + 0x69] = 0;
    assert!(matches!(
        Vbios::parse(&bad),
        Err(Error::Invalid { value: 0, .. })
    ));

    // BIT with a bad checksum: the ROM parses, FWSEC is not found.
    let rom2 = build(&RomSpec {
        bit_checksum_ok: false,
        ..Default::default()
    });
    let v = Vbios::parse(&rom2.bytes).unwrap();
    assert!(v.bit.is_none());
    assert!(matches!(v.fwsec(), Err(Error::Missing { .. })));

    // Descriptor v2 (Turing/GA100 boot-with-loader).
    let rom2 = build(&RomSpec {
        desc_version: 2,
        ..Default::default()
    });
    let v = Vbios::parse(&rom2.bytes).unwrap();
    assert!(matches!(
        v.fwsec(),
        Err(Error::UnsupportedVersion { version: 2, .. })
    ));

    // StoredSize beyond the ROM.
    let rom2 = build(&RomSpec {
        stored_size: 0x10_0000,
        ..Default::default()
    });
    let v = Vbios::parse(&rom2.bytes).unwrap();
    assert!(matches!(v.fwsec(), Err(Error::OutOfBounds { .. })));
    // StoredSize smaller than IMEM + signature location.
    let rom2 = build(&RomSpec {
        stored_size: 0x400,
        ..Default::default()
    });
    let v = Vbios::parse(&rom2.bytes).unwrap();
    assert!(matches!(v.fwsec(), Err(Error::OutOfBounds { .. })));
}

#[test]
fn broken_interface_tables_give_typed_errors() {
    type Check = fn(&Error) -> bool;
    let cases: Vec<(RomSpec, Check)> = vec![
        (
            RomSpec {
                appif_entries: vec![(4, common::MAPPER as u32)],
                ..Default::default()
            },
            |e| matches!(e, Error::Invalid { value: 1, .. }),
        ),
        (
            RomSpec {
                appif_entries: vec![(1, 0), (2, 0)],
                ..Default::default()
            },
            |e| matches!(e, Error::Missing { .. }),
        ),
        (
            RomSpec {
                appif_entries: vec![(1, 0), (4, 0x5f0)],
                ..Default::default()
            },
            |e| matches!(e, Error::OutOfBounds { .. }),
        ),
        (
            RomSpec {
                cmd_in_size: 44,
                ..Default::default()
            },
            |e| matches!(e, Error::BadSize { size: 44, .. }),
        ),
        (
            RomSpec {
                cmd_in_offset: 0x5e0,
                ..Default::default()
            },
            |e| matches!(e, Error::OutOfBounds { .. }),
        ),
    ];
    for (spec, want) in cases {
        let rom = build(&spec);
        let v = Vbios::parse(&rom.bytes).unwrap();
        let f = v.fwsec().unwrap();
        let e = f.patch_frts(0x10_0000, 0x10_0000, 0).unwrap_err();
        assert!(want(&e), "{e:?}");
    }
}

#[test]
fn endless_image_chains_are_cut_off() {
    // MAX_IMAGES + 1 images, none marked last.
    let one = {
        let rom = build(&RomSpec::default());
        let mut img = rom.bytes[0x1000..0x1800].to_vec(); // the EFI image, not last
        img[0x55] = 0;
        img[0x6a] = 0;
        img
    };
    let mut rom = Vec::new();
    for _ in 0..=MAX_IMAGES {
        rom.extend_from_slice(&one);
    }
    assert!(matches!(Vbios::parse(&rom), Err(Error::Invalid { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Corrupting any bytes of a good ROM never panics (errors or different results are fine).
    #[test]
    fn corrupted_roms_never_panic(edits in proptest::collection::vec((0usize..0x3000, any::<u8>()), 1..16)) {
        let mut rom = build(&RomSpec::default()).bytes;
        for (at, v) in edits {
            rom[at] = v;
        }
        if let Ok(v) = Vbios::parse(&rom) {
            let _ = v.version();
            let _ = v.bit_tokens().count();
            if let Ok(f) = v.fwsec() {
                let _ = f.patch_frts(0x10_0000, 0x10_0000, 1);
                let _ = f.patch_sb(0);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = Vbios::parse(&bytes).map(|v| v.fwsec().map(|f| f.patch_frts(0x1000, 0x1000, 0)));
        let _ = FirmwareFile::detect(&bytes);
    }
}

fn v2_spec() -> RomSpec {
    RomSpec {
        desc_version: 2,
        ..Default::default()
    }
}

#[test]
fn fwsec_v2_gives_the_buffers_rm_dmas_from() {
    let spec = v2_spec();
    let rom = build(&spec);
    let v = Vbios::parse(&rom.bytes).unwrap();
    // A v2 ROM has no v3 FWSEC, and the other way round.
    assert!(matches!(
        v.fwsec(),
        Err(Error::UnsupportedVersion { version: 2, .. })
    ));
    let v3 = build(&RomSpec::default());
    assert!(matches!(
        Vbios::parse(&v3.bytes).unwrap().fwsec_v2(),
        Err(Error::UnsupportedVersion { version: 3, .. })
    ));
    let f = v.fwsec_v2().unwrap();
    assert_eq!(f.app_id, APPID_FWSEC_PROD);
    let ucode = common::ucode(&spec);
    assert_eq!(f.code(), &ucode[..common::IMEM]);
    assert_eq!(f.data(), &ucode[common::IMEM..]);

    let u = f.patch_frts(0x7fe0_0000, 0x10_0000).unwrap();
    assert_eq!(u.init_cmd, CMD_FRTS);
    assert_eq!(u.code, &ucode[..common::IMEM]);
    assert_eq!(u.data.len(), common::DMEM);
    // s_vbiosFillFlcnUcodeFromDescV2: non-secure = load - secure, secure at SecBase - VirtBase.
    assert_eq!((u.ns_offset, u.ns_size), (0, common::IMEM_SEC_BASE as u32));
    assert_eq!(
        (u.sec_offset, u.sec_size),
        (
            common::IMEM_SEC_BASE as u32,
            (common::IMEM - common::IMEM_SEC_BASE) as u32
        )
    );
    assert_eq!((u.dmem_pa, u.dmem_size), (0, common::DMEM as u32));
    // The command, patched in the data buffer; no signature (v2 carries none).
    assert_eq!(u32_at(&u.data, common::MAPPER + 44), CMD_FRTS);
    let c = common::CMD_IN;
    assert_eq!(u32_at(&u.data, c + 24 + 8), 0x7fe0_0000 >> 12);
    assert_eq!(u32_at(&u.data, c + 24 + 12), 0x100);
    assert_eq!(
        &u.data[common::PKC..common::PKC + 384],
        &ucode[common::IMEM + common::PKC..common::IMEM + common::PKC + 384]
    );
    let sb = f.patch_sb().unwrap();
    assert_eq!(u32_at(&sb.data, common::MAPPER + 44), CMD_SB);
    assert_eq!(sb.code, u.code);
}

#[test]
fn fwsec_v2_rejects_what_rm_rejects() {
    // DMEMOffset past the ROM.
    let rom = build(&RomSpec {
        v2_dmem_offset: 0x10_0000,
        ..v2_spec()
    });
    assert!(matches!(
        Vbios::parse(&rom.bytes).unwrap().fwsec_v2(),
        Err(Error::OutOfBounds { .. })
    ));
    // The interface table cannot take the command: no DMEMMAPPER entry.
    let rom = build(&RomSpec {
        appif_entries: vec![(1, 0x180), (7, 0)],
        ..v2_spec()
    });
    let f = Vbios::parse(&rom.bytes).unwrap().fwsec_v2().unwrap();
    assert!(matches!(
        f.patch_frts(0x7fe0_0000, 0x10_0000),
        Err(Error::Missing { .. })
    ));
    assert!(matches!(
        f.patch_frts(0x1234, 0x10_0000),
        Err(Error::Invalid { .. })
    ));
    // Every truncation of the ROM is an error or a smaller, consistent FWSEC; never a panic.
    let rom = build(&v2_spec());
    for cut in (0..rom.bytes.len()).step_by(97) {
        if let Ok(v) = Vbios::parse(&rom.bytes[..cut])
            && let Ok(f) = v.fwsec_v2()
        {
            let _ = f.patch_sb();
        }
    }
}

#[test]
fn fwsec_v2_secure_size_beyond_the_load_is_refused() {
    let mut rom = build(&v2_spec());
    // Find the descriptor: the header word of a v2, 60-byte descriptor.
    let vdesc = 1u32 | (2 << 8) | (60 << 16);
    let at = rom
        .bytes
        .windows(4)
        .position(|w| u32::from_le_bytes(w.try_into().unwrap()) == vdesc)
        .unwrap();
    rom.bytes[at + 36..at + 40].copy_from_slice(&0x800u32.to_le_bytes());
    assert!(matches!(
        Vbios::parse(&rom.bytes).unwrap().fwsec_v2(),
        Err(Error::Invalid { .. })
    ));
}
