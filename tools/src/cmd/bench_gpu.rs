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
//! * opening the device until it can launch.
//!
//! All times are `std::time::Instant` (`CLOCK_MONOTONIC`). Progress goes to stderr.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;

use crate::open::{CliBackend, demo_cubin, open_device};
use crate::{CliError, DeviceSpec, with_device};

/// Options of `nvbare bench` without a subcommand.
#[derive(Args, Debug, Clone)]
pub struct GpuBenchArgs {
    /// sim[:CHIP] or nvidia:N
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
    /// Bytes per bandwidth copy (default 1 GiB; 16 MiB on the simulator).
    #[arg(long, value_parser = super::bench::parse_size)]
    pub copy_bytes: Option<u64>,
    /// 4-byte copies timed (default 10000; 1000 on the simulator).
    #[arg(long)]
    pub small_copies: Option<u32>,
    /// Timeout of every wait, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
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
}

fn rt(what: &str) -> impl Fn(nvbare_core::device::DeviceError) -> CliError + '_ {
    move |e| CliError::Runtime(format!("{what}: {e}"))
}

fn progress(msg: &str) {
    eprintln!("nvbare bench: {msg}");
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
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

    progress(&format!(
        "launch + sync: 200 warm-up, {round_trips} timed ({name})"
    ));
    for _ in 0..200 {
        dev.launch(&empty, one, &[]).map_err(rt("launch"))?;
        dev.synchronize().map_err(rt("synchronize"))?;
    }
    let mut samples = Vec::with_capacity(round_trips as usize);
    for _ in 0..round_trips {
        let t = Instant::now();
        dev.launch(&empty, one, &[]).map_err(rt("launch"))?;
        dev.synchronize().map_err(rt("synchronize"))?;
        samples.push(us(t.elapsed()));
    }
    let launch_sync = Spread::of(&mut samples)
        .ok_or_else(|| CliError::Runtime("no round trips measured".into()))?;

    progress(&format!("back-to-back: {launches} launches"));
    let t = Instant::now();
    for _ in 0..launches {
        dev.launch(&empty, one, &[]).map_err(rt("launch"))?;
    }
    let submit_us = us(t.elapsed()) / f64::from(launches);
    dev.synchronize().map_err(rt("synchronize"))?;
    let back_to_back_us = us(t.elapsed()) / f64::from(launches);

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
                     factor: f64|
     -> Result<f64, CliError> {
        dev.dtod_copy(src, dst).map_err(rt("copy"))?;
        dev.synchronize().map_err(rt("copy"))?;
        let mut rates = Vec::with_capacity(10);
        for _ in 0..10 {
            let t = Instant::now();
            dev.dtod_copy(src, dst).map_err(rt("copy"))?;
            dev.synchronize().map_err(rt("copy"))?;
            rates.push(factor * copy_bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        Ok(median(rates))
    };
    let h2d_gbps = bandwidth(&host, &mut a, 1.0)?;
    let mut host = host;
    let d2h_gbps = bandwidth(&a, &mut host, 1.0)?;
    let d2d_gbps = bandwidth(&a, &mut b, 2.0)?;
    drop((host, a, b));

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

    Ok(GpuBench {
        device: dev.info().backend.clone(),
        launch_sync,
        back_to_back_us,
        launches,
        submit_us,
        copy_bytes,
        h2d_gbps,
        d2h_gbps,
        d2d_gbps,
        copy4_h2d_us,
        open_s,
    })
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl GpuBench {
    /// The JSON object of `tools/bench/README.md`.
    pub fn to_json(&self) -> String {
        let l = &self.launch_sync;
        format!(
            "{{\"backend\":\"nvbare\",\"device\":{},\"launch_sync_us\":{{\"median\":{},\"p10\":{},\
             \"p90\":{},\"n\":{}}},\"back_to_back_us_per_launch\":{},\"launches\":{},\
             \"submit_us_per_launch\":{},\"copy_bytes\":{},\"h2d_gbps\":{},\"d2h_gbps\":{},\"d2d_gbps\":{},\
             \"copy4_h2d_us\":{},\"open_s\":{}}}",
            json_str(&self.device),
            num(l.median),
            num(l.p10),
            num(l.p90),
            l.n,
            num(self.back_to_back_us),
            self.launches,
            num(self.submit_us),
            self.copy_bytes,
            num(self.h2d_gbps),
            num(self.d2h_gbps),
            num(self.d2d_gbps),
            num(self.copy4_h2d_us),
            num(self.open_s)
        )
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let l = &self.launch_sync;
        let mut s = String::new();
        s.push_str(&format!("nvbare bench on {}\n", self.device));
        s.push_str(&format!(
            "  launch + sync round trip   median {:.2} µs  (p10 {:.2}, p90 {:.2}, n {})\n",
            l.median, l.p10, l.p90, l.n
        ));
        s.push_str(&format!(
            "  back-to-back launches      {:.3} µs/launch ({} launches; CPU {:.3} µs/launch)\n",
            self.back_to_back_us, self.launches, self.submit_us
        ));
        s.push_str(&format!(
            "  H2D / D2H / D2D            {:.1} / {:.1} / {:.1} GB/s ({} bytes, pinned host)\n",
            self.h2d_gbps, self.d2h_gbps, self.d2d_gbps, self.copy_bytes
        ));
        s.push_str(&format!(
            "  4-byte H2D copy            {:.2} µs\n",
            self.copy4_h2d_us
        ));
        s.push_str(&format!(
            "  device open                {:.4} s\n",
            self.open_s
        ));
        s
    }
}

/// Runs `nvbare bench [--device DEV] [--json]`.
pub fn run(out: &mut dyn Write, args: GpuBenchArgs) -> Result<(), CliError> {
    let opts = DeviceOptions {
        timeout: Duration::from_millis(args.timeout_ms),
        ..Default::default()
    };
    progress(&format!("opening {}", args.device));
    let t = Instant::now();
    let any = open_device(args.device, opts)?;
    let open_s = t.elapsed().as_secs_f64();
    let r = with_device!(&any, dev => measure(dev, &args, open_s))?;
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
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Spread::of(&mut v).unwrap();
        assert_eq!((s.median, s.p10, s.p90, s.n), (50.0, 10.0, 90.0, 100));
        let mut one = vec![3.5];
        let s = Spread::of(&mut one).unwrap();
        assert_eq!((s.median, s.p10, s.p90), (3.5, 3.5, 3.5));
        assert_eq!(Spread::of(&mut []), None);
    }

    #[test]
    fn bench_runs_on_the_simulator_and_prints_the_schema() {
        let args = GpuBenchArgs {
            device: DeviceSpec::default(),
            json: true,
            round_trips: Some(50),
            launches: Some(200),
            copy_bytes: Some(1 << 20),
            small_copies: Some(20),
            timeout_ms: 2000,
        };
        let mut out = Vec::new();
        run(&mut out, args).unwrap();
        let s = String::from_utf8(out).unwrap();
        for key in [
            "\"backend\":\"nvbare\"",
            "\"launch_sync_us\":{\"median\":",
            "\"n\":50",
            "\"back_to_back_us_per_launch\":",
            "\"launches\":200",
            "\"copy_bytes\":1048576",
            "\"h2d_gbps\":",
            "\"d2h_gbps\":",
            "\"d2d_gbps\":",
            "\"copy4_h2d_us\":",
            "\"open_s\":",
        ] {
            assert!(s.contains(key), "{key} missing in {s}");
        }
        assert!(s.trim_end().ends_with('}') && !s.contains("NaN"), "{s}");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
