//! The copy engine (`*_DMA_COPY_*` classes): pitch copies between virtual addresses and
//! semaphore releases, as `LAUNCH_DMA` describes them (`clc7b5.h`/`clc8b5.h`).
//!
//! Modelled: `DATA_TRANSFER_TYPE` NONE / PIPELINED / NON_PIPELINED (all complete before the
//! next method), pitch layouts, one line or `MULTI_LINE` with `PITCH_IN/OUT` and `LINE_COUNT`,
//! virtual source and destination, and the one-word / four-word (timestamp) semaphore release
//! with a 32- or 64-bit payload. Block-linear layouts, physical addressing, remapping and
//! reductions are rejected with a copy-engine RC rather than silently ignored.

use nvbare_core::channel::methods::copy::{self as m, launch_dma as ld};
use nvbare_core::rm::class::AMPERE_DMA_COPY_A;
use nvbare_core::rm::ctrl::rc;

use crate::bar0::SimCore;
use crate::fifo::RcInfo;
use crate::fifo::exec::Step;
use crate::gpu_mem::{Access, AddressSpace, gpu_read, gpu_write};

/// Latched copy-engine registers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CeRegs {
    sem_upper: u32,
    sem_lower: u32,
    payload: u32,
    payload_upper: u32,
    in_upper: u32,
    in_lower: u32,
    out_upper: u32,
    out_lower: u32,
    pitch_in: u32,
    pitch_out: u32,
    line_length: u32,
    line_count: u32,
}

/// Bytes moved per step (bounds the temporary buffer).
const CHUNK: usize = 1 << 20;
/// Most bytes one `LAUNCH_DMA` may move in the simulator (a larger copy is refused with a CE
/// error rather than keeping the process busy).
const MAX_COPY: u64 = 16 << 30;

fn ce_error(engine: u32, reason: String) -> Step {
    Step::Rc(RcInfo {
        code: rc::ROBUST_CHANNEL_CE0_ERROR,
        engine_type: engine,
        reason,
        mmu_fault: None,
        sm_error: None,
    })
}

/// Whether copy class `class` has 64-bit semaphore payloads (`SET_SEMAPHORE_PAYLOAD_UPPER`,
/// `LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE`): AMPERE_DMA_COPY_A on. TURING_DMA_COPY_A (`clc5b5.h`,
/// open-gpu-kernel-modules 570.144) has neither: its semaphore payload is 32 bits.
pub(crate) fn has_wide_semaphores(class: u32) -> bool {
    class >= AMPERE_DMA_COPY_A
}

pub(crate) fn method(
    r: &mut CeRegs,
    core: &mut SimCore,
    space: &dyn AddressSpace,
    engine: u32,
    class: u32,
    method: u32,
    data: u32,
) -> Step {
    if !has_wide_semaphores(class) {
        if method == m::SET_SEMAPHORE_PAYLOAD_UPPER {
            return ce_error(
                engine,
                format!(
                    "copy class {class:#x} has no SET_SEMAPHORE_PAYLOAD_UPPER (method {method:#x})"
                ),
            );
        }
        if method == m::LAUNCH_DMA && data & ld::SEMAPHORE_PAYLOAD_SIZE_TWO_WORD != 0 {
            return ce_error(
                engine,
                format!(
                    "copy class {class:#x} has no LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE (bit 27 set)"
                ),
            );
        }
    }
    match method {
        m::NOP | m::PM_TRIGGER => {}
        m::SET_SEMAPHORE_A => r.sem_upper = data & 0x1ff_ffff,
        m::SET_SEMAPHORE_B => r.sem_lower = data,
        m::SET_SEMAPHORE_PAYLOAD => r.payload = data,
        m::SET_SEMAPHORE_PAYLOAD_UPPER => r.payload_upper = data,
        m::OFFSET_IN_UPPER => r.in_upper = data & 0x1ff_ffff,
        m::OFFSET_IN_LOWER => r.in_lower = data,
        m::OFFSET_OUT_UPPER => r.out_upper = data & 0x1ff_ffff,
        m::OFFSET_OUT_LOWER => r.out_lower = data,
        m::PITCH_IN => r.pitch_in = data,
        m::PITCH_OUT => r.pitch_out = data,
        m::LINE_LENGTH_IN => r.line_length = data,
        m::LINE_COUNT => r.line_count = data,
        m::SET_SRC_PHYS_MODE | m::SET_DST_PHYS_MODE => {}
        m::LAUNCH_DMA => return launch(r, core, space, engine, data),
        _ => {
            return ce_error(
                engine,
                format!("copy-engine method {method:#x} is not modelled"),
            );
        }
    }
    Step::Ok
}

fn launch(r: &CeRegs, core: &mut SimCore, space: &dyn AddressSpace, engine: u32, d: u32) -> Step {
    let unsupported = ld::REMAP_ENABLE
        | ld::SRC_TYPE_PHYSICAL
        | ld::DST_TYPE_PHYSICAL
        | ld::SEMAPHORE_REDUCTION_ENABLE
        | ld::MEMORY_SCRUB_ENABLE;
    if d & unsupported != 0 {
        return ce_error(
            engine,
            format!("LAUNCH_DMA {d:#x}: remap/physical/reduction/scrub are not modelled"),
        );
    }
    if d & ld::DATA_TRANSFER_TYPE_MASK != ld::DATA_TRANSFER_TYPE_NONE {
        if d & ld::SRC_MEMORY_LAYOUT_PITCH == 0 || d & ld::DST_MEMORY_LAYOUT_PITCH == 0 {
            return ce_error(
                engine,
                "block-linear copies are not modelled (set SRC/DST_MEMORY_LAYOUT_PITCH)".into(),
            );
        }
        let src = ((r.in_upper as u64) << 32) | r.in_lower as u64;
        let dst = ((r.out_upper as u64) << 32) | r.out_lower as u64;
        let lines = if d & ld::MULTI_LINE_ENABLE != 0 {
            r.line_count as u64
        } else {
            1
        };
        let len = r.line_length as usize;
        if lines.saturating_mul(len.max(1) as u64) > MAX_COPY {
            return ce_error(
                engine,
                format!("a copy of {lines} lines x {len} bytes is larger than the simulator moves"),
            );
        }
        let mut buf = vec![0u8; len.min(CHUNK)];
        for line in 0..lines {
            let (s, t) = if lines > 1 {
                (
                    src.wrapping_add(line * r.pitch_in as u64),
                    dst.wrapping_add(line * r.pitch_out as u64),
                )
            } else {
                (src, dst)
            };
            let mut done = 0usize;
            while done < len {
                let n = (len - done).min(CHUNK);
                let chunk = &mut buf[..n];
                if let Err(f) = gpu_read(
                    core,
                    space,
                    s.wrapping_add(done as u64),
                    chunk,
                    Access::Read,
                ) {
                    return Step::Rc(RcInfo::mmu(engine, f, "copy engine read"));
                }
                if let Err(f) = gpu_write(
                    core,
                    space,
                    t.wrapping_add(done as u64),
                    chunk,
                    Access::Write,
                ) {
                    return Step::Rc(RcInfo::mmu(engine, f, "copy engine write"));
                }
                done += n;
            }
        }
    }
    let sem_type = (d >> ld::SEMAPHORE_TYPE_SHIFT) & 3;
    if sem_type == ld::SEMAPHORE_TYPE_NONE {
        return Step::Ok;
    }
    if sem_type == 3 {
        return ce_error(
            engine,
            "conditional-interrupt semaphores are not modelled".into(),
        );
    }
    let addr = ((r.sem_upper as u64) << 32) | r.sem_lower as u64;
    let two_word = d & ld::SEMAPHORE_PAYLOAD_SIZE_TWO_WORD != 0;
    let payload = ((r.payload_upper as u64) << 32) | r.payload as u64;
    let bytes = payload.to_le_bytes();
    let n = if two_word { 8 } else { 4 };
    if let Err(f) = gpu_write(core, space, addr, &bytes[..n], Access::Write) {
        return Step::Rc(RcInfo::mmu(engine, f, "copy engine semaphore"));
    }
    if sem_type == ld::SEMAPHORE_TYPE_RELEASE_FOUR_WORD_SEMAPHORE {
        let ts = core.clock.nanos().to_le_bytes();
        if let Err(f) = gpu_write(core, space, addr + 8, &ts, Access::Write) {
            return Step::Rc(RcInfo::mmu(engine, f, "copy engine semaphore timestamp"));
        }
    }
    Step::Ok
}
