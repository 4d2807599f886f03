//! Subcommands, one module each.

pub mod decode;
pub mod decode_pushbuf;
pub mod demo;
pub mod device_info;
pub mod info;
pub mod list;
pub mod run;
