use super::*;
use crate::gsp::GspError;
use crate::gsp::events::NoHandler;
use crate::gsp::msgq::MsgQueue;
use crate::hal::Clock;
use crate::rm::RmAbi;
use core::mem::{offset_of, size_of};
use core::time::Duration;

#[test]
fn abi_layouts() {
    // g_rpc-message-header.h; gsp_abi_check.c (570.144).
    assert_eq!(size_of::<rpc_message_header_v03_00>(), RPC_HEADER_SIZE);
    assert_eq!(offset_of!(rpc_message_header_v03_00, length), 8);
    assert_eq!(offset_of!(rpc_message_header_v03_00, function), 12);
    assert_eq!(offset_of!(rpc_message_header_v03_00, rpc_result), 16);
    assert_eq!(offset_of!(rpc_message_header_v03_00, sequence), 24);
    assert_eq!(size_of::<rpc_gsp_rm_alloc_v03_00>(), 32);
    assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, status), 16);
    assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, paramsSize), 20);
    assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, flags), 24);
    assert_eq!(offset_of!(rpc_gsp_rm_alloc_v03_00, reserved), 28);
    // r570: params at 24; r580: at 40.
    assert_eq!(size_of::<r570::rpc_gsp_rm_control_v03_00>(), 24);
    assert_eq!(offset_of!(r570::rpc_gsp_rm_control_v03_00, status), 12);
    assert_eq!(offset_of!(r570::rpc_gsp_rm_control_v03_00, flags), 20);
    assert_eq!(size_of::<r580::rpc_gsp_rm_control_v03_00>(), 40);
    assert_eq!(
        offset_of!(r580::rpc_gsp_rm_control_v03_00, rmapiRpcFlags),
        20
    );
    assert_eq!(offset_of!(r580::rpc_gsp_rm_control_v03_00, rmctrlFlags), 24);
    assert_eq!(
        offset_of!(r580::rpc_gsp_rm_control_v03_00, rmctrlAccessRight),
        28
    );
    assert_eq!(offset_of!(r580::rpc_gsp_rm_control_v03_00, reserved0), 32);
    assert_eq!(rm_control_header_size(RmAbi::R570), 24);
    assert_eq!(rm_control_header_size(RmAbi::R580), 40);
    assert_eq!(size_of::<NVOS00_PARAMETERS_v03_00>(), 16);
    assert_eq!(size_of::<rpc_unloading_guest_driver_v1F_07>(), 8);
    assert_eq!(offset_of!(rpc_unloading_guest_driver_v1F_07, newLevel), 4);
    assert_eq!(size_of::<NV0000_ALLOC_PARAMETERS>(), 120);
    assert_eq!(offset_of!(NV0000_ALLOC_PARAMETERS, pOsPidInfo), 112);
}

/// A GSP that sends a new event each time the CPU publishes its read pointer: a call with
/// a 1 ms virtual timeout ends at its deadline, having read a bounded number of messages.
#[test]
fn an_event_flood_ends_the_wait_at_its_deadline() {
    use crate::gsp::events::NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD;
    use crate::gsp::msgq::SharedMemLayout;
    use crate::gsp::testutil::{Doorbell, FloodDma, StepClock};
    let dma = FloodDma::new(NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD);
    let q = MsgQueue::new(&dma, SharedMemLayout::default()).unwrap();
    dma.start();
    let cfg = GspConfig {
        reply_timeout: Duration::from_millis(1),
        poll_interval: Duration::from_micros(100),
        ..GspConfig::default()
    };
    let ring = q.rx_msg_count() as u64;
    let mut rpc = GspRpc::new(q, Doorbell::default(), StepClock::default(), NoHandler, cfg);
    let mut fixed = [0u8; 24];
    let e = rpc
        .call(
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL,
            &mut fixed,
            &mut [],
            |_, _| true,
        )
        .unwrap_err();
    let GspError::Flood {
        function, records, ..
    } = e
    else {
        panic!("expected a flood error, got {e:?}");
    };
    assert_eq!(function, NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL);
    // One pump per poll: 1 ms / 100 µs polls, plus the first and the one after the
    // deadline, each at most a ring's worth.
    assert!(records <= 12 * ring, "{records} messages handled");
    assert!(records >= ring, "the flood was read ({records})");
    assert!(rpc.clock().now() <= Duration::from_millis(2));
    extern crate std;
    use std::string::ToString;
    assert!(e.to_string().contains("flooding"), "{e}");
    // Polling without a wait takes at most one ring's worth too.
    let before = dma.sent.get();
    rpc.poll_events().unwrap();
    assert!(
        dma.sent.get() - before <= ring,
        "{}",
        dma.sent.get() - before
    );
    assert!(
        rpc.events().dropped() > 0,
        "queued events beyond the queue are counted"
    );
}

#[test]
fn names() {
    assert_eq!(function_name(76), Some("GSP_RM_CONTROL"));
    assert_eq!(function_name(103), Some("GSP_RM_ALLOC"));
    assert_eq!(function_name(71), Some("CONTINUATION_RECORD"));
    assert_eq!(function_name(226), Some("CTRL_EXEC_PARTITIONS_EXPORT"));
    assert_eq!(function_name(0x1001), Some("GSP_INIT_DONE"));
    assert_eq!(function_name(0x101c), Some("GSP_LOCKDOWN_NOTICE"));
    assert_eq!(function_name(0x1022), Some("RECOVERY_ACTION"));
    assert_eq!(function_name(0x1023), None);
    assert_eq!(function_name(0x1000), None);
    assert_eq!(
        rpc_result_name(0xff10_0001),
        Some("NV_VGPU_MSG_RESULT_RPC_UNKNOWN_FUNCTION")
    );
    assert_eq!(rpc_result_name(0x1f), Some("NV_ERR_INVALID_ARGUMENT"));
}
