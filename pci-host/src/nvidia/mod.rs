//! The kernel-driver adapter: nvbare's upper layers over nvidia.ko's ioctls (r580).
//!
//! tinygrad's NV runtime cannot drive an H200 through the kernel driver (its class lists have
//! no Hopper compute or copy class); this adapter picks classes from the GPU's own class list
//! and speaks the r580 struct layouts, which it checks before the first RM call.
//!
//! * [`driver`]: device nodes, the version check, the card list, per-GPU nodes.
//! * [`rm`]: [`KernelRm`], the [`nvbare_core::rm::Rm`] trait over `NV_ESC_RM_ALLOC` /
//!   `NV_ESC_RM_CONTROL` / `NV_ESC_RM_FREE`.
//! * [`memory`]: RM memory objects, CPU mappings (volatile access only), GPU DMA mappings.
//! * [`uvm`]: `/dev/nvidia-uvm` (GPU VA spaces, channels, external ranges).
//! * [`usermode`]: the doorbell page as an [`nvbare_core::hal::Mmio`] window.
//! * [`vaspace`]: [`UvmVaSpace`], a GPU VA space run by UVM, with memory mapped at chosen VAs.
//! * [`gpu`]: [`KernelGpu`], one GPU with its device and subdevice, and `nvbare info` queries.
//! * [`backend`]: [`KernelBackend`], the device layer's `Backend` over all of the above.
//! * [`peer`]: RM's P2P capabilities of two GPUs (link type, peer ids) for peer access.
//! * [`abi`], [`uvm_abi`], [`params`]: the ABI structs, each with layout tests.
//!
//! All `unsafe` code of the adapter (ioctl, mmap) is in this module tree. `docs/kernel-adapter.md`
//! describes the design and what has been verified on hardware.

pub mod abi;
pub mod backend;
pub mod driver;
pub mod error;
pub mod gpu;
mod ioctl;
pub mod memory;
pub mod params;
pub mod peer;
pub mod rm;
pub mod usermode;
pub mod uvm;
pub mod uvm_abi;
pub mod vaspace;

pub use backend::{KMOD_VA_WINDOW, KernelBackend, KernelMemory, PeerGroup, VaMode};
pub use driver::{CardInfo, DriverVersion, GpuNode, NvidiaDriver, NvidiaPaths};
pub use error::{KmodError, SUPPORTED_BRANCH};
pub use gpu::{GrInfo, KernelGpu, SelectedClasses, VramInfo, select_classes};
pub use memory::{
    CpuMapping, DmaMapping, GpuPageSize, HostMemory, MemoryLocation, MemoryRequest, VaReservation,
};
pub use rm::{GpuIds, KernelRm, RmDatabaseInfo};
pub use usermode::UsermodeWindow;
pub use uvm::{GpuUuid, Uvm};
pub use vaspace::UvmVaSpace;
