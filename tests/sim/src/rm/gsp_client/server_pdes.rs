//! GSP-RM's part of an RM-owned VA space: the client's tables taken over by
//! `COPY_SERVER_RESERVED_PDES`, and the page GSP-RM maps for itself below them.

use super::*;

/// Where GSP-RM keeps the page tables and pages it maps in server-reserved ranges: its own
/// reservation at the end of FB (2 MiB just below the BAR1 tables it binds at FB end - 4 MiB),
/// which the driver's FB layout leaves alone (`gspFwRsvdStart` and above).
const SERVER_POOL: (u64, u64) = (6 << 20, 4 << 20);

/// What GSP-RM mapped for itself in the server-reserved range of an RM-owned VA space, and
/// uses while channels of that VA space are set up and their GR context is built.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerMapping {
    fmt: GmmuFormat,
    root: TableLoc,
    va: u64,
    pa: u64,
    marker: u64,
}

impl ServerMapping {
    /// GSP-RM reaches its page through the VA space: the client's tables must still lead to
    /// the entries GSP-RM wrote (a client that mapped over the reserved range, or freed or
    /// reused a table on the path, breaks GSP-RM). Walked afresh: a TLB entry may be evicted
    /// at any time.
    pub(crate) fn check(&self, core: &SimCore, user: &str) -> Result<(), RmStatus> {
        let t = crate::mmu::walk(core, self.fmt, self.root, self.va);
        let mut b = [0u8; 8];
        let ok = match t {
            Ok(w) => {
                w.aperture == Aperture::Vram
                    && w.phys == self.pa
                    && core.vram.read(self.pa, &mut b).is_ok()
                    && u64::from_le_bytes(b) == self.marker
            }
            Err(_) => false,
        };
        if ok {
            return Ok(());
        }
        log::warn!(
            "sim GSP-RM ({user}): its own mapping at VA {:#x} in the server-reserved range no \
             longer leads to its page at {:#x} ({t:?}): the client changed the page tables on \
             the path to the range it handed over (COPY_SERVER_RESERVED_PDES)",
            self.va,
            self.pa
        );
        Err(RmStatus::NV_ERR_INVALID_STATE)
    }
}

impl RmModel {
    /// `NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES` on an RM-owned VA space: the client
    /// owns its page tables (a GSP client's split VA space, `gvaspaceCopyServerRmReserved
    /// PdesToServerRm_IMPL`) and describes the levels from the root down to the one whose
    /// entries cover `pageSize`; GSP-RM takes them over as its own level instances
    /// (`gvaspaceCopyServerReservedPdes_IMPL`: levels found by `pageShift`, apertures
    /// `GMMU_APERTURE_*`), from then on GPU accesses in the VA space walk the client's tables,
    /// and GSP-RM fills the range below them for itself: it writes the entry covering each
    /// `pageSize` chunk of `[virtAddrLo, virtAddrHi]` in the last level with a table of its
    /// own and maps a page of its own there ("server RM can assign VA only inside the range",
    /// `gvaspaceReserveSplitVaSpace_IMPL`). Which page, and when GSP-RM uses it, is not public:
    /// the offset is an unknown, and the page is checked whenever a channel of the VA space is
    /// allocated or its GR context promoted. Copying fewer levels than reach `pageSize`
    /// (tinygrad on V3 formats, which works on real GPUs) is accepted; GSP-RM then maps
    /// nothing there (the entries it would write are the client's).
    pub(super) fn copy_server_reserved_pdes(
        &mut self,
        core: &SimCore,
        client: Handle,
        vaspace: Handle,
        p: &mut [u8],
    ) -> Result<(), RmStatus> {
        let g = self.gsp.as_ref().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?;
        let mmu = g.mmu.clone();
        let q: NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS = ctrl_params(p)?;
        let Kind::VaSpace {
            flags, external, ..
        } = &self.object(client, vaspace)?.kind
        else {
            return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
        };
        if flags & (NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED | SHARED_MANAGEMENT) != 0 {
            // Its tables come from SET_PAGE_DIRECTORY.
            return Err(RmStatus::NV_ERR_NOT_SUPPORTED);
        }
        if external.is_some() {
            return Err(RmStatus::NV_ERR_INVALID_STATE);
        }
        let fmt = GmmuFormat::for_chip(self.model.chipset.info());
        let dirs = fmt.dirs();
        let n = q.numLevelsToCopy as usize;
        let ps = q.pageSize;
        let (lo, hi) = (q.virtAddrLo, q.virtAddrHi);
        if n == 0
            || n >= dirs.len()
            || !ps.is_power_of_two()
            || hi < lo
            || !lo.is_multiple_of(ps)
            || !hi.wrapping_add(1).is_multiple_of(ps)
            || hi >> fmt.va_bits() != 0
        {
            return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
        }
        // Each level: its aperture, that it exists with the size given, that its page shift
        // is the format's for that depth, and that the one above leads to it at virtAddrLo.
        let mut tables: Vec<TableLoc> = Vec::with_capacity(n);
        for (i, l) in q.levels[..n].iter().enumerate() {
            let aperture = match l.aperture {
                GMMU_APERTURE_VIDEO => Aperture::Vram,
                GMMU_APERTURE_SYS_NONCOH => Aperture::SysNonCoherent,
                GMMU_APERTURE_SYS_COH => Aperture::SysCoherent,
                _ => return Err(RmStatus::NV_ERR_INVALID_ARGUMENT),
            };
            let t = TableLoc {
                aperture,
                addr: l.physAddress,
            };
            let (dhi, dlo) = dirs[i];
            let idx = (lo >> dlo) & ((1 << (dhi - dlo + 1)) - 1);
            let loc = PhysLoc {
                aperture,
                addr: l.physAddress,
            };
            if u32::from(l.pageShift) != dlo
                || !l.physAddress.is_multiple_of(4096)
                || l.size < (idx + 1) * 8
                || !exists(core, loc, l.size)
            {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            if let Some(&above) = tables.last()
                && crate::mmu::walker::dir_entry(core, fmt, above, i - 1, lo) != Ok(Some(t))
            {
                return Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
            }
            tables.push(t);
        }
        let root = tables[0];
        let last = n - 1;
        let reaches = 1u64 << dirs[last].1 == ps;
        let server = if reaches {
            Some(self.fill_server_range(core, fmt, &tables, lo, hi, ps)?)
        } else {
            None
        };
        let space: Arc<dyn AddressSpace> = Arc::new(mmu.address_space(fmt, root));
        if let Kind::VaSpace {
            space: s,
            external,
            server: srv,
            ..
        } = &mut self.object_mut(client, vaspace)?.kind
        {
            *s = space;
            *external = Some(root);
            *srv = server;
        }
        Ok(())
    }

    /// GSP-RM's part of `COPY_SERVER_RESERVED_PDES`: for each `ps` chunk of `[lo, hi]`, a
    /// table chain of its own below the entry in the last of the client's `tables`, and one
    /// page of its own mapped in the first chunk.
    fn fill_server_range(
        &mut self,
        core: &SimCore,
        fmt: GmmuFormat,
        tables: &[TableLoc],
        lo: u64,
        hi: u64,
        ps: u64,
    ) -> Result<ServerMapping, RmStatus> {
        let dirs = fmt.dirs();
        let (root, lvl) = (tables[0], tables.len() - 1);
        let table = tables[lvl];
        let fb = (self.model.vram_mib as u64) << 20;
        let g = self.gsp.as_mut().ok_or(RmStatus::NV_ERR_NOT_SUPPORTED)?;
        let pool_base = fb.saturating_sub(SERVER_POOL.0);
        let pool_pages = (SERVER_POOL.0 - SERVER_POOL.1) / 4096;
        let chunks = (hi - lo) / ps + 1;
        // A table per level below `lvl` (down to the 4 KiB PT) per chunk, and the page.
        let per_chunk = (dirs.len() - lvl) as u64;
        let need = chunks.saturating_mul(per_chunk).saturating_add(1);
        if g.server_pages.saturating_add(need) > pool_pages {
            return Err(RmStatus::NV_ERR_INSUFFICIENT_RESOURCES);
        }
        let page = |g: &mut GspMode| {
            let a = pool_base + g.server_pages * 4096;
            g.server_pages += 1;
            // Fresh tables hold only invalid entries.
            let _ = core.vram.write(a, &[0u8; 4096]);
            a
        };
        let probe_off = core
            .unknowns
            .pick("gsp.server_reserved.page_offset", &[0, ps / 2, ps - 4096]);
        let put = |table: TableLoc, off: u64, bytes: &[u8]| -> Result<(), RmStatus> {
            let ok = match table.aperture {
                Aperture::Vram => core.vram.write(table.addr + off, bytes).is_ok(),
                Aperture::SysCoherent | Aperture::SysNonCoherent => {
                    core.host.write(table.addr + off, bytes).is_ok()
                }
                Aperture::Peer(_) => false,
            };
            ok.then_some(()).ok_or(RmStatus::NV_ERR_INVALID_ARGUMENT)
        };
        let mut probe = None;
        for c in 0..chunks {
            // The chain leads to the page in the first chunk, to its start in the others.
            let va = lo + c * ps + if c == 0 { probe_off } else { 0 };
            let mut t = table;
            for (l, &(dhi, dlo)) in dirs.iter().enumerate().skip(lvl) {
                let idx = (va >> dlo) & ((1 << (dhi - dlo + 1)) - 1);
                let next = page(g);
                if l + 1 == dirs.len() {
                    let e = crate::mmu::walker::vram_pd0_small(fmt.version, next);
                    put(t, idx * 16, &e.to_le_bytes())?;
                } else {
                    let e = crate::mmu::walker::vram_pde(fmt.version, next);
                    put(t, idx * 8, &e.to_le_bytes())?;
                }
                t = TableLoc {
                    aperture: Aperture::Vram,
                    addr: next,
                };
            }
            if c == 0 {
                let pa = page(g);
                let pte = crate::mmu::walker::vram_pte(fmt.version, pa);
                put(t, ((va >> 12) & 511) * 8, &pte.to_le_bytes())?;
                let marker = 0x4753_5052_4d00_0000 | ((va >> 12) & 0xff_ffff);
                let _ = core.vram.write(pa, &marker.to_le_bytes());
                probe = Some(ServerMapping {
                    fmt,
                    root,
                    va,
                    pa,
                    marker,
                });
            }
        }
        probe.ok_or(RmStatus::NV_ERR_INVALID_STATE)
    }
}
