#!/usr/bin/env bash
# Two zcx builds against each other: `zcx perf` of one test with binary A, then with binary B,
# back to back, ROUNDS times, and the median of the rounds' own B/A ratios. This VM flips between
# fast and slow cross-core modes within seconds; a pair that ran back to back mostly shares a
# mode, so the per-round ratio is far steadier than either side's own figure.
#
#   scripts/ab-perf.sh A B [TEST]       TEST default am_lat; A and B are zcx binaries
#   ROUNDS=9 SIZE=8 ITERS=100000 WARMUP=10000 TLS=shm
#
# Build the baseline in a worktree, e.g.:
#   git worktree add /tmp/base HEAD~1 && (cd /tmp/base && cargo build --release --bin zcx)
#   scripts/ab-perf.sh /tmp/base/target/release/zcx target/release/zcx tag_lat
#
# Latency tests compare avg_us (B/A < 1: B is faster); bandwidth tests bandwidth_MBps and
# put_bw's msg_rate with METRIC=msg_rate (B/A > 1: B is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/perf.sh

if [ $# -lt 2 ]; then
    sed -n '2,16p' "$0" >&2
    exit 2
fi
A=$1 B=$2 TEST=${3:-am_lat}
ROUNDS=${ROUNDS:-9}
TLS=${TLS:-shm}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
case $TEST in
    *_bw) SIZE=${SIZE:-1m} ITERS=${ITERS:-500} WARMUP=${WARMUP:-50} METRIC=${METRIC:-bandwidth_MBps} ;;
    *) SIZE=${SIZE:-8} ITERS=${ITERS:-100000} WARMUP=${WARMUP:-10000} METRIC=${METRIC:-avg_us} ;;
esac
for bin in "$A" "$B"; do
    [ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
done

# one BIN: the metric of one zcx perf run of TEST with BIN.
one() {
    local line
    line=$("$1" perf -t "$TEST" -s "$SIZE" -n "$ITERS" -w "$WARMUP" \
        --client-cpu "$CLIENT_CPU" --server-cpu "$SERVER_CPU" --tls "$TLS" 2>&1 | grep "^$TEST ") || {
        echo "zcx perf $TEST failed with $1" >&2
        return 1
    }
    field "$METRIC" "$line"
}

ratios=$(mktemp)
trap 'rm -f "$ratios"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    a=$(one "$A")
    b=$(one "$B")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
    echo "$ratio" >>"$ratios"
    printf 'round %d/%d: A %s  B %s  B/A %s\n' "$round" "$ROUNDS" "$a" "$b" "$ratio"
done
printf '%s %s: median B/A of %d rounds: %s\n' "$TEST" "$METRIC" "$ROUNDS" "$(median_of "$ratios" "$ROUNDS")"
