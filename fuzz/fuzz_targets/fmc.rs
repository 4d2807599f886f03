//! FMC ELF32 containers: sections, CRCs, SHA-384, COT payload fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::FmcImage;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = FmcImage::parse(data) {
        let _ = (
            f.cot_hash(),
            f.cot_public_key(),
            f.cot_signature(),
            f.scheme(),
        );
    }
});
