#!/usr/bin/env bash
# The library on a machine with an NVIDIA GPU, its driver and the CUDA toolkit (for example
# the H200 of the device tool), run from the repository root with a built libcuda.so:
#   1. abi.rs against cuda.h and nvJitLink.h (tools/libcuda/hw/gen_abi_check.py);
#   2. the entry points we export that NVIDIA's libcuda.so.1 does not (misnamed ones);
#   3. tests/c/driver_api_check.c with NVIDIA's library, then with ours on NVBARE_DEVICE=nvidia:0,
#      each also loading add1 from PTX (ours: through nvJitLink, found by the default search)
#      and from nvcc-built fatbins;
#   4. tests/c/capture_check.c (capture across streams) with both libraries, and the steps
#      whose answers differ.
# Usage: tools/libcuda/hw/hw-check.sh PATH/TO/libcuda.so [OUTDIR]
set -u
# Where the inputs are (a bundle elsewhere may set these; the C checks include driver_api.h
# from beside them).
ABI_RS=${ABI_RS:-tools/libcuda/src/abi.rs}
GEN=${GEN:-tools/libcuda/hw/gen_abi_check.py}
CHECK_C=${CHECK_C:-tools/libcuda/tests/c/driver_api_check.c}
CAPTURE_C=${CAPTURE_C:-tools/libcuda/tests/c/capture_check.c}
PTX=${PTX:-tests/fixtures/cubins/src/kernels.ptx}
CUBIN=${CUBIN:-tests/fixtures/cubins/kernels_sm90_cuda13.cubin}
SO=$(realpath "$1")
OUTDIR=${2:-/tmp/libcuda-hw-out}
mkdir -p "$OUTDIR"
W=$(mktemp -d)
CUDA=${CUDA_HOME:-/usr/local/cuda}
ln -sf "$SO" "$W/libcuda.so.1"
ln -sf "$SO" "$W/libcuda.so"
log() { echo "== $*" | tee -a "$OUTDIR/summary.txt"; }

log "abi.rs against $CUDA/include"
python3 "$GEN" "$ABI_RS" >"$W/abi_check.c"
if gcc -w -I"$CUDA/include" "$W/abi_check.c" -o "$W/abi_check" >"$OUTDIR/abi_compile.txt" 2>&1; then
    "$W/abi_check" | tee "$OUTDIR/abi.txt" | tail -4 | tee -a "$OUTDIR/summary.txt"
else
    log "abi_check does not compile:"; grep error "$OUTDIR/abi_compile.txt" | head -30 | tee -a "$OUTDIR/summary.txt"
fi

log "exported names NVIDIA's libcuda.so.1 lacks"
NV=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
[ -n "$NV" ] || NV=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name libcuda.so.1 2>/dev/null | head -1)
nm -D --defined-only "$SO" | awk '$3 ~ /^cu/{print $3}' | sort >"$W/ours"
nm -D --defined-only "$NV" | awk '{print $3}' | sort -u >"$W/theirs"
comm -23 "$W/ours" "$W/theirs" | tee "$OUTDIR/names_not_in_nvidia.txt" | tee -a "$OUTDIR/summary.txt"
echo "($(wc -l <"$W/ours") exported, NVIDIA's: $NV)" | tee -a "$OUTDIR/summary.txt"

log "images"
cp "$PTX" "$W/kernels.ptx"
nvcc --version | tail -1 | tee -a "$OUTDIR/summary.txt"
nvcc -fatbin -gencode arch=compute_80,code='[sm_90,compute_80]' "$W/kernels.ptx" -o "$W/sm90_ptx.fatbin" 2>&1 | tail -3
nvcc -fatbin -gencode arch=compute_80,code=compute_80 "$W/kernels.ptx" -o "$W/ptx_only.fatbin" 2>&1 | tail -3
nvcc -fatbin --compress-mode=none -gencode arch=compute_80,code=sm_90 "$W/kernels.ptx" -o "$W/sm90_nocompress.fatbin" 2>&1 | tail -3
ls -la "$W"/*.fatbin | tee -a "$OUTDIR/summary.txt"
gcc -std=c11 -Wall -o "$W/dac" "$CHECK_C" -L"$W" -lcuda

for img in "$W/kernels.ptx" "$W/sm90_ptx.fatbin" "$W/ptx_only.fatbin" "$W/sm90_nocompress.fatbin"; do
    log "NVIDIA's library: $(basename "$img")"
    DRIVER_API_CHECK_NO_FORGED=1 "$W/dac" "$CUBIN" "$img" >"$OUTDIR/nvidia_$(basename "$img").txt" 2>&1
    echo "rc=$?" | tee -a "$OUTDIR/nvidia_$(basename "$img").txt"; tail -3 "$OUTDIR/nvidia_$(basename "$img").txt" >>"$OUTDIR/summary.txt"
    log "ours on nvidia:0: $(basename "$img")"
    LD_LIBRARY_PATH="$W" NVBARE_DEVICE=nvidia:0 NVBARE_CUDA_LOG=1 timeout 120 "$W/dac" "$CUBIN" "$img" >"$OUTDIR/ours_$(basename "$img").txt" 2>&1
    echo "rc=$?" | tee -a "$OUTDIR/ours_$(basename "$img").txt"; tail -4 "$OUTDIR/ours_$(basename "$img").txt" | cut -c1-400 >>"$OUTDIR/summary.txt"
done
log "nvJitLink libraries on this machine"
find / -xdev -name 'libnvJitLink.so*' 2>/dev/null | head -5 | tee -a "$OUTDIR/summary.txt"

log "capture across streams: NVIDIA's library against ours"
gcc -std=c11 -Wall -o "$W/cc" "$CAPTURE_C" -L"$W" -lcuda
"$W/cc" "$CUBIN" >"$OUTDIR/capture.nvidia.txt" 2>&1
echo "nvidia rc=$?" | tee -a "$OUTDIR/summary.txt"
LD_LIBRARY_PATH="$W" NVBARE_DEVICE=nvidia:0 timeout 120 "$W/cc" "$CUBIN" >"$OUTDIR/capture.nvbare.txt" 2>&1
echo "nvbare rc=$?" | tee -a "$OUTDIR/summary.txt"
# Only the answers: the "differs" lines say what each library's run expected.
grep -v '^  differs' "$OUTDIR/capture.nvidia.txt" | grep -v '^capture_check' >"$W/cap.nv"
grep -v '^  differs' "$OUTDIR/capture.nvbare.txt" | grep -v '^capture_check' >"$W/cap.ours"
if diff "$W/cap.nv" "$W/cap.ours" >"$OUTDIR/capture.diff"; then
    echo "capture: every step answers as NVIDIA's library does" | tee -a "$OUTDIR/summary.txt"
else
    echo "capture: steps that differ (< NVIDIA's, > ours):" | tee -a "$OUTDIR/summary.txt"
    head -40 "$OUTDIR/capture.diff" | tee -a "$OUTDIR/summary.txt"
fi
