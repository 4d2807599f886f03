//! The driver's GSP transport (`nvbare_core::gsp`) against the emulator.

use std::sync::Arc;
use std::time::Duration;

use nvbare_core::gsp::GspError;
use nvbare_core::gsp::events::{
    Disposition, EventContext, EventHandler, GspEvent, NV_VGPU_MSG_EVENT_GSP_INIT_DONE, RawEvent,
    SeqCommand,
};
use nvbare_core::gsp::msgq::{MsgQueue, SharedMemLayout};
use nvbare_core::gsp::registry::{self, RegistryEntry, RegistryValue};
use nvbare_core::gsp::rpc::{
    ClientConfig, GspConfig, GspRm, GspRpc, NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL,
};
use nvbare_core::gsp::sysinfo::GspSystemInfo;
use nvbare_core::hal::{Clock, DmaAllocator, DmaBuffer, Mmio};
use nvbare_core::rm::{Handle, Rm, RmError, RmStatus, class};
use zerocopy::FromZeros;

use super::emulator::{EmuClock, EmuEvent, EmulatorConfig, Fault, GspEmulator, INTERNAL_CLIENT};
use super::mini_rm::{
    GET_NAME_STRING_PARAMS_SIZE, MINI_RM_CTRL_CMD_TEST_TRANSFORM, MiniRm,
    NV2080_CTRL_CMD_GPU_GET_NAME_STRING, transform_byte,
};
use crate::host::SimDmaBuffer;
use crate::unknowns::Mode;
use crate::{ChipModel, SimBar0, SimConfig, SimGpu, models};

type Rpc<H> = GspRpc<SimDmaBuffer, SimBar0, EmuClock, H>;

struct Rig<H: EventHandler> {
    gpu: Arc<SimGpu>,
    emu: GspEmulator,
    rpc: Rpc<H>,
}

fn test_config() -> GspConfig {
    GspConfig {
        reply_timeout: Duration::from_millis(50),
        send_timeout: Duration::from_millis(50),
        poll_interval: Duration::from_micros(100),
        ..GspConfig::default()
    }
}

/// Boots the emulator the way the boot code will: queue SET_SYSTEM_INFO and SET_REGISTRY,
/// start GSP-RM, wait for GSP_INIT_DONE. The emulator answers unknowns helpfully (it echoes
/// sequence numbers): these tests check the transport's mechanisms one by one; the other
/// answers have tests of their own (`unknown_answers_*`).
fn rig_with<H: EventHandler>(
    model: ChipModel,
    handler: H,
    pre_start: impl FnOnce(&Arc<SimGpu>, &GspEmulator),
) -> Rig<H> {
    rig_in(Mode::Helpful, model, handler, pre_start)
}

fn rig_in<H: EventHandler>(
    mode: Mode,
    model: ChipModel,
    handler: H,
    pre_start: impl FnOnce(&Arc<SimGpu>, &GspEmulator),
) -> Rig<H> {
    let gpu = SimGpu::new(
        SimConfig::new(model)
            .with_virtual_time()
            .with_unknowns(mode),
    );
    let layout = SharedMemLayout::default();
    let buf = gpu.dma().alloc_dma(layout.total_size()).unwrap();
    let msgq = MsgQueue::new(buf, layout).unwrap();
    let emu = GspEmulator::attach(
        &gpu,
        EmulatorConfig::new(msgq.init_arguments(), model),
        Box::new(MiniRm::new(model.board)),
    );
    let clock = EmuClock::new(&gpu, &emu);
    let mut rpc = GspRpc::new(msgq, gpu.bar0(), clock, handler, test_config());
    let mut info = GspSystemInfo::new_zeroed();
    info.pciConfigMirrorBase = model.chipset.info().pci_config_mirror;
    info.pciConfigMirrorSize = 0x1000;
    info.PCIDeviceID = (model.device_id as u32) << 16 | 0x10de;
    info.maxUserVa = 0x7fff_ffff_f000;
    info.bIsPassthru = 1;
    rpc.set_system_info(&info).unwrap();
    let mut table = [0u8; 256];
    let n = registry::pack(registry::DEFAULT_REGISTRY, &mut table).unwrap();
    rpc.set_registry(&table[..n]).unwrap();
    pre_start(&gpu, &emu);
    gpu.with_core(|c| emu.start(c));
    rpc.wait_event(NV_VGPU_MSG_EVENT_GSP_INIT_DONE, Duration::from_secs(1))
        .unwrap();
    Rig { gpu, emu, rpc }
}

fn rig() -> Rig<nvbare_core::gsp::events::NoHandler> {
    rig_with(
        models::GH100,
        nvbare_core::gsp::events::NoHandler,
        |_, _| {},
    )
}

fn client() -> Handle {
    ClientConfig::default().client
}

fn open_client<H: EventHandler>(r: &mut Rig<H>) {
    let mut p = [0u8; 120];
    p[..4].copy_from_slice(&client().0.to_le_bytes());
    r.rpc
        .rm_alloc(client(), Handle(0), client(), class::NV01_ROOT, &mut p)
        .unwrap();
}

/// A transform control of `n` bytes; checks both directions of the transfer.
fn transform<H: EventHandler>(r: &mut Rig<H>, n: usize, salt: u8) -> Result<(), GspError> {
    let sent: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(7) ^ salt).collect();
    let mut p = sent.clone();
    r.rpc
        .rm_control(client(), client(), MINI_RM_CTRL_CMD_TEST_TRANSFORM, &mut p)?;
    for (i, (a, b)) in sent.iter().zip(&p).enumerate() {
        assert_eq!(*b, transform_byte(*a, i), "byte {i} of {n}");
    }
    Ok(())
}

fn assert_clean<H: EventHandler>(r: &Rig<H>) {
    assert_eq!(
        r.emu.errors(),
        Vec::<String>::new(),
        "emulator saw protocol errors"
    );
}

#[test]
fn boot_hands_over_system_info_registry_and_reads_static_info() {
    for model in models::MODELS {
        let mut r = rig_with(model, nvbare_core::gsp::events::NoHandler, |_, _| {});
        let st = r.emu.stats();
        assert_eq!(st.system_info.as_ref().map(|b| b.len()), Some(928));
        assert_eq!(st.registry.get("RMForcePcieConfigSave"), Some(&1));
        assert_eq!(st.registry.get("RMSecBusResetEnable"), Some(&1));
        let info = r.rpc.get_gsp_static_info().unwrap();
        assert_eq!(
            info.gpu_name(),
            Some(format!("NVIDIA {}", model.board).as_str())
        );
        assert_eq!(info.fb_length, (model.vram_mib as u64) << 20);
        assert_eq!(info.hInternalClient, INTERNAL_CLIENT);
        assert_eq!(
            info.fbRegionInfoParams.fbRegion[0].limit,
            ((model.vram_mib as u64) << 20) - 1
        );
        r.rpc.unloading_guest_driver(false, false, 1 << 6).unwrap();
        assert!(r.emu.stats().unloaded);
        assert_clean(&r);
    }
}

#[test]
fn gsp_rm_allocs_controls_and_frees_with_typed_errors() {
    let r = rig();
    let mut rm = GspRm::open(r.rpc, ClientConfig::default()).unwrap();
    assert_eq!(rm.client(), client());
    let dev = rm
        .alloc(client(), class::NV01_DEVICE_0, &mut [0u8; 56])
        .unwrap();
    let sub = rm
        .alloc(dev, class::NV20_SUBDEVICE_0, &mut [0u8; 4])
        .unwrap();
    assert_ne!(dev, sub);
    let mut name = [0u8; GET_NAME_STRING_PARAMS_SIZE];
    rm.control(sub, NV2080_CTRL_CMD_GPU_GET_NAME_STRING, &mut name)
        .unwrap();
    assert_eq!(&name[4..8], b"H200");
    // RM's own failures come back with NVIDIA's names.
    let e = rm.alloc(dev, 0xdead, &mut []).unwrap_err();
    assert_eq!(
        e.status().and_then(|s| s.name()),
        Some("NV_ERR_INVALID_CLASS")
    );
    let e = rm.control(sub, 0x2080_ffff, &mut [0u8; 8]).unwrap_err();
    assert_eq!(
        e.status().and_then(|s| s.name()),
        Some("NV_ERR_NOT_SUPPORTED")
    );
    assert_eq!(
        rm.last_error(),
        Some(GspError::Status {
            function: NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL,
            status: RmStatus(0x56)
        })
    );
    // Wrong param size: the RM model checks sizes like r580 does.
    let e = rm
        .alloc(dev, class::NV20_SUBDEVICE_0, &mut [0u8; 8])
        .unwrap_err();
    assert_eq!(
        e.status().and_then(|s| s.name()),
        Some("NV_ERR_INVALID_PARAM_STRUCT")
    );
    assert_eq!(rm.objects().len(), 2);
    rm.free(dev).unwrap();
    assert!(
        rm.objects().is_empty(),
        "the subdevice goes with its device"
    );
    let e = rm.free(sub).unwrap_err();
    assert!(matches!(e, RmError::Status { .. }));
    let rpc = rm.close().unwrap();
    assert_eq!(rpc.stats().stale_replies, 0);
}

#[test]
fn large_params_use_continuation_records_both_ways() {
    let mut r = rig();
    open_client(&mut r);
    // Around the single-record limit (65488 - 32 - 24 bytes of params) and well beyond.
    for n in [
        0, 1, 4000, 65431, 65432, 65433, 65456, 100_000, 200_000, 300_000,
    ] {
        transform(&mut r, n, n as u8).unwrap();
    }
    assert!(r.rpc.stats().continuations_sent >= 8);
    assert!(r.rpc.stats().continuations_received >= 8);
    assert!(r.emu.stats().continuations_received >= 8);
    assert_clean(&r);
}

#[test]
fn events_arriving_while_waiting_are_dispatched_in_order() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.queue_event(EmuEvent::OsErrorLog {
        xid: 13,
        chid: 4,
        text: "Graphics Exception".into(),
    });
    r.emu.queue_event(EmuEvent::RcTriggered {
        chid: 4,
        except_type: 31,
        fault_addr: 0x1_2345_6000,
    });
    r.emu.queue_event(EmuEvent::MmuFaultQueued);
    r.emu.queue_event(EmuEvent::PostEvent {
        h_client: client().0,
        h_event: 0xcafe,
        notify_index: 3,
    });
    r.emu.queue_event(EmuEvent::LockdownNotice(true));
    r.emu
        .queue_event(EmuEvent::UcodeLibosPrint(vec![1, 2, 3, 4]));
    r.emu.queue_event(EmuEvent::Raw {
        function: 0x1018,
        payload: vec![0; 16],
    });
    r.emu.queue_event(EmuEvent::Raw {
        function: 0x1004,
        payload: vec![0; 10],
    });
    transform(&mut r, 64, 1).unwrap();
    let q = r.rpc.take_events();
    let ev: Vec<GspEvent> = q.iter().cloned().collect();
    assert_eq!(ev.len(), 8, "{ev:?}");
    assert!(
        matches!(&ev[0], GspEvent::OsErrorLog(x) if x.except_type == 13 && x.text.as_str() == "Graphics Exception")
    );
    assert!(
        matches!(&ev[1], GspEvent::RcTriggered(rc) if rc.chid == 4 && rc.mmu_fault_addr == 0x1_2345_6000)
    );
    assert_eq!(ev[2], GspEvent::MmuFaultQueued);
    assert!(matches!(
        ev[3],
        GspEvent::PostEvent {
            h_event: 0xcafe,
            notify_index: 3,
            ..
        }
    ));
    assert_eq!(ev[4], GspEvent::LockdownNotice { engaging: true });
    assert_eq!(
        ev[5],
        GspEvent::UcodeLibosPrint {
            ucode_eng_desc: 0,
            size: 4
        }
    );
    assert_eq!(
        ev[6],
        GspEvent::Other {
            function: 0x1018,
            len: 16
        }
    );
    assert_eq!(
        ev[7],
        GspEvent::Malformed {
            function: 0x1004,
            len: 10,
            need: 48
        }
    );
    assert_eq!(r.rpc.last_rc().map(|rc| rc.except_type), Some(31));
    assert_eq!(r.rpc.last_os_error().map(|x| x.chid), Some(4));
    assert_eq!(r.rpc.stats().mmu_faults_queued, 1);
    assert!(r.rpc.take_events().is_empty());
}

#[test]
fn event_queue_keeps_the_first_and_counts_the_dropped_but_never_loses_the_last_rc() {
    let mut r = rig();
    open_client(&mut r);
    for i in 0..45 {
        r.emu.queue_event(EmuEvent::Raw {
            function: 0x1018,
            payload: vec![i; 4],
        });
    }
    r.emu.queue_event(EmuEvent::RcTriggered {
        chid: 9,
        except_type: 43,
        fault_addr: 0,
    });
    transform(&mut r, 8, 0).unwrap();
    let q = r.rpc.take_events();
    assert_eq!(q.len(), 32);
    assert_eq!(q.dropped(), 14);
    assert_eq!(r.rpc.last_rc().map(|rc| rc.chid), Some(9));
}

/// Runs CPU-sequencer scripts against BAR0, as the boot code will.
#[derive(Default)]
struct Sequencer {
    ran: u32,
}

impl EventHandler for Sequencer {
    fn on_event<M: Mmio + ?Sized, C: Clock + ?Sized>(
        &mut self,
        ctx: EventContext<'_, M, C>,
        ev: &RawEvent<'_>,
    ) -> Result<Disposition, GspError> {
        if !matches!(ev.parsed, GspEvent::RunCpuSequencer { .. }) {
            return Ok(Disposition::Queue);
        }
        for cmd in ev.sequencer()? {
            match cmd? {
                SeqCommand::RegWrite { addr, val } => ctx.bar0.write32(addr as usize, val),
                SeqCommand::RegModify { addr, mask, val } => {
                    let v = ctx.bar0.read32(addr as usize);
                    ctx.bar0.write32(addr as usize, (v & !mask) | val)
                }
                SeqCommand::DelayUs(us) => ctx.clock.delay(Duration::from_micros(us as u64)),
                _ => return Err(GspError::Handler("unsupported sequencer command")),
            }
        }
        self.ran += 1;
        Ok(Disposition::Handled)
    }
}

#[test]
fn sequencer_events_are_serviced_synchronously_during_boot_waits() {
    // The sequencer script arrives before INIT_DONE, while boot waits for it.
    let mut r = rig_with(models::AD102, Sequencer::default(), |_, emu| {
        emu.queue_event(EmuEvent::RunCpuSequencer(vec![
            0,
            0x0011_8f00,
            0x1234, // REG_WRITE
            1,
            0x0011_8f00,
            0xff,
            0x56, // REG_MODIFY
            3,
            10, // DELAY_US
        ]));
    });
    assert_eq!(r.rpc.handler_mut().ran, 1);
    assert_eq!(r.gpu.bar0().read32(0x11_8f00), 0x1256);
    assert!(r.rpc.events().is_empty(), "handled events are not queued");
    // A script the handler cannot run fails the wait with the handler's error.
    open_client(&mut r);
    r.emu.queue_event(EmuEvent::RunCpuSequencer(vec![5]));
    assert_eq!(
        transform(&mut r, 4, 0),
        Err(GspError::Handler("unsupported sequencer command"))
    );
    transform(&mut r, 4, 0).unwrap();
}

/// The boot code's handler, with its script deadline: a 64 KB script of one-second delays
/// (over two hours as written) and a REG_POLL that never succeeds both end with the wait that
/// received them, in virtual time, with a typed error; a short script still runs.
#[test]
fn hostile_sequencer_scripts_end_at_the_wait_s_deadline() {
    use nvbare_core::falcon::FalconHal;
    use nvbare_core::gsp::boot::sequencer::{BootEvents, SequencerError};
    let model = models::AD102;
    let handler = BootEvents::new(FalconHal::for_chip(model.chipset.info()), 0, 0);
    let mut r = rig_with(model, handler, |_, _| {});
    open_client(&mut r);
    let timeout = test_config().reply_timeout;

    // 8000 x DELAY_US(1 s): 64 000 bytes of script.
    let delays: Vec<u32> = (0..8000).flat_map(|_| [3, 1_000_000]).collect();
    r.emu.queue_event(EmuEvent::RunCpuSequencer(delays));
    let t0 = r.rpc.clock().now();
    assert_eq!(
        transform(&mut r, 4, 0),
        Err(GspError::Handler("CPU-sequencer script failed"))
    );
    let took = r.rpc.clock().now() - t0;
    assert!(took <= timeout * 2, "the script ran for {took:?}");
    let e = r.rpc.handler_mut().last_error();
    assert!(
        matches!(e, Some(SequencerError::ScriptTimeout { commands: 0, .. })),
        "{e:?}"
    );
    assert!(e.unwrap().to_string().contains("still running"));
    transform(&mut r, 4, 0).unwrap();

    // REG_POLL(addr, mask, val, 4 s, error) on a register that never matches.
    r.emu.queue_event(EmuEvent::RunCpuSequencer(vec![
        2,
        0x0011_8f04,
        0xffff_ffff,
        0xdead_beef,
        4_000_000,
        7,
    ]));
    let t0 = r.rpc.clock().now();
    assert!(transform(&mut r, 4, 0).is_err());
    let took = r.rpc.clock().now() - t0;
    assert!(took <= timeout * 2, "the poll ran for {took:?}");
    assert!(matches!(
        r.rpc.handler_mut().last_error(),
        Some(SequencerError::ScriptTimeout { .. })
    ));

    // A script well inside the deadline runs to the end. REG_MODIFY's operands are
    // (addr, mask, val) and it computes `reg & !mask | val` (GSP_SEQ_BUF_PAYLOAD_REG_MODIFY,
    // kgspExecuteSequencerCommand_GA102): a swapped reading would give 0x36ff.
    r.emu.queue_event(EmuEvent::RunCpuSequencer(vec![
        0,
        0x0011_8f00,
        0x34ff,
        1,
        0x0011_8f00,
        0xff00,
        0x1200,
        3,
        1000,
    ]));
    let before = r.rpc.handler_mut().scripts_run();
    transform(&mut r, 4, 0).unwrap();
    assert_eq!(r.rpc.handler_mut().scripts_run(), before + 1);
    assert_eq!(r.gpu.bar0().read32(0x11_8f00), 0x12ff);
    // A poll whose own timeout ends first is the script's poll error, not a deadline.
    r.emu.queue_event(EmuEvent::RunCpuSequencer(vec![
        2,
        0x0011_8f04,
        0xffff_ffff,
        0xdead_beef,
        1000,
        7,
    ]));
    assert!(transform(&mut r, 4, 0).is_err());
    assert!(matches!(
        r.rpc.handler_mut().last_error(),
        Some(SequencerError::PollTimeout { error: 7, .. })
    ));
}

/// GSP-RM answering every unknown the hard way: replies with sequence 0, an event before
/// every reply, ALLOC replies without their parameters. RPCs still work, matched by function.
#[test]
fn unknown_answers_the_hard_way_still_serve_every_rpc() {
    for mode in [Mode::Pessimistic, Mode::Random(7), Mode::Random(8)] {
        let mut r = rig_in(
            mode,
            models::GH100,
            nvbare_core::gsp::events::NoHandler,
            |_, _| {},
        );
        open_client(&mut r);
        for i in 0..8 {
            transform(&mut r, 64 + 100 * i, i as u8).unwrap();
        }
        // Large replies come back in continuation records, which carry no sequence either.
        transform(&mut r, 100_000, 3).unwrap();
        let info = r.rpc.get_gsp_static_info().unwrap();
        assert_eq!(info.hInternalClient, INTERNAL_CLIENT, "{mode}");
        assert_clean(&r);
        if mode == Mode::Pessimistic {
            assert!(r.rpc.stats().events >= 8, "an event came before each reply");
        }
    }
}

/// Without an echoed sequence a late reply cannot be told from the next one (as in RM): the
/// transport takes it, and the call after that gets the reply it is owed.
#[test]
fn unknown_answers_without_a_sequence_a_late_reply_is_taken_by_function() {
    let mut r = rig_in(
        Mode::Pessimistic,
        models::GH100,
        nvbare_core::gsp::events::NoHandler,
        |_, _| {},
    );
    open_client(&mut r);
    r.emu.inject(Fault::DropReply);
    assert!(matches!(
        transform(&mut r, 16, 0),
        Err(GspError::Timeout { .. })
    ));
    transform(&mut r, 16, 1).unwrap();
}

#[test]
fn fault_bad_checksum_is_reported_then_skipped() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::CorruptChecksum);
    assert!(matches!(
        transform(&mut r, 16, 0),
        Err(GspError::BadChecksum { .. })
    ));
    transform(&mut r, 16, 1).unwrap();
    assert_eq!(r.rpc.msgq().stats().corrupt_skipped, 1);
}

#[test]
fn fault_lost_reply_times_out_in_virtual_time_and_the_queue_recovers() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::DropReply);
    let e = transform(&mut r, 16, 0).unwrap_err();
    assert!(
        matches!(
            e,
            GspError::Timeout {
                function: NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL,
                ..
            }
        ),
        "{e:?}"
    );
    transform(&mut r, 16, 1).unwrap();
}

#[test]
fn fault_late_reply_is_discarded_by_sequence_not_taken_for_the_next() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::LateReply);
    assert!(matches!(
        transform(&mut r, 16, 0),
        Err(GspError::Timeout { .. })
    ));
    // The held reply arrives first now, with the right function but an old sequence: if it
    // were matched by function only, its (differently transformed) params would be taken.
    transform(&mut r, 16, 1).unwrap();
    assert_eq!(r.rpc.stats().stale_replies, 1);
    assert!(
        r.rpc
            .events()
            .iter()
            .any(|e| matches!(e, GspEvent::UnexpectedReply { function: 76, .. }))
    );
}

#[test]
fn fault_duplicated_reply_and_repeated_sequence_number_are_skipped() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::DuplicateReply);
    transform(&mut r, 16, 0).unwrap();
    transform(&mut r, 16, 1).unwrap();
    assert_eq!(r.rpc.stats().stale_replies, 1);
    r.emu.inject(Fault::RepeatSeqNum);
    transform(&mut r, 16, 2).unwrap();
    transform(&mut r, 16, 3).unwrap();
    assert_eq!(r.rpc.msgq().stats().stale_skipped, 1);
}

#[test]
fn fault_out_of_order_sequence_is_a_gap_then_resynchronises() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.queue_event(EmuEvent::MmuFaultQueued);
    r.emu.inject(Fault::SwapNextTwo);
    let e = transform(&mut r, 16, 0).unwrap_err();
    assert!(matches!(e, GspError::SequenceGap { .. }), "{e:?}");
    // The event (the newer number) is delivered; the reply (older) is skipped.
    transform(&mut r, 16, 1).unwrap();
    assert_eq!(r.rpc.stats().mmu_faults_queued, 1);
    assert_eq!(r.rpc.msgq().stats().stale_skipped, 1);
}

#[test]
fn fault_oversized_length_and_bad_element_counts_are_rejected_without_oob() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::OversizedLength(0xffff_fff0));
    assert!(matches!(
        transform(&mut r, 16, 0),
        Err(GspError::BadLength {
            length: 0xffff_fff0,
            ..
        })
    ));
    transform(&mut r, 16, 1).unwrap();
    for bad in [0, 17, 40, 5, u32::MAX] {
        r.emu.inject(Fault::BadElementCount(bad));
        let e = transform(&mut r, 16, 2).unwrap_err();
        assert!(
            matches!(e, GspError::BadElementCount { elem_count, .. } if elem_count == bad),
            "{e:?}"
        );
        transform(&mut r, 16, 3).unwrap();
    }
}

#[test]
fn fault_reply_with_our_sequence_but_another_function_is_a_mismatch() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::WrongFunction(10));
    assert_eq!(
        transform(&mut r, 16, 0),
        Err(GspError::ReplyMismatch {
            expected_function: 76,
            function: 10,
            sequence: 4
        })
    );
    transform(&mut r, 16, 1).unwrap();
}

#[test]
fn fault_corrupt_write_pointer_is_reported() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::CorruptWritePtr);
    assert!(matches!(
        transform(&mut r, 16, 0),
        Err(GspError::CorruptPointer {
            field: "status queue writePtr",
            ..
        })
    ));
    // The next message repairs the pointer; the old reply is stale by then.
    transform(&mut r, 16, 1).unwrap();
}

#[test]
fn fault_stalled_queue_fills_and_reports_queue_full_then_recovers() {
    let mut r = rig();
    open_client(&mut r);
    r.emu.inject(Fault::Stall);
    // Each 16-element message times out waiting for its reply and stays queued.
    let big = 16 * 4096 - 48 - 32 - 24 - 100;
    for i in 0..3 {
        assert!(matches!(
            transform(&mut r, big, i),
            Err(GspError::Timeout { .. })
        ));
    }
    assert_eq!(
        transform(&mut r, big, 9),
        Err(GspError::QueueFull {
            needed: 16,
            free: 14
        })
    );
    r.emu.resume();
    transform(&mut r, 16, 1).unwrap();
    assert_eq!(r.rpc.stats().stale_replies, 3);
    assert_clean(&r);
}

#[test]
fn back_pressure_waits_for_a_slow_gsp_instead_of_overwriting() {
    let mut r = rig();
    open_client(&mut r);
    // GSP-RM pauses for 2 ms (virtual) while the driver sends a registry table bigger than
    // the whole command queue: the send must wait for space, then complete.
    r.emu.inject(Fault::StallFor(Duration::from_millis(2)));
    r.gpu.with_core(|c| r.emu.pump(c));
    let blob = vec![0xabu8; 300_000];
    let entries = [RegistryEntry {
        name: "RmBigBlob",
        value: RegistryValue::Binary(&blob),
    }];
    let mut table = vec![0u8; registry::packed_size(&entries)];
    let n = registry::pack(&entries, &mut table).unwrap();
    r.rpc.set_registry(&table[..n]).unwrap();
    assert!(r.rpc.msgq().stats().send_waits >= 1);
    transform(&mut r, 16, 0).unwrap();
    assert_eq!(r.emu.stats().registry.get("RmBigBlob"), Some(&300_000));
    assert_clean(&r);
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// 100,000 round trips with single-element, multi-element and continuation messages, until
/// every start index and every wrap split has been exercised on both rings.
#[test]
fn hundred_thousand_round_trips_cover_every_wrap_position() {
    let mut r = rig();
    open_client(&mut r);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let overhead = 48 + 32 + 24;
    for i in 0..100_000u32 {
        let roll = rng.next() % 1000;
        let n = if roll < 960 {
            (rng.next() % 1500) as usize
        } else if roll < 998 {
            // 2..=16 elements.
            let elems = 2 + rng.next() % 15;
            (elems as usize - 1) * 4096 + (rng.next() % 4096) as usize - overhead.min(4095)
        } else {
            65_500 + (rng.next() % 150_000) as usize
        };
        transform(&mut r, n, i as u8).unwrap();
    }
    let st = r.emu.stats();
    let splits = |w: &std::collections::BTreeSet<(u32, u32)>| {
        w.iter()
            .map(|(s, _)| 63 - s)
            .collect::<std::collections::BTreeSet<u32>>()
    };
    let all: std::collections::BTreeSet<u32> = (1..=15).collect();
    assert!(
        splits(&st.cmd_wraps).is_superset(&all),
        "{:?}",
        splits(&st.cmd_wraps)
    );
    assert!(
        splits(&st.stat_wraps).is_superset(&all),
        "{:?}",
        splits(&st.stat_wraps)
    );
    assert_eq!(st.cmd_starts.len(), 63);
    assert_eq!(r.rpc.stats().rpcs, 100_001);
    assert!(r.rpc.msgq().stats().received_wrapped > 100);
    assert_clean(&r);
}

#[test]
fn firmware_logs_decode_with_the_logging_image_and_garbage_is_survived() {
    use nvbare_core::gsp::log::{self, LogItem, LogReader, Segments, format_record};
    let mut bufs = Vec::new();
    let mut r = rig_with(
        models::GH100,
        nvbare_core::gsp::events::NoHandler,
        |gpu, emu| {
            for name in ["LOGINIT", "LOGRM"] {
                let b = gpu.dma().alloc_dma(0x10000).unwrap();
                log::init_log_buffer(&b, 0, 0x10000).unwrap();
                emu.attach_log(name, b.dev_addr(), 0x10000);
                bufs.push(b);
            }
        },
    );
    let img = r.emu.log_image();
    let segs: Vec<(u64, &[u8])> = img.iter().map(|(va, b)| (*va, &b[..])).collect();
    let image = Segments(&segs);
    let src = log::DmaLog {
        buf: &bufs[1],
        offset: 0,
        size: 0x10000,
    };
    let mut reader = LogReader::new();
    let mut lines = Vec::new();
    let s = reader
        .read_new(&src, Some(&image), &mut |it| {
            if let LogItem::Record(rec) = it {
                let mut l = String::new();
                format_record(rec, &image, &mut l).unwrap();
                lines.push(l);
            }
        })
        .unwrap();
    assert_eq!(s.records, 1);
    assert_eq!(
        lines,
        ["emulator.rs:100: emulated GSP-RM r570.144 booted on GH100\n"]
    );
    // Without the image the words are still there, oldest first.
    let mut words = Vec::new();
    LogReader::new()
        .read_new(&src, None, &mut |it| {
            if let LogItem::Word(_, w) = it {
                words.push(w)
            }
        })
        .unwrap();
    assert_eq!(words.len(), 4);
    // Garbage: decoding reports what it could not attribute and never panics.
    r.gpu.with_core(|c| r.emu.garbage_log(c, "LOGRM", 7));
    let mut reader = LogReader::new();
    let s = reader.read_new(&src, Some(&image), &mut |_| {}).unwrap();
    assert_eq!(s.records, 0);
    assert!(s.undecoded_words > 0 || s.put == 0);
    open_client(&mut r);
    transform(&mut r, 8, 0).unwrap();
}

#[test]
fn emulator_reports_driver_protocol_violations_without_panicking() {
    let mut r = rig();
    open_client(&mut r);
    // Forge a command the driver would never write: garbage at the next slot.
    let q = r.rpc.msgq();
    let at = 0x2000 + q.tx_write_ptr() as usize * 4096;
    let mut garbage = [0u8; 4096];
    for (i, b) in garbage.iter_mut().enumerate() {
        *b = (i * 37 + 11) as u8;
    }
    garbage[40..44].copy_from_slice(&1u32.to_le_bytes()); // elemCount 1
    q.buffer().write(at, &garbage).unwrap();
    q.buffer()
        .write_u32(0x1000 + 16, (q.tx_write_ptr() + 1) % 63)
        .unwrap();
    r.gpu.bar0().write32(0x11_0c00, 0);
    let errors = r.emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("rpc length") || errors[0].contains("checksum"),
        "{errors:?}"
    );
}
