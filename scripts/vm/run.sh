#!/usr/bin/env bash
# Runs a command inside a QEMU guest and exits with the command's exit status.
#
#   scripts/vm/run.sh [options] -- COMMAND [ARG...]
#
# The guest boots Debian 12's stock kernel (linux-image-amd64's current 6.1 image, fetched with
# `apt-get download` into the cache) under TCG software emulation: /dev/kvm is not usable here, so
# everything is slow and timings mean nothing. Its root is the host's / over 9p, read-only, under
# a tmpfs overlay: binaries built on the host run unchanged, at the same paths, and nothing the
# guest writes reaches the host. The command runs as root in the host's working directory. The
# guest's console streams to stdout and to the log.
#
# Options:
#   --nics N          virtio-net PCI NICs (default 0, at most 8). NIC i is at PCI 0000:00:1i.0 and
#                     NICs 2k and 2k+1 are wired together (one QEMU hub each pair), so the guest
#                     talks to itself across them. The command gets their addresses in ZCX_VM_NICS.
#   --driver D        what drives the NICs: kernel (virtio_net, default), uio (uio_pci_generic) or
#                     vfio (vfio-pci behind an emulated Intel IOMMU: q35 intel-iommu, the NICs
#                     modern-only with iommu_platform, guest intel_iommu=on iommu=pt)
#   --mem MIB         guest memory (default 2048)
#   --cpus N          guest CPUs (default 2)
#   --hugepages N     2 MiB hugepages to reserve in the guest (default 0)
#   --module M        load kernel module M in the guest (repeatable), e.g. rdma_rxe
#   --env NAME[=VAL]  pass an environment variable (the host's value without =VAL; repeatable)
#   --timeout SECS    kill the guest after this long (default 900); exit status 124
#   --log FILE        the console log (default $ZCX_VM_CACHE/console.log)
#   --quiet           do not stream the console to stdout
#
# Exit status: the command's; 124 on timeout; 125 when the guest failed before or around the
# command (the log says why). Cache: $ZCX_VM_CACHE (default target/vm in this checkout) holds the
# unpacked kernel package (~400 MB) and the console log.
#
# Needs qemu-system-x86 and busybox-static (installed here when missing, as root), and apt's
# package lists to find the kernel. Root is not needed to boot.
#
# Other uses (the verbs transport, say): `--nics 2 --driver kernel --module rdma_rxe -- CMD` where
# CMD (a script of the caller's) runs `rdma link add rxe0 type rxe netdev eth0` and the same for
# eth1 before its test; eth0 and eth1 are wired together.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/lib/setup.sh
. "$repo/scripts/lib/setup.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-2}"; }

nics=0 driver=kernel mem=2048 cpus=2 hugepages=0 timeout=900 log='' quiet=0
modules=() env_vars=()
while [ $# -gt 0 ]; do
    case $1 in
        --nics) nics=$2; shift 2 ;;
        --driver) driver=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --cpus) cpus=$2; shift 2 ;;
        --hugepages) hugepages=$2; shift 2 ;;
        --module) modules+=("$2"); shift 2 ;;
        --env)
            case $2 in
                *=*) env_vars+=("$2") ;;
                *) env_vars+=("$2=${!2-}") ;;
            esac
            shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --quiet) quiet=1; shift ;;
        -h | --help) usage 0 ;;
        --) shift; break ;;
        *) echo "run.sh: unknown option $1" >&2; usage ;;
    esac
done
[ $# -gt 0 ] || { echo "run.sh: no command given" >&2; usage; }
case $driver in kernel | uio | vfio) ;; *) echo "run.sh: --driver kernel|uio|vfio" >&2; exit 2 ;; esac
[ "$nics" -le 8 ] || { echo "run.sh: at most 8 NICs" >&2; exit 2; }

cache=${ZCX_VM_CACHE:-$repo/target/vm}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
log=${log:-$cache/console.log}

zcx_apt_install qemu-system-x86 busybox-static
for tool in qemu-system-x86_64 busybox; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing (run as root to install it)" >&2; exit 125; }
done

# --- The kernel: the image linux-image-amd64 depends on, unpacked once into the cache.
kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n 1
}
pkg=$(kernel_package)
if [ -z "$pkg" ] && zcx_is_root; then
    apt-get update -qq >/dev/null
    pkg=$(kernel_package)
fi
if [ -z "$pkg" ]; then
    # No package lists: any kernel unpacked before will do.
    pkg=$(find "$cache" -maxdepth 1 -name 'linux-image-*' -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
    [ -n "$pkg" ] || { echo "run.sh: apt knows no linux-image-amd64 (apt-get update?)" >&2; exit 125; }
fi
kdir=$cache/$pkg
if [ ! -e "$kdir/ready" ]; then
    echo "[zcx-vm] fetching and unpacking $pkg into $kdir" >&2
    rm -rf "$kdir" && mkdir -p "$kdir/deb"
    (cd "$kdir/deb" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "$pkg" >/dev/null)
    dpkg-deb -x "$kdir"/deb/*.deb "$kdir/root"
    rm -rf "$kdir/deb"
    kver=$(basename "$(find "$kdir/root/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n 1)")
    busybox depmod -b "$kdir/root" "$kver"
    touch "$kdir/ready"
fi
kver=$(basename "$(find "$kdir/root/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n 1)")
moddir=$kdir/root/lib/modules/$kver

# --- Per-run state: the initramfs (small, rebuilt every run so it always matches the scripts) and
# the run directory the guest shares with us (the job in, the exit status out).
run=$(mktemp -d "$cache/run.XXXXXX")
qpid=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    # Our own QEMU, by its PID, if it is still there (an interrupted run).
    if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then kill -9 "$qpid" 2>/dev/null || true; fi
    rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The modules initramfs-init.sh loads, with what they depend on (modules.dep lists both).
mkdir -p "$run/initramfs"/{bin,proc,sys,dev} "$run/initramfs/lib/modules/$kver"
for m in virtio_pci 9pnet_virtio 9p overlay; do
    sed -n "s#^\([^:]*/$m\.ko\):\(.*\)#\1\2#p" "$moddir/modules.dep"
done | tr ' ' '\n' | sort -u | while read -r ko; do
    [ -n "$ko" ] || continue
    mkdir -p "$run/initramfs/lib/modules/$kver/$(dirname "$ko")"
    cp "$moddir/$ko" "$run/initramfs/lib/modules/$kver/$ko"
done
cp "$moddir/modules.dep" "$run/initramfs/lib/modules/$kver/"
cp "$(command -v busybox)" "$run/initramfs/bin/busybox"
ln -s busybox "$run/initramfs/bin/sh" # the interpreter of /init
cp "$here/initramfs-init.sh" "$run/initramfs/init"
chmod 755 "$run/initramfs/init"
(cd "$run/initramfs" && find . | busybox cpio -o -H newc 2>/dev/null) | gzip -1 > "$run/initrd.img"

# The job, in guest-init.sh's names.
vm_nics=$nics
vm_driver=$driver
vm_hugepages=$hugepages
vm_modules=("${modules[@]}")
vm_env=("HOME=${HOME:-/root}" "PATH=$PATH" "TERM=dumb" "${env_vars[@]}")
vm_cmd=("$@")
vm_cwd=$PWD
vm_modules_dir=$moddir
declare -p vm_nics vm_driver vm_hugepages vm_modules vm_env vm_cmd vm_cwd vm_modules_dir > "$run/job"

# --- The machine. q35 because the IOMMU needs it; -nodefaults so that only our devices exist.
append="console=ttyS0 panic=-1 quiet zcx.init=$here/guest-init.sh"
qemu=(qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp "$cpus" -m "$mem"
    -nodefaults -no-user-config -display none -no-reboot
    -kernel "$kdir/root/boot/vmlinuz-$kver" -initrd "$run/initrd.img"
    -chardev "file,id=console,path=$log" -serial chardev:console)
nic_opts=
if [ "$driver" = vfio ]; then
    # Before any PCI device. caching-mode lets QEMU see the guest's IOMMU mappings (vfio needs it).
    qemu+=(-device "intel-iommu,intremap=on,caching-mode=on")
    append+=" intel_iommu=on iommu=pt"
    nic_opts=",iommu_platform=on,ats=on,disable-legacy=on"
fi
qemu+=(-append "$append"
    -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
    -device "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot"
    -fsdev "local,id=zcxrun,path=$run,security_model=none,multidevs=remap"
    -device "virtio-9p-pci,fsdev=zcxrun,mount_tag=zcxrun")
for ((i = 0; i < nics; i++)); do
    qemu+=(-netdev "hubport,id=nic$i,hubid=$((i / 2))"
        -device "virtio-net-pci,netdev=nic$i,addr=0x1$i,mac=52:54:00:00:00:1$i,romfile=$nic_opts")
done

: > "$log"
start=$(date +%s)
"${qemu[@]}" </dev/null >>"$log" 2>&1 &
qpid=$!
[ "$quiet" = 1 ] || tail -n +1 -f --pid="$qpid" "$log" &
timed_out=0
while kill -0 "$qpid" 2>/dev/null; do
    if [ $(($(date +%s) - start)) -ge "$timeout" ]; then
        echo "[zcx-vm] timeout after ${timeout}s: killing QEMU (pid $qpid)" >&2
        kill "$qpid" 2>/dev/null || true
        sleep 2
        kill -9 "$qpid" 2>/dev/null || true
        timed_out=1
        break
    fi
    sleep 1
done
wait "$qpid" 2>/dev/null || true
qpid=
wait 2>/dev/null || true # the console's tail
echo "[zcx-vm] guest ran $(($(date +%s) - start))s; console log: $log" >&2

if [ "$timed_out" = 1 ]; then
    exit 124
fi
status=$(cat "$run/status" 2>/dev/null || true)
if ! [[ $status =~ ^[0-9]+$ ]]; then
    echo "[zcx-vm] the guest reported no exit status (see $log)" >&2
    exit 125
fi
exit "$status"
