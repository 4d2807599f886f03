//! `nvbare bench rpc`: GSP RPC round trips through the message queues, on the simulator.
//!
//! Each round trip is a GSP_RM_CONTROL carrying `size` bytes of params each way (the
//! emulator's test-transform control), so the numbers cover the whole path: building the
//! RPC, checksumming and writing it into the command ring, the doorbell, the emulator
//! reading, validating and answering it, and the driver validating and copying the reply.
//!
//! The emulator runs inside the doorbell write, on the same thread, so wall time per RPC
//! = driver work + emulator work. The emulator measures its own time (`EmuStats::busy`,
//! `Instant` around every pump); the driver-side cost is the difference. The driver side
//! includes what a real host would pay too (queue bookkeeping, checksums, copies into and
//! out of DMA memory) plus the simulator's DMA and MMIO plumbing (a mutex per access).

use std::io::Write;
use std::time::{Duration, Instant};

use nvbare_core::gsp::events::{NV_VGPU_MSG_EVENT_GSP_INIT_DONE, NoHandler};
use nvbare_core::gsp::msgq::{MsgQueue, SharedMemLayout};
use nvbare_core::gsp::rpc::{ClientConfig, GspConfig, GspRpc};
use nvbare_core::hal::DmaAllocator;
use nvbare_core::rm::{Handle, class};
use nvbare_sim::gsp::mini_rm::MINI_RM_CTRL_CMD_TEST_TRANSFORM;
use nvbare_sim::gsp::{EmuClock, EmulatorConfig, GspEmulator, MiniRm};
use nvbare_sim::{ChipModel, SimConfig, SimGpu};

use serde::Serialize;

use super::json::places3;
use crate::{CliError, DeviceSpec};

/// Params sizes measured when none is given: one element, several, and continuation records.
pub const DEFAULT_SIZES: [usize; 6] = [0, 256, 4000, 16_000, 65_000, 200_000];

/// One measured size.
#[derive(Debug, Clone, Copy)]
pub struct RpcBench {
    /// Params bytes each way.
    pub size: usize,
    /// Round trips.
    pub count: u32,
    /// Wall time.
    pub total: Duration,
    /// Of it, time inside the emulator.
    pub emulator: Duration,
}

impl RpcBench {
    /// Round trips per second.
    pub fn per_second(&self) -> f64 {
        self.count as f64 / self.total.as_secs_f64().max(1e-12)
    }

    /// Driver-side cost of one RPC.
    pub fn driver_per_rpc(&self) -> Duration {
        self.total.saturating_sub(self.emulator) / self.count.max(1)
    }

    /// Emulator cost of one RPC.
    pub fn emulator_per_rpc(&self) -> Duration {
        self.emulator / self.count.max(1)
    }
}

fn rt(e: impl std::fmt::Display) -> CliError {
    CliError::Runtime(e.to_string())
}

/// Measures `count` round trips for each size on the simulated `model`.
pub fn measure(model: ChipModel, count: u32, sizes: &[usize]) -> Result<Vec<RpcBench>, CliError> {
    let gpu = SimGpu::new(SimConfig::new(model));
    let layout = SharedMemLayout::default();
    let buf = gpu.dma().alloc_dma(layout.total_size()).map_err(rt)?;
    let msgq = MsgQueue::new(buf, layout).map_err(rt)?;
    let emu = GspEmulator::attach(
        &gpu,
        EmulatorConfig::new(msgq.init_arguments(), model),
        Box::new(MiniRm::new(model.board)),
    );
    let clock = EmuClock::new(&gpu, &emu);
    let mut rpc = GspRpc::new(msgq, gpu.bar0(), clock, NoHandler, GspConfig::default());
    gpu.with_core(|c| emu.start(c));
    rpc.wait_event(NV_VGPU_MSG_EVENT_GSP_INIT_DONE, Duration::from_secs(5))
        .map_err(rt)?;
    let client = ClientConfig::default().client;
    let mut p = [0u8; 120];
    rpc.rm_alloc(client, Handle(0), client, class::NV01_ROOT, &mut p)
        .map_err(rt)?;
    let mut results = Vec::new();
    let bar = crate::progress::Spinner::bar(sizes.len() as u64, "bench rpc: params sizes");
    for &size in sizes {
        bar.inc();
        let mut params = vec![0u8; size];
        // Warm up.
        for _ in 0..count.min(100) {
            rpc.rm_control(client, client, MINI_RM_CTRL_CMD_TEST_TRANSFORM, &mut params)
                .map_err(rt)?;
        }
        let busy0 = emu.stats().busy;
        let t0 = Instant::now();
        for _ in 0..count {
            rpc.rm_control(client, client, MINI_RM_CTRL_CMD_TEST_TRANSFORM, &mut params)
                .map_err(rt)?;
        }
        let total = t0.elapsed();
        let emulator = emu.stats().busy.saturating_sub(busy0);
        results.push(RpcBench {
            size,
            count,
            total,
            emulator,
        });
    }
    let errors = emu.errors();
    if !errors.is_empty() {
        return Err(CliError::Runtime(format!(
            "the GSP-RM emulator saw protocol errors: {errors:?}"
        )));
    }
    Ok(results)
}

/// One size of `nvbare bench rpc --json`.
#[derive(Debug, Serialize)]
pub struct RpcJson {
    /// Params bytes each way.
    pub params_bytes: usize,
    /// Round trips timed.
    pub rpcs: u32,
    /// Round trips per second.
    #[serde(serialize_with = "places3")]
    pub rpc_per_s: f64,
    /// Driver-side microseconds per RPC.
    #[serde(serialize_with = "places3")]
    pub driver_us: f64,
    /// Emulator microseconds per RPC.
    #[serde(serialize_with = "places3")]
    pub emulator_us: f64,
}

/// The object `nvbare bench rpc --json` prints.
#[derive(Debug, Serialize)]
pub struct RpcReport {
    /// The device string.
    pub device: String,
    /// One entry per params size.
    pub sizes: Vec<RpcJson>,
}

/// Runs `nvbare bench rpc [--json]`.
pub fn run(
    out: &mut dyn Write,
    device: DeviceSpec,
    count: u32,
    size: Option<usize>,
    json: bool,
) -> Result<(), CliError> {
    let Some(cs) = device.sim_chip() else {
        return Err(CliError::Usage(format!(
            "{device}: RPC benchmarks run on the simulator only for now (use --device sim:CHIP)"
        )));
    };
    let model = ChipModel::for_chipset(cs)
        .ok_or_else(|| CliError::Usage(format!("the simulator has no {cs} model")))?;
    let sizes: Vec<usize> = match size {
        Some(s) => vec![s],
        None => DEFAULT_SIZES.to_vec(),
    };
    if count == 0 {
        return Err(CliError::Usage("--count must be at least 1".into()));
    }
    let io = |e: std::io::Error| CliError::Runtime(format!("writing output: {e}"));
    if json {
        let r = RpcReport {
            device: device.to_string(),
            sizes: measure(model, count, &sizes)?
                .iter()
                .map(|r| RpcJson {
                    params_bytes: r.size,
                    rpcs: r.count,
                    rpc_per_s: r.per_second(),
                    driver_us: r.driver_per_rpc().as_secs_f64() * 1e6,
                    emulator_us: r.emulator_per_rpc().as_secs_f64() * 1e6,
                })
                .collect(),
        };
        let s = serde_json::to_string_pretty(&r)
            .map_err(|e| CliError::Runtime(format!("encoding JSON: {e}")))?;
        return writeln!(out, "{s}").map_err(io);
    }
    writeln!(
        out,
        "GSP RPC round trips on {device} (GSP_RM_CONTROL, params each way; emulator time measured and subtracted)"
    )
    .map_err(io)?;
    writeln!(
        out,
        "{:>9} {:>8} {:>12} {:>14} {:>14}",
        "params", "rpcs", "rpc/s", "driver/rpc", "emulator/rpc"
    )
    .map_err(io)?;
    for r in measure(model, count, &sizes)? {
        writeln!(
            out,
            "{:>9} {:>8} {:>12.0} {:>11.2} us {:>11.2} us",
            r.size,
            r.count,
            r.per_second(),
            r.driver_per_rpc().as_secs_f64() * 1e6,
            r.emulator_per_rpc().as_secs_f64() * 1e6
        )
        .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_runs_and_accounts_time() {
        let r = measure(nvbare_sim::models::AD102, 20, &[0, 70_000]).unwrap();
        assert_eq!(r.len(), 2);
        for b in r {
            assert!(b.emulator <= b.total);
            assert!(b.per_second() > 0.0);
        }
        let mut out = Vec::new();
        assert!(run(&mut out, DeviceSpec::Nvidia(0), 1, None, false).is_err());
        let mut out = Vec::new();
        run(
            &mut out,
            DeviceSpec::Sim(nvbare_core::chip::Chipset::AD102),
            5,
            Some(64),
            true,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["sizes"][0]["params_bytes"], 64);
        assert!(v["sizes"][0]["rpc_per_s"].as_f64().unwrap() > 0.0);
    }
}
