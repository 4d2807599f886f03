//! Any bytes through the format detector and the parser it picks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::FirmwareFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = FirmwareFile::detect(data) {
        let _ = f.kind_name();
    }
    let _ = nvbare_gsp_firmware::pinned::identify(data).count();
});
