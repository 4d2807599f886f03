//! `nvbare bench ...`: measurements, one subcommand per subsystem.
//!
//! * `rpc`: GSP RPC round trips on the simulator (`bench_rpc`).
//! * `p2p`: two GPUs, peer copies and cross-device waits (`bench_p2p`).
//! * `mm`: page-table map/unmap on the simulator's backing store (tables in sim VRAM written
//!   through BAR1, TLB invalidates through the simulated MMU), and allocator fragmentation.

use std::io::Write;
use std::time::Instant;

use clap::{Args, Subcommand};
use nvbare_core::chip::Chipset;
use nvbare_core::mm::{
    Bar1Tables, FbLayout, FitPolicy, MapStats, Mapper, MmuFormat, MmuInvalidate, PageSize,
    PteAttrs, TableSlot, VaAllocator, VramAllocator,
};
use nvbare_sim::gpu_mem::Aperture;
use nvbare_sim::mmu::{GmmuFormat, MmuConfig, SimMmu, TableLoc};
use nvbare_sim::{ChipModel, SimConfig, SimGpu};

use serde::Serialize;

use super::json::places3;
use crate::progress::Spinner;
use crate::{CliError, DeviceSpec};

/// What to measure.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// GPU page tables (map/unmap ns per page, tables touched) and VRAM allocator fragmentation.
    Mm(MmArgs),
    /// GSP RPC round trips per second and driver-side cost per RPC (simulator).
    Rpc {
        /// sim[:CHIP]
        #[arg(long, short, default_value = "sim:gh100")]
        device: DeviceSpec,
        /// Round trips per params size.
        #[arg(long, default_value_t = 20_000)]
        count: u32,
        /// Params bytes each way (default: a range of sizes).
        #[arg(long)]
        size: Option<usize>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Two GPUs: peer copy and cross-device wait checks, then peer copy bandwidth both ways.
    P2p(super::bench_p2p::P2pArgs),
}

/// Options of `nvbare bench mm`.
#[derive(Args, Debug)]
pub struct MmArgs {
    /// Simulated devices to run on (repeatable); default sim:gh100 and sim:ad102.
    #[arg(long, short)]
    pub device: Vec<DeviceSpec>,
    /// Bytes to map with 2 MiB pages (suffix K, M, G); clamped to free VRAM.
    #[arg(long, default_value = "64G", value_parser = parse_size)]
    pub huge: u64,
    /// Bytes to map with 4 KiB pages.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub small: u64,
    /// Repetitions of each mapping case (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Allocator operations in the fragmentation run.
    #[arg(long, default_value_t = 200_000)]
    pub alloc_ops: u32,
    /// Skip the allocator fragmentation run.
    #[arg(long)]
    pub no_alloc: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// One mapping case of `nvbare bench mm --json`.
#[derive(Debug, Serialize)]
pub struct MapCaseJson {
    /// The simulated chip.
    pub chip: String,
    /// The case, as the table names it.
    pub case: String,
    /// Bytes mapped.
    pub bytes: u64,
    /// PTEs written.
    pub pages: u64,
    /// Median map nanoseconds per page.
    #[serde(serialize_with = "places3")]
    pub map_ns_per_page: f64,
    /// Median unmap nanoseconds per page.
    #[serde(serialize_with = "places3")]
    pub unmap_ns_per_page: f64,
    /// Tables touched by map, then unmap.
    pub tables_touched: [u64; 2],
    /// Tables allocated by map, freed by unmap.
    pub tables_allocated_freed: [u64; 2],
    /// TLB invalidates.
    pub invalidates: u64,
}

/// One allocator run of `nvbare bench mm --json`.
#[derive(Debug, Serialize)]
pub struct AllocJson {
    /// First or best fit.
    pub policy: String,
    /// `page` or `4K`.
    pub align: &'static str,
    /// Target occupancy, percent.
    pub target_pct: u64,
    /// Mean occupancy, percent.
    #[serde(serialize_with = "places3")]
    pub occupancy_pct: f64,
    /// Mean free fragments.
    #[serde(serialize_with = "places3")]
    pub fragments: f64,
    /// Mean external fragmentation, percent.
    #[serde(serialize_with = "places3")]
    pub external_fragmentation_pct: f64,
    /// Allocations tried.
    pub allocs: u64,
    /// Refused although enough bytes were free.
    pub fragmentation_failures: u64,
    /// Refused for lack of free bytes or blocks.
    pub full_failures: u64,
    /// Nanoseconds per operation.
    #[serde(serialize_with = "places3")]
    pub ns_per_op: f64,
}

/// The object `nvbare bench mm --json` prints.
#[derive(Debug, Default, Serialize)]
pub struct MmReport {
    /// The mapping cases, per chip.
    pub mapper: Vec<MapCaseJson>,
    /// The allocator runs.
    pub allocator: Vec<AllocJson>,
}

/// Parses "64G", "512M", "4096".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        Some((i, 'T' | 't')) => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0 && n.is_multiple_of(4096))
        .ok_or_else(|| format!("{s:?} is not a size in whole 4 KiB pages (e.g. 64G, 512M, 4096K)"))
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

fn rt(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Runtime(format!("{what}: {e}"))
}

/// Runs `nvbare bench SUBCOMMAND`.
pub fn run(out: &mut dyn Write, cmd: BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Mm(args) => run_mm(out, args),
        BenchCommand::Rpc {
            device,
            count,
            size,
            json,
        } => super::bench_rpc::run(out, device, count, size, json),
        BenchCommand::P2p(args) => super::bench_p2p::run(out, args),
    }
}

fn run_mm(out: &mut dyn Write, args: MmArgs) -> Result<(), CliError> {
    let mut rec = MmReport::default();
    if !args.json {
        return run_mm_into(out, &args, &mut rec);
    }
    run_mm_into(&mut std::io::sink(), &args, &mut rec)?;
    let s = serde_json::to_string_pretty(&rec)
        .map_err(|e| CliError::Runtime(format!("encoding JSON: {e}")))?;
    writeln!(out, "{s}").map_err(io)
}

/// `bench mm` writing its tables to `out` and its rows to `rec`.
fn run_mm_into(out: &mut dyn Write, args: &MmArgs, rec: &mut MmReport) -> Result<(), CliError> {
    let devices = if args.device.is_empty() {
        vec![
            DeviceSpec::Sim(Chipset::GH100),
            DeviceSpec::Sim(Chipset::AD102),
        ]
    } else {
        args.device.clone()
    };
    for d in devices {
        let Some(chip) = d.sim_chip() else {
            return Err(CliError::Usage(format!(
                "bench mm measures the page-table code on the simulator's backing store; \
                 {d} is not a simulated device (use sim:gh100, sim:ad102 or sim:gb202)"
            )));
        };
        let model = ChipModel::for_chipset(chip)
            .ok_or_else(|| CliError::Usage(format!("the simulator has no {chip}")))?;
        bench_mapper(out, model, args, &mut rec.mapper)?;
    }
    if !args.no_alloc {
        bench_allocators(out, args.alloc_ops, &mut rec.allocator)?;
    }
    Ok(())
}

/// Page-table region in VRAM for the benchmark: enough for 64 GiB at 4 KiB pages.
const TABLE_REGION: u64 = 160 << 20;
/// Most live VRAM blocks in the benchmark's allocator.
const VRAM_BLOCKS: usize = 1024;

struct Case {
    name: String,
    bytes: u64,
    max_page: PageSize,
    per_call: Option<u64>,
}

fn delta(a: MapStats, b: MapStats) -> MapStats {
    MapStats {
        tables_touched: b.tables_touched - a.tables_touched,
        tables_allocated: b.tables_allocated - a.tables_allocated,
        tables_freed: b.tables_freed - a.tables_freed,
        words_read: b.words_read - a.words_read,
        words_written: b.words_written - a.words_written,
        ptes_written: b.ptes_written - a.ptes_written,
        invalidates: b.invalidates - a.invalidates,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The mappings `bench mm` times (no 512 MiB pages on GMMU v2).
fn mapper_cases(fmt: MmuFormat, args: &MmArgs) -> Vec<Case> {
    let huge = args.huge;
    let mut cases = vec![
        Case {
            name: "2 MiB".into(),
            bytes: huge,
            max_page: PageSize::Size2M,
            per_call: None,
        },
        Case {
            name: "4 KiB".into(),
            bytes: args.small,
            max_page: PageSize::Size4K,
            per_call: None,
        },
        Case {
            name: "largest pages".into(),
            bytes: huge,
            max_page: PageSize::Size512M,
            per_call: None,
        },
        Case {
            name: "4 KiB, 1 call/page".into(),
            bytes: 16 << 20,
            max_page: PageSize::Size4K,
            per_call: Some(4096),
        },
    ];
    if fmt == MmuFormat::V2_TURING {
        cases.retain(|c| c.max_page != PageSize::Size512M);
    }
    cases
}

/// The heading and column names of one chip's `bench mm` table.
fn mapper_header(
    out: &mut dyn Write,
    model: ChipModel,
    fb: u64,
    fmt: MmuFormat,
    tables: u64,
) -> Result<(), CliError> {
    writeln!(
        out,
        "bench mm: {} ({}, {} GiB VRAM), {fmt}; tables in sim VRAM through BAR1 at {tables:#x}",
        model.chipset,
        model.board,
        fb >> 30
    )
    .map_err(io)?;
    writeln!(
        out,
        "  {:<38} {:>9} {:>12} {:>14} {:>15} {:>13} {:>6}",
        "case (median of runs)",
        "pages",
        "map ns/page",
        "unmap ns/page",
        "tables touched",
        "alloc/freed",
        "inval"
    )
    .map_err(io)?;
    Ok(())
}

fn bench_mapper(
    out: &mut dyn Write,
    model: ChipModel,
    args: &MmArgs,
    rec: &mut Vec<MapCaseJson>,
) -> Result<(), CliError> {
    let gpu = SimGpu::new(SimConfig::new(model));
    let mmu = SimMmu::install(&gpu, MmuConfig::default());
    let clock = gpu.clock();
    let fmt = MmuFormat::for_chip(model.chipset.info());
    let fb = gpu.vram().size();
    // The GSP's region at the top of FB; the real boot code supplies this from the WPR meta.
    let mut layout = FbLayout::new(fb);
    layout
        .reserve_gsp_region(fb - (256 << 20))
        .map_err(|e| rt("FB layout", e))?;
    let mut vram = VramAllocator::<VRAM_BLOCKS>::new(&layout, FitPolicy::FirstFit)
        .map_err(|e| rt("VRAM", e))?;
    let tables = vram
        .alloc(TABLE_REGION, 2 << 20)
        .map_err(|e| rt("page-table region", e))?;
    let mem = Bar1Tables::new(gpu.bar1(), tables, tables, TABLE_REGION)
        .map_err(|e| rt("BAR1 table window", e))?;
    let slots = vec![TableSlot::INIT; (TABLE_REGION / 4096) as usize];
    let mut m = Mapper::new(fmt, mem, slots, MmuInvalidate::new(gpu.bar0(), &*clock))
        .map_err(|e| rt("mapper", e))?;
    let mut va = VaAllocator::<64>::new(fmt, 1 << 40, 1 << 44, FitPolicy::FirstFit)
        .map_err(|e| rt("VA", e))?;
    let space = mmu.address_space(
        GmmuFormat::for_chip(model.chipset.info()),
        TableLoc {
            aperture: Aperture::Vram,
            addr: m.root().addr,
        },
    );

    let cases = mapper_cases(fmt, args);

    mapper_header(out, model, fb, fmt, tables)?;
    let bar = Spinner::bar(cases.len() as u64, format!("bench mm: {}", model.chipset));
    for mut c in cases {
        bar.inc();
        let align = c.max_page.bytes().max(2 << 20);
        let avail = vram.largest_free().saturating_sub(align) & !(align - 1);
        let clamped = c.bytes > avail;
        c.bytes = c.bytes.min(avail);
        c.name = format!(
            "{} @ {}{}",
            human(c.bytes),
            c.name,
            if clamped { " (all free VRAM)" } else { "" }
        );
        let pa = vram
            .alloc(c.bytes, align)
            .map_err(|e| rt("VRAM for the mapping", e))?;
        let base = va.alloc(c.bytes).map_err(|e| rt("VA", e))?;
        let step = c.per_call.map_or(c.bytes, |_| c.max_page.bytes());
        let (mut map_ns, mut unmap_ns) = (Vec::new(), Vec::new());
        let (mut dm, mut du) = (MapStats::default(), MapStats::default());
        for _ in 0..args.runs.max(1) {
            let s0 = m.stats();
            let t0 = Instant::now();
            let mut off = 0;
            while off < c.bytes {
                m.map_with_max_page(base + off, pa + off, step, &PteAttrs::vram(), c.max_page)
                    .map_err(|e| rt("map", e))?;
                off += step;
            }
            let t_map = t0.elapsed();
            let s1 = m.stats();
            // Spot-check a few pages through the simulated GMMU (not timed).
            gpu.with_core(|core| {
                for probe in [0, c.bytes / 2, c.bytes - 4096] {
                    let w = space.walk(core, base + probe).map_err(|f| {
                        rt(
                            "walking the new mapping",
                            format!("{f:?} at {:#x}", base + probe),
                        )
                    })?;
                    if w.phys + (base + probe - w.va) != pa + probe {
                        return Err(rt("walking the new mapping", "wrong translation"));
                    }
                }
                Ok(())
            })?;
            let t1 = Instant::now();
            off = 0;
            while off < c.bytes {
                m.unmap(base + off, step).map_err(|e| rt("unmap", e))?;
                off += step;
            }
            let t_unmap = t1.elapsed();
            let s2 = m.stats();
            (dm, du) = (delta(s0, s1), delta(s1, s2));
            let pages = dm.ptes_written.max(1) as f64;
            map_ns.push(t_map.as_nanos() as f64 / pages);
            unmap_ns.push(t_unmap.as_nanos() as f64 / pages);
        }
        let (map_med, unmap_med) = (median(&mut map_ns), median(&mut unmap_ns));
        rec.push(MapCaseJson {
            chip: model.chipset.to_string(),
            case: c.name.clone(),
            bytes: c.bytes,
            pages: dm.ptes_written,
            map_ns_per_page: map_med,
            unmap_ns_per_page: unmap_med,
            tables_touched: [dm.tables_touched, du.tables_touched],
            tables_allocated_freed: [dm.tables_allocated, du.tables_freed],
            invalidates: dm.invalidates + du.invalidates,
        });
        bar.suspend(|| {
            writeln!(
                out,
                "  {:<38} {:>9} {:>12.1} {:>14.1} {:>7}/{:<7} {:>6}/{:<6} {:>6}",
                c.name,
                dm.ptes_written,
                map_med,
                unmap_med,
                dm.tables_touched,
                du.tables_touched,
                dm.tables_allocated,
                du.tables_freed,
                dm.invalidates + du.invalidates,
            )
        })
        .map_err(io)?;
        va.free(base).map_err(|e| rt("VA free", e))?;
        vram.free(pa).map_err(|e| rt("VRAM free", e))?;
    }
    let st = mmu.stats();
    writeln!(
        out,
        "  sim MMU: {} invalidates completed, {} stale TLB hits; tables in use after: {}",
        st.invalidations,
        st.stale_hits,
        m.tables_in_use()
    )
    .map_err(io)?;
    Ok(())
}

/// xorshift64*: a deterministic workload without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Runs a random alloc/free workload on a 24 GiB framebuffer and reports fragmentation.
fn bench_allocators(
    out: &mut dyn Write,
    ops: u32,
    rec: &mut Vec<AllocJson>,
) -> Result<(), CliError> {
    const FB: u64 = 24 << 30;
    writeln!(
        out,
        "bench mm: VRAM allocator, 24 GiB FB, {ops} random ops, sizes log-uniform 4 KiB..512 MiB \
         (align = largest page <= size), frees keep occupancy near the target"
    )
    .map_err(io)?;
    writeln!(
        out,
        "  {:<9} {:<6} {:>6} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>7}",
        "policy",
        "align",
        "target",
        "occupancy",
        "fragments",
        "ext.frag",
        "allocs",
        "frag fails",
        "full fails",
        "ns/op"
    )
    .map_err(io)?;
    let bar = Spinner::bar(12, "bench mm: allocator runs");
    for policy in [FitPolicy::FirstFit, FitPolicy::BestFit] {
        for page_align in [true, false] {
            for target in [50u64, 80, 95] {
                bar.inc();
                let layout = FbLayout::new(FB);
                let mut v =
                    VramAllocator::<4096>::new(&layout, policy).map_err(|e| rt("VRAM", e))?;
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
                let mut live: Vec<u64> = Vec::new();
                let (mut frag_fail, mut full_fail, mut attempts) = (0u64, 0u64, 0u64);
                let (mut frag_sum, mut frag_n, mut frag_count_sum) = (0f64, 0u64, 0u64);
                let mut occ_sum = 0f64;
                let t0 = Instant::now();
                for i in 0..ops {
                    let used = FB - v.free_bytes();
                    let want_free = used * 100 > FB * target && !live.is_empty();
                    if want_free || (rng.next().is_multiple_of(4) && !live.is_empty()) {
                        let k = (rng.next() % live.len() as u64) as usize;
                        let a = live.swap_remove(k);
                        v.free(a).map_err(|e| rt("free", e))?;
                    } else {
                        // log-uniform between 2^12 and 2^28
                        let shift = 12 + rng.next() % 17;
                        let size = ((1u64 << shift) + rng.next() % (1u64 << shift)) & !0xfff;
                        let size = size.max(4096);
                        attempts += 1;
                        let r = if page_align {
                            v.alloc_for_mapping(size)
                        } else {
                            v.alloc(size, 4096)
                        };
                        match r {
                            Ok(a) => live.push(a),
                            Err(nvbare_core::mm::AllocError::Exhausted { free, .. }) => {
                                if free >= size {
                                    frag_fail += 1;
                                } else {
                                    full_fail += 1;
                                }
                            }
                            Err(nvbare_core::mm::AllocError::TooManyBlocks { .. }) => {
                                full_fail += 1
                            }
                            Err(e) => return Err(rt("alloc", e)),
                        }
                    }
                    if i > ops / 4 && i % 64 == 0 {
                        let free = v.free_bytes().max(1);
                        frag_sum += 1.0 - v.largest_free() as f64 / free as f64;
                        frag_count_sum += v.ranges().free_fragments() as u64;
                        occ_sum += (FB - v.free_bytes()) as f64 / FB as f64;
                        frag_n += 1;
                    }
                }
                let elapsed = t0.elapsed();
                for a in live.drain(..) {
                    v.free(a).map_err(|e| rt("free", e))?;
                }
                if v.free_bytes() != FB || v.ranges().free_fragments() != 1 {
                    return Err(rt("allocator", "memory did not all come back"));
                }
                let n = frag_n.max(1);
                rec.push(AllocJson {
                    policy: format!("{policy:?}"),
                    align: if page_align { "page" } else { "4K" },
                    target_pct: target,
                    occupancy_pct: 100.0 * occ_sum / n as f64,
                    fragments: frag_count_sum as f64 / n as f64,
                    external_fragmentation_pct: 100.0 * frag_sum / n as f64,
                    allocs: attempts,
                    fragmentation_failures: frag_fail,
                    full_failures: full_fail,
                    ns_per_op: elapsed.as_nanos() as f64 / ops as f64,
                });
                bar.suspend(|| writeln!(
                    out,
                    "  {:<9} {:<6} {:>5}% {:>8.0}% {:>9.0} {:>8.1}% {:>8} {:>10} {:>10} {:>7.0}",
                    format!("{policy:?}"),
                    if page_align { "page" } else { "4K" },
                    target,
                    100.0 * occ_sum / n as f64,
                    frag_count_sum as f64 / n as f64,
                    100.0 * frag_sum / n as f64,
                    attempts,
                    frag_fail,
                    full_fail,
                    elapsed.as_nanos() as f64 / ops as f64,
                ))
                .map_err(io)?;
            }
        }
    }
    writeln!(
        out,
        "  align: page = largest page size <= request (so huge pages can map it), 4K = none; \
         ext.frag = 1 - largest free range / free bytes (mean over the steady state); frag \
         fails = allocations refused although enough bytes were free; full fails = not enough free \
         bytes (or live-block capacity 4095 reached)"
    )
    .map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64G"), Ok(64 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert!(parse_size("1000").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn bench_mm_runs_small() {
        let mut out = Vec::new();
        let args = MmArgs {
            device: vec![
                DeviceSpec::Sim(Chipset::AD102),
                DeviceSpec::Sim(Chipset::GH100),
            ],
            huge: 1 << 30,
            small: 8 << 20,
            runs: 1,
            alloc_ops: 2000,
            no_alloc: false,
            json: false,
        };
        run_mm(&mut out, args).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("1 GiB @ 2 MiB"), "{s}");
        assert!(s.contains("8 MiB @ 4 KiB"), "{s}");
        assert!(s.contains("0 stale TLB hits"), "{s}");
        assert!(s.contains("tables in use after: 1"), "{s}");
        let r = run_mm(
            &mut Vec::new(),
            MmArgs {
                device: vec![DeviceSpec::Nvidia(0)],
                huge: 1 << 30,
                small: 1 << 20,
                runs: 1,
                alloc_ops: 1,
                no_alloc: true,
                json: false,
            },
        );
        assert!(matches!(r, Err(CliError::Usage(_))));
    }

    #[test]
    fn bench_mm_json_parses_and_has_every_row() {
        let mut out = Vec::new();
        let args = MmArgs {
            device: vec![DeviceSpec::Sim(Chipset::AD102)],
            huge: 1 << 30,
            small: 8 << 20,
            runs: 1,
            alloc_ops: 500,
            no_alloc: false,
            json: true,
        };
        run_mm(&mut out, args).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let cases = v["mapper"].as_array().unwrap();
        assert_eq!(cases.len(), 4, "{v}");
        assert_eq!(cases[1]["case"], "8 MiB @ 4 KiB");
        assert_eq!(cases[1]["pages"], 2048);
        assert_eq!(cases[0]["chip"], "AD102");
        assert_eq!(cases[0]["bytes"], 1u64 << 30);
        assert_eq!(v["allocator"].as_array().unwrap().len(), 12);
    }
}
