//! GSP RISC-V bootloader and generic falcon bootloader files.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::{GenericBootloader, RiscvBootloader};

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = RiscvBootloader::parse(data) {
        let _ = (b.code(), b.data(), b.manifest(), b.app_version());
    }
    if let Ok(b) = GenericBootloader::parse(data) {
        let _ = (b.code(), b.data());
    }
});
