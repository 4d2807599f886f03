//! Helpers shared by the integration tests that boot simulated GPUs with the real firmware.

use std::sync::Arc;

use nvbare_core::chip::Chipset;
use nvbare_gsp_firmware::FirmwareSet;
use nvbare_sim::boot::SimFirmware;

/// The simulator's view of a chip's firmware and the driver's.
pub type Fw = (Arc<SimFirmware>, Arc<FirmwareSet>);

/// The r570.144 firmware of `chip`, loaded once per chip per test process (SHA checks of
/// ~100 MB); fails (does not skip) with the fetch script's name when the cache is missing.
pub fn firmware(chip: Chipset) -> Fw {
    nvbare_sim::boot::firmware::pinned_firmware(chip)
}
