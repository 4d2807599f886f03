//! Subcommands, one module each.

pub mod bind;
pub mod info;
pub mod list;
