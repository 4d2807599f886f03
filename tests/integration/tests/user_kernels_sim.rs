//! What `nvcc` output needs from a launch beyond the fixtures' hand-written PTX, on the
//! simulator: constant bank 3's address in the driver area (`nvcc -G` reads `__constant__` data
//! through it), the stack limit every kernel gets, and the refusal of thread-block clusters. The
//! same kernels run on the H200 in `tools/nvcc-check.sh`.
#![forbid(unsafe_code)]

use std::time::Duration;

use nvbare_core::channel::launch::{DriverArea, local_memory_per_thread};
use nvbare_core::channel::qmd::LaunchDesc;
use nvbare_core::device::{
    ConstBank, DEFAULT_STACK_SIZE, Device, DeviceError, DeviceOptions, Kernel, LaunchConfig,
    Program, ProgramError,
};
use nvbare_gsp_firmware::cubin::Cubin;
use nvbare_integration::{kernels_cubin as kernels, tuned};
use nvbare_sim::backend::SimBackend;
use nvbare_sim::models::{AD102, ChipModel, GB202, GH100};

/// A device whose waits write nothing ahead: the tests read a finished launch's constant bank
/// 0, which a wait writing the next launch ahead may reuse the command memory of.
fn open(model: ChipModel, stack_size: u32) -> Device<SimBackend> {
    let b = SimBackend::new(model, true).unwrap();
    let opts = tuned(
        DeviceOptions {
            timeout: Duration::from_millis(300),
            stack_size,
            ..Default::default()
        },
        |t| {
            t.write_ahead = false;
        },
    );
    Device::open(b, opts).unwrap()
}

/// A fixture cubin whose kernel table says something else about its kernels.
struct Tweaked {
    cubin: Cubin,
    tweak: fn(&mut Kernel),
}

impl Program for Tweaked {
    fn sm(&self) -> u32 {
        Program::sm(&self.cubin)
    }
    fn image_size(&self) -> u64 {
        Program::image_size(&self.cubin)
    }
    fn image(&self, base_va: u64) -> Result<Vec<u8>, ProgramError> {
        Program::image(&self.cubin, base_va)
    }
    fn kernels(&self) -> Vec<Kernel> {
        let mut ks = Program::kernels(&self.cubin);
        ks.iter_mut().for_each(self.tweak);
        ks
    }
}

fn tweaked(sm: u32, tweak: fn(&mut Kernel)) -> Tweaked {
    Tweaked {
        cubin: Cubin::parse(&kernels(sm, 13)).unwrap(),
        tweak,
    }
}

/// Launches `add1` over 64 elements and returns the launch as the simulated GPU decoded it
/// (or the launch's error).
fn launch_add1(dev: &Device<SimBackend>, p: &Tweaked) -> Result<LaunchDesc, DeviceError> {
    let m = dev.load_module(p)?;
    let f = m.function("add1")?;
    let buf = dev.alloc_zeros::<u32>(64)?;
    dev.launch(
        &f,
        LaunchConfig::for_num_elems(64),
        &[buf.arg(), 64u32.into()],
    )?;
    dev.synchronize()?;
    assert_eq!(dev.dtoh_copy(&buf)?, vec![1u32; 64], "add1 ran wrong");
    Ok(nvbare_integration::last_compute_launch(dev))
}

#[test]
fn constant_bank_3_address_is_in_the_driver_area() {
    for (model, sm) in [(AD102, 89), (GH100, 90), (GB202, 120)] {
        let dev = open(model, DEFAULT_STACK_SIZE);
        // add1 with a 64-byte constant bank 3 at image offset 0 (the module's first bytes).
        let p = tweaked(sm, |k| {
            k.const_banks.push(ConstBank {
                bank: 3,
                image_offset: 0,
                size: 64,
            })
        });
        let d = launch_add1(&dev, &p).unwrap();
        let (bank3, len) = d.cbufs[3].expect("bank 3 bound");
        assert_eq!(len, 64);
        let (cb0, _) = d.cbufs[0].unwrap();
        let slot = cb0 + DriverArea::for_sm(sm).const_bank3_offset() as u64;
        let got = dev.with_backend(|b| b.read_gpu(slot, 8)).unwrap().unwrap();
        assert_eq!(
            u64::from_le_bytes(got.try_into().unwrap()),
            bank3,
            "sm_{sm}"
        );
        // Without a bank 3 the slot holds 0.
        let d = launch_add1(&dev, &tweaked(sm, |_| {})).unwrap();
        let (cb0, _) = d.cbufs[0].unwrap();
        let slot = cb0 + DriverArea::for_sm(sm).const_bank3_offset() as u64;
        let got = dev.with_backend(|b| b.read_gpu(slot, 8)).unwrap().unwrap();
        assert_eq!(got, [0; 8], "sm_{sm}");
    }
}

#[test]
fn every_kernel_gets_the_stack_limit() {
    for stack in [DEFAULT_STACK_SIZE, 8192] {
        let dev = open(GH100, stack);
        // add1's compiler-reported need is below the limit: it gets the limit.
        let d = launch_add1(&dev, &tweaked(90, |_| {})).unwrap();
        assert_eq!(
            d.shader_local_memory_high_size,
            local_memory_per_thread(stack).unwrap()
        );
        // A need above the limit is kept.
        let d = launch_add1(
            &dev,
            &tweaked(90, |k| {
                k.local_size = 12_000;
            }),
        )
        .unwrap();
        assert_eq!(
            d.shader_local_memory_high_size,
            local_memory_per_thread(12_000.max(stack)).unwrap()
        );
        // A stack the compiler could not size: the frame plus the limit.
        let d = launch_add1(
            &dev,
            &tweaked(90, |k| {
                k.local_size = 0x100;
                k.stack_unknown = true;
            }),
        )
        .unwrap();
        assert_eq!(
            d.shader_local_memory_high_size,
            local_memory_per_thread(0x100 + stack).unwrap()
        );
    }
    // A limit no thread can have is refused when the device opens, naming the option.
    let b = SimBackend::new(GH100, true).unwrap();
    let opts = DeviceOptions {
        stack_size: u32::MAX,
        ..Default::default()
    };
    match Device::open(b, opts) {
        Err(DeviceError::BadRange(m)) => assert!(m.contains("stack_size"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn cluster_kernels_are_refused_and_a_cluster_of_one_is_not_a_cluster() {
    let dev = open(GH100, DEFAULT_STACK_SIZE);
    let p = tweaked(90, |k| k.cluster_dims = Some([2, 1, 1]));
    let m = dev.load_module(&p).unwrap();
    let f = m.function("add1").unwrap();
    let buf = dev.alloc_zeros::<u32>(64).unwrap();
    dev.synchronize().unwrap();
    let before = dev.timelines().unwrap();
    let e = dev
        .launch(
            &f,
            LaunchConfig::for_num_elems(64),
            &[buf.arg(), 64u32.into()],
        )
        .unwrap_err();
    match &e {
        DeviceError::Unsupported(m) => {
            assert!(m.contains("cluster") && m.contains("add1"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // Nothing was submitted, and the device is fine.
    assert_eq!(dev.timelines().unwrap(), before);
    assert_eq!(dev.dtoh_copy(&buf).unwrap(), vec![0u32; 64]);
    launch_add1(&dev, &tweaked(90, |k| k.cluster_dims = Some([1, 1, 1]))).unwrap();
}

#[test]
fn the_shared_memory_carveout_has_room_for_every_resident_block() {
    // add1 uses no shared memory: each block needs the 1 KiB the system reserves. The target
    // carveout holds one block more than the SM keeps resident (its thread and block
    // limits), the minimum one block; KiB / 4 + 1 as the QMD encodes them.
    let enc = |kib: u32| kib / 4 + 1;
    for (model, cases, largest) in [
        // 2048 threads and 32 blocks per SM.
        (GH100, [(64, 64), (128, 32), (256, 16), (1024, 8)], 228),
        // 1536 threads and 24 blocks per SM.
        (AD102, [(32, 32), (64, 32), (256, 8), (1024, 8)], 100),
        // 1536 threads and 32 blocks per SM.
        (GB202, [(32, 64), (64, 32), (128, 16), (1024, 8)], 100),
    ] {
        let dev = open(model, DEFAULT_STACK_SIZE);
        let m = dev.load_module(&tweaked(dev.info().sm, |_| {})).unwrap();
        let f = m.function("add1").unwrap();
        // Each block size twice, interleaved, launching one kernel of one module: the QMD
        // template built for one size must not serve the other.
        for (block, kib) in cases.into_iter().chain(cases) {
            let buf = dev.alloc_zeros::<u32>(64).unwrap();
            let cfg = LaunchConfig {
                grid: [64u32.div_ceil(block), 1, 1],
                block: [block, 1, 1],
                shared_mem_bytes: 0,
            };
            dev.launch(&f, cfg, &[buf.arg(), 64u32.into()]).unwrap();
            dev.synchronize().unwrap();
            assert_eq!(
                dev.dtoh_copy(&buf).unwrap(),
                vec![1u32; 64],
                "add1 ran wrong"
            );
            let d = nvbare_integration::last_compute_launch(&dev);
            assert_eq!(d.block, [block, 1, 1]);
            let c = d.sm_config;
            assert_eq!(
                (c.min, c.target, c.max),
                (enc(8), enc(kib), enc(largest)),
                "{} with {block}-thread blocks",
                model.board
            );
        }
    }
}
