//! PACKED_REGISTRY_TABLE parsing (the emulator's side of SET_REGISTRY).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::gsp::registry;

fuzz_target!(|data: &[u8]| {
    for i in 0..64 {
        let _ = registry::entry(data, i);
    }
});
