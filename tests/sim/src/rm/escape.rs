//! The escapes of a kernel RM that have no RPC form: DMA mapping into a VA space (NVOS46),
//! CPU mapping, and export/import of memory between GPUs.

use super::*;

impl RmModel {
    /// `NV_ESC_RM_MAP_MEMORY_DMA` (NVOS46): maps `length` bytes at `offset` of memory `memory`
    /// into the VA range of `dma` (an `NV01_MEMORY_VIRTUAL` or a VA space). With
    /// `NVOS46_FLAGS_DMA_OFFSET_FIXED` the mapping goes at `dma_offset`; otherwise RM picks the
    /// lowest free range aligned to the page size. Returns the VA.
    #[allow(clippy::too_many_arguments)]
    pub fn map_memory_dma(
        &mut self,
        client: Handle,
        dma: Handle,
        memory: Handle,
        offset: u64,
        length: u64,
        flags: u32,
        dma_offset: u64,
    ) -> Result<u64, RmStatus> {
        let (vaspace, lo, hi) = match &self.object(client, dma)?.kind {
            Kind::Virtual {
                vaspace,
                offset,
                limit,
            } => {
                let v = match vaspace {
                    Some(v) => *v,
                    None => self.default_vaspace(client)?,
                };
                let t = self.vaspace_table(client, v)?;
                let lo = (*offset).max(t.base());
                let hi = if *limit == 0 {
                    t.limit()
                } else {
                    (*limit).min(t.limit())
                };
                if lo > hi {
                    return Err(RmStatus::NV_ERR_INVALID_LIMIT);
                }
                (v, lo, hi)
            }
            Kind::VaSpace { table, .. } => (dma, table.base(), table.limit()),
            _ => return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE),
        };
        if let Kind::VaSpace {
            external: Some(_), ..
        } = self.object(client, vaspace)?.kind
        {
            // RM owns no page tables of a VA space whose directory the client set.
            return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
        }
        let table = self.vaspace_table(client, vaspace)?;
        let mem = self.memory(client, memory)?.clone();
        let length = if length == 0 {
            mem.size.saturating_sub(offset)
        } else {
            length
        };
        if offset.checked_add(length).is_none_or(|e| e > mem.size) || length == 0 {
            return Err(RmStatus::NV_ERR_INVALID_LIMIT);
        }
        let page = match (flags >> 8) & 0xf {
            NVOS46_PAGE_SIZE_4KB => 4 << 10,
            NVOS46_PAGE_SIZE_BIG => 64 << 10,
            NVOS46_PAGE_SIZE_HUGE => 2 << 20,
            0 if length >= 2 << 20 => 2 << 20,
            0 if length >= 64 << 10 => 64 << 10,
            0 => 4 << 10,
            _ => return Err(RmStatus::NV_ERR_INVALID_FLAGS),
        };
        let va = if flags & NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE != 0 {
            if !dma_offset.is_multiple_of(4096) || dma_offset < lo || dma_offset > hi {
                return Err(RmStatus::NV_ERR_INVALID_OFFSET);
            }
            dma_offset
        } else {
            table
                .find_free(lo, hi, length, page)
                .map_err(|_| RmStatus::NV_ERR_NO_MEMORY)?
        };
        let loc = mem.loc();
        table
            .map(Mapping {
                va,
                size: length,
                aperture: loc.aperture,
                phys: loc.addr + offset,
                read_only: flags & 3 == NVOS46_FLAGS_ACCESS_READ_ONLY,
            })
            .map_err(|e| match e {
                MapError::Overlap => RmStatus::NV_ERR_STATE_IN_USE,
                _ => RmStatus::NV_ERR_INVALID_OFFSET,
            })?;
        if let Kind::Memory(m) = &mut self.object_mut(client, memory)?.kind {
            m.mappings.push((vaspace, va));
        }
        Ok(va)
    }

    /// `NV_ESC_RM_UNMAP_MEMORY_DMA` (NVOS47): removes the mapping of `memory` at `va`.
    pub fn unmap_memory_dma(
        &mut self,
        client: Handle,
        memory: Handle,
        va: u64,
    ) -> Result<(), RmStatus> {
        let Kind::Memory(m) = &self.object(client, memory)?.kind else {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE);
        };
        let Some(i) = m.mappings.iter().position(|&(_, v)| v == va) else {
            return Err(RmStatus::NV_ERR_INVALID_OFFSET);
        };
        let (vaspace, _) = m.mappings[i];
        if let Ok(t) = self.vaspace_table(client, vaspace) {
            t.unmap(va);
        }
        if let Kind::Memory(m) = &mut self.object_mut(client, memory)?.kind {
            m.mappings.remove(i);
        }
        Ok(())
    }

    /// `NV_ESC_RM_MAP_MEMORY` + mmap: CPU access to memory object `memory`.
    pub fn cpu_map(&self, client: Handle, memory: Handle) -> Result<CpuMapping, RmStatus> {
        let m = self.memory(client, memory)?;
        Ok(match &m.backing {
            Backing::Vram { addr } => CpuMapping::Vram {
                vram: self.vram.clone().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?,
                addr: *addr,
                size: m.size,
            },
            Backing::Host(b) => CpuMapping::Host(b.clone()),
            // The CPU reaches a peer's memory through that GPU, not this one.
            Backing::Peer { .. } => return Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        })
    }

    /// What memory object `memory` is, for another GPU's RM to import with
    /// [`RmModel::import_peer_memory`] (a real RM dups the object under the other device:
    /// `NV_ESC_RM_DUP_OBJECT`). Imported objects are not exported again.
    pub fn export_memory(
        &self,
        client: Handle,
        memory: Handle,
    ) -> Result<ExportedMemory, RmStatus> {
        let m = self.memory(client, memory)?;
        match &m.backing {
            Backing::Vram { addr } => Ok(ExportedMemory::Vram {
                addr: *addr,
                size: m.size,
            }),
            Backing::Host(b) => Ok(ExportedMemory::Host(b.clone())),
            Backing::Peer { .. } => Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        }
    }

    /// Creates memory object `handle` (under the device or subdevice `parent`) for memory of
    /// another GPU: video memory reached through `peer_id` (the peer port the system set up
    /// when peer access was enabled), or host memory both GPUs share. Map it with
    /// [`RmModel::map_memory_dma`]; freeing it leaves the other GPU's memory alone.
    pub fn import_peer_memory(
        &mut self,
        client: Handle,
        parent: Handle,
        handle: Handle,
        mem: ExportedMemory,
        peer_id: Option<u8>,
    ) -> Result<(), RmStatus> {
        self.expect_parent(client, parent, &[NV01_DEVICE_0, NV20_SUBDEVICE_0])?;
        if handle.0 == 0 {
            return Err(RmStatus::NV_ERR_INVALID_OBJECT_NEW);
        }
        if self.client(client)?.objects.contains_key(&handle) {
            return Err(RmStatus::NV_ERR_INSERT_DUPLICATE_NAME);
        }
        let (class, size, backing) = match mem {
            ExportedMemory::Vram { addr, size } => {
                // Peer access must be enabled: without a peer id there is no path.
                let id = peer_id.ok_or(RmStatus::NV_ERR_INVALID_STATE)?;
                (NV01_MEMORY_LOCAL_USER, size, Backing::Peer { id, addr })
            }
            ExportedMemory::Host(b) => (NV01_MEMORY_SYSTEM, b.len() as u64, Backing::Host(b)),
        };
        let kind = Kind::Memory(Memory {
            size,
            backing,
            mappings: Vec::new(),
        });
        let cl = self.client_mut(client)?;
        cl.objects.insert(
            handle,
            Object {
                parent,
                class,
                kind,
                children: Vec::new(),
            },
        );
        if let Some(p) = cl.objects.get_mut(&parent) {
            p.children.push(handle);
        }
        Ok(())
    }
}
