//! [`KernelRm`]: the [`Rm`] trait over nvidia.ko's `NV_ESC_RM_ALLOC` / `NV_ESC_RM_CONTROL` /
//! `NV_ESC_RM_FREE` escapes on `/dev/nvidiactl`.
//!
//! # Object lifetime
//!
//! Each `KernelRm` owns one RM client (`NV01_ROOT_CLIENT`). Dropping it frees the client, and
//! with it every object in its tree. If the process dies first, the kernel does the same: the
//! client is tied to the control file it was allocated on (`secInfo.clientOSInfo`, `RmIoctl` in
//! `src/nvidia/arch/nvalloc/unix/src/escape.c`), and closing that file runs
//! `rm_cleanup_file_private` → `RmFreeUnusedClients` (`src/nvidia/arch/nvalloc/unix/src/osapi.c`),
//! which frees every client whose OS info is that file. So an early exit leaks no RM objects.
//!
//! # Handles
//!
//! The adapter picks object handles itself (from 0x1000 up), so they are stable across runs
//! and never collide with RM's generated ranges (`RS_UNIQUE_HANDLE_BASE` 0xcaf00000,
//! `RS_CLIENT_HANDLE_BASE` 0xc1d00000). The client handle is chosen by RM.
//!
//! # Param safety
//!
//! RM sizes alloc params from its own class table, not from `paramsSize`
//! (`rmapiGetClassAllocParamSize`), so a short buffer would be over-read and, on copy-out,
//! over-written. [`KernelRm::alloc`] therefore accepts only classes whose r580 param size it
//! knows ([`super::params::alloc_param_rule`]) and only buffers of exactly that size. Controls are
//! size-checked by RM itself (`NV_ERR_INVALID_ARGUMENT` on mismatch), but a few controls carry
//! user pointers RM follows (`embedded_param_copy.c`); those are refused here because the safe
//! byte-slice API cannot vouch for the pointers.

use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nvbare_core::rm::{Handle, Rm, RmAbi, RmError, RmOp, RmStatus, class};
use rustix::io::Errno;
use zerocopy::{FromZeros, IntoBytes};

use super::abi::{
    NV_ESC_RM_ALLOC, NV_ESC_RM_CONTROL, NV_ESC_RM_FREE, NVOS00_PARAMETERS, NVOS21_PARAMETERS,
    NVOS54_PARAMETERS,
};
use super::driver::{CtlFile, NvidiaDriver};
use super::error::KmodError;
use super::ioctl::{nv_escape, nv_escape_plain};
use super::params::{
    AllocParamRule, NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2,
    NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO, NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS,
    NV0000_CTRL_SYSTEM_GET_CLIENT_DATABASE_INFO_PARAMS, alloc_param_rule,
};

/// First handle the adapter hands out.
const FIRST_HANDLE: u32 = 0x1000;

/// Controls whose params hold user pointers that RM dereferences
/// (`src/nvidia/src/kernel/rmapi/embedded_param_copy.c` at 580.142). Use their `_V2` forms.
const POINTER_CONTROLS: &[u32] = &[
    0x2080_0123, // NV2080_CTRL_CMD_GPU_GET_ENGINES
    0x2080_1336, // NV2080_CTRL_CMD_FB_GET_AMAP_CONF
    0x2080_2a01, // NV2080_CTRL_CMD_CE_GET_CAPS
    0x0080_170d, // NV0080_CTRL_CMD_FIFO_GET_CHANNELLIST
    0x0000_0130, // NV0000_CTRL_CMD_SYSTEM_EXECUTE_ACPI_METHOD
    0x0073_0120, // NV0073_CTRL_CMD_SYSTEM_EXECUTE_ACPI_METHOD
    0x0080_1401, // NV0080_CTRL_CMD_HOST_GET_CAPS
    0x2080_0802, // NV2080_CTRL_CMD_BIOS_GET_INFO
    0x2080_0803, // NV2080_CTRL_CMD_BIOS_GET_NBSI
    0x2080_0806, // NV2080_CTRL_CMD_BIOS_GET_NBSI_OBJ
    0x0080_1104, // NV0080_CTRL_CMD_GR_GET_INFO
    0x0080_1701, // NV0080_CTRL_CMD_FIFO_GET_CAPS
    0xa0bc_0101, // NVA0BC_CTRL_CMD_NVENC_SW_SESSION_UPDATE_INFO
    0x83de_0315, // NV83DE_CTRL_CMD_DEBUG_READ_MEMORY
    0x83de_0316, // NV83DE_CTRL_CMD_DEBUG_WRITE_MEMORY
    0x83de_0326, // NV83DE_CTRL_CMD_DEBUG_READ_BATCH_MEMORY
    0x83de_0327, // NV83DE_CTRL_CMD_DEBUG_WRITE_BATCH_MEMORY
    0x402c_0102, // NV402C_CTRL_CMD_I2C_INDEXED
    0x402c_0105, // NV402C_CTRL_CMD_I2C_TRANSACTION
    0x2080_0122, // NV2080_CTRL_CMD_GPU_EXEC_REG_OPS
    0x2080_2402, // NV2080_CTRL_CMD_NVD_GET_DUMP
    0x0000_0602, // NV0000_CTRL_CMD_NVD_GET_DUMP
    0x0041_0110, // NV0041_CTRL_CMD_GET_SURFACE_INFO
    0x0000_0127, // NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS
    0x0080_1301, // NV0080_CTRL_CMD_FB_GET_CAPS
    0x0080_0201, // NV0080_CTRL_CMD_GPU_GET_CLASSLIST
    0x2080_0124, // NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST
    0x0080_1102, // NV0080_CTRL_CMD_GR_GET_CAPS
    0x2080_0610, // NV2080_CTRL_CMD_I2C_ACCESS
    0x2080_1201, // NV2080_CTRL_CMD_GR_GET_INFO
    0xb06f_010d, // NVB06F_CTRL_CMD_MIGRATE_ENGINE_CTX_DATA
    0xb06f_010c, // NVB06F_CTRL_CMD_GET_ENGINE_CTX_DATA
    0x2080_2204, // NV2080_CTRL_CMD_RC_READ_VIRTUAL_MEM
    0x0080_180f, // NV0080_CTRL_CMD_DMA_UPDATE_PDE_2
    0x2080_01e8, // NV2080_CTRL_CMD_GPU_RPC_GSP_TEST
];

fn transport(op: RmOp, what: &'static str, e: Errno) -> RmError {
    RmError::Transport {
        op,
        what,
        errno: Some(e.raw_os_error()),
    }
}

/// Checks an alloc's params against the class's r580 rule.
pub(crate) fn check_alloc_params(op: RmOp, class: u32, len: usize) -> Result<(), RmError> {
    match alloc_param_rule(class) {
        Some(AllocParamRule::Required(n)) if len == n => Ok(()),
        Some(AllocParamRule::Optional(n)) if len == n || len == 0 => Ok(()),
        Some(AllocParamRule::None) if len == 0 => Ok(()),
        Some(AllocParamRule::Required(n) | AllocParamRule::Optional(n)) => {
            Err(RmError::ParamSize {
                op,
                got: len,
                expected: n,
            })
        }
        Some(AllocParamRule::None) => Err(RmError::ParamSize {
            op,
            got: len,
            expected: 0,
        }),
        // Without params RM cannot over-read; it fails the call if the class needs some.
        None if len == 0 => Ok(()),
        None => Err(RmError::Transport {
            op,
            what: "the adapter has no r580 alloc-param layout for this class (RM would read its \
                   own size from the buffer); add it to nvidia::params::alloc_param_rule",
            errno: None,
        }),
    }
}

/// One RM client on a control file; freed on drop.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) ctl: Arc<CtlFile>,
    pub(crate) handle: u32,
    next: AtomicU32,
    /// Live objects: handle → parent.
    live: Mutex<BTreeMap<u32, u32>>,
}

impl Client {
    fn new(ctl: Arc<CtlFile>) -> Result<Client, KmodError> {
        let op = RmOp::Alloc {
            parent: Handle(0),
            class: class::NV01_ROOT_CLIENT,
        };
        let mut p = NVOS21_PARAMETERS {
            hClass: class::NV01_ROOT_CLIENT,
            ..Default::default()
        };
        // SAFETY: pAllocParms is NULL (the root client's params are optional), so RM follows
        // no pointer.
        unsafe { nv_escape(ctl.as_fd(), NV_ESC_RM_ALLOC, &mut p) }
            .map_err(|e| transport(op, "NV_ESC_RM_ALLOC ioctl failed", e))?;
        if p.status != 0 {
            return Err(RmError::Status {
                op,
                status: RmStatus(p.status),
            }
            .into());
        }
        log::debug!("RM client {:#x}", p.hObjectNew);
        Ok(Client {
            ctl,
            handle: p.hObjectNew,
            next: AtomicU32::new(FIRST_HANDLE),
            live: Mutex::new(BTreeMap::new()),
        })
    }

    /// A fresh handle for an object allocated outside [`Client::alloc`] (call
    /// [`Client::record`] once RM accepted it).
    pub(crate) fn alloc_handle(&self) -> u32 {
        self.next_handle()
    }

    /// Notes an object allocated outside [`Client::alloc`].
    pub(crate) fn record(&self, handle: u32, parent: u32) {
        self.live().insert(handle, parent);
    }

    fn next_handle(&self) -> u32 {
        loop {
            let h = self.next.fetch_add(1, Ordering::Relaxed);
            if h != self.handle && h != 0 {
                return h;
            }
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, u32>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn alloc(
        &self,
        parent: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<Handle, RmError> {
        let op = RmOp::Alloc { parent, class };
        check_alloc_params(op, class, params.len())?;
        let h = self.next_handle();
        let mut p = NVOS21_PARAMETERS {
            hRoot: self.handle,
            hObjectParent: parent.0,
            hObjectNew: h,
            hClass: class,
            pAllocParms: if params.is_empty() {
                0
            } else {
                params.as_mut_ptr() as u64
            },
            paramsSize: params.len() as u32,
            status: 0,
        };
        // SAFETY: pAllocParms is NULL or points to `params`, which check_alloc_params verified
        // is exactly the size RM copies in and out for this class on r580; it lives across the
        // call.
        unsafe { nv_escape(self.ctl.as_fd(), NV_ESC_RM_ALLOC, &mut p) }
            .map_err(|e| transport(op, "NV_ESC_RM_ALLOC ioctl failed", e))?;
        if p.status != 0 {
            return Err(RmError::Status {
                op,
                status: RmStatus(p.status),
            });
        }
        self.live().insert(p.hObjectNew, parent.0);
        Ok(Handle(p.hObjectNew))
    }

    pub(crate) fn control(
        &self,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), RmError> {
        let op = RmOp::Control { object, cmd };
        if POINTER_CONTROLS.contains(&cmd) {
            return Err(RmError::Transport {
                op,
                what: "this control carries user pointers RM dereferences; use its _V2 form",
                errno: None,
            });
        }
        let mut p = NVOS54_PARAMETERS {
            hClient: self.handle,
            hObject: object.0,
            cmd,
            flags: 0,
            params: if params.is_empty() {
                0
            } else {
                params.as_mut_ptr() as u64
            },
            paramsSize: params.len() as u32,
            status: 0,
        };
        // SAFETY: `params` points to `params.len()` live bytes; RM copies exactly paramsSize
        // bytes in and out (it rejects any other size, control.c), and the commands whose
        // params hold pointers RM follows are refused above.
        unsafe { nv_escape(self.ctl.as_fd(), NV_ESC_RM_CONTROL, &mut p) }
            .map_err(|e| transport(op, "NV_ESC_RM_CONTROL ioctl failed", e))?;
        if p.status != 0 {
            return Err(RmError::Status {
                op,
                status: RmStatus(p.status),
            });
        }
        Ok(())
    }

    pub(crate) fn free(&self, object: Handle) -> Result<(), RmError> {
        let op = RmOp::Free { object };
        if object.0 == self.handle {
            return Err(RmError::Transport {
                op,
                what: "the client is freed by dropping its KernelRm",
                errno: None,
            });
        }
        let parent = self.live().get(&object.0).copied().unwrap_or(0);
        let mut p = NVOS00_PARAMETERS {
            hRoot: self.handle,
            hObjectParent: parent,
            hObjectOld: object.0,
            status: 0,
        };
        nv_escape_plain(self.ctl.as_fd(), NV_ESC_RM_FREE, &mut p)
            .map_err(|e| transport(op, "NV_ESC_RM_FREE ioctl failed", e))?;
        if p.status != 0 {
            return Err(RmError::Status {
                op,
                status: RmStatus(p.status),
            });
        }
        forget_subtree(&mut self.live(), object.0);
        Ok(())
    }

    pub(crate) fn live_objects(&self) -> usize {
        self.live().len()
    }

    pub(crate) fn is_live(&self, h: u32) -> bool {
        self.live().contains_key(&h)
    }
}

/// Removes `root` and everything under it from a handle → parent map (RM frees children with
/// their parent).
fn forget_subtree(live: &mut BTreeMap<u32, u32>, root: u32) {
    let mut doomed = vec![root];
    let mut i = 0;
    while let Some(&h) = doomed.get(i) {
        doomed.extend(live.iter().filter(|&(_, &p)| p == h).map(|(&c, _)| c));
        i += 1;
    }
    for h in doomed {
        live.remove(&h);
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut p = NVOS00_PARAMETERS {
            hRoot: self.handle,
            hObjectParent: 0,
            hObjectOld: self.handle,
            status: 0,
        };
        match nv_escape_plain(self.ctl.as_fd(), NV_ESC_RM_FREE, &mut p) {
            Ok(()) if p.status == 0 => log::debug!("freed RM client {:#x}", self.handle),
            Ok(()) => log::warn!(
                "freeing RM client {:#x}: {} (the driver frees it when the process exits)",
                self.handle,
                RmStatus(p.status)
            ),
            Err(e) => log::warn!("freeing RM client {:#x}: {e}", self.handle),
        }
    }
}

/// Counts of RM objects across the whole driver (all processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmDatabaseInfo {
    /// RM clients.
    pub clients: u32,
    /// RM resources (objects) of all clients.
    pub resources: u64,
}

/// RM's instance numbers of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuIds {
    /// `deviceId` for `NV01_DEVICE_0`.
    pub device_instance: u32,
    /// `subDeviceId` for `NV20_SUBDEVICE_0`.
    pub sub_device_instance: u32,
}

/// The nvidia kernel driver's Resource Manager, as one RM client of this process.
#[derive(Debug)]
pub struct KernelRm {
    pub(crate) client: Arc<Client>,
    abi: RmAbi,
}

impl KernelRm {
    /// Allocates a new RM client on the driver's control file.
    pub fn new(driver: &NvidiaDriver) -> Result<KernelRm, KmodError> {
        Ok(KernelRm {
            client: Arc::new(Client::new(driver.ctl.clone())?),
            abi: driver.abi(),
        })
    }

    /// Objects this client allocated and has not freed (freeing a parent frees its children).
    pub fn live_objects(&self) -> usize {
        self.client.live_objects()
    }

    /// Whether `object` was allocated by this client and not freed since (freeing a parent
    /// frees its children).
    pub fn is_live(&self, object: Handle) -> bool {
        self.client.is_live(object.0)
    }

    /// The control file descriptor UVM calls name as `rmCtrlFd`.
    pub fn ctl_fd(&self) -> RawFd {
        self.client.ctl.raw()
    }

    pub(crate) fn ctl(&self) -> BorrowedFd<'_> {
        self.client.ctl.as_fd()
    }

    /// Driver-wide RM client and object counts
    /// (`NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO`; a privileged control, so it fails with
    /// `NV_ERR_INSUFFICIENT_PERMISSIONS` unless run as root).
    pub fn database_info(&mut self) -> Result<RmDatabaseInfo, RmError> {
        let mut p = NV0000_CTRL_SYSTEM_GET_CLIENT_DATABASE_INFO_PARAMS::default();
        let client = self.client();
        self.control(
            client,
            NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO,
            p.as_mut_bytes(),
        )?;
        Ok(RmDatabaseInfo {
            clients: p.clientCount,
            resources: p.resourceCount,
        })
    }

    /// RM's ids for the GPU with `gpu_id` (from `NV_ESC_CARD_INFO`): `deviceInstance` is the
    /// `deviceId` of `NV01_DEVICE_0`, `subDeviceInstance` that of `NV20_SUBDEVICE_0`.
    pub fn gpu_ids(&mut self, gpu_id: u32) -> Result<GpuIds, RmError> {
        let mut p = NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS::new_zeroed();
        p.gpuId = gpu_id;
        let client = self.client();
        self.control(client, NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, p.as_mut_bytes())?;
        Ok(GpuIds {
            device_instance: p.deviceInstance,
            sub_device_instance: p.subDeviceInstance,
        })
    }
}

impl Rm for KernelRm {
    fn client(&self) -> Handle {
        Handle(self.client.handle)
    }

    fn abi(&self) -> RmAbi {
        self.abi
    }

    fn alloc(&mut self, parent: Handle, class: u32, params: &mut [u8]) -> Result<Handle, RmError> {
        let t0 = std::time::Instant::now();
        let r = self.client.alloc(parent, class, params);
        trace(
            &RmOp::Alloc { parent, class },
            params.len(),
            r.as_ref().map(drop),
            t0,
        );
        r
    }

    fn control(&mut self, object: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmError> {
        let t0 = std::time::Instant::now();
        let r = self.client.control(object, cmd, params);
        trace(
            &RmOp::Control { object, cmd },
            params.len(),
            r.as_ref().map(drop),
            t0,
        );
        r
    }

    fn free(&mut self, object: Handle) -> Result<(), RmError> {
        let t0 = std::time::Instant::now();
        let r = self.client.free(object);
        trace(&RmOp::Free { object }, 0, r.as_ref().map(drop), t0);
        r
    }
}

/// One debug line per RM call (`nvbare -vv`), as the GSP client logs its RPCs.
fn trace(op: &RmOp, params: usize, r: Result<(), &RmError>, t0: std::time::Instant) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    let us = t0.elapsed().as_micros();
    let op = match *op {
        RmOp::Control { object, cmd } => match nvbare_core::rm::describe::control_by_cmd(cmd) {
            Some(c) => format!("control {} ({cmd:#010x}) on {object}", c.name),
            None => op.to_string(),
        },
        _ => op.to_string(),
    };
    match r {
        Ok(()) => log::debug!("rm ioctl {op}: {params} B params, NV_OK in {us} us"),
        Err(e) => log::debug!("rm ioctl {op}: {params} B params, failed in {us} us: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> RmOp {
        RmOp::Alloc {
            parent: Handle(1),
            class: 0,
        }
    }

    #[test]
    fn alloc_params_must_match_the_r580_size() {
        use class::*;
        assert!(check_alloc_params(op(), FERMI_VASPACE_A, 56).is_ok());
        // 535/570 layout of NV_VASPACE_ALLOCATION_PARAMETERS: 48 bytes, would be over-read.
        assert_eq!(
            check_alloc_params(op(), FERMI_VASPACE_A, 48),
            Err(RmError::ParamSize {
                op: op(),
                got: 48,
                expected: 56
            })
        );
        // 535 layout of NV_CHANNEL_ALLOC_PARAMS.
        assert!(check_alloc_params(op(), HOPPER_CHANNEL_GPFIFO_A, 360).is_err());
        assert!(check_alloc_params(op(), HOPPER_CHANNEL_GPFIFO_A, 368).is_ok());
        // Optional params: none or the full struct.
        assert!(check_alloc_params(op(), HOPPER_COMPUTE_A, 0).is_ok());
        assert!(check_alloc_params(op(), HOPPER_COMPUTE_A, 16).is_ok());
        assert!(check_alloc_params(op(), HOPPER_COMPUTE_A, 8).is_err());
        // Required params cannot be omitted.
        assert!(check_alloc_params(op(), NV01_MEMORY_LOCAL_USER, 0).is_err());
        // Classes without params take none.
        assert!(check_alloc_params(op(), AMPERE_USERMODE_A, 0).is_ok());
        assert!(check_alloc_params(op(), AMPERE_USERMODE_A, 2).is_err());
        // Unknown classes: only without params.
        assert!(check_alloc_params(op(), 0xbeef, 0).is_ok());
        let e = check_alloc_params(op(), 0xbeef, 8).unwrap_err();
        assert!(e.to_string().contains("no r580 alloc-param layout"), "{e}");
    }

    #[test]
    fn pointer_controls_are_listed_once() {
        let mut v = POINTER_CONTROLS.to_vec();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), POINTER_CONTROLS.len());
        // The flat _V2 forms stay allowed.
        assert!(!POINTER_CONTROLS.contains(&super::super::params::NV2080_CTRL_CMD_GR_GET_INFO_V2));
        assert!(
            !POINTER_CONTROLS.contains(&super::super::params::NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2)
        );
    }

    #[test]
    fn freeing_a_parent_forgets_its_subtree() {
        let mut live = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 10), (20, 1), (21, 20)]);
        forget_subtree(&mut live, 10);
        assert_eq!(live, BTreeMap::from([(20, 1), (21, 20)]));
        forget_subtree(&mut live, 99);
        assert_eq!(live.len(), 2);
    }
}
