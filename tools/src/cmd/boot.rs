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

use serde::Serialize;

use super::json::places3;
use crate::progress::Spinner;
use crate::{CliError, DeviceSpec};

/// Options of `nvbare boot`.
#[derive(clap::Args, Debug)]
pub struct BootArgs {
    /// sim:CHIP (ga100, ad102, gh100, gb202), vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]].
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
    /// Print one JSON object (phases with their times, static info, FB reservations) instead
    /// of text.
    #[arg(long)]
    pub json: bool,
}

pub use nvbare::backend::firmware::{default_dir as firmware_dir, load_firmware};

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// Prints phases as they finish (with what happened in them), and the report of a failure;
/// records them for `--json`, and shows a spinner while each phase runs.
struct Printer<'a> {
    out: &'a mut dyn Write,
    pending: Vec<String>,
    phases: Vec<PhaseJson>,
    spinner: Spinner,
}

impl<'a> Printer<'a> {
    fn new(out: &'a mut dyn Write) -> Self {
        Printer {
            out,
            pending: Vec::new(),
            phases: Vec::new(),
            spinner: Spinner::off(),
        }
    }

    fn flush_details(&mut self) {
        self.spinner.finish();
        if let Some(p) = self.phases.last_mut() {
            p.details.extend(self.pending.iter().cloned());
        }
        for d in self.pending.drain(..) {
            let _ = writeln!(self.out, "      {d}");
        }
    }
}

impl BootObserver for Printer<'_> {
    fn phase_started(&mut self, phase: BootPhase) {
        self.spinner = Spinner::new(phase.name());
    }
    fn phase_finished(&mut self, phase: BootPhase, elapsed: Duration) {
        self.spinner.finish();
        let _ = writeln!(
            self.out,
            "  {:<40} {:>10.3} ms",
            phase.name(),
            elapsed.as_secs_f64() * 1e3
        );
        self.phases.push(PhaseJson {
            phase: phase.name(),
            ms: elapsed.as_secs_f64() * 1e3,
            details: Vec::new(),
            failed: false,
        });
        self.flush_details();
    }
    fn detail(&mut self, _phase: BootPhase, what: fmt::Arguments<'_>) {
        self.pending.push(what.to_string());
    }
    fn failed(&mut self, error: &BootError, report: &BootReport) {
        self.spinner.finish();
        let _ = writeln!(self.out, "  {:<40} FAILED", error.phase.name());
        self.phases.push(PhaseJson {
            phase: error.phase.name(),
            ms: f64::NAN,
            details: Vec::new(),
            failed: true,
        });
        self.flush_details();
        let _ = writeln!(self.out, "  {error}");
        for l in report.to_string().lines() {
            let _ = writeln!(self.out, "    {l}");
        }
    }
}

/// One phase of `boot --json`.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseJson {
    /// The phase's name (as the text output prints it).
    pub phase: &'static str,
    /// How long it took (`null` for the phase that failed).
    #[serde(serialize_with = "places3")]
    pub ms: f64,
    /// What happened in it.
    pub details: Vec<String>,
    /// Whether this is where the boot or unload failed.
    pub failed: bool,
}

/// GSP-RM's static info in `boot --json`.
#[derive(Debug, Clone, Serialize)]
pub struct StaticInfoJson {
    /// `gpuNameString`.
    pub name: Option<String>,
    /// `gpuShortNameString`.
    pub short_name: String,
    /// Framebuffer MiB.
    pub fb_mib: u64,
    /// Memory bus width, bits.
    pub fb_bus_width: u32,
    /// L2 cache KiB.
    pub l2_cache_kib: u64,
    /// BAR1 page directory base.
    pub bar1_pde_base: u64,
    /// BAR2 page directory base.
    pub bar2_pde_base: u64,
    /// FB regions GSP-RM reports.
    pub fb_regions: u32,
}

/// One FB reservation in `boot --json`.
#[derive(Debug, Clone, Serialize)]
pub struct ReservationJson {
    /// Base address.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// Who owns it.
    pub owner: String,
}

/// One boot/unload cycle of `boot --json`.
#[derive(Debug, Clone, Serialize)]
pub struct CycleJson {
    /// 1-based.
    pub cycle: u32,
    /// The boot's phases.
    pub boot: Vec<PhaseJson>,
    /// Time until GSP-RM ran.
    #[serde(serialize_with = "places3")]
    pub running_after_ms: f64,
    /// GSP-RM's static info.
    pub static_info: Option<StaticInfoJson>,
    /// The FB reservations for `core::mm`.
    pub fb_reservations: Vec<ReservationJson>,
    /// The GSP's LIBOS log lines (with `--log`).
    pub log: Vec<String>,
    /// The unload's phases.
    pub unload: Vec<PhaseJson>,
    /// GSP-RM did not report suspended in time.
    pub suspend_timed_out: bool,
}

/// The object `nvbare boot --json` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BootJson {
    /// The device string.
    pub device: String,
    /// The board or chip.
    pub gpu: String,
    /// The firmware directory.
    pub firmware_dir: String,
    /// Every cycle, the last one possibly unfinished.
    pub cycles: Vec<CycleJson>,
    /// The simulated boot hardware's warnings.
    pub warnings: Vec<String>,
    /// The simulated boot hardware's errors.
    pub errors: Vec<String>,
    /// GSP-RM starts, unloads and resets (the simulator counts them).
    pub starts: Option<u64>,
    /// Unloads.
    pub unloads: Option<u64>,
    /// GPU resets.
    pub resets: Option<u64>,
    /// Whether every cycle finished.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
}

impl BootJson {
    fn static_info(s: &GspStaticConfigInfo) -> StaticInfoJson {
        let short_len = s
            .gpuShortNameString
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(64);
        StaticInfoJson {
            name: s.gpu_name().map(str::to_string),
            short_name: String::from_utf8_lossy(&s.gpuShortNameString[..short_len]).into(),
            fb_mib: s.fb_length >> 20,
            fb_bus_width: s.fb_bus_width,
            l2_cache_kib: (s.l2_cache_size >> 10).into(),
            bar1_pde_base: s.bar1PdeBase,
            bar2_pde_base: s.bar2PdeBase,
            fb_regions: s.fbRegionInfoParams.numFBRegions.min(16),
        }
    }

    /// Prints the object (with `--json`), then passes `r` on.
    fn finish(mut self, out: &mut dyn Write, r: Result<(), CliError>) -> Result<(), CliError> {
        self.ok = r.is_ok();
        self.error = r.as_ref().err().map(|e| e.to_string());
        let s = serde_json::to_string_pretty(&self)
            .map_err(|e| CliError::Runtime(format!("encoding JSON: {e}")))?;
        writeln!(out, "{s}").map_err(io)?;
        r
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

/// What [`boot_cycles`] does besides booting: how many cycles, whether to read the GSP's log
/// (from `log_image` on the simulator), and the record `--json` prints.
pub struct CycleOptions<'a> {
    /// Boot/unload cycles.
    pub cycles: u32,
    /// Print the GSP's LIBOS log after each boot.
    pub print_log: bool,
    /// Where the log buffers' contents are, when not in DMA memory.
    pub log_image: Option<&'a dyn LogImage>,
}

impl fmt::Debug for CycleOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CycleOptions")
            .field("cycles", &self.cycles)
            .field("print_log", &self.print_log)
            .field("log_image", &self.log_image.is_some())
            .finish()
    }
}

/// Boots, prints static info, unloads, `cycles` times, on any hardware the `hal` traits reach;
/// every cycle is recorded in `rec`.
pub fn boot_cycles<M, D, C, P>(
    out: &mut dyn Write,
    hw: &BootHw<M, D, C, P>,
    fw: &FirmwareSet,
    opts: &BootOptions<'_>,
    co: &CycleOptions<'_>,
    rec: &mut BootJson,
) -> Result<(), CliError>
where
    M: Mmio + Clone,
    D: DmaAllocator,
    C: Clock + Clone,
    P: PciConfig,
{
    let cycles = co.cycles;
    for cycle in 1..=cycles {
        writeln!(out, "boot {cycle}/{cycles}").map_err(io)?;
        rec.cycles.push(CycleJson {
            cycle,
            boot: Vec::new(),
            running_after_ms: f64::NAN,
            static_info: None,
            fb_reservations: Vec::new(),
            log: Vec::new(),
            unload: Vec::new(),
            suspend_timed_out: false,
        });
        let Some(c) = rec.cycles.last_mut() else {
            return Err(CliError::Runtime("boot record lost".into()));
        };
        let t0 = hw.clock.now();
        let mut p = Printer::new(&mut *out);
        let r = boot(hw, fw, opts, &mut p);
        p.flush_details();
        c.boot = std::mem::take(&mut p.phases);
        let booted = r.map_err(|e| CliError::Runtime(format!("{e}")))?;
        let took = hw.clock.now().saturating_sub(t0);
        c.running_after_ms = took.as_secs_f64() * 1e3;
        writeln!(out, "  GSP-RM running after {:.3} ms", c.running_after_ms).map_err(io)?;
        print_static_info(out, booted.static_info()).map_err(io)?;
        c.static_info = Some(BootJson::static_info(booted.static_info()));
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
            c.fb_reservations.push(ReservationJson {
                base: r.base,
                size: r.size,
                owner: format!("{:?}", r.owner),
            });
        }
        if co.print_log {
            writeln!(out, "  GSP log").map_err(io)?;
            booted.state().read_logs(co.log_image, &mut |l| {
                let _ = writeln!(out, "    {l}");
                c.log.push(l.to_string());
            });
        }
        writeln!(out, "unload {cycle}/{cycles}").map_err(io)?;
        let mut p = Printer::new(&mut *out);
        let r = booted.unload(hw, &mut p, co.log_image);
        p.flush_details();
        c.unload = std::mem::take(&mut p.phases);
        let r = r.map_err(|e| CliError::Runtime(format!("{e}")))?;
        c.suspend_timed_out = r.suspend_timed_out;
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
    rec: &mut BootJson,
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
    rec.gpu = chip.info.name.to_string();
    rec.firmware_dir = dir.display().to_string();
    boot_cycles(out, &hw, &fw, &opts, &cycle_options(args, None), rec)
}

/// `nvbare boot --device remote:HOST:PORT:N`: the same cycles on a GPU of a remote PCI server.
fn run_remote(
    out: &mut dyn Write,
    (host, port, index): (&str, u16, u32),
    args: &BootArgs,
    rec: &mut BootJson,
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
    rec.gpu = chip.info.name.to_string();
    rec.firmware_dir = dir.display().to_string();
    boot_cycles(out, &hw, &fw, &opts, &cycle_options(args, None), rec)
        .map_err(|e| crate::baremetal::remote_error(&gpu, &args.device.to_string(), e).into())
}

fn cycle_options<'a>(args: &BootArgs, log_image: Option<&'a dyn LogImage>) -> CycleOptions<'a> {
    CycleOptions {
        cycles: args.cycles,
        print_log: args.log,
        log_image,
    }
}

/// Runs `nvbare boot [--json]`.
pub fn run(out: &mut dyn Write, args: BootArgs) -> Result<(), CliError> {
    let mut rec = BootJson {
        device: args.device.to_string(),
        ..BootJson::default()
    };
    if args.json {
        let r = run_text(&mut std::io::sink(), &args, &mut rec);
        rec.finish(out, r)
    } else {
        run_text(out, &args, &mut rec)
    }
}

/// `nvbare boot` printing text to `out`, recording into `rec`.
fn run_text(out: &mut dyn Write, args: &BootArgs, rec: &mut BootJson) -> Result<(), CliError> {
    let chip = match &args.device {
        DeviceSpec::Sim(c) => *c,
        DeviceSpec::Vfio(bdf) => return run_vfio(out, *bdf, args, rec),
        DeviceSpec::Remote { host, port, index } => {
            return run_remote(out, (host, *port, *index), args, rec);
        }
        other => {
            return Err(CliError::Usage(format!(
                "nvbare boot runs on sim:CHIP (ga100, ad102, gh100, gb202), vfio:BDF and \
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
    rec.gpu = model.board.to_string();
    rec.firmware_dir = dir.display().to_string();
    let co = cycle_options(args, Some(&log_image));
    let r = boot_cycles(out, &hw, &fw, &opts, &co, rec);
    for w in boot_model.warnings() {
        writeln!(out, "the simulated boot hardware warns: {w}").map_err(io)?;
        rec.warnings.push(w.to_string());
    }
    let errors = boot_model.errors();
    if !errors.is_empty() {
        writeln!(out, "the simulated boot hardware saw problems:").map_err(io)?;
        for e in &errors {
            writeln!(out, "  {e}").map_err(io)?;
            rec.errors.push(e.to_string());
        }
    }
    r?;
    let s = boot_model.stats();
    rec.starts = Some(s.gsp_rm_starts.into());
    rec.unloads = Some(s.suspends.into());
    rec.resets = Some(s.resets.into());
    writeln!(
        out,
        "done: {} GSP-RM start(s), {} unload(s), {} GPU reset(s)",
        s.gsp_rm_starts, s.suspends, s.resets
    )
    .map_err(io)?;
    Ok(())
}
