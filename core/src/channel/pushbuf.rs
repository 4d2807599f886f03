//! Pushbuffer encoding: method headers and a bounded writer.
//!
//! A pushbuffer is a sequence of 32-bit words: a header naming a method, a subchannel and a
//! count, followed by that many data words (`NVC56F_DMA_*` in `clc56f.h`):
//!
//! | bits  | field                                                                        |
//! |-------|------------------------------------------------------------------------------|
//! | 31:29 | `SEC_OP`: 1 incrementing, 3 non-incrementing, 4 immediate, 5 increment-once  |
//! | 28:16 | `METHOD_COUNT` (or 13-bit `IMMD_DATA`)                                       |
//! | 15:13 | `METHOD_SUBCHANNEL`                                                          |
//! | 11:0  | `METHOD_ADDRESS` (method byte offset >> 2)                                   |
//!
//! [`PushBuffer`] writes into a caller-owned `&mut [u32]`, so building one allocates nothing;
//! the helpers emit the method sequences the device layer uses (semaphores, object binding,
//! copies, launches). [`super::decode`] turns words back into named methods.

use core::fmt;

use super::methods::{SUBC_COMPUTE, SUBC_COPY, SUBC_HOST, compute, copy, host};

/// The `SEC_OP` of a method header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecOp {
    /// `GRP0_USE_TERT` (0): tertiary-opcode group 0 (increment methods, subdevice masks);
    /// a zero word is `NVC56F_DMA_NOP`.
    Grp0UseTert,
    /// `INC_METHOD` (1): data word `i` goes to `method + 4 * i`.
    IncMethod,
    /// `GRP2_USE_TERT` (2).
    Grp2UseTert,
    /// `NON_INC_METHOD` (3): every data word goes to `method`.
    NonIncMethod,
    /// `IMMD_DATA_METHOD` (4): the 13-bit count field is the data; no data words follow.
    ImmdDataMethod,
    /// `ONE_INC` (5): the first word to `method`, the rest to `method + 4`.
    OneInc,
    /// `RESERVED6` (6).
    Reserved6,
    /// `END_PB_SEGMENT` (7).
    EndPbSegment,
}

impl SecOp {
    /// The 3-bit value.
    pub fn bits(self) -> u32 {
        match self {
            SecOp::Grp0UseTert => 0,
            SecOp::IncMethod => 1,
            SecOp::Grp2UseTert => 2,
            SecOp::NonIncMethod => 3,
            SecOp::ImmdDataMethod => 4,
            SecOp::OneInc => 5,
            SecOp::Reserved6 => 6,
            SecOp::EndPbSegment => 7,
        }
    }

    /// From the 3-bit value (only the low 3 bits are used).
    pub fn from_bits(b: u32) -> SecOp {
        match b & 7 {
            0 => SecOp::Grp0UseTert,
            1 => SecOp::IncMethod,
            2 => SecOp::Grp2UseTert,
            3 => SecOp::NonIncMethod,
            4 => SecOp::ImmdDataMethod,
            5 => SecOp::OneInc,
            6 => SecOp::Reserved6,
            _ => SecOp::EndPbSegment,
        }
    }
}

/// Largest `METHOD_COUNT` (13 bits).
pub const MAX_METHOD_COUNT: u32 = 0x1fff;
/// Largest immediate value (13 bits).
pub const MAX_IMMEDIATE: u32 = 0x1fff;
/// Largest method byte offset (`METHOD_ADDRESS` is 12 bits of dwords).
pub const MAX_METHOD: u32 = 0x3ffc;

/// A decoded method header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Opcode.
    pub op: SecOp,
    /// Subchannel (0..7).
    pub subchannel: u8,
    /// Method byte offset.
    pub method: u32,
    /// `METHOD_COUNT`, or the immediate value for [`SecOp::ImmdDataMethod`].
    pub count: u32,
}

impl Header {
    /// Encodes the header word.
    pub fn encode(self) -> u32 {
        (self.op.bits() << 29)
            | ((self.count & MAX_METHOD_COUNT) << 16)
            | (((self.subchannel & 7) as u32) << 13)
            | ((self.method >> 2) & 0xfff)
    }

    /// Decodes a header word.
    pub fn decode(word: u32) -> Header {
        Header {
            op: SecOp::from_bits(word >> 29),
            count: (word >> 16) & MAX_METHOD_COUNT,
            subchannel: ((word >> 13) & 7) as u8,
            method: (word & 0xfff) << 2,
        }
    }

    /// Number of data words that follow this header.
    pub fn data_words(&self) -> u32 {
        match self.op {
            SecOp::IncMethod | SecOp::NonIncMethod | SecOp::OneInc => self.count,
            _ => 0,
        }
    }
}

/// Why a method could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The pushbuffer has no room for `needed` more words.
    Full {
        /// Words needed.
        needed: usize,
        /// Words left.
        free: usize,
    },
    /// More data words than `METHOD_COUNT` can carry, or none.
    BadCount(usize),
    /// An immediate value wider than 13 bits.
    ImmediateTooLarge(u32),
    /// A method offset that is misaligned or beyond `METHOD_ADDRESS`.
    BadMethod(u32),
    /// A subchannel above 7.
    BadSubchannel(u8),
    /// A GPU address that does not fit the method's address field.
    AddressTooLarge(u64),
    /// A semaphore payload wider than the class takes (32 bits on TURING_DMA_COPY_A).
    PayloadTooLarge(u64),
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PushError::Full { needed, free } => write!(
                f,
                "pushbuffer full: {needed} more words needed, {free} left (a driver bug: \
                 the pushbuffer is sized for the largest sequence)"
            ),
            PushError::BadCount(n) => write!(f, "method with {n} data words (1..=8191 allowed)"),
            PushError::ImmediateTooLarge(v) => {
                write!(f, "immediate value {v:#x} does not fit 13 bits")
            }
            PushError::BadMethod(m) => write!(f, "method offset {m:#x} is invalid"),
            PushError::BadSubchannel(s) => write!(f, "subchannel {s} is invalid (0..7)"),
            PushError::AddressTooLarge(a) => {
                write!(f, "GPU address {a:#x} is too large for the method")
            }
            PushError::PayloadTooLarge(p) => {
                write!(f, "semaphore payload {p:#x} is wider than the class takes")
            }
        }
    }
}

impl core::error::Error for PushError {}

/// A pushbuffer being written into a caller-owned word slice.
#[derive(Debug)]
pub struct PushBuffer<'a> {
    buf: &'a mut [u32],
    len: usize,
}

impl<'a> PushBuffer<'a> {
    /// An empty pushbuffer over `buf`.
    pub fn new(buf: &'a mut [u32]) -> Self {
        PushBuffer { buf, len: 0 }
    }

    /// The words written so far.
    pub fn words(&self) -> &[u32] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// Number of words written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets everything written.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    fn reserve(&mut self, n: usize) -> Result<&mut [u32], PushError> {
        let free = self.buf.len() - self.len;
        let end = self.len + n;
        match self.buf.get_mut(self.len..end) {
            Some(s) => {
                self.len = end;
                Ok(s)
            }
            None => Err(PushError::Full { needed: n, free }),
        }
    }

    fn check(subc: u8, method: u32) -> Result<(), PushError> {
        if subc > 7 {
            return Err(PushError::BadSubchannel(subc));
        }
        if method > MAX_METHOD || !method.is_multiple_of(4) {
            return Err(PushError::BadMethod(method));
        }
        Ok(())
    }

    fn method(&mut self, op: SecOp, subc: u8, method: u32, data: &[u32]) -> Result<(), PushError> {
        Self::check(subc, method)?;
        if data.is_empty() || data.len() > MAX_METHOD_COUNT as usize {
            return Err(PushError::BadCount(data.len()));
        }
        let hdr = Header {
            op,
            subchannel: subc,
            method,
            count: data.len() as u32,
        }
        .encode();
        let dst = self.reserve(1 + data.len())?;
        if let Some((h, rest)) = dst.split_first_mut() {
            *h = hdr;
            rest.copy_from_slice(data);
        }
        Ok(())
    }

    /// An incrementing method: `data[i]` goes to `method + 4 * i`.
    pub fn inc(&mut self, subc: u8, method: u32, data: &[u32]) -> Result<(), PushError> {
        self.method(SecOp::IncMethod, subc, method, data)
    }

    /// A non-incrementing method: every word of `data` goes to `method`.
    pub fn non_inc(&mut self, subc: u8, method: u32, data: &[u32]) -> Result<(), PushError> {
        self.method(SecOp::NonIncMethod, subc, method, data)
    }

    /// An increment-once method: `data[0]` to `method`, the rest to `method + 4`.
    pub fn one_inc(&mut self, subc: u8, method: u32, data: &[u32]) -> Result<(), PushError> {
        self.method(SecOp::OneInc, subc, method, data)
    }

    /// An immediate-data method: `value` (13 bits) is carried in the header.
    pub fn immd(&mut self, subc: u8, method: u32, value: u32) -> Result<(), PushError> {
        Self::check(subc, method)?;
        if value > MAX_IMMEDIATE {
            return Err(PushError::ImmediateTooLarge(value));
        }
        let hdr = Header {
            op: SecOp::ImmdDataMethod,
            subchannel: subc,
            method,
            count: value,
        }
        .encode();
        let dst = self.reserve(1)?;
        if let Some(h) = dst.first_mut() {
            *h = hdr;
        }
        Ok(())
    }

    /// Writes `data` as one method, immediate if it fits 13 bits.
    pub fn set(&mut self, subc: u8, method: u32, value: u32) -> Result<(), PushError> {
        if value <= MAX_IMMEDIATE {
            self.immd(subc, method, value)
        } else {
            self.inc(subc, method, &[value])
        }
    }

    // ------------------------------------------------------------------------------------------
    // Host methods.

    /// `SET_OBJECT(class)` on `subc`: binds an engine object (by class id) to the subchannel.
    pub fn set_object(&mut self, subc: u8, class: u32) -> Result<(), PushError> {
        self.inc(subc, host::SET_OBJECT, &[class & 0xffff])
    }

    /// A 64-bit semaphore release through the host class: `SEM_ADDR_LO..SEM_EXECUTE` with
    /// `OPERATION_RELEASE`, `PAYLOAD_SIZE_64BIT`, optionally `RELEASE_WFI` (wait for the engine
    /// to idle first) and `RELEASE_TIMESTAMP` (GPU time at `addr + 8`). `addr` must be 8-byte
    /// aligned (16 with a timestamp).
    pub fn host_release64(
        &mut self,
        addr: u64,
        payload: u64,
        wfi: bool,
        timestamp: bool,
    ) -> Result<(), PushError> {
        use host::sem_execute::*;
        let mut exec = OPERATION_RELEASE | PAYLOAD_SIZE_64BIT;
        if wfi {
            exec |= RELEASE_WFI_EN;
        }
        if timestamp {
            exec |= RELEASE_TIMESTAMP_EN;
        }
        self.host_semaphore(addr, payload, exec)
    }

    /// A 64-bit wait through the host class: `OPERATION_ACQ_CIRC_GEQ` (the semaphore reaches
    /// `payload`, with wrap-around), `ACQUIRE_SWITCH_TSG` so other channels of the group run
    /// meanwhile.
    pub fn host_acquire64_geq(&mut self, addr: u64, payload: u64) -> Result<(), PushError> {
        use host::sem_execute::*;
        self.host_semaphore(
            addr,
            payload,
            OPERATION_ACQ_CIRC_GEQ | PAYLOAD_SIZE_64BIT | ACQUIRE_SWITCH_TSG_EN,
        )
    }

    /// `SEM_ADDR_LO..SEM_EXECUTE` with an explicit `SEM_EXECUTE` value.
    pub fn host_semaphore(&mut self, addr: u64, payload: u64, exec: u32) -> Result<(), PushError> {
        // SEM_ADDR_HI OFFSET is 24:0 (C86F): 57-bit addresses.
        if addr >> 57 != 0 || !addr.is_multiple_of(4) {
            return Err(PushError::AddressTooLarge(addr));
        }
        self.inc(
            SUBC_HOST,
            host::SEM_ADDR_LO,
            &[
                addr as u32,
                (addr >> 32) as u32,
                payload as u32,
                (payload >> 32) as u32,
                exec,
            ],
        )
    }

    /// `WFI` with scope all.
    pub fn wfi(&mut self) -> Result<(), PushError> {
        self.immd(SUBC_HOST, host::WFI, host::WFI_SCOPE_ALL)
    }

    /// `NON_STALL_INTERRUPT(0)`: wakes interrupt waiters (UVM emits it after every release).
    pub fn non_stall_interrupt(&mut self) -> Result<(), PushError> {
        self.inc(SUBC_HOST, host::NON_STALL_INTERRUPT, &[0])
    }

    // ------------------------------------------------------------------------------------------
    // Copy engine.

    /// A pitch copy of `len` bytes (one line, virtual addresses) on the copy subchannel. `len`
    /// must fit 32 bits; callers chunk larger copies.
    pub fn ce_copy(&mut self, src: u64, dst: u64, len: u32) -> Result<(), PushError> {
        use copy::launch_dma::*;
        for a in [src, dst] {
            if a >> 57 != 0 {
                return Err(PushError::AddressTooLarge(a));
            }
        }
        self.inc(
            SUBC_COPY,
            copy::OFFSET_IN_UPPER,
            &[
                (src >> 32) as u32,
                src as u32,
                (dst >> 32) as u32,
                dst as u32,
            ],
        )?;
        self.inc(SUBC_COPY, copy::LINE_LENGTH_IN, &[len])?;
        self.inc(
            SUBC_COPY,
            copy::LAUNCH_DMA,
            &[DATA_TRANSFER_TYPE_NON_PIPELINED
                | FLUSH_ENABLE
                | SRC_MEMORY_LAYOUT_PITCH
                | DST_MEMORY_LAYOUT_PITCH],
        )
    }

    /// [`PushBuffer::ce_release64`], or on a copy class without 64-bit semaphore payloads
    /// (`wide` false: TURING_DMA_COPY_A, whose `clc5b5.h` has no `SET_SEMAPHORE_PAYLOAD_UPPER`
    /// and no `LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE`) a 32-bit release: `SET_SEMAPHORE_A`, `_B`,
    /// `_PAYLOAD`, then `LAUNCH_DMA`; a payload above `u32::MAX` is refused there
    /// ([`PushError::PayloadTooLarge`]).
    pub fn ce_release_on(
        &mut self,
        addr: u64,
        payload: u64,
        timestamp: bool,
        wide: bool,
    ) -> Result<(), PushError> {
        use copy::launch_dma::*;
        if wide {
            return self.ce_release64(addr, payload, timestamp);
        }
        if addr >> 57 != 0 || !addr.is_multiple_of(8) {
            return Err(PushError::AddressTooLarge(addr));
        }
        let payload = u32::try_from(payload).map_err(|_| PushError::PayloadTooLarge(payload))?;
        self.inc(
            SUBC_COPY,
            copy::SET_SEMAPHORE_A,
            &[(addr >> 32) as u32, addr as u32, payload],
        )?;
        let sem = if timestamp {
            SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE
        } else {
            SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE
        };
        self.inc(
            SUBC_COPY,
            copy::LAUNCH_DMA,
            &[DATA_TRANSFER_TYPE_NONE | FLUSH_ENABLE | (sem << SEMAPHORE_TYPE_SHIFT)],
        )
    }

    /// A copy-engine semaphore release (after all earlier copies, flushed): 64-bit payload at
    /// `addr`, plus the GPU time at `addr + 8` when `timestamp` is set (four-word semaphore).
    pub fn ce_release64(
        &mut self,
        addr: u64,
        payload: u64,
        timestamp: bool,
    ) -> Result<(), PushError> {
        use copy::launch_dma::*;
        if addr >> 57 != 0 || !addr.is_multiple_of(8) {
            return Err(PushError::AddressTooLarge(addr));
        }
        self.inc(
            SUBC_COPY,
            copy::SET_SEMAPHORE_A,
            &[
                (addr >> 32) as u32,
                addr as u32,
                payload as u32,
                (payload >> 32) as u32,
            ],
        )?;
        let sem = if timestamp {
            SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE
        } else {
            SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE
        };
        self.inc(
            SUBC_COPY,
            copy::LAUNCH_DMA,
            &[DATA_TRANSFER_TYPE_NONE
                | FLUSH_ENABLE
                | (sem << SEMAPHORE_TYPE_SHIFT)
                | SEMAPHORE_PAYLOAD_SIZE_TWO_WORD],
        )
    }

    // ------------------------------------------------------------------------------------------
    // Compute.

    /// Launches the QMD at `qmd_va` (256-byte aligned): `WAIT_FOR_IDLE`, `SEND_PCAS_A(qmd >> 8)`,
    /// then `SEND_SIGNALING_PCAS2_B(INVALIDATE_PREFETCH_COPY_SCHEDULE)` (the invalidate keeps a
    /// cached copy of an older QMD at the same address from being launched). The wait keeps
    /// stream order: without it the grids of one channel overlap (on the H200, 1000 `add1`s
    /// back to back over one buffer lost up to 11 increments per element, and two releases of
    /// the timeline landed out of order). It costs a round trip nothing, but back-to-back
    /// launches now run at the GPU's rate for grids in order (~1.05 µs per empty kernel on the
    /// H200, 0.38 before; ~0.85 with [`PushBuffer::compute_launch_prefetched`], which the
    /// device sends behind a grid that may still run).
    pub fn compute_launch(&mut self, qmd_va: u64) -> Result<(), PushError> {
        self.wait_then_pcas(
            qmd_va,
            compute::PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE,
        )
    }

    /// [`PushBuffer::compute_launch`] for a compute class with or without
    /// `SEND_SIGNALING_PCAS2_B` ([`crate::chip::ChipInfo::has_pcas2`]): without it (Turing),
    /// `WAIT_FOR_IDLE`, `SEND_PCAS_A(qmd >> 8)`, `SEND_SIGNALING_PCAS_B(INVALIDATE | SCHEDULE)`,
    /// what Mesa NVK sends on Volta and Turing (`nvk_cmd_dispatch.c`: `SEND_SIGNALING_PCAS_B`
    /// with `.invalidate = TRUE, .schedule = TRUE`).
    pub fn compute_launch_on(&mut self, qmd_va: u64, pcas2: bool) -> Result<(), PushError> {
        if pcas2 {
            return self.compute_launch(qmd_va);
        }
        let shifted = Self::qmd_address(qmd_va)?;
        self.immd(SUBC_COMPUTE, compute::WAIT_FOR_IDLE, 0)?;
        self.inc(SUBC_COMPUTE, compute::SEND_PCAS_A, &[shifted])?;
        self.immd(
            SUBC_COMPUTE,
            compute::SEND_SIGNALING_PCAS_B,
            compute::PCAS_B_INVALIDATE | compute::PCAS_B_SCHEDULE,
        )
    }

    /// `WAIT_FOR_IDLE`, `SEND_PCAS_A(qmd_va >> 8)`, `SEND_SIGNALING_PCAS2_B(action)`.
    fn wait_then_pcas(&mut self, qmd_va: u64, action: u32) -> Result<(), PushError> {
        let shifted = Self::qmd_address(qmd_va)?;
        self.immd(SUBC_COMPUTE, compute::WAIT_FOR_IDLE, 0)?;
        self.inc(SUBC_COMPUTE, compute::SEND_PCAS_A, &[shifted])?;
        self.immd(SUBC_COMPUTE, compute::SEND_SIGNALING_PCAS2_B, action)
    }

    /// Launches the QMD at `qmd_va` behind a grid that may still be running, with its fetch
    /// overlapping that grid: [`PushBuffer::qmd_prefetch`], then
    /// [`PushBuffer::compute_launch_after_prefetch`]. On the H200 an empty kernel queued behind
    /// another took the GPU 0.85 µs instead of 1.06; behind an idle engine the two extra
    /// actions cost ~0.2 µs, so the device uses this form only when an earlier launch has not
    /// been seen complete (docs/performance.md, "QMDs prefetched early"). The QMD and what it
    /// prefetches (constant bank 0, written by the CPU with it) must be final before this is
    /// published: the grid runs the copy fetched here, not what memory holds at the wait's end.
    pub fn compute_launch_prefetched(&mut self, qmd_va: u64) -> Result<(), PushError> {
        self.qmd_prefetch(qmd_va)?;
        self.compute_launch_after_prefetch(qmd_va)
    }

    /// Fetches the QMD at `qmd_va` into the scheduler's cache without launching it:
    /// `SEND_PCAS_A` + `PCAS_ACTION` `INVALIDATE` (no older copy at this address survives: a
    /// prefetch that finds one keeps it), then `SEND_PCAS_A` + `PREFETCH`.
    pub fn qmd_prefetch(&mut self, qmd_va: u64) -> Result<(), PushError> {
        let shifted = Self::qmd_address(qmd_va)?;
        for action in [
            compute::PCAS_ACTION_INVALIDATE,
            compute::PCAS_ACTION_PREFETCH,
        ] {
            self.inc(SUBC_COMPUTE, compute::SEND_PCAS_A, &[shifted])?;
            self.immd(SUBC_COMPUTE, compute::SEND_SIGNALING_PCAS2_B, action)?;
        }
        Ok(())
    }

    /// Launches the QMD at `qmd_va` that [`PushBuffer::qmd_prefetch`] fetched earlier in the
    /// channel: `WAIT_FOR_IDLE` (stream order), `SEND_PCAS_A`, `PREFETCH_SCHEDULE` (the cached
    /// copy, fetched again if the cache lost it). The action is the last word written.
    pub fn compute_launch_after_prefetch(&mut self, qmd_va: u64) -> Result<(), PushError> {
        self.wait_then_pcas(qmd_va, compute::PCAS_ACTION_PREFETCH_SCHEDULE)
    }

    /// The word of a `SEND_SIGNALING_PCAS2_B` with `action` (immediate form), for rewriting
    /// the last word of [`PushBuffer::compute_launch_after_prefetch`] in place.
    pub fn pcas_action_word(action: u32) -> Result<u32, PushError> {
        Self::one_word(|pb| pb.immd(SUBC_COMPUTE, compute::SEND_SIGNALING_PCAS2_B, action))
    }

    /// The word `write` puts in a pushbuffer of one word (a method to rewrite in place).
    fn one_word(
        write: impl FnOnce(&mut PushBuffer<'_>) -> Result<(), PushError>,
    ) -> Result<u32, PushError> {
        let mut w = [0u32; 1];
        write(&mut PushBuffer::new(&mut w))?;
        Ok(w[0])
    }

    /// `qmd_va >> 8`, refused unless 256-byte aligned and below 2^40.
    fn qmd_address(qmd_va: u64) -> Result<u32, PushError> {
        if !qmd_va.is_multiple_of(256) || (qmd_va >> 8) >> 32 != 0 {
            return Err(PushError::AddressTooLarge(qmd_va));
        }
        Ok((qmd_va >> 8) as u32)
    }

    /// `INVALIDATE_SKED_CACHES`: QMDs scheduled after this (by a `SEND_PCAS` or by another
    /// QMD's completion) are fetched from memory, not from the scheduler's cache. Needed before
    /// a chain of QMDs that schedule each other at addresses that held other QMDs before: only
    /// the first is launched through a PCAS action that invalidates its own address.
    pub fn invalidate_sked_caches(&mut self) -> Result<(), PushError> {
        self.immd(SUBC_COMPUTE, compute::INVALIDATE_SKED_CACHES, 0)
    }

    /// A one-word `NO_OPERATION` where [`PushBuffer::invalidate_sked_caches`] may be needed
    /// later: a chain's head is written before it is known whether any launch will chain to
    /// it, and the invalidate cost two launches then a polled timeline ~0.4 µs on the H200.
    /// Returns the word's index in this pushbuffer; [`PushBuffer::sked_invalidate_word`] is
    /// what to write there once a launch chains.
    pub fn sked_invalidate_slot(&mut self) -> Result<usize, PushError> {
        let at = self.len();
        self.immd(SUBC_COMPUTE, compute::NO_OPERATION, 0)?;
        Ok(at)
    }

    /// The word of [`PushBuffer::invalidate_sked_caches`], to overwrite the
    /// [`PushBuffer::sked_invalidate_slot`] in place before the GPU reads it.
    pub fn sked_invalidate_word() -> Result<u32, PushError> {
        Self::one_word(|pb| pb.invalidate_sked_caches())
    }

    /// `INVALIDATE_SHADER_CACHES_NO_WFI` of instructions, global data and constants (after new
    /// code or constants were uploaded).
    pub fn invalidate_shader_caches(&mut self) -> Result<(), PushError> {
        self.set(
            SUBC_COMPUTE,
            compute::INVALIDATE_SHADER_CACHES_NO_WFI,
            compute::INVALIDATE_INSTRUCTION
                | compute::INVALIDATE_GLOBAL_DATA
                | compute::INVALIDATE_CONSTANT,
        )
    }

    /// Sets the shared- and local-memory windows (the generic-address ranges that map to shared
    /// and local memory; `SET_SHADER_{SHARED,LOCAL}_MEMORY_WINDOW_A/B`).
    pub fn set_memory_windows(&mut self, shared: u64, local: u64) -> Result<(), PushError> {
        self.inc(
            SUBC_COMPUTE,
            compute::SET_SHADER_SHARED_MEMORY_WINDOW_A,
            &[(shared >> 32) as u32, shared as u32],
        )?;
        self.inc(
            SUBC_COMPUTE,
            compute::SET_SHADER_LOCAL_MEMORY_WINDOW_A,
            &[(local >> 32) as u32, local as u32],
        )
    }

    /// Points the compute engine at the local-memory (stack) backing: `SET_SHADER_LOCAL_MEMORY_A/B`
    /// = `addr`, `NON_THROTTLED_A/B/C` = bytes per TPC and `max_sm_count`.
    pub fn set_local_memory(
        &mut self,
        addr: u64,
        bytes_per_tpc: u64,
        max_sm_count: u32,
    ) -> Result<(), PushError> {
        self.inc(
            SUBC_COMPUTE,
            compute::SET_SHADER_LOCAL_MEMORY_A,
            &[(addr >> 32) as u32, addr as u32],
        )?;
        self.inc(
            SUBC_COMPUTE,
            compute::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A,
            &[
                (bytes_per_tpc >> 32) as u32,
                bytes_per_tpc as u32,
                max_sm_count & 0x1ff,
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_encoding_matches_the_header_fields() {
        // tinygrad's incrementing header: (2 << 28) | (count << 16) | (subc << 13) | (mthd >> 2).
        let h = Header {
            op: SecOp::IncMethod,
            subchannel: 1,
            method: 0x2b4,
            count: 1,
        };
        assert_eq!(h.encode(), (2 << 28) | (1 << 16) | (1 << 13) | (0x2b4 >> 2));
        assert_eq!(Header::decode(h.encode()), h);
        for op in 0..8 {
            let h = Header {
                op: SecOp::from_bits(op),
                subchannel: 7,
                method: 0x3ffc,
                count: 0x1fff,
            };
            assert_eq!(Header::decode(h.encode()), h);
            assert_eq!(h.op.bits(), op);
        }
    }

    #[test]
    fn writer_emits_and_bounds() {
        let mut words = [0u32; 8];
        let mut pb = PushBuffer::new(&mut words);
        pb.inc(4, 0x400, &[1, 2, 3]).unwrap();
        pb.immd(0, 0x78, 1).unwrap();
        assert_eq!(pb.len(), 5);
        assert_eq!(
            pb.inc(1, 0x100, &[0; 3]),
            Err(PushError::Full { needed: 4, free: 3 })
        );
        // A failed write leaves what was there.
        assert_eq!(pb.len(), 5);
        assert_eq!(
            pb.immd(0, 0x78, 0x2000),
            Err(PushError::ImmediateTooLarge(0x2000))
        );
        assert_eq!(pb.inc(8, 0x0, &[0]), Err(PushError::BadSubchannel(8)));
        assert_eq!(pb.inc(0, 0x3, &[0]), Err(PushError::BadMethod(3)));
        assert_eq!(pb.inc(0, 0x4000, &[0]), Err(PushError::BadMethod(0x4000)));
        assert_eq!(pb.inc(0, 0x0, &[]), Err(PushError::BadCount(0)));
        let w = pb.words().to_vec_for_test();
        assert_eq!(Header::decode(w[0]).data_words(), 3);
        assert_eq!(&w[1..4], &[1, 2, 3]);
        let h = Header::decode(w[4]);
        assert_eq!((h.op, h.method, h.count), (SecOp::ImmdDataMethod, 0x78, 1));
    }

    #[test]
    fn semaphore_and_launch_sequences_validate_addresses() {
        let mut words = [0u32; 64];
        let mut pb = PushBuffer::new(&mut words);
        assert!(pb.host_release64(0x1000, 5, true, true).is_ok());
        assert_eq!(
            pb.host_release64(1 << 57, 5, false, false),
            Err(PushError::AddressTooLarge(1 << 57))
        );
        assert!(pb.compute_launch(0x1_0000_0100).is_ok());
        assert!(pb.compute_launch(0x1_0000_0180).is_err());
        assert!(pb.compute_launch_prefetched(0x1_0000_0180).is_err());
        assert!(pb.compute_launch_prefetched(1 << 41).is_err());
        assert!(pb.qmd_prefetch(0x1_0000_0180).is_err());
        assert!(pb.compute_launch_after_prefetch(1 << 41).is_err());
        // The action word rewritten in place is the one the launch wrote last.
        let mut w = [0u32; 8];
        let mut p = PushBuffer::new(&mut w);
        p.compute_launch_after_prefetch(0x1_0000_0100).unwrap();
        let last = p.len() - 1;
        assert_eq!(
            PushBuffer::pcas_action_word(compute::PCAS_ACTION_PREFETCH_SCHEDULE),
            Ok(w[last])
        );
        assert!(pb.ce_release64(0x1004, 1, false).is_err());
        // Turing's copy class: 32-bit payloads only, no PAYLOAD_UPPER, no PAYLOAD_SIZE bit.
        assert_eq!(
            pb.ce_release_on(0x1000, 1 << 32, false, false),
            Err(PushError::PayloadTooLarge(1 << 32))
        );
        let mut w = [0u32; 16];
        let mut p = PushBuffer::new(&mut w);
        p.ce_release_on(0x10_0000_1000, 7, true, false).unwrap();
        let n = p.len();
        assert_eq!(n, 6, "SET_SEMAPHORE_A..PAYLOAD (1 + 3), LAUNCH_DMA (1 + 1)");
        assert_eq!(w[3], 7);
        assert_eq!(w[5] & copy::launch_dma::SEMAPHORE_PAYLOAD_SIZE_TWO_WORD, 0);
        // Turing's launch: SEND_SIGNALING_PCAS_B with INVALIDATE | SCHEDULE, no PCAS2.
        let mut w = [0u32; 8];
        let mut p = PushBuffer::new(&mut w);
        p.compute_launch_on(0x1_0000_0100, false).unwrap();
        assert!(p.compute_launch_on(0x1_0000_0180, false).is_err());
        let n = p.len();
        let mut v = [0u32; 8];
        let mut q = PushBuffer::new(&mut v);
        q.immd(SUBC_COMPUTE, compute::SEND_SIGNALING_PCAS_B, 3)
            .unwrap();
        assert_eq!(w[n - 1], v[0]);
        assert!(pb.ce_copy(0, 1 << 57, 4).is_err());
    }

    #[test]
    fn the_sked_invalidate_slot_is_a_no_operation_until_overwritten() {
        let mut w = [0u32; 4];
        let mut p = PushBuffer::new(&mut w);
        p.set(SUBC_COMPUTE, compute::SET_SHADER_SHARED_MEMORY_WINDOW_A, 0)
            .unwrap();
        let before = p.len();
        let at = p.sked_invalidate_slot().unwrap();
        assert_eq!(
            (at, p.len()),
            (before, before + 1),
            "one word, where it was written"
        );
        let nop = PushBuffer::one_word(|pb| pb.immd(SUBC_COMPUTE, compute::NO_OPERATION, 0));
        assert_eq!(Ok(w[at]), nop);
        let mut inv = [0u32; 1];
        PushBuffer::new(&mut inv).invalidate_sked_caches().unwrap();
        assert_eq!(PushBuffer::sked_invalidate_word(), Ok(inv[0]));
        assert_ne!(Ok(inv[0]), nop);
    }

    trait ToVecForTest {
        fn to_vec_for_test(&self) -> [u32; 8];
    }
    impl ToVecForTest for [u32] {
        fn to_vec_for_test(&self) -> [u32; 8] {
            let mut a = [0; 8];
            a[..self.len()].copy_from_slice(self);
            a
        }
    }
}
