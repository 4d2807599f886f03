//! Allocation and free: which parent may hold which class, and what each class's params
//! must say, as RM checks them.

use super::*;

impl RmModel {
    pub(super) fn check_class(&self, class: u32) -> Result<(), RmStatus> {
        if self.rm.has_class(class) {
            return Ok(());
        }
        if class_kind(class).is_some() {
            // Another generation's engine class: the H200 answers AMPERE_COMPUTE_B with this.
            st(RmStatus::NV_ERR_NOT_SUPPORTED)
        } else {
            st(RmStatus::NV_ERR_INVALID_CLASS)
        }
    }

    pub(super) fn parent_class(&self, c: Handle, parent: Handle) -> Result<u32, RmStatus> {
        self.object(c, parent)
            .map(|o| o.class)
            .map_err(|_| RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
    }

    pub(super) fn expect_parent(
        &self,
        c: Handle,
        parent: Handle,
        classes: &[u32],
    ) -> Result<(), RmStatus> {
        let pc = self.parent_class(c, parent)?;
        if classes.contains(&pc) {
            Ok(())
        } else {
            st(RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
        }
    }

    pub(super) fn alloc_memory(&mut self, class: u32, p: &mut [u8]) -> Result<Memory, RmStatus> {
        let mut a: NV_MEMORY_ALLOCATION_PARAMS = params(p)?;
        if a.size == 0 {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let huge = a.attr & (3 << 23) == attr::PAGE_SIZE_HUGE;
        let page: u64 = if huge { 2 << 20 } else { 4 << 10 };
        let size = a
            .size
            .checked_next_multiple_of(page)
            .ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)?;
        let align = a.alignment.max(page);
        if !align.is_power_of_two() {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let backing = if class == NV01_MEMORY_LOCAL_USER {
            if a.attr & attr::LOCATION_MASK == attr::LOCATION_PCI {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            let addr = self
                .heap
                .alloc(size, align)
                .ok_or(RmStatus::NV_ERR_NO_MEMORY)?;
            Backing::Vram { addr }
        } else {
            let dma = self.dma.as_ref().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?;
            let n = usize::try_from(size).map_err(|_| RmStatus::NV_ERR_NO_MEMORY)?;
            let b = dma.alloc_dma(n).map_err(|_| RmStatus::NV_ERR_NO_MEMORY)?;
            Backing::Host(Arc::new(b))
        };
        a.size = size;
        a.limit = size - 1;
        if let Backing::Vram { addr } = backing {
            a.offset = addr;
        }
        write_back(p, &a);
        Ok(Memory {
            size,
            backing,
            mappings: Vec::new(),
        })
    }

    pub(super) fn alloc_channel(
        &mut self,
        core: &mut SimCore,
        c: Handle,
        parent: Handle,
        class: u32,
        p: &mut [u8],
    ) -> Result<Kind, RmStatus> {
        let a: NV_CHANNEL_ALLOC_PARAMS = params(p)?;
        let (tsg, tsg_engine, tsg_vaspace) = match &self.object(c, parent)?.kind {
            Kind::ChannelGroup {
                tsg,
                engine_type,
                vaspace,
                ..
            } => (*tsg, *engine_type, *vaspace),
            Kind::Device => {
                let t = self.next_tsg;
                self.next_tsg += 1;
                (t, a.engineType, None)
            }
            _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT),
        };
        let entries = a.gpFifoEntries;
        if entries < 2 || !entries.is_power_of_two() {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let vaspace = if a.hContextShare != 0 {
            match &self.object(c, Handle(a.hContextShare))?.kind {
                Kind::CtxShare { vaspace } => *vaspace,
                _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
            }
        } else if a.hVASpace != 0 {
            Handle(a.hVASpace)
        } else if let Some(v) = tsg_vaspace {
            v
        } else {
            self.default_vaspace(c)?
        };
        let table = self.vaspace_table(c, vaspace)?;
        let space = self.vaspace_space(c, vaspace)?;
        self.check_external_ready(core, c, vaspace)?;
        if self.gsp.is_some() {
            let first_of_tsg = !crate::fifo::lock(&self.fifo)
                .channels()
                .any(|ch| ch.desc().tsg == tsg);
            let engine_type = if tsg_engine == 0 {
                NV2080_ENGINE_TYPE_GRAPHICS
            } else {
                tsg_engine
            };
            let server = match self.object(c, vaspace)?.kind {
                Kind::VaSpace { server, .. } => server,
                _ => None,
            };
            return self.alloc_channel_gsp(
                core,
                &a,
                class,
                tsg,
                engine_type,
                space,
                first_of_tsg,
                server,
            );
        }
        let ring_end = a
            .gpFifoOffset
            .checked_add(entries as u64 * 8 - 1)
            .ok_or(RmStatus::NV_ERR_INVALID_OFFSET)?;
        if table.lookup(a.gpFifoOffset).is_none() || table.lookup(ring_end).is_none() {
            return Err(RmStatus::NV_ERR_INVALID_OFFSET);
        }
        let userd_mem = self.memory(c, Handle(a.hUserdMemory[0]))?;
        let userd_off = a.userdOffset[0];
        if userd_off
            .checked_add(nvbare_core::channel::gpfifo::USERD_SIZE)
            .is_none_or(|e| e > userd_mem.size)
            || !userd_off.is_multiple_of(512)
        {
            return Err(RmStatus::NV_ERR_INVALID_OFFSET);
        }
        let mut userd = userd_mem.loc();
        userd.addr += userd_off;
        let notifier = if a.hObjectError != 0 {
            let n = self.memory(c, Handle(a.hObjectError))?;
            if n.size < (NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1 * 16) as u64 {
                return Err(RmStatus::NV_ERR_INVALID_LIMIT);
            }
            Some(n.loc())
        } else {
            None
        };
        // A fresh channel starts with GPGet = GPPut = 0 (RM initializes USERD).
        {
            let mut f = crate::fifo::lock(&self.fifo);
            let chid = self.next_chid;
            self.next_chid += 1;
            let token = chid;
            f.add_channel(ChannelDesc {
                chid,
                token,
                tsg,
                class,
                engine_type: if tsg_engine == 0 {
                    NV2080_ENGINE_TYPE_GRAPHICS
                } else {
                    tsg_engine
                },
                space,
                gpfifo_va: a.gpFifoOffset,
                entries,
                userd,
                notifier,
            });
            Ok(Kind::Channel { chid, token, tsg })
        }
    }

    pub(super) fn alloc_kind(
        &mut self,
        core: &mut SimCore,
        caller: RmCaller,
        parent: Handle,
        class: u32,
        p: &mut [u8],
    ) -> Result<Kind, RmStatus> {
        let c = caller.client;
        Ok(match class {
            NV01_DEVICE_0 => {
                self.expect_parent(c, parent, &[NV01_ROOT, NV01_ROOT_CLIENT])?;
                let a: NV0080_ALLOC_PARAMETERS = params(p)?;
                if a.deviceId != 0 {
                    return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                }
                Kind::Device
            }
            NV20_SUBDEVICE_0 => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                if !p.is_empty() {
                    let a: NV2080_ALLOC_PARAMETERS = params(p)?;
                    if a.subDeviceId != 0 {
                        return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
                    }
                }
                Kind::Subdevice
            }
            FERMI_VASPACE_A => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                alloc_vaspace(caller.abi, p)?
            }
            NV01_MEMORY_VIRTUAL => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                self.alloc_virtual(c, p)?
            }
            NV01_MEMORY_LOCAL_USER | NV01_MEMORY_SYSTEM => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0, NV20_SUBDEVICE_0])?;
                Kind::Memory(self.alloc_memory(class, p)?)
            }
            KEPLER_CHANNEL_GROUP_A => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0])?;
                self.alloc_channel_group(c, p)?
            }
            FERMI_CONTEXT_SHARE_A => {
                self.expect_parent(c, parent, &[KEPLER_CHANNEL_GROUP_A])?;
                self.alloc_ctxshare(core, c, parent, p)?
            }
            GT200_DEBUGGER => {
                self.expect_parent(c, parent, &[NV01_DEVICE_0, NV01_ROOT, NV01_ROOT_CLIENT])?;
                self.alloc_debugger(c, p)?
            }
            _ => self.alloc_engine_class(core, c, parent, class, p)?,
        })
    }

    /// The VA space an alloc's `hVASpace` names (0: none named); it must be one.
    fn named_vaspace(&self, c: Handle, h: u32) -> Result<Option<Handle>, RmStatus> {
        if h == 0 {
            return Ok(None);
        }
        self.vaspace_table(c, Handle(h))?;
        Ok(Some(Handle(h)))
    }

    /// `NV01_MEMORY_VIRTUAL`: virtmemConstruct returns at once for this class; the VA space is
    /// looked up when the range is used, so a device may have none yet.
    pub(super) fn alloc_virtual(&self, c: Handle, p: &[u8]) -> Result<Kind, RmStatus> {
        let a: NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS = params(p)?;
        let vaspace = self.named_vaspace(c, a.hVASpace)?;
        if a.limit != 0 && a.offset > a.limit {
            return Err(RmStatus::NV_ERR_INVALID_LIMIT);
        }
        Ok(Kind::Virtual {
            vaspace,
            offset: a.offset,
            limit: a.limit,
        })
    }

    /// `KEPLER_CHANNEL_GROUP_A`: a TSG on the graphics engine or one of the copy engines.
    pub(super) fn alloc_channel_group(&mut self, c: Handle, p: &[u8]) -> Result<Kind, RmStatus> {
        let a: NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS = params(p)?;
        let copy_engines = NV2080_ENGINE_TYPE_COPY0..NV2080_ENGINE_TYPE_COPY0 + 10;
        if a.engineType != NV2080_ENGINE_TYPE_GRAPHICS && !copy_engines.contains(&a.engineType) {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let vaspace = self.named_vaspace(c, a.hVASpace)?;
        let tsg = self.next_tsg;
        self.next_tsg += 1;
        Ok(Kind::ChannelGroup {
            tsg,
            engine_type: a.engineType,
            vaspace,
            timeslice_us: 1000,
        })
    }

    /// `FERMI_CONTEXT_SHARE_A`: its VA space is the one named, else the TSG's, else the
    /// device's only one.
    pub(super) fn alloc_ctxshare(
        &mut self,
        core: &mut SimCore,
        c: Handle,
        parent: Handle,
        p: &[u8],
    ) -> Result<Kind, RmStatus> {
        let a: NV_CTXSHARE_ALLOCATION_PARAMETERS = params(p)?;
        let vaspace = if a.hVASpace != 0 {
            Handle(a.hVASpace)
        } else if let Kind::ChannelGroup {
            vaspace: Some(v), ..
        } = self.object(c, parent)?.kind
        {
            v
        } else {
            self.default_vaspace(c)?
        };
        self.vaspace_table(c, vaspace)?;
        self.check_external_ready(core, c, vaspace)?;
        Ok(Kind::CtxShare { vaspace })
    }

    /// `GT200_DEBUGGER`: bound to the channel of `hClass3dObject`, if given.
    pub(super) fn alloc_debugger(&self, c: Handle, p: &[u8]) -> Result<Kind, RmStatus> {
        let a: NV83DE_ALLOC_PARAMETERS = params(p)?;
        if a.hDebuggerClient_Obsolete != 0 || Handle(a.hAppClient) != c {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        let chid = if a.hClass3dObject != 0 {
            match self.object(c, Handle(a.hClass3dObject))?.kind {
                Kind::Engine { chid } => Some(chid),
                _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
            }
        } else {
            None
        };
        Ok(Kind::Debugger { chid })
    }

    /// The per-generation classes: channels, engine objects on a channel, usermode.
    pub(super) fn alloc_engine_class(
        &mut self,
        core: &mut SimCore,
        c: Handle,
        parent: Handle,
        class: u32,
        p: &mut [u8],
    ) -> Result<Kind, RmStatus> {
        self.check_class(class)?;
        Ok(match class_kind(class) {
            Some(ClassKind::Gpfifo) => {
                self.expect_parent(c, parent, &[KEPLER_CHANNEL_GROUP_A, NV01_DEVICE_0])?;
                self.alloc_channel(core, c, parent, class, p)?
            }
            Some(ClassKind::Compute) | Some(ClassKind::Copy) => {
                let Kind::Channel { chid, .. } = self
                    .object(c, parent)
                    .map_err(|_| RmStatus::NV_ERR_INVALID_OBJECT_PARENT)?
                    .kind
                else {
                    return Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT);
                };
                crate::fifo::lock(&self.fifo).add_object(chid, class);
                if class_kind(class) == Some(ClassKind::Compute) {
                    self.gsp_compute_object(chid);
                }
                Kind::Engine { chid }
            }
            Some(ClassKind::Usermode) => {
                self.expect_parent(c, parent, &[NV20_SUBDEVICE_0])?;
                Kind::Usermode
            }
            None => Kind::Other,
        })
    }
    pub(super) fn free_object(&mut self, c: Handle, h: Handle) {
        let Ok(o) = self.object(c, h).cloned() else {
            return;
        };
        for child in o.children.iter().rev() {
            self.free_object(c, *child);
        }
        match &o.kind {
            Kind::Memory(m) => {
                for (vs, va) in &m.mappings {
                    if let Ok(t) = self.vaspace_table(c, *vs) {
                        t.unmap(*va);
                    }
                }
                if let Backing::Vram { addr } = m.backing {
                    self.heap.free(addr, m.size);
                }
            }
            Kind::Channel { chid, .. } => {
                crate::fifo::lock(&self.fifo).remove_channel(*chid);
                self.gsp_channel_freed(*chid);
            }
            Kind::Engine { chid } => {
                crate::fifo::lock(&self.fifo).remove_object(*chid, o.class);
            }
            _ => {}
        }
        if let Ok(cl) = self.client_mut(c) {
            cl.objects.remove(&h);
            if let Some(p) = cl.objects.get_mut(&o.parent) {
                p.children.retain(|x| *x != h);
            }
        }
    }
}

/// `FERMI_VASPACE_A`: params of the caller's ABI's size exactly; only `GPU_NEW` VA spaces.
fn alloc_vaspace(abi: RmAbi, p: &[u8]) -> Result<Kind, RmStatus> {
    let expected = match abi {
        RmAbi::R570 => size_of::<NV_VASPACE_ALLOCATION_PARAMETERS_R570>(),
        RmAbi::R580 => size_of::<NV_VASPACE_ALLOCATION_PARAMETERS_R580>(),
    };
    if p.len() != expected {
        return Err(RmStatus::NV_ERR_INVALID_PARAM_STRUCT);
    }
    let a = VaSpaceAlloc::decode(p).ok_or(RmStatus::NV_ERR_INVALID_PARAM_STRUCT)?;
    if a.index != NV_VASPACE_ALLOCATION_INDEX_GPU_NEW {
        return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
    }
    let base = a.va_base.max(0x1000);
    let limit = if a.va_size == 0 {
        DEFAULT_VA_LIMIT
    } else {
        base.checked_add(a.va_size - 1)
            .ok_or(RmStatus::NV_ERR_INVALID_LIMIT)?
    };
    let table = Arc::new(VaTable::new(base, limit));
    Ok(Kind::VaSpace {
        space: table.clone(),
        table,
        flags: a.flags,
        external: None,
        server: None,
    })
}
