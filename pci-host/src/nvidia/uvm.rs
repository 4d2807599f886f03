//! [`Uvm`]: the `/dev/nvidia-uvm` calls that put RM objects into a GPU virtual address space
//! the way CUDA does: register the GPU, its RM VA space and channels with UVM, then map memory
//! objects at chosen VAs as UVM "external ranges".
//!
//! Order (observed to work on an H200 with 580.159.04, rm-abi.md §0): `UVM_INITIALIZE` (first
//! call on the fd), `UVM_MM_INITIALIZE` on a second fd, `UVM_REGISTER_GPU`, RM
//! `FERMI_VASPACE_A` with `ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED` then
//! `UVM_REGISTER_GPU_VASPACE`, channels then `UVM_REGISTER_CHANNEL`, and per buffer
//! `UVM_CREATE_EXTERNAL_RANGE` + `UVM_MAP_EXTERNAL_ALLOCATION`; `UVM_FREE` removes a range.
//! UVM state dies with the fd (`uvm_release`), so an early exit leaves nothing behind.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use nvbare_core::rm::{Handle, RmStatus};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::driver::NvidiaDriver;
use super::error::{KmodError, open_error};
use super::ioctl::uvm_command;
use super::rm::KernelRm;
use super::uvm_abi::*;

/// A GPU's UUID in binary (as `NV2080_CTRL_CMD_GPU_GET_GID_INFO` returns it with
/// `FORMAT_BINARY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuUuid(pub [u8; 16]);

impl std::fmt::Display for GpuUuid {
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as nvidia-smi prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.0;
        write!(f, "GPU-")?;
        for (i, x) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                write!(f, "-")?;
            }
            write!(f, "{x:02x}")?;
        }
        Ok(())
    }
}

impl GpuUuid {
    fn raw(self) -> NvProcessorUuid {
        NvProcessorUuid { uuid: self.0 }
    }
}

/// One process's UVM context (a UVM VA space).
#[derive(Debug)]
pub struct Uvm {
    fd: OwnedFd,
    /// The `UVM_MM_INITIALIZE` fd: holds the mm so UVM can tear down cleanly on exit.
    _mm: Option<OwnedFd>,
    path: PathBuf,
}

fn check(op: &'static str, status: u32) -> Result<(), KmodError> {
    if status == 0 {
        Ok(())
    } else {
        Err(KmodError::Uvm {
            op,
            status: RmStatus(status),
        })
    }
}

impl Uvm {
    /// Opens `/dev/nvidia-uvm` and initializes a UVM context.
    pub fn open(driver: &NvidiaDriver) -> Result<Uvm, KmodError> {
        let path = driver.paths().uvm();
        let open = |p: &PathBuf| {
            rustix::fs::open(p, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).map_err(
                |e| match e {
                    Errno::NOENT | Errno::NXIO | Errno::NODEV => {
                        KmodError::UvmMissing { path: p.clone() }
                    }
                    e => open_error(p.clone(), e),
                },
            )
        };
        let fd = open(&path)?;
        let uvm = Uvm {
            fd,
            _mm: None,
            path: path.clone(),
        };
        let mut p = UVM_INITIALIZE_PARAMS::default();
        uvm.call("UVM_INITIALIZE", &mut p)?;
        check("UVM_INITIALIZE", p.rmStatus)?;

        // A second fd holding the mm (tinygrad ignores failures here too: platforms that do
        // not need it answer NV_WARN_NOTHING_TO_DO).
        let mm = open(&path)?;
        let mut m = UVM_MM_INITIALIZE_PARAMS {
            uvmFd: std::os::fd::AsRawFd::as_raw_fd(&uvm.fd),
            rmStatus: 0,
        };
        // SAFETY: UVM_MM_INITIALIZE copies exactly UVM_MM_INITIALIZE_PARAMS (8 bytes).
        let mm = match unsafe { uvm_command(mm.as_fd(), UVM_MM_INITIALIZE, &mut m) } {
            Ok(()) => {
                if m.rmStatus != 0 {
                    log::debug!("UVM_MM_INITIALIZE: {}", RmStatus(m.rmStatus));
                }
                Some(mm)
            }
            Err(e) => {
                log::debug!("UVM_MM_INITIALIZE: {e}");
                None
            }
        };
        Ok(Uvm { _mm: mm, ..uvm })
    }

    fn call<T: IntoBytes + FromBytes + UvmParams>(
        &self,
        op: &'static str,
        p: &mut T,
    ) -> Result<(), KmodError> {
        // SAFETY: `T: UvmParams` ties each params struct to its command, so UVM copies exactly
        // `size_of::<T>()` bytes; none of these structs embed pointers.
        unsafe { uvm_command(self.fd.as_fd(), T::CMD, p) }.map_err(|errno| KmodError::Ioctl {
            op,
            path: self.path.clone(),
            errno,
        })
    }

    /// `UVM_REGISTER_GPU`: makes the GPU known to this UVM context.
    pub fn register_gpu(&self, uuid: GpuUuid, rm: &KernelRm) -> Result<(), KmodError> {
        let mut p = UVM_REGISTER_GPU_PARAMS {
            gpu_uuid: uuid.raw(),
            rmCtrlFd: rm.ctl_fd(),
            hClient: rm.client.handle,
            ..Default::default()
        };
        self.call("UVM_REGISTER_GPU", &mut p)?;
        check("UVM_REGISTER_GPU", p.rmStatus)
    }

    /// `UVM_UNREGISTER_GPU`.
    pub fn unregister_gpu(&self, uuid: GpuUuid) -> Result<(), KmodError> {
        let mut p = UVM_UNREGISTER_GPU_PARAMS {
            gpu_uuid: uuid.raw(),
            rmStatus: 0,
        };
        self.call("UVM_UNREGISTER_GPU", &mut p)?;
        check("UVM_UNREGISTER_GPU", p.rmStatus)
    }

    /// `UVM_REGISTER_GPU_VASPACE`: hands the RM VA space `va_space` (allocated with
    /// `ENABLE_PAGE_FAULTING | IS_EXTERNALLY_OWNED`) to UVM.
    pub fn register_gpu_va_space(
        &self,
        uuid: GpuUuid,
        rm: &KernelRm,
        va_space: Handle,
    ) -> Result<(), KmodError> {
        let mut p = UVM_REGISTER_GPU_VASPACE_PARAMS {
            gpuUuid: uuid.raw(),
            rmCtrlFd: rm.ctl_fd(),
            hClient: rm.client.handle,
            hVaSpace: va_space.0,
            rmStatus: 0,
        };
        self.call("UVM_REGISTER_GPU_VASPACE", &mut p)?;
        check("UVM_REGISTER_GPU_VASPACE", p.rmStatus)
    }

    /// `UVM_UNREGISTER_GPU_VASPACE`.
    pub fn unregister_gpu_va_space(&self, uuid: GpuUuid) -> Result<(), KmodError> {
        let mut p = UVM_UNREGISTER_GPU_VASPACE_PARAMS {
            gpuUuid: uuid.raw(),
            rmStatus: 0,
        };
        self.call("UVM_UNREGISTER_GPU_VASPACE", &mut p)?;
        check("UVM_UNREGISTER_GPU_VASPACE", p.rmStatus)
    }

    /// `UVM_REGISTER_CHANNEL`: UVM maps the channel's RM-owned buffers in `[base, base+length)`
    /// of the GPU VA space (tinygrad gives it 64 MiB of its low range).
    pub fn register_channel(
        &self,
        uuid: GpuUuid,
        rm: &KernelRm,
        channel: Handle,
        base: u64,
        length: u64,
    ) -> Result<(), KmodError> {
        let mut p = UVM_REGISTER_CHANNEL_PARAMS {
            gpuUuid: uuid.raw(),
            rmCtrlFd: rm.ctl_fd(),
            hClient: rm.client.handle,
            hChannel: channel.0,
            base,
            length,
            ..Default::default()
        };
        self.call("UVM_REGISTER_CHANNEL", &mut p)?;
        check("UVM_REGISTER_CHANNEL", p.rmStatus)
    }

    /// `UVM_UNREGISTER_CHANNEL`.
    pub fn unregister_channel(
        &self,
        uuid: GpuUuid,
        rm: &KernelRm,
        channel: Handle,
    ) -> Result<(), KmodError> {
        let mut p = UVM_UNREGISTER_CHANNEL_PARAMS {
            gpuUuid: uuid.raw(),
            hClient: rm.client.handle,
            hChannel: channel.0,
            rmStatus: 0,
        };
        self.call("UVM_UNREGISTER_CHANNEL", &mut p)?;
        check("UVM_UNREGISTER_CHANNEL", p.rmStatus)
    }

    /// `UVM_CREATE_EXTERNAL_RANGE`: reserves `[base, base+length)` (4 KiB aligned) for external
    /// mappings.
    pub fn create_external_range(&self, base: u64, length: u64) -> Result<(), KmodError> {
        let mut p = UVM_CREATE_EXTERNAL_RANGE_PARAMS {
            base,
            length,
            ..Default::default()
        };
        self.call("UVM_CREATE_EXTERNAL_RANGE", &mut p)?;
        check("UVM_CREATE_EXTERNAL_RANGE", p.rmStatus)
    }

    /// `UVM_MAP_EXTERNAL_ALLOCATION`: maps `length` bytes at `offset` of RM memory `memory` at
    /// GPU VA `base` (inside an external range) on GPU `uuid`, read-write-atomic.
    #[allow(clippy::too_many_arguments)]
    pub fn map_external_allocation(
        &self,
        uuid: GpuUuid,
        rm: &KernelRm,
        memory: Handle,
        base: u64,
        length: u64,
        offset: u64,
        force_uncached: bool,
    ) -> Result<(), KmodError> {
        let mut p = map_external_params(
            uuid,
            rm.ctl_fd(),
            rm.client.handle,
            memory,
            base,
            length,
            offset,
            force_uncached,
        );
        self.call("UVM_MAP_EXTERNAL_ALLOCATION", &mut *p)?;
        check("UVM_MAP_EXTERNAL_ALLOCATION", p.rmStatus)
    }

    /// `UVM_UNMAP_EXTERNAL`: removes GPU `uuid`'s mapping of `[base, base+length)` of an
    /// external range; the range and other GPUs' mappings of it stay (a peer mapping goes this
    /// way, the owner's with [`Uvm::free`]).
    pub fn unmap_external(&self, uuid: GpuUuid, base: u64, length: u64) -> Result<(), KmodError> {
        let mut p = UVM_UNMAP_EXTERNAL_PARAMS {
            base,
            length,
            gpuUuid: uuid.raw(),
            ..Default::default()
        };
        self.call("UVM_UNMAP_EXTERNAL", &mut p)?;
        check("UVM_UNMAP_EXTERNAL", p.rmStatus)
    }

    /// `UVM_FREE`: unmaps and removes the external range starting at `base`.
    pub fn free(&self, base: u64, length: u64) -> Result<(), KmodError> {
        let mut p = UVM_FREE_PARAMS {
            base,
            length,
            ..Default::default()
        };
        self.call("UVM_FREE", &mut p)?;
        check("UVM_FREE", p.rmStatus)
    }

    /// `UVM_ENABLE_PEER_ACCESS` between two registered GPUs.
    pub fn enable_peer_access(&self, a: GpuUuid, b: GpuUuid) -> Result<(), KmodError> {
        let mut p = UVM_ENABLE_PEER_ACCESS_PARAMS {
            gpuUuidA: a.raw(),
            gpuUuidB: b.raw(),
            rmStatus: 0,
        };
        self.call("UVM_ENABLE_PEER_ACCESS", &mut p)?;
        check("UVM_ENABLE_PEER_ACCESS", p.rmStatus)
    }
}

/// Builds the 9264-byte map request (boxed: it is large).
#[allow(clippy::too_many_arguments)]
fn map_external_params(
    uuid: GpuUuid,
    ctl_fd: i32,
    client: u32,
    memory: Handle,
    base: u64,
    length: u64,
    offset: u64,
    force_uncached: bool,
) -> Box<UVM_MAP_EXTERNAL_ALLOCATION_PARAMS> {
    let mut p = Box::new(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS::new_zeroed());
    p.base = base;
    p.length = length;
    p.offset = offset;
    p.perGpuAttributes[0] = UvmGpuMappingAttributes {
        gpuUuid: uuid.raw(),
        gpuMappingType: UvmGpuMappingTypeReadWriteAtomic,
        gpuCachingType: if force_uncached {
            UvmGpuCachingTypeForceUncached
        } else {
            UvmGpuCachingTypeDefault
        },
        ..Default::default()
    };
    p.gpuAttributesCount = 1;
    p.rmCtrlFd = ctl_fd;
    p.hClient = client;
    p.hMemory = memory.0;
    p
}

/// Ties a UVM params struct to its command number, so [`Uvm::call`] cannot pass a struct of
/// the wrong size.
pub(crate) trait UvmParams {
    const CMD: u32;
}

macro_rules! uvm_params {
    ($($t:ty => $cmd:expr),* $(,)?) => {
        $(impl UvmParams for $t { const CMD: u32 = $cmd; })*
    };
}

uvm_params! {
    UVM_INITIALIZE_PARAMS => UVM_INITIALIZE,
    UVM_REGISTER_GPU_PARAMS => UVM_REGISTER_GPU,
    UVM_UNREGISTER_GPU_PARAMS => UVM_UNREGISTER_GPU,
    UVM_REGISTER_GPU_VASPACE_PARAMS => UVM_REGISTER_GPU_VASPACE,
    UVM_UNREGISTER_GPU_VASPACE_PARAMS => UVM_UNREGISTER_GPU_VASPACE,
    UVM_REGISTER_CHANNEL_PARAMS => UVM_REGISTER_CHANNEL,
    UVM_UNREGISTER_CHANNEL_PARAMS => UVM_UNREGISTER_CHANNEL,
    UVM_CREATE_EXTERNAL_RANGE_PARAMS => UVM_CREATE_EXTERNAL_RANGE,
    UVM_MAP_EXTERNAL_ALLOCATION_PARAMS => UVM_MAP_EXTERNAL_ALLOCATION,
    UVM_FREE_PARAMS => UVM_FREE,
    UVM_UNMAP_EXTERNAL_PARAMS => UVM_UNMAP_EXTERNAL,
    UVM_ENABLE_PEER_ACCESS_PARAMS => UVM_ENABLE_PEER_ACCESS,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn uuid_prints_like_nvidia_smi() {
        let u = GpuUuid([
            0x8e, 0x1f, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5,
            0xe6, 0xf7,
        ]);
        assert_eq!(u.to_string(), "GPU-8e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7");
    }

    #[test]
    fn map_request_fills_the_580_fields() {
        let u = GpuUuid([7; 16]);
        let p = map_external_params(
            u,
            5,
            0xc1d0_0002,
            Handle(0x1234),
            0x10_0000_0000,
            0x20_0000,
            0x1000,
            false,
        );
        let b = p.as_bytes();
        assert_eq!(b.len(), 9264);
        let at = |off: usize| u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
        let at64 = |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
        assert_eq!(at64(0), 0x10_0000_0000);
        assert_eq!(at64(8), 0x20_0000);
        assert_eq!(at64(16), 0x1000);
        assert_eq!(&b[24..40], &[7; 16]);
        assert_eq!(at(40), UvmGpuMappingTypeReadWriteAtomic);
        assert_eq!(
            at64(offset_of!(
                UVM_MAP_EXTERNAL_ALLOCATION_PARAMS,
                gpuAttributesCount
            )),
            1
        );
        assert_eq!(at(9248), 5);
        assert_eq!(at(9252), 0xc1d0_0002);
        assert_eq!(at(9256), 0x1234);
        // The second GPU slot stays empty.
        assert!(b[60..96].iter().all(|&x| x == 0));
    }

    #[test]
    fn every_params_struct_names_its_own_command() {
        assert_eq!(<UVM_MAP_EXTERNAL_ALLOCATION_PARAMS as UvmParams>::CMD, 33);
        assert_eq!(<UVM_REGISTER_GPU_PARAMS as UvmParams>::CMD, 37);
        assert_eq!(<UVM_CREATE_EXTERNAL_RANGE_PARAMS as UvmParams>::CMD, 73);
    }
}
