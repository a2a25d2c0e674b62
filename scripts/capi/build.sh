#!/usr/bin/env bash
# Builds zcx's libucp.so.0 (the capi crate, release) and prints, as its last line, the directory
# to put first on LD_LIBRARY_PATH so that UCX programs load it instead of UCX's libucp:
#
#   LD_LIBRARY_PATH=$(scripts/capi/build.sh | tail -n 1) ucx_perftest ...
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p zcx-capi --locked --quiet >&2
dir=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
# The loader looks the SONAME up: give it the name as a file.
ln -sf libucp.so "$dir/libucp.so.0"
echo "$dir"
