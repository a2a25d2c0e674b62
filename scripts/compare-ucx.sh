#!/usr/bin/env bash
# zcx perf against ucx_perftest (UCX over TCP) on this host, test by test, interleaved.
#
# For each test, R rounds of: ucx_perftest (server pinned to CPU 1, client to CPU 0, UCX_TLS=tcp),
# then `zcx perf` of the same test (its server child on CPU 1, client on CPU 0). Prints the median
# of each side over the rounds and the ratio zcx/UCX. Interleaving spreads the machine's noise
# over both sides instead of giving one a quiet minute.
#
#   test      UCX test      size     compared
#   tag_lat   tag_lat       8        one-way latency, whole-run average (us)
#   tag_bw    tag_bw        1 MiB    bandwidth (MB/s, MB = 1e6 B; UCX prints MiB/s, converted)
#   put_lat   ucp_put_lat   8        one-way latency, whole-run average (us)
#   am_lat    ucp_am_lat    8        one-way latency, whole-run average (us)
#
# Latency ratio > 1: zcx is slower. Bandwidth ratio > 1: zcx is faster.
#
# Environment (defaults keep the whole run under ~5 minutes on a 2-core machine):
#   ROUNDS=5          rounds per test
#   LAT_ITERS=20000   iterations of the latency tests (LAT_WARMUP=1000)
#   BW_ITERS=1000     iterations of the bandwidth test (BW_WARMUP=50)
#   BW_SIZE=1048576   message size of the bandwidth test
#   UCX_PORT_BASE=14300  first TCP port of the ucx_perftest servers (one port per run)
#   SERVER_CPU=1 CLIENT_CPU=0
#   TESTS="tag_lat tag_bw put_lat am_lat"
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

ROUNDS=${ROUNDS:-5}
LAT_ITERS=${LAT_ITERS:-20000}
LAT_WARMUP=${LAT_WARMUP:-1000}
BW_ITERS=${BW_ITERS:-1000}
BW_WARMUP=${BW_WARMUP:-50}
BW_SIZE=${BW_SIZE:-1048576}
UCX_PORT_BASE=${UCX_PORT_BASE:-14300}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
TESTS=${TESTS:-"tag_lat tag_bw put_lat am_lat"}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}

zcx_require_cargo
zcx_apt_install ucx-utils
command -v ucx_perftest >/dev/null 2>&1 || { zcx_log "ucx_perftest not found (install ucx-utils as root)"; exit 1; }

echo "== building zcx (release)" >&2
cargo build --release --quiet --bin zcx
ZCX=$PWD/target/release/zcx

work=$(mktemp -d)
# Only the processes this script started, by PID.
started=()
cleanup() {
    local pid
    for pid in "${started[@]}"; do
        kill -0 "$pid" 2>/dev/null && kill "$pid" 2>/dev/null || true
    done
    for pid in "${started[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_bg OUT CMD...: starts CMD in the background with its output in OUT; sets $last_pid.
run_bg() {
    local out=$1
    shift
    "$@" >"$out" 2>&1 &
    last_pid=$!
    started+=("$last_pid")
}

# wait_listen PORT PID: waits until something listens on PORT (and PID still runs).
wait_listen() {
    local port=$1 pid=$2 i
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 1
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

port=$UCX_PORT_BASE

# ucx_run TEST SIZE ITERS WARMUP: sets $ucx_line to the final line of ucx_perftest -f (numbers only).
# (Not run in a subshell: the PIDs it starts and the port counter must stay in this shell.)
ucx_run() {
    local test=$1 size=$2 iters=$3 warmup=$4 server client spid cpid
    port=$((port + 1))
    server=$work/ucx-server.$port
    client=$work/ucx-client.$port
    run_bg "$server" env UCX_TLS=tcp taskset -c "$SERVER_CPU" ucx_perftest -p "$port"
    spid=$last_pid
    if ! wait_listen "$port" "$spid"; then
        zcx_log "ucx_perftest server on port $port did not start:"
        cat "$server" >&2
        return 1
    fi
    run_bg "$client" env UCX_TLS=tcp timeout "$RUN_TIMEOUT" taskset -c "$CLIENT_CPU" \
        ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -w "$warmup" -f
    cpid=$last_pid
    if ! wait "$cpid"; then
        zcx_log "ucx_perftest $test failed:"
        cat "$client" >&2
        return 1
    fi
    # The server exits after its client; give it a moment, then stop it.
    for _ in $(seq 1 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    # The final summary: the last line that is only numbers (iterations first).
    ucx_line=$(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { line = $0 } END { if (line == "") exit 1; print line }' "$client") || {
        zcx_log "no summary line from ucx_perftest $test:"
        cat "$client" >&2
        return 1
    }
}

# zcx_run TEST SIZE ITERS WARMUP: sets $zcx_line to zcx perf's result line of TEST.
zcx_run() {
    local test=$1 size=$2 iters=$3 warmup=$4 out pid
    out=$work/zcx.$test.$RANDOM
    run_bg "$out" timeout "$RUN_TIMEOUT" "$ZCX" perf -t "$test" -s "$size" -n "$iters" -w "$warmup" \
        --client-cpu "$CLIENT_CPU" --server-cpu "$SERVER_CPU"
    pid=$last_pid
    if ! wait "$pid"; then
        zcx_log "zcx perf $test failed:"
        cat "$out" >&2
        return 1
    fi
    zcx_line=$(grep "^$test " "$out") || {
        zcx_log "no $test line from zcx perf:"
        cat "$out" >&2
        return 1
    }
}

# field KEY LINE: the value of KEY=value in LINE.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

echo "== ucx_perftest (UCX_TLS=tcp) vs zcx perf: $ROUNDS rounds, interleaved; server CPU $SERVER_CPU, client CPU $CLIENT_CPU" >&2
declare -A result_ucx result_zcx
for test in $TESTS; do
    case $test in
        tag_lat) ucx_test=tag_lat size=8 iters=$LAT_ITERS warmup=$LAT_WARMUP ;;
        tag_bw) ucx_test=tag_bw size=$BW_SIZE iters=$BW_ITERS warmup=$BW_WARMUP ;;
        put_lat) ucx_test=ucp_put_lat size=8 iters=$LAT_ITERS warmup=$LAT_WARMUP ;;
        am_lat) ucx_test=ucp_am_lat size=8 iters=$LAT_ITERS warmup=$LAT_WARMUP ;;
        *) zcx_log "unknown test $test (known: tag_lat tag_bw put_lat am_lat)"; exit 1 ;;
    esac
    ucx_values=$work/$test.ucx
    zcx_values=$work/$test.zcx
    : >"$ucx_values"
    : >"$zcx_values"
    for round in $(seq 1 "$ROUNDS"); do
        ucx_run "$ucx_test" "$size" "$iters" "$warmup"
        zcx_run "$test" "$size" "$iters" "$warmup"
        u=$ucx_line
        z=$zcx_line
        if [ "$test" = tag_bw ]; then
            # ucx_perftest's MB/s is MiB/s (column 6: overall); zcx's is 1e6 B/s.
            uv=$(awk '{ printf "%.2f", $6 * 1.048576 }' <<<"$u")
            zv=$(field bandwidth_MBps "$z")
        else
            # Column 4: overall average one-way latency, like zcx's avg_us.
            uv=$(awk '{ print $4 }' <<<"$u")
            zv=$(field avg_us "$z")
        fi
        echo "$uv" >>"$ucx_values"
        echo "$zv" >>"$zcx_values"
        printf '   %-8s round %d/%d: UCX %10s  zcx %10s\n' "$test" "$round" "$ROUNDS" "$uv" "$zv" >&2
    done
    result_ucx[$test]=$(median <"$ucx_values")
    result_zcx[$test]=$(median <"$zcx_values")
done

echo
printf '%-8s %-12s %8s  %-15s %12s %12s %9s\n' test ucx_test size metric UCX_tcp zcx zcx/UCX
for test in $TESTS; do
    case $test in
        tag_lat) ucx_test=tag_lat size=8 metric=latency_us ;;
        tag_bw) ucx_test=tag_bw size=$BW_SIZE metric=bandwidth_MBps ;;
        put_lat) ucx_test=ucp_put_lat size=8 metric=latency_us ;;
        am_lat) ucx_test=ucp_am_lat size=8 metric=latency_us ;;
    esac
    u=${result_ucx[$test]}
    z=${result_zcx[$test]}
    ratio=$(awk -v z="$z" -v u="$u" 'BEGIN { if (u > 0) printf "%.2f", z / u; else print "n/a" }')
    printf '%-8s %-12s %8s  %-15s %12s %12s %9s\n' "$test" "$ucx_test" "$size" "$metric" "$u" "$z" "$ratio"
done
echo "# medians of $ROUNDS rounds; latency: one-way whole-run average (ratio > 1: zcx slower);"
echo "# bandwidth: MB = 1e6 B (ratio > 1: zcx faster). UCX 1.13 over TCP (UCX_TLS=tcp)."
