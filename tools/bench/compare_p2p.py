#!/usr/bin/env python3
"""Side-by-side table of cuda_p2p and `nvbare bench p2p --json` (schema: README.md, "Peer to peer").

usage: compare_p2p.py CUDA_JSON NVBARE_JSON

A missing or unreadable file shows as "-" in its column. Exit status: 0 when both files were read
and both report verified data, 1 otherwise.
"""

import sys

from benchjson import fmt, get, load, table

# (label, key path, unit)
ROWS = [
    ("A->B median", ("p2p_a_to_b", "median_gbps"), "GB/s"),
    ("A->B min", ("p2p_a_to_b", "min_gbps"), "GB/s"),
    ("A->B max", ("p2p_a_to_b", "max_gbps"), "GB/s"),
    ("B->A median", ("p2p_b_to_a", "median_gbps"), "GB/s"),
    ("B->A min", ("p2p_b_to_a", "min_gbps"), "GB/s"),
    ("B->A max", ("p2p_b_to_a", "max_gbps"), "GB/s"),
    ("A->B per copy", ("p2p_a_to_b", "median_s"), "s"),
    ("B->A per copy", ("p2p_b_to_a", "median_s"), "s"),
    ("peer enable", ("enable_s",), "s"),
]


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 1
    cuda, ours = load(argv[1], "compare_p2p.py"), load(argv[2], "compare_p2p.py")
    c, o = cuda or {}, ours or {}
    print(f"CUDA:   {', '.join(c.get('devices', ['?']))}  path {c.get('path', '?')}")
    print(f"nvbare: {', '.join(o.get('devices', ['?']))}  path {o.get('path_detail', o.get('path', '?'))}")
    for name, d in (("CUDA", c), ("nvbare", o)):
        if d and d.get("copy_bytes") is not None:
            print(f"{name}: {d['copy_bytes'] >> 20} MiB per copy, {d.get('reps', '?')} timed copies "
                  f"per direction, engine {d.get('engine', '?')}, data "
                  f"{'verified' if d.get('verified') else 'NOT verified'}")
    if c.get("copy_bytes") and o.get("copy_bytes") and c["copy_bytes"] != o["copy_bytes"]:
        print("WARNING: the two runs copied different sizes")
    print("ratio = nvbare/CUDA for bandwidths, CUDA/nvbare for times (> 1: nvbare is better)")
    print()
    rows = []
    for label, path, unit in ROWS:
        cv, ov = get(c, path), get(o, path)
        ratio = None
        if cv and ov and cv > 0 and ov > 0:
            ratio = ov / cv if unit == "GB/s" else cv / ov
        rows.append((f"{label} ({unit})", fmt(cv, 4), fmt(ov, 4), "-" if ratio is None else f"{ratio:.2f}x"))
    print("\n".join(table(("metric", "CUDA", "nvbare", "ratio"), rows)))
    checks = o.get("checks")
    if isinstance(checks, dict) and checks:
        print()
        print("nvbare checks:")
        for name, ok in checks.items():
            print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    ok = bool(cuda and ours and c.get("verified") and o.get("verified")
              and all(v is True for v in (checks or {}).values()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
