#!/usr/bin/env bash
# The zcx test suite — the README's test command and what CI runs.
# Installs what it needs (as root, only if missing), reserves hugepages, then runs formatting and lint
# checks and every test of the workspace, including the multi-process ones.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/setup.sh

zcx_require_cargo
# UCX's libraries: the status-code cross-check against libucs, and the side-by-side benchmarks.
# Debian's DPDK 22.11 (libdpdk-dev pulls in every librte runtime package, drivers included) and
# pkg-config, which zcx-dpdk-sys finds it with.
zcx_apt_install ucx-utils libucx-dev iproute2 libdpdk-dev dpdk pkg-config
# Open MPI (mpicc, mpirun and its UCX pml): capi's test runs MPI jobs over the libucp it builds.
zcx_apt_install openmpi-bin libopenmpi-dev
# rdma-core 44's libibverbs, which zcx-verbs-sys binds (devices exist only in the VM's Soft-RoCE).
zcx_apt_install libibverbs-dev ibverbs-providers rdma-core
# QEMU and a static busybox (the guest's initramfs) for the VM step (scripts/vm/).
zcx_apt_install qemu-system-x86 busybox-static
# Installed above, so a DPDK or verbs test that would skip for want of its library fails instead.
export ZCX_REQUIRE_DPDK=1 ZCX_REQUIRE_VERBS=1 ZCX_REQUIRE_CAPI=1
# 1100 x 2 MiB: the hugepage tests and the 1 GiB map bench, run in parallel, with room to spare.
# No 1 GiB pages: an empty 1 GiB pool is how the tests provoke the fallback path.
zcx_reserve_hugepages 1100 0

export CARGO_TERM_COLOR=never
export RUST_BACKTRACE=1

echo "== cargo fmt --check"
cargo fmt --all -- --check
# The DPDK transport is a feature of zcx-dataplane, and endpoints over it a feature of zcx (both off
# by default, so a plain build needs no DPDK); so is verbs. The suite lints and tests them too.
features=(--features "zcx-dataplane/dpdk,zcx/dpdk,zcx-cli/dpdk,zcx-dataplane/verbs,zcx-cli/verbs")
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --workspace --all-targets --locked "${features[@]}" -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --nocapture so that a test that cannot run here shows its "skipped: <reason>" line.
echo "== cargo test"
cargo test --workspace --all-targets --locked "${features[@]}" -- --nocapture 2>&1 | tee "$log"
# Same-host endpoints use shared memory by default; the api's integration tests run once more
# with TCP alone, so both transports pass every endpoint, failure and wakeup test.
echo "== api integration tests again over TCP only (ZCX_TLS=tcp)"
ZCX_TLS=tcp cargo test -p zcx --tests --locked -- --nocapture 2>&1 | tee -a "$log"
echo "== doc tests"
cargo test --workspace --doc --locked 2>&1 | tee -a "$log"
# Every decoder of peer bytes under cargo-fuzz, about 10 s a target (scripts/fuzz.sh; FUZZ_SECONDS=600
# is the long run). Prints "skipped: <reason>" without a nightly toolchain; installs cargo-fuzz when
# it is missing. A crash, failed assertion or hang fails the suite.
echo "== fuzz (scripts/fuzz.sh)"
FUZZ_SECONDS=10 FUZZ_INSTALL=1 scripts/fuzz.sh 2>&1 | tee -a "$log"
# AddressSanitizer over the control and dataplane tests, Miri over the shm ring, the request cell
# and the lent-message gate (nightly; "skipped: <reason>" without it). 3 to 7 minutes.
echo "== sanitizers (AddressSanitizer, Miri)"
scripts/sanitizers.sh 2>&1 | tee -a "$log"
# Real PCI NICs exist only in a guest: the DPDK endpoint test once more inside a QEMU VM
# (scripts/vm/), on two virtio-net NICs bound to uio_pci_generic, then to vfio-pci. Emulated (no
# KVM here): 40 to 70 s a driver; each guest is killed after 6 minutes. Without QEMU it says
# "skipped: <reason>".
echo "== DPDK endpoints on PCI NICs in a VM"
ZCX_VM_TIMEOUT=360 scripts/vm/dpdk-test.sh 2>&1 | tee -a "$log"
# RDMA verbs exist only in a guest too: Soft-RoCE (rdma_rxe) on two wired virtio-net NICs, one rxe
# device each; the verbs tests, the API between two processes and `zcx perf --validate` run
# against them (scripts/vm/verbs-test.sh). About 6 minutes under emulation.
echo "== verbs on Soft-RoCE in a VM"
ZCX_VM_TIMEOUT=1200 scripts/vm/verbs-test.sh 2>&1 | tee -a "$log"

passed=$(grep -Eo '^test result: [a-z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep '^test result: ' "$log" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
skipped=$(grep -c 'skipped: ' "$log" || true)
echo "== summary (skips are listed above with their reasons)"
echo "tests: $passed passed, $failed failed, $skipped skipped"
