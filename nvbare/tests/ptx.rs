//! `Gpu::load_ptx` (feature `jit`) on the simulated GH100 with the stand-in nvJitLink libcuda's
//! tests use (tools/libcuda/tests/c/fake_nvjitlink.c, built by gcc) found through
//! `NVBARE_NVJITLINK`: the device's `-arch` passed, the cubin it returns loaded and add1 run;
//! PTX that does not compile is `Error::Jit` with the JIT's log. Its own process: the JIT is
//! found once per process.
#![cfg(feature = "jit")]

#[path = "../../tools/libcuda/tests/c/fake_nvjitlink.rs"]
mod fake_nvjitlink;

use std::path::Path;

use nvbare::{Error, LaunchConfig};

#[test]
fn ptx_compiles_through_nvjitlink_and_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // SAFETY: the only test of this process, before the library reads the environment.
    unsafe { fake_nvjitlink::install(&root) };
    let ptx = std::fs::read_to_string(root.join("tests/fixtures/cubins/src/kernels.ptx")).unwrap();
    let gpu = nvbare::open("sim:gh100").unwrap();
    let s = gpu.default_stream();
    let m = gpu.load_ptx(&ptx).unwrap();
    let add1 = m.function("add1").unwrap();
    let buf = s.htod_copy(&(0..256u32).collect::<Vec<_>>()).unwrap();
    s.launch_builder(&add1)
        .arg(&buf)
        .arg(&256u32)
        .launch(LaunchConfig::for_num_elems(256))
        .unwrap();
    let out = s.dtoh_copy(&buf).unwrap();
    assert!(out.iter().enumerate().all(|(i, &v)| v == i as u32 + 1));
    let e = gpu
        .load_ptx(".version 8.0\n.target sm_80\nsyntax error\n")
        .unwrap_err();
    assert!(matches!(e, Error::Jit(_)), "{e}");
    assert!(e.to_string().contains("syntax error in the input"), "{e}");
    gpu.close().unwrap();
}
