//! The GSP message queues over static memory (exit codes 40-69): build the shared memory,
//! send command records, check what `MsgQueue::send` wrote (headers, checksum, doorbell), then
//! play GSP-RM: loop the records back into the status queue and parse them with
//! `MsgQueue::receive` (which checks the checksum), across ring wrap-around, a corrupted copy
//! and a full command ring.

use core::time::Duration;

use nvbare_core::gsp::GspError;
use nvbare_core::gsp::msgq::{
    Checksum, DEFAULT_QUEUE_SIZE, ENTRY_OFF, GSP_MSG_QUEUE_ELEMENT_HDR_SIZE, GSP_PAGE_SIZE,
    MSGQ_FLAGS_SWAP_RX, MSGQ_VERSION, MsgQueue, RX_HDR_OFF, SharedMemLayout,
};
use nvbare_core::gsp::rpc::{RPC_HEADER_SIZE, rpc_message_header_v03_00};
use nvbare_core::hal::DmaBuffer;
use nvbare_core::regs::RegisterArray;
use nvbare_core::regs::gsp::NV_PGSP_QUEUE_HEAD;

use crate::hw::{RegLog, StaticDma, StaticMem, StepClock};

/// Bytes of the default layout: one page of page table, two 256 KiB queues.
const QUEUE_BYTES: usize = GSP_PAGE_SIZE + 2 * DEFAULT_QUEUE_SIZE as usize;
/// Where the "device" sees the queues (above 4 GiB, so both address halves matter).
const QUEUE_DEV_ADDR: u64 = 0x1_2345_6000;
/// The RPC function of the test records (any number: the queue layer does not look at it).
const FUNCTION: u32 = 0x4c;
/// Enough payload for a record of three elements.
const MAX_PAYLOAD: usize = 3 * GSP_PAGE_SIZE - GSP_MSG_QUEUE_ELEMENT_HDR_SIZE - RPC_HEADER_SIZE;

static QUEUES: StaticMem<QUEUE_BYTES> = StaticMem::new();

type Queue = MsgQueue<StaticDma>;

macro_rules! ensure {
    ($cond:expr, $code:expr) => {
        if !$cond {
            return Err($code);
        }
    };
}

/// The wire bytes of an RPC header (little-endian u32s, in field order).
fn header_bytes(h: &rpc_message_header_v03_00) -> [u8; RPC_HEADER_SIZE] {
    let words = [
        h.header_version,
        h.signature,
        h.length,
        h.function,
        h.rpc_result,
        h.rpc_result_private,
        h.sequence,
        h.spare,
    ];
    let mut b = [0u8; RPC_HEADER_SIZE];
    for (i, w) in words.iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// Payload byte `i` of test record `k`.
fn pattern(k: u32, i: usize) -> u8 {
    (i as u32).wrapping_mul(7).wrapping_add(k.wrapping_mul(13)) as u8
}

/// Sends record `k` with `len` payload bytes; returns its RPC header.
fn send(
    q: &mut Queue,
    regs: &RegLog,
    clock: &StepClock,
    k: u32,
    len: usize,
) -> Result<(rpc_message_header_v03_00, nvbare_core::gsp::msgq::Sent), GspError> {
    let mut payload = [0u8; MAX_PAYLOAD];
    for (i, b) in payload[..len].iter_mut().enumerate() {
        *b = pattern(k, i);
    }
    let h = rpc_message_header_v03_00::request(FUNCTION, RPC_HEADER_SIZE + len, k);
    let sent = q.send(
        regs,
        clock,
        Duration::from_millis(1),
        Duration::from_micros(10),
        &[&header_bytes(&h), &payload[..len]],
    )?;
    Ok((h, sent))
}

/// Byte offset of element `idx` of the queue at `queue_off`.
fn elem(queue_off: usize, idx: u32) -> usize {
    queue_off + ENTRY_OFF as usize + idx as usize * GSP_PAGE_SIZE
}

/// The checksum residue over the first `len` bytes of the record of `count` elements starting
/// at command-ring element `start` (wrapping at `ring` elements), as GSP-RM checks it: zero for
/// a good record.
fn residue(buf: &StaticDma, start: u32, count: u32, len: usize, ring: u32) -> Result<u32, i32> {
    let layout = SharedMemLayout::default();
    let mut sum = Checksum::default();
    let mut chunk = [0u8; 256];
    let len = len.next_multiple_of(8);
    if len > count as usize * GSP_PAGE_SIZE {
        return Err(49);
    }
    let mut at = 0;
    while at < len {
        let e = (start + (at / GSP_PAGE_SIZE) as u32) % ring;
        let within = at % GSP_PAGE_SIZE;
        let n = (len - at).min(chunk.len()).min(GSP_PAGE_SIZE - within);
        buf.read(elem(layout.cmd_queue_offset(), e) + within, &mut chunk[..n])
            .map_err(|_| 49)?;
        sum.update(&chunk[..n]);
        at += n;
    }
    Ok(sum.value())
}

/// GSP-RM's part: copies `count` command-ring elements from `from` into the status ring at
/// `to` (both wrapping), optionally flipping one byte, and publishes the status write
/// pointer and GSP-RM's command read pointer.
fn loop_back(
    q: &Queue,
    from: u32,
    to: u32,
    count: u32,
    flip: Option<usize>,
    cmd_read: u32,
) -> Result<(), i32> {
    let layout = SharedMemLayout::default();
    let (cmd, stat) = (layout.cmd_queue_offset(), layout.stat_queue_offset());
    let ring = SharedMemLayout::msg_count(DEFAULT_QUEUE_SIZE);
    let buf = q.buffer();
    let mut chunk = [0u8; 512];
    for e in 0..count {
        let src = elem(cmd, (from + e) % ring);
        let dst = elem(stat, (to + e) % ring);
        for c in (0..GSP_PAGE_SIZE).step_by(chunk.len()) {
            buf.read(src + c, &mut chunk).map_err(|_| 61)?;
            if let Some(f) = flip {
                let at = e as usize * GSP_PAGE_SIZE + c;
                if (at..at + chunk.len()).contains(&f) {
                    chunk[f - at] ^= 0x40;
                }
            }
            buf.write(dst + c, &chunk).map_err(|_| 61)?;
        }
    }
    buf.write_u32(stat + 16, (to + count) % ring)
        .and_then(|_| buf.write_u32(stat + RX_HDR_OFF as usize, cmd_read))
        .map_err(|_| 61)
}

/// Receives the record at the head of the status queue and checks it is record `k` with
/// `len` payload bytes, then consumes it.
fn receive(q: &mut Queue, k: u32, len: usize, elems: u32) -> Result<(), i32> {
    let Ok(Some(rec)) = q.receive() else {
        return Err(62);
    };
    let want = rpc_message_header_v03_00::request(FUNCTION, RPC_HEADER_SIZE + len, k);
    ensure!(rec.rpc == want && rec.elem_count == elems, 63);
    ensure!(rec.payload_len() == len, 63);
    let mut chunk = [0u8; 256];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(chunk.len());
        q.read(&rec, RPC_HEADER_SIZE + at, &mut chunk[..n])
            .map_err(|_| 64)?;
        ensure!(
            chunk[..n]
                .iter()
                .enumerate()
                .all(|(i, b)| *b == pattern(k, at + i)),
            64
        );
        at += n;
    }
    q.consume(&rec).map_err(|_| 65)
}

pub fn check() -> Result<(), i32> {
    let layout = SharedMemLayout::default();
    ensure!(layout.total_size() == QUEUE_BYTES, 40);
    let buf = QUEUES.take(QUEUE_DEV_ADDR).ok_or(41)?;
    let mut q = MsgQueue::new(buf, layout).map_err(|_| 42)?;
    let (cmd, stat) = (layout.cmd_queue_offset(), layout.stat_queue_offset());
    let ring = SharedMemLayout::msg_count(DEFAULT_QUEUE_SIZE);

    // What GSP-RM is told, and the page table it walks (one bus address per 4 KiB page).
    let args = q.init_arguments();
    ensure!(
        args.sharedMemPhysAddr == QUEUE_DEV_ADDR
            && args.pageTableEntryCount == 129
            && args.cmdQueueOffset == 0x1000
            && args.statQueueOffset == 0x41000
            && ring == 63,
        43
    );
    for i in 0..args.pageTableEntryCount as usize {
        let e = q.buffer().read_u64(i * 8).map_err(|_| 44)?;
        ensure!(e == QUEUE_DEV_ADDR + (i * GSP_PAGE_SIZE) as u64, 44);
    }
    // The command queue's msgqTxHeader.
    let mut tx = [0u32; 8];
    for (i, w) in tx.iter_mut().enumerate() {
        *w = q.buffer().read_u32(cmd + i * 4).map_err(|_| 45)?;
    }
    ensure!(
        tx == [
            MSGQ_VERSION,
            DEFAULT_QUEUE_SIZE,
            GSP_PAGE_SIZE as u32,
            ring,
            0,
            MSGQ_FLAGS_SWAP_RX,
            RX_HDR_OFF,
            ENTRY_OFF
        ],
        45
    );

    // One command record: what `send` wrote, read back and parsed by hand.
    let regs = RegLog::new();
    let clock = StepClock::new();
    let doorbell = NV_PGSP_QUEUE_HEAD::offset(0).map_err(|_| 46)?;
    let (h, sent) = send(&mut q, &regs, &clock, 0, 200).map_err(|_| 46)?;
    ensure!(sent.start == 0 && sent.elem_count == 1 && sent.seq == 0, 46);
    ensure!(regs.writes_to(doorbell) == (1, Some(0)), 47);
    ensure!(q.buffer().read_u32(cmd + 16) == Ok(1), 48);
    let rec_len = GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + RPC_HEADER_SIZE + 200;
    ensure!(residue(q.buffer(), 0, 1, rec_len, ring)? == 0, 49);
    let e0 = elem(cmd, 0);
    let word = |off: usize| q.buffer().read_u32(e0 + off).map_err(|_| 50);
    let (checksum, seq, count) = (word(32)?, word(36)?, word(40)?);
    ensure!(seq == 0 && count == 1, 50);
    let mut rpc = [0u8; RPC_HEADER_SIZE];
    q.buffer()
        .read(e0 + GSP_MSG_QUEUE_ELEMENT_HDR_SIZE, &mut rpc)
        .map_err(|_| 51)?;
    ensure!(rpc == header_bytes(&h), 51);
    // The checksum field is what makes the record fold to zero.
    let mut recomputed = Checksum::default();
    let mut elem_hdr = [0u8; GSP_MSG_QUEUE_ELEMENT_HDR_SIZE];
    q.buffer().read(e0, &mut elem_hdr).map_err(|_| 52)?;
    elem_hdr[32..36].fill(0);
    recomputed.update(&elem_hdr);
    recomputed.update(&rpc);
    for i in 0..200 {
        recomputed.update(&[pattern(0, i)]);
    }
    ensure!(checksum != 0 && recomputed.value() == checksum, 52);

    // GSP-RM creates its status queue (msgqTxCreate) and echoes the record.
    let status_hdr = [
        MSGQ_VERSION,
        DEFAULT_QUEUE_SIZE,
        GSP_PAGE_SIZE as u32,
        ring,
        0,
        MSGQ_FLAGS_SWAP_RX,
        RX_HDR_OFF,
        ENTRY_OFF,
    ];
    for (i, w) in status_hdr.iter().enumerate() {
        q.buffer().write_u32(stat + i * 4, *w).map_err(|_| 53)?;
    }
    loop_back(&q, 0, 0, 1, None, 1)?;
    receive(&mut q, 0, 200, 1)?;
    ensure!(q.is_linked() && q.rx_read_ptr() == 1, 55);
    ensure!(q.buffer().read_u32(cmd + RX_HDR_OFF as usize) == Ok(1), 55);
    ensure!(matches!(q.receive(), Ok(None)), 56);

    // A record of two elements; GSP-RM's first copy is corrupt (skipped, reported once),
    // the second is good (the queue resynchronises).
    let (_, sent) = send(&mut q, &regs, &clock, 1, 6000).map_err(|_| 57)?;
    ensure!(sent.start == 1 && sent.elem_count == 2 && sent.seq == 1, 57);
    loop_back(&q, 1, 1, 2, Some(GSP_PAGE_SIZE + 100), 3)?;
    ensure!(
        matches!(q.receive(), Err(GspError::BadChecksum { seq: 1, .. })),
        58
    );
    ensure!(q.stats().corrupt_skipped == 1 && q.rx_read_ptr() == 3, 59);
    loop_back(&q, 1, 3, 2, None, 3)?;
    receive(&mut q, 1, 6000, 2)?;

    // Both rings wrap, three-element records straddling the end of each.
    let mut k = 2;
    while k < 160 {
        let big = q.tx_write_ptr() >= ring - 2 || q.rx_read_ptr() >= ring - 2;
        let len = if big { MAX_PAYLOAD } else { 64 + k as usize };
        let (_, sent) = send(&mut q, &regs, &clock, k, len).map_err(|_| 66)?;
        let total = GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + RPC_HEADER_SIZE + len;
        ensure!(
            residue(q.buffer(), sent.start, sent.elem_count, total, ring)? == 0,
            66
        );
        let to = q.rx_read_ptr();
        loop_back(&q, sent.start, to, sent.elem_count, None, q.tx_write_ptr())?;
        receive(&mut q, k, len, sent.elem_count)?;
        k += 1;
    }
    let s = *q.stats();
    ensure!(s.sent == 160 && s.received == 160, 67);
    ensure!(s.sent_wrapped > 0 && s.received_wrapped > 0, 67);
    ensure!(regs.writes_to(doorbell).1 == Some(0), 67);

    // A full command ring: the send times out as QueueFull and rings nothing.
    let full = (q.tx_write_ptr() + 1) % ring;
    q.buffer()
        .write_u32(stat + RX_HDR_OFF as usize, full)
        .map_err(|_| 68)?;
    let before = q.stats().sent;
    ensure!(
        matches!(
            send(&mut q, &regs, &clock, 999, 8),
            Err(GspError::QueueFull { free: 0, .. })
        ),
        68
    );
    ensure!(q.stats().sent == before && q.stats().send_waits == 1, 69);
    Ok(())
}
