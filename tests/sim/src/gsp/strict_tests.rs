//! The emulator refuses what GSP-RM's side of the queues is known (or, from the shared queue
//! library and the RPC header's documentation, inferred) to refuse, the way it refuses it,
//! and never panics on it. `target/assumptions-strict.md` lists the rules and their sources.

use std::sync::Arc;
use std::time::Duration;

use nvbare_core::gsp::events::{NV_VGPU_MSG_EVENT_GSP_INIT_DONE, NoHandler};
use nvbare_core::gsp::msgq::{
    Checksum, ENTRY_OFF, GSP_MSG_QUEUE_ELEMENT, MESSAGE_QUEUE_INIT_ARGUMENTS, MsgQueue, RX_HDR_OFF,
    SharedMemLayout, msgqTxHeader,
};
use nvbare_core::gsp::rpc::{
    ClientConfig, GspConfig, GspRpc, NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO,
    NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL, NV_VGPU_MSG_HEADER_VERSION, NV_VGPU_MSG_SIGNATURE_VALID,
    rpc_message_header_v03_00,
};
use nvbare_core::gsp::sysinfo::GspSystemInfo;
use nvbare_core::hal::{DmaAllocator, DmaBuffer, Mmio};
use nvbare_core::rm::{Handle, class};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::emulator::{EmuClock, EmuEvent, EmulatorConfig, GspEmulator};
use super::mini_rm::{MINI_RM_CTRL_CMD_TEST_TRANSFORM, MiniRm};
use crate::host::SimDmaBuffer;
use crate::{SimBar0, SimConfig, SimGpu, models};

const PAGE: usize = 4096;
/// `NV_PGSP_QUEUE_HEAD(0)`.
const DOORBELL: usize = 0x11_0c00;
/// `NV_VGPU_MSG_RESULT_RPC_INVALID_MESSAGE_FORMAT`.
const RPC_INVALID_MESSAGE_FORMAT: u32 = 0xff10_0002;

type Rpc = GspRpc<SimDmaBuffer, SimBar0, EmuClock, NoHandler>;

struct Rig {
    gpu: Arc<SimGpu>,
    emu: GspEmulator,
    rpc: Rpc,
}

/// The driver's transport, booted against the emulator (as `tests.rs` does), with a client.
fn rig() -> Rig {
    let model = models::GH100;
    // The rules, not the unknowns: replies echo the sequence, no events come between.
    let gpu = SimGpu::new(
        SimConfig::new(model)
            .with_virtual_time()
            .with_unknowns(crate::unknowns::Mode::Helpful),
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
    let cfg = GspConfig {
        reply_timeout: Duration::from_millis(50),
        send_timeout: Duration::from_millis(50),
        poll_interval: Duration::from_micros(100),
        ..GspConfig::default()
    };
    let mut rpc = GspRpc::new(msgq, gpu.bar0(), clock, NoHandler, cfg);
    let mut info = GspSystemInfo::new_zeroed();
    info.pciConfigMirrorBase = model.chipset.info().pci_config_mirror;
    info.pciConfigMirrorSize = 0x1000;
    info.PCIDeviceID = (model.device_id as u32) << 16 | 0x10de;
    info.maxUserVa = 0x7fff_ffff_f000;
    info.bIsPassthru = 1;
    rpc.set_system_info(&info).unwrap();
    gpu.with_core(|c| emu.start(c));
    rpc.wait_event(NV_VGPU_MSG_EVENT_GSP_INIT_DONE, Duration::from_secs(1))
        .unwrap();
    let client = ClientConfig::default().client;
    let mut p = [0u8; 120];
    p[..4].copy_from_slice(&client.0.to_le_bytes());
    rpc.rm_alloc(client, Handle(0), client, class::NV01_ROOT, &mut p)
        .unwrap();
    Rig { gpu, emu, rpc }
}

/// A round trip through MiniRm's transform control.
fn round_trip(r: &mut Rig) {
    let client = ClientConfig::default().client;
    let mut p = vec![7u8; 64];
    r.rpc
        .rm_control(client, client, MINI_RM_CTRL_CMD_TEST_TRANSFORM, &mut p)
        .unwrap();
}

fn cmd_off() -> usize {
    SharedMemLayout::default().cmd_queue_offset()
}

fn stat_off() -> usize {
    SharedMemLayout::default().stat_queue_offset()
}

/// What the driver would write for one single-element record, with a correct checksum.
fn element(seq: u32, hdr: rpc_message_header_v03_00, payload: &[u8]) -> Vec<u8> {
    let mut eh = GSP_MSG_QUEUE_ELEMENT {
        seqNum: seq,
        elemCount: 1,
        ..Default::default()
    };
    let mut sum = Checksum::default();
    sum.update(eh.as_bytes());
    sum.update(hdr.as_bytes());
    sum.update(payload);
    eh.checkSum = sum.value();
    let mut b = vec![0u8; PAGE];
    b[..48].copy_from_slice(eh.as_bytes());
    b[48..80].copy_from_slice(hdr.as_bytes());
    b[80..80 + payload.len()].copy_from_slice(payload);
    b
}

fn request(function: u32, payload_len: usize, sequence: u32) -> rpc_message_header_v03_00 {
    rpc_message_header_v03_00 {
        header_version: NV_VGPU_MSG_HEADER_VERSION,
        signature: NV_VGPU_MSG_SIGNATURE_VALID,
        length: (32 + payload_len) as u32,
        function,
        rpc_result: 0xffff_ffff,
        rpc_result_private: 0xffff_ffff,
        sequence,
        spare: 0,
    }
}

/// Writes `el` into command-ring slot `idx` behind the driver's back, publishes it and rings
/// the doorbell; returns the next slot.
fn forge(r: &Rig, idx: u32, el: &[u8]) -> u32 {
    let q = r.rpc.msgq();
    let count = q.tx_msg_count();
    q.buffer()
        .write(cmd_off() + ENTRY_OFF as usize + idx as usize * PAGE, el)
        .unwrap();
    let next = (idx + 1) % count;
    q.buffer().write_u32(cmd_off() + 16, next).unwrap();
    r.gpu.bar0().write32(DOORBELL, 0);
    next
}

/// The RPC header of status-ring element `idx`.
fn status_header(r: &Rig, idx: u32) -> rpc_message_header_v03_00 {
    let mut b = [0u8; 32];
    r.rpc
        .msgq()
        .buffer()
        .read(
            stat_off() + ENTRY_OFF as usize + idx as usize * PAGE + 48,
            &mut b,
        )
        .unwrap();
    rpc_message_header_v03_00::read_from_bytes(&b).unwrap()
}

/// msgqRxGetReadAvailable: a write pointer out of range is an empty queue, not a crash;
/// GSP-RM reads on once it is good again. One bad value polled many times is one error.
#[test]
fn strict_command_write_pointer_out_of_range_reads_nothing_until_repaired() {
    let mut r = rig();
    let q = r.rpc.msgq();
    let (good, count) = (q.tx_write_ptr(), q.tx_msg_count());
    q.buffer().write_u32(cmd_off() + 16, count + 5).unwrap();
    for _ in 0..5 {
        r.gpu.bar0().write32(DOORBELL, 0);
    }
    let errors = r.emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("writePtr 68 out of range"), "{errors:?}");
    r.rpc
        .msgq()
        .buffer()
        .write_u32(cmd_off() + 16, good)
        .unwrap();
    round_trip(&mut r);
    round_trip(&mut r);
    assert_eq!(r.emu.errors().len(), 1, "{:?}", r.emu.errors());
}

/// msgqTxGetFreeSpace: with the CPU's status read pointer out of range GSP-RM sees no free
/// space and writes nothing; once repaired, what waited is delivered.
#[test]
fn strict_status_read_pointer_out_of_range_blocks_output_until_repaired() {
    let mut r = rig();
    let good = r.rpc.msgq().rx_read_ptr();
    let sent = r.emu.stats().messages_sent;
    r.rpc
        .msgq()
        .buffer()
        .write_u32(cmd_off() + RX_HDR_OFF as usize, 999)
        .unwrap();
    r.emu.queue_event(EmuEvent::MmuFaultQueued);
    for _ in 0..5 {
        r.gpu.with_core(|c| r.emu.pump(c));
    }
    assert_eq!(r.emu.stats().messages_sent, sent, "nothing written");
    let errors = r.emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("readPtr 999 out of range"), "{errors:?}");
    r.rpc
        .msgq()
        .buffer()
        .write_u32(cmd_off() + RX_HDR_OFF as usize, good)
        .unwrap();
    round_trip(&mut r);
    assert_eq!(
        r.emu.stats().messages_sent,
        sent + 2,
        "the event, then the reply"
    );
    assert_eq!(r.emu.errors().len(), 1, "{:?}", r.emu.errors());
}

/// rpc_headers.h: a message with a bad signature is answered RPC_INVALID_MESSAGE_FORMAT with
/// its function unchanged, and not executed.
#[test]
fn strict_bad_signature_is_answered_invalid_message_format_and_not_executed() {
    let r = rig();
    let q = r.rpc.msgq();
    let (idx, seq, reply_at) = (q.tx_write_ptr(), q.tx_seq(), q.rx_read_ptr());
    let rpcs = r.emu.stats().rpcs;
    let mut h = request(NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL, 64, 0x4242);
    h.signature = 0x4350_5257;
    forge(&r, idx, &element(seq, h, &[0u8; 64]));
    let errors = r.emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("signature 0x43505257"), "{errors:?}");
    assert_eq!(r.emu.stats().rpcs, rpcs, "not executed");
    let reply = status_header(&r, reply_at);
    assert_eq!(reply.function, NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL);
    assert_eq!(reply.rpc_result, RPC_INVALID_MESSAGE_FORMAT);
    assert_eq!(reply.signature, NV_VGPU_MSG_SIGNATURE_VALID);
    assert_eq!(reply.sequence, 0x4242);
}

/// A header version other than 3.0: how GSP-RM takes it is not public, so it is an error and
/// no reply.
#[test]
fn strict_bad_header_version_is_dropped_unanswered() {
    let r = rig();
    let q = r.rpc.msgq();
    let (idx, seq) = (q.tx_write_ptr(), q.tx_seq());
    let (rpcs, sent) = (r.emu.stats().rpcs, r.emu.stats().messages_sent);
    let mut h = request(NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO, 0, 1);
    h.header_version = 0x0200_0000;
    forge(&r, idx, &element(seq, h, &[]));
    let errors = r.emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("header_version 0x2000000"), "{errors:?}");
    assert_eq!(r.emu.stats().rpcs, rpcs);
    assert_eq!(r.emu.stats().messages_sent, sent, "no reply");
}

/// A message numbered out of turn is dropped unanswered (newer: the count resynchronises on
/// it; older: it is ignored), as the queue's public receiver does.
#[test]
fn strict_out_of_turn_sequence_numbers_are_dropped_unanswered() {
    let r = rig();
    let q = r.rpc.msgq();
    let (mut idx, seq) = (q.tx_write_ptr(), q.tx_seq());
    let sent = r.emu.stats().messages_sent;
    let info = |s| {
        element(
            s,
            request(NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO, 0, 9),
            &[],
        )
    };
    // A gap: dropped, and seq + 6 is expected next.
    idx = forge(&r, idx, &info(seq + 5));
    assert_eq!(r.emu.stats().messages_sent, sent, "no reply");
    // In turn after the resynchronisation: answered.
    idx = forge(&r, idx, &info(seq + 6));
    let answered = r.emu.stats().messages_sent;
    assert!(answered > sent, "answered");
    // An old number (a replay): dropped.
    forge(&r, idx, &info(seq + 2));
    assert_eq!(
        r.emu.stats().messages_sent,
        answered,
        "no reply to the replay"
    );
    let errors = r.emu.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains(&format!("seq {} where {seq}", seq + 5)),
        "{errors:?}"
    );
    assert!(errors[1].contains("an old message dropped"), "{errors:?}");
}

/// A shared memory laid out by hand (page table, command queue header), for boot checks.
fn hand_layout(
    edit: impl FnOnce(&mut MESSAGE_QUEUE_INIT_ARGUMENTS, &mut msgqTxHeader, &SimDmaBuffer),
) -> GspEmulator {
    let model = models::AD102;
    let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
    let layout = SharedMemLayout::default();
    let buf = gpu.dma().alloc_dma(layout.total_size()).unwrap();
    let msgq = MsgQueue::new(buf, layout).unwrap();
    let mut init = msgq.init_arguments();
    let mut h: msgqTxHeader = {
        let mut b = [0u8; 32];
        msgq.buffer().read(cmd_off(), &mut b).unwrap();
        msgqTxHeader::read_from_bytes(&b).unwrap()
    };
    edit(&mut init, &mut h, msgq.buffer());
    msgq.buffer().write(cmd_off(), h.as_bytes()).unwrap();
    let emu = GspEmulator::attach(
        &gpu,
        EmulatorConfig::new(init, model),
        Box::new(MiniRm::new(model.board)),
    );
    gpu.with_core(|c| emu.start(c));
    gpu.with_core(|c| emu.pump(c));
    emu
}

/// msgqRxLink -6: a command queue too small for one element after its entryOff is refused at
/// boot (no status queue, no GSP_INIT_DONE), not an arithmetic overflow.
#[test]
fn strict_command_queue_without_room_for_an_element_fails_boot() {
    let emu = hand_layout(|init, h, _| {
        init.statQueueOffset = init.cmdQueueOffset + 0x800;
        h.size = 0x800;
        h.msgCount = 0;
    });
    let errors = emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("no room for one element"), "{errors:?}");
    assert!(errors[0].contains("msgqRxLink -6"), "{errors:?}");
    assert_eq!(emu.stats().messages_sent, 0, "no GSP_INIT_DONE");
}

/// msgqTxCreate: a status queue (what the page table covers past statQueueOffset) too small
/// for one element is refused at boot, not a division by zero later.
#[test]
fn strict_status_queue_without_room_for_an_element_fails_boot() {
    let emu = hand_layout(|init, h, _| {
        let total = init.pageTableEntryCount as u64 * PAGE as u64;
        init.statQueueOffset = total - 0x1000;
        h.size = (init.statQueueOffset - init.cmdQueueOffset) as u32;
        h.msgCount = (h.size - ENTRY_OFF) / PAGE as u32;
    });
    let errors = emu.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("status queue of 4096 bytes has no room"),
        "{errors:?}"
    );
    assert_eq!(emu.stats().messages_sent, 0, "no GSP_INIT_DONE");
}

/// The CPU publishes its status read pointer at the command queue's `rxHdrOff`
/// (msgqRxLink takes any `rxHdrOff` >= 32): GSP-RM reads it there.
#[test]
fn strict_status_read_pointer_is_read_at_the_command_queue_rx_hdr_off() {
    let emu = hand_layout(|_, h, buf| {
        h.rxHdrOff = 64;
        // Garbage where the default layout's pointer would be; the real one (+64) is 0.
        buf.write_u32(cmd_off() + RX_HDR_OFF as usize, 999).unwrap();
    });
    assert_eq!(emu.errors(), Vec::<String>::new());
    // GSP_INIT_DONE went out: the read pointer at +64 left room for it.
    assert_eq!(emu.stats().messages_sent, 1);
}
