//! Everything the driver reads from the status queue: GSP-RM's queue header, its read
//! pointer, element headers, RPC headers, replies (incl. continuation records) and events.
#![no_main]

use std::cell::RefCell;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use nvbare_core::gsp::msgq::{MsgQueue, SharedMemLayout};
use nvbare_core::gsp::rpc::{GspConfig, GspRpc};
use nvbare_core::hal::DmaBuffer;
use nvbare_core::rm::Handle;
use nvbare_fuzz::{NullMmio, StepClock, VecDma};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let layout = SharedMemLayout::default();
    let q = MsgQueue::new(VecDma(RefCell::new(vec![0; layout.total_size()])), layout).unwrap();
    // The fuzz input is what GSP-RM wrote: the status queue (header page and elements),
    // starting at its header; a plausible header is laid first half of the time so the
    // element parsers are reached.
    let stat = layout.stat_queue_offset();
    let buf = q.buffer();
    if mode & 1 == 0 {
        let hdr: [u32; 8] = [0, 0x40000, 0x1000, 63, 0, 1, 32, 0x1000];
        for (i, v) in hdr.iter().enumerate() {
            buf.write_u32(stat + i * 4, *v).unwrap();
        }
        let skip = 32.min(data.len());
        let (head, rest) = data.split_at(skip);
        // writePtr and GSP's read pointer come from the input.
        if head.len() >= 8 {
            buf.write(stat + 16, &head[..4]).unwrap();
            buf.write(stat + 32, &head[4..8]).unwrap();
        }
        let n = rest.len().min(layout.stat_queue_size as usize - 0x1000);
        buf.write(stat + 0x1000, &rest[..n]).unwrap();
    } else {
        let n = data.len().min(layout.stat_queue_size as usize);
        buf.write(stat, &data[..n]).unwrap();
    }
    let cfg = GspConfig {
        reply_timeout: Duration::from_micros(40),
        send_timeout: Duration::from_micros(40),
        poll_interval: Duration::from_micros(1),
        ..GspConfig::default()
    };
    let mut rpc = GspRpc::new(
        q,
        NullMmio,
        StepClock::default(),
        nvbare_core::gsp::events::NoHandler,
        cfg,
    );
    for _ in 0..4 {
        let _ = rpc.poll_events();
    }
    let mut params = vec![0u8; (mode as usize >> 2) * 300];
    let _ = rpc.rm_control(Handle(1), Handle(1), 0x2080_0110, &mut params);
    let _ = rpc.wait_event(0x1001, Duration::from_micros(20));
    let _ = rpc.get_gsp_static_info();
    while rpc.take_events().pop().is_some() {}
});
