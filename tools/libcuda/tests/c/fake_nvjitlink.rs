//! The stand-in nvJitLink (`fake_nvjitlink.c` beside this file) for the PTX tests of libcuda
//! (`tests/jit.rs`) and of the Rust library (`nvbare/tests/ptx.rs`): built by gcc and made the
//! JIT the library finds, answering with the GH100 fixture cubin for `-arch=sm_90`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the stand-in in the test's temporary directory (named after the test crate: the
/// directory is the workspace's) and points `NVBARE_NVJITLINK` at it, with the cubin it
/// returns and the `-arch` it expects. `root` is the repository's root.
///
/// # Safety
///
/// Sets environment variables: call it before any other thread of the process runs or reads
/// the environment (in a test binary of one test, before the library is first used).
pub unsafe fn install(root: &Path) {
    let so = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(concat!(
        "libfake_nvJitLink_",
        env!("CARGO_CRATE_NAME"),
        ".so"
    ));
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg(root.join("tools/libcuda/tests/c/fake_nvjitlink.c"))
        .output()
        .unwrap_or_else(|e| panic!("running gcc: {e} (is gcc installed?)"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: the caller's contract (no other thread runs or reads the environment).
    unsafe {
        std::env::set_var("NVBARE_NVJITLINK", &so);
        std::env::set_var(
            "FAKE_NVJITLINK_CUBIN",
            root.join("tests/fixtures/cubins/kernels_sm90_cuda13.cubin"),
        );
        std::env::set_var("FAKE_NVJITLINK_ARCH", "-arch=sm_90");
    }
}
