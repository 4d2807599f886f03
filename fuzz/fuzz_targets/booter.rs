//! HS ucode files (booter, scrubber): headers, signature choice and patching.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::BooterImage;

fuzz_target!(|data: &[u8]| {
    let Ok(b) = BooterImage::parse(data) else {
        return;
    };
    let _ = (b.pkc_data_offset(), b.engine_id_mask(), b.ucode_id());
    for fuse in [0, 1, 2, b.num_sigs, u32::MAX] {
        if let Ok(img) = b.patched_image(fuse) {
            assert_eq!(img.len(), b.image().len());
        }
    }
});
