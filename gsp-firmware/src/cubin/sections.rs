//! The first passes of [`Cubin::parse`](super::Cubin::parse): the ELF header, the section
//! headers with their names, and the image layout (which sections are loaded, and where).

use alloc::string::String;
use alloc::vec::Vec;

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::Elf;
use goblin::elf::header::{ET_EXEC, ET_REL};
use goblin::elf::section_header::{SHF_ALLOC, SHT_NOBITS, SHT_PROGBITS, SectionHeader};

use super::{
    CubinError, ELFOSABI_CUDA_V7, ELFOSABI_CUDA_V8, EM_CUDA, IMAGE_ALIGN, ImageSection,
    MAX_IMAGE_SIZE, SectionKind, align_up, cstr, elf_err, malformed, to_usize,
};

/// `e_shstrndx` when the real index is in section 0's `sh_link`.
const SHN_XINDEX: u16 = 0xffff;

/// Little-endian ELF64, the only layout cubins come in.
pub(super) fn ctx() -> Ctx {
    Ctx::new(Container::Big, Endian::Little)
}

/// What the ELF header says about the cubin.
pub(super) struct Header {
    pub sm: u32,
    pub abi_version: u8,
    pub os_abi: u8,
    pub e_flags: u32,
    pub relocatable: bool,
    shoff: u64,
    shnum: u16,
    shstrndx: u16,
}

/// Checks the identification and the ELF header: ELF64, little endian, `EM_CUDA`, an
/// executable or relocatable object of ABI v7 or v8.
pub(super) fn header(bytes: &[u8]) -> Result<Header, CubinError> {
    let ident = bytes.get(..16).ok_or(CubinError::Truncated {
        what: "ELF identification",
    })?;
    if ident.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(CubinError::NotElf);
    }
    let (class, data, os_abi, abi_version) = (ident[4], ident[5], ident[7], ident[8]);
    if class != 2 {
        return Err(CubinError::WrongClass { class });
    }
    if data != 1 {
        return Err(CubinError::WrongEndian { data });
    }
    if bytes.len() < 64 {
        return Err(CubinError::Truncated { what: "ELF header" });
    }
    let h = Elf::parse_header(bytes).map_err(elf_err("ELF header"))?;
    if h.e_machine != EM_CUDA {
        return Err(CubinError::WrongMachine {
            machine: h.e_machine,
        });
    }
    let relocatable = match h.e_type {
        ET_EXEC => false,
        ET_REL => true,
        e_type => return Err(CubinError::UnsupportedType { e_type }),
    };
    let sm = match (os_abi, abi_version) {
        (ELFOSABI_CUDA_V7, 7) => h.e_flags & 0xff,
        (ELFOSABI_CUDA_V8, 8) => (h.e_flags >> 8) & 0xff,
        _ => {
            return Err(CubinError::UnsupportedAbi {
                os_abi,
                abi_version,
            });
        }
    };
    if sm == 0 {
        return Err(malformed("e_flags carries no SM version", ""));
    }
    if h.e_shoff == 0 {
        return Err(malformed("no section header table", ""));
    }
    if h.e_shentsize != 64 {
        return Err(malformed("section header entry size is not 64", ""));
    }
    Ok(Header {
        sm,
        abi_version,
        os_abi,
        e_flags: h.e_flags,
        relocatable,
        shoff: h.e_shoff,
        shnum: h.e_shnum,
        shstrndx: h.e_shstrndx,
    })
}

/// A section header with its name.
pub(super) struct Section {
    pub hdr: SectionHeader,
    pub name: String,
}

/// The section headers, each with its name from the section name table.
pub(super) fn sections(bytes: &[u8], h: &Header) -> Result<Vec<Section>, CubinError> {
    let shoff = to_usize(h.shoff, "section header offset", "")?;
    let hdrs = SectionHeader::parse(bytes, shoff, usize::from(h.shnum), ctx())
        .map_err(elf_err("section headers"))?;
    if hdrs.is_empty() {
        return Err(malformed("no section headers", ""));
    }
    let shstrndx = if h.shstrndx == SHN_XINDEX {
        hdrs.first().map_or(0, |s| s.sh_link as usize)
    } else {
        usize::from(h.shstrndx)
    };
    let shstr_hdr = hdrs
        .get(shstrndx)
        .ok_or_else(|| malformed("section name table index out of range", ""))?;
    let shstrtab = section_bytes(
        bytes,
        &Section {
            hdr: shstr_hdr.clone(),
            name: String::from(".shstrtab"),
        },
    )?;
    let mut sections = Vec::with_capacity(hdrs.len());
    for (i, hdr) in hdrs.into_iter().enumerate() {
        let name = cstr(shstrtab, hdr.sh_name, "section name")
            .map_err(|_| malformed("bad section name", alloc::format!("section {i}")))?;
        sections.push(Section { hdr, name });
    }
    Ok(sections)
}

/// The file bytes of a section (empty for `SHT_NOBITS`), bounds-checked.
pub(super) fn section_bytes<'a>(bytes: &'a [u8], s: &Section) -> Result<&'a [u8], CubinError> {
    if s.hdr.sh_type == SHT_NOBITS || s.hdr.sh_size == 0 {
        return Ok(&[]);
    }
    let off = to_usize(s.hdr.sh_offset, "section offset", &s.name)?;
    let size = to_usize(s.hdr.sh_size, "section size", &s.name)?;
    off.checked_add(size)
        .and_then(|end| bytes.get(off..end))
        .ok_or_else(|| CubinError::SectionOutOfBounds {
            section: s.name.clone(),
        })
}

/// How a section goes into the image, if it does: its kind and whether it has file contents.
fn classify(s: &Section) -> Option<(SectionKind, bool)> {
    let name = s.name.as_str();
    let alloc = s.hdr.sh_flags & u64::from(SHF_ALLOC) != 0;
    if name.starts_with(".nv.shared") || name.starts_with(".nv.local") {
        return None;
    }
    if name == ".nv.global" {
        return Some((SectionKind::Global, false));
    }
    if name == ".nv.global.init" {
        return Some((SectionKind::GlobalInit, true));
    }
    if let Some(rest) = name.strip_prefix(".nv.constant") {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (num, suffix) = rest.split_at(digits);
        if !num.is_empty() && (suffix.is_empty() || suffix.starts_with('.')) {
            let bank = num.parse().ok()?;
            return Some((SectionKind::Constant { bank }, s.hdr.sh_type != SHT_NOBITS));
        }
    }
    if name.starts_with(".text.") && alloc {
        return Some((SectionKind::Code, true));
    }
    if alloc && s.hdr.sh_type == SHT_PROGBITS {
        return Some((SectionKind::Data, true));
    }
    None
}

/// The loaded sections, placed one after another in the image.
pub(super) struct Layout {
    /// The image sections, in image order.
    pub image: Vec<ImageSection>,
    /// File contents of each entry of `image` (empty for zero-filled ones).
    pub data: Vec<Vec<u8>>,
    /// For each ELF section, its index in `image`, if it is loaded.
    pub image_of: Vec<Option<usize>>,
    /// Where the last section ends.
    pub end: u64,
}

impl Layout {
    /// Places every loadable section at the next [`IMAGE_ALIGN`]-aligned offset (or its own
    /// larger alignment), refusing images over [`MAX_IMAGE_SIZE`].
    pub(super) fn new(bytes: &[u8], sections: &[Section]) -> Result<Layout, CubinError> {
        let mut l = Layout {
            image: Vec::new(),
            data: Vec::new(),
            image_of: alloc::vec![None; sections.len()],
            end: 0,
        };
        for (i, s) in sections.iter().enumerate() {
            let Some((kind, has_data)) = classify(s) else {
                continue;
            };
            let align = s.hdr.sh_addralign.max(1);
            if !align.is_power_of_two() || align > 4096 {
                return Err(malformed(
                    "section alignment is not a power of two up to 4096",
                    &s.name,
                ));
            }
            let off = align_up(l.end, align.max(IMAGE_ALIGN))
                .ok_or(CubinError::ImageTooLarge { size: u64::MAX })?;
            l.end = off
                .checked_add(s.hdr.sh_size)
                .filter(|&e| e <= MAX_IMAGE_SIZE)
                .ok_or(CubinError::ImageTooLarge {
                    size: off.saturating_add(s.hdr.sh_size),
                })?;
            let data = if has_data {
                section_bytes(bytes, s)?.to_vec()
            } else {
                Vec::new()
            };
            if let Some(slot) = l.image_of.get_mut(i) {
                *slot = Some(l.image.len());
            }
            l.image.push(ImageSection {
                name: s.name.clone(),
                kind,
                image_offset: off,
                size: s.hdr.sh_size,
            });
            l.data.push(data);
        }
        Ok(l)
    }

    /// The image section ELF section `shndx` became, if it is loaded.
    pub(super) fn of(&self, shndx: usize) -> Option<&ImageSection> {
        self.image.get(self.image_of.get(shndx).copied().flatten()?)
    }

    /// Image offset of (section index, value) as a symbol sees it; `None` if the section is
    /// not loaded.
    pub(super) fn place(
        &self,
        sections: &[Section],
        shndx: usize,
        value: u64,
    ) -> Option<Result<u64, CubinError>> {
        let img = self.of(shndx)?;
        let hdr = &sections.get(shndx)?.hdr;
        Some(
            value
                .checked_sub(hdr.sh_addr)
                .and_then(|v| img.image_offset.checked_add(v))
                .ok_or_else(|| malformed("symbol value outside its section", &img.name)),
        )
    }
}
