#!/usr/bin/env bash
# zcx's libucp.so.0 against UCX's, under the same unmodified ucx_perftest.
#
# One binary (UCX_PERFTEST, /usr/bin/ucx_perftest of ucx-utils), run once with UCX's libucp first
# on LD_LIBRARY_PATH and once with zcx's (scripts/capi/build.sh, a release build), back to back,
# R rounds per case: UCX first in odd rounds, zcx first in even ones, so that whatever running
# second does to a figure falls on both sides alike. Over shared memory and over TCP, with the
# server pinned to SERVER_CPU and the client to CLIENT_CPU (as compare-ucx.sh). Prints a table
# with the median of each side over the rounds and the median of the rounds' own zcx/UCX ratios.
# Latency cases also get p50_ratio: the same ratio of the typical iteration (ucx_perftest's 50th
# percentile, over its last window of iterations), which the pauses a busy machine puts into
# either side's average leave alone.
#
#   scripts/compare-capi.sh
#   ROUNDS=3 TRANSPORTS=tcp CASES="tag_lat:8 tag_bw:1048576" scripts/compare-capi.sh
#   # both sides on UCX's library, to see what the noise alone gives (ratios near 1.00):
#   ZCX_CAPI_LIBDIR=/usr/lib/x86_64-linux-gnu scripts/compare-capi.sh
#
# The test loops are one binary's on both sides, so each case does the same work on each (see
# docs/perf-tests.md for the one difference, in zcx's disfavour).
#
# Latency (us, the whole-run average, one-way for ping-pongs): ratio > 1 means zcx is slower.
# Bandwidth (MB/s, MB = 1e6 B): ratio > 1 means zcx is faster. Both sides get the same UCX_TLS,
# and ZCX_TLS set to the same value, so the comparison holds whichever the library reads. A case
# that failed on either side shows FAILED and makes the script exit 1 (after the table).
#
# Environment:
#   ROUNDS=5            rounds (pairs of runs) per case
#   TRANSPORTS="shm tcp"  UCX_TLS values to compare on: shm (shared memory, both processes on
#                       this host) and tcp (over loopback)
#   CASES               test:size pairs, default: tag_lat, ucp_put_lat, stream_lat, ucp_am_lat
#                       at 8 B and 64 KiB; tag_bw, ucp_put_bw at 8 B and 1 MiB; ucp_get at 8 B
#                       (latency) and 1 MiB (bandwidth); ucp_fadd at 8 B; also ucp_swap, ucp_cswap
#                       (latency) and ucp_add (a rate, as bandwidth)
#   LAT_ITERS           iterations of a latency case: 20000 over shm, 5000 over tcp (UCX's get
#                       over TCP takes about 1 ms each) (LAT_WARMUP=500)
#   RATE_ITERS=100000   iterations of a bandwidth case below 64 KiB (RATE_WARMUP=1000)
#   BW_ITERS=500        iterations of a bandwidth case from 64 KiB (BW_WARMUP=50)
#   ZCX_CAPI_LIBDIR     zcx's side: a directory holding libucp.so.0 (default: build it)
#   UCX_LIBDIR          UCX's side (default: where ucx_perftest finds libucp.so.0 on its own)
#   UCX_PERFTEST=/usr/bin/ucx_perftest
#   UCX_PORT_BASE=14800 first TCP port of the ucx_perftest servers (one port per run)
#   SERVER_CPU=1 CLIENT_CPU=0 RUN_TIMEOUT=120
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh
. scripts/lib/perf.sh

ROUNDS=${ROUNDS:-5}
TRANSPORTS=${TRANSPORTS:-"shm tcp"}
CASES=${CASES:-"tag_lat:8 tag_lat:65536 tag_bw:8 tag_bw:1048576 ucp_put_lat:8 ucp_put_lat:65536
    ucp_put_bw:8 ucp_put_bw:1048576 ucp_get:8 ucp_get:1048576 ucp_fadd:8 stream_lat:8 stream_lat:65536
    ucp_am_lat:8 ucp_am_lat:65536"}
LAT_WARMUP=${LAT_WARMUP:-500}
RATE_ITERS=${RATE_ITERS:-100000}
RATE_WARMUP=${RATE_WARMUP:-1000}
BW_ITERS=${BW_ITERS:-500}
BW_WARMUP=${BW_WARMUP:-50}
UCX_PERFTEST=${UCX_PERFTEST:-/usr/bin/ucx_perftest}
UCX_PORT_BASE=${UCX_PORT_BASE:-14800}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}

[ -x "$UCX_PERFTEST" ] || { zcx_log "$UCX_PERFTEST not found (apt-get install ucx-utils)"; exit 1; }
for tls in $TRANSPORTS; do
    case $tls in shm | tcp) ;; *) echo "TRANSPORTS: shm or tcp (got $tls)" >&2; exit 2 ;; esac
done

# case_spec TEST SIZE: sets metric, iters, warmup; fails for a test this script does not read.
case_spec() {
    case $1 in
        tag_lat | tag_sync_lat | ucp_put_lat | ucp_fadd | ucp_swap | ucp_cswap | stream_lat | ucp_am_lat)
            metric=latency_us iters=$lat_iters warmup=$LAT_WARMUP ;;
        # A get is timed one by one: latency when small, bandwidth when bulk.
        ucp_get) if [ "$2" -ge 65536 ]; then metric=bandwidth_MBps; else metric=latency_us; fi
            iters=$lat_iters warmup=$LAT_WARMUP ;;
        tag_bw | ucp_put_bw | ucp_add | ucp_am_bw | stream_bw) metric=bandwidth_MBps iters=$RATE_ITERS warmup=$RATE_WARMUP ;;
        *) return 1 ;;
    esac
    if [ "$metric" = bandwidth_MBps ] && [ "$2" -ge 65536 ]; then iters=$BW_ITERS warmup=$BW_WARMUP; fi
}
lat_iters=1
for c in $CASES; do
    case_spec "${c%%:*}" "${c#*:}" || { echo "CASES: no such case $c (test:size)" >&2; exit 2; }
done

# libucp_of DIR: the libucp.so.0 ucx_perftest loads with DIR first on LD_LIBRARY_PATH, as a real
# path.
libucp_of() {
    local lib
    lib=$(LD_LIBRARY_PATH=$1 ldd "$UCX_PERFTEST" | awk '$1 == "libucp.so.0" { print $3 }')
    [ -n "$lib" ] && readlink -f "$lib"
}

if [ -n "${ZCX_CAPI_LIBDIR:-}" ]; then
    zcx_dir=$ZCX_CAPI_LIBDIR
else
    zcx_require_cargo
    echo "== building zcx's libucp (release)" >&2
    zcx_dir=$(scripts/capi/build.sh | tail -n 1)
fi
if [ -z "${UCX_LIBDIR:-}" ]; then
    UCX_LIBDIR=$(dirname "$(env -u LD_LIBRARY_PATH ldd "$UCX_PERFTEST" | awk '$1 == "libucp.so.0" { print $3 }')")
fi
# Each side must load the library it is named after, not whatever else LD_LIBRARY_PATH holds.
for side in "zcx:$zcx_dir" "UCX:$UCX_LIBDIR"; do
    dir=${side#*:}
    want=$(readlink -f "$dir/libucp.so.0" || true)
    got=$(libucp_of "$dir" || true)
    if [ -z "$want" ] || [ "$got" != "$want" ]; then
        echo "${side%%:*} side: ucx_perftest loads '${got:-nothing}', not $dir/libucp.so.0" >&2
        exit 1
    fi
done
zcx_lib=$(libucp_of "$zcx_dir")
ucx_lib=$(libucp_of "$UCX_LIBDIR")
[ "$zcx_lib" = "$ucx_lib" ] && zcx_log "both sides load $ucx_lib: the ratios show the noise alone"

perf_start

# side LIBDIR: one run of the case with LIBDIR's libucp; appends its value to $values and sets v
# (and p, the 50th percentile latency).
side() {
    v=FAILED p=
    if LD_LIBRARY_PATH=$1 ZCX_TLS=$tls ucx_run "$tls" "$test" "$size" "$iters" "$warmup"; then
        v=$(ucx_value "$metric")
        p=$(ucx_p50)
        echo "$v" >>"$values"
    fi
}

echo "== $UCX_PERFTEST: zcx ($zcx_lib) vs UCX ($ucx_lib), $ROUNDS rounds interleaved; server CPU $SERVER_CPU, client CPU $CLIENT_CPU" >&2
declare -A result_ucx result_zcx result_ratio result_p50_ratio
failed=0
for tls in $TRANSPORTS; do
    if [ "$tls" = shm ]; then lat_iters=${LAT_ITERS:-20000}; else lat_iters=${LAT_ITERS:-5000}; fi
    for c in $CASES; do
        test=${c%%:*} size=${c#*:}
        case_spec "$test" "$size"
        key=$tls:$c
        ucx_values=$work/$tls.$test.$size.ucx
        zcx_values=$work/$tls.$test.$size.zcx
        ratio_values=$work/$tls.$test.$size.ratio
        p50_ratio_values=$work/$tls.$test.$size.p50ratio
        : >"$ucx_values"
        : >"$zcx_values"
        : >"$ratio_values"
        : >"$p50_ratio_values"
        for round in $(seq 1 "$ROUNDS"); do
            if [ $((round % 2)) -eq 1 ]; then
                values=$ucx_values side "$UCX_LIBDIR"; uv=$v up=$p
                values=$zcx_values side "$zcx_dir"; zv=$v zp=$p
            else
                values=$zcx_values side "$zcx_dir"; zv=$v zp=$p
                values=$ucx_values side "$UCX_LIBDIR"; uv=$v up=$p
            fi
            if [ "$uv" != FAILED ] && [ "$zv" != FAILED ]; then
                ratio "$zv" "$uv" >>"$ratio_values"
                if [ "$metric" = latency_us ]; then ratio "$zp" "$up" >>"$p50_ratio_values"; fi
            fi
            printf '   %-4s %-12s %8s round %d/%d: UCX %12s  zcx %12s\n' \
                "$tls" "$test" "$size" "$round" "$ROUNDS" "$uv" "$zv" >&2
        done
        result_ucx[$key]=$(median_of "$ucx_values" "$ROUNDS")
        result_zcx[$key]=$(median_of "$zcx_values" "$ROUNDS")
        if [ "${result_ucx[$key]}" = FAILED ] || [ "${result_zcx[$key]}" = FAILED ]; then failed=1; fi
        result_ratio[$key]=$(median <"$ratio_values" || echo n/a)
        result_p50_ratio[$key]=$(median <"$p50_ratio_values" || echo n/a)
    done
done

echo
printf '%-12s %8s %-4s %-33s %12s %12s %8s %9s\n' test size tls "metric (which is better)" UCX zcx zcx/UCX p50_ratio
for tls in $TRANSPORTS; do
    for c in $CASES; do
        test=${c%%:*} size=${c#*:}
        lat_iters=1
        case_spec "$test" "$size"
        if [ "$metric" = latency_us ]; then label="latency us (lower is better)"; else label="bandwidth MB/s (higher is better)"; fi
        printf '%-12s %8s %-4s %-33s %12s %12s %8s %9s\n' "$test" "$size" "$tls" "$label" \
            "${result_ucx[$tls:$c]}" "${result_zcx[$tls:$c]}" "$(ratio_label "${result_ratio[$tls:$c]}")" \
            "$(ratio_label "${result_p50_ratio[$tls:$c]}")"
    done
done
echo "# UCX, zcx: medians of $ROUNDS rounds; zcx/UCX: median of the rounds' own ratios (each round's pair"
echo "# ran back to back). Latency: whole-run average, one-way for ping-pongs; bandwidth: MB = 1e6 B."
echo "# p50_ratio: the same for the 50th percentile latency (the typical iteration; latency cases only)."
echo "# zcx is better where a latency ratio is below 1 and where a bandwidth ratio is above 1."
echo "# One $UCX_PERFTEST (UCX $(ucx_version)); zcx: $zcx_lib; UCX: $ucx_lib."
if [ "$failed" != 0 ]; then
    echo "# some cases FAILED to run (see the messages above)" >&2
    exit 1
fi
