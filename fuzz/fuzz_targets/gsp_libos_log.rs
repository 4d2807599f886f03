//! LIBOS log buffers and the logging image they point into.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::gsp::log::{LogItem, LogReader, Segments, format_record};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let split = (u16::from_le_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
    let (image_bytes, log) = data[2..].split_at(split);
    // The image is mapped at a VA the log can name (the low 32 bits of a word).
    let segs = [(0x1000u64, image_bytes)];
    let image = Segments(&segs);
    let mut r = LogReader::new();
    let mut out = String::new();
    let _ = r.read_new(&log, Some(&image), &mut |it| {
        if let LogItem::Record(rec) = it {
            out.clear();
            let _ = format_record(rec, &image, &mut out);
        }
    });
    let _ = LogReader::new().read_new(&log, None, &mut |_| {});
});
