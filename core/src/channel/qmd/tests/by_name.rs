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
        QmdVersion::V02_02 | QmdVersion::V03_00 => Names {
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
/// structure size, membar type; "" where the layout has no such field (V02_02: no payload
/// upper half, no payload64b).
fn release_names(v: QmdVersion, i: usize) -> [Name; 8] {
    if v == QmdVersion::V02_02 {
        let r = |s: &str| name(format_args!("RELEASE{i}_{s}"));
        [
            r("ADDRESS_LOWER"),
            r("ADDRESS_UPPER"),
            r("PAYLOAD"),
            Name::new(),
            name(format_args!("SEMAPHORE_RELEASE_ENABLE{i}")),
            Name::new(),
            r("STRUCTURE_SIZE"),
            name(format_args!("RELEASE_MEMBAR_TYPE")),
        ]
    } else if v == QmdVersion::V03_00 {
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

/// Field names of dependent QMD 0: pointer, enable, action, prefetch ("" on V02_02, which has
/// none).
fn dependent_names(v: QmdVersion) -> [Name; 4] {
    let plain = |s: &str| name(format_args!("{s}"));
    if v == QmdVersion::V02_02 {
        [
            plain("DEPENDENT_QMD_POINTER"),
            plain("DEPENDENT_QMD_SCHEDULE_ENABLE"),
            plain("DEPENDENT_QMD_TYPE"),
            Name::new(),
        ]
    } else if v == QmdVersion::V04_00 {
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
/// `DEPENDENT_QMD_TYPE_GRID` (V02_02).
const DEPENDENT_QMD_TYPE_GRID: u64 = 1;
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

/// A payload: split over lower and upper, or (no upper, V02_02) the one field.
fn set_payload(q: &mut Qmd, lo: &str, hi: &str, value: u64) -> Result<(), QmdError> {
    if hi.is_empty() {
        q.set(lo, value)
    } else {
        set_split(q, lo, hi, value)
    }
}

/// The QMD for launch `d` in layout `v`. Every value is range-checked against its field
/// (a typed error names the field); addresses the layout stores shifted must be aligned.
pub(super) fn build(v: QmdVersion, d: &LaunchDesc) -> Result<Qmd, QmdError> {
    let n = names(v)?;
    let mut q = Qmd::new(v);
    q.set("QMD_GROUP_ID", 0x3f)?;
    if matches!(v, QmdVersion::V02_02 | QmdVersion::V03_00) {
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
    if d.program_size != 0 && v != QmdVersion::V02_02 {
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
        set_payload(&mut q, &plo, &phi, payload)?;
        q.set(&en, 1)?;
        if !p64.is_empty() {
            q.set(&p64, 1)?;
        }
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
    if pf.is_empty() {
        return q.set(&act, DEPENDENT_QMD_TYPE_GRID);
    }
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
        program_size: match v {
            QmdVersion::V02_02 => 0,
            _ => u32_of(q.get("PROGRAM_PREFETCH_SIZE")? << 8),
        },
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
            let payload = if phi.is_empty() {
                q.get(&plo)?
            } else {
                get_split(q, &plo, &phi)?
            };
            d.release[i] = Some((get_split(q, &alo, &ahi)?, payload));
        }
    }
    let [ptr, en, ..] = dependent_names(v);
    if q.get(&en)? != 0 {
        d.dependent_qmd = Some(q.get(&ptr)? << 8);
    }
    Ok(d)
}
