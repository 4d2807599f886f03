#!/usr/bin/env python3
"""Side by side: the outcome of each test in two pytest junit files (NVIDIA's libcuda, ours).

usage: junit_compare.py NVIDIA.xml OURS.xml [--markdown]
Prints counts per outcome for each run, then every test whose outcome differs, and exits 0.
A test missing from one run (crashed worker, timeout of the whole run) is 'absent' there.
"""
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"junit_compare: cannot read {path}: {e}", file=sys.stderr)
        return {}
    out = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        state, why = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                state, why = "failed", (child.get("message") or "").splitlines()[0:1]
                why = why[0][:160] if why else ""
                break
            if child.tag == "skipped":
                state, why = "skipped", (child.get("message") or "")[:160]
        out[name] = (state, why)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    nv, ours = outcomes(args[0]), outcomes(args[1])
    for label, run in (("nvidia", nv), ("nvbare", ours)):
        counts = {}
        for state, _ in run.values():
            counts[state] = counts.get(state, 0) + 1
        print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" (total {len(run)})")
    names = sorted(set(nv) | set(ours))
    diff = [(n, nv.get(n, ("absent", "")), ours.get(n, ("absent", ""))) for n in names
            if nv.get(n, ("absent", ""))[0] != ours.get(n, ("absent", ""))[0]]
    print(f"differences: {len(diff)}")
    for n, a, b in diff:
        print(f"  {n}: nvidia {a[0]} / nvbare {b[0]}" + (f" -- {b[1] or a[1]}" if (b[1] or a[1]) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
