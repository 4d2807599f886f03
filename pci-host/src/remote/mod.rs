//! tinygrad's remote PCI protocol: a GPU's BARs, config space and DMA memory over TCP
//! (`REMOTE=host:port` in tinygrad 0.14; its reference server is `extra/remote/serve.py`).
//!
//! * [`wire`]: the request and response formats.
//! * [`client`]: a remote GPU as nvbare's `hal` traits ([`client::RemoteGpu`], what
//!   `--device remote:HOST:PORT[:N]` opens).
//! * [`server`]: devices served to such clients, every request checked and bounded
//!   ([`server::ServedDevice`]; `nvbare serve` puts simulated and VFIO GPUs behind it).
//!
//! The protocol has no authentication: whoever reaches the port drives the GPU.

pub mod client;
pub mod server;
pub mod wire;
