//! Helpers shared by the integration tests that boot simulated GPUs with the real firmware.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use nvbare_core::chip::Chipset;
use nvbare_gsp_firmware::FirmwareSet;
use nvbare_gsp_firmware::boot::ReadError;
use nvbare_gsp_firmware::testutil;
use nvbare_sim::boot::SimFirmware;

/// The simulator's view of a chip's firmware and the driver's.
pub type Fw = (Arc<SimFirmware>, Arc<FirmwareSet>);

/// The r570.144 firmware of `chip`, loaded once per chip per test process (SHA checks of
/// ~100 MB); fails (does not skip) with the fetch script's name when the cache is missing.
pub fn firmware(chip: Chipset) -> Fw {
    static CACHE: OnceLock<Mutex<HashMap<Chipset, Fw>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut c = cache.lock().unwrap();
    c.entry(chip)
        .or_insert_with(|| {
            let dir = testutil::require_firmware_dir();
            let sim = SimFirmware::load(chip, &dir).unwrap();
            let set = FirmwareSet::load(chip, |p| {
                std::fs::read(dir.join(p)).map_err(|e| ReadError::Io(e.to_string()))
            })
            .unwrap();
            (Arc::new(sim), Arc::new(set))
        })
        .clone()
}
