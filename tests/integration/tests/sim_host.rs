//! The simulated GPU's front end driven with raw pushbuffers through the device layer's real
//! submission path: host semaphores, object binding, copy-engine launches, QMD decode-back,
//! and the errors malformed work must produce.
#![forbid(unsafe_code)]

use std::time::Duration;

use nvbare_core::channel::launch::{DriverArea, cbuf0_size};
use nvbare_core::channel::methods::{SUBC_COPY, copy, host};
use nvbare_core::channel::pushbuf::{Header, PushBuffer, SecOp};
use nvbare_core::device::{ChannelKind, Device, DeviceError, DeviceOptions, LaunchConfig};
use nvbare_core::rm::class::*;
use nvbare_core::rm::ctrl::rc;
use nvbare_gsp_firmware::program::LoadCubin;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

fn open(model: ChipModel) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).unwrap();
    let opts = DeviceOptions {
        timeout: Duration::from_millis(300),
        ..Default::default()
    };
    Device::open(b, opts).unwrap()
}

fn words(f: impl FnOnce(&mut PushBuffer<'_>)) -> Vec<u32> {
    let mut w = [0u32; 256];
    let mut pb = PushBuffer::new(&mut w);
    f(&mut pb);
    pb.words().to_vec()
}

fn run(dev: &Device<SimBackend>, ch: ChannelKind, w: &[u32]) -> Result<(), DeviceError> {
    let v = dev.submit_raw(ch, w)?;
    dev.wait_for(ch, v)
}

fn rc_of(e: &DeviceError) -> Option<u32> {
    e.report().and_then(|r| r.rc)
}

#[test]
fn host_semaphores_release_and_acquire_32_and_64_bit() {
    let dev = open(GH100);
    let sem = dev.alloc_zeros::<u64>(4).unwrap();
    let va = sem.gpu_va();
    // 64-bit release with timestamp, 32-bit release, then acquires that are satisfied.
    let w = words(|pb| {
        pb.host_release64(va, 0x1_0000_0005, false, true).unwrap();
        pb.host_semaphore(va + 16, 0xffff_fff0, host::sem_execute::OPERATION_RELEASE)
            .unwrap();
        pb.host_acquire64_geq(va, 0x1_0000_0004).unwrap();
        pb.host_semaphore(
            va + 16,
            0xffff_ffe0,
            host::sem_execute::OPERATION_ACQ_CIRC_GEQ,
        )
        .unwrap();
    });
    run(&dev, ChannelKind::Compute, &w).unwrap();
    let v = dev.dtoh_copy(&sem).unwrap();
    assert_eq!(v[0], 0x1_0000_0005);
    assert_ne!(v[1], 0, "RELEASE_TIMESTAMP wrote the GPU time at +8");
    assert_eq!(v[2], 0xffff_fff0);

    // ACQ_CIRC_GEQ wraps: 0xfffffff0 is not >= 0x10 in circular order, so this blocks and the
    // wait times out (and the channels are re-created).
    let w = words(|pb| {
        pb.host_semaphore(va + 16, 0x10, host::sem_execute::OPERATION_ACQ_CIRC_GEQ)
            .unwrap();
    });
    let e = run(&dev, ChannelKind::Compute, &w).unwrap_err();
    assert!(matches!(e, DeviceError::Timeout { .. }), "{e}");
    // A strict unsigned >= of the same values is satisfied.
    let w = words(|pb| {
        pb.host_semaphore(va + 16, 0x10, host::sem_execute::OPERATION_ACQ_STRICT_GEQ)
            .unwrap();
    });
    run(&dev, ChannelKind::Compute, &w).unwrap();
}

#[test]
fn set_object_of_a_class_not_on_the_channel_is_a_pbdma_error() {
    let dev = open(AD102);
    // The copy object lives on the copy channel, not on the compute channel.
    let w = words(|pb| pb.set_object(SUBC_COPY, AMPERE_DMA_COPY_B).unwrap());
    let e = run(&dev, ChannelKind::Compute, &w).unwrap_err();
    assert_eq!(rc_of(&e), Some(rc::ROBUST_CHANNEL_PBDMA_ERROR), "{e}");
    // After recovery the device works again.
    let b = dev.htod_copy(&[1u8; 100]).unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![1u8; 100]);
}

#[test]
fn methods_to_an_unbound_subchannel_and_foreign_host_methods_are_errors() {
    let dev = open(GH100);
    let w = words(|pb| pb.inc(3, 0x100, &[0]).unwrap());
    let e = run(&dev, ChannelKind::Compute, &w).unwrap_err();
    assert_eq!(rc_of(&e), Some(rc::ROBUST_CHANNEL_PBDMA_ERROR), "{e}");
    // SEMAPHOREA..D are not methods of HOPPER_CHANNEL_GPFIFO_A.
    let w = words(|pb| pb.inc(0, host::SEMAPHOREA, &[0, 0, 1, 2]).unwrap());
    let e = run(&dev, ChannelKind::Copy, &w).unwrap_err();
    assert_eq!(rc_of(&e), Some(rc::ROBUST_CHANNEL_PBDMA_ERROR), "{e}");
}

#[test]
fn a_truncated_method_is_a_pbdma_error() {
    let dev = open(GB202);
    let hdr = Header {
        op: SecOp::IncMethod,
        subchannel: 0,
        method: host::SEM_ADDR_LO,
        count: 5,
    }
    .encode();
    // The header promises 5 words; the release the device appends follows right after it,
    // so the host reads the release's words as this method's data and then finds garbage.
    // A GP entry ending inside a method must RC, not hang or panic.
    let v = dev.submit_raw(ChannelKind::Compute, &[hdr, 1, 2]).unwrap();
    let e = dev.wait_for(ChannelKind::Compute, v);
    assert!(e.is_err(), "{e:?}");
}

#[test]
fn copy_engine_multi_line_pitch_copy_and_semaphores() {
    let dev = open(GH100);
    let src: Vec<u8> = (0..=255u8).collect();
    let s = dev.htod_copy(&src).unwrap();
    let d = dev.alloc_zeros::<u8>(256).unwrap();
    let sem = dev.alloc_zeros::<u64>(2).unwrap();
    use copy::launch_dma as ld;
    let (sv, dv) = (s.gpu_va(), d.gpu_va());
    // 3 lines of 8 bytes: source pitch 32, destination pitch 16.
    let w = words(|pb| {
        pb.inc(
            SUBC_COPY,
            copy::OFFSET_IN_UPPER,
            &[(sv >> 32) as u32, sv as u32, (dv >> 32) as u32, dv as u32],
        )
        .unwrap();
        pb.inc(SUBC_COPY, copy::PITCH_IN, &[32, 16, 8, 3]).unwrap();
        pb.inc(
            SUBC_COPY,
            copy::SET_SEMAPHORE_A,
            &[(sem.gpu_va() >> 32) as u32, sem.gpu_va() as u32, 0xabcd],
        )
        .unwrap();
        pb.inc(
            SUBC_COPY,
            copy::LAUNCH_DMA,
            &[ld::DATA_TRANSFER_TYPE_NON_PIPELINED
                | ld::FLUSH_ENABLE
                | ld::SRC_MEMORY_LAYOUT_PITCH
                | ld::DST_MEMORY_LAYOUT_PITCH
                | ld::MULTI_LINE_ENABLE
                | (ld::SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE << ld::SEMAPHORE_TYPE_SHIFT)],
        )
        .unwrap();
    });
    run(&dev, ChannelKind::Copy, &w).unwrap();
    let out = dev.dtoh_copy(&d).unwrap();
    for line in 0..3usize {
        assert_eq!(
            &out[line * 16..line * 16 + 8],
            &src[line * 32..line * 32 + 8]
        );
        assert!(out[line * 16 + 8..line * 16 + 16].iter().all(|&b| b == 0));
    }
    assert!(out[48..].iter().all(|&b| b == 0));
    // One-word semaphore: 32 bits written, the upper half untouched.
    assert_eq!(dev.dtoh_copy(&sem).unwrap()[0], 0xabcd);
    // Block-linear copies are not modelled: a copy-engine error, not silent success.
    let w = words(|pb| {
        pb.inc(
            SUBC_COPY,
            copy::LAUNCH_DMA,
            &[ld::DATA_TRANSFER_TYPE_NON_PIPELINED],
        )
        .unwrap()
    });
    let e = run(&dev, ChannelKind::Copy, &w).unwrap_err();
    assert_eq!(rc_of(&e), Some(rc::ROBUST_CHANNEL_CE0_ERROR), "{e}");
}

#[test]
fn a_copy_to_an_unmapped_address_names_the_address() {
    let dev = open(AD102);
    let s = dev.alloc_zeros::<u8>(4096).unwrap();
    let w = words(|pb| pb.ce_copy(s.gpu_va(), 0x40_0000_0000, 64).unwrap());
    let e = run(&dev, ChannelKind::Copy, &w).unwrap_err();
    let r = e.report().unwrap();
    assert_eq!(r.rc, Some(rc::ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT));
    assert!(e.to_string().contains("copy") || r.channel.is_some(), "{e}");
}

#[test]
fn the_qmd_decodes_back_to_the_launch_on_every_chip() {
    for (model, sm) in [(AD102, 89), (GH100, 90), (GB202, 120)] {
        let dev = open(model);
        let cubin = std::fs::read(format!(
            "{}/../fixtures/cubins/kernels_sm{sm}_cuda13.cubin",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let m = dev.load_cubin(&cubin).unwrap();
        let f = m.function("add1").unwrap();
        let k = f.info().clone();
        let buf = dev.alloc_zeros::<u32>(768).unwrap();
        let cfg = LaunchConfig {
            grid: [3, 2, 1],
            block: [64, 2, 1],
            shared_mem_bytes: 512,
        };
        dev.launch(&f, cfg, &[buf.arg(), 768u32.into()]).unwrap();
        dev.synchronize().unwrap();
        let d = nvbare_integration::last_compute_launch(&dev);
        assert_eq!(d.program_address, k.program_address, "{}", model.chipset);
        assert_eq!(d.grid, [3, 2, 1]);
        assert_eq!(d.block, [64, 2, 1]);
        assert_eq!(d.register_count, k.regcount);
        assert!(d.shared_memory_size >= 512 + k.shared_size);
        let (cb0, cb0_len) = d.cbufs[0].unwrap();
        assert_eq!(
            cb0_len,
            cbuf0_size(DriverArea::for_sm(sm), k.param_base, k.param_size).unwrap()
        );
        assert_eq!(cb0 % 256, 0);
        let [(submitted, reached), _] = dev.timelines().unwrap();
        assert_eq!(submitted, reached);
        assert_eq!(d.release[0].map(|r| r.1), Some(submitted));
        assert_eq!(d.sass_version, ((sm / 10) << 4) | (sm % 10));
        // The kernel only uses the x index: tid.y (2) and ctaid.y (2) repeat it, so each of
        // the 3 x 64 elements gets 4 increments.
        let out = dev.dtoh_copy(&buf).unwrap();
        assert!(
            out[..192].iter().all(|&v| v == 4),
            "{}: {:?}",
            model.chipset,
            &out[..4]
        );
        assert!(out[192..].iter().all(|&v| v == 0));
    }
}

#[test]
fn unknown_tokens_and_garbage_doorbells_are_ignored() {
    let dev = open(GH100);
    let gpu = dev.with_backend(|b| b.gpu().clone()).unwrap();
    use nvbare_core::hal::Mmio;
    let bar0 = gpu.bar0();
    for t in [0xffff_ffff, 0x7777, 0] {
        bar0.write32(0xbb_0090, t);
    }
    let b = dev.htod_copy(&[3u16; 9]).unwrap();
    assert_eq!(dev.dtoh_copy(&b).unwrap(), vec![3u16; 9]);
}
