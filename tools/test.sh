#!/usr/bin/env bash
# The whole nvbare test suite, as README documents it and CI runs it (`.ci/run`).
# Works on a fresh machine with the pinned Rust toolchain; fetches the real firmware blobs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if [ -f tools/fetch-firmware.sh ]; then
    step "firmware: fetch and verify the r570.144 GSP blobs"
    bash tools/fetch-firmware.sh
fi

step "core builds with no default features (no heap)"
cargo build -p nvbare-core --no-default-features --locked

step "freestanding check: core links with no std, no libc, no allocator"
(cd tests/freestanding && CARGO_TARGET_DIR=../../target/freestanding cargo build --release --locked)
target/freestanding/release/nvbare-freestanding
echo "freestanding check passed"

step "bare metal: core and gsp-firmware (device features) and the embedder skeleton build for x86_64-unknown-none"
# The target is in rust-toolchain.toml, which rustup honours only when it installs the toolchain:
# add it to a toolchain installed before. examples/embedder is its own workspace
# (docs/embedding.md).
if command -v rustup >/dev/null; then rustup target add x86_64-unknown-none; fi
cargo build -p nvbare-core --features device --target x86_64-unknown-none --locked
cargo build -p nvbare-gsp-firmware --features device --target x86_64-unknown-none --locked
(cd examples/embedder && CARGO_TARGET_DIR=../../target/embedder cargo build --target x86_64-unknown-none --locked)

step "packaging: every publishable crate packages and builds from its .crate alone"
# Each crate is built from its .crate as crates.io would (interdependent crates through cargo's
# local overlay registry); needs the crates.io index. --allow-dirty: a working tree with
# uncommitted edits is checked as it is. nvbare-integration is publish = false.
# Cargo extracts each overlaid .crate under $CARGO_HOME/registry/src once and reuses that copy
# on later runs even when the crate changed: drop ours first, so a second run checks this tree.
ver=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
for c in nvbare nvbare-core nvbare-gsp-firmware nvbare-pci-host nvbare-sim nvbare-tools; do
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$c-$ver"
done
cargo package --workspace --exclude nvbare-integration --locked --allow-dirty

step "tests"
cargo test --workspace --locked

step "the library as a user runs it: the add1 example, and a program outside the workspace"
cargo run --locked --example add1
# tests/facade-user is its own workspace (it sees nvbare as a user's project does); it uses
# the workspace's lock file, pruned to what it needs.
cp Cargo.lock tests/facade-user/Cargo.lock
(cd tests/facade-user && CARGO_TARGET_DIR=../../target cargo run --offline)

step "the bare-metal path under the simulator's other answers to unknowns (docs/assumptions.md)"
cargo build --quiet --locked -p nvbare-tools
for mode in pessimistic random:11 random:12; do
    echo "-- NVBARE_SIM_UNKNOWNS=$mode"
    NVBARE_SIM_UNKNOWNS=$mode cargo test --quiet --locked -p nvbare-integration --test baremetal_sim
    for chip in ad102 gh100 gb202; do
        for cmd in "boot" "demo" "demo --faults"; do
            # shellcheck disable=SC2086 # $cmd is a command and its flags
            if ! NVBARE_SIM_UNKNOWNS=$mode target/debug/nvbare $cmd --device "sim:$chip" \
                >target/unknowns-run.log 2>&1; then
                cat target/unknowns-run.log
                echo "nvbare $cmd --device sim:$chip failed with NVBARE_SIM_UNKNOWNS=$mode" >&2
                exit 1
            fi
            echo "nvbare $cmd --device sim:$chip: $(tail -1 target/unknowns-run.log)"
        done
    done
done

step "witness: unmodified tinygrad 0.14.0 boots the simulated AD102 and GB202 (docs/witness.md)"
bash tools/witness/tinygrad.sh

step "tinygrad 0.14.0's CUDA backend on nvbare's libcuda.so.1 over the simulated GH100 (docs/libcuda.md)"
bash tools/libcuda/tinygrad/sim.sh

echo
echo "all tests passed"
