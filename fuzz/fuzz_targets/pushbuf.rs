//! Pushbuffer decoding (`nvbare decode pushbuf`) on arbitrary words: never panics, and every
//! method it yields re-encodes to a header with the same fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::channel::decode::{Decoder, Fields, Item};
use nvbare_core::channel::gpfifo::GpEntry;
use nvbare_core::channel::pushbuf::Header;

fuzz_target!(|data: &[u8]| {
    let words: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut d = Decoder::new(&words);
    if let Some(&w) = words.first() {
        d = d.with_class((w & 7) as u8, w >> 16);
    }
    for item in d {
        match item {
            Ok(Item::Method(m)) => {
                let _ = Fields(m).to_string();
                let _ = m.name();
                let h = Header::decode(words[m.header_index]);
                assert_eq!(Header::decode(h.encode()), h);
            }
            Ok(_) => {}
            Err(e) => {
                let _ = e.to_string();
                break;
            }
        }
    }
    for c in data.chunks_exact(8) {
        let raw = u64::from_le_bytes(c.try_into().unwrap());
        let e = GpEntry::decode(raw);
        assert_eq!(GpEntry::decode(e.encode()), e);
    }
});
