//! Opening a device, and the device handle.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::backend::baremetal::PhasePrinter;
use crate::backend::firmware::{FirmwareSource, default_dir, fetch_disabled_by_env};
use crate::backend::open::open_device_with;
use crate::backend::{AnyDevice, BackendError, DeviceSpec};
use nvbare_core::device::{Backend, Device, DeviceInfo, DeviceOptions, Location};

use crate::dev::{Dev, Finish, Held};
use crate::module::Module;
use crate::stream::Stream;
use crate::{DeviceBuffer, DeviceRepr, Error, Result};

/// The options a user sets when opening a device ([`open_with`]); the rest are the device
/// layer's defaults (`nvbare_core::device::DeviceOptions`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Longest any wait may take before it fails with a timeout (default 10 s).
    pub timeout: Duration,
    /// Command memory per channel: launches and copies queued at once (default 1 MiB).
    pub command_bytes: u64,
    /// Host staging memory for copies (default 4 MiB, at most 4 GiB).
    pub staging_bytes: u64,
    /// Stack per GPU thread in bytes (CUDA's `cudaLimitStackSize`, default 1 KiB).
    pub stack_size: u32,
    /// Streams the device has, the default stream included (default 4, at most
    /// `nvbare_core::device::MAX_STREAMS`): [`Gpu::new_stream`] hands out the others. Each is
    /// a compute and a copy channel, created as the device opens.
    pub streams: u32,
    /// Where the GSP firmware is (default `$NVBARE_FIRMWARE_DIR`, else
    /// `~/.cache/nvbare/firmware`). Only bare-metal devices (`sim:`, `vfio:`, `remote:`) need
    /// it.
    pub firmware_dir: Option<PathBuf>,
    /// Fetch (and verify) missing firmware from Debian's archive into
    /// [`Options::firmware_dir`] (default true, unless `NVBARE_NO_FETCH=1`); off, missing
    /// firmware is [`Error::Firmware`] naming the fetch command.
    pub fetch_firmware: bool,
}

impl Default for Options {
    fn default() -> Self {
        let d = DeviceOptions::default();
        Options {
            timeout: d.timeout,
            command_bytes: d.command_bytes,
            staging_bytes: d.staging_bytes,
            stack_size: d.stack_size,
            streams: d.streams,
            firmware_dir: None,
            fetch_firmware: !fetch_disabled_by_env(),
        }
    }
}

impl Options {
    /// [`Options::timeout`].
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// [`Options::command_bytes`].
    pub fn command_bytes(mut self, bytes: u64) -> Self {
        self.command_bytes = bytes;
        self
    }

    /// [`Options::staging_bytes`].
    pub fn staging_bytes(mut self, bytes: u64) -> Self {
        self.staging_bytes = bytes;
        self
    }

    /// [`Options::stack_size`].
    pub fn stack_size(mut self, bytes: u32) -> Self {
        self.stack_size = bytes;
        self
    }

    /// [`Options::streams`].
    pub fn streams(mut self, n: u32) -> Self {
        self.streams = n;
        self
    }

    /// [`Options::firmware_dir`].
    pub fn firmware_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.firmware_dir = Some(dir.into());
        self
    }

    /// [`Options::fetch_firmware`].
    pub fn fetch_firmware(mut self, fetch: bool) -> Self {
        self.fetch_firmware = fetch;
        self
    }

    fn firmware(&self) -> FirmwareSource {
        FirmwareSource {
            dir: self.firmware_dir.clone().unwrap_or_else(default_dir),
            fetch: self.fetch_firmware,
        }
    }

    fn device_options(&self) -> DeviceOptions {
        DeviceOptions {
            timeout: self.timeout,
            command_bytes: self.command_bytes,
            staging_bytes: self.staging_bytes,
            stack_size: self.stack_size,
            streams: self.streams,
            ..DeviceOptions::default()
        }
    }
}

/// Opens the device `spec` names with the default [`Options`].
pub fn open(spec: &str) -> Result<Gpu> {
    open_with(spec, Options::default())
}

/// Opens the device `spec` names (see the [crate docs](crate) for the forms).
pub fn open_with(spec: &str, options: Options) -> Result<Gpu> {
    let spec: DeviceSpec = spec.parse().map_err(|e| Error::Spec(format!("{e}")))?;
    let any = open_device_with(
        spec.clone(),
        options.device_options(),
        &options.firmware(),
        &mut PhasePrinter::quiet(),
        true,
    )
    .map_err(|e| match e {
        BackendError::Usage(m) => Error::Spec(m),
        BackendError::Firmware(f) => Error::Firmware(f),
        BackendError::NotBuilt(m) => {
            Error::NotBuilt(format!("{m}; build nvbare with its `nvidia` feature"))
        }
        e => Error::Open(e.to_string()),
    })?;
    let dev = boxed(any);
    let info = dev.info().clone();
    Ok(Gpu {
        shared: Arc::new(GpuShared {
            id: dev.id(),
            name: spec.to_string(),
            info,
            dev: Mutex::new(Some(dev)),
            streams_in_use: Mutex::new(1),
        }),
    })
}

struct Unload;

impl<H: nvbare_core::device::baremetal::BarePlatform>
    Finish<nvbare_core::device::baremetal::BareMetalBackend<H>> for Unload
where
    nvbare_core::device::baremetal::BareMetalBackend<H>: Backend,
{
    fn finish(
        &mut self,
        dev: Device<nvbare_core::device::baremetal::BareMetalBackend<H>>,
    ) -> Result<()> {
        let b = dev
            .close()
            .map_err(|e| Error::Open(format!("closing the device: {e}")))?;
        b.unload(&mut nvbare_core::gsp::boot::NoObserver)
            .map(|_| ())
            .map_err(|e| Error::Open(format!("unloading GSP-RM: {e}")))
    }
}

/// The simulated GPU: unloaded, then what the simulated hardware saw is an error.
struct UnloadSim(Option<nvbare_sim::baremetal::BareMetalSim>);

impl Finish<nvbare_sim::baremetal::SimBareMetal> for UnloadSim {
    fn finish(&mut self, dev: Device<nvbare_sim::baremetal::SimBareMetal>) -> Result<()> {
        Unload.finish(dev)?;
        if let Some(sim) = self.0.take() {
            let errors = sim.errors();
            if !errors.is_empty() {
                return Err(Error::Open(format!(
                    "the simulated hardware saw problems: {}",
                    errors.join("; ")
                )));
            }
        }
        Ok(())
    }
}

#[cfg(feature = "nvidia")]
struct Drop_;

#[cfg(feature = "nvidia")]
impl Finish<nvbare_pci_host::nvidia::KernelBackend> for Drop_ {
    fn finish(&mut self, dev: Device<nvbare_pci_host::nvidia::KernelBackend>) -> Result<()> {
        // The kernel driver frees what the device held.
        drop(dev);
        Ok(())
    }
}

fn boxed(any: AnyDevice) -> Box<dyn Dev> {
    match any {
        AnyDevice::BareSim(dev, sim) => Box::new(Held {
            dev,
            finish: Box::new(UnloadSim(Some(sim))),
        }),
        AnyDevice::Vfio(dev) => Box::new(Held {
            dev,
            finish: Box::new(Unload),
        }),
        AnyDevice::Remote(dev) => Box::new(Held {
            dev,
            finish: Box::new(Unload),
        }),
        #[cfg(feature = "nvidia")]
        AnyDevice::Kernel(dev) => Box::new(Held {
            dev,
            finish: Box::new(Drop_),
        }),
    }
}

/// What every handle of one device shares.
pub(crate) struct GpuShared {
    pub id: u32,
    pub name: String,
    pub info: DeviceInfo,
    /// `None` once closed.
    dev: Mutex<Option<Box<dyn Dev>>>,
    /// Bit `s`: stream `s` has a [`Stream`] handle (`Gpu::new_stream`); stream 0 always.
    pub(crate) streams_in_use: Mutex<u64>,
}

impl std::fmt::Debug for GpuShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("id", &self.id)
            .field("device", &self.name)
            .field("chip", &self.info.chip.name)
            .finish_non_exhaustive()
    }
}

/// The device, locked for one call.
pub(crate) struct Locked<'a>(MutexGuard<'a, Option<Box<dyn Dev>>>);

impl std::ops::Deref for Locked<'_> {
    type Target = dyn Dev;
    fn deref(&self) -> &Self::Target {
        match self.0.as_deref() {
            Some(d) => d,
            // `GpuShared::lock` hands out only guards over `Some`.
            None => unreachable!("checked when locked"),
        }
    }
}

impl GpuShared {
    pub(crate) fn lock(&self) -> Result<Locked<'_>> {
        // A panic in another thread while it held the device leaves the state as it was.
        let g = self.dev.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            return Err(Error::Closed(self.name.clone()));
        }
        Ok(Locked(g))
    }

    fn close(&self) -> Result<()> {
        let d = self.dev.lock().unwrap_or_else(|e| e.into_inner()).take();
        match d {
            Some(d) => d.finish(),
            None => Ok(()),
        }
    }
}

impl Drop for GpuShared {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::warn!("closing {}: {e}", self.name);
        }
    }
}

/// An open GPU. Cheap to clone (reference-counted); `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub(crate) shared: Arc<GpuShared>,
}

impl Gpu {
    /// What the device is: chip, shader model, classes, driver version.
    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// The device string it was opened with (`sim:gh100`, `nvidia:0`, ...).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The stream every device has: work on it runs in the order it was submitted.
    pub fn default_stream(&self) -> Stream {
        Stream::new(self.shared.clone(), 0)
    }

    /// Loads a cubin built for this GPU's shader model (`nvcc -cubin -arch=sm_XX`). The image
    /// stays loaded while the [`Module`] or one of its [`crate::Function`]s exists.
    pub fn load_cubin(&self, cubin: &[u8]) -> Result<Module> {
        let raw = self.shared.lock()?.load_cubin(cubin)?;
        Ok(Module::new(self.shared.clone(), raw))
    }

    /// Compiles PTX for this GPU's shader model with NVIDIA's nvJitLink (found at run time:
    /// `$NVBARE_NVJITLINK`, else `libnvJitLink.so*` on the loader's path, under
    /// `$CUDA_HOME/lib64` and `/usr/local/cuda/lib64`, and in the `nvidia-nvjitlink` Python
    /// wheels; docs/libcuda.md) and loads the cubin, as [`Gpu::load_cubin`]. Compiled cubins
    /// are cached in memory by PTX text and target. Feature `jit`. Without nvJitLink:
    /// [`Error::Jit`](crate::Error::Jit) saying how to install it.
    #[cfg(feature = "jit")]
    pub fn load_ptx(&self, ptx: &str) -> Result<Module> {
        let ptx = ptx.trim_end_matches('\0');
        let cubin = nvbare_pci_host::jit::compile(ptx.as_bytes(), self.info().sm)?;
        self.load_cubin(&cubin)
    }

    /// A buffer of `len` elements in device memory, contents undefined.
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::alloc(&self.shared, len, Location::Device, false)
    }

    /// A zero-filled buffer of `len` elements in device memory.
    pub fn alloc_zeros<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::alloc(&self.shared, len, Location::Device, true)
    }

    /// A buffer of `len` elements in host memory the GPU reaches over PCIe, contents
    /// undefined.
    pub fn alloc_host<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::alloc(&self.shared, len, Location::Host, false)
    }

    /// Video memory as `(free, total)` bytes where the backend counts it (bare metal: `sim:`,
    /// `vfio:`, `remote:`); `None` through the kernel driver.
    pub fn memory_info(&self) -> Result<Option<(u64, u64)>> {
        self.shared.lock()?.memory_info()
    }

    /// Waits until everything submitted on every stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.shared.lock()?.synchronize()
    }

    /// Closes the device now (a bare-metal GPU is unloaded: GSP-RM shut down so the next boot
    /// needs no reset) and reports how that went. Other handles fail with [`Error::Closed`]
    /// from now on. Without it the device closes when its last handle goes.
    pub fn close(self) -> Result<()> {
        self.shared.close()
    }
}
