//! Opening a device string as a device-layer [`Device`].
//!
//! Code that runs work on a GPU (the library's handles, the CLI's `demo`, `run`, `bench`,
//! `stress --launches`) is generic over the backend; [`AnyDevice`] holds whichever one the
//! device string names and [`with_device!`](crate::with_device) runs generic code on it.
//!
//! | device | backend |
//! |---|---|
//! | `sim:CHIP` | bare metal on the simulated GPU (`BareMetalBackend`: GSP boot, RPC, page tables) |
//! | `nvidia:N` | the nvidia kernel driver (`KernelBackend`) |
//! | `vfio:BDF` | bare metal on a GPU bound to vfio-pci (`BareMetalBackend` over `VfioGpu`) |
//! | `remote:HOST:PORT:N` | bare metal on a GPU of a remote PCI server (`BareMetalBackend` over `RemoteGpu`, tinygrad's protocol over TCP) |

use std::io::Write;

use nvbare_core::device::{Backend, Device, DeviceOptions};
use nvbare_core::gsp::boot::BootObserver;
use nvbare_sim::baremetal::{BareMetalSim, SimBareMetal};

use super::baremetal::{PhasePrinter, RemoteBareMetal, VfioBareMetal};
use super::firmware::FirmwareSource;
use super::{BackendError, DeviceSpec};

/// A device of whichever backend the device string names.
// One per process, used in place: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyDevice {
    /// The simulator driven bare metal (and the simulator, for its findings).
    BareSim(Device<SimBareMetal>, BareMetalSim),
    /// A GPU bound to vfio-pci, driven bare metal.
    Vfio(Device<VfioBareMetal>),
    /// A GPU of a remote PCI server, driven bare metal over TCP.
    Remote(Device<RemoteBareMetal>),
    /// A GPU through the nvidia kernel driver.
    #[cfg(feature = "nvidia")]
    Kernel(Device<nvbare_pci_host::nvidia::KernelBackend>),
}

impl AnyDevice {
    /// What the device is.
    pub fn info(&self) -> &nvbare_core::device::DeviceInfo {
        match self {
            AnyDevice::BareSim(d, _) => d.info(),
            AnyDevice::Vfio(d) => d.info(),
            AnyDevice::Remote(d) => d.info(),
            #[cfg(feature = "nvidia")]
            AnyDevice::Kernel(d) => d.info(),
        }
    }

    /// Closes the device; a bare-metal GPU is then unloaded (GSP-RM shut down so the next
    /// boot needs no reset), its phases printed through `obs`. Problems the simulated
    /// hardware saw are errors.
    pub fn finish(self, obs: &mut dyn BootObserver) -> Result<(), BackendError> {
        let closed = |e: nvbare_core::device::DeviceError| {
            BackendError::Runtime(format!("closing the device: {e}"))
        };
        let unloaded = |e: nvbare_core::device::baremetal::BareMetalError| {
            BackendError::Runtime(format!("unloading GSP-RM: {e}"))
        };
        match self {
            AnyDevice::BareSim(d, sim) => {
                d.close().map_err(closed)?.unload(obs).map_err(unloaded)?;
                let errors = sim.errors();
                if !errors.is_empty() {
                    return Err(BackendError::Runtime(format!(
                        "the simulated hardware saw problems: {}",
                        errors.join("; ")
                    )));
                }
                Ok(())
            }
            AnyDevice::Vfio(d) => {
                d.close().map_err(closed)?.unload(obs).map_err(unloaded)?;
                Ok(())
            }
            AnyDevice::Remote(d) => {
                d.close().map_err(closed)?.unload(obs).map_err(unloaded)?;
                Ok(())
            }
            // Closed by dropping it (the kernel driver frees what it holds).
            #[cfg(feature = "nvidia")]
            AnyDevice::Kernel(d) => {
                drop(d);
                Ok(())
            }
        }
    }
}

/// Runs `$body` with `$dev` bound to the `&Device<B>` inside an
/// [`AnyDevice`](crate::backend::AnyDevice).
#[macro_export]
macro_rules! with_device {
    ($any:expr, $dev:ident => $body:expr) => {
        $crate::__with_device_arms!($any, $dev => $body)
    };
}

// The arms depend on this crate's `nvidia` feature, not on the calling crate's: a `cfg` inside
// an exported macro would be evaluated where it is used.
#[cfg(feature = "nvidia")]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_device_arms {
    ($any:expr, $dev:ident => $body:expr) => {
        match $any {
            $crate::backend::AnyDevice::BareSim($dev, _) => $body,
            $crate::backend::AnyDevice::Vfio($dev) => $body,
            $crate::backend::AnyDevice::Remote($dev) => $body,
            $crate::backend::AnyDevice::Kernel($dev) => $body,
        }
    };
}

#[cfg(not(feature = "nvidia"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_device_arms {
    ($any:expr, $dev:ident => $body:expr) => {
        match $any {
            $crate::backend::AnyDevice::BareSim($dev, _) => $body,
            $crate::backend::AnyDevice::Vfio($dev) => $body,
            $crate::backend::AnyDevice::Remote($dev) => $body,
        }
    };
}

/// Opens `spec` with `opts` (see the module documentation), the firmware from
/// [`FirmwareSource::default`], then installs the runtime kernels (the copy kernel large
/// device-to-device copies use). A device without a runtime cubin, or one that refuses it,
/// keeps copying on the copy engine (logged). Bare-metal boot phases go to the log.
pub fn open_device(spec: DeviceSpec, opts: DeviceOptions) -> Result<AnyDevice, BackendError> {
    open_device_with(
        spec,
        opts,
        &FirmwareSource::default(),
        &mut PhasePrinter::quiet(),
        true,
    )
}

/// [`open_device`], printing the bare-metal boot phases to `out`.
pub fn open_device_printing(
    spec: DeviceSpec,
    opts: DeviceOptions,
    out: &mut dyn Write,
) -> Result<AnyDevice, BackendError> {
    open_device_with(
        spec,
        opts,
        &FirmwareSource::default(),
        &mut PhasePrinter::new(out, "      "),
        true,
    )
}

/// [`open_device`], the firmware from `firmware`, bare-metal boot phases going to `obs`,
/// installing the runtime kernels only when `runtime` is set.
pub fn open_device_with(
    spec: DeviceSpec,
    opts: DeviceOptions,
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
    runtime: bool,
) -> Result<AnyDevice, BackendError> {
    let t = std::time::Instant::now();
    let any = open_bare(&spec, opts, firmware, obs)?;
    if runtime {
        let r = std::time::Instant::now();
        crate::with_device!(&any, dev => install_runtime(dev));
        log::debug!(
            "open: runtime kernels: {:.2} ms",
            r.elapsed().as_secs_f64() * 1e3
        );
    }
    crate::with_device!(&any, dev => start_flusher(dev));
    log::debug!("open: {spec} in {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    Ok(any)
}

/// Attaches the flusher thread of automatic deferral (docs/device.md) to `dev`;
/// it runs until the device closes. Without it (the process may use one CPU only, or the
/// thread did not start) launches are never held (logged).
pub fn start_flusher<B>(dev: &Device<B>)
where
    B: Backend + 'static,
    nvbare_core::device::Flusher<B>: Send,
{
    if !dev.options().tuning.holds_launches() {
        return;
    }
    match nvbare_pci_host::flusher::spawn_if_parallel(dev) {
        Ok(Some(t)) => t.detach(),
        Ok(None) => log::info!(
            "automatic deferral off: this process may use one CPU only, which its flusher \
             thread would take from the program (allow a second CPU to chain back-to-back \
             launches)"
        ),
        Err(e) => log::warn!("no automatic deferral: {e}"),
    }
}

/// Installs the runtime kernels on `dev`; a device without them copies on the copy engine
/// (logged).
pub fn install_runtime<B: Backend>(dev: &Device<B>) {
    use nvbare_gsp_firmware::program::LoadCubin;
    match dev.install_runtime() {
        Ok(true) => {}
        Ok(false) => log::info!(
            "no runtime cubin for sm_{}: device-to-device copies use the copy engine",
            dev.info().sm
        ),
        Err(e) => log::warn!(
            "the runtime kernels did not load ({e}): device-to-device copies use the copy \
             engine"
        ),
    }
}

fn open_bare(
    spec: &DeviceSpec,
    opts: DeviceOptions,
    firmware: &FirmwareSource,
    obs: &mut dyn BootObserver,
) -> Result<AnyDevice, BackendError> {
    let dev_err = |e| BackendError::Runtime(format!("{spec}: {e}"));
    match spec {
        DeviceSpec::Sim(cs) => {
            let (backend, sim) = super::baremetal::open_sim(*cs, opts.va_window, firmware, obs)?;
            Device::open(backend, opts)
                .map(|d| AnyDevice::BareSim(d, sim))
                .map_err(dev_err)
        }
        DeviceSpec::Vfio(bdf) => {
            let backend = super::baremetal::open_vfio(*bdf, opts.va_window, firmware, obs)?;
            Device::open(backend, opts)
                .map(AnyDevice::Vfio)
                .map_err(dev_err)
        }
        DeviceSpec::Remote { host, port, index } => {
            let backend =
                super::baremetal::open_remote(host, *port, *index, opts.va_window, firmware, obs)?;
            Device::open(backend, opts)
                .map(AnyDevice::Remote)
                .map_err(dev_err)
        }
        #[cfg(feature = "nvidia")]
        DeviceSpec::Nvidia(index) => {
            let t = std::time::Instant::now();
            let mode = nvbare_pci_host::nvidia::VaMode::from_env()?;
            let backend =
                nvbare_pci_host::nvidia::KernelBackend::open_in(*index, mode, opts.va_window)
                    .map_err(|e| match e {
                        e @ nvbare_pci_host::nvidia::KmodError::VaWindow(_) => {
                            BackendError::Usage(format!("{spec}: {e}"))
                        }
                        e => e.into(),
                    })?;
            log::debug!(
                "open: driver nodes, root client, GPU attach (nvidia.ko): {:.2} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
            Device::open(backend, opts)
                .map(AnyDevice::Kernel)
                .map_err(|e| BackendError::Runtime(format!("{spec}: {e}")))
        }
        #[cfg(not(feature = "nvidia"))]
        DeviceSpec::Nvidia(index) => {
            let _ = opts;
            Err(not_built(*index))
        }
    }
}

/// The error for `nvidia:N` in a build without the kernel-driver adapter (the `nvidia`
/// feature of this crate, `nvidia-kmod` of nvbare-tools).
pub fn not_built(index: u32) -> BackendError {
    BackendError::NotBuilt(format!(
        "nvidia:{index}: this nvbare was built without the kernel-driver adapter; rebuild with \
         `--features nvidia-kmod` (on by default)"
    ))
}

/// The fixture cubin with the demo kernels for shader model `sm` (compiled into the
/// simulator), if there is one: the CUDA 13 build when there is one (what the CUDA baseline
/// launches), else CUDA 12.
pub fn demo_cubin(sm: u32) -> Option<(&'static str, &'static [u8])> {
    let fixtures = nvbare_sim::compute::kernels::FIXTURES;
    ["cuda13", "cuda12"].iter().find_map(|cuda| {
        let name = format!("kernels_sm{sm}_{cuda}");
        fixtures.iter().find(|(n, _)| *n == name).copied()
    })
}
