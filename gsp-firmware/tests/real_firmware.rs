//! Every r570.144 firmware file of Debian's firmware-nvidia-graphics 20260916-1, parsed and
//! cross-checked against facts found elsewhere: readelf output, the symbol table, OpenRM's
//! bindata sizes, tinygrad's constants, the extraction script's layout, and sha256/SHA-384.
//!
//! These tests need the firmware cache (`tools/fetch-firmware.sh`); they fail without it.

use nvbare_core::chip::{CHIPS, Chipset};
use nvbare_gsp_firmware::fmc::SignatureScheme;
use nvbare_gsp_firmware::pinned::{self, FirmwareKind, boot_files, firmware_path, pinned_files};
use nvbare_gsp_firmware::radix3::{self, Radix3};
use nvbare_gsp_firmware::{
    BooterImage, Error, FirmwareFile, FmcImage, GenericBootloader, GspFirmware, RiscvBootloader,
    testutil,
};
use sha2::{Digest, Sha384};

fn read(path: &str) -> Vec<u8> {
    testutil::read_path(path)
}

#[test]
fn every_pinned_file_is_cached_and_matches_its_sha256() {
    testutil::require_firmware_dir();
    let mut n = 0;
    for p in pinned_files() {
        let bytes = read(p.path);
        assert_eq!(
            pinned::sha256(&bytes),
            p.sha256,
            "{} does not match firmware/r570.144.sha256; {}",
            p.path,
            testutil::FETCH_HINT
        );
        pinned::verify(p.path, &bytes).unwrap();
        n += 1;
    }
    assert_eq!(n, 33);
}

#[test]
fn every_file_is_detected_as_the_kind_its_name_says() {
    testutil::require_firmware_dir();
    for p in pinned_files() {
        let bytes = read(p.path);
        let name = p.path.rsplit('/').next().unwrap();
        let kind = FirmwareKind::from_file_name(name).unwrap();
        let file = FirmwareFile::detect(&bytes).unwrap_or_else(|e| panic!("{}", e.in_file(p.path)));
        let ok = matches!(
            (kind, &file),
            (FirmwareKind::Gsp, FirmwareFile::Gsp(_))
                | (FirmwareKind::Fmc, FirmwareFile::Fmc(_))
                | (FirmwareKind::BooterLoad, FirmwareFile::Booter(_))
                | (FirmwareKind::BooterUnload, FirmwareFile::Booter(_))
                | (FirmwareKind::Scrubber, FirmwareFile::Booter(_))
                | (FirmwareKind::Bootloader, FirmwareFile::RiscvBootloader(_))
                | (
                    FirmwareKind::GenBootloader,
                    FirmwareFile::GenericBootloader(_)
                )
        );
        assert!(ok, "{} detected as {}", p.path, file.kind_name());
    }
}

/// Section sizes as `readelf -S` prints them for the two GSP-RM images.
#[test]
fn gsp_images_have_the_sections_readelf_shows() {
    let ga = read("nvidia/ga102/gsp/gsp-570.144.bin");
    let fw = GspFirmware::parse(&ga).unwrap();
    assert_eq!(fw.version(), "570.144");
    assert_eq!(fw.image().len(), 0x3c9_9000);
    let names: Vec<_> = fw.elf().sections().iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "",
            ".fwimage",
            ".note.gnu.build-id",
            ".fwversion",
            ".fwsignature_gb20x",
            ".fwsignature_cc_gb10x",
            ".fwsignature_gb10x",
            ".fwsignature_cc_gh100",
            ".fwsignature_gh100",
            ".fwsignature_ad10x",
            ".fwsignature_ga10x",
            ".symtab",
            ".strtab",
            ".shstrtab",
        ]
    );
    assert_eq!(fw.elf().section(".fwimage").unwrap().offset, 0x40);
    assert!(fw.signatures().all(|s| s.data.len() == 0x1000));
    assert_eq!(fw.build_id().map(<[u8]>::len), Some(20));
    assert_eq!(fw.elf().machine, nvbare_gsp_firmware::elf::EM_RISCV);
    // The image is not a nested ELF: it starts with RISC-V code (auipc).
    assert_eq!(&fw.image()[..4], &[0x97, 0x42, 0x06, 0x00]);

    let tu = read("nvidia/tu102/gsp/gsp-570.144.bin");
    let fw = GspFirmware::parse(&tu).unwrap();
    assert_eq!(fw.image().len(), 0x1b3_4ea0);
    let fams: Vec<_> = fw
        .signatures()
        .map(|s| (s.family, s.confidential_compute))
        .collect();
    assert_eq!(fams, [("ga100", false), ("tu11x", false), ("tu10x", false)]);
}

/// The `_binary_..._size` symbol the firmware build emits is an independent record of the
/// `.fwimage` size.
#[test]
fn fwimage_size_matches_the_binary_size_symbol() {
    for path in [
        "nvidia/ga102/gsp/gsp-570.144.bin",
        "nvidia/tu102/gsp/gsp-570.144.bin",
    ] {
        let bytes = read(path);
        let fw = GspFirmware::parse(&bytes).unwrap();
        let symtab = fw.elf().section(".symtab").unwrap().data;
        let strtab = fw.elf().section(".strtab").unwrap().data;
        let mut size_sym = None;
        for sym in symtab.chunks_exact(24) {
            let name = u32::from_le_bytes(sym[0..4].try_into().unwrap()) as usize;
            let value = u64::from_le_bytes(sym[8..16].try_into().unwrap());
            let end = strtab[name..].iter().position(|&b| b == 0).unwrap();
            let name = std::str::from_utf8(&strtab[name..name + end]).unwrap();
            // ..._firmware_ga10x_firmware_bin_size, ..._firmware_tu10x_firmware_elf_stripped_size
            if name.starts_with("_binary_") && name.ends_with("_size") {
                size_sym = Some(value);
            }
        }
        assert_eq!(size_sym, Some(fw.image().len() as u64), "{path}");
    }
}

/// The family names in `nvbare_core::chip::CHIPS` select a signature in each chip's own
/// `gsp-570.144.bin` (the family rule itself is tested in nvbare-core against
/// `nv-firmware-chip-family-select.h`).
#[test]
fn every_chip_finds_its_signature_in_its_own_gsp_image() {
    testutil::require_firmware_dir();
    for info in CHIPS {
        let path = firmware_path(info.chipset, FirmwareKind::Gsp);
        let bytes = read(&path);
        let fw = GspFirmware::parse(&bytes).unwrap();
        let sig = fw
            .signature(info.chipset)
            .unwrap_or_else(|e| panic!("{}: {}", info.name, e.in_file(&path)));
        assert_eq!(sig.len(), 0x1000);
        let cc = fw.signature_cc(info.chipset);
        let has_cc = matches!(info.gsp_signature_family, "gh100" | "gb10x");
        assert_eq!(cc.is_ok(), has_cc, "{}", info.name);
    }
}

#[test]
fn radix3_of_the_real_image_walks_back_to_its_bytes() {
    let bytes = read("nvidia/ga102/gsp/gsp-570.144.bin");
    let fw = GspFirmware::parse(&bytes).unwrap();
    let r3: Radix3<'_> = fw.radix3().unwrap();
    let layout = *r3.layout();
    assert_eq!(layout.level_pages(3), 15513);
    assert_eq!(layout.table_pages(), 33);
    // Scatter the pages: page i at a distinct address far from i * 4096.
    let addr = |i: u64| 0x80_0000_0000 + ((i * 7919) % 65521) * 4096;
    let tables: Vec<[u8; 4096]> = (0..layout.table_pages())
        .map(|i| r3.page(i, addr).unwrap())
        .collect();
    let table_at = |a: u64| (0..layout.table_pages()).find(|&i| addr(i) == a);
    let data = radix3::walk(&layout, addr(0), |t, i| {
        let p = table_at(t).ok_or(Error::Missing { what: "table page" })?;
        let e = &tables[p as usize][i as usize * 8..][..8];
        Ok(u64::from_le_bytes(e.try_into().unwrap()))
    })
    .unwrap();
    assert_eq!(data.len() as u64, layout.data_pages());
    let first_data = layout.table_pages();
    for (j, a) in data.iter().enumerate() {
        let expect = addr(first_data + j as u64);
        assert_eq!(*a, expect, "data page {j}");
        let page = r3.page(first_data + j as u64, addr).unwrap();
        let chunk = &fw.image()[j * 4096..((j + 1) * 4096).min(fw.image().len())];
        assert_eq!(&page[..chunk.len()], chunk, "data page {j}");
    }
}

#[test]
fn booters_match_the_extraction_layout_and_tinygrad() {
    testutil::require_firmware_dir();
    for p in pinned_files() {
        let kind = FirmwareKind::from_file_name(p.path.rsplit('/').next().unwrap()).unwrap();
        if !matches!(
            kind,
            FirmwareKind::BooterLoad | FirmwareKind::BooterUnload | FirmwareKind::Scrubber
        ) {
            continue;
        }
        let bytes = read(p.path);
        let b = BooterImage::parse(&bytes).unwrap();
        let turing = p.path.starts_with("nvidia/tu1");
        // extract-firmware-nouveau.py: 16-byte signatures for TU10x/TU11x, 384 otherwise.
        assert_eq!(
            b.signature_size(),
            if turing { 16 } else { 384 },
            "{}",
            p.path
        );
        // The image is the code followed by the DMEM data (plus padding in some unloaders).
        let l = &b.load;
        let data_end = (l.os_data_offset.get() + l.os_data_size.get()) as usize;
        assert!(data_end <= b.image().len(), "{}", p.path);
        assert!(b.image().len() - data_end < 0x200, "{}", p.path);
        if kind == FirmwareKind::BooterLoad {
            assert_eq!(data_end, b.image().len(), "{}", p.path);
        }
        assert_eq!(
            l.app_code_offset.get() + l.app_code_size.get(),
            l.os_data_offset.get()
        );
        // The ucode's fuse version is the index of its newest signature.
        assert_eq!(b.meta.fuse_ver.get() + 1, b.num_sigs, "{}", p.path);
        assert_eq!(b.engine_id_mask(), 1, "{}: SEC2", p.path);
        // tinygrad (ip.py, booter on SEC2): pkc_off 0x10, engid 1, ucodeid 3 for GA10x/AD10x.
        if (p.path.contains("/ga102/") || p.path.contains("/ad102/"))
            && kind != FirmwareKind::Scrubber
        {
            assert_eq!(b.ucode_id(), 3, "{}", p.path);
            assert_eq!(b.pkc_data_offset(), 0x10, "{}", p.path);
        }
        // Signature selection and patching.
        for fuse in 0..b.num_sigs {
            let img = b.patched_image(fuse).unwrap();
            let sig = b.signature_for_fuse(fuse).unwrap();
            let at = b.patch_loc as usize;
            assert_eq!(&img[at..at + sig.len()], sig);
            assert_eq!(&img[..at], &b.image()[..at]);
            assert_eq!(&img[at + sig.len()..], &b.image()[at + sig.len()..]);
        }
        if b.num_sigs > 1 {
            assert!(matches!(
                b.patched_image(b.num_sigs),
                Err(Error::NoSignatureForFuse { .. })
            ));
            // OpenRM: fuse version 0 takes the last signature.
            assert_eq!(
                b.signature_for_fuse(0).unwrap(),
                b.signature(b.num_sigs - 1).unwrap()
            );
        }
    }
}

#[test]
fn riscv_bootloaders_match_openrm_bindata() {
    testutil::require_firmware_dir();
    for chip in [
        "tu102", "tu116", "ga100", "ga102", "ad102", "gh100", "gb100", "gb202",
    ] {
        let path = format!("nvidia/{chip}/gsp/bootloader-570.144.bin");
        let bytes = read(&path);
        let bl = RiscvBootloader::parse(&bytes).unwrap();
        let d = &bl.desc;
        if matches!(chip, "tu102" | "tu116" | "ga100") {
            // The LIBOS2 bootloader (bootloader-535.113.01.bin in the package).
            assert_eq!((d.version.get(), bl.desc_size), (4, 76), "{path}");
            continue;
        }
        assert_eq!((d.version.get(), bl.desc_size), (5, 84), "{path}");
        // manifest, then monitor data, then monitor code.
        assert_eq!(bl.manifest_offset(), 0, "{path}");
        assert_eq!(bl.data_offset(), d.manifestSize.get(), "{path}");
        assert_eq!(
            bl.code_offset(),
            bl.data_offset() + d.monitorDataSize.get(),
            "{path}"
        );
        assert_eq!(bl.code().len() as u32, d.monitorCodeSize.get());
        assert_eq!(d.bIsMonitorEnabled.get(), 1);
        assert_eq!(bl.app_version(), 0);
    }
    // rm-abi.md §6: g_bindata_kgspGetBinArchiveGspRmBoot_GH100.c holds a 167936-byte image and
    // an 84-byte RM_RISCV_UCODE_DESC.
    let bytes = read("nvidia/gh100/gsp/bootloader-570.144.bin");
    let bl = RiscvBootloader::parse(&bytes).unwrap();
    assert_eq!(bl.image().len(), 167_936);
}

#[test]
fn generic_bootloader_descriptor() {
    let bytes = read("nvidia/tu102/gsp/gen_bootloader-570.144.bin");
    let g = GenericBootloader::parse(&bytes).unwrap();
    assert_eq!(g.desc.start_tag.get(), 0xfd);
    assert_eq!((g.desc.code_off.get(), g.desc.code_size.get()), (0, 0x200));
    assert_eq!(
        (g.desc.data_off.get(), g.desc.data_size.get()),
        (0x200, 0x100)
    );
    assert_eq!(g.bin.image.len(), 0x300);
}

#[test]
fn fmc_images_carry_what_the_cot_message_needs() {
    for chip in [Chipset::GH100, Chipset::GB100, Chipset::GB202] {
        let path = firmware_path(chip, FirmwareKind::Fmc);
        let bytes = read(&path);
        let fmc = FmcImage::parse(&bytes).unwrap();
        let names: Vec<_> = fmc.elf().sections().iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            ["", ".shstrtab", "hash", "signature", "publickey", "image"]
        );
        assert_eq!(fmc.hash, Sha384::digest(fmc.image).as_slice());
        assert_eq!(fmc.cot_hash(), <[u8; 48]>::try_from(fmc.hash).unwrap());
        let pk = fmc.cot_public_key();
        assert_eq!(&pk[..fmc.public_key.len()], fmc.public_key);
        assert!(pk[fmc.public_key.len()..].iter().all(|&b| b == 0));
        let sig = fmc.cot_signature();
        assert_eq!(&sig[..fmc.signature.len()], fmc.signature);
        if chip == Chipset::GH100 {
            assert_eq!(fmc.scheme(), SignatureScheme::Rsa3k);
            // rm-abi.md §6: the GH100 FMC bindata image is 165448 bytes.
            assert_eq!(fmc.image.len(), 165_448);
        } else {
            assert_eq!(fmc.scheme(), SignatureScheme::EcdsaP384);
            assert_eq!(fmc.public_key[0], 0x04, "uncompressed point");
        }
    }
}

#[test]
fn boot_file_sets_exist_for_every_chip() {
    testutil::require_firmware_dir();
    let mut paths: Vec<String> = CHIPS
        .iter()
        .flat_map(|info| {
            boot_files(info.chipset)
                .iter()
                .map(|&k| firmware_path(info.chipset, k))
        })
        .collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let bytes = read(&path);
        pinned::verify(&path, &bytes).unwrap();
        FirmwareFile::detect(&bytes).unwrap();
    }
}

#[test]
fn another_chips_file_is_reported_as_such() {
    let gb202 = read("nvidia/gb202/gsp/fmc-570.144.bin");
    let e = pinned::verify("nvidia/gh100/gsp/fmc-570.144.bin", &gb202).unwrap_err();
    match &e {
        Error::WrongFile { expected, found } => {
            assert_eq!(expected, "nvidia/gh100/gsp/fmc-570.144.bin");
            assert_eq!(found, "nvidia/gb202/gsp/fmc-570.144.bin");
        }
        other => panic!("{other:?}"),
    }
    let msg = e.in_file("fmc-570.144.bin").to_string();
    assert!(
        msg.starts_with("fmc-570.144.bin: expected nvidia/gh100"),
        "{msg}"
    );
    // A Turing GSP image cannot boot Hopper.
    let tu = read("nvidia/tu102/gsp/gsp-570.144.bin");
    let fw = GspFirmware::parse(&tu).unwrap();
    let e = fw.signature(Chipset::GH100).unwrap_err();
    assert!(matches!(e, Error::NoSignature { ref section, .. } if section == ".fwsignature_gh100"));
    assert!(e.to_string().contains(".fwsignature_tu10x"), "{e}");
}
