#!/usr/bin/env python3
"""Size rules of docs/architecture.md: no Rust source file over 1,000 lines and no function
over 150 lines, with the exceptions that document lists (generated facts, test tables).

Run from the repository root (CI does, from .ci/run). Counts what git tracks or would track
(untracked files that are not ignored), so a new file is checked before it is committed.
"""

import re
import subprocess
import sys

MAX_FILE_LINES = 1000
MAX_FN_LINES = 150
# Files allowed over MAX_FILE_LINES: each is in docs/architecture.md's exceptions table.
FILE_EXCEPTIONS = {
    "gsp-firmware/tests/cubin/facts.rs",
}

FN_RE = re.compile(
    r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)'
)


def rust_files():
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.rs"],
        capture_output=True, text=True, check=True,
    ).stdout
    return sorted(set(out.split()))


def code_only(lines):
    """The lines with comments, strings and char literals blanked, so braces count."""
    out, in_block = [], False
    for line in lines:
        buf, i, n = [], 0, len(line)
        while i < n:
            if in_block:
                j = line.find("*/", i)
                if j < 0:
                    i = n
                    break
                in_block, i = False, j + 2
                continue
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                in_block, i = True, i + 2
                continue
            c = line[i]
            if c == '"':
                j = i + 1
                while j < n and line[j] != '"':
                    j += 2 if line[j] == "\\" else 1
                i = j + 1
                continue
            if c == "'" and i + 2 < n and (line[i + 1] == "\\" or line[i + 2] == "'"):
                j = line.find("'", i + 3 if line[i + 1] == "\\" else i + 2)
                i = j + 1 if j > 0 else n
                continue
            buf.append(c)
            i += 1
        out.append("".join(buf))
    return out


def long_functions(path, lines):
    code = code_only(lines)
    for k, line in enumerate(code):
        m = FN_RE.match(line)
        if not m:
            continue
        depth, started = 0, False
        for j in range(k, len(code)):
            for ch in code[j]:
                if ch == "{":
                    depth, started = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not started:
                    break
            else:
                if started and depth == 0:
                    if j - k + 1 > MAX_FN_LINES:
                        yield f"{path}:{k + 1}: fn {m.group(7)} is {j - k + 1} lines (max {MAX_FN_LINES})"
                    break
                continue
            break


def main():
    problems = []
    for path in rust_files():
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        if len(lines) - 1 > MAX_FILE_LINES and path not in FILE_EXCEPTIONS:
            problems.append(f"{path}: {len(lines) - 1} lines (max {MAX_FILE_LINES}): split it, "
                            "or add it to docs/architecture.md's exceptions with the reason")
        problems.extend(long_functions(path, lines))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} size rule(s) broken (docs/architecture.md, 'Size rules')")
        return 1
    print("size rules hold: no file over 1,000 lines, no function over 150, exceptions aside")
    return 0


if __name__ == "__main__":
    sys.exit(main())
