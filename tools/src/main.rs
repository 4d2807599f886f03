//! `nvbare`: drive NVIDIA GPUs without the nvidia kernel module.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nvbare_pci_host::Sysfs;
use nvbare_tools::{CliError, DeviceSpec, cmd, logger};

#[derive(Parser, Debug)]
#[command(
    name = "nvbare",
    version,
    about = "Drive NVIDIA GPUs without the nvidia kernel module"
)]
struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); NVBARE_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List NVIDIA PCI functions (sysfs; NVBARE_SYSFS_ROOT replaces /sys).
    List,
    /// Identify a device and print its chip, classes, MMU and QMD versions.
    Info {
        /// sim[:CHIP], nvidia:N or vfio:DOMAIN:BUS:DEV.FN
        #[arg(long, short, default_value = "sim:gh100")]
        device: DeviceSpec,
    },
    /// Benchmarks (`nvbare bench rpc`).
    Bench {
        #[command(subcommand)]
        what: cmd::bench::BenchCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logger::init(cli.verbose);
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::List => cmd::list::run(&mut out, &Sysfs::from_env()),
        Command::Info { device } => cmd::info::run(&mut out, device),
        Command::Bench { what } => cmd::bench::run(&mut out, what),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(CliError::exit_code(&e) as u8)
        }
    }
}
