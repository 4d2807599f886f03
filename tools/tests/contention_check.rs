//! `tools/contention-check.sh` against a fake `nvbare` (no GPU here): pairs pass and fail by the
//! processes' exit codes, the failures' errors are shown, the exit status says whether any pair
//! failed, bad arguments are refused, and bench arguments after `--` reach both processes.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contention-check.sh")
}

/// A fake nvbare: records its arguments; the busy process (the one not asked for 1000 round
/// trips) stays up for half a second, so every start of the second process runs beside it, and
/// the busy process of the pair numbered `fail_at` exits 1 with a timeout message.
fn fake(dir: &Path, fail_at: u32) -> PathBuf {
    let bin = dir.join("nvbare");
    std::fs::write(
        &bin,
        format!(
            r#"#!/bin/sh
echo "$@" >> "{dir}/args"
case "$* " in
  *"--round-trips 1000 "*) ;;
  *)
    sleep 0.5
    n=$(cat "{dir}/busy" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "{dir}/busy"
    if [ "$n" = "{fail_at}" ]; then
      echo "error: synchronize: timed out after 3s waiting for the compute channel; timeline at 5 of 444" >&2
      exit 1
    fi
    echo "  doorbells rung again       7 (waits saw no progress), 5 with work unfetched (a lost doorbell, or another process on the GPU); the rest while long copies ran" ;;
esac
exit 0
"#,
            dir = dir.display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&bin).status().unwrap();
    bin
}

fn run(tag: &str, fail_at: u32, args: &[&str]) -> (Output, String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("nvbare-contention-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = fake(&dir, fail_at);
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .env("NVBARE", &bin)
        .env_remove("OUT")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text, dir)
}

#[test]
fn every_pair_passing_exits_zero_and_passes_bench_arguments_to_both() {
    let (out, text, dir) = run(
        "ok",
        0,
        &["--pairs", "3", "--delay", "0", "--", "--bar1-readback"],
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("3 of 3 pairs passed, 0 failed"), "{text}");
    assert!(
        text.contains("rang doorbells again 7 times, 5 with work unfetched"),
        "{text}"
    );
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    assert_eq!(args.lines().count(), 6, "two processes per pair:\n{args}");
    assert!(
        args.lines()
            .all(|l| l.contains("--bar1-readback") && l.contains("--device nvidia:0")),
        "{args}"
    );
}

#[test]
fn a_failed_pair_is_reported_with_its_error_and_fails_the_check() {
    let (out, text, _) = run("fail", 2, &["--pairs", "3", "--delay", "0"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  pair 2: busy process exit 1, second exit 0"),
        "{text}"
    );
    assert!(text.contains("timeline at 5 of 444"), "{text}");
    assert!(text.contains("2 of 3 pairs passed, 1 failed"), "{text}");
}

#[test]
fn starts_runs_the_second_process_that_often_beside_one_busy_process() {
    let (out, text, dir) = run(
        "starts",
        0,
        &["--pairs", "2", "--starts", "3", "--delay", "0"],
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("2 of 2 pairs passed, 0 failed; the second process started 6 times"),
        "{text}"
    );
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    let busy: Vec<_> = args
        .lines()
        .filter(|l| !l.contains("--round-trips 1000"))
        .collect();
    assert_eq!(busy.len(), 2, "one busy process per pair:\n{args}");
    // Two extra starts: 20000 more round trips each.
    assert!(
        busy.iter().all(|l| l.contains("--round-trips 190000")),
        "{args}"
    );
    assert_eq!(args.lines().count(), 8, "{args}");
}

#[test]
fn bad_arguments_are_refused() {
    for (args, msg) in [
        (&["--pairs", "0"][..], "at least 1"),
        (&["--pairs", "x"][..], "whole number"),
        (&["--delay", "soon"][..], "wants seconds"),
        (&["--starts", "0"][..], "at least 1"),
        (&["--starts", "many"][..], "whole number"),
        (&["--frobnicate"][..], "unknown argument"),
    ] {
        let (out, text, _) = run("bad", 0, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(msg), "{args:?}: {text}");
    }
}
