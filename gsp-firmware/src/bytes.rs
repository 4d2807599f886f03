//! Bounds-checked reads: every offset and length from a file goes through these.

use core::ops::Range;

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

use crate::Error;

/// The byte range `offset..offset + len` if it lies within `limit` bytes.
pub(crate) fn range(
    what: &'static str,
    offset: u64,
    len: u64,
    limit: usize,
) -> Result<Range<usize>, Error> {
    let oob = || Error::OutOfBounds {
        what,
        offset,
        len,
        limit: limit as u64,
    };
    let end = offset.checked_add(len).ok_or_else(oob)?;
    if end > limit as u64 {
        return Err(oob());
    }
    let start = usize::try_from(offset).map_err(|_| oob())?;
    let end = usize::try_from(end).map_err(|_| oob())?;
    Ok(start..end)
}

/// `len` bytes at `offset` of `data`.
pub(crate) fn slice<'a>(
    data: &'a [u8],
    what: &'static str,
    offset: u64,
    len: u64,
) -> Result<&'a [u8], Error> {
    let r = range(what, offset, len, data.len())?;
    data.get(r).ok_or(Error::OutOfBounds {
        what,
        offset,
        len,
        limit: data.len() as u64,
    })
}

/// A reference to the unaligned structure `T` at `offset` of `data`.
pub(crate) fn read<'a, T>(data: &'a [u8], what: &'static str, offset: u64) -> Result<&'a T, Error>
where
    T: FromBytes + KnownLayout + Immutable + Unaligned,
{
    let bytes = slice(data, what, offset, core::mem::size_of::<T>() as u64)?;
    T::ref_from_bytes(bytes).map_err(|_| Error::OutOfBounds {
        what,
        offset,
        len: core::mem::size_of::<T>() as u64,
        limit: data.len() as u64,
    })
}

/// Little-endian `u16` at `offset`.
pub(crate) fn u16_at(data: &[u8], what: &'static str, offset: u64) -> Result<u16, Error> {
    read::<U16>(data, what, offset).map(|v| v.get())
}

/// Little-endian `u32` at `offset`.
pub(crate) fn u32_at(data: &[u8], what: &'static str, offset: u64) -> Result<u32, Error> {
    read::<U32>(data, what, offset).map(|v| v.get())
}

/// `u8` at `offset`.
pub(crate) fn u8_at(data: &[u8], what: &'static str, offset: u64) -> Result<u8, Error> {
    read::<u8>(data, what, offset).copied()
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub(crate) fn round_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}
