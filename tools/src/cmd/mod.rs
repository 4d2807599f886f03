//! Subcommands, one module each.

pub mod decode;
pub mod info;
pub mod list;
