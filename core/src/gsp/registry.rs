//! The `PACKED_REGISTRY_TABLE` sent with SET_REGISTRY (`g_os_nvoc.h`; packing as in
//! `registry.c`, `regCopyEntriesToPackedBuffer`): an 8-byte header {size, numEntries}, one
//! 16-byte `PACKED_REGISTRY_ENTRY` per key, then NUL-terminated names and string/binary data.
//! Offsets count from the start of the table.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::GspError;

/// `REGISTRY_TABLE_ENTRY_TYPE_DWORD`.
pub const REGISTRY_TABLE_ENTRY_TYPE_DWORD: u8 = 1;
/// `REGISTRY_TABLE_ENTRY_TYPE_BINARY`.
pub const REGISTRY_TABLE_ENTRY_TYPE_BINARY: u8 = 2;
/// `REGISTRY_TABLE_ENTRY_TYPE_STRING`.
pub const REGISTRY_TABLE_ENTRY_TYPE_STRING: u8 = 3;

/// `PACKED_REGISTRY_TABLE` header.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct PACKED_REGISTRY_TABLE {
    /// Bytes of the whole table.
    pub size: u32,
    pub numEntries: u32,
}

/// `PACKED_REGISTRY_ENTRY`.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct PACKED_REGISTRY_ENTRY {
    pub nameOffset: u32,
    pub r#type: u8,
    pub _pad: [u8; 3],
    /// The value (DWORD) or the offset of the bytes (STRING, BINARY).
    pub data: u32,
    pub length: u32,
}

/// A registry value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryValue<'a> {
    /// A 32-bit value.
    Dword(u32),
    /// Bytes sent as given (include the NUL for C strings).
    String(&'a [u8]),
    /// Opaque bytes.
    Binary(&'a [u8]),
}

/// One key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryEntry<'a> {
    /// Key name (without NUL).
    pub name: &'a str,
    /// Value.
    pub value: RegistryValue<'a>,
}

/// The keys tinygrad and nova-core send: save PCIe config across resets, allow secondary bus
/// reset.
pub const DEFAULT_REGISTRY: &[RegistryEntry<'static>] = &[
    RegistryEntry {
        name: "RMForcePcieConfigSave",
        value: RegistryValue::Dword(1),
    },
    RegistryEntry {
        name: "RMSecBusResetEnable",
        value: RegistryValue::Dword(1),
    },
];

/// Bytes the packed table for `entries` needs.
pub fn packed_size(entries: &[RegistryEntry<'_>]) -> usize {
    8 + entries
        .iter()
        .map(|e| {
            16 + e.name.len()
                + 1
                + match e.value {
                    RegistryValue::Dword(_) => 0,
                    RegistryValue::String(b) | RegistryValue::Binary(b) => b.len(),
                }
        })
        .sum::<usize>()
}

/// Packs `entries` into `out`; returns the table's length.
pub fn pack(entries: &[RegistryEntry<'_>], out: &mut [u8]) -> Result<usize, GspError> {
    let size = packed_size(entries);
    if size > u32::MAX as usize {
        return Err(GspError::MessageTooLarge {
            len: size,
            max: u32::MAX as usize,
        });
    }
    let out = out
        .get_mut(..size)
        .ok_or(GspError::BadLayout("registry buffer too small"))?;
    out.fill(0);
    let hdr = PACKED_REGISTRY_TABLE {
        size: size as u32,
        numEntries: entries.len() as u32,
    };
    out[..8].copy_from_slice(hdr.as_bytes());
    let mut data = 8 + 16 * entries.len();
    for (i, e) in entries.iter().enumerate() {
        if e.name.as_bytes().contains(&0) {
            return Err(GspError::BadLayout("registry key name contains NUL"));
        }
        let name_off = data;
        out[data..data + e.name.len()].copy_from_slice(e.name.as_bytes());
        data += e.name.len() + 1;
        let (ty, value, length) = match e.value {
            RegistryValue::Dword(v) => (REGISTRY_TABLE_ENTRY_TYPE_DWORD, v, 4),
            RegistryValue::String(b) | RegistryValue::Binary(b) => {
                let off = data;
                out[data..data + b.len()].copy_from_slice(b);
                data += b.len();
                let ty = if matches!(e.value, RegistryValue::String(_)) {
                    REGISTRY_TABLE_ENTRY_TYPE_STRING
                } else {
                    REGISTRY_TABLE_ENTRY_TYPE_BINARY
                };
                (ty, off as u32, b.len() as u32)
            }
        };
        let ent = PACKED_REGISTRY_ENTRY {
            nameOffset: name_off as u32,
            r#type: ty,
            _pad: [0; 3],
            data: value,
            length,
        };
        let at = 8 + 16 * i;
        out[at..at + 16].copy_from_slice(ent.as_bytes());
    }
    Ok(size)
}

/// A parsed entry of a packed table (for the simulator and for dumping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedEntry<'a> {
    /// Key name.
    pub name: &'a [u8],
    /// Value.
    pub value: RegistryValue<'a>,
}

/// Reads entry `i` of a packed table, checking every offset.
pub fn entry(table: &[u8], i: u32) -> Result<ParsedEntry<'_>, GspError> {
    let bad = GspError::BadLayout("malformed PACKED_REGISTRY_TABLE");
    let (hdr, _) = PACKED_REGISTRY_TABLE::read_from_prefix(table).map_err(|_| bad)?;
    let table = table.get(..hdr.size as usize).ok_or(bad)?;
    if i >= hdr.numEntries {
        return Err(bad);
    }
    let at = 8usize.checked_add(16 * i as usize).ok_or(bad)?;
    let raw = table.get(at..at + 16).ok_or(bad)?;
    let e = PACKED_REGISTRY_ENTRY::read_from_bytes(raw).map_err(|_| bad)?;
    let name_tail = table.get(e.nameOffset as usize..).ok_or(bad)?;
    let n = name_tail.iter().position(|&b| b == 0).ok_or(bad)?;
    let name = &name_tail[..n];
    let bytes = || {
        let s = e.data as usize;
        table.get(s..s.checked_add(e.length as usize)?)
    };
    let value = match e.r#type {
        REGISTRY_TABLE_ENTRY_TYPE_DWORD => RegistryValue::Dword(e.data),
        REGISTRY_TABLE_ENTRY_TYPE_STRING => RegistryValue::String(bytes().ok_or(bad)?),
        REGISTRY_TABLE_ENTRY_TYPE_BINARY => RegistryValue::Binary(bytes().ok_or(bad)?),
        _ => return Err(bad),
    };
    Ok(ParsedEntry { name, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        // gsp_abi_check.c: PACKED_REGISTRY_ENTRY 16 bytes (0, 4, 8, 12), table header 8.
        assert_eq!(core::mem::size_of::<PACKED_REGISTRY_ENTRY>(), 16);
        assert_eq!(core::mem::offset_of!(PACKED_REGISTRY_ENTRY, r#type), 4);
        assert_eq!(core::mem::offset_of!(PACKED_REGISTRY_ENTRY, data), 8);
        assert_eq!(core::mem::offset_of!(PACKED_REGISTRY_ENTRY, length), 12);
        assert_eq!(core::mem::size_of::<PACKED_REGISTRY_TABLE>(), 8);
    }

    #[test]
    fn pack_and_parse_roundtrip() {
        let entries = [
            RegistryEntry {
                name: "RMForcePcieConfigSave",
                value: RegistryValue::Dword(1),
            },
            RegistryEntry {
                name: "RmMsg",
                value: RegistryValue::String(b"hello\0"),
            },
            RegistryEntry {
                name: "Blob",
                value: RegistryValue::Binary(&[1, 2, 3]),
            },
        ];
        let mut buf = [0u8; 256];
        let n = pack(&entries, &mut buf).unwrap();
        assert_eq!(n, packed_size(&entries));
        assert_eq!(u32::from_le_bytes(buf[4..8].try_into().unwrap()), 3);
        // First name right after the 3 entries.
        assert_eq!(u32::from_le_bytes(buf[8..12].try_into().unwrap()), 8 + 48);
        let e = entry(&buf[..n], 1).unwrap();
        assert_eq!(e.name, b"RmMsg");
        assert_eq!(e.value, RegistryValue::String(b"hello\0"));
        assert_eq!(
            entry(&buf[..n], 2).unwrap().value,
            RegistryValue::Binary(&[1, 2, 3])
        );
        assert!(entry(&buf[..n], 3).is_err());
        assert!(pack(&entries, &mut [0u8; 10]).is_err());
        // A corrupt offset is an error, not a panic.
        buf[8..12].copy_from_slice(&0xffffu32.to_le_bytes());
        assert!(entry(&buf[..n], 0).is_err());
    }
}
