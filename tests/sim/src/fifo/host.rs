//! Host (GPFIFO class) methods: object binding, semaphores, WFI, interrupts.

use nvbare_core::channel::methods::host::{self as m, sem_execute as se};
use nvbare_core::rm::class::{AMPERE_CHANNEL_GPFIFO_A, class_name};

use super::Channel;
use super::exec::{RcInfo, Step};
use crate::bar0::SimCore;
use crate::gpu_mem::{Access, gpu_read, gpu_write};

/// Latched host-method registers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HostRegs {
    sem_addr_lo: u32,
    sem_addr_hi: u32,
    payload_lo: u32,
    payload_hi: u32,
    mem_op: [u32; 3],
}

/// Whether `class` publishes the legacy `SEMAPHOREA..D` and `NON_STALL_INTERRUPT` methods
/// (Ampere's C56F and older do; `clc86f.h` publishes neither, though UVM still sends
/// NON_STALL_INTERRUPT on Hopper and the hardware accepts it).
fn has_legacy_semaphores(class: u32) -> bool {
    class <= AMPERE_CHANNEL_GPFIFO_A
}

/// Width of `SEM_ADDR_HI_OFFSET`: 7:0 up to C56F, 24:0 from C86F.
fn sem_addr_hi_mask(class: u32) -> u32 {
    if class <= AMPERE_CHANNEL_GPFIFO_A {
        0xff
    } else {
        0x1ff_ffff
    }
}

pub(crate) fn method(
    ch: &mut Channel,
    core: &mut SimCore,
    subc: u8,
    method: u32,
    data: u32,
) -> Step {
    let engine = ch.desc.engine_type;
    let class = ch.desc.class;
    let r = &mut ch.regs.host;
    match method {
        m::SET_OBJECT => {
            let obj = data & 0xffff;
            if !ch.objects.contains(&obj) {
                return Step::Rc(RcInfo::pbdma(
                    engine,
                    format!(
                        "SET_OBJECT of {} ({obj:#x}) on subchannel {subc}: no such object on \
                         this channel",
                        class_name(obj).unwrap_or("an unknown class")
                    ),
                ));
            }
            if let Some(s) = ch.subchannels.get_mut(subc as usize) {
                *s = Some(obj);
            }
            Step::Ok
        }
        m::NOP | m::SET_REFERENCE | m::YIELD | m::FB_FLUSH | m::CLEAR_FAULTED => Step::Ok,
        // Every engine finishes each method before the next in this model, so WFI is free.
        m::WFI => Step::Ok,
        m::NON_STALL_INTERRUPT => {
            ch.stats.nonstall_interrupts += 1;
            Step::Ok
        }
        m::MEM_OP_A | m::MEM_OP_B | m::MEM_OP_C => {
            let i = ((method - m::MEM_OP_A) / 4) as usize;
            if let Some(x) = r.mem_op.get_mut(i) {
                *x = data;
            }
            Step::Ok
        }
        // Membars and TLB invalidates: the mapping table has no TLB to flush.
        m::MEM_OP_D => Step::Ok,
        m::SEM_ADDR_LO => {
            r.sem_addr_lo = data;
            Step::Ok
        }
        m::SEM_ADDR_HI => {
            r.sem_addr_hi = data & sem_addr_hi_mask(class);
            Step::Ok
        }
        m::SEM_PAYLOAD_LO => {
            r.payload_lo = data;
            Step::Ok
        }
        m::SEM_PAYLOAD_HI => {
            r.payload_hi = data;
            Step::Ok
        }
        m::SEM_EXECUTE => {
            let regs = *r;
            let res = sem_execute(ch, core, &regs, data);
            if matches!(res, Step::Ok) && data & se::OPERATION_MASK == se::OPERATION_RELEASE {
                ch.stats.releases += 1;
            }
            res
        }
        m::SEMAPHOREA | m::SEMAPHOREB | m::SEMAPHOREC | m::SEMAPHORED
            if has_legacy_semaphores(class) =>
        {
            Step::Rc(RcInfo::pbdma(
                engine,
                "legacy SEMAPHOREA..D methods are not modelled; use SEM_ADDR_LO..SEM_EXECUTE",
            ))
        }
        _ => Step::Rc(RcInfo::pbdma(
            engine,
            format!(
                "host method {method:#x} is not a method of {}",
                class_name(class).unwrap_or("this GPFIFO class")
            ),
        )),
    }
}

fn sem_execute(ch: &mut Channel, core: &mut SimCore, r: &HostRegs, exec: u32) -> Step {
    let engine = ch.desc.engine_type;
    let space = ch.desc.space.clone();
    let addr = ((r.sem_addr_hi as u64) << 32) | (r.sem_addr_lo & !3) as u64;
    let wide = exec & se::PAYLOAD_SIZE_64BIT != 0;
    let payload = if wide {
        ((r.payload_hi as u64) << 32) | r.payload_lo as u64
    } else {
        r.payload_lo as u64
    };
    let size = if wide { 8 } else { 4 };
    if wide && !addr.is_multiple_of(8) {
        return Step::Rc(RcInfo::pbdma(
            engine,
            format!("64-bit semaphore at {addr:#x} is not 8-byte aligned"),
        ));
    }
    let op = exec & se::OPERATION_MASK;
    if op == se::OPERATION_RELEASE {
        let bytes = payload.to_le_bytes();
        if let Err(f) = gpu_write(core, &*space, addr, &bytes[..size], Access::Write) {
            return Step::Rc(RcInfo::mmu(engine, f, "semaphore release"));
        }
        if exec & se::RELEASE_TIMESTAMP_EN != 0 {
            let ts = core.clock.nanos().to_le_bytes();
            if let Err(f) = gpu_write(core, &*space, addr + 8, &ts, Access::Write) {
                return Step::Rc(RcInfo::mmu(engine, f, "semaphore timestamp"));
            }
        }
        return Step::Ok;
    }
    let mut cur = [0u8; 8];
    if let Err(f) = gpu_read(core, &*space, addr, &mut cur[..size], Access::Read) {
        return Step::Rc(RcInfo::mmu(engine, f, "semaphore acquire"));
    }
    let sem = u64::from_le_bytes(cur);
    let ok = match op {
        se::OPERATION_ACQUIRE => sem == payload,
        se::OPERATION_ACQ_STRICT_GEQ => sem >= payload,
        se::OPERATION_ACQ_CIRC_GEQ => {
            if wide {
                sem.wrapping_sub(payload) as i64 >= 0
            } else {
                (sem as u32).wrapping_sub(payload as u32) as i32 >= 0
            }
        }
        se::OPERATION_ACQ_AND => sem & payload != 0,
        se::OPERATION_ACQ_NOR => !(sem | payload) & if wide { u64::MAX } else { 0xffff_ffff } != 0,
        _ => {
            return Step::Rc(RcInfo::pbdma(
                engine,
                format!("SEM_EXECUTE operation {op} is not modelled"),
            ));
        }
    };
    if ok {
        Step::Ok
    } else {
        Step::Block { addr, payload }
    }
}
