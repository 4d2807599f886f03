//! Arbitrary pushbuffers on the simulated GPU, through the device layer's submission path: the
//! simulator must turn every malformed method into an RC or a block (which the device layer
//! reports and recovers from), never panic or hang.
#![no_main]

use std::cell::RefCell;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use nvbare_core::device::{ChannelKind, Device, DeviceOptions};
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::GH100;

thread_local! {
    static DEV: RefCell<Option<Device<SimBackend>>> = const { RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let words: Vec<u32> = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take(1024)
        .collect();
    DEV.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|d| d.synchronize().is_err()) {
            let b = SimBackend::new(GH100, true).expect("simulator");
            let opts = DeviceOptions {
                timeout: Duration::from_millis(5),
                ..Default::default()
            };
            *slot = Some(Device::open(b, opts).expect("device"));
        }
        let Some(dev) = slot.as_ref() else { return };
        let ch = if sel & 1 == 0 {
            ChannelKind::Compute
        } else {
            ChannelKind::Copy
        };
        if let Ok(v) = dev.submit_raw(ch, &words) {
            let _ = dev.wait_for(ch, v).map_err(|e| e.to_string());
        }
    });
});
