//! A small ELF section reader for firmware containers (ELF32 and ELF64, little-endian).
//!
//! The GSP-RM image (`gsp-*.bin`, ELF64) and the FMC image (`fmc-*.bin`, ELF32 as written by
//! NVIDIA's `extract-firmware-nouveau.py`) are ELF only as containers: all that matters is
//! finding sections by name, exactly what OpenRM's `_kgspFwContainerGetSection` does.
//!
//! Why not goblin (the design's ELF crate, which the cubin parser uses):
//! goblin's `Elf::parse` also parses program headers, symbols, relocations and dynamic entries
//! (none of which a firmware container needs) into vectors sized by header fields, and its
//! panics, if any, would be ours to live with. This reader is a few hundred lines, allocates one
//! entry per section header only after checking that the whole section header table lies inside
//! the file, checks every section against the file size, never panics, reads ELF32 (the FMC
//! container, whose `e_type`/`e_machine` are `NONE`) and ELF64 (GSP-RM) alike, and is small
//! enough to fuzz thoroughly. Program headers, symbols and relocations are ignored.

use alloc::string::String;
use alloc::vec::Vec;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

use crate::Error;
use crate::bytes::{read, slice};

/// `ELFMAG`: 0x7f 'E' 'L' 'F'.
pub const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// `EM_RISCV`.
pub const EM_RISCV: u16 = 243;
/// `SHT_NOBITS`: a section that occupies no file space.
pub const SHT_NOBITS: u32 = 8;
/// `SHT_NULL`.
pub const SHT_NULL: u32 = 0;
/// `SHN_XINDEX` / `SHN_LORESERVE`: extended section numbering, not used by firmware files.
const SHN_LORESERVE: u16 = 0xff00;

/// `Elf32_Ehdr` (52 bytes).
#[derive(Debug, Clone, Copy, FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
#[allow(missing_docs)]
pub struct Elf32Ehdr {
    pub e_ident: [u8; 16],
    pub e_type: U16,
    pub e_machine: U16,
    pub e_version: U32,
    pub e_entry: U32,
    pub e_phoff: U32,
    pub e_shoff: U32,
    pub e_flags: U32,
    pub e_ehsize: U16,
    pub e_phentsize: U16,
    pub e_phnum: U16,
    pub e_shentsize: U16,
    pub e_shnum: U16,
    pub e_shstrndx: U16,
}

/// `Elf64_Ehdr` (64 bytes).
#[derive(Debug, Clone, Copy, FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
#[allow(missing_docs)]
pub struct Elf64Ehdr {
    pub e_ident: [u8; 16],
    pub e_type: U16,
    pub e_machine: U16,
    pub e_version: U32,
    pub e_entry: U64,
    pub e_phoff: U64,
    pub e_shoff: U64,
    pub e_flags: U32,
    pub e_ehsize: U16,
    pub e_phentsize: U16,
    pub e_phnum: U16,
    pub e_shentsize: U16,
    pub e_shnum: U16,
    pub e_shstrndx: U16,
}

/// `Elf32_Shdr` (40 bytes).
#[derive(Debug, Clone, Copy, FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
#[allow(missing_docs)]
pub struct Elf32Shdr {
    pub sh_name: U32,
    pub sh_type: U32,
    pub sh_flags: U32,
    pub sh_addr: U32,
    pub sh_offset: U32,
    pub sh_size: U32,
    pub sh_link: U32,
    pub sh_info: U32,
    pub sh_addralign: U32,
    pub sh_entsize: U32,
}

/// `Elf64_Shdr` (64 bytes).
#[derive(Debug, Clone, Copy, FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
#[allow(missing_docs)]
pub struct Elf64Shdr {
    pub sh_name: U32,
    pub sh_type: U32,
    pub sh_flags: U64,
    pub sh_addr: U64,
    pub sh_offset: U64,
    pub sh_size: U64,
    pub sh_link: U32,
    pub sh_info: U32,
    pub sh_addralign: U64,
    pub sh_entsize: U64,
}

/// ELF class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `ELFCLASS32`.
    Elf32,
    /// `ELFCLASS64`.
    Elf64,
}

/// One section, checked to lie inside the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section<'a> {
    /// Index in the section header table.
    pub index: u16,
    /// Name from the section-name string table.
    pub name: &'a str,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// `sh_offset` (file offset of the data).
    pub offset: u64,
    /// `sh_info` (the FMC container keeps a CRC-32 of the data here).
    pub info: u32,
    /// The section's bytes (empty for `SHT_NOBITS`/`SHT_NULL`).
    pub data: &'a [u8],
}

/// A parsed ELF container: header fields and every section, all bounds-checked.
#[derive(Debug, Clone)]
pub struct Elf<'a> {
    /// ELF32 or ELF64.
    pub class: Class,
    /// `e_type`.
    pub e_type: u16,
    /// `e_machine` (243 = RISC-V for GSP-RM; 0 for the FMC container).
    pub machine: u16,
    sections: Vec<Section<'a>>,
}

struct Header {
    shoff: u64,
    shentsize: u16,
    shnum: u16,
    shstrndx: u16,
    e_type: u16,
    machine: u16,
    version: u32,
}

struct Shdr {
    name: u32,
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    info: u32,
}

/// The ELF identification and header of `data`, checked: class, encoding, version, section
/// header size and count, and the section-name table's index.
fn header(data: &[u8]) -> Result<(Class, Header), Error> {
    let ident: &[u8; 16] = read(data, "ELF identification", 0)?;
    if ident[..4] != ELF_MAGIC {
        let mut m = [0u8; 4];
        m.copy_from_slice(&ident[..4]);
        return Err(Error::BadMagic {
            what: "ELF magic",
            found: u32::from_be_bytes(m) as u64,
            expected: u32::from_be_bytes(ELF_MAGIC) as u64,
        });
    }
    let class = match ident[4] {
        1 => Class::Elf32,
        2 => Class::Elf64,
        c => {
            return Err(Error::Invalid {
                what: "ELF class (EI_CLASS)",
                value: c as u64,
                why: "must be 1 (ELF32) or 2 (ELF64)",
            });
        }
    };
    if ident[5] != 1 {
        return Err(Error::Invalid {
            what: "ELF data encoding (EI_DATA)",
            value: ident[5] as u64,
            why: "firmware containers are little-endian (1)",
        });
    }
    let h = match class {
        Class::Elf32 => {
            let e: &Elf32Ehdr = read(data, "ELF32 header", 0)?;
            Header {
                shoff: e.e_shoff.get() as u64,
                shentsize: e.e_shentsize.get(),
                shnum: e.e_shnum.get(),
                shstrndx: e.e_shstrndx.get(),
                e_type: e.e_type.get(),
                machine: e.e_machine.get(),
                version: e.e_version.get(),
            }
        }
        Class::Elf64 => {
            let e: &Elf64Ehdr = read(data, "ELF64 header", 0)?;
            Header {
                shoff: e.e_shoff.get(),
                shentsize: e.e_shentsize.get(),
                shnum: e.e_shnum.get(),
                shstrndx: e.e_shstrndx.get(),
                e_type: e.e_type.get(),
                machine: e.e_machine.get(),
                version: e.e_version.get(),
            }
        }
    };
    if h.version != 1 {
        return Err(Error::UnsupportedVersion {
            what: "ELF (e_version)",
            version: h.version as u64,
        });
    }
    let want_entsize = match class {
        Class::Elf32 => core::mem::size_of::<Elf32Shdr>(),
        Class::Elf64 => core::mem::size_of::<Elf64Shdr>(),
    } as u16;
    if h.shentsize != want_entsize {
        return Err(Error::Invalid {
            what: "ELF section header size (e_shentsize)",
            value: h.shentsize as u64,
            why: "must be 40 (ELF32) or 64 (ELF64)",
        });
    }
    if h.shnum == 0 || h.shnum >= SHN_LORESERVE {
        return Err(Error::Invalid {
            what: "ELF section count (e_shnum)",
            value: h.shnum as u64,
            why: "a firmware container has between 1 and 0xfeff sections",
        });
    }
    if h.shstrndx >= h.shnum {
        return Err(Error::Invalid {
            what: "ELF section-name table index (e_shstrndx)",
            value: h.shstrndx as u64,
            why: "must name one of the sections",
        });
    }
    Ok((class, h))
}

impl<'a> Elf<'a> {
    /// Parses the ELF header and every section header of `data`.
    pub fn parse(data: &'a [u8]) -> Result<Self, Error> {
        let (class, h) = header(data)?;
        // The whole table must be in the file before anything is allocated for it.
        let table_len = h.shnum as u64 * h.shentsize as u64;
        slice(data, "ELF section header table", h.shoff, table_len)?;

        let shdr = |i: u16| -> Result<Shdr, Error> {
            let off = h.shoff + i as u64 * h.shentsize as u64;
            Ok(match class {
                Class::Elf32 => {
                    let s: &Elf32Shdr = read(data, "ELF section header", off)?;
                    Shdr {
                        name: s.sh_name.get(),
                        kind: s.sh_type.get(),
                        flags: s.sh_flags.get() as u64,
                        offset: s.sh_offset.get() as u64,
                        size: s.sh_size.get() as u64,
                        info: s.sh_info.get(),
                    }
                }
                Class::Elf64 => {
                    let s: &Elf64Shdr = read(data, "ELF section header", off)?;
                    Shdr {
                        name: s.sh_name.get(),
                        kind: s.sh_type.get(),
                        flags: s.sh_flags.get(),
                        offset: s.sh_offset.get(),
                        size: s.sh_size.get(),
                        info: s.sh_info.get(),
                    }
                }
            })
        };
        let strtab_hdr = shdr(h.shstrndx)?;
        let strtab = slice(
            data,
            "ELF section-name table",
            strtab_hdr.offset,
            strtab_hdr.size,
        )?;

        let mut sections = Vec::with_capacity(h.shnum as usize);
        for i in 0..h.shnum {
            let s = shdr(i)?;
            let name = section_name(strtab, s.name)?;
            let bytes = if s.kind == SHT_NOBITS || s.kind == SHT_NULL {
                &[][..]
            } else {
                slice(data, "ELF section data", s.offset, s.size)?
            };
            sections.push(Section {
                index: i,
                name,
                kind: s.kind,
                flags: s.flags,
                offset: s.offset,
                info: s.info,
                data: bytes,
            });
        }
        Ok(Elf {
            class,
            e_type: h.e_type,
            machine: h.machine,
            sections,
        })
    }

    /// Every section, in header-table order (index 0 is the null section).
    pub fn sections(&self) -> &[Section<'a>] {
        &self.sections
    }

    /// The first section called `name`.
    pub fn section(&self, name: &str) -> Option<&Section<'a>> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The section called `name`, which must exist exactly once.
    pub fn unique_section(&self, name: &str) -> Result<&Section<'a>, Error> {
        let mut found = self.sections.iter().filter(|s| s.name == name);
        let first = found.next().ok_or_else(|| Error::MissingSection {
            name: String::from(name),
            available: self.section_names(),
        })?;
        if found.next().is_some() {
            return Err(Error::DuplicateSection {
                name: String::from(name),
            });
        }
        Ok(first)
    }

    /// The names of all named sections, comma-separated (for messages).
    pub fn section_names(&self) -> String {
        let mut out = String::new();
        for s in self.sections.iter().filter(|s| !s.name.is_empty()) {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(s.name);
        }
        out
    }
}

/// The NUL-terminated name at `off` of the section-name table.
fn section_name(strtab: &[u8], off: u32) -> Result<&str, Error> {
    let tail = strtab.get(off as usize..).ok_or(Error::OutOfBounds {
        what: "ELF section name",
        offset: off as u64,
        len: 1,
        limit: strtab.len() as u64,
    })?;
    let end = tail.iter().position(|&b| b == 0).ok_or(Error::Invalid {
        what: "ELF section name offset",
        value: off as u64,
        why: "the name is not NUL-terminated inside the section-name table",
    })?;
    core::str::from_utf8(&tail[..end]).map_err(|_| Error::Invalid {
        what: "ELF section name offset",
        value: off as u64,
        why: "the name is not valid UTF-8",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_sizes_match_the_elf_spec() {
        // System V ABI (and `LibosElf64Header`/`LibosElf64SectionHeader` in OpenRM).
        assert_eq!(core::mem::size_of::<Elf32Ehdr>(), 52);
        assert_eq!(core::mem::size_of::<Elf64Ehdr>(), 64);
        assert_eq!(core::mem::size_of::<Elf32Shdr>(), 40);
        assert_eq!(core::mem::size_of::<Elf64Shdr>(), 64);
        assert_eq!(core::mem::offset_of!(Elf64Ehdr, e_shoff), 0x28);
        assert_eq!(core::mem::offset_of!(Elf64Ehdr, e_shentsize), 0x3a);
        assert_eq!(core::mem::offset_of!(Elf64Ehdr, e_shstrndx), 0x3e);
        assert_eq!(core::mem::offset_of!(Elf32Ehdr, e_shoff), 0x20);
        assert_eq!(core::mem::offset_of!(Elf32Ehdr, e_shstrndx), 0x32);
        assert_eq!(core::mem::offset_of!(Elf64Shdr, sh_offset), 0x18);
        assert_eq!(core::mem::offset_of!(Elf64Shdr, sh_info), 0x2c);
        assert_eq!(core::mem::offset_of!(Elf32Shdr, sh_offset), 0x10);
        assert_eq!(core::mem::offset_of!(Elf32Shdr, sh_info), 0x1c);
    }
}
