#!/usr/bin/env bash
# The many-endpoints curve: `zcx perf -t tag_lat --endpoints N` (one server, N client endpoints,
# 8-byte tag ping-pong round-robin over them) for each N, over shared memory and over TCP
# (io_uring), written as a CSV and drawn with `zcx plot` (latency per message and resident
# memory per endpoint against N). ucx_perftest has no counterpart: it runs one endpoint per
# thread (-T), each thread with its own worker, so there is no UCX line.
#
#   scripts/scale-curve.sh                 writes docs/scale.csv and docs/scale.svg
#   ENDPOINTS="1 16 256 1024"  TRANSPORTS="shm tcp"
#   ITERS=100000 WARMUP=5000   iterations per run (the warm-up covers every endpoint a few times)
#   ROUNDS=3                   runs per point, interleaved; the CSV has each point's median
#   OUT_CSV=docs/scale.csv OUT_SVG=docs/scale.svg
#   ZCX=path                   a zcx binary to run instead of building this checkout's
#   RUN_TIMEOUT=600            seconds one run may take
#
# Memory per endpoint is what `zcx perf` reports: each side's growth of VmRSS, VmSize and open
# descriptors from before its extra endpoints were opened to after the test, divided by their
# number (no figure at N=1). Both sides run on this host, pinned to CPUs 1 (server) and 0.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

ENDPOINTS=${ENDPOINTS:-"1 16 256 1024"}
TRANSPORTS=${TRANSPORTS:-"shm tcp"}
ITERS=${ITERS:-100000}
WARMUP=${WARMUP:-5000}
ROUNDS=${ROUNDS:-3}
OUT_CSV=${OUT_CSV:-docs/scale.csv}
OUT_SVG=${OUT_SVG:-docs/scale.svg}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}

if [ -z "${ZCX:-}" ]; then
    zcx_require_cargo
    cargo build --release --quiet --bin zcx
    ZCX=$PWD/target/release/zcx
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# field NAME LINE: the value of NAME=... in LINE (empty when absent).
field() {
    tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k { print $2; exit }'
}

# median: the median of the numbers on stdin, one a line.
median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# run TRANSPORT N ROUND: one run; appends its figures to $work/TRANSPORT-N.
run() {
    local transport=$1 n=$2 round=$3 tls out record cost
    case $transport in
        shm) tls=shm ;;
        tcp) tls=uring ;;
        *) echo "unknown transport $transport (shm or tcp)" >&2; exit 2 ;;
    esac
    out=$work/$transport-$n-$round.out
    if ! timeout "$RUN_TIMEOUT" "$ZCX" perf -t tag_lat -n "$ITERS" -w "$WARMUP" --endpoints "$n" --tls "$tls" \
        --timeout 120 >"$out" 2>&1; then
        zcx_log "zcx perf --endpoints $n --tls $tls failed:"
        tail -5 "$out" >&2
        exit 1
    fi
    record=$(grep '^tag_lat ' "$out")
    cost=$(grep '^# per endpoint:' "$out" || true)
    printf '%s %s %s %s %s %s %s %s %s\n' \
        "$(field latency_us "$record")" "$(field p50_us "$record")" "$(field p99_us "$record")" \
        "$(field client_rss_kib "$cost")" "$(field client_vsz_kib "$cost")" "$(field client_fds "$cost")" \
        "$(field server_rss_kib "$cost")" "$(field server_vsz_kib "$cost")" "$(field server_fds "$cost")" \
        >>"$work/$transport-$n"
    zcx_log "$transport N=$n round $round: $record"
}

for round in $(seq 1 "$ROUNDS"); do
    for n in $ENDPOINTS; do
        for transport in $TRANSPORTS; do
            run "$transport" "$n" "$round"
        done
    done
done

mkdir -p "$(dirname "$OUT_CSV")"
{
    echo "transport,endpoints,latency_us,p50_us,p99_us,client_rss_kib,client_vsz_kib,client_fds,server_rss_kib,server_vsz_kib,server_fds"
    for transport in $TRANSPORTS; do
        for n in $ENDPOINTS; do
            row="$transport,$n"
            for column in $(seq 1 9); do
                value=$(awk -v c="$column" '$c != "" { print $c }' "$work/$transport-$n" | median || true)
                row="$row,$value"
            done
            echo "$row"
        done
    done
} >"$OUT_CSV"
"$ZCX" plot --input "$OUT_CSV" --out "$OUT_SVG"
cat "$OUT_CSV"
echo "wrote $OUT_CSV and $OUT_SVG"
