//! `nvbare bench p2p`: two GPUs in one process: correctness checks of peer copies and
//! cross-device waits, then peer copy bandwidth both ways (the numbers `tools/bench/cuda_p2p.cu`
//! measures with `cudaMemcpyPeer`, same JSON keys; `tools/bench/compare_p2p.sh` puts them side
//! by side).
//!
//! Checks (PASS/FAIL each; any FAIL makes the command fail):
//! * copies A → B and B → A of an odd size, pushed by the source's copy engine and pulled by the
//!   destination's, every element verified;
//! * a cross-device semaphore: B's channel acquires a semaphore A releases after work A could
//!   only start once the CPU opened a gate; nothing of B's may complete before;
//! * an event: A's pull of B's buffer waits for B's gated work, with no other ordering.
//!
//! On `nvidia:A,nvidia:B` both GPUs are opened together (`KernelBackend::open_group`: UVM VA
//! mode, one UVM VA space) so each can map the other's memory.
//!
//! Bandwidth: `--size` bytes (default 1 GiB, 64 MiB on the simulator), `--reps` copies per
//! direction after one warm-up, each copy timed from submission to completion on both devices
//! (like a synchronous `cudaMemcpyPeer`); GB/s = 10^9 bytes/s of data moved one way. The
//! destination buffers start zeroed and are verified after the timed copies.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use nvbare_core::device::{
    Backend, Device, DeviceBuffer, DeviceError, DeviceOptions, PeerLink, PeerMode, PeerPath,
};
use nvbare_sim::system::Topology;
use serde::Serialize;

use super::bench::parse_size;
use super::json::{places3, places6};
use crate::{CliError, DeviceSpec};

/// How the two devices may exchange data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Direct GPU-to-GPU only; an error without a P2P path.
    Direct,
    /// Direct when possible, else through host memory.
    Staged,
}

/// Whose copy engine runs a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// The source device's (it writes the peer's memory: a push).
    Src,
    /// The destination device's (it reads the peer's memory: a pull).
    Dst,
}

/// The simulated host's topology (simulator only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimTopologyArg {
    /// NVLink / PCIe P2P between GPUs of the same chip.
    P2p,
    /// No P2P path (different IOMMU domains): only host memory is shared.
    NoP2p,
}

/// Options of `nvbare bench p2p`.
#[derive(Args, Debug, Clone)]
pub struct P2pArgs {
    /// The two devices, A,B: sim:CHIP,sim:CHIP (bare metal, one simulated host), vfio:A,vfio:B
    /// (one VFIO peer group) or nvidia:N,nvidia:M.
    #[arg(long, default_value = "sim:gh100,sim:gh100", value_parser = parse_pair)]
    pub devices: DevicePair,
    /// Bytes per copy (suffix K, M, G); default 1G, 64M on the simulator.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Timed copies per direction (the median is reported).
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// direct: fail without a P2P path; staged: fall back to copies through host memory.
    #[arg(long, value_enum, default_value_t = ModeArg::Direct)]
    pub mode: ModeArg,
    /// Whose copy engine runs the timed copies.
    #[arg(long, value_enum, default_value_t = EngineArg::Src)]
    pub engine: EngineArg,
    /// Only run the correctness checks.
    #[arg(long)]
    pub checks_only: bool,
    /// Print one JSON object on stdout (progress and checks go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Simulated host topology.
    #[arg(long, value_enum, default_value_t = SimTopologyArg::P2p)]
    pub sim_topology: SimTopologyArg,
    /// Timeout of every wait, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub timeout_ms: u64,
    /// Do not install the runtime copy kernel: every peer copy runs on a copy engine (by
    /// default large copies between video memory run on the copy kernel of the device
    /// `--engine` names).
    #[arg(long)]
    pub no_runtime: bool,
}

fn topology(t: SimTopologyArg) -> Topology {
    match t {
        SimTopologyArg::P2p => Topology::P2p,
        SimTopologyArg::NoP2p => Topology::NoP2p,
    }
}

/// Two `--device` values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePair(pub DeviceSpec, pub DeviceSpec);

impl std::fmt::Display for DevicePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.0, self.1)
    }
}

/// Parses `A,B`.
pub fn parse_pair(s: &str) -> Result<DevicePair, String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: give two devices, A,B (e.g. nvidia:0,nvidia:1)"))?;
    let a: DeviceSpec = a.trim().parse().map_err(|e| format!("{e}"))?;
    let b: DeviceSpec = b.trim().parse().map_err(|e| format!("{e}"))?;
    Ok(DevicePair(a, b))
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Runs `nvbare bench p2p`.
pub fn run(out: &mut dyn Write, args: P2pArgs) -> Result<(), CliError> {
    if args.reps == 0 {
        return Err(CliError::Usage("--reps must be at least 1".into()));
    }
    let opts = DeviceOptions {
        timeout: Duration::from_millis(args.timeout_ms),
        ..DeviceOptions::default()
    };
    match args.devices {
        DevicePair(DeviceSpec::Sim(ca), DeviceSpec::Sim(cb)) => {
            // Bare metal: both boot GSP-RM, build their own page tables and reach each other
            // through BAR1 windows of one simulated host.
            let t = Instant::now();
            let (sys, mut backends) = crate::baremetal::open_sim_group(
                &[ca, cb],
                topology(args.sim_topology),
                &nvbare::backend::FirmwareSource::default(),
                &mut crate::baremetal::PhasePrinter::quiet(),
            )?;
            let (Some(bb), Some(ba)) = (backends.pop(), backends.pop()) else {
                return Err(CliError::Runtime(
                    "opening the simulated pair failed".into(),
                ));
            };
            let a = Device::open(ba, opts)
                .map_err(|e| CliError::Runtime(format!("opening simulated GPU 0: {e}")))?;
            let b = Device::open(bb, opts)
                .map_err(|e| CliError::Runtime(format!("opening simulated GPU 1: {e}")))?;
            let opened = t.elapsed();
            let size = args.size.unwrap_or(64 << 20);
            let r = bench(out, &args, &a, &b, size, opened, "simulator, bare metal");
            drop((a, b));
            drop(sys);
            r
        }
        DevicePair(DeviceSpec::Vfio(ba), DeviceSpec::Vfio(bb)) => {
            if ba == bb {
                return Err(CliError::Usage(format!(
                    "--devices vfio:{ba},vfio:{bb}: two different GPUs are needed"
                )));
            }
            let t = Instant::now();
            // One peer group: one VFIO container, each BAR1 mapped for the other's DMA.
            let (group, mut backends) = crate::baremetal::open_vfio_group(
                &[ba, bb],
                &nvbare::backend::FirmwareSource::default(),
                &mut crate::baremetal::PhasePrinter::quiet(),
            )?;
            let (Some(b1), Some(b0)) = (backends.pop(), backends.pop()) else {
                return Err(CliError::Runtime("opening the GPU pair failed".into()));
            };
            let a = Device::open(b0, opts)
                .map_err(|e| CliError::Runtime(format!("opening vfio:{ba}: {e}")))?;
            let b = Device::open(b1, opts)
                .map_err(|e| CliError::Runtime(format!("opening vfio:{bb}: {e}")))?;
            let opened = t.elapsed();
            let r = bench(
                out,
                &args,
                &a,
                &b,
                args.size.unwrap_or(1 << 30),
                opened,
                "VFIO, bare metal",
            );
            drop((a, b));
            drop(group);
            r
        }
        #[cfg(feature = "nvidia-kmod")]
        DevicePair(DeviceSpec::Nvidia(ia), DeviceSpec::Nvidia(ib)) => {
            if ia == ib {
                return Err(CliError::Usage(format!(
                    "--devices nvidia:{ia},nvidia:{ib}: two different GPUs are needed"
                )));
            }
            let t = Instant::now();
            // Opened together: one UVM VA space, so each can map the other's memory.
            let mut group = nvbare_pci_host::nvidia::KernelBackend::open_group(&[ia, ib])?;
            let (Some(bb), Some(ba)) = (group.pop(), group.pop()) else {
                return Err(CliError::Runtime("opening the GPU pair failed".into()));
            };
            let a = Device::open(ba, opts)
                .map_err(|e| CliError::Runtime(format!("opening nvidia:{ia}: {e}")))?;
            let b = Device::open(bb, opts)
                .map_err(|e| CliError::Runtime(format!("opening nvidia:{ib}: {e}")))?;
            let opened = t.elapsed();
            bench(
                out,
                &args,
                &a,
                &b,
                args.size.unwrap_or(1 << 30),
                opened,
                "nvidia.ko",
            )
        }
        #[cfg(not(feature = "nvidia-kmod"))]
        DevicePair(DeviceSpec::Nvidia(ia), DeviceSpec::Nvidia(_)) => {
            let _ = opts;
            Err(crate::kmod::not_built(ia))
        }
        DevicePair(a, b) => Err(CliError::Usage(format!(
            "{a},{b}: two devices of one kind are needed: sim:CHIP,sim:CHIP (bare metal, one \
             simulated host), vfio:A,vfio:B or nvidia:N,nvidia:M"
        ))),
    }
}

/// A named check's outcome.
struct Check {
    name: &'static str,
    result: Result<String, String>,
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
        .collect()
}

fn first_mismatch(got: &[u32], want: &[u32]) -> Option<(usize, u32, u32)> {
    if got.len() != want.len() {
        return Some((got.len().min(want.len()), 0, 0));
    }
    got.iter()
        .zip(want)
        .position(|(g, w)| g != w)
        .map(|i| (i, got[i], want[i]))
}

fn verify<B: Backend>(
    dev: &Device<B>,
    buf: &DeviceBuffer<'_, B, u32>,
    want: &[u32],
) -> Result<(), String> {
    let got = dev
        .dtoh_copy(buf)
        .map_err(|e| format!("reading back: {e}"))?;
    match first_mismatch(&got, want) {
        None => Ok(()),
        Some((i, g, w)) => Err(format!(
            "element {i} of {} is {g:#x}, expected {w:#x}",
            want.len()
        )),
    }
}

fn e2s(what: &str) -> impl Fn(DeviceError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Copies both ways with the source's and the destination's engine, verified.
fn check_copies<B: Backend>(
    link: &PeerLink<'_, B>,
    a: &Device<B>,
    b: &Device<B>,
) -> Result<String, String> {
    // Larger than the staging buffer, and not a whole number of pages.
    let n = (5 << 20) / 4 + 3;
    let (pa, pb) = (pattern(n, 0x1111), pattern(n, 0x2222));
    let src_a = a.htod_copy(&pa).map_err(e2s("upload on A"))?;
    let src_b = b.htod_copy(&pb).map_err(e2s("upload on B"))?;
    for (engine, name) in [(false, "push"), (true, "pull")] {
        let mut dst_b = b.alloc_zeros::<u32>(n).map_err(e2s("alloc on B"))?;
        let mut dst_a = a.alloc_zeros::<u32>(n).map_err(e2s("alloc on A"))?;
        if engine {
            b.dtod_peer_copy(link, &src_a, &mut dst_b)
                .map_err(e2s("A -> B pulled by B"))?;
            a.dtod_peer_copy(link, &src_b, &mut dst_a)
                .map_err(e2s("B -> A pulled by A"))?;
        } else {
            link.copy(&src_a, &mut dst_b).map_err(e2s("A -> B"))?;
            link.copy(&src_b, &mut dst_a).map_err(e2s("B -> A"))?;
        }
        verify(b, &dst_b, &pa).map_err(|e| format!("A -> B ({name}): {e}"))?;
        verify(a, &dst_a, &pb).map_err(|e| format!("B -> A ({name}): {e}"))?;
    }
    Ok(format!("{} bytes each way, pushed and pulled", n * 4))
}

/// B acquires a semaphore A releases after gated work.
fn check_semaphore<B: Backend>(
    link: &PeerLink<'_, B>,
    a: &Device<B>,
    b: &Device<B>,
) -> Result<String, String> {
    if !link.gpu_waits() {
        return Ok("skipped: the devices cannot map each other's host memory".into());
    }
    let n = 1 << 18;
    let gate = link.semaphore(a).map_err(e2s("gate semaphore"))?;
    let sem = link.semaphore(b).map_err(e2s("semaphore"))?;
    let (pa, pb) = (pattern(n, 0x3333), pattern(n, 0x4444));
    let src_a = a.htod_copy(&pa).map_err(e2s("upload on A"))?;
    let src_b = b.htod_copy(&pb).map_err(e2s("upload on B"))?;
    let mut mid_a = a.alloc_zeros::<u32>(n).map_err(e2s("alloc on A"))?;
    let mut dst_b = b.alloc_zeros::<u32>(n).map_err(e2s("alloc on B"))?;
    a.synchronize().map_err(e2s("A"))?;
    b.synchronize().map_err(e2s("B"))?;

    gate.wait(a, 1).map_err(e2s("A waits for the gate"))?;
    a.dtod_copy(&src_a, &mut mid_a).map_err(e2s("A's copy"))?;
    sem.release(a, 5).map_err(e2s("A releases"))?;
    sem.wait(b, 5).map_err(e2s("B acquires"))?;
    b.dtod_copy(&src_b, &mut dst_b).map_err(e2s("B's copy"))?;
    // Give the GPUs time to (wrongly) run past the closed gate.
    std::thread::sleep(Duration::from_millis(20));
    let ta = a.timelines().map_err(e2s("A's timelines"))?;
    let tb = b.timelines().map_err(e2s("B's timelines"))?;
    let value = sem.value().map_err(e2s("reading the semaphore"))?;
    if ta[1].1 >= ta[1].0 || tb[1].1 >= tb[1].0 || value != 0 {
        let _ = gate.set(1);
        return Err(format!(
            "work ran past a closed gate (A copy timeline {}/{}, B {}/{}, semaphore {value})",
            ta[1].1, ta[1].0, tb[1].1, tb[1].0
        ));
    }
    gate.set(1).map_err(e2s("opening the gate"))?;
    b.synchronize().map_err(e2s("B after the gate opened"))?;
    a.synchronize().map_err(e2s("A after the gate opened"))?;
    let value = sem.value().map_err(e2s("reading the semaphore"))?;
    if value != 5 {
        return Err(format!("the semaphore reads {value}, A released 5"));
    }
    verify(a, &mid_a, &pa).map_err(|e| format!("A's gated copy: {e}"))?;
    verify(b, &dst_b, &pb).map_err(|e| format!("B's copy: {e}"))?;
    Ok("B's channel waited for A's release; A's for the CPU".into())
}

/// A's pull of B's buffer, ordered only by an event, sees B's gated write.
fn check_event<B: Backend>(
    link: &PeerLink<'_, B>,
    a: &Device<B>,
    b: &Device<B>,
) -> Result<String, String> {
    if !link.is_direct() || !link.gpu_waits() {
        return Ok("skipped: no direct path".into());
    }
    let n = 1 << 18;
    let gate = link.semaphore(b).map_err(e2s("gate semaphore"))?;
    let data = pattern(n, 0x5555);
    let staged = b.htod_copy(&data).map_err(e2s("upload on B"))?;
    let mut buf_b = b.alloc_zeros::<u32>(n).map_err(e2s("alloc on B"))?;
    let mut got = a.alloc_zeros::<u32>(n).map_err(e2s("alloc on A"))?;
    b.synchronize().map_err(e2s("B"))?;
    gate.wait(b, 1).map_err(e2s("B waits for the gate"))?;
    b.dtod_copy(&staged, &mut buf_b).map_err(e2s("B's copy"))?;
    let ev = b.record_event().map_err(e2s("event"))?;
    link.wait_event(a, &ev)
        .map_err(e2s("A waits for the event"))?;
    let on_a = link.map(&buf_b).map_err(e2s("mapping B's buffer into A"))?;
    link.copy_from_peer(&on_a, &mut got)
        .map_err(e2s("A's pull"))?;
    std::thread::sleep(Duration::from_millis(20));
    let t = a.timelines().map_err(e2s("A's timelines"))?;
    if t[1].1 >= t[1].0 {
        let _ = gate.set(1);
        return Err(format!(
            "A's pull completed before B's event (copy timeline {}/{})",
            t[1].1, t[1].0
        ));
    }
    gate.set(1).map_err(e2s("opening the gate"))?;
    a.synchronize().map_err(e2s("A after the gate opened"))?;
    on_a.finish().map_err(e2s("unmapping"))?;
    verify(a, &got, &data).map_err(|e| format!("A's pull: {e}"))?;
    Ok("A's pull waited for B's event and saw B's data".into())
}

/// Timings of one direction.
#[derive(Debug, Clone, Default)]
struct Dir {
    secs: Vec<f64>,
}

impl Dir {
    fn median(&self) -> f64 {
        let mut v = self.secs.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
    fn gbps(&self, bytes: u64) -> f64 {
        let m = self.median();
        if m > 0.0 { bytes as f64 / m / 1e9 } else { 0.0 }
    }
    fn min_max_gbps(&self, bytes: u64) -> (f64, f64) {
        let rate = |s: f64| if s > 0.0 { bytes as f64 / s / 1e9 } else { 0.0 };
        let lo = self.secs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.secs.iter().copied().fold(0.0, f64::max);
        (rate(hi), rate(lo))
    }
}

/// `nvbare bench p2p --json`: one object (tools/bench/README.md, "Peer to peer"), keys in
/// the order it has always had.
#[derive(Serialize)]
struct P2pJson<'a> {
    backend: &'static str,
    devices: [&'a str; 2],
    path: &'static str,
    path_detail: String,
    #[serde(serialize_with = "places6")]
    enable_s: f64,
    #[serde(serialize_with = "places6")]
    open_s: f64,
    checks: ChecksJson<'a>,
    /// The timed copies' keys, at the top level; absent when none ran.
    #[serde(flatten)]
    copies: Option<P2pCopiesJson>,
}

/// The checks as `{"name": passed, ...}`, in the order they ran.
struct ChecksJson<'a>(&'a [Check]);

impl Serialize for ChecksJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|c| (c.name, c.result.is_ok())))
    }
}

/// The timed copies of `nvbare bench p2p --json`.
#[derive(Serialize)]
struct P2pCopiesJson {
    copy_bytes: u64,
    reps: u32,
    engine: &'static str,
    copy_path: &'static str,
    #[serde(serialize_with = "places3")]
    p2p_a_to_b_gbps: f64,
    #[serde(serialize_with = "places3")]
    p2p_b_to_a_gbps: f64,
    p2p_a_to_b: DirJson,
    p2p_b_to_a: DirJson,
    verified: bool,
}

/// One direction's timings in the JSON.
#[derive(Serialize)]
struct DirJson {
    #[serde(serialize_with = "places3")]
    median_gbps: f64,
    #[serde(serialize_with = "places3")]
    min_gbps: f64,
    #[serde(serialize_with = "places3")]
    max_gbps: f64,
    #[serde(serialize_with = "places6")]
    median_s: f64,
}

impl DirJson {
    fn of(d: &Dir, bytes: u64) -> DirJson {
        let (min_gbps, max_gbps) = d.min_max_gbps(bytes);
        DirJson {
            median_gbps: d.gbps(bytes),
            min_gbps,
            max_gbps,
            median_s: d.median(),
        }
    }
}

/// One timed copy from `src` (on device `s`) to `dst` (on the other), waited for on both.
fn timed_copy<B: Backend>(
    link: &PeerLink<'_, B>,
    engine: EngineArg,
    src: &DeviceBuffer<'_, B, u32>,
    dst: &mut DeviceBuffer<'_, B, u32>,
    src_dev: &Device<B>,
    dst_dev: &Device<B>,
) -> Result<f64, DeviceError> {
    let t = Instant::now();
    match engine {
        EngineArg::Src => src_dev.dtod_peer_copy(link, src, dst)?,
        EngineArg::Dst => dst_dev.dtod_peer_copy(link, src, dst)?,
    }
    src_dev.synchronize()?;
    dst_dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

/// Timed copies through mappings made once (the mapping is not part of the time).
#[allow(clippy::too_many_arguments)]
fn timed_mapped<B: Backend>(
    link: &PeerLink<'_, B>,
    engine: EngineArg,
    src: &DeviceBuffer<'_, B, u32>,
    dst: &mut DeviceBuffer<'_, B, u32>,
    src_dev: &Device<B>,
    dst_dev: &Device<B>,
    reps: u32,
) -> Result<Dir, DeviceError> {
    let mut d = Dir::default();
    match engine {
        EngineArg::Src => {
            let remote = link.map(dst)?;
            for i in 0..=reps {
                let t = Instant::now();
                link.copy_to_peer(src, &remote)?;
                src_dev.synchronize()?;
                dst_dev.synchronize()?;
                if i > 0 {
                    d.secs.push(t.elapsed().as_secs_f64());
                }
            }
            remote.finish()?;
        }
        EngineArg::Dst => {
            let remote = link.map(src)?;
            for i in 0..=reps {
                let t = Instant::now();
                link.copy_from_peer(&remote, dst)?;
                dst_dev.synchronize()?;
                src_dev.synchronize()?;
                if i > 0 {
                    d.secs.push(t.elapsed().as_secs_f64());
                }
            }
            remote.finish()?;
        }
    }
    Ok(d)
}

/// The timed copies in both directions (`--reps` after a warm-up), their data verified after;
/// a failed verification counts in `failed`. Returns both directions' times and whether both
/// verified.
fn bandwidth<B: Backend>(
    log: &mut dyn Write,
    args: &P2pArgs,
    link: &PeerLink<'_, B>,
    (a, b): (&Device<B>, &Device<B>),
    size: u64,
    kernel_path: bool,
    failed: &mut u32,
) -> Result<(Dir, Dir, bool), CliError> {
    let n = usize::try_from(size / 4)
        .map_err(|_| CliError::Usage(format!("--size {size} is too large")))?;
    let bytes = n as u64 * 4;
    writeln!(
        log,
        "  bandwidth: {} MiB per copy, {} timed copies per direction after a warm-up, \
         {} of the {}",
        bytes >> 20,
        args.reps,
        if kernel_path {
            "copy kernel"
        } else {
            "copy engine"
        },
        match args.engine {
            EngineArg::Src => "source (push)",
            EngineArg::Dst => "destination (pull)",
        }
    )
    .map_err(io)?;
    let rt = |what: &'static str| move |e: DeviceError| CliError::Runtime(format!("{what}: {e}"));
    let (pa, pb) = (pattern(n, 0xa0a0), pattern(n, 0xb0b0));
    let src_a = a.htod_copy(&pa).map_err(rt("uploading on A"))?;
    let src_b = b.htod_copy(&pb).map_err(rt("uploading on B"))?;
    let mut dst_b = b.alloc_zeros::<u32>(n).map_err(rt("allocating on B"))?;
    let mut dst_a = a.alloc_zeros::<u32>(n).map_err(rt("allocating on A"))?;
    let (ab, ba) = if link.is_direct() {
        (
            timed_mapped(link, args.engine, &src_a, &mut dst_b, a, b, args.reps)
                .map_err(rt("A -> B"))?,
            timed_mapped(link, args.engine, &src_b, &mut dst_a, b, a, args.reps)
                .map_err(rt("B -> A"))?,
        )
    } else {
        let mut ab = Dir::default();
        let mut ba = Dir::default();
        for i in 0..=args.reps {
            let s =
                timed_copy(link, args.engine, &src_a, &mut dst_b, a, b).map_err(rt("A -> B"))?;
            let t =
                timed_copy(link, args.engine, &src_b, &mut dst_a, b, a).map_err(rt("B -> A"))?;
            if i > 0 {
                ab.secs.push(s);
                ba.secs.push(t);
            }
        }
        (ab, ba)
    };
    let ok_ab = verify(b, &dst_b, &pa);
    let ok_ba = verify(a, &dst_a, &pb);
    for (dir, ok) in [("A -> B", &ok_ab), ("B -> A", &ok_ba)] {
        match ok {
            Ok(()) => writeln!(log, "  PASS  {dir} data after the timed copies verified"),
            Err(e) => {
                *failed += 1;
                writeln!(log, "  FAIL  {dir} data after the timed copies: {e}")
            }
        }
        .map_err(io)?;
    }
    for (name, d) in [("A -> B", &ab), ("B -> A", &ba)] {
        let (lo, hi) = d.min_max_gbps(bytes);
        writeln!(
            log,
            "  {name}: {:>9.2} GB/s median ({:.2}..{:.2}), {:.3} ms per copy",
            d.gbps(bytes),
            lo,
            hi,
            d.median() * 1e3
        )
        .map_err(io)?;
    }
    Ok((ab, ba, ok_ab.is_ok() && ok_ba.is_ok()))
}

#[allow(clippy::too_many_arguments)]
fn bench<B: Backend>(
    out: &mut dyn Write,
    args: &P2pArgs,
    a: &Device<B>,
    b: &Device<B>,
    size: u64,
    opened: Duration,
    what: &str,
) -> Result<(), CliError> {
    // Human-readable lines go to stdout, or to stderr with --json.
    let mut err = std::io::stderr();
    let log: &mut dyn Write = if args.json { &mut err } else { &mut *out };
    let (na, nb) = (a.info().backend.clone(), b.info().backend.clone());
    writeln!(
        log,
        "bench p2p ({what}): A = {na}, B = {nb}; opened in {opened:.2?}"
    )
    .map_err(io)?;
    if !args.no_runtime {
        crate::open::install_runtime(a);
        crate::open::install_runtime(b);
    }
    // Whether the timed copies run on the copy kernel (the rule `PeerLink` applies: installed
    // on both, since each direction is copied by a different device, and large enough).
    let kernel_path = a.has_copy_kernel()
        && b.has_copy_kernel()
        && size
            >= a.options()
                .tuning
                .kernel_copy_min_bytes
                .max(b.options().tuning.kernel_copy_min_bytes);
    let mode = match args.mode {
        ModeArg::Direct => PeerMode::Direct,
        ModeArg::Staged => PeerMode::AllowHostStaging,
    };
    let t = Instant::now();
    let link = a
        .enable_peer_access(b, mode)
        .map_err(|e| CliError::Runtime(format!("enabling peer access: {e}")))?;
    let enable_s = t.elapsed().as_secs_f64();
    writeln!(
        log,
        "  path: {} (enabled in {:.2} ms); GPU-side waits between the devices: {}",
        link.path(),
        enable_s * 1e3,
        if link.gpu_waits() { "yes" } else { "no (CPU)" }
    )
    .map_err(io)?;

    let checks = [
        Check {
            name: "copies A->B and B->A (push and pull), verified",
            result: check_copies(&link, a, b),
        },
        Check {
            name: "cross-device semaphore (B acquires what A releases)",
            result: check_semaphore(&link, a, b),
        },
        Check {
            name: "event orders A's peer read after B's gated write",
            result: check_event(&link, a, b),
        },
    ];
    let mut failed = 0;
    for c in &checks {
        match &c.result {
            Ok(detail) => writeln!(log, "  PASS  {}: {detail}", c.name),
            Err(e) => {
                failed += 1;
                writeln!(log, "  FAIL  {}: {e}", c.name)
            }
        }
        .map_err(io)?;
    }

    let bw = if args.checks_only {
        None
    } else {
        Some(bandwidth(
            log,
            args,
            &link,
            (a, b),
            size,
            kernel_path,
            &mut failed,
        )?)
    };

    if args.json {
        let path = match link.path() {
            PeerPath::Direct(_) => "direct",
            PeerPath::HostStaging { .. } => "host_staging",
        };
        let copies = bw.as_ref().map(|(ab, ba, ok)| {
            let bytes = size / 4 * 4;
            P2pCopiesJson {
                copy_bytes: bytes,
                reps: args.reps,
                engine: match args.engine {
                    EngineArg::Src => "source",
                    EngineArg::Dst => "destination",
                },
                copy_path: if kernel_path { "kernel" } else { "copy engine" },
                p2p_a_to_b_gbps: ab.gbps(bytes),
                p2p_b_to_a_gbps: ba.gbps(bytes),
                p2p_a_to_b: DirJson::of(ab, bytes),
                p2p_b_to_a: DirJson::of(ba, bytes),
                verified: *ok,
            }
        });
        let j = P2pJson {
            backend: "nvbare",
            devices: [&na, &nb],
            path,
            path_detail: link.path().to_string(),
            enable_s,
            open_s: opened.as_secs_f64(),
            checks: ChecksJson(&checks),
            copies,
        };
        let j = serde_json::to_string(&j)
            .map_err(|e| CliError::Runtime(format!("writing the JSON: {e}")))?;
        writeln!(out, "{j}").map_err(io)?;
    }
    drop(link);
    if failed > 0 {
        return Err(CliError::Runtime(format!(
            "{failed} peer-to-peer check(s) failed (see FAIL above)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::chip::Chipset;

    fn args(devices: &str) -> P2pArgs {
        P2pArgs {
            devices: parse_pair(devices).unwrap(),
            size: Some(4 << 20),
            reps: 2,
            mode: ModeArg::Direct,
            engine: EngineArg::Src,
            checks_only: false,
            json: false,
            sim_topology: SimTopologyArg::P2p,
            timeout_ms: 5000,
            no_runtime: false,
        }
    }

    #[test]
    fn pairs_parse() {
        assert_eq!(
            parse_pair("nvidia:0,nvidia:1").unwrap(),
            DevicePair(DeviceSpec::Nvidia(0), DeviceSpec::Nvidia(1))
        );
        assert_eq!(
            parse_pair("sim:ad102, sim:ad102").unwrap(),
            DevicePair(
                DeviceSpec::Sim(Chipset::AD102),
                DeviceSpec::Sim(Chipset::AD102)
            )
        );
        assert!(parse_pair("nvidia:0").is_err());
        assert!(parse_pair("nvidia:0,gpu").is_err());
    }

    #[test]
    fn runs_on_two_simulated_gpus_and_verifies() {
        let mut out = Vec::new();
        run(&mut out, args("sim:gh100,sim:gh100")).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s.matches("PASS").count(), 5, "{s}");
        assert!(!s.contains("FAIL"), "{s}");
        assert!(s.contains("A -> B:") && s.contains("B -> A:"), "{s}");
        assert!(s.contains("direct (simulated PCIe BAR1 P2P"), "{s}");
        assert!(s.contains("bare metal"), "{s}");

        let mut a = args("sim:ad102,sim:ad102");
        a.engine = EngineArg::Dst;
        a.json = true;
        let mut out = Vec::new();
        run(&mut out, a).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("{\"backend\":\"nvbare\""), "{s}");
        for key in [
            "\"p2p_a_to_b_gbps\":",
            "\"p2p_b_to_a_gbps\":",
            "\"copy_bytes\":4194304",
            "\"verified\":true",
            "\"engine\":\"destination\"",
        ] {
            assert!(s.contains(key), "{key} in {s}");
        }
        assert_eq!(s.lines().count(), 1, "JSON only on stdout: {s}");
    }

    #[test]
    fn no_p2p_is_an_error_unless_staging_is_asked_for() {
        for pair in ["sim:gh100,sim:gh100", "sim:ad102,sim:ad102"] {
            let mut a = args(pair);
            a.sim_topology = SimTopologyArg::NoP2p;
            let e = run(&mut Vec::new(), a.clone()).unwrap_err().to_string();
            assert!(
                e.contains("no P2P path") && e.contains("--mode staged"),
                "{pair}: {e}"
            );
            a.mode = ModeArg::Staged;
            a.size = Some(1 << 20);
            let mut out = Vec::new();
            run(&mut out, a).unwrap();
            let s = String::from_utf8(out).unwrap();
            assert!(s.contains("host staging"), "{pair}: {s}");
            assert!(s.contains("skipped: no direct path"), "{pair}: {s}");
            assert!(!s.contains("FAIL"), "{pair}: {s}");
        }

        // The error `run` gives for a pair of devices.
        let fails = |pair: &str| run(&mut Vec::new(), args(pair)).unwrap_err().to_string();
        for pair in ["sim:gh100,sim:ad102", "sim:ad102,sim:gb202"] {
            let e = fails(pair);
            assert!(e.contains("same architecture"), "{pair}: {e}");
        }
        assert!(parse_pair("sim:gh100,sim-rm:gh100").is_err());
        // vfio: one peer group; this machine has no VFIO, which the error says.
        if !std::path::Path::new("/dev/vfio/vfio").exists() {
            let e = fails("vfio:0000:01:00.0,vfio:0000:02:00.0");
            assert!(e.contains("VFIO is not available"), "{e}");
        }
        let e = fails("vfio:0000:01:00.0,vfio:0000:01:00.0");
        assert!(e.contains("two different GPUs"), "{e}");
        let e = fails("sim:gh100,nvidia:1");
        assert!(e.contains("two devices of one kind"), "{e}");
        let e = fails("nvidia:1,nvidia:1");
        assert!(e.contains("two different GPUs"), "{e}");
    }
}
