//! `tools/bench/compare.py`: the side-by-side table the hardware check prints.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

const CUDA: &str = r#"{"backend":"cuda","device":"NVIDIA H200","launch_sync_us":{"median":9.47,"p10":9.1,"p90":10.2,"n":10000},"back_to_back_us_per_launch":4.48,"launches":100000,"copy_bytes":1073741824,"h2d_gbps":54.5,"d2h_gbps":55.2,"d2d_gbps":3800.0,"copy4_h2d_us":7.76,"open_s":0.233,"driver_api":13000}"#;
const OURS: &str = r#"{"backend":"nvbare","device":"nvidia:0","launch_sync_us":{"median":2.5,"p10":2.4,"p90":3.0,"n":10000},"back_to_back_us_per_launch":0.4,"launches":100000,"copy_bytes":1073741824,"h2d_gbps":55.0,"d2h_gbps":50.0,"d2d_gbps":3900.0,"copy4_h2d_us":null,"open_s":0.04}"#;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/compare.py")
}

/// The table row starting with `name`.
fn row_of(text: &str, name: &str) -> String {
    text.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} row in\n{text}"))
        .to_string()
}

fn python() -> Option<Command> {
    Command::new("python3")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| Command::new("python3"))
}

fn files(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("nvbare-bench-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, o) = (dir.join("cuda.json"), dir.join("nvbare.json"));
    std::fs::write(&c, CUDA).unwrap();
    std::fs::write(&o, OURS).unwrap();
    (c, o)
}

#[test]
fn table_has_ratios_and_targets() {
    let Some(mut py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let (c, o) = files("table");
    let out = py.arg(script()).arg(&c).arg(&o).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = |name: &str| row_of(&text, name);
    // 9.47 / 2.5 = 3.79x faster: 2.5 is under 0.35 x 9.47 = 3.31.
    let r = row("launch+sync median");
    assert!(
        r.contains("9.47")
            && r.contains("2.50")
            && r.contains("3.79x")
            && r.contains("<= 0.35x CUDA (3.31): met"),
        "{r}"
    );
    // Bandwidth ratio is nvbare / CUDA; 50 < 0.98 x 55.2 misses.
    let r = row("D2H");
    assert!(
        r.contains("0.91x") && r.contains(">= 0.98x CUDA (54.1): MISSED"),
        "{r}"
    );
    let r = row("H2D");
    assert!(r.contains("met"), "{r}");
    // Back-to-back's reference is CUDA's graph, which this baseline lacks: not counted.
    let r = row("back-to-back (us/launch)");
    assert!(r.contains("(no CUDA graph value)"), "{r}");
    // Not measured by nvbare: shown as "-".
    let r = row("4-byte H2D");
    assert!(r.contains("7.76") && r.contains(" - "), "{r}");
    assert!(text.contains("targets met: 4/5"), "{text}");
    assert!(!text.contains("--defer"), "no chained run given: {text}");
}

#[test]
fn a_chained_run_adds_its_back_to_back_row_without_counting_it() {
    let Some(mut py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let (c, o) = files("chained");
    std::fs::write(
        &c,
        CUDA.replace(
            "\"launches\":100000,",
            "\"launches\":100000,\"graph_us_per_kernel\":0.503,",
        ),
    )
    .unwrap();
    let ch = c.with_file_name("nvbare-chained.json");
    std::fs::write(
        &ch,
        OURS.replace(
            "\"back_to_back_us_per_launch\":0.4",
            "\"back_to_back_us_per_launch\":0.62",
        )
        .replace(
            "\"open_s\":0.04}",
            "\"open_s\":0.04,\"chained_back_to_back\":99604,\"deferred_submits\":255}",
        ),
    )
    .unwrap();
    let out = py
        .arg(script())
        .arg(&c)
        .arg(&o)
        .arg("--chained")
        .arg(&ch)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("back-to-back, --defer 255"))
        .unwrap_or_else(|| panic!("no chained row in\n{text}"));
    assert!(
        lines[at - 2].starts_with("back-to-back (us/launch)")
            && lines[at - 1].starts_with("  of which CPU")
            && lines[at + 1].starts_with("  of which CPU"),
        "{text}"
    );
    let r = lines[at];
    // 4.48 / 0.62 = 7.23x; over 1.05 x the CUDA graph's 0.503.
    assert!(
        r.contains("0.62")
            && r.contains("7.23x")
            && r.contains("MISSED")
            && r.contains("opt-in")
            && r.contains("99604 of 100000 chained"),
        "{r}"
    );
    assert!(text.contains("targets met: 5/6"), "not counted: {text}");
    assert!(r.contains("<= 1.05x CUDA graph (0.528): MISSED"), "{r}");
    // A missing chained file is an input error.
    let out = python()
        .unwrap()
        .arg(script())
        .arg(&c)
        .arg(&o)
        .arg("--chained")
        .arg(c.with_file_name("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn strict_mode_fails_on_a_missed_target_and_bad_input_is_reported() {
    let Some(mut py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let (c, o) = files("strict");
    let st = py
        .arg(script())
        .arg(&c)
        .arg(&o)
        .arg("--strict")
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(3));
    let bad = Command::new("python3")
        .arg(script())
        .arg(&c)
        .arg("/nonexistent/nvbare.json")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot read"));
}

#[test]
fn the_cuda_graph_row_and_automatic_deferral_are_shown_when_measured() {
    let Some(mut py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let (c, o) = files("graph");
    // Without the key (an older baseline), no graph row.
    let text = {
        let out = Command::new("python3")
            .arg(script())
            .arg(&c)
            .arg(&o)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(!text.contains("  CUDA graph (us/kernel)"), "{text}");
    std::fs::write(
        &c,
        CUDA.replace(
            "\"launches\":100000,",
            "\"launches\":100000,\"graph_us_per_kernel\":0.503,\"graph_kernels\":100000,",
        ),
    )
    .unwrap();
    std::fs::write(
        &o,
        OURS.replace(
            "\"open_s\":0.04}",
            "\"open_s\":0.04,\"chained_back_to_back\":99727,\"deferred_submits\":0}",
        ),
    )
    .unwrap();
    let out = py.arg(script()).arg(&c).arg(&o).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = |name: &str| row_of(&text, name);
    let r = row("  CUDA graph (us/kernel)");
    assert!(r.contains("0.503") && r.contains(" - "), "{r}");
    let r = row("back-to-back (us/launch)");
    assert!(
        r.contains("<= 1.05x CUDA graph (0.528): met")
            && r.contains("99727 of 100000 chained: automatic deferral"),
        "{r}"
    );
    // The graph row itself is a reference, not a target; back-to-back now counts: 5 of 6.
    assert!(text.contains("targets met: 5/6"), "{text}");
}

#[test]
fn a_run_without_automatic_deferral_says_so_on_its_back_to_back_row() {
    let Some(mut py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let (c, o) = files("no-auto");
    std::fs::write(
        &o,
        OURS.replace(
            "\"open_s\":0.04}",
            "\"open_s\":0.04,\"chained_back_to_back\":0,\"deferred_submits\":0,\
             \"auto_defer_active\":false}",
        ),
    )
    .unwrap();
    let out = py.arg(script()).arg(&c).arg(&o).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let r = row_of(&text, "back-to-back (us/launch)");
    assert!(
        r.contains("(automatic deferral off)") && !r.contains("chained"),
        "{r}"
    );
}
