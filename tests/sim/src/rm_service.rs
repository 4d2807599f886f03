//! The seam between how RM calls reach the simulator and what they do.
//!
//! An [`RmService`] is the simulator's Resource Manager: an object tree per client with the
//! classes the chip offers and answers to the controls bring-up uses. It is transport-free, so
//! the same model serves RM calls made directly (the RM-level test backend, standing in for an
//! RM living in a kernel) and RM calls carried by GSP RPCs over the message queue (the GSP-RM
//! emulator). Param buffers are raw bytes in the layout named by the `abi` argument.

use nvbare_core::rm::{Handle, RmAbi, RmStatus};

use crate::bar0::SimCore;

/// Who is calling and in which struct layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmCaller {
    /// Struct layouts of the params.
    pub abi: RmAbi,
    /// The calling client.
    pub client: Handle,
}

/// The simulator's Resource Manager.
pub trait RmService: Send {
    /// Allocates `object` of `class` under `parent` in `client` (`caller.client == object` with
    /// class `NV01_ROOT` creates a client). Handles are chosen by the caller, as over GSP RPC.
    fn alloc(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        object: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus>;

    /// Runs control `cmd` on `object`; results are written back into `params`.
    fn control(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), RmStatus>;

    /// Frees `object` and its descendants.
    fn free(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        object: Handle,
    ) -> Result<(), RmStatus>;

    /// Any other RPC `function` with its raw payload (after the RPC header; the reply is the
    /// payload as left here). `None`: the service does not know the function (GSP-RM answers
    /// `NV_VGPU_MSG_RESULT_RPC_UNKNOWN_FUNCTION`).
    fn rpc(
        &mut self,
        core: &mut SimCore,
        abi: RmAbi,
        function: u32,
        payload: &mut [u8],
    ) -> Option<Result<(), RmStatus>> {
        let _ = (core, abi, function, payload);
        None
    }

    /// What happened since the last call that GSP-RM reports to its client by event (channel
    /// resets, MMU faults).
    fn take_notices(&mut self) -> Vec<RmNotice> {
        Vec::new()
    }
}

/// Something GSP-RM tells its client unasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RmNotice {
    /// A channel was torn down (RC).
    Rc {
        /// Channel id.
        chid: u32,
        /// `ROBUST_CHANNEL_*` code.
        code: u32,
        /// `NV2080_ENGINE_TYPE_*`.
        engine_type: u32,
        /// Faulting VA and `NV_PFAULT_FAULT_TYPE_*`, for MMU faults.
        mmu_fault: Option<(u64, u32)>,
        /// What happened, in words.
        reason: String,
    },
}
