//! The kernel pass of [`Cubin::parse`](super::Cubin::parse): finds every entry point and
//! reads its attributes (`.nv.info`, `.nv.info.<kernel>`: registers, parameters, stack, block
//! limits, barriers), its shared memory and constant banks into a [`Kernel`].

use alloc::string::ToString;
use alloc::vec::Vec;

use goblin::elf::sym::{STT_FUNC, Sym};

use super::sections::{Layout, Section, section_bytes};
use super::symbols::Symbols;
use super::{
    ConstBank, CubinError, Kernel, KernelParam, SHT_CUDA_INFO, STACK_SIZE_UNKNOWN, STO_CUDA_ENTRY,
    SectionKind, eiattr, le_u16, le_u32, malformed,
};

/// One `.nv.info` record.
struct Attr<'a> {
    attr: u8,
    /// The u16 after the attribute byte: the value of `EIFMT_BVAL`/`EIFMT_HVAL` records.
    value: u16,
    /// The payload of `EIFMT_SVAL` records.
    payload: &'a [u8],
}

fn parse_attrs<'a>(data: &'a [u8], section: &str) -> Result<Vec<Attr<'a>>, CubinError> {
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < data.len() {
        let (Some(&fmt), Some(&attr), Some(value)) =
            (data.get(i), data.get(i + 1), le_u16(data, i + 2))
        else {
            return Err(CubinError::BadAttribute {
                section: section.to_string(),
                attribute: data.get(i + 1).copied().unwrap_or(0),
                reason: "record header runs past the end of the section",
            });
        };
        i += 4;
        let payload = match fmt {
            eiattr::EIFMT_NVAL | eiattr::EIFMT_BVAL | eiattr::EIFMT_HVAL => &[][..],
            eiattr::EIFMT_SVAL => {
                let end = i + usize::from(value);
                let p = data.get(i..end).ok_or_else(|| CubinError::BadAttribute {
                    section: section.to_string(),
                    attribute: attr,
                    reason: "value runs past the end of the section",
                })?;
                i = end;
                p
            }
            _ => {
                return Err(CubinError::BadAttribute {
                    section: section.to_string(),
                    attribute: attr,
                    reason: "has an unknown EIFMT format byte",
                });
            }
        };
        out.push(Attr {
            attr,
            value,
            payload,
        });
    }
    Ok(out)
}

fn bad_attr(section: &str, attr: u8, reason: &'static str) -> CubinError {
    CubinError::BadAttribute {
        section: section.to_string(),
        attribute: attr,
        reason,
    }
}

/// `[u32 symbol index, u32 value]` payload of per-function records in `.nv.info`.
fn sym_value(a: &Attr<'_>, section: &str) -> Result<(u32, u32), CubinError> {
    match (a.payload.len(), le_u32(a.payload, 0), le_u32(a.payload, 4)) {
        (8, Some(sym), Some(v)) => Ok((sym, v)),
        _ => Err(bad_attr(section, a.attr, "is not 8 bytes (symbol, value)")),
    }
}

fn dims(a: &Attr<'_>, section: &str) -> Result<[u32; 3], CubinError> {
    match (
        a.payload.len(),
        le_u32(a.payload, 0),
        le_u32(a.payload, 4),
        le_u32(a.payload, 8),
    ) {
        (12, Some(x), Some(y), Some(z)) => Ok([x, y, z]),
        _ => Err(bad_attr(section, a.attr, "is not 12 bytes (x, y, z)")),
    }
}

fn dims_product(d: [u32; 3], section: &str, attr: u8) -> Result<u32, CubinError> {
    d[0].checked_mul(d[1])
        .and_then(|v| v.checked_mul(d[2]))
        .ok_or_else(|| bad_attr(section, attr, "block dimensions overflow"))
}

/// Per-function facts from the module-wide `.nv.info`, keyed by symbol index.
#[derive(Default, Clone, Copy)]
struct FuncInfo {
    regcount: Option<u32>,
    frame_size: u32,
    min_stack_size: u32,
}

/// What a kernel's `.nv.info.<name>` says.
#[derive(Default)]
struct KernelAttrs {
    /// (offset, size) from `EIATTR_PARAM_CBANK`.
    param_cbank: Option<(u32, u32)>,
    params: Vec<KernelParam>,
    max_threads: Option<u32>,
    max_block: Option<[u32; 3]>,
    required_block: Option<[u32; 3]>,
    num_barriers: Option<u32>,
    cluster_dims: Option<[u32; 3]>,
}

impl KernelAttrs {
    fn parse(data: &[u8], sn: &str) -> Result<KernelAttrs, CubinError> {
        let mut k = KernelAttrs::default();
        let mut cbank_param_size = None;
        for a in parse_attrs(data, sn)? {
            match a.attr {
                eiattr::EIATTR_PARAM_CBANK => {
                    // [u32 symbol of .nv.constant0.<name>, u16 offset, u16 size]
                    match (a.payload.len(), le_u16(a.payload, 4), le_u16(a.payload, 6)) {
                        (8, Some(o), Some(s)) => k.param_cbank = Some((u32::from(o), u32::from(s))),
                        _ => {
                            return Err(bad_attr(
                                sn,
                                a.attr,
                                "is not 8 bytes (symbol, offset, size)",
                            ));
                        }
                    }
                }
                eiattr::EIATTR_CBANK_PARAM_SIZE => cbank_param_size = Some(u32::from(a.value)),
                eiattr::EIATTR_KPARAM_INFO => {
                    // [u32 index, u16 ordinal, u16 offset, u32 flags: log2 align 0..7,
                    //  space 8..11, cbank 12..16, size 18..31]
                    match (
                        a.payload.len(),
                        le_u16(a.payload, 4),
                        le_u16(a.payload, 6),
                        le_u32(a.payload, 8),
                    ) {
                        (12, Some(ordinal), Some(offset), Some(w)) => k.params.push(KernelParam {
                            ordinal: u32::from(ordinal),
                            offset: u32::from(offset),
                            size: w >> 18,
                        }),
                        _ => return Err(bad_attr(sn, a.attr, "is not 12 bytes")),
                    }
                }
                eiattr::EIATTR_MAX_THREADS => k.max_block = Some(dims(&a, sn)?),
                eiattr::EIATTR_REQNTID => k.required_block = Some(dims(&a, sn)?),
                eiattr::EIATTR_NUM_BARRIERS => k.num_barriers = Some(u32::from(a.value & 0xff)),
                eiattr::EIATTR_CTA_PER_CLUSTER => k.cluster_dims = Some(dims(&a, sn)?),
                _ => {}
            }
        }
        if let (Some((_, s)), Some(c)) = (k.param_cbank, cbank_param_size)
            && s != c
        {
            return Err(bad_attr(
                sn,
                eiattr::EIATTR_CBANK_PARAM_SIZE,
                "disagrees with EIATTR_PARAM_CBANK",
            ));
        }
        for (d, attr) in [
            (k.max_block, eiattr::EIATTR_MAX_THREADS),
            (k.required_block, eiattr::EIATTR_REQNTID),
        ] {
            if let Some(d) = d {
                let n = dims_product(d, sn, attr)?;
                k.max_threads = Some(k.max_threads.map_or(n, |l| l.min(n)));
            }
        }
        k.params.sort_by_key(|p| p.ordinal);
        for p in &k.params {
            let inside = k
                .param_cbank
                .is_some_and(|(_, size)| p.offset.checked_add(p.size).is_some_and(|e| e <= size));
            if !inside {
                return Err(bad_attr(
                    sn,
                    eiattr::EIATTR_KPARAM_INFO,
                    "describes a parameter outside EIATTR_PARAM_CBANK",
                ));
            }
        }
        Ok(k)
    }
}

/// Per-function register count, frame and stack sizes from the module-wide `.nv.info`, by
/// symbol index.
fn func_infos(bytes: &[u8], sections: &[Section]) -> Result<Vec<(u32, FuncInfo)>, CubinError> {
    let mut funcs: Vec<(u32, FuncInfo)> = Vec::new();
    for s in sections
        .iter()
        .filter(|s| s.hdr.sh_type == SHT_CUDA_INFO && s.name == ".nv.info")
    {
        for a in parse_attrs(section_bytes(bytes, s)?, &s.name)? {
            let field = match a.attr {
                eiattr::EIATTR_REGCOUNT
                | eiattr::EIATTR_FRAME_SIZE
                | eiattr::EIATTR_MIN_STACK_SIZE => a.attr,
                _ => continue,
            };
            let (sym, v) = sym_value(&a, &s.name)?;
            let p = match funcs.iter().position(|(k, _)| *k == sym) {
                Some(p) => p,
                None => {
                    funcs.push((sym, FuncInfo::default()));
                    funcs.len() - 1
                }
            };
            let Some((_, f)) = funcs.get_mut(p) else {
                continue;
            };
            match field {
                eiattr::EIATTR_REGCOUNT => f.regcount = Some(v),
                eiattr::EIATTR_FRAME_SIZE => f.frame_size = v,
                _ => f.min_stack_size = v,
            }
        }
    }
    Ok(funcs)
}

/// The module-wide constant banks other than 0 (`.nv.constant<N>` without a kernel suffix).
fn module_banks(sections: &[Section], layout: &Layout) -> Vec<ConstBank> {
    sections
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let img = layout.of(i)?;
            match img.kind {
                SectionKind::Constant { bank }
                    if bank != 0
                        && s.name
                            .strip_prefix(".nv.constant")
                            .is_some_and(|r| !r.contains('.')) =>
                {
                    Some(ConstBank {
                        bank,
                        image_offset: img.image_offset,
                        size: img.size,
                    })
                }
                _ => None,
            }
        })
        .collect()
}

/// What every kernel of the module is read against.
struct Module<'a> {
    bytes: &'a [u8],
    sections: &'a [Section],
    layout: &'a Layout,
    funcs: Vec<(u32, FuncInfo)>,
    banks: Vec<ConstBank>,
}

/// Every kernel (`FUNC` symbol marked `STO_CUDA_ENTRY`), in symbol-table order.
pub(super) fn kernels(
    bytes: &[u8],
    sections: &[Section],
    syms: &Symbols<'_>,
    layout: &Layout,
) -> Result<Vec<Kernel>, CubinError> {
    let m = Module {
        bytes,
        sections,
        layout,
        funcs: func_infos(bytes, sections)?,
        banks: module_banks(sections, layout),
    };
    let mut kernels = Vec::new();
    for (i, sym) in syms.symtab.iter().enumerate() {
        if sym.st_type() != STT_FUNC || sym.st_other & STO_CUDA_ENTRY == 0 {
            continue;
        }
        kernels.push(m.kernel(syms, i, &sym)?);
    }
    Ok(kernels)
}

impl Module<'_> {
    /// The kernel whose entry symbol is `sym`, symbol `i`.
    fn kernel(&self, syms: &Symbols<'_>, i: usize, sym: &Sym) -> Result<Kernel, CubinError> {
        let name = syms.name(i, sym.st_name)?;
        let text_idx = sym.st_shndx;
        let text = self
            .sections
            .get(text_idx)
            .filter(|s| s.name.starts_with(".text."))
            .ok_or_else(|| malformed("kernel symbol is not in a .text section", &name))?;
        let code_img = self
            .layout
            .of(text_idx)
            .ok_or_else(|| malformed("kernel code is not loadable", &name))?;
        let code_offset = self
            .layout
            .place(self.sections, text_idx, sym.st_value)
            .ok_or_else(|| malformed("kernel code is not loadable", &name))??;
        let code_size = (code_img.image_offset + code_img.size)
            .checked_sub(code_offset)
            .ok_or_else(|| malformed("kernel symbol lies past the end of its code", &name))?;
        let sym_index = u32::try_from(i).unwrap_or(u32::MAX);
        let fi = self
            .funcs
            .iter()
            .find(|(k, _)| *k == sym_index)
            .map(|(_, f)| *f)
            .unwrap_or_default();
        let regcount = regcount(fi, text, &name)?;
        let (cbank0_size, shared_size) = self.own_sizes(text_idx, &name)?;
        let info = self.attrs(text_idx, &name)?;
        let (param_base, param_size) = info.param_cbank.unwrap_or((cbank0_size, 0));
        if cbank0_size != 0 && param_base.saturating_add(param_size) > cbank0_size {
            return Err(malformed(
                "parameters extend past the kernel's constant bank 0",
                name,
            ));
        }
        let const_banks = self.banks_of(&name);
        let stack_unknown = fi.min_stack_size == STACK_SIZE_UNKNOWN;
        Ok(Kernel {
            code_offset,
            code_size,
            regcount,
            param_base,
            param_size,
            params: info.params,
            shared_size,
            local_size: if stack_unknown {
                fi.frame_size
            } else {
                fi.frame_size.max(fi.min_stack_size)
            },
            stack_unknown,
            cluster_dims: info.cluster_dims,
            frame_size: fi.frame_size,
            min_stack_size: fi.min_stack_size,
            cbank0_size: if cbank0_size == 0 {
                param_base.saturating_add(param_size)
            } else {
                cbank0_size
            },
            max_threads: info.max_threads,
            max_block: info.max_block,
            required_block: info.required_block,
            // ABI v7 executables keep the barrier count in `.text` sh_flags bits 20..26
            // instead of EIATTR_NUM_BARRIERS.
            num_barriers: info
                .num_barriers
                .unwrap_or(((text.hdr.sh_flags >> 20) & 0x7f) as u32),
            const_banks,
            name,
        })
    }

    /// Sizes of the kernel's constant bank 0 and of its static shared memory (0 where it
    /// has no such section). Bank 0 belongs to the kernel by `sh_info` (its `.text`) or name.
    fn own_sizes(&self, text_idx: usize, name: &str) -> Result<(u32, u32), CubinError> {
        let prefix = ".nv.constant0.";
        let cbank0 = self.sections.iter().find(|s| {
            s.name.starts_with(prefix)
                && (s.hdr.sh_info as usize == text_idx || s.name.get(prefix.len()..) == Some(name))
        });
        let cbank0_size = match cbank0 {
            Some(s) => u32::try_from(s.hdr.sh_size)
                .map_err(|_| malformed("constant bank 0 larger than 4 GiB", &s.name))?,
            None => 0,
        };
        let shared_size = match self
            .sections
            .iter()
            .find(|s| s.name.strip_prefix(".nv.shared.") == Some(name))
        {
            Some(s) => u32::try_from(s.hdr.sh_size)
                .map_err(|_| malformed("shared memory larger than 4 GiB", &s.name))?,
            None => 0,
        };
        Ok((cbank0_size, shared_size))
    }

    /// The kernel's own `.nv.info.<name>` (by `sh_info` or name); defaults if it has none.
    fn attrs(&self, text_idx: usize, name: &str) -> Result<KernelAttrs, CubinError> {
        match self.sections.iter().find(|s| {
            s.hdr.sh_type == SHT_CUDA_INFO
                && s.name.starts_with(".nv.info.")
                && (s.hdr.sh_info as usize == text_idx || s.name.get(9..) == Some(name))
        }) {
            Some(s) => KernelAttrs::parse(section_bytes(self.bytes, s)?, &s.name),
            None => Ok(KernelAttrs::default()),
        }
    }

    /// The constant banks other than 0 kernel `name` sees: the module's and its own
    /// (`.nv.constant<N>.<name>`), by bank.
    fn banks_of(&self, name: &str) -> Vec<ConstBank> {
        let mut banks = self.banks.clone();
        for (i, s) in self.sections.iter().enumerate() {
            let Some(img) = self.layout.of(i) else {
                continue;
            };
            if let SectionKind::Constant { bank } = img.kind {
                let owner = s
                    .name
                    .strip_prefix(".nv.constant")
                    .and_then(|r| r.split_once('.'))
                    .map(|(_, k)| k);
                if bank != 0 && owner == Some(name) {
                    banks.push(ConstBank {
                        bank,
                        image_offset: img.image_offset,
                        size: img.size,
                    });
                }
            }
        }
        banks.sort_by_key(|b| b.bank);
        banks
    }
}

/// Registers per thread: the larger of `EIATTR_REGCOUNT` and `.text` `sh_info` bits 24..31.
///
/// Where both are given they can differ: `sh_info` counts the kernel's own registers,
/// `EIATTR_REGCOUNT` (what cuobjdump reports) also those of the functions it calls (`nvcc -G`,
/// or calls between sections: 38 against 26 in a kernel calling `sin`). A launch needs the
/// larger.
fn regcount(fi: FuncInfo, text: &Section, name: &str) -> Result<u32, CubinError> {
    let sh_info_regs = text.hdr.sh_info >> 24;
    let regcount = match (fi.regcount, sh_info_regs) {
        (Some(r), s) => r.max(s),
        (None, 0) => {
            return Err(CubinError::MissingAttribute {
                kernel: name.to_string(),
                attribute: "EIATTR_REGCOUNT",
            });
        }
        (None, s) => s,
    };
    if regcount > 255 {
        return Err(bad_attr(
            ".nv.info",
            eiattr::EIATTR_REGCOUNT,
            "is above 255 registers",
        ));
    }
    Ok(regcount)
}
