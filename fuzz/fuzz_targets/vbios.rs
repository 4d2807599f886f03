//! VBIOS ROMs: image walk, BIT, falcon ucode table, FWSEC (v3 and v2) extraction and patching.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::Vbios;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = Vbios::parse(data) else {
        return;
    };
    let _ = v.bit_tokens().count();
    let _ = v.version();
    let _ = v.falcon_ucode_table();
    for f in [v.fwsec(), v.fwsec_debug()].into_iter().flatten() {
        for fuse in [0, 1, 3, 15, 16] {
            if let Ok(u) = f.patch_frts(0x7fe0_0000, 0x10_0000, fuse) {
                assert_eq!(u.image.len(), f.image().len());
                let _ = (u.code(), u.dmem());
            }
            let _ = f.patch_sb(fuse);
        }
    }
    if let Ok(f) = v.fwsec_v2() {
        if let Ok(u) = f.patch_frts(0x7fe0_0000, 0x10_0000) {
            assert!(u.code.len() >= f.code().len() && u.data.len() >= f.data().len());
            assert!(u.sec_offset as usize + u.sec_size as usize <= u.code.len());
        }
        let _ = f.patch_sb();
    }
});
