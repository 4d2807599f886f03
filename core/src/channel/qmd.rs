//! Queue meta-data (QMD): the 256/384-byte descriptor a compute launch hands the GPU.
//!
//! One declaration per layout ([`v03_00`], [`v04_00`], [`v05_00`], in `qmd/fields.rs`) with
//! NVIDIA's field names and `MW(hi:lo)` bit ranges as the syntax (bit numbers over the whole
//! QMD, little-endian 32-bit words), from open-gpu-doc `classes/compute/`:
//!
//! | layout | chips | header | size |
//! |---|---|---|---|
//! | [`QmdVersion::V03_00`] | Ampere, Ada | `clc9c0qmd.h` (same positions as `clc6c0qmd.h`/`clc7c0qmd.h` for every field set here) | 256 B |
//! | [`QmdVersion::V04_00`] | Hopper | `clcbc0qmd.h` | 384 B |
//! | [`QmdVersion::V05_00`] | Blackwell | `clcec0qmd.h` (= `clcdc0qmd.h`) | 384 B |
//!
//! Each declaration gives typed fields (`v04_00::GRID_WIDTH`, `v04_00::RELEASE_ENABLE[0]` for
//! the header's `RELEASE_ENABLE(i)`) that the compiler checks against the layout (inside it,
//! inside one 32-bit word, no overlaps), and the name table [`QmdVersion::fields`], where
//! indexed fields appear expanded (`"CONSTANT_BUFFER_VALID(0)"` ... `"CONSTANT_BUFFER_VALID(7)"`).
//!
//! [`QmdLayout`] (implemented by [`V03`], [`V04`], [`V05`]) maps the parts of a launch to each
//! layout's fields, with typed setters; [`LaunchDesc`] is the launch as data; [`Qmd::build`]
//! turns it into a QMD for any layout and [`Qmd::launch_desc`] reads it back. The name table is
//! for decoding only: [`Qmd::set`] / [`Qmd::get`] by field name (values that do not fit are
//! rejected) and [`Qmd::fields`], the non-zero fields, serve `nvbare decode qmd` and tests.
//!
//! What [`Qmd::build`] sets besides the [`LaunchDesc`] (the choices tinygrad and Mesa NVK make):
//! `QMD_MAJOR_VERSION`/minor, `QMD_GROUP_ID` 0x3f, `SM_GLOBAL_CACHING_ENABLE` (V03),
//! `QMD_TYPE` = `GRID_CTA` (V04/V05), `API_VISIBLE_CALL_LIMIT` = `NO_CHECK`, `SAMPLER_INDEX` =
//! `VIA_HEADER_INDEX`, `CWD_MEMBAR_TYPE` = `L1_SYSMEMBAR`, the texture header/sampler/data and
//! shader-data cache invalidates, `CONSTANT_BUFFER_INVALIDATE(i)` for every bound bank,
//! `CONSTANT_BUFFER_PREFETCH(0)` = `PREFETCH_PRE` with its `..._PRE_MAX_SIZE_SHIFTED8` = the bank's
//! size (V04/V05: bank 0 is fetched before the launch, not on the first CTA's first read), and for
//! each release: `PAYLOAD64B`, `STRUCTURE_SIZE` = `SEMAPHORE_FOUR_WORDS` (64-bit payload + 64-bit
//! timestamp, 16 bytes), `MEMBAR_TYPE` = `FE_SYSMEMBAR`; a dependent QMD gets `ACTION` =
//! `QMD_SCHEDULE` and `PREFETCH`.

use core::fmt;

pub use crate::chip::QmdVersion;

mod fields;
mod layout;

pub use fields::{v03_00, v04_00, v05_00};
pub(crate) use layout::with_layout;
pub use layout::{
    CwdMembar, DependentFields, QmdLayout, ReleaseFields, ReleaseMembar, V03, V04, V05,
};

/// One QMD field: NVIDIA's name and its bit range `MW(hi:lo)` over the whole QMD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QmdField {
    /// The header's name without the `NVxxxx_QMDVxx_xx_` prefix, e.g. `"CTA_THREAD_DIMENSION0"`.
    pub name: &'static str,
    /// Highest bit (inclusive).
    pub hi: u16,
    /// Lowest bit.
    pub lo: u16,
    /// For `_SHIFTED<n>` fields, `n`: the field holds `value >> n`. 0 otherwise.
    pub shift: u8,
}

impl QmdField {
    /// A field from its name and `MW(hi:lo)`; `shift` comes from a `_SHIFTED<n>` in the name.
    pub const fn new(name: &'static str, hi: u16, lo: u16) -> QmdField {
        QmdField {
            name,
            hi,
            lo,
            shift: shift_of(name),
        }
    }

    /// Width in bits.
    pub const fn bits(&self) -> u32 {
        (self.hi - self.lo + 1) as u32
    }

    /// Largest value the field holds.
    pub const fn max(&self) -> u64 {
        if self.bits() >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits()) - 1
        }
    }
}

/// `n` of a `_SHIFTED<n>` name (before any `(i)` index), else 0.
const fn shift_of(name: &str) -> u8 {
    let b = name.as_bytes();
    let pat = b"_SHIFTED";
    let mut i = 0;
    while i + pat.len() < b.len() {
        let mut j = 0;
        while j < pat.len() && b[i + j] == pat[j] {
            j += 1;
        }
        if j == pat.len() {
            let mut k = i + pat.len();
            let mut n = 0u8;
            while k < b.len() && b[k].is_ascii_digit() {
                n = n * 10 + (b[k] - b'0');
                k += 1;
            }
            return n;
        }
        i += 1;
    }
    0
}

impl QmdVersion {
    /// This layout's field table, sorted by bit position (empty for [`QmdVersion::V02_02`],
    /// which nvbare does not launch with).
    pub fn fields(self) -> &'static [QmdField] {
        match self {
            QmdVersion::V02_02 => &[],
            QmdVersion::V03_00 => V03::FIELDS,
            QmdVersion::V04_00 => V04::FIELDS,
            QmdVersion::V05_00 => V05::FIELDS,
        }
    }

    /// The field called `name` (e.g. `"GRID_WIDTH"`, `"CONSTANT_BUFFER_VALID(2)"`), for the
    /// decoder: launches use the typed fields.
    pub fn field(self, name: &str) -> Option<&'static QmdField> {
        self.fields().iter().find(|f| f.name == name)
    }

    /// `(QMD_MAJOR_VERSION, minor)` this layout carries.
    pub const fn major_minor(self) -> (u8, u8) {
        match self {
            QmdVersion::V02_02 => (2, 2),
            QmdVersion::V03_00 => (3, 0),
            QmdVersion::V04_00 => (4, 0),
            QmdVersion::V05_00 => (5, 0),
        }
    }
}

/// Longest field name an [`QmdError::UnknownField`] keeps.
pub const MAX_FIELD_NAME: usize = 64;

/// Why a QMD operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QmdError {
    /// nvbare has no field table for this layout (V02_02, Turing).
    UnsupportedVersion {
        /// The layout.
        version: QmdVersion,
    },
    /// The layout has no field of this name.
    UnknownField {
        /// The layout.
        version: QmdVersion,
        /// The name asked for (cut to [`MAX_FIELD_NAME`] bytes).
        field: heapless::String<MAX_FIELD_NAME>,
    },
    /// The value does not fit the field.
    ValueTooLarge {
        /// The field.
        field: &'static str,
        /// The value (after any `_SHIFTED` shift).
        value: u64,
        /// The field's width.
        bits: u32,
    },
    /// An address or size is not aligned as the field needs.
    Misaligned {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// An index past the layout's instances of a field (constant banks 0..8, releases 0..2).
    NoSuchIndex {
        /// What is indexed.
        what: &'static str,
        /// The index asked for.
        index: usize,
        /// How many there are.
        count: usize,
    },
    /// A typed setter of one layout was given a QMD of another.
    LayoutMismatch {
        /// The QMD's layout.
        qmd: QmdVersion,
        /// The setter's layout.
        layout: QmdVersion,
    },
    /// Raw QMD bytes of the wrong length.
    WrongSize {
        /// The layout.
        version: QmdVersion,
        /// Its size.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The QMD's own version fields do not name this layout.
    VersionMismatch {
        /// The layout it was read as.
        version: QmdVersion,
        /// `QMD_MAJOR_VERSION` found.
        major: u64,
        /// Minor version found.
        minor: u64,
    },
}

impl fmt::Display for QmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnsupportedVersion { version } => write!(
                f,
                "QMD layout {version:?} is not supported (nvbare launches with V03_00, V04_00 \
                 and V05_00: Ampere and later)"
            ),
            Self::UnknownField { version, field } => write!(
                f,
                "QMD {version:?} has no field {field:?}; names are NVIDIA's without the \
                 NVxxxx_QMDVxx_xx_ prefix, indexed ones written like CONSTANT_BUFFER_VALID(0)"
            ),
            Self::ValueTooLarge { field, value, bits } => write!(
                f,
                "value {value:#x} does not fit QMD field {field} ({bits} bits)"
            ),
            Self::Misaligned {
                field,
                value,
                align,
            } => write!(
                f,
                "{value:#x} for QMD field {field} must be a multiple of {align:#x}"
            ),
            Self::NoSuchIndex { what, index, count } => {
                write!(f, "QMD {what} {index} does not exist (there are {count})")
            }
            Self::LayoutMismatch { qmd, layout } => write!(
                f,
                "a {qmd:?} QMD cannot be written through the {layout:?} layout's fields"
            ),
            Self::WrongSize {
                version,
                expected,
                got,
            } => write!(
                f,
                "a {version:?} QMD is {expected} bytes, got {got}; check the layout \
                 (--version / --chip) and the file"
            ),
            Self::VersionMismatch {
                version,
                major,
                minor,
            } => {
                let (m, n) = version.major_minor();
                write!(
                    f,
                    "QMD says version {major}.{minor}, not {m}.{n} ({version:?}); decode it \
                     with the layout it was written for"
                )
            }
        }
    }
}

impl core::error::Error for QmdError {}

/// Largest QMD in 32-bit words (V04/V05: 384 bytes).
pub(crate) const MAX_WORDS: usize = 96;

/// A QMD of one layout: the raw words, always [`QmdVersion::size`] bytes long as seen through
/// [`Qmd::as_bytes`].
#[derive(Clone, PartialEq, Eq)]
pub struct Qmd {
    version: QmdVersion,
    words: [u32; MAX_WORDS],
}

impl fmt::Debug for Qmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (name, v) in self.fields() {
            m.entry(&name, &format_args!("{v:#x}"));
        }
        m.finish()
    }
}

/// `value` read from `hi:lo` of little-endian 32-bit words.
fn get_bits(words: &[u32], hi: u16, lo: u16) -> u64 {
    let (hi, lo) = (usize::from(hi), usize::from(lo));
    if hi / 32 == lo / 32 {
        // Within one word (almost every field): no 128-bit arithmetic.
        let word = words.get(lo / 32).copied().unwrap_or(0);
        return u64::from((word >> (lo % 32)) & (u32::MAX >> (31 - (hi - lo))));
    }
    let mut acc: u128 = 0;
    for (n, w) in (lo / 32..=hi / 32).enumerate() {
        acc |= u128::from(words.get(w).copied().unwrap_or(0)) << (32 * n);
    }
    let width = hi - lo + 1;
    ((acc >> (lo % 32)) & ((1u128 << width) - 1)) as u64
}

/// Sets `hi:lo` of little-endian 32-bit words to `value` (which fits). Every field of the
/// three layouts lies in one word (`qmd_layout!` checks it), so that case avoids the general
/// path's 128-bit arithmetic; with a constant field it is a masked store to a fixed word.
#[inline]
fn set_bits(words: &mut [u32], hi: u16, lo: u16, value: u64) {
    let (hi, lo) = (usize::from(hi), usize::from(lo));
    if hi / 32 == lo / 32 {
        let mask = (u32::MAX >> (31 - (hi - lo))) << (lo % 32);
        if let Some(word) = words.get_mut(lo / 32) {
            *word = (*word & !mask) | (((value as u32) << (lo % 32)) & mask);
        }
        return;
    }
    let width = hi - lo + 1;
    let mask = ((1u128 << width) - 1) << (lo % 32);
    let val = (u128::from(value) << (lo % 32)) & mask;
    for (n, w) in (lo / 32..=hi / 32).enumerate() {
        if let Some(word) = words.get_mut(w) {
            let m = (mask >> (32 * n)) as u32;
            let v = (val >> (32 * n)) as u32;
            *word = (*word & !m) | v;
        }
    }
}

/// A field name as asked for (no heap): longer ones are cut.
type Name = heapless::String<MAX_FIELD_NAME>;

fn unknown(version: QmdVersion, field: &str) -> QmdError {
    let mut s = Name::new();
    for c in field.chars() {
        if s.push(c).is_err() {
            break;
        }
    }
    QmdError::UnknownField { version, field: s }
}

impl Qmd {
    /// An all-zero QMD of layout `v` with its version fields set (`QMD_MAJOR_VERSION` and
    /// `QMD_VERSION` / `QMD_MINOR_VERSION`).
    pub fn new(v: QmdVersion) -> Qmd {
        let q: Result<Qmd, QmdError> = with_layout!(v, L => Ok(L::empty()));
        q.unwrap_or(Qmd {
            version: v,
            words: [0; MAX_WORDS],
        })
    }

    /// Sets field `f` to `value`, if it fits (the typed setters' one store).
    #[inline]
    fn put(&mut self, f: QmdField, value: u64) -> Result<(), QmdError> {
        if value > f.max() {
            return Err(QmdError::ValueTooLarge {
                field: f.name,
                value,
                bits: f.bits(),
            });
        }
        set_bits(&mut self.words, f.hi, f.lo, value);
        Ok(())
    }

    /// The layout.
    pub fn version(&self) -> QmdVersion {
        self.version
    }

    /// Sets field `field` to the raw `value` (for `_SHIFTED` fields, the already shifted
    /// value). Rejects unknown names and values wider than the field.
    pub fn set(&mut self, field: &str, value: u64) -> Result<(), QmdError> {
        let f = self
            .version
            .field(field)
            .ok_or_else(|| unknown(self.version, field))?;
        self.set_field(f, value)
    }

    /// [`Qmd::set`] with a field from [`QmdVersion::fields`].
    pub fn set_field(&mut self, f: &QmdField, value: u64) -> Result<(), QmdError> {
        if value > f.max() {
            return Err(QmdError::ValueTooLarge {
                field: f.name,
                value,
                bits: f.bits(),
            });
        }
        set_bits(&mut self.words, f.hi, f.lo, value);
        Ok(())
    }

    /// The raw value of field `field`.
    pub fn get(&self, field: &str) -> Result<u64, QmdError> {
        let f = self
            .version
            .field(field)
            .ok_or_else(|| unknown(self.version, field))?;
        Ok(self.get_field(f))
    }

    /// The raw value of a field from [`QmdVersion::fields`].
    pub fn get_field(&self, f: &QmdField) -> u64 {
        get_bits(&self.words, f.hi, f.lo)
    }

    /// The QMD as the GPU reads it: exactly [`QmdVersion::size`] bytes.
    pub fn as_bytes(&self) -> &[u8] {
        let all: &[u8] = zerocopy::IntoBytes::as_bytes(&self.words[..]);
        all.get(..self.version.size()).unwrap_or(all)
    }

    /// The 32-bit words (as many as the layout has).
    pub fn words(&self) -> &[u32] {
        self.words
            .get(..self.version.size() / 4)
            .unwrap_or(&self.words)
    }

    /// A QMD from raw bytes (e.g. read back from GPU memory). Only the length is checked; see
    /// [`Qmd::check_version`].
    pub fn from_bytes(v: QmdVersion, b: &[u8]) -> Result<Qmd, QmdError> {
        if b.len() != v.size() {
            return Err(QmdError::WrongSize {
                version: v,
                expected: v.size(),
                got: b.len(),
            });
        }
        let mut q = Qmd {
            version: v,
            words: [0; MAX_WORDS],
        };
        for (w, c) in q.words.iter_mut().zip(b.chunks_exact(4)) {
            *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        Ok(q)
    }

    /// Whether the QMD's own version fields name its layout.
    pub fn check_version(&self) -> Result<(), QmdError> {
        let major = self.get("QMD_MAJOR_VERSION").unwrap_or(0);
        let minor = self
            .get("QMD_VERSION")
            .or_else(|_| self.get("QMD_MINOR_VERSION"))
            .unwrap_or(0);
        let (m, n) = self.version.major_minor();
        if (major, minor) == (m.into(), n.into()) {
            Ok(())
        } else {
            Err(QmdError::VersionMismatch {
                version: self.version,
                major,
                minor,
            })
        }
    }

    /// Every non-zero field with its raw value, in bit order.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.version.fields().iter().filter_map(move |f| {
            let v = self.get_field(f);
            (v != 0).then_some((f.name, v))
        })
    }
}

/// The shared-memory carveout fields (`MIN_`/`MAX_`/`TARGET_SM_CONFIG_SHARED_MEM_SIZE`), as
/// the QMD encodes them: `KiB / 4 + 1`. See
/// [`launch::sm_shared_config`](super::launch::sm_shared_config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmSharedConfig {
    /// `MIN_SM_CONFIG_SHARED_MEM_SIZE`.
    pub min: u32,
    /// `MAX_SM_CONFIG_SHARED_MEM_SIZE`.
    pub max: u32,
    /// `TARGET_SM_CONFIG_SHARED_MEM_SIZE`.
    pub target: u32,
}

/// A compute launch as data, independent of the QMD layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchDesc {
    /// GPU VA of the kernel's first instruction (16-byte aligned for V05).
    pub program_address: u64,
    /// Registers per thread.
    pub register_count: u32,
    /// Shared memory per block in bytes (a multiple of 128 for V05); see
    /// [`launch::block_shared_memory`](super::launch::block_shared_memory).
    pub shared_memory_size: u32,
    /// Block dimensions (threads).
    pub block: [u32; 3],
    /// Grid dimensions (blocks).
    pub grid: [u32; 3],
    /// Constant banks 0..7: `(GPU VA, size in bytes)`. Addresses must be 64-byte aligned for
    /// V04/V05; sizes are rounded up to 16 bytes.
    pub cbufs: [Option<(u64, u32)>; 8],
    /// `SHADER_LOCAL_MEMORY_LOW_SIZE` in bytes per thread (a multiple of 16 for V05).
    pub shader_local_memory_low_size: u32,
    /// `SHADER_LOCAL_MEMORY_HIGH_SIZE` in bytes per thread (a multiple of 16 for V05): the
    /// stack of CUDA kernels lives here.
    pub shader_local_memory_high_size: u32,
    /// `BARRIER_COUNT` (named barriers the kernel uses).
    pub barrier_count: u32,
    /// `SASS_VERSION`, e.g. 0x90 for sm_90 (`Cubin::sass_version`).
    pub sass_version: u32,
    /// Semaphore releases when the grid completes: `(GPU VA, 64-bit payload)`. The GPU writes
    /// the payload and a 64-bit timestamp (16 bytes; the address must be 16-byte aligned).
    pub release: [Option<(u64, u64)>; 2],
    /// GPU VA of a QMD to schedule when this one completes (256-byte aligned).
    pub dependent_qmd: Option<u64>,
    /// Bytes of code to prefetch from `program_address` (`PROGRAM_PREFETCH_SIZE` holds
    /// 256-byte units, at most 0x1ff; 0 = no prefetch).
    pub program_size: u32,
    /// The shared-memory carveout.
    pub sm_config: SmSharedConfig,
}

impl Qmd {
    /// The QMD for launch `d` in layout `v`, through that layout's typed setters
    /// ([`QmdLayout::build`]). Every value is range-checked against its field (a typed error
    /// names the field); addresses the layout stores shifted must be aligned.
    pub fn build(v: QmdVersion, d: &LaunchDesc) -> Result<Qmd, QmdError> {
        with_layout!(v, L => L::build(d))
    }

    /// Makes this QMD schedule the QMD at GPU VA `next` (256-byte aligned) when its grid
    /// completes ([`QmdLayout::schedule_after`]). Sets only those four fields, so a QMD
    /// already written to memory can be patched word by word.
    pub fn schedule_after(&mut self, next: u64) -> Result<(), QmdError> {
        with_layout!(self.version, L => L::schedule_after(self, next))
    }

    /// Reads the launch back out of the QMD (the inverse of [`Qmd::build`] for the fields
    /// [`LaunchDesc`] has; `program_size` comes back in whole 256-byte units).
    pub fn launch_desc(&self) -> Result<LaunchDesc, QmdError> {
        with_layout!(self.version, L => L::launch_desc(self))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;
    use std::vec;
    use std::vec::Vec;

    use proptest::prelude::*;

    use super::*;

    const VERSIONS: [QmdVersion; 3] = [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00];

    /// The name-based builder the typed setters replaced, kept as the reference they must
    /// match bit for bit: every field set through the name table ([`Qmd::set`]).
    mod by_name {
        use super::*;

        /// Field names that differ between layouts, for [`Qmd::build`] / [`Qmd::launch_desc`].
        struct Names {
            register_count: &'static str,
            grid: [&'static str; 3],
            shared_size: &'static str,
            shared_shift: u32,
            local_low: &'static str,
            local_high: &'static str,
            local_shift: u32,
            prog_lo: &'static str,
            prog_hi: &'static str,
            prog_shift: u32,
            cb_lo: &'static str,
            cb_hi: &'static str,
            cb_shift: u32,
            /// The field bounding constant-bank prefetch before launch (V04/V05 only).
            cb_prefetch_pre_max: Option<&'static str>,
        }

        fn names(v: QmdVersion) -> Result<Names, QmdError> {
            Ok(match v {
                QmdVersion::V03_00 => Names {
                    register_count: "REGISTER_COUNT_V",
                    grid: ["CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"],
                    shared_size: "SHARED_MEMORY_SIZE",
                    shared_shift: 0,
                    local_low: "SHADER_LOCAL_MEMORY_LOW_SIZE",
                    local_high: "SHADER_LOCAL_MEMORY_HIGH_SIZE",
                    local_shift: 0,
                    prog_lo: "PROGRAM_ADDRESS_LOWER",
                    prog_hi: "PROGRAM_ADDRESS_UPPER",
                    prog_shift: 0,
                    cb_lo: "CONSTANT_BUFFER_ADDR_LOWER",
                    cb_hi: "CONSTANT_BUFFER_ADDR_UPPER",
                    cb_shift: 0,
                    cb_prefetch_pre_max: None,
                },
                QmdVersion::V04_00 => Names {
                    register_count: "REGISTER_COUNT",
                    grid: ["GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"],
                    shared_size: "SHARED_MEMORY_SIZE",
                    shared_shift: 0,
                    local_low: "SHADER_LOCAL_MEMORY_LOW_SIZE",
                    local_high: "SHADER_LOCAL_MEMORY_HIGH_SIZE",
                    local_shift: 0,
                    prog_lo: "PROGRAM_ADDRESS_LOWER",
                    prog_hi: "PROGRAM_ADDRESS_UPPER",
                    prog_shift: 0,
                    cb_lo: "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6",
                    cb_hi: "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6",
                    cb_shift: 6,
                    cb_prefetch_pre_max: Some("CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8"),
                },
                QmdVersion::V05_00 => Names {
                    register_count: "REGISTER_COUNT",
                    grid: ["GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"],
                    shared_size: "SHARED_MEMORY_SIZE_SHIFTED7",
                    shared_shift: 7,
                    local_low: "SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4",
                    local_high: "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4",
                    local_shift: 4,
                    prog_lo: "PROGRAM_ADDRESS_LOWER_SHIFTED4",
                    prog_hi: "PROGRAM_ADDRESS_UPPER_SHIFTED4",
                    prog_shift: 4,
                    cb_lo: "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6",
                    cb_hi: "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6",
                    cb_shift: 6,
                    cb_prefetch_pre_max: Some("CONSTANT_BANK_PREFETCH_PRE_MAX_SIZE_SHIFTED8"),
                },
                version => return Err(QmdError::UnsupportedVersion { version }),
            })
        }

        fn name(args: fmt::Arguments<'_>) -> Name {
            let mut s = Name::new();
            let _ = fmt::Write::write_fmt(&mut s, args);
            s
        }

        /// `NAME(i)`, as indexed fields appear in the tables.
        fn indexed(base: &str, i: usize) -> Name {
            name(format_args!("{base}({i})"))
        }

        /// Field names of release `i`: address lower/upper, payload lower/upper, enable, payload64b,
        /// structure size, membar type.
        fn release_names(v: QmdVersion, i: usize) -> [Name; 8] {
            if v == QmdVersion::V03_00 {
                let r = |s: &str| name(format_args!("RELEASE{i}_{s}"));
                [
                    r("ADDRESS_LOWER"),
                    r("ADDRESS_UPPER"),
                    r("PAYLOAD_LOWER"),
                    r("PAYLOAD_UPPER"),
                    r("ENABLE"),
                    r("PAYLOAD64B"),
                    r("STRUCTURE_SIZE"),
                    r("MEMBAR_TYPE"),
                ]
            } else {
                let r = |s: &str| name(format_args!("RELEASE_SEMAPHORE{i}_{s}"));
                [
                    r("ADDR_LOWER"),
                    r("ADDR_UPPER"),
                    r("PAYLOAD_LOWER"),
                    r("PAYLOAD_UPPER"),
                    indexed("RELEASE_ENABLE", i),
                    indexed("RELEASE_PAYLOAD64B", i),
                    indexed("RELEASE_STRUCTURE_SIZE", i),
                    indexed("RELEASE_MEMBAR_TYPE", i),
                ]
            }
        }

        /// Field names of dependent QMD 0: pointer, enable, action, prefetch.
        fn dependent_names(v: QmdVersion) -> [Name; 4] {
            let plain = |s: &str| name(format_args!("{s}"));
            if v == QmdVersion::V04_00 {
                [
                    plain("DEPENDENT_QMD0_POINTER"),
                    indexed("DEPENDENT_QMD_ENABLE", 0),
                    indexed("DEPENDENT_QMD_ACTION", 0),
                    indexed("DEPENDENT_QMD_PREFETCH", 0),
                ]
            } else {
                [
                    plain("DEPENDENT_QMD0_POINTER"),
                    plain("DEPENDENT_QMD0_ENABLE"),
                    plain("DEPENDENT_QMD0_ACTION"),
                    plain("DEPENDENT_QMD0_PREFETCH"),
                ]
            }
        }

        /// `SEMAPHORE_FOUR_WORDS` release structure.
        const RELEASE_STRUCTURE_SIZE_FOUR_WORDS: u64 = 0;
        /// `FE_SYSMEMBAR` release membar.
        const RELEASE_MEMBAR_TYPE_FE_SYSMEMBAR: u64 = 1;
        /// `QMD_SCHEDULE` dependent-QMD action.
        const DEPENDENT_QMD_ACTION_QMD_SCHEDULE: u64 = 1;
        /// `GRID_CTA` QMD type (V04/V05).
        const QMD_TYPE_GRID_CTA: u64 = 2;
        /// `L1_SYSMEMBAR` CWD membar type.
        const CWD_MEMBAR_TYPE_L1_SYSMEMBAR: u64 = 1;
        /// `CONSTANT_BUFFER_PREFETCH_PREFETCH_PRE` (V04/V05).
        const CONSTANT_BUFFER_PREFETCH_PRE: u64 = 1;
        /// Largest value of the 6-bit `..._PREFETCH_PRE_MAX_SIZE_SHIFTED8` (63 x 256 bytes).
        const CB_PREFETCH_MAX_SHIFTED8: u64 = 63;

        /// The table's `&'static` name for `field` (for errors), or "" if unknown.
        fn static_name(v: QmdVersion, field: &str) -> &'static str {
            v.field(field).map_or("", |f| f.name)
        }

        fn aligned(field: &'static str, value: u64, shift: u32) -> Result<u64, QmdError> {
            let align = 1u64 << shift;
            if !value.is_multiple_of(align) {
                return Err(QmdError::Misaligned {
                    field,
                    value,
                    align,
                });
            }
            Ok(value >> shift)
        }

        /// Sets a 64-bit quantity split over a `_LOWER` (32-bit) and `_UPPER` field.
        fn set_split(q: &mut Qmd, lo: &str, hi: &str, value: u64) -> Result<(), QmdError> {
            q.set(lo, value & 0xffff_ffff)?;
            let hi_f = q.version.field(hi).ok_or_else(|| unknown(q.version, hi))?;
            q.set_field(hi_f, value >> 32)
        }

        fn get_split(q: &Qmd, lo: &str, hi: &str) -> Result<u64, QmdError> {
            Ok(q.get(lo)? | (q.get(hi)? << 32))
        }

        /// The QMD for launch `d` in layout `v`. Every value is range-checked against its field
        /// (a typed error names the field); addresses the layout stores shifted must be aligned.
        pub(super) fn build(v: QmdVersion, d: &LaunchDesc) -> Result<Qmd, QmdError> {
            let n = names(v)?;
            let mut q = Qmd::new(v);
            q.set("QMD_GROUP_ID", 0x3f)?;
            if v == QmdVersion::V03_00 {
                q.set("SM_GLOBAL_CACHING_ENABLE", 1)?;
            } else {
                q.set("QMD_TYPE", QMD_TYPE_GRID_CTA)?;
            }
            q.set("API_VISIBLE_CALL_LIMIT", 1)?; // NO_CHECK
            q.set("SAMPLER_INDEX", 1)?; // VIA_HEADER_INDEX
            q.set("CWD_MEMBAR_TYPE", CWD_MEMBAR_TYPE_L1_SYSMEMBAR)?;
            for f in [
                "INVALIDATE_TEXTURE_HEADER_CACHE",
                "INVALIDATE_TEXTURE_SAMPLER_CACHE",
                "INVALIDATE_TEXTURE_DATA_CACHE",
                "INVALIDATE_SHADER_DATA_CACHE",
            ] {
                q.set(f, 1)?;
            }

            // Program.
            let prog = aligned(n.prog_lo, d.program_address, n.prog_shift)?;
            set_split(&mut q, n.prog_lo, n.prog_hi, prog)?;
            if d.program_size != 0 {
                q.set(
                    "PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED",
                    (d.program_address >> 8) & 0xffff_ffff,
                )?;
                q.set(
                    "PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED",
                    d.program_address >> 40,
                )?;
                q.set(
                    "PROGRAM_PREFETCH_SIZE",
                    u64::from(d.program_size >> 8).min(0x1ff),
                )?;
            }
            q.set(n.register_count, d.register_count.into())?;
            q.set("BARRIER_COUNT", d.barrier_count.into())?;
            q.set("SASS_VERSION", d.sass_version.into())?;

            // Shape.
            for (i, name) in [
                "CTA_THREAD_DIMENSION0",
                "CTA_THREAD_DIMENSION1",
                "CTA_THREAD_DIMENSION2",
            ]
            .iter()
            .enumerate()
            {
                q.set(name, d.block[i].into())?;
            }
            for (i, name) in n.grid.iter().enumerate() {
                q.set(name, d.grid[i].into())?;
            }

            // Memory.
            q.set(
                n.shared_size,
                aligned(n.shared_size, d.shared_memory_size.into(), n.shared_shift)?,
            )?;
            q.set("MIN_SM_CONFIG_SHARED_MEM_SIZE", d.sm_config.min.into())?;
            q.set("MAX_SM_CONFIG_SHARED_MEM_SIZE", d.sm_config.max.into())?;
            q.set(
                "TARGET_SM_CONFIG_SHARED_MEM_SIZE",
                d.sm_config.target.into(),
            )?;
            q.set(
                n.local_low,
                aligned(
                    n.local_low,
                    d.shader_local_memory_low_size.into(),
                    n.local_shift,
                )?,
            )?;
            q.set(
                n.local_high,
                aligned(
                    n.local_high,
                    d.shader_local_memory_high_size.into(),
                    n.local_shift,
                )?,
            )?;

            // Constant banks.
            for (i, cb) in d.cbufs.iter().enumerate() {
                let Some((addr, size)) = *cb else { continue };
                let lo = indexed(n.cb_lo, i);
                let hi = indexed(n.cb_hi, i);
                let a = aligned(static_name(v, &lo), addr, n.cb_shift)?;
                set_split(&mut q, &lo, &hi, a)?;
                let size16 = u64::from(size).div_ceil(16);
                q.set(&indexed("CONSTANT_BUFFER_SIZE_SHIFTED4", i), size16)?;
                q.set(&indexed("CONSTANT_BUFFER_VALID", i), 1)?;
                q.set(&indexed("CONSTANT_BUFFER_INVALIDATE", i), 1)?;
            }
            // Hopper and Blackwell can fetch constant bank 0 (driver area and parameters, read by
            // nearly every kernel's first instructions) while the launch is being set up instead of
            // on the first CTA's first read: 0.12-0.22 µs of a launch + sync on the H200 in same-VM
            // comparisons (docs/performance.md, "Constant-bank prefetch").
            if let (Some(max_name), Some((_, size))) = (n.cb_prefetch_pre_max, d.cbufs[0]) {
                q.set("CONSTANT_BUFFER_PREFETCH(0)", CONSTANT_BUFFER_PREFETCH_PRE)?;
                q.set(
                    max_name,
                    u64::from(size).div_ceil(256).min(CB_PREFETCH_MAX_SHIFTED8),
                )?;
            }

            // Completion.
            for (i, rel) in d.release.iter().enumerate() {
                let Some((addr, payload)) = *rel else {
                    continue;
                };
                let [alo, ahi, plo, phi, en, p64, st, mb] = release_names(v, i);
                aligned(static_name(v, &alo), addr, 4)?;
                set_split(&mut q, &alo, &ahi, addr)?;
                set_split(&mut q, &plo, &phi, payload)?;
                q.set(&en, 1)?;
                q.set(&p64, 1)?;
                q.set(&st, RELEASE_STRUCTURE_SIZE_FOUR_WORDS)?;
                q.set(&mb, RELEASE_MEMBAR_TYPE_FE_SYSMEMBAR)?;
            }
            if let Some(next) = d.dependent_qmd {
                schedule_after(&mut q, next)?;
            }
            Ok(q)
        }

        /// Makes this QMD schedule the QMD at GPU VA `next` (256-byte aligned) when its grid
        /// completes, prefetching it when this one is scheduled (dependent QMD 0: `QMD_SCHEDULE` +
        /// `PREFETCH`, what a CUDA graph's kernels do). Sets only those four fields, so a QMD
        /// already written to memory can be patched word by word.
        pub(super) fn schedule_after(q: &mut Qmd, next: u64) -> Result<(), QmdError> {
            let v = q.version;
            let [ptr, en, act, pf] = dependent_names(v);
            q.set(&ptr, aligned(static_name(v, &ptr), next, 8)?)?;
            q.set(&en, 1)?;
            q.set(&act, DEPENDENT_QMD_ACTION_QMD_SCHEDULE)?;
            q.set(&pf, 1)
        }

        /// Reads the launch back out of the QMD (the inverse of [`Qmd::build`] for the fields
        /// [`LaunchDesc`] has; `program_size` comes back in whole 256-byte units).
        pub(super) fn launch_desc(q: &Qmd) -> Result<LaunchDesc, QmdError> {
            let v = q.version;
            let n = names(v)?;
            q.check_version()?;
            let u32_of = |x: u64| x as u32; // every field read here is at most 32 bits wide
            let mut d = LaunchDesc {
                program_address: get_split(q, n.prog_lo, n.prog_hi)? << n.prog_shift,
                register_count: u32_of(q.get(n.register_count)?),
                barrier_count: u32_of(q.get("BARRIER_COUNT")?),
                sass_version: u32_of(q.get("SASS_VERSION")?),
                shared_memory_size: u32_of(q.get(n.shared_size)? << n.shared_shift),
                shader_local_memory_low_size: u32_of(q.get(n.local_low)? << n.local_shift),
                shader_local_memory_high_size: u32_of(q.get(n.local_high)? << n.local_shift),
                program_size: u32_of(q.get("PROGRAM_PREFETCH_SIZE")? << 8),
                sm_config: SmSharedConfig {
                    min: u32_of(q.get("MIN_SM_CONFIG_SHARED_MEM_SIZE")?),
                    max: u32_of(q.get("MAX_SM_CONFIG_SHARED_MEM_SIZE")?),
                    target: u32_of(q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE")?),
                },
                ..LaunchDesc::default()
            };
            for (i, name) in [
                "CTA_THREAD_DIMENSION0",
                "CTA_THREAD_DIMENSION1",
                "CTA_THREAD_DIMENSION2",
            ]
            .iter()
            .enumerate()
            {
                d.block[i] = u32_of(q.get(name)?);
            }
            for (i, name) in n.grid.iter().enumerate() {
                d.grid[i] = u32_of(q.get(name)?);
            }
            for i in 0..8 {
                if q.get(&indexed("CONSTANT_BUFFER_VALID", i))? == 0 {
                    continue;
                }
                let addr = get_split(q, &indexed(n.cb_lo, i), &indexed(n.cb_hi, i))? << n.cb_shift;
                let size = q.get(&indexed("CONSTANT_BUFFER_SIZE_SHIFTED4", i))? << 4;
                d.cbufs[i] = Some((addr, u32_of(size)));
            }
            for i in 0..2 {
                let [alo, ahi, plo, phi, en, ..] = release_names(v, i);
                if q.get(&en)? != 0 {
                    d.release[i] = Some((get_split(q, &alo, &ahi)?, get_split(q, &plo, &phi)?));
                }
            }
            let [ptr, en, ..] = dependent_names(v);
            if q.get(&en)? != 0 {
                d.dependent_qmd = Some(q.get(&ptr)? << 8);
            }
            Ok(d)
        }
    }

    /// A launch description from proptest's numbers: mostly valid, sometimes not (misaligned,
    /// too large), so errors are compared too.
    fn arb_desc() -> impl Strategy<Value = LaunchDesc> {
        let addr = prop_oneof![
            (0u64..1 << 16).prop_map(|a| 0x10_0000_0000 + (a << 8)),
            any::<u64>().prop_map(|a| a & ((1 << 49) - 1)),
            any::<u64>(),
        ];
        (
            (
                addr.clone(),
                0u32..600,
                any::<u32>(),
                0u32..2048,
                0u32..0x3_0000,
            ),
            (
                [1u32..1100, 1..70, 1..70],
                [1u32..0x1_0000, 1..0x1_1000, 1..0x1_1000],
            ),
            proptest::collection::vec(proptest::option::of((addr.clone(), 0u32..0x1_2000)), 8),
            (0u32..0x1000, 0u32..0x2000, 0u32..40, 0u32..0x140),
            (
                [
                    proptest::option::of((addr.clone(), any::<u64>())),
                    proptest::option::of((addr.clone(), any::<u64>())),
                ],
                proptest::option::of(addr),
                [0u32..70, 0..70, 0..70],
            ),
        )
            .prop_map(|(p, shape, cbufs, mem, (release, dependent_qmd, sm))| {
                let mut d = LaunchDesc {
                    program_address: p.0,
                    register_count: p.1,
                    program_size: p.2 % 0x3_0000,
                    sass_version: p.3 % 300,
                    shared_memory_size: p.4 & !0x7f | (p.4 & 1) << 6,
                    block: shape.0,
                    grid: shape.1,
                    shader_local_memory_low_size: mem.0 & !0xf,
                    shader_local_memory_high_size: mem.1,
                    barrier_count: mem.2,
                    release,
                    dependent_qmd,
                    sm_config: SmSharedConfig {
                        min: sm[0],
                        max: sm[1],
                        target: sm[2],
                    },
                    ..LaunchDesc::default()
                };
                let _ = mem.3;
                for (slot, cb) in d.cbufs.iter_mut().zip(cbufs) {
                    *slot = cb;
                }
                d
            })
    }

    proptest! {
        #[test]
        fn typed_build_equals_the_name_table_builder(d in arb_desc()) {
            for v in VERSIONS {
                let typed = Qmd::build(v, &d);
                prop_assert_eq!(&typed, &by_name::build(v, &d), "{:?}", v);
                if let Ok(q) = typed {
                    prop_assert_eq!(q.launch_desc(), by_name::launch_desc(&q), "{:?}", v);
                    let mut a = q.clone();
                    let mut b = q;
                    let next = d.program_address & !0xff;
                    prop_assert_eq!(a.schedule_after(next), by_name::schedule_after(&mut b, next));
                    prop_assert_eq!(a, b, "{:?}", v);
                }
            }
        }
    }

    /// The typed fields of layout `L`, by the role the setters give them.
    fn roles<L: QmdLayout>() -> Vec<QmdField> {
        let mut f = Vec::new();
        f.extend([L::QMD_MAJOR_VERSION, L::QMD_MINOR_VERSION]);
        f.extend(L::GRID);
        f.extend(L::CTA_THREAD_DIMENSION);
        f.extend([L::REGISTER_COUNT, L::BARRIER_COUNT, L::SASS_VERSION]);
        f.push(L::SHARED_MEMORY_SIZE);
        f.extend(L::SM_CONFIG_SHARED_MEM_SIZE);
        f.extend(L::SHADER_LOCAL_MEMORY_SIZE);
        f.extend(L::PROGRAM_ADDRESS);
        f.extend(L::PROGRAM_PREFETCH);
        f.extend(L::CONSTANT_BUFFER_ADDR_LOWER);
        f.extend(L::CONSTANT_BUFFER_ADDR_UPPER);
        f.extend(L::CONSTANT_BUFFER_SIZE_SHIFTED4);
        f.extend(L::CONSTANT_BUFFER_VALID);
        f.extend(L::CONSTANT_BUFFER_INVALIDATE);
        if let Some((a, b)) = L::CONSTANT_BUFFER_PREFETCH_PRE {
            f.extend([a, b]);
        }
        for r in L::RELEASE {
            f.extend(r.address);
            f.extend(r.payload);
            f.extend([r.enable, r.payload64b, r.structure_size, r.membar_type]);
        }
        let d = L::DEPENDENT_QMD0;
        f.extend([
            d.pointer,
            d.enable,
            d.action,
            d.prefetch,
            L::CWD_MEMBAR_TYPE,
        ]);
        f.extend(L::CWD_MEMBAR_TASK_CHASING_ENABLE);
        f.extend(L::FIXED.iter().map(|(f, _)| *f));
        f
    }

    #[test]
    fn every_typed_field_is_the_name_tables_field_of_that_name() {
        fn check<L: QmdLayout>() {
            for f in roles::<L>() {
                assert_eq!(
                    L::VERSION.field(f.name),
                    Some(&f),
                    "{:?} {}",
                    L::VERSION,
                    f.name
                );
            }
            assert_eq!(L::VERSION.fields(), L::FIELDS);
        }
        check::<V03>();
        check::<V04>();
        check::<V05>();
        // Spot checks of the generated constants against the headers.
        assert_eq!((v04_00::GRID_WIDTH.hi, v04_00::GRID_WIDTH.lo), (1055, 1024));
        assert_eq!(
            (v04_00::RELEASE_ENABLE[1].hi, v04_00::RELEASE_ENABLE[1].lo),
            (336, 336)
        );
        assert_eq!(v04_00::RELEASE_ENABLE[2].name, "RELEASE_ENABLE(2)");
        assert_eq!(v03_00::CONSTANT_BUFFER_SIZE_SHIFTED4[7].hi, 1087 + 448);
        assert_eq!(v05_00::TPC_DISABLE_MASK.len(), 8);
        assert_eq!(v04_00::TPC_DISABLE_MASK[17].lo, 2976);
        assert_eq!(v05_00::SHARED_MEMORY_SIZE_SHIFTED7.shift, 7);
    }

    /// Every bit outside `f` is as in `before`, and `f` holds `value`.
    fn only_field_changed(before: &Qmd, after: &Qmd, f: &QmdField, value: u64) {
        let mut want = before.clone();
        want.set_field(f, value).unwrap();
        assert_eq!(after, &want, "{}", f.name);
    }

    proptest! {
        #[test]
        fn each_typed_setter_writes_exactly_its_named_fields(
            seed in any::<u32>(),
            x in any::<u64>(),
            y in any::<u64>(),
            i in 0usize..8,
        ) {
            fn check<L: QmdLayout>(seed: u32, x: u64, y: u64, i: usize) {
                // A QMD of this layout with every other bit random: a setter must not touch
                // them.
                let mut q = L::empty();
                for (k, w) in q.words.iter_mut().enumerate().take(L::VERSION.size() / 4) {
                    *w = seed.rotate_left(k as u32) ^ (k as u32).wrapping_mul(0x9e37_79b9);
                }
                let by = |q: &mut Qmd, writes: &[(QmdField, u64)]| {
                    for (f, v) in writes {
                        let t = L::VERSION.field(f.name).unwrap();
                        q.set(t.name, *v).unwrap();
                    }
                };
                let g = [x as u32 & 0xffff, (x >> 16) as u32 & 0xffff, (x >> 32) as u32 & 0xffff];
                let mut a = q.clone();
                L::set_grid(&mut a, g).unwrap();
                let mut b = q.clone();
                by(&mut b, &[(L::GRID[0], g[0].into()), (L::GRID[1], g[1].into()), (L::GRID[2], g[2].into())]);
                assert_eq!(a, b);
                let blk = [g[0] & 0xff, g[1] & 0xff, g[2] & 0xff];
                let mut a = q.clone();
                L::set_block(&mut a, blk).unwrap();
                let mut b = q.clone();
                let t = L::CTA_THREAD_DIMENSION;
                by(&mut b, &[(t[0], blk[0].into()), (t[1], blk[1].into()), (t[2], blk[2].into())]);
                assert_eq!(a, b);
                let mut a = q.clone();
                L::set_register_count(&mut a, (x & 0xff) as u32).unwrap();
                only_field_changed(&q, &a, &L::REGISTER_COUNT, x & 0xff);
                // Constant bank i: address, size, valid, invalidate (and bank 0's prefetch).
                let addr = x & ((1 << 49) - 1) & !0x3f;
                let size = (y & 0xffff) as u32;
                let mut a = q.clone();
                L::set_constant_bank(&mut a, i, addr, size).unwrap();
                let mut b = q.clone();
                let lo = L::CONSTANT_BUFFER_ADDR_LOWER[i];
                let sh = addr >> lo.shift;
                let mut w = vec![
                    (lo, sh & 0xffff_ffff),
                    (L::CONSTANT_BUFFER_ADDR_UPPER[i], sh >> 32),
                    (L::CONSTANT_BUFFER_SIZE_SHIFTED4[i], u64::from(size).div_ceil(16)),
                    (L::CONSTANT_BUFFER_VALID[i], 1),
                    (L::CONSTANT_BUFFER_INVALIDATE[i], 1),
                ];
                if let (0, Some((p, m))) = (i, L::CONSTANT_BUFFER_PREFETCH_PRE) {
                    w.extend([(p, 1), (m, u64::from(size).div_ceil(256).min(63))]);
                }
                by(&mut b, &w);
                assert_eq!(a, b);
                let mut a = q.clone();
                L::set_constant_bank_address(&mut a, i, addr).unwrap();
                let mut b = q.clone();
                by(&mut b, &w[..2]);
                assert_eq!(a, b);
                // Release r: address, payload, enable, 64-bit payload, four words, membar.
                let r = i % 2;
                let rel = L::RELEASE[r];
                let raddr = x & ((1 << 40) - 1) & !0xf;
                let mut a = q.clone();
                L::set_release(&mut a, r, raddr, y, ReleaseMembar::FeNone).unwrap();
                let mut b = q.clone();
                by(&mut b, &[
                    (rel.address[0], raddr & 0xffff_ffff),
                    (rel.address[1], raddr >> 32),
                    (rel.payload[0], y & 0xffff_ffff),
                    (rel.payload[1], y >> 32),
                    (rel.enable, 1),
                    (rel.payload64b, 1),
                    (rel.structure_size, 0),
                    (rel.membar_type, 0),
                ]);
                assert_eq!(a, b);
                let mut a = q.clone();
                L::set_release_payload(&mut a, r, y).unwrap();
                let mut b = q.clone();
                by(&mut b, &[(rel.payload[0], y & 0xffff_ffff), (rel.payload[1], y >> 32)]);
                assert_eq!(a, b);
                let mut a = q.clone();
                L::set_release_enable(&mut a, r, false).unwrap();
                only_field_changed(&q, &a, &rel.enable, 0);
                let mut a = q.clone();
                L::set_release_membar(&mut a, r, ReleaseMembar::FeSysmembar).unwrap();
                only_field_changed(&q, &a, &rel.membar_type, 1);
                // Dependent QMD 0 and the CTA-end membar.
                let next = raddr & !0xff;
                let mut a = q.clone();
                L::schedule_after(&mut a, next).unwrap();
                let dep = L::DEPENDENT_QMD0;
                let mut c = q.clone();
                by(&mut c, &[(dep.pointer, next >> 8), (dep.enable, 1), (dep.action, 1), (dep.prefetch, 1)]);
                assert_eq!(a, c);
                let mut a = q.clone();
                L::set_cwd_membar(&mut a, CwdMembar::L1Membar, true).unwrap();
                let mut b = q.clone();
                let mut w = vec![(L::CWD_MEMBAR_TYPE, 3)];
                w.extend(L::CWD_MEMBAR_TASK_CHASING_ENABLE.map(|f| (f, 1)));
                by(&mut b, &w);
                assert_eq!(a, b);
                // Shared memory, carveout, local memory, program.
                let mut a = q.clone();
                L::set_shared_memory_size(&mut a, (y as u32 & 0x7ff) << 7).unwrap();
                let f = L::SHARED_MEMORY_SIZE;
                only_field_changed(&q, &a, &f, u64::from((y as u32 & 0x7ff) << 7) >> f.shift);
                let mut a = q.clone();
                let c = SmSharedConfig { min: (x & 0x3f) as u32, max: (y & 0x3f) as u32, target: 5 };
                L::set_sm_config(&mut a, c).unwrap();
                let mut b = q.clone();
                let s = L::SM_CONFIG_SHARED_MEM_SIZE;
                by(&mut b, &[(s[0], c.min.into()), (s[1], c.max.into()), (s[2], 5)]);
                assert_eq!(a, b);
                let mut a = q.clone();
                let pa = x & ((1 << 49) - 1) & !0xf;
                L::set_program(&mut a, pa, 0x2345).unwrap();
                let mut b = q.clone();
                let [lo, hi] = L::PROGRAM_ADDRESS;
                let [plo, phi, psz] = L::PROGRAM_PREFETCH;
                by(&mut b, &[
                    (lo, (pa >> lo.shift) & 0xffff_ffff),
                    (hi, (pa >> lo.shift) >> 32),
                    (plo, (pa >> 8) & 0xffff_ffff),
                    (phi, pa >> 40),
                    (psz, 0x23),
                ]);
                assert_eq!(a, b);
                // The wrong layout's QMD and a bank past the eighth are refused.
                let other = if L::VERSION == QmdVersion::V04_00 { V05::empty() } else { V04::empty() };
                let mut o = other.clone();
                assert!(matches!(L::set_grid(&mut o, [1, 1, 1]), Err(QmdError::LayoutMismatch { .. })));
                assert_eq!(o, other);
                assert!(matches!(
                    L::set_constant_bank(&mut q.clone(), 8, 0, 16),
                    Err(QmdError::NoSuchIndex { index: 8, count: 8, .. })
                ));
            }
            check::<V03>(seed, x, y, i);
            check::<V04>(seed, x, y, i);
            check::<V05>(seed, x, y, i);
        }
    }

    /// QMDs of a few fixture launches, byte for byte, against the name-table builder.
    #[test]
    fn fixture_launches_build_the_bytes_they_always_did() {
        let mut small = sample(QmdVersion::V04_00);
        small.cbufs = [None; 8];
        small.cbufs[0] = Some((0x10_0000_2000, 0x300));
        small.release = [Some((0x10_0000_0000, 9)), None];
        small.dependent_qmd = None;
        let mut chained = small;
        chained.dependent_qmd = Some(0x20_0000_1200);
        let plain = LaunchDesc {
            program_address: 0x10_0000_1000,
            block: [1, 1, 1],
            grid: [1, 1, 1],
            ..LaunchDesc::default()
        };
        for v in VERSIONS {
            for d in [sample(v), small, chained, plain] {
                let q = Qmd::build(v, &d).unwrap();
                assert_eq!(
                    q.as_bytes(),
                    by_name::build(v, &d).unwrap().as_bytes(),
                    "{v:?}"
                );
            }
        }
    }

    fn range(v: QmdVersion, name: &str) -> (u16, u16) {
        let f = v
            .field(name)
            .unwrap_or_else(|| panic!("{v:?} has no {name}"));
        (f.hi, f.lo)
    }

    #[test]
    fn tables_are_consistent() {
        for v in VERSIONS {
            let t = v.fields();
            assert!(t.len() > 150, "{v:?}: {} fields", t.len());
            for f in t {
                assert!(f.hi >= f.lo, "{}", f.name);
                assert!(usize::from(f.hi) < v.size() * 8, "{} past the end", f.name);
                assert!(f.bits() <= 32, "{}", f.name);
            }
            for w in t.windows(2) {
                assert!(
                    w[1].lo > w[0].hi,
                    "{:?}: {} overlaps {}",
                    v,
                    w[0].name,
                    w[1].name
                );
            }
            let mut names: Vec<_> = t.iter().map(|f| f.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), t.len(), "{v:?}: duplicate names");
        }
        assert!(QmdVersion::V02_02.fields().is_empty());
    }

    #[test]
    fn bit_ranges_match_the_headers() {
        // Spot checks against open-gpu-doc (see rm-abi.md §1.2), written out by hand so a
        // wrong table fails.
        use QmdVersion::*;
        let checks: &[(QmdVersion, &str, u16, u16)] = &[
            (V03_00, "QMD_MAJOR_VERSION", 583, 580),
            (V03_00, "QMD_VERSION", 579, 576),
            (V03_00, "CTA_RASTER_WIDTH", 415, 384),
            (V03_00, "CTA_RASTER_HEIGHT", 431, 416),
            (V03_00, "CTA_RASTER_DEPTH", 463, 448),
            (V03_00, "REGISTER_COUNT_V", 656, 648),
            (V03_00, "SHARED_MEMORY_SIZE", 561, 544),
            (V03_00, "TARGET_SM_CONFIG_SHARED_MEM_SIZE", 662, 657),
            (V03_00, "CTA_THREAD_DIMENSION0", 607, 592),
            (V03_00, "CONSTANT_BUFFER_VALID(3)", 643, 643),
            (
                V03_00,
                "CONSTANT_BUFFER_ADDR_LOWER(2)",
                1055 + 128,
                1024 + 128,
            ),
            (
                V03_00,
                "CONSTANT_BUFFER_SIZE_SHIFTED4(7)",
                1087 + 448,
                1075 + 448,
            ),
            (V03_00, "PROGRAM_ADDRESS_LOWER", 1567, 1536),
            (V03_00, "RELEASE0_ENABLE", 823, 823),
            (V03_00, "RELEASE1_PAYLOAD_LOWER", 991, 960),
            (V03_00, "DEPENDENT_QMD0_POINTER", 511, 480),
            (V03_00, "SASS_VERSION", 1663, 1656),
            (V03_00, "SHADER_LOCAL_MEMORY_HIGH_SIZE", 1623, 1600),
            (V04_00, "QMD_MAJOR_VERSION", 583, 580),
            (V04_00, "QMD_TYPE", 25, 23),
            (V04_00, "GRID_WIDTH", 1055, 1024),
            (V04_00, "GRID_DEPTH", 1103, 1088),
            (V04_00, "REGISTER_COUNT", 1208, 1200),
            (V04_00, "BARRIER_COUNT", 1215, 1211),
            (V04_00, "SHARED_MEMORY_SIZE", 601, 584),
            (V04_00, "MIN_SM_CONFIG_SHARED_MEM_SIZE", 613, 608),
            (V04_00, "CTA_THREAD_DIMENSION2", 1199, 1184),
            (V04_00, "CONSTANT_BUFFER_VALID(2)", 424, 424),
            (V04_00, "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(1)", 1631, 1600),
            (V04_00, "CONSTANT_BUFFER_SIZE_SHIFTED4(0)", 1599, 1587),
            (V04_00, "RELEASE_ENABLE(1)", 336, 336),
            (V04_00, "RELEASE_STRUCTURE_SIZE(0)", 322, 321),
            (V04_00, "DEPENDENT_QMD_ENABLE(0)", 368, 368),
            (V04_00, "DEPENDENT_QMD_ACTION(1)", 376, 374),
            (V04_00, "PROGRAM_ADDRESS_UPPER", 1272, 1248),
            (V04_00, "SHADER_LOCAL_MEMORY_HIGH_SIZE", 567, 544),
            (V04_00, "SASS_VERSION", 543, 536),
            (V04_00, "OUTER_STICKY_OVERFLOW", 3071, 3071),
            (V05_00, "QMD_MAJOR_VERSION", 471, 468),
            (V05_00, "QMD_TYPE", 153, 151),
            (V05_00, "GRID_WIDTH", 1279, 1248),
            (V05_00, "REGISTER_COUNT", 1136, 1128),
            (V05_00, "CTA_THREAD_DIMENSION2", 1127, 1120),
            (V05_00, "SHARED_MEMORY_SIZE_SHIFTED7", 1162, 1152),
            (V05_00, "PROGRAM_ADDRESS_LOWER_SHIFTED4", 1055, 1024),
            (V05_00, "CONSTANT_BUFFER_VALID(7)", 1884, 1884),
            (V05_00, "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)", 1394, 1376),
            (V05_00, "RELEASE_ENABLE(0)", 288, 288),
            (V05_00, "DEPENDENT_QMD0_POINTER", 415, 384),
            (V05_00, "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4", 1215, 1200),
        ];
        for &(v, name, hi, lo) in checks {
            assert_eq!(range(v, name), (hi, lo), "{v:?} {name}");
        }
        assert_eq!(
            V05_00.field("SHARED_MEMORY_SIZE_SHIFTED7").unwrap().shift,
            7
        );
        assert_eq!(
            V04_00
                .field("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(5)")
                .unwrap()
                .shift,
            6
        );
        assert_eq!(V04_00.field("GRID_WIDTH").unwrap().shift, 0);
        // Names that belong to other layouts are absent.
        assert!(V03_00.field("GRID_WIDTH").is_none());
        assert!(V04_00.field("CTA_RASTER_WIDTH").is_none());
        assert!(V05_00.field("REGISTER_COUNT_V").is_none());
    }

    #[test]
    fn raw_bits_land_where_the_header_says() {
        let word = |q: &Qmd, i: usize| {
            let b = q.as_bytes();
            u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        };
        let mut q = Qmd::new(QmdVersion::V04_00);
        q.set("GRID_WIDTH", 0xdead_beef).unwrap(); // 1055:1024 = word 32
        assert_eq!(word(&q, 32), 0xdead_beef);
        q.set("REGISTER_COUNT", 0x1ff).unwrap(); // 1208:1200 = word 37 bits 16..24
        assert_eq!(word(&q, 37), 0x01ff_0000);
        // Major 4 at 583:580 = word 18 bits 4..7.
        assert_eq!(word(&q, 18), 0x40);
        let mut q = Qmd::new(QmdVersion::V03_00);
        q.set("CTA_RASTER_WIDTH", 0x1234_5678).unwrap(); // 415:384 = word 12
        assert_eq!(word(&q, 12), 0x1234_5678);
        assert_eq!(word(&q, 18), 0x30);
        assert_eq!(q.as_bytes().len(), 256);
        let mut q = Qmd::new(QmdVersion::V05_00);
        q.set("CTA_THREAD_DIMENSION2", 0xff).unwrap(); // 1127:1120 = word 35 bits 0..7
        assert_eq!(word(&q, 35), 0xff);
        assert_eq!(word(&q, 14), 0x0050_0000); // major 5 at 471:468 = word 14 bits 20..23
        assert_eq!(q.as_bytes().len(), 384);
    }

    #[test]
    fn set_rejects_what_does_not_fit() {
        let mut q = Qmd::new(QmdVersion::V05_00);
        assert_eq!(
            q.set("CTA_THREAD_DIMENSION2", 0x100),
            Err(QmdError::ValueTooLarge {
                field: "CTA_THREAD_DIMENSION2",
                value: 0x100,
                bits: 8
            })
        );
        let e = q.set("NO_SUCH_FIELD", 1).unwrap_err();
        assert!(matches!(&e, QmdError::UnknownField { field, .. } if field == "NO_SUCH_FIELD"));
        assert!(format!("{e}").contains("NO_SUCH_FIELD"));
        assert!(q.get("CTA_RASTER_WIDTH").is_err());
        // A failed set leaves the QMD unchanged.
        assert_eq!(q, Qmd::new(QmdVersion::V05_00));
    }

    fn sample(v: QmdVersion) -> LaunchDesc {
        let _ = v;
        LaunchDesc {
            program_address: 0x12_3456_7880,
            register_count: 37,
            shared_memory_size: 0x2300,
            block: [96, 3, 2],
            grid: [0x7fff_fffe, 513, 7],
            cbufs: [
                Some((0x20_0000_0040, 0x21c)),
                None,
                None,
                Some((0x1_0000_0c00, 0x100)),
                Some((0x3_4000, 0x10)),
                None,
                None,
                Some((0x7f_ffff_ffc0, 0x1_0000)),
            ],
            shader_local_memory_low_size: 0x30,
            shader_local_memory_high_size: 0x260,
            barrier_count: 3,
            sass_version: 0x90,
            release: [
                Some((0x10_0000_1230, 0x1122_3344_5566_7788)),
                Some((0xff_ffff_fff0, 9)),
            ],
            dependent_qmd: Some(0x44_5566_7700),
            program_size: 0x1_2300,
            sm_config: SmSharedConfig {
                min: 5,
                max: 26,
                target: 9,
            },
        }
    }

    #[test]
    fn build_and_decode_round_trip() {
        for v in VERSIONS {
            let d = sample(v);
            let q = Qmd::build(v, &d).unwrap();
            let bytes = q.as_bytes().to_vec();
            assert_eq!(bytes.len(), v.size());
            let back = Qmd::from_bytes(v, &bytes).unwrap();
            assert_eq!(back, q);
            back.check_version().unwrap();
            let mut want = d;
            // Sizes are rounded up to 16 bytes.
            want.cbufs[0] = Some((0x20_0000_0040, 0x220));
            assert_eq!(back.launch_desc().unwrap(), want, "{v:?}");
        }
    }

    #[test]
    fn build_sets_each_field_by_name() {
        // Independent of launch_desc: read the fields by their header names.
        let d = sample(QmdVersion::V04_00);
        let q = Qmd::build(QmdVersion::V04_00, &d).unwrap();
        let g = |n: &str| q.get(n).unwrap();
        assert_eq!(g("QMD_MAJOR_VERSION"), 4);
        assert_eq!(g("QMD_TYPE"), 2);
        assert_eq!(g("GRID_WIDTH"), 0x7fff_fffe);
        assert_eq!(g("GRID_HEIGHT"), 513);
        assert_eq!(g("CTA_THREAD_DIMENSION0"), 96);
        assert_eq!(g("REGISTER_COUNT"), 37);
        assert_eq!(g("PROGRAM_ADDRESS_LOWER"), 0x3456_7880);
        assert_eq!(g("PROGRAM_ADDRESS_UPPER"), 0x12);
        assert_eq!(
            g("PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED"),
            0x12_3456_7880 >> 8
        );
        assert_eq!(g("PROGRAM_PREFETCH_SIZE"), 0x123);
        assert_eq!(
            g("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(3)"),
            (0x1_0000_0c00u64 >> 6) & 0xffff_ffff
        );
        assert_eq!(
            g("CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(3)"),
            0x1_0000_0c00u64 >> 38
        );
        assert_eq!(g("CONSTANT_BUFFER_SIZE_SHIFTED4(7)"), 0x1000);
        assert_eq!(g("CONSTANT_BUFFER_VALID(1)"), 0);
        assert_eq!(g("CONSTANT_BUFFER_INVALIDATE(0)"), 1);
        // Bank 0 (0x21c bytes) prefetched before launch, three 256-byte units; others not.
        assert_eq!(g("CONSTANT_BUFFER_PREFETCH(0)"), 1);
        assert_eq!(g("CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8"), 3);
        assert_eq!(g("CONSTANT_BUFFER_PREFETCH(3)"), 0);
        assert_eq!(g("RELEASE_ENABLE(0)"), 1);
        assert_eq!(g("RELEASE_ENABLE(2)"), 0);
        assert_eq!(g("RELEASE_SEMAPHORE0_PAYLOAD_UPPER"), 0x1122_3344);
        assert_eq!(g("RELEASE_PAYLOAD64B(1)"), 1);
        assert_eq!(g("DEPENDENT_QMD0_POINTER"), 0x4455_6677);
        assert_eq!(g("DEPENDENT_QMD_ACTION(0)"), 1);
        assert_eq!(g("CWD_MEMBAR_TYPE"), 1);
        assert_eq!(g("API_VISIBLE_CALL_LIMIT"), 1);
        assert_eq!(g("SAMPLER_INDEX"), 1);
        assert_eq!(g("INVALIDATE_SHADER_DATA_CACHE"), 1);
        let names: Vec<_> = q.fields().map(|(n, _)| n).collect();
        assert!(names.contains(&"GRID_DEPTH"));
        assert!(!names.contains(&"CONSTANT_BUFFER_VALID(1)"));
        let v5 = Qmd::build(QmdVersion::V05_00, &sample(QmdVersion::V05_00)).unwrap();
        assert_eq!(
            v5.get("PROGRAM_ADDRESS_LOWER_SHIFTED4").unwrap(),
            (0x12_3456_7880u64 >> 4) & 0xffff_ffff
        );
        assert_eq!(v5.get("SHARED_MEMORY_SIZE_SHIFTED7").unwrap(), 0x2300 >> 7);
        assert_eq!(
            v5.get("SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4").unwrap(),
            0x26
        );
        assert_eq!(v5.get("DEPENDENT_QMD0_ENABLE").unwrap(), 1);
        assert_eq!(v5.get("CONSTANT_BUFFER_PREFETCH(0)").unwrap(), 1);
        assert_eq!(
            v5.get("CONSTANT_BANK_PREFETCH_PRE_MAX_SIZE_SHIFTED8")
                .unwrap(),
            3
        );
        // A bank larger than the field can say is prefetched up to its 63 x 256 bytes.
        let mut big = sample(QmdVersion::V04_00);
        big.cbufs[0] = Some((0x20_0000_0040, 0x1_0000));
        let qb = Qmd::build(QmdVersion::V04_00, &big).unwrap();
        assert_eq!(
            qb.get("CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8")
                .unwrap(),
            63
        );
        let v3 = Qmd::build(QmdVersion::V03_00, &sample(QmdVersion::V03_00)).unwrap();
        assert_eq!(v3.get("SM_GLOBAL_CACHING_ENABLE").unwrap(), 1);
        assert_eq!(v3.get("CONSTANT_BUFFER_ADDR_UPPER(7)").unwrap(), 0x7f);
        assert_eq!(v3.get("RELEASE1_ADDRESS_LOWER").unwrap(), 0xffff_fff0);
    }

    #[test]
    fn build_rejects_bad_launches() {
        let v = QmdVersion::V04_00;
        let mut d = sample(v);
        d.register_count = 512;
        assert_eq!(
            Qmd::build(v, &d),
            Err(QmdError::ValueTooLarge {
                field: "REGISTER_COUNT",
                value: 512,
                bits: 9
            })
        );
        let mut d = sample(v);
        d.cbufs[2] = Some((0x1000_0020, 0x100));
        assert_eq!(
            Qmd::build(v, &d),
            Err(QmdError::Misaligned {
                field: "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(2)",
                value: 0x1000_0020,
                align: 64
            })
        );
        // V03 takes an unshifted address.
        let mut d3 = sample(QmdVersion::V03_00);
        d3.cbufs[2] = Some((0x1000_0020, 0x100));
        assert!(Qmd::build(QmdVersion::V03_00, &d3).is_ok());
        let mut d = sample(v);
        d.grid[1] = 0x1_0000;
        assert!(matches!(
            Qmd::build(v, &d),
            Err(QmdError::ValueTooLarge {
                field: "GRID_HEIGHT",
                ..
            })
        ));
        let mut d = sample(v);
        d.dependent_qmd = Some(0x1080);
        assert!(matches!(
            Qmd::build(v, &d),
            Err(QmdError::Misaligned { align: 256, .. })
        ));
        let mut d = sample(QmdVersion::V05_00);
        d.shared_memory_size = 0x2340;
        assert!(matches!(
            Qmd::build(QmdVersion::V05_00, &d),
            Err(QmdError::Misaligned {
                field: "SHARED_MEMORY_SIZE_SHIFTED7",
                ..
            })
        ));
        let mut d = sample(v);
        d.program_address = 1 << 57;
        assert!(matches!(
            Qmd::build(v, &d),
            Err(QmdError::ValueTooLarge {
                field: "PROGRAM_ADDRESS_UPPER",
                ..
            })
        ));
        assert_eq!(
            Qmd::build(QmdVersion::V02_02, &d),
            Err(QmdError::UnsupportedVersion {
                version: QmdVersion::V02_02
            })
        );
    }

    #[test]
    fn from_bytes_checks_length_and_version() {
        assert_eq!(
            Qmd::from_bytes(QmdVersion::V04_00, &[0; 256]),
            Err(QmdError::WrongSize {
                version: QmdVersion::V04_00,
                expected: 384,
                got: 256
            })
        );
        let v3 = Qmd::new(QmdVersion::V03_00);
        let mut as_v4 = [0u8; 384];
        as_v4[..256].copy_from_slice(v3.as_bytes());
        let q = Qmd::from_bytes(QmdVersion::V04_00, &as_v4).unwrap();
        // V03's major version sits at the same bits as V04's: 3 != 4.
        assert!(matches!(
            q.launch_desc(),
            Err(QmdError::VersionMismatch { major: 3, .. })
        ));
    }

    /// Naive bit-by-bit model of a field write.
    fn model_set(words: &mut [u32], hi: u16, lo: u16, value: u64) {
        for b in lo..=hi {
            let bit = (value >> (b - lo)) & 1;
            let (w, s) = (usize::from(b / 32), b % 32);
            words[w] = (words[w] & !(1 << s)) | ((bit as u32) << s);
        }
    }

    proptest! {
        #[test]
        fn bit_access_matches_a_model(
            lo in 0u16..3000,
            width in 1u16..=64,
            value in any::<u64>(),
            seed in any::<u32>(),
        ) {
            let hi = (lo + width - 1).min(3071);
            let width = hi - lo + 1;
            let value = if width == 64 { value } else { value & ((1u64 << width) - 1) };
            let mut a = [0u32; 96];
            for (i, w) in a.iter_mut().enumerate() {
                *w = seed.rotate_left(i as u32) ^ (i as u32).wrapping_mul(0x9e37_79b9);
            }
            let mut b = a;
            set_bits(&mut a, hi, lo, value);
            model_set(&mut b, hi, lo, value);
            prop_assert_eq!(a, b);
            prop_assert_eq!(get_bits(&a, hi, lo), value);
        }
    }
}
