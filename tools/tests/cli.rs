//! The `nvbare` binary as a user runs it.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nvbare_integration::sysfs_fixture::SysfsFixture;

fn nvbare(args: &[&str], sysfs: Option<&std::path::Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(args).env_remove("NVBARE_LOG");
    match sysfs {
        Some(p) => c.env("NVBARE_SYSFS_ROOT", p),
        None => c.env_remove("NVBARE_SYSFS_ROOT"),
    };
    c.output().expect("run nvbare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn info_identifies_every_simulated_chip() {
    for (dev, chip, compute, mmu, qmd) in [
        (
            "sim:gh100",
            "GH100 (Hopper)",
            "HOPPER_COMPUTE_A (0xcbc0)",
            "GMMU v3",
            "V04_00",
        ),
        (
            "sim:ad102",
            "AD102 (Ada)",
            "ADA_COMPUTE_A (0xc9c0)",
            "GMMU v2",
            "V03_00",
        ),
        (
            "sim:gb202",
            "GB202 (Blackwell)",
            "BLACKWELL_COMPUTE_B (0xcec0)",
            "GMMU v3",
            "V05_00",
        ),
    ] {
        let o = nvbare(&["info", "--device", dev], None);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{dev}: {}", text(&o.stderr));
        for want in [chip, compute, mmu, qmd] {
            assert!(out.contains(want), "{dev}: missing {want:?} in\n{out}");
        }
    }
}

#[test]
fn info_without_a_device_lists_the_visible_gpus() {
    let fx = SysfsFixture::several_gpus();
    let o = nvbare(&["info"], Some(fx.root()));
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(out.contains("GPU 0: NVIDIA H200 (0000:01:00.0)"), "{out}");
    assert!(
        out.contains("GPU 1: NVIDIA GeForce RTX 4090 (0000:41:00.0)  chip AD102"),
        "{out}"
    );
    assert!(out.contains("--device vfio:0000:41:00.0"), "{out}");
    assert!(!out.contains("audio"), "{out}");
}

#[test]
fn bad_device_strings_are_usage_errors() {
    for bad in ["gpu0", "sim:tu106", "nvidia:x", "vfio:zz"] {
        let o = nvbare(&["info", "--device", bad], None);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = text(&o.stderr);
        assert!(err.contains("valid forms"), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
}

#[test]
fn unavailable_backends_fail_cleanly() {
    for dev in ["nvidia:0", "vfio:0000:01:00.0"] {
        let o = nvbare(&["info", "--device", dev], None);
        assert!(!o.status.success(), "{dev}");
        let err = text(&o.stderr);
        assert!(err.starts_with("error: "), "{dev}: {err}");
        assert!(!err.contains("panicked"), "{dev}: {err}");
    }
}

#[test]
fn list_reads_the_fixture_tree() {
    let fx = SysfsFixture::several_gpus();
    let o = nvbare(&["list"], Some(fx.root()));
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The rows; the readiness lines under each GPU are indented.
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with("0000:01:00.0  10de:2335  NVIDIA H200"),
        "{out}"
    );
    assert!(
        lines[0].contains("driver=nvidia") && lines[0].contains("iommu_group=12"),
        "{out}"
    );
    assert!(lines[0].contains("BAR0=16M BAR1=256G BAR3=32M"), "{out}");
    assert!(
        lines[2].contains("audio") && lines[2].contains("iommu_group=30"),
        "{out}"
    );
    assert!(lines[3].contains("unknown NVIDIA GPU") && lines[3].contains("iommu_group=none"));
    assert!(!out.contains("8086"), "{out}");
}

#[test]
fn list_without_gpus_says_so() {
    let fx = SysfsFixture::new();
    let o = nvbare(&["list"], Some(fx.root()));
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("no NVIDIA PCI devices found"));
}

#[test]
fn list_reports_unreadable_sysfs() {
    let o = nvbare(&["list"], Some(std::path::Path::new("/nonexistent/nvbare")));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("is sysfs mounted"));

    let fx = SysfsFixture::several_gpus();
    fx.break_attribute("0000:01:00.0", "device");
    let o = nvbare(&["list"], Some(fx.root()));
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("0000:01:00.0/device"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `nvbare run` of the fixture cubin's `add1(p, n)` on the default simulated device (which
/// boots the real firmware: tools/fetch-firmware.sh).
const ADD1: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/cubins/kernels_sm90_cuda13.cubin"
);

/// Runs nvbare with the firmware cache, killing it if it takes longer than `limit` (the
/// hostile inputs below must fail fast, not be stopped by a timeout).
fn nvbare_within(args: &[&str], stdin: Option<&[u8]>, limit: Duration) -> Output {
    let dir = nvbare_gsp_firmware::testutil::require_firmware_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .args(args)
        .env_remove("NVBARE_LOG")
        .env("NVBARE_FIRMWARE_DIR", dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nvbare");
    if let Some(bytes) = stdin {
        // nvbare may stop reading (and close the pipe) before all of it is written.
        let _ = child.stdin.take().unwrap().write_all(bytes);
    }
    let t = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "nvbare {args:?} still ran after {limit:?}; stderr:\n{}",
                text(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Asserts a clean failure: `code`, one `error:` line containing every `want`, no panic.
fn assert_refused(o: &Output, code: i32, want: &[&str]) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    for w in want {
        assert!(err.contains(w), "missing {w:?} in\n{err}");
    }
    for bad in ["panicked", "abort", "memory allocation"] {
        assert!(!err.contains(bad), "{bad:?} in\n{err}");
    }
}

const FAST: Duration = Duration::from_secs(20);

#[test]
fn run_refuses_buffers_too_large_to_size_or_allocate() {
    // LEN * 4 overflows: refused while parsing (it used to panic with "capacity overflow").
    let o = nvbare_within(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x18446744073709551615",
            "--arg",
            "u32:1",
        ],
        None,
        FAST,
    );
    assert_refused(&o, 2, &["do not fit a 64-bit size", "ask for fewer"]);
    // 4 TiB: more than the simulated H200's 141 GiB; refused by the device, with no host
    // buffer of that size (it used to abort on the host allocation).
    let o = nvbare_within(
        &[
            "run",
            ADD1,
            "add1",
            "--arg",
            "buf:u32x1099511627776",
            "--arg",
            "u32:1",
        ],
        None,
        FAST,
    );
    assert_refused(
        &o,
        2,
        &[
            "error: --arg 0 buf:u32x1099511627776 needs 4398046511104 bytes (4096 GiB)",
            "ask for less",
        ],
    );
}

#[test]
fn run_checks_fill_values_as_it_checks_scalars() {
    for (arg, want) in [
        ("buf:u32x16=99999999999", "99999999999 does not fit u32"),
        ("buf:u8x16=1.5", "1.5 is not an integer for u8"),
        ("u32:4294967296", "4294967296 does not fit u32"),
    ] {
        let o = nvbare_within(
            &["run", ADD1, "add1", "--arg", arg, "--arg", "u32:1"],
            None,
            FAST,
        );
        assert_refused(&o, 2, &[want]);
    }
}

#[test]
fn endless_inputs_end_in_an_error_that_names_the_limit() {
    for (args, want) in [
        (
            &["run", "/dev/zero", "add1"][..],
            "/dev/zero holds more than 536870912 bytes; a cubin must be at most 536870912 bytes (512 MiB)",
        ),
        (
            &["decode", "pushbuf", "/dev/zero"][..],
            "a pushbuffer dump must be at most 67108864 bytes (64 MiB)",
        ),
        (
            &["decode", "qmd", "--chip", "gh100", "/dev/zero"][..],
            "/dev/zero holds more than 384 bytes; the QMD must be exactly 384 bytes",
        ),
        (
            &["fw", "inspect", "/dev/zero"][..],
            "a firmware file must be at most 268435456 bytes (256 MiB)",
        ),
        (
            &[
                "run",
                ADD1,
                "add1",
                "--arg",
                "buf:u32x16=@/dev/zero",
                "--arg",
                "u32:16",
            ][..],
            "/dev/zero holds more than 64 bytes; the buffer's file must be exactly 64 bytes",
        ),
    ] {
        let o = nvbare_within(args, None, FAST);
        assert_refused(&o, 2, &[want]);
    }
    // Standard input, the same way.
    let o = nvbare_within(
        &["decode", "pushbuf", "-"],
        Some(&vec![0u8; (64 << 20) + 4]),
        FAST,
    );
    assert_refused(&o, 2, &["standard input holds more than 67108864 bytes"]);
}

#[test]
fn run_fills_a_buffer_from_a_file_of_the_exact_size_and_saves_it() {
    let dir = std::env::temp_dir().join(format!("nvbare-cli-at-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let values: Vec<u32> = (100..116).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&input, &bytes).unwrap();
    let at = format!("buf:u32x16=@{}", input.display());
    let save = dir.to_str().unwrap();
    let args = [
        "run", ADD1, "add1", "--block", "16", "--arg", &at, "--arg", "u32:16",
    ];
    let o = nvbare_within(
        &[&args[..], &["--save", save, "--print", "3"]].concat(),
        None,
        FAST,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("arg 0 buf:u32x16 = [101, 102, 103, ... (13 more)]"),
        "{out}"
    );
    let saved = std::fs::read(dir.join("arg0.bin")).unwrap();
    let want: Vec<u8> = values.iter().flat_map(|v| (v + 1).to_le_bytes()).collect();
    assert_eq!(saved, want);
    // The same bytes through standard input.
    let stdin_args = [
        "run",
        ADD1,
        "add1",
        "--block",
        "16",
        "--arg",
        "buf:u32x16=@-",
        "--arg",
        "u32:16",
    ];
    let o = nvbare_within(&stdin_args, Some(&bytes), FAST);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("= [101, 102, 103, 104,"),
        "{}",
        text(&o.stdout)
    );
    // One element short or long: refused, naming the file and both sizes.
    let short = format!("buf:u32x15=@{}", input.display());
    let o = nvbare_within(
        &["run", ADD1, "add1", "--arg", &short, "--arg", "u32:1"],
        None,
        FAST,
    );
    assert_refused(
        &o,
        2,
        &[
            &input.display().to_string(),
            "holds 64 bytes",
            "exactly 60 bytes",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
