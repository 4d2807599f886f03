//! `nvbare`: drive NVIDIA GPUs without the nvidia kernel module.
#![forbid(unsafe_code)]
// Doc comments on clap arguments are `--help` text (`sim[:CHIP]`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nvbare_pci_host::{Bdf, Sysfs};
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
    /// List NVIDIA PCI functions and whether each GPU is ready for nvbare (sysfs;
    /// NVBARE_SYSFS_ROOT replaces /sys, NVBARE_DEV_ROOT /dev).
    List {
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Identify a device and print its chip, classes, MMU and QMD versions; without
    /// --device, list every GPU this machine shows (or say how to use the simulator).
    Info {
        /// sim[:CHIP], nvidia:N, vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]] (default:
        /// every visible GPU, one line each)
        #[arg(long, short)]
        device: Option<DeviceSpec>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Open a device, copy data in, run add1 and vector_add, verify every element, time it.
    Demo {
        /// sim[:CHIP], nvidia:N, vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]]
        #[arg(long, short, default_value = "sim:gh100")]
        device: DeviceSpec,
        /// Elements per buffer.
        #[arg(long, default_value_t = 1 << 20)]
        elements: u32,
        /// Also run a kernel that faults and one that never finishes, and show the errors.
        #[arg(long)]
        faults: bool,
        /// Timeout of every wait, in milliseconds.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
    /// Launch a kernel of a cubin (see `--arg` for the argument syntax) and print its buffers.
    Run {
        /// sim[:CHIP], nvidia:N, vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]]
        #[arg(long, short, default_value = "sim:gh100")]
        device: DeviceSpec,
        /// The cubin.
        cubin: std::path::PathBuf,
        /// The kernel's name.
        kernel: String,
        /// Blocks: X[,Y[,Z]].
        #[arg(long, default_value = "1", value_parser = cmd::run::parse_dim)]
        grid: [u32; 3],
        /// Threads per block: X[,Y[,Z]].
        #[arg(long, default_value = "1", value_parser = cmd::run::parse_dim)]
        block: [u32; 3],
        /// Dynamic shared memory per block, bytes.
        #[arg(long, default_value_t = 0)]
        shared: u32,
        /// One per kernel parameter, in order: TYPE:VALUE (u32:5, f32:1.5, u64:0x10),
        /// buf:TYPExLEN[=zeros|iota|VALUE|@FILE] (buf:u32x1024=iota; @FILE: exactly LEN raw
        /// little-endian elements, @- reads them from standard input), or bytes:HEX |
        /// bytes:@FILE for a parameter passed by value (a struct): its bytes in memory order,
        /// two hex digits a byte (bytes:0100000002000000), at most 32 KiB. A wrong count or
        /// size prints the kernel's parameter table (also `nvbare cubin inspect CUBIN`).
        #[arg(long = "arg", value_name = "ARG")]
        args: Vec<cmd::run::RunArg>,
        /// Elements of each buffer to print afterwards.
        #[arg(long, default_value_t = 16)]
        print: usize,
        /// Timeout of every wait, in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Write every buffer afterwards to DIR/arg<N>.bin (raw little-endian).
        #[arg(long, value_name = "DIR")]
        save: Option<std::path::PathBuf>,
        /// Stack per thread, in bytes, for a kernel whose stack the compiler could not size
        /// (recursion), as CUDA's cudaLimitStackSize.
        #[arg(long, value_name = "BYTES", default_value_t = nvbare_core::device::DEFAULT_STACK_SIZE)]
        stack_size: u32,
        /// Write the launch's QMD (raw bytes) to FILE and its pushbuffer methods (little-endian
        /// 32-bit words) to FILE.pushbuf, and print the `nvbare decode qmd` and `nvbare decode
        /// pushbuf` commands that read them. This launch skips the latency shortcuts (launches
        /// written ahead or chained), so the QMD dumped is the one built for it.
        #[arg(long, value_name = "FILE")]
        dump_qmd: Option<std::path::PathBuf>,
        /// Print one JSON object (kernel, shape, time, parameter table, buffers, dump).
        #[arg(long)]
        json: bool,
    },
    /// Inspect a CUDA cubin: SM, kernels with their parameter tables, registers, shared and
    /// local memory, constant banks, relocations.
    Cubin {
        #[command(subcommand)]
        command: cmd::cubin::CubinCommand,
    },
    /// Decode raw GPU data structures (QMDs) with NVIDIA's field names.
    Decode {
        #[command(subcommand)]
        what: cmd::decode::DecodeCommand,
    },
    /// Move a GPU and its audio/USB functions to vfio-pci (driver_override, unbind, probe).
    Bind {
        /// The GPU, DOMAIN:BUS:DEV.FN (see `nvbare list`)
        bdf: Bdf,
        /// Print the sysfs writes, in order, without making them.
        #[arg(long)]
        dry_run: bool,
        /// Leave BAR1 at its current size (by default it grows to the largest size offered).
        #[arg(long)]
        no_resize: bool,
    },
    /// Give a GPU on vfio-pci back to its usual drivers (clear driver_override, unbind, reprobe).
    Unbind {
        /// The GPU, DOMAIN:BUS:DEV.FN
        bdf: Bdf,
        /// Print the sysfs writes, in order, without making them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Launch, copy and open costs on a device (nvbare bench [--device DEV] [--json]), or a
    /// subsystem (bench mm, bench rpc); results: docs/performance.md.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        what: Option<cmd::bench::BenchCommand>,
        #[command(flatten)]
        gpu: cmd::bench_gpu::GpuBenchArgs,
    },
    /// Leak check: many alloc/free cycles (and launches), RM object count and free VRAM must
    /// come back to their starting values (nvidia:N; RM object counts need root).
    Stress {
        /// nvidia:N
        #[arg(long, short)]
        device: DeviceSpec,
        /// Only print the RM object count and free VRAM.
        #[arg(long)]
        counts: bool,
        /// Allocation/free cycles.
        #[arg(long, default_value_t = 10_000)]
        alloc_free: u64,
        /// Kernel launches.
        #[arg(long, default_value_t = 0)]
        launches: u64,
        /// Bytes per allocation.
        #[arg(long, default_value_t = 2 << 20)]
        size: u64,
    },
    /// Boot GSP-RM from a cold GPU (FWSEC + booter, or FSP chain of trust), print the phases
    /// and GSP-RM's static info, unload, and boot again.
    Boot(cmd::boot::BootArgs),
    /// Serve GPUs over tinygrad's remote PCI protocol (REMOTE=HOST:PORT for tinygrad,
    /// --device remote:HOST:PORT for nvbare). No authentication: loopback unless --listen says
    /// otherwise.
    Serve {
        /// A device to serve: sim:CHIP or vfio:DOMAIN:BUS:DEV.FN (behind its IOMMU); repeat for
        /// several (PROBE lists them in this order)
        #[arg(long, short, required = true)]
        device: Vec<DeviceSpec>,
        /// Address and port to listen on (port 0: any free port, printed at start).
        #[arg(long, default_value = "127.0.0.1:6667")]
        listen: std::net::SocketAddr,
        /// Write one line per GSP-RM RPC and boot phase of the simulated GPUs served to FILE.
        #[arg(long, value_name = "FILE")]
        trace: Option<std::path::PathBuf>,
    },
    /// Watch GSP-RM's events and LIBOS log lines as they arrive, decoded (RC, MMU fault, Xid,
    /// sequencer...), until Ctrl-C or --seconds.
    Events(cmd::events::EventsArgs),
    /// Talk to a device's RM: alloc, control (by NVIDIA's names, replies decoded) and free;
    /// with no subcommand, read such commands from standard input (handles kept between them).
    Rm(cmd::rm::RmArgs),
    /// nvbare's libcuda.so.1 (the CUDA driver API over nvbare, docs/libcuda.md): `env` prints
    /// the LD_LIBRARY_PATH line that makes programs load it instead of NVIDIA's.
    Cuda {
        #[command(subcommand)]
        command: cmd::cuda::CudaCommand,
    },
    /// Fetch GSP firmware r570.144 into the cache, or inspect a firmware file.
    Fw {
        #[command(subcommand)]
        command: cmd::fw::FwCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logger::init(cli.verbose);
    // The simulator reads it wherever it starts a GPU; a bad value is the user's to fix.
    match nvbare_sim::unknowns::Mode::from_env() {
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        // Said up front, so a failure can be replayed with the same answers.
        Ok(m @ nvbare_sim::unknowns::Mode::Random(_)) => eprintln!(
            "note: simulated GPUs answer unknowns with {}={m}",
            nvbare_sim::unknowns::ENV
        ),
        Ok(_) => {}
    }
    // On a terminal, the firmware fetch (`fw fetch`, or the first boot) shows a spinner.
    if nvbare_tools::progress::enabled() {
        nvbare::backend::firmware::set_fetch_progress(nvbare_tools::progress::fetch_event);
    }
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::List { json } => cmd::list::run(&mut out, &Sysfs::from_env(), json),
        Command::Info { device, json } => cmd::info::run(&mut out, device, json),
        Command::Decode { what } => cmd::decode::run(&mut out, what),
        Command::Demo {
            device,
            elements,
            faults,
            timeout_ms,
        } => cmd::demo::run(
            &mut out,
            device,
            cmd::demo::DemoOptions {
                elements,
                faults,
                timeout: std::time::Duration::from_millis(timeout_ms),
            },
        ),
        Command::Run {
            device,
            cubin,
            kernel,
            grid,
            block,
            shared,
            args,
            print,
            timeout_ms,
            save,
            stack_size,
            dump_qmd,
            json,
        } => cmd::run::run(
            &mut out,
            device,
            cmd::run::RunOptions {
                cubin,
                kernel,
                grid,
                block,
                shared,
                args,
                print,
                timeout: std::time::Duration::from_millis(timeout_ms),
                save,
                stack_size,
                dump_qmd,
                json,
            },
        ),
        Command::Cubin { command } => cmd::cubin::run(&mut out, command),
        Command::Cuda { command } => cmd::cuda::run(&mut out, command),
        Command::Bind {
            bdf,
            dry_run,
            no_resize,
        } => cmd::bind::run_bind(&mut out, &Sysfs::from_env(), bdf, dry_run, !no_resize),
        Command::Unbind { bdf, dry_run } => {
            cmd::bind::run_unbind(&mut out, &Sysfs::from_env(), bdf, dry_run)
        }
        Command::Bench {
            what: Some(what), ..
        } => cmd::bench::run(&mut out, what),
        Command::Bench { what: None, gpu } => cmd::bench_gpu::run(&mut out, gpu),
        Command::Stress {
            device,
            counts,
            alloc_free,
            launches,
            size,
        } => cmd::stress::run(
            &mut out,
            device,
            cmd::stress::StressArgs {
                counts,
                alloc_free,
                launches,
                size,
            },
        ),
        Command::Fw { command } => cmd::fw::run(&mut out, command),
        Command::Serve {
            device,
            listen,
            trace,
        } => cmd::serve::run(
            &mut out,
            cmd::serve::ServeOptions {
                devices: device,
                listen,
                trace,
                limits: cmd::serve::ServeLimits::default(),
            },
        ),
        Command::Boot(args) => cmd::boot::run(&mut out, args),
        Command::Rm(args) => cmd::rm::run(&mut out, args),
        Command::Events(args) => cmd::events::run(&mut out, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(CliError::exit_code(&e) as u8)
        }
    }
}
