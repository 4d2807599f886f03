#!/usr/bin/env bash
# Hardware check of the kernel-driver adapter (issue #4): on a machine with an NVIDIA GPU and the
# nvidia driver (r580), runs the demo, every fixture kernel with result checks over fresh random
# inputs, the faulting and the hanging kernel, two processes at once, leak checks over 10,000
# alloc/free cycles and 100,000 launches, kernels built by the machine's nvcc
# (tools/nvcc-check.sh), and the benchmark table against CUDA.
#
# usage: tools/hw-check.sh [--device nvidia:N] [--skip-bench]
#
# Environment:
#   NVBARE     nvbare binary (default target/release/nvbare; build: cargo build --release -p nvbare-tools)
#   CUBIN      fixture cubin (default tests/fixtures/cubins/kernels_sm<SM>_cuda13.cubin, SM from `nvbare info`)
#   OUT        if set, everything printed is also appended to a log: OUT itself, or OUT/hw-check.log
#              when OUT is a directory (the benchmark JSON then goes to OUT/bench too)
#   SEED       seed for the random inputs (default: from the clock; printed, so a failure can be replayed)
#   NVCC       for the CUDA baseline (see tools/bench/compare.sh) and tools/nvcc-check.sh
#   STEP_TIMEOUT  wall-clock limit of each step in seconds (default 120)
#   NVBARE_KMOD_VA  rm (default) or uvm: how the adapter maps GPU memory (docs/kernel-adapter.md)
#
# Every step prints PASS, FAIL or SKIP; the exit status is non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

CHECK_NAME=hw-check
STEP_TIMEOUT="${STEP_TIMEOUT:-120}"
# shellcheck source=tools/lib/check.sh
. tools/lib/check.sh
check_log

device=nvidia:0
skip_bench=
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="${2:?--device needs a value}"; shift 2 ;;
        --device=*) device="${1#--device=}"; shift ;;
        --skip-bench) skip_bench=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "hw-check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

NVBARE="${NVBARE:-target/release/nvbare}"
SEED="${SEED:-$(date +%s)}"

step "preflight"
echo "date:   $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host:   $(uname -n) $(uname -r)"
echo "seed:   $SEED"
echo "device: $device"
if [ -r /proc/driver/nvidia/version ]; then head -1 /proc/driver/nvidia/version; else echo "no /proc/driver/nvidia/version"; fi
command -v nvidia-smi >/dev/null && nvidia-smi -L
if [ ! -x "$NVBARE" ]; then
    record "nvbare binary" FAIL "$NVBARE missing; cargo build --release -p nvbare-tools"
    printf '\n%s\n' "${results[@]}"
    exit 1
fi
if ! command -v python3 >/dev/null; then
    record "python3 (input generation and checks)" FAIL "install python3"
    printf '\n%s\n' "${results[@]}"
    exit 1
fi

step "info: nvbare info --device $device"
if run_logged info "$NVBARE" info --device "$device" && grep -q '^compute ' "$work/info.out"; then
    record "info" PASS
else
    record "info" FAIL "see output above"
fi
sm="$(sed -n 's/^sm *sm_\([0-9]*\).*/\1/p' "$work/info.out" | head -1)"
CUBIN="${CUBIN:-tests/fixtures/cubins/kernels_sm${sm:-90}_cuda13.cubin}"
echo "cubin:  $CUBIN"

step "demo: nvbare demo --device $device"
if run_logged demo "$NVBARE" demo --device "$device"; then record "demo" PASS; else record "demo" FAIL; fi

# ---------------------------------------------------------------------------------------------
# Kernel launches: nvbare run --device DEV CUBIN KERNEL --grid X --block X --arg ARG... --save DIR
#   ARG = u32:N | buf:TYPExLEN[=@FILE]   (@FILE: initial contents, raw little-endian)
#   --save DIR writes every buffer afterwards to DIR/arg<N>.bin
# A fault exits non-zero with the fault report (MMU fault address) on stderr; a kernel that does
# not finish within --timeout-ms exits non-zero with a "timed out" message.
run_kernel() { # run_kernel NAME KERNEL [nvbare run args...]
    local name="$1" kernel="$2"; shift 2
    mkdir -p "$work/$name.save"
    run_logged "$name" "$NVBARE" run --device "$device" "$CUBIN" "$kernel" --save "$work/$name.save" "$@"
}
# ---------------------------------------------------------------------------------------------

gen() { # gen KIND N PATH: random inputs (u32 or f32 exactly representable, sums exact)
    python3 - "$SEED" "$1" "$2" "$3" <<'EOF'
import random, struct, sys
seed, kind, n, path = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
r = random.Random(f"{seed}:{path.rsplit('/', 1)[-1]}")
if kind == "u32":
    data = struct.pack(f"<{n}I", *(r.getrandbits(32) for _ in range(n)))
elif kind == "f32":
    # 23-bit integers / 256: exact in f32, and the sum of two is exact too.
    data = struct.pack(f"<{n}f", *(r.randint(-(1 << 22), 1 << 22) / 256.0 for _ in range(n)))
else:
    data = bytes(4 * n)
open(path, "wb").write(data)
EOF
}

step "kernel empty"
if run_kernel empty empty --grid 1 --block 1; then record "kernel empty" PASS; else record "kernel empty" FAIL; fi

step "kernel add1 (random u32, n not a multiple of the block)"
n=1000003; pad=1021
gen u32 $((n + pad)) "$work/add1.in"
if run_kernel add1 add1 --grid $(((n + 255) / 256)) --block 256 \
    --arg "buf:u32x$((n + pad))=@$work/add1.in" --arg "u32:$n"; then
    if python3 - "$work/add1.in" "$work/add1.save/arg0.bin" "$n" <<'EOF'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read(); n = int(sys.argv[3])
x = struct.unpack(f"<{len(a)//4}I", a); y = struct.unpack(f"<{len(b)//4}I", b)
bad = [i for i in range(len(x)) if y[i] != ((x[i] + 1) & 0xffffffff if i < n else x[i])]
if len(x) != len(y) or bad:
    print(f"add1: {len(bad)} wrong elements, first {bad[:5]}"); sys.exit(1)
print(f"add1: {n} elements incremented, {len(x) - n} past n untouched")
EOF
    then record "kernel add1" PASS; else record "kernel add1" FAIL "wrong results"; fi
else
    record "kernel add1" FAIL "run failed"
fi

step "kernel vector_add (random f32)"
n=777777
gen f32 $n "$work/a.buf"; gen f32 $n "$work/b.buf"
if run_kernel vector_add vector_add --grid $(((n + 127) / 128)) --block 128 \
    --arg "buf:f32x$n=@$work/a.buf" --arg "buf:f32x$n=@$work/b.buf" --arg "buf:f32x$n" \
    --arg "u32:$n"; then
    if python3 - "$work/a.buf" "$work/b.buf" "$work/vector_add.save/arg2.bin" <<'EOF'
import struct, sys
v = [open(p, "rb").read() for p in sys.argv[1:4]]
a, b, c = (struct.unpack(f"<{len(x)//4}f", x) for x in v)
bad = [i for i in range(len(a)) if c[i] != a[i] + b[i]]
if bad:
    print(f"vector_add: {len(bad)} wrong elements, first {bad[:5]}"); sys.exit(1)
print(f"vector_add: {len(a)} sums exact")
EOF
    then record "kernel vector_add" PASS; else record "kernel vector_add" FAIL "wrong results"; fi
else
    record "kernel vector_add" FAIL "run failed"
fi

step "kernel oob_write (must report an MMU fault naming the address)"
run_kernel oob oob_write --grid 1 --block 1 --arg "buf:u32x1024" --timeout-ms 10000
rc=$?
# The kernel stores at buf + 2^40: the reported address must be at least 2^40.
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && grep -qi 'fault' "$work/oob.err" &&
    python3 - "$work/oob.err" <<'EOF'
import re, sys
addrs = [int(m, 16) for m in re.findall(r"0x[0-9a-fA-F]+", open(sys.argv[1]).read())]
sys.exit(0 if any(a >= 1 << 40 for a in addrs) else 1)
EOF
then
    record "oob_write faults with the address" PASS
else
    record "oob_write faults with the address" FAIL "exit $rc; need a non-zero exit and a fault message with an address >= 2^40"
fi

step "kernel spin_forever (must time out with a clear error)"
run_kernel spin spin_forever --grid 1 --block 1 --timeout-ms 5000
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && grep -qi 'timed out' "$work/spin.err"; then
    record "spin_forever times out" PASS
else
    record "spin_forever times out" FAIL "exit $rc; need a non-zero exit with a 'timed out' message"
fi

step "a second process uses the GPU normally after the hang"
if run_logged after-hang "$NVBARE" demo --device "$device"; then
    record "GPU usable after hang" PASS
else
    record "GPU usable after hang" FAIL
fi

step "two processes at once (the second opens and launches while the first is busy)"
# On the H200 the busy process's doorbell was lost when the second one created its channels,
# and its wait timed out, until waits learned to ring again; and it ran stale commands in about
# 1 pair of 30 until a store barrier went before GPPut (docs/device.md, "Stale commands").
# tools/contention-check.sh repeats this many times.
if OUT= NVBARE="$NVBARE" tools/contention-check.sh --device "$device" --pairs 1; then
    record "two processes at once" PASS
else
    record "two processes at once" FAIL "see the pair above"
fi

# RM object counts (NV0000_CTRL_CMD_SYSTEM_GET_CLIENT_DATABASE_INFO) need root.
counts() { "$NVBARE" stress --device "$device" --counts 2>/dev/null | sed -n 's/^rm-resources \([0-9][0-9]*\)$/\1/p'; }

step "early exit leaks no RM objects (kill -9 during a hang)"
before="$(counts)"
if [ -z "$before" ]; then
    record "early exit frees RM objects" SKIP "RM object counts unavailable (run as root)"
else
    "$NVBARE" run --device "$device" "$CUBIN" spin_forever --grid 1 --block 1 --timeout-ms 60000 \
        >/dev/null 2>&1 &
    pid=$!
    sleep 3
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    sleep 2
    after="$(counts)"
    if [ "$before" = "$after" ]; then
        record "early exit frees RM objects" PASS "RM resources $before -> $after"
    else
        record "early exit frees RM objects" FAIL "RM resources $before -> $after"
    fi
fi

step "stress: 10,000 alloc/free cycles, 100,000 launches, 1000 dependent launches in stream order, 200 round trips with changing arguments"
if run_logged stress "$NVBARE" stress --device "$device" --alloc-free 10000 --launches 100000; then
    record "10k alloc/free + 100k launches, no leaks" PASS
else
    record "10k alloc/free + 100k launches, no leaks" FAIL "see the stress report above"
fi

step "kernels compiled by this machine's nvcc (tools/nvcc-check.sh)"
nvcc_bin="${NVCC:-nvcc}"
command -v "$nvcc_bin" >/dev/null || nvcc_bin=/usr/local/cuda/bin/nvcc
if [ ! -x "$(command -v "$nvcc_bin")" ]; then
    record "nvcc-built kernels" SKIP "no nvcc (set NVCC)"
elif NVBARE="$NVBARE" NVCC="$nvcc_bin" OUT= timeout --kill-after=10 $((STEP_TIMEOUT * 3)) \
    tools/nvcc-check.sh --device "$device" >"$work/nvcc-check.out" 2>&1; then
    sed -n '/==> summary/,$p' "$work/nvcc-check.out"
    record "nvcc-built kernels (-O3 and -G), and what nvbare refuses" PASS
else
    cat "$work/nvcc-check.out"
    record "nvcc-built kernels (-O3 and -G), and what nvbare refuses" FAIL "see above"
fi

if [ -z "$skip_bench" ]; then
    step "benchmarks against CUDA"
    if NVBARE="$NVBARE" timeout --kill-after=10 $((STEP_TIMEOUT * 2)) tools/bench/compare.sh --device "$device"; then
        record "benchmark table" PASS
    else
        record "benchmark table" FAIL
    fi
fi

check_summary "seed $SEED"
