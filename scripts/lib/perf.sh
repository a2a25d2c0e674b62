# Helpers of the comparison scripts (compare-ucx.sh, compare-dpdk.sh): sourced, not run.
#
# They read these globals, set by the script: LAT_ITERS LAT_WARMUP LAT_SIZES BW_ITERS BW_WARMUP
# BW_SIZES BW_WINDOW (spec; BW_WINDOW defaults to 16), SERVER_CPU CLIENT_CPU RUN_TIMEOUT
# UCX_PORT_BASE, ZCX (the zcx binary, for zcx_run), and UCX_PERFTEST if set (the ucx_perftest
# ucx_run starts; default: the one on PATH).
# perf_start sets up the work directory and the cleanup of every process started.

# spec TEST: sets ucx_test, sizes, iters, warmup, metric and window for TEST; fails for a test
# with no ucx_perftest counterpart. window is the operations each side keeps outstanding, given
# to both (ucx_perftest -O, zcx perf -W): 1 for latency tests (both tools' default), BW_WINDOW
# for bandwidth and rate tests, where ucx_perftest's own defaults differ from test to test (32
# for tag_bw, ucp_put_bw and ucp_am_bw, 1 for ucp_get and stream_bw) and zcx perf's is 16.
# docs/perf-tests.md says what each side does per iteration.
spec() {
    metric=latency_us iters=$LAT_ITERS warmup=$LAT_WARMUP sizes=$LAT_SIZES window=1
    case $1 in
        tag_lat | tag_sync_lat | stream_lat) ucx_test=$1 ;;
        put_lat) ucx_test=ucp_put_lat ;;
        get_lat) ucx_test=ucp_get ;;
        atomic_add_lat) ucx_test=ucp_add ;;
        fadd_lat) ucx_test=ucp_fadd ;;
        cswap_lat) ucx_test=ucp_cswap ;;
        am_lat) ucx_test=ucp_am_lat ;;
        tag_bw | stream_bw) ucx_test=$1 ;;
        put_bw) ucx_test=ucp_put_bw ;;
        get_bw) ucx_test=ucp_get ;;
        am_bw) ucx_test=ucp_am_bw ;;
        put_rate) ucx_test=ucp_put_bw ;;
        *) return 1 ;;
    esac
    case $1 in
        *_bw) metric=bandwidth_MBps iters=$BW_ITERS warmup=$BW_WARMUP sizes=$BW_SIZES window=${BW_WINDOW:-16} ;;
        # Message rate: put_bw at small sizes, millions of puts (RATE_ITERS, RATE_SIZES).
        *_rate)
            metric=msg_rate iters=${RATE_ITERS:-2000000} warmup=${RATE_WARMUP:-10000} sizes=${RATE_SIZES:-8}
            window=${BW_WINDOW:-16}
            ;;
    esac
}
KNOWN_TESTS="tag_lat tag_sync_lat tag_bw put_lat put_bw put_rate get_lat get_bw atomic_add_lat fadd_lat cswap_lat am_lat am_bw stream_lat stream_bw"

# check_tests TEST...: exits 2 naming the first test with no ucx_perftest counterpart.
check_tests() {
    local test
    for test in "$@"; do
        spec "$test" || { echo "no ucx_perftest counterpart for $test (known: $KNOWN_TESTS)" >&2; exit 2; }
    done
}

# perf_start: makes $work and arranges for every process started by run_bg to be stopped, by PID,
# and $work removed when the script exits.
perf_start() {
    work=$(mktemp -d)
    started=()
    port=$UCX_PORT_BASE
    trap perf_cleanup EXIT
    trap 'exit 130' INT TERM
}

perf_cleanup() {
    local pid
    for pid in "${started[@]}"; do
        kill -0 "$pid" 2>/dev/null && kill "$pid" 2>/dev/null || true
    done
    for pid in "${started[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}

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

# ucx_run UCX_TLS TEST SIZE ITERS WARMUP [WINDOW]: sets $ucx_line to the final line of
# ucx_perftest -f (numbers only); WINDOW, when given, is its -O (outstanding operations; without
# it, the test's own default). (Not run in a subshell: the PIDs it starts and the port counter
# must stay in this shell.)
ucx_run() {
    local tls=$1 test=$2 size=$3 iters=$4 warmup=$5 server client spid cpid
    local outstanding=()
    [ -n "${6:-}" ] && outstanding=(-O "$6")
    port=$((port + 1))
    server=$work/ucx-server.$port
    client=$work/ucx-client.$port
    run_bg "$server" env UCX_TLS="$tls" taskset -c "$SERVER_CPU" "${UCX_PERFTEST:-ucx_perftest}" -p "$port"
    spid=$last_pid
    if ! wait_listen "$port" "$spid"; then
        zcx_log "ucx_perftest server on port $port did not start:"
        cat "$server" >&2
        return 1
    fi
    run_bg "$client" env UCX_TLS="$tls" timeout "$RUN_TIMEOUT" taskset -c "$CLIENT_CPU" \
        "${UCX_PERFTEST:-ucx_perftest}" 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -w "$warmup" \
        "${outstanding[@]}" -f
    cpid=$last_pid
    if ! wait "$cpid"; then
        zcx_log "ucx_perftest $test failed:"
        tail -5 "$client" >&2
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
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

# ucx_value METRIC: the value of METRIC in $ucx_line, in zcx's units.
ucx_value() {
    if [ "$1" = bandwidth_MBps ]; then
        # ucx_perftest's MB/s is MiB/s (column 6: overall); zcx's is 1e6 B/s.
        awk '{ printf "%.2f", $6 * 1.048576 }' <<<"$ucx_line"
    elif [ "$1" = msg_rate ]; then
        # Column 8: overall messages per second.
        awk '{ print $8 }' <<<"$ucx_line"
    else
        # Column 4: overall average latency (one-way for ping-pongs), like zcx's avg_us.
        awk '{ print $4 }' <<<"$ucx_line"
    fi
}

# ucx_p50: the typical (50th percentile) latency in $ucx_line, in us. -f prints iterations, then
# the 50th percentile, the average of the last report's window, the overall average, ...
ucx_p50() { awk '{ print $2 }' <<<"$ucx_line"; }

# zcx_p50: the 50th percentile latency in $zcx_line, in us.
zcx_p50() { field p50_us "$zcx_line"; }

# zcx_run ZCX_TLS TEST SIZE ITERS WARMUP [WINDOW]: sets $zcx_line to zcx perf's result line of
# TEST; WINDOW, when given, is its -W (bandwidth tests' outstanding operations; latency tests
# always run one at a time).
zcx_run() {
    local tls=$1 test=$2 size=$3 iters=$4 warmup=$5 out pid
    local window=()
    [ -n "${6:-}" ] && window=(-W "$6")
    # put_rate is zcx perf's put_bw, read for its msg_rate.
    [ "$test" = put_rate ] && test=put_bw
    out=$work/zcx.$test.$RANDOM
    run_bg "$out" timeout "$RUN_TIMEOUT" "$ZCX" perf -t "$test" -s "$size" -n "$iters" -w "$warmup" "${window[@]}" \
        --client-cpu "$CLIENT_CPU" --server-cpu "$SERVER_CPU" --tls "$tls"
    pid=$last_pid
    if ! wait "$pid"; then
        zcx_log "zcx perf --tls $tls $test failed:"
        tail -5 "$out" >&2
        return 1
    fi
    zcx_line=$(grep "^$test " "$out") || {
        zcx_log "no $test line from zcx perf:"
        cat "$out" >&2
        return 1
    }
}

# zcx_value METRIC: the value of METRIC in $zcx_line (avg_us for latency: the whole-run average).
zcx_value() {
    case $1 in
        bandwidth_MBps | msg_rate) field "$1" "$zcx_line" ;;
        *) field avg_us "$zcx_line" ;;
    esac
}

# field KEY LINE: the value of KEY=value in LINE.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; m = int((NR + 1) / 2); print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

# ratio A B: A/B with 4 decimals, nothing when either is not a positive number.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.4f\n", a / b }'; }

# median_of FILE ROUNDS: the median of FILE's values, FAILED unless there is one per round (a
# side that failed in any round failed the pair: its median would hide it).
median_of() {
    if [ "$(wc -l <"$1")" -eq "$2" ]; then median <"$1"; else echo FAILED; fi
}

# ratio_label VALUE: a median ratio with 2 decimals, or n/a.
ratio_label() { awk -v r="$1" 'BEGIN { if (r + 0 > 0) printf "%.2f", r; else print "n/a" }'; }

# csv_row FILE SOURCE TEST SIZE TRANSPORT METRIC VALUE: one CSV record (nothing for FAILED).
csv_row() {
    # The CSV (and its plot) has latency and bandwidth columns only.
    [ "$7" = FAILED ] || [ "$6" = msg_rate ] && return 0
    if [ "$6" = latency_us ]; then echo "$2,$3,$4,$5,$7," >>"$1"; else echo "$2,$3,$4,$5,,$7" >>"$1"; fi
}

ucx_version() { ucx_info -v 2>/dev/null | sed -n 's/^# Version *//p' | head -1; }
