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

step "tests"
cargo test --workspace --locked

step "witness: unmodified tinygrad 0.14.0 boots the simulated AD102 and GB202 (docs/witness.md)"
bash tools/witness/tinygrad.sh

echo
echo "all tests passed"
