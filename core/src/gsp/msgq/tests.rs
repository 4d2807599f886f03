use super::*;
use crate::gsp::testutil::{self, Doorbell, StepClock, VecDma};
use core::mem::{offset_of, size_of};

#[test]
fn abi_sizes_and_offsets() {
    // msgq_priv.h; gsp_abi_check.c (570.144) ABI_CHECK_FIELD(msgqTxHeader, ...).
    assert_eq!(size_of::<msgqTxHeader>(), 32);
    assert_eq!(offset_of!(msgqTxHeader, version), 0);
    assert_eq!(offset_of!(msgqTxHeader, size), 4);
    assert_eq!(offset_of!(msgqTxHeader, msgSize), 8);
    assert_eq!(offset_of!(msgqTxHeader, msgCount), 12);
    assert_eq!(offset_of!(msgqTxHeader, writePtr), 16);
    assert_eq!(offset_of!(msgqTxHeader, flags), 20);
    assert_eq!(offset_of!(msgqTxHeader, rxHdrOff), 24);
    assert_eq!(offset_of!(msgqTxHeader, entryOff), 28);
    assert_eq!(size_of::<msgqRxHeader>(), 4);
    // message_queue_priv.h: checkSum 32, seqNum 36, elemCount 40, rpc at 48.
    assert_eq!(
        size_of::<GSP_MSG_QUEUE_ELEMENT>(),
        GSP_MSG_QUEUE_ELEMENT_HDR_SIZE
    );
    assert_eq!(offset_of!(GSP_MSG_QUEUE_ELEMENT, authTagBuffer), 0);
    assert_eq!(offset_of!(GSP_MSG_QUEUE_ELEMENT, aadBuffer), 16);
    assert_eq!(offset_of!(GSP_MSG_QUEUE_ELEMENT, checkSum), 32);
    assert_eq!(offset_of!(GSP_MSG_QUEUE_ELEMENT, seqNum), 36);
    assert_eq!(offset_of!(GSP_MSG_QUEUE_ELEMENT, elemCount), 40);
    // gsp_abi_check.c: MESSAGE_QUEUE_INIT_ARGUMENTS 32 bytes.
    assert_eq!(size_of::<MESSAGE_QUEUE_INIT_ARGUMENTS>(), 32);
    assert_eq!(
        offset_of!(MESSAGE_QUEUE_INIT_ARGUMENTS, sharedMemPhysAddr),
        0
    );
    assert_eq!(
        offset_of!(MESSAGE_QUEUE_INIT_ARGUMENTS, pageTableEntryCount),
        8
    );
    assert_eq!(offset_of!(MESSAGE_QUEUE_INIT_ARGUMENTS, cmdQueueOffset), 16);
    assert_eq!(
        offset_of!(MESSAGE_QUEUE_INIT_ARGUMENTS, statQueueOffset),
        24
    );
    assert_eq!(GSP_MSG_QUEUE_RPC_SIZE_MAX, 65488);
}

#[test]
fn default_layout_matches_rm() {
    let l = SharedMemLayout::default();
    // 2 x 64 queue pages + 1 page-table page (tinygrad and RM both get 129).
    assert_eq!(l.page_table_entries(), 129);
    assert_eq!(l.page_table_size(), 0x1000);
    assert_eq!(l.cmd_queue_offset(), 0x1000);
    assert_eq!(l.stat_queue_offset(), 0x41000);
    assert_eq!(l.total_size(), 0x81000);
    assert_eq!(SharedMemLayout::msg_count(l.cmd_queue_size), 63);
    assert!(
        SharedMemLayout {
            cmd_queue_size: 0x1234,
            stat_queue_size: 0x40000
        }
        .validate()
        .is_err()
    );
}

#[test]
fn checksum_streaming_matches_words() {
    let data: [u8; 37] = core::array::from_fn(|i| (i * 7 + 3) as u8);
    let mut whole = Checksum::default();
    whole.update(&data);
    let mut split = Checksum::default();
    split.update(&data[..3]);
    split.update(&data[3..20]);
    split.update(&data[20..]);
    assert_eq!(whole.value(), split.value());
    // Reference: XOR of zero-padded little-endian words, folded.
    let mut acc = 0u64;
    for c in data.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        acc ^= u64::from_le_bytes(w);
    }
    assert_eq!(whole.value(), (acc >> 32) as u32 ^ acc as u32);
}

fn new_queue() -> MsgQueue<VecDma> {
    let l = SharedMemLayout::default();
    MsgQueue::new(VecDma::new(l.total_size()), l).unwrap()
}

#[test]
fn init_writes_page_table_and_tx_header() {
    let q = new_queue();
    let a = q.init_arguments();
    assert_eq!(a.sharedMemPhysAddr, q.buffer().dev_addr());
    assert_eq!(a.pageTableEntryCount, 129);
    assert_eq!(
        q.buffer().read_u64(128 * 8).unwrap(),
        a.sharedMemPhysAddr + 128 * 4096
    );
    let h: msgqTxHeader = read_struct(q.buffer(), 0x1000).unwrap();
    assert_eq!(h.msgCount, 63);
    assert_eq!(h.entryOff, 0x1000);
    assert_eq!(h.flags, MSGQ_FLAGS_SWAP_RX);
}

/// Plays GSP-RM's status-queue header.
fn gsp_link(q: &MsgQueue<VecDma>) {
    testutil::gsp_link(q.buffer());
}

/// Writes a status message the way GSP-RM does, at `idx`, and publishes it.
fn gsp_write(q: &MsgQueue<VecDma>, idx: u32, seq: u32, function: u32, payload: &[u8]) -> u32 {
    testutil::gsp_write(q.buffer(), idx, seq, function, payload)
}
extern crate std;

#[test]
fn receive_wraps_and_advances_by_elements() {
    let mut q = new_queue();
    assert_eq!(q.receive().unwrap(), None, "not linked yet");
    gsp_link(&q);
    // Start near the end so a 3-element message wraps.
    let payload: std::vec::Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
    q.rx_read = 61;
    q.buffer().write_u32(0x1000 + 32, 61).unwrap();
    q.linked = true;
    let wp = gsp_write(&q, 61, 0, 0x1006, &payload);
    assert_eq!(wp, 1);
    let rec = q.receive().unwrap().unwrap();
    assert_eq!(rec.elem_count, 3);
    let mut got = std::vec![0u8; payload.len()];
    q.read(&rec, RPC_HEADER_SIZE, &mut got).unwrap();
    assert_eq!(got, payload);
    q.consume(&rec).unwrap();
    assert_eq!(q.rx_read_ptr(), 1);
    assert_eq!(
        q.buffer().read_u32(0x1000 + 32).unwrap(),
        1,
        "published readPtr"
    );
    assert_eq!(q.stats().received_wrapped, 1);
    assert!(q.read(&rec, 0, &mut [0; 1]).is_ok());
    assert!(q.read(&rec, rec.rpc.length as usize, &mut [0; 1]).is_err());
}

#[test]
fn corrupt_messages_are_reported_and_skipped() {
    let mut q = new_queue();
    gsp_link(&q);
    let wp = gsp_write(&q, 0, 0, 0x1001, &[1, 2, 3]);
    // Flip a payload byte.
    q.buffer().write(0x42000 + 48 + 32, &[0xff]).unwrap();
    let wp = gsp_write(&q, wp, 1, 0x1001, &[4]);
    assert!(matches!(
        q.receive(),
        Err(GspError::BadChecksum { seq: 0, .. })
    ));
    let rec = q.receive().unwrap().unwrap();
    assert_eq!(rec.seq, 1);
    q.consume(&rec).unwrap();
    assert_eq!(q.rx_read_ptr(), wp);
    // A duplicate of seq 1 is skipped silently.
    let wp = gsp_write(&q, wp, 1, 0x1001, &[4]);
    let wp = gsp_write(&q, wp, 2, 0x1001, &[5]);
    let rec = q.receive().unwrap().unwrap();
    assert_eq!(rec.seq, 2);
    q.consume(&rec).unwrap();
    assert_eq!(q.stats().stale_skipped, 1);
    // A gap is reported once, then the message is delivered.
    let _ = gsp_write(&q, wp, 9, 0x1001, &[6]);
    assert_eq!(
        q.receive(),
        Err(GspError::SequenceGap {
            expected: 3,
            got: 9
        })
    );
    assert_eq!(q.receive().unwrap().unwrap().seq, 9);
}

#[test]
fn bad_pointers_and_counts_never_read_out_of_bounds() {
    let mut q = new_queue();
    gsp_link(&q);
    q.buffer().write_u32(0x41000 + 16, 63).unwrap();
    assert!(matches!(q.receive(), Err(GspError::CorruptPointer { .. })));
    let wp = gsp_write(&q, 0, 0, 0x1001, &[]);
    q.buffer().write_u32(0x42000 + 40, 40).unwrap();
    assert!(matches!(
        q.receive(),
        Err(GspError::BadElementCount { elem_count: 40, .. })
    ));
    assert_eq!(q.rx_read_ptr(), wp);
    let wp2 = gsp_write(&q, wp, 1, 0x1001, &[]);
    q.buffer()
        .write_u32(0x42000 + wp as usize * 4096 + 48 + 8, 0xffff_fff0)
        .unwrap();
    assert!(matches!(q.receive(), Err(GspError::BadLength { .. })));
    assert_eq!(q.rx_read_ptr(), wp2);
}

#[test]
fn send_waits_for_space_and_never_overwrites() {
    let mut q = new_queue();
    let bell = Doorbell::default();
    let clock = StepClock::default();
    let big = [0x5au8; 16 * 4096 - 48 - 32];
    let hdr = [0u8; 32];
    let t = Duration::from_millis(10);
    let i = Duration::from_micros(1);
    for _ in 0..3 {
        q.send(&bell, &clock, t, i, &[&hdr, &big]).unwrap();
    }
    assert_eq!(q.tx_free().unwrap(), 62 - 48);
    let e = q.send(&bell, &clock, t, i, &[&hdr, &big]).unwrap_err();
    assert_eq!(
        e,
        GspError::QueueFull {
            needed: 16,
            free: 14
        }
    );
    assert_eq!(bell.rings.get(), 3);
    // GSP consumes the first message: now it fits, and wraps.
    q.buffer().write_u32(0x41000 + 32, 16).unwrap();
    let s = q.send(&bell, &clock, t, i, &[&hdr, &big]).unwrap();
    assert_eq!(s.start, 48);
    assert_eq!(q.tx_write_ptr(), (48 + 16) % 63);
    assert_eq!(q.stats().sent_wrapped, 1);
    // A GSP read pointer outside the ring is corruption, not free space.
    q.buffer().write_u32(0x41000 + 32, 99).unwrap();
    assert!(matches!(q.tx_free(), Err(GspError::CorruptPointer { .. })));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Against a model: whatever the interleaving of sends and (partial) consumption by
    /// GSP-RM, every message GSP-RM reads is intact, in order, and never overwritten
    /// before it was consumed; a send that does not fit fails instead of overwriting.
    #[test]
    fn ring_never_overwrites_unread_messages(
        ops in proptest::collection::vec(
            (proptest::prop_oneof![0usize..3000, 3000usize..70_000], 0u8..7),
            1..80,
        )
    ) {
        let mut q = new_queue();
        let bell = Doorbell::default();
        let clock = StepClock::default();
        let mut model: std::collections::VecDeque<(u32, std::vec::Vec<u8>)> =
            std::collections::VecDeque::new();
        let mut gsp_read = 0u32;
        for (i, (len, consume)) in ops.into_iter().enumerate() {
            let len = len.min(GSP_MSG_QUEUE_RPC_SIZE_MAX - 32);
            let body: std::vec::Vec<u8> = (0..len).map(|j| (i * 131 + j) as u8).collect();
            let hdr = [i as u8; 32];
            // Independent of the code under test: 62 usable slots minus what is unread.
            let free = 62 - model.iter().map(|m| m.0).sum::<u32>();
            let elems = (48 + 32 + len).div_ceil(4096) as u32;
            match q.send(&bell, &clock, Duration::ZERO, Duration::ZERO, &[&hdr, &body]) {
                Ok(s) => {
                    proptest::prop_assert!(elems <= free);
                    proptest::prop_assert_eq!(s.elem_count, elems);
                    let mut m = hdr.to_vec();
                    m.extend_from_slice(&body);
                    model.push_back((elems, m));
                }
                Err(GspError::QueueFull { .. }) => proptest::prop_assert!(elems > free),
                Err(e) => proptest::prop_assert!(false, "{e:?}"),
            }
            // GSP-RM consumes up to `consume` messages, reading them from the ring.
            for _ in 0..consume.saturating_sub(4) {
                let Some((ec, m)) = model.pop_front() else { break };
                let mut got = std::vec![0u8; ec as usize * 4096];
                for e in 0..ec {
                    let slot = (gsp_read + e) % 63;
                    q.buffer()
                        .read(0x2000 + slot as usize * 4096, &mut got[e as usize * 4096..][..4096])
                        .unwrap();
                }
                let mut sum = Checksum::default();
                sum.update(&got);
                proptest::prop_assert_eq!(sum.value(), 0);
                proptest::prop_assert_eq!(&got[48..48 + m.len()], &m[..]);
                gsp_read = (gsp_read + ec) % 63;
                q.buffer().write_u32(0x41000 + 32, gsp_read).unwrap();
            }
        }
    }
}

#[test]
fn sent_element_checksums_to_zero_under_both_rules() {
    let mut q = new_queue();
    let bell = Doorbell::default();
    let clock = StepClock::default();
    let hdr = [7u8; 32];
    let body = [3u8; 13];
    let s = q
        .send(
            &bell,
            &clock,
            Duration::ZERO,
            Duration::ZERO,
            &[&hdr, &body],
        )
        .unwrap();
    let mut el = [0u8; 4096];
    q.buffer()
        .read(0x2000 + s.start as usize * 4096, &mut el)
        .unwrap();
    let mut r570 = Checksum::default();
    r570.update(&el[..(48 + 45usize).next_multiple_of(8)]);
    assert_eq!(r570.value(), 0);
    let mut r535 = Checksum::default();
    r535.update(&el);
    assert_eq!(r535.value(), 0);
}
