//! Channels: what the CPU writes for the GPU to execute.
//!
//! * [`gpfifo`]: the GPFIFO ring of pushbuffer pointers, USERD (`GPGet`/`GPPut`), submission
//!   with back-pressure, and the doorbell.
//! * [`pushbuf`]: method headers and a bounded pushbuffer writer with the sequences the device
//!   layer emits (object binding, 64-bit semaphores, copies, launches).
//! * [`methods`]: method offsets of the host, compute and copy classes.
//! * [`decode`]: pushbuffer words back into named methods.
//!
//! Everything here is allocation-free and independent of the RM version.

pub mod decode;
pub mod gpfifo;
pub mod methods;
pub mod pushbuf;
