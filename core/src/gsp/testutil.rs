//! Test doubles for the GSP modules' unit tests: heap-backed DMA memory, a register file that
//! counts doorbells, and a clock that only moves when waited on.
extern crate std;

use core::cell::{Cell, RefCell};
use core::time::Duration;
use std::vec;
use std::vec::Vec;

use crate::hal::{Clock, DmaBuffer, HalError, Mmio, check_range};

/// DMA memory backed by a `Vec`, with a fixed fake device address.
pub(crate) struct VecDma {
    pub(crate) data: RefCell<Vec<u8>>,
    pub(crate) addr: u64,
}

impl VecDma {
    pub(crate) fn new(len: usize) -> Self {
        VecDma {
            data: RefCell::new(vec![0; len]),
            addr: 0x1_0000_0000,
        }
    }
}

impl DmaBuffer for VecDma {
    fn len(&self) -> usize {
        self.data.borrow().len()
    }
    fn dev_addr(&self) -> u64 {
        self.addr
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        let d = self.data.borrow();
        check_range(offset as u64, dst.len() as u64, d.len() as u64)?;
        dst.copy_from_slice(&d[offset..offset + dst.len()]);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        let mut d = self.data.borrow_mut();
        check_range(offset as u64, src.len() as u64, d.len() as u64)?;
        d[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

impl<T: DmaBuffer + ?Sized> DmaBuffer for &T {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn dev_addr(&self) -> u64 {
        (**self).dev_addr()
    }
    fn cpu_ptr(&self) -> Option<core::ptr::NonNull<u8>> {
        (**self).cpu_ptr()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        (**self).read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        (**self).write(offset, src)
    }
}

/// Registers that remember writes to the doorbell.
#[derive(Default)]
pub(crate) struct Doorbell {
    pub(crate) rings: Cell<u32>,
}

impl Mmio for Doorbell {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    fn write32(&self, offset: usize, _value: u32) {
        if offset == 0x11_0c00 {
            self.rings.set(self.rings.get() + 1);
        }
    }
}

/// A clock that advances only in `delay`.
#[derive(Default)]
pub(crate) struct StepClock(pub(crate) Cell<Duration>);

impl Clock for StepClock {
    fn now(&self) -> Duration {
        self.0.get()
    }
    fn delay(&self, d: Duration) {
        self.0.set(self.0.get() + d)
    }
}

/// Plays GSP-RM's status-queue header in the default [`SharedMemLayout`](super::msgq::SharedMemLayout)
/// (status queue at 0x41000, 63 elements).
pub(crate) fn gsp_link<B: DmaBuffer + ?Sized>(buf: &B) {
    use super::msgq::{MSGQ_FLAGS_SWAP_RX, msgqTxHeader};
    use zerocopy::IntoBytes;
    let h = msgqTxHeader {
        version: 0,
        size: 0x40000,
        msgSize: 0x1000,
        msgCount: 63,
        writePtr: 0,
        flags: MSGQ_FLAGS_SWAP_RX,
        rxHdrOff: 32,
        entryOff: 0x1000,
    };
    buf.write(0x41000, h.as_bytes()).unwrap();
}

/// Writes a status message the way GSP-RM does, at element `idx` of the default layout's
/// status ring, and publishes it; returns the new write pointer.
pub(crate) fn gsp_write<B: DmaBuffer + ?Sized>(
    buf: &B,
    idx: u32,
    seq: u32,
    function: u32,
    payload: &[u8],
) -> u32 {
    use super::msgq::{Checksum, GSP_MSG_QUEUE_ELEMENT};
    use super::rpc::{
        NV_VGPU_MSG_HEADER_VERSION, NV_VGPU_MSG_SIGNATURE_VALID, RPC_HEADER_SIZE,
        rpc_message_header_v03_00,
    };
    use zerocopy::IntoBytes;
    let rpc = rpc_message_header_v03_00 {
        header_version: NV_VGPU_MSG_HEADER_VERSION,
        signature: NV_VGPU_MSG_SIGNATURE_VALID,
        length: (RPC_HEADER_SIZE + payload.len()) as u32,
        function,
        ..Default::default()
    };
    let total = 48 + rpc.length as usize;
    let ec = total.div_ceil(4096) as u32;
    let mut e = GSP_MSG_QUEUE_ELEMENT {
        seqNum: seq,
        elemCount: ec,
        ..Default::default()
    };
    let mut s = Checksum::default();
    s.update(e.as_bytes());
    s.update(rpc.as_bytes());
    s.update(payload);
    e.checkSum = s.value();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(e.as_bytes());
    bytes.extend_from_slice(rpc.as_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(ec as usize * 4096, 0);
    for (i, el) in bytes.chunks(4096).enumerate() {
        let slot = (idx + i as u32) % 63;
        buf.write(0x42000 + slot as usize * 4096, el).unwrap();
    }
    let wp = (idx + ec) % 63;
    buf.write(0x41000 + 16, &wp.to_le_bytes()).unwrap();
    wp
}

/// Shared memory whose "GSP-RM" writes a new event into the status queue each time the CPU
/// publishes its read pointer: a GSP flooding the queue as fast as it is read.
pub(crate) struct FloodDma {
    pub(crate) inner: VecDma,
    /// The event function it sends.
    pub(crate) function: u32,
    /// GSP-RM's next write index and element sequence number.
    next: Cell<(u32, u32)>,
    /// Events written.
    pub(crate) sent: Cell<u64>,
    armed: Cell<bool>,
}

impl FloodDma {
    /// Default-layout shared memory; GSP-RM starts once [`FloodDma::start`] is called.
    pub(crate) fn new(function: u32) -> Self {
        FloodDma {
            inner: VecDma::new(super::msgq::SharedMemLayout::default().total_size()),
            function,
            next: Cell::new((0, 0)),
            sent: Cell::new(0),
            armed: Cell::new(false),
        }
    }

    /// Links the status queue (after `MsgQueue::new` has initialised the buffer), sends the
    /// first event and floods from then on.
    pub(crate) fn start(&self) {
        gsp_link(&self.inner);
        self.flood_one();
        self.armed.set(true);
    }

    fn flood_one(&self) {
        let (idx, seq) = self.next.get();
        let wp = gsp_write(&self.inner, idx, seq, self.function, &[0; 8]);
        self.next.set((wp, seq + 1));
        self.sent.set(self.sent.get() + 1);
    }
}

impl DmaBuffer for FloodDma {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn dev_addr(&self) -> u64 {
        self.inner.dev_addr()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        self.inner.read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        self.inner.write(offset, src)?;
        // The CPU's status-queue read pointer: the command queue's msgqRxHeader.
        if self.armed.get() && offset == 0x1000 + super::msgq::RX_HDR_OFF as usize {
            self.flood_one();
        }
        Ok(())
    }
}
