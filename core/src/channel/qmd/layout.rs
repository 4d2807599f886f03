//! Typed QMD setters: [`QmdLayout`] says, per layout, which of NVIDIA's fields ([`super::v02_02`],
//! [`super::v03_00`], [`super::v04_00`], [`super::v05_00`]) hold each part of a launch, and its provided methods
//! write them. Every field is a constant, so a setter compiles to a range check and a store into
//! a fixed word: building a QMD costs a copy of the layout's base image and a few dozen stores,
//! with no name look-up.

use super::fields::{v02_02, v03_00, v04_00, v05_00};
use super::{LaunchDesc, MAX_WORDS, Qmd, QmdError, QmdField, QmdVersion, SmSharedConfig};

/// The fields of one release semaphore.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseFields {
    /// Address, lower and upper.
    pub address: [QmdField; 2],
    /// Payload, lower 32 bits (V02_02: the whole 32-bit `RELEASE<i>_PAYLOAD`).
    pub payload: QmdField,
    /// Payload, upper 32 bits (V03 on; V02_02 has 32-bit payloads only).
    pub payload_upper: Option<QmdField>,
    /// `..._ENABLE` (V02_02: `SEMAPHORE_RELEASE_ENABLE<i>`).
    pub enable: QmdField,
    /// `..._PAYLOAD64B` (V03 on).
    pub payload64b: Option<QmdField>,
    /// `..._STRUCTURE_SIZE`.
    pub structure_size: QmdField,
    /// `..._MEMBAR_TYPE` (V02_02: `RELEASE_MEMBAR_TYPE`, one field for both releases).
    pub membar_type: QmdField,
}

/// The fields of dependent QMD 0.
#[derive(Debug, Clone, Copy)]
pub struct DependentFields {
    /// `DEPENDENT_QMD0_POINTER` (the QMD's address >> 8).
    pub pointer: QmdField,
    /// `..._ENABLE`.
    pub enable: QmdField,
    /// `..._ACTION` (V02_02: `DEPENDENT_QMD_TYPE`).
    pub action: QmdField,
    /// What [`DependentFields::action`] holds to schedule the QMD: `QMD_SCHEDULE` (V03 on),
    /// `GRID` (V02_02, where setting `..._ENABLE` is what schedules it).
    pub schedule: u64,
    /// `..._PREFETCH` (V03 on).
    pub prefetch: Option<QmdField>,
}

/// A release's `MEMBAR_TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ReleaseMembar {
    /// `FE_NONE`.
    FeNone = 0,
    /// `FE_SYSMEMBAR`: the front end waits for a system-scope membar before the release.
    FeSysmembar = 1,
}

/// `CWD_MEMBAR_TYPE`: the membar each CTA ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CwdMembar {
    /// `L1_NONE`.
    L1None = 0,
    /// `L1_SYSMEMBAR`: system scope (the host sees the CTA's stores).
    L1Sysmembar = 1,
    /// `L1_MEMBAR`: GPU scope.
    L1Membar = 3,
}

/// `RELEASE_STRUCTURE_SIZE_SEMAPHORE_FOUR_WORDS`: 64-bit payload and 64-bit timestamp.
const RELEASE_STRUCTURE_SIZE_FOUR_WORDS: u64 = 0;
/// `DEPENDENT_QMD_ACTION_QMD_SCHEDULE`.
const DEPENDENT_QMD_ACTION_QMD_SCHEDULE: u64 = 1;
/// `DEPENDENT_QMD_TYPE_GRID` (V02_02).
const DEPENDENT_QMD_TYPE_GRID: u64 = 1;
/// `QMD_TYPE_GRID_CTA` (V04/V05).
const QMD_TYPE_GRID_CTA: u32 = 2;
/// `CONSTANT_BUFFER_PREFETCH_PREFETCH_PRE` (V04/V05).
const CONSTANT_BUFFER_PREFETCH_PRE: u64 = 1;
/// Largest value of the 6-bit `..._PREFETCH_PRE_MAX_SIZE_SHIFTED8` (63 x 256 bytes).
const CB_PREFETCH_MAX_SHIFTED8: u64 = 63;
/// `API_VISIBLE_CALL_LIMIT_NO_CHECK`.
const API_VISIBLE_CALL_LIMIT_NO_CHECK: u32 = 1;
/// `SAMPLER_INDEX_VIA_HEADER_INDEX`.
const SAMPLER_INDEX_VIA_HEADER_INDEX: u32 = 1;

/// `value` if it is a multiple of `1 << shift`, shifted down; else a [`QmdError::Misaligned`]
/// naming `field`.
#[inline]
fn aligned(field: QmdField, value: u64, shift: u32) -> Result<u64, QmdError> {
    let align = 1u64 << shift;
    if !value.is_multiple_of(align) {
        return Err(QmdError::Misaligned {
            field: field.name,
            value,
            align,
        });
    }
    Ok(value >> shift)
}

/// Entry `i` of `a`, or a [`QmdError::NoSuchIndex`].
#[inline]
fn nth<T: Copy, const N: usize>(a: &[T; N], what: &'static str, i: usize) -> Result<T, QmdError> {
    a.get(i).copied().ok_or(QmdError::NoSuchIndex {
        what,
        index: i,
        count: N,
    })
}

/// A QMD image: zero, then `values` stored (each fits: checked when the image is evaluated).
const fn image(values: &[(QmdField, u32)]) -> [u32; MAX_WORDS] {
    let mut w = [0u32; MAX_WORDS];
    let mut i = 0;
    while i < values.len() {
        let (f, v) = values[i];
        let width = f.hi - f.lo + 1;
        assert!(width == 32 || v < (1u32 << width), "{}", f.name);
        let mask = (u32::MAX >> (32 - width)) << (f.lo % 32);
        let k = (f.lo / 32) as usize;
        w[k] = (w[k] & !mask) | ((v << (f.lo % 32)) & mask);
        i += 1;
    }
    w
}

/// One QMD layout: NVIDIA's fields for each part of a launch, and typed setters over them.
/// Implemented by [`V02`], [`V03`], [`V04`] and [`V05`]; which one a chip uses is data
/// ([`crate::chip::ChipInfo::qmd`]). The setters take a [`Qmd`] of this layout (else
/// [`QmdError::LayoutMismatch`]), check every value against its field and write only its bits.
pub trait QmdLayout {
    /// The layout.
    const VERSION: QmdVersion;
    /// The name table, sorted by bit (for the decoder).
    const FIELDS: &'static [QmdField];
    /// `QMD_MAJOR_VERSION`.
    const QMD_MAJOR_VERSION: QmdField;
    /// `QMD_VERSION` (V03) or `QMD_MINOR_VERSION`.
    const QMD_MINOR_VERSION: QmdField;
    /// Grid width, height, depth (`CTA_RASTER_*` on V03, `GRID_*` after).
    const GRID: [QmdField; 3];
    /// `CTA_THREAD_DIMENSION0..2`.
    const CTA_THREAD_DIMENSION: [QmdField; 3];
    /// `REGISTER_COUNT_V` (V03) or `REGISTER_COUNT`.
    const REGISTER_COUNT: QmdField;
    /// `BARRIER_COUNT`.
    const BARRIER_COUNT: QmdField;
    /// `SASS_VERSION`.
    const SASS_VERSION: QmdField;
    /// `SHARED_MEMORY_SIZE` (`_SHIFTED7` on V05).
    const SHARED_MEMORY_SIZE: QmdField;
    /// `MIN_`, `MAX_`, `TARGET_SM_CONFIG_SHARED_MEM_SIZE`.
    const SM_CONFIG_SHARED_MEM_SIZE: [QmdField; 3];
    /// `SHADER_LOCAL_MEMORY_LOW_SIZE` and `_HIGH_SIZE` (`_SHIFTED4` on V05).
    const SHADER_LOCAL_MEMORY_SIZE: [QmdField; 2];
    /// `PROGRAM_ADDRESS_LOWER` and `_UPPER` (`_SHIFTED4` on V05).
    const PROGRAM_ADDRESS: [QmdField; 2];
    /// `PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED`, `_UPPER_SHIFTED` (address >> 8) and
    /// `PROGRAM_PREFETCH_SIZE` (256-byte units); V02_02 has none.
    const PROGRAM_PREFETCH: Option<[QmdField; 3]>;
    /// `CONSTANT_BUFFER_ADDR_LOWER(i)` (`_SHIFTED6` on V04/V05).
    const CONSTANT_BUFFER_ADDR_LOWER: [QmdField; 8];
    /// `CONSTANT_BUFFER_ADDR_UPPER(i)` (`_SHIFTED6` on V04/V05).
    const CONSTANT_BUFFER_ADDR_UPPER: [QmdField; 8];
    /// `CONSTANT_BUFFER_SIZE_SHIFTED4(i)`.
    const CONSTANT_BUFFER_SIZE_SHIFTED4: [QmdField; 8];
    /// `CONSTANT_BUFFER_VALID(i)`.
    const CONSTANT_BUFFER_VALID: [QmdField; 8];
    /// `CONSTANT_BUFFER_INVALIDATE(i)`.
    const CONSTANT_BUFFER_INVALIDATE: [QmdField; 8];
    /// `CONSTANT_BUFFER_PREFETCH(0)` and the bound on what it fetches before the launch
    /// (`..._PREFETCH_PRE_MAX_SIZE_SHIFTED8`); V03 has neither.
    const CONSTANT_BUFFER_PREFETCH_PRE: Option<(QmdField, QmdField)>;
    /// Releases 0 and 1.
    const RELEASE: [ReleaseFields; 2];
    /// Dependent QMD 0.
    const DEPENDENT_QMD0: DependentFields;
    /// `CWD_MEMBAR_TYPE`.
    const CWD_MEMBAR_TYPE: QmdField;
    /// `CWD_MEMBAR_TASK_CHASING_ENABLE` (V04/V05).
    const CWD_MEMBAR_TASK_CHASING_ENABLE: Option<QmdField>;
    /// What every launch's QMD carries besides the launch (the choices tinygrad and Mesa NVK
    /// make; see [`super`]).
    const FIXED: &'static [(QmdField, u32)];

    /// An empty QMD: only the version fields.
    const EMPTY: [u32; MAX_WORDS] = image(&[
        (
            Self::QMD_MAJOR_VERSION,
            Self::VERSION.major_minor().0 as u32,
        ),
        (
            Self::QMD_MINOR_VERSION,
            Self::VERSION.major_minor().1 as u32,
        ),
    ]);

    /// [`QmdLayout::EMPTY`] with [`QmdLayout::FIXED`]: where every launch's QMD starts.
    const BASE: [u32; MAX_WORDS] = {
        let mut w = image(Self::FIXED);
        let v = Self::EMPTY;
        let mut i = 0;
        while i < MAX_WORDS {
            w[i] |= v[i];
            i += 1;
        }
        w
    };

    /// A QMD of this layout with only its version fields set.
    #[inline]
    fn empty() -> Qmd {
        Qmd {
            version: Self::VERSION,
            words: Self::EMPTY,
        }
    }

    /// Refuses a QMD of another layout.
    #[inline]
    fn check(q: &Qmd) -> Result<(), QmdError> {
        if q.version != Self::VERSION {
            return Err(QmdError::LayoutMismatch {
                qmd: q.version,
                layout: Self::VERSION,
            });
        }
        Ok(())
    }

    /// Grid width, height and depth in blocks.
    #[inline]
    fn set_grid(q: &mut Qmd, grid: [u32; 3]) -> Result<(), QmdError> {
        Self::check(q)?;
        for (f, v) in Self::GRID.into_iter().zip(grid) {
            q.put(f, v.into())?;
        }
        Ok(())
    }

    /// Block dimensions in threads.
    #[inline]
    fn set_block(q: &mut Qmd, block: [u32; 3]) -> Result<(), QmdError> {
        Self::check(q)?;
        for (f, v) in Self::CTA_THREAD_DIMENSION.into_iter().zip(block) {
            q.put(f, v.into())?;
        }
        Ok(())
    }

    /// Registers per thread.
    #[inline]
    fn set_register_count(q: &mut Qmd, n: u32) -> Result<(), QmdError> {
        Self::check(q)?;
        q.put(Self::REGISTER_COUNT, n.into())
    }

    /// `BARRIER_COUNT` and `SASS_VERSION`.
    #[inline]
    fn set_barriers_and_sass(q: &mut Qmd, barriers: u32, sass: u32) -> Result<(), QmdError> {
        Self::check(q)?;
        q.put(Self::BARRIER_COUNT, barriers.into())?;
        q.put(Self::SASS_VERSION, sass.into())
    }

    /// Shared memory per block in bytes (a multiple of 128 on V05).
    #[inline]
    fn set_shared_memory_size(q: &mut Qmd, bytes: u32) -> Result<(), QmdError> {
        Self::check(q)?;
        let f = Self::SHARED_MEMORY_SIZE;
        q.put(f, aligned(f, bytes.into(), f.shift.into())?)
    }

    /// The shared-memory carveout.
    #[inline]
    fn set_sm_config(q: &mut Qmd, c: SmSharedConfig) -> Result<(), QmdError> {
        Self::check(q)?;
        let [min, max, target] = Self::SM_CONFIG_SHARED_MEM_SIZE;
        q.put(min, c.min.into())?;
        q.put(max, c.max.into())?;
        q.put(target, c.target.into())
    }

    /// Local memory per thread, low and high, in bytes (multiples of 16 on V05).
    #[inline]
    fn set_shader_local_memory_size(q: &mut Qmd, low: u32, high: u32) -> Result<(), QmdError> {
        Self::check(q)?;
        for (f, v) in Self::SHADER_LOCAL_MEMORY_SIZE.into_iter().zip([low, high]) {
            q.put(f, aligned(f, v.into(), f.shift.into())?)?;
        }
        Ok(())
    }

    /// The kernel's first instruction at `address` (16-byte aligned on V05), and
    /// `prefetch_bytes` of its code prefetched (0: none; at most 0x1ff 256-byte units; a
    /// layout without program prefetch, V02_02, fetches the code as it runs and ignores it).
    #[inline]
    fn set_program(q: &mut Qmd, address: u64, prefetch_bytes: u32) -> Result<(), QmdError> {
        Self::check(q)?;
        let [lo, hi] = Self::PROGRAM_ADDRESS;
        let a = aligned(lo, address, lo.shift.into())?;
        q.put(lo, a & 0xffff_ffff)?;
        q.put(hi, a >> 32)?;
        if let (true, Some([plo, phi, size])) = (prefetch_bytes != 0, Self::PROGRAM_PREFETCH) {
            q.put(plo, (address >> 8) & 0xffff_ffff)?;
            q.put(phi, address >> 40)?;
            q.put(size, u64::from(prefetch_bytes >> 8).min(0x1ff))?;
        }
        Ok(())
    }

    /// Binds constant bank `i` (0..8) to `size` bytes (rounded up to 16) at `address`
    /// (64-byte aligned on V04/V05), to be invalidated at launch; bank 0 is fetched before
    /// the launch where the layout can (V04/V05).
    #[inline]
    fn set_constant_bank(q: &mut Qmd, i: usize, address: u64, size: u32) -> Result<(), QmdError> {
        Self::set_constant_bank_address(q, i, address)?;
        let size16 = u64::from(size).div_ceil(16);
        q.put(
            nth(&Self::CONSTANT_BUFFER_SIZE_SHIFTED4, "constant bank", i)?,
            size16,
        )?;
        q.put(nth(&Self::CONSTANT_BUFFER_VALID, "constant bank", i)?, 1)?;
        q.put(
            nth(&Self::CONSTANT_BUFFER_INVALIDATE, "constant bank", i)?,
            1,
        )?;
        // Hopper and Blackwell can fetch constant bank 0 (driver area and parameters, read by
        // nearly every kernel's first instructions) while the launch is being set up instead of
        // on the first CTA's first read: 0.12-0.22 µs of a launch + sync on the H200 in same-VM
        // comparisons (docs/performance.md, "Constant-bank prefetch").
        if let (0, Some((prefetch, max))) = (i, Self::CONSTANT_BUFFER_PREFETCH_PRE) {
            q.put(prefetch, CONSTANT_BUFFER_PREFETCH_PRE)?;
            q.put(
                max,
                u64::from(size).div_ceil(256).min(CB_PREFETCH_MAX_SHIFTED8),
            )?;
        }
        Ok(())
    }

    /// Moves constant bank `i` to `address`, nothing else.
    #[inline]
    fn set_constant_bank_address(q: &mut Qmd, i: usize, address: u64) -> Result<(), QmdError> {
        Self::check(q)?;
        let lo = nth(&Self::CONSTANT_BUFFER_ADDR_LOWER, "constant bank", i)?;
        let hi = nth(&Self::CONSTANT_BUFFER_ADDR_UPPER, "constant bank", i)?;
        let a = aligned(lo, address, lo.shift.into())?;
        q.put(lo, a & 0xffff_ffff)?;
        q.put(hi, a >> 32)
    }

    /// Release `i` (0 or 1) when the grid completes: `payload` (64-bit; V02_02: 32-bit, a
    /// larger one is a [`QmdError::ValueTooLarge`]) and a timestamp at `address` (16-byte
    /// aligned; `SEMAPHORE_FOUR_WORDS`), after `membar` (V02_02: one membar for both releases).
    #[inline]
    fn set_release(
        q: &mut Qmd,
        i: usize,
        address: u64,
        payload: u64,
        membar: ReleaseMembar,
    ) -> Result<(), QmdError> {
        Self::check(q)?;
        let r = nth(&Self::RELEASE, "release", i)?;
        let [alo, ahi] = r.address;
        aligned(alo, address, 4)?;
        q.put(alo, address & 0xffff_ffff)?;
        q.put(ahi, address >> 32)?;
        Self::put_payload(q, r, payload)?;
        q.put(r.enable, 1)?;
        if let Some(f) = r.payload64b {
            q.put(f, 1)?;
        }
        q.put(r.structure_size, RELEASE_STRUCTURE_SIZE_FOUR_WORDS)?;
        q.put(r.membar_type, membar as u64)
    }

    /// Only the payload of release `i`.
    #[inline]
    fn set_release_payload(q: &mut Qmd, i: usize, payload: u64) -> Result<(), QmdError> {
        Self::check(q)?;
        Self::put_payload(q, nth(&Self::RELEASE, "release", i)?, payload)
    }

    /// The payload fields of release `r`: lower and upper halves, or (V02_02) the one 32-bit
    /// field, which refuses a payload that does not fit.
    #[inline]
    fn put_payload(q: &mut Qmd, r: ReleaseFields, payload: u64) -> Result<(), QmdError> {
        match r.payload_upper {
            Some(hi) => {
                q.put(r.payload, payload & 0xffff_ffff)?;
                q.put(hi, payload >> 32)
            }
            None => q.put(r.payload, payload),
        }
    }

    /// Only whether release `i` is made.
    #[inline]
    fn set_release_enable(q: &mut Qmd, i: usize, enable: bool) -> Result<(), QmdError> {
        Self::check(q)?;
        q.put(nth(&Self::RELEASE, "release", i)?.enable, enable.into())
    }

    /// Only the membar before release `i`.
    #[inline]
    fn set_release_membar(q: &mut Qmd, i: usize, membar: ReleaseMembar) -> Result<(), QmdError> {
        Self::check(q)?;
        q.put(
            nth(&Self::RELEASE, "release", i)?.membar_type,
            membar as u64,
        )
    }

    /// Schedules the QMD at `next` (256-byte aligned) when this one's grid completes,
    /// prefetching it when this one is scheduled (dependent QMD 0: `QMD_SCHEDULE` +
    /// `PREFETCH`, what a CUDA graph's kernels do). Sets only those four fields (V02_02:
    /// `DEPENDENT_QMD_POINTER`, `DEPENDENT_QMD_SCHEDULE_ENABLE` and `DEPENDENT_QMD_TYPE` =
    /// `GRID`; it has no prefetch).
    #[inline]
    fn schedule_after(q: &mut Qmd, next: u64) -> Result<(), QmdError> {
        Self::check(q)?;
        let d = Self::DEPENDENT_QMD0;
        q.put(d.pointer, aligned(d.pointer, next, 8)?)?;
        q.put(d.enable, 1)?;
        q.put(d.action, d.schedule)?;
        if let Some(f) = d.prefetch {
            q.put(f, 1)?;
        }
        Ok(())
    }

    /// The membar each CTA ends with, and task chasing where the layout has it (V04/V05).
    #[inline]
    fn set_cwd_membar(q: &mut Qmd, membar: CwdMembar, task_chasing: bool) -> Result<(), QmdError> {
        Self::check(q)?;
        q.put(Self::CWD_MEMBAR_TYPE, membar as u64)?;
        if let Some(f) = Self::CWD_MEMBAR_TASK_CHASING_ENABLE {
            q.put(f, task_chasing.into())?;
        }
        Ok(())
    }

    /// The QMD for launch `d` ([`Qmd::build`]).
    #[inline]
    fn build(d: &LaunchDesc) -> Result<Qmd, QmdError> {
        let mut q = Qmd {
            version: Self::VERSION,
            words: Self::BASE,
        };
        Self::set_program(&mut q, d.program_address, d.program_size)?;
        Self::set_register_count(&mut q, d.register_count)?;
        Self::set_barriers_and_sass(&mut q, d.barrier_count, d.sass_version)?;
        Self::set_block(&mut q, d.block)?;
        Self::set_grid(&mut q, d.grid)?;
        Self::set_shared_memory_size(&mut q, d.shared_memory_size)?;
        Self::set_sm_config(&mut q, d.sm_config)?;
        Self::set_shader_local_memory_size(
            &mut q,
            d.shader_local_memory_low_size,
            d.shader_local_memory_high_size,
        )?;
        for (i, cb) in d.cbufs.iter().enumerate() {
            if let Some((address, size)) = *cb {
                Self::set_constant_bank(&mut q, i, address, size)?;
            }
        }
        for (i, rel) in d.release.iter().enumerate() {
            if let Some((address, payload)) = *rel {
                Self::set_release(&mut q, i, address, payload, ReleaseMembar::FeSysmembar)?;
            }
        }
        if let Some(next) = d.dependent_qmd {
            Self::schedule_after(&mut q, next)?;
        }
        Ok(q)
    }

    /// The launch read back out of `q` ([`Qmd::launch_desc`]).
    fn launch_desc(q: &Qmd) -> Result<LaunchDesc, QmdError> {
        Self::check(q)?;
        q.check_version()?;
        // Every field read here is at most 32 bits wide.
        let get = |f: QmdField| q.get_field(&f) as u32;
        let shifted = |f: QmdField| (q.get_field(&f) << f.shift) as u32;
        let split =
            |[lo, hi]: [QmdField; 2]| (q.get_field(&lo) | (q.get_field(&hi) << 32)) << lo.shift;
        let [min, max, target] = Self::SM_CONFIG_SHARED_MEM_SIZE;
        let [low, high] = Self::SHADER_LOCAL_MEMORY_SIZE;
        let mut d = LaunchDesc {
            program_address: split(Self::PROGRAM_ADDRESS),
            register_count: get(Self::REGISTER_COUNT),
            barrier_count: get(Self::BARRIER_COUNT),
            sass_version: get(Self::SASS_VERSION),
            shared_memory_size: shifted(Self::SHARED_MEMORY_SIZE),
            shader_local_memory_low_size: shifted(low),
            shader_local_memory_high_size: shifted(high),
            program_size: Self::PROGRAM_PREFETCH.map_or(0, |[.., size]| get(size) << 8),
            sm_config: SmSharedConfig {
                min: get(min),
                max: get(max),
                target: get(target),
            },
            block: Self::CTA_THREAD_DIMENSION.map(get),
            grid: Self::GRID.map(get),
            ..LaunchDesc::default()
        };
        let banks = Self::CONSTANT_BUFFER_VALID
            .into_iter()
            .zip(Self::CONSTANT_BUFFER_ADDR_LOWER)
            .zip(Self::CONSTANT_BUFFER_ADDR_UPPER)
            .zip(Self::CONSTANT_BUFFER_SIZE_SHIFTED4);
        for (cb, (((valid, lo), hi), size)) in d.cbufs.iter_mut().zip(banks) {
            if get(valid) != 0 {
                *cb = Some((split([lo, hi]), get(size) << 4));
            }
        }
        for (rel, r) in d.release.iter_mut().zip(Self::RELEASE) {
            if get(r.enable) != 0 {
                let upper = r.payload_upper.map_or(0, |f| q.get_field(&f));
                *rel = Some((split(r.address), q.get_field(&r.payload) | upper << 32));
            }
        }
        let dep = Self::DEPENDENT_QMD0;
        if get(dep.enable) != 0 {
            d.dependent_qmd = Some(q.get_field(&dep.pointer) << 8);
        }
        Ok(d)
    }
}

/// Turing (and Volta): QMD V02_02 ([`v02_02`]), as Mesa NVK writes it for every compute class
/// from VOLTA_COMPUTE_A up to AMPERE_COMPUTE_A (`nvc3c0_compute_setup_launch_desc_template`:
/// `PROGRAM_ADDRESS_LOWER`/`UPPER`, `REGISTER_COUNT_V`, the `*_SM_CONFIG_SHARED_MEM_SIZE`
/// carveout fields, `SM_GLOBAL_CACHING_ENABLE`). How it differs from [`V03`] for what a launch
/// sets: the program is addressed the same way (a full 49-bit VA in `PROGRAM_ADDRESS_*`, so no
/// code region base; TURING_COMPUTE_A has no program-region method either), but there is no
/// program prefetch; a release has a 32-bit payload (`RELEASE<i>_PAYLOAD`, no `PAYLOAD64B`),
/// its enable is `SEMAPHORE_RELEASE_ENABLE<i>` and one `RELEASE_MEMBAR_TYPE` serves both; the
/// dependent QMD has no action or prefetch (`DEPENDENT_QMD_SCHEDULE_ENABLE`,
/// `DEPENDENT_QMD_TYPE`); local memory sizes, `BARRIER_COUNT` and `SASS_VERSION` sit elsewhere
/// and the carveout fields are 7 bits wide; constant banks are where V03 has them.
#[derive(Debug, Clone, Copy)]
pub struct V02;

/// Ampere and Ada: QMD V03_00 ([`v03_00`]).
#[derive(Debug, Clone, Copy)]
pub struct V03;

/// Hopper: QMD V04_00 ([`v04_00`]).
#[derive(Debug, Clone, Copy)]
pub struct V04;

/// Blackwell: QMD V05_00 ([`v05_00`]).
#[derive(Debug, Clone, Copy)]
pub struct V05;

impl QmdLayout for V02 {
    const VERSION: QmdVersion = QmdVersion::V02_02;
    const FIELDS: &'static [QmdField] = &v02_02::FIELDS;
    const QMD_MAJOR_VERSION: QmdField = v02_02::QMD_MAJOR_VERSION;
    const QMD_MINOR_VERSION: QmdField = v02_02::QMD_VERSION;
    const GRID: [QmdField; 3] = [
        v02_02::CTA_RASTER_WIDTH,
        v02_02::CTA_RASTER_HEIGHT,
        v02_02::CTA_RASTER_DEPTH,
    ];
    const CTA_THREAD_DIMENSION: [QmdField; 3] = [
        v02_02::CTA_THREAD_DIMENSION0,
        v02_02::CTA_THREAD_DIMENSION1,
        v02_02::CTA_THREAD_DIMENSION2,
    ];
    const REGISTER_COUNT: QmdField = v02_02::REGISTER_COUNT_V;
    const BARRIER_COUNT: QmdField = v02_02::BARRIER_COUNT;
    const SASS_VERSION: QmdField = v02_02::SASS_VERSION;
    const SHARED_MEMORY_SIZE: QmdField = v02_02::SHARED_MEMORY_SIZE;
    const SM_CONFIG_SHARED_MEM_SIZE: [QmdField; 3] = [
        v02_02::MIN_SM_CONFIG_SHARED_MEM_SIZE,
        v02_02::MAX_SM_CONFIG_SHARED_MEM_SIZE,
        v02_02::TARGET_SM_CONFIG_SHARED_MEM_SIZE,
    ];
    const SHADER_LOCAL_MEMORY_SIZE: [QmdField; 2] = [
        v02_02::SHADER_LOCAL_MEMORY_LOW_SIZE,
        v02_02::SHADER_LOCAL_MEMORY_HIGH_SIZE,
    ];
    const PROGRAM_ADDRESS: [QmdField; 2] =
        [v02_02::PROGRAM_ADDRESS_LOWER, v02_02::PROGRAM_ADDRESS_UPPER];
    const PROGRAM_PREFETCH: Option<[QmdField; 3]> = None;
    const CONSTANT_BUFFER_ADDR_LOWER: [QmdField; 8] = v02_02::CONSTANT_BUFFER_ADDR_LOWER;
    const CONSTANT_BUFFER_ADDR_UPPER: [QmdField; 8] = v02_02::CONSTANT_BUFFER_ADDR_UPPER;
    const CONSTANT_BUFFER_SIZE_SHIFTED4: [QmdField; 8] = v02_02::CONSTANT_BUFFER_SIZE_SHIFTED4;
    const CONSTANT_BUFFER_VALID: [QmdField; 8] = v02_02::CONSTANT_BUFFER_VALID;
    const CONSTANT_BUFFER_INVALIDATE: [QmdField; 8] = v02_02::CONSTANT_BUFFER_INVALIDATE;
    const CONSTANT_BUFFER_PREFETCH_PRE: Option<(QmdField, QmdField)> = None;
    const RELEASE: [ReleaseFields; 2] = [
        ReleaseFields {
            address: [
                v02_02::RELEASE0_ADDRESS_LOWER,
                v02_02::RELEASE0_ADDRESS_UPPER,
            ],
            payload: v02_02::RELEASE0_PAYLOAD,
            payload_upper: None,
            enable: v02_02::SEMAPHORE_RELEASE_ENABLE0,
            payload64b: None,
            structure_size: v02_02::RELEASE0_STRUCTURE_SIZE,
            membar_type: v02_02::RELEASE_MEMBAR_TYPE,
        },
        ReleaseFields {
            address: [
                v02_02::RELEASE1_ADDRESS_LOWER,
                v02_02::RELEASE1_ADDRESS_UPPER,
            ],
            payload: v02_02::RELEASE1_PAYLOAD,
            payload_upper: None,
            enable: v02_02::SEMAPHORE_RELEASE_ENABLE1,
            payload64b: None,
            structure_size: v02_02::RELEASE1_STRUCTURE_SIZE,
            membar_type: v02_02::RELEASE_MEMBAR_TYPE,
        },
    ];
    const DEPENDENT_QMD0: DependentFields = DependentFields {
        pointer: v02_02::DEPENDENT_QMD_POINTER,
        enable: v02_02::DEPENDENT_QMD_SCHEDULE_ENABLE,
        action: v02_02::DEPENDENT_QMD_TYPE,
        schedule: DEPENDENT_QMD_TYPE_GRID,
        prefetch: None,
    };
    const CWD_MEMBAR_TYPE: QmdField = v02_02::CWD_MEMBAR_TYPE;
    const CWD_MEMBAR_TASK_CHASING_ENABLE: Option<QmdField> = None;
    const FIXED: &'static [(QmdField, u32)] = &[
        (v02_02::QMD_GROUP_ID, 0x3f),
        (v02_02::SM_GLOBAL_CACHING_ENABLE, 1),
        (
            v02_02::API_VISIBLE_CALL_LIMIT,
            API_VISIBLE_CALL_LIMIT_NO_CHECK,
        ),
        (v02_02::SAMPLER_INDEX, SAMPLER_INDEX_VIA_HEADER_INDEX),
        (v02_02::CWD_MEMBAR_TYPE, CwdMembar::L1Sysmembar as u32),
        (v02_02::INVALIDATE_TEXTURE_HEADER_CACHE, 1),
        (v02_02::INVALIDATE_TEXTURE_SAMPLER_CACHE, 1),
        (v02_02::INVALIDATE_TEXTURE_DATA_CACHE, 1),
        (v02_02::INVALIDATE_SHADER_DATA_CACHE, 1),
    ];
}

impl QmdLayout for V03 {
    const VERSION: QmdVersion = QmdVersion::V03_00;
    const FIELDS: &'static [QmdField] = &v03_00::FIELDS;
    const QMD_MAJOR_VERSION: QmdField = v03_00::QMD_MAJOR_VERSION;
    const QMD_MINOR_VERSION: QmdField = v03_00::QMD_VERSION;
    const GRID: [QmdField; 3] = [
        v03_00::CTA_RASTER_WIDTH,
        v03_00::CTA_RASTER_HEIGHT,
        v03_00::CTA_RASTER_DEPTH,
    ];
    const CTA_THREAD_DIMENSION: [QmdField; 3] = [
        v03_00::CTA_THREAD_DIMENSION0,
        v03_00::CTA_THREAD_DIMENSION1,
        v03_00::CTA_THREAD_DIMENSION2,
    ];
    const REGISTER_COUNT: QmdField = v03_00::REGISTER_COUNT_V;
    const BARRIER_COUNT: QmdField = v03_00::BARRIER_COUNT;
    const SASS_VERSION: QmdField = v03_00::SASS_VERSION;
    const SHARED_MEMORY_SIZE: QmdField = v03_00::SHARED_MEMORY_SIZE;
    const SM_CONFIG_SHARED_MEM_SIZE: [QmdField; 3] = [
        v03_00::MIN_SM_CONFIG_SHARED_MEM_SIZE,
        v03_00::MAX_SM_CONFIG_SHARED_MEM_SIZE,
        v03_00::TARGET_SM_CONFIG_SHARED_MEM_SIZE,
    ];
    const SHADER_LOCAL_MEMORY_SIZE: [QmdField; 2] = [
        v03_00::SHADER_LOCAL_MEMORY_LOW_SIZE,
        v03_00::SHADER_LOCAL_MEMORY_HIGH_SIZE,
    ];
    const PROGRAM_ADDRESS: [QmdField; 2] =
        [v03_00::PROGRAM_ADDRESS_LOWER, v03_00::PROGRAM_ADDRESS_UPPER];
    const PROGRAM_PREFETCH: Option<[QmdField; 3]> = Some([
        v03_00::PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED,
        v03_00::PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED,
        v03_00::PROGRAM_PREFETCH_SIZE,
    ]);
    const CONSTANT_BUFFER_ADDR_LOWER: [QmdField; 8] = v03_00::CONSTANT_BUFFER_ADDR_LOWER;
    const CONSTANT_BUFFER_ADDR_UPPER: [QmdField; 8] = v03_00::CONSTANT_BUFFER_ADDR_UPPER;
    const CONSTANT_BUFFER_SIZE_SHIFTED4: [QmdField; 8] = v03_00::CONSTANT_BUFFER_SIZE_SHIFTED4;
    const CONSTANT_BUFFER_VALID: [QmdField; 8] = v03_00::CONSTANT_BUFFER_VALID;
    const CONSTANT_BUFFER_INVALIDATE: [QmdField; 8] = v03_00::CONSTANT_BUFFER_INVALIDATE;
    const CONSTANT_BUFFER_PREFETCH_PRE: Option<(QmdField, QmdField)> = None;
    const RELEASE: [ReleaseFields; 2] = [
        ReleaseFields {
            address: [
                v03_00::RELEASE0_ADDRESS_LOWER,
                v03_00::RELEASE0_ADDRESS_UPPER,
            ],
            payload: v03_00::RELEASE0_PAYLOAD_LOWER,
            payload_upper: Some(v03_00::RELEASE0_PAYLOAD_UPPER),
            enable: v03_00::RELEASE0_ENABLE,
            payload64b: Some(v03_00::RELEASE0_PAYLOAD64B),
            structure_size: v03_00::RELEASE0_STRUCTURE_SIZE,
            membar_type: v03_00::RELEASE0_MEMBAR_TYPE,
        },
        ReleaseFields {
            address: [
                v03_00::RELEASE1_ADDRESS_LOWER,
                v03_00::RELEASE1_ADDRESS_UPPER,
            ],
            payload: v03_00::RELEASE1_PAYLOAD_LOWER,
            payload_upper: Some(v03_00::RELEASE1_PAYLOAD_UPPER),
            enable: v03_00::RELEASE1_ENABLE,
            payload64b: Some(v03_00::RELEASE1_PAYLOAD64B),
            structure_size: v03_00::RELEASE1_STRUCTURE_SIZE,
            membar_type: v03_00::RELEASE1_MEMBAR_TYPE,
        },
    ];
    const DEPENDENT_QMD0: DependentFields = DependentFields {
        pointer: v03_00::DEPENDENT_QMD0_POINTER,
        enable: v03_00::DEPENDENT_QMD0_ENABLE,
        action: v03_00::DEPENDENT_QMD0_ACTION,
        schedule: DEPENDENT_QMD_ACTION_QMD_SCHEDULE,
        prefetch: Some(v03_00::DEPENDENT_QMD0_PREFETCH),
    };
    const CWD_MEMBAR_TYPE: QmdField = v03_00::CWD_MEMBAR_TYPE;
    const CWD_MEMBAR_TASK_CHASING_ENABLE: Option<QmdField> = None;
    const FIXED: &'static [(QmdField, u32)] = &[
        (v03_00::QMD_GROUP_ID, 0x3f),
        (v03_00::SM_GLOBAL_CACHING_ENABLE, 1),
        (
            v03_00::API_VISIBLE_CALL_LIMIT,
            API_VISIBLE_CALL_LIMIT_NO_CHECK,
        ),
        (v03_00::SAMPLER_INDEX, SAMPLER_INDEX_VIA_HEADER_INDEX),
        (v03_00::CWD_MEMBAR_TYPE, CwdMembar::L1Sysmembar as u32),
        (v03_00::INVALIDATE_TEXTURE_HEADER_CACHE, 1),
        (v03_00::INVALIDATE_TEXTURE_SAMPLER_CACHE, 1),
        (v03_00::INVALIDATE_TEXTURE_DATA_CACHE, 1),
        (v03_00::INVALIDATE_SHADER_DATA_CACHE, 1),
    ];
}

/// The [`QmdLayout`] fields V04_00 and V05_00 share by name; `$m` is the layout's module.
macro_rules! v04_v05_common {
    ($m:ident) => {
        const QMD_MAJOR_VERSION: QmdField = $m::QMD_MAJOR_VERSION;
        const QMD_MINOR_VERSION: QmdField = $m::QMD_MINOR_VERSION;
        const GRID: [QmdField; 3] = [$m::GRID_WIDTH, $m::GRID_HEIGHT, $m::GRID_DEPTH];
        const CTA_THREAD_DIMENSION: [QmdField; 3] = [
            $m::CTA_THREAD_DIMENSION0,
            $m::CTA_THREAD_DIMENSION1,
            $m::CTA_THREAD_DIMENSION2,
        ];
        const REGISTER_COUNT: QmdField = $m::REGISTER_COUNT;
        const BARRIER_COUNT: QmdField = $m::BARRIER_COUNT;
        const SASS_VERSION: QmdField = $m::SASS_VERSION;
        const SM_CONFIG_SHARED_MEM_SIZE: [QmdField; 3] = [
            $m::MIN_SM_CONFIG_SHARED_MEM_SIZE,
            $m::MAX_SM_CONFIG_SHARED_MEM_SIZE,
            $m::TARGET_SM_CONFIG_SHARED_MEM_SIZE,
        ];
        const PROGRAM_PREFETCH: Option<[QmdField; 3]> = Some([
            $m::PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED,
            $m::PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED,
            $m::PROGRAM_PREFETCH_SIZE,
        ]);
        const CONSTANT_BUFFER_ADDR_LOWER: [QmdField; 8] = $m::CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6;
        const CONSTANT_BUFFER_ADDR_UPPER: [QmdField; 8] = $m::CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6;
        const CONSTANT_BUFFER_SIZE_SHIFTED4: [QmdField; 8] = $m::CONSTANT_BUFFER_SIZE_SHIFTED4;
        const CONSTANT_BUFFER_VALID: [QmdField; 8] = $m::CONSTANT_BUFFER_VALID;
        const CONSTANT_BUFFER_INVALIDATE: [QmdField; 8] = $m::CONSTANT_BUFFER_INVALIDATE;
        const RELEASE: [ReleaseFields; 2] = [
            ReleaseFields {
                address: [
                    $m::RELEASE_SEMAPHORE0_ADDR_LOWER,
                    $m::RELEASE_SEMAPHORE0_ADDR_UPPER,
                ],
                payload: $m::RELEASE_SEMAPHORE0_PAYLOAD_LOWER,
                payload_upper: Some($m::RELEASE_SEMAPHORE0_PAYLOAD_UPPER),
                enable: $m::RELEASE_ENABLE[0],
                payload64b: Some($m::RELEASE_PAYLOAD64B[0]),
                structure_size: $m::RELEASE_STRUCTURE_SIZE[0],
                membar_type: $m::RELEASE_MEMBAR_TYPE[0],
            },
            ReleaseFields {
                address: [
                    $m::RELEASE_SEMAPHORE1_ADDR_LOWER,
                    $m::RELEASE_SEMAPHORE1_ADDR_UPPER,
                ],
                payload: $m::RELEASE_SEMAPHORE1_PAYLOAD_LOWER,
                payload_upper: Some($m::RELEASE_SEMAPHORE1_PAYLOAD_UPPER),
                enable: $m::RELEASE_ENABLE[1],
                payload64b: Some($m::RELEASE_PAYLOAD64B[1]),
                structure_size: $m::RELEASE_STRUCTURE_SIZE[1],
                membar_type: $m::RELEASE_MEMBAR_TYPE[1],
            },
        ];
        const CWD_MEMBAR_TYPE: QmdField = $m::CWD_MEMBAR_TYPE;
        const CWD_MEMBAR_TASK_CHASING_ENABLE: Option<QmdField> =
            Some($m::CWD_MEMBAR_TASK_CHASING_ENABLE);
        const FIXED: &'static [(QmdField, u32)] = &[
            ($m::QMD_GROUP_ID, 0x3f),
            ($m::QMD_TYPE, QMD_TYPE_GRID_CTA),
            ($m::API_VISIBLE_CALL_LIMIT, API_VISIBLE_CALL_LIMIT_NO_CHECK),
            ($m::SAMPLER_INDEX, SAMPLER_INDEX_VIA_HEADER_INDEX),
            ($m::CWD_MEMBAR_TYPE, CwdMembar::L1Sysmembar as u32),
            ($m::INVALIDATE_TEXTURE_HEADER_CACHE, 1),
            ($m::INVALIDATE_TEXTURE_SAMPLER_CACHE, 1),
            ($m::INVALIDATE_TEXTURE_DATA_CACHE, 1),
            ($m::INVALIDATE_SHADER_DATA_CACHE, 1),
        ];
    };
}

impl QmdLayout for V04 {
    const VERSION: QmdVersion = QmdVersion::V04_00;
    const FIELDS: &'static [QmdField] = &v04_00::FIELDS;
    v04_v05_common!(v04_00);
    const SHARED_MEMORY_SIZE: QmdField = v04_00::SHARED_MEMORY_SIZE;
    const SHADER_LOCAL_MEMORY_SIZE: [QmdField; 2] = [
        v04_00::SHADER_LOCAL_MEMORY_LOW_SIZE,
        v04_00::SHADER_LOCAL_MEMORY_HIGH_SIZE,
    ];
    const PROGRAM_ADDRESS: [QmdField; 2] =
        [v04_00::PROGRAM_ADDRESS_LOWER, v04_00::PROGRAM_ADDRESS_UPPER];
    const CONSTANT_BUFFER_PREFETCH_PRE: Option<(QmdField, QmdField)> = Some((
        v04_00::CONSTANT_BUFFER_PREFETCH[0],
        v04_00::CONSTANT_BUFFER_PREFETCH_PRE_MAX_SIZE_SHIFTED8,
    ));
    const DEPENDENT_QMD0: DependentFields = DependentFields {
        pointer: v04_00::DEPENDENT_QMD0_POINTER,
        enable: v04_00::DEPENDENT_QMD_ENABLE[0],
        action: v04_00::DEPENDENT_QMD_ACTION[0],
        schedule: DEPENDENT_QMD_ACTION_QMD_SCHEDULE,
        prefetch: Some(v04_00::DEPENDENT_QMD_PREFETCH[0]),
    };
}

impl QmdLayout for V05 {
    const VERSION: QmdVersion = QmdVersion::V05_00;
    const FIELDS: &'static [QmdField] = &v05_00::FIELDS;
    v04_v05_common!(v05_00);
    const SHARED_MEMORY_SIZE: QmdField = v05_00::SHARED_MEMORY_SIZE_SHIFTED7;
    const SHADER_LOCAL_MEMORY_SIZE: [QmdField; 2] = [
        v05_00::SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4,
        v05_00::SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4,
    ];
    const PROGRAM_ADDRESS: [QmdField; 2] = [
        v05_00::PROGRAM_ADDRESS_LOWER_SHIFTED4,
        v05_00::PROGRAM_ADDRESS_UPPER_SHIFTED4,
    ];
    const CONSTANT_BUFFER_PREFETCH_PRE: Option<(QmdField, QmdField)> = Some((
        v05_00::CONSTANT_BUFFER_PREFETCH[0],
        v05_00::CONSTANT_BANK_PREFETCH_PRE_MAX_SIZE_SHIFTED8,
    ));
    const DEPENDENT_QMD0: DependentFields = DependentFields {
        pointer: v05_00::DEPENDENT_QMD0_POINTER,
        enable: v05_00::DEPENDENT_QMD0_ENABLE,
        action: v05_00::DEPENDENT_QMD0_ACTION,
        schedule: DEPENDENT_QMD_ACTION_QMD_SCHEDULE,
        prefetch: Some(v05_00::DEPENDENT_QMD0_PREFETCH),
    };
}

/// Runs `$body` with `$L` the [`QmdLayout`] of QMD version `$v`.
macro_rules! with_layout {
    ($v:expr, $L:ident => $body:expr) => {
        match $v {
            $crate::chip::QmdVersion::V02_02 => {
                type $L = $crate::channel::qmd::V02;
                $body
            }
            $crate::chip::QmdVersion::V03_00 => {
                type $L = $crate::channel::qmd::V03;
                $body
            }
            $crate::chip::QmdVersion::V04_00 => {
                type $L = $crate::channel::qmd::V04;
                $body
            }
            $crate::chip::QmdVersion::V05_00 => {
                type $L = $crate::channel::qmd::V05;
                $body
            }
        }
    };
}
pub(crate) use with_layout;
