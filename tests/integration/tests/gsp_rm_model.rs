//! Contract (C): the GSP-RM emulator carries RPCs to the full RM model. The device layer's
//! bring-up calls, in the r570 layouts GSP-RM 570.144 speaks, go through the real message
//! queue (`nvbare_core::gsp`) to `nvbare_sim::rm::RmModel`, and the objects they create are
//! the same ones a direct caller sees.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvbare_core::gsp::events::{NV_VGPU_MSG_EVENT_GSP_INIT_DONE, NoHandler};
use nvbare_core::gsp::msgq::{MsgQueue, SharedMemLayout};
use nvbare_core::gsp::registry;
use nvbare_core::gsp::rpc::{ClientConfig, GspConfig, GspRm, GspRpc};
use nvbare_core::gsp::sysinfo::GspSystemInfo;
use nvbare_core::hal::DmaAllocator;
use nvbare_core::rm::alloc::*;
use nvbare_core::rm::class::*;
use nvbare_core::rm::ctrl::*;
use nvbare_core::rm::{Rm, RmAbi, RmError, RmStatus};
use nvbare_sim::gsp::{EmuClock, EmulatorConfig, GspEmulator};
use nvbare_sim::host::SimDmaBuffer;
use nvbare_sim::models::{self, ChipModel};
use nvbare_sim::rm::{RmModel, SharedRm};
use nvbare_sim::{SimBar0, SimConfig, SimGpu};
use zerocopy::{FromZeros, IntoBytes};

type Gsp = GspRm<SimDmaBuffer, SimBar0, EmuClock, NoHandler>;

/// Boots the emulator over `RmModel` and opens a client through GSP RPCs.
fn boot(model: ChipModel) -> (Arc<SimGpu>, GspEmulator, Arc<Mutex<RmModel>>, Gsp) {
    let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
    let rm = RmModel::install(&gpu).expect("RM model");
    let layout = SharedMemLayout::default();
    let buf = gpu.dma().alloc_dma(layout.total_size()).unwrap();
    let msgq = MsgQueue::new(buf, layout).unwrap();
    let emu = GspEmulator::attach(
        &gpu,
        EmulatorConfig::new(msgq.init_arguments(), model),
        Box::new(SharedRm(rm.clone())),
    );
    let clock = EmuClock::new(&gpu, &emu);
    let cfg = GspConfig {
        abi: RmAbi::R570,
        reply_timeout: Duration::from_millis(50),
        send_timeout: Duration::from_millis(50),
        poll_interval: Duration::from_micros(100),
    };
    let mut rpc = GspRpc::new(msgq, gpu.bar0(), clock, NoHandler, cfg);
    let mut info = GspSystemInfo::new_zeroed();
    info.pciConfigMirrorBase = model.chipset.info().pci_config_mirror;
    info.pciConfigMirrorSize = 0x1000;
    info.PCIDeviceID = (model.device_id as u32) << 16 | 0x10de;
    info.maxUserVa = 0x7fff_ffff_f000;
    info.bIsPassthru = 1;
    rpc.set_system_info(&info).unwrap();
    let mut table = [0u8; 256];
    let n = registry::pack(registry::DEFAULT_REGISTRY, &mut table).unwrap();
    rpc.set_registry(&table[..n]).unwrap();
    gpu.with_core(|c| emu.start(c));
    rpc.wait_event(NV_VGPU_MSG_EVENT_GSP_INIT_DONE, Duration::from_secs(1))
        .unwrap();
    let gsp = match GspRm::open(rpc, ClientConfig::default()) {
        Ok(g) => g,
        Err(e) => panic!("client: {:?}", e.error),
    };
    (gpu, emu, rm, gsp)
}

fn status(r: Result<impl std::fmt::Debug, RmError>) -> RmStatus {
    match r {
        Err(RmError::Status { status, .. }) => status,
        r => panic!("expected an RM status, got {r:?}"),
    }
}

#[test]
fn bring_up_calls_reach_the_rm_model_through_gsp_rpcs() {
    for model in [models::AD102, models::GH100, models::GB202] {
        let (_gpu, emu, rm, mut gsp) = boot(model);
        let client = gsp.client();
        let chip = model.chipset.info();

        let mut bv = NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS::default();
        gsp.control(
            client,
            NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
            bv.as_mut_bytes(),
        )
        .unwrap();
        assert!(bv.driverVersionBuffer.starts_with(b"570.144\0"));

        let mut p0080 = NV0080_ALLOC_PARAMETERS {
            hClientShare: client.0,
            vaMode: NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES,
            ..Default::default()
        };
        let device = gsp
            .alloc(client, NV01_DEVICE_0, p0080.as_mut_bytes())
            .unwrap();
        let mut p2080 = NV2080_ALLOC_PARAMETERS { subDeviceId: 0 };
        let subdevice = gsp
            .alloc(device, NV20_SUBDEVICE_0, p2080.as_mut_bytes())
            .unwrap();

        // The r570 class list (100 entries, 404 bytes) with the chip's classes.
        let mut cl = ClassListV2::new(RmAbi::R570);
        assert_eq!(cl.as_mut_bytes().len(), 404);
        gsp.control(
            device,
            NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
            cl.as_mut_bytes(),
        )
        .unwrap();
        for c in [
            chip.classes.compute,
            chip.classes.gpfifo,
            chip.classes.copy,
            chip.classes.usermode,
        ] {
            assert!(cl.classes().contains(&c), "{c:#x} on {}", chip.name);
        }
        // The r580 list (804 bytes) is the wrong size for this RM.
        let mut big = ClassListV2::new(RmAbi::R580);
        assert_eq!(
            status(gsp.control(
                device,
                NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2,
                big.as_mut_bytes()
            )),
            RmStatus::NV_ERR_INVALID_ARGUMENT
        );

        let mut a = NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS::default();
        gsp.control(
            subdevice,
            NV2080_CTRL_CMD_MC_GET_ARCH_INFO,
            a.as_mut_bytes(),
        )
        .unwrap();
        assert_eq!(
            nvbare_core::chip::Chipset::from_chip_id(a.chip_id()),
            Some(model.chipset)
        );

        let mut q = NV2080_CTRL_GR_GET_INFO_V2_PARAMS::query(&[gr_info::SM_VERSION]);
        gsp.control(subdevice, NV2080_CTRL_CMD_GR_GET_INFO_V2, q.as_mut_bytes())
            .unwrap();
        assert_eq!(
            gr_info::sm_from_version(q.value(gr_info::SM_VERSION).unwrap()),
            chip.sm as u32
        );

        // FERMI_VASPACE_A in the 48-byte r570 layout; the 56-byte r580 one is refused.
        let va = VaSpaceAlloc {
            index: NV_VASPACE_ALLOCATION_INDEX_GPU_NEW,
            flags: 0,
            va_size: 0,
            va_base: 0,
            big_page_size: 0,
            pasid: 0,
        };
        let mut p580 = va.encode(RmAbi::R580);
        assert_eq!(p580.as_mut_bytes().len(), 56);
        assert_eq!(
            status(gsp.alloc(device, FERMI_VASPACE_A, p580.as_mut_bytes())),
            RmStatus::NV_ERR_INVALID_PARAM_STRUCT
        );
        let mut p570 = va.encode(RmAbi::R570);
        assert_eq!(p570.as_mut_bytes().len(), 48);
        let vaspace = gsp
            .alloc(device, FERMI_VASPACE_A, p570.as_mut_bytes())
            .unwrap();

        let mut g = NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS {
            hVASpace: vaspace.0,
            engineType: NV2080_ENGINE_TYPE_GRAPHICS,
            ..Default::default()
        };
        let tsg = gsp
            .alloc(device, KEPLER_CHANNEL_GROUP_A, g.as_mut_bytes())
            .unwrap();
        let mut s = NV_CTXSHARE_ALLOCATION_PARAMETERS {
            hVASpace: vaspace.0,
            flags: NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC,
            subctxId: 0,
        };
        gsp.alloc(tsg, FERMI_CONTEXT_SHARE_A, s.as_mut_bytes())
            .unwrap();

        // A class of another generation is refused like the real RM refuses it.
        if model.chipset != nvbare_core::chip::Chipset::AD102 {
            let r = gsp.alloc(device, AMPERE_COMPUTE_B, &mut []);
            assert!(matches!(r, Err(RmError::Status { .. })), "{r:?}");
        }

        // The model holds the objects the RPCs created, under the GSP client.
        let live = rm.lock().unwrap().address_space(client, vaspace).is_ok();
        assert!(live, "the VA space is in the RM model");
        gsp.free(device).unwrap();
        assert!(rm.lock().unwrap().address_space(client, vaspace).is_err());
        assert_eq!(emu.errors(), Vec::<String>::new());
    }
}
