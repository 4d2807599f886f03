//! Messages to the FSP over its EMEM channel 0 (`kern_fsp.c`, `kern_fsp_gh100.c`).
//!
//! A packet is `[MCTP transport header][MCTP message header with the NVDM type][payload]`,
//! written dword by dword through `NV_PFSP_EMEMD(0)` with `EMEMC(0)` auto-incrementing from
//! offset 0; then `QUEUE_TAIL(0)` = offset of the last dword and `QUEUE_HEAD(0)` = 0 (written
//! last: it interrupts the FSP). The FSP answers the same way on the message queue
//! (`MSGQ_HEAD/TAIL(0)`); the CPU acknowledges with TAIL = HEAD. The answer to a command is an
//! `NVDM_TYPE_FSP_RESPONSE` carrying `NVDM_PAYLOAD_COMMAND_RESPONSE`; its `errorCode` is
//! checked (tinygrad never reads it).

use core::fmt;
use core::time::Duration;

use zerocopy::FromBytes;

use crate::hal::{Clock, Mmio, PollError, poll_until};
use crate::regs::RegisterArray;
use crate::regs::fsp::*;

use super::abi::{
    MCTP_MSG_HEADER_TYPE_VENDOR_PCI, MCTP_MSG_HEADER_VENDOR_ID_NV, NVDM_PAYLOAD_COMMAND_RESPONSE,
    NVDM_TYPE_FSP_RESPONSE, fsp_error_name, mctp_header, nvdm_header,
};

/// How long the channel may stay busy before a send (`kfspPollForCanSend`: the default GPU
/// timeout).
pub const FSP_SEND_TIMEOUT: Duration = Duration::from_secs(4);
/// How long the FSP may take to answer (`kfspSetResponseTimeout`: the default GPU timeout).
pub const FSP_RESPONSE_TIMEOUT: Duration = Duration::from_secs(4);

/// Why a message to the FSP failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FspError {
    /// The channel stayed busy or no answer came.
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// The message does not fit one packet.
    TooLarge {
        /// Bytes of the packet.
        len: usize,
    },
    /// EMEMC's offset did not advance with the data (auto-increment broken: not an FSP?).
    EmemOffset {
        /// Dwords written or read.
        expected: u32,
        /// Dwords EMEMC moved.
        got: u32,
    },
    /// The answer is malformed.
    BadResponse(&'static str),
    /// The FSP refused the command.
    Rejected {
        /// `commandNvdmType` of the answer.
        command: u32,
        /// `errorCode` (`FSP_ERR_*`).
        error_code: u32,
        /// `taskId`.
        task_id: u32,
    },
}

impl fmt::Display for FspError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FspError::Timeout { what, waited } => write!(
                f,
                "FSP: timed out after {waited:?} waiting for {what}; the FSP may be hung: \
                 reset the GPU"
            ),
            FspError::TooLarge { len } => write!(
                f,
                "FSP message of {len} bytes does not fit the {FSP_EMEM_CHANNEL_RM_SIZE}-byte \
                 channel"
            ),
            FspError::EmemOffset { expected, got } => write!(
                f,
                "FSP EMEM offset moved by {got} dwords for {expected} transferred"
            ),
            FspError::BadResponse(w) => write!(f, "FSP answer malformed: {w}"),
            FspError::Rejected {
                command,
                error_code,
                task_id,
            } => {
                write!(
                    f,
                    "FSP rejected NVDM command {command:#x} (task {task_id}): "
                )?;
                match fsp_error_name(error_code) {
                    Some(n) => write!(f, "{n} ({error_code:#x})")?,
                    None => write!(f, "error {error_code:#x}")?,
                }
                write!(
                    f,
                    "; check the FMC image and boot arguments, or whether a GSP is already \
                     running (reset the GPU)"
                )
            }
        }
    }
}

/// The FSP's RM channel.
#[derive(Debug)]
pub struct Fsp<'a, M: ?Sized, C: ?Sized> {
    bar0: &'a M,
    clock: &'a C,
}

const CH: u32 = FSP_EMEM_CHANNEL_RM;

impl<'a, M: Mmio + ?Sized, C: Clock + ?Sized> Fsp<'a, M, C> {
    /// The channel of the FSP behind `bar0`.
    pub fn new(bar0: &'a M, clock: &'a C) -> Self {
        Fsp { bar0, clock }
    }

    fn reg(&self, off: Result<usize, crate::hal::HalError>) -> u32 {
        off.map(|o| self.bar0.read32(o)).unwrap_or(u32::MAX)
    }

    fn write(&self, off: Result<usize, crate::hal::HalError>, v: u32) {
        if let Ok(o) = off {
            self.bar0.write32(o, v);
        }
    }

    fn poll(
        &self,
        t: Duration,
        what: &'static str,
        mut c: impl FnMut() -> bool,
    ) -> Result<(), FspError> {
        let r: Result<(), PollError> =
            poll_until(self.clock, t, Duration::from_micros(10), what, || {
                Ok(c().then_some(()))
            });
        r.map_err(|e| FspError::Timeout {
            what: e.what,
            waited: e.waited,
        })
    }

    fn emem_offset(&self) -> u32 {
        let c = NV_PFSP_EMEMC::from(self.reg(NV_PFSP_EMEMC::offset(CH)));
        c.offs() as u32 + c.blk() as u32 * DWORDS_PER_EMEM_BLOCK
    }

    /// Sends one single-packet NVDM message.
    pub fn send(&self, nvdm_type: u8, payload: &[u8]) -> Result<(), FspError> {
        let len = 8 + payload.len();
        if len > FSP_EMEM_CHANNEL_RM_SIZE {
            return Err(FspError::TooLarge { len });
        }
        self.poll(
            FSP_SEND_TIMEOUT,
            "the FSP command queue to be empty",
            || {
                let h = self.reg(NV_PFSP_QUEUE_HEAD::offset(CH));
                let t = self.reg(NV_PFSP_QUEUE_TAIL::offset(CH));
                h != u32::MAX && h == t
            },
        )?;
        self.write(
            NV_PFSP_EMEMC::offset(CH),
            NV_PFSP_EMEMC::new().with_aincw(true).into(),
        );
        let start = self.emem_offset();
        let data = NV_PFSP_EMEMD::offset(CH);
        self.write(data, mctp_header(true, true, 0, 0));
        self.write(data, nvdm_header(nvdm_type));
        for c in payload.chunks(4) {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            self.write(data, u32::from_le_bytes(b));
        }
        let words = len.div_ceil(4) as u32;
        let moved = self.emem_offset().wrapping_sub(start);
        if moved != words {
            return Err(FspError::EmemOffset {
                expected: words,
                got: moved,
            });
        }
        // TAIL (offset of the last dword) first: writing HEAD interrupts the FSP.
        self.write(NV_PFSP_QUEUE_TAIL::offset(CH), words * 4 - 4);
        self.write(NV_PFSP_QUEUE_HEAD::offset(CH), 0);
        Ok(())
    }

    /// Waits for and reads one packet into `buf`; returns its length.
    pub fn receive(&self, buf: &mut [u8; FSP_EMEM_CHANNEL_RM_SIZE]) -> Result<usize, FspError> {
        self.poll(FSP_RESPONSE_TIMEOUT, "an FSP answer", || {
            let h = self.reg(NV_PFSP_MSGQ_HEAD::offset(CH));
            let t = self.reg(NV_PFSP_MSGQ_TAIL::offset(CH));
            h != u32::MAX && t != u32::MAX && h != t
        })?;
        let head = self.reg(NV_PFSP_MSGQ_HEAD::offset(CH));
        let tail = self.reg(NV_PFSP_MSGQ_TAIL::offset(CH));
        let size = tail
            .checked_sub(head)
            .and_then(|d| d.checked_add(4))
            .map(|s| s as usize)
            .filter(|&s| (8..=FSP_EMEM_CHANNEL_RM_SIZE).contains(&s) && s % 4 == 0)
            .ok_or(FspError::BadResponse(
                "message queue head/tail give an impossible size",
            ))?;
        self.write(
            NV_PFSP_EMEMC::offset(CH),
            NV_PFSP_EMEMC::new().with_aincr(true).into(),
        );
        let start = self.emem_offset();
        for c in buf[..size].chunks_mut(4) {
            c.copy_from_slice(&self.reg(NV_PFSP_EMEMD::offset(CH)).to_le_bytes());
        }
        let moved = self.emem_offset().wrapping_sub(start);
        // Acknowledge: TAIL = HEAD.
        self.write(NV_PFSP_MSGQ_TAIL::offset(CH), head);
        self.write(NV_PFSP_MSGQ_HEAD::offset(CH), head);
        if moved != (size / 4) as u32 {
            return Err(FspError::EmemOffset {
                expected: (size / 4) as u32,
                got: moved,
            });
        }
        Ok(size)
    }

    /// Sends a command and checks the FSP's `NVDM_PAYLOAD_COMMAND_RESPONSE`.
    pub fn command(
        &self,
        nvdm_type: u8,
        payload: &[u8],
    ) -> Result<NVDM_PAYLOAD_COMMAND_RESPONSE, FspError> {
        self.send(nvdm_type, payload)?;
        let mut buf = [0u8; FSP_EMEM_CHANNEL_RM_SIZE];
        let n = self.receive(&mut buf)?;
        parse_response(&buf[..n], nvdm_type)
    }
}

/// Checks an FSP answer packet and returns its command response (`kfspGetPacketInfo_GH100`,
/// `kfspValidateMctpPayloadHeader_GH100`, `kfspProcessCommandResponse_GH100`).
pub fn parse_response(
    packet: &[u8],
    sent_type: u8,
) -> Result<NVDM_PAYLOAD_COMMAND_RESPONSE, FspError> {
    let word = |i: usize| {
        packet
            .get(i * 4..i * 4 + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(FspError::BadResponse("packet shorter than its headers"))
    };
    let mctp = word(0)?;
    if mctp >> 30 != 0b11 {
        return Err(FspError::BadResponse(
            "not a single-packet message (SOM/EOM not both set)",
        ));
    }
    let msg = word(1)?;
    if msg & 0x7f != MCTP_MSG_HEADER_TYPE_VENDOR_PCI {
        return Err(FspError::BadResponse(
            "MCTP message type is not vendor-defined PCI",
        ));
    }
    if (msg >> 8) & 0xffff != MCTP_MSG_HEADER_VENDOR_ID_NV {
        return Err(FspError::BadResponse("MCTP vendor id is not NVIDIA's"));
    }
    if (msg >> 24) as u8 != NVDM_TYPE_FSP_RESPONSE {
        return Err(FspError::BadResponse(
            "answer is not an NVDM_TYPE_FSP_RESPONSE",
        ));
    }
    let r = packet
        .get(8..20)
        .and_then(|b| NVDM_PAYLOAD_COMMAND_RESPONSE::read_from_bytes(b).ok())
        .ok_or(FspError::BadResponse("command response truncated"))?;
    let (command, error_code, task_id) = (r.commandNvdmType, r.errorCode, r.taskId);
    if error_code != 0 {
        return Err(FspError::Rejected {
            command,
            error_code,
            task_id,
        });
    }
    if command != sent_type as u32 {
        return Err(FspError::BadResponse("the answer is for another command"));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gsp::boot::abi::{NVDM_TYPE_COT, nvdm_header};

    fn response(ty: u8, cmd: u32, err: u32) -> [u8; 20] {
        let mut p = [0u8; 20];
        p[0..4].copy_from_slice(&mctp_header(true, true, 0, 0).to_le_bytes());
        p[4..8].copy_from_slice(&nvdm_header(ty).to_le_bytes());
        p[8..12].copy_from_slice(&7u32.to_le_bytes());
        p[12..16].copy_from_slice(&cmd.to_le_bytes());
        p[16..20].copy_from_slice(&err.to_le_bytes());
        p
    }

    #[test]
    fn responses_are_checked() {
        let ok = response(NVDM_TYPE_FSP_RESPONSE, 0x14, 0);
        assert_eq!({ parse_response(&ok, NVDM_TYPE_COT).unwrap().taskId }, 7);
        let e = parse_response(&response(NVDM_TYPE_FSP_RESPONSE, 0x14, 0x9e), NVDM_TYPE_COT);
        assert_eq!(
            e,
            Err(FspError::Rejected {
                command: 0x14,
                error_code: 0x9e,
                task_id: 7
            })
        );
        assert!(parse_response(&response(0x13, 0x14, 0), NVDM_TYPE_COT).is_err());
        assert!(parse_response(&response(NVDM_TYPE_FSP_RESPONSE, 0x15, 0), NVDM_TYPE_COT).is_err());
        assert!(parse_response(&ok[..12], NVDM_TYPE_COT).is_err());
        let mut multi = ok;
        multi[3] = 0x80; // SOM only
        assert!(parse_response(&multi, NVDM_TYPE_COT).is_err());
        let mut vendor = ok;
        vendor[5] = 0;
        assert!(parse_response(&vendor, NVDM_TYPE_COT).is_err());
    }
}
