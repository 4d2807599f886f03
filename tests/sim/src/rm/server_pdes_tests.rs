//! `NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES` as GSP-RM answers it: what it refuses,
//! what it writes into the client's tables, and that it notices when they change under it.

use super::*;
use crate::mmu::walker::{dir_entry, vram_pde};
use crate::mmu::{GmmuFormat, MmuConfig, SimMmu, TableLoc};
use crate::unknowns::Mode;
use crate::{SimConfig, SimGpu, models};
use nvbare_core::gsp::client::{
    GMMU_APERTURE_PEER, GMMU_APERTURE_VIDEO, NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES,
    NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS,
};
use zerocopy::IntoBytes;

const C: Handle = Handle(0xc1d0_0001);
const DEVICE: Handle = Handle(1);
const VASPACE: Handle = Handle(3);
/// `SPLIT_VAS_SERVER_RM_MANAGED_VA_START` / `_SIZE`.
const LO: u64 = 1 << 32;
const SPAN: u64 = 512 << 20;
/// Where the test's tables are: one per level, 4 KiB apart.
const TABLES: u64 = 32 << 20;

struct T {
    gpu: Arc<SimGpu>,
    rm: Arc<Mutex<RmModel>>,
    fmt: GmmuFormat,
}

impl T {
    fn new(model: ChipModel, mode: Mode) -> T {
        let gpu = SimGpu::new(
            SimConfig::new(model)
                .with_virtual_time()
                .with_unknowns(mode),
        );
        let rm = RmModel::install(&gpu).unwrap();
        let mmu = SimMmu::install(&gpu, MmuConfig::default());
        rm.lock().unwrap().set_gsp_mode(mmu);
        let t = T {
            fmt: GmmuFormat::for_chip(model.chipset.info()),
            gpu,
            rm,
        };
        t.alloc(Handle(0), C, NV01_ROOT, &mut []).unwrap();
        let mut d = NV0080_ALLOC_PARAMETERS::default();
        t.alloc(C, DEVICE, NV01_DEVICE_0, d.as_mut_bytes()).unwrap();
        t
    }
    fn alloc(&self, p: Handle, h: Handle, class: u32, params: &mut [u8]) -> Result<(), RmStatus> {
        let c = RmCaller {
            abi: RmAbi::R570,
            client: C,
        };
        self.gpu
            .with_core(|core| self.rm.lock().unwrap().alloc(core, c, p, h, class, params))
    }
    fn vaspace(&self, flags: u32) {
        let mut v = VaSpaceAlloc {
            flags,
            ..Default::default()
        }
        .encode(RmAbi::R570);
        self.alloc(DEVICE, VASPACE, FERMI_VASPACE_A, v.as_mut_bytes())
            .unwrap();
    }
    fn copy(
        &self,
        p: &mut NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS,
    ) -> Result<(), RmStatus> {
        let c = RmCaller {
            abi: RmAbi::R570,
            client: C,
        };
        self.gpu.with_core(|core| {
            self.rm.lock().unwrap().control(
                core,
                c,
                VASPACE,
                NV90F1_CTRL_CMD_VASPACE_COPY_SERVER_RESERVED_PDES,
                p.as_mut_bytes(),
            )
        })
    }
    fn ready(&self) -> Result<(), RmStatus> {
        self.gpu.with_core(|core| {
            self.rm
                .lock()
                .unwrap()
                .check_external_ready(core, C, VASPACE)
        })
    }
    fn table(l: usize) -> TableLoc {
        TableLoc {
            aperture: Aperture::Vram,
            addr: TABLES + 4096 * l as u64,
        }
    }
    /// The client's tables from the root to the level covering `SPAN` (linked), and the
    /// params describing them.
    fn client_tables(&self) -> NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS {
        let dirs = self.fmt.dirs();
        let depth = dirs.iter().position(|&(_, lo)| 1u64 << lo == SPAN).unwrap();
        let mut p = NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS {
            pageSize: SPAN,
            virtAddrLo: LO,
            virtAddrHi: LO + SPAN - 1,
            numLevelsToCopy: depth as u32 + 1,
            ..Default::default()
        };
        for (l, &(hi, lo)) in dirs.iter().enumerate().take(depth + 1) {
            if l < depth {
                let idx = (LO >> lo) & ((1 << (hi - lo + 1)) - 1);
                let e = vram_pde(self.fmt.version, Self::table(l + 1).addr);
                self.gpu
                    .vram()
                    .write(Self::table(l).addr + idx * 8, &e.to_le_bytes())
                    .unwrap();
            }
            p.levels[l].physAddress = Self::table(l).addr;
            p.levels[l].size = 4096;
            p.levels[l].aperture = GMMU_APERTURE_VIDEO;
            p.levels[l].pageShift = lo as u8;
        }
        p
    }
    fn entry(&self, l: usize) -> Option<TableLoc> {
        self.gpu
            .with_core(|core| dir_entry(core, self.fmt, Self::table(l), l, LO).unwrap())
    }
}

#[test]
fn gsp_rm_fills_the_range_it_manages_and_checks_it_stays_reachable() {
    for model in [models::AD102, models::GH100, models::GB202] {
        for mode in [Mode::Helpful, Mode::Pessimistic, Mode::Random(3)] {
            let t = T::new(model, mode);
            t.vaspace(0);
            // No client tables yet: no channel may use the VA space.
            assert_eq!(t.ready(), Err(RmStatus::NV_ERR_INVALID_STATE));
            let mut p = t.client_tables();
            let last = p.numLevelsToCopy as usize - 1;
            assert_eq!(t.entry(last), None);
            t.copy(&mut p).unwrap();
            // GSP-RM wrote the entry covering the range with a table of its own, at the end
            // of FB (its reservation).
            let own = t.entry(last).expect("GSP-RM's table below the last level");
            let fb = (model.vram_mib as u64) << 20;
            assert!(
                own.addr >= fb - (6 << 20) && own.addr < fb - (4 << 20),
                "{model:?}"
            );
            t.ready().unwrap();
            // Copied once only.
            assert_eq!(t.copy(&mut p), Err(RmStatus::NV_ERR_INVALID_STATE));
            // The client overwriting that entry breaks GSP-RM's own mapping.
            let dirs = t.fmt.dirs();
            let (hi, lo) = dirs[last];
            let idx = (LO >> lo) & ((1 << (hi - lo + 1)) - 1);
            t.gpu
                .vram()
                .write(T::table(last).addr + idx * 8, &0u64.to_le_bytes())
                .unwrap();
            assert_eq!(
                t.ready(),
                Err(RmStatus::NV_ERR_INVALID_STATE),
                "{model:?} {mode}"
            );
        }
    }
}

#[test]
fn server_reserved_pdes_refuses_what_gsp_rm_cannot_take_over() {
    let t = T::new(models::GH100, Mode::Helpful);
    t.vaspace(0);
    let good = t.client_tables();
    let bad = |f: &dyn Fn(&mut NV90F1_CTRL_VASPACE_COPY_SERVER_RESERVED_PDES_PARAMS)| {
        let mut p = good;
        f(&mut p);
        t.copy(&mut p)
    };
    let inval = Err(RmStatus::NV_ERR_INVALID_ARGUMENT);
    // A page shift that is not the format's for that depth (no level found).
    assert_eq!(bad(&|p| p.levels[1].pageShift += 1), inval);
    // GMMU_APERTURE_PEER, and a value that is none.
    assert_eq!(bad(&|p| p.levels[0].aperture = GMMU_APERTURE_PEER), inval);
    assert_eq!(bad(&|p| p.levels[0].aperture = 9), inval);
    // A level the one above does not lead to.
    assert_eq!(bad(&|p| p.levels[2].physAddress += 4096), inval);
    // A range not aligned to pageSize, a page size that is no power of two, no levels,
    // more levels than the format has above PD0, a size too small to hold the entry.
    assert_eq!(bad(&|p| p.virtAddrLo += 4096), inval);
    assert_eq!(bad(&|p| p.pageSize += 1), inval);
    assert_eq!(bad(&|p| p.numLevelsToCopy = 0), inval);
    assert_eq!(bad(&|p| p.numLevelsToCopy = 6), inval);
    let last = good.numLevelsToCopy as usize - 1;
    // The entry covering 4 GiB in PD1 is the ninth (72 bytes in).
    assert_eq!(bad(&|p| p.levels[last].size = 64), inval);
    // None of those changed anything.
    assert_eq!(t.ready(), Err(RmStatus::NV_ERR_INVALID_STATE));
    let mut p = good;
    t.copy(&mut p).unwrap();
}

#[test]
fn an_externally_owned_va_space_takes_its_tables_from_set_page_directory() {
    let t = T::new(models::AD102, Mode::Helpful);
    t.vaspace(NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED);
    let mut p = t.client_tables();
    assert_eq!(t.copy(&mut p), Err(RmStatus::NV_ERR_NOT_SUPPORTED));
}

#[test]
fn a_copy_that_stops_above_page_size_leaves_the_clients_entries_alone() {
    // tinygrad copies three levels on every format (on V3 that stops at PD2) and works on
    // real GPUs: GSP-RM must not overwrite the client's PD2 entry then.
    let t = T::new(models::GB202, Mode::Pessimistic);
    t.vaspace(0);
    let mut p = t.client_tables();
    let full = p.numLevelsToCopy;
    p.numLevelsToCopy = full - 1;
    let below = t.entry(full as usize - 2);
    t.copy(&mut p).unwrap();
    assert_eq!(t.entry(full as usize - 2), below);
    assert_eq!(t.entry(full as usize - 1), None);
    t.ready().unwrap();
}
