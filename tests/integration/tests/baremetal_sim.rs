//! The bare-metal backend end to end on the simulated GPUs: GSP boot with the real r570.144
//! firmware, GSP RPC, our page tables (walked by the simulated GMMU), channels with physical
//! descriptors, GR context promotion, copies and launches, faults reported by GSP events,
//! unload and a second boot. Virtual time, so timeouts cost nothing.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::device::baremetal::{BareMetalError, BareMetalOptions, TablePlacement};
use nvbare_core::device::{Device, DeviceError, DeviceOptions, LaunchConfig, Recovery};
use nvbare_core::gsp::boot::{BootOptions, NoObserver};
use nvbare_core::rm::ctrl::rc;
use nvbare_gsp_firmware::FirmwareSet;
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::baremetal::{BareMetalSim, SimBareMetal};
use nvbare_sim::models::{AD102, ChipModel, GA100, GB202, GH100, TU102, TU104};

mod common;
use common::firmware;

fn fixture(name: &str) -> Vec<u8> {
    let p = format!("{}/../fixtures/cubins/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn sim(model: ChipModel) -> (BareMetalSim, Arc<FirmwareSet>) {
    let (sim_fw, fw) = firmware(model.chipset);
    (BareMetalSim::new(model, sim_fw, true).unwrap(), fw)
}

fn open_backend(s: &BareMetalSim, fw: &FirmwareSet, opts: BareMetalOptions) -> SimBareMetal {
    s.open(fw, &BootOptions::default(), &mut NoObserver, opts)
        .unwrap_or_else(|e| panic!("bare-metal backend: {e}; sim errors {:?}", s.errors()))
}

fn dev_opts() -> DeviceOptions {
    DeviceOptions {
        timeout: Duration::from_millis(200),
        ..Default::default()
    }
}

fn sm_of(model: ChipModel) -> u32 {
    match model.chipset {
        Chipset::TU102 | Chipset::TU104 => 75,
        Chipset::GA100 => 80,
        Chipset::AD102 => 89,
        Chipset::GH100 => 90,
        _ => 120,
    }
}

/// Copies in, add1, vector_add, copies out; every element checked.
fn run_kernels(dev: &Device<SimBareMetal>, sm: u32, n: u32) {
    let host: Vec<u32> = (0..n).map(|x| x.wrapping_mul(2654435761)).collect();
    let buf = dev.htod_copy(&host).unwrap();
    let m = dev
        .load_cubin(&fixture(&format!("kernels_sm{sm}_cuda12.cubin")))
        .unwrap();
    let add1 = m.function("add1").unwrap();
    dev.launch(
        &add1,
        LaunchConfig::for_num_elems(n),
        &[buf.arg(), n.into()],
    )
    .unwrap();
    let out = dev.dtoh_copy(&buf).unwrap();
    for (i, (o, h)) in out.iter().zip(&host).enumerate() {
        assert_eq!(*o, h.wrapping_add(1), "add1 element {i}");
    }
    let a: Vec<f32> = (0..n).map(|x| x as f32).collect();
    let b: Vec<f32> = (0..n).map(|x| 0.5 * x as f32).collect();
    let (da, db) = (dev.htod_copy(&a).unwrap(), dev.htod_copy(&b).unwrap());
    let dc = dev.alloc_zeros::<f32>(n as usize).unwrap();
    let vadd = m.function("vector_add").unwrap();
    dev.launch(
        &vadd,
        LaunchConfig::for_num_elems(n),
        &[da.arg(), db.arg(), dc.arg(), n.into()],
    )
    .unwrap();
    let c = dev.dtoh_copy(&dc).unwrap();
    for i in 0..n as usize {
        assert_eq!(c[i], a[i] + b[i], "vector_add element {i}");
    }
}

#[test]
fn demo_flow_on_every_chip() {
    for model in [TU102, TU104, GA100, AD102, GH100, GB202] {
        let (s, fw) = sim(model);
        let be = open_backend(&s, &fw, BareMetalOptions::default());
        assert!(be.golden_image());
        assert!(s.rm().golden_image(), "{}: no golden image", model.board);
        let dev = Device::open(be, dev_opts()).unwrap();
        assert_eq!(dev.info().driver_version.as_deref(), Some("570.144"));
        run_kernels(&dev, sm_of(model), 5000);
        let be = dev.close().unwrap();
        let stats = be.map_stats();
        assert!(stats.invalidates > 0);
        be.unload(&mut NoObserver).unwrap();
        assert!(s.errors().is_empty(), "{}: {:?}", model.board, s.errors());
        assert_eq!(s.mmu().stats().stale_hits, 0, "{}", model.board);
    }
}

fn kernels_module<'d>(
    dev: &'d Device<SimBareMetal>,
    model: ChipModel,
) -> nvbare_core::device::Module<'d, SimBareMetal> {
    dev.load_cubin(&fixture(&format!(
        "kernels_sm{}_cuda12.cubin",
        sm_of(model)
    )))
    .unwrap()
}

#[test]
fn fault_and_spin_kernels_report_through_gsp_events_and_the_device_recovers() {
    for model in [GH100, GB202] {
        let (s, fw) = sim(model);
        let be = open_backend(&s, &fw, BareMetalOptions::default());
        let dev = Device::open(be, dev_opts()).unwrap();
        let m = kernels_module(&dev, model);
        let buf = dev.alloc_zeros::<u32>(64).unwrap();
        let oob = m.function("oob_write").unwrap();
        dev.launch(&oob, LaunchConfig::for_num_elems(32), &[buf.arg()])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Fault(report) = &err else {
            panic!("{}: expected a fault, got {err}", model.board);
        };
        let want = buf.gpu_va() + (1 << 40);
        // The error notifier GSP-RM wrote at the physical address we gave it.
        assert_eq!(report.rc, Some(rc::ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT));
        assert_eq!(report.fault_address(), Some(want), "{err}");
        // And the events GSP-RM sent.
        let ev = report.events.join("\n");
        assert!(ev.contains("MMU_FAULT_QUEUED"), "{ev}");
        assert!(ev.contains("RC_TRIGGERED"), "{ev}");
        assert!(ev.contains(&format!("{want:#x}")), "{ev}");
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);

        let spin = m.function("spin_forever").unwrap();
        dev.launch(&spin, LaunchConfig::for_num_elems(1), &[])
            .unwrap();
        let err = dev.synchronize().unwrap_err();
        let DeviceError::Timeout { report, .. } = &err else {
            panic!("{}: expected a timeout, got {err}", model.board);
        };
        assert_eq!(report.kernel.as_deref(), Some("spin_forever"));
        assert_eq!(report.recovery, Recovery::ChannelsRecreated);

        // Buffers survived both; new work runs on the re-created channels.
        let add1 = m.function("add1").unwrap();
        dev.launch(
            &add1,
            LaunchConfig::for_num_elems(64),
            &[buf.arg(), 64u32.into()],
        )
        .unwrap();
        assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![1u32; 64]);
        drop(m);
        drop(buf);
        drop(dev); // closes the device and unloads GSP-RM
        assert!(s.errors().is_empty(), "{}: {:?}", model.board, s.errors());
    }
}

#[test]
fn unload_then_boot_again_in_one_process() {
    for model in [AD102, GH100] {
        let (s, fw) = sim(model);
        for round in 0..2 {
            let be = open_backend(&s, &fw, BareMetalOptions::default());
            let dev = Device::open(be, dev_opts()).unwrap();
            run_kernels(&dev, sm_of(model), 1000);
            if round == 0 {
                // A closed device hands the backend back; it can carry another device.
                let be = dev.close().unwrap();
                let dev = Device::open(be, dev_opts()).unwrap();
                run_kernels(&dev, sm_of(model), 100);
                let report = dev.close().unwrap().unload(&mut NoObserver).unwrap();
                assert!(!report.suspend_timed_out);
            } else {
                drop(dev); // Drop unloads too
            }
        }
        // And once more after the implicit unload.
        let be = open_backend(&s, &fw, BareMetalOptions::default());
        drop(be);
        let st = s.boot().stats();
        assert_eq!(st.gsp_rm_starts, 3, "{}", model.board);
        assert_eq!(st.resets, 0, "no GPU reset needed");
        assert!(s.boot().wpr2().is_none(), "WPR2 down after the last unload");
        assert!(s.errors().is_empty(), "{}: {:?}", model.board, s.errors());
    }
}

#[test]
fn page_tables_in_host_memory() {
    let (s, fw) = sim(GB202);
    let opts = BareMetalOptions {
        tables: TablePlacement::Host,
        ..Default::default()
    };
    let be = open_backend(&s, &fw, opts);
    assert_eq!(be.page_tables().2, None);
    let dev = Device::open(be, dev_opts()).unwrap();
    run_kernels(&dev, 120, 3000);
    drop(dev);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn freed_memory_is_unmapped_and_invalidated_before_reuse() {
    let (s, fw) = sim(GH100);
    let be = open_backend(&s, &fw, BareMetalOptions::default());
    let dev = Device::open(be, dev_opts()).unwrap();
    let m = kernels_module(&dev, GH100);
    let add1 = m.function("add1").unwrap();
    let buf = dev.htod_copy(&[7u32; 1024]).unwrap();
    dev.launch(
        &add1,
        LaunchConfig::for_num_elems(1024),
        &[buf.arg(), 1024u32.into()],
    )
    .unwrap();
    dev.synchronize().unwrap();
    // The GPU has the translation cached now; free the buffer and use its address anyway.
    let stale = buf.arg();
    let va = buf.gpu_va();
    drop(buf);
    dev.launch(
        &add1,
        LaunchConfig::for_num_elems(1024),
        &[stale, 1024u32.into()],
    )
    .unwrap();
    let err = dev.synchronize().unwrap_err();
    let DeviceError::Fault(report) = &err else {
        panic!("expected an MMU fault, got {err}");
    };
    assert_eq!(report.fault_address(), Some(va), "{err}");
    // Had the unmap not been invalidated, the TLB would have served the old page.
    assert_eq!(s.mmu().stats().stale_hits, 0);
}

#[test]
fn tables_changed_behind_the_tlb_are_caught() {
    use nvbare_core::hal::Mmio;
    let (s, fw) = sim(AD102);
    let be = open_backend(&s, &fw, BareMetalOptions::default());
    let pdb = be.page_directory();
    let dev = Device::open(be, dev_opts()).unwrap();
    let m = kernels_module(&dev, AD102);
    let add1 = m.function("add1").unwrap();
    let buf = dev.htod_copy(&[1u32; 256]).unwrap();
    let run = |d: &Device<SimBareMetal>| {
        d.launch(
            &add1,
            LaunchConfig::for_num_elems(256),
            &[buf.arg(), 256u32.into()],
        )?;
        d.synchronize()
    };
    run(&dev).unwrap();
    assert_eq!(s.mmu().stats().stale_hits, 0);
    // A wrong page table: the root directory wiped behind the mapper's back (as a stray write
    // would), without a TLB invalidate. Translations the GPU cached keep working, stale (the
    // simulated TLB counts them); the first access to anything else walks the broken tables
    // and faults.
    let bar1 = s.bar1();
    for o in (0..64u64).step_by(4) {
        bar1.write32((pdb.addr + o) as usize, 0);
    }
    let stale = run(&dev);
    assert!(
        s.mmu().stats().stale_hits > 0,
        "the TLB served translations the tables no longer have"
    );
    let err = match stale {
        Err(e) => e, // something not cached was touched: the walk already faulted
        Ok(()) => {
            // Invalidate (what the mapper does after every change): now everything walks.
            use nvbare_core::regs::Register;
            use nvbare_core::regs::mmu::{
                NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE,
                NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB,
            };
            let bar0 = s.gpu().bar0();
            NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::new()
                .with_addr((pdb.addr >> 12) as u32)
                .write(&bar0);
            NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::new()
                .with_all_va(true)
                .with_all_pdb(true)
                .with_trigger(true)
                .write(&bar0);
            run(&dev).unwrap_err()
        }
    };
    let DeviceError::Fault(report) = &err else {
        panic!("expected an MMU fault, got {err}");
    };
    assert_eq!(
        report.rc,
        Some(rc::ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT),
        "{err}"
    );
    // Re-created channels cannot work on broken tables: the device gives up, once.
    assert!(
        matches!(report.recovery, Recovery::Failed(_)),
        "{:?}",
        report.recovery
    );
    assert!(matches!(run(&dev), Err(DeviceError::Dead(_))));
    // Teardown copes with the broken tables (unmaps fail and are logged; GSP-RM unloads).
    drop(buf);
    drop(m);
    drop(dev);
}

#[test]
fn the_simulated_gsp_rm_checks_the_kernel_rm_s_work() {
    // Without the golden context image, the first launch fails on context load.
    let (s, fw) = sim(GH100);
    let opts = BareMetalOptions {
        golden_image: false,
        ..Default::default()
    };
    let be = open_backend(&s, &fw, opts);
    let dev = Device::open(be, dev_opts()).unwrap();
    let m = kernels_module(&dev, GH100);
    let add1 = m.function("add1").unwrap();
    let buf = dev.alloc_zeros::<u32>(16).unwrap();
    dev.launch(
        &add1,
        LaunchConfig::for_num_elems(16),
        &[buf.arg(), 16u32.into()],
    )
    .unwrap();
    let err = dev.synchronize().unwrap_err();
    let DeviceError::Fault(report) = &err else {
        panic!("expected a GR exception, got {err}");
    };
    assert_eq!(report.rc, Some(rc::ROBUST_CHANNEL_GR_EXCEPTION), "{err}");
    assert!(report.events.join(" ").contains("golden"), "{err}");
    drop(buf);
    drop(m);
    drop(dev);

    // SET_PAGE_DIRECTORY: once per VA space, only on externally owned ones.
    let (s, fw) = sim(AD102);
    let be = open_backend(&s, &fw, BareMetalOptions::default());
    let root = be.page_directory();
    let dev = Device::open(be, dev_opts()).unwrap();
    // Work-submit tokens carry GR's runlist from the device info table (0, as on real GPUs).
    assert_eq!(
        dev.info().tokens[0] >> 16,
        nvbare_sim::rm::gr_runlist(AD102.chipset),
        "{:#x}",
        dev.info().tokens[0]
    );
    let objs = s
        .rm()
        .objects(nvbare_core::gsp::rpc::ClientConfig::default().client);
    let find = |class| objs.iter().find(|(_, c)| *c == class).unwrap().0;
    let (device, vaspace) = (
        find(nvbare_core::rm::class::NV01_DEVICE_0),
        find(nvbare_core::rm::class::FERMI_VASPACE_A),
    );
    let client = nvbare_core::gsp::rpc::ClientConfig::default().client;
    let pd = nvbare_core::gsp::client::NV0080_CTRL_DMA_SET_PAGE_DIRECTORY_PARAMS_v1E_05 {
        physAddress: root.addr,
        numEntries: 4,
        hVASpace: vaspace.0,
        // Unicast, as every proven driver sends it (a broadcast may be refused first).
        subDeviceId: 1,
        ..Default::default()
    };
    let again = dev
        .with_backend(|b| {
            b.transport()
                .unwrap()
                .set_page_directory(client, device, &pd)
        })
        .unwrap();
    assert!(
        matches!(again, Err(nvbare_core::gsp::GspError::Status { status, .. })
            if status == nvbare_core::rm::RmStatus::NV_ERR_INVALID_STATE),
        "{again:?}"
    );
    drop(dev);
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

#[test]
fn bar1_must_be_put_in_physical_mode() {
    // A plain boot (no backend): GSP-RM leaves BAR1 translated; the CPU reaches nothing.
    use nvbare_core::hal::Mmio;
    let (s, fw) = sim(AD102);
    let booted =
        nvbare_core::gsp::boot::boot(&s.hw(), &*fw, &BootOptions::default(), &mut NoObserver)
            .unwrap();
    s.bar1().write32(0x1000, 0x1234);
    assert_eq!(s.bar1().read32(0x1000), u32::MAX);
    assert!(!s.errors().is_empty());
    nvbare_core::device::baremetal::set_bar1_physical(&s.gpu().bar0(), AD102.chipset.info());
    s.bar1().write32(0x1000, 0x1234);
    assert_eq!(s.bar1().read32(0x1000), 0x1234);
    booted.unload(&s.hw(), &mut NoObserver, None).unwrap();
}

/// BAR1 as a small-BAR system shows it (256 MiB).
#[derive(Clone)]
struct SmallBar1(nvbare_sim::SimBar1, usize);
impl nvbare_core::hal::Mmio for SmallBar1 {
    fn size(&self) -> usize {
        self.1
    }
    fn read32(&self, o: usize) -> u32 {
        self.0.read32(o)
    }
    fn write32(&self, o: usize, v: u32) {
        self.0.write32(o, v)
    }
}

/// The simulator with [`SmallBar1`].
struct SmallBarPlatform;
impl nvbare_core::device::baremetal::BarePlatform for SmallBarPlatform {
    type Bar0 = nvbare_sim::SimBar0;
    type Bar1 = SmallBar1;
    type Dma = nvbare_sim::SimDma;
    type Clock = nvbare_sim::baremetal::GspClock;
    type Pci = nvbare_sim::SimPci;
}

#[test]
fn a_small_bar_limits_device_memory_and_a_tiny_one_is_refused() {
    use nvbare_core::device::Backend;
    // A BAR1 below the minimum: refused before booting.
    let (s, fw) = sim(AD102);
    let r = nvbare_core::device::baremetal::BareMetalBackend::<SmallBarPlatform>::open(
        s.hw(),
        SmallBar1(s.bar1(), 32 << 20),
        &*fw,
        &BootOptions::default(),
        &mut NoObserver,
        BareMetalOptions::default(),
    );
    let e = r.map(|_| ()).unwrap_err();
    assert!(matches!(e, BareMetalError::SmallBar { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("Resizable BAR"), "{msg}");
    assert_eq!(s.boot().stats().gsp_rm_starts, 0, "refused before booting");

    // 256 MiB (a GPU without Resizable BAR): it boots, and hands out only VRAM below BAR1's end.
    let (s, fw) = sim(AD102);
    let be = nvbare_core::device::baremetal::BareMetalBackend::<SmallBarPlatform>::open(
        s.hw(),
        SmallBar1(s.bar1(), 256 << 20),
        &*fw,
        &BootOptions::default(),
        &mut NoObserver,
        BareMetalOptions::default(),
    )
    .unwrap();
    let (free, total) = be.memory_info().unwrap();
    assert_eq!(total, 256 << 20);
    assert!(free < 256 << 20, "{free:#x}");
}

/// A GSP-RM that reports absurd buffer sizes: the backend refuses them with an error naming the
/// value, before allocating anything from them.
#[test]
fn sizes_gsp_rm_chooses_are_capped() {
    use nvbare_core::gsp::client::{
        NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE,
        NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO,
    };
    use nvbare_sim::boot::BootSimConfig;
    use nvbare_sim::gsp::Fault;
    let lies = [
        (
            NV2080_CTRL_CMD_CE_GET_FAULT_METHOD_BUFFER_SIZE,
            0,
            0x4000_0000,
        ),
        // engineContextBuffersInfo[0].engine[GRAPHICS].size
        (
            NV2080_CTRL_CMD_INTERNAL_STATIC_KGR_GET_CONTEXT_BUFFERS_INFO,
            0,
            0xf000_0000,
        ),
    ];
    for (cmd, offset, value) in lies {
        let (sim_fw, fw) = firmware(GH100.chipset);
        let cfg = BootSimConfig::new(sim_fw.clone()).with_gsp_fault(Fault::PatchControl {
            cmd,
            offset,
            value,
        });
        let s = BareMetalSim::with_config(GH100, cfg, true).unwrap();
        let e = s
            .open(
                &*fw,
                &BootOptions::default(),
                &mut NoObserver,
                BareMetalOptions::default(),
            )
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(e, BareMetalError::GspSizeTooLarge { value: v, .. } if v == value as u64),
            "{cmd:#x}: {e}"
        );
        assert!(e.to_string().contains(&format!("{value:#x}")), "{e}");
    }
}
