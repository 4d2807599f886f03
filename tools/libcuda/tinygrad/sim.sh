#!/usr/bin/env bash
# tinygrad 0.14.0's CUDA backend (DEV=CUDA), unmodified, on nvbare's libcuda.so.1 over the
# simulated GH100: device open, allocation, copies of several dtypes and sizes (roundtrip.py).
# Its own kernels cannot run on the simulator, which runs only the fixture kernels. Uses the
# witness's venv (tinygrad pinned by hash, tools/witness/requirements.txt) and the firmware
# cache (bash tools/fetch-firmware.sh).
#   bash tools/libcuda/tinygrad/sim.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
work=${WITNESS_DIR:-target/witness}
mkdir -p "$work"
work=$(cd "$work" && pwd)
. tools/witness/venv.sh
witness_venv "$work"
cargo build --quiet --locked -p nvbare-libcuda
target=${CARGO_TARGET_DIR:-target}
lib=$work/libcuda
mkdir -p "$lib"
ln -sf "$(cd "$target/debug" && pwd)/libcuda.so" "$lib/libcuda.so.1"
devices=${LIBCUDA_TINYGRAD_DEVICES:-sim:gh100}
n=$(echo "$devices" | tr ',' '\n' | wc -l)
DEV=CUDA LD_LIBRARY_PATH=$lib NVBARE_DEVICE=$devices \
    timeout 600 "$venv/bin/python" tools/libcuda/tinygrad/roundtrip.py "$n"
