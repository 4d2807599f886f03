//! The relocation pass of [`Cubin::parse`](super::Cubin::parse) (the `SHT_REL`/`SHT_RELA`
//! sections of loaded sections, each entry checked against its section), the trap that
//! `__assertfail` calls are pointed at, and applying relocations for a load address.

use alloc::string::ToString;
use alloc::vec::Vec;

use goblin::elf::reloc::{Reloc, RelocSection};
use goblin::elf::section_header::{SHT_REL, SHT_RELA};

use super::sections::{Layout, Section, ctx, section_bytes};
use super::symbols::Symbols;
use super::{
    CubinError, IMAGE_ALIGN, ImageSection, RelocTarget, Relocation, SectionKind, align_up, elf_err,
    image_size_for, malformed, reloc, to_usize, trap,
};

const SHN_UNDEF: usize = 0;
const SHN_ABS: usize = 0xfff1;

/// The relocations of every loaded section, in section order.
pub(super) fn relocations(
    bytes: &[u8],
    sections: &[Section],
    syms: &Symbols<'_>,
    layout: &Layout,
) -> Result<Vec<Relocation>, CubinError> {
    let mut relocations = Vec::new();
    for s in sections {
        let is_rela = match s.hdr.sh_type {
            SHT_RELA => true,
            SHT_REL => false,
            _ => continue,
        };
        let Some(Some(target_idx)) = layout.image_of.get(s.hdr.sh_info as usize).copied() else {
            continue;
        };
        if s.hdr.sh_link as usize != syms.index {
            return Err(malformed(
                "relocation section does not use .symtab",
                &s.name,
            ));
        }
        let (Some(target), Some(target_data)) =
            (layout.image.get(target_idx), layout.data.get(target_idx))
        else {
            continue;
        };
        let data = section_bytes(bytes, s)?;
        let entsize = if is_rela { 24 } else { 16 };
        if data.len() % entsize != 0 {
            return Err(malformed(
                "relocation section size is not a multiple of the entry size",
                &s.name,
            ));
        }
        let rs = RelocSection::parse(data, 0, data.len(), is_rela, ctx())
            .map_err(elf_err("relocation section"))?;
        let patched = Patched {
            rel: s,
            is_rela,
            target,
            data: target_data,
        };
        for r in rs.iter() {
            relocations.push(patched.relocation(&r, sections, syms, layout)?);
        }
    }
    Ok(relocations)
}

/// A relocation section and the image section it patches.
struct Patched<'a> {
    rel: &'a Section,
    is_rela: bool,
    target: &'a ImageSection,
    /// The target's file contents (empty if zero-filled): where REL addends are read.
    data: &'a [u8],
}

impl Patched<'_> {
    /// One entry, its field checked to lie inside the target section.
    fn relocation(
        &self,
        r: &Reloc,
        sections: &[Section],
        syms: &Symbols<'_>,
        layout: &Layout,
    ) -> Result<Relocation, CubinError> {
        let out_of_bounds = || CubinError::RelocationOutOfBounds {
            section: self.target.name.clone(),
            offset: r.r_offset,
        };
        let sym = syms
            .symtab
            .get(r.r_sym)
            .ok_or_else(|| malformed("relocation symbol index out of range", &self.rel.name))?;
        let symbol = syms.name(r.r_sym, sym.st_name)?;
        let field = reloc::span(r.r_type);
        let fits = match field {
            Some((at, width)) => r
                .r_offset
                .checked_add(at + width)
                .is_some_and(|e| e <= self.target.size),
            None => r.r_offset < self.target.size,
        };
        if !fits {
            return Err(out_of_bounds());
        }
        let addend = match (r.r_addend, field) {
            (Some(a), _) if self.is_rela => a,
            // REL: the addend is what the field holds now (zero in a zero-filled section).
            (_, Some(_)) if self.data.is_empty() => 0,
            (_, Some((at, width))) => {
                let pos = to_usize(r.r_offset + at, "relocation offset", &self.rel.name)?;
                let bytes = pos
                    .checked_add(width as usize)
                    .and_then(|e| self.data.get(pos..e));
                bytes
                    .and_then(|b| reloc::read(r.r_type, b))
                    .ok_or_else(out_of_bounds)? as i64
            }
            _ => 0,
        };
        let to = match sym.st_shndx {
            SHN_UNDEF => RelocTarget::Undefined,
            SHN_ABS => RelocTarget::Absolute(sym.st_value),
            idx => match layout.place(sections, idx, sym.st_value) {
                Some(off) => RelocTarget::Image(off?),
                None => RelocTarget::NotLoaded(
                    sections
                        .get(idx)
                        .map_or_else(|| alloc::format!("section {idx}"), |x| x.name.clone()),
                ),
            },
        };
        Ok(Relocation {
            section: self.target.name.clone(),
            image_offset: self.target.image_offset + r.r_offset,
            r_type: r.r_type,
            symbol,
            target: to,
            addend,
        })
    }
}

/// Points calls to `__assertfail` (device-side `assert`) at a trap of nvbare's own, placed
/// after the sections ([`trap`]), when there are any and the SM has a trap. Returns the image
/// size: `image_size` without the trap, larger with it.
pub(super) fn place_assert_trap(
    sm: u32,
    layout: &mut Layout,
    relocations: &mut [Relocation],
    image_size: u64,
) -> Result<u64, CubinError> {
    let asserts =
        |r: &Relocation| r.target == RelocTarget::Undefined && r.symbol == trap::ASSERTFAIL;
    let Some(code) = trap::code(sm).filter(|_| relocations.iter().any(asserts)) else {
        return Ok(image_size);
    };
    let end = layout.end;
    let off = align_up(end, IMAGE_ALIGN).ok_or(CubinError::ImageTooLarge { size: end })?;
    let size = code.len() as u64;
    let image_size = image_size_for(off + size)?;
    layout.image.push(ImageSection {
        name: trap::TRAP_SECTION.to_string(),
        kind: SectionKind::Code,
        image_offset: off,
        size,
    });
    layout.data.push(code.to_vec());
    for r in relocations.iter_mut().filter(|r| asserts(r)) {
        r.target = RelocTarget::Image(off);
    }
    Ok(image_size)
}

/// Applies `r` to `img`, an image for a load at `base_va`; `sections` are the image's.
pub(super) fn apply(
    r: &Relocation,
    sections: &[ImageSection],
    base_va: u64,
    img: &mut [u8],
) -> Result<(), CubinError> {
    let (at, width) = reloc::span(r.r_type).ok_or_else(|| CubinError::UnsupportedRelocation {
        r_type: r.r_type,
        name: reloc::name(r.r_type),
        section: r.section.clone(),
        offset: r.image_offset.saturating_sub(
            sections
                .iter()
                .find(|s| s.name == r.section)
                .map_or(0, |s| s.image_offset),
        ),
    })?;
    let s = match &r.target {
        RelocTarget::Image(off) => base_va.checked_add(*off),
        RelocTarget::Absolute(v) => Some(*v),
        RelocTarget::Undefined => {
            return Err(CubinError::UndefinedSymbol {
                symbol: r.symbol.clone(),
            });
        }
        RelocTarget::NotLoaded(section) => {
            return Err(CubinError::SymbolNotLoaded {
                symbol: r.symbol.clone(),
                section: section.clone(),
            });
        }
    };
    let value = s
        .and_then(|s| s.checked_add_signed(r.addend))
        .ok_or_else(|| CubinError::RelocationOverflow {
            symbol: r.symbol.clone(),
        })?;
    let pos = r
        .image_offset
        .checked_add(at)
        .and_then(|p| usize::try_from(p).ok());
    let dst = pos
        .and_then(|p| img.get_mut(p..p.checked_add(width as usize)?))
        .ok_or_else(|| CubinError::RelocationOutOfBounds {
            section: r.section.clone(),
            offset: r.image_offset,
        })?;
    reloc::write(r.r_type, dst, value).map_err(|e| CubinError::RelocationValue {
        symbol: r.symbol.clone(),
        name: reloc::name(r.r_type),
        value,
        error: e,
    })
}
