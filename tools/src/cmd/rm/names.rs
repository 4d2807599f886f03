//! Names on the `nvbare rm` command line: objects (`client`, `device`, ... or a handle),
//! classes and control commands (NVIDIA's names or numbers), with the nearest known name
//! suggested for a typo.

use nvbare_core::device::RmObjects;
use nvbare_core::rm::Handle;
use nvbare_core::rm::class::{CLASS_NAMES, class_by_name};
use nvbare_core::rm::describe::{CONTROLS, ControlDesc, control_by_cmd, control_by_name};

use crate::CliError;

/// A number as written: `0x` hex or decimal.
pub fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The object names every session knows.
pub const OBJECT_NAMES: [&str; 4] = ["client", "device", "subdevice", "vaspace"];

/// `client`, `device`, `subdevice`, `vaspace`, a handle, or one the session allocated:
/// `last`, or `$N` for its N-th allocation (`mine`, in order).
pub fn object(s: &str, objs: &RmObjects, mine: &[Handle]) -> Result<Handle, CliError> {
    if s.eq_ignore_ascii_case("last") {
        return mine.last().copied().ok_or_else(|| {
            CliError::Usage("'last': nothing was allocated in this session yet".into())
        });
    }
    if let Some(n) = s.strip_prefix('$') {
        let i: usize = n
            .parse()
            .map_err(|_| CliError::Usage(format!("'{s}': write $N for the N-th allocation")))?;
        return i
            .checked_sub(1)
            .and_then(|i| mine.get(i))
            .copied()
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "'{s}': this session allocated {} object(s)",
                    mine.len()
                ))
            });
    }
    match s.to_ascii_lowercase().as_str() {
        "client" => return Ok(objs.client),
        "device" => return Ok(objs.device),
        "subdevice" => return Ok(objs.subdevice),
        "vaspace" => return Ok(objs.vaspace),
        _ => {}
    }
    match parse_number(s) {
        Some(h) => u32::try_from(h)
            .map(Handle)
            .map_err(|_| CliError::Usage(format!("handle {s} does not fit in 32 bits"))),
        None => Err(CliError::Usage(format!(
            "unknown object '{s}': use client, device, subdevice, vaspace, a handle \
             (0xcf000001), last or $N (the N-th allocation of this session){}",
            suggestion(s, OBJECT_NAMES.iter().copied())
        ))),
    }
}

/// A class by NVIDIA's name (`HOPPER_COMPUTE_A`) or number.
pub fn class(s: &str) -> Result<u32, CliError> {
    if let Some(c) = class_by_name(s) {
        return Ok(c);
    }
    match parse_number(s) {
        Some(n) => u32::try_from(n)
            .map_err(|_| CliError::Usage(format!("class {s} does not fit in 32 bits"))),
        None => Err(CliError::Usage(format!(
            "unknown class '{s}': give NVIDIA's name (e.g. HOPPER_COMPUTE_A) or a number{}",
            suggestion(s, CLASS_NAMES.iter().map(|(_, n)| *n))
        ))),
    }
}

/// A control command: its number, and what nvbare knows of it.
pub fn command(s: &str) -> Result<(u32, Option<&'static ControlDesc>), CliError> {
    if let Some(c) = control_by_name(s) {
        return Ok((c.cmd, Some(c)));
    }
    match parse_number(s) {
        Some(n) => {
            let cmd = u32::try_from(n)
                .map_err(|_| CliError::Usage(format!("command {s} does not fit in 32 bits")))?;
            Ok((cmd, control_by_cmd(cmd)))
        }
        None => Err(CliError::Usage(format!(
            "unknown control '{s}': give NVIDIA's name or the command number \
             (`nvbare rm controls` lists the names nvbare knows){}",
            suggestion(s, CONTROLS.iter().map(|c| c.name))
        ))),
    }
}

/// `; did you mean NAME?` for the known name nearest to `s`, if one is near enough.
pub fn suggestion<'a>(s: &str, names: impl Iterator<Item = &'a str>) -> String {
    let want = s.to_ascii_uppercase();
    let best = names
        .map(|n| (distance(&want, &n.to_ascii_uppercase()), n))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, n)) if d <= (want.len() / 3).max(2) => format!("; did you mean {n}?"),
        _ => String::new(),
    }
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objs() -> RmObjects {
        RmObjects {
            client: Handle(1),
            device: Handle(2),
            subdevice: Handle(3),
            vaspace: Handle(4),
        }
    }

    #[test]
    fn objects_by_name_and_handle() {
        assert_eq!(object("device", &objs(), &[]).unwrap(), Handle(2));
        assert_eq!(object("SUBDEVICE", &objs(), &[]).unwrap(), Handle(3));
        assert_eq!(
            object("0xcf000001", &objs(), &[]).unwrap(),
            Handle(0xcf00_0001)
        );
        let e = object("devcie", &objs(), &[]).unwrap_err().to_string();
        assert!(e.contains("did you mean device?"), "{e}");
        assert!(object("0x1_0000_0000", &objs(), &[]).is_err());
        let mine = [Handle(10), Handle(11)];
        assert_eq!(object("last", &objs(), &mine).unwrap(), Handle(11));
        assert_eq!(object("$1", &objs(), &mine).unwrap(), Handle(10));
        assert!(object("$3", &objs(), &mine).is_err());
        assert!(object("$0", &objs(), &mine).is_err());
        assert!(object("last", &objs(), &[]).is_err());
    }

    #[test]
    fn commands_by_name_number_and_typo() {
        let (cmd, d) = command("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2").unwrap();
        assert_eq!((cmd, d.map(|d| d.cmd)), (0x0080_0292, Some(0x0080_0292)));
        let (cmd, d) = command("0x20801701").unwrap();
        assert_eq!(cmd, 0x2080_1701);
        assert_eq!(d.unwrap().name, "NV2080_CTRL_CMD_MC_GET_ARCH_INFO");
        assert!(command("0x12345678").unwrap().1.is_none());
        let e = command("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V3")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("did you mean NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2?"),
            "{e}"
        );
        let e = command("frobnicate").unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn classes_by_name_and_number() {
        assert_eq!(class("hopper_compute_a").unwrap(), 0xcbc0);
        assert_eq!(class("0xcbc0").unwrap(), 0xcbc0);
        let e = class("HOPPER_COMPUTE_B").unwrap_err().to_string();
        assert!(e.contains("did you mean"), "{e}");
    }
}
