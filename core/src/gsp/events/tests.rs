use super::*;
use core::mem::{offset_of, size_of};

#[test]
fn a_full_queue_makes_room_for_a_reset_but_not_for_chatter() {
    let mut q = EventQueue::default();
    for _ in 0..EVENT_QUEUE_LEN + 3 {
        q.push(GspEvent::PostNocatRecord { len: 16 });
    }
    assert_eq!((q.len(), q.dropped()), (EVENT_QUEUE_LEN, 3));
    q.push(GspEvent::MmuFaultQueued);
    assert_eq!((q.len(), q.dropped()), (EVENT_QUEUE_LEN, 4));
    assert_eq!(q.iter().last(), Some(&GspEvent::MmuFaultQueued));
    assert_eq!(
        q.iter().filter(|e| **e == GspEvent::MmuFaultQueued).count(),
        1
    );
    // A queue full of resets keeps the first ones.
    let mut q = EventQueue::default();
    for _ in 0..EVENT_QUEUE_LEN + 1 {
        q.push(GspEvent::MmuFaultQueued);
    }
    assert_eq!((q.len(), q.dropped()), (EVENT_QUEUE_LEN, 1));
}

#[test]
fn abi_layouts() {
    // gsp_abi_check.c (570.144) and g_rpc-structures.h.
    assert_eq!(offset_of!(rpc_os_error_log_v17_00, errString), 12);
    assert_eq!(
        offset_of!(rpc_os_error_log_v17_00, preemptiveRemovalPreviousXid),
        268
    );
    assert_eq!(size_of::<rpc_os_error_log_v17_00>(), 272);
    assert_eq!(
        offset_of!(rpc_rc_triggered_v17_02, partitionAttributionId),
        24
    );
    assert_eq!(offset_of!(rpc_rc_triggered_v17_02, mmuFaultAddrLo), 28);
    assert_eq!(offset_of!(rpc_rc_triggered_v17_02, mmuFaultAddrHi), 32);
    assert_eq!(offset_of!(rpc_rc_triggered_v17_02, mmuFaultType), 36);
    assert_eq!(offset_of!(rpc_rc_triggered_v17_02, bCallbackNeeded), 40);
    assert_eq!(offset_of!(rpc_rc_triggered_v17_02, rcJournalBufferSize), 44);
    assert_eq!(size_of::<rpc_rc_triggered_v17_02>(), 48);
    assert_eq!(offset_of!(rpc_post_event_v17_00, info16), 16);
    assert_eq!(offset_of!(rpc_post_event_v17_00, status), 20);
    assert_eq!(offset_of!(rpc_post_event_v17_00, eventDataSize), 24);
    assert_eq!(offset_of!(rpc_post_event_v17_00, bNotifyList), 28);
    assert_eq!(size_of::<rpc_post_event_v17_00>(), 32);
    assert_eq!(offset_of!(rpc_run_cpu_sequencer_v17_00, regSaveArea), 8);
    assert_eq!(size_of::<rpc_run_cpu_sequencer_v17_00>(), 40);
    assert_eq!(size_of::<rpc_ucode_libos_print_v1E_08>(), 8);
    assert_eq!(size_of::<rpc_fecs_error_v26_02>(), 8);
    assert_eq!(size_of::<rpc_recovery_action_v28_01>(), 8);
}

#[test]
fn parses_rc_and_xid_and_rejects_short_payloads() {
    let rc = rpc_rc_triggered_v17_02 {
        nv2080EngineType: 1,
        chid: 7,
        exceptType: 31,
        mmuFaultAddrLo: 0x1000,
        mmuFaultAddrHi: 0x2,
        bCallbackNeeded: 1,
        ..Default::default()
    };
    let b = rc.as_bytes();
    match GspEvent::parse(NV_VGPU_MSG_EVENT_RC_TRIGGERED, 0, b.len(), &b) {
        GspEvent::RcTriggered(r) => {
            assert_eq!(r.chid, 7);
            assert_eq!(r.except_type, 31);
            assert_eq!(r.mmu_fault_addr, 0x2_0000_1000);
            assert!(r.callback_needed);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(
        GspEvent::parse(NV_VGPU_MSG_EVENT_RC_TRIGGERED, 0, 20, &&b[..20]),
        GspEvent::Malformed {
            function: NV_VGPU_MSG_EVENT_RC_TRIGGERED,
            len: 20,
            need: 48
        }
    );
    let mut xid = [0u8; 272];
    xid[0] = 13;
    xid[12..17].copy_from_slice(b"oops\x01");
    match GspEvent::parse(NV_VGPU_MSG_EVENT_OS_ERROR_LOG, 0, 272, &&xid[..]) {
        GspEvent::OsErrorLog(l) => {
            assert_eq!(l.except_type, 13);
            assert_eq!(l.text.as_str(), "oops?");
            assert_eq!(l.preemptive_removal_previous_xid, Some(0));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn queue_keeps_first_and_counts_dropped() {
    let mut q = EventQueue::default();
    for i in 0..EVENT_QUEUE_LEN as u32 + 5 {
        q.push(GspEvent::Other {
            function: 0x1000 + i,
            len: 0,
        });
    }
    assert_eq!(q.len(), EVENT_QUEUE_LEN);
    assert_eq!(q.dropped(), 5);
    assert_eq!(
        q.pop(),
        Some(GspEvent::Other {
            function: 0x1000,
            len: 0
        })
    );
}

#[test]
fn sequencer_script_decodes_and_stops_at_garbage() {
    let mut p = [0u8; 40 + 4 * 12];
    let h = rpc_run_cpu_sequencer_v17_00 {
        bufferSizeDWord: 64,
        cmdIndex: 12,
        ..Default::default()
    };
    p[..40].copy_from_slice(h.as_bytes());
    let cmds: [u32; 12] = [0, 0x100, 5, 3, 10, 2, 0x200, 1, 1, 100, 0, 9];
    for (i, c) in cmds.iter().enumerate() {
        p[40 + i * 4..44 + i * 4].copy_from_slice(&c.to_le_bytes());
    }
    let parsed = GspEvent::parse(NV_VGPU_MSG_EVENT_GSP_RUN_CPU_SEQUENCER, 0, p.len(), &&p[..]);
    let ps: &[u8] = &p;
    let ev = RawEvent::new(0x1002, 0, p.len(), &parsed, &ps);
    let v: heapless::Vec<_, 8> = ev.sequencer().unwrap().collect();
    assert_eq!(
        v[0],
        Ok(SeqCommand::RegWrite {
            addr: 0x100,
            val: 5
        })
    );
    assert_eq!(v[1], Ok(SeqCommand::DelayUs(10)));
    assert_eq!(
        v[2],
        Ok(SeqCommand::RegPoll {
            addr: 0x200,
            mask: 1,
            val: 1,
            timeout: 100,
            error: 0
        })
    );
    assert!(v[3].is_err(), "opcode 9 is unknown");
    assert_eq!(v.len(), 4);
}
