#!/usr/bin/env bash
# The zcx test suite — the README's test command and what CI runs.
# Installs what it needs (as root, only if missing), reserves hugepages, then runs formatting and lint
# checks and every test of the workspace, including the multi-process ones.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

zcx_require_cargo
# UCX's libraries: the status-code cross-check against libucs, and the side-by-side benchmarks.
zcx_apt_install ucx-utils libucx-dev
# 1100 x 2 MiB: the hugepage tests and the 1 GiB map bench, run in parallel, with room to spare.
zcx_reserve_hugepages 1100 1

export CARGO_TERM_COLOR=never
export RUST_BACKTRACE=1

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --all-targets --locked
echo "== doc tests"
cargo test --workspace --doc --locked
