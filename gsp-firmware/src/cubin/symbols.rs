//! The symbol pass of [`Cubin::parse`](super::Cubin::parse): the symbol table, its names,
//! and the device global variables it defines.

use alloc::string::String;
use alloc::vec::Vec;

use goblin::elf::section_header::SHT_SYMTAB;
use goblin::elf::sym::Symtab;

use super::sections::{Layout, Section, ctx, section_bytes};
use super::{CubinError, GlobalVar, SectionKind, cstr, elf_err, malformed};

/// `STT_CUDA_OBJECT`: the symbol type ptxas gives device variables in ET_REL objects.
const STT_CUDA_OBJECT: u8 = 13;
const STT_OBJECT: u8 = 1;
/// Bytes of one ELF64 symbol.
const SYM_SIZE: usize = 24;

/// The symbol table with its string table.
pub(super) struct Symbols<'a> {
    pub symtab: Symtab<'a>,
    strtab: &'a [u8],
    /// Section index of `.symtab` (what relocation sections must link to).
    pub index: usize,
}

impl<'a> Symbols<'a> {
    /// The first `SHT_SYMTAB` section and the string table its `sh_link` names.
    pub(super) fn parse(bytes: &'a [u8], sections: &[Section]) -> Result<Self, CubinError> {
        let index = sections
            .iter()
            .position(|s| s.hdr.sh_type == SHT_SYMTAB)
            .ok_or_else(|| malformed("no symbol table", ""))?;
        let sec = sections
            .get(index)
            .ok_or_else(|| malformed("no symbol table", ""))?;
        let data = section_bytes(bytes, sec)?;
        if data.len() % SYM_SIZE != 0 {
            return Err(malformed(
                "symbol table size is not a multiple of 24",
                ".symtab",
            ));
        }
        let symtab = Symtab::parse(data, 0, data.len() / SYM_SIZE, ctx())
            .map_err(elf_err("symbol table"))?;
        let strtab = sections
            .get(sec.hdr.sh_link as usize)
            .ok_or_else(|| malformed("symbol string table index out of range", ".symtab"))
            .and_then(|s| section_bytes(bytes, s))?;
        Ok(Symbols {
            symtab,
            strtab,
            index,
        })
    }

    /// The name of symbol `i`, whose `st_name` is `st_name`.
    pub(super) fn name(&self, i: usize, st_name: usize) -> Result<String, CubinError> {
        cstr(self.strtab, st_name, "symbol name")
            .map_err(|_| malformed("bad symbol name", alloc::format!("symbol {i}")))
    }
}

/// The device variables: object symbols in `.nv.global` or `.nv.global.init`, each checked to
/// lie inside its section.
pub(super) fn globals(
    syms: &Symbols<'_>,
    sections: &[Section],
    layout: &Layout,
) -> Result<Vec<GlobalVar>, CubinError> {
    let mut globals = Vec::new();
    for (i, sym) in syms.symtab.iter().enumerate() {
        let t = sym.st_type();
        if t != STT_OBJECT && t != STT_CUDA_OBJECT {
            continue;
        }
        let Some(sec) = layout.of(sym.st_shndx) else {
            continue;
        };
        if !matches!(sec.kind, SectionKind::Global | SectionKind::GlobalInit) {
            continue;
        }
        let Some(off) = layout.place(sections, sym.st_shndx, sym.st_value) else {
            continue;
        };
        let off = off?;
        let name = syms.name(i, sym.st_name)?;
        let in_section = off
            .checked_add(sym.st_size)
            .is_some_and(|e| e <= sec.image_offset.saturating_add(sec.size));
        if !in_section {
            return Err(malformed("global variable extends past its section", name));
        }
        globals.push(GlobalVar {
            name,
            image_offset: off,
            size: sym.st_size,
        });
    }
    Ok(globals)
}
