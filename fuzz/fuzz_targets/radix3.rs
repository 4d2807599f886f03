//! Radix3: tables for any image and placement walk back to the image; walking arbitrary
//! memory never panics.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use nvbare_gsp_firmware::Error;
use nvbare_gsp_firmware::radix3::{Radix3, Radix3Layout, walk};

fuzz_target!(|data: &[u8]| {
    let Some((head, image)) = data.split_first_chunk::<8>() else {
        return;
    };
    let seed = u64::from_le_bytes(*head);

    // 1. Arbitrary memory: a walk over it ends (bounded by the layout) without panicking.
    let size = (seed >> 8) % (64 << 20);
    if let Ok(layout) = Radix3Layout::new(size) {
        let _ = walk(&layout, seed, |t, i| {
            let at = (t.wrapping_add(i * 8) as usize) % data.len().max(1);
            let mut e = [0u8; 8];
            for (k, b) in e.iter_mut().enumerate() {
                *b = *data.get((at + k) % data.len().max(1)).unwrap_or(&0);
            }
            Ok(u64::from_le_bytes(e))
        });
    }

    // 2. Real tables over `image`, scattered by the seed, walk back to `image`.
    let Ok(r3) = Radix3::new(image) else {
        return;
    };
    let n = r3.layout().total_pages();
    // A bijection on page numbers below 2^20, shifted away from 0.
    let addr = |p: u64| (1 << 40) + (((p.wrapping_mul(seed | 1)) ^ (seed >> 20)) & 0xf_ffff) * 4096;
    let mem: HashMap<u64, [u8; 4096]> = (0..n)
        .map(|p| (addr(p), r3.page(p, addr).unwrap()))
        .collect();
    assert_eq!(mem.len() as u64, n);
    let pages = walk(r3.layout(), addr(0), |t, i| {
        let page = mem.get(&t).ok_or(Error::Missing { what: "page" })?;
        let e: [u8; 8] = page[i as usize * 8..][..8].try_into().unwrap();
        Ok(u64::from_le_bytes(e))
    })
    .unwrap();
    let mut back = Vec::new();
    for a in pages {
        back.extend_from_slice(&mem[&a]);
    }
    back.truncate(image.len());
    assert_eq!(back, image);
});
