//! Event payload parsers and the CPU-sequencer decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::gsp::events::{GspEvent, RawEvent};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let function = 0x1000 + (data[0] as u32 % 0x24);
    let payload: &[u8] = &data[1..];
    let parsed = GspEvent::parse(function, data[1] as u32, payload.len(), &payload);
    let ev = RawEvent::new(0x1002, 0, payload.len(), &parsed, &payload);
    if let Ok(cmds) = ev.sequencer() {
        for c in cmds.take(10_000) {
            let _ = c;
        }
    }
    let _ = ev.read_u32(payload.len().saturating_sub(2));
});
