//! `nvbare events`: GSP-RM's events and LIBOS log lines as they arrive, decoded, until
//! interrupted (or for `--seconds`). Bare-metal devices only: on `nvidia:N` the kernel driver
//! owns GSP-RM and its events (they reach the kernel log as Xid lines).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nvbare_core::device::baremetal::{BareMetalBackend, BarePlatform};
use nvbare_core::device::{
    Backend, Device, DeviceBuffer, DeviceError, DeviceOptions, LaunchConfig, Module,
};
use nvbare_core::gsp::boot::LogCursor;
use nvbare_core::gsp::events::GspEvent;
use nvbare_core::gsp::log::{LogImage, Segments};
use nvbare_core::gsp::rpc::FunctionName;
use nvbare_core::hal::Clock;
use nvbare_core::rm::ctrl::{fault_type_name, rc};
use nvbare_gsp_firmware::program::LoadCubin;
use serde::Serialize;

use crate::open::{AnyDevice, demo_cubin, open_device};
use crate::{CliError, DeviceSpec};

/// `nvbare events` arguments.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// sim[:CHIP], vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]] (a device nvbare drives
    /// bare metal)
    #[arg(long, short, default_value = "sim:gh100")]
    pub device: DeviceSpec,
    /// Stop after this many seconds (default: run until interrupted with Ctrl-C).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Once watching, launch a kernel that writes out of bounds (the demo cubin's
    /// `oob_write`), to see the MMU fault, Xid and channel reset GSP-RM reports.
    #[arg(long)]
    pub fault: bool,
    /// One JSON object per event or log line, instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One thing seen, for `--json`.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Seen {
    Event {
        /// Seconds since watching began.
        t: f64,
        name: String,
        text: String,
    },
    Log {
        t: f64,
        line: String,
    },
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// An event in one line, with NVIDIA's names.
pub fn describe(ev: &GspEvent) -> (String, String) {
    let rc_name =
        |c: u32| rc::name(c).map_or_else(|| format!("Xid {c}"), |n| format!("Xid {c} ({n})"));
    match ev {
        GspEvent::InitDone { status } => ("GSP_INIT_DONE".into(), format!("status {status}")),
        GspEvent::RunCpuSequencer { cmd_dwords, .. } => (
            "GSP_RUN_CPU_SEQUENCER".into(),
            format!("{cmd_dwords} dwords of commands"),
        ),
        GspEvent::PostEvent {
            h_client,
            h_event,
            notify_index,
            data,
            status,
            ..
        } => (
            "POST_EVENT".into(),
            format!(
                "client {h_client:#x} event {h_event:#x} notifier {notify_index} data {data:#x} \
                 status {status:#x}"
            ),
        ),
        GspEvent::RcTriggered(r) => {
            let mut t = format!(
                "channel {} engine {} reset: {} (level {}, scope {})",
                r.chid,
                r.engine_type,
                rc_name(r.except_type),
                r.except_level,
                r.scope
            );
            if r.except_type == rc::ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT {
                t.push_str(&format!(
                    ", fault at {:#x} ({})",
                    r.mmu_fault_addr,
                    fault_type_name(r.mmu_fault_type)
                ));
            }
            ("RC_TRIGGERED".into(), t)
        }
        GspEvent::MmuFaultQueued => (
            "MMU_FAULT_QUEUED".into(),
            "a replayable MMU fault was queued".into(),
        ),
        GspEvent::OsErrorLog(x) => (
            "OS_ERROR_LOG".into(),
            format!(
                "{} on channel {} (runlist {}): {}",
                rc_name(x.except_type),
                x.chid,
                x.runlist_id,
                x.text.trim_end()
            ),
        ),
        GspEvent::UcodeLibosPrint {
            ucode_eng_desc,
            size,
        } => (
            "UCODE_LIBOS_PRINT".into(),
            format!("{size} bytes of log from engine {ucode_eng_desc:#x}"),
        ),
        GspEvent::LockdownNotice { engaging } => (
            "GSP_LOCKDOWN_NOTICE".into(),
            if *engaging {
                "entering lockdown"
            } else {
                "leaving lockdown"
            }
            .into(),
        ),
        GspEvent::Other { function, len } => {
            (FunctionName(*function).to_string(), format!("{len} bytes"))
        }
        other => ("event".into(), format!("{other:?}")),
    }
}

struct Printer<'a> {
    out: &'a mut dyn Write,
    json: bool,
    t0: Instant,
    failed: Option<std::io::Error>,
}

impl Printer<'_> {
    fn emit(&mut self, seen: Seen) {
        if self.failed.is_some() {
            return;
        }
        let r = if self.json {
            match serde_json::to_string(&seen) {
                Ok(s) => writeln!(self.out, "{s}"),
                Err(e) => Err(std::io::Error::other(e)),
            }
        } else {
            match &seen {
                Seen::Event { t, name, text } => writeln!(self.out, "{t:9.3}  {name}: {text}"),
                Seen::Log { t, line } => writeln!(self.out, "{t:9.3}  log {line}"),
            }
        };
        if let Err(e) = r.and_then(|()| self.out.flush()) {
            self.failed = Some(e);
        }
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

/// Runs `nvbare events`.
pub fn run(out: &mut dyn Write, args: EventsArgs) -> Result<(), CliError> {
    if let DeviceSpec::Nvidia(i) = args.device {
        return Err(CliError::Usage(format!(
            "nvidia:{i}: the nvidia kernel driver owns GSP-RM there, and its events go to the \
             kernel log (`dmesg | grep Xid`); `nvbare events` watches devices nvbare drives \
             bare metal (sim:, vfio:, remote:)"
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // A second watcher in the same process (tests) finds the handler installed: fine.
    let _ = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst));
    let deadline = match args.seconds {
        Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(CliError::Usage(format!(
                "--seconds {s}: give a number >= 0"
            )));
        }
        None => None,
    };
    let any = open_device(
        args.device.clone(),
        DeviceOptions {
            // One stream: these commands launch at most one kernel, and each stream is two
            // channels to create (slow over `remote:`).
            streams: 1,
            ..DeviceOptions::default()
        },
    )?;
    let mut p = Printer {
        out,
        json: args.json,
        t0: Instant::now(),
        failed: None,
    };
    let w = Watch {
        stop: &stop,
        deadline,
        fault: args.fault,
    };
    let r = match &any {
        AnyDevice::BareSim(d, sim) => {
            let img = sim.boot().log_image();
            let segs: Vec<(u64, &[u8])> = img.iter().map(|(a, b)| (*a, b.as_slice())).collect();
            w.run(d, Some(&Segments(&segs)), &mut p)
        }
        AnyDevice::Vfio(d) => w.run(d, None, &mut p),
        AnyDevice::Remote(d) => w.run(d, None, &mut p),
        #[allow(unreachable_patterns)]
        _ => Err(CliError::Usage("not a bare-metal device".into())),
    };
    let failed = p.failed.take();
    any.finish(&mut nvbare_core::gsp::boot::NoObserver)?;
    r?;
    failed.map_or(Ok(()), |e| Err(io(e)))
}

struct Watch<'a> {
    stop: &'a AtomicBool,
    deadline: Option<Duration>,
    fault: bool,
}

impl Watch<'_> {
    fn run<H: BarePlatform>(
        &self,
        dev: &Device<BareMetalBackend<H>>,
        image: Option<&dyn LogImage>,
        p: &mut Printer<'_>,
    ) -> Result<(), CliError> {
        let mut cursor = LogCursor::default();
        // The faulting launch's module and buffer (launched once, with `--fault`) live until
        // the watch ends.
        let mut kept = None;
        let dev_err = |e: DeviceError| CliError::Runtime(format!("the device: {e}"));
        // Everything GSP-RM posted and logged since the last look.
        let drain = |cursor: &mut LogCursor, p: &mut Printer<'_>| -> Result<bool, CliError> {
            let t = p.now();
            let mut seen = Vec::new();
            let alive = dev
                .with_backend(|b| {
                    let r = b.watch_gsp_events(&mut |ev| {
                        let (name, text) = describe(ev);
                        seen.push(Seen::Event { t, name, text });
                    });
                    b.read_new_logs(cursor, image, &mut |l| {
                        seen.push(Seen::Log {
                            t,
                            line: l.to_string(),
                        })
                    });
                    r
                })
                .map_err(dev_err)?
                .map_err(|e| CliError::Runtime(format!("reading GSP-RM's events: {e}")))?;
            for s in seen {
                p.emit(s);
            }
            Ok(alive)
        };
        loop {
            let alive = drain(&mut cursor, p)?;
            if self.fault && kept.is_none() && alive {
                kept = Some(launch_fault(dev)?);
            }
            let ended = !alive
                || p.failed.is_some()
                || self.stop.load(Ordering::SeqCst)
                || self.deadline.is_some_and(|d| p.t0.elapsed() >= d);
            if ended {
                // The faulting launch's outcome, as the device layer reports it, and what
                // GSP-RM posted about it by then (on a slow link the deadline can come first).
                if kept.is_some()
                    && let Err(e) = dev.synchronize()
                {
                    p.emit(Seen::Event {
                        t: p.now(),
                        name: "device".into(),
                        text: e.to_string(),
                    });
                    if alive && p.failed.is_none() {
                        drain(&mut cursor, p)?;
                    }
                }
                return Ok(());
            }
            // Through the device's clock, as every wait: a simulated GPU runs meanwhile.
            dev.with_backend(|b| b.clock().delay(Duration::from_millis(20)))
                .map_err(dev_err)?;
        }
    }
}

/// What a launch in flight uses.
type Kept<'d, B> = (Module<'d, B>, DeviceBuffer<'d, B, u32>);

/// Launches the demo cubin's `oob_write` and does not wait for it: its fault arrives as
/// events.
fn launch_fault<H: BarePlatform>(
    dev: &Device<BareMetalBackend<H>>,
) -> Result<Kept<'_, BareMetalBackend<H>>, CliError> {
    let sm = dev.info().sm;
    let (_, cubin) =
        demo_cubin(sm).ok_or_else(|| CliError::Runtime(format!("no demo cubin for sm_{sm}")))?;
    let err = |what: &'static str| move |e: DeviceError| CliError::Runtime(format!("{what}: {e}"));
    let m = dev
        .load_cubin(cubin)
        .map_err(|e| CliError::Runtime(format!("loading the demo cubin: {e}")))?;
    let f = m.function("oob_write").map_err(err("oob_write"))?;
    let buf = dev.alloc::<u32>(1).map_err(err("allocating"))?;
    dev.launch(&f, LaunchConfig::for_num_elems(1), &[buf.arg()])
        .map_err(err("launching oob_write"))?;
    dev.flush().map_err(err("submitting oob_write"))?;
    Ok((m, buf))
}
