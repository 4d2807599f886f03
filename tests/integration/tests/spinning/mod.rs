//! The spinning fixture kernel (`spin_forever`) on a simulated GPU, for the tests that need it.

use nvbare_core::device::Device;
use nvbare_sim::backend::SimBackend;
use nvbare_sim::fifo::ChannelState;

/// Sets the flag the compute channel's spinning `spin_forever` polls (the address the hung
/// channel's state names), as another agent would: the kernel then finishes. Returns the flag's
/// GPU VA.
pub fn finish_spinning_kernel(dev: &Device<SimBackend>) -> u64 {
    let fifo = dev.with_backend(|b| b.fifo()).unwrap();
    let chans = dev.channel_handles().unwrap();
    let chid = dev.with_backend(|b| b.chid(chans[0]).unwrap()).unwrap();
    let what = {
        let f = nvbare_sim::fifo::lock(&fifo);
        let ch = f.channel(chid).unwrap();
        match (ch.running_grid(), ch.state()) {
            (Some(what), ChannelState::Running | ChannelState::Hung { .. }) => what.to_string(),
            (_, s) => panic!("no spinning grid: {s:?}"),
        }
    };
    let va = u64::from_str_radix(what.rsplit("0x").next().unwrap(), 16)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    dev.with_backend(|b| b.write_gpu(va, &1u32.to_le_bytes()))
        .unwrap()
        .unwrap();
    va
}
