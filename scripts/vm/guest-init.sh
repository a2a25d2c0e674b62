#!/bin/bash
# shellcheck disable=SC2154 # the vm_* variables come from the job file run.sh writes
# PID 1 of the VM (started by initramfs-init.sh), on the host's root: read-only 9p under a tmpfs
# overlay, so the host's binaries and this checkout are here at the same paths. Prepares the guest
# as the job asks (modules, hugepages, NICs bound to a driver), runs the job's command in the
# host's working directory, and reports its exit status through the run directory (9p tag
# `zcxrun`, the host's side of it is run.sh's) and the console, then powers off.
#
# Not `set -e`: PID 1 must always reach the power-off (if it exited, the kernel would panic, which
# run.sh also notices, but with less to say).
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

finish() {
    echo "$1" > /zcx-run/status
    echo "ZCX-VM-EXIT $1"
    sync
    echo o > /proc/sysrq-trigger
    # Wait for the power-off with a builtin on the console (nothing types there): an external
    # `sleep` may no longer load once the 9p root is going away.
    read -r -t 60 _ || true
}
step() { echo "[zcx-vm] $*"; }
die() {
    echo "[zcx-vm] error: $*"
    finish 125
}

# Fresh tmpfs where the host's directories would only get in the way. Not over /tmp: the
# checkout and its test binaries may live there (a CI clone in /tmp), and the overlay already
# sends the guest's own writes to tmpfs.
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /dev/pts /dev/shm /dev/hugepages /zcx-run
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t hugetlbfs hugetlbfs /dev/hugepages
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 zcxrun /zcx-run || die "cannot mount the run directory"

# The job: variables written by run.sh with `declare -p`.
# shellcheck source=/dev/null
. /zcx-run/job || die "cannot read the job"

# The guest kernel's modules are those of the unpacked package, not the host's (which runs another
# kernel): bound where modprobe looks. Debian's host has no kmod by default; busybox's modprobe
# reads the modules.dep that run.sh made with busybox's depmod.
modules=/lib/modules/$(uname -r)
mkdir -p "$modules"
mount --bind "$vm_modules_dir" "$modules" || die "cannot bind the kernel's modules from $vm_modules_dir"
# The kernel loads some modules on demand (vfio's IOMMU backend, protocol families) through
# /proc/sys/kernel/modprobe, which names /sbin/modprobe: kmod's, not installed here. Busybox's
# modprobe, reached by a link so that it sees its name in argv[0], takes its place.
ln -s "$(command -v busybox)" /run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
load() {
    local m
    for m in "$@"; do
        busybox modprobe "$m" || die "modprobe $m failed"
    done
}

busybox ip link set lo up

if [ "$vm_hugepages" -gt 0 ]; then
    echo "$vm_hugepages" > /proc/sys/vm/nr_hugepages
    step "2 MiB hugepages: $(cat /proc/sys/vm/nr_hugepages)"
fi

# The NICs sit at fixed PCI slots (run.sh puts NIC i at 00:1i.0). virtio_pci has claimed them
# already (as virtio devices without a network driver yet); `kernel` adds virtio_net on top, the
# others move them to a userspace-I/O driver through driver_override.
nics=()
for ((i = 0; i < vm_nics; i++)); do
    nics+=("0000:00:1$i.0")
done
case $vm_driver in
    kernel) [ "$vm_nics" -eq 0 ] || load virtio_net ;;
    uio) load uio_pci_generic ;;
    vfio) load vfio-pci vfio_iommu_type1 ;;
    *) die "unknown driver $vm_driver" ;;
esac
if [ "$vm_driver" != kernel ]; then
    driver=${vm_driver/uio/uio_pci_generic}
    driver=${driver/vfio/vfio-pci}
    for dev in "${nics[@]}"; do
        sys=/sys/bus/pci/devices/$dev
        [ -e "$sys" ] || die "no PCI device $dev"
        [ -e "$sys/driver" ] && echo "$dev" > "$sys/driver/unbind"
        echo "$driver" > "$sys/driver_override"
        echo "$dev" > /sys/bus/pci/drivers_probe
        bound=$(basename "$(readlink "$sys/driver" 2>/dev/null)")
        [ "$bound" = "$driver" ] || die "$dev is bound to '${bound}', not $driver"
        step "$dev bound to $driver"
    done
fi
export ZCX_VM_NICS="${nics[*]}"
export ZCX_VM_DRIVER=$vm_driver

# Extra modules the job asked for (e.g. rdma_rxe).
load "${vm_modules[@]}"

step "running: ${vm_cmd[*]}"
cd "$vm_cwd" || die "no directory $vm_cwd"
env "${vm_env[@]}" "${vm_cmd[@]}" < /dev/null
finish $?
