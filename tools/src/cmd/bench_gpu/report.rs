//! `nvbare bench`'s report: the JSON object of `tools/bench/README.md` (through `serde_json`)
//! and the human-readable table.

use serde::Serialize;

use super::{GpuBench, Spread};
use crate::cmd::json::places4;

/// A [`Spread`] as the JSON carries it: µs with 4 decimals.
#[derive(Serialize)]
struct SpreadJson {
    #[serde(serialize_with = "places4")]
    median: f64,
    #[serde(serialize_with = "places4")]
    p10: f64,
    #[serde(serialize_with = "places4")]
    p90: f64,
    n: usize,
}

impl From<&Spread> for SpreadJson {
    fn from(s: &Spread) -> Self {
        SpreadJson {
            median: s.median,
            p10: s.p10,
            p90: s.p90,
            n: s.n,
        }
    }
}

/// The JSON object, keys in the order `nvbare bench --json` has always written them: the
/// shared schema (tools/bench/README.md) first, then nvbare's own keys.
#[derive(Serialize)]
struct GpuBenchJson<'a> {
    backend: &'static str,
    device: &'a str,
    launch_sync_us: SpreadJson,
    #[serde(serialize_with = "places4")]
    back_to_back_us_per_launch: f64,
    launches: u32,
    #[serde(serialize_with = "places4")]
    submit_us_per_launch: f64,
    copy_bytes: u64,
    #[serde(serialize_with = "places4")]
    h2d_gbps: f64,
    #[serde(serialize_with = "places4")]
    d2h_gbps: f64,
    #[serde(serialize_with = "places4")]
    d2d_gbps: f64,
    #[serde(serialize_with = "places4")]
    copy4_h2d_us: f64,
    #[serde(serialize_with = "places4")]
    open_s: f64,
    // Beyond the shared schema.
    #[serde(serialize_with = "places4")]
    launch_call_us: f64,
    doorbell_retries: u64,
    doorbell_retries_unfetched: u64,
    #[serde(serialize_with = "places4")]
    d2d_ce_gbps: f64,
    d2d_path: &'static str,
    launch_sync_add1_us: SpreadJson,
    launch_sync_changing_us: SpreadJson,
    #[serde(serialize_with = "places4")]
    launch_call_add1_us: f64,
    #[serde(serialize_with = "places4")]
    launch_call_changing_us: f64,
    argument_only_round_trips: u64,
    #[serde(serialize_with = "places4")]
    h2d_pageable_gbps: f64,
    #[serde(serialize_with = "places4")]
    d2h_pageable_gbps: f64,
    written_ahead_round_trips: u64,
    repeated_round_trips: u64,
    chained_back_to_back: u64,
    flusher_batches: u64,
    #[serde(serialize_with = "places4")]
    pair_then_poll_us: f64,
    #[serde(serialize_with = "places4")]
    pair_total_us: f64,
    deferred_submits: u32,
    auto_defer_active: bool,
    auto_min_batch: u32,
    launch_gap_ns: u32,
    prefetched_back_to_back: u64,
    prefetched_round_trips: u64,
    #[serde(serialize_with = "places4")]
    graph_sync_us: f64,
    #[serde(serialize_with = "places4")]
    graph_one_by_one_sync_us: f64,
    graph_round_trips: u32,
    graph_written_round_trips: u64,
}

impl GpuBench {
    fn json_object(&self) -> GpuBenchJson<'_> {
        GpuBenchJson {
            backend: "nvbare",
            device: &self.device,
            launch_sync_us: (&self.launch_sync).into(),
            back_to_back_us_per_launch: self.back_to_back_us,
            launches: self.launches,
            submit_us_per_launch: self.submit_us,
            copy_bytes: self.copy_bytes,
            h2d_gbps: self.h2d_gbps,
            d2h_gbps: self.d2h_gbps,
            d2d_gbps: self.d2d_gbps,
            copy4_h2d_us: self.copy4_h2d_us,
            open_s: self.open_s,
            launch_call_us: self.launch_call_us,
            doorbell_retries: self.stats.doorbell_retries,
            doorbell_retries_unfetched: self.stats.doorbell_retries_unfetched,
            d2d_ce_gbps: self.d2d_ce_gbps,
            d2d_path: if self.d2d_kernel {
                "kernel"
            } else {
                "copy engine"
            },
            launch_sync_add1_us: (&self.launch_sync_add1).into(),
            launch_sync_changing_us: (&self.launch_sync_changing).into(),
            launch_call_add1_us: self.launch_call_add1_us[0],
            launch_call_changing_us: self.launch_call_add1_us[1],
            argument_only_round_trips: self.argument_only_round_trips,
            h2d_pageable_gbps: self.h2d_pageable_gbps,
            d2h_pageable_gbps: self.d2h_pageable_gbps,
            written_ahead_round_trips: self.written_ahead_round_trips,
            repeated_round_trips: self.repeated_round_trips,
            chained_back_to_back: self.chained_back_to_back,
            flusher_batches: self.flusher_batches,
            pair_then_poll_us: self.pair_then_poll_us,
            pair_total_us: self.pair_total_us,
            deferred_submits: self.deferred_submits,
            auto_defer_active: self.auto_defer_active,
            auto_min_batch: self.auto_min_batch,
            launch_gap_ns: self.launch_gap_ns,
            prefetched_back_to_back: self.prefetched_back_to_back,
            prefetched_round_trips: self.prefetched_round_trips,
            graph_sync_us: self.graph_sync_us[0],
            graph_one_by_one_sync_us: self.graph_sync_us[1],
            graph_round_trips: self.graph_round_trips,
            graph_written_round_trips: self.graph_written_round_trips,
        }
    }

    /// The JSON object of `tools/bench/README.md`, on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.json_object()).expect("the bench report serializes")
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let l = &self.launch_sync;
        let mut s = String::new();
        s.push_str(&format!("nvbare bench on {}\n", self.device));
        s.push_str(&format!(
            "  launch + sync round trip   median {:.2} µs  (p10 {:.2}, p90 {:.2}, n {})\n",
            l.median, l.p10, l.p90, l.n
        ));
        for (what, c, call) in [
            (
                "add1, same arguments",
                &self.launch_sync_add1,
                self.launch_call_add1_us[0],
            ),
            (
                "add1, arguments change",
                &self.launch_sync_changing,
                self.launch_call_add1_us[1],
            ),
        ] {
            s.push_str(&format!(
                "    {what:<22} median {:.2} µs  (p10 {:.2}, p90 {:.2}, n {}; launch call {:.2})\n",
                c.median, c.p10, c.p90, c.n, call
            ));
        }
        s.push_str(&format!(
            "  graph of {} launches + sync {:.2} µs written once, {:.2} launched one by one \
             (medians of {}; {} as one submission)\n",
            super::GRAPH_LAUNCHES,
            self.graph_sync_us[0],
            self.graph_sync_us[1],
            self.graph_round_trips,
            self.graph_written_round_trips
        ));
        let gap = if self.launch_gap_ns > 0 {
            format!("; {} ns of CPU work after each", self.launch_gap_ns)
        } else {
            String::new()
        };
        s.push_str(&format!(
            "  back-to-back launches      {:.3} µs/launch ({} launches; CPU {:.3} µs/launch{gap})\n",
            self.back_to_back_us, self.launches, self.submit_us
        ));
        if !self.auto_defer_active && self.deferred_submits == 0 {
            s.push_str(
                "  automatic deferral         off (--no-auto-defer, or no flusher thread: the \
                 process may use one CPU only)\n",
            );
        }
        s.push_str(&format!(
            "  H2D / D2H / D2D            {:.1} / {:.1} / {:.1} GB/s ({} bytes, pinned host)\n",
            self.h2d_gbps, self.d2h_gbps, self.d2d_gbps, self.copy_bytes
        ));
        s.push_str(&format!(
            "  H2D / D2H pageable         {:.1} / {:.1} GB/s (a Vec, through staging)\n",
            self.h2d_pageable_gbps, self.d2h_pageable_gbps
        ));
        s.push_str(&format!(
            "  D2D path                   {} (copy engine alone: {:.1} GB/s)\n",
            if self.d2d_kernel {
                "copy kernel"
            } else {
                "copy engine"
            },
            self.d2d_ce_gbps
        ));
        s.push_str(&format!(
            "  launch call (CPU)          {:.2} µs median in the round-trip loop\n",
            self.launch_call_us
        ));
        if self.argument_only_round_trips > 0 {
            s.push_str(&format!(
                "  arguments only             {} of the {} add1 round trips with changing \
                 arguments wrote only those\n",
                self.argument_only_round_trips, self.launch_sync_changing.n
            ));
        }
        if self.written_ahead_round_trips > 0 {
            s.push_str(&format!(
                "  written ahead              {} of the {} timed round trips' launches ({} \
                 repeated the call before)\n",
                self.written_ahead_round_trips, self.launch_sync.n, self.repeated_round_trips
            ));
        }
        if self.prefetched_back_to_back + self.prefetched_round_trips > 0 {
            s.push_str(&format!(
                "  QMD prefetched early       {} of the {} timed round trips (by the wait \
                 before), {} of the {} back-to-back launches\n",
                self.prefetched_round_trips,
                self.launch_sync.n,
                self.prefetched_back_to_back,
                self.launches
            ));
        }
        s.push_str(&format!(
            "  two launches, then polled  {:.2} us until both ran (median; no wait; {:.2} from \
             the first launch call)\n",
            self.pair_then_poll_us, self.pair_total_us
        ));
        if self.chained_back_to_back > 0 {
            s.push_str(&format!(
                "  chained launches           {} of the {} back-to-back launches (scheduled by \
                 the QMD before; {})\n",
                self.chained_back_to_back,
                self.launches,
                if self.deferred_submits > 0 {
                    "--defer".to_string()
                } else {
                    format!(
                        "held by automatic deferral, {} batches published by the flusher",
                        self.flusher_batches
                    )
                }
            ));
        }
        let r = self.stats;
        if r.doorbell_retries > 0 {
            s.push_str(&format!(
                "  doorbells rung again       {} (waits saw no progress), {} with work unfetched \
                 (a lost doorbell, or another process on the GPU); the rest while long copies \
                 ran\n",
                r.doorbell_retries, r.doorbell_retries_unfetched
            ));
        }
        s.push_str(&format!(
            "  4-byte H2D copy            {:.2} µs\n",
            self.copy4_h2d_us
        ));
        s.push_str(&format!(
            "  device open                {:.4} s\n",
            self.open_s
        ));
        s
    }
}
