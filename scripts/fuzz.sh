#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for FUZZ_SECONDS (default 60) each and prints, per target,
# libFuzzer's closing line (executions, coverage, speed). Exits non-zero if any target finds a crash,
# a failed assertion, a leak or a hang; the input that did it is kept in fuzz/artifacts/<target>/.
#
# Needs the nightly toolchain and cargo-fuzz. Without nightly it prints "skipped: <reason>" and
# exits 0; without cargo-fuzz too, unless FUZZ_INSTALL=1, which installs it (cargo install
# cargo-fuzz --locked). The DPDK message target builds zcx-dataplane with its `dpdk` feature,
# which builds with or without DPDK installed (ZCX_REQUIRE_DPDK=1 makes a missing DPDK an error).
#
# Environment:
#   FUZZ_SECONDS  fuzzing time per target, after its build (default 60)
#   FUZZ_TARGETS  space-separated targets to run (default: all of `cargo fuzz list`)
#   FUZZ_INSTALL  1: install cargo-fuzz if it is missing
#   FUZZ_TIMEOUT  seconds one input may take before it counts as a hang (default 25)
#
# New inputs found go to fuzz/corpus-run/<target>/ (not committed); the committed seeds in
# fuzz/corpus/<target>/ are read, never written. Regenerate the seeds with
# `cd fuzz && cargo run --example gen_seeds`. Reproduce a failure with
# `cd fuzz && cargo +nightly fuzz run <target> artifacts/<target>/<file>`.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=${FUZZ_SECONDS:-60}
timeout=${FUZZ_TIMEOUT:-25}
case $seconds in '' | *[!0-9]*) echo "FUZZ_SECONDS must be a whole number of seconds" >&2; exit 2 ;; esac

if ! command -v rustup >/dev/null 2>&1; then
    echo "skipped: rustup is not installed, so there is no nightly toolchain for cargo-fuzz"
    exit 0
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "skipped: no nightly toolchain (rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    if [ "${FUZZ_INSTALL:-0}" = 1 ]; then
        echo "== installing cargo-fuzz"
        cargo install cargo-fuzz --locked
    else
        echo "skipped: cargo-fuzz is not installed (FUZZ_INSTALL=1 installs it)"
        exit 0
    fi
fi

export CARGO_TERM_COLOR=never
if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }

# One build of every target, so that the time given to each is spent fuzzing.
echo "== cargo fuzz build (${#targets[@]} targets)"
cargo +nightly fuzz build

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0
failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus-run/$target" "corpus/$target"
    log="$logs/$target.log"
    echo "== $target (${seconds}s)"
    status=0
    cargo +nightly fuzz run "$target" "corpus-run/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout="$timeout" -print_final_stats=1 >"$log" 2>&1 || status=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | tr -s '\t ' ' ' || true)
    if [ "$status" -eq 0 ] && [ -n "$done_line" ]; then
        echo "$target: $done_line"
        passed=$((passed + 1))
    else
        failed+=("$target")
        echo "$target: FAILED (exit $status)"
        # The finding: the panic or sanitizer report, and where libFuzzer saved the input.
        grep -E -m 40 -A 12 'panicked at|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|deadly signal' "$log" |
            head -n 60 || true
        grep -E 'Test unit written to|artifact_prefix' "$log" || tail -n 30 "$log"
    fi
done

echo "fuzz: ${passed} passed, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed targets: ${failed[*]}" >&2
    exit 1
fi
