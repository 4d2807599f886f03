#!/usr/bin/env python3
"""Checks what one kernel of tools/nvcc-check/kernels.cu left in its buffers.

usage: check.py KERNEL SAVE_DIR

SAVE_DIR is what `nvbare run --save SAVE_DIR` wrote (arg<N>.bin, raw little-endian). The inputs
and shapes are the ones tools/nvcc-check.sh launches with (KERNELS below). Prints one line and
exits 0 when every element is right, 1 otherwise.
"""

import math
import struct
import sys

FIB = [0, 1]
while len(FIB) < 64:
    FIB.append(FIB[-1] + FIB[-2])
TABLE = [3, 1, 4, 1, 5, 9, 2, 6]

# name: (nvbare run arguments, checker(save_dir) -> list of wrong (index, got, want))
KERNELS = {}


def kernel(name, *args):
    def deco(f):
        KERNELS[name] = (list(args), f)
        return f

    return deco


def load(save, i, fmt):
    data = open(f"{save}/arg{i}.bin", "rb").read()
    n = len(data) // struct.calcsize(fmt)
    return list(struct.unpack(f"<{n}{fmt}", data))


def diff(got, want):
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if len(got) != len(want):
        bad.append((len(got), "length", len(want)))
    return bad


@kernel("saxpy", "--grid", "4", "--block", "256", "--arg", "f32:2.5",
        "--arg", "buf:f32x1000=iota", "--arg", "buf:f32x1000=1.5", "--arg", "u32:1000")
def saxpy(save):
    return diff(load(save, 2, "f"), [2.5 * i + 1.5 for i in range(1000)])


@kernel("const_table", "--grid", "4", "--block", "256", "--arg", "buf:u32x1000",
        "--arg", "u32:1000")
def const_table(save):
    return diff(load(save, 0, "I"), [TABLE[i & 7] * i for i in range(1000)])


@kernel("tickets", "--grid", "4", "--block", "256", "--arg", "buf:u32x1024",
        "--arg", "u32:1000")
def tickets(save):
    out = load(save, 0, "I")
    return diff(sorted(out[:1000]) + out[1000:], list(range(100, 1100)) + [0] * 24)


@kernel("block_sum", "--grid", "8", "--block", "256", "--shared", "1024",
        "--arg", "buf:u32x2048=iota", "--arg", "buf:u32x8", "--arg", "u32:2000")
def block_sum(save):
    want = [sum(i for i in range(b * 256, b * 256 + 256) if i < 2000) for b in range(8)]
    return diff(load(save, 1, "I"), want)


@kernel("transpose", "--grid", "4,3", "--block", "32,32", "--arg", "buf:f32x7000=iota",
        "--arg", "buf:f32x7000", "--arg", "u32:100", "--arg", "u32:70")
def transpose(save):
    w, h = 100, 70
    want = [0.0] * (w * h)
    for y in range(h):
        for x in range(w):
            want[x * h + y] = float(y * w + x)
    return diff(load(save, 1, "f"), want)


@kernel("local_stack", "--grid", "2", "--block", "128", "--arg", "buf:u32x256",
        "--arg", "u32:256", "--arg", "u32:10")
def local_stack(save):
    k = 10
    want = [((i * 7 + k) & 63) ** 2 + i + FIB[k + (i & 3)] for i in range(256)]
    return diff(load(save, 0, "I"), want)


def deep_sum(n, seed):
    """deep_sum of kernels.cu: frame[j] = seed + j at every level."""
    total = 0
    while n > 0:
        total += seed + ((seed + n) & 31)
        n, seed = n - 1, seed + 1
    return total + seed + (seed & 31)


# 64 levels of recursion with 128-byte frames need more than the default 1 KiB stack.
@kernel("deep", "--block", "32", "--stack-size", "16384", "--arg", "buf:u32x32", "--arg", "u32:64")
def deep(save):
    return diff(load(save, 0, "I"), [deep_sum(64, t) for t in range(32)])


@kernel("math_f64", "--grid", "4", "--block", "256", "--arg", "buf:f64x1000",
        "--arg", "u32:1000")
def math_f64(save):
    got = load(save, 0, "d")
    want = [math.sin(i * 0.1) * math.exp(-i * 0.01) + math.sqrt(i) for i in range(1000)]
    # CUDA's sin and exp are within 2 ulp; the sum can cancel, so compare absolutely too.
    return [(i, g, w) for i, (g, w) in enumerate(zip(got, want))
            if not math.isclose(g, w, rel_tol=1e-14, abs_tol=1e-14)] + (
        [] if len(got) == 1000 else [(len(got), "length", 1000)])


@kernel("params_mixed", "--arg", "u8:200", "--arg", "u16:60000",
        "--arg", "u64:0x123456789abcdef0", "--arg", "f64:21.25", "--arg", "i32:-5",
        "--arg", "buf:u32x6")
def params_mixed(save):
    return diff(load(save, 5, "I"), [200, 60000, 0x9ABCDEF0, 0x12345678, 42, 0xFFFFFFFB])


@kernel("bounded", "--grid", "2", "--block", "128", "--arg", "buf:u32x256")
def bounded(save):
    return diff(load(save, 0, "I"), [i % 128 + 1 for i in range(256)])


@kernel("grid3d", "--grid", "3,2,2", "--block", "4,2,3", "--arg", "buf:u32x288")
def grid3d(save):
    return diff(load(save, 0, "I"), list(range(288)))


@kernel("wmma_tile", "--block", "32", "--arg", "buf:f32x256")
def wmma_tile(save):
    a = [[(i + k) % 5 for k in range(16)] for i in range(16)]
    b = [[(k * j) % 3 for j in range(16)] for k in range(16)]
    want = [float(sum(a[i][k] * b[k][j] for k in range(16))) for i in range(16) for j in range(16)]
    return diff(load(save, 0, "f"), want)


@kernel("big_shared", "--block", "256", "--shared", "102400", "--arg", "buf:u32x1",
        "--arg", "u32:25600")
def big_shared(save):
    words = 25600
    return diff(load(save, 0, "I"), [sum((i * 3 + 1) for i in range(words)) & 0xFFFFFFFF])


@kernel("half_math", "--grid", "2", "--block", "256", "--arg", "buf:f32x500", "--arg", "u32:500")
def half_math(save):
    # (x * 2 + 1) + (0.5 * 4 + 1), all exact in half precision for x < 64.
    return diff(load(save, 0, "f"), [float((i % 64) * 2 + 1 + 3) for i in range(500)])


@kernel("warp_ops", "--block", "128", "--arg", "buf:u32x8")
def warp_ops(save):
    want = []
    for w in range(4):
        want += [len([l for l in range(32) if l % 3 == 0]), sum(l + w for l in range(32))]
    return diff(load(save, 0, "I"), want)


@kernel("async_copy", "--grid", "4", "--block", "256", "--arg", "buf:u32x1024=iota",
        "--arg", "buf:u32x1024")
def async_copy(save):
    return diff(load(save, 1, "I"),
                [b * 256 + (255 - t) + 1 for b in range(4) for t in range(256)])


@kernel("atomic_f64", "--block", "64", "--arg", "buf:f64x1")
def atomic_f64(save):
    return diff(load(save, 0, "d"), [0.25 * sum(range(1, 65))])


@kernel("checked", "--block", "256", "--arg", "buf:u32x256=100", "--arg", "u32:256")
def checked(save):
    return diff(load(save, 0, "I"), [101] * 256)


@kernel("_Z9templatedIjEvPT_S0_", "--block", "32", "--arg", "buf:u32x32", "--arg", "u32:7")
def templated(save):
    return diff(load(save, 0, "I"), [7 + t for t in range(32)])


@kernel("clustered", "--grid", "4", "--block", "32", "--arg", "buf:u32x4")
def clustered(save):
    return diff(load(save, 0, "I"), [10, 11, 10, 11])


@kernel("grid_sync", "--grid", "4", "--block", "32", "--arg", "buf:u32x4")
def grid_sync(save):
    return diff(load(save, 0, "I"), [104, 1, 1, 1])


@kernel("with_managed", "--arg", "buf:u32x1")
def with_managed(save):
    return diff(load(save, 0, "I"), [5])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--args":
        # The nvbare run arguments of a kernel, one per line (for the shell script).
        print("\n".join(KERNELS[sys.argv[2]][0]))
        return 0
    if len(sys.argv) != 3 or sys.argv[1] not in KERNELS:
        print(__doc__.strip(), file=sys.stderr)
        print("kernels: " + " ".join(KERNELS), file=sys.stderr)
        return 2
    name, save = sys.argv[1], sys.argv[2]
    try:
        bad = KERNELS[name][1](save)
    except (OSError, struct.error) as e:
        print(f"{name}: cannot read the saved buffers: {e}")
        return 1
    if bad:
        print(f"{name}: {len(bad)} wrong elements, first (index, got, want): {bad[:4]}")
        return 1
    print(f"{name}: every element right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
