//! GSP_RUN_CPU_SEQUENCER scripts as the boot code runs them: the event payload (header,
//! opcodes, operands) and every register value the commands read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvbare_core::falcon::FalconHal;
use nvbare_core::hal::Clock;
use nvbare_core::gsp::boot::sequencer::BootEvents;
use nvbare_core::gsp::events::{EventContext, EventHandler, GspEvent, RawEvent};
use nvbare_fuzz::{JumpClock, ScriptMmio};

const RUN_CPU_SEQUENCER: u32 = nvbare_core::gsp::events::NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    // First half: the event payload; second half: what the registers read.
    let (payload, regs) = data.split_at(data.len() / 2);
    let parsed = GspEvent::parse(RUN_CPU_SEQUENCER, 0, payload.len(), &payload);
    let ev = RawEvent::new(RUN_CPU_SEQUENCER, 0, payload.len(), &parsed, &payload);
    let bar0 = ScriptMmio::new(regs);
    let clock = JumpClock::default();
    let hal = if data[0] & 1 == 0 {
        FalconHal::Ga102
    } else {
        FalconHal::Gh100
    };
    let mut h = BootEvents::new(hal, 0x1_2345_6000, 1);
    let _ = h.on_event(
        EventContext {
            bar0: &bar0,
            clock: &clock,
            // The longest wait that receives scripts at boot (GSP_INIT_DONE).
            deadline: clock.now() + nvbare_core::gsp::boot::INIT_DONE_TIMEOUT,
        },
        &ev,
    );
    let _ = (h.scripts_run(), h.commands_run(), h.last_error());
});
