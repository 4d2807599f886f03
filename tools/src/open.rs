//! Opening a `--device` as a device-layer [`Device`].
//!
//! The subcommands that run work on a GPU (`demo`, `run`, `bench`, `stress --launches`) are
//! generic over the backend; [`AnyDevice`] holds whichever one the device string names and
//! [`with_device!`](crate::with_device) runs generic code on it.

use nvbare_core::device::{Backend, Device, DeviceOptions};
use nvbare_core::rm::Handle;
use nvbare_sim::ChipModel;
use nvbare_sim::backend::SimBackend;

use crate::{CliError, DeviceSpec};

/// What the CLI needs from a backend beyond [`Backend`].
pub trait CliBackend: Backend {
    /// Pauses the GPU side of channel `channel`, so that launches can be timed without any GPU
    /// work in between (the simulator can; real hardware cannot and returns `false`).
    fn pause_channel(&self, channel: Handle) -> bool {
        let _ = channel;
        false
    }

    /// Undoes [`CliBackend::pause_channel`].
    fn resume_channel(&self, channel: Handle) {
        let _ = channel;
    }

    /// Whether this is real hardware (timings mean something).
    fn is_hardware(&self) -> bool {
        false
    }
}

impl CliBackend for SimBackend {
    fn pause_channel(&self, channel: Handle) -> bool {
        self.freeze_channel(channel)
    }

    fn resume_channel(&self, channel: Handle) {
        self.thaw_channel(channel);
    }
}

#[cfg(feature = "nvidia-kmod")]
impl CliBackend for nvbare_pci_host::nvidia::KernelBackend {
    fn is_hardware(&self) -> bool {
        true
    }
}

/// A device of whichever backend the device string names.
// One per process, used in place: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyDevice {
    /// The simulator.
    Sim(Device<SimBackend>),
    /// A GPU through the nvidia kernel driver.
    #[cfg(feature = "nvidia-kmod")]
    Kernel(Device<nvbare_pci_host::nvidia::KernelBackend>),
}

impl AnyDevice {
    /// What the device is.
    pub fn info(&self) -> &nvbare_core::device::DeviceInfo {
        match self {
            AnyDevice::Sim(d) => d.info(),
            #[cfg(feature = "nvidia-kmod")]
            AnyDevice::Kernel(d) => d.info(),
        }
    }
}

/// Runs `$body` with `$dev` bound to the `&Device<B>` inside an [`AnyDevice`].
#[macro_export]
macro_rules! with_device {
    ($any:expr, $dev:ident => $body:expr) => {
        match $any {
            $crate::open::AnyDevice::Sim($dev) => $body,
            #[cfg(feature = "nvidia-kmod")]
            $crate::open::AnyDevice::Kernel($dev) => $body,
        }
    };
}

/// Opens `spec` with `opts`: the simulator, or a GPU through the nvidia kernel driver.
pub fn open_device(spec: DeviceSpec, opts: DeviceOptions) -> Result<AnyDevice, CliError> {
    match spec {
        DeviceSpec::Sim(cs) => {
            let model = ChipModel::for_chipset(cs)
                .ok_or_else(|| CliError::Usage(format!("the simulator has no {cs} model")))?;
            let backend = SimBackend::new(model, false)
                .map_err(|e| CliError::Runtime(format!("starting the simulated {cs}: {e}")))?;
            Device::open(backend, opts)
                .map(AnyDevice::Sim)
                .map_err(|e| CliError::Runtime(format!("{spec}: {e}")))
        }
        #[cfg(feature = "nvidia-kmod")]
        DeviceSpec::Nvidia(index) => {
            let backend = nvbare_pci_host::nvidia::KernelBackend::open(index)?;
            Device::open(backend, opts)
                .map(AnyDevice::Kernel)
                .map_err(|e| CliError::Runtime(format!("{spec}: {e}")))
        }
        #[cfg(not(feature = "nvidia-kmod"))]
        DeviceSpec::Nvidia(index) => {
            let _ = opts;
            Err(crate::kmod::not_built(index))
        }
        DeviceSpec::Vfio(_) => Err(CliError::Runtime(format!(
            "{spec}: the device layer (channels, copies, launches) does not run on a \
             bare-metal VFIO GPU in this build yet (no bare-metal backend); use --device \
             sim:CHIP (ad102, gh100, gb202) or nvidia:N"
        ))),
    }
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
