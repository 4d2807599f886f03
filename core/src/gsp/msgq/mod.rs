//! The shared message queues between the CPU and GSP-RM.
//!
//! One DMA buffer holds, each part page-aligned (`message_queue_priv.h`, `GspMsgQueuesInit`):
//!
//! ```text
//! [page table: one u64 bus address per 4 KiB page of the whole buffer, its own pages included]
//! [command queue: msgqTxHeader | msgqRxHeader ... | 4 KiB elements]   written by the CPU
//! [status queue:  msgqTxHeader | msgqRxHeader ... | 4 KiB elements]   written by GSP-RM
//! ```
//!
//! Both sides create their queue with `MSGQ_FLAGS_SWAP_RX`, so each publishes its *read*
//! pointer in the `msgqRxHeader` of *its own* transmit queue: the CPU's status-queue read
//! pointer lives in the command-queue page, GSP-RM's command-queue read pointer in the
//! status-queue page (`msgq.c`, `msgqTxCreate` / `msgqRxLink`).
//!
//! A message is one `GSP_MSG_QUEUE_ELEMENT` header (48 bytes) followed by an RPC message
//! (`rpc_message_header_v03_00` + payload), spread over `elemCount` consecutive 4 KiB
//! elements (1..=16) of a ring of `msgCount` elements (63 for the default 256 KiB queue, so
//! index arithmetic is `%`, never `&`). The checksum makes the XOR of all u64 words of the
//! header and message (r570: `48 + rpc.length` bytes rounded up to 8) fold to zero; unused
//! element tails are kept zero so r535's whole-element rule gives the same value.
//!
//! This module moves whole messages (records); splitting large RPCs into continuation
//! records and matching replies is [`super::rpc`]'s job.

use core::sync::atomic::{Ordering, fence};
use core::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::GspError;
use super::rpc::{RPC_HEADER_SIZE, rpc_message_header_v03_00};
use crate::hal::{Clock, DmaBuffer, Mmio, poll_until};
use crate::regs::RegisterArray;
use crate::regs::gsp::NV_PGSP_QUEUE_HEAD;

/// `RM_PAGE_SIZE`: the page and element size.
pub const GSP_PAGE_SIZE: usize = 0x1000;
/// `MSGQ_VERSION`.
pub const MSGQ_VERSION: u32 = 0;
/// `MSGQ_FLAGS_SWAP_RX`: publish our read pointer in our own TX queue's RX header.
pub const MSGQ_FLAGS_SWAP_RX: u32 = 1;
/// `GSP_MSG_QUEUE_ELEMENT_SIZE_MIN`: one element.
pub const GSP_MSG_QUEUE_ELEMENT_SIZE_MIN: usize = GSP_PAGE_SIZE;
/// `GSP_MSG_QUEUE_ELEMENT_SIZE_MAX`: the largest message (16 elements).
pub const GSP_MSG_QUEUE_ELEMENT_SIZE_MAX: usize = GSP_MSG_QUEUE_ELEMENT_SIZE_MIN * 16;
/// Most elements one message may span.
pub const GSP_MSG_QUEUE_MAX_ELEMENTS: u32 = 16;
/// `GSP_MSG_QUEUE_ELEMENT_HDR_SIZE` = `offsetof(GSP_MSG_QUEUE_ELEMENT, rpc)`.
pub const GSP_MSG_QUEUE_ELEMENT_HDR_SIZE: usize = 48;
/// `GSP_MSG_QUEUE_RPC_SIZE_MAX`: the largest RPC message (header + payload) in one record.
pub const GSP_MSG_QUEUE_RPC_SIZE_MAX: usize =
    GSP_MSG_QUEUE_ELEMENT_SIZE_MAX - GSP_MSG_QUEUE_ELEMENT_HDR_SIZE;
/// Default size of each queue (`_getMsgQueueParams`: 256 KiB on silicon).
pub const DEFAULT_QUEUE_SIZE: u32 = 0x40000;
/// Offset of `msgqRxHeader` in a queue (`NV_ALIGN_UP(sizeof(msgqTxHeader), 1 << 4)`).
pub const RX_HDR_OFF: u32 = 32;
/// Offset of the first element (`NV_ALIGN_UP(rxHdrOff + 4, 1 << 12)`).
pub const ENTRY_OFF: u32 = 0x1000;

/// `msgqTxHeader` (`msgq_priv.h`): written by a queue's producer at the start of its queue.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct msgqTxHeader {
    pub version: u32,
    /// Bytes, page aligned.
    pub size: u32,
    /// Element size (power of two).
    pub msgSize: u32,
    /// Elements in the ring.
    pub msgCount: u32,
    /// Index of the next element the producer writes.
    pub writePtr: u32,
    pub flags: u32,
    /// Offset of the `msgqRxHeader` from the queue start.
    pub rxHdrOff: u32,
    /// Offset of element 0 from the queue start.
    pub entryOff: u32,
}

/// `msgqRxHeader` (`msgq_priv.h`): a consumer's read pointer.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct msgqRxHeader {
    pub readPtr: u32,
}

/// The header of `GSP_MSG_QUEUE_ELEMENT` (`message_queue_priv.h`) up to the RPC message.
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct GSP_MSG_QUEUE_ELEMENT {
    /// Confidential-compute authentication tag (unused, zero).
    pub authTagBuffer: [u8; 16],
    /// Confidential-compute AAD (unused, zero).
    pub aadBuffer: [u8; 16],
    /// Makes the message's u64 XOR fold to zero.
    pub checkSum: u32,
    /// Per-queue message counter.
    pub seqNum: u32,
    /// Elements the message spans.
    pub elemCount: u32,
    /// Padding: `rpc` is 8-byte aligned.
    pub _pad: u32,
}

/// `MESSAGE_QUEUE_INIT_ARGUMENTS` (`gsp_init_args.h`, r570: 32 bytes; r535 had two more
/// fields). The boot code hands these to GSP-RM inside `GSP_ARGUMENTS_CACHED`.
#[allow(non_snake_case, non_camel_case_types)]
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct MESSAGE_QUEUE_INIT_ARGUMENTS {
    /// Bus address of the page table (= of page 0 of the shared buffer).
    pub sharedMemPhysAddr: u64,
    /// Entries in the page table.
    pub pageTableEntryCount: u32,
    /// Padding.
    pub _pad: u32,
    /// Offset of the command queue in the shared buffer.
    pub cmdQueueOffset: u64,
    /// Offset of the status queue in the shared buffer.
    pub statQueueOffset: u64,
}

/// The XOR-of-u64-words checksum of `_checkSum32`, fed with arbitrary byte slices.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checksum {
    acc: u64,
    pos: usize,
}

impl Checksum {
    /// Adds bytes at the current position (little-endian words, as on the GSP).
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !self.pos.is_multiple_of(8) {
            let Some((&b, rest)) = bytes.split_first() else {
                return;
            };
            self.acc ^= (b as u64) << (8 * (self.pos % 8));
            self.pos += 1;
            bytes = rest;
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.acc ^= u64::from_le_bytes(a);
        }
        self.pos += bytes.len() - words.remainder().len();
        for &b in words.remainder() {
            self.acc ^= (b as u64) << (8 * (self.pos % 8));
            self.pos += 1;
        }
    }

    /// Bytes fed so far.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Whether nothing was fed.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// The folded value (`NvU64_HI32 ^ NvU64_LO32`); zero-padding to 8 does not change it.
    pub fn value(&self) -> u32 {
        (self.acc >> 32) as u32 ^ self.acc as u32
    }
}

/// Where the page table and the two queues sit in the shared buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedMemLayout {
    /// Command queue bytes (header page + elements).
    pub cmd_queue_size: u32,
    /// Status queue bytes.
    pub stat_queue_size: u32,
}

impl Default for SharedMemLayout {
    fn default() -> Self {
        SharedMemLayout {
            cmd_queue_size: DEFAULT_QUEUE_SIZE,
            stat_queue_size: DEFAULT_QUEUE_SIZE,
        }
    }
}

impl SharedMemLayout {
    /// Checks the sizes: page multiples, room for a 16-element message plus the empty slot,
    /// and a ring small enough for 32-bit offsets.
    pub fn validate(&self) -> Result<(), GspError> {
        let min = (ENTRY_OFF as usize + 17 * GSP_PAGE_SIZE) as u32;
        for s in [self.cmd_queue_size, self.stat_queue_size] {
            if !(s as usize).is_multiple_of(GSP_PAGE_SIZE) {
                return Err(GspError::BadLayout("queue size is not a multiple of 4 KiB"));
            }
            if s < min {
                return Err(GspError::BadLayout(
                    "queue too small for a 16-element message (needs 72 KiB)",
                ));
            }
            if s > 0x0400_0000 {
                return Err(GspError::BadLayout("queue larger than 64 MiB"));
            }
        }
        Ok(())
    }

    /// `pageTableEntryCount` as `_getMsgQueueParams` computes it: the queue pages plus the
    /// pages the table needs.
    pub fn page_table_entries(&self) -> u32 {
        let pages = (self.cmd_queue_size + self.stat_queue_size) / GSP_PAGE_SIZE as u32;
        pages + (pages * 8).div_ceil(GSP_PAGE_SIZE as u32)
    }

    /// Bytes of the page table, rounded up to a page.
    pub fn page_table_size(&self) -> usize {
        (self.page_table_entries() as usize * 8).next_multiple_of(GSP_PAGE_SIZE)
    }

    /// Offset of the command queue.
    pub fn cmd_queue_offset(&self) -> usize {
        self.page_table_size()
    }

    /// Offset of the status queue.
    pub fn stat_queue_offset(&self) -> usize {
        self.cmd_queue_offset() + self.cmd_queue_size as usize
    }

    /// Bytes of the whole shared buffer.
    pub fn total_size(&self) -> usize {
        self.stat_queue_offset() + self.stat_queue_size as usize
    }

    /// Elements in a queue of `size` bytes.
    pub fn msg_count(size: u32) -> u32 {
        (size - ENTRY_OFF) / GSP_PAGE_SIZE as u32
    }
}

/// A validated message at the head of the status queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Ring index of its first element.
    pub start: u32,
    /// Elements it spans.
    pub elem_count: u32,
    /// Its element sequence number.
    pub seq: u32,
    /// Its RPC header.
    pub rpc: rpc_message_header_v03_00,
}

impl Record {
    /// Bytes of RPC payload (after the RPC header).
    pub fn payload_len(&self) -> usize {
        (self.rpc.length as usize).saturating_sub(RPC_HEADER_SIZE)
    }
}

/// What was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Ring index of the first element written.
    pub start: u32,
    /// Elements used.
    pub elem_count: u32,
    /// Element sequence number used.
    pub seq: u32,
}

/// Counters of what the queues saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MsgqStats {
    /// Messages sent.
    pub sent: u64,
    /// Sends that wrapped around the end of the command ring.
    pub sent_wrapped: u64,
    /// Sends that had to wait for GSP-RM to free space.
    pub send_waits: u64,
    /// Messages received and consumed.
    pub received: u64,
    /// Received messages that wrapped around the end of the status ring.
    pub received_wrapped: u64,
    /// Messages with an old sequence number, skipped (duplicates, late copies).
    pub stale_skipped: u64,
    /// Corrupt messages skipped (checksum, length, element count).
    pub corrupt_skipped: u64,
    /// Sequence gaps seen.
    pub sequence_gaps: u64,
}

/// The CPU side of the GSP message queues, over one DMA buffer.
///
/// The buffer must be contiguous in device address space (page `i` at `dev_addr + i * 4096`),
/// which is what [`DmaBuffer`] promises.
#[derive(Debug)]
pub struct MsgQueue<B: DmaBuffer> {
    buf: B,
    layout: SharedMemLayout,
    cmd_off: usize,
    stat_off: usize,
    tx_count: u32,
    tx_write: u32,
    tx_seq: u32,
    linked: bool,
    rx_count: u32,
    rx_entry_off: usize,
    rx_read: u32,
    rx_seq: u32,
    /// After skipping a corrupt message, accept the next message's sequence number as is.
    rx_resync: bool,
    stats: MsgqStats,
}

/// Reads a zerocopy struct from DMA memory.
fn read_struct<T: FromBytes + IntoBytes, B: DmaBuffer>(
    buf: &B,
    offset: usize,
) -> Result<T, GspError> {
    let mut v = T::new_zeroed();
    buf.read(offset, v.as_mut_bytes())?;
    Ok(v)
}

impl<B: DmaBuffer> MsgQueue<B> {
    /// Lays out the shared memory in `buf`: zeroes it, writes the page table and the command
    /// queue header (`msgqTxCreate`). GSP-RM fills in the status queue when it boots.
    pub fn new(buf: B, layout: SharedMemLayout) -> Result<Self, GspError> {
        layout.validate()?;
        if buf.len() < layout.total_size() {
            return Err(GspError::BadLayout(
                "DMA buffer smaller than the shared-memory layout",
            ));
        }
        buf.fill(0, layout.total_size(), 0)?;
        let base = buf.dev_addr();
        if !base.is_multiple_of(GSP_PAGE_SIZE as u64) {
            return Err(GspError::BadLayout("DMA buffer is not page aligned"));
        }
        for i in 0..layout.page_table_entries() as usize {
            buf.write_u64(i * 8, base + (i * GSP_PAGE_SIZE) as u64)?;
        }
        let cmd_off = layout.cmd_queue_offset();
        let tx_count = SharedMemLayout::msg_count(layout.cmd_queue_size);
        let hdr = msgqTxHeader {
            version: MSGQ_VERSION,
            size: layout.cmd_queue_size,
            msgSize: GSP_PAGE_SIZE as u32,
            msgCount: tx_count,
            writePtr: 0,
            flags: MSGQ_FLAGS_SWAP_RX,
            rxHdrOff: RX_HDR_OFF,
            entryOff: ENTRY_OFF,
        };
        buf.write(cmd_off, hdr.as_bytes())?;
        fence(Ordering::SeqCst);
        Ok(MsgQueue {
            buf,
            cmd_off,
            stat_off: layout.stat_queue_offset(),
            layout,
            tx_count,
            tx_write: 0,
            tx_seq: 0,
            linked: false,
            rx_count: SharedMemLayout::msg_count(layout.stat_queue_size),
            rx_entry_off: ENTRY_OFF as usize,
            rx_read: 0,
            rx_seq: 0,
            rx_resync: false,
            stats: MsgqStats::default(),
        })
    }

    /// The layout.
    pub fn layout(&self) -> &SharedMemLayout {
        &self.layout
    }

    /// The shared buffer (e.g. to dump it).
    pub fn buffer(&self) -> &B {
        &self.buf
    }

    /// What the boot code hands GSP-RM so it finds the queues.
    pub fn init_arguments(&self) -> MESSAGE_QUEUE_INIT_ARGUMENTS {
        MESSAGE_QUEUE_INIT_ARGUMENTS {
            sharedMemPhysAddr: self.buf.dev_addr(),
            pageTableEntryCount: self.layout.page_table_entries(),
            _pad: 0,
            cmdQueueOffset: self.cmd_off as u64,
            statQueueOffset: self.stat_off as u64,
        }
    }

    /// Counters.
    pub fn stats(&self) -> &MsgqStats {
        &self.stats
    }

    /// Elements in the command ring.
    pub fn tx_msg_count(&self) -> u32 {
        self.tx_count
    }

    /// Next command-ring index the CPU writes.
    pub fn tx_write_ptr(&self) -> u32 {
        self.tx_write
    }

    /// Next element sequence number the CPU sends.
    pub fn tx_seq(&self) -> u32 {
        self.tx_seq
    }

    /// Elements in the status ring (valid once linked).
    pub fn rx_msg_count(&self) -> u32 {
        self.rx_count
    }

    /// Next status-ring index the CPU reads.
    pub fn rx_read_ptr(&self) -> u32 {
        self.rx_read
    }

    /// Next element sequence number expected from GSP-RM.
    pub fn rx_seq(&self) -> u32 {
        self.rx_seq
    }

    /// Whether GSP-RM's status queue header has been accepted.
    pub fn is_linked(&self) -> bool {
        self.linked
    }

    /// Tries to link the status queue (`msgqRxLink`): `Ok(false)` while GSP-RM has not
    /// written its header, an error if the header disagrees with the layout.
    pub fn try_link(&mut self) -> Result<bool, GspError> {
        if self.linked {
            return Ok(true);
        }
        fence(Ordering::SeqCst);
        let h: msgqTxHeader = read_struct(&self.buf, self.stat_off)?;
        if h.size == 0 && h.msgSize == 0 && h.entryOff == 0 {
            return Ok(false);
        }
        let size = self.layout.stat_queue_size;
        let bad = |field, value| Err(GspError::LinkFailed { field, value });
        if h.size != size {
            return bad("size", h.size);
        }
        if h.msgSize != GSP_PAGE_SIZE as u32 {
            return bad("msgSize", h.msgSize);
        }
        if h.version != MSGQ_VERSION {
            return bad("version", h.version);
        }
        if h.rxHdrOff < 32 || h.rxHdrOff > size - 4 {
            return bad("rxHdrOff", h.rxHdrOff);
        }
        if h.entryOff < RX_HDR_OFF + 4 || h.entryOff >= size || !h.entryOff.is_multiple_of(8) {
            return bad("entryOff", h.entryOff);
        }
        if h.msgCount != (size - h.entryOff) / GSP_PAGE_SIZE as u32
            || h.msgCount <= GSP_MSG_QUEUE_MAX_ELEMENTS
        {
            return bad("msgCount", h.msgCount);
        }
        if h.flags & MSGQ_FLAGS_SWAP_RX == 0 {
            return bad("flags", h.flags);
        }
        self.rx_count = h.msgCount;
        self.rx_entry_off = h.entryOff as usize;
        self.rx_read = 0;
        self.buf
            .write_u32(self.cmd_off + RX_HDR_OFF as usize, self.rx_read)?;
        fence(Ordering::SeqCst);
        self.linked = true;
        Ok(true)
    }

    /// GSP-RM's read pointer into the command ring (published in the status-queue page).
    fn gsp_read_ptr(&self) -> Result<u32, GspError> {
        let rp = self.buf.read_u32(self.stat_off + RX_HDR_OFF as usize)?;
        if rp >= self.tx_count {
            return Err(GspError::CorruptPointer {
                field: "command queue readPtr",
                value: rp,
                limit: self.tx_count,
            });
        }
        Ok(rp)
    }

    /// Free elements in the command ring (one slot always stays empty).
    pub fn tx_free(&self) -> Result<u32, GspError> {
        let rp = self.gsp_read_ptr()?;
        Ok((rp + self.tx_count - self.tx_write - 1) % self.tx_count)
    }

    /// Sends one record whose RPC message (header first) is the concatenation of `parts`,
    /// waiting up to `timeout` for GSP-RM to free space, then rings the doorbell.
    pub fn send<M, C>(
        &mut self,
        bar0: &M,
        clock: &C,
        timeout: Duration,
        poll_interval: Duration,
        parts: &[&[u8]],
    ) -> Result<Sent, GspError>
    where
        M: Mmio + ?Sized,
        C: Clock + ?Sized,
    {
        let msg_len: usize = parts.iter().map(|p| p.len()).sum();
        if msg_len < RPC_HEADER_SIZE {
            return Err(GspError::BadLayout("RPC message shorter than its header"));
        }
        if msg_len > GSP_MSG_QUEUE_RPC_SIZE_MAX {
            return Err(GspError::MessageTooLarge {
                len: msg_len,
                max: GSP_MSG_QUEUE_RPC_SIZE_MAX,
            });
        }
        let total = GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + msg_len;
        let elems = total.div_ceil(GSP_PAGE_SIZE) as u32;

        // Back-pressure: never overwrite what GSP-RM has not read.
        let mut free = self.tx_free()?;
        if free < elems {
            self.stats.send_waits += 1;
            let r: Result<(), GspError> =
                poll_until(clock, timeout, poll_interval, "command queue space", || {
                    fence(Ordering::SeqCst);
                    free = self.tx_free()?;
                    Ok((free >= elems).then_some(()))
                });
            match r {
                Ok(()) => {}
                Err(GspError::Timeout { .. }) => {
                    return Err(GspError::QueueFull {
                        needed: elems,
                        free,
                    });
                }
                Err(e) => return Err(e),
            }
        }

        let mut hdr = GSP_MSG_QUEUE_ELEMENT {
            seqNum: self.tx_seq,
            elemCount: elems,
            ..Default::default()
        };
        let mut sum = Checksum::default();
        sum.update(hdr.as_bytes());
        for p in parts {
            sum.update(p);
        }
        hdr.checkSum = sum.value();

        let start = self.tx_write;
        let mut w = RingWriter {
            buf: &self.buf,
            entries: self.cmd_off + ENTRY_OFF as usize,
            start,
            count: self.tx_count,
            pos: 0,
        };
        w.write(hdr.as_bytes())?;
        for p in parts {
            w.write(p)?;
        }
        // Keep the element tails zero (r535 sums whole elements).
        w.zero_to(elems as usize * GSP_PAGE_SIZE)?;

        // The elements must be visible before the write pointer, and the write pointer
        // before the doorbell (portAtomicMemoryFenceStore in GspMsgQueueSendCommand).
        fence(Ordering::SeqCst);
        self.tx_write = (start + elems) % self.tx_count;
        self.buf.write_u32(self.cmd_off + 16, self.tx_write)?;
        fence(Ordering::SeqCst);
        NV_PGSP_QUEUE_HEAD::new()
            .with_address(0)
            .try_write(bar0, 0)?;
        let sent = Sent {
            start,
            elem_count: elems,
            seq: self.tx_seq,
        };
        self.tx_seq = self.tx_seq.wrapping_add(1);
        self.stats.sent += 1;
        if start + elems > self.tx_count {
            self.stats.sent_wrapped += 1;
        }
        Ok(sent)
    }

    /// Byte offset in the buffer of status-ring element `idx`.
    fn rx_elem_offset(&self, idx: u32) -> usize {
        self.stat_off + self.rx_entry_off + idx as usize * GSP_PAGE_SIZE
    }

    /// Copies record bytes `[at, at + dst.len())` (0 = element header) out of the ring,
    /// splitting at element boundaries so wrapped records read correctly.
    fn read_record_bytes(
        &self,
        start: u32,
        elem_count: u32,
        at: usize,
        dst: &mut [u8],
    ) -> Result<(), GspError> {
        let end = at.checked_add(dst.len());
        if end.is_none_or(|e| e > elem_count as usize * GSP_PAGE_SIZE) {
            return Err(GspError::Hal(crate::hal::HalError::OutOfRange {
                offset: at as u64,
                len: dst.len() as u64,
                limit: elem_count as u64 * GSP_PAGE_SIZE as u64,
            }));
        }
        let mut done = 0;
        while done < dst.len() {
            let b = at + done;
            let elem = (start + (b / GSP_PAGE_SIZE) as u32) % self.rx_count;
            let within = b % GSP_PAGE_SIZE;
            let n = (GSP_PAGE_SIZE - within).min(dst.len() - done);
            self.buf
                .read(self.rx_elem_offset(elem) + within, &mut dst[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    /// Moves the CPU's status read pointer on by `n` elements and publishes it.
    fn advance_rx(&mut self, n: u32) -> Result<(), GspError> {
        // Our reads of the elements must complete before GSP-RM may reuse them.
        fence(Ordering::SeqCst);
        self.rx_read = (self.rx_read + n) % self.rx_count;
        self.buf
            .write_u32(self.cmd_off + RX_HDR_OFF as usize, self.rx_read)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Elements GSP-RM has published and the CPU has not consumed.
    pub fn rx_available(&mut self) -> Result<u32, GspError> {
        if !self.try_link()? {
            return Ok(0);
        }
        fence(Ordering::SeqCst);
        let wp = self.buf.read_u32(self.stat_off + 16)?;
        if wp >= self.rx_count {
            return Err(GspError::CorruptPointer {
                field: "status queue writePtr",
                value: wp,
                limit: self.rx_count,
            });
        }
        Ok((wp + self.rx_count - self.rx_read) % self.rx_count)
    }

    /// Returns the validated message at the head of the status queue, if any.
    ///
    /// Messages with an old sequence number (duplicates) are skipped and counted. A corrupt
    /// message (element count, length, checksum) is skipped and reported once; a sequence
    /// gap is reported once and the queue resynchronises on the new number, leaving the
    /// message in place for the next call. The record stays in the queue until
    /// [`MsgQueue::consume`].
    pub fn receive(&mut self) -> Result<Option<Record>, GspError> {
        // Each pass consumes at least one element, so this ends.
        for _ in 0..=self.rx_count {
            let avail = self.rx_available()?;
            if avail == 0 {
                return Ok(None);
            }
            let start = self.rx_read;
            let mut head = [0u8; GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + RPC_HEADER_SIZE];
            self.buf.read(self.rx_elem_offset(start), &mut head)?;
            let (eh, rest) = GSP_MSG_QUEUE_ELEMENT::read_from_prefix(&head)
                .map_err(|_| GspError::BadLayout("element header"))?;
            let rpc = rpc_message_header_v03_00::read_from_bytes(rest)
                .map_err(|_| GspError::BadLayout("rpc header"))?;
            let ec = eh.elemCount;
            if ec == 0 || ec > GSP_MSG_QUEUE_MAX_ELEMENTS || ec > avail {
                // Resynchronise element by element: every message starts on one.
                self.skip_corrupt(1)?;
                return Err(GspError::BadElementCount {
                    elem_count: ec,
                    available: avail,
                });
            }
            let len = rpc.length as usize;
            if len < RPC_HEADER_SIZE
                || GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + len > ec as usize * GSP_PAGE_SIZE
            {
                self.skip_corrupt(ec)?;
                return Err(GspError::BadLength {
                    length: rpc.length,
                    elem_count: ec,
                });
            }
            let residue = self.checksum_of(start, ec, GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + len)?;
            if residue != 0 {
                self.skip_corrupt(ec)?;
                return Err(GspError::BadChecksum {
                    seq: eh.seqNum,
                    residue,
                });
            }
            let rec = Record {
                start,
                elem_count: ec,
                seq: eh.seqNum,
                rpc,
            };
            if eh.seqNum == self.rx_seq || self.rx_resync {
                self.rx_resync = false;
                self.rx_seq = eh.seqNum;
                return Ok(Some(rec));
            }
            if (eh.seqNum.wrapping_sub(self.rx_seq) as i32) < 0 {
                // An old message (a duplicate or a late copy): RM ignores these too.
                log::warn!(
                    "gsp: skipping stale status message seq {} (expected {})",
                    eh.seqNum,
                    self.rx_seq
                );
                self.stats.stale_skipped += 1;
                self.advance_rx(ec)?;
                continue;
            }
            self.stats.sequence_gaps += 1;
            let expected = self.rx_seq;
            self.rx_seq = eh.seqNum;
            return Err(GspError::SequenceGap {
                expected,
                got: eh.seqNum,
            });
        }
        Ok(None)
    }

    fn skip_corrupt(&mut self, n: u32) -> Result<(), GspError> {
        self.stats.corrupt_skipped += 1;
        self.rx_resync = true;
        self.advance_rx(n)
    }

    /// Folded XOR over the first `len` bytes of a record, rounded up to 8.
    fn checksum_of(&self, start: u32, ec: u32, len: usize) -> Result<u32, GspError> {
        let len = len.next_multiple_of(8).min(ec as usize * GSP_PAGE_SIZE);
        let mut sum = Checksum::default();
        let mut chunk = [0u8; 512];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(chunk.len());
            self.read_record_bytes(start, ec, at, &mut chunk[..n])?;
            sum.update(&chunk[..n]);
            at += n;
        }
        Ok(sum.value())
    }

    /// Copies RPC-message bytes `[offset, offset + dst.len())` of `rec` (0 = RPC header).
    pub fn read(&self, rec: &Record, offset: usize, dst: &mut [u8]) -> Result<(), GspError> {
        let end = offset.checked_add(dst.len());
        if end.is_none_or(|e| e > rec.rpc.length as usize) {
            return Err(GspError::Hal(crate::hal::HalError::OutOfRange {
                offset: offset as u64,
                len: dst.len() as u64,
                limit: rec.rpc.length as u64,
            }));
        }
        self.read_record_bytes(
            rec.start,
            rec.elem_count,
            GSP_MSG_QUEUE_ELEMENT_HDR_SIZE + offset,
            dst,
        )
    }

    /// Marks `rec` (the record [`MsgQueue::receive`] returned) consumed.
    pub fn consume(&mut self, rec: &Record) -> Result<(), GspError> {
        if rec.start != self.rx_read {
            return Err(GspError::BadLayout(
                "consumed a record that is not at the head",
            ));
        }
        self.stats.received += 1;
        if rec.start + rec.elem_count > self.rx_count {
            self.stats.received_wrapped += 1;
        }
        self.rx_seq = rec.seq.wrapping_add(1);
        self.advance_rx(rec.elem_count)
    }
}

/// Streams bytes into consecutive ring elements starting at `start`, wrapping at `count`.
struct RingWriter<'a, B: DmaBuffer> {
    buf: &'a B,
    entries: usize,
    start: u32,
    count: u32,
    pos: usize,
}

impl<B: DmaBuffer> RingWriter<'_, B> {
    fn offset(&self) -> (usize, usize) {
        let elem = (self.start + (self.pos / GSP_PAGE_SIZE) as u32) % self.count;
        let within = self.pos % GSP_PAGE_SIZE;
        (
            self.entries + elem as usize * GSP_PAGE_SIZE + within,
            GSP_PAGE_SIZE - within,
        )
    }

    fn write(&mut self, mut bytes: &[u8]) -> Result<(), GspError> {
        while !bytes.is_empty() {
            let (off, room) = self.offset();
            let n = room.min(bytes.len());
            let (now, later) = bytes.split_at(n);
            self.buf.write(off, now)?;
            self.pos += n;
            bytes = later;
        }
        Ok(())
    }

    fn zero_to(&mut self, end: usize) -> Result<(), GspError> {
        static ZEROS: [u8; GSP_PAGE_SIZE] = [0; GSP_PAGE_SIZE];
        while self.pos < end {
            let (off, room) = self.offset();
            let n = room.min(end - self.pos);
            self.buf.write(off, &ZEROS[..n])?;
            self.pos += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
