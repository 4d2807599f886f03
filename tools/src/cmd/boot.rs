//! `nvbare boot`: bring GSP-RM up from a cold GPU with the real r570.144 firmware, print the
//! phases with timings and GSP-RM's static info, unload, and do it again.
//!
//! `--device sim:CHIP` runs on the simulated GPU with its boot hardware
//! (`nvbare_sim::boot`); `--device vfio:BDF` on a GPU bound to vfio-pci (`VfioGpu`'s
//! `bar0()/dma()/pci()/clock()`); `--device remote:HOST:PORT:N` on a GPU of a remote PCI
//! server (`RemoteGpu`). [`boot_cycles`] is generic over the `hal` traits.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nvbare::backend::FirmwareSource;
use nvbare_core::gsp::boot::{
    BootError, BootHw, BootObserver, BootOptions, BootPhase, BootReport, RunningGsp, boot,
};
use nvbare_core::gsp::log::{LogImage, Segments};
use nvbare_core::gsp::sysinfo::GspStaticConfigInfo;
use nvbare_core::hal::{Clock, DmaAllocator, Mmio, PciConfig};
use nvbare_gsp_firmware::FirmwareSet;
use nvbare_sim::boot::{BootModel, BootSimConfig, SimFirmware, boot_hw};
use nvbare_sim::{ChipModel, SimConfig, SimGpu};

use crate::{CliError, DeviceSpec};

/// Options of `nvbare boot`.
#[derive(clap::Args, Debug)]
pub struct BootArgs {
    /// sim:CHIP (ad102, gh100, gb202), vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]].
    #[arg(long, short, default_value = "sim:gh100")]
    pub device: DeviceSpec,
    /// Boot/unload cycles.
    #[arg(long, default_value_t = 2)]
    pub cycles: u32,
    /// Firmware directory (default: $NVBARE_FIRMWARE_DIR or ~/.cache/nvbare/firmware).
    #[arg(long)]
    pub firmware_dir: Option<PathBuf>,
    /// Reset the GPU (PCI function reset) if a GSP is found running, instead of refusing.
    #[arg(long)]
    pub reset: bool,
    /// Print the GSP's LIBOS log after each boot.
    #[arg(long)]
    pub log: bool,
}

pub use nvbare::backend::firmware::{default_dir as firmware_dir, load_firmware};

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Prints phases as they finish (with what happened in them), and the report of a failure.
struct Printer<'a> {
    out: &'a mut dyn Write,
    pending: Vec<String>,
}

impl<'a> Printer<'a> {
    fn new(out: &'a mut dyn Write) -> Self {
        Printer {
            out,
            pending: Vec::new(),
        }
    }

    fn flush_details(&mut self) {
        for d in self.pending.drain(..) {
            let _ = writeln!(self.out, "      {d}");
        }
    }
}

impl BootObserver for Printer<'_> {
    fn phase_finished(&mut self, phase: BootPhase, elapsed: Duration) {
        let _ = writeln!(
            self.out,
            "  {:<40} {:>10.3} ms",
            phase.name(),
            elapsed.as_secs_f64() * 1e3
        );
        self.flush_details();
    }
    fn detail(&mut self, _phase: BootPhase, what: fmt::Arguments<'_>) {
        self.pending.push(what.to_string());
    }
    fn failed(&mut self, error: &BootError, report: &BootReport) {
        let _ = writeln!(self.out, "  {:<40} FAILED", error.phase.name());
        self.flush_details();
        let _ = writeln!(self.out, "  {error}");
        for l in report.to_string().lines() {
            let _ = writeln!(self.out, "    {l}");
        }
    }
}

/// Prints GSP-RM's static info.
pub fn print_static_info(out: &mut dyn Write, s: &GspStaticConfigInfo) -> std::io::Result<()> {
    let short_len = s
        .gpuShortNameString
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(64);
    let short = String::from_utf8_lossy(&s.gpuShortNameString[..short_len]);
    writeln!(out, "  GSP static info")?;
    writeln!(
        out,
        "    name              {} ({short})",
        s.gpu_name().unwrap_or("?")
    )?;
    writeln!(
        out,
        "    framebuffer       {} MiB, {}-bit bus",
        s.fb_length >> 20,
        s.fb_bus_width
    )?;
    writeln!(out, "    L2 cache          {} KiB", s.l2_cache_size >> 10)?;
    writeln!(
        out,
        "    BAR1/BAR2 PDB     {:#x} / {:#x}",
        s.bar1PdeBase, s.bar2PdeBase
    )?;
    writeln!(
        out,
        "    internal handles  client {:#x}, device {:#x}, subdevice {:#x}",
        s.hInternalClient, s.hInternalDevice, s.hInternalSubdevice
    )?;
    let n = s.fbRegionInfoParams.numFBRegions.min(16);
    writeln!(out, "    FB regions        {n}")?;
    Ok(())
}

/// Boots, prints static info, unloads, `cycles` times, on any hardware the `hal` traits reach.
pub fn boot_cycles<M, D, C, P>(
    out: &mut dyn Write,
    hw: &BootHw<M, D, C, P>,
    fw: &FirmwareSet,
    opts: &BootOptions<'_>,
    cycles: u32,
    print_log: bool,
    log_image: Option<&dyn LogImage>,
) -> Result<(), CliError>
where
    M: Mmio + Clone,
    D: DmaAllocator,
    C: Clock + Clone,
    P: PciConfig,
{
    for cycle in 1..=cycles {
        writeln!(out, "boot {cycle}/{cycles}").map_err(io)?;
        let t0 = hw.clock.now();
        let mut p = Printer::new(&mut *out);
        let r = boot(hw, fw, opts, &mut p);
        p.flush_details();
        let booted = r.map_err(|e| CliError::Runtime(format!("{e}")))?;
        let took = hw.clock.now().saturating_sub(t0);
        writeln!(
            out,
            "  GSP-RM running after {:.3} ms",
            took.as_secs_f64() * 1e3
        )
        .map_err(io)?;
        print_static_info(out, booted.static_info()).map_err(io)?;
        let l = booted.fb_layout();
        writeln!(out, "  FB reservations (for core::mm)").map_err(io)?;
        for r in l.reservations() {
            writeln!(
                out,
                "    {:#014x} +{:>8} KiB  {:?}",
                r.base,
                r.size >> 10,
                r.owner
            )
            .map_err(io)?;
        }
        if print_log {
            writeln!(out, "  GSP log").map_err(io)?;
            booted.state().read_logs(log_image, &mut |l| {
                let _ = writeln!(out, "    {l}");
            });
        }
        writeln!(out, "unload {cycle}/{cycles}").map_err(io)?;
        let mut p = Printer::new(&mut *out);
        let r = booted.unload(hw, &mut p, log_image);
        p.flush_details();
        let r = r.map_err(|e| CliError::Runtime(format!("{e}")))?;
        if r.suspend_timed_out {
            writeln!(out, "  (GSP-RM did not report suspended; torn down anyway)").map_err(io)?;
        }
    }
    Ok(())
}

/// `nvbare boot --device vfio:BDF`: the same cycles on a GPU bound to vfio-pci.
fn run_vfio(
    out: &mut dyn Write,
    bdf: nvbare_pci_host::Bdf,
    args: &BootArgs,
) -> Result<(), CliError> {
    let gpu = std::sync::Arc::new(crate::device::open_vfio(bdf)?);
    let chip = nvbare_core::chip::identify_mmio(gpu.bar0())?;
    let dir = match &args.firmware_dir {
        Some(d) => d.clone(),
        None => FirmwareSource::default().ensure(chip.chipset())?,
    };
    writeln!(
        out,
        "loading r570.144 firmware for {} from {}",
        chip.info.name,
        dir.display()
    )
    .map_err(io)?;
    let fw = load_firmware(chip.chipset(), &dir)?;
    let (hw, _bar1, addrs) = crate::baremetal::vfio_hw(gpu);
    let opts = BootOptions {
        running_gsp: if args.reset {
            RunningGsp::Reset
        } else {
            RunningGsp::Refuse
        },
        addrs,
        ..BootOptions::default()
    };
    writeln!(out, "device    vfio:{bdf} ({})", chip.info.name).map_err(io)?;
    boot_cycles(out, &hw, &fw, &opts, args.cycles, args.log, None)
}

/// `nvbare boot --device remote:HOST:PORT:N`: the same cycles on a GPU of a remote PCI server.
fn run_remote(
    out: &mut dyn Write,
    (host, port, index): (&str, u16, u32),
    args: &BootArgs,
) -> Result<(), CliError> {
    let gpu = crate::device::open_remote(host, port, index)?;
    let chip = nvbare_core::chip::identify_mmio(gpu.bar0()).map_err(|e| {
        if gpu.last_error().is_some() {
            crate::baremetal::remote_error(
                &gpu,
                &format!("{}: identifying the GPU", args.device),
                e,
            )
        } else {
            e.into()
        }
    })?;
    let dir = match &args.firmware_dir {
        Some(d) => d.clone(),
        None => FirmwareSource::default().ensure(chip.chipset())?,
    };
    writeln!(
        out,
        "loading r570.144 firmware for {} from {}",
        chip.info.name,
        dir.display()
    )
    .map_err(io)?;
    let fw = load_firmware(chip.chipset(), &dir)?;
    let (hw, _bar1, addrs) = crate::baremetal::remote_hw(&gpu)?;
    let opts = BootOptions {
        running_gsp: if args.reset {
            RunningGsp::Reset
        } else {
            RunningGsp::Refuse
        },
        addrs,
        ..BootOptions::default()
    };
    writeln!(
        out,
        "device    {} ({}, {:?} on the server)",
        args.device,
        chip.info.name,
        gpu.device().name
    )
    .map_err(io)?;
    boot_cycles(out, &hw, &fw, &opts, args.cycles, args.log, None)
        .map_err(|e| crate::baremetal::remote_error(&gpu, &args.device.to_string(), e).into())
}

/// Runs `nvbare boot`.
pub fn run(out: &mut dyn Write, args: BootArgs) -> Result<(), CliError> {
    let chip = match &args.device {
        DeviceSpec::Sim(c) => *c,
        DeviceSpec::Vfio(bdf) => return run_vfio(out, *bdf, &args),
        DeviceSpec::Remote { host, port, index } => {
            return run_remote(out, (host, *port, *index), &args);
        }
        other => {
            return Err(CliError::Usage(format!(
                "nvbare boot runs on sim:CHIP (ad102, gh100, gb202), vfio:BDF and \
                 remote:HOST:PORT:N; {other} is driven by the nvidia kernel driver, which boots \
                 GSP-RM itself"
            )));
        }
    };
    let model = ChipModel::for_chipset(chip).ok_or_else(|| {
        CliError::Usage(format!(
            "the simulator has no {chip} (it has {})",
            ChipModel::names().collect::<Vec<_>>().join(", ")
        ))
    })?;
    let dir = args.firmware_dir.clone().unwrap_or_else(firmware_dir);
    writeln!(
        out,
        "loading r570.144 firmware for {chip} from {}",
        dir.display()
    )
    .map_err(io)?;
    let fw = load_firmware(chip, &dir)?;
    let sim_fw = SimFirmware::load(chip, &dir).map_err(CliError::Runtime)?;
    // Virtual time: phase durations are the modelled hardware's (with NVBARE_SIM_UNKNOWNS=
    // pessimistic, seconds of devinit, FSP and falcon time), not host time, and cost none.
    let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
    let boot_model = BootModel::install(&gpu, BootSimConfig::new(Arc::new(sim_fw)));
    let hw = boot_hw(&gpu);
    let image = boot_model.log_image();
    let segs: Vec<(u64, &[u8])> = image.iter().map(|(a, b)| (*a, b.as_slice())).collect();
    let log_image = Segments(&segs);
    let opts = BootOptions {
        running_gsp: if args.reset {
            RunningGsp::Reset
        } else {
            RunningGsp::Refuse
        },
        log_image: Some(&log_image),
        ..BootOptions::default()
    };
    writeln!(out, "device    {} ({})", model.board, args.device).map_err(io)?;
    let r = boot_cycles(
        out,
        &hw,
        &fw,
        &opts,
        args.cycles,
        args.log,
        Some(&log_image),
    );
    for w in boot_model.warnings() {
        writeln!(out, "the simulated boot hardware warns: {w}").map_err(io)?;
    }
    let errors = boot_model.errors();
    if !errors.is_empty() {
        writeln!(out, "the simulated boot hardware saw problems:").map_err(io)?;
        for e in &errors {
            writeln!(out, "  {e}").map_err(io)?;
        }
    }
    r?;
    let s = boot_model.stats();
    writeln!(
        out,
        "done: {} GSP-RM start(s), {} unload(s), {} GPU reset(s)",
        s.gsp_rm_starts, s.suspends, s.resets
    )
    .map_err(io)?;
    Ok(())
}
