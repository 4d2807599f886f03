//! Params for `nvbare rm`: raw bytes (`HEX`, `@FILE`), then `FIELD=VALUE` assignments into the
//! layout of a control nvbare knows (`numClasses=3`, `grInfoList[0].index=0x0c`,
//! `grRouteInfo.flags=1`, `classList=0xcbc0,0xc86f`).

use std::path::Path;

use nvbare_core::device::RmObjects;
use nvbare_core::rm::Handle;
use nvbare_core::rm::describe::{Field, FieldType, Layout, Scalar};

use super::names::{self, parse_number, suggestion};
use crate::{CliError, input};

/// Most bytes of params a file may hold: more than any RM control takes (GSP RPCs carry at
/// most a few pages).
pub const MAX_PARAMS_BYTES: u64 = 1 << 20;

const PARAMS_FILE: input::Kind = input::Kind {
    what: "an RM params file",
    hint: "pass the params struct's bytes only",
};

/// Params from the command line's `specs`, in `layout` when nvbare knows the control (then
/// they start as zeros of the layout's size, and raw bytes must be exactly that size).
pub fn build(
    specs: &[String],
    layout: Option<&Layout>,
    what: &str,
    objs: &RmObjects,
    mine: &[Handle],
) -> Result<Vec<u8>, CliError> {
    let mut p = layout.map_or_else(Vec::new, |l| vec![0u8; l.size]);
    for (i, spec) in specs.iter().enumerate() {
        if let Some((path, value)) = spec.split_once('=') {
            let l = layout.ok_or_else(|| {
                CliError::Usage(format!(
                    "nvbare does not know the fields of {what}: pass its params as HEX or @FILE"
                ))
            })?;
            assign(&mut p, l.fields, path.trim(), value.trim(), objs, mine)?;
            continue;
        }
        if i != 0 {
            return Err(CliError::Usage(format!(
                "'{spec}': raw params (HEX or @FILE) come first, before any FIELD=VALUE"
            )));
        }
        let raw = match spec.strip_prefix('@') {
            Some(file) => input::read_at_most(Path::new(file), MAX_PARAMS_BYTES, PARAMS_FILE)?,
            None => hex(spec).map_err(|e| CliError::Usage(format!("params '{spec}': {e}")))?,
        };
        if let Some(l) = layout
            && raw.len() != l.size
        {
            return Err(CliError::Usage(format!(
                "{what} takes {} bytes of params ({}), {} were given",
                l.size,
                l.name,
                raw.len()
            )));
        }
        p = raw;
    }
    Ok(p)
}

/// Bytes from hex digits (spaces, `_` and a leading `0x` allowed).
pub fn hex(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    let s = s.strip_prefix("0x").unwrap_or(s);
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'_')
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits: bytes take two each (pad with a leading 0)",
            digits.len()
        ));
    }
    digits
        .chunks(2)
        .map(|d| {
            let t = std::str::from_utf8(d).map_err(|_| "not hex".to_string())?;
            u8::from_str_radix(t, 16).map_err(|_| format!("'{t}' is not a hex byte"))
        })
        .collect()
}

/// One step of a field path: a name and an optional `[index]`.
fn step(s: &str) -> Result<(&str, Option<usize>), String> {
    match s.split_once('[') {
        None => Ok((s, None)),
        Some((name, rest)) => {
            let idx = rest
                .strip_suffix(']')
                .and_then(parse_number)
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| format!("'{s}': an index is written NAME[N]"))?;
            Ok((name, Some(idx)))
        }
    }
}

fn find<'a>(fields: &'a [Field], name: &str) -> Result<&'a Field, String> {
    fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let known: Vec<&str> = fields.iter().map(|f| f.name).collect();
            format!(
                "no field '{name}' (fields: {}){}",
                known.join(", "),
                suggestion(name, known.iter().copied())
            )
        })
}

/// Where `path` lands: offset and type of the leaf.
fn resolve(fields: &[Field], path: &str) -> Result<(usize, FieldType), String> {
    let mut fields = fields;
    let mut base = 0usize;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let (name, idx) = step(part)?;
        let f = find(fields, name)?;
        let at = base + f.offset;
        let last = parts.peek().is_none();
        match (f.ty, idx) {
            (FieldType::Scalars { elem, count, .. }, Some(i)) => {
                if i >= count || !last {
                    return Err(format!("{part}: {name} has {count} elements of one value"));
                }
                return Ok((at + i * elem.size(), FieldType::Scalar(elem)));
            }
            (FieldType::Structs { count, .. }, Some(i)) if i >= count => {
                return Err(format!("{part}: {name} has {count} elements"));
            }
            (
                FieldType::Structs {
                    fields: inner,
                    stride,
                    ..
                },
                Some(i),
            ) if !last => {
                fields = inner;
                base = at + i * stride;
            }
            (FieldType::Struct { fields: inner, .. }, None) if !last => {
                fields = inner;
                base = at;
            }
            (ty, None) if last => return Ok((at, ty)),
            _ => {
                return Err(format!(
                    "{path}: {name} is {}",
                    match f.ty {
                        FieldType::Structs { .. } => "an array of structs: write NAME[N].FIELD",
                        FieldType::Struct { .. } => "a struct: write NAME.FIELD",
                        _ => "not an array or struct",
                    }
                ));
            }
        }
    }
    Err(format!("'{path}' names no field"))
}

fn scalar(ty: Scalar, v: &str, objs: &RmObjects, mine: &[Handle]) -> Result<u64, String> {
    let n = match ty {
        Scalar::Handle => u64::from(names::object(v, objs, mine).map_err(|e| e.to_string())?.0),
        Scalar::Class => u64::from(names::class(v).map_err(|e| e.to_string())?),
        _ => parse_number(v).ok_or_else(|| format!("'{v}' is not a number"))?,
    };
    let bits = ty.size() * 8;
    if bits < 64 && n >> bits != 0 {
        return Err(format!("{v} does not fit in {bits} bits"));
    }
    Ok(n)
}

fn assign(
    p: &mut [u8],
    fields: &[Field],
    path: &str,
    value: &str,
    objs: &RmObjects,
    mine: &[Handle],
) -> Result<(), CliError> {
    let bad = |e: String| CliError::Usage(format!("{path}={value}: {e}"));
    let (at, ty) = resolve(fields, path).map_err(bad)?;
    let bytes: Vec<u8> = match ty {
        FieldType::Scalar(s) => {
            scalar(s, value, objs, mine).map_err(bad)?.to_le_bytes()[..s.size()].to_vec()
        }
        FieldType::Str(n) => {
            if value.len() >= n {
                return Err(bad(format!("at most {} bytes fit", n - 1)));
            }
            value.as_bytes().to_vec()
        }
        FieldType::Bytes(n) => {
            let b = hex(value).map_err(bad)?;
            if b.len() > n {
                return Err(bad(format!("at most {n} bytes fit")));
            }
            b
        }
        FieldType::Scalars { elem, count, .. } => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            if items.len() > count {
                return Err(bad(format!("at most {count} values fit")));
            }
            let mut b = Vec::new();
            for v in items {
                b.extend_from_slice(
                    &scalar(elem, v, objs, mine).map_err(bad)?.to_le_bytes()[..elem.size()],
                );
            }
            b
        }
        FieldType::Structs { .. } | FieldType::Struct { .. } => {
            return Err(bad("set its fields one by one (NAME[N].FIELD=VALUE)".into()));
        }
    };
    p.get_mut(at..at + bytes.len())
        .ok_or_else(|| bad("past the end of the params".into()))?
        .copy_from_slice(&bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::rm::RmAbi;
    use nvbare_core::rm::describe::control_by_name;

    fn objs() -> RmObjects {
        RmObjects {
            client: Handle(0xc100_0000),
            device: Handle(0xcf00_0001),
            subdevice: Handle(0xcf00_0002),
            vaspace: Handle(0xcf00_0003),
        }
    }

    fn layout(name: &str) -> &'static Layout {
        control_by_name(name).unwrap().layout(RmAbi::R580)
    }

    fn specs(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn fields_land_at_their_offsets() {
        let l = layout("NV2080_CTRL_CMD_GR_GET_INFO_V2");
        let p = build(
            &specs(&[
                "grInfoListSize=2",
                "grInfoList[1].index=0x0c",
                "grRouteInfo.route=5",
            ]),
            Some(l),
            "GR_GET_INFO_V2",
            &objs(),
            &[],
        )
        .unwrap();
        assert_eq!(p.len(), l.size);
        assert_eq!(&p[0..4], &2u32.to_le_bytes());
        // grInfoList at 4, 8 bytes per entry: entry 1's index at 12.
        assert_eq!(&p[12..16], &0x0cu32.to_le_bytes());
        let route = l.size - 8;
        assert_eq!(&p[route..], &5u64.to_le_bytes());
    }

    #[test]
    fn handles_classes_and_lists_by_name() {
        let l = layout("NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES");
        let p = build(
            &specs(&["hTargetChannel=device"]),
            Some(l),
            "x",
            &objs(),
            &[],
        )
        .unwrap();
        assert_eq!(&p[0..4], &0xcf00_0001u32.to_le_bytes());
        let l = layout("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2");
        let p = build(
            &specs(&["classList=HOPPER_COMPUTE_A,0xc86f"]),
            Some(l),
            "x",
            &objs(),
            &[],
        )
        .unwrap();
        assert_eq!(&p[4..8], &0xcbc0u32.to_le_bytes());
        assert_eq!(&p[8..12], &0xc86fu32.to_le_bytes());
    }

    #[test]
    fn raw_bytes_must_match_a_known_layout() {
        let l = layout("NV2080_CTRL_CMD_PERF_BOOST");
        let p = build(
            &specs(&["0100000002000000"]),
            Some(l),
            "PERF_BOOST",
            &objs(),
            &[],
        )
        .unwrap();
        assert_eq!(p, [1, 0, 0, 0, 2, 0, 0, 0]);
        let e = build(&specs(&["01"]), Some(l), "PERF_BOOST", &objs(), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("takes 8 bytes") && e.contains("1 were given"),
            "{e}"
        );
        // Unknown controls take raw bytes of any size, and no fields.
        assert_eq!(
            build(&specs(&["0a0b"]), None, "x", &objs(), &[]).unwrap(),
            [10, 11]
        );
        let e = build(&specs(&["a=1"]), None, "0x12345678", &objs(), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not know the fields"), "{e}");
    }

    #[test]
    fn bad_params_are_usage_errors() {
        let l = layout("NV2080_CTRL_CMD_GR_GET_INFO_V2");
        for (spec, want) in [
            ("grInfoListSiz=1", "did you mean grInfoListSize?"),
            ("grInfoList[58].index=1", "has 58 elements"),
            ("grInfoList=1", "set its fields one by one"),
            ("grInfoListSize=0x100000000", "does not fit in 32 bits"),
            ("grInfoListSize=ten", "is not a number"),
            ("grInfoList[x].index=1", "NAME[N]"),
        ] {
            let e = build(&specs(&[spec]), Some(l), "x", &objs(), &[]).unwrap_err();
            assert!(matches!(e, CliError::Usage(_)), "{spec}");
            assert!(e.to_string().contains(want), "{spec}: {e}");
        }
        assert!(hex("abc").unwrap_err().contains("3 hex digits"));
        assert!(hex("zz").unwrap_err().contains("not a hex byte"));
        assert_eq!(hex("0x01 02_03").unwrap(), [1, 2, 3]);
        let e = build(
            &specs(&["@/nonexistent/params.bin"]),
            None,
            "x",
            &objs(),
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        let e = build(
            &specs(&["grInfoListSize=1", "00"]),
            Some(l),
            "x",
            &objs(),
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("come first"), "{e}");
    }
}
