//! What GSP-RM does with each RPC: the ones it answers itself, and RM calls handed to the
//! [`RmService`].

use super::*;

impl Inner {
    /// Applies the first [`Fault::PatchControl`] for `cmd`, if one is queued.
    pub(super) fn patch_control(&mut self, cmd: u32, params: &mut [u8]) {
        let Some(i) = self
            .faults
            .iter()
            .position(|f| matches!(f, Fault::PatchControl { cmd: c, .. } if *c == cmd))
        else {
            return;
        };
        if let Some(Fault::PatchControl { offset, value, .. }) = self.faults.remove(i) {
            match params.get_mut(offset..offset.saturating_add(4)) {
                Some(w) => w.copy_from_slice(&value.to_le_bytes()),
                None => self.stats.errors.push(format!(
                    "PatchControl: offset {offset} is beyond the {}-byte parameters of {cmd:#x}",
                    params.len()
                )),
            }
        }
    }

    /// Records an RPC in the trace: `what` names its object or command, `params` are the
    /// parameters as received, `status` the result (`None` for RPCs nobody answers).
    pub(super) fn trace_rpc(&self, function: u32, what: &str, params: &[u8], status: Option<u32>) {
        let Some(t) = &self.cfg.trace else {
            return;
        };
        let st = status.map_or_else(|| "-".to_string(), |s| format!("{s:#x}"));
        t.line(&format!(
            "rpc {}{what} params={} hash={:08x} status={st}",
            rpc::FunctionName(function),
            params.len(),
            crate::trace::hash(params)
        ));
    }

    pub(super) fn dispatch(
        &mut self,
        core: &mut SimCore,
        hdr: rpc_message_header_v03_00,
        body: Vec<u8>,
    ) {
        self.stats.rpcs += 1;
        match hdr.function {
            NV_VGPU_MSG_FUNCTION_GSP_SET_SYSTEM_INFO => {
                if body.len() != std::mem::size_of::<GspSystemInfo>() {
                    self.stats.errors.push(format!(
                        "GSP_SET_SYSTEM_INFO of {} bytes (r570: 928)",
                        body.len()
                    ));
                }
                self.trace_rpc(hdr.function, "", &body, None);
                self.stats.system_info = Some(body);
            }
            NV_VGPU_MSG_FUNCTION_SET_REGISTRY => {
                self.trace_rpc(hdr.function, "", &body, None);
                self.set_registry(&body);
            }
            NV_VGPU_MSG_FUNCTION_GET_GSP_STATIC_INFO => {
                self.trace_rpc(hdr.function, "", &[], Some(0));
                let info = static_info(&self.cfg.model);
                self.reply(hdr, 0, info.as_bytes().to_vec());
            }
            NV_VGPU_MSG_FUNCTION_UNLOADING_GUEST_DRIVER => {
                self.trace_rpc(hdr.function, "", &body, Some(0));
                self.stats.unloaded = true;
                self.reply(hdr, 0, body);
                // GSP-RM suspends and halts once it has answered: nothing after this is read
                // (a driver that sends more waits for a reply that never comes).
                self.halted = true;
            }
            NV_VGPU_MSG_FUNCTION_GSP_RM_ALLOC => self.rm_alloc(core, hdr, body),
            NV_VGPU_MSG_FUNCTION_GSP_RM_CONTROL => self.rm_control(core, hdr, body),
            NV_VGPU_MSG_FUNCTION_FREE => self.rm_free(core, hdr, body),
            _ => self.rm_rpc(core, hdr, body),
        }
    }

    /// SET_REGISTRY: records each entry's value (a string's or binary's length).
    fn set_registry(&mut self, body: &[u8]) {
        let n = u32_at(body, 4);
        for i in 0..n.min(4096) {
            match registry::entry(body, i) {
                Ok(e) => {
                    let v = match e.value {
                        registry::RegistryValue::Dword(v) => v,
                        registry::RegistryValue::String(b) | registry::RegistryValue::Binary(b) => {
                            b.len() as u32
                        }
                    };
                    self.stats
                        .registry
                        .insert(String::from_utf8_lossy(e.name).into_owned(), v);
                }
                Err(e) => {
                    self.stats
                        .errors
                        .push(format!("SET_REGISTRY entry {i}: {e}"));
                    break;
                }
            }
        }
    }

    /// GSP_RM_ALLOC: `rpc_gsp_rm_alloc_v03_00` then `paramsSize` bytes of params.
    fn rm_alloc(&mut self, core: &mut SimCore, hdr: rpc_message_header_v03_00, mut body: Vec<u8>) {
        let traced_in = self.cfg.trace.is_some().then(|| body.clone());
        let Ok((a, rest)) = rpc_gsp_rm_alloc_v03_00::read_from_prefix(&body) else {
            self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
            return;
        };
        let n = a.paramsSize as usize;
        if rest.len() < n {
            self.reply(hdr, NV_ERR_INVALID_PARAM_STRUCT, body);
            return;
        }
        let caller = RmCaller {
            abi: self.cfg.abi,
            client: Handle(a.hClient),
        };
        let r = self.rm.alloc(
            core,
            caller,
            Handle(a.hParent),
            Handle(a.hObject),
            a.hClass,
            &mut body[32..32 + n],
        );
        let status = r.err().map_or(0, |s| s.0);
        if let Some(b) = &traced_in {
            let what = format!(
                " class={:#x}{} parent={:#x} object={:#x}",
                a.hClass,
                class_label(a.hClass),
                a.hParent,
                a.hObject
            );
            self.trace_rpc(hdr.function, &what, &b[32..32 + n], Some(status));
        }
        body[16..20].copy_from_slice(&status.to_le_bytes());
        // The kernel RM copies paramsSize bytes back whatever the reply's length
        // (rpcRmApiAlloc_GSP), so whether GSP-RM returns them is unknown: the shortest
        // reply is the fixed part.
        if status == 0 && self.unknowns.hard("gsp.alloc.reply_without_params") {
            body.truncate(32);
        }
        self.log_rpc(core, &hdr, status);
        self.reply(hdr, status, body);
    }

    /// GSP_RM_CONTROL: the ABI's control header then `paramsSize` bytes of params.
    fn rm_control(
        &mut self,
        core: &mut SimCore,
        hdr: rpc_message_header_v03_00,
        mut body: Vec<u8>,
    ) {
        let traced_in = self.cfg.trace.is_some().then(|| body.clone());
        let h = rpc::rm_control_header_size(self.cfg.abi);
        if body.len() < h {
            self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
            return;
        }
        let n = u32_at(&body, 16) as usize;
        if body.len() < h + n {
            self.reply(hdr, NV_ERR_INVALID_PARAM_STRUCT, body);
            return;
        }
        let caller = RmCaller {
            abi: self.cfg.abi,
            client: Handle(u32_at(&body, 0)),
        };
        let (obj, cmd) = (u32_at(&body, 4), u32_at(&body, 8));
        let r = self
            .rm
            .control(core, caller, Handle(obj), cmd, &mut body[h..h + n]);
        if r.is_ok() {
            self.patch_control(cmd, &mut body[h..h + n]);
        }
        let status = r.err().map_or(0, |s: RmStatus| s.0);
        if let Some(b) = &traced_in {
            let what = format!(" cmd={cmd:#x} object={obj:#x}");
            self.trace_rpc(hdr.function, &what, &b[h..h + n], Some(status));
        }
        body[12..16].copy_from_slice(&status.to_le_bytes());
        self.log_rpc(core, &hdr, status);
        self.reply(hdr, status, body);
    }

    /// FREE: `NVOS00_PARAMETERS_v03_00`.
    fn rm_free(&mut self, core: &mut SimCore, hdr: rpc_message_header_v03_00, mut body: Vec<u8>) {
        let Ok(p) = NVOS00_PARAMETERS_v03_00::read_from_prefix(&body).map(|x| x.0) else {
            self.reply(hdr, RPC_INVALID_MESSAGE_FORMAT, body);
            return;
        };
        let caller = RmCaller {
            abi: self.cfg.abi,
            client: Handle(p.hRoot),
        };
        let r = self
            .rm
            .free(core, caller, Handle(p.hObjectParent), Handle(p.hObjectOld));
        let status = r.err().map_or(0, |s| s.0);
        let what = format!(" object={:#x}", p.hObjectOld);
        self.trace_rpc(hdr.function, &what, &[], Some(status));
        body[12..16].copy_from_slice(&status.to_le_bytes());
        self.log_rpc(core, &hdr, status);
        self.reply(hdr, status, body);
    }

    /// Any other function: the RM's, if it answers it; else `RPC_UNKNOWN_FUNCTION`.
    fn rm_rpc(&mut self, core: &mut SimCore, hdr: rpc_message_header_v03_00, mut body: Vec<u8>) {
        let traced_in = self.cfg.trace.is_some().then(|| body.clone());
        let function = hdr.function;
        match self.rm.rpc(core, self.cfg.abi, function, &mut body) {
            Some(r) => {
                let status = r.err().map_or(0, |s| s.0);
                if let Some(b) = &traced_in {
                    self.trace_rpc(function, "", b, Some(status));
                }
                self.log_rpc(core, &hdr, status);
                self.reply(hdr, status, body);
            }
            None => {
                if let Some(b) = &traced_in {
                    self.trace_rpc(function, "", b, Some(RPC_UNKNOWN_FUNCTION));
                }
                self.reply(hdr, RPC_UNKNOWN_FUNCTION, body)
            }
        }
    }
}

/// The little-endian `u32` at `o`, or 0 past the end.
fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .unwrap_or(0)
}

/// ` (NAME)` for a class the core knows, or nothing.
fn class_label(class: u32) -> String {
    nvbare_core::rm::class::class_name(class).map_or_else(String::new, |n| format!(" ({n})"))
}
