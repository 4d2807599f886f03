//! NVIDIA GPUs from Rust, with or without the nvidia kernel module.
//!
//! ```no_run
//! # fn main() -> nvbare::Result<()> {
//! let gpu = nvbare::open("sim:gh100")?; // or "nvidia:0", "vfio:0000:01:00.0", "remote:HOST:PORT"
//! let stream = gpu.default_stream();
//! let data: Vec<u32> = (0..1024).collect();
//! let buf = stream.htod_copy(&data)?; // nvbare::DeviceBuffer<u32>
//! let cubin: &[u8] = &[]; // a cubin built by nvcc for this GPU
//! let module = gpu.load_cubin(cubin)?;
//! let add1 = module.function("add1")?;
//! let n = data.len() as u32;
//! stream
//!     .launch_builder(&add1)
//!     .arg(&buf)
//!     .arg(&n)
//!     .launch(nvbare::LaunchConfig::for_num_elems(n))?;
//! let out: Vec<u32> = stream.dtoh_copy(&buf)?;
//! # let _ = out;
//! # Ok(())
//! # }
//! ```
//!
//! [`open`] does what the `nvbare` CLI does: finds the GSP firmware (fetching and verifying
//! it unless told not to), boots GSP-RM where the device needs it, installs the runtime
//! kernels and starts the thread automatic deferral needs. Every handle ([`Gpu`], [`Stream`],
//! [`DeviceBuffer`], [`Module`], [`Function`], [`Event`]) is reference-counted and `Send +
//! Sync`: it can live in a struct and move between threads; the device stays open while any
//! of them exists, unless [`Gpu::close`] closes it first (handles then fail with
//! [`Error::Closed`]).
//!
//! | device string | what drives the GPU |
//! |---|---|
//! | `sim:CHIP` (`ad102`, `gh100`, `gb202`) | nvbare bare metal, on the built-in simulated GPU |
//! | `vfio:DOMAIN:BUS:DEV.FN` | nvbare bare metal, a GPU bound to vfio-pci (docs/vfio.md) |
//! | `remote:HOST[:PORT[:N]]` | nvbare bare metal over tinygrad's remote PCI protocol (docs/remote.md) |
//! | `nvidia:N` | the nvidia kernel driver (feature `nvidia`, docs/kernel-adapter.md) |
//!
//! [`backend`] is the opening code path itself (device strings, firmware, the bare-metal
//! platforms), public for frontends such as the `nvbare` CLI (crate `nvbare-tools`, which
//! builds on this one). Lower levels: `nvbare_core::device` (the device layer, generic over its backend) and
//! `nvbare_core::device::baremetal` (GSP boot and RPC as the kernel RM does them).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
mod buffer;
mod dev;
mod error;
mod gpu;
mod graph;
mod launch;
mod module;
mod stream;

pub use buffer::{DeviceBuffer, DeviceSlice};
pub use error::{Error, Result};
pub use gpu::{Gpu, Options, open, open_with};
pub use graph::{Graph, GraphLaunch};
pub use launch::{ByValue, KernelArg, LaunchBuilder};
pub use module::{Function, Module};
pub use stream::{Event, Stream};

pub use nvbare_core::device::{
    Arg, DeviceInfo, DeviceRepr, EVENT_STAMP_SLOTS, GlobalInfo, LaunchConfig, Location, VaWindow,
    VaWindowError,
};

/// The cubin of demo kernels nvbare's simulator ships for shader model `sm` (80, 89, 90, 100,
/// 120): `empty()`, `add1(u32*, u32)`, `vector_add(f32*, f32*, f32*, u32)`,
/// `oob_write(u32*)`, `spin_forever()`. For trying the library without a CUDA compiler;
/// `Gpu::info().sm` says which one a device needs.
pub fn demo_cubin(sm: u32) -> Option<&'static [u8]> {
    backend::open::demo_cubin(sm).map(|(_, bytes)| bytes)
}
