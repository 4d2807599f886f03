//! Subcommands, one module each.

pub mod fw;
pub mod info;
pub mod list;
