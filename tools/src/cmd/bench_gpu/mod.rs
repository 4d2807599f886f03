//! `nvbare bench [--device DEV] [--json]`: what every GPU program pays for, measured on the
//! device API (so the same code runs on the simulator and on real hardware) and comparable with
//! the CUDA baseline (`tools/bench/cuda_baseline.cu`, schema in `tools/bench/README.md`):
//!
//! * empty-kernel launch + synchronize round trip: median, p10, p90 over `--round-trips` (after
//!   200 warm-up round trips);
//! * back-to-back launches: `--launches` launches, then one wait; total / launches;
//! * H2D / D2H / D2D copy bandwidth of `--copy-bytes` between pinned host memory
//!   (`alloc_host`) and device memory, copy engine; median of 10 after a warm-up; D2D counts
//!   bytes read plus written, as CUDA's `bandwidthTest`;
//! * a 4-byte host-to-device copy from pinned memory, waited for: median of 10 000;
//! * opening the device until it can launch (with the runtime kernels installed).
//!
//! D2D uses `dtod_copy` (the copy kernel for large copies when it is installed); the copy
//! engine's D2D rate is reported too (`d2d_ce_gbps`). The tuning options (`--fence`,
//! `--defer`, `--no-write-ahead`, `--no-early-prefetch`, `--no-auto-defer`, `--no-chain`,
//! `--copy-*`, `--no-runtime`, ...) set the fields of `DeviceOptions::tuning` they name, to
//! measure each piece of the launch path on and off.
//!
//! All times are `std::time::Instant` (`CLOCK_MONOTONIC`). Progress goes to stderr.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use nvbare_core::device::{
    CopyPath, Device, DeviceOptions, DeviceStats, DoorbellFence, LaunchConfig, Tuning,
};
use nvbare_gsp_firmware::program::LoadCubin;

use nvbare_pci_host::clock::spin_for;

use crate::open::{CliBackend, demo_cubin, open_device_with};
use crate::{CliError, DeviceSpec, input, with_device};

mod report;

/// Options of `nvbare bench` without a subcommand.
#[derive(Args, Debug, Clone)]
pub struct GpuBenchArgs {
    /// sim[:CHIP], nvidia:N, vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]]
    #[arg(long, short, default_value = "sim:gh100")]
    pub device: DeviceSpec,
    /// Print one JSON object (tools/bench/README.md) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Launch + sync round trips timed (after 200 warm-up ones).
    #[arg(long)]
    pub round_trips: Option<u32>,
    /// Back-to-back launches (default 100000; 10000 on the simulator).
    #[arg(long)]
    pub launches: Option<u32>,
    /// CPU work between back-to-back launches: spin this many nanoseconds after each launch
    /// call, as a program that computes between launches does (it makes the CPU the bound).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub launch_gap_ns: u32,
    /// Bytes per bandwidth copy (default 1 GiB; 16 MiB on the simulator).
    #[arg(long, value_parser = super::bench::parse_size)]
    pub copy_bytes: Option<u64>,
    /// 4-byte copies timed (default 10000; 1000 on the simulator).
    #[arg(long)]
    pub small_copies: Option<u32>,
    /// Timeout of every wait, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Store ordering before GPPut and the doorbell (Tuning::doorbell_fence).
    #[arg(long, value_enum, default_value_t = FenceArg::Store2)]
    pub fence: FenceArg,
    /// Submissions queued before a doorbell (Tuning::deferred_submits; 0 = every one).
    #[arg(long, default_value_t = 0)]
    pub defer: u32,
    /// With --defer: do not chain launches queued behind one doorbell (each gets its own
    /// methods and WAIT_FOR_IDLE; Tuning::chain_launches = false).
    #[arg(long)]
    pub no_chain: bool,
    /// Ring the doorbell of every launch (Tuning::auto_defer = false): no launch is
    /// held for the flusher thread, so back-to-back launches are not chained without --defer.
    #[arg(long)]
    pub no_auto_defer: bool,
    /// Automatic deferral: launches held before a launch call publishes them
    /// (Tuning::auto_defer_min_batch; default 64, 1 publishes as soon as the GPU caught
    /// up).
    #[arg(long, value_name = "N")]
    pub auto_min_batch: Option<u32>,
    /// Automatic deferral: µs a launch call lets a caught-up batch smaller than that wait
    /// (Tuning::auto_defer_batch_wait; default 30).
    #[arg(long, value_name = "US")]
    pub auto_batch_wait_us: Option<u64>,
    /// Back-to-back launches fetch their QMD only after their WAIT_FOR_IDLE, as a launch
    /// after a wait does (Tuning::early_qmd_prefetch = false), to measure what the
    /// early prefetch buys.
    #[arg(long)]
    pub no_early_prefetch: bool,
    /// Threads per CTA of the copy kernel.
    #[arg(long)]
    pub copy_block: Option<u32>,
    /// CTAs per SM of the copy kernel.
    #[arg(long)]
    pub copy_ctas_per_sm: Option<u32>,
    /// Do not install the runtime kernels (every copy on the copy engine).
    #[arg(long)]
    pub no_runtime: bool,
    /// Install the copy kernel from this cubin instead of the built-in runtime (to try
    /// variants of `nvbare_copy`).
    #[arg(long)]
    pub runtime_cubin: Option<std::path::PathBuf>,
    /// Check device-to-device copies on both engines (odd sizes, offsets, 64 MiB; 1 MiB on the
    /// simulator) before
    /// measuring; a mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// Write every launch in full: no repeat of the last launch written ahead during a wait
    /// (Tuning::write_ahead, on by default), to measure what that buys.
    #[arg(long)]
    pub no_write_ahead: bool,
    /// Ring a channel's doorbell again when a wait sees no progress for this many µs
    /// (Tuning::doorbell_retry, default 100; 0 never does).
    #[arg(long)]
    pub doorbell_retry_us: Option<u64>,
    /// Command memory per channel in KiB (DeviceOptions::command_bytes, default 1024): how
    /// many launches go by before a launch's command memory is reused.
    #[arg(long, value_parser = clap::value_parser!(u64).range(16..=1 << 20))]
    pub command_kib: Option<u64>,
    /// Streams to open (DeviceOptions::streams, default 4; two channels each in the channel
    /// group): to measure what the channels of idle streams cost a launch.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=nvbare_core::device::MAX_STREAMS as i64))]
    pub streams: Option<u32>,
}

/// `--fence` values.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceArg {
    /// One store barrier before the doorbell only (tinygrad's order; runs stale commands
    /// when another process shares the GPU).
    Store,
    /// A store barrier before GPPut and one before the doorbell (the default).
    Store2,
    /// Two full (SeqCst) fences.
    Full,
}

impl GpuBenchArgs {
    /// The device options these arguments ask for.
    pub fn device_options(&self) -> Result<DeviceOptions, CliError> {
        let d = DeviceOptions::default();
        let t = d.tuning;
        Ok(DeviceOptions {
            timeout: Duration::from_millis(self.timeout_ms),
            command_bytes: self.command_kib.map_or(d.command_bytes, |k| k << 10),
            streams: self.streams.unwrap_or(d.streams),
            tuning: Tuning {
                write_ahead: !self.no_write_ahead,
                early_qmd_prefetch: !self.no_early_prefetch,
                chain_launches: !self.no_chain,
                auto_defer: !self.no_auto_defer,
                auto_defer_min_batch: self.auto_min_batch.unwrap_or(t.auto_defer_min_batch),
                auto_defer_batch_wait: self
                    .auto_batch_wait_us
                    .map_or(t.auto_defer_batch_wait, Duration::from_micros),
                deferred_submits: self.defer,
                doorbell_fence: match self.fence {
                    FenceArg::Store => DoorbellFence::Store,
                    FenceArg::Store2 => DoorbellFence::StoreTwice,
                    FenceArg::Full => DoorbellFence::Full,
                },
                doorbell_retry: match self.doorbell_retry_us {
                    None => t.doorbell_retry,
                    Some(0) => Duration::MAX,
                    Some(us) => Duration::from_micros(us),
                },
                copy_kernel_block: self.copy_block.unwrap_or(t.copy_kernel_block),
                copy_kernel_ctas_per_sm: self.copy_ctas_per_sm.unwrap_or(t.copy_kernel_ctas_per_sm),
                ..t
            },
            ..d
        })
    }
}

/// Percentiles of a sample, in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Samples.
    pub n: usize,
}

impl Spread {
    /// Nearest-rank percentiles of `samples` (µs); `None` when empty.
    pub fn of(samples: &mut [f64]) -> Option<Spread> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let i = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i]
        };
        Some(Spread {
            median: at(0.5),
            p10: at(0.1),
            p90: at(0.9),
            n: samples.len(),
        })
    }
}

/// Everything `nvbare bench` measures.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuBench {
    /// The backend's description.
    pub device: String,
    /// Launch + sync round trip.
    pub launch_sync: Spread,
    /// Launch + sync round trips of `add1` on one element, the same arguments every time.
    pub launch_sync_add1: Spread,
    /// The same with arguments that change at every launch (two buffers in turn): a launch
    /// that repeats the kernel but not the call.
    pub launch_sync_changing: Spread,
    /// CPU time of the launch call in those two loops, median µs (same arguments, changing):
    /// how much of the difference between them is the CPU's.
    pub launch_call_add1_us: [f64; 2],
    /// How many of the timed round trips with changing arguments wrote only the changed
    /// argument words into command memory written ahead, building nothing
    /// (`DeviceStats::argument_only`).
    pub argument_only_round_trips: u64,
    /// Back-to-back launches, µs per launch.
    pub back_to_back_us: f64,
    /// Launches in the back-to-back run.
    pub launches: u32,
    /// CPU time per launch in the back-to-back run (until the last launch call returned), µs:
    /// when it is close to `back_to_back_us` the CPU is the bottleneck, otherwise the GPU.
    pub submit_us: f64,
    /// Bytes per bandwidth copy.
    pub copy_bytes: u64,
    /// GB/s (10^9 bytes per second).
    pub h2d_gbps: f64,
    /// GB/s.
    pub d2h_gbps: f64,
    /// GB/s, read + written.
    pub d2d_gbps: f64,
    /// 4-byte H2D copy, median µs.
    pub copy4_h2d_us: f64,
    /// Opening the device, seconds.
    pub open_s: f64,
    /// CPU time of the launch call in the round-trip loop, median µs.
    pub launch_call_us: f64,
    /// How many of the back-to-back launches were chained to the launch before
    /// (Tuning::chain_launches: held by automatic deferral, or with --defer).
    pub chained_back_to_back: u64,
    /// Batches of back-to-back launches held by automatic deferral that the flusher thread
    /// published (the others were published by a later launch or the synchronize).
    pub flusher_batches: u64,
    /// Two empty-kernel launches, then the compute timeline polled until both ran (no wait):
    /// median µs from the second launch's return.
    pub pair_then_poll_us: f64,
    /// The same pairs timed from before the first launch call: what the program waits in all
    /// (a held launch's doorbell is rung by the poll, inside the window above; an unheld one's
    /// by its launch call, outside it).
    pub pair_total_us: f64,
    /// Tuning::deferred_submits of the run (--defer).
    pub deferred_submits: u32,
    /// Whether automatic deferral could hold launches in this run
    /// (Device::auto_deferral_active: not with --no-auto-defer or --defer, nor without a
    /// flusher thread, which the CLI starts only where the process may use a second CPU).
    pub auto_defer_active: bool,
    /// Tuning::auto_defer_min_batch of the run (--auto-min-batch).
    pub auto_min_batch: u32,
    /// CPU work between back-to-back launches, ns (--launch-gap-ns).
    pub launch_gap_ns: u32,
    /// How many of the back-to-back launches had their QMD prefetched early
    /// (Tuning::early_qmd_prefetch: before their WAIT_FOR_IDLE, or the first, written
    /// ahead, by the wait before).
    pub prefetched_back_to_back: u64,
    /// How many of the timed round trips' launches found their QMD prefetched by the wait
    /// before (Tuning::early_qmd_prefetch).
    pub prefetched_round_trips: u64,
    /// How many of the timed round trips' launches went through command memory written
    /// ahead during the wait before (Tuning::write_ahead).
    pub written_ahead_round_trips: u64,
    /// H2D / D2H of `copy_bytes` between pageable host memory (a `Vec`) and device memory,
    /// through the device's staging memory (`htod_copy_into` / `dtoh_copy_into`), GB/s.
    pub h2d_pageable_gbps: f64,
    /// The same, device to host.
    pub d2h_pageable_gbps: f64,
    /// How many of the timed round trips' launches repeated the call before and so skipped
    /// building the launch (`DeviceStats::repeated`).
    pub repeated_round_trips: u64,
    /// The device's counters at the end of the run (`Device::stats`): doorbells rung again
    /// because a wait saw no progress, and how many of them found work unfetched (lost
    /// doorbells, or another process holding the GPU; the rest ran during long copies).
    pub stats: DeviceStats,
    /// A graph of [`GRAPH_LAUNCHES`] `empty` launches, launched and synchronized, median µs:
    /// as one submission of commands written once (`Device::launch_graph`), and the same
    /// launches made one by one.
    pub graph_sync_us: [f64; 2],
    /// How many of the timed graph launches went as one submission
    /// (`DeviceStats::graph_launches_written`).
    pub graph_written_round_trips: u64,
    /// Timed graph round trips (each way).
    pub graph_round_trips: u32,
    /// D2D on the copy engine (`CopyPath::CopyEngine`), GB/s read + written.
    pub d2d_ce_gbps: f64,
    /// Whether `d2d_gbps` ran on the copy kernel.
    pub d2d_kernel: bool,
}

/// One launch + sync, timed from one start: the launch call, and the whole round trip.
#[derive(Debug, Clone, Copy)]
struct RoundTrip {
    call: Duration,
    total: Duration,
}

impl RoundTrip {
    /// Launches `f` with `cfg` and `args`, then synchronizes: the timed round trip.
    fn time<B: CliBackend>(
        dev: &Device<B>,
        f: &nvbare_core::device::Function<'_, '_, B>,
        cfg: LaunchConfig,
        args: &[nvbare_core::device::Arg<'_>],
    ) -> Result<RoundTrip, CliError> {
        let t = Instant::now();
        dev.launch(f, cfg, args).map_err(rt("launch"))?;
        let call = t.elapsed();
        dev.synchronize().map_err(rt("synchronize"))?;
        Ok(RoundTrip {
            call,
            total: t.elapsed(),
        })
    }
}

/// `n` round trips of `round_trip`, each started after the CPU spun for `gap` (none when
/// zero): the µs of each round trip (the gap not included) and of each launch call.
fn time_round_trips(
    n: usize,
    gap: Duration,
    round_trip: &mut impl FnMut() -> Result<RoundTrip, CliError>,
) -> Result<(Vec<f64>, Vec<f64>), CliError> {
    let (mut trips, mut calls) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        spin_for(gap);
        let r = round_trip()?;
        trips.push(us(r.total));
        calls.push(us(r.call));
    }
    Ok((trips, calls))
}

pub(super) fn rt(what: &str) -> impl Fn(nvbare_core::device::DeviceError) -> CliError + '_ {
    move |e| CliError::Runtime(format!("{what}: {e}"))
}

/// A progress line on stderr, with a spinner under it while the step runs (on a terminal).
fn progress(msg: &str) {
    crate::progress::step(&format!("nvbare bench: {msg}"));
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Samples of [`GpuBench::pair_then_poll_us`].
const PAIR_POLLS: usize = 200;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Copies known bytes device to device on the copy engine and on the copy kernel (when
/// installed), at odd sizes and offsets and `big` bytes, and compares what arrives.
fn verify_copies<B: CliBackend>(dev: &Device<B>, big: usize) -> Result<(), CliError> {
    let n = big + 4096;
    progress(&format!(
        "verifying device-to-device copies ({n} bytes, odd sizes and offsets)"
    ));
    let data: Vec<u8> = (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let src = dev.htod_copy(&data).map_err(rt("upload"))?;
    let mut dst = dev.alloc::<u8>(n).map_err(rt("device memory"))?;
    let mut paths = vec![CopyPath::CopyEngine];
    if dev.has_copy_kernel() {
        paths.push(CopyPath::Kernel);
    }
    let cases = [
        (0, 0, n),
        (0, 0, big),
        (1, 1, 1),
        (3, 3, 15),
        (5, 5, 4099),
        (7, 9, 100_003),
        (16, 0, big / 8 + 13),
        (11, 11, big / 2 + 1),
    ];
    for path in paths {
        for (i, &(so, d_o, len)) in cases.iter().enumerate() {
            let zeros = vec![0u8; n];
            dev.htod_copy_into(&zeros, &mut dst).map_err(rt("clear"))?;
            dev.dtod_copy_range(&src, so, &mut dst, d_o, len, path)
                .map_err(rt("copy"))?;
            let got = dev.dtoh_copy(&dst).map_err(rt("download"))?;
            let ok = got.get(d_o..d_o + len) == data.get(so..so + len)
                && got[..d_o].iter().all(|&b| b == 0)
                && got[d_o + len..].iter().all(|&b| b == 0);
            if !ok {
                return Err(CliError::Runtime(format!(
                    "{path:?} copy case {i} ({len} bytes from offset {so} to offset {d_o}) \
                     delivered wrong bytes"
                )));
            }
        }
    }
    progress("device-to-device copies verified");
    Ok(())
}

/// Runs the measurements on an open device.
fn measure<B: CliBackend>(
    dev: &Device<B>,
    args: &GpuBenchArgs,
    open_s: f64,
) -> Result<GpuBench, CliError> {
    let hw = dev.with_backend(|b| b.is_hardware()).unwrap_or(false);
    let round_trips = args.round_trips.unwrap_or(10_000).max(1);
    let launches = args
        .launches
        .unwrap_or(if hw { 100_000 } else { 10_000 })
        .max(1);
    let copy_bytes = args
        .copy_bytes
        .unwrap_or(if hw { 1 << 30 } else { 16 << 20 });
    let small = args
        .small_copies
        .unwrap_or(if hw { 10_000 } else { 1_000 })
        .max(1);
    let sm = dev.info().sm;
    let (name, cubin) =
        demo_cubin(sm).ok_or_else(|| CliError::Runtime(format!("no fixture cubin for sm_{sm}")))?;
    let m = dev
        .load_cubin(cubin)
        .map_err(|e| CliError::Runtime(format!("loading {name}: {e}")))?;
    let empty = m.function("empty").map_err(rt("empty"))?;
    let one = LaunchConfig::for_num_elems(1);
    if args.verify {
        verify_copies(dev, if hw { 64 << 20 } else { 1 << 20 })?;
    }

    progress(&format!(
        "launch + sync: 200 warm-up, {round_trips} timed ({name})"
    ));
    let mut timed_round_trip = || RoundTrip::time(dev, &empty, one, &[]);
    for _ in 0..200 {
        timed_round_trip()?;
    }
    let before = dev.stats();
    let (mut samples, calls) =
        time_round_trips(round_trips as usize, Duration::ZERO, &mut timed_round_trip)?;
    let after = dev.stats();
    let written_ahead_round_trips = after.written_ahead - before.written_ahead;
    let repeated_round_trips = after.repeated - before.repeated;
    let prefetched_round_trips = after.early_prefetched - before.early_prefetched;
    let launch_sync = Spread::of(&mut samples)
        .ok_or_else(|| CliError::Runtime("no round trips measured".into()))?;
    let launch_call_us = median(calls);

    // Round trips of add1 on one element: with the same arguments every time, then with
    // arguments that change at every launch (either of two buffers): what a launch costs when
    // it repeats the kernel but not the call, against the same kernel repeated.
    let changing_n = (round_trips / 4).max(1);
    progress(&format!(
        "launch + sync of add1, same and changing arguments: {changing_n} timed each"
    ));
    let add1 = m.function("add1").map_err(rt("add1"))?;
    let (launch_sync_add1, launch_sync_changing, launch_call_add1_us, argument_only_round_trips) =
        add1_round_trips(dev, &add1, changing_n)?;

    let graph_n = (round_trips / 10).max(10);
    progress(&format!(
        "graphs of {GRAPH_LAUNCHES} launches + sync, written once and one by one: {graph_n} \
         timed each"
    ));
    let (graph_sync_us, graph_written_round_trips) = graph_round_trips(dev, &empty, graph_n)?;

    progress(&format!("back-to-back: {launches} launches"));
    let before = dev.stats();
    let t = Instant::now();
    let gap = Duration::from_nanos(args.launch_gap_ns.into());
    for _ in 0..launches {
        dev.launch(&empty, one, &[]).map_err(rt("launch"))?;
        spin_for(gap);
    }
    let submit_us = us(t.elapsed()) / f64::from(launches);
    dev.synchronize().map_err(rt("synchronize"))?;
    let back_to_back_us = us(t.elapsed()) / f64::from(launches);
    let after = dev.stats();
    let chained_back_to_back = after.chained - before.chained;
    let flusher_batches = after.flusher_published - before.flusher_published;
    let auto_defer_active = dev.auto_deferral_active();
    let prefetched_back_to_back = after.early_prefetched - before.early_prefetched;

    // Two launches, then the timeline polled (no wait or copy) until both ran: what automatic
    // deferral costs a program that waits for a held launch by other means. With --defer the
    // program must flush first, and does.
    progress("two launches, then polled to completion");
    let (pair_then_poll_us, pair_total_us) = pair_polls(dev, &empty)?;

    let c = copy_rates(dev, copy_bytes)?;

    progress(&format!("4-byte host-to-device copies: {small}"));
    let src = dev.alloc_host::<u32>(1).map_err(rt("pinned host memory"))?;
    let mut dst = dev.alloc::<u32>(1).map_err(rt("device memory"))?;
    let mut lat = Vec::with_capacity(small as usize);
    for _ in 0..small {
        let t = Instant::now();
        dev.dtod_copy(&src, &mut dst).map_err(rt("copy"))?;
        dev.synchronize().map_err(rt("copy"))?;
        lat.push(us(t.elapsed()));
    }
    let copy4_h2d_us = median(lat);
    drop((src, dst));

    Ok(GpuBench {
        device: dev.info().backend.clone(),
        launch_sync,
        launch_sync_add1,
        launch_sync_changing,
        launch_call_add1_us,
        argument_only_round_trips,
        back_to_back_us,
        launches,
        submit_us,
        copy_bytes,
        h2d_gbps: c.h2d_gbps,
        d2h_gbps: c.d2h_gbps,
        h2d_pageable_gbps: c.h2d_pageable_gbps,
        d2h_pageable_gbps: c.d2h_pageable_gbps,
        d2d_gbps: c.d2d_gbps,
        copy4_h2d_us,
        open_s,
        launch_call_us,
        chained_back_to_back,
        flusher_batches,
        pair_then_poll_us,
        pair_total_us,
        deferred_submits: dev.options().tuning.deferred_submits,
        auto_defer_active,
        auto_min_batch: dev.options().tuning.auto_defer_min_batch,
        launch_gap_ns: args.launch_gap_ns,
        prefetched_back_to_back,
        prefetched_round_trips,
        written_ahead_round_trips,
        repeated_round_trips,
        stats: dev.stats(),
        d2d_ce_gbps: c.d2d_ce_gbps,
        d2d_kernel: c.d2d_kernel,
        graph_sync_us,
        graph_written_round_trips,
        graph_round_trips: graph_n,
    })
}

/// Launches in the graph `nvbare bench` times (as many as a small training step).
pub const GRAPH_LAUNCHES: usize = 20;

/// `n` round trips (after 20 untimed) of a graph of [`GRAPH_LAUNCHES`] `empty` launches,
/// alternating with the same launches made one by one: both medians (µs), and how many of
/// the timed graph launches went as one submission.
fn graph_round_trips<B: CliBackend>(
    dev: &Device<B>,
    empty: &nvbare_core::device::Function<'_, '_, B>,
    n: u32,
) -> Result<([f64; 2], u64), CliError> {
    let one = LaunchConfig::for_num_elems(1);
    let nodes = (0..GRAPH_LAUNCHES)
        .map(|_| dev.graph_node(empty, one, &[]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(rt("graph"))?;
    let g = dev.create_graph(nodes).map_err(rt("graph"))?;
    let timed = || -> Result<([f64; 2], u64), CliError> {
        let (mut written, mut separate) = (Vec::new(), Vec::new());
        let mut before = 0;
        for i in 0..n + 20 {
            if i == 20 {
                before = dev.stats().graph_launches_written;
            }
            let t = Instant::now();
            dev.launch_graph(&g).map_err(rt("graph launch"))?;
            dev.synchronize().map_err(rt("synchronize"))?;
            let graph = us(t.elapsed());
            let t = Instant::now();
            for _ in 0..GRAPH_LAUNCHES {
                dev.launch(empty, one, &[]).map_err(rt("launch"))?;
            }
            dev.synchronize().map_err(rt("synchronize"))?;
            if i >= 20 {
                written.push(graph);
                separate.push(us(t.elapsed()));
            }
        }
        let count = dev.stats().graph_launches_written - before;
        Ok(([median(written), median(separate)], count))
    };
    let r = timed();
    dev.free_graph(g);
    r
}

/// Round trips of `add1` on one element, `n` timed with the same arguments every time, then
/// `n` with arguments that change at every launch (either of two buffers), checked: the two
/// spreads, the launch call's median in each, and how many of the changing ones wrote only
/// their arguments.
fn add1_round_trips<B: CliBackend>(
    dev: &Device<B>,
    add1: &nvbare_core::device::Function<'_, '_, B>,
    changing_n: u32,
) -> Result<(Spread, Spread, [f64; 2], u64), CliError> {
    let one = LaunchConfig::for_num_elems(1);
    let bufs = [
        dev.alloc_zeros::<u32>(1).map_err(rt("device memory"))?,
        dev.alloc_zeros::<u32>(1).map_err(rt("device memory"))?,
    ];
    let mut turn = 0usize;
    let mut same = 0u32;
    let changing = std::cell::Cell::new(false);
    let mut add1_round_trip = || {
        let buf = if changing.get() {
            turn += 1;
            &bufs[turn % 2]
        } else {
            same += 1;
            &bufs[0]
        };
        RoundTrip::time(dev, add1, one, &[buf.arg(), 1u32.into()])
    };
    // Per loop: the spread, the launch call's median, and how many timed launches wrote only
    // their changed arguments.
    let mut add1_spread = |changes: bool| -> Result<(Spread, f64, u64), CliError> {
        changing.set(changes);
        for _ in 0..100 {
            add1_round_trip()?;
        }
        let args_only = dev.stats().argument_only;
        let (mut samples, calls) =
            time_round_trips(changing_n as usize, Duration::ZERO, &mut add1_round_trip)?;
        let args_only = dev.stats().argument_only - args_only;
        let spread = Spread::of(&mut samples)
            .ok_or_else(|| CliError::Runtime("no round trips measured".into()))?;
        Ok((spread, median(calls), args_only))
    };
    let (launch_sync_add1, call_same, _) = add1_spread(false)?;
    let (launch_sync_changing, call_changing, argument_only_round_trips) = add1_spread(true)?;
    let done = turn as u32;
    let got = [
        dev.dtoh_copy(&bufs[0]).map_err(rt("copy out"))?[0],
        dev.dtoh_copy(&bufs[1]).map_err(rt("copy out"))?[0],
    ];
    if got != [same + done / 2, done.div_ceil(2)] {
        return Err(CliError::Runtime(format!(
            "{same} add1 round trips on one buffer, then {done} over two buffers in turn, \
             counted {got:?}: a launch ran with another launch's arguments"
        )));
    }
    Ok((
        launch_sync_add1,
        launch_sync_changing,
        [call_same, call_changing],
        argument_only_round_trips,
    ))
}

/// Two launches of `empty`, then the compute timeline polled until both ran, `PAIR_POLLS`
/// times: the medians from the second launch's return and from before the first, µs.
fn pair_polls<B: CliBackend>(
    dev: &Device<B>,
    empty: &nvbare_core::device::Function<'_, '_, B>,
) -> Result<(f64, f64), CliError> {
    let one = LaunchConfig::for_num_elems(1);
    let mut pair = Vec::with_capacity(PAIR_POLLS);
    let mut pair_total = Vec::with_capacity(PAIR_POLLS);
    for _ in 0..PAIR_POLLS {
        let t0 = Instant::now();
        dev.launch(empty, one, &[]).map_err(rt("launch"))?;
        dev.launch(empty, one, &[]).map_err(rt("launch"))?;
        if dev.options().tuning.deferred_submits > 0 {
            dev.flush().map_err(rt("flush"))?;
        }
        let t = Instant::now();
        loop {
            let [(submitted, done), _] = dev.timelines().map_err(rt("timeline"))?;
            if done >= submitted {
                break;
            }
            if t.elapsed() > dev.options().timeout {
                return Err(CliError::Runtime(format!(
                    "two launches did not complete within {:?} without a wait: held work was \
                     not published",
                    dev.options().timeout
                )));
            }
        }
        pair.push(us(t.elapsed()));
        pair_total.push(us(t0.elapsed()));
    }

    Ok((median(pair), median(pair_total)))
}

/// Copy rates of `nvbare bench`, GB/s.
struct CopyRates {
    h2d_gbps: f64,
    d2h_gbps: f64,
    d2d_gbps: f64,
    d2d_ce_gbps: f64,
    d2d_kernel: bool,
    h2d_pageable_gbps: f64,
    d2h_pageable_gbps: f64,
}

/// Bandwidth copies of `copy_bytes`: pinned host memory and device memory, then pageable.
fn copy_rates<B: CliBackend>(dev: &Device<B>, copy_bytes: u64) -> Result<CopyRates, CliError> {
    progress(&format!(
        "copies of {copy_bytes} bytes (pinned host memory)"
    ));
    let n = usize::try_from(copy_bytes)
        .map_err(|_| CliError::Usage(format!("--copy-bytes {copy_bytes} is too large")))?;
    let host = dev.alloc_host::<u8>(n).map_err(rt("pinned host memory"))?;
    let mut a = dev.alloc::<u8>(n).map_err(rt("device memory"))?;
    let mut b = dev.alloc::<u8>(n).map_err(rt("device memory"))?;
    let bandwidth = |src: &nvbare_core::device::DeviceBuffer<'_, B, u8>,
                     dst: &mut nvbare_core::device::DeviceBuffer<'_, B, u8>,
                     factor: f64,
                     path: CopyPath|
     -> Result<f64, CliError> {
        dev.dtod_copy_with(src, dst, path).map_err(rt("copy"))?;
        dev.synchronize().map_err(rt("copy"))?;
        let mut rates = Vec::with_capacity(10);
        for _ in 0..10 {
            let t = Instant::now();
            dev.dtod_copy_with(src, dst, path).map_err(rt("copy"))?;
            dev.synchronize().map_err(rt("copy"))?;
            rates.push(factor * copy_bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        Ok(median(rates))
    };
    let h2d_gbps = bandwidth(&host, &mut a, 1.0, CopyPath::Auto)?;
    let mut host = host;
    let d2h_gbps = bandwidth(&a, &mut host, 1.0, CopyPath::Auto)?;
    let d2d_gbps = bandwidth(&a, &mut b, 2.0, CopyPath::Auto)?;
    let d2d_ce_gbps = bandwidth(&a, &mut b, 2.0, CopyPath::CopyEngine)?;
    let d2d_kernel =
        dev.has_copy_kernel() && copy_bytes >= dev.options().tuning.kernel_copy_min_bytes;
    drop((host, b));

    progress(&format!(
        "copies of {copy_bytes} bytes (pageable host memory, through staging)"
    ));
    let mut pageable = vec![0x5au8; n];
    let mut rates = |to_device: bool| -> Result<f64, CliError> {
        let mut r = Vec::with_capacity(5);
        for _ in 0..5 {
            let t = Instant::now();
            if to_device {
                dev.htod_copy_into(&pageable, &mut a).map_err(rt("copy"))?;
                dev.synchronize().map_err(rt("copy"))?;
            } else {
                dev.dtoh_copy_into(&a, &mut pageable).map_err(rt("copy"))?;
            }
            r.push(copy_bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        Ok(median(r))
    };
    let h2d_pageable_gbps = rates(true)?;
    let d2h_pageable_gbps = rates(false)?;
    drop((pageable, a));

    Ok(CopyRates {
        h2d_gbps,
        d2h_gbps,
        d2d_gbps,
        d2d_ce_gbps,
        d2d_kernel,
        h2d_pageable_gbps,
        d2h_pageable_gbps,
    })
}

/// Runs `nvbare bench [--device DEV] [--json]`.
pub fn run(out: &mut dyn Write, args: GpuBenchArgs) -> Result<(), CliError> {
    let opts = args.device_options()?;
    progress(&format!("opening {}", args.device));
    let t = Instant::now();
    let builtin = !args.no_runtime && args.runtime_cubin.is_none();
    let any = open_device_with(
        args.device.clone(),
        opts,
        &nvbare::backend::FirmwareSource::default(),
        &mut crate::baremetal::PhasePrinter::quiet(),
        builtin,
    )?;
    if let Some(p) = &args.runtime_cubin {
        let bytes = input::read_at_most(p, input::MAX_CUBIN_BYTES, input::CUBIN)?;
        let cubin = nvbare_gsp_firmware::cubin::Cubin::parse(&bytes)
            .map_err(|e| CliError::Runtime(format!("{}: {e}", p.display())))?;
        with_device!(&any, dev => dev.install_copy_kernel(&cubin))
            .map_err(|e| CliError::Runtime(format!("installing {}: {e}", p.display())))?;
    }
    let open_s = t.elapsed().as_secs_f64();
    let r = with_device!(&any, dev => measure(dev, &args, open_s));
    crate::progress::clear();
    let r = r?;
    drop(any);
    let text = if args.json {
        r.to_json() + "\n"
    } else {
        r.table()
    };
    out.write_all(text.as_bytes())
        .map_err(|e| CliError::Runtime(format!("writing output: {e}")))
}

#[cfg(test)]
mod tests;
