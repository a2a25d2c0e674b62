#!/usr/bin/env bash
# zcx's two-process DPDK endpoint test (api/tests/dpdk_endpoints.rs) on real PCI NICs: inside a
# run.sh guest, a server and a client process each drive their own virtio-net NIC with DPDK's
# virtio PMD, the two NICs wired together by QEMU.
#
#   scripts/vm/dpdk-test.sh [uio|vfio]...      (default: uio vfio, one guest each)
#
# Builds the test binary on the host, then boots a guest per driver. Exits non-zero if any run
# fails; prints `skipped: <reason>` and exits 0 when QEMU is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."

# Inside the guest (run.sh's command): ZCX_VM_NICS holds the two NICs' PCI addresses.
if [ "${1:-}" = --in-guest ]; then
    bin=$2
    read -r server_nic client_nic <<<"$ZCX_VM_NICS"
    eal() {
        # Hugepages (run.sh reserves them) rather than --no-huge: with uio the NIC DMAs to physical
        # addresses, so DPDK's memory must be pinned and physically contiguous per page.
        echo "-a $1 --in-memory --file-prefix=zcx-vm-$2 --lcores=0@(0-1) --no-telemetry --log-level=lib.eal:warning"
    }
    export ZCX_DPDK_EP_SERVER_EAL ZCX_DPDK_EP_SERVER_PORT ZCX_DPDK_EP_CLIENT_EAL ZCX_DPDK_EP_CLIENT_PORT
    ZCX_DPDK_EP_SERVER_EAL=$(eal "$server_nic" server) ZCX_DPDK_EP_SERVER_PORT=$server_nic
    ZCX_DPDK_EP_CLIENT_EAL=$(eal "$client_nic" client) ZCX_DPDK_EP_CLIENT_PORT=$client_nic
    exec "$bin" endpoints_over_dpdk_between_two_processes --exact --nocapture --test-threads=1
fi

if ! command -v qemu-system-x86_64 >/dev/null; then
    echo "skipped: VM DPDK test: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    exit 0
fi
drivers=("$@")
[ ${#drivers[@]} -gt 0 ] || drivers=(uio vfio)

echo "== building the DPDK endpoint test for the guest"
bin=$(cargo test -p zcx --features dpdk --test dpdk_endpoints --no-run --locked --message-format=json |
    grep '"name":"dpdk_endpoints"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bin" ] || { echo "dpdk-test.sh: no test binary found" >&2; exit 1; }

failed=()
for driver in "${drivers[@]}"; do
    echo "== DPDK endpoints in a VM: two virtio-net NICs on $driver"
    start=$(date +%s)
    if "$here/run.sh" --nics 2 --driver "$driver" --hugepages 256 --timeout "${ZCX_VM_TIMEOUT:-600}" \
        --log "${ZCX_VM_CACHE:-target/vm}/console-dpdk-$driver.log" \
        --env ZCX_REQUIRE_DPDK=1 --env RUST_BACKTRACE=1 --env ZCX_DPDK_EP_KEEPALIVE_INTERVAL=5s -- "$here/dpdk-test.sh" --in-guest "$bin"; then
        echo "VM DPDK test on $driver: passed in $(($(date +%s) - start))s"
    else
        echo "VM DPDK test on $driver: FAILED (exit $?) after $(($(date +%s) - start))s"
        failed+=("$driver")
    fi
done
[ ${#failed[@]} -eq 0 ] || { echo "VM DPDK test failed on: ${failed[*]}"; exit 1; }
