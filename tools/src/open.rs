//! Opening a `--device` as a device-layer [`Device`].

use nvbare_core::device::{Device, DeviceOptions};
use nvbare_sim::ChipModel;
use nvbare_sim::backend::SimBackend;

use crate::{CliError, DeviceSpec};

/// The backend behind a device this build can open.
pub type CliBackend = SimBackend;

/// Opens `spec` with `opts`. Only the simulator is available in this build; `nvidia:N` and
/// `vfio:...` give an error that says so.
pub fn open_device(spec: DeviceSpec, opts: DeviceOptions) -> Result<Device<CliBackend>, CliError> {
    match spec {
        DeviceSpec::Sim(cs) => {
            let model = ChipModel::for_chipset(cs)
                .ok_or_else(|| CliError::Usage(format!("the simulator has no {cs} model")))?;
            let backend = SimBackend::new(model, false)
                .map_err(|e| CliError::Runtime(format!("starting the simulated {cs}: {e}")))?;
            Device::open(backend, opts).map_err(|e| CliError::Runtime(format!("{spec}: {e}")))
        }
        DeviceSpec::Nvidia(_) => Err(CliError::Runtime(format!(
            "{spec}: the device layer (channels, copies, launches) does not run over the \
             nvidia kernel driver in this build yet (`nvbare info --device {spec}` does); use \
             --device sim:CHIP (ad102, gh100, gb202)"
        ))),
        DeviceSpec::Vfio(_) => Err(CliError::Runtime(format!(
            "{spec}: the device layer (channels, copies, launches) does not run on a \
             bare-metal VFIO GPU in this build yet (no bare-metal backend); use --device \
             sim:CHIP (ad102, gh100, gb202)"
        ))),
    }
}

/// The fixture cubin with the demo kernels for shader model `sm` (compiled into the
/// simulator), if there is one.
pub fn demo_cubin(sm: u32) -> Option<&'static [u8]> {
    let name = format!("kernels_sm{sm}_cuda12");
    nvbare_sim::compute::kernels::FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
}
