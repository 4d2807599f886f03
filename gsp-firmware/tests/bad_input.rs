//! Truncated, corrupted, wrong-version and wrong-chip files: typed errors, never a panic.
//! Real files come from the firmware cache (`tools/fetch-firmware.sh`); the rest are built here.

use nvbare_core::chip::Chipset;
use nvbare_gsp_firmware::{
    BooterImage, Error, FirmwareFile, FmcImage, GenericBootloader, GspFirmware, RiscvBootloader,
    testutil,
};
use proptest::prelude::*;
use sha2::{Digest, Sha384};

fn read(path: &str) -> Vec<u8> {
    testutil::read_path(path)
}

const SMALL_FILES: [&str; 6] = [
    "nvidia/ga102/gsp/booter_load-570.144.bin",
    "nvidia/tu102/gsp/booter_unload-570.144.bin",
    "nvidia/gh100/gsp/bootloader-570.144.bin",
    "nvidia/tu102/gsp/bootloader-570.144.bin",
    "nvidia/tu102/gsp/gen_bootloader-570.144.bin",
    "nvidia/gb202/gsp/fmc-570.144.bin",
];

fn parse_as_named(path: &str, bytes: &[u8]) -> Result<(), Error> {
    let name = path.rsplit('/').next().unwrap();
    if name.starts_with("booter") {
        BooterImage::parse(bytes).map(|_| ())
    } else if name.starts_with("gen_bootloader") {
        GenericBootloader::parse(bytes).map(|_| ())
    } else if name.starts_with("bootloader") {
        RiscvBootloader::parse(bytes).map(|_| ())
    } else if name.starts_with("fmc") {
        FmcImage::parse(bytes).map(|_| ())
    } else {
        GspFirmware::parse(bytes).map(|_| ())
    }
}

#[test]
fn every_truncation_is_an_error() {
    for path in SMALL_FILES {
        let bytes = read(path);
        parse_as_named(path, &bytes).unwrap();
        let step = (bytes.len() / 300).max(1);
        for cut in (0..bytes.len()).step_by(step).chain([bytes.len() - 1]) {
            let t = &bytes[..cut];
            assert!(parse_as_named(path, t).is_err(), "{path} cut at {cut}");
            assert!(FirmwareFile::detect(t).is_err(), "{path} cut at {cut}");
        }
    }
    let gsp = read("nvidia/ga102/gsp/gsp-570.144.bin");
    for cut in [
        0,
        4,
        63,
        64,
        0x1000,
        gsp.len() / 2,
        gsp.len() - 0x300,
        gsp.len() - 1,
    ] {
        let e = GspFirmware::parse(&gsp[..cut]).unwrap_err();
        assert!(
            matches!(e, Error::OutOfBounds { .. } | Error::BadMagic { .. }),
            "cut at {cut}: {e:?}"
        );
    }
}

#[test]
fn wrong_gsp_version_is_rejected() {
    let mut gsp = read("nvidia/tu102/gsp/gsp-570.144.bin");
    let at = GspFirmware::parse(&gsp)
        .unwrap()
        .elf()
        .section(".fwversion")
        .unwrap()
        .offset as usize;
    gsp[at..at + 8].copy_from_slice(b"580.142\0");
    let e = GspFirmware::parse(&gsp).unwrap_err();
    assert_eq!(
        e,
        Error::VersionMismatch {
            found: "580.142".into(),
            expected: "570.144"
        }
    );
    assert!(
        e.in_file("gsp-570.144.bin")
            .to_string()
            .starts_with("gsp-570.144.bin: firmware version 580.142")
    );
    assert_eq!(
        GspFirmware::parse_any_version(&gsp).unwrap().version(),
        "580.142"
    );
    // A version string without its NUL.
    gsp[at + 7] = b'9';
    assert!(matches!(
        GspFirmware::parse_any_version(&gsp),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn wrong_chip_signatures_are_reported() {
    let gsp = read("nvidia/ga102/gsp/gsp-570.144.bin");
    let fw = GspFirmware::parse(&gsp).unwrap();
    for chip in [Chipset::TU102, Chipset::TU116, Chipset::GA100] {
        assert!(
            matches!(fw.signature(chip), Err(Error::NoSignature { .. })),
            "{chip}"
        );
    }
    assert!(matches!(
        fw.signature_cc(Chipset::AD102),
        Err(Error::NoSignature { .. })
    ));
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn corrupted_headers_give_typed_errors() {
    let booter = read("nvidia/ga102/gsp/booter_load-570.144.bin");
    // nvfw_bin_hdr
    let mut b = booter.clone();
    b[0] = 0xdf;
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::BadMagic { .. })
    ));
    let mut b = booter.clone();
    put32(&mut b, 4, 2);
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::UnsupportedVersion { version: 2, .. })
    ));
    let mut b = booter.clone();
    put32(&mut b, 20, u32::MAX); // data_size
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::OutOfBounds { .. })
    ));
    // nvfw_hs_header_v2 is at 0x18: num_sig -> 0x350, patch_sig -> 0x340, header_size at +32.
    let mut b = booter.clone();
    put32(&mut b, 0x350, 0);
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::Invalid {
            what: "HS num_sig",
            ..
        })
    ));
    let mut b = booter.clone();
    put32(&mut b, 0x350, 3); // 768 bytes read as three 256-byte signatures: consistent, accepted
    let img = BooterImage::parse(&b).unwrap();
    assert_eq!(img.signature_size(), 256);
    let mut b = booter.clone();
    put32(&mut b, 0x340, 1);
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::Invalid {
            what: "HS patch_sig",
            ..
        })
    ));
    let mut b = booter.clone();
    put32(&mut b, 0x18 + 32, 40);
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::BadSize { size: 40, .. })
    ));
    let mut b = booter.clone();
    put32(&mut b, 0x33c, 0xec00 - 100); // patch_loc: the signature would run off the image
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::OutOfBounds { .. })
    ));
    let mut b = booter.clone();
    put32(&mut b, 0x33c, 0x100); // patch_loc in the code, not in DMEM
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::OutOfBounds { .. })
    ));
    let mut b = booter.clone();
    put32(&mut b, 0x354 + 16, 2); // num_apps
    assert!(matches!(
        BooterImage::parse(&b),
        Err(Error::Invalid { value: 2, .. })
    ));

    // RM_RISCV_UCODE_DESC at 0x18.
    let bl = read("nvidia/gh100/gsp/bootloader-570.144.bin");
    let mut b = bl.clone();
    put32(&mut b, 0x18, 6);
    assert!(matches!(
        RiscvBootloader::parse(&b),
        Err(Error::UnsupportedVersion { version: 6, .. })
    ));
    let mut b = bl.clone();
    put32(&mut b, 0x18 + 48, 0x28000); // monitorCodeOffset past the image
    assert!(matches!(
        RiscvBootloader::parse(&b),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn corrupted_fmc_images_are_caught() {
    let fmc = read("nvidia/gh100/gsp/fmc-570.144.bin");
    let parsed = FmcImage::parse(&fmc).unwrap();
    let image_at = parsed.elf().section("image").unwrap().offset as usize;
    let hash_at = parsed.elf().section("hash").unwrap().offset as usize;
    // A flipped image byte: the section CRC catches it.
    let mut b = fmc.clone();
    b[image_at + 1000] ^= 1;
    assert!(
        matches!(FmcImage::parse(&b), Err(Error::Checksum { what, .. }) if what.contains("'image'"))
    );
    // Flipped and the CRC "fixed" (sh_info = 0 and flags cleared, so no CRC check): SHA-384.
    let shoff = u32::from_le_bytes(b[0x20..0x24].try_into().unwrap()) as usize;
    for i in 2..6 {
        put32(&mut b, shoff + 40 * i + 8, 0); // sh_flags
    }
    assert!(matches!(
        FmcImage::parse(&b),
        Err(Error::HashMismatch { .. })
    ));
    // A wrong hash, CRC checks off.
    let mut b = fmc.clone();
    for i in 2..6 {
        put32(&mut b, shoff + 40 * i + 8, 0);
    }
    FmcImage::parse(&b).unwrap();
    b[hash_at] ^= 0x80;
    assert!(matches!(
        FmcImage::parse(&b),
        Err(Error::HashMismatch { .. })
    ));
}

/// An FMC container built the way extract-firmware-nouveau.py `fmc()` lays it out.
fn fmc_elf(sections: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut shstr = vec![0u8];
    let mut names = vec![];
    for n in std::iter::once(".shstrtab").chain(sections.iter().map(|s| s.0)) {
        names.push(shstr.len() as u32);
        shstr.extend_from_slice(n.as_bytes());
        shstr.push(0);
    }
    let shnum = sections.len() + 2;
    let shoff = 52;
    let mut data_at = shoff + 40 * shnum;
    let mut out = vec![0u8; data_at];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 1;
    out[5] = 1;
    out[6] = 1;
    put32(&mut out, 0x14, 1); // e_version
    put32(&mut out, 0x20, shoff as u32);
    out[0x28] = 52;
    out[0x2e] = 40; // e_shentsize
    out[0x30] = shnum as u8;
    out[0x32] = 1; // e_shstrndx
    let mut blobs: Vec<(u32, u32, u32, u32, u32)> = vec![]; // name, type, flags, off, size, info
    blobs.push((names[0], 3, data_at as u32, shstr.len() as u32, 0));
    let mut body = shstr.clone();
    while body.len() % 4 != 0 {
        body.push(0);
    }
    data_at += body.len();
    for (i, (_, d)) in sections.iter().enumerate() {
        blobs.push((names[i + 1], 1, data_at as u32, d.len() as u32, 0));
        let mut d = d.clone();
        while d.len() % 4 != 0 {
            d.push(0);
        }
        data_at += d.len();
        body.extend_from_slice(&d);
    }
    for (i, (name, ty, off, size, _)) in blobs.iter().enumerate() {
        let h = shoff + 40 * (i + 1);
        put32(&mut out, h, *name);
        put32(&mut out, h + 4, *ty);
        put32(&mut out, h + 16, *off);
        put32(&mut out, h + 20, *size);
    }
    out.extend_from_slice(&body);
    out
}

#[test]
fn synthesized_fmc_containers() {
    let image = vec![0x42u8; 1000];
    let hash = Sha384::digest(&image).to_vec();
    let good = |sig: usize, pk: usize| {
        fmc_elf(&[
            ("hash", hash.clone()),
            ("signature", vec![1; sig]),
            ("publickey", vec![2; pk]),
            ("image", image.clone()),
        ])
    };
    let f = good(96, 97);
    let fmc = FmcImage::parse(&f).unwrap();
    assert_eq!(fmc.image, &image[..]);
    assert_eq!(fmc.cot_signature()[95..97], [1, 0]);
    assert!(matches!(
        FmcImage::parse(&good(385, 97)),
        Err(Error::BadSize { size: 385, .. })
    ));
    assert!(matches!(
        FmcImage::parse(&good(96, 0)),
        Err(Error::BadSize { size: 0, .. })
    ));
    let short_hash = fmc_elf(&[
        ("hash", hash[..47].to_vec()),
        ("signature", vec![1; 96]),
        ("publickey", vec![2; 97]),
        ("image", image.clone()),
    ]);
    assert!(matches!(
        FmcImage::parse(&short_hash),
        Err(Error::BadSize { size: 47, .. })
    ));
    let missing = fmc_elf(&[
        ("hash", hash.clone()),
        ("signature", vec![1; 96]),
        ("image", image.clone()),
    ]);
    let e = FmcImage::parse(&missing).unwrap_err();
    assert!(
        matches!(e, Error::MissingSection { ref name, .. } if name == "publickey"),
        "{e:?}"
    );
    let dup = fmc_elf(&[
        ("hash", hash.clone()),
        ("hash", hash.clone()),
        ("signature", vec![1; 96]),
        ("publickey", vec![2; 97]),
        ("image", image.clone()),
    ]);
    assert!(matches!(
        FmcImage::parse(&dup),
        Err(Error::DuplicateSection { .. })
    ));
    // ELF header damage.
    let mut b = good(96, 97);
    b[0x2e] = 41;
    assert!(matches!(FmcImage::parse(&b), Err(Error::Invalid { .. })));
    let mut b = good(96, 97);
    b[0x32] = 9; // e_shstrndx past e_shnum
    assert!(matches!(FmcImage::parse(&b), Err(Error::Invalid { .. })));
    let mut b = good(96, 97);
    put32(&mut b, 52 + 40 * 5 + 16, 0x7fff_fff0); // image sh_offset
    assert!(matches!(
        FmcImage::parse(&b),
        Err(Error::OutOfBounds { .. })
    ));
    let mut b = good(96, 97);
    b[5] = 2; // big-endian
    assert!(matches!(FmcImage::parse(&b), Err(Error::Invalid { .. })));
}

#[test]
fn unknown_files_are_named_in_errors() {
    let e = FirmwareFile::detect(b"hello world").unwrap_err();
    assert!(matches!(e, Error::UnknownFormat { head } if &head == b"hell"));
    let msg = e.in_file("/tmp/hello.bin").to_string();
    assert!(msg.starts_with("/tmp/hello.bin: unknown format"), "{msg}");
    assert!(FirmwareFile::detect(b"").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random edits to the headers of real files never panic.
    #[test]
    fn edited_real_files_never_panic(
        which in 0usize..SMALL_FILES.len(),
        edits in proptest::collection::vec((0usize..0x600, any::<u8>()), 1..12),
    ) {
        let path = SMALL_FILES[which];
        let mut bytes = read(path);
        for (at, v) in edits {
            if at < bytes.len() {
                bytes[at] = v;
            }
        }
        let _ = parse_as_named(path, &bytes);
        if let Ok(FirmwareFile::Booter(b)) = FirmwareFile::detect(&bytes) {
            for fuse in 0..4 {
                let _ = b.patched_image(fuse);
            }
        }
    }
}
