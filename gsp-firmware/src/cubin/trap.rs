//! `__assertfail`, which the CUDA driver links into every module whose device code calls
//! `assert` (and which CUDA's own headers call in `nvcc -G` builds): nvbare links in a function
//! of its own that traps, so a failed assertion stops the kernel with a fault, as under CUDA,
//! where the driver also prints the message first. Without it such a module does not load.
//!
//! The code is ptxas 13.5's output for `.func nvbare_assertfail() { trap; ret; }` (a PTX
//! source of ours), one encoding per instruction-set family, as nvdisasm 13.5 decodes it:
//! `BPT.TRAP 0x1` then `BRA` to itself.

/// The symbol CUDA code calls for a failed `assert`.
pub const ASSERTFAIL: &str = "__assertfail";

/// Name of the image section that holds the trap.
pub const TRAP_SECTION: &str = ".nvbare.assertfail";

/// `BPT.TRAP 0x1`, `BRA .` for sm_80 to sm_89 (little-endian u64 pairs, low word first).
const AMPERE: [u64; 4] = [
    0x0000_0004_0000_795c,
    0x000f_ea00_0030_0000,
    0xffff_fff0_0000_7947,
    0x000f_c000_0383_ffff,
];
/// The same for sm_90.
const HOPPER: [u64; 4] = [
    0x0000_0004_0000_795c,
    0x000f_e200_0030_0000,
    0xffff_fffc_00fc_7947,
    0x000f_c000_0383_ffff,
];
/// The same for sm_100 to sm_121.
const BLACKWELL: [u64; 4] = [
    0x0000_0004_0000_795c,
    0x000f_ea00_0030_0000,
    0xffff_fffc_00fc_7947,
    0x000f_c000_0383_ffff,
];

/// The trap's code for shader model `sm`, `None` for one nvbare has no encoding for.
pub fn code(sm: u32) -> Option<[u8; 32]> {
    let words = match sm {
        80..=89 => AMPERE,
        90 => HOPPER,
        100..=121 => BLACKWELL,
        _ => return None,
    };
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(8).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    Some(out)
}
