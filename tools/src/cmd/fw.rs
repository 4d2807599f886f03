//! `nvbare fw`: fetch GSP firmware r570.144 into the cache, and inspect firmware files.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use nvbare::backend::firmware::{FetchMode, run_fetch_script};
use nvbare_core::chip::{CHIPS, Chipset};
use nvbare_gsp_firmware::elf::{Class, Elf};
use nvbare_gsp_firmware::fmc::SignatureScheme;
use nvbare_gsp_firmware::pinned;
use nvbare_gsp_firmware::{
    BooterImage, FIRMWARE_VERSION, FirmwareFile, FmcImage, GenericBootloader, GspFirmware,
    RiscvBootloader, Vbios,
};

use crate::CliError;
use crate::input;

pub use nvbare::backend::firmware::FETCH_SCRIPT;

/// `nvbare fw` subcommands.
#[derive(Subcommand, Debug)]
pub enum FwCommand {
    /// Download GSP firmware r570.144 (Debian firmware-nvidia-graphics 20260916-1) into
    /// $NVBARE_FIRMWARE_DIR (default ~/.cache/nvbare/firmware) and verify every file's sha256.
    Fetch {
        /// Only verify the cache; never use the network.
        #[arg(long)]
        check: bool,
        /// Download and reinstall even if the cache verifies.
        #[arg(long, conflicts_with = "check")]
        force: bool,
    },
    /// Print what a file is and its structure: GSP-RM ELF, booter/bootloader image, FMC ELF or
    /// VBIOS ROM.
    Inspect {
        /// The file.
        file: PathBuf,
        /// Also show what this chip would use from the file (e.g. gh100).
        #[arg(long)]
        chip: Option<String>,
        /// Print one JSON object instead (the same facts).
        #[arg(long)]
        json: bool,
    },
}

/// Runs `nvbare fw ...`.
pub fn run(out: &mut dyn Write, command: FwCommand) -> Result<(), CliError> {
    match command {
        FwCommand::Fetch { check, force } => fetch(check, force),
        FwCommand::Inspect { file, chip, json } => {
            let chip = chip
                .map(|c| {
                    Chipset::from_name(&c).ok_or_else(|| {
                        CliError::Usage(format!("unknown chip '{c}' (try gh100, ad102, gb202)"))
                    })
                })
                .transpose()?;
            if json {
                inspect_json(out, &file, chip)
            } else {
                inspect(out, &file, chip)
            }
        }
    }
}

/// `nvbare fw fetch [--check | --force]`: the embedded script, into the default directory.
fn fetch(check: bool, force: bool) -> Result<(), CliError> {
    let mode = match (check, force) {
        (true, _) => FetchMode::Check,
        (false, true) => FetchMode::Force,
        (false, false) => FetchMode::Fetch,
    };
    Ok(run_fetch_script(None, mode, false)?)
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Prints the structure of `path`; a cubin gets one line saying to use `nvbare cubin inspect`.
pub fn inspect(out: &mut dyn Write, path: &Path, chip: Option<Chipset>) -> Result<(), CliError> {
    let bytes = input::read_at_most(path, input::MAX_FIRMWARE_BYTES, input::FIRMWARE)?;
    if let Some(note) = super::cubin::cubin_note(path, &bytes) {
        return writeln!(out, "{note}").map_err(io);
    }
    let file = detect(path, &bytes)?;
    print_file(out, path, &bytes, &file, chip).map_err(io)
}

/// [`inspect`] as one JSON object ([`super::fw_json::FwReport`]).
pub fn inspect_json(
    out: &mut dyn Write,
    path: &Path,
    chip: Option<Chipset>,
) -> Result<(), CliError> {
    let bytes = input::read_at_most(path, input::MAX_FIRMWARE_BYTES, input::FIRMWARE)?;
    let report = match nvbare_gsp_firmware::cubin::Cubin::parse(&bytes) {
        Ok(c) => {
            let hint = super::cubin::cubin_note(path, &bytes).unwrap_or_default();
            super::fw_json::cubin_report(path, &bytes, c.sm, c.kernels.len(), hint)
        }
        Err(_) => super::fw_json::report(path, &bytes, &detect(path, &bytes)?, chip),
    };
    let s = serde_json::to_string_pretty(&report)
        .map_err(|e| CliError::Runtime(format!("writing JSON: {e}")))?;
    writeln!(out, "{s}").map_err(io)
}

fn detect<'a>(path: &Path, bytes: &'a [u8]) -> Result<FirmwareFile<'a>, CliError> {
    FirmwareFile::detect(bytes)
        .map_err(|e| CliError::Runtime(e.in_file(path.display().to_string()).to_string()))
}

fn print_file(
    out: &mut dyn Write,
    path: &Path,
    bytes: &[u8],
    file: &FirmwareFile<'_>,
    chip: Option<Chipset>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "file        {} ({} bytes)",
        path.display(),
        bytes.len()
    )?;
    let digest = pinned::sha256(bytes);
    let matches: Vec<_> = pinned::identify(bytes).map(|p| p.path).collect();
    if matches.is_empty() {
        writeln!(
            out,
            "sha256      {} (not a pinned r{FIRMWARE_VERSION} file)",
            pinned::hex(&digest)
        )?;
    } else {
        writeln!(out, "sha256      {}", pinned::hex(&digest))?;
        writeln!(out, "pinned as   {}", matches.join(", "))?;
    }
    writeln!(out, "format      {}", file.kind_name())?;
    match file {
        FirmwareFile::Gsp(g) => print_gsp(out, g, chip),
        FirmwareFile::Fmc(f) => print_fmc(out, f),
        FirmwareFile::Booter(b) => print_booter(out, b),
        FirmwareFile::RiscvBootloader(b) => print_riscv(out, b),
        FirmwareFile::GenericBootloader(b) => print_generic(out, b),
        FirmwareFile::Vbios(v) => print_vbios(out, v),
    }
}

fn print_sections(out: &mut dyn Write, elf: &Elf<'_>, crc: bool) -> std::io::Result<()> {
    let class = match elf.class {
        Class::Elf32 => "ELF32",
        Class::Elf64 => "ELF64",
    };
    writeln!(
        out,
        "elf         {class}, e_type {}, e_machine {}{}, {} sections",
        elf.e_type,
        elf.machine,
        if elf.machine == nvbare_gsp_firmware::elf::EM_RISCV {
            " (RISC-V)"
        } else {
            ""
        },
        elf.sections().len()
    )?;
    writeln!(out, "sections")?;
    for s in elf.sections().iter().filter(|s| s.index != 0) {
        write!(
            out,
            "  [{:2}] {:<24} offset {:#10x}  size {:#10x} ({} bytes)",
            s.index,
            s.name,
            s.offset,
            s.data.len(),
            s.data.len()
        )?;
        if crc && s.flags == nvbare_gsp_firmware::fmc::SECTION_FLAGS_NOUVEAU {
            write!(out, "  crc32 {:#010x} ok", s.info)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn chips_of_family(family: &str) -> String {
    let names: Vec<_> = CHIPS
        .iter()
        .filter(|c| c.gsp_signature_family == family)
        .map(|c| c.name)
        .collect();
    names.join(", ")
}

fn print_gsp(
    out: &mut dyn Write,
    g: &GspFirmware<'_>,
    chip: Option<Chipset>,
) -> std::io::Result<()> {
    let verdict = if g.version() == FIRMWARE_VERSION {
        "the version nvbare speaks"
    } else {
        "NOT the version nvbare speaks"
    };
    writeln!(
        out,
        "version     {} ({verdict}: {FIRMWARE_VERSION})",
        g.version()
    )?;
    print_sections(out, g.elf(), false)?;
    let image = g.image();
    write!(out, "image       .fwimage, {} bytes", image.len())?;
    if image.starts_with(&nvbare_gsp_firmware::elf::ELF_MAGIC) {
        write!(out, " (a nested RISC-V ELF: LIBOS2)")?;
    }
    writeln!(out)?;
    if let Ok(r3) = g.radix3() {
        let l = r3.layout();
        writeln!(
            out,
            "radix3      {} + {} + {} table pages over {} data pages (4 KiB, 512 entries per level)",
            l.level_pages(0),
            l.level_pages(1),
            l.level_pages(2),
            l.level_pages(3)
        )?;
    }
    if let Some(id) = g.build_id() {
        writeln!(out, "build id    {}", pinned::hex(id))?;
    }
    writeln!(out, "signatures")?;
    for s in g.signatures() {
        let prefix = if s.confidential_compute {
            ".fwsignature_cc_"
        } else {
            ".fwsignature_"
        };
        writeln!(
            out,
            "  {:<24} {:5} bytes  {}{}",
            format!("{prefix}{}", s.family),
            s.data.len(),
            if s.confidential_compute {
                "confidential computing: "
            } else {
                ""
            },
            chips_of_family(s.family)
        )?;
    }
    if let Some(c) = chip {
        match g.signature(c) {
            Ok(sig) => writeln!(
                out,
                "for {c}     .fwsignature_{} ({} bytes)",
                c.info().gsp_signature_family,
                sig.len()
            )?,
            Err(e) => writeln!(out, "for {c}     unusable: {e}")?,
        }
    }
    Ok(())
}

fn print_fmc(out: &mut dyn Write, f: &FmcImage<'_>) -> std::io::Result<()> {
    print_sections(out, f.elf(), true)?;
    writeln!(
        out,
        "image       {} bytes (the GSP-FMC ucode)",
        f.image.len()
    )?;
    writeln!(
        out,
        "hash        SHA-384 {} (matches the image)",
        pinned::hex(f.hash)
    )?;
    let scheme = match f.scheme() {
        SignatureScheme::Rsa3k => "RSA-3K",
        SignatureScheme::EcdsaP384 => "ECDSA P-384",
        SignatureScheme::Unknown => "unknown scheme",
    };
    writeln!(out, "signature   {} bytes ({scheme})", f.signature.len())?;
    writeln!(out, "public key  {} bytes", f.public_key.len())?;
    writeln!(
        out,
        "COT         NVDM_PAYLOAD_COT hash384[12] {}/48 B, publicKey[96] {}/384 B, signature[96] {}/384 B (zero-padded)",
        f.hash.len(),
        f.public_key.len(),
        f.signature.len()
    )
}

fn print_bin_hdr(
    out: &mut dyn Write,
    bin: &nvbare_gsp_firmware::binhdr::BinFile<'_>,
) -> std::io::Result<()> {
    let h = &bin.hdr;
    writeln!(
        out,
        "bin header  magic {:#06x}, version {}, bin_size {:#x}, header at {:#x}, image at {:#x} ({:#x} bytes)",
        h.bin_magic.get(),
        h.bin_ver.get(),
        h.bin_size.get(),
        h.header_offset.get(),
        h.data_offset.get(),
        h.data_size.get()
    )
}

fn print_booter(out: &mut dyn Write, b: &BooterImage<'_>) -> std::io::Result<()> {
    print_bin_hdr(out, &b.bin)?;
    let hs = &b.hs;
    writeln!(
        out,
        "hs header   signatures at {:#x} ({} × {} bytes), patch_loc {:#x}, meta: fuse_ver {}, engine_id_mask {:#x}, ucode_id {}",
        hs.sig_prod_offset.get(),
        b.num_sigs,
        b.signature_size(),
        b.patch_loc,
        b.meta.fuse_ver.get(),
        b.engine_id_mask(),
        b.ucode_id()
    )?;
    let l = &b.load;
    writeln!(
        out,
        "load header os code {:#x}+{:#x}, os data {:#x}+{:#x}, {} app: code {:#x}+{:#x}, data {:#x}+{:#x}",
        l.os_code_offset.get(),
        l.os_code_size.get(),
        l.os_data_offset.get(),
        l.os_data_size.get(),
        l.num_apps.get(),
        l.app_code_offset.get(),
        l.app_code_size.get(),
        l.app_data_offset.get(),
        l.app_data_size.get()
    )?;
    writeln!(
        out,
        "falcon load IMEM <- app code (VA {:#x}), DMEM <- os data, BROM PKC data offset {:#x}",
        l.app_code_offset.get(),
        b.pkc_data_offset()
    )?;
    let choice: Vec<String> = (0..b.num_sigs)
        .filter_map(|f| {
            b.signature_index(f)
                .ok()
                .map(|i| format!("fuse {f} -> #{i}"))
        })
        .collect();
    writeln!(out, "signature   {}", choice.join(", "))
}

fn print_riscv(out: &mut dyn Write, b: &RiscvBootloader<'_>) -> std::io::Result<()> {
    print_bin_hdr(out, &b.bin)?;
    let d = &b.desc;
    writeln!(
        out,
        "descriptor  RM_RISCV_UCODE_DESC version {} ({} bytes), appVersion {:#x}",
        d.version.get(),
        b.desc_size,
        d.appVersion.get()
    )?;
    for (name, off, size) in [
        ("manifest", d.manifestOffset, d.manifestSize),
        ("monitor data", d.monitorDataOffset, d.monitorDataSize),
        ("monitor code", d.monitorCodeOffset, d.monitorCodeSize),
        ("bootloader", d.bootloaderOffset, d.bootloaderSize),
        ("bl params", d.bootloaderParamOffset, d.bootloaderParamSize),
    ] {
        writeln!(out, "  {name:<14} {:#8x} + {:#8x}", off.get(), size.get())?;
    }
    writeln!(
        out,
        "wpr meta    bootloaderCodeOffset {:#x}, bootloaderDataOffset {:#x}, bootloaderManifestOffset {:#x}, sizeOfBootloader {:#x}",
        b.code_offset(),
        b.data_offset(),
        b.manifest_offset(),
        b.image().len()
    )
}

fn print_generic(out: &mut dyn Write, b: &GenericBootloader<'_>) -> std::io::Result<()> {
    print_bin_hdr(out, &b.bin)?;
    let d = &b.desc;
    writeln!(
        out,
        "descriptor  nvfw_bl_desc start_tag {:#x}, dmem_load_off {:#x}, code {:#x}+{:#x}, data {:#x}+{:#x}",
        d.start_tag.get(),
        d.dmem_load_off.get(),
        d.code_off.get(),
        d.code_size.get(),
        d.data_off.get(),
        d.data_size.get()
    )
}

fn print_vbios(out: &mut dyn Write, v: &Vbios<'_>) -> std::io::Result<()> {
    if v.ifr_offset != 0 {
        writeln!(
            out,
            "ifr         PCI ROM at {:#x} behind an IFR header",
            v.ifr_offset
        )?;
    }
    writeln!(
        out,
        "rom         {:#x} bytes in {} images",
        v.rom().len(),
        v.images().len()
    )?;
    for i in v.images() {
        let kind = match i.code_type {
            0x00 => "PC-AT (base)",
            0x03 => "EFI",
            0x70 => "NBSI",
            0xe0 => "falcon ucode extension",
            _ => "other",
        };
        writeln!(
            out,
            "  {:#8x} + {:#8x}  code type {:#04x} {kind}, device {:04x}:{:04x}{}{}",
            i.offset,
            i.len,
            i.code_type,
            i.pcir.vendorID.get(),
            i.pcir.deviceID.get(),
            if i.npde.is_some() { ", NPDE" } else { "" },
            if i.last { ", last" } else { "" }
        )?;
    }
    writeln!(out, "expansion   ROM offset {:#x}", v.expansion_rom_offset)?;
    match v.bit {
        Some((off, h)) => writeln!(
            out,
            "BIT         at {off:#x}, {} tokens of {} bytes",
            h.TokenEntries, h.TokenSize
        )?,
        None => writeln!(out, "BIT         not found")?,
    }
    for t in v.bit_tokens() {
        writeln!(
            out,
            "  token {:#04x} version {} size {:3} data at {:#x}",
            t.id, t.data_version, t.data_size, t.data_ptr
        )?;
    }
    if let Some((ver, oem)) = v.version() {
        let b = ver.to_be_bytes();
        writeln!(
            out,
            "version     {:02X}.{:02X}.{:02X}.{:02X}.{oem:02X}",
            b[0], b[1], b[2], b[3]
        )?;
    }
    match v.falcon_ucode_table() {
        Ok((_, entries)) => {
            writeln!(out, "falcon ucodes")?;
            for e in entries {
                writeln!(
                    out,
                    "  app {:#04x} target {:#04x} descriptor {:#x}",
                    e.app_id, e.target_id, e.desc_ptr
                )?;
            }
        }
        Err(e) => writeln!(out, "falcon ucodes  {e}")?,
    }
    match v.fwsec() {
        Ok(f) => {
            let d = &f.desc;
            writeln!(
                out,
                "FWSEC       app {:#04x}, descriptor v3 at {:#x} ({} bytes), image {:#x} bytes: IMEM {:#x} at {:#x}, DMEM {:#x} at {:#x}",
                f.app_id,
                f.desc_offset,
                f.desc_size,
                f.image().len(),
                d.IMEMLoadSize.get(),
                d.IMEMPhysBase.get(),
                d.DMEMLoadSize.get(),
                d.DMEMPhysBase.get()
            )?;
            writeln!(
                out,
                "            interface at DMEM {:#x}, PKC data at DMEM {:#x}, {} signatures (versions {:#06x}), engine mask {:#x}, ucode id {}",
                d.InterfaceOffset.get(),
                d.PKCDataOffset.get(),
                d.SignatureCount,
                d.SignatureVersions.get(),
                d.EngineIdMask.get(),
                d.UcodeId
            )
        }
        Err(e) => writeln!(out, "FWSEC       {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_rejects_unknown_files() {
        let dir = std::env::temp_dir().join(format!("nvbare-fw-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("junk.bin");
        std::fs::write(&p, b"junk").unwrap();
        let mut out = Vec::new();
        let e = inspect(&mut out, &p, None).unwrap_err();
        assert!(e.to_string().contains("junk.bin: unknown format"), "{e}");
        let e = inspect(&mut out, &dir.join("missing.bin"), None).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn inspect_to_string(path: &Path, chip: Option<Chipset>) -> String {
        let mut out = Vec::new();
        inspect(&mut out, path, chip).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn inspects_the_real_gh100_fmc() {
        let dir = nvbare_gsp_firmware::testutil::require_firmware_dir();
        let s = inspect_to_string(&dir.join("nvidia/gh100/gsp/fmc-570.144.bin"), None);
        assert!(
            s.contains("pinned as   nvidia/gh100/gsp/fmc-570.144.bin"),
            "{s}"
        );
        assert!(s.contains("ELF32"), "{s}");
        for line in [
            "] hash                     offset      0x150  size       0x30 (48 bytes)",
            "] image                    offset      0x480  size    0x28648 (165448 bytes)",
            "signature   384 bytes (RSA-3K)",
        ] {
            assert!(s.contains(line), "missing '{line}' in\n{s}");
        }
    }

    #[test]
    fn inspects_gsp_booter_and_a_synthesized_vbios() {
        let dir = nvbare_gsp_firmware::testutil::require_firmware_dir();
        let s = inspect_to_string(
            &dir.join("nvidia/tu102/gsp/gsp-570.144.bin"),
            Some(Chipset::TU116),
        );
        assert!(
            s.contains("for TU116     .fwsignature_tu11x (4096 bytes)"),
            "{s}"
        );
        assert!(s.contains("(a nested RISC-V ELF: LIBOS2)"), "{s}");
        let s = inspect_to_string(&dir.join("nvidia/ad102/gsp/booter_load-570.144.bin"), None);
        assert!(s.contains("signature   fuse 0 -> #1, fuse 1 -> #0"), "{s}");

        let rom = nvbare_gsp_firmware::testutil::vbios::build(&Default::default());
        let p = std::env::temp_dir().join(format!("nvbare-vbios-{}.rom", std::process::id()));
        std::fs::write(&p, &rom.bytes).unwrap();
        let s = inspect_to_string(&p, None);
        std::fs::remove_file(&p).unwrap();
        assert!(s.contains("format      VBIOS ROM"), "{s}");
        assert!(s.contains("version     95.02.12.00.07"), "{s}");
        assert!(s.contains("FWSEC       app 0x85"), "{s}");
    }

    fn json_of(path: &Path, chip: Option<Chipset>) -> serde_json::Value {
        let mut out = Vec::new();
        inspect_json(&mut out, path, chip).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn json_has_the_facts_the_text_shows() {
        let dir = nvbare_gsp_firmware::testutil::require_firmware_dir();
        let fmc = dir.join("nvidia/gh100/gsp/fmc-570.144.bin");
        let v = json_of(&fmc, None);
        assert_eq!(v["pinned_as"][0], "nvidia/gh100/gsp/fmc-570.144.bin");
        assert_eq!(v["elf"]["class"], "ELF32");
        let image = v["elf"]["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "image")
            .unwrap()
            .clone();
        assert_eq!(
            (image["offset"].as_u64(), image["size"].as_u64()),
            (Some(0x480), Some(165448))
        );
        assert_eq!(v["details"]["kind"], "fmc");
        assert_eq!(v["details"]["scheme"], "RSA-3K");
        assert_eq!(v["details"]["signature_size"], 384);
        let text = inspect_to_string(&fmc, None);
        assert!(
            text.contains(&format!("sha256      {}", v["sha256"].as_str().unwrap())),
            "{text}"
        );

        let gsp = json_of(
            &dir.join("nvidia/tu102/gsp/gsp-570.144.bin"),
            Some(Chipset::TU116),
        );
        assert_eq!(gsp["details"]["kind"], "gsp");
        assert_eq!(gsp["details"]["supported"], true);
        assert_eq!(gsp["details"]["nested_elf"], true);
        assert_eq!(gsp["details"]["for_chip"], ".fwsignature_tu11x");
        let booter = json_of(&dir.join("nvidia/ad102/gsp/booter_load-570.144.bin"), None);
        assert_eq!(
            booter["details"]["signature_for_fuse"],
            serde_json::json!([[0, 1], [1, 0]])
        );
    }
}
