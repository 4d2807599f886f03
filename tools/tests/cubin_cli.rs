//! `nvbare cubin inspect`, `fw inspect` on a cubin, and `nvbare run`'s `bytes:` arguments,
//! parameter tables, `--dump-qmd` and `--json`, as a user runs them.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

const ADD1: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
);

fn nvbare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .args(args)
        .env_remove("NVBARE_LOG")
        .output()
        .expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// Runs `args`, which must succeed; returns standard output.
fn ok(args: &[&str]) -> String {
    let o = nvbare(args);
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// Runs `args`, which must fail with `code` and no panic; returns standard error.
fn refused(args: &[&str], code: i32) -> String {
    let o = nvbare(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvbare-cubin-cli-{}-{name}", std::process::id()))
}

#[test]
fn cubin_inspect_shows_add1_with_its_two_parameters() {
    let out = ok(&["cubin", "inspect", ADD1]);
    assert!(out.contains("cubin       sm_90, ELF ABI v8"), "{out}");
    assert!(out.contains("kernels     5"), "{out}");
    let add1 = out.split("kernel add1\n").nth(1).expect("add1 listed");
    let add1 = add1.split("\nkernel ").next().unwrap_or(add1);
    assert!(
        add1.starts_with(
            "  parameters  2 (12 bytes at constant bank 0 offset 0x210)\n    0  offset 0  8 bytes\n    1  offset 8  4 bytes\n"
        ),
        "{add1}"
    );
    for want in [
        "  registers   8",
        "  shared      0 bytes (static)",
        "  const banks 0: ",
    ] {
        assert!(add1.contains(want), "missing {want:?} in\n{add1}");
    }
    assert!(out.contains("relocations 1\n  R_CUDA_64"), "{out}");
}

#[test]
fn cubin_inspect_json_has_the_same_facts() {
    let human = ok(&["cubin", "inspect", ADD1]);
    let json = ok(&["cubin", "inspect", ADD1, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["sm"], 90);
    assert_eq!(v["arch"], "sm_90");
    let kernels = v["kernels"].as_array().expect("kernels");
    assert_eq!(human.matches("\nkernel ").count(), kernels.len(), "{human}");
    let add1 = kernels
        .iter()
        .find(|k| k["name"] == "add1")
        .expect("add1 in the JSON");
    let params: Vec<(u64, u64, u64)> = add1["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["ordinal"].as_u64().unwrap(),
                p["offset"].as_u64().unwrap(),
                p["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(params, [(0, 0, 8), (1, 8, 4)]);
    let regs = add1["registers"].as_u64().unwrap();
    let block = human
        .split("kernel add1\n")
        .nth(1)
        .expect("add1 in the text");
    let block = block.split("\nkernel ").next().unwrap_or(block);
    assert!(
        block.contains(&format!("  registers   {regs}\n")),
        "{block}"
    );
    assert_eq!(v["relocations"][0]["kind"], "R_CUDA_64");
}

#[test]
fn cubin_inspect_refuses_what_is_not_a_cubin() {
    let empty = temp("empty");
    std::fs::write(&empty, b"").unwrap();
    let random = temp("random");
    std::fs::write(&random, [0xde, 0xad, 0xbe, 0xef, 1, 2, 3]).unwrap();
    let host = env!("CARGO_BIN_EXE_nvbare");
    let dir = std::env::temp_dir();
    for (path, want) in [
        (host, "is an ELF file for x86-64"),
        (empty.to_str().unwrap(), "the file is empty"),
        (random.to_str().unwrap(), "it starts with de ad be ef"),
        (dir.to_str().unwrap(), "is a directory"),
        ("/nonexistent/k.cubin", "cannot read /nonexistent/k.cubin"),
    ] {
        let err = refused(&["cubin", "inspect", path], 2);
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(want), "{path}: missing {want:?} in {err}");
    }
    for p in [empty, random] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn fw_inspect_recognises_a_cubin() {
    let out = ok(&["fw", "inspect", ADD1]);
    assert_eq!(
        out.trim_end(),
        format!("this is a CUDA cubin (sm_90, 5 kernels): use `nvbare cubin inspect {ADD1}`")
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["fw", "inspect", ADD1, "--json"])).expect("valid JSON");
    assert_eq!(v["details"]["kind"], "cubin");
    assert_eq!(v["details"]["sm"], 90);
    assert_eq!(v["details"]["kernels"], 5);
    assert_eq!(v["sha256"].as_str().map(str::len), Some(64));
}

#[test]
fn run_passes_bytes_by_value() {
    // add1(u32 *p, u32 n) adds 1 to p[0..n]: n given as raw bytes, in hex and from a file.
    let out = ok(&[
        "run",
        ADD1,
        "add1",
        "--block",
        "16",
        "--arg",
        "buf:u32x8=iota",
        "--arg",
        "bytes:05000000",
    ]);
    assert!(
        out.contains("arg 0 buf:u32x8 = [1, 2, 3, 4, 5, 5, 6, 7]"),
        "{out}"
    );
    let f = temp("n.bin");
    std::fs::write(&f, 3u32.to_le_bytes()).unwrap();
    let at = format!("bytes:@{}", f.display());
    let out = ok(&[
        "run",
        ADD1,
        "add1",
        "--block",
        "16",
        "--arg",
        "buf:u32x8=iota",
        "--arg",
        &at,
    ]);
    std::fs::remove_file(&f).unwrap();
    assert!(out.contains("= [1, 2, 3, 3, 4, 5, 6, 7]"), "{out}");
}

#[test]
fn run_refuses_bad_bytes_and_shows_the_parameter_table() {
    let err = refused(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x8",
            "--arg",
            "bytes:050",
        ],
        2,
    );
    assert!(err.contains("3 hex digits"), "{err}");
    let err = refused(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x8",
            "--arg",
            "bytes:0x5z",
        ],
        2,
    );
    assert!(
        err.contains("'z' at position 1 is not a hex digit"),
        "{err}"
    );
    let table = "  0  offset 0  8 bytes\n  1  offset 8  4 bytes\n";
    let err = refused(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x8",
            "--arg",
            "u32:1",
            "--arg",
            "u32:2",
        ],
        2,
    );
    assert!(
        err.contains(&format!("takes 2 parameters, 3 were given:\n{table}")),
        "{err}"
    );
    // A struct of the wrong size: 8 bytes for the 4-byte n.
    let err = refused(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x8",
            "--arg",
            "bytes:0500000000000000",
        ],
        2,
    );
    assert!(
        err.contains(&format!(
            "parameter 1 of `add1` is 4 bytes, the argument (8 bytes) is 8:\n{table}"
        )),
        "{err}"
    );
    let err = refused(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x8",
            "--arg",
            "bytes:@/dev/zero",
        ],
        2,
    );
    assert!(
        err.contains("--arg 1: /dev/zero holds more than 32768 bytes"),
        "{err}"
    );
}

#[test]
fn dump_qmd_writes_what_decode_reads() {
    let qmd = temp("launch.qmd");
    let q = qmd.to_str().unwrap();
    let json = ok(&[
        "run",
        ADD1,
        "add1",
        "--grid",
        "3",
        "--block",
        "16",
        "--arg",
        "buf:u32x64=iota",
        "--arg",
        "u32:48",
        "--print",
        "64",
        "--dump-qmd",
        q,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["buffers"][0]["head"][0], 1);
    assert_eq!(v["buffers"][0]["head"][47], 48);
    assert_eq!(v["buffers"][0]["head"][48], 48);
    let dump = &v["dump"];
    assert_eq!(dump["qmd_version"], "V04_00");
    let decoded = ok(&["decode", "qmd", "--version", "v04", q]);
    assert!(
        decoded.contains("grid 3x1x1, block 16x1x1, 8 registers"),
        "{decoded}"
    );
    let pb = dump["pushbuf_file"].as_str().unwrap();
    assert_eq!(pb, format!("{q}.pushbuf"));
    let methods = ok(&["decode", "pushbuf", "--class", "1=cbc0", pb]);
    let qmd_va = dump["qmd_va"].as_u64().unwrap();
    assert!(
        methods.contains(&format!("SEND_PCAS_A = {:#010x}", qmd_va >> 8)),
        "{qmd_va:#x}: {methods}"
    );
    assert!(methods.contains("SEND_SIGNALING_PCAS2_B"), "{methods}");
    // The human output names the files and the commands.
    let out = ok(&[
        "run",
        ADD1,
        "add1",
        "--arg",
        "buf:u32x4",
        "--arg",
        "u32:4",
        "--dump-qmd",
        q,
    ]);
    assert!(
        out.contains(&format!(
            "QMD V04_00 written to {q} (nvbare decode qmd --version v04 {q})"
        )),
        "{out}"
    );
    for p in [qmd.clone(), PathBuf::from(pb)] {
        std::fs::remove_file(p).unwrap();
    }
}
