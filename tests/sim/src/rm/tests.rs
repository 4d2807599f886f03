//! The RM model answering calls directly, as the device layer's backends will make them.

use super::*;
use crate::models;
use crate::{SimConfig, SimGpu};

const C: Handle = Handle(0xc1d0_0001);

struct T {
    gpu: Arc<SimGpu>,
    rm: Arc<Mutex<RmModel>>,
    abi: RmAbi,
}

impl T {
    fn new(model: ChipModel) -> T {
        let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
        let rm = RmModel::install(&gpu).unwrap();
        let t = T {
            gpu,
            rm,
            abi: RmAbi::R580,
        };
        t.alloc(Handle(0), C, NV01_ROOT, &mut []).unwrap();
        t
    }
    fn caller(&self) -> RmCaller {
        RmCaller {
            abi: self.abi,
            client: C,
        }
    }
    fn alloc(&self, p: Handle, h: Handle, class: u32, params: &mut [u8]) -> Result<(), RmStatus> {
        let c = self.caller();
        self.gpu
            .with_core(|core| self.rm.lock().unwrap().alloc(core, c, p, h, class, params))
    }
    fn control(&self, h: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmStatus> {
        let c = self.caller();
        self.gpu
            .with_core(|core| self.rm.lock().unwrap().control(core, c, h, cmd, params))
    }
    fn free(&self, h: Handle) -> Result<(), RmStatus> {
        let c = self.caller();
        self.gpu
            .with_core(|core| self.rm.lock().unwrap().free(core, c, Handle(0), h))
    }
    /// Device 0x1, subdevice 0x2, VA space 0x3.
    fn device(&self) {
        let mut d = NV0080_ALLOC_PARAMETERS::default();
        self.alloc(C, Handle(1), NV01_DEVICE_0, d.as_mut_bytes())
            .unwrap();
        self.alloc(Handle(1), Handle(2), NV20_SUBDEVICE_0, &mut [0; 4])
            .unwrap();
        let mut v = VaSpaceAlloc {
            va_base: 0x1000,
            va_size: 1 << 40,
            ..Default::default()
        }
        .encode(self.abi);
        self.alloc(Handle(1), Handle(3), FERMI_VASPACE_A, v.as_mut_bytes())
            .unwrap();
    }
    fn memory(&self, h: Handle, class: u32, size: u64) -> Result<(), RmStatus> {
        let mut m = NV_MEMORY_ALLOCATION_PARAMS {
            size,
            ..Default::default()
        };
        self.alloc(Handle(1), h, class, m.as_mut_bytes())
    }
}

#[test]
fn handles_parents_and_clients() {
    let t = T::new(models::GH100);
    assert_eq!(
        t.alloc(Handle(0), C, NV01_ROOT, &mut []),
        Err(RmStatus::NV_ERR_INSERT_DUPLICATE_NAME)
    );
    let mut d = NV0080_ALLOC_PARAMETERS {
        deviceId: 1,
        ..Default::default()
    };
    assert_eq!(
        t.alloc(C, Handle(1), NV01_DEVICE_0, d.as_mut_bytes()),
        Err(RmStatus::NV_ERR_INVALID_ARGUMENT)
    );
    t.device();
    // A subdevice under the client, a device under a device, a new handle 0, a reused one.
    assert_eq!(
        t.alloc(C, Handle(9), NV20_SUBDEVICE_0, &mut []),
        Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
    );
    assert_eq!(
        t.alloc(Handle(0x77), Handle(9), NV20_SUBDEVICE_0, &mut []),
        Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
    );
    assert_eq!(
        t.alloc(Handle(1), Handle(0), NV20_SUBDEVICE_0, &mut []),
        Err(RmStatus::NV_ERR_INVALID_OBJECT_NEW)
    );
    assert_eq!(
        t.alloc(Handle(1), Handle(2), NV20_SUBDEVICE_0, &mut []),
        Err(RmStatus::NV_ERR_INSERT_DUPLICATE_NAME)
    );
    assert_eq!(t.free(Handle(0x99)), Err(RmStatus::NV_ERR_OBJECT_NOT_FOUND));
    // Classes of other generations, and ids no chip has.
    assert_eq!(
        t.alloc(Handle(2), Handle(10), AMPERE_USERMODE_A, &mut []),
        Ok(()),
        "older usermode classes stay on the list"
    );
    assert_eq!(
        t.alloc(Handle(2), Handle(11), BLACKWELL_USERMODE_A, &mut []),
        Err(RmStatus::NV_ERR_NOT_SUPPORTED)
    );
    assert_eq!(
        t.alloc(Handle(1), Handle(12), 0xdead, &mut []),
        Err(RmStatus::NV_ERR_INVALID_CLASS)
    );
}

#[test]
fn sizes_are_checked_per_abi_like_580_does() {
    let mut t = T::new(models::GH100);
    t.device();
    // r580 caller: 570-sized VA space params, GPFIFO_SCHEDULE and CLASSLIST_V2 are refused.
    let mut v570 = VaSpaceAlloc::default().encode(RmAbi::R570);
    assert_eq!(
        t.alloc(Handle(1), Handle(4), FERMI_VASPACE_A, v570.as_mut_bytes()),
        Err(RmStatus::NV_ERR_INVALID_PARAM_STRUCT)
    );
    let mut cl = ClassListV2::new(RmAbi::R570);
    assert_eq!(
        t.control(
            Handle(1),
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
            cl.as_mut_bytes()
        ),
        Err(RmStatus::NV_ERR_INVALID_ARGUMENT)
    );
    let mut cl = ClassListV2::new(RmAbi::R580);
    t.control(
        Handle(1),
        NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
        cl.as_mut_bytes(),
    )
    .unwrap();
    assert!(cl.classes().contains(&HOPPER_COMPUTE_A));
    assert!(!cl.classes().contains(&AMPERE_COMPUTE_B));
    let mut g = NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS {
        engineType: NV2080_ENGINE_TYPE_GRAPHICS,
        ..Default::default()
    };
    t.alloc(
        Handle(1),
        Handle(5),
        KEPLER_CHANNEL_GROUP_A,
        g.as_mut_bytes(),
    )
    .unwrap();
    let mut s = ScheduleParams::new(RmAbi::R570, true);
    assert_eq!(
        t.control(Handle(5), NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, s.as_mut_bytes()),
        Err(RmStatus::NV_ERR_INVALID_ARGUMENT),
        "the 2-byte form, as the H200 with 580.159.04 answers"
    );
    // An r570 caller (GSP firmware) uses the small forms.
    t.abi = RmAbi::R570;
    let mut cl = ClassListV2::new(RmAbi::R570);
    t.control(
        Handle(1),
        NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
        cl.as_mut_bytes(),
    )
    .unwrap();
    assert_eq!(
        cl.classes().len(),
        ChipRm::for_chipset(Chipset::GH100)
            .unwrap()
            .class_list()
            .len()
    );
    let mut s = ScheduleParams::new(RmAbi::R570, true);
    t.control(Handle(5), NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, s.as_mut_bytes())
        .unwrap();
}

#[test]
fn gr_info_and_arch_info_describe_the_chip() {
    for (m, sm_version, sms) in [
        (models::AD102, 0x809, 128),
        (models::GH100, 0x900, 132),
        (models::GB202, 0xa04, 170),
    ] {
        let t = T::new(m);
        t.device();
        let mut q = NV2080_CTRL_GR_GET_INFO_V2_PARAMS::query(&[
            gr_info::SM_VERSION,
            gr_info::SHADER_PIPE_SUB_COUNT,
            gr_info::LITTER_NUM_SM_PER_TPC,
            0x05,
        ]);
        t.control(Handle(2), NV2080_CTRL_CMD_GR_GET_INFO_V2, q.as_mut_bytes())
            .unwrap();
        assert_eq!(q.value(gr_info::SM_VERSION), Some(sm_version));
        let tpcs = q.value(gr_info::SHADER_PIPE_SUB_COUNT).unwrap();
        assert_eq!(tpcs * q.value(gr_info::LITTER_NUM_SM_PER_TPC).unwrap(), sms);
        assert_eq!(q.value(0x05), Some(0), "unmodelled indices read 0");
        let mut a = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS::default();
        t.control(
            Handle(2),
            NV2080_CTRL_CMD_MC_GET_ARCH_INFO,
            a.as_mut_bytes(),
        )
        .unwrap();
        assert_eq!(Chipset::from_chip_id(a.chip_id()), Some(m.chipset));
        // GR info is a subdevice control.
        assert_eq!(
            t.control(Handle(1), NV2080_CTRL_CMD_GR_GET_INFO_V2, q.as_mut_bytes()),
            Err(RmStatus::NV_ERR_NOT_SUPPORTED)
        );
        let mut bad = NV2080_CTRL_GR_GET_INFO_V2_PARAMS::query(&[0x80]);
        assert_eq!(
            t.control(
                Handle(2),
                NV2080_CTRL_CMD_GR_GET_INFO_V2,
                bad.as_mut_bytes()
            ),
            Err(RmStatus::NV_ERR_INVALID_ARGUMENT)
        );
    }
}

#[test]
fn memory_mapping_translation_and_free() {
    let t = T::new(models::AD102);
    t.device();
    t.memory(Handle(20), NV01_MEMORY_LOCAL_USER, 10_000)
        .unwrap();
    t.memory(Handle(21), NV01_MEMORY_SYSTEM, 4096).unwrap();
    assert_eq!(
        t.memory(Handle(22), NV01_MEMORY_LOCAL_USER, 1 << 50),
        Err(RmStatus::NV_ERR_NO_MEMORY)
    );
    assert_eq!(
        t.memory(Handle(22), NV01_MEMORY_LOCAL_USER, 0),
        Err(RmStatus::NV_ERR_INVALID_ARGUMENT)
    );
    let mut v = NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS {
        offset: 0x10_0000_0000,
        limit: 0x10_ffff_ffff,
        hVASpace: 3,
        _pad0: 0,
    };
    t.alloc(Handle(1), Handle(30), NV01_MEMORY_VIRTUAL, v.as_mut_bytes())
        .unwrap();
    let mut rm = t.rm.lock().unwrap();
    let va = rm
        .map_memory_dma(C, Handle(30), Handle(20), 0, 0, 0, 0)
        .unwrap();
    assert!((0x10_0000_0000..0x11_0000_0000).contains(&va));
    let va2 = rm
        .map_memory_dma(C, Handle(30), Handle(21), 0, 0, 0, 0)
        .unwrap();
    assert_ne!(va, va2);
    // Fixed offsets that collide are refused.
    assert_eq!(
        rm.map_memory_dma(
            C,
            Handle(30),
            Handle(21),
            0,
            4096,
            NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE,
            va
        ),
        Err(RmStatus::NV_ERR_STATE_IN_USE)
    );
    let space = rm.address_space(C, Handle(3)).unwrap();
    let cpu = rm.cpu_map(C, Handle(20)).unwrap();
    drop(rm);
    cpu.write(100, &[1, 2, 3, 4]).unwrap();
    let mut got = [0u8; 4];
    t.gpu
        .with_core(|core| {
            crate::gpu_mem::gpu_read(
                core,
                &*space,
                va + 100,
                &mut got,
                crate::gpu_mem::Access::Read,
            )
        })
        .unwrap();
    assert_eq!(got, [1, 2, 3, 4]);
    // Freeing the memory unmaps it: the same VA now faults.
    t.free(Handle(20)).unwrap();
    let r = t.gpu.with_core(|core| {
        crate::gpu_mem::gpu_read(
            core,
            &*space,
            va + 100,
            &mut got,
            crate::gpu_mem::Access::Read,
        )
    });
    assert!(r.is_err());
    assert!(t.rm.lock().unwrap().vram_used() == 0);
}

#[test]
fn channels_check_their_ring_userd_and_notifier_and_die_with_their_group() {
    let t = T::new(models::GH100);
    t.device();
    t.memory(Handle(20), NV01_MEMORY_SYSTEM, 0x2000).unwrap();
    t.memory(Handle(21), NV01_MEMORY_SYSTEM, 0x1000).unwrap();
    let va =
        t.rm.lock()
            .unwrap()
            .map_memory_dma(C, Handle(3), Handle(20), 0, 0, 0, 0)
            .unwrap();
    let mut g = NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS {
        hVASpace: 3,
        engineType: NV2080_ENGINE_TYPE_GRAPHICS,
        ..Default::default()
    };
    t.alloc(
        Handle(1),
        Handle(5),
        KEPLER_CHANNEL_GROUP_A,
        g.as_mut_bytes(),
    )
    .unwrap();
    let mut cs = NV_CTXSHARE_ALLOCATION_PARAMETERS {
        hVASpace: 3,
        ..Default::default()
    };
    t.alloc(
        Handle(5),
        Handle(6),
        FERMI_CONTEXT_SHARE_A,
        cs.as_mut_bytes(),
    )
    .unwrap();
    let params = |entries: u32, gp: u64, userd_off: u64, notifier: u32| {
        let mut p = NV_CHANNEL_ALLOC_PARAMS {
            gpFifoOffset: gp,
            gpFifoEntries: entries,
            hContextShare: 6,
            hObjectError: notifier,
            ..Default::default()
        };
        p.hUserdMemory[0] = 20;
        p.userdOffset[0] = userd_off;
        p
    };
    for (p, want) in [
        (params(6, va, 0x1000, 0), RmStatus::NV_ERR_INVALID_ARGUMENT),
        (
            params(8, 0x7000_0000, 0x1000, 0),
            RmStatus::NV_ERR_INVALID_OFFSET,
        ),
        (params(8, va, 0x1f00, 0), RmStatus::NV_ERR_INVALID_OFFSET),
        (
            params(8, va, 0x1000, 20_000),
            RmStatus::NV_ERR_INVALID_OBJECT_HANDLE,
        ),
    ] {
        let mut p = p;
        assert_eq!(
            t.alloc(
                Handle(5),
                Handle(7),
                HOPPER_CHANNEL_GPFIFO_A,
                p.as_mut_bytes()
            ),
            Err(want)
        );
    }
    // Ampere's GPFIFO class is still offered on Hopper; Blackwell's is not.
    let mut p = params(8, va, 0x1000, 21);
    assert_eq!(
        t.alloc(
            Handle(5),
            Handle(7),
            BLACKWELL_CHANNEL_GPFIFO_A,
            p.as_mut_bytes()
        ),
        Err(RmStatus::NV_ERR_NOT_SUPPORTED)
    );
    t.alloc(
        Handle(5),
        Handle(7),
        HOPPER_CHANNEL_GPFIFO_A,
        p.as_mut_bytes(),
    )
    .unwrap();
    t.alloc(Handle(7), Handle(8), HOPPER_COMPUTE_A, &mut [])
        .unwrap();
    assert_eq!(
        t.alloc(Handle(7), Handle(9), AMPERE_COMPUTE_B, &mut []),
        Err(RmStatus::NV_ERR_NOT_SUPPORTED),
        "what the H200 answers"
    );
    assert_eq!(
        t.alloc(Handle(1), Handle(9), HOPPER_COMPUTE_A, &mut []),
        Err(RmStatus::NV_ERR_INVALID_OBJECT_PARENT)
    );
    let mut tok = NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS::default();
    t.control(
        Handle(7),
        NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
        tok.as_mut_bytes(),
    )
    .unwrap();
    let chid = t.rm.lock().unwrap().chid(C, Handle(7)).unwrap();
    assert_eq!(tok.workSubmitToken & 0xfff, chid);
    let fifo = t.rm.lock().unwrap().fifo().clone();
    assert!(crate::fifo::lock(&fifo).channel(chid).is_some());
    // Freeing the group frees the channel, its object and its subcontext.
    t.free(Handle(5)).unwrap();
    assert!(crate::fifo::lock(&fifo).channel(chid).is_none());
    assert_eq!(
        t.control(
            Handle(7),
            NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
            tok.as_mut_bytes()
        ),
        Err(RmStatus::NV_ERR_INVALID_OBJECT_HANDLE)
    );
}
