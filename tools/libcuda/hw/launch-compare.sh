#!/usr/bin/env bash
# The CUDA baseline (tools/bench/cuda_baseline.cu, a driver-API program) unchanged on NVIDIA's
# libcuda.so.1 and on ours over NVBARE_DEVICE=nvidia:0: the same empty-kernel launches, copies
# and stream-captured graph through each library, and the ratios side by side; then
# graph_gap.c (a synchronized 20-kernel graph) on both.
# usage: tools/libcuda/hw/launch-compare.sh PATH/TO/libcuda.so OUTDIR [CUDA_BASELINE_ARGS...]
set -u
SO=$(realpath "$1")
OUTDIR=$2
shift 2
mkdir -p "$OUTDIR"
W=$(mktemp -d)
ln -sf "$SO" "$W/libcuda.so.1"
BIN=$W/cuda_baseline
${NVCC:-nvcc} -O2 -o "$BIN" tools/bench/cuda_baseline.cu -lcuda || { echo "launch-compare: nvcc failed" >&2; exit 1; }
CUBIN=${CUBIN:-tests/fixtures/cubins/kernels_sm90_cuda13.cubin}
timeout 300 "$BIN" --cubin "$CUBIN" "$@" >"$OUTDIR/cuda_baseline.nvidia.json" 2>"$OUTDIR/cuda_baseline.nvidia.log"
echo "nvidia rc=$?"
LD_LIBRARY_PATH="$W" NVBARE_DEVICE=nvidia:0 timeout 300 "$BIN" --cubin "$CUBIN" "$@" \
    >"$OUTDIR/cuda_baseline.nvbare.json" 2>"$OUTDIR/cuda_baseline.nvbare.log"
echo "nvbare rc=$?"
tail -3 "$OUTDIR/cuda_baseline.nvbare.log"
python3 - "$OUTDIR/cuda_baseline.nvidia.json" "$OUTDIR/cuda_baseline.nvbare.json" <<'PY'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError) as e:
        print(f"launch-compare: {p}: {e}")
        return {}
nv, ours = load(sys.argv[1]), load(sys.argv[2])
def val(d, k):
    v = d.get(k)
    return v.get("median") if isinstance(v, dict) else v
print(f"{'metric':32} {'NVIDIA libcuda':>16} {'nvbare libcuda':>16} {'nvbare/NVIDIA':>14}")
for k in sorted(set(nv) | set(ours)):
    a, b = val(nv, k), val(ours, k)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        r = f"{b / a:.3f}" if a else "-"
        print(f"{k:32} {a:16.4f} {b:16.4f} {r:>14}")
PY
# A synchronized graph of 20 dependent kernels (tools/libcuda/hw/graph_gap.c) on both.
if ${CC:-gcc} -O2 -I"${CUDA_HOME:-/usr/local/cuda}/include" -o "$W/graph_gap" tools/libcuda/hw/graph_gap.c \
    -L"${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" -lcuda; then
    echo "== graph_gap, NVIDIA's"; timeout 120 "$W/graph_gap" "$CUBIN" | tee "$OUTDIR/graph_gap.nvidia.txt"
    echo "== graph_gap, nvbare's"
    LD_LIBRARY_PATH="$W" NVBARE_DEVICE=nvidia:0 timeout 120 "$W/graph_gap" "$CUBIN" | tee "$OUTDIR/graph_gap.nvbare.txt"
else
    echo "launch-compare: graph_gap did not build" >&2
fi
rm -rf "$W"
