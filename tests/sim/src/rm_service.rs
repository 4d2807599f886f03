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
}
