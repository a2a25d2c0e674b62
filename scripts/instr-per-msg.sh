#!/usr/bin/env bash
# Software cost per message, zcx against UCX: the instructions the *server* of a latency test
# executes per message (receive, answer, the polls between), counted under callgrind for both
# `zcx perf --server` and the `ucx_perftest` server, each against a native client.
#
# Unlike a timing, the count does not move with this VM's fast and slow cross-core modes, so it
# tells a small change apart from noise. It is a cost, not a latency: stalls (atomic
# read-modify-writes, cache-line transfers) do not show in it, so prove a gain with
# compare-ucx.sh (or ab-perf.sh) as well.
#
# The count is the slope between a run of ITERS and one of 2*ITERS messages, so start-up and
# connection costs cancel. The server runs about 50 times slower under callgrind, so the native
# client's answer is always there by its next poll: the polls that find nothing are few, as
# on a loaded server.
#
#   scripts/instr-per-msg.sh [TEST...]     default: tag_lat am_lat stream_lat (two-sided latency
#                                          tests; also tag_sync_lat. The server of a one-sided
#                                          test only polls, so its count would be its spin)
#   ITERS=20000  TRANSPORT=posix|tcp       (posix: UCX_TLS=posix against zcx over shm)
#   ZCX=path     a zcx binary to measure instead of building this checkout's
#   ROUNDS=1     slopes per side and test; the median is printed (the count of the polls that
#                find nothing moves between runs, so a median of 3 or 5 steadies the figure)
#   ENDPOINTS=N  zcx's many-endpoints mode (`zcx perf --endpoints N`, tag_lat and tag_sync_lat
#                only): the messages go round-robin over N endpoints. ucx_perftest has no such
#                mode, so its column is n/a then.
#   ZCX_B=path   a second zcx binary in UCX's place: the columns are then ZCX (A), ZCX_B (B)
#                and B/A, and each round counts A and B back to back, so a change is told apart
#                from the polls that move between runs. Two builds of one commit read about 1.00.
#
# Output: one line per test: zcx and UCX instructions per message and their ratio. Repeated runs
# agree within about 10 % (the empty polls vary); compare two builds with ZCX_B, in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh
. scripts/lib/perf.sh

ITERS=${ITERS:-20000}
TRANSPORT=${TRANSPORT:-posix}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
UCX_PORT_BASE=${UCX_PORT_BASE:-14700}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
ENDPOINTS=${ENDPOINTS:-1}
ROUNDS=${ROUNDS:-1}
TESTS=${*:-"tag_lat am_lat stream_lat"}
LAT_ITERS=$ITERS LAT_WARMUP=100 LAT_SIZES=8 BW_ITERS=0 BW_WARMUP=0 BW_SIZES=0
case $TRANSPORT in
    posix) UCX_SIDE_TLS=posix ZCX_SIDE_TLS=shm ;;
    tcp) UCX_SIDE_TLS=tcp ZCX_SIDE_TLS=uring ;;
    *) echo "TRANSPORT must be posix or tcp (got $TRANSPORT)" >&2; exit 2 ;;
esac
for test in $TESTS; do
    case $test in
        tag_lat | tag_sync_lat) ;;
        am_lat | stream_lat) [ "$ENDPOINTS" = 1 ] || { echo "ENDPOINTS runs tag_lat and tag_sync_lat only" >&2; exit 2; } ;;
        *) echo "$test: only the two-sided latency tests (tag_lat tag_sync_lat am_lat stream_lat) have a per-message server cost" >&2; exit 2 ;;
    esac
done
check_tests $TESTS

zcx_apt_install valgrind ucx-utils
for tool in valgrind ucx_perftest; do
    command -v "$tool" >/dev/null 2>&1 || { zcx_log "$tool not found (install it as root)"; exit 1; }
done
if [ -z "${ZCX:-}" ]; then
    zcx_require_cargo
    cargo build --release --quiet --bin zcx
    ZCX=$PWD/target/release/zcx
fi

perf_start

# counted OUT: the instruction total callgrind printed in OUT.
counted() {
    awk '/Collected :/ { n = $NF } END { if (n == "") exit 1; print n }' "$1"
}

# server_count SIDE TEST N: runs SIDE's (zcx or ucx) server under callgrind against a native
# client doing N messages of TEST; prints the server's instruction total.
server_count() {
    local side=$1 test=$2 n=$3 server client spid
    port=$((port + 1))
    server=$work/$side-server.$port
    client=$work/$side-client.$port
    local bin=$ZCX
    [ "$side" = zcxb ] && bin=$ZCX_B
    if [ "$side" != ucx ]; then
        run_bg "$server" taskset -c "$SERVER_CPU" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            "$bin" perf --server -p "$port" --server-cpu "$SERVER_CPU" --tls "$ZCX_SIDE_TLS" --timeout 120
    else
        run_bg "$server" env UCX_TLS="$UCX_SIDE_TLS" taskset -c "$SERVER_CPU" \
            valgrind --tool=callgrind --callgrind-out-file=/dev/null ucx_perftest -p "$port"
    fi
    spid=$last_pid
    # Start-up under callgrind takes seconds.
    for _ in $(seq 1 600); do
        kill -0 "$spid" 2>/dev/null || break
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
        sleep 0.05
    done
    if [ "$side" != ucx ]; then
        timeout "$RUN_TIMEOUT" "$bin" perf --client 127.0.0.1 -p "$port" -t "$test" -s 8 -n "$n" -w 100 \
            --client-cpu "$CLIENT_CPU" --tls "$ZCX_SIDE_TLS" --endpoints "$ENDPOINTS" --timeout 120 >"$client" 2>&1 || {
            zcx_log "zcx perf client of $test failed:"; tail -5 "$client" >&2; return 1; }
    else
        env UCX_TLS="$UCX_SIDE_TLS" timeout "$RUN_TIMEOUT" taskset -c "$CLIENT_CPU" \
            ucx_perftest 127.0.0.1 -p "$port" -t "$ucx_test" -s 8 -n "$n" -w 100 -f >"$client" 2>&1 || {
            zcx_log "ucx_perftest client of $ucx_test failed:"; tail -5 "$client" >&2; return 1; }
    fi
    # Both servers exit after their client; callgrind then writes its totals.
    for _ in $(seq 1 200); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$spid" 2>/dev/null; then
        kill -INT "$spid" 2>/dev/null || true
    fi
    wait "$spid" 2>/dev/null || true
    counted "$server" || { zcx_log "no instruction count from the $side server:"; tail -5 "$server" >&2; return 1; }
}

# slope SIDE TEST: instructions per message (slope between ITERS and 2*ITERS messages).
slope() {
    local one two
    one=$(server_count "$1" "$2" "$ITERS") || return 1
    two=$(server_count "$1" "$2" $((2 * ITERS))) || return 1
    echo $(((two - one) / ITERS))
}

# median: the median of the numbers on standard input.
median() {
    sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# per_message SIDE TEST: the median of ROUNDS slopes.
per_message() {
    local slopes=() round
    for round in $(seq 1 "$ROUNDS"); do
        slopes+=("$(slope "$1" "$2")") || return 1
    done
    printf '%s\n' "${slopes[@]}" | median
}

if [ -n "${ZCX_B:-}" ]; then
    printf '%-12s %10s %10s %8s\n' test A B B/A
    for test in $TESTS; do
        spec "$test"
        a_slopes=() b_slopes=()
        for round in $(seq 1 "$ROUNDS"); do
            a_slopes+=("$(slope zcx "$test")") || { a_slopes=(); break; }
            b_slopes+=("$(slope zcxb "$test")") || { b_slopes=(); break; }
        done
        if [ ${#a_slopes[@]} = "$ROUNDS" ] && [ ${#b_slopes[@]} = "$ROUNDS" ]; then
            a=$(printf '%s\n' "${a_slopes[@]}" | median)
            b=$(printf '%s\n' "${b_slopes[@]}" | median)
            printf '%-12s %10s %10s %8s\n' "$test" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
        else
            printf '%-12s %10s %10s %8s\n' "$test" FAILED FAILED n/a
        fi
    done
    exit 0
fi

printf '%-12s %10s %10s %8s\n' test zcx UCX zcx/UCX
for test in $TESTS; do
    spec "$test"
    z=$(per_message zcx "$test") || z=FAILED
    if [ "$ENDPOINTS" = 1 ]; then
        u=$(per_message ucx "$test") || u=FAILED
    else
        u=n/a
    fi
    if [ "$z" = FAILED ] || [ "$u" = FAILED ] || [ "$u" = n/a ]; then
        printf '%-12s %10s %10s %8s\n' "$test" "$z" "$u" n/a
    else
        printf '%-12s %10s %10s %8s\n' "$test" "$z" "$u" "$(awk -v z="$z" -v u="$u" 'BEGIN { printf "%.2f", z / u }')"
    fi
done
