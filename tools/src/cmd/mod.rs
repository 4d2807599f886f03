//! Subcommands, one module each.

pub mod bench;
pub mod bench_gpu;
pub mod bench_p2p;
pub mod bench_rpc;
pub mod bind;
pub mod boot;
pub mod decode;
pub mod decode_pushbuf;
pub mod demo;
pub mod device_info;
pub mod fw;
pub mod info;
pub mod info_all;
pub mod info_json;
mod json;
pub mod list;
pub mod readiness;
pub mod run;
pub mod serve;
pub mod stress;
