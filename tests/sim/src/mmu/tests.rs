//! The driver's mapper (`nvbare_core::mm`) against the simulated GMMU: tables in sim VRAM
//! (through BAR1) or host memory, translated by the independent walker, with the TLB model on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use nvbare_core::hal::{DmaAllocator, DmaBuffer, Mmio};
use nvbare_core::mm::Mapper;
use nvbare_core::mm::entry::TableAperture;
use nvbare_core::mm::{
    Bar1Tables, DmaTables, InvalidateKind, MmError, MmuFormat, MmuInvalidate, PageDirectoryBase,
    PageSize, PageTableMemory, PteAttrs, TableSlot, TlbInvalidate,
};
use nvbare_core::regs::Register;
use nvbare_core::regs::mmu::NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE;
use proptest::prelude::*;

use super::*;
use crate::gpu_mem::{gpu_read, gpu_write};
use crate::models::{self, ChipModel};
use crate::{SimBar0, SimBar1, SimClock, SimConfig};

/// Where the page tables go in VRAM (256 MiB in, 64 MiB long).
const TABLES: u64 = 0x1000_0000;
const TABLES_LEN: u64 = 64 << 20;
/// Data pages start here.
const DATA: u64 = 0x8000_0000;

fn gpu(model: ChipModel, config: MmuConfig) -> (Arc<SimGpu>, Arc<SimMmu>) {
    let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
    let mmu = SimMmu::install(&gpu, config);
    (gpu, mmu)
}

type SimMapper<T> = Mapper<Bar1Tables<SimBar1>, Vec<TableSlot>, T>;

fn vram_mapper<T: TlbInvalidate>(gpu: &Arc<SimGpu>, tlb: T) -> SimMapper<T> {
    let fmt = MmuFormat::for_chip(gpu.model().chipset.info());
    let mem = Bar1Tables::new(gpu.bar1(), TABLES, TABLES, TABLES_LEN).unwrap();
    Mapper::new(
        fmt,
        mem,
        vec![TableSlot::INIT; (TABLES_LEN / 4096) as usize],
        tlb,
    )
    .unwrap()
}

fn invalidator<'c>(gpu: &Arc<SimGpu>, clock: &'c SimClock) -> MmuInvalidate<SimBar0, &'c SimClock> {
    MmuInvalidate::new(gpu.bar0(), clock)
}

fn space(gpu: &Arc<SimGpu>, mmu: &Arc<SimMmu>, root: PageDirectoryBase) -> GmmuAddressSpace {
    let aperture = match root.aperture {
        TableAperture::Video => Aperture::Vram,
        TableAperture::SysCoherent => Aperture::SysCoherent,
        TableAperture::SysNonCoherent => Aperture::SysNonCoherent,
    };
    mmu.address_space(
        GmmuFormat::for_chip(gpu.model().chipset.info()),
        TableLoc {
            aperture,
            addr: root.addr,
        },
    )
}

fn read_u32(gpu: &SimGpu, s: &GmmuAddressSpace, va: u64) -> Result<u32, MmuFault> {
    gpu.with_core(|core| {
        let mut b = [0u8; 4];
        gpu_read(core, s, va, &mut b, Access::Read).map(|()| u32::from_le_bytes(b))
    })
}

fn write_u32(gpu: &SimGpu, s: &GmmuAddressSpace, va: u64, v: u32) -> Result<(), MmuFault> {
    gpu.with_core(|core| gpu_write(core, s, va, &v.to_le_bytes(), Access::Write))
}

/// Does not invalidate: a deliberately broken driver.
struct NoInvalidate;
impl TlbInvalidate for NoInvalidate {
    fn invalidate(&mut self, _: PageDirectoryBase, _: InvalidateKind) -> Result<(), MmError> {
        Ok(())
    }
}

#[test]
fn accesses_translate_through_the_drivers_tables_in_vram() {
    for model in [models::AD102, models::GH100, models::GB202] {
        let (gpu, mmu) = gpu(model, MmuConfig::default());
        let clock = gpu.clock();
        let mut m = vram_mapper(&gpu, invalidator(&gpu, &clock));
        let s = space(&gpu, &mmu, m.root());
        // One range of each page size, each at its own VA.
        let cases = [
            (0x1_0000_1000u64, DATA + 0x1000, 0x1000u64, 1u64 << 12),
            (0x1_0001_0000, DATA + 0x1_0000, 0x1_0000, 1 << 16),
            (0x1_0020_0000, DATA + 0x20_0000, 0x20_0000, 1 << 21),
            (0x1_2000_0000, DATA + 0x2000_0000, 0x2000_0000, 1 << 29),
        ];
        for (va, pa, size, page) in cases {
            m.map(va, pa, size, &PteAttrs::vram()).unwrap();
            let w = gpu.with_core(|core| s.walk(core, va + size - 4)).unwrap();
            assert_eq!(
                (w.size, w.phys, w.aperture),
                (page, pa, Aperture::Vram),
                "{model:?}"
            );
            // A GPU store lands at the physical address the driver chose.
            write_u32(&gpu, &s, va + size - 4, 0xc0de_0000 | page as u32 >> 12).unwrap();
            assert_eq!(
                gpu.vram().read_u32(pa + size - 4).unwrap(),
                0xc0de_0000 | page as u32 >> 12
            );
            assert_eq!(
                read_u32(&gpu, &s, va + size - 4).unwrap(),
                0xc0de_0000 | page as u32 >> 12
            );
        }
        // An access crossing from a 4K page into the 64K page is split and both land.
        for (va, _, size, _) in cases {
            m.unmap(va, size).unwrap();
            assert!(read_u32(&gpu, &s, va).is_err());
        }
        assert_eq!(m.tables_in_use(), 1);
        assert_eq!(mmu.stats().stale_hits, 0);
        assert!(mmu.stats().invalidations >= 8);
    }
}

#[test]
fn tables_in_host_memory_work_too() {
    for model in [models::AD102, models::GH100] {
        let (gpu, mmu) = gpu(model, MmuConfig::default());
        let clock = gpu.clock();
        let buf = gpu.dma().alloc_dma(1 << 20).unwrap();
        let mem = DmaTables::new(buf, true).unwrap();
        let fmt = MmuFormat::for_chip(model.chipset.info());
        let mut m = Mapper::new(
            fmt,
            mem,
            vec![TableSlot::INIT; 256],
            invalidator(&gpu, &clock),
        )
        .unwrap();
        assert_eq!(m.root().aperture, TableAperture::SysCoherent);
        let s = space(&gpu, &mmu, m.root());
        // Map host memory too: a DMA buffer through a sysmem PTE.
        let data = gpu.dma().alloc_dma(0x1_0000).unwrap();
        data.write_u32(0x8000, 0x5151_5151).unwrap();
        m.map(0x4000_0000, data.dev_addr(), 0x1_0000, &PteAttrs::sysmem())
            .unwrap();
        assert_eq!(read_u32(&gpu, &s, 0x4000_8000).unwrap(), 0x5151_5151);
        let w = gpu.with_core(|core| s.walk(core, 0x4000_8000)).unwrap();
        assert_eq!((w.aperture, w.size), (Aperture::SysCoherent, 1 << 16));
        m.map(0x5000_0000, DATA, 0x20_0000, &PteAttrs::vram())
            .unwrap();
        write_u32(&gpu, &s, 0x5000_0010, 7).unwrap();
        assert_eq!(gpu.vram().read_u32(DATA + 0x10).unwrap(), 7);
        m.unmap(0x4000_0000, 0x1_0000).unwrap();
        assert!(read_u32(&gpu, &s, 0x4000_8000).is_err());
        assert_eq!(mmu.stats().stale_hits, 0);
    }
}

#[test]
fn faults_name_the_address_and_access() {
    for model in [models::AD102, models::GH100] {
        let (gpu, mmu) = gpu(model, MmuConfig::default());
        let clock = gpu.clock();
        let mut m = vram_mapper(&gpu, invalidator(&gpu, &clock));
        let s = space(&gpu, &mmu, m.root());
        let f = read_u32(&gpu, &s, 0x1234_5000).unwrap_err();
        assert_eq!(
            f,
            MmuFault {
                va: 0x1234_5000,
                access: Access::Read,
                kind: FaultKind::InvalidPde
            }
        );
        m.map(0x20_0000, DATA, 0x1000, &PteAttrs::vram().read_only())
            .unwrap();
        // The neighbouring 4K page in the same table: an invalid PTE.
        let f = read_u32(&gpu, &s, 0x20_1000).unwrap_err();
        assert_eq!((f.va, f.kind), (0x20_1000, FaultKind::InvalidPte));
        // Read-only: loads work, stores fault.
        assert!(read_u32(&gpu, &s, 0x20_0000).is_ok());
        let f = write_u32(&gpu, &s, 0x20_0008, 1).unwrap_err();
        assert_eq!(
            (f.va, f.access, f.kind),
            (0x20_0008, Access::Write, FaultKind::ReadOnly)
        );
        // A store that starts in a mapped page and runs into an unmapped one faults at the
        // first unmapped byte.
        m.map(0x30_0000, DATA, 0x1000, &PteAttrs::vram()).unwrap();
        let f = gpu
            .with_core(|core| gpu_write(core, &s, 0x30_0ffe, &[1, 2, 3, 4], Access::Write))
            .unwrap_err();
        assert_eq!((f.va, f.kind), (0x30_1000, FaultKind::InvalidPte));
        let bits = GmmuFormat::for_chip(model.chipset.info()).va_bits();
        let f = read_u32(&gpu, &s, 1 << bits).unwrap_err();
        assert_eq!(f.kind, FaultKind::VaLimit);
    }
}

/// The sim catches a driver that does not invalidate: after unmap the GPU still reaches the
/// old page (a stale translation, counted), and after a remap it still sees the old memory.
/// The real mapper path, on the same sequence, faults and sees the new memory.
#[test]
fn missing_tlb_invalidate_is_caught() {
    for model in [models::AD102, models::GH100] {
        // Broken driver.
        let (gpu, mmu) = gpu(model, MmuConfig::default());
        gpu.vram().write_u32(DATA, 0xaaaa_aaaa).unwrap();
        gpu.vram().write_u32(DATA + 0x20_0000, 0xbbbb_bbbb).unwrap();
        let mut m = vram_mapper(&gpu, NoInvalidate);
        let s = space(&gpu, &mmu, m.root());
        m.map(0x40_0000, DATA, 0x1000, &PteAttrs::vram()).unwrap();
        assert_eq!(read_u32(&gpu, &s, 0x40_0000).unwrap(), 0xaaaa_aaaa);
        m.unmap(0x40_0000, 0x1000).unwrap();
        // Unmapped, yet still readable: the stale TLB entry is used and flagged.
        assert_eq!(read_u32(&gpu, &s, 0x40_0000).unwrap(), 0xaaaa_aaaa);
        assert_eq!(mmu.stats().stale_hits, 1);
        m.map(0x40_0000, DATA + 0x20_0000, 0x1000, &PteAttrs::vram())
            .unwrap();
        assert_eq!(read_u32(&gpu, &s, 0x40_0000).unwrap(), 0xaaaa_aaaa);
        assert_eq!(mmu.stats().stale_hits, 2);
        assert_eq!(mmu.stats().invalidate_requests, 0);

        // The real driver path.
        let (gpu, mmu) = gpu_pair_again(model);
        gpu.vram().write_u32(DATA, 0xaaaa_aaaa).unwrap();
        gpu.vram().write_u32(DATA + 0x20_0000, 0xbbbb_bbbb).unwrap();
        let clock = gpu.clock();
        let mut m = vram_mapper(&gpu, invalidator(&gpu, &clock));
        let s = space(&gpu, &mmu, m.root());
        m.map(0x40_0000, DATA, 0x1000, &PteAttrs::vram()).unwrap();
        assert_eq!(read_u32(&gpu, &s, 0x40_0000).unwrap(), 0xaaaa_aaaa);
        m.unmap(0x40_0000, 0x1000).unwrap();
        assert!(read_u32(&gpu, &s, 0x40_0000).is_err());
        m.map(0x40_0000, DATA + 0x20_0000, 0x1000, &PteAttrs::vram())
            .unwrap();
        assert_eq!(read_u32(&gpu, &s, 0x40_0000).unwrap(), 0xbbbb_bbbb);
        let st = mmu.stats();
        assert_eq!(st.stale_hits, 0);
        assert_eq!((st.invalidate_requests, st.invalidations), (3, 3));
    }
}

fn gpu_pair_again(model: ChipModel) -> (Arc<SimGpu>, Arc<SimMmu>) {
    gpu(model, MmuConfig::default())
}

#[test]
fn without_the_tlb_model_a_missing_invalidate_is_invisible() {
    let (gpu, mmu) = gpu(
        models::GH100,
        MmuConfig {
            tlb: false,
            ..MmuConfig::default()
        },
    );
    let mut m = vram_mapper(&gpu, NoInvalidate);
    let s = space(&gpu, &mmu, m.root());
    m.map(0x40_0000, DATA, 0x1000, &PteAttrs::vram()).unwrap();
    assert!(read_u32(&gpu, &s, 0x40_0000).is_ok());
    m.unmap(0x40_0000, 0x1000).unwrap();
    assert!(read_u32(&gpu, &s, 0x40_0000).is_err());
    assert_eq!(mmu.stats().tlb_hits, 0);
}

#[test]
fn invalidate_register_protocol() {
    let (gpu, mmu) = gpu(
        models::GH100,
        MmuConfig {
            invalidate_latency: Duration::from_micros(5),
            ..MmuConfig::default()
        },
    );
    let bar0 = gpu.bar0();
    let trigger = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::new()
        .with_all_va(true)
        .with_all_pdb(true)
        .with_trigger(true);
    trigger.write(&bar0);
    // Still running: TRIGGER reads 1 and the other fields read back.
    let r = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::read(&bar0);
    assert!(r.trigger() && r.all_va() && r.all_pdb());
    assert_eq!(mmu.stats().invalidations, 0);
    gpu.clock().advance(Duration::from_micros(5));
    let r = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::read(&bar0);
    assert!(!r.trigger());
    assert_eq!(mmu.stats().invalidations, 1);
    // PDB registers read back what was written.
    bar0.write32(0xb8_30a0, 0x1234_5672);
    bar0.write32(0xb8_30a4, 0x3);
    assert_eq!(
        (bar0.read32(0xb8_30a0), bar0.read32(0xb8_30a4)),
        (0x1234_5672, 3)
    );
    // The core's invalidator polls through the latency.
    let clock = gpu.clock();
    let mut inv = invalidator(&gpu, &clock);
    inv.invalidate(
        PageDirectoryBase {
            aperture: TableAperture::Video,
            addr: 0x123_4567_8000,
        },
        InvalidateKind::Downgrade,
    )
    .unwrap();
    assert_eq!(mmu.stats().invalidations, 2);
    assert_eq!(bar0.read32(0xb8_30a0), (0x1234_5678 & 0x0fff_ffff) << 4);
    assert_eq!(bar0.read32(0xb8_30a4), 0x1);
    let r = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::read(&bar0);
    assert!(r.sys_membar() && r.ack() == 1 && !r.all_pdb() && r.all_va());
}

#[test]
fn invalidate_times_out_when_the_mmu_never_finishes() {
    // No engine installed: TRIGGER stays set in the plain register file.
    let gpu = SimGpu::new(SimConfig::new(models::GH100).with_virtual_time());
    let clock = gpu.clock();
    let inv = invalidator(&gpu, &clock).with_timeout(Duration::from_millis(1));
    let mut m = vram_mapper(&gpu, inv);
    let r = m.map(0x40_0000, DATA, 0x1000, &PteAttrs::vram());
    assert!(matches!(r, Err(MmError::InvalidateTimeout(_))), "{r:?}");
    // The invalidate is still owed; once the MMU answers, sync pays it.
    gpu.add_engine(SimMmu::new(MmuConfig::default()).engine());
    m.sync().unwrap();
}

#[test]
fn a_targeted_invalidate_spares_other_address_spaces() {
    let (gpu, mmu) = gpu(models::GH100, MmuConfig::default());
    gpu.vram().write_u32(DATA, 0x1111_1111).unwrap();
    let clock = gpu.clock();
    let mut a = vram_mapper(&gpu, invalidator(&gpu, &clock));
    let mem_b = Bar1Tables::new(
        gpu.bar1(),
        TABLES + TABLES_LEN,
        TABLES + TABLES_LEN,
        1 << 20,
    )
    .unwrap();
    let mut b = Mapper::new(
        MmuFormat::V3,
        mem_b,
        vec![TableSlot::INIT; 256],
        NoInvalidate,
    )
    .unwrap();
    let sa = space(&gpu, &mmu, a.root());
    let sb = space(&gpu, &mmu, b.root());
    a.map(0x40_0000, DATA, 0x1000, &PteAttrs::vram()).unwrap();
    b.map(0x40_0000, DATA, 0x1000, &PteAttrs::vram()).unwrap();
    assert!(read_u32(&gpu, &sa, 0x40_0000).is_ok());
    assert!(read_u32(&gpu, &sb, 0x40_0000).is_ok());
    b.unmap(0x40_0000, 0x1000).unwrap(); // no invalidate for B
    a.unmap(0x40_0000, 0x1000).unwrap(); // invalidates A's PDB only
    assert!(read_u32(&gpu, &sa, 0x40_0000).is_err());
    assert!(
        read_u32(&gpu, &sb, 0x40_0000).is_ok(),
        "B's stale entry survives"
    );
    assert_eq!(mmu.stats().stale_hits, 1);
}

// ------------------------------------------------------------------------------------------
// The walker against a model, for random map/unmap sequences.
// ------------------------------------------------------------------------------------------

#[derive(Default, Clone, Debug)]
struct Model {
    pages: BTreeMap<u64, (u64, u64)>, // va -> (size, pa)
}

impl Model {
    fn decompose(fmt: MmuFormat, va: u64, pa: u64, size: u64, max: u64) -> Vec<(u64, u64, u64)> {
        let sizes: Vec<u64> = [1u64 << 29, 1 << 21, 1 << 16, 1 << 12]
            .into_iter()
            .filter(|&b| b <= max && (b != 1 << 29 || fmt.supports(PageSize::Size512M)))
            .collect();
        let mut out = Vec::new();
        let mut cur = va;
        while cur < va + size {
            let pcur = pa + (cur - va);
            let b = *sizes
                .iter()
                .find(|&&b| cur.is_multiple_of(b) && pcur.is_multiple_of(b) && va + size - cur >= b)
                .unwrap();
            out.push((cur, b, pcur));
            cur += b;
        }
        out
    }

    fn lookup(&self, va: u64) -> Option<(u64, u64, u64)> {
        self.pages
            .range(..=va)
            .next_back()
            .filter(|(s, (n, _))| va < **s + n)
            .map(|(&s, &(n, pa))| (s, n, pa))
    }

    fn overlaps(&self, va: u64, end: u64) -> bool {
        self.pages
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &(n, _))| s + n > va)
    }

    fn can_unmap(&self, va: u64, end: u64) -> bool {
        let mut cur = va;
        while cur < end {
            match self.lookup(cur) {
                Some((s, n, _)) if s >= va && s + n <= end => cur = s + n,
                _ => return false,
            }
        }
        true
    }

    fn remove(&mut self, va: u64, end: u64) -> Vec<(u64, u64)> {
        let keys: Vec<u64> = self.pages.range(va..end).map(|(&k, _)| k).collect();
        keys.into_iter()
            .map(|k| (k, self.pages.remove(&k).map_or(0, |p| p.0)))
            .collect()
    }

    /// Tables in a minimal tree (root included): the mapper must release every other one.
    fn tables(&self, fmt: MmuFormat) -> usize {
        let dirs = fmt.dirs();
        let pd0 = dirs.len() - 1;
        let mut set = BTreeSet::new();
        for (&va, &(n, _)) in &self.pages {
            let leaf = match n {
                x if x == 1 << 29 => pd0 - 1,
                x if x == 1 << 21 => pd0,
                _ => pd0 + 1,
            };
            for lvl in 1..=leaf.min(pd0) {
                set.insert((lvl, 0, va >> dirs[lvl - 1].lo));
            }
            if n == 1 << 16 {
                set.insert((pd0 + 1, 1, va >> 21));
            } else if n == 1 << 12 {
                set.insert((pd0 + 1, 2, va >> 21));
            }
        }
        set.len() + 1
    }

    fn runs(&self) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (&va, &(n, _)) in &self.pages {
            match runs.last_mut() {
                Some((s, e)) if *e == va && va - *s < (8 << 20) => *e = va + n,
                _ => runs.push((va, va + n)),
            }
        }
        runs
    }
}

#[derive(Debug, Clone)]
enum Op {
    Map {
        shift: u32,
        va_i: u64,
        n: u64,
        pa_i: u64,
        skew: bool,
        max_shift: u32,
    },
    Unmap {
        pick: usize,
        front: u64,
        back: u64,
    },
    UnmapAt {
        shift: u32,
        va_i: u64,
        n: u64,
    },
}

fn shift() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(12u32), 3 => Just(16), 2 => Just(21), 1 => Just(29)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (shift(), 0u64..24, 1u64..6, 0u64..8, prop::bool::weighted(0.2), shift()).prop_map(
            |(shift, va_i, n, pa_i, skew, max_shift)| Op::Map {
                shift,
                va_i,
                n,
                pa_i,
                skew: skew && shift <= 16,
                max_shift: max_shift.max(if shift >= 21 { 21 } else { 16 }),
            }
        ),
        3 => (any::<usize>(), 0u64..20, 0u64..20).prop_map(|(pick, front, back)| Op::Unmap { pick, front, back }),
        1 => (shift(), 0u64..24, 1u64..4).prop_map(|(shift, va_i, n)| Op::UnmapAt { shift, va_i, n }),
    ]
}

/// Just below a PD2 boundary, so upper-level tables come and go too.
const VA_BASE: u64 = (1 << 38) - (4 << 30);
const PA_BASE: u64 = 0x4_0000_0000;

fn run_model(model: ChipModel, fmt: MmuFormat, ops: Vec<Op>) {
    let (gpu, mmu) = gpu(model, MmuConfig::default());
    let clock = gpu.clock();
    let mem = Bar1Tables::new(gpu.bar1(), TABLES, TABLES, TABLES_LEN).unwrap();
    let slots = vec![TableSlot::INIT; (TABLES_LEN / 4096) as usize];
    let mut m = Mapper::new(fmt, mem, slots, invalidator(&gpu, &clock)).unwrap();
    let s = mmu.address_space(
        GmmuFormat {
            version: fmt.version(),
            pd1_pages: fmt.supports(PageSize::Size512M),
        },
        TableLoc {
            aperture: Aperture::Vram,
            addr: m.root().addr,
        },
    );
    let mut model_pages = Model::default();
    for op in ops {
        let mut removed = Vec::new();
        let (ok, expect) = match op {
            Op::Map {
                shift,
                va_i,
                n,
                pa_i,
                skew,
                max_shift,
            } => {
                let unit = 1u64 << shift;
                let (va, size) = (VA_BASE + va_i * unit, n * unit);
                let pa = PA_BASE + pa_i * unit + if skew { 0x1000 } else { 0 };
                let max = PageSize::from_bytes(1 << max_shift).unwrap();
                let r = m.map_with_max_page(va, pa, size, &PteAttrs::vram(), max);
                let expect = !model_pages.overlaps(va, va + size);
                match &r {
                    Ok(()) => {
                        for (pva, n, ppa) in Model::decompose(fmt, va, pa, size, 1 << max_shift) {
                            model_pages.pages.insert(pva, (n, ppa));
                        }
                    }
                    Err(e) => assert!(matches!(e, MmError::AlreadyMapped { .. }), "{e:?}"),
                }
                (r.is_ok(), expect)
            }
            Op::Unmap { pick, front, back } => {
                let runs = model_pages.runs();
                if runs.is_empty() {
                    continue;
                }
                let (s0, e0) = runs[pick % runs.len()];
                let (a, b) = (s0 + front * 0x1000, e0.saturating_sub(back * 0x1000));
                if a >= b {
                    continue;
                }
                let expect = model_pages.can_unmap(a, b);
                let r = m.unmap(a, b - a);
                if r.is_ok() {
                    removed = model_pages.remove(a, b);
                }
                (r.is_ok(), expect)
            }
            Op::UnmapAt { shift, va_i, n } => {
                let unit = 1u64 << shift;
                let (a, b) = (VA_BASE + va_i * unit, VA_BASE + (va_i + n) * unit);
                let expect = model_pages.can_unmap(a, b);
                let r = m.unmap(a, b - a);
                if r.is_ok() {
                    removed = model_pages.remove(a, b);
                }
                (r.is_ok(), expect)
            }
        };
        assert_eq!(ok, expect, "mapper and model disagree on {op:?}");
        gpu.with_core(|core| {
            // The walker (no TLB) and the TLB path agree with the model on every page...
            for (&va, &(n, pa)) in &model_pages.pages {
                for probe in [va, va + n / 2, va + n - 4] {
                    let w = s.walk(core, probe).expect("mapped page does not walk");
                    assert_eq!((w.va, w.size, w.phys), (va, n, pa), "walk {probe:#x}");
                    let t = s.translate(core, probe, Access::Read).unwrap();
                    assert_eq!(t.phys, pa + (probe - va));
                }
                // ...and on the unmapped neighbours.
                for probe in [va.wrapping_sub(4), va + n] {
                    if model_pages.lookup(probe).is_none() {
                        assert!(s.walk(core, probe).is_err(), "walk {probe:#x} should fault");
                        assert!(s.translate(core, probe, Access::Read).is_err());
                    }
                }
            }
            // Pages just unmapped fault through the TLB path too (they were cached before).
            for (va, n) in removed {
                if model_pages.lookup(va).is_none() {
                    assert!(
                        s.translate(core, va, Access::Read).is_err(),
                        "stale {va:#x}"
                    );
                    assert!(s.translate(core, va + n - 4, Access::Read).is_err());
                }
            }
        });
        assert_eq!(
            m.tables_in_use() as usize,
            model_pages.tables(fmt),
            "tables"
        );
        assert_eq!(
            mmu.stats().stale_hits,
            0,
            "a stale translation survived {op:?}"
        );
    }
    for (a, b) in model_pages.runs() {
        m.unmap(a, b - a).unwrap();
    }
    assert_eq!(m.tables_in_use(), 1);
    // Only the root remains, and it is all zeros (every entry invalid).
    let root = m.root().addr;
    let mut zero = vec![0u8; 4096];
    gpu.vram().read(root, &mut zero).unwrap();
    assert!(zero.iter().all(|&b| b == 0));
    let _ = m.memory().size();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn walker_agrees_with_model_v2_ada(ops in prop::collection::vec(op(), 1..30)) {
        run_model(models::AD102, MmuFormat::V2, ops);
    }

    #[test]
    fn walker_agrees_with_model_v2_turing_levels(ops in prop::collection::vec(op(), 1..30)) {
        run_model(models::AD102, MmuFormat::V2_TURING, ops);
    }

    #[test]
    fn walker_agrees_with_model_v3(ops in prop::collection::vec(op(), 1..30)) {
        run_model(models::GH100, MmuFormat::V3, ops);
    }

    /// Garbage tables never panic the walker.
    #[test]
    fn walker_survives_garbage(words in prop::collection::vec(any::<u64>(), 1024), va in any::<u64>(), v3 in any::<bool>()) {
        let (gpu, mmu) = gpu(models::GH100, MmuConfig::default());
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        gpu.vram().write(0x1000, &bytes).unwrap();
        let fmt = GmmuFormat { version: if v3 { nvbare_core::chip::MmuVersion::V3 } else { nvbare_core::chip::MmuVersion::V2 }, pd1_pages: true };
        let s = mmu.address_space(fmt, TableLoc { aperture: Aperture::Vram, addr: 0x1000 });
        gpu.with_core(|core| {
            let _ = s.translate(core, va, Access::Read);
            let _ = s.translate(core, va & ((1 << 49) - 1), Access::Write);
        });
    }
}
