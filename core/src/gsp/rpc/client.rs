//! The typed RPCs on [`GspRpc`] (system info, registry, static info, unload, RM alloc,
//! control and free) and [`GspRm`], the client that implements [`Rm`] over them.

use core::fmt;

use zerocopy::{FromZeros, IntoBytes};

use super::transport::GspRpc;
use super::wire::*;
use crate::gsp::GspError;
use crate::gsp::events::{EventHandler, EventQueue, NoHandler, RcTriggered};
use crate::gsp::sysinfo::{GspStaticConfigInfo, GspSystemInfo};
use crate::hal::{Clock, DmaBuffer, Mmio};
use crate::rm::{Handle, Rm, RmAbi, RmError, RmOp, class};

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> GspRpc<B, M, C, H> {
    /// GSP_SET_SYSTEM_INFO (72): queued before boot, not answered.
    pub fn set_system_info(&mut self, info: &GspSystemInfo) -> Result<(), GspError> {
        self.send_async(NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO, info.as_bytes())
    }

    /// SET_REGISTRY (73) with a table built by [`registry::pack`](crate::gsp::registry::pack): not answered.
    pub fn set_registry(&mut self, table: &[u8]) -> Result<(), GspError> {
        self.send_async(NV_VGPU_MSG_FUNCTION_SET_REGISTRY, table)
    }

    /// GET_GSP_STATIC_INFO (65).
    pub fn get_gsp_static_info(&mut self) -> Result<GspStaticConfigInfo, GspError> {
        let mut info = GspStaticConfigInfo::new_zeroed();
        let f = NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO;
        let r = self.call(f, &mut [], info.as_mut_bytes(), |h, _| h.rpc_result == 0)?;
        if r.header.rpc_result != 0 {
            return Err(rpc_result_error(f, r.header.rpc_result));
        }
        Ok(info)
    }

    /// UNLOADING_GUEST_DRIVER (47): asks GSP-RM to shut down (`newLevel`: [`UNLOAD_LEVEL_0`]
    /// for an unload after which GSP-RM boots again, as `kgspUnloadRm` sends).
    pub fn unloading_guest_driver(
        &mut self,
        in_pm_transition: bool,
        gc6_entering: bool,
        new_level: u32,
    ) -> Result<(), GspError> {
        let mut p = rpc_unloading_guest_driver_v1F_07 {
            bInPMTransition: in_pm_transition as u8,
            bGc6Entering: gc6_entering as u8,
            _pad: [0; 2],
            newLevel: new_level,
        };
        let f = NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER;
        let r = self.call(f, p.as_mut_bytes(), &mut [], |_, _| false)?;
        if r.header.rpc_result != 0 {
            return Err(rpc_result_error(f, r.header.rpc_result));
        }
        Ok(())
    }

    /// GSP_RM_ALLOC (103): allocates `object` of `class` under `parent` in `client`, with the
    /// class's alloc params (copied back on success).
    pub fn rm_alloc(
        &mut self,
        client: Handle,
        parent: Handle,
        object: Handle,
        class: u32,
        params: &mut [u8],
    ) -> Result<(), GspError> {
        let mut a = rpc_gsp_rm_alloc_v03_00 {
            hClient: client.0,
            hParent: parent.0,
            hObject: object.0,
            hClass: class,
            status: 0,
            paramsSize: params.len() as u32,
            flags: 0,
            reserved: [0; 4],
        };
        let f = NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC;
        // The kernel RM copies paramsSize bytes back without checking the reply's length
        // (rpcRmApiAlloc_GSP): a reply with the fixed part only is a success, and the
        // parameters keep what was sent.
        let min = size_of::<rpc_gsp_rm_alloc_v03_00>();
        let r = self.call_min(
            f,
            a.as_mut_bytes(),
            params,
            |h, fixed| h.rpc_result == 0 && status_at(fixed, 16) == 0,
            min,
        )?;
        check_status(f, r.header.rpc_result, a.status)
    }

    /// GSP_RM_CONTROL (76): runs control `cmd` on `object`; params are copied back on success
    /// (or when GSP-RM sets `RMAPI_RPC_FLAGS_COPYOUT_ON_ERROR`).
    pub fn rm_control(
        &mut self,
        client: Handle,
        object: Handle,
        cmd: u32,
        params: &mut [u8],
    ) -> Result<(), GspError> {
        let f = NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL;
        fn policy(h: &rpc_message_header_v03_00, fixed: &[u8]) -> bool {
            let ok = h.rpc_result == 0 && status_at(fixed, 12) == 0;
            ok || status_at(fixed, 20) & RMAPI_RPC_FLAGS_COPYOUT_ON_ERROR != 0
        }
        let (result, status) = match self.config().abi {
            RmAbi::R570 => {
                let mut c = r570::rpc_gsp_rm_control_v03_00 {
                    hClient: client.0,
                    hObject: object.0,
                    cmd,
                    status: 0,
                    paramsSize: params.len() as u32,
                    flags: 0,
                };
                let r = self.call(f, c.as_mut_bytes(), params, policy)?;
                (r.header.rpc_result, c.status)
            }
            RmAbi::R580 => {
                let mut c = r580::rpc_gsp_rm_control_v03_00 {
                    hClient: client.0,
                    hObject: object.0,
                    cmd,
                    paramsSize: params.len() as u32,
                    ..Default::default()
                };
                let r = self.call(f, c.as_mut_bytes(), params, policy)?;
                (r.header.rpc_result, c.status)
            }
        };
        check_status(f, result, status)
    }

    /// FREE (10): frees `object` (and what is under it) in `client`.
    pub fn rm_free(&mut self, client: Handle, object: Handle) -> Result<(), GspError> {
        // rpcRmApiFree_GSP passes NV01_NULL_OBJECT as the parent.
        let mut p = NVOS00_PARAMETERS_v03_00 {
            hRoot: client.0,
            hObjectParent: 0,
            hObjectOld: object.0,
            status: 0,
        };
        let f = NV_VGPU_MSG_FUNCTION_FREE;
        let r = self.call(f, p.as_mut_bytes(), &mut [], |_, _| false)?;
        check_status(f, r.header.rpc_result, p.status)
    }
}

/// Most objects a [`GspRm`] tracks.
pub const MAX_TRACKED_OBJECTS: usize = 1024;

/// Which client a [`GspRm`] uses and where its handle counter starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// The client handle (chosen by the caller, as GSP-RM expects; tinygrad uses 0xc1000000).
    pub client: Handle,
    /// First object handle handed out (tinygrad: 0xcf000000).
    pub first_handle: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client: Handle(0xc100_0000),
            first_handle: 0xcf00_0000,
        }
    }
}

/// [`GspRm::open`] failed; the transport is handed back.
pub struct OpenError<T> {
    /// The transport.
    pub rpc: T,
    /// Why.
    pub error: GspError,
}

impl<T> fmt::Debug for OpenError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// The Resource Manager in GSP-RM, reached by RPC: implements [`Rm`] (r570 layouts).
///
/// Handles are chosen here (GSP-RM takes the handle the client names) from a counter that
/// skips handles still in use; live objects are tracked with their parents so that freeing an
/// object forgets its descendants too, as RM frees them.
pub struct GspRm<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler = NoHandler> {
    rpc: GspRpc<B, M, C, H>,
    client: Handle,
    owns_client: bool,
    next_handle: u32,
    first_handle: u32,
    objects: heapless::Vec<(Handle, Handle), MAX_TRACKED_OBJECTS>,
    last_error: Option<GspError>,
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> fmt::Debug for GspRm<B, M, C, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GspRm")
            .field("client", &self.client)
            .field("objects", &self.objects.len())
            .field("rpc", &self.rpc)
            .finish_non_exhaustive()
    }
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> GspRm<B, M, C, H> {
    /// Allocates client `cfg.client` (NV01_ROOT) and returns an [`Rm`] over it.
    // The error hands the transport back (no heap to box it in).
    #[allow(clippy::result_large_err)]
    pub fn open(
        mut rpc: GspRpc<B, M, C, H>,
        cfg: ClientConfig,
    ) -> Result<Self, OpenError<GspRpc<B, M, C, H>>> {
        let mut p = NV0000_ALLOC_PARAMETERS::new_zeroed();
        p.hClient = cfg.client.0;
        p.processName[..6].copy_from_slice(b"nvbare");
        match rpc.rm_alloc(
            cfg.client,
            Handle(0),
            cfg.client,
            class::NV01_ROOT,
            p.as_mut_bytes(),
        ) {
            Ok(()) => Ok(Self::with_client(rpc, cfg, true)),
            Err(error) => Err(OpenError { rpc, error }),
        }
    }

    /// An [`Rm`] over a client that already exists (e.g. GSP-RM's internal client,
    /// `GspStaticConfigInfo::hInternalClient`). It is not freed by [`GspRm::close`].
    pub fn with_existing_client(rpc: GspRpc<B, M, C, H>, cfg: ClientConfig) -> Self {
        Self::with_client(rpc, cfg, false)
    }

    fn with_client(rpc: GspRpc<B, M, C, H>, cfg: ClientConfig, owns_client: bool) -> Self {
        GspRm {
            rpc,
            client: cfg.client,
            owns_client,
            next_handle: cfg.first_handle,
            first_handle: cfg.first_handle,
            objects: heapless::Vec::new(),
            last_error: None,
        }
    }

    /// The transport (events, statistics, typed RPCs).
    pub fn rpc(&mut self) -> &mut GspRpc<B, M, C, H> {
        &mut self.rpc
    }

    /// Takes the queued events; see [`GspRpc::take_events`].
    pub fn take_events(&mut self) -> EventQueue {
        self.rpc.take_events()
    }

    /// The most recent channel reset; see [`GspRpc::last_rc`].
    pub fn last_rc(&self) -> Option<RcTriggered> {
        self.rpc.last_rc()
    }

    /// The detailed error behind the last [`RmError`] this `Rm` returned.
    pub fn last_error(&self) -> Option<GspError> {
        self.last_error
    }

    /// Live objects and their parents.
    pub fn objects(&self) -> &[(Handle, Handle)] {
        &self.objects
    }

    /// Frees the client (if this `Rm` allocated it) and returns the transport.
    #[allow(clippy::result_large_err, clippy::type_complexity)]
    pub fn close(mut self) -> Result<GspRpc<B, M, C, H>, OpenError<GspRpc<B, M, C, H>>> {
        if self.owns_client
            && let Err(error) = self.rpc.rm_free(self.client, self.client)
        {
            return Err(OpenError {
                rpc: self.rpc,
                error,
            });
        }
        Ok(self.rpc)
    }

    fn new_handle(&mut self) -> Result<Handle, GspError> {
        for _ in 0..=MAX_TRACKED_OBJECTS + 1 {
            let h = self.next_handle;
            self.next_handle = match h.checked_add(1) {
                Some(n) => n,
                None => self.first_handle,
            };
            let used = h == self.client.0 || self.objects.iter().any(|o| o.0.0 == h);
            if !used && h != 0 {
                return Ok(Handle(h));
            }
        }
        Err(GspError::HandlesExhausted)
    }

    fn forget(&mut self, object: Handle) {
        // Remove the object, then repeatedly everything whose parent is gone.
        self.objects.retain(|o| o.0 != object);
        loop {
            let before = self.objects.len();
            let snapshot = self.objects.clone();
            self.objects
                .retain(|o| o.1 == self.client || snapshot.iter().any(|p| p.0 == o.1));
            if self.objects.len() == before {
                break;
            }
        }
    }

    fn fail(&mut self, op: RmOp, e: GspError) -> RmError {
        self.last_error = Some(e);
        to_rm_error(op, e)
    }
}

/// Maps a transport error to the [`Rm`] trait's error.
pub fn to_rm_error(op: RmOp, e: GspError) -> RmError {
    match e {
        GspError::Status { status, .. } => RmError::Status { op, status },
        GspError::Timeout { .. } => RmError::Timeout { op },
        GspError::QueueFull { .. } => RmError::Transport {
            op,
            what: "GSP command queue full (GSP-RM stopped consuming)",
            errno: None,
        },
        GspError::RpcResult { .. } => RmError::Transport {
            op,
            what: "GSP-RM rejected the RPC",
            errno: None,
        },
        GspError::TooManyObjects => RmError::Transport {
            op,
            what: "too many live RM objects in this client",
            errno: None,
        },
        GspError::MessageTooLarge { .. } => RmError::Transport {
            op,
            what: "params too large for the GSP message queue",
            errno: None,
        },
        _ => RmError::Transport {
            op,
            what: "GSP message queue failure (see GspRm::last_error)",
            errno: None,
        },
    }
}

impl<B: DmaBuffer, M: Mmio, C: Clock, H: EventHandler> Rm for GspRm<B, M, C, H> {
    fn client(&self) -> Handle {
        self.client
    }

    fn abi(&self) -> RmAbi {
        self.rpc.config().abi
    }

    fn alloc(&mut self, parent: Handle, class: u32, params: &mut [u8]) -> Result<Handle, RmError> {
        let op = RmOp::Alloc { parent, class };
        if self.objects.is_full() {
            return Err(self.fail(op, GspError::TooManyObjects));
        }
        let h = self.new_handle().map_err(|e| self.fail(op, e))?;
        let client = self.client;
        self.rpc
            .rm_alloc(client, parent, h, class, params)
            .map_err(|e| self.fail(op, e))?;
        // Cannot fail: checked for room above.
        let _ = self.objects.push((h, parent));
        Ok(h)
    }

    fn control(&mut self, object: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmError> {
        let op = RmOp::Control { object, cmd };
        let client = self.client;
        self.rpc
            .rm_control(client, object, cmd, params)
            .map_err(|e| self.fail(op, e))
    }

    fn free(&mut self, object: Handle) -> Result<(), RmError> {
        let op = RmOp::Free { object };
        let client = self.client;
        let r = self.rpc.rm_free(client, object);
        match r {
            Ok(()) => {
                self.forget(object);
                Ok(())
            }
            Err(e) => Err(self.fail(op, e)),
        }
    }
}
