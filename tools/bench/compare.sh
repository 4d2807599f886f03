#!/usr/bin/env bash
# Runs the CUDA baseline and `nvbare bench` on the same GPU, one after the other, and prints a
# side-by-side table with ratios (tools/bench/README.md).
#
# usage: tools/bench/compare.sh [--device nvidia:N] [--strict] [-- EXTRA_NVBARE_BENCH_ARGS...]
#
# A second, short nvbare run with deferred doorbells (`bench --defer $CHAINED_DEFER`, default
# 255; 0 skips it) measures back-to-back launches chained QMD to QMD (docs/device.md "Chained
# launches"); the table shows it under the default run's row (opt-in: not counted in
# "targets met").
#
# Environment: NVBARE (default target/release/nvbare), NVCC (default nvcc), CUDA_BASELINE
# (default target/cuda_baseline; built from tools/bench/cuda_baseline.cu when missing or older
# than the source), CUBIN (default tests/fixtures/cubins/kernels_sm90_cuda13.cubin), BENCH_DIR
# (default target/bench: cuda.json, nvbare.json, nvbare-chained.json and the stderr logs go
# there), CHAINED_DEFER (default 255).
#
# Exit status: 0 when both runs worked (targets are informational), 1 when a run or the build
# failed, 3 with --strict when a target was missed.
set -uo pipefail
cd "$(dirname "$0")/../.."

device=nvidia:0
strict=
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="${2:?--device needs a value}"; shift 2 ;;
        --device=*) device="${1#--device=}"; shift ;;
        --strict) strict=--strict; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$device" in
    nvidia:*) index="${device#nvidia:}" ;;
    *) echo "compare.sh: the CUDA baseline needs an nvidia:N device, not $device" >&2; exit 2 ;;
esac

NVBARE="${NVBARE:-target/release/nvbare}"
NVCC="${NVCC:-nvcc}"
CUDA_BASELINE="${CUDA_BASELINE:-target/cuda_baseline}"
CUBIN="${CUBIN:-tests/fixtures/cubins/kernels_sm90_cuda13.cubin}"
BENCH_DIR="${BENCH_DIR:-target/bench}"
CHAINED_DEFER="${CHAINED_DEFER:-255}"
src=tools/bench/cuda_baseline.cu
mkdir -p "$BENCH_DIR" "$(dirname "$CUDA_BASELINE")"

if [ ! -x "$NVBARE" ]; then
    echo "compare.sh: $NVBARE not found; build it with: cargo build --release -p nvbare-tools" >&2
    exit 1
fi
if [ ! -x "$CUDA_BASELINE" ] || [ "$src" -nt "$CUDA_BASELINE" ] || [ tools/bench/bench_util.h -nt "$CUDA_BASELINE" ]; then
    if ! command -v "$NVCC" >/dev/null; then
        echo "compare.sh: $NVCC not found (install the CUDA toolkit or set NVCC=/path/to/nvcc)" >&2
        exit 1
    fi
    echo "==> building $CUDA_BASELINE with $NVCC" >&2
    "$NVCC" -O2 -o "$CUDA_BASELINE" "$src" -lcuda || { echo "compare.sh: nvcc failed" >&2; exit 1; }
fi

cubin_args=()
[ -f "$CUBIN" ] && cubin_args=(--cubin "$CUBIN")

echo "==> CUDA baseline on GPU $index" >&2
if ! "$CUDA_BASELINE" --device "$index" "${cubin_args[@]}" >"$BENCH_DIR/cuda.json" 2>"$BENCH_DIR/cuda.log"; then
    cat "$BENCH_DIR/cuda.log" >&2
    echo "compare.sh: the CUDA baseline failed (log: $BENCH_DIR/cuda.log)" >&2
    exit 1
fi
cat "$BENCH_DIR/cuda.log" >&2

echo "==> nvbare bench --device $device" >&2
if ! "$NVBARE" bench --device "$device" --json "${extra[@]}" >"$BENCH_DIR/nvbare.json" 2>"$BENCH_DIR/nvbare.log"; then
    cat "$BENCH_DIR/nvbare.log" >&2
    echo "compare.sh: nvbare bench failed (log: $BENCH_DIR/nvbare.log)" >&2
    exit 1
fi
cat "$BENCH_DIR/nvbare.log" >&2

chained_args=()
if [ "$CHAINED_DEFER" != 0 ]; then
    echo "==> nvbare bench --device $device --defer $CHAINED_DEFER (back-to-back launches chained)" >&2
    if "$NVBARE" bench --device "$device" --json --defer "$CHAINED_DEFER" --round-trips 300 \
        --copy-bytes 1M --small-copies 10 >"$BENCH_DIR/nvbare-chained.json" \
        2>"$BENCH_DIR/nvbare-chained.log"; then
        chained_args=(--chained "$BENCH_DIR/nvbare-chained.json")
    else
        cat "$BENCH_DIR/nvbare-chained.log" >&2
        echo "compare.sh: nvbare bench --defer $CHAINED_DEFER failed (log: $BENCH_DIR/nvbare-chained.log)" >&2
        exit 1
    fi
fi

echo
if command -v python3 >/dev/null; then
    python3 tools/bench/compare.py "$BENCH_DIR/cuda.json" "$BENCH_DIR/nvbare.json" "${chained_args[@]}" $strict
    exit $?
fi
echo "python3 not found; raw results:"
echo "CUDA:   $(cat "$BENCH_DIR/cuda.json")"
echo "nvbare: $(cat "$BENCH_DIR/nvbare.json")"
