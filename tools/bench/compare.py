#!/usr/bin/env python3
"""Side-by-side table of a CUDA baseline run and an nvbare bench run (schema: README.md).

usage: compare.py CUDA_JSON NVBARE_JSON [--chained NVBARE_DEFER_JSON] [--strict]

--chained: an nvbare bench run with deferred doorbells (`--defer N`: back-to-back launches
chained QMD to QMD, docs/device.md "Chained launches"); its back-to-back row (and the CPU's
share of it) is shown under the default run's, against the same CUDA number and target, and
not counted in "targets met" (the mode is opt-in).

Exit status: 0 when both files were read (targets are informational), 2 on unreadable input,
3 with --strict when a target was missed.
"""

import sys

from benchjson import fmt, get, load, table as layout

# (label, key path, unit, lower_is_better, target)
# target: ("abs", limit) = nvbare <= limit (or >= for higher-is-better); ("cuda",) = at least
# as good as CUDA; ("ratio", f) = nvbare <= f x CUDA's same metric (>= for higher-is-better);
# ("ref", key path, f) = nvbare <= f x CUDA's value at that key path (not counted when the
# baseline lacks it); None = reported only. The bounds are issues 35 and 36's.
METRICS = [
    ("launch+sync median", ("launch_sync_us", "median"), "us", True, ("ratio", 0.35)),
    ("launch+sync p10", ("launch_sync_us", "p10"), "us", True, None),
    ("launch+sync p90", ("launch_sync_us", "p90"), "us", True, None),
    # nvbare only: add1 round trips, the same arguments, then arguments that change each time.
    ("  add1, same arguments", ("launch_sync_add1_us", "median"), "us", True, None),
    ("  add1, arguments change", ("launch_sync_changing_us", "median"), "us", True, None),
    ("back-to-back", ("back_to_back_us_per_launch",), "us/launch", True,
     ("ref", ("graph_us_per_kernel",), 1.05)),
    ("  of which CPU", ("submit_us_per_launch",), "us/launch", True, None),
    # CUDA only: the same kernels through a CUDA graph, back-to-back's reference.
    ("  CUDA graph", ("graph_us_per_kernel",), "us/kernel", True, None),
    ("H2D 1 GiB pinned", ("h2d_gbps",), "GB/s", False, ("ratio", 0.98)),
    ("D2H 1 GiB pinned", ("d2h_gbps",), "GB/s", False, ("ratio", 0.98)),
    ("D2D 1 GiB", ("d2d_gbps",), "GB/s", False, ("cuda",)),
    ("4-byte H2D", ("copy4_h2d_us",), "us", True, None),
    ("device open", ("open_s",), "s", True, ("abs", 0.05)),
]


def speedup(cuda, ours, lower_is_better):
    """How many times better nvbare is (>1 = nvbare better), or None."""
    if cuda is None or ours is None or cuda <= 0 or ours <= 0:
        return None
    return cuda / ours if lower_is_better else ours / cuda


def target_status(cuda, ours, lower_is_better, target, ref=None):
    if target is None:
        return "", None
    if ours is None:
        return "not measured", False
    if target[0] in ("ratio", "ref"):
        base, factor = (cuda, target[1]) if target[0] == "ratio" else (ref, target[2])
        what = "CUDA" if target[0] == "ratio" else "CUDA graph"
        text = ("<= " if lower_is_better else ">= ") + f"{factor:g}x {what}"
        if base is None:
            return f"{text} (no {what} value)", None
        limit = factor * base
        ok = ours <= limit if lower_is_better else ours >= limit
        return f"{text} ({limit:.3g}): {'met' if ok else 'MISSED'}", ok
    if target[0] == "abs":
        limit = target[1]
        ok = ours <= limit if lower_is_better else ours >= limit
        text = ("<= " if lower_is_better else ">= ") + f"{limit:g}"
    else:
        if cuda is None:
            return ">= CUDA (no CUDA value)", None
        ok = ours <= cuda if lower_is_better else ours >= cuda
        text = ">= CUDA" if not lower_is_better else "<= CUDA"
    return f"{text}: {'met' if ok else 'MISSED'}", ok


def measure(metric, cuda, ours):
    """One metric of two runs: (CUDA's, nvbare's, speedup text, target status, target met)."""
    _, path, _, lower, target = metric
    c, o = get(cuda, path), get(ours, path)
    s = speedup(c, o, lower)
    ref = get(cuda, target[1]) if target is not None and target[0] == "ref" else None
    status, ok = target_status(c, o, lower, target, ref)
    return fmt(c), fmt(o), "-" if s is None else f"{s:.2f}x", status, ok


def table(cuda, ours, chained=None):
    rows = []
    results = []
    for metric in METRICS:
        label, path, unit, _, _ = metric
        if label == "  CUDA graph" and get(cuda, path) is None:
            continue  # a baseline built before it measured graphs
        c, o, s, status, ok = measure(metric, cuda, ours)
        if ok is not None:
            results.append(ok)
        if label == "back-to-back":
            b2b = metric
            n = ours.get("chained_back_to_back")
            if n and not ours.get("deferred_submits"):
                # The default run's launches held for the flusher and chained.
                status += f" ({n} of {ours.get('launches', '?')} chained: automatic deferral)"
            elif ours.get("auto_defer_active") is False and not ours.get("deferred_submits"):
                # No flusher thread (one CPU for the process) or --no-auto-defer.
                status += " (automatic deferral off)"
        rows.append((f"{label} ({unit})", c, o, s, status))
        if label == "  of which CPU" and chained is not None:
            # Under the default run's pair of rows, the chained run's own pair.
            rows.append(chained_row(b2b, cuda, chained))
            c, o, s, _, _ = measure(metric, cuda, chained)
            rows.append((f"{label} ({unit})", c, o, s, ""))
    head = ("metric", "CUDA", "nvbare", "nvbare speedup", "target")
    lines = layout(head, rows, left=(0, 4))
    return lines, results


def chained_row(metric, cuda, chained):
    """The back-to-back row of the deferred (chained) run, not counted toward the targets."""
    label, _, unit, _, _ = metric
    c, o, s, status, _ = measure(metric, cuda, chained)
    defer = chained.get("deferred_submits", "N")
    n = chained.get("chained_back_to_back")
    of = f"{n} of {chained.get('launches', '?')} chained" if n is not None else "chained"
    return (f"{label}, --defer {defer} ({unit})", c, o, s, f"{status} (opt-in; {of})")


def main(argv):
    rest = argv[1:]
    chained_path = None
    if "--chained" in rest:
        i = rest.index("--chained")
        if i + 1 >= len(rest):
            print(__doc__.strip(), file=sys.stderr)
            return 2
        chained_path = rest[i + 1]
        rest = rest[:i] + rest[i + 2 :]
    args = [a for a in rest if not a.startswith("--")]
    strict = "--strict" in rest
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    docs = [load(path, "compare.py") for path in args]
    if any(d is None for d in docs):
        return 2
    cuda, ours = docs
    chained = None
    if chained_path is not None:
        chained = load(chained_path, "compare.py")
        if chained is None:
            return 2
    print(f"CUDA:   {cuda.get('device', '?')} ({cuda.get('backend', '?')})")
    print(f"nvbare: {ours.get('device', '?')} ({ours.get('backend', '?')})")
    print("speedup > 1 means nvbare is better (times: CUDA/nvbare; bandwidths: nvbare/CUDA)")
    print()
    lines, results = table(cuda, ours, chained)
    print("\n".join(lines))
    met = sum(1 for r in results if r)
    print()
    print(f"targets met: {met}/{len(results)}")
    if strict and met != len(results):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
