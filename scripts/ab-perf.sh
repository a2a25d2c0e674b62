#!/usr/bin/env bash
# Two zcx builds or settings against each other: `zcx perf` of one test with A and with B, back
# to back, ROUNDS times, and the median of the rounds' own B/A ratios. This VM flips between
# fast and slow cross-core modes within seconds; a pair that ran back to back mostly shares a
# mode, so the per-round ratio is far steadier than either side's own figure. The pair runs
# A first in odd rounds and B first in even ones, so an order effect cancels in the median.
#
#   scripts/ab-perf.sh A B [TEST]       TEST default am_lat
#   ROUNDS=9 SIZE=8 ITERS=100000 WARMUP=10000 TLS=shm
#
# A and B are each a zcx binary, optionally preceded by VAR=value words for its environment
# (both of its processes get them). Two settings of one binary, e.g.:
#   scripts/ab-perf.sh "ZCX_SPIN_WAIT=pause target/release/zcx" "ZCX_SPIN_WAIT=lfence target/release/zcx" put_lat
# compare the settings alone. Two builds of the same behaviour differ by up to 5-7% in latency
# from where the linker happened to place the hot code, consistently in both orders, so a code
# change needs a larger effect than that (or an instruction count) to be told apart.
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
    sed -n '2,23p' "$0" >&2
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
# check_side SPEC: SPEC is VAR=value words, then an executable.
check_side() {
    local -a words
    read -r -a words <<<"$1"
    [ ${#words[@]} -gt 0 ] || { echo "empty side" >&2; exit 2; }
    local last=$((${#words[@]} - 1)) i
    for ((i = 0; i < last; i++)); do
        [[ ${words[i]} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "not VAR=value: ${words[i]} in: $1" >&2; exit 2; }
    done
    [ -x "${words[last]}" ] || { echo "not an executable: ${words[last]}" >&2; exit 2; }
}
check_side "$A"
check_side "$B"

# one SPEC: the metric of one zcx perf run of TEST with SPEC (its environment and binary).
one() {
    local line
    local -a words
    read -r -a words <<<"$1"
    line=$(env "${words[@]}" perf -t "$TEST" -s "$SIZE" -n "$ITERS" -w "$WARMUP" \
        --client-cpu "$CLIENT_CPU" --server-cpu "$SERVER_CPU" --tls "$TLS" 2>&1 | grep "^$TEST ") || {
        echo "zcx perf $TEST failed with $1" >&2
        return 1
    }
    field "$METRIC" "$line"
}

ratios=$(mktemp)
trap 'rm -f "$ratios"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then
        a=$(one "$A")
        b=$(one "$B")
    else
        b=$(one "$B")
        a=$(one "$A")
    fi
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
    echo "$ratio" >>"$ratios"
    printf 'round %d/%d: A %s  B %s  B/A %s\n' "$round" "$ROUNDS" "$a" "$b" "$ratio"
done
printf '%s %s: median B/A of %d rounds: %s\n' "$TEST" "$METRIC" "$ROUNDS" "$(median_of "$ratios" "$ROUNDS")"
