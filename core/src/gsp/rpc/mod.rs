//! RPCs to GSP-RM over the message queues.
//!
//! An RPC message is `rpc_message_header_v03_00` (32 bytes) plus a function-specific payload.
//! Messages longer than [`GSP_MSG_QUEUE_RPC_SIZE_MAX`](crate::gsp::msgq::GSP_MSG_QUEUE_RPC_SIZE_MAX) are split: the first record carries the
//! header and as much payload as fits, then `NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD` (71)
//! records carry the rest (`_issueRpcLarge`, `rpc.c`); replies to large bidirectional RPCs come
//! back split the same way and are reassembled straight into the caller's buffers.
//!
//! Replies are matched by function, as the kernel RM (`_kgspRpcDrainOneEvent`, kernel_gsp.c)
//! and tinygrad match them: whether GSP-RM echoes the header's `sequence` is not public (RM
//! never sets it for GSP). nvbare still numbers its RPCs, and uses an echo when there is one:
//! a reply whose sequence is that of an RPC that already ended (it timed out, or this is a
//! duplicate) is discarded and counted, and a reply with this RPC's sequence but another
//! function is a [`GspError::ReplyMismatch`](crate::gsp::GspError::ReplyMismatch). A reply with sequence 0 (no echo) or any other
//! value is taken by its function alone.
//!
//! Events that arrive while waiting are dispatched ([`super::events`]), never dropped.
//!
//! [`GspRpc`] is the transport with the typed RPCs boot needs; [`GspRm`] adds a client, a
//! handle counter and object tracking and implements [`Rm`](crate::rm::Rm).
//!
//! The code is in three parts, all re-exported here: `wire` (the message format: headers,
//! function numbers, payload structs, status decoding), `transport` ([`GspRpc`]: sending,
//! continuation records, replies and the events handled while waiting) and `client` (the
//! typed RPCs and [`GspRm`]).

mod client;
mod trace;
mod transport;
mod wire;

pub use client::*;
pub use transport::*;
pub use wire::*;

#[cfg(test)]
mod tests;
