//! Several devices in one process on a simulated host (`nvbare_sim::system::SimSystem`): peer
//! links, copies between GPUs in both directions, peer mappings as kernel arguments,
//! cross-device semaphore waits and events, and what happens without a P2P path.
#![forbid(unsafe_code)]

use nvbare_integration::kernels_cubin;
use std::sync::Arc;

use nvbare_core::device::{
    Device, DeviceError, DeviceOptions, LaunchConfig, Location, PeerMode, PeerPath,
};
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::gpu_mem::Aperture;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};
use nvbare_sim::system::{SimSystem, Topology};

fn system(models: &[ChipModel], topology: Topology) -> Arc<SimSystem> {
    SimSystem::new(models, topology, true).expect("simulated host")
}

fn open(sys: &Arc<SimSystem>, i: usize) -> Device<SimBackend> {
    Device::open(sys.backend(i).expect("backend"), DeviceOptions::default()).expect("device")
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
        .collect()
}

/// More than the 4 MiB staging buffer and not a multiple of a page.
const N: usize = (5 << 20) / 4 + 3;

#[test]
fn copies_both_ways_on_every_chip_pair() {
    for model in [GH100, AD102, GB202] {
        let sys = system(&[model, model], Topology::P2p);
        let (a, b) = (open(&sys, 0), open(&sys, 1));
        assert_ne!(a.id(), b.id());
        let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
        let PeerPath::Direct(info) = link.path() else {
            panic!("{}: {}", model.board, link.path());
        };
        assert!(info.peer_id.is_some());
        assert!(link.gpu_waits());

        // A -> B on A's copy engine (push), B -> A on B's (push).
        let (pa, pb) = (pattern(N, 1), pattern(N, 2));
        let src_a = a.htod_copy(&pa).unwrap();
        let src_b = b.htod_copy(&pb).unwrap();
        let mut dst_b = b.alloc_zeros::<u32>(N).unwrap();
        let mut dst_a = a.alloc_zeros::<u32>(N).unwrap();
        link.copy(&src_a, &mut dst_b).unwrap();
        link.copy(&src_b, &mut dst_a).unwrap();
        assert_eq!(b.dtoh_copy(&dst_b).unwrap(), pa, "{}: A -> B", model.board);
        assert_eq!(a.dtoh_copy(&dst_a).unwrap(), pb, "{}: B -> A", model.board);

        // The same copies pulled by the destination's copy engine.
        let mut dst_b2 = b.alloc_zeros::<u32>(N).unwrap();
        let mut dst_a2 = a.alloc_zeros::<u32>(N).unwrap();
        b.dtod_peer_copy(&link, &src_a, &mut dst_b2).unwrap();
        a.dtod_peer_copy(&link, &src_b, &mut dst_a2).unwrap();
        assert_eq!(
            b.dtoh_copy(&dst_b2).unwrap(),
            pa,
            "{}: pulled A -> B",
            model.board
        );
        assert_eq!(
            a.dtoh_copy(&dst_a2).unwrap(),
            pb,
            "{}: pulled B -> A",
            model.board
        );

        // The sources are unchanged and nothing of A leaked into B's own buffers or back.
        assert_eq!(a.dtoh_copy(&src_a).unwrap(), pa);
        assert_eq!(b.dtoh_copy(&src_b).unwrap(), pb);
    }
}

#[test]
fn peer_mappings_lead_to_the_other_gpus_memory() {
    let sys = system(&[GH100, GH100], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
    let buf_b = b.htod_copy(&pattern(4096, 7)).unwrap();
    let on_a = link.map(&buf_b).unwrap();
    assert!(std::ptr::eq(on_a.device(), &a));
    let id = sys.peer_id(0, 1).unwrap();
    let t = a
        .with_backend(|bk| bk.translate(on_a.gpu_va() + 8))
        .unwrap()
        .unwrap();
    assert_eq!(t.aperture, Aperture::Peer(id));
    // B's own view of the buffer is local video memory at the same physical address.
    let local = b
        .with_backend(|bk| bk.translate(buf_b.gpu_va() + 8))
        .unwrap()
        .unwrap();
    assert_eq!((local.aperture, local.phys), (Aperture::Vram, t.phys));

    // Pull through the mapping, push through a mapping of A's buffer into B.
    let mut copy_a = a.alloc_zeros::<u32>(4096).unwrap();
    link.copy_from_peer(&on_a, &mut copy_a).unwrap();
    assert_eq!(a.dtoh_copy(&copy_a).unwrap(), pattern(4096, 7));
    let back = b.alloc_zeros::<u32>(4096).unwrap();
    let back_on_a = link.map(&back).unwrap();
    link.copy_to_peer(&copy_a, &back_on_a).unwrap();
    assert_eq!(b.dtoh_copy(&back).unwrap(), pattern(4096, 7));

    // Mapping errors: a buffer of neither device; copying with the wrong side.
    let c_sys = system(&[GH100], Topology::P2p);
    let c = open(&c_sys, 0);
    let foreign = c.alloc::<u32>(16).unwrap();
    assert!(matches!(
        link.map(&foreign),
        Err(DeviceError::ForeignObject(_))
    ));
    assert!(matches!(
        link.copy_to_peer(&buf_b, &on_a),
        Err(DeviceError::ForeignObject(_))
    ));
    let mut small = a.alloc::<u32>(16).unwrap();
    assert!(matches!(
        link.copy_from_peer(&on_a, &mut small),
        Err(DeviceError::BadRange(_))
    ));
    drop(back_on_a);
    drop(on_a);
    // Unmapped: the VA leads nowhere any more.
    let va_gone = {
        let m = link.map(&buf_b).unwrap();
        m.gpu_va()
    };
    assert!(a.with_backend(|bk| bk.translate(va_gone)).unwrap().is_err());
}

#[test]
fn a_kernel_on_one_gpu_updates_the_others_memory() {
    for (model, sm) in [(GH100, 90), (AD102, 89), (GB202, 120)] {
        let sys = system(&[model, model], Topology::P2p);
        let (a, b) = (open(&sys, 0), open(&sys, 1));
        let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
        let n = 10_000u32;
        let data: Vec<u32> = (0..n).map(|i| i * 5).collect();
        let buf_b = b.htod_copy(&data).unwrap();
        let on_a = link.map(&buf_b).unwrap();
        let module = a.load_cubin(&kernels_cubin(sm, 12)).unwrap();
        let add1 = module.function("add1").unwrap();
        // B's upload first, then A's kernel on B's memory, then B reads it back.
        link.wait_event(&a, &b.record_event().unwrap()).unwrap();
        a.launch(
            &add1,
            LaunchConfig::for_num_elems(n),
            &[on_a.arg(), n.into()],
        )
        .unwrap();
        link.wait_event(&b, &a.record_event().unwrap()).unwrap();
        let out = b.dtoh_copy(&buf_b).unwrap();
        assert!(
            out.iter().enumerate().all(|(i, &v)| v == i as u32 * 5 + 1),
            "{}",
            model.board
        );
        // A pointer of B's own buffer is not A's to use.
        assert!(matches!(
            a.launch(
                &add1,
                LaunchConfig::for_num_elems(n),
                &[buf_b.arg(), n.into()]
            ),
            Err(DeviceError::ForeignObject(_))
        ));
    }
}

#[test]
fn a_gpu_waits_for_a_semaphore_the_other_gpu_releases() {
    let sys = system(&[GH100, GH100], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
    let gate = link.semaphore(&a).unwrap(); // opened by the CPU
    let sem = link.semaphore(&b).unwrap(); // released by A, acquired by B

    let src_a = a.htod_copy(&pattern(1 << 16, 3)).unwrap();
    let mut mid_a = a.alloc_zeros::<u32>(1 << 16).unwrap();
    let src_b = b.htod_copy(&pattern(1 << 16, 4)).unwrap();
    let mut dst_b = b.alloc_zeros::<u32>(1 << 16).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();

    gate.wait(&a, 1).unwrap();
    a.dtod_copy(&src_a, &mut mid_a).unwrap();
    sem.release(&a, 7).unwrap();
    sem.wait(&b, 7).unwrap();
    b.dtod_copy(&src_b, &mut dst_b).unwrap();

    // Nothing has run: A waits for the CPU, B for A.
    let [_, (sub_a, done_a)] = a.timelines().unwrap();
    let [_, (sub_b, done_b)] = b.timelines().unwrap();
    assert!(done_a < sub_a && done_b < sub_b);
    assert_eq!(sem.value().unwrap(), 0);

    gate.set(1).unwrap();
    // A ran and released; B followed.
    assert_eq!(sem.value().unwrap(), 7);
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    assert!(a.dtoh_copy(&mid_a).unwrap() == pattern(1 << 16, 3));
    assert!(b.dtoh_copy(&dst_b).unwrap() == pattern(1 << 16, 4));

    // B waits first; A's release (from A's own submission, no CPU write) wakes B.
    let mut dst_b2 = b.alloc_zeros::<u32>(1 << 16).unwrap();
    b.synchronize().unwrap();
    sem.wait(&b, 9).unwrap();
    b.dtod_copy(&src_b, &mut dst_b2).unwrap();
    let [_, (sub_b, done_b)] = b.timelines().unwrap();
    assert!(done_b < sub_b, "B waits for A");
    sem.release(&a, 9).unwrap();
    let [_, (sub_b, done_b)] = b.timelines().unwrap();
    assert_eq!(done_b, sub_b, "A's release ran B's blocked work");
    assert!(b.dtoh_copy(&dst_b2).unwrap() == pattern(1 << 16, 4));

    // A value the semaphore never reaches leaves the waiter blocked until it times out.
    let quick = DeviceOptions {
        timeout: std::time::Duration::from_millis(50),
        ..DeviceOptions::default()
    };
    let sys2 = system(&[GH100, GH100], Topology::P2p);
    let c = Device::open(sys2.backend(0).unwrap(), quick).unwrap();
    let d = Device::open(sys2.backend(1).unwrap(), quick).unwrap();
    let l2 = c.enable_peer_access(&d, PeerMode::Direct).unwrap();
    let never = l2.semaphore(&c).unwrap();
    never.wait(&d, 1).unwrap();
    let e = d.synchronize().unwrap_err();
    assert!(matches!(e, DeviceError::Timeout { .. }), "{e}");
    // Recovery re-created d's channels; d works again.
    let x = d.htod_copy(&[1u32, 2, 3]).unwrap();
    assert_eq!(d.dtoh_copy(&x).unwrap(), vec![1, 2, 3]);
}

#[test]
fn peer_copies_order_themselves_against_both_gpus() {
    let sys = system(&[GB202, GB202], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
    let gate = link.semaphore(&a).unwrap();
    let n = 1u32 << 14;
    let data = pattern(n as usize, 21);
    let buf_b = b.htod_copy(&data).unwrap();
    let mut got = a.alloc_zeros::<u32>(n as usize).unwrap();
    let module = b.load_cubin(&kernels_cubin(120, 12)).unwrap();
    let add1 = module.function("add1").unwrap();
    b.synchronize().unwrap();
    let on_a = link.map(&buf_b).unwrap();
    let cfg = LaunchConfig::for_num_elems(n);

    // B increments buf_b only after the gate opens; A's pull, with no event, must still see
    // the incremented buffer (a peer copy follows all earlier work of both devices) ...
    gate.wait(&b, 1).unwrap();
    b.launch(&add1, cfg, &[buf_b.arg(), n.into()]).unwrap();
    link.copy_from_peer(&on_a, &mut got).unwrap();
    // ... and B's next increment must wait for A's pull.
    b.launch(&add1, cfg, &[buf_b.arg(), n.into()]).unwrap();
    let [_, (sub, done)] = a.timelines().unwrap();
    assert!(done < sub, "A's pull waits for B's gated work");

    gate.set(1).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    let plus = |k: u32| data.iter().map(|v| v.wrapping_add(k)).collect::<Vec<u32>>();
    assert!(
        a.dtoh_copy(&got).unwrap() == plus(1),
        "A must pull after B's first add1 and before its second"
    );
    assert!(b.dtoh_copy(&buf_b).unwrap() == plus(2));
}

#[test]
fn an_event_orders_one_gpus_work_after_the_others() {
    let sys = system(&[AD102, AD102], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
    let gate = link.semaphore(&b).unwrap();
    let data = pattern(1 << 15, 9);
    let staged = b.htod_copy(&data).unwrap();
    let mut buf_b = b.alloc_zeros::<u32>(1 << 15).unwrap();
    b.synchronize().unwrap();

    // B: blocked on the gate, then fills buf_b.
    gate.wait(&b, 1).unwrap();
    b.dtod_copy(&staged, &mut buf_b).unwrap();
    let ev = b.record_event().unwrap();
    // A: waits for that, then pulls buf_b.
    link.wait_event(&a, &ev).unwrap();
    let on_a = link.map(&buf_b).unwrap();
    let mut got = a.alloc_zeros::<u32>(1 << 15).unwrap();
    link.copy_from_peer(&on_a, &mut got).unwrap();
    let [_, (sub, done)] = a.timelines().unwrap();
    assert!(done < sub, "A's copy must wait for B's event");

    gate.set(1).unwrap();
    a.synchronize().unwrap();
    assert_eq!(
        a.dtoh_copy(&got).unwrap(),
        data,
        "A saw B's data, not zeros"
    );

    // An event of a device outside the link is refused; one's own event is a no-op.
    let other = system(&[AD102], Topology::P2p);
    let c = open(&other, 0);
    let ev_c = c.record_event().unwrap();
    assert!(matches!(
        link.wait_event(&a, &ev_c),
        Err(DeviceError::ForeignObject(_))
    ));
    link.wait_event(&a, &a.record_event().unwrap()).unwrap();
    assert!(matches!(
        link.wait_event(&c, &ev),
        Err(DeviceError::ForeignObject(_))
    ));
}

#[test]
fn without_a_p2p_path_direct_access_is_a_clear_error_and_staging_only_when_asked() {
    let sys = system(&[GH100, GH100], Topology::NoP2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let e = a.enable_peer_access(&b, PeerMode::Direct).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DeviceError::PeerUnavailable { .. }), "{e:?}");
    assert!(msg.contains("no P2P path"), "{msg}");
    assert!(msg.contains("AllowHostStaging"), "{msg}");
    assert!(
        sys.peer_id(0, 1).is_none(),
        "a failed enable leaves no peer port"
    );

    let link = a
        .enable_peer_access(&b, PeerMode::AllowHostStaging)
        .unwrap();
    assert!(matches!(link.path(), PeerPath::HostStaging { .. }));
    assert!(!link.is_direct());
    // Host memory is still shared, so the GPUs still wait for each other on the GPU.
    assert!(link.gpu_waits());
    let (pa, pb) = (pattern(N, 5), pattern(N, 6));
    let src_a = a.htod_copy(&pa).unwrap();
    let src_b = b.htod_copy(&pb).unwrap();
    let mut dst_b = b.alloc_zeros::<u32>(N).unwrap();
    let mut dst_a = a.alloc_zeros::<u32>(N).unwrap();
    link.copy(&src_a, &mut dst_b).unwrap();
    b.dtod_peer_copy(&link, &src_b, &mut dst_a).unwrap();
    assert_eq!(b.dtoh_copy(&dst_b).unwrap(), pa);
    assert_eq!(a.dtoh_copy(&dst_a).unwrap(), pb);
    // No peer mapping of video memory on a staged link.
    assert!(matches!(
        link.map(&src_b),
        Err(DeviceError::PeerUnavailable { .. })
    ));
    // Host buffers can still be shared.
    let host_b = b.alloc_host::<u32>(1024).unwrap();
    assert_eq!(host_b.location(), Location::Host);
    let on_a = link.map(&host_b).unwrap();
    let t = a
        .with_backend(|bk| bk.translate(on_a.gpu_va()))
        .unwrap()
        .unwrap();
    assert_eq!(t.aperture, Aperture::SysCoherent);
}

#[test]
fn different_chips_and_separate_hosts_are_not_peers() {
    let sys = system(&[GH100, AD102], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let e = a.enable_peer_access(&b, PeerMode::Direct).unwrap_err();
    assert!(e.to_string().contains("same architecture"), "{e}");
    let link = a
        .enable_peer_access(&b, PeerMode::AllowHostStaging)
        .unwrap();
    let src = a.htod_copy(&pattern(1000, 11)).unwrap();
    let mut dst = b.alloc_zeros::<u32>(1000).unwrap();
    link.copy(&src, &mut dst).unwrap();
    assert_eq!(b.dtoh_copy(&dst).unwrap(), pattern(1000, 11));

    // Two stand-alone simulated GPUs are two hosts.
    let c = Device::open(
        SimBackend::new(GH100, true).unwrap(),
        DeviceOptions::default(),
    )
    .unwrap();
    let d = Device::open(
        SimBackend::new(GH100, true).unwrap(),
        DeviceOptions::default(),
    )
    .unwrap();
    let e = c.enable_peer_access(&d, PeerMode::Direct).unwrap_err();
    assert!(e.to_string().contains("stand-alone"), "{e}");
    // ... and cannot even share host memory, so a staged link waits on the CPU.
    let staged = c
        .enable_peer_access(&d, PeerMode::AllowHostStaging)
        .unwrap();
    assert!(!staged.gpu_waits());
    let src = c.htod_copy(&pattern(5000, 12)).unwrap();
    let mut dst = d.alloc_zeros::<u32>(5000).unwrap();
    staged.copy(&src, &mut dst).unwrap();
    staged.wait_event(&d, &c.record_event().unwrap()).unwrap();
    assert_eq!(d.dtoh_copy(&dst).unwrap(), pattern(5000, 12));
    assert!(matches!(
        staged.semaphore(&c),
        Err(DeviceError::PeerUnavailable { .. })
    ));

    // A device is not its own peer; same-device copies are refused with a pointer to dtod_copy.
    assert!(c.enable_peer_access(&c, PeerMode::Direct).is_err());
    let sys = system(&[GH100, GH100], Topology::P2p);
    let (x, y) = (open(&sys, 0), open(&sys, 1));
    let l = x.enable_peer_access(&y, PeerMode::Direct).unwrap();
    let s = x.alloc::<u32>(8).unwrap();
    let mut t = x.alloc::<u32>(8).unwrap();
    let e = l.copy(&s, &mut t).unwrap_err();
    assert!(e.to_string().contains("dtod_copy"), "{e}");
}

#[test]
fn links_and_mappings_leave_nothing_behind() {
    let sys = system(&[GH100, GH100], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    let client = nvbare_sim::backend::CLIENT;
    let objects = |d: &Device<SimBackend>| d.with_backend(|bk| bk.model().object_count(client));
    let (oa, ob) = (objects(&a).unwrap(), objects(&b).unwrap());
    {
        let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();
        let buf = b.alloc::<u32>(1 << 20).unwrap();
        let _m1 = link.map(&buf).unwrap();
        let _s = link.semaphore(&a).unwrap();
        let src = a.alloc_zeros::<u32>(1 << 20).unwrap();
        let mut dst = b.alloc::<u32>(1 << 20).unwrap();
        link.copy(&src, &mut dst).unwrap();
        assert!(objects(&a).unwrap() > oa);
    }
    assert_eq!(
        objects(&a).unwrap(),
        oa,
        "A's RM objects after the link is gone"
    );
    assert_eq!(
        objects(&b).unwrap(),
        ob,
        "B's RM objects after the link is gone"
    );
}

#[test]
fn large_peer_copies_run_on_the_copy_kernel_and_stay_ordered() {
    let sys = system(&[GH100, GH100], Topology::P2p);
    let (a, b) = (open(&sys, 0), open(&sys, 1));
    assert!(a.install_runtime().unwrap() && b.install_runtime().unwrap());
    let link = a.enable_peer_access(&b, PeerMode::Direct).unwrap();

    // Pushed and pulled, both ways, an odd number of elements above the kernel's threshold.
    let n = (1 << 18) + 3;
    let (pa, pb) = (pattern(n, 31), pattern(n, 32));
    let src_a = a.htod_copy(&pa).unwrap();
    let src_b = b.htod_copy(&pb).unwrap();
    let mut dst_b = b.alloc_zeros::<u32>(n).unwrap();
    let mut dst_a = a.alloc_zeros::<u32>(n).unwrap();
    a.synchronize().unwrap();
    let [(a_launches, _), _] = a.timelines().unwrap();
    link.copy(&src_a, &mut dst_b).unwrap();
    let [(a_launches2, _), _] = a.timelines().unwrap();
    assert_eq!(
        a_launches2,
        a_launches + 1,
        "A's push is one launch of its copy kernel"
    );
    a.dtod_peer_copy(&link, &src_b, &mut dst_a).unwrap();
    assert_eq!(
        b.dtoh_copy(&dst_b).unwrap(),
        pa,
        "A -> B pushed by A's copy kernel"
    );
    assert_eq!(
        a.dtoh_copy(&dst_a).unwrap(),
        pb,
        "B -> A pulled by A's copy kernel"
    );

    // Ordering as with the copy engine: A's pull follows B's gated kernel, and B's next kernel
    // follows A's pull.
    let gate = link.semaphore(&a).unwrap();
    let module = b.load_cubin(&kernels_cubin(90, 12)).unwrap();
    let add1 = module.function("add1").unwrap();
    let buf_b = b.htod_copy(&pa).unwrap();
    let mut got = a.alloc_zeros::<u32>(n).unwrap();
    b.synchronize().unwrap();
    let on_a = link.map(&buf_b).unwrap();
    let cfg = LaunchConfig::for_num_elems(n as u32);
    gate.wait(&b, 1).unwrap();
    b.launch(&add1, cfg, &[buf_b.arg(), (n as u32).into()])
        .unwrap();
    link.copy_from_peer(&on_a, &mut got).unwrap();
    b.launch(&add1, cfg, &[buf_b.arg(), (n as u32).into()])
        .unwrap();
    let [(sub, done), _] = a.timelines().unwrap();
    assert!(done < sub, "A's kernel pull waits for B's gated work");
    gate.set(1).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    let plus = |k: u32| pa.iter().map(|v| v.wrapping_add(k)).collect::<Vec<u32>>();
    assert!(
        a.dtoh_copy(&got).unwrap() == plus(1),
        "pulled between B's two kernels"
    );
    assert!(b.dtoh_copy(&buf_b).unwrap() == plus(2));
    drop(on_a);
}
