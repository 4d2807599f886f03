//! Mapper tests against a model, with tables in plain memory and the core-side walk
//! ([`Mapper::translate`]). The simulator's independent GMMU walker repeats them in
//! `tests/sim` (`mmu` module).

extern crate std;

use std::collections::{BTreeMap, BTreeSet};
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::MmError;
use super::entry::{PteAperture, PteAttrs, TableAperture};
use super::format::{MmuFormat, PageSize};
use super::mapper::{Mapper, PageDirectoryBase, TableSlot};
use super::table_mem::PageTableMemory;
use super::tlb::{InvalidateKind, TlbInvalidate};
use crate::hal::{HalError, check_range};

/// Tables in a Vec.
#[derive(Clone)]
pub(crate) struct RamTables {
    pub base: u64,
    pub words: Vec<u64>,
    pub flushes: u32,
}

impl RamTables {
    pub fn new(base: u64, bytes: u64) -> Self {
        RamTables {
            base,
            words: vec![0; (bytes / 8) as usize],
            flushes: 0,
        }
    }
}

impl PageTableMemory for RamTables {
    fn aperture(&self) -> TableAperture {
        TableAperture::Video
    }
    fn base(&self) -> u64 {
        self.base
    }
    fn size(&self) -> u64 {
        self.words.len() as u64 * 8
    }
    fn read_u64(&self, offset: u64) -> Result<u64, HalError> {
        check_range(offset, 8, self.size())?;
        Ok(self.words[(offset / 8) as usize])
    }
    fn write_u64(&mut self, offset: u64, value: u64) -> Result<(), HalError> {
        check_range(offset, 8, self.size())?;
        self.words[(offset / 8) as usize] = value;
        Ok(())
    }
    fn flush(&mut self) -> Result<(), HalError> {
        self.flushes += 1;
        Ok(())
    }
}

/// Records invalidates.
#[derive(Default, Debug)]
pub(crate) struct CountingTlb {
    pub calls: Vec<(PageDirectoryBase, InvalidateKind)>,
}

impl TlbInvalidate for CountingTlb {
    fn invalidate(&mut self, pdb: PageDirectoryBase, kind: InvalidateKind) -> Result<(), MmError> {
        self.calls.push((pdb, kind));
        Ok(())
    }
}

type TestMapper = Mapper<RamTables, Vec<TableSlot>, CountingTlb>;

fn mapper(fmt: MmuFormat, tables: u64) -> TestMapper {
    Mapper::new(
        fmt,
        RamTables::new(0x4000_0000, tables * 4096),
        vec![TableSlot::INIT; tables as usize],
        CountingTlb::default(),
    )
    .unwrap()
}

const PA: u64 = 0x10_0000_0000;

#[test]
fn huge_big_and_small_pages_are_chosen_by_alignment() {
    for fmt in [MmuFormat::V2, MmuFormat::V3, MmuFormat::V2_TURING] {
        let mut m = mapper(fmt, 64);
        // 1 GiB at a 512 MiB-aligned VA and PA: two 512 MiB pages (2 MiB on Turing).
        m.map(1 << 30, PA, 1 << 30, &PteAttrs::vram()).unwrap();
        let t = m.translate((1 << 30) + 12345).unwrap().unwrap();
        let want = if fmt.supports(PageSize::Size512M) {
            PageSize::Size512M
        } else {
            PageSize::Size2M
        };
        assert_eq!(t.page, want, "{fmt}");
        assert_eq!(t.pte.addr, PA + (12345 & !(want.bytes() - 1)));
        // 4K head, 64K middle, 4K tail inside one 2 MiB entry.
        let va = 0x8000_0000 + 0x3000;
        m.map(va, PA + 0x3000, 0x2_0000, &PteAttrs::vram()).unwrap();
        assert_eq!(m.translate(va).unwrap().unwrap().page, PageSize::Size4K);
        let mid = m.translate(0x8001_0000).unwrap().unwrap();
        assert_eq!((mid.page, mid.pte.addr), (PageSize::Size64K, PA + 0x1_0000));
        assert_eq!(
            m.translate(0x8002_2000).unwrap().unwrap().page,
            PageSize::Size4K
        );
        assert_eq!(m.translate(0x8002_3000).unwrap(), None);
        // PA misaligned for 64 KiB: all 4 KiB.
        m.map(0x9000_0000, PA + 0x1000, 0x4_0000, &PteAttrs::vram())
            .unwrap();
        assert_eq!(
            m.translate(0x9001_0000).unwrap().unwrap().page,
            PageSize::Size4K
        );
        // Capped page size.
        m.map_with_max_page(
            0xc000_0000,
            PA,
            4 << 20,
            &PteAttrs::vram(),
            PageSize::Size64K,
        )
        .unwrap();
        assert_eq!(
            m.translate(0xc020_0000).unwrap().unwrap().page,
            PageSize::Size64K
        );
        // Everything unmaps back to the root alone.
        m.unmap(1 << 30, 1 << 30).unwrap();
        m.unmap(va, 0x2_0000).unwrap();
        m.unmap(0x9000_0000, 0x4_0000).unwrap();
        m.unmap(0xc000_0000, 4 << 20).unwrap();
        assert_eq!(m.tables_in_use(), 1);
        assert!(m.memory().words[1..].iter().all(|&w| w == 0) || m.tables_in_use() == 1);
    }
}

#[test]
fn every_change_is_invalidated_before_returning() {
    let mut m = mapper(MmuFormat::V3, 64);
    m.map(0x20_0000, PA, 0x1000, &PteAttrs::vram()).unwrap();
    assert_eq!(m.invalidator().calls.len(), 1);
    assert_eq!(m.invalidator().calls[0].1, InvalidateKind::Upgrade);
    let root = m.root();
    assert_eq!(m.invalidator().calls[0].0, root);
    m.unmap(0x20_0000, 0x1000).unwrap();
    assert_eq!(m.invalidator().calls.len(), 2);
    assert_eq!(m.invalidator().calls[1].1, InvalidateKind::Downgrade);
    // Errors change nothing and need no invalidate.
    assert!(m.unmap(0x20_0000, 0x1000).is_err());
    assert_eq!(m.invalidator().calls.len(), 2);
    // A batch invalidates once, as a downgrade if it unmapped anything.
    m.batch(|b| {
        b.map(0x40_0000, PA, 0x1000, &PteAttrs::vram())?;
        b.map(0x60_0000, PA, 0x1000, &PteAttrs::vram())?;
        b.unmap(0x40_0000, 0x1000)
    })
    .unwrap();
    assert_eq!(m.invalidator().calls.len(), 3);
    assert_eq!(m.invalidator().calls[2].1, InvalidateKind::Downgrade);
    // A failing batch still invalidates what it changed.
    let r = m.batch(|b| {
        b.unmap(0x60_0000, 0x1000)?;
        b.unmap(0x60_0000, 0x1000)
    });
    assert!(matches!(r, Err(MmError::NotMapped { .. })));
    assert_eq!(m.invalidator().calls.len(), 4);
    assert!(m.memory().flushes >= 4);
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    for fmt in [MmuFormat::V2, MmuFormat::V3] {
        let mut m = mapper(fmt, 16);
        m.map(0x4000_0000, PA, 4 << 20, &PteAttrs::vram()).unwrap();
        m.map(0x5000_0000 + 0x1000, PA, 0x3000, &PteAttrs::vram())
            .unwrap();
        let snap = m.memory().words.clone();
        let used = m.tables_in_use();
        let calls = m.invalidator().calls.len();
        let attrs = PteAttrs::vram();
        let limit = fmt.va_limit();
        let cases: Vec<(Result<(), MmError>, &str)> = vec![
            (m.map(0x1001, PA, 0x1000, &attrs), "misaligned va"),
            (m.map(0x1000, PA + 1, 0x1000, &attrs), "misaligned pa"),
            (m.map(0x1000, PA, 0x1001, &attrs), "misaligned size"),
            (m.map(0x1000, PA, 0, &attrs), "zero size"),
            (m.map(limit - 0x1000, PA, 0x2000, &attrs), "va beyond space"),
            (m.map(!0xfffu64, PA, 0x1000, &attrs), "va overflow"),
            (m.map(0x1000, !0xfffu64, 0x2000, &attrs), "pa overflow"),
            (
                m.map(
                    0x1000,
                    if fmt == MmuFormat::V2 {
                        1 << 37
                    } else {
                        1 << 40
                    },
                    0x1000,
                    &attrs,
                ),
                "pa too wide",
            ),
            (
                m.map(0x3fe0_0000, PA, 4 << 20, &attrs),
                "overlaps a 2M page",
            ),
            (m.map(0x5000_0000, PA, 0x2000, &attrs), "overlaps 4K pages"),
            (
                m.map(0x5000_0000, PA, 0x1_0000, &attrs),
                "64K over 4K pages",
            ),
            (m.unmap(0x4010_0000, 0x1000), "splits a 2M page"),
            (m.unmap(0x4000_0000, 6 << 20), "past the end of a mapping"),
            (m.unmap(0x5000_0000, 0x2000), "hole at the start"),
            (m.unmap(0x7000_0000, 0x1000), "never mapped"),
            (m.unmap(0x1000, 0x1001), "misaligned unmap"),
            (
                m.map((1 << 40) + 0x1000, PA, 64 << 30, &attrs),
                "out of table memory",
            ),
        ];
        for (r, what) in cases {
            assert!(r.is_err(), "{what} was accepted");
            assert_eq!(m.memory().words, snap, "{what} changed the tables");
            assert_eq!(m.tables_in_use(), used, "{what} changed the table count");
        }
        assert_eq!(m.invalidator().calls.len(), calls);
        // Double unmap: the second is an error and changes nothing.
        m.unmap(0x5000_1000, 0x3000).unwrap();
        let snap = m.memory().words.clone();
        assert_eq!(
            m.unmap(0x5000_1000, 0x3000),
            Err(MmError::NotMapped { va: 0x5000_1000 })
        );
        assert_eq!(m.memory().words, snap);
        // Mapping over a mapped range names a mapped address.
        assert_eq!(
            m.map(0x4000_0000, PA, 0x1000, &attrs),
            Err(MmError::AlreadyMapped { va: 0x4000_0000 })
        );
        assert!(matches!(
            m.map((1 << 40) + 0x1000, PA, 64 << 30, &attrs),
            Err(MmError::OutOfTableMemory { .. })
        ));
    }
}

#[test]
fn released_tables_are_reused_only_after_the_invalidate() {
    // Root + PD3/PD2/PD1/PD0 + PT = 6 tables for one 4K page on v3; give exactly 6.
    let mut m = mapper(MmuFormat::V3, 6);
    m.map(0x1000, PA, 0x1000, &PteAttrs::vram()).unwrap();
    assert_eq!(m.tables_free(), 0);
    m.unmap(0x1000, 0x1000).unwrap();
    assert_eq!(m.tables_in_use(), 1);
    // A different subtree needs all five again.
    m.map(1 << 50, PA, 0x1000, &PteAttrs::vram()).unwrap();
    assert_eq!(m.tables_in_use(), 6);
    // Inside a batch, released tables wait for an invalidate; the mapper issues one early
    // rather than fail.
    let before = m.invalidator().calls.len();
    m.batch(|b| {
        b.unmap(1 << 50, 0x1000)?;
        b.map(0x2000, PA, 0x1000, &PteAttrs::vram())
    })
    .unwrap();
    assert_eq!(m.invalidator().calls.len(), before + 2);
    assert_eq!(m.translate(0x2000).unwrap().unwrap().pte.addr, PA);
}

#[test]
fn sysmem_and_read_only_attributes_survive() {
    for fmt in [MmuFormat::V2, MmuFormat::V3] {
        let mut m = mapper(fmt, 16);
        let attrs = PteAttrs {
            aperture: PteAperture::SysNonCoherent,
            ..PteAttrs::sysmem().read_only()
        };
        m.map(0x10_0000, 0x1_2345_6000, 0x1000, &attrs).unwrap();
        let t = m.translate(0x10_0000).unwrap().unwrap();
        assert_eq!(t.pte.addr, 0x1_2345_6000);
        assert_eq!(t.pte.attrs.aperture, PteAperture::SysNonCoherent);
        assert!(t.pte.attrs.read_only);
        assert!(!t.pte.attrs.cached);
    }
}

#[test]
fn corrupt_tables_are_errors_not_panics() {
    let mut m = mapper(MmuFormat::V3, 16);
    m.map(0x20_0000, PA, 0x1000, &PteAttrs::vram()).unwrap();
    // Point the root's entry 0 outside the pool, then at a free slot.
    let good = m.memory().words[0];
    for addr in [0x7777_0000u64, 0x4000_0000 + 15 * 4096] {
        m.memory_mut_for_tests().words[0] = (good & 0xfff) | addr;
        assert!(matches!(
            m.translate(0x20_0000),
            Err(MmError::CorruptTable { .. })
        ));
        assert!(matches!(
            m.map(0x40_0000, PA, 0x1000, &PteAttrs::vram()),
            Err(MmError::CorruptTable { .. })
        ));
        assert!(matches!(
            m.unmap(0x20_0000, 0x1000),
            Err(MmError::CorruptTable { .. })
        ));
    }
    m.memory_mut_for_tests().words[0] = good;
    m.unmap(0x20_0000, 0x1000).unwrap();
}

// ------------------------------------------------------------------------------------------
// Model-based property test.
// ------------------------------------------------------------------------------------------

/// The mapping model: pages by VA, with the page size the mapper must have chosen.
#[derive(Default, Clone, Debug)]
pub(crate) struct Model {
    pub pages: BTreeMap<u64, (PageSize, u64)>,
}

impl Model {
    /// The greedy decomposition the mapper promises.
    pub fn decompose(
        fmt: MmuFormat,
        va: u64,
        pa: u64,
        size: u64,
        max: PageSize,
    ) -> Vec<(u64, PageSize, u64)> {
        let mut out = Vec::new();
        let mut cur = va;
        let end = va + size;
        while cur < end {
            let p = PageSize::DESCENDING
                .iter()
                .copied()
                .find(|p| {
                    let b = p.bytes();
                    fmt.supports(*p)
                        && *p <= max
                        && cur.is_multiple_of(b)
                        && (pa + (cur - va)).is_multiple_of(b)
                        && end - cur >= b
                })
                .unwrap();
            out.push((cur, p, pa + (cur - va)));
            cur += p.bytes();
        }
        out
    }

    pub fn overlaps(&self, va: u64, end: u64) -> bool {
        self.pages
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &(p, _))| s + p.bytes() > va)
    }

    pub fn lookup(&self, va: u64) -> Option<(u64, PageSize, u64)> {
        self.pages
            .range(..=va)
            .next_back()
            .filter(|(s, (p, _))| va < **s + p.bytes())
            .map(|(&s, &(p, pa))| (s, p, pa))
    }

    /// Whether unmapping [va, end) must succeed.
    pub fn can_unmap(&self, va: u64, end: u64) -> bool {
        let mut cur = va;
        while cur < end {
            match self.lookup(cur) {
                Some((s, p, _)) if s >= va && s + p.bytes() <= end => cur = s + p.bytes(),
                _ => return false,
            }
        }
        true
    }

    /// Tables a minimal tree for these pages has, the root included.
    pub fn tables(&self, fmt: MmuFormat) -> usize {
        let dirs = fmt.dirs();
        let pd0 = dirs.len() - 1;
        let mut set = BTreeSet::new();
        for (&va, &(p, _)) in &self.pages {
            let leaf_dir = match p {
                PageSize::Size512M => pd0 - 1,
                PageSize::Size2M => pd0,
                _ => pd0 + 1,
            };
            for lvl in 1..=leaf_dir.min(pd0) {
                set.insert((lvl, 0u8, va >> dirs[lvl - 1].lo));
            }
            match p {
                PageSize::Size64K => {
                    set.insert((pd0 + 1, 1, va >> 21));
                }
                PageSize::Size4K => {
                    set.insert((pd0 + 1, 2, va >> 21));
                }
                _ => {}
            }
        }
        set.len() + 1
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Map {
        unit: PageSize,
        va_i: u64,
        n: u64,
        pa_i: u64,
        pa_skew: bool,
        max: PageSize,
    },
    Unmap {
        pick: usize,
        trim_front: u64,
        trim_back: u64,
    },
    UnmapRandom {
        unit: PageSize,
        va_i: u64,
        n: u64,
    },
}

fn page_size() -> impl Strategy<Value = PageSize> {
    prop_oneof![
        3 => Just(PageSize::Size4K),
        3 => Just(PageSize::Size64K),
        2 => Just(PageSize::Size2M),
        1 => Just(PageSize::Size512M),
    ]
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (page_size(), 0u64..24, 1u64..6, 0u64..8, prop::bool::weighted(0.2), page_size())
            .prop_map(|(unit, va_i, n, pa_i, pa_skew, max)| {
                // Keep page counts small: large units map with large pages.
                let floor = if unit >= PageSize::Size2M { PageSize::Size2M } else { PageSize::Size64K };
                let pa_skew = pa_skew && unit <= PageSize::Size64K;
                Op::Map { unit, va_i, n, pa_i, pa_skew, max: max.max(floor) }
            }),
        3 => (any::<usize>(), 0u64..20, 0u64..20).prop_map(|(pick, trim_front, trim_back)| Op::Unmap { pick, trim_front, trim_back }),
        1 => (page_size(), 0u64..24, 1u64..4).prop_map(|(unit, va_i, n)| Op::UnmapRandom { unit, va_i, n }),
    ]
}

/// VA window: straddles a PD2 boundary (1 << 38) so several upper tables are exercised.
pub(crate) const VA_BASE: u64 = (1 << 38) - (4 << 30);

pub(crate) fn op_range(unit: PageSize, va_i: u64, n: u64) -> (u64, u64) {
    // Start a little before VA_BASE-aligned positions to mix page sizes.
    let va = VA_BASE + va_i * unit.bytes();
    (va, n * unit.bytes())
}

pub(crate) fn mappings(model: &Model) -> Vec<(u64, u64)> {
    // Contiguous runs of pages, as separate unmap candidates.
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (&va, &(p, _)) in &model.pages {
        match runs.last_mut() {
            Some((s, e)) if *e == va && va - *s < (8 << 20) => *e = va + p.bytes(),
            _ => runs.push((va, va + p.bytes())),
        }
    }
    runs
}

fn run_model(fmt: MmuFormat, ops: Vec<Op>) {
    let mut m = mapper(fmt, 1024);
    let mut model = Model::default();
    for op in ops {
        let snap = m.memory().words.clone();
        let (ok, expect_ok) = match op {
            Op::Map {
                unit,
                va_i,
                n,
                pa_i,
                pa_skew,
                max,
            } => {
                let (va, size) = op_range(unit, va_i, n);
                let pa = PA + pa_i * unit.bytes() + if pa_skew { 0x1000 } else { 0 };
                let r = m.map_with_max_page(va, pa, size, &PteAttrs::vram(), max);
                let expect = !model.overlaps(va, va + size);
                if r.is_ok() {
                    for (pva, p, ppa) in Model::decompose(fmt, va, pa, size, max) {
                        model.pages.insert(pva, (p, ppa));
                    }
                } else {
                    assert!(matches!(r, Err(MmError::AlreadyMapped { .. })), "{r:?}");
                }
                (r.is_ok(), expect)
            }
            Op::Unmap {
                pick,
                trim_front,
                trim_back,
            } => {
                let runs = mappings(&model);
                if runs.is_empty() {
                    continue;
                }
                let (s, e) = runs[pick % runs.len()];
                let s2 = s + trim_front * 0x1000;
                let e2 = e.saturating_sub(trim_back * 0x1000);
                if s2 >= e2 {
                    continue;
                }
                let expect = model.can_unmap(s2, e2);
                let r = m.unmap(s2, e2 - s2);
                if r.is_ok() {
                    let keys: Vec<u64> = model.pages.range(s2..e2).map(|(&k, _)| k).collect();
                    for k in keys {
                        model.pages.remove(&k);
                    }
                } else {
                    assert!(
                        matches!(
                            r,
                            Err(MmError::NotMapped { .. } | MmError::SplitsPage { .. })
                        ),
                        "{r:?}"
                    );
                }
                (r.is_ok(), expect)
            }
            Op::UnmapRandom { unit, va_i, n } => {
                let (va, size) = op_range(unit, va_i, n);
                let expect = model.can_unmap(va, va + size);
                let r = m.unmap(va, size);
                if r.is_ok() {
                    let keys: Vec<u64> =
                        model.pages.range(va..va + size).map(|(&k, _)| k).collect();
                    for k in keys {
                        model.pages.remove(&k);
                    }
                }
                (r.is_ok(), expect)
            }
        };
        assert_eq!(ok, expect_ok, "mapper and model disagree on success");
        if !ok {
            assert_eq!(m.memory().words, snap, "a failed call changed the tables");
        }
        // Every page translates as the model says, at both ends.
        for (&va, &(p, pa)) in &model.pages {
            for probe in [va, va + p.bytes() - 0x1000] {
                let t = m.translate(probe).unwrap().expect("mapped page missing");
                assert_eq!((t.va, t.page, t.pte.addr), (va, p, pa), "probe {probe:#x}");
            }
        }
        // Neighbours of every page that the model does not map are unmapped.
        for (&va, &(p, _)) in &model.pages {
            for probe in [va.wrapping_sub(0x1000), va + p.bytes()] {
                if model.lookup(probe).is_none() && probe < fmt.va_limit() {
                    assert_eq!(m.translate(probe).unwrap(), None, "probe {probe:#x}");
                }
            }
        }
        assert_eq!(m.tables_in_use() as usize, model.tables(fmt), "table count");
    }
    // Unmap everything: only the root is left.
    for (s, e) in mappings(&model) {
        m.unmap(s, e - s).unwrap();
    }
    assert_eq!(m.tables_in_use(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn v2_mapper_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        run_model(MmuFormat::V2, ops);
    }

    #[test]
    fn v2_turing_mapper_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        run_model(MmuFormat::V2_TURING, ops);
    }

    #[test]
    fn v3_mapper_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        run_model(MmuFormat::V3, ops);
    }

    /// Garbage in the tables never panics the mapper.
    #[test]
    fn garbage_tables_do_not_panic(words in prop::collection::vec(any::<u64>(), 512 * 8), va in any::<u64>()) {
        let mut m = mapper(MmuFormat::V3, 8);
        m.memory_mut_for_tests().words.copy_from_slice(&words);
        let va = va & ((1 << 57) - 1) & !0xfff;
        let _ = m.translate(va);
        let _ = m.map(va & ((1 << 50) - 1), PA, 0x20_0000, &PteAttrs::vram());
        let _ = m.unmap(va & ((1 << 50) - 1), 0x1000);
        let _ = m.map(va & ((1 << 50) - 1), PA, 0x1000, &PteAttrs::vram());
    }
}

#[test]
fn reserved_dirs_reach_the_level_covering_the_span_and_stay_pinned() {
    const SPAN: u64 = 512 << 20;
    for (fmt, levels) in [(MmuFormat::V2, 3), (MmuFormat::V3, 4)] {
        let mut m = mapper(fmt, 64);
        let va = 7 * SPAN;
        // A neighbour in the same table, mapped before and unmapped after.
        m.map(6 * SPAN, PA, 2 << 20, &PteAttrs::vram()).unwrap();
        let r = m.reserve_dirs(va, SPAN).unwrap();
        assert_eq!(r.len(), levels, "{fmt}");
        assert_eq!(r[0].table.addr, m.root().addr);
        assert_eq!(
            r.last().unwrap().page_shift,
            29,
            "entries of the last cover 512 MiB"
        );
        assert!(r.windows(2).all(|w| w[0].page_shift > w[1].page_shift));
        assert_eq!(r[0].bytes, fmt.root_entries() as u64 * 8);
        assert!(r[1..].iter().all(|l| l.bytes == 4096));
        let in_use = m.tables_in_use();
        m.unmap(6 * SPAN, 2 << 20).unwrap();
        m.sync().unwrap();
        // The neighbour's own tables went; the reserved path did not.
        let again = m.reserve_dirs(va + SPAN, SPAN).unwrap();
        assert_eq!(
            again.last().unwrap().table,
            r.last().unwrap().table,
            "{fmt}"
        );
        assert!(m.tables_in_use() < in_use, "{fmt}");
        // Errors: not a level's span, unaligned, already mapped.
        assert!(m.reserve_dirs(va, 3 << 20).is_err());
        assert!(m.reserve_dirs(va + 4096, SPAN).is_err());
        m.map(20 * SPAN, PA, SPAN, &PteAttrs::vram()).unwrap();
        assert!(matches!(
            m.reserve_dirs(20 * SPAN, SPAN),
            Err(MmError::AlreadyMapped { .. })
        ));
    }
}
