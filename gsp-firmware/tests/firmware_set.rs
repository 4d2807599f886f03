//! `FirmwareSet`: what the boot code gets, and the typed errors for missing, wrong-version and
//! wrong-chip files. Real files come from the firmware cache (`tools/fetch-firmware.sh`).

use nvbare_core::chip::Chipset;
use nvbare_core::gsp::boot::firmware::{
    BootFirmware, BooterKind, FirmwareError, FwsecCommand, VbiosFirmware,
};
use nvbare_gsp_firmware::boot::{LoadError, ParsedVbios, ReadError};
use nvbare_gsp_firmware::testutil::{self, vbios};
use nvbare_gsp_firmware::{Error, FirmwareSet, GspFirmware, RiscvBootloader};

fn reader(path: &str) -> Result<Vec<u8>, ReadError> {
    let full = testutil::require_firmware_dir().join(path);
    std::fs::read(full).map_err(|e| ReadError::Io(e.to_string()))
}

#[test]
fn every_sim_chip_loads_and_provides_its_pieces() {
    for chip in [
        Chipset::AD102,
        Chipset::GH100,
        Chipset::GB202,
        Chipset::GA104,
    ] {
        let set = FirmwareSet::load(chip, reader).unwrap();
        assert_eq!(set.chipset(), chip);
        let gsp_bytes = testutil::read_firmware(chip, nvbare_gsp_firmware::FirmwareKind::Gsp);
        let g = GspFirmware::parse(&gsp_bytes).unwrap();
        assert_eq!(set.gsp_image(), g.image());
        assert_eq!(set.gsp_signature(), g.signature(chip).unwrap());
        let bl_bytes = testutil::read_firmware(chip, nvbare_gsp_firmware::FirmwareKind::Bootloader);
        let bl = RiscvBootloader::parse(&bl_bytes).unwrap();
        let d = set.bootloader();
        assert_eq!(d.image, bl.image());
        assert_eq!(
            (d.code_offset, d.data_offset, d.manifest_offset),
            (bl.code_offset(), bl.data_offset(), bl.manifest_offset())
        );
        match chip.info().boot {
            nvbare_core::chip::BootMethod::Booter => {
                let f = set.booter_fuse(BooterKind::Load).unwrap();
                // tinygrad: booter_load on SEC2 with engid 1, ucodeid 3, pkc offset 0x10.
                assert_eq!((f.engine_id_mask, f.ucode_id), (1, 3));
                let u = set.booter(BooterKind::Load, 1).unwrap();
                assert_eq!(u.load.brom.pkc_data_offset, 0x10);
                assert_eq!(u.load.imem_va, u.load.code_offset);
                assert!(matches!(
                    set.booter(BooterKind::Load, 7),
                    Err(FirmwareError::NoSignature {
                        file: "booter_load",
                        fuse_version: 7
                    })
                ));
                assert!(matches!(
                    set.fmc(),
                    Err(FirmwareError::Missing { file: "fmc" })
                ));
            }
            nvbare_core::chip::BootMethod::FspChainOfTrust => {
                let f = set.fmc().unwrap();
                assert_ne!(f.hash, [0; 48]);
                assert!(matches!(
                    set.booter_fuse(BooterKind::Load),
                    Err(FirmwareError::Missing {
                        file: "booter_load"
                    })
                ));
            }
        }
    }
}

#[test]
fn a_missing_file_is_named() {
    let e = FirmwareSet::load(Chipset::AD102, |p| {
        if p.contains("booter_unload") {
            Err(ReadError::NotFound)
        } else {
            reader(p)
        }
    })
    .unwrap_err();
    assert_eq!(
        e,
        LoadError::Missing {
            path: "nvidia/ad102/gsp/booter_unload-570.144.bin".into()
        }
    );
    assert!(e.to_string().contains("fetch-firmware.sh"), "{e}");
}

#[test]
fn another_version_or_another_chips_file_is_refused() {
    // A GSP image whose .fwversion says 535: not the pinned file, and with the pin check off,
    // the version check catches it.
    let mut gsp = reader("nvidia/ga102/gsp/gsp-570.144.bin").unwrap();
    let at = {
        let g = GspFirmware::parse(&gsp).unwrap();
        let s = g
            .elf()
            .section(".fwversion")
            .expect("the .fwversion section");
        assert_eq!(&s.data[..8], b"570.144\0");
        usize::try_from(s.offset).unwrap()
    };
    gsp[at..at + 7].copy_from_slice(b"535.113");
    let swap = |g: Vec<u8>| {
        move |p: &str| {
            if p.ends_with("/gsp-570.144.bin") {
                Ok(g.clone())
            } else {
                reader(p)
            }
        }
    };
    let e = FirmwareSet::load(Chipset::AD102, swap(gsp.clone())).unwrap_err();
    assert!(
        matches!(&e, LoadError::File(f) if matches!(f.error, Error::NotPinned { .. })),
        "{e}"
    );
    let e = FirmwareSet::load_unpinned(Chipset::AD102, swap(gsp)).unwrap_err();
    assert!(
        matches!(&e, LoadError::File(f) if matches!(f.error, Error::VersionMismatch { .. })),
        "{e}"
    );
    // GH100's FMC where GB202's belongs.
    let fmc = reader("nvidia/gh100/gsp/fmc-570.144.bin").unwrap();
    let e = FirmwareSet::load(Chipset::GB202, |p| {
        if p.ends_with("fmc-570.144.bin") {
            Ok(fmc.clone())
        } else {
            reader(p)
        }
    })
    .unwrap_err();
    assert!(
        matches!(&e, LoadError::File(f) if matches!(f.error, Error::WrongFile { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("gh100"), "{e}");
    // Turing's GSP image has no .fwsignature_ad10x.
    let tu = reader("nvidia/tu102/gsp/gsp-570.144.bin").unwrap();
    let e = FirmwareSet::load_unpinned(Chipset::AD102, swap(tu)).unwrap_err();
    assert!(
        matches!(&e, LoadError::File(f) if matches!(f.error, Error::NoSignature { .. })),
        "{e}"
    );
}

#[test]
fn vbios_fwsec_is_prepared_for_frts_and_sb() {
    let rom = vbios::build(&vbios::RomSpec::default());
    let v = ParsedVbios::new(rom.bytes.clone()).unwrap();
    let f = v.fwsec_fuse();
    assert_eq!((f.engine_id_mask, f.ucode_id), (0x400, 9));
    let u = v
        .fwsec(
            FwsecCommand::Frts {
                offset: 0x5_ff20_0000,
                size: 1 << 20,
            },
            3,
        )
        .unwrap();
    assert_eq!(u.load.imem_size as usize, vbios::IMEM);
    assert_eq!(u.load.data_offset as usize, vbios::IMEM);
    assert_eq!(u.load.dmem_size as usize, vbios::DMEM);
    assert_eq!(u.load.brom.pkc_data_offset as usize, vbios::PKC);
    // The signature for fuse version 3 is the third (bits 0 and 1 come first).
    let at = vbios::IMEM + vbios::PKC;
    assert_eq!(&u.image[at..at + 384], &vbios::signature(2)[..]);
    assert!(matches!(
        v.fwsec(FwsecCommand::Sb, 2),
        Err(FirmwareError::NoSignature {
            file: "FWSEC",
            fuse_version: 2
        })
    ));
    // Reading a ROM through the trait (word by word, stopping at the window's end).
    let set = FirmwareSet::load(Chipset::AD102, reader).unwrap();
    let mut read = |off: usize| {
        rom.bytes
            .get(off..off + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let v = set.parse_vbios(&mut read).unwrap();
    assert_eq!(v.rom().len() / 4 * 4, rom.bytes.len() / 4 * 4);
    // All-ones (nothing answers the PROM window) is an error, not a panic.
    let mut ones = |_| Some(u32::MAX);
    assert!(matches!(
        set.parse_vbios(&mut ones),
        Err(FirmwareError::Invalid { file: "VBIOS", .. })
    ));
}
