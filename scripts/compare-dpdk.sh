#!/usr/bin/env bash
# zcx perf over DPDK (a net_memif pair between two processes) next to zcx over its io_uring TCP
# transport and ucx_perftest over UCX_TLS=tcp, on this host, in the same run, test by test,
# interleaved: each round runs the three back to back (UCX tcp, zcx tcp, zcx dpdk), servers
# pinned to SERVER_CPU and clients to CLIENT_CPU. Prints the median of each side over the rounds
# and the medians of the rounds' own ratios dpdk/zcx-tcp and dpdk/UCX-tcp (a round's three runs
# saw the same mode of the machine). The same as `TRANSPORT=dpdk scripts/compare-ucx.sh`.
#
#   latency tests (8 B):     one-way latency, whole-run average (us); ratio < 1: DPDK faster
#   bandwidth tests (1 MiB): MB/s (MB = 1e6 B; UCX's MiB/s converted); ratio > 1: DPDK faster
#
# `zcx perf --tls dpdk` sets up the memif pair itself (each side its own EAL, file prefix and
# lcore on its CPU; see cli/src/perf/memif.rs) and checks that the endpoint runs on dpdk. zcx is
# built with the `dpdk` feature (Debian's libdpdk-dev 22.11, installed when missing and root).
#
# Besides the table it writes a CSV of the medians (source ucx-tcp, zcx-tcp, zcx-dpdk) and draws
# it with `zcx plot`. A side that failed to run shows FAILED and makes the script exit 1.
#
# Environment:
#   ROUNDS=3          rounds per test
#   TESTS="tag_lat put_lat am_lat stream_lat tag_bw put_bw"   (any test compare-ucx.sh knows)
#   LAT_ITERS=10000 LAT_WARMUP=500 BW_ITERS=500 BW_WARMUP=50 BW_SIZE=1048576
#   LAT_SIZES="8" BW_SIZES="$BW_SIZE"   sizes of the latency / bandwidth tests
#   BW_WINDOW=16      operations the bandwidth tests keep outstanding, on every side
#   UCX_PORT_BASE=14300 SERVER_CPU=1 CLIENT_CPU=0 RUN_TIMEOUT=120
#   CSV=target/compare-dpdk.csv PLOT=target/compare-dpdk.svg (PLOT= draws nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh
. scripts/lib/perf.sh

ROUNDS=${ROUNDS:-3}
LAT_ITERS=${LAT_ITERS:-10000}
LAT_WARMUP=${LAT_WARMUP:-500}
BW_ITERS=${BW_ITERS:-500}
BW_WARMUP=${BW_WARMUP:-50}
BW_SIZE=${BW_SIZE:-1048576}
LAT_SIZES=${LAT_SIZES:-8}
BW_SIZES=${BW_SIZES:-$BW_SIZE}
UCX_PORT_BASE=${UCX_PORT_BASE:-14300}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
TESTS=${TESTS:-"tag_lat put_lat am_lat stream_lat tag_bw put_bw"}
CSV=${CSV-target/compare-dpdk.csv}
PLOT=${PLOT-target/compare-dpdk.svg}
# The three sides (see side_run).
SIDES="ucx-tcp zcx-tcp zcx-dpdk"

check_tests $TESTS

zcx_require_cargo
zcx_apt_install ucx-utils libdpdk-dev dpdk pkg-config
command -v ucx_perftest >/dev/null 2>&1 || { zcx_log "ucx_perftest not found (install ucx-utils as root)"; exit 1; }
pkg-config --exists libdpdk 2>/dev/null || { zcx_log "DPDK not found (install libdpdk-dev as root)"; exit 1; }
# The memif pair runs EAL with --no-huge and --no-shconf: no hugepages, nothing left in /dev/hugepages.
[ -n "${ZCX_DPDK_EAL_ARGS:-}" ] && zcx_log "ZCX_DPDK_EAL_ARGS is set: zcx perf uses it instead of its memif pair"

echo "== building zcx (release, feature dpdk)" >&2
ZCX_REQUIRE_DPDK=1 cargo build --release --quiet --bin zcx --features zcx-cli/dpdk
# Where cargo put it: CARGO_TARGET_DIR when set (relative to the repository), else target/.
case ${CARGO_TARGET_DIR:-target} in
    /*) ZCX=${CARGO_TARGET_DIR}/release/zcx ;;
    *) ZCX=$PWD/${CARGO_TARGET_DIR:-target}/release/zcx ;;
esac

perf_start

# side_run SIDE TEST UCX_TEST SIZE ITERS WARMUP METRIC: prints SIDE's value, fails if it failed.
side_run() {
    local side=$1 test=$2 ucx_test=$3 size=$4 iters=$5 warmup=$6 metric=$7
    case $side in
        ucx-tcp) ucx_run tcp "$ucx_test" "$size" "$iters" "$warmup" "$window" && ucx_value "$metric" ;;
        zcx-tcp) zcx_run uring "$test" "$size" "$iters" "$warmup" "$window" && zcx_value "$metric" ;;
        zcx-dpdk) zcx_run dpdk "$test" "$size" "$iters" "$warmup" "$window" && zcx_value "$metric" ;;
    esac
}

echo "== zcx perf --tls dpdk (memif) vs zcx perf --tls uring vs ucx_perftest (UCX_TLS=tcp): $ROUNDS rounds, interleaved; server CPU $SERVER_CPU, client CPU $CLIENT_CPU" >&2
declare -A result result_ratio
failed=0
for test in $TESTS; do
    spec "$test"
    for size in $sizes; do
        key=$test:$size
        for f in $SIDES vs-zcx-tcp vs-ucx-tcp; do : >"$work/$key.$f"; done
        for round in $(seq 1 "$ROUNDS"); do
            declare -A v=()
            for side in $SIDES; do
                v[$side]=FAILED
                # Not in a subshell: the PIDs and the port counter must stay in this shell.
                if side_run "$side" "$test" "$ucx_test" "$size" "$iters" "$warmup" "$metric" >"$work/value"; then
                    v[$side]=$(cat "$work/value")
                    echo "${v[$side]}" >>"$work/$key.$side"
                fi
            done
            # Each round's three ran back to back: their ratios are the comparison.
            ratio "${v[zcx-dpdk]}" "${v[zcx-tcp]}" >>"$work/$key.vs-zcx-tcp"
            ratio "${v[zcx-dpdk]}" "${v[ucx-tcp]}" >>"$work/$key.vs-ucx-tcp"
            printf '   %-12s %8s round %d/%d: UCX-tcp %10s  zcx-tcp %10s  zcx-dpdk %10s\n' "$test" "$size" \
                "$round" "$ROUNDS" "${v[ucx-tcp]}" "${v[zcx-tcp]}" "${v[zcx-dpdk]}" >&2
        done
        for side in $SIDES; do
            result[$key.$side]=$(median_of "$work/$key.$side" "$ROUNDS")
            if [ "${result[$key.$side]}" = FAILED ]; then failed=1; fi
        done
        result_ratio[$key.zcx]=$(median <"$work/$key.vs-zcx-tcp" || echo n/a)
        result_ratio[$key.ucx]=$(median <"$work/$key.vs-ucx-tcp" || echo n/a)
    done
done

echo
printf '%-12s %-12s %8s %-15s %10s %10s %10s %13s %13s\n' test ucx_test size metric UCX-tcp zcx-tcp zcx-dpdk dpdk/zcx-tcp dpdk/UCX-tcp
if [ -n "$CSV" ]; then
    mkdir -p "$(dirname "$CSV")"
    echo "source,test,size,transport,latency_us,bandwidth_MBps" >"$CSV"
fi
for test in $TESTS; do
    spec "$test"
    for size in $sizes; do
        key=$test:$size
        printf '%-12s %-12s %8s %-15s %10s %10s %10s %13s %13s\n' "$test" "$ucx_test" "$size" "$metric" \
            "${result[$key.ucx-tcp]}" "${result[$key.zcx-tcp]}" "${result[$key.zcx-dpdk]}" \
            "$(ratio_label "${result_ratio[$key.zcx]}")" "$(ratio_label "${result_ratio[$key.ucx]}")"
        if [ -n "$CSV" ]; then
            for side in $SIDES; do
                csv_row "$CSV" "$side" "$test" "$size" "${side#*-}" "$metric" "${result[$key.$side]}"
            done
        fi
    done
done
echo "# UCX-tcp, zcx-tcp, zcx-dpdk: medians of $ROUNDS rounds; ratios: medians of the rounds' own ratios"
echo "# (each round's three runs were back to back, so the machine's slow and fast modes cancel within a round)."
echo "# latency: whole-run average, one-way for ping-pongs (ratio < 1: DPDK faster);"
echo "# bandwidth: MB = 1e6 B (ratio > 1: DPDK faster). UCX $(ucx_version) with UCX_TLS=tcp; zcx-tcp: --tls uring;"
echo "# zcx-dpdk: --tls dpdk over a net_memif pair (copying; jumbo datagrams of MTU ${ZCX_DPDK_MTU:-9000}, see cli/src/perf/memif.rs)."
if [ -n "$CSV" ]; then
    echo "# medians written to $CSV"
    if [ -n "$PLOT" ]; then
        mkdir -p "$(dirname "$PLOT")"
        if "$ZCX" plot --input "$CSV" --out "$PLOT"; then echo "# plot written to $PLOT"; else failed=1; fi
    fi
fi
if [ "$failed" != 0 ]; then
    echo "# some sides FAILED to run (see the messages above)" >&2
    exit 1
fi
