//! What the simulated falcons check of a heavy-secure ucode when it is started: loaded by PIO
//! on TU10x/GA100 ([`direct_check`]) or handed to the boot ROM on GA102 and later
//! ([`brom_check`]).

use super::falcon::{Falcon, off};

/// The checks of a PIO-loaded heavy-secure ucode on a falcon without boot-ROM registers
/// (TU10x/GA100, `s_prepareHsFalconDirect`): BOOTVEC 0, the non-secure code at its tag,
/// the secure code at its tag and loaded secure, DMEM from 0 the patched data.
pub(super) fn direct_check(
    f: &Falcon,
    (ns_va, ns): (u32, &[u8]),
    (sec_va, sec): (u32, &[u8]),
    dmem: &[u8],
) -> Result<(), String> {
    let name = f.name;
    if f.reg(off::BOOTVEC) != 0 {
        return Err(format!(
            "{name}: BOOTVEC {:#x}, a PIO-loaded ucode starts at 0",
            f.reg(off::BOOTVEC)
        ));
    }
    if !ns.is_empty() && f.imem_by_va(ns_va, ns.len()).as_deref() != Some(ns) {
        return Err(format!(
            "{name}: IMEM does not hold the non-secure code at VA {ns_va:#x}"
        ));
    }
    if f.imem_by_va(sec_va, sec.len()).as_deref() != Some(sec) {
        return Err(format!(
            "{name}: IMEM does not hold the secure code at VA {sec_va:#x}"
        ));
    }
    if !f.imem_secure_by_va(sec_va, sec.len()) {
        return Err(format!("{name}: the secure code was not loaded secure"));
    }
    if f.dmem.get(..dmem.len()) != Some(dmem) {
        return Err(format!(
            "{name}: DMEM differs from the ucode's data patched with the signature for the \
             fuse version"
        ));
    }
    Ok(())
}

/// The checks of a heavy-secure ucode the boot ROM verifies (GA102 and later): its
/// signature's place, engine and ucode ids, RSA3K, BOOTVEC, the secure code at its tag,
/// DMEM the patched data.
pub(super) fn brom_check(
    f: &Falcon,
    code_va: u32,
    code: &[u8],
    dmem: &[u8],
    pkc: u32,
    engid: u32,
    ucode: u32,
) -> Result<(), String> {
    let name = f.name;
    if f.reg(off::BROM_PARAADDR0) != pkc {
        return Err(format!(
            "{name}: BROM_PARAADDR(0) {:#x}, the ucode's signature is at DMEM {pkc:#x}",
            f.reg(off::BROM_PARAADDR0)
        ));
    }
    if f.reg(off::BROM_ENGIDMASK) != engid || f.reg(off::BROM_CURR_UCODE_ID) & 0xff != ucode {
        return Err(format!(
            "{name}: BROM ENGIDMASK/UCODE_ID {:#x}/{} instead of {engid:#x}/{ucode}",
            f.reg(off::BROM_ENGIDMASK),
            f.reg(off::BROM_CURR_UCODE_ID)
        ));
    }
    if f.reg(off::MOD_SEL) & 0xff != 1 {
        return Err(format!("{name}: MOD_SEL is not RSA3K"));
    }
    if f.reg(off::BOOTVEC) != code_va {
        return Err(format!(
            "{name}: BOOTVEC {:#x}, the code starts at VA {code_va:#x}",
            f.reg(off::BOOTVEC)
        ));
    }
    match f.imem_by_va(code_va, code.len()) {
        Some(i) if i == code => {}
        Some(_) => return Err(format!("{name}: IMEM does not hold the ucode's code")),
        None => {
            return Err(format!(
                "{name}: IMEM has no blocks tagged for VA {code_va:#x}"
            ));
        }
    }
    if !f.imem_secure_by_va(code_va, code.len()) {
        return Err(format!("{name}: the code was not loaded secure"));
    }
    if f.dmem.get(..dmem.len()) != Some(dmem) {
        let at = f
            .dmem
            .iter()
            .zip(dmem)
            .position(|(a, b)| a != b)
            .unwrap_or(f.dmem.len().min(dmem.len()));
        return Err(format!(
            "{name}: DMEM differs from the ucode's data patched with the signature for the \
             fuse version (first at byte {at:#x} of {:#x})",
            dmem.len()
        ));
    }
    Ok(())
}
