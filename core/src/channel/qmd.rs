//! Queue meta-data (QMD): the 256/384-byte descriptor a compute launch hands the GPU.
//!
//! One declaration per layout ([`v02_02`], [`v03_00`], [`v04_00`], [`v05_00`], in `qmd/fields.rs`) with
//! NVIDIA's field names and `MW(hi:lo)` bit ranges as the syntax (bit numbers over the whole
//! QMD, little-endian 32-bit words), from open-gpu-doc `classes/compute/`:
//!
//! | layout | chips | header | size |
//! |---|---|---|---|
//! | [`QmdVersion::V02_02`] | Turing (Volta) | `clc3c0qmd.h` (Mesa NVK's choice for Volta and Turing; `clc5c0qmd.h` itself declares V02_03, see [`v02_02`]) | 256 B |
//! | [`QmdVersion::V03_00`] | Ampere, Ada | `clc9c0qmd.h` (same positions as `clc6c0qmd.h`/`clc7c0qmd.h` for every field set here) | 256 B |
//! | [`QmdVersion::V04_00`] | Hopper | `clcbc0qmd.h` | 384 B |
//! | [`QmdVersion::V05_00`] | Blackwell | `clcec0qmd.h` (= `clcdc0qmd.h`) | 384 B |
//!
//! Each declaration gives typed fields (`v04_00::GRID_WIDTH`, `v04_00::RELEASE_ENABLE[0]` for
//! the header's `RELEASE_ENABLE(i)`) that the compiler checks against the layout (inside it,
//! inside one 32-bit word, no overlaps), and the name table [`QmdVersion::fields`], where
//! indexed fields appear expanded (`"CONSTANT_BUFFER_VALID(0)"` ... `"CONSTANT_BUFFER_VALID(7)"`).
//!
//! [`QmdLayout`] (implemented by [`V02`], [`V03`], [`V04`], [`V05`]) maps the parts of a launch to each
//! layout's fields, with typed setters; [`LaunchDesc`] is the launch as data; [`Qmd::build`]
//! turns it into a QMD for any layout and [`Qmd::launch_desc`] reads it back. The name table is
//! for decoding only: [`Qmd::set`] / [`Qmd::get`] by field name (values that do not fit are
//! rejected) and [`Qmd::fields`], the non-zero fields, serve `nvbare decode qmd` and tests.
//!
//! What [`Qmd::build`] sets besides the [`LaunchDesc`] (the choices tinygrad and Mesa NVK make):
//! `QMD_MAJOR_VERSION`/minor, `QMD_GROUP_ID` 0x3f, `SM_GLOBAL_CACHING_ENABLE` (V02/V03),
//! `QMD_TYPE` = `GRID_CTA` (V04/V05), `API_VISIBLE_CALL_LIMIT` = `NO_CHECK`, `SAMPLER_INDEX` =
//! `VIA_HEADER_INDEX`, `CWD_MEMBAR_TYPE` = `L1_SYSMEMBAR`, the texture header/sampler/data and
//! shader-data cache invalidates, `CONSTANT_BUFFER_INVALIDATE(i)` for every bound bank,
//! `CONSTANT_BUFFER_PREFETCH(0)` = `PREFETCH_PRE` with its `..._PRE_MAX_SIZE_SHIFTED8` = the bank's
//! size (V04/V05: bank 0 is fetched before the launch, not on the first CTA's first read), and for
//! each release: `PAYLOAD64B`, `STRUCTURE_SIZE` = `SEMAPHORE_FOUR_WORDS` (64-bit payload + 64-bit
//! timestamp, 16 bytes), `MEMBAR_TYPE` = `FE_SYSMEMBAR`; a dependent QMD gets `ACTION` =
//! `QMD_SCHEDULE` and `PREFETCH`. V02_02 (Turing) has no `PAYLOAD64B` (32-bit payloads: a
//! larger one is refused), no program or constant-bank prefetch, and its dependent QMD is
//! `DEPENDENT_QMD_SCHEDULE_ENABLE` with `DEPENDENT_QMD_TYPE` = `GRID` ([`V02`]).

use core::fmt;

pub use crate::chip::QmdVersion;

mod fields;
mod layout;

pub use fields::{v02_02, v03_00, v04_00, v05_00};
pub(crate) use layout::with_layout;
pub use layout::{
    CwdMembar, DependentFields, QmdLayout, ReleaseFields, ReleaseMembar, V02, V03, V04, V05,
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
    /// This layout's field table, sorted by bit position.
    pub fn fields(self) -> &'static [QmdField] {
        match self {
            QmdVersion::V02_02 => V02::FIELDS,
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
    /// nvbare has no field table for this layout (every [`QmdVersion`] has one now; kept for
    /// callers that match on it).
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
                "QMD layout {version:?} is not supported (nvbare launches with V02_02, \
                 V03_00, V04_00 and V05_00: Turing and later)"
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
mod tests;
