//! The library from C: `libcuda.so` has the SONAME `libcuda.so.1`, and a C program written for
//! this project (its own declarations, tests/c/driver_api_check.c), compiled by gcc and linked
//! against it, runs the driver-API basics on `NVBARE_DEVICE=sim:gh100`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `libcuda.so` cargo built beside this test (target/<profile>/, one level above deps/).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = deps.parent().unwrap().join("libcuda.so");
    assert!(so.exists(), "{} was not built", so.display());
    so
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e} (is gcc/binutils installed?)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn soname_is_libcuda_so_1() {
    let d = run(Command::new("readelf").arg("-d").arg(library()));
    assert!(d.contains("Library soname: [libcuda.so.1]"), "{d}");
}

#[test]
fn a_c_program_runs_the_driver_api_basics() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libcuda-c");
    std::fs::create_dir_all(&dir).unwrap();
    // What a program finds at run time: libcuda.so.1, here a link to the built library.
    let link = dir.join("libcuda.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(library(), &link).unwrap();
    let exe = dir.join("driver_api_check");
    run(Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(manifest.join("tests/c/driver_api_check.c"))
        .arg("-L")
        .arg(library().parent().unwrap())
        .arg("-lcuda"));
    let cubin = manifest.join("../../tests/fixtures/cubins/kernels_sm90_cuda13.cubin");
    let out = run(Command::new(&exe)
        .arg(cubin)
        .env("LD_LIBRARY_PATH", &dir)
        .env("NVBARE_DEVICE", "sim:gh100"));
    assert!(out.contains("driver_api_check: ok"), "{out}");
    assert!(out.contains("sm_90"), "{out}");
    // The program loaded our library, not another libcuda.so.1.
    let ldd = run(Command::new("ldd").arg(&exe).env("LD_LIBRARY_PATH", &dir));
    assert!(ldd.contains(&*dir.to_string_lossy()), "{ldd}");
}
