//! Talking to GSP-RM: the shared message queues, typed RPCs, events and the firmware's logs.
//!
//! * [`msgq`]: the command and status rings in DMA memory (`msgqTxHeader`, 4 KiB elements,
//!   XOR checksums, sequence numbers, wraparound, back-pressure, the doorbell).
//! * [`rpc`]: RPC framing (`rpc_message_header_v03_00`), continuation records, reply matching,
//!   the typed RPCs boot needs, and [`rpc::GspRm`], which implements [`crate::rm::Rm`].
//! * [`events`]: what GSP-RM sends unasked (RC, MMU faults, Xid logs, the CPU sequencer...).
//! * [`log`]: decoding the LIBOS log buffers (LOGINIT, LOGINTR, LOGRM).
//! * [`registry`]: the `PACKED_REGISTRY_TABLE` for SET_REGISTRY.
//! * [`sysinfo`]: `GspSystemInfo` and `GspStaticConfigInfo` (r570 layouts).
//!
//! Every byte GSP writes is untrusted: parsers check bounds and report [`GspError`], never
//! panic. See `docs/gsp-rpc.md` for the protocol and the recovery policies.

use core::fmt;
use core::time::Duration;

use crate::hal::{HalError, PollError};
use crate::rm::RmStatus;

pub mod boot;
pub mod client;
pub mod events;
pub mod log;
pub mod msgq;
pub mod registry;
pub mod rpc;
pub mod sysinfo;

#[cfg(test)]
pub(crate) mod testutil;

/// Why talking to GSP-RM failed.
///
/// Queue-level corruption (bad checksum, length, element count) is reported once for the
/// message concerned, which is then skipped so the queue stays usable; see the
/// "Recovery" section of `docs/gsp-rpc.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GspError {
    /// Reading or writing the shared DMA memory failed.
    Hal(HalError),
    /// A wait timed out (no queue space, no reply, no event).
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The RPC function or event awaited, when there is one.
        function: u32,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// A wait ended while GSP-RM was still filling the status queue as fast as it was read:
    /// every poll found a full ring's worth of messages, none of them the one awaited.
    Flood {
        /// What was awaited.
        what: &'static str,
        /// The RPC function or event awaited.
        function: u32,
        /// Messages received during the wait.
        records: u64,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// The command queue stayed full: GSP-RM is not consuming commands.
    QueueFull {
        /// Elements the message needs.
        needed: u32,
        /// Elements free when the wait gave up.
        free: u32,
    },
    /// A message does not fit the queue protocol's limits.
    MessageTooLarge {
        /// Bytes of the message.
        len: usize,
        /// The largest that can be sent.
        max: usize,
    },
    /// The shared-memory layout or the buffer given for it is unusable.
    BadLayout(&'static str),
    /// GSP-RM wrote a status-queue header that does not match the agreed layout.
    LinkFailed {
        /// The header field that is wrong.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// A queue pointer written by GSP-RM is out of range.
    CorruptPointer {
        /// Which pointer.
        field: &'static str,
        /// Its value.
        value: u32,
        /// The ring size it must stay below.
        limit: u32,
    },
    /// A status-queue element announces an impossible element count (message skipped).
    BadElementCount {
        /// The element count read.
        elem_count: u32,
        /// Elements the GSP had published.
        available: u32,
    },
    /// A status-queue message has an impossible RPC length (message skipped).
    BadLength {
        /// `rpc_message_header_v.length`.
        length: u32,
        /// Elements the message occupies.
        elem_count: u32,
    },
    /// A status-queue message failed its XOR checksum (message skipped).
    BadChecksum {
        /// The element's sequence number.
        seq: u32,
        /// The folded XOR over the message (0 when intact).
        residue: u32,
    },
    /// A status-queue message skipped ahead of the expected sequence number: messages were
    /// lost. The queue resynchronises on the new number.
    SequenceGap {
        /// The sequence number expected.
        expected: u32,
        /// The one found.
        got: u32,
    },
    /// A reply carried our RPC sequence number but a different function.
    ReplyMismatch {
        /// The function sent.
        expected_function: u32,
        /// The function in the reply.
        function: u32,
        /// The RPC sequence number.
        sequence: u32,
    },
    /// A reply was shorter than the request it answers.
    ReplyTooShort {
        /// The function.
        function: u32,
        /// Bytes expected after the RPC header.
        expected: usize,
        /// Bytes received.
        got: usize,
    },
    /// GSP-RM answered with an RPC-level failure (`rpc_result` in the VMIOP/RPC ranges).
    RpcResult {
        /// The function.
        function: u32,
        /// `rpc_result`.
        result: u32,
    },
    /// GSP-RM ran the call and returned this `NV_STATUS`.
    Status {
        /// The function.
        function: u32,
        /// The status.
        status: RmStatus,
    },
    /// A payload from GSP-RM is too short for its layout.
    Malformed {
        /// The function or event.
        function: u32,
        /// Payload bytes received.
        len: usize,
        /// Bytes its layout needs.
        need: usize,
    },
    /// An event handler refused an event (e.g. a CPU-sequencer command failed).
    Handler(&'static str),
    /// [`rpc::GspRm`] tracks at most [`rpc::MAX_TRACKED_OBJECTS`] live objects.
    TooManyObjects,
    /// The handle counter is exhausted.
    HandlesExhausted,
}

impl From<HalError> for GspError {
    fn from(e: HalError) -> Self {
        GspError::Hal(e)
    }
}

impl From<PollError> for GspError {
    fn from(e: PollError) -> Self {
        GspError::Timeout {
            what: e.what,
            function: 0,
            waited: e.waited,
        }
    }
}

impl fmt::Display for GspError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GspError::Hal(e) => write!(f, "GSP shared memory: {e}"),
            GspError::Timeout {
                what,
                function,
                waited,
            } => {
                write!(f, "timed out after {waited:?} waiting for {what}")?;
                if function != 0 {
                    write!(f, " ({})", rpc::FunctionName(function))?;
                }
                write!(
                    f,
                    "; GSP-RM may have crashed: read its logs (LOGRM) and reset the GPU"
                )
            }
            GspError::Flood {
                what,
                function,
                records,
                waited,
            } => {
                write!(
                    f,
                    "GSP-RM sent {records} messages in {waited:?} without {what}"
                )?;
                if function != 0 {
                    write!(f, " ({})", rpc::FunctionName(function))?;
                }
                write!(
                    f,
                    ": it is flooding the status queue (an event storm); read its logs (LOGRM) \
                     and reset the GPU"
                )
            }
            GspError::QueueFull { needed, free } => write!(
                f,
                "GSP command queue full ({free} of {needed} elements free): GSP-RM stopped \
                 consuming commands; read its logs and reset the GPU"
            ),
            GspError::MessageTooLarge { len, max } => {
                write!(f, "GSP message of {len} bytes exceeds the {max}-byte limit")
            }
            GspError::BadLayout(what) => write!(f, "GSP shared memory layout: {what}"),
            GspError::LinkFailed { field, value } => write!(
                f,
                "GSP status queue header field {field} = {value:#x} does not match the \
                 layout the driver gave GSP-RM (firmware version mismatch or corrupt boot)"
            ),
            GspError::CorruptPointer {
                field,
                value,
                limit,
            } => write!(
                f,
                "GSP {field} = {value} is outside its {limit}-element ring (shared memory \
                 corrupted; reset the GPU)"
            ),
            GspError::BadElementCount {
                elem_count,
                available,
            } => write!(
                f,
                "GSP message announces {elem_count} elements ({available} published); skipped"
            ),
            GspError::BadLength { length, elem_count } => write!(
                f,
                "GSP message length {length} does not fit its {elem_count} elements; skipped"
            ),
            GspError::BadChecksum { seq, residue } => write!(
                f,
                "GSP message {seq} failed its checksum (residue {residue:#x}); skipped"
            ),
            GspError::SequenceGap { expected, got } => write!(
                f,
                "GSP message sequence jumped from {expected} to {got}: messages were lost"
            ),
            GspError::ReplyMismatch {
                expected_function,
                function,
                sequence,
            } => write!(
                f,
                "reply to RPC {sequence} is {} but {} was sent",
                rpc::FunctionName(function),
                rpc::FunctionName(expected_function)
            ),
            GspError::ReplyTooShort {
                function,
                expected,
                got,
            } => write!(
                f,
                "reply to {} has {got} bytes, {expected} expected",
                rpc::FunctionName(function)
            ),
            GspError::RpcResult { function, result } => {
                write!(f, "{} failed: ", rpc::FunctionName(function))?;
                match rpc::rpc_result_name(result) {
                    Some(n) => write!(f, "{n} ({result:#x})"),
                    None => write!(f, "rpc_result {result:#x}"),
                }
            }
            GspError::Status { function, status } => {
                write!(f, "{} failed: {status}", rpc::FunctionName(function))
            }
            GspError::Malformed {
                function,
                len,
                need,
            } => write!(
                f,
                "{} payload has {len} bytes, its layout needs {need}",
                rpc::FunctionName(function)
            ),
            GspError::Handler(what) => write!(f, "GSP event handler failed: {what}"),
            GspError::TooManyObjects => write!(
                f,
                "too many live RM objects (limit {}); free some first",
                rpc::MAX_TRACKED_OBJECTS
            ),
            GspError::HandlesExhausted => write!(f, "RM handle space exhausted"),
        }
    }
}

impl core::error::Error for GspError {}
