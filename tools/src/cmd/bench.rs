//! `nvbare bench ...`: benchmarks. Each kind lives in its own module (`bench_rpc`, ...).

use std::io::Write;

use clap::Subcommand;

use crate::{CliError, DeviceSpec};

/// What to benchmark.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
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
    },
}

/// Runs a benchmark.
pub fn run(out: &mut dyn Write, cmd: BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Rpc {
            device,
            count,
            size,
        } => super::bench_rpc::run(out, device, count, size),
    }
}
