//! Fuzzes the cubin parser and loader: any input must give `Ok` or a `CubinError`, never a
//! panic, hang or unbounded allocation.
//!
//! Seed it with the fixtures:
//! `cargo +nightly fuzz run cubin fuzz/corpus/cubin tests/fixtures/cubins`
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::cubin::Cubin;

fuzz_target!(|data: &[u8]| {
    let Ok(c) = Cubin::parse(data) else {
        return;
    };
    // Loading allocates image_size bytes; keep the fuzzer's memory bounded.
    if c.image_size() > 64 << 20 {
        return;
    }
    for base in [0u64, 0xffff_ffff_ffff_ff00] {
        if let Ok(img) = c.load_image(base) {
            for k in &c.kernels {
                let _ = c.code(k, &img);
            }
        }
    }
});
