//! A reply's params decoded field by field, for people (indented `name = value` lines) and
//! for scripts (JSON through serde).

use std::io::Write;

use nvbare_core::rm::class::class_name;
use nvbare_core::rm::describe::{Field, FieldType, Layout, Scalar};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// A decoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A scalar and its meaning.
    Num(u64, Scalar),
    /// A C string.
    Str(String),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// Elements of an array (the valid ones).
    List {
        /// The valid elements.
        items: Vec<Value>,
        /// The array's size.
        capacity: usize,
    },
    /// A struct's fields, in order.
    Struct(Vec<(&'static str, Value)>),
}

fn u(p: &[u8], at: usize, n: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(src) = p.get(at..at + n) {
        b[..n].copy_from_slice(src);
    }
    u64::from_le_bytes(b)
}

/// `fields` of the struct at `base` in `p` (short params read as zeros past their end).
pub fn decode_fields(p: &[u8], fields: &[Field], base: usize) -> Vec<(&'static str, Value)> {
    let mut out: Vec<(&'static str, Value)> = Vec::new();
    for f in fields {
        let at = base + f.offset;
        let valid = |len_field: Option<&str>, count: usize| {
            len_field
                .and_then(|l| out.iter().find(|(n, _)| *n == l))
                .map_or(count, |(_, v)| match v {
                    Value::Num(n, _) => (*n).min(count as u64) as usize,
                    _ => count,
                })
        };
        let v = match f.ty {
            FieldType::Scalar(s) => Value::Num(u(p, at, s.size()), s),
            FieldType::Str(n) => {
                let b = p.get(at..at + n).unwrap_or(&[]);
                let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                Value::Str(String::from_utf8_lossy(&b[..end]).into_owned())
            }
            FieldType::Bytes(n) => Value::Bytes(p.get(at..at + n).unwrap_or(&[]).to_vec()),
            FieldType::Scalars {
                elem,
                count,
                len_field,
            } => Value::List {
                items: (0..valid(len_field, count))
                    .map(|i| Value::Num(u(p, at + i * elem.size(), elem.size()), elem))
                    .collect(),
                capacity: count,
            },
            FieldType::Structs {
                fields: inner,
                stride,
                count,
                len_field,
            } => Value::List {
                items: (0..valid(len_field, count))
                    .map(|i| Value::Struct(decode_fields(p, inner, at + i * stride)))
                    .collect(),
                capacity: count,
            },
            FieldType::Struct { fields: inner, .. } => Value::Struct(decode_fields(p, inner, at)),
        };
        out.push((f.name, v));
    }
    out
}

/// The params `p` in `layout`.
pub fn decode(p: &[u8], layout: &Layout) -> Value {
    Value::Struct(decode_fields(p, layout.fields, 0))
}

/// A scalar as people read it.
pub fn show_num(n: u64, s: Scalar) -> String {
    match s {
        Scalar::Handle => format!("{n:#010x}"),
        Scalar::Class => match class_name(n as u32) {
            Some(name) => format!("{name} ({n:#x})"),
            None => format!("{n:#x}"),
        },
        _ if n < 10 => n.to_string(),
        _ => format!("{n} ({n:#x})"),
    }
}

/// Bytes as hex digits, two a byte, first byte first.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes as hex, without their trailing zeros (GIDs are mostly padding).
pub fn show_bytes(b: &[u8]) -> String {
    let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    let mut s = hex(&b[..end]);
    if end < b.len() {
        s.push_str(&format!(" (then {} zero bytes)", b.len() - end));
    }
    s
}

/// Prints `v` as `name = value` lines, `indent` deep.
pub fn print(out: &mut dyn Write, v: &Value, indent: usize) -> std::io::Result<()> {
    let pad = " ".repeat(indent);
    let Value::Struct(fields) = v else {
        return writeln!(out, "{pad}{}", one_line(v));
    };
    for (name, v) in fields {
        match v {
            Value::List { items, capacity } => {
                writeln!(out, "{pad}{name}: {} of {capacity}", items.len())?;
                for (i, item) in items.iter().enumerate() {
                    writeln!(out, "{pad}  [{i}] {}", one_line(item))?;
                }
            }
            Value::Struct(_) => {
                writeln!(out, "{pad}{name}:")?;
                print(out, v, indent + 2)?;
            }
            _ => writeln!(out, "{pad}{name} = {}", one_line(v))?,
        }
    }
    Ok(())
}

/// [`print`] into a string.
pub fn to_text(v: &Value, indent: usize) -> String {
    let mut b = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = print(&mut b, v, indent);
    String::from_utf8_lossy(&b).into_owned()
}

fn one_line(v: &Value) -> String {
    match v {
        Value::Num(n, s) => show_num(*n, *s),
        Value::Str(s) => format!("{s:?}"),
        Value::Bytes(b) => show_bytes(b),
        Value::List { items, .. } => {
            let parts: Vec<String> = items.iter().map(one_line).collect();
            format!("[{}]", parts.join(", "))
        }
        Value::Struct(fields) => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(n, v)| format!("{n} = {}", one_line(v)))
                .collect();
            parts.join(", ")
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Num(n, Scalar::Class) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("class", n)?;
                m.serialize_entry("name", &class_name(*n as u32))?;
                m.end()
            }
            Value::Num(n, _) => s.serialize_u64(*n),
            Value::Str(t) => s.serialize_str(t),
            Value::Bytes(b) => s.serialize_str(&hex(b)),
            Value::List { items, .. } => {
                let mut q = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    q.serialize_element(i)?;
                }
                q.end()
            }
            Value::Struct(fields) => {
                let mut m = s.serialize_map(Some(fields.len()))?;
                for (n, v) in fields {
                    m.serialize_entry(n, v)?;
                }
                m.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::rm::RmAbi;
    use nvbare_core::rm::describe::control_by_name;

    #[test]
    fn a_class_list_decodes_its_valid_entries_with_names() {
        let l = control_by_name("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
            .unwrap()
            .layout(RmAbi::R570);
        let mut p = vec![0u8; l.size];
        p[0..4].copy_from_slice(&2u32.to_le_bytes());
        p[4..8].copy_from_slice(&0xcbc0u32.to_le_bytes());
        p[8..12].copy_from_slice(&0x1234u32.to_le_bytes());
        p[12..16].copy_from_slice(&0xc86fu32.to_le_bytes()); // past numClasses: not shown
        let v = decode(&p, l);
        let mut out = Vec::new();
        print(&mut out, &v, 2).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "  numClasses = 2\n  classList: 2 of 100\n    [0] HOPPER_COMPUTE_A (0xcbc0)\n    [1] 0x1234\n"
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["numClasses"], 2);
        assert_eq!(json["classList"][0]["name"], "HOPPER_COMPUTE_A");
        assert_eq!(json["classList"][1]["name"], serde_json::Value::Null);
        assert_eq!(json["classList"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strings_structs_and_short_params() {
        let l = control_by_name("NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2")
            .unwrap()
            .layout(RmAbi::R580);
        let mut p = vec![0u8; l.size];
        p[..7].copy_from_slice(b"580.142");
        let Value::Struct(f) = decode(&p, l) else {
            panic!("not a struct")
        };
        assert_eq!(f[0], ("driverVersionBuffer", Value::Str("580.142".into())));
        // A reply shorter than the layout reads as zeros, never out of bounds.
        let Value::Struct(f) = decode(&p[..3], l) else {
            panic!("not a struct")
        };
        assert_eq!(f[0].1, Value::Str(String::new()));
        let gr = control_by_name("NV2080_CTRL_CMD_GR_GET_INFO_V2")
            .unwrap()
            .layout(RmAbi::R580);
        let mut p = vec![0u8; gr.size];
        p[0..4].copy_from_slice(&1000u32.to_le_bytes()); // more than the 58 entries
        let Value::Struct(f) = decode(&p, gr) else {
            panic!("not a struct")
        };
        let Value::List { items, capacity } = &f[1].1 else {
            panic!("not a list")
        };
        assert_eq!((items.len(), *capacity), (58, 58));
        assert_eq!(show_bytes(&[1, 2, 0, 0]), "0102 (then 2 zero bytes)");
    }
}
