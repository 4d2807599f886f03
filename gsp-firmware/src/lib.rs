//! Parsers for the files nvbare loads: GSP-RM firmware, booter/bootloader/FMC images, VBIOS and
//! CUDA cubins. `no_std` + `alloc`; every parser takes bytes and returns typed errors.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod cubin;
