//! Subcommands, one module each.

pub mod bench;
pub mod info;
pub mod list;
