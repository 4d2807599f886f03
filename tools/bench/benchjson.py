"""What compare.py and compare_p2p.py share: reading the benchmark JSON files, picking numbers out
of them, formatting them and laying out the side-by-side table."""

import json
import sys


def get(d, path):
    """The number at key path `path` in `d`, or None when it is missing or not a number."""
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def fmt(v, small=3):
    """A table cell: "-" for None, otherwise 1, 2 or `small` decimals by magnitude; with
    small=4, values under 0.001 in scientific notation."""
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    if small == 3 or abs(v) >= 0.001:
        return f"{v:.{small}f}"
    return f"{v:.2e}"


def load(path, who):
    """The JSON document at `path`, or None after a message naming `who` on stderr."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{who}: cannot read {path}: {e}", file=sys.stderr)
        return None


def table(head, rows, left=(0,)):
    """Lines of a table: columns in `left` left-aligned, the rest right-aligned, a dashed rule
    under the header."""
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]

    def line(r):
        return "  ".join(
            x.ljust(w) if i in left else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths))
        ).rstrip()

    return [line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]
