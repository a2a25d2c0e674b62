#!/usr/bin/env bash
# zcx perf against ucx_perftest on this host, test by test, interleaved.
#
# For each test, R rounds of: ucx_perftest (server pinned to CPU 1, client to CPU 0, UCX_TLS set
# by TRANSPORT) and `zcx perf` of the same test (its server child on CPU 1, client on CPU 0,
# ZCX_TLS passed through with --tls), back to back, UCX first in odd rounds and zcx in even
# ones. Prints one table with the median of each side over the rounds and the median of the
# rounds' own zcx/UCX ratios. Interleaving spreads the machine's noise over both sides instead
# of giving one a quiet minute.
#
# What each side does per iteration of each test, and why the pairs below are like for like, is
# in docs/perf-tests.md. Both sides get the same window (operations outstanding): 1 for the
# latency tests, BW_WINDOW for the bandwidth and rate tests (ucx_perftest -O, zcx perf -W).
#
#   test            UCX test       size     compared
#   tag_lat         tag_lat        8        one-way latency, whole-run average (us)
#   tag_sync_lat    tag_sync_lat   8        one-way latency (us)
#   tag_bw          tag_bw         1 MiB    bandwidth (MB/s, MB = 1e6 B; UCX prints MiB/s, converted)
#   put_lat         ucp_put_lat    8        one-way latency (us)
#   put_bw          ucp_put_bw     1 MiB    bandwidth (MB/s)
#   put_rate        ucp_put_bw     8        message rate (puts/s; RATE_ITERS=2000000, RATE_SIZES=8)
#   get_lat         ucp_get        8        latency of one get (us; neither side halves it)
#   get_bw          ucp_get        1 MiB    bandwidth (MB/s)
#   atomic_add_lat  ucp_add        8        time per add, adds streamed, final flush included (us)
#   fadd_lat        ucp_fadd       8        latency of one fetch-and-add (us)
#   cswap_lat       ucp_cswap      8        latency of one compare-and-swap (us)
#   am_lat          ucp_am_lat     8        one-way latency (us)
#   am_bw           ucp_am_bw      1 MiB    bandwidth (MB/s)
#   stream_lat      stream_lat     8        one-way latency (us)
#   stream_bw       stream_bw      1 MiB    bandwidth (MB/s)
#
# Latency tests also get a p50_ratio column: zcx's 50th percentile over UCX's (its "50.0%ile"
# column, taken over the last window of iterations it keeps, not the whole run), the median over
# the rounds like the main ratio. It compares the typical iteration, apart from the pauses this
# shared machine puts into either side's average.
#
# After each side of each round, `zcx probe` measures the placement the pair ran on: the bare
# cross-core round trip between the same two CPUs (two threads passing a cache line), and whether
# the two CPUs are hyperthreads of one core (a compute burst on one slows while the other
# computes). This VM's host usually gives the vCPUs two cores (about 120 ns), sometimes two far
# apart (about 500 ns), and for spells of a few hundred ms two hyperthreads of one core (about
# 45 ns, and each thread gets part of the core's speed): then the pair did not run on two
# cores, and a side whose latency is mostly cache-line transfers (UCX's tag and AM paths) gains
# far more than one whose latency is mostly its own instructions (zcx's). Each round's line
# shows the probe after each side; the table adds host_ns (the median probe of the test),
# shared (rounds with either probe on one core) and apart (the median ratio over the other
# rounds, the comparison on two cores).
#
# Latency ratio > 1: zcx is slower. Bandwidth and message-rate ratio > 1: zcx is faster. A pair that failed to
# run shows FAILED in the table and makes the script exit 1 (after the table).
#
# Besides the table it writes a CSV of the medians (source,test,size,transport,latency_us,
# bandwidth_MBps) and draws it with `zcx plot` (both sides on the same axes).
#
# Environment (defaults keep the whole run within a few minutes on a 2-core machine):
#   TRANSPORT=tcp     tcp: UCX_TLS=tcp vs zcx over io_uring TCP (ZCX_TLS=uring);
#                     posix: UCX_TLS=posix (shared memory) vs ZCX_TLS=shm;
#                     dpdk: runs scripts/compare-dpdk.sh (zcx over DPDK memif vs zcx and UCX over TCP)
#   ZCX_SIDE_TLS      override what zcx perf gets as --tls (default from TRANSPORT)
#   ROUNDS=3          rounds per test
#   LAT_ITERS         iterations of the latency tests: 100000 over posix (20 ms of messages: fewer
#                     leave a run's average to start-up and noise), 10000 over tcp (UCX's tcp get
#                     takes about 1 ms each) (LAT_WARMUP=500)
#   BW_ITERS=500      iterations of the bandwidth tests (BW_WARMUP=50)
#   BW_SIZE=1048576   message size of the bandwidth tests
#   BW_WINDOW=16      operations the bandwidth and rate tests keep outstanding, on both sides
#   LAT_SIZES="8" BW_SIZES="$BW_SIZE"  sizes to run each latency / bandwidth test at (a sweep)
#   SWEEP=1           shorthand for LAT_SIZES="8 64 512 4096 32768 262144" and
#                     BW_SIZES="8192 65536 1048576 4194304": the plot then has curves
#   UCX_PORT_BASE=14300  first TCP port of the ucx_perftest servers (one port per run)
#   SERVER_CPU=1 CLIENT_CPU=0
#   TESTS="tag_lat tag_sync_lat tag_bw put_lat put_bw put_rate get_lat get_bw atomic_add_lat
#          fadd_lat cswap_lat am_lat am_bw stream_lat stream_bw"
#   CSV=target/compare-ucx.csv   the medians as CSV
#   PLOT=target/compare-ucx.svg  the plot (PLOT= draws nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh
. scripts/lib/perf.sh

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
TESTS=${TESTS:-"tag_lat tag_sync_lat tag_bw put_lat put_bw put_rate get_lat get_bw atomic_add_lat fadd_lat cswap_lat am_lat am_bw stream_lat stream_bw"}
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
    # Three sides (zcx over DPDK, zcx over TCP, UCX over TCP): its own script, same helpers.
    dpdk) exec scripts/compare-dpdk.sh ;;
    *) echo "TRANSPORT must be tcp, posix or dpdk (got $TRANSPORT)" >&2; exit 2 ;;
esac

check_tests $TESTS

zcx_require_cargo
zcx_apt_install ucx-utils
command -v ucx_perftest >/dev/null 2>&1 || { zcx_log "ucx_perftest not found (install ucx-utils as root)"; exit 1; }

echo "== building zcx (release)" >&2
cargo build --release --quiet --bin zcx
# Where cargo put it: CARGO_TARGET_DIR when set (relative to the repository), else target/.
case ${CARGO_TARGET_DIR:-target} in
    /*) ZCX=${CARGO_TARGET_DIR}/release/zcx ;;
    *) ZCX=$PWD/${CARGO_TARGET_DIR:-target}/release/zcx ;;
esac

perf_start

echo "== ucx_perftest (UCX_TLS=$UCX_SIDE_TLS) vs zcx perf (--tls $ZCX_SIDE_TLS): $ROUNDS rounds, interleaved; server CPU $SERVER_CPU, client CPU $CLIENT_CPU" >&2
declare -A result_ucx result_zcx result_ratio result_p50_ratio result_apart_ratio result_host result_shared
# One round's run of each side: sets uv (zv) and appends it to the side's values.
# probe: the host's cross-core round trip right now (ns), with " shared" when the two CPUs were
# hyperthreads of one core; n/a when the probe failed. The round trip is also kept in the test's
# host values.
probe() {
    local out ns
    out=$("$ZCX" probe --cpus "$CLIENT_CPU,$SERVER_CPU" 2>/dev/null || true)
    ns=$(field round_trip_ns "$out")
    if [ -z "$ns" ]; then echo n/a; return; fi
    echo "$ns" >>"$host_values"
    if [ "$(field shared_core "$out")" = yes ]; then echo "$ns shared"; else echo "$ns"; fi
}
# host_label PROBE: a probe's result for the round's line.
host_label() {
    case "$1" in
        n/a) echo n/a ;;
        *shared) echo "${1%% *} ns, one core" ;;
        *) echo "$1 ns" ;;
    esac
}
ucx_side() {
    if ucx_run "$UCX_SIDE_TLS" "$ucx_test" "$size" "$iters" "$warmup" "$window"; then
        uv=$(ucx_value "$metric")
        echo "$uv" >>"$ucx_values"
    fi
    uh=$(probe)
}
zcx_side() {
    if zcx_run "$ZCX_SIDE_TLS" "$test" "$size" "$iters" "$warmup" "$window"; then
        zv=$(zcx_value "$metric")
        echo "$zv" >>"$zcx_values"
    fi
    zh=$(probe)
}
failed=0
for test in $TESTS; do
    spec "$test"
    for size in $sizes; do
        key=$test:$size
        ucx_values=$work/$test.$size.ucx
        zcx_values=$work/$test.$size.zcx
        ratio_values=$work/$test.$size.ratio
        p50_ratio_values=$work/$test.$size.p50ratio
        host_values=$work/$test.$size.host
        apart_ratio_values=$work/$test.$size.apartratio
        shared_rounds=0
        : >"$host_values"
        : >"$apart_ratio_values"
        : >"$ucx_values"
        : >"$zcx_values"
        : >"$ratio_values"
        : >"$p50_ratio_values"
        for round in $(seq 1 "$ROUNDS"); do
            uv=FAILED zv=FAILED uh=n/a zh=n/a
            # UCX first in odd rounds, zcx first in even ones: whatever running second does to
            # a figure falls on both sides alike.
            if [ $((round % 2)) -eq 1 ]; then
                ucx_side
                zcx_side
            else
                zcx_side
                ucx_side
            fi
            # The pair of one round ran back to back, in the same mode of the machine: its ratio
            # is the comparison; the median of the rounds' ratios is what the table reports.
            case "$uh $zh" in *shared*) shared_rounds=$((shared_rounds + 1)) ;; esac
            if [ "$uv" != FAILED ] && [ "$zv" != FAILED ]; then
                ratio "$zv" "$uv" >>"$ratio_values"
                # Both probes on two cores: this round's pair compares the transports as meant.
                case "$uh $zh" in
                    *shared* | *n/a*) ;;
                    *) ratio "$zv" "$uv" >>"$apart_ratio_values" ;;
                esac
                # Latency tests also compare the typical iteration (both tools' 50th
                # percentile): the average carries the machine's pauses as much as the transport.
                if [ "$metric" = latency_us ]; then
                    ratio "$(zcx_p50)" "$(ucx_p50)" >>"$p50_ratio_values"
                fi
            fi
            printf '   %-14s %8s round %d/%d: UCX %10s (host %s)  zcx %10s (host %s)\n' \
                "$test" "$size" "$round" "$ROUNDS" "$uv" "$(host_label "$uh")" "$zv" "$(host_label "$zh")" >&2
    done
    result_ucx[$key]=$(median_of "$ucx_values" "$ROUNDS")
    result_zcx[$key]=$(median_of "$zcx_values" "$ROUNDS")
    if [ "${result_ucx[$key]}" = FAILED ] || [ "${result_zcx[$key]}" = FAILED ]; then failed=1; fi
    result_ratio[$key]=$(median <"$ratio_values" || echo n/a)
    result_p50_ratio[$key]=$(median <"$p50_ratio_values" || echo n/a)
    result_apart_ratio[$key]=$(median <"$apart_ratio_values" || echo n/a)
    result_host[$key]=$(median <"$host_values" || echo n/a)
    result_shared[$key]="$shared_rounds/$ROUNDS"
    done
done

echo
printf '%-15s %-13s %8s %-10s %-15s %12s %12s %9s %9s %8s %7s %7s\n' test ucx_test size transport metric UCX zcx zcx/UCX p50_ratio host_ns shared apart
if [ -n "$CSV" ]; then
    mkdir -p "$(dirname "$CSV")"
    echo "source,test,size,transport,latency_us,bandwidth_MBps" >"$CSV"
fi
for test in $TESTS; do
    spec "$test"
    for size in $sizes; do
        u=${result_ucx[$test:$size]}
        z=${result_zcx[$test:$size]}
        ratio=$(ratio_label "${result_ratio[$test:$size]}")
        p50_ratio=$(ratio_label "${result_p50_ratio[$test:$size]}")
        apart=$(ratio_label "${result_apart_ratio[$test:$size]}")
        printf '%-15s %-13s %8s %-10s %-15s %12s %12s %9s %9s %8s %7s %7s\n' "$test" "$ucx_test" "$size" "$TRANSPORT" "$metric" "$u" "$z" "$ratio" "$p50_ratio" \
            "${result_host[$test:$size]}" "${result_shared[$test:$size]}" "$apart"
        if [ -n "$CSV" ]; then
            csv_row "$CSV" ucx "$test" "$size" "$TRANSPORT" "$metric" "$u"
            csv_row "$CSV" zcx "$test" "$size" "$TRANSPORT" "$metric" "$z"
        fi
    done
done
echo "# UCX, zcx: medians of $ROUNDS rounds; zcx/UCX: median of the rounds' own ratios (each round's pair ran"
echo "# back to back, on the placement of the moment, so the host's moves cancel within a round)."
echo "# latency: whole-run average, one-way for ping-pongs (ratio > 1: zcx slower); p50_ratio: the same"
echo "# comparison of the typical iteration (50th percentiles; UCX's over its last window of iterations);"
echo "# bandwidth: MB = 1e6 B, and message rate: puts/s (ratio > 1: zcx faster). UCX $(ucx_version) with UCX_TLS=$UCX_SIDE_TLS; zcx with ZCX_TLS=$ZCX_SIDE_TLS."
echo "# Both sides kept ${BW_WINDOW:-16} operations outstanding in bandwidth and rate tests, 1 in latency tests; what each"
echo "# side does per iteration: docs/perf-tests.md."
echo "# host_ns: median of the test's cross-core round trips (zcx probe, after each side); shared: rounds in which"
echo "# a probe found the two CPUs on one core (hyperthreads); apart: median ratio over the other rounds."
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
