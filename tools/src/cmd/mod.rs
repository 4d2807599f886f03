//! Subcommands, one module each.

pub mod info;
pub mod list;
pub mod stress;
