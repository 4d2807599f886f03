//! One log line per RPC at debug level (`nvbare -vv`): the function, the class or command
//! and objects it names, bytes each way, the status and how long GSP-RM took.

use core::fmt;

use super::wire::*;
use crate::rm::Handle;
use crate::rm::class::class_name;
use crate::rm::describe::control_by_cmd;

/// What an RPC is about, read from its fixed part before it is sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct RpcWhat {
    function: u32,
    words: [u32; 4],
}

impl RpcWhat {
    pub(super) fn of(function: u32, fixed: &[u8]) -> RpcWhat {
        let mut words = [0; 4];
        for (i, w) in words.iter_mut().enumerate() {
            *w = status_at(fixed, i * 4);
        }
        RpcWhat { function, words }
    }

    /// Where the reply's RM status is, for the RM calls (`rpc_gsp_rm_alloc_v03_00.status`,
    /// `rpc_gsp_rm_control_v03_00.status`, `NVOS00_PARAMETERS_v03_00.status`).
    fn status_offset(&self) -> Option<usize> {
        match self.function {
            NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC => Some(16),
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL | NV_VGPU_MSG_FUNCTION_FREE => Some(12),
            _ => None,
        }
    }

    /// The outcome: `rpc_result` when it failed, else the RM status in the reply.
    pub(super) fn outcome(&self, rpc_result: u32, reply_fixed: &[u8]) -> Outcome {
        if rpc_result != 0 {
            return Outcome(rpc_result);
        }
        Outcome(
            self.status_offset()
                .map_or(0, |o| status_at(reply_fixed, o)),
        )
    }
}

impl fmt::Display for RpcWhat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", FunctionName(self.function))?;
        let [_, w1, w2, w3] = self.words;
        match self.function {
            NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC => {
                match class_name(w3) {
                    Some(n) => write!(f, " {n} ({w3:#x})")?,
                    None => write!(f, " class {w3:#x}")?,
                }
                write!(f, " under {} as {}", Handle(w1), Handle(w2))
            }
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL => {
                match control_by_cmd(w2) {
                    Some(c) => write!(f, " {} ({w2:#010x})", c.name)?,
                    None => write!(f, " control {w2:#010x}")?,
                }
                write!(f, " on {}", Handle(w1))
            }
            NV_VGPU_MSG_FUNCTION_FREE => write!(f, " {}", Handle(w2)),
            _ => Ok(()),
        }
    }
}

/// An RPC's status for the trace.
#[derive(Debug, Clone, Copy)]
pub(super) struct Outcome(u32);

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match rpc_result_name(self.0) {
            Some(n) => f.write_str(n),
            None if self.0 == 0 => f.write_str("NV_OK"),
            None => write!(f, "{:#x}", self.0),
        }
    }
}

impl Outcome {
    /// Whether it is NV_OK.
    #[cfg(test)]
    pub(super) fn is_ok(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn alloc_control_and_free_name_what_they_touch() {
        let mut a = [0u8; 32];
        a[4..8].copy_from_slice(&0xcf00_0000u32.to_le_bytes());
        a[8..12].copy_from_slice(&0xcf00_0010u32.to_le_bytes());
        a[12..16].copy_from_slice(&0xcbc0u32.to_le_bytes());
        let w = RpcWhat::of(NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC, &a);
        let s = format!("{w}");
        assert!(
            s.contains("HOPPER_COMPUTE_A (0xcbc0) under 0xcf000000 as 0xcf000010"),
            "{s}"
        );
        let mut reply = a;
        reply[16..20].copy_from_slice(&0x56u32.to_le_bytes());
        assert_eq!(format!("{}", w.outcome(0, &reply)), "NV_ERR_NOT_SUPPORTED");
        assert!(!w.outcome(0, &reply).is_ok());
        assert!(w.outcome(0, &a).is_ok());

        let mut c = [0u8; 24];
        c[4..8].copy_from_slice(&0xcf00_0000u32.to_le_bytes());
        c[8..12].copy_from_slice(&0x0080_0292u32.to_le_bytes());
        let w = RpcWhat::of(NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL, &c);
        assert_eq!(
            format!("{w}"),
            "GSP_RM_CONTROL (76) NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2 (0x00800292) on 0xcf000000"
        );
        // A transport-level failure is reported before the RM status.
        assert_eq!(
            format!("{}", w.outcome(0xff10_0001, &c)),
            format!("{}", Outcome(0xff10_0001))
        );
        let w = RpcWhat::of(NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO, &[]);
        assert_eq!(format!("{w}"), "GET_GSP_STATIC_INFO (65)");
    }
}
