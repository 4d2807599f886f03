//! The cubin parser and the core's launch helpers together, on the fixture cubins: what the
//! device layer does for a launch, minus the GPU.

use std::path::PathBuf;

use nvbare_core::channel::launch::{
    self, DEFAULT_LOCAL_WINDOW, DEFAULT_SHARED_WINDOW, DriverArea, DriverAreaValues,
};
use nvbare_core::channel::qmd::{LaunchDesc, Qmd, QmdVersion};
use nvbare_core::chip::Chipset;
use nvbare_gsp_firmware::cubin::{Cubin, IMAGE_ALIGN};

fn parse(name: &str) -> Cubin {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/cubins")
        .join(name);
    Cubin::parse(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn driver_area_lies_below_every_parameter_base() {
    // The constant-bank-0 layout the launch helpers write must not overlap the parameters
    // ptxas placed (EIATTR_PARAM_CBANK), for every fixture and target.
    for set in ["kernels", "reloc", "attrs", "runtime"] {
        for sm in [80, 89, 90, 100, 120] {
            for cuda in [12, 13] {
                let c = parse(&format!("{set}_sm{sm}_cuda{cuda}.cubin"));
                let area = DriverArea::for_sm(c.sm);
                for k in &c.kernels {
                    assert!(k.param_base >= area.size(), "{set} sm_{sm} {}", k.name);
                    let size = launch::cbuf0_size(area, k.param_base, k.param_size).unwrap();
                    assert!(size >= k.cbank0_size, "{set} sm_{sm} {}", k.name);
                }
            }
        }
    }
}

#[test]
fn add1_launch_end_to_end() {
    for (chip, sm) in [
        (Chipset::AD102, 89),
        (Chipset::GH100, 90),
        (Chipset::GB202, 120),
    ] {
        let info = chip.info();
        let c = parse(&format!("kernels_sm{sm}_cuda13.cubin"));
        assert_eq!(c.sm, u32::from(info.sm));
        let k = c.kernel("add1").unwrap();

        // Image at a 256-aligned VA.
        let base = 0x20_0000_0000u64;
        assert_eq!(base % IMAGE_ALIGN, 0);
        let image = c.load_image(base).unwrap();
        assert_eq!(image.len() as u64, c.image_size());

        // Constant bank 0: driver area + (buf, n).
        let block = [128, 1, 1];
        let grid = [8, 1, 1];
        launch::validate_launch(block, grid, k.regcount, k.max_threads).unwrap();
        let area = DriverArea::for_sm(c.sm);
        let cb0_size = launch::cbuf0_size(area, k.param_base, k.param_size).unwrap();
        let mut cb0 = vec![0u8; cb0_size as usize];
        launch::write_driver_area(
            area,
            &mut cb0,
            &DriverAreaValues {
                block,
                grid,
                shared_window: DEFAULT_SHARED_WINDOW,
                local_window: DEFAULT_LOCAL_WINDOW,
                const_bank3: 0,
            },
        )
        .unwrap();
        let buf_va = 0x30_0000_0000u64;
        let args: [&[u8]; 2] = [&buf_va.to_le_bytes(), &1000u32.to_le_bytes()];
        for (p, a) in k.params.iter().zip(args) {
            assert_eq!(p.size as usize, a.len());
            launch::write_param(&mut cb0, k.param_base, k.param_size, p.offset, a).unwrap();
        }
        let at = (k.param_base + k.params[1].offset) as usize;
        assert_eq!(&cb0[at..at + 4], &1000u32.to_le_bytes());

        // Shared and local memory.
        let smem = launch::block_shared_memory(c.sm, k.shared_size, 0).unwrap();
        let sm_config = launch::sm_shared_config(c.sm, smem, block, 2048).unwrap();
        let local = launch::local_memory_per_thread(k.local_size).unwrap();

        // The QMD.
        let cb0_va = 0x40_0000_0000u64;
        let mut cbufs = [None; 8];
        cbufs[0] = Some((cb0_va, cb0_size));
        for b in &k.const_banks {
            cbufs[b.bank as usize] = Some((base + b.image_offset, b.size as u32));
        }
        let d = LaunchDesc {
            program_address: base + k.code_offset,
            program_size: k.code_size as u32,
            register_count: k.regcount,
            barrier_count: k.num_barriers,
            sass_version: c.sass_version(),
            shared_memory_size: smem,
            sm_config,
            shader_local_memory_high_size: local,
            block,
            grid,
            cbufs,
            release: [Some((0x50_0000_0000, 7)), None],
            ..LaunchDesc::default()
        };
        let v = info.qmd;
        let q = Qmd::build(v, &d).unwrap();
        assert_eq!(q.as_bytes().len(), v.size());
        let back = Qmd::from_bytes(v, q.as_bytes())
            .unwrap()
            .launch_desc()
            .unwrap();
        assert_eq!(back.program_address, base + k.code_offset);
        assert_eq!(back.grid, grid);
        assert_eq!(back.register_count, k.regcount);
        // Bank 4 (globals' addresses) is bound from the image.
        assert!(back.cbufs[4].is_some(), "{chip}");
        let expect_sass = match v {
            QmdVersion::V05_00 => 0xc0,
            QmdVersion::V04_00 => 0x90,
            _ => 0x89,
        };
        assert_eq!(q.get("SASS_VERSION").unwrap(), expect_sass);
    }
}
