//! nvbare-core: the `#![no_std]` heart of nvbare.
//!
//! Nothing in this crate knows about Linux. The embedder supplies hardware access through the
//! traits in [`hal`]; everything above is plain Rust over those traits:
//!
//! * [`regs`]: typed registers with NVIDIA's names, built on `bitfield-struct`.
//! * [`chip`]: chip identification from `NV_PMC_BOOT_0`/`NV_PMC_BOOT_42` and the per-chip table.
//! * [`rm`]: the Resource Manager API as data and the [`rm::Rm`] trait.
//! * [`channel`]: GPFIFO, pushbuffers, semaphores, the doorbell, QMDs and launch helpers.
//! * `kernel` (feature `alloc`): a kernel's launch metadata, whatever file it came from.
//! * `device` (feature `device`, needs a heap): the device layer over a `Backend`.
//! * [`falcon`]: falcon and RISC-V engine control (GSP, SEC2): reset, IMEM/DMEM loads, HS boot.
//! * [`gsp`]: the GSP-RM message queue and RPCs, and [`gsp::boot`], the bare-metal boot
//!   (`docs/boot.md`).
//!
//! The crate needs no heap. The optional `alloc` feature only adds conveniences; the `device`
//! feature (which implies `alloc`) adds the device layer.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod channel;
pub mod chip;
#[cfg(feature = "device")]
pub mod device;
pub mod falcon;
pub mod gsp;
pub mod hal;
#[cfg(feature = "alloc")]
pub mod kernel;
pub mod mm;
pub mod regs;
pub mod rm;

pub use hal::{Clock, DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig, PollError, poll_until};
