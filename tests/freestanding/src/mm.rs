//! GPU page tables over static memory (exit codes 70-99): `Mapper` with GMMU v2 (Ada) tables
//! in a `PageTableMemory` of our own that plays VRAM, and with v3 (Hopper) tables in core's
//! `DmaTables` over a static DMA buffer; TLB invalidates through core's `MmuInvalidate` on a
//! register file that logs them. Each maps ranges, translates them back (page sizes,
//! addresses, attributes), checks that bad requests change nothing, and unmaps.

use nvbare_core::hal::{DmaBuffer, HalError, check_range};
use nvbare_core::mm::Mapper;
use nvbare_core::mm::{
    DmaTables, MmError, MmuFormat, MmuInvalidate, PAGE_4K, PageSize, PageTableMemory, PteAperture,
    PteAttrs, TableAperture, TableSlot,
};
use nvbare_core::regs::Register;
use nvbare_core::regs::mmu::{
    NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE, NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB,
};

use crate::hw::{RegLog, StaticDma, StaticMem, StepClock};

/// 4 KiB tables per address space.
const TABLES: usize = 32;
const TABLE_BYTES: usize = TABLES * PAGE_4K as usize;
/// Where the v2 tables "are" in VRAM.
const VRAM_TABLES: u64 = 0x7_ff00_0000;
/// Where the "device" sees the v3 tables' host memory.
const HOST_TABLES: u64 = 0x2_0000_0000;

static V2_TABLES: StaticMem<TABLE_BYTES> = StaticMem::new();
static V3_TABLES: StaticMem<TABLE_BYTES> = StaticMem::new();

macro_rules! ensure {
    ($cond:expr, $code:expr) => {
        if !$cond {
            return Err($code);
        }
    };
}

/// Page tables "in VRAM" at [`VRAM_TABLES`]: static memory behind a `PageTableMemory` of our
/// own, as an embedder with its own idea of table memory would write one.
struct VramTables(StaticDma);

impl PageTableMemory for VramTables {
    fn aperture(&self) -> TableAperture {
        TableAperture::Video
    }
    fn base(&self) -> u64 {
        VRAM_TABLES
    }
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_u64(&self, offset: u64) -> Result<u64, HalError> {
        check_range(offset, 8, self.size())?;
        self.0.read_u64(offset as usize)
    }
    fn write_u64(&mut self, offset: u64, value: u64) -> Result<(), HalError> {
        check_range(offset, 8, self.size())?;
        self.0.write_u64(offset as usize, value)
    }
    fn flush(&mut self) -> Result<(), HalError> {
        Ok(())
    }
}

/// Invalidates so far and the last value written to `NV_..._MMU_INVALIDATE`.
fn invalidates(regs: &RegLog) -> (u32, NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE) {
    let (n, last) = regs.writes_to(NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::OFFSET as usize);
    (n, last.unwrap_or(0).into())
}

/// Maps, translates, rejects and unmaps in one address space; `code` is the first exit code
/// of its range.
fn exercise<P: PageTableMemory>(fmt: MmuFormat, mem: P, code: i32) -> Result<(), i32> {
    let regs = RegLog::new();
    let clock = StepClock::new();
    let inval = MmuInvalidate::new(&regs, &clock);
    let mut m = Mapper::new(fmt, mem, [TableSlot::INIT; TABLES], inval).map_err(|_| code)?;
    let root = m.root();
    ensure!(
        root.addr >= m.memory().base() && m.tables_in_use() == 1,
        code
    );

    // VRAM: one 2 MiB page, one 64 KiB page, one 4 KiB page, as alignment allows.
    let va = 0x10_0000_0000u64;
    let pa = 0x1_0020_0000u64;
    let size = (2 << 20) + (64 << 10) + 4096;
    let vram = PteAttrs::vram();
    m.map(va, pa, size, &vram).map_err(|_| code + 1)?;
    let expect = [
        (0x1234, PageSize::Size2M, va, pa),
        ((2 << 20) - 8, PageSize::Size2M, va, pa),
        (
            (2 << 20) + 0x100,
            PageSize::Size64K,
            va + (2 << 20),
            pa + (2 << 20),
        ),
        (
            (2 << 20) + (64 << 10) + 8,
            PageSize::Size4K,
            va + (2 << 20) + (64 << 10),
            pa + (2 << 20) + (64 << 10),
        ),
    ];
    for (off, page, page_va, page_pa) in expect {
        let Ok(Some(t)) = m.translate(va + off) else {
            return Err(code + 2);
        };
        ensure!(
            t.page == page && t.va == page_va && t.pte.addr == page_pa && t.pte.attrs == vram,
            code + 2
        );
    }
    ensure!(matches!(m.translate(va + size), Ok(None)), code + 3);
    ensure!(matches!(m.translate(va - 4096), Ok(None)), code + 3);
    // The map ended with one invalidate of our root (an upgrade: no membar).
    let (n, last) = invalidates(&regs);
    ensure!(
        n == 1 && last.trigger() && last.all_va() && !last.sys_membar(),
        code + 4
    );
    let (_, pdb) = regs.writes_to(NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::OFFSET as usize);
    let pdb = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::from(pdb.unwrap_or(0));
    ensure!(
        pdb.addr() as u64 == (root.addr >> 12) & 0x0fff_ffff
            && pdb.aperture_sys() == root.aperture.is_sys(),
        code + 4
    );

    // Host memory (coherent, uncached in L2) elsewhere, 4 KiB pages only.
    let host_va = 0x20_0000_3000u64;
    let bus = 0x8_1234_5000u64;
    let sys = PteAttrs::sysmem();
    m.map(host_va, bus, 5 * 4096, &sys).map_err(|_| code + 5)?;
    for i in 0..5 {
        let Ok(Some(t)) = m.translate(host_va + i * 4096 + 12) else {
            return Err(code + 6);
        };
        ensure!(
            t.page == PageSize::Size4K
                && t.pte.addr == bus + i * 4096
                && t.pte.attrs.aperture == PteAperture::SysCoherent
                && !t.pte.attrs.cached,
            code + 6
        );
    }

    // Bad requests fail and change nothing.
    let before = m.stats();
    ensure!(
        matches!(
            m.map(va + 4096, pa, 4096, &vram),
            Err(MmError::AlreadyMapped { .. })
        ),
        code + 7
    );
    ensure!(
        matches!(
            m.map(va + 0x100, pa, 4096, &vram),
            Err(MmError::Misaligned { .. })
        ),
        code + 7
    );
    ensure!(
        matches!(m.unmap(va + 4096, 4096), Err(MmError::SplitsPage { .. })),
        code + 7
    );
    ensure!(
        matches!(
            m.unmap(0x30_0000_0000, 4096),
            Err(MmError::NotMapped { .. })
        ),
        code + 7
    );
    let after = m.stats();
    ensure!(
        after.words_written == before.words_written && after.invalidates == before.invalidates,
        code + 8
    );

    // Unmap everything: the translations are gone, the tables released (only the root left),
    // and the invalidate waited for accesses in flight (a downgrade: SYS_MEMBAR).
    m.unmap(va, size).map_err(|_| code + 9)?;
    m.unmap(host_va, 5 * 4096).map_err(|_| code + 9)?;
    ensure!(matches!(m.translate(va + 0x1234), Ok(None)), code + 10);
    ensure!(matches!(m.translate(host_va), Ok(None)), code + 10);
    let (n, last) = invalidates(&regs);
    ensure!(n == 4 && last.trigger() && last.sys_membar(), code + 11);
    ensure!(
        m.tables_in_use() == 1 && m.tables_free() == TABLES as u32 - 1,
        code + 12
    );

    // The largest pages the format has, and running out of table memory.
    if fmt.supports(PageSize::Size512M) {
        let big_va = 0x40_0000_0000u64;
        m.map(big_va, 0x2000_0000, 1 << 29, &vram)
            .map_err(|_| code + 13)?;
        let Ok(Some(t)) = m.translate(big_va + (100 << 20)) else {
            return Err(code + 13);
        };
        ensure!(
            t.page == PageSize::Size512M && t.pte.addr == 0x2000_0000,
            code + 13
        );
        m.unmap(big_va, 1 << 29).map_err(|_| code + 13)?;
    }
    // Each 2 MiB of 4 KiB pages needs its own table: far more than the pool holds.
    ensure!(
        matches!(
            m.map_with_max_page(va + 4096, pa, 64 << 20, &vram, PageSize::Size4K),
            Err(MmError::OutOfTableMemory { .. })
        ),
        code + 14
    );
    ensure!(m.tables_in_use() == 1, code + 14);
    Ok(())
}

pub fn check() -> Result<(), i32> {
    let v2 = VramTables(V2_TABLES.take(VRAM_TABLES).ok_or(70)?);
    exercise(MmuFormat::V2, v2, 70)?;
    let v3 = DmaTables::new(V3_TABLES.take(HOST_TABLES).ok_or(85)?, true).map_err(|_| 85)?;
    exercise(MmuFormat::V3, v3, 85)
}
