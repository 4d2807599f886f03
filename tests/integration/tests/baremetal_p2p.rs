//! Two bare-metal GPUs in one simulated host (`nvbare_sim::baremetal_system::BareMetalSystem`):
//! both boot GSP-RM with the real r570.144 firmware, build their own page tables, and reach
//! each other's VRAM through the peer's BAR1 (SYS non-coherent PTEs at the peer's BAR1 bus
//! address, walked by the simulated GMMU). Copies both ways pushed and pulled, cross-device
//! semaphores and events, peer host memory, unmap → fault, no P2P → a clear error. Virtual
//! time.
#![forbid(unsafe_code)]

use nvbare_integration::kernels_cubin;
use std::time::Duration;

use nvbare_core::chip::Chipset;
use nvbare_core::device::baremetal::BareMetalOptions;
use nvbare_core::device::{
    Backend, BackendError, Device, DeviceError, DeviceOptions, LaunchConfig, Location, PeerMode,
    PeerPath,
};
use nvbare_core::gsp::boot::{BootOptions, NoObserver};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::baremetal::SimBareMetal;
use nvbare_sim::baremetal_system::BareMetalSystem;
use nvbare_sim::gpu_mem::{Aperture, FaultKind};
use nvbare_sim::mmu::{GmmuFormat, TableLoc, WalkedPage};
use nvbare_sim::models::{AD102, ChipModel, GH100};
use nvbare_sim::system::Topology;

mod common;
use common::firmware;

fn dev_opts() -> DeviceOptions {
    DeviceOptions {
        timeout: Duration::from_millis(200),
        ..Default::default()
    }
}

/// A host with `models`, every GPU booted and opened as a device.
fn host(models: &[ChipModel], topology: Topology) -> (BareMetalSystem, Vec<Device<SimBareMetal>>) {
    let gpus: Vec<_> = models.iter().map(|m| (*m, firmware(m.chipset).0)).collect();
    let sys = BareMetalSystem::new(&gpus, topology, true).unwrap();
    let devs = models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let fw = firmware(m.chipset).1;
            let be = sys
                .open(
                    i,
                    &*fw,
                    &BootOptions::default(),
                    &mut NoObserver,
                    BareMetalOptions::default(),
                )
                .unwrap_or_else(|e| panic!("GPU {i}: {e}; sim errors {:?}", sys.errors()));
            Device::open(be, dev_opts()).unwrap()
        })
        .collect();
    (sys, devs)
}

/// Asserts equal contents, naming the first difference (not printing megabytes).
#[track_caller]
fn same(got: Vec<u32>, want: &[u32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!("{what}: element {i} is {:#x}, want {:#x}", got[i], want[i]);
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
        .collect()
}

fn kernels(model: ChipModel) -> Vec<u8> {
    let sm = match model.chipset {
        Chipset::AD102 => 89,
        Chipset::GH100 => 90,
        _ => 120,
    };
    kernels_cubin(sm, 12)
}

/// An odd size: not a whole number of pages.
const N: usize = (1 << 20) / 4 + 3;

/// Walks the page tables the first GPU of `sys` (`dev`, a GH100) runs on at `va`, as its MMU
/// does.
fn walk_first(
    sys: &BareMetalSystem,
    dev: &Device<SimBareMetal>,
    va: u64,
) -> Result<WalkedPage, FaultKind> {
    let pdb = dev.with_backend(|be| be.page_directory()).unwrap();
    let sim = sys.sim(0).unwrap();
    let space = sim.mmu().address_space(
        GmmuFormat::for_chip(GH100.chipset.info()),
        TableLoc {
            aperture: Aperture::Vram,
            addr: pdb.addr,
        },
    );
    sim.gpu().with_core(|core| space.walk(core, va))
}

fn copies_both_ways(model: ChipModel) {
    let (sys, devs) = host(&[model, model], Topology::P2p);
    let (a, b) = (&devs[0], &devs[1]);
    let link = a.enable_peer_access(b, PeerMode::Direct).unwrap();
    let PeerPath::Direct(info) = link.path() else {
        panic!("{}: {}", model.board, link.path());
    };
    assert_eq!(info.peer_id, None, "BAR1 P2P uses no peer id");
    assert!(info.link.contains("BAR1"), "{}", info.link);
    assert!(link.gpu_waits());

    let (pa, pb) = (pattern(N, 1), pattern(N, 2));
    let src_a = a.htod_copy(&pa).unwrap();
    let src_b = b.htod_copy(&pb).unwrap();
    // Pushed by the source's copy engine.
    let mut dst_b = b.alloc_zeros::<u32>(N).unwrap();
    let mut dst_a = a.alloc_zeros::<u32>(N).unwrap();
    link.copy(&src_a, &mut dst_b).unwrap();
    link.copy(&src_b, &mut dst_a).unwrap();
    same(
        b.dtoh_copy(&dst_b).unwrap(),
        &pa,
        &format!("{}: A -> B", model.board),
    );
    same(
        a.dtoh_copy(&dst_a).unwrap(),
        &pb,
        &format!("{}: B -> A", model.board),
    );
    // Pulled by the destination's.
    let mut dst_b2 = b.alloc_zeros::<u32>(N).unwrap();
    let mut dst_a2 = a.alloc_zeros::<u32>(N).unwrap();
    b.dtod_peer_copy(&link, &src_a, &mut dst_b2).unwrap();
    a.dtod_peer_copy(&link, &src_b, &mut dst_a2).unwrap();
    same(
        b.dtoh_copy(&dst_b2).unwrap(),
        &pa,
        &format!("{}: pulled A -> B", model.board),
    );
    same(
        a.dtoh_copy(&dst_a2).unwrap(),
        &pb,
        &format!("{}: pulled B -> A", model.board),
    );
    // Nothing of A's own VRAM changed at the addresses B's buffers use (the data went over
    // the BAR1 window, not into the accessor's memory): every check above read B through B.
    drop(link);
    assert!(sys.errors().is_empty(), "{:?}", sys.errors());
    for i in 0..2 {
        assert_eq!(sys.sim(i).unwrap().mmu().stats().stale_hits, 0);
    }
}

#[test]
fn peer_copies_both_ways_pushed_and_pulled_gh100() {
    copies_both_ways(GH100);
}

#[test]
fn peer_copies_both_ways_pushed_and_pulled_ad102() {
    copies_both_ways(AD102);
}

#[test]
fn a_peer_mapping_is_sys_noncoherent_at_the_peer_bar1_and_faults_once_unmapped() {
    let (sys, devs) = host(&[GH100, GH100], Topology::P2p);
    let (a, b) = (&devs[0], &devs[1]);
    let link = a.enable_peer_access(b, PeerMode::Direct).unwrap();
    let data = pattern(4096 + 5, 9);
    let buf_b = b.htod_copy(&data).unwrap();
    let on_a = link.map(&buf_b).unwrap();
    assert_eq!(on_a.device().id(), a.id());

    // Walk A's page tables (ours) at the mapping.
    let walked = walk_first(&sys, a, on_a.gpu_va()).unwrap();
    assert_eq!(walked.aperture, Aperture::SysNonCoherent);
    let bar1 = sys.bar1_base(1).unwrap();
    let pa = walked
        .phys
        .checked_sub(bar1)
        .unwrap_or_else(|| panic!("{:#x} is not in B's BAR1 at {bar1:#x}", walked.phys));
    assert!(pa < GH100.bar1_size, "{pa:#x}");
    // What lies there in B's VRAM is B's buffer.
    let mut first = [0u8; 8];
    sys.sim(1)
        .unwrap()
        .gpu()
        .vram()
        .read(pa, &mut first)
        .unwrap();
    assert_eq!(first[..4], data[0].to_le_bytes());
    assert_eq!(first[4..], data[1].to_le_bytes());

    // A kernel on A increments B's buffer through the mapping.
    let m = a.load_cubin(&kernels(GH100)).unwrap();
    let add1 = m.function("add1").unwrap();
    let n = data.len() as u32;
    a.launch(
        &add1,
        LaunchConfig::for_num_elems(n),
        &[on_a.arg(), n.into()],
    )
    .unwrap();
    a.synchronize().unwrap();
    let want: Vec<u32> = data.iter().map(|x| x.wrapping_add(1)).collect();
    same(b.dtoh_copy(&buf_b).unwrap(), &want, "buf_b");

    // Unmapped, the same VA faults on A (the unmap invalidated A's TLB).
    let stale = on_a.arg();
    let va = on_a.gpu_va();
    on_a.finish().unwrap();
    assert!(walk_first(&sys, a, va).is_err());
    a.launch(&add1, LaunchConfig::for_num_elems(n), &[stale, n.into()])
        .unwrap();
    let err = a.synchronize().unwrap_err();
    let DeviceError::Fault(report) = &err else {
        panic!("expected an MMU fault, got {err}");
    };
    assert_eq!(report.fault_address(), Some(va), "{err}");
    assert_eq!(sys.sim(0).unwrap().mmu().stats().stale_hits, 0);
    // B's buffer kept the kernel's first result.
    same(b.dtoh_copy(&buf_b).unwrap(), &want, "buf_b");
}

#[test]
fn a_gpu_waits_for_a_semaphore_the_other_releases_and_events_order_peer_reads() {
    let (sys, devs) = host(&[GH100, GH100], Topology::P2p);
    let (a, b) = (&devs[0], &devs[1]);
    let link = a.enable_peer_access(b, PeerMode::Direct).unwrap();
    let n = 1 << 16;
    let gate = link.semaphore(a).unwrap();
    let sem = link.semaphore(b).unwrap();
    let (pa, pb) = (pattern(n, 3), pattern(n, 4));
    let src_a = a.htod_copy(&pa).unwrap();
    let src_b = b.htod_copy(&pb).unwrap();
    let mut mid_a = a.alloc_zeros::<u32>(n).unwrap();
    let mut dst_b = b.alloc_zeros::<u32>(n).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();

    // A: wait for the CPU's gate, copy, release 5 into B's semaphore. B: acquire 5, copy.
    gate.wait(a, 1).unwrap();
    a.dtod_copy(&src_a, &mut mid_a).unwrap();
    sem.release(a, 5).unwrap();
    sem.wait(b, 5).unwrap();
    b.dtod_copy(&src_b, &mut dst_b).unwrap();
    // Let both make all the progress they can: nothing may pass the closed gate.
    sys.kick();
    let (ta, tb) = (a.timelines().unwrap(), b.timelines().unwrap());
    assert!(ta[1].1 < ta[1].0, "A's copy ran past the gate: {ta:?}");
    assert!(tb[1].1 < tb[1].0, "B's copy ran before A's release: {tb:?}");
    assert_eq!(sem.value().unwrap(), 0);
    gate.set(1).unwrap();
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    assert_eq!(sem.value().unwrap(), 5);
    same(a.dtoh_copy(&mid_a).unwrap(), &pa, "mid_a");
    same(b.dtoh_copy(&dst_b).unwrap(), &pb, "dst_b");

    // An event: A's pull of B's buffer waits for B's gated copy.
    let gate_b = link.semaphore(b).unwrap();
    let data = pattern(n, 5);
    let staged = b.htod_copy(&data).unwrap();
    let mut buf_b = b.alloc_zeros::<u32>(n).unwrap();
    let mut got = a.alloc_zeros::<u32>(n).unwrap();
    b.synchronize().unwrap();
    gate_b.wait(b, 1).unwrap();
    b.dtod_copy(&staged, &mut buf_b).unwrap();
    let ev = b.record_event().unwrap();
    link.wait_event(a, &ev).unwrap();
    let on_a = link.map(&buf_b).unwrap();
    link.copy_from_peer(&on_a, &mut got).unwrap();
    sys.kick();
    let t = a.timelines().unwrap();
    assert!(t[1].1 < t[1].0, "A's pull ran before B's event: {t:?}");
    gate_b.set(1).unwrap();
    a.synchronize().unwrap();
    on_a.finish().unwrap();
    same(a.dtoh_copy(&got).unwrap(), &data, "got");
}

#[test]
fn peer_host_memory_maps_as_system_memory() {
    let (sys, devs) = host(&[GH100, GH100], Topology::P2p);
    let (a, b) = (&devs[0], &devs[1]);
    let link = a.enable_peer_access(b, PeerMode::Direct).unwrap();
    let host_b = b.alloc_host::<u32>(1000).unwrap();
    assert_eq!(host_b.location(), Location::Host);
    let on_a = link.map(&host_b).unwrap();
    let walked = walk_first(&sys, a, on_a.gpu_va()).unwrap();
    assert_eq!(walked.aperture, Aperture::SysCoherent);
    // A's copy engine writes B's host buffer through the mapping.
    let src = a.htod_copy(&pattern(1000, 6)).unwrap();
    link.copy_to_peer(&src, &on_a).unwrap();
    a.synchronize().unwrap();
    assert_eq!(b.dtoh_copy(&host_b).unwrap(), pattern(1000, 6));
}

#[test]
fn without_p2p_enable_fails_clearly_and_staging_only_when_asked() {
    let (sys, devs) = host(&[GH100, GH100], Topology::NoP2p);
    assert!(sys.bar1_base(1).is_none());
    let (a, b) = (&devs[0], &devs[1]);
    let e = a.enable_peer_access(b, PeerMode::Direct).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, DeviceError::PeerUnavailable { .. }), "{s}");
    assert!(
        s.contains("no P2P path") && s.contains("AllowHostStaging"),
        "{s}"
    );
    // The backend itself says PeerUnsupported, naming why.
    let be_err = a
        .with_backend(|ba| b.with_backend(|bb| ba.enable_peer(bb)))
        .unwrap()
        .unwrap()
        .unwrap_err();
    let BackendError::PeerUnsupported { reason } = &be_err else {
        panic!("{be_err}");
    };
    assert!(reason.contains("BAR1 is not reachable"), "{reason}");

    let link = a.enable_peer_access(b, PeerMode::AllowHostStaging).unwrap();
    assert!(!link.is_direct());
    // Host memory is still shared (one DMA space), so the GPUs still wait for each other.
    assert!(link.gpu_waits());
    let src = a.htod_copy(&pattern(N, 7)).unwrap();
    let mut dst = b.alloc_zeros::<u32>(N).unwrap();
    link.copy(&src, &mut dst).unwrap();
    assert_eq!(b.dtoh_copy(&dst).unwrap(), pattern(N, 7));
    assert!(matches!(
        link.map(&src),
        Err(DeviceError::PeerUnavailable { .. })
    ));
    // A DMA to where B's BAR1 would be is a fault, not a silent success.
    assert!(
        sys.host()
            .read(
                nvbare_sim::system::PEER_BAR1_BASE + nvbare_sim::system::PEER_BAR1_STRIDE,
                &mut [0; 4]
            )
            .is_err()
    );
}

#[test]
fn different_chips_and_separate_hosts_are_not_peers() {
    let (_sys, devs) = host(&[GH100, AD102], Topology::P2p);
    let e = devs[0]
        .enable_peer_access(&devs[1], PeerMode::Direct)
        .unwrap_err()
        .to_string();
    assert!(e.contains("same architecture"), "{e}");

    // Two hosts (two DMA address spaces): not even host memory is shared.
    let (_h1, mut d1) = host(&[GH100], Topology::P2p);
    let (_h2, mut d2) = host(&[GH100], Topology::P2p);
    let (c, d) = (d1.remove(0), d2.remove(0));
    let e = c
        .enable_peer_access(&d, PeerMode::Direct)
        .unwrap_err()
        .to_string();
    assert!(e.contains("different DMA address spaces"), "{e}");
    let staged = c
        .enable_peer_access(&d, PeerMode::AllowHostStaging)
        .unwrap();
    assert!(!staged.gpu_waits());
    let src = c.htod_copy(&pattern(3000, 8)).unwrap();
    let mut dst = d.alloc_zeros::<u32>(3000).unwrap();
    staged.copy(&src, &mut dst).unwrap();
    assert_eq!(d.dtoh_copy(&dst).unwrap(), pattern(3000, 8));
}
