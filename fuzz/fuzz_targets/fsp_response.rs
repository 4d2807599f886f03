//! Everything the driver reads from the FSP: the RM channel's queue registers, the EMEM words
//! of its answer, and the MCTP/NVDM command response in them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::gsp::boot::fsp::{Fsp, parse_response};
use nvbare_fuzz::{JumpClock, ScriptMmio};

fuzz_target!(|data: &[u8]| {
    let Some((&sent, rest)) = data.split_first() else {
        return;
    };
    let _ = parse_response(rest, sent);
    // The same bytes as what the FSP's registers return, through a whole command.
    let bar0 = ScriptMmio::new(rest);
    let clock = JumpClock::default();
    let fsp = Fsp::new(&bar0, &clock);
    let _ = fsp.command(sent, &rest[..rest.len().min(64)]);
});
