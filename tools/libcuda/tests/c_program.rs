//! The library from C: `libcuda.so` has the SONAME `libcuda.so.1`, and a C program written for
//! this project (its own declarations, tests/c/driver_api_check.c), compiled by gcc and linked
//! against it, runs the driver-API basics on `NVBARE_DEVICE=sim:gh100`; a second one
//! (tests/c/capture_check.c) captures across streams.

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

/// Compiles `tests/c/NAME.c` against the built library and runs it on `sim:gh100` with the
/// fixture cubin; returns its output and the program's path.
fn compile_and_run(name: &str) -> (String, PathBuf, PathBuf) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("libcuda-c-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    // What a program finds at run time: libcuda.so.1, here a link to the built library.
    let link = dir.join("libcuda.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(library(), &link).unwrap();
    let exe = dir.join(name);
    run(Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(manifest.join(format!("tests/c/{name}.c")))
        .arg("-L")
        .arg(library().parent().unwrap())
        .arg("-lcuda"));
    let cubin = manifest.join("../../tests/fixtures/cubins/kernels_sm90_cuda13.cubin");
    let out = run(Command::new(&exe)
        .arg(cubin)
        .env("LD_LIBRARY_PATH", &dir)
        .env("NVBARE_DEVICE", "sim:gh100"));
    (out, exe, dir)
}

#[test]
fn a_c_program_runs_the_driver_api_basics() {
    let (out, exe, dir) = compile_and_run("driver_api_check");
    assert!(out.contains("driver_api_check: ok"), "{out}");
    assert!(out.contains("sm_90"), "{out}");
    // The program loaded our library, not another libcuda.so.1.
    let ldd = run(Command::new("ldd").arg(&exe).env("LD_LIBRARY_PATH", &dir));
    assert!(ldd.contains(&*dir.to_string_lossy()), "{ldd}");
}

/// Capture across streams from C: the fork/join graph runs, and each refused step answers as
/// the program expects (the same program is compared with NVIDIA's library by hw-check.sh).
#[test]
fn a_c_program_captures_across_streams() {
    let (out, _, _) = compile_and_run("capture_check");
    assert!(out.contains("capture_check: ok"), "{out}");
    assert!(out.contains("fork-join value: 6"), "{out}");
    assert!(!out.contains("differs"), "{out}");
}
