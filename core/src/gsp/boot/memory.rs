//! The DMA memory GSP-RM and the boot firmware read: the radix3-mapped GSP-RM image, the
//! bootloader, the signature, the WPR metadata, the LIBOS arguments with their log buffers and
//! the RM arguments (`kgspAllocBootArgs_TU102`, `kgspSetupLibosInitArgs`,
//! `_kgspInitLibosLoggingStructures`).

use zerocopy::IntoBytes;

use crate::gsp::log::{DmaLog, LogImage, LogItem, LogReader, format_record, init_log_buffer};
use crate::gsp::msgq::MESSAGE_QUEUE_INIT_ARGUMENTS;
use crate::hal::{DmaAllocator, DmaBuffer, HalError};

use super::abi::{
    GSP_ARGUMENTS_CACHED, GSP_SR_INIT_ARGUMENTS, LIBOS_MEMORY_REGION_CONTIGUOUS,
    LIBOS_MEMORY_REGION_LOC_SYSMEM, LibosMemoryRegionInitArgument, libos_id8,
};

/// Bytes per radix3 page (`LIBOS_MEMORY_REGION_RADIX_PAGE_SIZE`).
pub const RADIX3_PAGE: usize = 4096;
const ENTRIES: u64 = (RADIX3_PAGE / 8) as u64;

/// Page counts of the radix3 levels `[L0, L1, L2, data]` for an image of `size` bytes
/// (`kgspCreateRadix3`), or `None` if it is empty or too large for one L0 page.
pub fn radix3_levels(size: u64) -> Option<[u64; 4]> {
    if size == 0 {
        return None;
    }
    let data = (size - 1) / RADIX3_PAGE as u64 + 1;
    let l2 = (data - 1) / ENTRIES + 1;
    let l1 = (l2 - 1) / ENTRIES + 1;
    let l0 = (l1 - 1) / ENTRIES + 1;
    (l0 == 1).then_some([l0, l1, l2, data])
}

/// Builds `[L0 | L1 | L2 | image]` in one DMA buffer: every table entry is the device address
/// of a page of the next level. Returns the buffer; `sysmemAddrOfRadix3Elf` is its address.
pub fn build_radix3<D: DmaAllocator>(dma: &D, image: &[u8]) -> Result<D::Buffer, HalError> {
    let levels = radix3_levels(image.len() as u64).ok_or(HalError::OutOfRange {
        offset: 0,
        len: image.len() as u64,
        limit: ENTRIES * ENTRIES * ENTRIES * RADIX3_PAGE as u64,
    })?;
    let total: u64 = levels.iter().sum();
    let bytes = usize::try_from(total * RADIX3_PAGE as u64).map_err(|_| HalError::NoMemory {
        requested: u64::MAX,
    })?;
    let buf = dma.alloc_dma(bytes)?;
    let base = buf.dev_addr();
    let page_addr = |p: u64| base + p * RADIX3_PAGE as u64;
    // Level k's entry j (counted across the level) points at page j of level k + 1.
    let mut start = 0u64;
    for k in 0..3 {
        let next_start = start + levels[k];
        let mut entry = [0u8; RADIX3_PAGE];
        for page in 0..levels[k] {
            entry.fill(0);
            for e in 0..ENTRIES {
                let j = page * ENTRIES + e;
                if j >= levels[k + 1] {
                    break;
                }
                let a = page_addr(next_start + j).to_le_bytes();
                let at = (e * 8) as usize;
                entry[at..at + 8].copy_from_slice(&a);
            }
            buf.write(((start + page) as usize) * RADIX3_PAGE, &entry)?;
        }
        start = next_start;
    }
    buf.write(start as usize * RADIX3_PAGE, image)?;
    Ok(buf)
}

/// Copies `bytes` into a new DMA buffer.
pub fn copy_to_dma<D: DmaAllocator>(dma: &D, bytes: &[u8]) -> Result<D::Buffer, HalError> {
    let buf = dma.alloc_dma(bytes.len().max(1))?;
    buf.write(0, bytes)?;
    Ok(buf)
}

/// Size of each LIBOS log buffer (release builds: 64 KiB, `_kgspInitLibosLoggingStructures`).
pub const LOG_SIZE: usize = 0x1_0000;

/// The LIBOS log regions, LOGINIT first ("early init logging" needs it first). The kernel
/// log's name is the same for every chip family; only the logging ELF section differs.
pub const LOG_NAMES: [&str; 5] = ["LOGINIT", "LOGINTR", "LOGRM", "LOGMNOC", "LOGKRNL"];

/// How far each LIBOS log has been read ([`BootMemory::read_new_logs`]).
#[derive(Debug, Default)]
pub struct LogCursor([LogReader; LOG_NAMES.len()]);

/// The memory of one boot, kept while GSP-RM runs.
#[derive(Debug)]
pub struct BootMemory<B> {
    /// `[L0 | L1 | L2 | GSP-RM image]`.
    pub radix3: B,
    /// The `.fwsignature_*` section.
    pub signature: B,
    /// The RISC-V bootloader image.
    pub bootloader: B,
    /// `GspFwWprMeta`.
    pub wpr_meta: B,
    /// The `LibosMemoryRegionInitArgument` array.
    pub libos: B,
    /// The log buffers, [`LOG_SIZE`] each, in [`LOG_NAMES`] order.
    pub logs: B,
    /// `GSP_ARGUMENTS_CACHED` ("RMARGS").
    pub rmargs: B,
}

impl<B: DmaBuffer> BootMemory<B> {
    /// Allocates and fills everything but the WPR metadata's contents and the message queues.
    pub fn new<D: DmaAllocator<Buffer = B>>(
        dma: &D,
        gsp_image: &[u8],
        signature: &[u8],
        bootloader: &[u8],
        mq: MESSAGE_QUEUE_INIT_ARGUMENTS,
    ) -> Result<Self, HalError> {
        let radix3 = build_radix3(dma, gsp_image)?;
        let signature = copy_to_dma(dma, signature)?;
        let bootloader = copy_to_dma(dma, bootloader)?;
        let wpr_meta = dma.alloc_dma(RADIX3_PAGE)?;
        let logs = dma.alloc_dma(LOG_SIZE * LOG_NAMES.len())?;
        for i in 0..LOG_NAMES.len() {
            init_log_buffer(&logs, i * LOG_SIZE, LOG_SIZE).map_err(|e| match e {
                crate::gsp::GspError::Hal(h) => h,
                _ => HalError::Unsupported("log buffer layout"),
            })?;
        }
        let rmargs = dma.alloc_dma(RADIX3_PAGE)?;
        let args = GSP_ARGUMENTS_CACHED {
            messageQueueInitArguments: mq,
            srInitArguments: GSP_SR_INIT_ARGUMENTS::default(),
            gpuInstance: 0,
            bDmemStack: 1,
            _pad: [0; 7],
            profilerArgs_pa: 0,
            profilerArgs_size: 0,
        };
        rmargs.write(0, args.as_bytes())?;
        let libos = dma.alloc_dma(RADIX3_PAGE)?;
        let mut idx = 0;
        for (i, name) in LOG_NAMES.iter().enumerate() {
            let a = LibosMemoryRegionInitArgument {
                id8: libos_id8(name),
                pa: logs.dev_addr() + (i * LOG_SIZE) as u64,
                size: LOG_SIZE as u64,
                kind: LIBOS_MEMORY_REGION_CONTIGUOUS,
                loc: LIBOS_MEMORY_REGION_LOC_SYSMEM,
                _pad: [0; 6],
            };
            libos.write(idx * 32, a.as_bytes())?;
            idx += 1;
        }
        let a = LibosMemoryRegionInitArgument {
            id8: libos_id8("RMARGS"),
            pa: rmargs.dev_addr(),
            size: rmargs.len() as u64,
            kind: LIBOS_MEMORY_REGION_CONTIGUOUS,
            loc: LIBOS_MEMORY_REGION_LOC_SYSMEM,
            _pad: [0; 6],
        };
        libos.write(idx * 32, a.as_bytes())?;
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        Ok(BootMemory {
            radix3,
            signature,
            bootloader,
            wpr_meta,
            libos,
            logs,
            rmargs,
        })
    }

    /// Decodes every LIBOS log from the beginning, oldest record first per buffer, passing each
    /// line to `out` (records with `image`, raw words without).
    pub fn read_logs(
        &self,
        image: Option<&dyn LogImage>,
        out: &mut dyn FnMut(core::fmt::Arguments<'_>),
    ) {
        self.read_new_logs(&mut LogCursor::default(), image, out)
    }

    /// [`BootMemory::read_logs`] for what was written since `cursor` last read (a watcher
    /// calls it repeatedly with the same cursor).
    pub fn read_new_logs(
        &self,
        cursor: &mut LogCursor,
        image: Option<&dyn LogImage>,
        out: &mut dyn FnMut(core::fmt::Arguments<'_>),
    ) {
        for (i, (name, reader)) in LOG_NAMES.iter().zip(cursor.0.iter_mut()).enumerate() {
            let src = DmaLog {
                buf: &self.logs,
                offset: i * LOG_SIZE,
                size: LOG_SIZE,
            };
            let mut line = heapless::String::<256>::new();
            let r = reader.read_new(&src, image, &mut |item| match item {
                LogItem::Record(rec) => {
                    line.clear();
                    let mut w = Trunc(&mut line);
                    match image {
                        Some(img) => {
                            let _ = format_record(rec, img, &mut w);
                        }
                        None => {
                            let _ = core::fmt::write(&mut w, format_args!("{:#x}", rec.meta_va));
                        }
                    }
                    out(format_args!("{name}: {}", line.trim_end()));
                }
                LogItem::Word(k, v) => out(format_args!("{name}[{k}]: {v:#018x}")),
            });
            if let Err(e) = r {
                out(format_args!("{name}: unreadable ({e})"));
            }
        }
    }
}

struct Trunc<'a>(&'a mut heapless::String<256>);
impl core::fmt::Write for Trunc<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for c in s.chars() {
            if self.0.push(c).is_err() {
                break;
            }
        }
        Ok(())
    }
}
