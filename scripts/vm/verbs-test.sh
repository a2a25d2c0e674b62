#!/usr/bin/env bash
# zcx's verbs tests on Soft-RoCE: inside a run.sh guest, one rxe device on each of two virtio-net
# NICs wired together (rxe0 on eth0, rxe1 on eth1), the verbs test binaries run against them.
#
#   scripts/vm/verbs-test.sh
#
# Steps, in order (`ZCX_VERBS_STEPS="qp endpoints"` runs only those):
#   info       `zcx info`'s listing of the devices
#   devices    the device layer (dataplane/tests/verbs_devices.rs: ports, GIDs, MTU, inline limit)
#   qp         queue pairs between the two devices (dataplane/tests/verbs_qp.rs: RDMA write, read,
#              atomics, send/receive, forged keys)
#   transport  the transport (dataplane/tests/verbs_transport.rs: frames under credit flow
#              control, puts, gets and atomics as RDMA, refusals, a forged rkey)
#   endpoints  the API between two processes, one per device (api/tests/verbs_endpoints.rs: every
#              operation, arm/wait, a forged key, a peer killed mid-put and mid-rendezvous)
#   perf       `zcx perf --tls verbs --validate`, all 14 tests, server on rxe1, client on rxe0
#   memory     memory registration (api/tests/verbs_memory.rs), as root and as an unprivileged
#              user with a 64 KiB RLIMIT_MEMLOCK
#   compare    only when named: ucx_perftest over rc_verbs beside zcx perf over verbs (release
#              build; emulated NICs, so the figures are indicative only)
# Builds the binaries on the host, then boots one guest. Exits non-zero if a test fails; prints
# `skipped: <reason>` and exits 0 when QEMU is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."

# Inside the guest (run.sh's command).
if [ "${1:-}" = --in-guest ]; then
    devices_test=$2 zcx=$3 memory_test=$4 qp_test=$5 transport_test=$6 endpoints_test=$7
    ip link set eth0 up
    ip link set eth1 up
    rdma link add rxe0 type rxe netdev eth0
    rdma link add rxe1 type rxe netdev eth1
    # The link-local GIDs appear once IPv6 duplicate-address detection is done (about 2 s).
    for _ in $(seq 1 50); do
        if [ -n "$(ip -6 addr show dev eth0 scope link -tentative)" ] &&
            [ -n "$(ip -6 addr show dev eth1 scope link -tentative)" ]; then
            break
        fi
        sleep 0.2
    done
    rdma link show
    # `ZCX_VERBS_STEPS` (space-separated step names) runs only those steps; all by default.
    step() { [ -z "${ZCX_VERBS_STEPS:-}" ] || [[ " $ZCX_VERBS_STEPS " == *" $1 "* ]]; }
    export ZCX_VERBS_EXPECT=rxe0,rxe1
    if step info; then
        echo "== zcx info (verbs)"
        "$zcx" info | sed -n '/#   verbs/,/^#$/p'
    fi
    if step devices; then
        echo "== dataplane verbs device test"
        "$devices_test" --nocapture --test-threads=1
    fi
    if step qp; then
        echo "== dataplane verbs queue-pair test"
        "$qp_test" --nocapture --test-threads=1
    fi
    if step transport; then
        echo "== dataplane verbs transport test"
        "$transport_test" --nocapture --test-threads=1
    fi
    if step endpoints; then
        echo "== api endpoints over verbs, one process on each device"
        "$endpoints_test" --nocapture --test-threads=1
    fi
    if step perf; then
        echo "== zcx perf over verbs: every test, validated, server on rxe1, client on rxe0"
        export ZCX_VERBS_GID_INDEX=0 ZCX_ATOMIC_MODE=device ZCX_HUGEPAGES=no
        # Emulated NICs move a few MB/s: latency tests at 8 bytes, bandwidth tests at 256 KiB.
        for tests in tag_lat,tag_sync_lat,put_lat,get_lat,atomic_add_lat,fadd_lat,cswap_lat,am_lat,stream_lat \
            tag_bw,put_bw,get_bw,am_bw,stream_bw; do
            ZCX_VERBS_DEVICE=rxe1:1 "$zcx" perf --server --tls verbs -p 13337 --no-pin --timeout 60 &
            server=$!
            sleep 1
            ZCX_VERBS_DEVICE=rxe0:1 "$zcx" perf --client 127.0.0.1 --tls verbs -p 13337 --no-pin --timeout 60 \
                --validate -t "$tests" -s 8,262144 -n 50 -w 10 -b 25
            wait "$server"
        done
    fi
    if [[ " ${ZCX_VERBS_STEPS:-} " == *" compare "* ]]; then
        # Only when asked (TCG timings are indicative only): ucx_perftest over rc_verbs and zcx
        # perf over verbs, the same tests between the same two devices, one after the other.
        echo "== side by side: ucx_perftest (rc_verbs) and zcx perf (verbs), server on rxe1, client on rxe0"
        export UCX_TLS=rc_verbs,ud_verbs UCX_IB_GID_INDEX=0 UCX_RC_VERBS_RETRY_COUNT=6
        export ZCX_VERBS_GID_INDEX=0 ZCX_ATOMIC_MODE=device ZCX_HUGEPAGES=no
        for pair in tag_lat:tag_lat:8 ucp_put_lat:put_lat:8 ucp_get:get_lat:8 ucp_fadd:fadd_lat:8 \
            tag_bw:tag_bw:262144; do
            IFS=: read -r ucx_test zcx_test size <<<"$pair"
            iters=1000
            [ "$size" = 8 ] || iters=200
            UCX_NET_DEVICES=rxe1:1 ucx_perftest -p 13338 >/dev/null 2>&1 &
            server=$!
            sleep 1
            echo "ucx_perftest $ucx_test size=$size:"
            UCX_NET_DEVICES=rxe0:1 ucx_perftest 127.0.0.1 -p 13338 -t "$ucx_test" -s "$size" -n "$iters" 2>&1 |
                grep -E '^ *(Final|#|\|)' | tail -n 3
            wait "$server" || true
            ZCX_VERBS_DEVICE=rxe1:1 "$zcx" perf --server --tls verbs -p 13337 --no-pin --timeout 60 >/dev/null &
            server=$!
            sleep 1
            ZCX_VERBS_DEVICE=rxe0:1 "$zcx" perf --client 127.0.0.1 --tls verbs -p 13337 --no-pin --timeout 60 \
                -t "$zcx_test" -s "$size" -n "$iters" -w 100 | grep -v '^#'
            wait "$server"
        done
    fi
    if step memory; then
        echo "== api verbs memory test"
        "$memory_test" --skip registering_past_the_memlock_limit --nocapture --test-threads=1
        echo "== api verbs memory test, unprivileged, RLIMIT_MEMLOCK 64 KiB"
        # No udev in the guest: the verbs device files are root's alone until opened up.
        chmod 666 /dev/infiniband/*
        ZCX_VERBS_MEMLOCK_TEST=1 HOME=/tmp setpriv --reuid=65534 --regid=65534 \
            --clear-groups --inh-caps=-all --bounding-set=-all -- bash -c 'ulimit -l 64 && exec "$0" "$@"' \
            "$memory_test" registering_past_the_memlock_limit --nocapture --test-threads=1
    fi
    exit 0
fi

if ! command -v qemu-system-x86_64 >/dev/null; then
    echo "skipped: VM verbs test: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    exit 0
fi

echo "== building the verbs tests for the guest"
devices_test=$(cargo test -p zcx-dataplane --features verbs --test verbs_devices --no-run --locked --message-format=json |
    grep '"name":"verbs_devices"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$devices_test" ] || { echo "verbs-test.sh: no test binary found" >&2; exit 1; }
qp_test=$(cargo test -p zcx-dataplane --features verbs --test verbs_qp --no-run --locked --message-format=json |
    grep '"name":"verbs_qp"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$qp_test" ] || { echo "verbs-test.sh: no queue-pair test binary found" >&2; exit 1; }
transport_test=$(cargo test -p zcx-dataplane --features verbs --test verbs_transport --no-run --locked --message-format=json |
    grep '"name":"verbs_transport"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$transport_test" ] || { echo "verbs-test.sh: no transport test binary found" >&2; exit 1; }
memory_test=$(cargo test -p zcx --features verbs --test verbs_memory --no-run --locked --message-format=json |
    grep '"name":"verbs_memory"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$memory_test" ] || { echo "verbs-test.sh: no memory test binary found" >&2; exit 1; }
endpoints_test=$(cargo test -p zcx --features verbs --test verbs_endpoints --no-run --locked --message-format=json |
    grep '"name":"verbs_endpoints"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$endpoints_test" ] || { echo "verbs-test.sh: no endpoints test binary found" >&2; exit 1; }
if [[ " ${ZCX_VERBS_STEPS:-} " == *" compare "* ]]; then
    # Timings: the optimised build.
    cargo build --release -p zcx-cli --features verbs --bin zcx --locked --quiet
    zcx=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/zcx
else
    cargo build -p zcx-cli --features verbs --bin zcx --locked --quiet
    zcx=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/zcx
fi

echo "== verbs in a VM: rxe0 and rxe1 on two wired virtio-net NICs"
start=$(date +%s)
if "$here/run.sh" --nics 2 --driver kernel --module rdma_rxe --timeout "${ZCX_VM_TIMEOUT:-600}" \
    --log "${ZCX_VM_CACHE:-target/vm}/console-verbs.log" \
    --env ZCX_REQUIRE_VERBS=1 --env RUST_BACKTRACE=1 --env "ZCX_VERBS_STEPS=${ZCX_VERBS_STEPS:-}" \
    --env "RUST_LOG=${RUST_LOG:-warn}" -- "$here/verbs-test.sh" --in-guest "$devices_test" "$zcx" "$memory_test" "$qp_test" "$transport_test" "$endpoints_test"; then
    echo "VM verbs test: passed in $(($(date +%s) - start))s"
else
    status=$?
    echo "VM verbs test: FAILED (exit $status) after $(($(date +%s) - start))s"
    exit 1
fi
