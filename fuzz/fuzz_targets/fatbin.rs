//! Fuzzes libcuda's image reader: what cuModuleLoadData is handed (kind, ELF and fatbin
//! sizes) and the fatbin entry choice with LZ4 / zstd decompression. Any input must give `Ok`
//! or a `CuError`, never a panic, hang or unbounded allocation.
//!
//! Seed it with the fixtures:
//! `cargo +nightly fuzz run fatbin fuzz/corpus/fatbin tests/fixtures/cubins`
#![no_main]

use cuda::image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match image::kind(data) {
        image::Kind::Fatbin => {
            for sm in [75, 80, 89, 90, 100] {
                let _ = image::choose(data, sm);
            }
        }
        image::Kind::Elf if data.len() >= 64 => {
            if let Ok((off, len)) = image::elf_section_table(&data[..64]) {
                if let Some(sections) = data.get(off..off.saturating_add(len)) {
                    let _ = image::elf_size(&data[..64], sections);
                }
            }
        }
        _ => {
            let _ = image::is_ptx(data);
        }
    }
});
