//! Channels and the work submitted through them.
//!
//! * [`gpfifo`]: the GPFIFO ring of pushbuffer pointers, USERD (`GPGet`/`GPPut`), submission
//!   with back-pressure, and the doorbell.
//! * [`pushbuf`]: method headers and a bounded pushbuffer writer with the sequences the device
//!   layer emits (object binding, 64-bit semaphores, copies, launches).
//! * [`methods`]: method offsets of the host, compute and copy classes.
//! * [`decode`]: pushbuffer words back into named methods.
//! * [`qmd`]: queue meta-data (QMD) layouts V03_00 / V04_00 / V05_00 and [`qmd::LaunchDesc`].
//! * [`launch`]: pure launch helpers: limits, constant bank 0 layout, shared and local memory
//!   sizing.
//!
//! Everything here is allocation-free and independent of the RM version.

pub mod decode;
pub mod gpfifo;
pub mod launch;
pub mod methods;
pub mod pushbuf;
pub mod qmd;
