#!/usr/bin/env bash
# Peer-to-peer copy bandwidth between two GPUs, CUDA (cudaMemcpyPeer, tools/bench/cuda_p2p.cu)
# against `nvbare bench p2p`, one after the other in one go, printed side by side with ratios
# (tools/bench/README.md, "Peer to peer").
#
# usage: tools/bench/compare_p2p.sh [--devices nvidia:A,nvidia:B] [--size 1G] [--reps N]
#                                   [-- EXTRA_NVBARE_BENCH_P2P_ARGS...]
#
# Environment: NVBARE (default target/release/nvbare), NVCC (default nvcc), CUDA_P2P (default
# target/cuda_p2p; built from tools/bench/cuda_p2p.cu when missing or older than the source),
# BENCH_DIR (default target/bench: cuda_p2p.json, nvbare_p2p.json and both stderr logs go there).
#
# Exit status: 0 when both runs worked and both verified their data, 1 otherwise (the table is
# still printed from whatever ran), 2 on bad arguments.
set -uo pipefail
cd "$(dirname "$0")/../.."

devices=nvidia:0,nvidia:1
size=1G
reps=10
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --devices) devices="${2:?--devices needs a value}"; shift 2 ;;
        --devices=*) devices="${1#--devices=}"; shift ;;
        --size) size="${2:?--size needs a value}"; shift 2 ;;
        --size=*) size="${1#--size=}"; shift ;;
        --reps) reps="${2:?--reps needs a value}"; shift 2 ;;
        --reps=*) reps="${1#--reps=}"; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "compare_p2p.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$devices" in
    nvidia:*,nvidia:*) ;;
    *) echo "compare_p2p.sh: the CUDA baseline needs nvidia:A,nvidia:B, not $devices" >&2; exit 2 ;;
esac
a="${devices%%,*}"; b="${devices#*,}"
ia="${a#nvidia:}"; ib="${b#nvidia:}"
# --size: bytes with an optional K/M/G suffix, a whole number of MiB for the CUDA side.
case "$size" in
    *[Gg]) mib=$(( ${size%?} * 1024 )) ;;
    *[Mm]) mib=$(( ${size%?} )) ;;
    *[Kk]) mib=$(( ${size%?} / 1024 )) ;;
    *) mib=$(( size / 1048576 )) ;;
esac
if [ "${mib:-0}" -lt 1 ] 2>/dev/null; then
    echo "compare_p2p.sh: --size must be at least 1M (e.g. 1G, 256M)" >&2; exit 2
fi

NVBARE="${NVBARE:-target/release/nvbare}"
NVCC="${NVCC:-nvcc}"
# A toolkit installed but not on PATH (the usual /usr/local/cuda).
if ! command -v "$NVCC" >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    NVCC=/usr/local/cuda/bin/nvcc
fi
CUDA_P2P="${CUDA_P2P:-target/cuda_p2p}"
BENCH_DIR="${BENCH_DIR:-target/bench}"
src=tools/bench/cuda_p2p.cu
mkdir -p "$BENCH_DIR" "$(dirname "$CUDA_P2P")"
cuda_json="$BENCH_DIR/cuda_p2p.json"
nvbare_json="$BENCH_DIR/nvbare_p2p.json"
rm -f "$cuda_json" "$nvbare_json"
status=0

cuda_ok=1
if [ ! -x "$CUDA_P2P" ] || [ "$src" -nt "$CUDA_P2P" ] || [ tools/bench/bench_util.h -nt "$CUDA_P2P" ]; then
    if ! command -v "$NVCC" >/dev/null; then
        echo "compare_p2p.sh: $NVCC not found (install the CUDA toolkit or set NVCC=/path/to/nvcc)" >&2
        cuda_ok=0
    else
        echo "==> building $CUDA_P2P with $NVCC" >&2
        "$NVCC" -O2 -o "$CUDA_P2P" "$src" || { echo "compare_p2p.sh: nvcc failed" >&2; cuda_ok=0; }
    fi
fi
if [ $cuda_ok -eq 1 ]; then
    echo "==> CUDA cudaMemcpyPeer, GPUs $ia,$ib, $mib MiB x $reps" >&2
    if ! "$CUDA_P2P" --devices "$ia,$ib" --size-mib "$mib" --reps "$reps" \
        >"$cuda_json" 2>"$BENCH_DIR/cuda_p2p.log"; then
        echo "compare_p2p.sh: the CUDA baseline failed (log: $BENCH_DIR/cuda_p2p.log)" >&2
        cuda_ok=0
    fi
    cat "$BENCH_DIR/cuda_p2p.log" >&2
fi
[ $cuda_ok -eq 1 ] || status=1

echo "==> nvbare bench p2p --devices $a,$b, $mib MiB x $reps" >&2
if [ ! -x "$NVBARE" ]; then
    echo "compare_p2p.sh: $NVBARE not found; build it with: cargo build --release -p nvbare-tools" >&2
    status=1
elif ! "$NVBARE" bench p2p --devices "$a,$b" --size "${mib}M" --reps "$reps" --json "${extra[@]}" \
    >"$nvbare_json" 2>"$BENCH_DIR/nvbare_p2p.log"; then
    cat "$BENCH_DIR/nvbare_p2p.log" >&2
    echo "compare_p2p.sh: nvbare bench p2p failed (log: $BENCH_DIR/nvbare_p2p.log)" >&2
    status=1
else
    cat "$BENCH_DIR/nvbare_p2p.log" >&2
fi

echo
if command -v python3 >/dev/null; then
    python3 tools/bench/compare_p2p.py "$cuda_json" "$nvbare_json" || status=1
else
    echo "python3 not found; raw results:"
    echo "CUDA:   $(cat "$cuda_json" 2>/dev/null)"
    echo "nvbare: $(cat "$nvbare_json" 2>/dev/null)"
fi
exit $status
