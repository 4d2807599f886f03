use super::*;

#[test]
fn percentiles_are_nearest_rank() {
    let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    let s = Spread::of(&mut v).unwrap();
    assert_eq!((s.median, s.p10, s.p90, s.n), (50.0, 10.0, 90.0, 100));
    let mut one = vec![3.5];
    let s = Spread::of(&mut one).unwrap();
    assert_eq!((s.median, s.p10, s.p90), (3.5, 3.5, 3.5));
    assert_eq!(Spread::of(&mut []), None);
}

fn sim_args() -> GpuBenchArgs {
    GpuBenchArgs {
        device: DeviceSpec::default(),
        json: true,
        round_trips: Some(50),
        launches: Some(200),
        launch_gap_ns: 0,
        copy_bytes: Some(1 << 20),
        small_copies: Some(20),
        timeout_ms: 2000,
        fence: FenceArg::Store2,
        defer: 0,
        no_chain: false,
        no_auto_defer: false,
        auto_min_batch: None,
        auto_batch_wait_us: None,
        copy_block: None,
        copy_ctas_per_sm: None,
        no_runtime: false,
        runtime_cubin: None,
        verify: true,
        no_write_ahead: false,
        no_early_prefetch: false,
        doorbell_retry_us: None,
        command_kib: None,
        streams: None,
    }
}

#[test]
fn bench_runs_on_the_simulator_and_prints_the_schema() {
    let mut out = Vec::new();
    run(&mut out, sim_args()).unwrap();
    let s = String::from_utf8(out).unwrap();
    for key in [
        "\"backend\":\"nvbare\"",
        "\"launch_sync_us\":{\"median\":",
        "\"launch_sync_add1_us\":{\"median\":",
        "\"launch_sync_changing_us\":{\"median\":",
        "\"launch_call_add1_us\":",
        "\"launch_call_changing_us\":",
        // Every timed round trip with changing arguments writes only those.
        "\"argument_only_round_trips\":12",
        "\"n\":50",
        "\"back_to_back_us_per_launch\":",
        "\"launches\":200",
        "\"copy_bytes\":1048576",
        "\"h2d_gbps\":",
        "\"d2h_gbps\":",
        "\"d2d_gbps\":",
        "\"copy4_h2d_us\":",
        "\"open_s\":",
        "\"launch_call_us\":",
        // Every timed round trip repeats the launch before it.
        "\"written_ahead_round_trips\":50,\"repeated_round_trips\":50,\
         \"chained_back_to_back\":0,\"flusher_batches\":0,\"pair_then_poll_us\":",
        "\"pair_total_us\":",
        "\"deferred_submits\":0,\"auto_defer_active\":",
        "\"auto_min_batch\":64,\"launch_gap_ns\":0,",
        // Every back-to-back launch: the first through the region the last wait before (of
        // the graph round trips, also `empty`) wrote ahead, the others behind a running grid.
        "\"prefetched_back_to_back\":200,\"prefetched_round_trips\":50",
        "\"d2d_ce_gbps\":",
        "\"h2d_pageable_gbps\":",
        "\"d2h_pageable_gbps\":",
        "\"d2d_path\":\"kernel\"",
        "\"doorbell_retries\":0,\"doorbell_retries_unfetched\":0,",
        // Every timed graph launch follows a wait: one submission each.
        "\"graph_round_trips\":10,\"graph_written_round_trips\":10}",
        "\"graph_sync_us\":",
        "\"graph_one_by_one_sync_us\":",
    ] {
        assert!(s.contains(key), "{key} missing in {s}");
    }
    assert!(s.trim_end().ends_with('}') && !s.contains("NaN"), "{s}");
    assert!(!s.contains("null"), "{s}");
    // One line, one object that parses, with the consumers' keys (tools/bench).
    assert_eq!(s.lines().count(), 1, "{s}");
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(v["backend"], "nvbare");
    assert_eq!(v["launch_sync_us"]["n"], 50);
    for key in ["median", "p10", "p90"] {
        assert!(v["launch_sync_us"][key].is_f64(), "{key} in {s}");
    }
    assert_eq!(v["copy_bytes"], 1_048_576);
    assert_eq!(v["d2d_path"], "kernel");
}

#[test]
fn without_the_runtime_kernels_device_copies_run_on_the_copy_engine() {
    let mut a = sim_args();
    a.no_runtime = true;
    a.verify = false;
    let mut out = Vec::new();
    run(&mut out, a).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(s.contains("\"d2d_path\":\"copy engine\""), "{s}");
}

#[test]
fn automatic_deferral_is_reported_on_only_with_a_flusher_thread() {
    let output = |json: bool, no_auto_defer: bool, defer: u32| {
        let mut a = sim_args();
        a.json = json;
        a.no_auto_defer = no_auto_defer;
        a.defer = defer;
        a.verify = false;
        let mut out = Vec::new();
        run(&mut out, a).unwrap();
        String::from_utf8(out).unwrap()
    };
    // The CLI starts the flusher only where the process may use a second CPU.
    let with_thread = nvbare_pci_host::flusher::can_run_beside_the_program();
    for (no_auto_defer, defer, active) in
        [(false, 0, with_thread), (true, 0, false), (false, 4, false)]
    {
        let s = output(true, no_auto_defer, defer);
        assert!(
            s.contains(&format!("\"auto_defer_active\":{active},")),
            "no_auto_defer {no_auto_defer}, defer {defer}: {s}"
        );
    }
    let s = output(false, true, 0);
    assert!(s.contains("automatic deferral         off"), "{s}");
}

#[test]
fn the_launch_gap_and_the_batch_options_are_recorded() {
    let mut args = sim_args();
    args.launch_gap_ns = 2000;
    args.auto_min_batch = Some(8);
    args.auto_batch_wait_us = Some(5);
    let opts = args.device_options().unwrap();
    assert_eq!(opts.tuning.auto_defer_min_batch, 8);
    assert_eq!(opts.tuning.auto_defer_batch_wait, Duration::from_micros(5));
    let mut out = Vec::new();
    run(&mut out, args).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("\"auto_min_batch\":8,\"launch_gap_ns\":2000,"),
        "{s}"
    );
    // 200 launches with 2 µs of spinning after each: at least 2 µs per launch on the CPU.
    let submit = s
        .split("\"submit_us_per_launch\":")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!(submit >= 2.0, "{submit} µs per launch call with a 2 µs gap");
}

#[test]
fn command_kib_out_of_range_is_refused_with_the_range() {
    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: GpuBenchArgs,
    }
    use clap::Parser;
    let parse = |v: &str| Cli::try_parse_from(["bench", "--command-kib", v]);
    assert_eq!(parse("64").unwrap().bench.command_kib, Some(64));
    for bad in ["8", "2097152", "lots"] {
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains("--command-kib"), "{bad}: {e}");
    }
    let e = parse("8").unwrap_err().to_string();
    assert!(e.contains("16..=1048576"), "{e}");
}

#[test]
fn command_kib_sets_the_command_memory_and_a_small_one_still_runs() {
    let mut a = sim_args();
    assert_eq!(
        a.device_options().unwrap().command_bytes,
        DeviceOptions::default().command_bytes
    );
    // 16 KiB holds a handful of launches: the bench wraps it many times.
    a.command_kib = Some(16);
    assert_eq!(a.device_options().unwrap().command_bytes, 16 << 10);
    let mut out = Vec::new();
    run(&mut out, a).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("\"launches\":200"));
}

#[test]
fn deferred_doorbells_chain_back_to_back_launches_unless_told_not_to() {
    for (no_chain, chained) in [(false, true), (true, false)] {
        let mut a = sim_args();
        a.defer = 16;
        a.no_chain = no_chain;
        a.verify = false;
        let o = a.device_options().unwrap().tuning;
        assert_eq!((o.deferred_submits, o.chain_launches), (16, !no_chain));
        let mut out = Vec::new();
        run(&mut out, a).unwrap();
        let s = String::from_utf8(out).unwrap();
        let n: u64 = s
            .split("\"chained_back_to_back\":")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no chained_back_to_back in {s}"));
        // 200 launches in batches of 17 (a head and 16 chained).
        if chained {
            assert!(n >= 180, "{n}: {s}");
        } else {
            assert_eq!(n, 0, "{s}");
        }
    }
}

#[test]
fn no_early_prefetch_fetches_every_back_to_back_qmd_after_its_wait() {
    let mut a = sim_args();
    assert!(a.device_options().unwrap().tuning.early_qmd_prefetch);
    a.no_early_prefetch = true;
    assert!(!a.device_options().unwrap().tuning.early_qmd_prefetch);
    let mut out = Vec::new();
    run(&mut out, a).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("\"prefetched_back_to_back\":0,\"prefetched_round_trips\":0"),
        "{s}"
    );
}

#[test]
fn no_write_ahead_writes_every_launch_in_full() {
    let mut a = sim_args();
    assert!(a.device_options().unwrap().tuning.write_ahead);
    a.no_write_ahead = true;
    assert!(!a.device_options().unwrap().tuning.write_ahead);
    let mut out = Vec::new();
    run(&mut out, a).unwrap();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("\"written_ahead_round_trips\":0,\"repeated_round_trips\":0"),
        "{s}"
    );
}
