//! Subcommands, one module each.

pub mod decode;
pub mod bind;
pub mod info;
pub mod list;
