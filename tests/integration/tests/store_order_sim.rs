//! Store order before `GPPut` on the simulated GPUs. Rings and command memory are written
//! through write-combined mappings, whose stores become visible in no set order when drained;
//! and the host reloads `GPPut` from USERD when it switches a channel in, which happens without
//! a doorbell while another process's channel shares the GPU. On the H200 a `GPPut` visible
//! before the entry and commands it published made the host run what the ring slot or command
//! memory held a cycle earlier (stale timeline releases, docs/device.md), until a store barrier
//! went before the `GPPut` store (`DoorbellFence::StoreTwice`, the default). The simulator
//! models write-combined stores (`nvbare_sim::wc`) and, on request, drains them newest first
//! (`SimBackend::reorder_wc_stores`) and switches a channel in after every store that lands
//! (`SimBackend::switch_in_on_stores`).
#![forbid(unsafe_code)]

use nvbare_integration::{kernels_cubin, tuned};
use std::time::Duration;

use nvbare_core::channel::gpfifo::DoorbellFence;
use nvbare_core::device::{Device, DeviceError, DeviceOptions, LaunchConfig};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

const CHIPS: [(ChipModel, u32); 3] = [(AD102, 89), (GH100, 90), (GB202, 120)];
const N: u32 = 64;
const BEFORE: u32 = 40;
const DURING: u32 = 12;

/// Launches `add1` `BEFORE` times (so the 8-entry ring and the 16 KiB command memory have both
/// wrapped), then `DURING` times with stores drained newest first and the compute channel
/// switched in after every store, waiting for each; the launches alternate between two buffers
/// (so every launch writes new parameters). Both buffers, or the first error.
fn add_while_switched_in(
    model: ChipModel,
    sm: u32,
    opts: DeviceOptions,
) -> Result<Vec<u32>, DeviceError> {
    let b = SimBackend::new(model, true).expect("simulated GPU");
    let dev = Device::open(
        b,
        DeviceOptions {
            gpfifo_entries: 8,
            command_bytes: 16 << 10,
            timeout: Duration::from_millis(300),
            ..opts
        },
    )?;
    let m = dev
        .load_cubin(&kernels_cubin(sm, 13))
        .expect("fixture cubin loads");
    let add1 = m.function("add1")?;
    let bufs = [
        dev.htod_copy(&vec![0u32; N as usize])?,
        dev.htod_copy(&vec![0u32; N as usize])?,
    ];
    let cfg = LaunchConfig::for_num_elems(N);
    for i in 0..BEFORE {
        dev.launch(&add1, cfg, &[bufs[i as usize % 2].arg(), N.into()])?;
    }
    dev.synchronize()?;
    let [compute, _] = dev.channel_handles()?;
    dev.with_backend(|be| {
        be.reorder_wc_stores(true);
        assert!(be.switch_in_on_stores(compute, true));
    })?;
    for i in 0..DURING {
        dev.launch(&add1, cfg, &[bufs[i as usize % 2].arg(), N.into()])?;
        dev.synchronize()?;
    }
    let pending = dev.with_backend(|be| be.pending_wc_stores())?;
    if opts.tuning.write_ahead {
        // The last wait wrote the next launch ahead (bank 0, QMD, pushbuffer, GP entry): those
        // stores may wait for a barrier, as nothing has published them.
        assert!(dev.stats().written_ahead_now);
        assert!(pending <= 4, "{pending}");
    } else {
        assert_eq!(pending, 0);
    }
    if opts.tuning.write_ahead {
        // Each launch after a wait went through the region written ahead (new parameters:
        // the changed words written at launch).
        assert!(
            dev.stats().written_ahead >= u64::from(DURING),
            "{}",
            dev.stats().written_ahead
        );
    }
    let mut both = dev.dtoh_copy(&bufs[0])?;
    both.extend(dev.dtoh_copy(&bufs[1])?);
    Ok(both)
}

#[test]
fn a_barrier_before_gpput_keeps_switched_in_channels_from_running_stale_commands() {
    for (model, sm) in CHIPS {
        for write_ahead in [true, false] {
            let opts = tuned(DeviceOptions::default(), |t| {
                t.write_ahead = write_ahead;
            });
            assert_eq!(opts.tuning.doorbell_fence, DoorbellFence::StoreTwice);
            let got = add_while_switched_in(model, sm, opts)
                .unwrap_or_else(|e| panic!("{:?} write-ahead {write_ahead}: {e}", model.chipset));
            let each = (BEFORE + DURING) / 2;
            assert_eq!(
                got,
                vec![each; 2 * N as usize],
                "{:?} write-ahead {write_ahead}",
                model.chipset
            );
        }
    }
}

#[test]
fn one_barrier_after_gpput_runs_stale_commands_as_the_h200_did() {
    for (model, sm) in CHIPS {
        let opts = tuned(DeviceOptions::default(), |t| {
            t.doorbell_fence = DoorbellFence::Store;
        });
        match add_while_switched_in(model, sm, opts) {
            Err(e) => {
                let msg = e.to_string();
                let report = e
                    .report()
                    .unwrap_or_else(|| panic!("{:?}: {msg}", model.chipset));
                // The H200's signature: every entry fetched, and the timeline below a value a
                // wait had seen (the host ran the ring slot's entry from a cycle earlier).
                assert!(report.reached < report.wanted, "{:?}: {msg}", model.chipset);
                assert!(
                    report.went_back_from.is_some(),
                    "{:?}: {msg}",
                    model.chipset
                );
                assert!(
                    msg.contains("had fetched every submission"),
                    "{:?}: {msg}",
                    model.chipset
                );
                // Recovery does not depend on store order.
                assert!(
                    msg.contains("channels were re-created"),
                    "{:?}: {msg}",
                    model.chipset
                );
            }
            Ok(got) => panic!(
                "{:?}: every launch ran as written ({:?}...) although GPPut was visible before \
                 its commands",
                model.chipset,
                &got[..4]
            ),
        }
    }
}

#[test]
fn write_combined_stores_wait_for_a_barrier_and_never_land_after_a_free() {
    use nvbare_core::device::{Backend, GpuMemory, Location, MemoryRequest, Purpose};
    use nvbare_core::hal::Mmio;
    let b = SimBackend::new(GH100, true).expect("simulated GPU");
    let dev = Device::open(b, DeviceOptions::default()).unwrap();
    dev.with_backend(|be| {
        let req = |purpose, location| MemoryRequest {
            size: 4096,
            location,
            cpu_access: true,
            align: 4096,
            purpose,
        };
        // Command memory and CPU-mapped video memory are written write-combined; a staging
        // buffer in host memory is ordinary cached memory.
        let cmds = be
            .alloc_memory(&req(Purpose::Commands, Location::Host))
            .unwrap();
        let vram = be
            .alloc_memory(&req(Purpose::Buffer, Location::Device))
            .unwrap();
        let staging = be
            .alloc_memory(&req(Purpose::Staging, Location::Host))
            .unwrap();
        staging.write_u32(0, 7).unwrap();
        assert_eq!(be.pending_wc_stores(), 0);
        cmds.write_u32(8, 0xdead_beef).unwrap();
        vram.write_u32(0, 5).unwrap();
        assert_eq!(be.pending_wc_stores(), 2);
        assert_eq!(
            cmds.read_u32(8).unwrap(),
            0xdead_beef,
            "the CPU reads its own stores"
        );
        // A store barrier of the usermode window drains them.
        let um = be
            .map_usermode(nvbare_core::rm::class::HOPPER_USERMODE_A)
            .unwrap();
        um.store_barrier();
        assert_eq!(be.pending_wc_stores(), 0);
        cmds.write_u32(12, 1).unwrap();
        assert_eq!(be.pending_wc_stores(), 1);
        // Freeing (unmapping) drains what is pending first.
        be.free_memory(cmds).unwrap();
        assert_eq!(be.pending_wc_stores(), 0);
        be.free_memory(vram).unwrap();
        be.free_memory(staging).unwrap();
    })
    .unwrap();
}
