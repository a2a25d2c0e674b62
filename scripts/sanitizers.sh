#!/usr/bin/env bash
# Sanitizer runs, on the nightly toolchain:
#   1. AddressSanitizer over the zcx-control and zcx-dataplane unit tests and the dataplane
#      integration tests that run unsafe code.
#   2. Miri over the code whose unsafe and atomic logic runs without the OS: the shm ring (on heap
#      memory) and the lend slot (zcx-dataplane), the request cell and the lent-message gate (zcx).
# Usage: scripts/sanitizers.sh [asan|miri]...   (both when no argument)
# Installs the nightly components it needs (rust-src, miri) when missing. Without a nightly
# toolchain, or when a component cannot be installed, it prints "skipped: <reason>" for what it
# cannot run and exits 0; any build or test failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

zcx_require_cargo
export CARGO_TERM_COLOR=never
export RUST_BACKTRACE=1
# A Miri or compiler crash writes rustc-ice-*.txt into the working directory by default; the
# report on stderr is enough.
export RUSTC_ICE=0

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(asan miri)
for part in "${parts[@]}"; do
    case $part in
        asan | miri) ;;
        *) echo "usage: $0 [asan|miri]..." >&2; exit 2 ;;
    esac
done

if ! command -v rustup >/dev/null 2>&1; then
    echo "skipped: sanitizers (no rustup, so no nightly toolchain)"
    exit 0
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "skipped: sanitizers (no nightly toolchain: rustup toolchain install nightly)"
    exit 0
fi
echo "nightly: $(rustup run nightly rustc --version)"

# ensure_component NAME: true once the nightly toolchain has the component (installed if missing).
ensure_component() {
    local installed
    # Listed first, then searched: `grep -q` straight on the pipe may stop it early, and under
    # pipefail rustup's SIGPIPE would read as "missing".
    installed=$(rustup component list --toolchain nightly --installed 2>/dev/null || true)
    grep -q "^$1" <<<"$installed" && return 0
    zcx_log "installing the nightly component $1"
    rustup component add "$1" --toolchain nightly >/dev/null 2>&1
}

# elapsed START: seconds since START (a $SECONDS value), for the step timings.
elapsed() { echo "$((SECONDS - $1)) s"; }

run_asan() {
    local host start
    host=$(rustup run nightly rustc -vV | sed -n 's/^host: //p')
    case $host in
        x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu) ;;
        *) echo "skipped: AddressSanitizer (not supported on $host here)"; return 0 ;;
    esac
    # -Zbuild-std rebuilds the standard library instrumented, from the rust-src component.
    if ! ensure_component rust-src; then
        echo "skipped: AddressSanitizer (cannot install rust-src for nightly)"
        return 0
    fi
    echo "== AddressSanitizer: zcx-control and zcx-dataplane tests"
    # Its own target directory, so that the instrumented build neither invalidates nor reuses the
    # normal one. opt-level 1 (debug assertions stay on): at opt-level 0 the instrumented tests
    # run ten times slower, and the shm tests' 10-second pumps time out on a busy 2-core
    # machine; at 1 the whole run takes well under a minute, for about twice the compile time.
    # Line tables are all an ASan report needs, and link faster than full debug info.
    # Integration tests: those that run unsafe code (the shm ring and transport over real memfd
    # mappings and two processes, io_uring buffers, RMA execution into registered memory, the
    # access table). Left out: the proptest decoders and the reliability simulation, all safe
    # code (zcx-control has no `unsafe` at all), and the DPDK tests, which need the dpdk feature
    # and DPDK's C libraries; scripts/test.sh runs them all natively.
    start=$SECONDS
    RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address" \
        CARGO_TARGET_DIR=target/asan CARGO_PROFILE_DEV_OPT_LEVEL=1 CARGO_PROFILE_DEV_DEBUG=line-tables-only \
        ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}" \
        cargo +nightly test -Zbuild-std --target "$host" --locked -p zcx-control -p zcx-dataplane --lib \
        --test shm_ring --test shm_transport --test uring_transport --test rma_exec --test access_props \
        -- --nocapture
    echo "AddressSanitizer: passed in $(elapsed "$start")"
}

run_miri() {
    local start
    if ! ensure_component rust-src || ! ensure_component miri; then
        echo "skipped: Miri (cannot install the miri and rust-src components for nightly)"
        return 0
    fi
    echo "== Miri"
    start=$SECONDS
    # Builds Miri's own standard library once (cached in ~/.cache/miri).
    cargo +nightly miri setup >/dev/null
    # Isolation off: the tests read the clock (the ring's two-thread test bounds its waits) and
    # proptest reads its environment and failure files. Proptest cases cut to a few: each case
    # costs seconds under Miri, and the full count runs natively in scripts/test.sh.
    export PROPTEST_CASES=8
    # The ring and the lend slot (the ring's pushes run `copy_bytes` at every size class), with
    # weak-memory emulation off: with it on, Miri
    # (nightly 1.97, 2026-05-19) crashes (an internal panic, "cannot have empty store buffer
    # when previous write was atomic", weak_memory.rs) at the Relaxed store in
    # Producer::clear_ahead in peeked_frames_are_consumed_only_when_asked. That is Miri's bug,
    # not a report about the ring: the ring writes the same bytes as an atomic record header on
    # one lap and as plain payload on another, which its store buffers mishandle. The data-race
    # detector and the aliasing and bounds checks stay on.
    MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-disable-weak-memory-emulation" \
        cargo +nightly miri test --locked -p zcx-dataplane --lib -- shm::ring lend:: proto::peer_bytes
    # The request cell and the lent-message gate, with weak-memory emulation on (it runs there).
    # Only these: the rest of zcx's unit tests make workers, which need io_uring, memfd and
    # eventfd; the two request tests that do are ignored under Miri.
    MIRIFLAGS="-Zmiri-disable-isolation" \
        cargo +nightly miri test --locked -p zcx --lib -- request:: worker::am_lent::
    # The protocol engine over its in-memory pair: every raw buffer it writes, copies or lends.
    # Without the two randomized tests (hundreds of pairs each; they run natively).
    MIRIFLAGS="-Zmiri-disable-isolation" \
        cargo +nightly miri test --locked -p zcx-engine --lib -- --skip chaos --skip random_frames
    echo "Miri: passed in $(elapsed "$start")"
}

for part in "${parts[@]}"; do
    "run_$part"
done
