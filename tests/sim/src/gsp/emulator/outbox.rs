//! The status queue as GSP-RM writes it: replies, events, and the faults injected into them.

use super::*;

impl Inner {
    pub(super) fn reply(
        &mut self,
        hdr: rpc_message_header_v03_00,
        rpc_result: u32,
        payload: Vec<u8>,
    ) {
        // Whether GSP-RM echoes the request's `sequence` is not public (RM never sets it for
        // GSP and matches by function): unknown.
        let sequence = if self.unknowns.hard("gsp.reply.sequence_zero") {
            0
        } else {
            hdr.sequence
        };
        // GSP-RM sends events whenever it has them; one may come before any reply.
        if self.unknowns.hard("gsp.event_before_reply") {
            self.queue_event_inner(&EmuEvent::Raw {
                function: NV_VGPU_MSG_EVENT_GSP_POST_NOCAT_RECORD,
                payload: vec![0; 16],
            });
        }
        let out = Out {
            function: hdr.function,
            sequence,
            rpc_result,
            payload,
            is_reply: true,
        };
        let mut wrong = None;
        match self.faults.front().copied() {
            Some(Fault::DropReply) => {
                self.faults.pop_front();
                return;
            }
            Some(Fault::LateReply) => {
                self.faults.pop_front();
                self.held_reply = Some(out);
                return;
            }
            Some(Fault::DuplicateReply) => {
                self.faults.pop_front();
                self.outbox.push_back(out.clone());
            }
            Some(Fault::WrongFunction(f)) => {
                self.faults.pop_front();
                wrong = Some(f);
            }
            _ => {}
        }
        if let Some(h) = self.held_reply.take() {
            self.outbox.push_back(h);
        }
        let mut out = out;
        if let Some(f) = wrong {
            out.function = f;
        }
        self.outbox.push_back(out);
    }

    /// Turns what the RM reports (channel resets) into the events GSP-RM sends: for an MMU
    /// fault MMU_FAULT_QUEUED first, then the Xid (OS_ERROR_LOG) and RC_TRIGGERED.
    pub(super) fn drain_notices(&mut self) {
        for n in self.rm.take_notices() {
            match n {
                RmNotice::Rc {
                    chid,
                    code,
                    engine_type,
                    mmu_fault,
                    reason,
                } => {
                    if mmu_fault.is_some() {
                        self.queue_event_inner(&EmuEvent::MmuFaultQueued);
                    }
                    self.queue_event_inner(&EmuEvent::OsErrorLog {
                        xid: code,
                        chid,
                        text: reason,
                    });
                    let (addr, ty) = mmu_fault.unwrap_or((0, 0));
                    let rc = rpc_rc_triggered_v17_02 {
                        nv2080EngineType: engine_type,
                        chid,
                        exceptType: code,
                        // RC_NOTIFIER_SCOPE_TSG: the whole channel group goes.
                        scope: 1,
                        mmuFaultAddrLo: addr as u32,
                        mmuFaultAddrHi: (addr >> 32) as u32,
                        mmuFaultType: ty,
                        ..Default::default()
                    };
                    self.queue_event_inner(&EmuEvent::Raw {
                        function: NV_VGPU_MSG_EVENT_RC_TRIGGERED,
                        payload: rc.as_bytes().to_vec(),
                    });
                }
            }
        }
    }

    /// Writes as much of the outbox as fits, record by record (a message larger than the
    /// status queue flows as the driver consumes it).
    pub(super) fn flush(&mut self, core: &mut SimCore) {
        loop {
            if self.records.is_empty() {
                let Some(out) = self.outbox.pop_front() else {
                    return;
                };
                if !out.is_reply {
                    self.stats.events_sent += 1;
                }
                self.split(&out);
            }
            let Some((_, chunk)) = self.records.front() else {
                return;
            };
            let need = (ELEM_HDR + RPC_HDR + chunk.len()).div_ceil(PAGE) as u32;
            // msgqTxGetFreeSpace: a read pointer out of range leaves no free space, so
            // nothing is written until the CPU repairs it.
            let free = match self.stat_free(core) {
                Ok(f) => f,
                Err(e) => {
                    self.pointer_error(STAT_READ_PTR, e);
                    return;
                }
            };
            self.pointer_errors[STAT_READ_PTR] = None;
            if need > free {
                return;
            }
            let Some((hdr, chunk)) = self.records.pop_front() else {
                return;
            };
            if let Err(e) = self.write_message(core, &hdr, &chunk) {
                self.stats.errors.push(e);
                self.crashed = true;
                return;
            }
        }
    }

    /// Splits a message into its first record and continuation records.
    pub(super) fn split(&mut self, out: &Out) {
        let total = RPC_HDR + out.payload.len();
        let first = total.min(RPC_MAX);
        let mut hdr = rpc_message_header_v03_00 {
            header_version: NV_VGPU_MSG_HEADER_VERSION,
            signature: NV_VGPU_MSG_SIGNATURE_VALID,
            length: first as u32,
            function: out.function,
            rpc_result: out.rpc_result,
            rpc_result_private: out.rpc_result,
            sequence: out.sequence,
            spare: 0,
        };
        let (p1, mut rest) = out.payload.split_at(first - RPC_HDR);
        self.records.push_back((hdr, p1.to_vec()));
        while !rest.is_empty() {
            let (c, r) = rest.split_at(rest.len().min(RPC_MAX - RPC_HDR));
            hdr.function = NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD;
            hdr.length = (RPC_HDR + c.len()) as u32;
            self.records.push_back((hdr, c.to_vec()));
            rest = r;
        }
    }

    pub(super) fn stat_free(&self, core: &SimCore) -> Result<u32, String> {
        let rp = self.shm_u32(core, self.cmd_off + self.cmd_rx_hdr_off)?;
        if rp >= self.stat_count {
            return Err(format!(
                "CPU status readPtr {rp} out of range (status queue of {} elements)",
                self.stat_count
            ));
        }
        Ok((rp + self.stat_count - self.stat_write - 1) % self.stat_count)
    }

    /// Records a problem with queue pointer `which` once however often it is polled (a new
    /// value, or the same after a good one, is a new error).
    pub(super) fn pointer_error(&mut self, which: usize, e: String) {
        if self.pointer_errors[which].as_ref() != Some(&e) {
            self.stats.errors.push(e.clone());
            self.pointer_errors[which] = Some(e);
        }
    }

    pub(super) fn write_message(
        &mut self,
        core: &mut SimCore,
        rpc_hdr: &rpc_message_header_v03_00,
        payload: &[u8],
    ) -> Result<(), String> {
        let mut rpc_hdr = *rpc_hdr;
        let len = RPC_HDR + payload.len();
        let ec = (ELEM_HDR + len).div_ceil(PAGE) as u32;
        let mut declared_ec = ec;
        let (mut corrupt_sum, mut repeat, mut bad_wp) = (false, false, false);
        let seq;
        if let Some(s) = self.swap_second.take() {
            // Second of a swapped pair: its number was reserved by the first.
            seq = s;
        } else {
            if self.faults.front() == Some(&Fault::SwapNextTwo) {
                self.faults.pop_front();
                seq = self.tx_seq.wrapping_add(1);
                self.swap_second = Some(self.tx_seq);
                self.tx_seq = self.tx_seq.wrapping_add(2);
            } else {
                seq = self.tx_seq;
                self.tx_seq = self.tx_seq.wrapping_add(1);
            }
            let f = self.faults.front().copied();
            match f {
                Some(Fault::CorruptChecksum) => corrupt_sum = true,
                Some(Fault::RepeatSeqNum) => repeat = true,
                Some(Fault::OversizedLength(l)) => rpc_hdr.length = l,
                Some(Fault::BadElementCount(n)) => declared_ec = n,
                Some(Fault::CorruptWritePtr) => bad_wp = true,
                _ => {}
            }
            if matches!(
                f,
                Some(
                    Fault::CorruptChecksum
                        | Fault::RepeatSeqNum
                        | Fault::OversizedLength(_)
                        | Fault::BadElementCount(_)
                        | Fault::CorruptWritePtr
                )
            ) {
                self.faults.pop_front();
            }
        }
        let mut eh = GSP_MSG_QUEUE_ELEMENT {
            seqNum: seq,
            elemCount: declared_ec,
            ..Default::default()
        };
        let mut bytes = Vec::with_capacity(ec as usize * PAGE);
        bytes.extend_from_slice(eh.as_bytes());
        bytes.extend_from_slice(rpc_hdr.as_bytes());
        bytes.extend_from_slice(payload);
        let sum_len = (ELEM_HDR + (rpc_hdr.length as usize).min(16 * PAGE)).next_multiple_of(8);
        let pad = ec as usize * PAGE - bytes.len();
        bytes.extend_from_slice(&ZERO_PAGE[..pad % PAGE]);
        for _ in 0..pad / PAGE {
            bytes.extend_from_slice(&ZERO_PAGE);
        }
        let sum = checksum(&bytes[..sum_len.min(bytes.len())]);
        eh.checkSum = if corrupt_sum { sum ^ 0x5a5a } else { sum };
        bytes[..ELEM_HDR].copy_from_slice(eh.as_bytes());
        let copies = if repeat { 2 } else { 1 };
        for _ in 0..copies {
            let start = self.stat_write;
            for (i, el) in bytes.chunks(PAGE).enumerate() {
                let idx = (start as usize + i) % self.stat_count as usize;
                let off = self.stat_off + ENTRY_OFF as usize + idx * PAGE;
                self.shm_write(core, off, el)?;
            }
            if start + ec > self.stat_count {
                self.stats.stat_wraps.insert((start, ec));
            }
            self.stat_write = (start + ec) % self.stat_count;
            let wp = if bad_wp {
                self.stat_count + 7
            } else {
                self.stat_write
            };
            self.shm_write(core, self.stat_off + 16, &wp.to_le_bytes())?;
            self.stats.messages_sent += 1;
        }
        if bad_wp {
            // The driver sees the bad pointer once; the next message repairs it.
            self.stats
                .errors
                .push("injected: status writePtr out of range".into());
        }
        Ok(())
    }
}
