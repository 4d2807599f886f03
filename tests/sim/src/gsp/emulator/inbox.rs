//! The command queue as GSP-RM reads it: elements, checksums, continuation records.

use super::*;

impl Inner {
    /// Reads one command record; `Ok(false)` when the queue is empty.
    pub(super) fn consume_one(&mut self, core: &mut SimCore) -> Result<bool, String> {
        let wp = self.shm_u32(core, self.cmd_off + 16)?;
        if wp >= self.cmd_count {
            // msgqRxGetReadAvailable: a write pointer out of range means nothing to read;
            // GSP-RM reads on once the CPU writes a good one.
            self.pointer_error(
                CMD_WRITE_PTR,
                format!(
                    "command queue writePtr {wp} out of range ({} elements): nothing read",
                    self.cmd_count
                ),
            );
            return Ok(false);
        }
        self.pointer_errors[CMD_WRITE_PTR] = None;
        let avail = (wp + self.cmd_count - self.cmd_read) % self.cmd_count;
        if avail == 0 {
            return Ok(false);
        }
        let start = self.cmd_read;
        let mut rec = vec![0u8; PAGE];
        self.read_elems(core, start, 1, &mut rec)?;
        let eh = GSP_MSG_QUEUE_ELEMENT::read_from_prefix(&rec)
            .map_err(|_| "element header")?
            .0;
        let ec = eh.elemCount;
        if ec == 0 || ec > 16 || ec > avail {
            self.stats.errors.push(format!(
                "command at {start}: elemCount {ec} ({avail} available)"
            ));
            self.advance(core, 1)?;
            return Ok(true);
        }
        if ec > 1 {
            for _ in 1..ec {
                rec.extend_from_slice(&ZERO_PAGE);
            }
            self.read_elems(core, (start + 1) % self.cmd_count, ec - 1, &mut rec[PAGE..])?;
        }
        self.advance(core, ec)?;
        self.stats.records += 1;
        self.stats.cmd_starts.insert(start);
        if start + ec > self.cmd_count {
            self.stats.cmd_wraps.insert((start, ec));
        }
        let hdr = rpc_message_header_v03_00::read_from_bytes(&rec[ELEM_HDR..ELEM_HDR + RPC_HDR])
            .map_err(|_| "rpc header")?;
        let len = hdr.length as usize;
        if len < RPC_HDR || ELEM_HDR + len > rec.len() {
            self.stats
                .errors
                .push(format!("command seq {}: rpc length {len}", eh.seqNum));
            return Ok(true);
        }
        let r570 = checksum(&rec[..(ELEM_HDR + len).next_multiple_of(8)]);
        if r570 != 0 {
            self.stats
                .errors
                .push(format!("command seq {}: bad checksum", eh.seqNum));
            return Ok(true);
        }
        if rec[ELEM_HDR + len..]
            .chunks(PAGE)
            .any(|c| c != &ZERO_PAGE[..c.len()])
        {
            self.stats.errors.push(format!(
                "command seq {}: element tail not zero (r535's whole-element checksum would fail)",
                eh.seqNum
            ));
        }
        if eh.seqNum != self.rx_seq {
            // How GSP-RM takes a wrong number is not public. The queue's one public receiver
            // (GspMsgQueueReceiveStatus) drops an older message and refuses a newer one:
            // the message is dropped unanswered here, and the count resynchronises on a
            // newer number so that what follows is read.
            let older = (eh.seqNum.wrapping_sub(self.rx_seq) as i32) < 0;
            self.stats.errors.push(format!(
                "command seq {} where {} was expected: {} message dropped",
                eh.seqNum,
                self.rx_seq,
                if older { "an old" } else { "a" }
            ));
            if !older {
                self.rx_seq = eh.seqNum.wrapping_add(1);
            }
            return Ok(true);
        }
        self.rx_seq = eh.seqNum.wrapping_add(1);
        let body = rec[ELEM_HDR + RPC_HDR..ELEM_HDR + len].to_vec();
        if hdr.signature != NV_VGPU_MSG_SIGNATURE_VALID {
            // rpc_headers.h: an invalid message (bad signature) is answered with the
            // signature made valid and NV_VGPU_MSG_RESULT_RPC_INVALID_MESSAGE_FORMAT,
            // function unchanged; it is not executed.
            self.stats.errors.push(format!(
                "command seq {}: signature {:#x} (not 'VRPC' {NV_VGPU_MSG_SIGNATURE_VALID:#x}): \
                 answered RPC_INVALID_MESSAGE_FORMAT",
                eh.seqNum, hdr.signature
            ));
            self.abandon_partial();
            self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
            return Ok(true);
        }
        if hdr.header_version != NV_VGPU_MSG_HEADER_VERSION {
            // Only 3.0 (NV_VGPU_MSG_HEADER_VERSION_MAJOR_TOT/_MINOR_TOT) is written by RM;
            // what GSP-RM does with another is not public: dropped unanswered.
            self.stats.errors.push(format!(
                "command seq {}: header_version {:#x} (r570 writes {NV_VGPU_MSG_HEADER_VERSION:#x}): \
                 dropped",
                eh.seqNum, hdr.header_version
            ));
            self.abandon_partial();
            return Ok(true);
        }
        self.on_record(core, hdr, body);
        Ok(true)
    }

    pub(super) fn read_elems(
        &self,
        core: &SimCore,
        start: u32,
        n: u32,
        dst: &mut [u8],
    ) -> Result<(), String> {
        for i in 0..n as usize {
            let idx = (start as usize + i) % self.cmd_count as usize;
            let off = self.cmd_off + ENTRY_OFF as usize + idx * PAGE;
            self.shm_read(core, off, &mut dst[i * PAGE..(i + 1) * PAGE])?;
        }
        Ok(())
    }

    pub(super) fn advance(&mut self, core: &SimCore, n: u32) -> Result<(), String> {
        self.cmd_read = (self.cmd_read + n) % self.cmd_count;
        self.shm_write(
            core,
            self.stat_off + RX_HDR_OFF as usize,
            &self.cmd_read.to_le_bytes(),
        )
    }

    /// Bytes the whole RPC message of `function` should have (after the RPC header), from its
    /// declared params size; `None` for functions without one.
    pub(super) fn expected_body(&self, function: u32, body: &[u8]) -> Option<usize> {
        let u32_at = |o: usize| {
            body.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        match function {
            NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC => Some(32 + u32_at(20)? as usize),
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL => {
                let h = rpc::rm_control_header_size(self.cfg.abi);
                Some(h + u32_at(16)? as usize)
            }
            _ => None,
        }
    }

    pub(super) fn on_record(
        &mut self,
        core: &mut SimCore,
        hdr: rpc_message_header_v03_00,
        body: Vec<u8>,
    ) {
        if hdr.function == NV_VGPU_MSG_FUNCTION_CONTINUATION_RECORD {
            self.stats.continuations_received += 1;
            let Some(mut p) = self.partial.take() else {
                self.stats
                    .errors
                    .push("continuation record with nothing to continue".into());
                return;
            };
            p.body.extend_from_slice(&body);
            if p.body.len() >= p.expected {
                p.body.truncate(p.expected);
                self.dispatch(core, p.header, p.body);
            } else {
                self.partial = Some(p);
            }
            return;
        }
        self.abandon_partial();
        let full = hdr.length as usize == RPC_MAX;
        let expected = self.expected_body(hdr.function, &body);
        match expected {
            Some(e) if e > body.len() && full => {
                self.partial = Some(Partial {
                    header: hdr,
                    body,
                    expected: e,
                })
            }
            // An async RPC without a size field (SET_REGISTRY): a full record means more to
            // come; the total is in the registry table header.
            None if full && hdr.function == NV_VGPU_MSG_FUNCTION_SET_REGISTRY => {
                let e = body
                    .get(0..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .unwrap_or(0);
                self.partial = Some(Partial {
                    header: hdr,
                    body,
                    expected: e,
                });
            }
            _ => self.dispatch(core, hdr, body),
        }
    }

    /// Drops a message whose continuation records stopped coming, as an error.
    pub(super) fn abandon_partial(&mut self) {
        if let Some(p) = self.partial.take() {
            self.stats.errors.push(format!(
                "{} interrupted after {} of {} bytes",
                rpc::FunctionName(p.header.function),
                p.body.len(),
                p.expected
            ));
        }
    }
}
