//! GSP-RM ELF images: sections, version, signatures for every chip, radix3 pages.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::chip::CHIPS;
use nvbare_gsp_firmware::GspFirmware;

fuzz_target!(|data: &[u8]| {
    let Ok(fw) = GspFirmware::parse_any_version(data) else {
        return;
    };
    let _ = fw.check_version("570.144");
    for c in CHIPS {
        let _ = fw.signature(c.chipset);
        let _ = fw.signature_cc(c.chipset);
    }
    let _ = fw.signatures().count();
    let _ = fw.build_id();
    if let Ok(r3) = fw.radix3() {
        let n = r3.layout().total_pages();
        for i in [0, n / 2, n.saturating_sub(1), n] {
            let _ = r3.page(i, |p| p * 4096 + 0x1000);
        }
    }
});
