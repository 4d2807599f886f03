//! `nvbare cuda env` as a user runs it: the link directory it makes, the line it prints, the
//! JSON, and what it says when the library is not built.
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::{Command, Output};

fn nvbare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .args(args)
        .env_remove("NVBARE_LOG")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// A target directory with a stand-in `release/libcuda.so`.
fn fake_target(name: &str) -> std::path::PathBuf {
    let t = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir_all(t.join("release")).unwrap();
    std::fs::write(t.join("release/libcuda.so"), b"not really a library").unwrap();
    t
}

#[test]
fn env_links_the_library_and_prints_the_line() {
    let t = fake_target("cuda-env");
    let lib = t.join("release/libcuda.so");
    let links = t.join("links");
    let args = [
        "cuda",
        "env",
        "--target-dir",
        t.to_str().unwrap(),
        "--dir",
        links.to_str().unwrap(),
    ];
    for _ in 0..2 {
        // Twice: the links already there are kept.
        let o = nvbare(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        let line = format!(
            "export LD_LIBRARY_PATH={}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
            links.display()
        );
        assert!(out.lines().any(|l| l == line), "{out}");
        assert!(out.contains("NVBARE_DEVICE"), "{out}");
        for name in ["libcuda.so.1", "libcuda.so"] {
            assert_eq!(std::fs::read_link(links.join(name)).unwrap(), lib, "{name}");
        }
    }
    // The default directory is beside the library; --device prints its export; --json.
    let o = nvbare(&[
        "cuda",
        "env",
        "--target-dir",
        t.to_str().unwrap(),
        "--device",
        "sim:gh100",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let dir = t.join("release/nvbare-cuda");
    assert_eq!(v["dir"], dir.to_str().unwrap());
    assert_eq!(v["library"], lib.to_str().unwrap());
    assert_eq!(v["nvbare_device"], "export NVBARE_DEVICE=sim:gh100");
    assert!(
        v["ld_library_path"]
            .as_str()
            .unwrap()
            .contains(dir.to_str().unwrap())
    );
    assert_eq!(std::fs::read_link(dir.join("libcuda.so.1")).unwrap(), lib);
}

#[test]
fn env_without_the_library_says_how_to_build_it() {
    let t = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda-env-empty");
    std::fs::create_dir_all(&t).unwrap();
    let o = nvbare(&["cuda", "env", "--target-dir", t.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cargo build --release -p nvbare-libcuda"),
        "{err}"
    );
    // A file in the way of a link is not replaced.
    let t = fake_target("cuda-env-file");
    let links = t.join("links");
    std::fs::create_dir_all(&links).unwrap();
    std::fs::write(links.join("libcuda.so.1"), b"mine").unwrap();
    let o = nvbare(&[
        "cuda",
        "env",
        "--target-dir",
        t.to_str().unwrap(),
        "--dir",
        links.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a link"), "{err}");
    assert_eq!(std::fs::read(links.join("libcuda.so.1")).unwrap(), b"mine");
}
