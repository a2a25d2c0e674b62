#!/usr/bin/env bash
# zcx perf against ucx_perftest on this host, test by test, interleaved.
#
# For each test, R rounds of: ucx_perftest (server pinned to CPU 1, client to CPU 0, UCX_TLS set
# by TRANSPORT), then `zcx perf` of the same test (its server child on CPU 1, client on CPU 0,
# ZCX_TLS passed through with --tls). Prints one table with the median of each side over the
# rounds and the median of the rounds' own zcx/UCX ratios. Interleaving spreads the machine's noise over both sides instead
# of giving one a quiet minute.
#
#   test            UCX test       size     compared
#   tag_lat         tag_lat        8        one-way latency, whole-run average (us)
#   tag_sync_lat    tag_sync_lat   8        one-way latency (us)
#   tag_bw          tag_bw         1 MiB    bandwidth (MB/s, MB = 1e6 B; UCX prints MiB/s, converted)
#   put_lat         ucp_put_lat    8        one-way latency (us)
#   put_bw          ucp_put_bw     1 MiB    bandwidth (MB/s)
#   get_lat         ucp_get        8        latency of one get (us; neither side halves it)
#   get_bw          ucp_get        1 MiB    bandwidth (MB/s)
#   atomic_add_lat  ucp_add        8        time per add (us). Not like for like: UCX streams
#                                           non-fetching adds, zcx waits for each acknowledgement
#   fadd_lat        ucp_fadd       8        latency of one fetch-and-add (us)
#   cswap_lat       ucp_cswap      8        latency of one compare-and-swap (us)
#   am_lat          ucp_am_lat     8        one-way latency (us)
#   am_bw           ucp_am_bw      1 MiB    bandwidth (MB/s)
#   stream_lat      stream_lat     8        one-way latency (us)
#   stream_bw       stream_bw      1 MiB    bandwidth (MB/s)
#
# Latency ratio > 1: zcx is slower. Bandwidth ratio > 1: zcx is faster. A pair that failed to
# run shows FAILED in the table and makes the script exit 1 (after the table).
#
# Besides the table it writes a CSV of the medians (source,test,size,transport,latency_us,
# bandwidth_MBps) and draws it with `zcx plot` (both sides on the same axes).
#
# Environment (defaults keep the whole run within a few minutes on a 2-core machine):
#   TRANSPORT=tcp     tcp: UCX_TLS=tcp vs zcx over io_uring TCP (ZCX_TLS=uring);
#                     posix: UCX_TLS=posix (shared memory) vs ZCX_TLS=shm
#   ZCX_SIDE_TLS      override what zcx perf gets as --tls (default from TRANSPORT)
#   ROUNDS=3          rounds per test
#   LAT_ITERS         iterations of the latency tests: 100000 over posix (20 ms of messages: fewer
#                     leave a run's average to start-up and noise), 10000 over tcp (UCX's tcp get
#                     takes about 1 ms each) (LAT_WARMUP=500)
#   BW_ITERS=500      iterations of the bandwidth tests (BW_WARMUP=50)
#   BW_SIZE=1048576   message size of the bandwidth tests
#   LAT_SIZES="8" BW_SIZES="$BW_SIZE"  sizes to run each latency / bandwidth test at (a sweep)
#   SWEEP=1           shorthand for LAT_SIZES="8 64 512 4096 32768 262144" and
#                     BW_SIZES="8192 65536 1048576 4194304": the plot then has curves
#   UCX_PORT_BASE=14300  first TCP port of the ucx_perftest servers (one port per run)
#   SERVER_CPU=1 CLIENT_CPU=0
#   TESTS="tag_lat tag_sync_lat tag_bw put_lat put_bw get_lat get_bw fadd_lat cswap_lat
#          am_lat am_bw stream_lat stream_bw"   (atomic_add_lat too, on request)
#   CSV=target/compare-ucx.csv   the medians as CSV
#   PLOT=target/compare-ucx.svg  the plot (PLOT= draws nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

TRANSPORT=${TRANSPORT:-tcp}
ROUNDS=${ROUNDS:-3}
if [ "$TRANSPORT" = posix ]; then LAT_ITERS=${LAT_ITERS:-100000}; else LAT_ITERS=${LAT_ITERS:-10000}; fi
LAT_WARMUP=${LAT_WARMUP:-500}
BW_ITERS=${BW_ITERS:-500}
BW_WARMUP=${BW_WARMUP:-50}
BW_SIZE=${BW_SIZE:-1048576}
UCX_PORT_BASE=${UCX_PORT_BASE:-14300}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
TESTS=${TESTS:-"tag_lat tag_sync_lat tag_bw put_lat put_bw get_lat get_bw fadd_lat cswap_lat am_lat am_bw stream_lat stream_bw"}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
if [ "${SWEEP:-0}" = 1 ]; then
    LAT_SIZES=${LAT_SIZES:-"8 64 512 4096 32768 262144"}
    BW_SIZES=${BW_SIZES:-"8192 65536 1048576 4194304"}
fi
LAT_SIZES=${LAT_SIZES:-8}
BW_SIZES=${BW_SIZES:-$BW_SIZE}
CSV=${CSV-target/compare-ucx.csv}
PLOT=${PLOT-target/compare-ucx.svg}

case $TRANSPORT in
    tcp) UCX_SIDE_TLS=tcp; ZCX_SIDE_TLS=${ZCX_SIDE_TLS:-uring} ;;
    posix) UCX_SIDE_TLS=posix; ZCX_SIDE_TLS=${ZCX_SIDE_TLS:-shm} ;;
    *) echo "TRANSPORT must be tcp or posix (got $TRANSPORT)" >&2; exit 2 ;;
esac

# spec TEST: sets ucx_test, sizes, iters, warmup, metric for TEST; fails for a test with no
# ucx_perftest counterpart.
spec() {
    metric=latency_us iters=$LAT_ITERS warmup=$LAT_WARMUP sizes=$LAT_SIZES
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
        *) return 1 ;;
    esac
    case $1 in
        *_bw) metric=bandwidth_MBps iters=$BW_ITERS warmup=$BW_WARMUP sizes=$BW_SIZES ;;
    esac
}
for test in $TESTS; do
    spec "$test" || { echo "no ucx_perftest counterpart for $test (known: tag_lat tag_sync_lat tag_bw put_lat put_bw get_lat get_bw atomic_add_lat fadd_lat cswap_lat am_lat am_bw stream_lat stream_bw)" >&2; exit 2; }
done

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
    run_bg "$server" env UCX_TLS="$UCX_SIDE_TLS" taskset -c "$SERVER_CPU" ucx_perftest -p "$port"
    spid=$last_pid
    if ! wait_listen "$port" "$spid"; then
        zcx_log "ucx_perftest server on port $port did not start:"
        cat "$server" >&2
        return 1
    fi
    run_bg "$client" env UCX_TLS="$UCX_SIDE_TLS" timeout "$RUN_TIMEOUT" taskset -c "$CLIENT_CPU" \
        ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -w "$warmup" -f
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

# zcx_run TEST SIZE ITERS WARMUP: sets $zcx_line to zcx perf's result line of TEST.
zcx_run() {
    local test=$1 size=$2 iters=$3 warmup=$4 out pid
    out=$work/zcx.$test.$RANDOM
    run_bg "$out" timeout "$RUN_TIMEOUT" "$ZCX" perf -t "$test" -s "$size" -n "$iters" -w "$warmup" \
        --client-cpu "$CLIENT_CPU" --server-cpu "$SERVER_CPU" --tls "$ZCX_SIDE_TLS"
    pid=$last_pid
    if ! wait "$pid"; then
        zcx_log "zcx perf $test failed:"
        tail -5 "$out" >&2
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

echo "== ucx_perftest (UCX_TLS=$UCX_SIDE_TLS) vs zcx perf (--tls $ZCX_SIDE_TLS): $ROUNDS rounds, interleaved; server CPU $SERVER_CPU, client CPU $CLIENT_CPU" >&2
declare -A result_ucx result_zcx result_ratio
failed=0
for test in $TESTS; do
    spec "$test"
    for size in $sizes; do
        key=$test:$size
        ucx_values=$work/$test.$size.ucx
        zcx_values=$work/$test.$size.zcx
        ratio_values=$work/$test.$size.ratio
        : >"$ucx_values"
        : >"$zcx_values"
        : >"$ratio_values"
        for round in $(seq 1 "$ROUNDS"); do
            uv=FAILED zv=FAILED
            if ucx_run "$ucx_test" "$size" "$iters" "$warmup"; then
                if [ "$metric" = bandwidth_MBps ]; then
                    # ucx_perftest's MB/s is MiB/s (column 6: overall); zcx's is 1e6 B/s.
                    uv=$(awk '{ printf "%.2f", $6 * 1.048576 }' <<<"$ucx_line")
                else
                    # Column 4: overall average latency (one-way for ping-pongs), like zcx's avg_us.
                    uv=$(awk '{ print $4 }' <<<"$ucx_line")
                fi
                echo "$uv" >>"$ucx_values"
            fi
            if zcx_run "$test" "$size" "$iters" "$warmup"; then
                if [ "$metric" = bandwidth_MBps ]; then
                    zv=$(field bandwidth_MBps "$zcx_line")
                else
                    zv=$(field avg_us "$zcx_line")
                fi
                echo "$zv" >>"$zcx_values"
            fi
            # The pair of one round ran back to back, in the same mode of the machine: its ratio
            # is the comparison; the median of the rounds' ratios is what the table reports.
            if [ "$uv" != FAILED ] && [ "$zv" != FAILED ]; then
                awk -v z="$zv" -v u="$uv" 'BEGIN { if (u + 0 > 0 && z + 0 > 0) printf "%.4f\n", z / u }' >>"$ratio_values"
            fi
            printf '   %-14s %8s round %d/%d: UCX %10s  zcx %10s\n' "$test" "$size" "$round" "$ROUNDS" "$uv" "$zv" >&2
    done
    # A side that failed in any round failed the pair: its median would hide it.
    if [ "$(wc -l <"$ucx_values")" -eq "$ROUNDS" ]; then result_ucx[$key]=$(median <"$ucx_values"); else result_ucx[$key]=FAILED; failed=1; fi
    if [ "$(wc -l <"$zcx_values")" -eq "$ROUNDS" ]; then result_zcx[$key]=$(median <"$zcx_values"); else result_zcx[$key]=FAILED; failed=1; fi
    result_ratio[$key]=$(median <"$ratio_values" || echo n/a)
    done
done

echo
printf '%-15s %-13s %8s %-10s %-15s %12s %12s %9s\n' test ucx_test size transport metric UCX zcx zcx/UCX
if [ -n "$CSV" ]; then
    mkdir -p "$(dirname "$CSV")"
    echo "source,test,size,transport,latency_us,bandwidth_MBps" >"$CSV"
fi
for test in $TESTS; do
    spec "$test"
    for size in $sizes; do
        u=${result_ucx[$test:$size]}
        z=${result_zcx[$test:$size]}
        ratio=$(awk -v r="${result_ratio[$test:$size]}" 'BEGIN { if (r + 0 > 0) printf "%.2f", r; else print "n/a" }')
        printf '%-15s %-13s %8s %-10s %-15s %12s %12s %9s\n' "$test" "$ucx_test" "$size" "$TRANSPORT" "$metric" "$u" "$z" "$ratio"
        if [ -n "$CSV" ]; then
            for side in ucx zcx; do
                v=$u
                [ $side = zcx ] && v=$z
                [ "$v" = FAILED ] && continue
                if [ "$metric" = latency_us ]; then
                    echo "$side,$test,$size,$TRANSPORT,$v," >>"$CSV"
                else
                    echo "$side,$test,$size,$TRANSPORT,,$v" >>"$CSV"
                fi
            done
        fi
    done
done
echo "# UCX, zcx: medians of $ROUNDS rounds; zcx/UCX: median of the rounds' own ratios (each round's pair ran"
echo "# back to back, so the machine's slow and fast modes cancel within a round)."
echo "# latency: whole-run average, one-way for ping-pongs (ratio > 1: zcx slower);"
echo "# bandwidth: MB = 1e6 B (ratio > 1: zcx faster). UCX $(ucx_info -v 2>/dev/null | sed -n 's/^# Version *//p' | head -1) with UCX_TLS=$UCX_SIDE_TLS; zcx with ZCX_TLS=$ZCX_SIDE_TLS."
if [ -n "$CSV" ]; then
    echo "# medians written to $CSV"
    if [ -n "$PLOT" ]; then
        mkdir -p "$(dirname "$PLOT")"
        if "$ZCX" plot --input "$CSV" --out "$PLOT"; then echo "# plot written to $PLOT"; else failed=1; fi
    fi
fi
if [ "$failed" != 0 ]; then
    echo "# some pairs FAILED to run (see the messages above)" >&2
    exit 1
fi
