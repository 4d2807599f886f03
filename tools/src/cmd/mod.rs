//! Subcommands, one module each.

pub mod bench;
pub mod bench_rpc;
pub mod info;
pub mod list;
