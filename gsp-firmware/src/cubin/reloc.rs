//! `R_CUDA_*` relocation types.
//!
//! Numbers and names as `cuobjdump -elf` (CUDA 13.5) prints them: [`name`] was filled by
//! feeding cuobjdump a cubin with each type number in turn. The loader implements the types
//! ptxas and nvcc (12.9/13.5) put into loadable sections of executables (`nvcc -cubin`, with
//! and without `-G`) and of `ptxas -c` objects without external calls: the absolute addresses
//! below ([`span`], [`read`], [`write()`]). Another seen in loadable sections is
//! `R_CUDA_UNUSED_CLEAR64` (0x49, only in `.debug_frame`, not loaded); `nvcc -rdc` objects also
//! carry `R_CUDA_ABS32_32` (0x37) and `R_CUDA_ABS16_32` (0x3b), which the loader rejects (link
//! them with nvlink).
//!
//! The call-target layouts are what NVIDIA's `nvdisasm` (13.5) decodes: setting each bit of a
//! `CALL.ABS.NOINC` instruction in turn and reading the target it prints (sm_80 for
//! `R_CUDA_ABS47_34`; sm_90, sm_100 and sm_120 for `R_CUDA_ABS55_16_34`).

/// 64-bit absolute address, written as a whole u64 (constant bank 4 entries, `.debug_frame`).
pub const R_CUDA_64: u32 = 0x02;
/// Low 32 bits of an absolute address, into bits 32..63 of a 128-bit instruction (the u32 at
/// `r_offset + 4`).
pub const R_CUDA_ABS32_LO_32: u32 = 0x38;
/// High 32 bits of an absolute address, into bits 32..63 of a 128-bit instruction.
pub const R_CUDA_ABS32_HI_32: u32 = 0x39;
/// A call target (sm_80, sm_89: `CALL.ABS`): address bits 2..48 in instruction bits 34..80.
pub const R_CUDA_ABS47_34: u32 = 0x3a;
/// A call target (sm_90 on: `CALL.ABS`): address bits 2..9 in instruction bits 16..23 and
/// bits 10..56 in instruction bits 34..80.
pub const R_CUDA_ABS55_16_34: u32 = 0x4b;

/// Why [`write()`] cannot store a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldError {
    /// The type is not one the loader implements.
    Unsupported,
    /// The patched bytes are not the length [`span`] gives.
    Length,
    /// A call target that is not 4-byte aligned.
    Misaligned,
    /// A call target wider than the instruction field.
    TooWide,
}

/// The bytes a relocation type the loader implements patches: (byte offset from `r_offset`,
/// length). `None` for types it does not implement.
pub fn span(r_type: u32) -> Option<(u64, u64)> {
    match r_type {
        R_CUDA_64 => Some((0, 8)),
        R_CUDA_ABS32_LO_32 | R_CUDA_ABS32_HI_32 => Some((4, 4)),
        R_CUDA_ABS47_34 | R_CUDA_ABS55_16_34 => Some((0, 16)),
        _ => None,
    }
}

/// A call target's bit ranges in the 128-bit instruction, (first instruction bit, width),
/// lowest address bits (after the 2 alignment bits) first.
fn call_fields(r_type: u32) -> Option<&'static [(u32, u32)]> {
    match r_type {
        R_CUDA_ABS47_34 => Some(&[(34, 47)]),
        R_CUDA_ABS55_16_34 => Some(&[(16, 8), (34, 47)]),
        _ => None,
    }
}

fn mask(width: u32) -> u128 {
    (1u128 << width) - 1
}

/// The value a field holds now (a REL relocation's addend), from the bytes [`span`] gives.
pub fn read(r_type: u32, bytes: &[u8]) -> Option<u64> {
    if let Some(fields) = call_fields(r_type) {
        let insn = u128::from_le_bytes(bytes.try_into().ok()?);
        let mut v = 0u64;
        let mut at = 0;
        for &(first, width) in fields {
            v |= (((insn >> first) & mask(width)) as u64) << at;
            at += width;
        }
        return Some(v << 2);
    }
    let v = match bytes.len() {
        8 => u64::from_le_bytes(bytes.try_into().ok()?),
        4 => u64::from(u32::from_le_bytes(bytes.try_into().ok()?)),
        _ => return None,
    };
    Some(if r_type == R_CUDA_ABS32_HI_32 {
        v << 32
    } else {
        v
    })
}

/// Stores `value` (symbol address + addend) into the bytes [`span`] gives, keeping the
/// instruction's other bits.
pub fn write(r_type: u32, bytes: &mut [u8], value: u64) -> Result<(), FieldError> {
    let (_, len) = span(r_type).ok_or(FieldError::Unsupported)?;
    if bytes.len() as u64 != len {
        return Err(FieldError::Length);
    }
    if let Some(fields) = call_fields(r_type) {
        if value & 3 != 0 {
            return Err(FieldError::Misaligned);
        }
        let total: u32 = fields.iter().map(|f| f.1).sum();
        let v = value >> 2;
        if v >> total != 0 {
            return Err(FieldError::TooWide);
        }
        let arr: [u8; 16] = (&*bytes).try_into().map_err(|_| FieldError::Length)?;
        let mut insn = u128::from_le_bytes(arr);
        let mut at = 0;
        for &(first, width) in fields {
            let part = (u128::from(v) >> at) & mask(width);
            insn = (insn & !(mask(width) << first)) | (part << first);
            at += width;
        }
        bytes.copy_from_slice(&insn.to_le_bytes());
        return Ok(());
    }
    let v = if r_type == R_CUDA_ABS32_HI_32 {
        value >> 32
    } else {
        value
    };
    let le = v.to_le_bytes();
    bytes.copy_from_slice(le.get(..bytes.len()).ok_or(FieldError::Length)?);
    Ok(())
}

/// cuobjdump's name for a relocation type, if it has one.
pub fn name(r_type: u32) -> Option<&'static str> {
    Some(match r_type {
        0x1 => "R_CUDA_32",
        0x2 => "R_CUDA_64",
        0x3 => "R_CUDA_G32",
        0x4 => "R_CUDA_G64",
        0x5 => "R_CUDA_ABS32_26",
        0x6 => "R_CUDA_TEX_HEADER_INDEX",
        0x7 => "R_CUDA_SAMP_HEADER_INDEX",
        0x8 => "R_CUDA_SURF_HW_DESC",
        0x9 => "R_CUDA_SURF_HW_SW_DESC",
        0xa => "R_CUDA_ABS32_LO_26",
        0xb => "R_CUDA_ABS32_HI_26",
        0xc => "R_CUDA_ABS32_23",
        0xd => "R_CUDA_ABS32_LO_23",
        0xe => "R_CUDA_ABS32_HI_23",
        0xf => "R_CUDA_ABS24_26",
        0x10 => "R_CUDA_ABS24_23",
        0x11 => "R_CUDA_ABS16_26",
        0x12 => "R_CUDA_ABS16_23",
        0x13 => "R_CUDA_TEX_SLOT",
        0x14 => "R_CUDA_SAMP_SLOT",
        0x15 => "R_CUDA_SURF_SLOT",
        0x16 => "R_CUDA_TEX_BINDLESSOFF13_32",
        0x17 => "R_CUDA_TEX_BINDLESSOFF13_47",
        0x18 => "R_CUDA_CONST_FIELD19_28",
        0x19 => "R_CUDA_CONST_FIELD19_23",
        0x1a => "R_CUDA_TEX_SLOT9_49",
        0x1b => "R_CUDA_6_31",
        0x1c => "R_CUDA_2_47",
        0x1d => "R_CUDA_TEX_BINDLESSOFF13_41",
        0x1e => "R_CUDA_TEX_BINDLESSOFF13_45",
        0x1f => "R_CUDA_FUNC_DESC32_23",
        0x20 => "R_CUDA_FUNC_DESC32_LO_23",
        0x21 => "R_CUDA_FUNC_DESC32_HI_23",
        0x22 => "R_CUDA_FUNC_DESC_32",
        0x23 => "R_CUDA_FUNC_DESC_64",
        0x24 => "R_CUDA_CONST_FIELD21_26",
        0x25 => "R_CUDA_QUERY_DESC21_37",
        0x26 => "R_CUDA_CONST_FIELD19_26",
        0x27 => "R_CUDA_CONST_FIELD21_23",
        0x28 => "R_CUDA_PCREL_IMM24_26",
        0x29 => "R_CUDA_PCREL_IMM24_23",
        0x2a => "R_CUDA_ABS32_20",
        0x2b => "R_CUDA_ABS32_LO_20",
        0x2c => "R_CUDA_ABS32_HI_20",
        0x2d => "R_CUDA_ABS24_20",
        0x2e => "R_CUDA_ABS16_20",
        0x2f => "R_CUDA_FUNC_DESC32_20",
        0x30 => "R_CUDA_FUNC_DESC32_LO_20",
        0x31 => "R_CUDA_FUNC_DESC32_HI_20",
        0x32 => "R_CUDA_CONST_FIELD19_20",
        0x33 => "R_CUDA_BINDLESSOFF13_36",
        0x34 => "R_CUDA_SURF_HEADER_INDEX",
        0x35 => "R_CUDA_INSTRUCTION64",
        0x36 => "R_CUDA_CONST_FIELD21_20",
        0x37 => "R_CUDA_ABS32_32",
        0x38 => "R_CUDA_ABS32_LO_32",
        0x39 => "R_CUDA_ABS32_HI_32",
        0x3a => "R_CUDA_ABS47_34",
        0x3b => "R_CUDA_ABS16_32",
        0x3c => "R_CUDA_ABS24_32",
        0x3d => "R_CUDA_FUNC_DESC32_32",
        0x3e => "R_CUDA_FUNC_DESC32_LO_32",
        0x3f => "R_CUDA_FUNC_DESC32_HI_32",
        0x40 => "R_CUDA_CONST_FIELD19_40",
        0x41 => "R_CUDA_BINDLESSOFF14_40",
        0x42 => "R_CUDA_CONST_FIELD21_38",
        0x43 => "R_CUDA_INSTRUCTION128",
        0x44 => "R_CUDA_YIELD_OPCODE9_0",
        0x45 => "R_CUDA_YIELD_CLEAR_PRED4_87",
        0x46 => "R_CUDA_32_LO",
        0x47 => "R_CUDA_32_HI",
        0x48 => "R_CUDA_UNUSED_CLEAR32",
        0x49 => "R_CUDA_UNUSED_CLEAR64",
        0x4a => "R_CUDA_ABS24_40",
        0x4b => "R_CUDA_ABS55_16_34",
        0x4c => "R_CUDA_8_0",
        0x4d => "R_CUDA_8_8",
        0x4e => "R_CUDA_8_16",
        0x4f => "R_CUDA_8_24",
        0x50 => "R_CUDA_8_32",
        0x51 => "R_CUDA_8_40",
        0x52 => "R_CUDA_8_48",
        0x53 => "R_CUDA_8_56",
        0x54 => "R_CUDA_G8_0",
        0x55 => "R_CUDA_G8_8",
        0x56 => "R_CUDA_G8_16",
        0x57 => "R_CUDA_G8_24",
        0x58 => "R_CUDA_G8_32",
        0x59 => "R_CUDA_G8_40",
        0x5a => "R_CUDA_G8_48",
        0x5b => "R_CUDA_G8_56",
        0x5c => "R_CUDA_FUNC_DESC_8_0",
        0x5d => "R_CUDA_FUNC_DESC_8_8",
        0x5e => "R_CUDA_FUNC_DESC_8_16",
        0x5f => "R_CUDA_FUNC_DESC_8_24",
        0x60 => "R_CUDA_FUNC_DESC_8_32",
        0x61 => "R_CUDA_FUNC_DESC_8_40",
        0x62 => "R_CUDA_FUNC_DESC_8_48",
        0x63 => "R_CUDA_FUNC_DESC_8_56",
        0x64 => "R_CUDA_ABS20_44",
        0x65 => "R_CUDA_SAMP_HEADER_INDEX_0",
        0x66 => "R_CUDA_UNIFIED",
        0x67 => "R_CUDA_UNIFIED_32",
        0x68 => "R_CUDA_UNIFIED_8_0",
        0x69 => "R_CUDA_UNIFIED_8_8",
        0x6a => "R_CUDA_UNIFIED_8_16",
        0x6b => "R_CUDA_UNIFIED_8_24",
        0x6c => "R_CUDA_UNIFIED_8_32",
        0x6d => "R_CUDA_UNIFIED_8_40",
        0x6e => "R_CUDA_UNIFIED_8_48",
        0x6f => "R_CUDA_UNIFIED_8_56",
        0x70 => "R_CUDA_UNIFIED32_LO_32",
        0x71 => "R_CUDA_UNIFIED32_HI_32",
        0x72 => "R_CUDA_ABS56_16_34",
        0x73 => "R_CUDA_CONST_FIELD22_37",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CALL.ABS.NOINC 0x0` as ptxas 13.5 emits it before relocation (sm_80 to sm_120).
    const CALL_ABS: [u8; 16] = [
        0x43, 0x79, 0, 0, 0, 0, 0, 0, 0, 0, 0xc0, 0x03, 0x00, 0xc0, 0x0f, 0x00,
    ];

    fn hex(s: &str) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, o) in b.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        b
    }

    #[test]
    fn call_targets_match_what_nvdisasm_decodes() {
        // Each patched instruction below was fed to nvdisasm 13.5 (`-b SM80` / `SM90` /
        // `SM120`), which printed `CALL.ABS.NOINC <target>` with exactly this target.
        let cases = [
            (
                R_CUDA_ABS55_16_34,
                0x123_4568_1d00,
                "437940001c6845230100c00300c00f00",
            ),
            (
                R_CUDA_ABS55_16_34,
                0x1ff_ffff_ffff_fffc,
                "4379ff00fcffffffffffc10300c00f00",
            ),
            (
                R_CUDA_ABS55_16_34,
                0x7fff_f123_4560,
                "437958004423f1ff7f00c00300c00f00",
            ),
            (
                R_CUDA_ABS47_34,
                0x123_4568_1d00,
                "43790000001d68452301c00300c00f00",
            ),
            (
                R_CUDA_ABS47_34,
                0x1_ffff_ffff_fffc,
                "43790000fcffffffffffc10300c00f00",
            ),
        ];
        for (t, target, want) in cases {
            let mut insn = CALL_ABS;
            write(t, &mut insn, target).unwrap();
            assert_eq!(insn, hex(want), "{t:#x} {target:#x}");
            assert_eq!(read(t, &insn), Some(target));
            // Writing again replaces the field rather than merging into it.
            write(t, &mut insn, 0).unwrap();
            assert_eq!(insn, CALL_ABS);
        }
    }

    #[test]
    fn call_targets_that_do_not_fit_are_refused() {
        let mut insn = CALL_ABS;
        assert_eq!(
            write(R_CUDA_ABS55_16_34, &mut insn, 0x1000_0002),
            Err(FieldError::Misaligned)
        );
        assert_eq!(
            write(R_CUDA_ABS55_16_34, &mut insn, 1 << 57),
            Err(FieldError::TooWide)
        );
        assert_eq!(
            write(R_CUDA_ABS47_34, &mut insn, 1 << 49),
            Err(FieldError::TooWide)
        );
        assert_eq!(insn, CALL_ABS, "a refused value changed the instruction");
        assert_eq!(
            write(R_CUDA_ABS47_34, &mut insn[..8], 0),
            Err(FieldError::Length)
        );
        assert_eq!(write(0x37, &mut insn, 0), Err(FieldError::Unsupported));
    }

    #[test]
    fn whole_word_fields() {
        let mut b = [0xaau8; 8];
        write(R_CUDA_64, &mut b, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(b, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(read(R_CUDA_64, &b), Some(0x0102_0304_0506_0708));
        let mut w = [0u8; 4];
        write(R_CUDA_ABS32_HI_32, &mut w, 0x1234_5678_9abc_def0).unwrap();
        assert_eq!(u32::from_le_bytes(w), 0x1234_5678);
        assert_eq!(read(R_CUDA_ABS32_HI_32, &w), Some(0x1234_5678_0000_0000));
        write(R_CUDA_ABS32_LO_32, &mut w, 0x1234_5678_9abc_def0).unwrap();
        assert_eq!(u32::from_le_bytes(w), 0x9abc_def0);
        assert_eq!(span(0x37), None);
    }
}
