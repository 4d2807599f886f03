//! Subcommands, one module each.

pub mod bench;
pub mod bench_gpu;
pub mod bench_p2p;
pub mod bench_rpc;
pub mod bind;
pub mod boot;
pub mod cubin;
pub mod cuda;
pub mod decode;
pub mod decode_pushbuf;
pub mod demo;
pub mod device_info;
pub mod events;
pub mod fw;
pub mod fw_json;
pub mod info;
pub mod info_all;
pub mod info_json;
mod json;
pub mod list;
pub mod readiness;
pub mod rm;
pub mod run;
pub mod run_args;
pub mod serve;
pub mod stress;
