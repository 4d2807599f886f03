//! Turing (TU102, sm_75) compute and copy at the engine level: an sm_75 fixture kernel launched
//! with a V02_02 QMD through TURING_COMPUTE_A's `SEND_SIGNALING_PCAS_B`, and what the Turing
//! classes do not have refused. No chip model is needed: the engines take the chip from
//! core's table (`Chipset::TU102`: QMD V02_02, sm 75) and memory through an [`AddressSpace`].

use std::sync::Arc;

use nvbare_core::channel::methods::{compute as cm, copy as ccm};
use nvbare_core::channel::qmd::{LaunchDesc, Qmd, SmSharedConfig};
use nvbare_core::chip::{Chipset, QmdVersion};
use nvbare_core::rm::class::{AMPERE_COMPUTE_A, TURING_COMPUTE_A, TURING_DMA_COPY_A};
use nvbare_gsp_firmware::cubin::Cubin;

use super::{ComputeRegs, KernelRegistry, method};
use crate::bar0::{RegisterFile, SimCore};
use crate::clock::SimClock;
use crate::fifo::exec::{Ctx, Step};
use crate::gpu_mem::{Access, AddressSpace, Aperture, FaultKind, MmuFault, Translation};
use crate::host::HostMemory;
use crate::system::PeerPorts;
use crate::vram::Vram;

/// GPU VA `BASE + x` is VRAM `x`, for `SIZE` bytes.
struct Flat;
const BASE: u64 = 0x10_0000_0000;
const SIZE: u64 = 16 << 20;

impl AddressSpace for Flat {
    fn translate(&self, _: &SimCore, va: u64, access: Access) -> Result<Translation, MmuFault> {
        match va.checked_sub(BASE).filter(|&o| o < SIZE) {
            Some(off) => Ok(Translation {
                aperture: Aperture::Vram,
                phys: off,
                contiguous: SIZE - off,
            }),
            None => Err(MmuFault {
                va,
                access,
                kind: FaultKind::InvalidPde,
            }),
        }
    }
}

fn core() -> SimCore {
    SimCore {
        regs: RegisterFile::default(),
        vram: Arc::new(Vram::new(SIZE)),
        host: HostMemory::new(1 << 20),
        clock: Arc::new(SimClock::virtual_time()),
        peers: Arc::new(PeerPorts::default()),
        trace: Vec::new(),
        unknowns: Arc::new(crate::unknowns::Unknowns::from_env()),
    }
}

fn write(core: &SimCore, va: u64, b: &[u8]) {
    core.vram.write(va - BASE, b).unwrap();
}

fn read_u32(core: &SimCore, va: u64) -> u32 {
    core.vram.read_u32(va - BASE).unwrap()
}

const CODE: u64 = BASE + 0x1_0000;
const CB0: u64 = BASE + 0x2_0000;
const QMD: u64 = BASE + 0x3_0000;
const BUF: u64 = BASE + 0x4_0000;
const SEM: u64 = BASE + 0x5_0000;
const N: u32 = 100;

/// Loads `add1` of `cubin` at [`CODE`], binds its parameters (`BUF`, `N`) and the driver
/// area's grid shape in bank 0 at [`CB0`], and gives the launch.
fn add1_launch(core: &SimCore, cubin: &[u8]) -> LaunchDesc {
    let c = Cubin::parse(cubin).unwrap();
    let image = c.load_image(CODE).unwrap();
    write(core, CODE, &image);
    let k = c.kernels.iter().find(|k| k.name == "add1").unwrap();
    let block = [64u32, 1, 1];
    let grid = [N.div_ceil(64), 1, 1];
    let mut cb = vec![0u8; 0x400];
    // %ntid at 0x0, %nctaid at 0xc (the Ampere/Turing driver area).
    for (i, x) in block.iter().chain(&grid).enumerate() {
        cb[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes());
    }
    let p = |i: usize| (k.param_base + k.params[i].offset) as usize;
    cb[p(0)..p(0) + 8].copy_from_slice(&BUF.to_le_bytes());
    cb[p(1)..p(1) + 4].copy_from_slice(&N.to_le_bytes());
    write(core, CB0, &cb);
    let mut d = LaunchDesc {
        program_address: CODE + k.code_offset,
        register_count: k.regcount.max(16),
        shared_memory_size: 1024,
        block,
        grid,
        barrier_count: 1,
        sass_version: 0x75,
        sm_config: SmSharedConfig {
            min: 3,
            max: 17,
            target: 3,
        },
        ..LaunchDesc::default()
    };
    d.cbufs[0] = Some((CB0, cb.len() as u32));
    d.release[0] = Some((SEM, 0x1234_5678));
    d
}

fn send(
    r: &mut ComputeRegs,
    core: &mut SimCore,
    ctx: &Ctx<'_>,
    class: u32,
    m: u32,
    data: u32,
) -> Step {
    method(r, core, &Flat, ctx, 0, class, m, data)
}

/// Writes QMD `q` at [`QMD`] and launches it the Turing way.
fn launch(core: &mut SimCore, ctx: &Ctx<'_>, q: &Qmd) -> (ComputeRegs, Step) {
    write(core, QMD, q.as_bytes());
    let mut r = ComputeRegs::default();
    let s = send(
        &mut r,
        core,
        ctx,
        TURING_COMPUTE_A,
        cm::SEND_PCAS_A,
        (QMD >> 8) as u32,
    );
    assert!(matches!(s, Step::Ok));
    let go = cm::PCAS_B_INVALIDATE | cm::PCAS_B_SCHEDULE;
    let s = send(
        &mut r,
        core,
        ctx,
        TURING_COMPUTE_A,
        cm::SEND_SIGNALING_PCAS_B,
        go,
    );
    (r, s)
}

fn reason(s: &Step) -> String {
    match s {
        Step::Rc(rc) => rc.reason.clone(),
        other => panic!("not an RC: {other:?}"),
    }
}

#[test]
fn an_sm75_kernel_runs_from_a_v02_qmd_on_tu102() {
    let kernels = KernelRegistry::fixtures().unwrap();
    let ctx = Ctx {
        chip: Chipset::TU102,
        kernels: &kernels,
    };
    for (name, bytes) in super::kernels::FIXTURES {
        if !name.starts_with("kernels_sm75") {
            continue;
        }
        let mut core = core();
        let d = add1_launch(&core, bytes);
        write(&core, BUF, &[7u8; 4 * N as usize + 4]);
        let q = Qmd::build(QmdVersion::V02_02, &d).unwrap();
        let (r, s) = launch(&mut core, &ctx, &q);
        assert!(matches!(s, Step::Ok), "{name}: {s:?}");
        let w = 0x0707_0707u32;
        assert_eq!(read_u32(&core, BUF), w + 1, "{name}");
        assert_eq!(read_u32(&core, BUF + 4 * (N as u64 - 1)), w + 1, "{name}");
        assert_eq!(
            read_u32(&core, BUF + 4 * N as u64),
            w,
            "{name}: past n untouched"
        );
        // The release: a 32-bit payload (V02_02 has no PAYLOAD64B), then the timestamp.
        assert_eq!(read_u32(&core, SEM), 0x1234_5678);
        assert_eq!(read_u32(&core, SEM + 4), 0, "nothing written above 32 bits");
        assert_eq!(r.last.unwrap().program_address, d.program_address);
    }
}

#[test]
fn turing_refuses_what_it_does_not_have() {
    let kernels = KernelRegistry::fixtures().unwrap();
    let tu = Ctx {
        chip: Chipset::TU102,
        kernels: &kernels,
    };
    let sm75 = super::kernels::FIXTURES
        .iter()
        .find(|(n, _)| *n == "kernels_sm75_cuda12")
        .unwrap()
        .1;
    let sm80 = super::kernels::FIXTURES
        .iter()
        .find(|(n, _)| *n == "kernels_sm80_cuda12")
        .unwrap()
        .1;
    let mut c = core();
    // SEND_SIGNALING_PCAS2_B is not a TURING_COMPUTE_A method.
    let mut r = ComputeRegs::default();
    let s = send(
        &mut r,
        &mut c,
        &tu,
        TURING_COMPUTE_A,
        cm::SEND_SIGNALING_PCAS2_B,
        3,
    );
    assert!(reason(&s).contains("has no method 0x2c0"), "{}", reason(&s));
    // ... nor is the reverse modelled on Ampere's class.
    let s = send(
        &mut r,
        &mut c,
        &tu,
        AMPERE_COMPUTE_A,
        cm::SEND_SIGNALING_PCAS_B,
        3,
    );
    assert!(matches!(s, Step::Rc(_)));
    // Reserved PCAS_B bits.
    let s = send(
        &mut r,
        &mut c,
        &tu,
        TURING_COMPUTE_A,
        cm::SEND_SIGNALING_PCAS_B,
        0x4,
    );
    assert!(matches!(s, Step::Rc(_)));
    // A V03_00 QMD on a Turing channel: its 3.0 is not 2.2.
    let d = add1_launch(&c, sm75);
    let q3 = Qmd::build(QmdVersion::V03_00, &d).unwrap();
    let (_, s) = launch(&mut c, &tu, &q3);
    assert!(reason(&s).contains("version 3.0"), "{}", reason(&s));
    // PROGRAM_OFFSET (code relative to a program region Turing's class cannot set).
    let mut q = Qmd::build(QmdVersion::V02_02, &d).unwrap();
    q.set("PROGRAM_OFFSET", 0x100).unwrap();
    let (_, s) = launch(&mut c, &tu, &q);
    assert!(reason(&s).contains("PROGRAM_OFFSET"), "{}", reason(&s));
    // A QUEUE dependent QMD.
    let mut q = Qmd::build(QmdVersion::V02_02, &d).unwrap();
    q.set("DEPENDENT_QMD_SCHEDULE_ENABLE", 1).unwrap();
    q.set("DEPENDENT_QMD_POINTER", QMD >> 8).unwrap();
    let (_, s) = launch(&mut c, &tu, &q);
    assert!(reason(&s).contains("QUEUE"), "{}", reason(&s));
    // sm_80 code on an sm_75 GPU is an illegal instruction.
    let d = add1_launch(&c, sm80);
    let q = Qmd::build(QmdVersion::V02_02, &d).unwrap();
    let (_, s) = launch(&mut c, &tu, &q);
    assert!(reason(&s).contains("sm_80 code"), "{}", reason(&s));
    // sm_75 code on an sm_90 GPU too.
    let gh = Ctx {
        chip: Chipset::GH100,
        kernels: &kernels,
    };
    let d = add1_launch(&c, sm75);
    let q = Qmd::build(QmdVersion::V04_00, &d).unwrap();
    write(&c, QMD, q.as_bytes());
    let mut r = ComputeRegs::default();
    let hopper = nvbare_core::rm::class::HOPPER_COMPUTE_A;
    let _ = send(
        &mut r,
        &mut c,
        &gh,
        hopper,
        cm::SEND_PCAS_A,
        (QMD >> 8) as u32,
    );
    let s = send(&mut r, &mut c, &gh, hopper, cm::SEND_SIGNALING_PCAS2_B, 3);
    assert!(reason(&s).contains("sm_75 code"), "{}", reason(&s));
}

#[test]
fn turing_copy_semaphores_are_32_bit() {
    let mut c = core();
    let mut r = crate::ce::CeRegs::default();
    let ce = |r: &mut crate::ce::CeRegs, c: &mut SimCore, m: u32, d: u32| {
        crate::ce::method(r, c, &Flat, 0, TURING_DMA_COPY_A, m, d)
    };
    let s = ce(&mut r, &mut c, ccm::SET_SEMAPHORE_PAYLOAD_UPPER, 1);
    assert!(reason(&s).contains("SET_SEMAPHORE_PAYLOAD_UPPER"));
    let two_word = ccm::launch_dma::SEMAPHORE_PAYLOAD_SIZE_TWO_WORD;
    let s = ce(&mut r, &mut c, ccm::LAUNCH_DMA, two_word | (1 << 3));
    assert!(reason(&s).contains("PAYLOAD_SIZE"));
    // What core sends there instead: a 32-bit release.
    let mut w = [0u32; 16];
    let mut pb = nvbare_core::channel::pushbuf::PushBuffer::new(&mut w);
    pb.ce_release_on(SEM, 9, false, false).unwrap();
    let n = pb.len();
    for (m, d) in [
        (ccm::SET_SEMAPHORE_A, w[1]),
        (ccm::SET_SEMAPHORE_B, w[2]),
        (ccm::SET_SEMAPHORE_PAYLOAD, w[3]),
        (ccm::LAUNCH_DMA, w[n - 1]),
    ] {
        assert!(matches!(ce(&mut r, &mut c, m, d), Step::Ok), "{m:#x}");
    }
    assert_eq!(read_u32(&c, SEM), 9);
}
