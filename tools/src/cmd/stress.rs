//! `nvbare stress`: leak checks. Runs many allocation/free cycles and many launches (through
//! the device layer) and checks that the driver's RM object count and the free
//! GPU memory come back to where they started.
//!
//! Counts come from a separate RM client that lives across the whole run, so they cover
//! everything the worker client created and freed. The RM object count is driver-wide
//! (`NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO`, root only); run on an otherwise idle GPU.

use std::io::Write;

#[cfg(any(feature = "nvidia-kmod", test))]
use super::bench_gpu::rt;
use crate::{CliError, DeviceSpec};

/// What `nvbare stress` was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StressArgs {
    /// Only print the current counts.
    pub counts: bool,
    /// Allocation/free cycles.
    pub alloc_free: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Bytes per allocation.
    pub size: u64,
}

/// Runs `nvbare stress`.
pub fn run(out: &mut dyn Write, device: DeviceSpec, args: StressArgs) -> Result<(), CliError> {
    match device {
        #[cfg(feature = "nvidia-kmod")]
        DeviceSpec::Nvidia(index) => kmod::run(out, index, args),
        #[cfg(not(feature = "nvidia-kmod"))]
        DeviceSpec::Nvidia(index) => {
            let _ = (out, args);
            Err(crate::kmod::not_built(index))
        }
        other => Err(CliError::Usage(format!(
            "nvbare stress runs on nvidia:N devices (it checks the kernel driver's RM object \
             counts); {other} is not one"
        ))),
    }
}

/// Stream order: `chain` launches of `add1` (one added to each of `elems` u32s) back to back
/// over one buffer with no wait between them, then every element checked. Each grid reads what
/// the one before wrote, so a grid that started before the one before it finished loses
/// increments (the H200 lost up to 11 per element until every launch waited for idle first).
#[cfg(any(feature = "nvidia-kmod", test))]
fn stream_order<B: nvbare_core::device::Backend>(
    dev: &nvbare_core::device::Device<B>,
    add1: &nvbare_core::device::Function<'_, '_, B>,
    chain: u32,
    elems: u32,
) -> Result<(), CliError> {
    use nvbare_core::device::LaunchConfig;
    let start: Vec<u32> = (0..elems).map(|i| i.wrapping_mul(7)).collect();
    let buf = dev.htod_copy(&start).map_err(rt("copy in"))?;
    let cfg = LaunchConfig::for_num_elems(elems);
    for _ in 0..chain {
        dev.launch(add1, cfg, &[buf.arg(), elems.into()])
            .map_err(rt("launching add1"))?;
    }
    let back = dev.dtoh_copy(&buf).map_err(rt("copy out"))?;
    let short = short_by(&back, &start, chain);
    if !short.is_empty() {
        return Err(CliError::Runtime(format!(
            "{chain} add1 launches back to back left {} of {elems} elements short (by {} to {} \
             increments): consecutive kernels overlapped or some did not run",
            short.len(),
            short.iter().min().unwrap_or(&0),
            short.iter().max().unwrap_or(&0)
        )));
    }
    Ok(())
}

/// Launch + sync round trips of `add1` whose arguments change at almost every launch (two
/// buffers of `elems` u32s, every third launch on the first, the others on the second with a
/// count that covers half of it; a launch that ran with the launch before's arguments changes
/// the totals): after a wait the
/// next launch is written ahead as a repeat of the last (docs/device.md), so each of these
/// writes only the words of constant bank 0 that differ, and one whose call differs from the
/// last only in argument values builds nothing else (`DeviceStats::argument_only`).
/// Checks every element and returns how many launches went through command memory written
/// ahead, and how many of those wrote only their arguments.
#[cfg(any(feature = "nvidia-kmod", test))]
fn changing_round_trips<B: nvbare_core::device::Backend>(
    dev: &nvbare_core::device::Device<B>,
    add1: &nvbare_core::device::Function<'_, '_, B>,
    rounds: u32,
    elems: u32,
) -> Result<(u64, u64), CliError> {
    use nvbare_core::device::LaunchConfig;
    let start: Vec<u32> = (0..elems).collect();
    let a = dev.htod_copy(&start).map_err(rt("copy in"))?;
    let b = dev.htod_copy(&start).map_err(rt("copy in"))?;
    let half = elems / 2;
    let before = dev.stats();
    for i in 0..rounds {
        let (buf, n) = if i % 3 == 0 { (&a, elems) } else { (&b, half) };
        // One shape for both: only the arguments (constant bank 0) change.
        dev.launch(
            add1,
            LaunchConfig::for_num_elems(elems),
            &[buf.arg(), n.into()],
        )
        .map_err(rt("launching add1"))?;
        dev.synchronize().map_err(rt("running add1"))?;
    }
    let after = dev.stats();
    let through_ahead = after.written_ahead - before.written_ahead;
    let args_only = after.argument_only - before.argument_only;
    let ra = rounds.div_ceil(3);
    let rb = rounds - ra;
    let got_a = dev.dtoh_copy(&a).map_err(rt("copy out"))?;
    let got_b = dev.dtoh_copy(&b).map_err(rt("copy out"))?;
    let wrong_a = got_a
        .iter()
        .zip(&start)
        .filter(|(g, s)| **g != *s + ra)
        .count();
    let wrong_b = (got_b.iter().zip(&start).enumerate())
        .filter(|(i, (g, s))| **g != *s + if (*i as u32) < half { rb } else { 0 })
        .count();
    if wrong_a + wrong_b > 0 {
        return Err(CliError::Runtime(format!(
            "{rounds} add1 round trips over two buffers in turn left {wrong_a} and \
             {wrong_b} of {elems} elements wrong: a launch ran with an earlier launch's \
             arguments"
        )));
    }
    Ok((through_ahead, args_only))
}

/// For each element of `back` that did not get `chain` added to `start`, how many it is short.
#[cfg(any(feature = "nvidia-kmod", test))]
fn short_by(back: &[u32], start: &[u32], chain: u32) -> Vec<u32> {
    back.iter()
        .zip(start)
        .map(|(b, s)| chain.wrapping_sub(b.wrapping_sub(*s)))
        .filter(|&d| d != 0)
        .collect()
}

#[cfg(feature = "nvidia-kmod")]
mod kmod {
    use super::*;
    use nvbare_core::rm::Rm;
    use nvbare_pci_host::nvidia::{
        GpuPageSize, KernelGpu, KmodError, MemoryLocation, MemoryRequest, UvmVaSpace,
    };

    /// A [`nvbare_core::hal::Clock`] over `std::time` (TODO: use `nvbare_pci_host::clock` once
    /// this branch has it).
    struct StdClock(std::time::Instant);

    impl nvbare_core::hal::Clock for StdClock {
        fn now(&self) -> std::time::Duration {
            self.0.elapsed()
        }
        fn delay(&self, d: std::time::Duration) {
            std::thread::sleep(d)
        }
    }

    enum SettleError {
        Timeout,
        Cli(CliError),
    }

    impl From<nvbare_core::hal::PollError> for SettleError {
        fn from(_: nvbare_core::hal::PollError) -> Self {
            SettleError::Timeout
        }
    }

    /// Driver-wide counts at one moment.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Counts {
        /// RM clients and resources, when readable (root only).
        rm: Option<(u32, u64)>,
        /// Free video memory, bytes.
        vram_free: u64,
    }

    fn counts(monitor: &mut KernelGpu) -> Result<Counts, CliError> {
        let rm = match monitor.rm().database_info() {
            Ok(i) => Some((i.clients, i.resources)),
            Err(e) => {
                log::info!("RM object counts unavailable: {e}");
                None
            }
        };
        let vram_free = monitor.vram().map_err(KmodError::from)?.free;
        Ok(Counts { rm, vram_free })
    }

    fn print_counts(out: &mut dyn Write, c: &Counts) -> std::io::Result<()> {
        match c.rm {
            Some((clients, resources)) => {
                writeln!(out, "rm-clients {clients}")?;
                writeln!(out, "rm-resources {resources}")?;
            }
            None => writeln!(out, "rm-resources unavailable (needs root)")?,
        }
        writeln!(out, "vram-free {}", c.vram_free)
    }

    fn io(e: std::io::Error) -> CliError {
        CliError::Runtime(format!("writing output: {e}"))
    }

    /// One cycle: allocate, map for the CPU and touch both ends, map into the GPU VA space
    /// through UVM, unmap both, free.
    fn cycle(gpu: &mut KernelGpu, vas: &UvmVaSpace, i: u64, size: u64) -> Result<(), CliError> {
        let location = if i % 8 == 7 {
            MemoryLocation::Sysmem
        } else {
            MemoryLocation::Vidmem
        };
        let req = MemoryRequest {
            size,
            location,
            page_size: GpuPageSize::for_buffer(size, location, true),
            contiguous: false,
        };
        let device = gpu.device();
        let Some(len) = req.rounded_size() else {
            return Err(CliError::Usage(format!(
                "allocation size {size} is too large"
            )));
        };
        let mem = gpu.rm().alloc_memory(device, &req)?;
        let touched = {
            let (rm, node) = gpu.rm_and_node();
            let mapped = match location {
                MemoryLocation::Vidmem => rm.map_cpu(node, device, mem, 0, len, 0, None),
                MemoryLocation::Sysmem => rm.map_cpu_system(device, mem, 0, len, 0, None),
            };
            mapped.map(|map| {
                let pattern: Vec<u8> = (0..64u64).map(|k| (i.wrapping_mul(31) + k) as u8).collect();
                let last = map.len().saturating_sub(pattern.len());
                let mut first = vec![0u8; pattern.len()];
                let mut end = vec![0u8; pattern.len()];
                map.write(0, &pattern).is_ok()
                    && map.write(last, &pattern).is_ok()
                    && map.read(0, &mut first).is_ok()
                    && map.read(last, &mut end).is_ok()
                    && first == pattern
                    && end == pattern
            })
        };
        let va = vas.window().base();
        let gpu_mapped = vas
            .map(gpu.rm_ref(), mem, va, len, 0)
            .and_then(|()| vas.unmap(va, len));
        let freed = gpu.rm().free(mem);
        let ok = touched?;
        gpu_mapped?;
        freed.map_err(KmodError::from)?;
        if !ok {
            return Err(CliError::Runtime(format!(
                "cycle {i}: what was written through the CPU mapping of a {location:?} buffer \
                 did not read back"
            )));
        }
        Ok(())
    }

    /// `add1` launches in the stream-order check.
    const CHAIN: u32 = 1000;
    /// Elements each of them adds one to (16 MiB: every grid runs for microseconds).
    const CHAIN_ELEMS: u32 = 4 << 20;
    /// Deferred doorbells of the second stream-order run.
    const CHAIN_DEFER: u32 = 16;
    /// Round trips whose arguments change at every launch.
    const ROUND_TRIPS: u32 = 200;

    /// Opens the GPU with the device layer, launches `empty` `n` times (waiting every 10 000),
    /// checks an `add1` at the end, then stream order ([`super::stream_order`] with [`CHAIN`]
    /// launches over 4 Mi elements), and closes it.
    fn launches(out: &mut dyn Write, index: u32, n: u64) -> Result<(), CliError> {
        use nvbare_core::device::{Device, DeviceOptions, LaunchConfig};
        use nvbare_gsp_firmware::program::LoadCubin;
        use nvbare_pci_host::nvidia::KernelBackend;
        let dev = Device::open(KernelBackend::open(index)?, DeviceOptions::default())
            .map_err(rt("opening the device"))?;
        let sm = dev.info().sm;
        let (name, cubin) = crate::open::demo_cubin(sm)
            .ok_or_else(|| CliError::Runtime(format!("no fixture cubin for sm_{sm}")))?;
        let m = dev
            .load_cubin(cubin)
            .map_err(|e| CliError::Runtime(format!("loading {name}: {e}")))?;
        let empty = m.function("empty").map_err(rt("empty"))?;
        let add1 = m.function("add1").map_err(rt("add1"))?;
        let start = std::time::Instant::now();
        let one = LaunchConfig::for_num_elems(1);
        for i in 0..n {
            dev.launch(&empty, one, &[])
                .map_err(rt("launching empty"))?;
            if (i + 1) % 10_000 == 0 {
                dev.synchronize().map_err(rt("running empty"))?;
            }
        }
        dev.synchronize().map_err(rt("running empty"))?;
        let elapsed = start.elapsed();
        let host: Vec<u32> = (0..4096u32).collect();
        let buf = dev.htod_copy(&host).map_err(rt("copy in"))?;
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(4096),
            &[buf.arg(), 4096u32.into()],
        )
        .map_err(rt("launching add1"))?;
        let back = dev.dtoh_copy(&buf).map_err(rt("copy out"))?;
        if back.iter().zip(&host).any(|(b, h)| *b != h + 1) {
            return Err(CliError::Runtime(format!(
                "add1 after {n} launches gave wrong results"
            )));
        }
        drop(buf);
        super::stream_order(&dev, &add1, CHAIN, CHAIN_ELEMS)?;
        let (ahead, args_only) = super::changing_round_trips(&dev, &add1, ROUND_TRIPS, 4096)?;
        drop(m);
        drop(dev);
        // Again with deferred doorbells, where launches are chained: the GPU, not
        // WAIT_FOR_IDLE, orders them there.
        let mut opts = DeviceOptions::default();
        opts.tuning.deferred_submits = CHAIN_DEFER;
        let dev = Device::open(KernelBackend::open(index)?, opts)
            .map_err(rt("opening the device with deferred doorbells"))?;
        let m = dev
            .load_cubin(cubin)
            .map_err(|e| CliError::Runtime(format!("loading {name}: {e}")))?;
        let add1 = m.function("add1").map_err(rt("add1"))?;
        super::stream_order(&dev, &add1, CHAIN, CHAIN_ELEMS)?;
        let chained = dev.stats().chained;
        if chained == 0 {
            return Err(CliError::Runtime(format!(
                "with {CHAIN_DEFER} deferred doorbells no launch was chained"
            )));
        }
        drop(m);
        drop(dev);
        writeln!(
            out,
            "{n} launches of empty in {elapsed:.2?} ({:.3} µs each), then add1 verified; \
             {CHAIN} dependent add1 launches back to back in order, and again with doorbells \
             deferred ({chained} chained); {ROUND_TRIPS} round trips with changing arguments \
             ({ahead} through command memory written ahead, {args_only} of them writing only \
             their arguments)",
            elapsed.as_secs_f64() * 1e6 / n as f64
        )
        .map_err(io)
    }

    pub(super) fn run(out: &mut dyn Write, index: u32, args: StressArgs) -> Result<(), CliError> {
        let mut monitor = KernelGpu::open(index)?;
        let before = counts(&mut monitor)?;
        if args.counts {
            return print_counts(out, &before).map_err(io);
        }
        if args.alloc_free > 0 {
            let mut worker = KernelGpu::open(index)?;
            let window = args
                .size
                .checked_add((2 << 20) - 1)
                .map(|s| s & !((2 << 20) - 1))
                .ok_or_else(|| CliError::Usage(format!("--size {} is too large", args.size)))?;
            let vas = UvmVaSpace::new(&mut worker, window)?;
            let start = std::time::Instant::now();
            for i in 0..args.alloc_free {
                cycle(&mut worker, &vas, i, args.size)?;
            }
            let live = worker.rm_ref().live_objects();
            // The worker holds its device, subdevice and VA space.
            if live != 3 {
                return Err(CliError::Runtime(format!(
                    "after {} cycles the worker client still holds {live} objects (expected 3)",
                    args.alloc_free
                )));
            }
            drop(vas);
            writeln!(
                out,
                "{} alloc / CPU map / GPU map (UVM) / free cycles of {} bytes in {:.2?}",
                args.alloc_free,
                args.size,
                start.elapsed()
            )
            .map_err(io)?;
        }
        if args.launches > 0 {
            launches(out, index, args.launches)?;
        }
        // UVM and RM may release some objects a moment after the worker's files close (deferred
        // client frees); give them a few seconds before calling it a leak.
        let mut after = counts(&mut monitor)?;
        let settled: Result<Counts, SettleError> = nvbare_core::hal::poll_until(
            &StdClock(std::time::Instant::now()),
            std::time::Duration::from_secs(5),
            std::time::Duration::from_millis(50),
            "RM object count and free VRAM to return to their starting values",
            || {
                let c = counts(&mut monitor).map_err(SettleError::Cli)?;
                after = c;
                Ok((c == before).then_some(c))
            },
        );
        match settled {
            Ok(c) => after = c,
            Err(SettleError::Timeout) => {}
            Err(SettleError::Cli(e)) => return Err(e),
        }
        writeln!(out, "before:").map_err(io)?;
        print_counts(out, &before).map_err(io)?;
        writeln!(out, "after:").map_err(io)?;
        print_counts(out, &after).map_err(io)?;
        judge(&before, &after).map_err(CliError::Runtime)?;
        writeln!(out, "no leaks").map_err(io)?;
        Ok(())
    }

    /// Compares the driver-wide counts from before and after the run. More RM objects or less
    /// free VRAM is a leak; fewer objects or more free VRAM can only be another process's
    /// doing (the counts are the driver's, not this process's), which makes the check
    /// inconclusive.
    fn judge(before: &Counts, after: &Counts) -> Result<(), String> {
        if before == after {
            return Ok(());
        }
        let mut grew = Vec::new();
        let mut fell = Vec::new();
        if let (Some((c0, r0)), Some((c1, r1))) = (before.rm, after.rm) {
            let s = format!("RM clients {c0} -> {c1}, resources {r0} -> {r1}");
            if c1 > c0 || r1 > r0 {
                grew.push(s);
            } else if c1 < c0 || r1 < r0 {
                fell.push(s);
            }
        } else if before.rm != after.rm {
            grew.push(format!("RM objects {:?} -> {:?}", before.rm, after.rm));
        }
        let vram = format!(
            "free VRAM {} -> {} bytes",
            before.vram_free, after.vram_free
        );
        match after.vram_free.cmp(&before.vram_free) {
            std::cmp::Ordering::Less => grew.push(vram),
            std::cmp::Ordering::Greater => fell.push(vram),
            std::cmp::Ordering::Equal => {}
        }
        if !grew.is_empty() {
            Err(format!(
                "leak: {} (another process allocating on the GPU meanwhile would look the \
                 same: run stress on an otherwise idle GPU to be sure)",
                grew.join(", ")
            ))
        } else {
            Err(format!(
                "inconclusive: {} during the run, which only another process can do (the \
                 counts are the driver's); run stress on an otherwise idle GPU",
                fell.join(", ")
            ))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn c(rm: Option<(u32, u64)>, vram_free: u64) -> Counts {
            Counts { rm, vram_free }
        }

        #[test]
        fn growth_is_a_leak_and_a_drop_is_another_process() {
            let before = c(Some((9, 66)), 1000);
            assert_eq!(judge(&before, &before), Ok(()));
            let e = judge(&before, &c(Some((9, 67)), 1000)).unwrap_err();
            assert!(
                e.starts_with("leak: RM clients 9 -> 9, resources 66 -> 67"),
                "{e}"
            );
            let e = judge(&before, &c(Some((9, 66)), 900)).unwrap_err();
            assert!(e.starts_with("leak: free VRAM 1000 -> 900 bytes"), "{e}");
            // What a busy process exiting during the run looked like on the H200.
            let e = judge(&c(Some((11, 94)), 900), &c(Some((9, 66)), 1000)).unwrap_err();
            assert!(e.starts_with("inconclusive: RM clients 11 -> 9"), "{e}");
            assert!(e.contains("free VRAM 900 -> 1000 bytes"), "{e}");
            // Growth wins over a drop elsewhere.
            let e = judge(&before, &c(Some((8, 70)), 1100)).unwrap_err();
            assert!(
                e.starts_with("leak: RM clients 9 -> 8, resources 66 -> 70"),
                "{e}"
            );
            // RM counts readable before and not after: not comparable, reported to look at.
            let e = judge(&before, &c(None, 1000)).unwrap_err();
            assert!(
                e.starts_with("leak: RM objects Some((9, 66)) -> None"),
                "{e}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::device::{Device, DeviceOptions};
    use nvbare_gsp_firmware::program::LoadCubin;
    use nvbare_sim::backend::SimBackend;
    use nvbare_sim::models::GH100;

    #[test]
    fn stream_order_and_changing_round_trips_pass_on_the_simulator() {
        let dev = Device::open(
            SimBackend::new(GH100, true).expect("simulated GPU"),
            DeviceOptions::default(),
        )
        .expect("device opens");
        let (_, cubin) = crate::open::demo_cubin(90).expect("fixture cubin");
        let m = dev.load_cubin(cubin).expect("loads");
        let add1 = m.function("add1").expect("add1");
        stream_order(&dev, &add1, 20, 3000).expect("in order");
        // Every launch after the first goes through a region written ahead; those whose
        // arguments changed (buffer a, b, b, a, ...: two of every three) write only those.
        let ahead = changing_round_trips(&dev, &add1, 21, 3000).expect("right arguments");
        assert_eq!(ahead, (20, 13));
        // What the hardware did without a wait between launches: some elements short.
        assert_eq!(short_by(&[10, 8, 3, 19], &[0, 0, 0, 9], 10), vec![2, 7]);
        assert!(short_by(&[10, 12], &[0, 2], 10).is_empty());
    }
}
