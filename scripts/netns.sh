#!/usr/bin/env bash
# Two "hosts" on this machine for manual runs: network namespaces zcx-a and zcx-b joined by a veth
# pair, 10.213.0.1/24 in zcx-a and 10.213.0.2/24 in zcx-b (the same layout tests/src/netns.rs builds
# for the two_hosts tests, under fixed names).
#
#   scripts/netns.sh up       create the namespaces, the veth pair and the addresses
#   scripts/netns.sh down     delete them again (deleting a namespace deletes its veth end)
#   scripts/netns.sh status   show what exists
#
# Then, for example:
#   ip netns exec zcx-a target/release/<server> ...   # listens on 10.213.0.1
#   ip netns exec zcx-b target/release/<client> ...   # connects to 10.213.0.1
#
# Override the names and the subnet with ZCX_NETNS_A, ZCX_NETNS_B and ZCX_NETNS_NET (the first three
# octets). Needs root (CAP_NET_ADMIN) and iproute2.
set -euo pipefail

NS_A=${ZCX_NETNS_A:-zcx-a}
NS_B=${ZCX_NETNS_B:-zcx-b}
NET=${ZCX_NETNS_NET:-10.213.0}
VETH_A=zcx-veth-a
VETH_B=zcx-veth-b

die() { echo "netns.sh: $*" >&2; exit 1; }

exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

down() {
    local ns
    for ns in "$NS_A" "$NS_B"; do
        if exists "$ns"; then
            ip netns del "$ns"
            echo "deleted $ns"
        fi
    done
}

up() {
    exists "$NS_A" && die "$NS_A exists already; run '$0 down' first"
    exists "$NS_B" && die "$NS_B exists already; run '$0 down' first"
    # Undo a half-built setup on any failure.
    trap 'down >/dev/null 2>&1 || true' ERR
    ip netns add "$NS_A"
    ip netns add "$NS_B"
    ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B"
    ip -n "$NS_A" link set lo up
    ip -n "$NS_B" link set lo up
    ip -n "$NS_A" addr add "$NET.1/24" dev "$VETH_A"
    ip -n "$NS_B" addr add "$NET.2/24" dev "$VETH_B"
    ip -n "$NS_A" link set "$VETH_A" up
    ip -n "$NS_B" link set "$VETH_B" up
    trap - ERR
    # The carrier comes up asynchronously.
    local i
    for i in $(seq 50); do
        ip -n "$NS_B" link show "$VETH_B" | grep -q LOWER_UP && break
        sleep 0.1
    done
    echo "$NS_A: $VETH_A $NET.1/24"
    echo "$NS_B: $VETH_B $NET.2/24"
}

status() {
    local ns
    for ns in "$NS_A" "$NS_B"; do
        if exists "$ns"; then
            echo "== $ns"
            ip -n "$ns" -brief addr show
        else
            echo "== $ns: absent"
        fi
    done
}

[ "$(id -u)" = 0 ] || die "needs root (CAP_NET_ADMIN)"
command -v ip >/dev/null || die "iproute2's ip is not installed"

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
