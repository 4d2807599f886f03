//! `nvbare demo`: open a device, move data, run kernels, check every element, report timings.

use std::io::Write;
use std::time::{Duration, Instant};

use nvbare_core::device::{Device, DeviceBuffer, DeviceError, DeviceOptions, LaunchConfig, Module};
use nvbare_core::rm::class::class_name;
use nvbare_gsp_firmware::program::LoadCubin;

use crate::baremetal::PhasePrinter;
use crate::open::{CliBackend, demo_cubin, open_device_printing};
use crate::with_device;
use crate::{CliError, DeviceSpec};

/// Options of `nvbare demo`.
#[derive(Debug, Clone, Copy)]
pub struct DemoOptions {
    /// Elements per buffer.
    pub elements: u32,
    /// Also run the fault and never-ending kernels and show their errors.
    pub faults: bool,
    /// Wait timeout.
    pub timeout: Duration,
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

fn dev_err(step: &str) -> impl Fn(DeviceError) -> CliError + '_ {
    move |e| CliError::Runtime(format!("{step}: {e}"))
}

fn us(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

fn class(c: u32) -> String {
    match class_name(c) {
        Some(n) => format!("{n} ({c:#06x})"),
        None => format!("{c:#06x}"),
    }
}

/// Runs `nvbare demo`.
pub fn run(out: &mut dyn Write, device: DeviceSpec, o: DemoOptions) -> Result<(), CliError> {
    if o.elements == 0 {
        return Err(CliError::Usage("--elements must be at least 1".into()));
    }
    let t = Instant::now();
    let bare_metal = device.is_bare_metal();
    if bare_metal {
        writeln!(
            out,
            "[1/7] booting GSP-RM on {device} (GSP firmware r570.144, bare metal)"
        )
        .map_err(io)?;
    } else {
        writeln!(out, "[1/7] opening {device}").map_err(io)?;
    }
    let opts = DeviceOptions {
        timeout: o.timeout,
        ..Default::default()
    };
    let any = open_device_printing(device, opts, out)?;
    let opened = t.elapsed();
    let backend = any.info().backend.clone();
    let ran = with_device!(&any, dev => demo_on(out, dev, o, opened));
    if bare_metal {
        writeln!(out, "unloading GSP-RM").map_err(io)?;
    }
    let finished = any.finish(&mut PhasePrinter::new(out, "      "));
    ran?;
    finished?;
    writeln!(out, "demo passed on {backend}").map_err(io)?;
    Ok(())
}

fn demo_on<B: CliBackend>(
    out: &mut dyn Write,
    dev: &Device<B>,
    o: DemoOptions,
    opened: Duration,
) -> Result<(), CliError> {
    let i = dev.info();
    let rm = match &i.driver_version {
        Some(v) => format!("RM {v}"),
        None => "RM".to_string(),
    };
    writeln!(
        out,
        "[2/7] device bring-up over {rm}: client, device, subdevice, class list, GR info, VA \
         space, channel group, compute and copy channels"
    )
    .map_err(io)?;
    writeln!(
        out,
        "      {} - {} {} sm_{}, {} SMs ({} GPCs x {} TPCs x {} SMs/TPC, {} TPCs on)",
        i.backend,
        i.chip.name,
        i.chip.architecture,
        i.sm,
        i.gr.sm_count(),
        i.gr.gpcs,
        i.gr.tpc_per_gpc,
        i.gr.sm_per_tpc,
        i.gr.tpcs
    )
    .map_err(io)?;
    writeln!(
        out,
        "      compute {}, copy {}, gpfifo {}, QMD {:?}; opened in {}",
        class(i.classes.compute),
        class(i.classes.copy),
        class(i.classes.gpfifo),
        i.qmd,
        us(opened)
    )
    .map_err(io)?;
    writeln!(
        out,
        "      work-submit tokens: compute {:#x}, copy {:#x}",
        i.tokens[0], i.tokens[1]
    )
    .map_err(io)?;
    let lines = dev
        .with_backend(|b| b.bare_metal_summary())
        .unwrap_or_default();
    for l in lines {
        writeln!(out, "      {l}").map_err(io)?;
    }
    demo_body(out, dev, o)
}

/// Times launches of `empty`: launch + sync round trips, and the driver-side cost of
/// back-to-back launches (on the simulator measured with the simulated host paused, so no GPU
/// work is counted; on hardware the GPU runs them meanwhile).
fn launch_timings<B: CliBackend>(
    out: &mut dyn Write,
    dev: &Device<B>,
    m: &Module<'_, B>,
) -> Result<(), CliError> {
    let empty = m.function("empty").map_err(dev_err("empty"))?;
    let one = LaunchConfig::for_num_elems(1);
    // Warm up (the first launch of a kernel builds its QMD template).
    dev.launch(&empty, one, &[])
        .map_err(dev_err("launching empty"))?;
    dev.synchronize().map_err(dev_err("running empty"))?;
    let n = 200u32;
    let t = Instant::now();
    for _ in 0..n {
        dev.launch(&empty, one, &[])
            .map_err(dev_err("launching empty"))?;
        dev.synchronize().map_err(dev_err("running empty"))?;
    }
    let rt = t.elapsed() / n;
    let [compute, _] = dev.channel_handles().map_err(dev_err("channels"))?;
    let frozen = dev
        .with_backend(|b| b.pause_channel(compute))
        .map_err(dev_err("pausing the host"))?;
    let k = 256u32;
    let t = Instant::now();
    for _ in 0..k {
        dev.launch(&empty, one, &[])
            .map_err(dev_err("launching empty"))?;
    }
    let per = t.elapsed() / k;
    if frozen {
        dev.with_backend(|b| b.resume_channel(compute))
            .map_err(dev_err("resuming the host"))?;
    }
    dev.synchronize().map_err(dev_err("running empty"))?;
    let hw = dev.with_backend(|b| b.is_hardware()).unwrap_or(false);
    writeln!(
        out,
        "      empty: launch + sync round trip {}{}; back-to-back launch {} of driver time",
        us(rt),
        if hw { "" } else { " (incl. the simulator)" },
        us(per)
    )
    .map_err(io)?;
    Ok(())
}

fn demo_body<B: CliBackend>(
    out: &mut dyn Write,
    dev: &Device<B>,
    o: DemoOptions,
) -> Result<(), CliError> {
    let n = o.elements;
    let sm = dev.info().sm;
    let (name, cubin) = demo_cubin(sm).ok_or_else(|| {
        CliError::Runtime(format!("no demo cubin for sm_{sm} (tests/fixtures/cubins)"))
    })?;

    writeln!(out, "[3/7] loading {name}.cubin ({} bytes)", cubin.len()).map_err(io)?;
    let t = Instant::now();
    let m = dev
        .load_cubin(cubin)
        .map_err(|e| CliError::Runtime(format!("loading the module: {e}")))?;
    let names: Vec<&str> = m.kernels().iter().map(|k| k.name.as_str()).collect();
    writeln!(
        out,
        "      image at GPU VA {:#x}, kernels: {}; {}",
        m.base(),
        names.join(", "),
        us(t.elapsed())
    )
    .map_err(io)?;

    writeln!(out, "[4/7] copying {n} u32 and 2 x {n} f32 to the device").map_err(io)?;
    let host: Vec<u32> = (0..n).map(|x| x.wrapping_mul(7)).collect();
    let a: Vec<f32> = (0..n).map(|x| x as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n).map(|x| 1.0e6 - x as f32).collect();
    let t = Instant::now();
    let buf = dev.htod_copy(&host).map_err(dev_err("copy in"))?;
    let da = dev.htod_copy(&a).map_err(dev_err("copy in"))?;
    let db = dev.htod_copy(&b).map_err(dev_err("copy in"))?;
    let dc = dev
        .alloc_zeros::<f32>(n as usize)
        .map_err(dev_err("allocation"))?;
    dev.synchronize().map_err(dev_err("copy in"))?;
    let up = t.elapsed();
    let bytes = n as f64 * 12.0;
    writeln!(
        out,
        "      {:.1} MB in {} ({:.1} MB/s)",
        bytes / 1e6,
        us(up),
        bytes / 1e6 / up.as_secs_f64().max(1e-9)
    )
    .map_err(io)?;

    writeln!(out, "[5/7] add1(buf, {n}): buf[i] += 1").map_err(io)?;
    let add1 = m.function("add1").map_err(dev_err("add1"))?;
    let cfg = LaunchConfig::for_num_elems(n);
    let t = Instant::now();
    dev.launch(&add1, cfg, &[buf.arg(), n.into()])
        .map_err(dev_err("launching add1"))?;
    dev.synchronize().map_err(dev_err("running add1"))?;
    let round_trip = t.elapsed();
    let got = dev.dtoh_copy(&buf).map_err(dev_err("copy out"))?;
    let bad = got
        .iter()
        .zip(&host)
        .position(|(g, h)| *g != h.wrapping_add(1));
    if let Some(i) = bad {
        return Err(CliError::Runtime(format!(
            "add1: element {i} is {}, expected {}",
            got[i],
            host[i].wrapping_add(1)
        )));
    }
    writeln!(
        out,
        "      grid {:?} x block {:?}: launch + sync {}; all {n} elements verified",
        cfg.grid,
        cfg.block,
        us(round_trip)
    )
    .map_err(io)?;

    writeln!(out, "[6/7] vector_add(a, b, c, {n}): c[i] = a[i] + b[i]").map_err(io)?;
    let vadd = m.function("vector_add").map_err(dev_err("vector_add"))?;
    let t = Instant::now();
    dev.launch(&vadd, cfg, &[da.arg(), db.arg(), dc.arg(), n.into()])
        .map_err(dev_err("launching vector_add"))?;
    dev.synchronize().map_err(dev_err("running vector_add"))?;
    let vrt = t.elapsed();
    let t = Instant::now();
    let c = dev.dtoh_copy(&dc).map_err(dev_err("copy out"))?;
    let down = t.elapsed();
    for (i, ((x, y), z)) in a.iter().zip(&b).zip(&c).enumerate() {
        if *z != x + y {
            return Err(CliError::Runtime(format!(
                "vector_add: element {i} is {z}, expected {}",
                x + y
            )));
        }
    }
    writeln!(
        out,
        "      launch + sync {}; copy out {}; all {n} elements verified",
        us(vrt),
        us(down)
    )
    .map_err(io)?;

    launch_timings(out, dev, &m)?;

    if o.faults {
        demo_faults(out, dev, &m, &buf, &host)?;
    } else {
        writeln!(
            out,
            "[7/7] done (add --faults to also run the fault and never-ending kernels)"
        )
        .map_err(io)?;
    }
    if let Some(l) = dev.with_backend(|b| b.page_table_stats()).ok().flatten() {
        writeln!(out, "      {l}").map_err(io)?;
    }
    Ok(())
}

/// Step 7 with `--faults`: a kernel that faults, one that never ends, and `add1` again on
/// the recovered device.
fn demo_faults<B: CliBackend>(
    out: &mut dyn Write,
    dev: &Device<B>,
    m: &Module<'_, B>,
    buf: &DeviceBuffer<'_, B, u32>,
    host: &[u32],
) -> Result<(), CliError> {
    let n = host.len() as u32;
    let add1 = m.function("add1").map_err(dev_err("add1"))?;
    let cfg = LaunchConfig::for_num_elems(n);
    writeln!(out, "[7/7] kernels that go wrong").map_err(io)?;
    let oob = m.function("oob_write").map_err(dev_err("oob_write"))?;
    dev.launch(&oob, LaunchConfig::for_num_elems(1), &[buf.arg()])
        .map_err(dev_err("launching oob_write"))?;
    match dev.synchronize() {
        Err(e @ DeviceError::Fault(_)) => writeln!(out, "      oob_write: {e}").map_err(io)?,
        other => {
            return Err(CliError::Runtime(format!(
                "oob_write should fault, got {other:?}"
            )));
        }
    }
    let spin = m
        .function("spin_forever")
        .map_err(dev_err("spin_forever"))?;
    dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
        .map_err(dev_err("launching spin_forever"))?;
    let t = Instant::now();
    match dev.synchronize() {
        Err(e @ DeviceError::Timeout { .. }) => {
            writeln!(out, "      spin_forever ({} later): {e}", us(t.elapsed())).map_err(io)?
        }
        other => {
            return Err(CliError::Runtime(format!(
                "spin_forever should time out, got {other:?}"
            )));
        }
    }
    dev.launch(&add1, cfg, &[buf.arg(), n.into()])
        .map_err(dev_err("add1 after recovery"))?;
    let again = dev.dtoh_copy(buf).map_err(dev_err("copy out"))?;
    let ok = again.iter().zip(host).all(|(g, h)| *g == h.wrapping_add(2));
    if !ok {
        return Err(CliError::Runtime(
            "add1 after recovery gave wrong results".into(),
        ));
    }
    writeln!(out, "      add1 after recovery: all {n} elements verified").map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::chip::Chipset;

    fn opts() -> DemoOptions {
        DemoOptions {
            elements: 3000,
            faults: true,
            timeout: Duration::from_millis(100),
        }
    }

    #[test]
    fn demo_runs_the_bare_metal_path_on_every_simulated_chip() {
        nvbare_gsp_firmware::testutil::require_firmware_dir();
        for (cs, boot_phase, unload_phase) in [
            (Chipset::GA100, "booter_load (SEC2)", "booter_unload (SEC2)"),
            (Chipset::AD102, "booter_load (SEC2)", "booter_unload (SEC2)"),
            (Chipset::GH100, "FSP chain of trust", "wait for GSP halt"),
            (Chipset::GB202, "FSP chain of trust", "wait for GSP halt"),
        ] {
            let mut out = Vec::new();
            run(&mut out, DeviceSpec::Sim(cs), opts()).unwrap();
            let s = String::from_utf8(out).unwrap();
            for want in [
                "booting GSP-RM",
                boot_phase,
                "GET_GSP_STATIC_INFO",
                "device bring-up over RM 570.144",
                "SET_PAGE_DIRECTORY",
                "golden context image created",
                "work-submit tokens",
                "all 3000 elements verified",
                "MMU fault at GPU VA",
                "RC_TRIGGERED",
                "timed out",
                "TLB invalidates",
                "unloading GSP-RM",
                "UNLOADING_GUEST_DRIVER",
                unload_phase,
                "demo passed on",
                "bare metal",
            ] {
                assert!(s.contains(want), "{cs}: missing {want:?} in\n{s}");
            }
        }
    }
}
