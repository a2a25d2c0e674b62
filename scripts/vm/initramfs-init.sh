#!/bin/sh
# /init of the VM's initramfs (run by busybox's sh; run.sh packs it with a static busybox and the
# few modules named below). Debian's kernel has virtio-pci, 9p and overlayfs as modules, so
# something must load them before the host's root can be mounted: that is all this does. It mounts
# the host's / (9p tag `hostroot`, read-only) under a tmpfs overlay, so the guest may write
# anywhere and nothing reaches the host, then hands PID 1 to scripts/vm/guest-init.sh on that root
# (its path is the kernel parameter zcx.init=).
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
    echo "zcx-vm initramfs: $*"
    echo "ZCX-VM-EXIT 125"
    # PID 1 exiting panics the kernel, which (panic=-1, QEMU's -no-reboot) ends the VM.
    exit 1
}

for m in virtio_pci 9pnet_virtio 9p overlay; do
    modprobe "$m" || fail "modprobe $m failed"
done

init=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^zcx\.init=//p')
[ -n "$init" ] || fail "no zcx.init= on the kernel command line"

mkdir -p /lower /rw /newroot
# The virtio devices probe while virtio_pci loads; a short retry covers a slow probe.
i=0
until mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower; do
    i=$((i + 1))
    [ "$i" -lt 20 ] || fail "cannot mount the host's root (9p tag hostroot)"
    sleep 0.5
done
mount -t tmpfs -o mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
    fail "cannot mount the overlay"

for d in proc sys dev; do
    mount --move "/$d" "/newroot/$d"
done
exec switch_root /newroot "$init"
