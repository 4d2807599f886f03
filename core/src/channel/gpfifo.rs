//! The GPFIFO ring, USERD and the doorbell.
//!
//! A channel's GPFIFO is a ring of 8-byte entries, each pointing at a pushbuffer segment
//! (`NVC86F_GP_ENTRY*`, `clc86f.h`): ENTRY0 `FETCH` 0:0, `GET` 31:2 (address bits 31:2);
//! ENTRY1 `GET_HI` 7:0 (address bits 39:32), `LEVEL` 9:9, `LENGTH` 30:10 (dwords), `SYNC`
//! 31:31. Pushbuffers must therefore live below 2^40.
//!
//! The CPU publishes new entries by writing `GPPut` in USERD (`Nvc86fControl`, offset 0x8c);
//! the GPU reports how far it has fetched in `GPGet` (0x88). The ring is full when advancing
//! `GPPut` would make it equal `GPGet`: [`GpFifo::submit`] then waits (with a timeout) for the
//! GPU to move on, and never overwrites an entry the GPU has not fetched. After `GPPut` is
//! written, the doorbell (`NVC361_NOTIFY_CHANNEL_PENDING`, usermode + 0x90) gets the channel's
//! work-submit token.
//!
//! [`GpFifo::submit`] is [`GpFifo::push`] (write the entry) followed by [`GpFifo::kick`]
//! (publish `GPPut`, ring the doorbell); callers that queue several entries may push them all
//! and kick once. The GPU does not look at entries that were pushed but not kicked.
//! [`GpFifo::stage`] writes the entry the next push will probably bring into its slot early
//! (while the CPU would otherwise wait), so that push only publishes it.
//!
//! Store ordering ([`DoorbellFence`]): rings and command memory may be write-combined (video
//! memory written through BAR1), whose stores x86 does not order among themselves or against
//! the uncached doorbell store. The GPU does not only read `GPPut` at a doorbell: when another
//! process's channel shares the GPU, the scheduler reloads `GPPut` from USERD whenever it
//! switches the channel in. So the entry and everything it points to must be visible before
//! `GPPut` is, and `GPPut` before the doorbell: a store barrier (`sfence`) before the `GPPut`
//! store and another before the doorbell (Linux's `wmb()` before each). With only the second
//! (tinygrad's order, [`DoorbellFence::Store`]) the H200 ran stale commands, an older launch
//! from the same command memory or ring slot, in 8 of 20 runs beside a process starting ten
//! times; with both, in none of 20 (docs/hardware.md); the second barrier costs
//! 0-0.3 µs per submission there, depending on the VM. Ordinary cached stores are ordered by
//! x86-TSO anyway.
//!
//! Lost doorbells: with the GPU to itself the host takes `GPPut` from USERD only when the
//! doorbell is rung, and on the H200 (580.159.04) a doorbell was lost every time another
//! process created its channels: the entry stayed unfetched (`GPGet` one behind `GPPut`) until
//! the doorbell was rung again (docs/hardware.md). Waits therefore ring again
//! ([`GpFifo::ring_doorbell`]) when neither the timeline nor `GPGet` moved for
//! [`DOORBELL_RETRY`], and a full ring does while it waits for room; ringing twice is harmless.

use core::fmt;
use core::sync::atomic::{Ordering, fence};
use core::time::Duration;

use crate::hal::{Clock, HalError, Mmio, PollError, poll_until};
use crate::regs::RelativeRegister;
use crate::regs::usermode::{MappedUsermode, NVC361_NOTIFY_CHANNEL_PENDING};

/// Size of a GP entry.
pub const GP_ENTRY_SIZE: u64 = 8;
/// How long a wait may see no progress (timeline and `GPGet` unchanged) before the doorbell is
/// rung again (a lost doorbell then costs about this much instead of a timeout); the default
/// of `DeviceOptions::doorbell_retry`.
pub const DOORBELL_RETRY: Duration = Duration::from_micros(100);
/// `Nvc86fControl.GPGet`: offset of the GPU's read index in USERD.
pub const USERD_GP_GET: u64 = 0x88;
/// `Nvc86fControl.GPPut`: offset of the CPU's write index in USERD.
pub const USERD_GP_PUT: u64 = 0x8c;
/// Size of `Nvc86fControl` (one channel's USERD).
pub const USERD_SIZE: u64 = 0x200;
/// Pushbuffer segments must lie below this address (`GET` + `GET_HI` = 40 bits).
pub const GP_ADDRESS_LIMIT: u64 = 1 << 40;
/// Largest segment in dwords (`LENGTH` is 21 bits).
pub const GP_MAX_LENGTH: u32 = (1 << 21) - 1;

/// A decoded GP entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpEntry {
    /// Pushbuffer segment address (4-byte aligned, below 2^40).
    pub address: u64,
    /// Length in dwords (0 = a control entry).
    pub length: u32,
    /// `LEVEL_SUBROUTINE`.
    pub subroutine: bool,
    /// `SYNC_WAIT`: wait for earlier segments' methods to finish before fetching.
    pub sync: bool,
    /// `FETCH_CONDITIONAL`.
    pub conditional: bool,
}

impl GpEntry {
    /// An entry for `length` dwords at `address` (main level, unconditional).
    pub fn new(address: u64, length: u32) -> Result<GpEntry, GpFifoError> {
        if address >= GP_ADDRESS_LIMIT || !address.is_multiple_of(4) {
            return Err(GpFifoError::BadSegment { address, length });
        }
        if length == 0 || length > GP_MAX_LENGTH {
            return Err(GpFifoError::BadSegment { address, length });
        }
        Ok(GpEntry {
            address,
            length,
            subroutine: false,
            sync: false,
            conditional: false,
        })
    }

    /// The 64-bit entry as stored in the ring (ENTRY0 in the low word).
    pub fn encode(&self) -> u64 {
        let e0 = (self.address as u32 & !3) | self.conditional as u32;
        let e1 = ((self.address >> 32) as u32 & 0xff)
            | ((self.subroutine as u32) << 9)
            | ((self.length & GP_MAX_LENGTH) << 10)
            | ((self.sync as u32) << 31);
        ((e1 as u64) << 32) | e0 as u64
    }

    /// Decodes a stored entry.
    pub fn decode(raw: u64) -> GpEntry {
        let e0 = raw as u32;
        let e1 = (raw >> 32) as u32;
        GpEntry {
            address: ((e1 as u64 & 0xff) << 32) | (e0 & !3) as u64,
            length: (e1 >> 10) & GP_MAX_LENGTH,
            subroutine: e1 & (1 << 9) != 0,
            sync: e1 & (1 << 31) != 0,
            conditional: e0 & 1 != 0,
        }
    }
}

/// Why a GPFIFO operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpFifoError {
    /// The ring stayed full: the GPU did not fetch entries within the timeout (the channel is
    /// stalled on a semaphore, hung, or dead).
    RingFull {
        /// `GPGet` last read.
        gp_get: u32,
        /// Our `GPPut`.
        gp_put: u32,
        /// Ring size.
        entries: u32,
        /// How long we waited.
        waited: Duration,
    },
    /// USERD's `GPGet` holds an index outside the ring (corrupt USERD or a dead device).
    BadGpGet {
        /// Value read.
        gp_get: u32,
        /// Ring size.
        entries: u32,
    },
    /// A segment that a GP entry cannot describe.
    BadSegment {
        /// Segment address.
        address: u64,
        /// Length in dwords.
        length: u32,
    },
    /// The ring size is unusable (below 2 or not a power of two).
    BadRingSize(u32),
    /// Accessing the ring or USERD failed.
    Memory(HalError),
}

impl fmt::Display for GpFifoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GpFifoError::RingFull {
                gp_get,
                gp_put,
                entries,
                waited,
            } => write!(
                f,
                "GPFIFO ring full for {waited:?} (GPGet {gp_get}, GPPut {gp_put}, {entries} \
                 entries): the channel is not fetching work - it is waiting on a semaphore, \
                 running a kernel that does not finish, or dead; nothing was overwritten"
            ),
            GpFifoError::BadGpGet { gp_get, entries } => write!(
                f,
                "USERD GPGet reads {gp_get:#x}, outside the {entries}-entry ring: USERD is \
                 corrupt or the GPU stopped answering"
            ),
            GpFifoError::BadSegment { address, length } => write!(
                f,
                "pushbuffer segment at {address:#x} ({length} dwords) cannot be put in a GP \
                 entry (needs a 4-byte aligned address below 2^40 and 1..2^21 dwords)"
            ),
            GpFifoError::BadRingSize(n) => {
                write!(f, "GPFIFO of {n} entries: need a power of two >= 2")
            }
            GpFifoError::Memory(e) => write!(f, "GPFIFO memory access failed: {e}"),
        }
    }
}

impl core::error::Error for GpFifoError {}

impl From<HalError> for GpFifoError {
    fn from(e: HalError) -> Self {
        GpFifoError::Memory(e)
    }
}

/// CPU access to a channel's ring and USERD (implemented over the backend's memory).
pub trait RingMemory {
    /// Writes GP entry `index` of the ring.
    fn write_entry(&self, index: u32, entry: u64) -> Result<(), HalError>;
    /// Reads USERD `GPGet`.
    fn read_gp_get(&self) -> Result<u32, HalError>;
    /// Writes USERD `GPPut`.
    fn write_gp_put(&self, put: u32) -> Result<(), HalError>;
}

/// The CPU side of one channel's GPFIFO.
#[derive(Debug, Clone)]
pub struct GpFifo {
    entries: u32,
    put: u32,
    /// `GPPut` as last written to USERD (entries from here to `put` are not kicked yet).
    published: u32,
    token: u32,
    /// Last `GPGet` seen (saves a USERD read while the ring has room).
    cached_get: u32,
    fence: DoorbellFence,
    /// A full ring rings the doorbell again this often while it waits.
    retry: Duration,
    /// The entry [`GpFifo::stage`] wrote into slot `put` (encoded), if no push came since.
    staged: Option<u64>,
}

/// How [`GpFifo::kick`] orders the CPU's stores before the doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DoorbellFence {
    /// One store barrier after `GPPut`, before the doorbell (tinygrad's order). Unsafe when
    /// another process shares the GPU: a channel switch-in may read `GPPut` before the entry
    /// and commands are visible and run stale ones (see the module docs). For measurements.
    Store,
    /// A store barrier ([`Mmio::store_barrier`] of the usermode window: `sfence` on x86 for
    /// the kernel-driver backend) before `GPPut` and another before the doorbell.
    #[default]
    StoreTwice,
    /// A full `SeqCst` fence (x86 `mfence`) before `GPPut` and another before the doorbell
    /// (what nvbare did first).
    Full,
}

impl GpFifo {
    /// A ring of `entries` (a power of two, at least 2) with `GPPut` = `GPGet` = 0, for the
    /// channel whose work-submit token is `token`.
    pub fn new(entries: u32, token: u32) -> Result<GpFifo, GpFifoError> {
        if entries < 2 || !entries.is_power_of_two() {
            return Err(GpFifoError::BadRingSize(entries));
        }
        Ok(GpFifo {
            entries,
            put: 0,
            published: 0,
            token,
            cached_get: 0,
            fence: DoorbellFence::default(),
            retry: DOORBELL_RETRY,
            staged: None,
        })
    }

    /// The same ring with stores ordered by `fence` before each doorbell.
    pub fn with_fence(mut self, fence: DoorbellFence) -> GpFifo {
        self.fence = fence;
        self
    }

    /// The same ring, ringing the doorbell again every `retry` while it waits for room
    /// (default [`DOORBELL_RETRY`]; `Duration::MAX` never does).
    pub fn with_doorbell_retry(mut self, retry: Duration) -> GpFifo {
        self.retry = retry;
        self
    }

    /// Ring size.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Next index the CPU writes.
    pub fn put(&self) -> u32 {
        self.put
    }

    /// Entries pushed but not kicked yet (the GPU does not know of them).
    pub fn unpublished(&self) -> u32 {
        (self.put + self.entries - self.published) % self.entries
    }

    /// The work-submit token rung on the doorbell.
    pub fn token(&self) -> u32 {
        self.token
    }

    /// `GPPut` as last written to USERD (what the GPU may fetch up to).
    pub fn published(&self) -> u32 {
        self.published
    }

    /// Rings the doorbell again for what is already published (no stores: `GPPut` and
    /// everything before it were ordered by the [`GpFifo::kick`] that published them). For a
    /// doorbell the host lost (see the module docs).
    pub fn ring_doorbell<U: Mmio + ?Sized>(&self, usermode: &U) {
        ring(usermode, self.token);
    }

    fn next(&self, i: u32) -> u32 {
        (i + 1) % self.entries
    }

    fn read_get<M: RingMemory + ?Sized>(&mut self, mem: &M) -> Result<u32, GpFifoError> {
        let get = mem.read_gp_get()?;
        if get >= self.entries {
            return Err(GpFifoError::BadGpGet {
                gp_get: get,
                entries: self.entries,
            });
        }
        self.cached_get = get;
        Ok(get)
    }

    /// Entries the GPU has not fetched yet (as of the last `GPGet` read).
    pub fn pending(&self) -> u32 {
        (self.put + self.entries - self.cached_get) % self.entries
    }

    /// Whether `n` more entries fit without waiting for the GPU (`GPGet` is read only when the
    /// last value read says they do not).
    pub fn has_room<M: RingMemory + ?Sized>(
        &mut self,
        mem: &M,
        n: u32,
    ) -> Result<bool, GpFifoError> {
        if self.pending() + n < self.entries {
            return Ok(true);
        }
        self.read_get(mem)?;
        Ok(self.pending() + n < self.entries)
    }

    /// Writes `entry` into the next slot ahead of time, without pushing it: the GPU fetches
    /// only up to `GPPut`, so the slot is inert until a [`GpFifo::push`] of the same entry,
    /// which then skips the store (a push of any other entry overwrites the slot). Returns
    /// whether it wrote; a full ring writes nothing (never waits). Lets a caller move the
    /// entry's store off the path from a launch call to its doorbell.
    pub fn stage<M: RingMemory + ?Sized>(
        &mut self,
        mem: &M,
        entry: GpEntry,
    ) -> Result<bool, GpFifoError> {
        self.staged = None;
        let next = self.next(self.put);
        if next == self.cached_get && self.read_get(mem)? == next {
            return Ok(false);
        }
        let raw = entry.encode();
        mem.write_entry(self.put, raw)?;
        self.staged = Some(raw);
        Ok(true)
    }

    /// Whether slot `put` holds `entry`, written by [`GpFifo::stage`].
    pub fn is_staged(&self, entry: GpEntry) -> bool {
        self.staged == Some(entry.encode())
    }

    /// Appends `entry`, publishes it in `GPPut` and rings the doorbell of `usermode` (the
    /// usermode block as an RM usermode object maps it, `NOTIFY_CHANNEL_PENDING` at 0x90):
    /// [`GpFifo::push`] then [`GpFifo::kick`].
    ///
    /// If the ring is full, polls `GPGet` until the GPU frees a slot or `timeout` passes, then
    /// fails with [`GpFifoError::RingFull`] without touching the ring.
    pub fn submit<M, U, C>(
        &mut self,
        mem: &M,
        usermode: &U,
        clock: &C,
        timeout: Duration,
        entry: GpEntry,
    ) -> Result<(), GpFifoError>
    where
        M: RingMemory + ?Sized,
        U: Mmio + ?Sized,
        C: Clock + ?Sized,
    {
        self.push(mem, usermode, clock, timeout, entry)?;
        self.kick(mem, usermode)
    }

    /// Writes `entry` into the ring without telling the GPU ([`GpFifo::kick`] does).
    ///
    /// If the ring is full, kicks what was pushed before (so the GPU can make room), then polls
    /// `GPGet` until the GPU frees a slot or `timeout` passes, and fails with
    /// [`GpFifoError::RingFull`] without writing the entry.
    pub fn push<M, U, C>(
        &mut self,
        mem: &M,
        usermode: &U,
        clock: &C,
        timeout: Duration,
        entry: GpEntry,
    ) -> Result<(), GpFifoError>
    where
        M: RingMemory + ?Sized,
        U: Mmio + ?Sized,
        C: Clock + ?Sized,
    {
        let next = self.next(self.put);
        if next == self.cached_get && self.read_get(mem)? == next {
            self.kick(mem, usermode)?;
            let entries = self.entries;
            let put = self.put;
            let token = self.token;
            let retry = self.retry;
            let mut last_get = next;
            let start = clock.now();
            let mut rung = start;
            let r: Result<(), WaitError> = poll_until(
                clock,
                timeout,
                Duration::from_micros(1),
                "GPFIFO GPGet to advance",
                || {
                    let g = mem.read_gp_get().map_err(WaitError::Hal)?;
                    if g >= entries {
                        return Err(WaitError::BadGet(g));
                    }
                    last_get = g;
                    if g != next {
                        return Ok(Some(()));
                    }
                    // Still full: the doorbell for what is published may have been lost.
                    let now = clock.now();
                    if now.saturating_sub(rung) >= retry {
                        ring(usermode, token);
                        rung = now;
                    }
                    Ok(None)
                },
            );
            match r {
                Ok(()) => self.cached_get = last_get,
                Err(WaitError::Hal(e)) => return Err(e.into()),
                Err(WaitError::BadGet(g)) => {
                    return Err(GpFifoError::BadGpGet { gp_get: g, entries });
                }
                Err(WaitError::Timeout) => {
                    return Err(GpFifoError::RingFull {
                        gp_get: last_get,
                        gp_put: put,
                        entries,
                        waited: clock.now().saturating_sub(start),
                    });
                }
            }
        }
        let raw = entry.encode();
        if self.staged.take() != Some(raw) {
            mem.write_entry(self.put, raw)?;
        }
        self.put = next;
        Ok(())
    }

    /// Publishes every pushed entry in `GPPut` and rings the doorbell (nothing if there is
    /// none). The entries, and all memory they point to, are made visible first
    /// ([`DoorbellFence`]).
    pub fn kick<M, U>(&mut self, mem: &M, usermode: &U) -> Result<(), GpFifoError>
    where
        M: RingMemory + ?Sized,
        U: Mmio + ?Sized,
    {
        if self.published == self.put {
            return Ok(());
        }
        match self.fence {
            DoorbellFence::Store => {
                mem.write_gp_put(self.put)?;
                usermode.store_barrier();
            }
            DoorbellFence::StoreTwice => {
                usermode.store_barrier();
                mem.write_gp_put(self.put)?;
                usermode.store_barrier();
            }
            DoorbellFence::Full => {
                fence(Ordering::SeqCst);
                mem.write_gp_put(self.put)?;
                fence(Ordering::SeqCst);
            }
        }
        self.published = self.put;
        ring(usermode, self.token);
        Ok(())
    }
}

/// Writes `token` to the doorbell (`NVC361_NOTIFY_CHANNEL_PENDING`).
fn ring<U: Mmio + ?Sized>(usermode: &U, token: u32) {
    usermode.write32(
        NVC361_NOTIFY_CHANNEL_PENDING::offset_of::<MappedUsermode>(),
        token,
    );
}

enum WaitError {
    Hal(HalError),
    BadGet(u32),
    Timeout,
}

impl From<PollError> for WaitError {
    fn from(_: PollError) -> Self {
        WaitError::Timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::{Cell, RefCell};

    #[test]
    fn gp_entry_layout() {
        // tinygrad: (va & ~3) | (len << 42) | (1 << 41) for a subroutine-level entry.
        let mut e = GpEntry::new(0x12_3456_7890, 0x40).unwrap();
        assert_eq!(e.encode(), 0x12_3456_7890 | (0x40u64 << 42));
        e.subroutine = true;
        assert_eq!(e.encode(), 0x12_3456_7890 | (0x40u64 << 42) | (1 << 41));
        e.sync = true;
        e.conditional = true;
        assert_eq!(GpEntry::decode(e.encode()), e);
        assert!(GpEntry::new(1 << 40, 1).is_err());
        assert!(GpEntry::new(0x1002, 1).is_err());
        assert!(GpEntry::new(0x1000, 0).is_err());
        assert!(GpEntry::new(0x1000, 1 << 21).is_err());
        assert!(GpEntry::new(0xff_ffff_fffc, GP_MAX_LENGTH).is_ok());
    }

    struct FakeClock(Cell<Duration>);
    impl Clock for FakeClock {
        fn now(&self) -> Duration {
            self.0.get()
        }
        fn delay(&self, d: Duration) {
            self.0.set(self.0.get() + d)
        }
    }

    /// A ring whose "GPU" fetches only when `fetching` is set.
    struct Ring {
        slots: RefCell<[u64; 4]>,
        get: Cell<u32>,
        put: Cell<u32>,
        writes: Cell<u32>,
    }
    impl Ring {
        /// Four empty slots, `GPGet` = `GPPut` = 0.
        fn new() -> Ring {
            Ring {
                slots: RefCell::new([0; 4]),
                get: Cell::new(0),
                put: Cell::new(0),
                writes: Cell::new(0),
            }
        }
    }
    impl RingMemory for Ring {
        fn write_entry(&self, index: u32, entry: u64) -> Result<(), HalError> {
            let mut s = self.slots.borrow_mut();
            let slot = s.get_mut(index as usize).ok_or(HalError::OutOfRange {
                offset: index as u64,
                len: 8,
                limit: 32,
            })?;
            *slot = entry;
            self.writes.set(self.writes.get() + 1);
            Ok(())
        }
        fn read_gp_get(&self) -> Result<u32, HalError> {
            Ok(self.get.get())
        }
        fn write_gp_put(&self, put: u32) -> Result<(), HalError> {
            self.put.set(put);
            Ok(())
        }
    }

    struct Doorbell(Cell<u32>, Cell<u32>);
    impl Mmio for Doorbell {
        fn size(&self) -> usize {
            0x1_0000
        }
        fn read32(&self, _: usize) -> u32 {
            0
        }
        fn write32(&self, offset: usize, value: u32) {
            assert_eq!(offset, 0x90);
            self.0.set(value);
            self.1.set(self.1.get() + 1);
        }
    }

    #[test]
    fn has_room_reads_gp_get_only_when_the_cached_value_says_no() {
        let ring = Ring::new();
        let bell = Doorbell(Cell::new(0), Cell::new(0));
        let clock = FakeClock(Cell::new(Duration::ZERO));
        let mut f = GpFifo::new(4, 0xa).unwrap();
        let t = Duration::from_millis(5);
        assert!(f.has_room(&ring, 3).unwrap());
        assert!(!f.has_room(&ring, 4).unwrap(), "a ring of 4 holds 3");
        for i in 0..2 {
            let e = GpEntry::new(0x1000 * (i + 1), 4).unwrap();
            f.submit(&ring, &bell, &clock, t, e).unwrap();
        }
        assert!(f.has_room(&ring, 1).unwrap());
        assert!(!f.has_room(&ring, 2).unwrap(), "GPGet has not moved");
        // The GPU fetched both: GPGet is read again and the room is back.
        ring.get.set(2);
        assert!(f.has_room(&ring, 3).unwrap());
        // A GPGet the ring cannot hold is an error, not room.
        let mut g = GpFifo::new(4, 0xa).unwrap();
        for i in 0..3 {
            let e = GpEntry::new(0x1000 * (i + 1), 4).unwrap();
            g.submit(&ring, &bell, &clock, t, e).unwrap();
        }
        ring.get.set(9);
        assert!(g.has_room(&ring, 1).is_err());
    }

    #[test]
    fn full_ring_waits_then_errors_without_overwriting() {
        let ring = Ring::new();
        let bell = Doorbell(Cell::new(0), Cell::new(0));
        let clock = FakeClock(Cell::new(Duration::ZERO));
        let mut f = GpFifo::new(4, 0xa).unwrap();
        let t = Duration::from_millis(5);
        for i in 0..3 {
            let e = GpEntry::new(0x1000 * (i + 1), 4).unwrap();
            f.submit(&ring, &bell, &clock, t, e).unwrap();
        }
        assert_eq!(ring.put.get(), 3);
        assert_eq!(bell.0.get(), 0xa);
        assert_eq!(bell.1.get(), 3);
        let before = *ring.slots.borrow();
        // GPGet never moves: the 4th submit must wait for the timeout, then fail, and leave
        // the ring and GPPut untouched; meanwhile it rings the doorbell again every
        // DOORBELL_RETRY (the host may have lost the one for what is published).
        let e = GpEntry::new(0x9000, 4).unwrap();
        let err = f.submit(&ring, &bell, &clock, t, e).unwrap_err();
        match err {
            GpFifoError::RingFull {
                gp_get,
                gp_put,
                entries,
                waited,
            } => {
                assert_eq!((gp_get, gp_put, entries), (0, 3, 4));
                assert!(waited >= t);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(*ring.slots.borrow(), before);
        assert_eq!(ring.put.get(), 3);
        let retries = (t.as_micros() / DOORBELL_RETRY.as_micros()) as u32;
        assert_eq!(bell.1.get(), 3 + retries);
        assert_eq!(bell.0.get(), 0xa, "the same token");
        // Once the GPU fetches, the same submit goes through into slot 3.
        ring.get.set(2);
        f.submit(&ring, &bell, &clock, t, e).unwrap();
        assert_eq!(GpEntry::decode(ring.slots.borrow()[3]).address, 0x9000);
        assert_eq!(ring.put.get(), 0);
        assert_eq!(f.pending(), 2);
    }

    #[test]
    fn pushed_entries_reach_the_gpu_only_when_kicked() {
        let ring = Ring::new();
        let bell = Doorbell(Cell::new(0), Cell::new(0));
        let clock = FakeClock(Cell::new(Duration::ZERO));
        for fence in [
            DoorbellFence::Store,
            DoorbellFence::StoreTwice,
            DoorbellFence::Full,
        ] {
            ring.get.set(0);
            ring.put.set(0);
            bell.1.set(0);
            let mut f = GpFifo::new(4, 7).unwrap().with_fence(fence);
            let t = Duration::from_millis(1);
            f.push(&ring, &bell, &clock, t, GpEntry::new(0x1000, 2).unwrap())
                .unwrap();
            f.push(&ring, &bell, &clock, t, GpEntry::new(0x2000, 2).unwrap())
                .unwrap();
            assert_eq!((ring.put.get(), bell.1.get(), f.unpublished()), (0, 0, 2));
            f.kick(&ring, &bell).unwrap();
            assert_eq!((ring.put.get(), bell.0.get(), bell.1.get()), (2, 7, 1));
            assert_eq!(f.unpublished(), 0);
            // Nothing new: no doorbell.
            f.kick(&ring, &bell).unwrap();
            assert_eq!(bell.1.get(), 1);
            // A full ring with unpublished entries kicks them before it waits for the GPU.
            f.push(&ring, &bell, &clock, t, GpEntry::new(0x3000, 2).unwrap())
                .unwrap();
            assert_eq!(f.unpublished(), 1);
            let err = f
                .push(&ring, &bell, &clock, t, GpEntry::new(0x4000, 2).unwrap())
                .unwrap_err();
            assert!(matches!(err, GpFifoError::RingFull { .. }), "{err:?}");
            // The kick, then a retry every DOORBELL_RETRY while the ring stayed full.
            let retries = (t.as_micros() / DOORBELL_RETRY.as_micros()) as u32;
            assert_eq!(
                (ring.put.get(), bell.1.get(), f.unpublished()),
                (3, 2 + retries, 0)
            );
        }
    }

    #[test]
    fn garbage_gp_get_is_an_error() {
        let ring = Ring::new();
        let bell = Doorbell(Cell::new(0), Cell::new(0));
        let clock = FakeClock(Cell::new(Duration::ZERO));
        let mut f = GpFifo::new(4, 1).unwrap();
        let t = Duration::from_millis(1);
        for _ in 0..3 {
            f.submit(&ring, &bell, &clock, t, GpEntry::new(0x100, 1).unwrap())
                .unwrap();
        }
        ring.get.set(0xffff_ffff);
        assert!(matches!(
            f.submit(&ring, &bell, &clock, t, GpEntry::new(0x100, 1).unwrap()),
            Err(GpFifoError::BadGpGet { .. })
        ));
        assert!(matches!(
            GpFifo::new(3, 0),
            Err(GpFifoError::BadRingSize(3))
        ));
        assert!(matches!(
            GpFifo::new(1, 0),
            Err(GpFifoError::BadRingSize(1))
        ));
    }

    #[test]
    fn a_staged_entry_is_inert_until_pushed_and_saves_the_store() {
        let ring = Ring::new();
        let bell = Doorbell(Cell::new(0), Cell::new(0));
        let clock = FakeClock(Cell::new(Duration::ZERO));
        let t = Duration::from_millis(1);
        let mut f = GpFifo::new(4, 3).unwrap();
        let a = GpEntry::new(0x1000, 4).unwrap();
        let b = GpEntry::new(0x2000, 4).unwrap();
        // Staged: in the slot, but GPPut, the doorbell and the ring indices are untouched.
        assert!(f.stage(&ring, a).unwrap());
        assert!(f.is_staged(a) && !f.is_staged(b));
        assert_eq!(ring.slots.borrow()[0], a.encode());
        assert_eq!((ring.put.get(), bell.1.get(), f.put()), (0, 0, 0));
        assert_eq!(f.unpublished(), 0);
        // Pushing the same entry skips the store; the kick publishes it as usual.
        f.submit(&ring, &bell, &clock, t, a).unwrap();
        assert_eq!(ring.writes.get(), 1);
        assert_eq!((ring.put.get(), bell.1.get()), (1, 1));
        assert!(!f.is_staged(a), "used up");
        // Another entry than the staged one overwrites the slot.
        assert!(f.stage(&ring, a).unwrap());
        f.submit(&ring, &bell, &clock, t, b).unwrap();
        assert_eq!(ring.writes.get(), 3);
        assert_eq!(GpEntry::decode(ring.slots.borrow()[1]), b);
        // The next push of `a` is not taken for staged any more: it is written.
        f.submit(&ring, &bell, &clock, t, a).unwrap();
        assert_eq!(ring.writes.get(), 4);
        assert_eq!(GpEntry::decode(ring.slots.borrow()[2]), a);
        // A full ring (GPGet 0, put 3): staging writes nothing and does not wait.
        assert!(!f.stage(&ring, b).unwrap());
        assert_eq!(ring.writes.get(), 4);
        assert!(!f.is_staged(b));
        assert_eq!(clock.now(), Duration::ZERO);
        // Once the GPU moves on, staging works again and a push takes it.
        ring.get.set(3);
        assert!(f.stage(&ring, b).unwrap());
        f.submit(&ring, &bell, &clock, t, b).unwrap();
        assert_eq!(ring.writes.get(), 5);
        assert_eq!((ring.put.get(), bell.1.get()), (0, 4));
    }
}
