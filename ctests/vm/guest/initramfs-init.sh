#!/bin/sh
# /init of the VM's initramfs (busybox only): loads the modules that reach
# the root disk (the list in /modules/order, in dependency order), mounts
# /dev/vda and hands over to the real root's init (init= on the command line).
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb mount -t devtmpfs devtmpfs /dev
for m in $($bb cat /modules/order); do
	$bb insmod "/modules/$m" 2>/dev/null
done
init=/sbin/init
for w in $($bb cat /proc/cmdline); do
	case $w in init=*) init=${w#init=} ;; esac
done
# The disk appears asynchronously after virtio_blk loads: bounded wait.
i=0
while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do
	$bb sleep 0.05
	i=$((i + 1))
done
if ! $bb mount -t ext4 -o rw /dev/vda /newroot; then
	echo "initramfs: cannot mount /dev/vda" >/dev/console
	$bb poweroff -f
fi
$bb umount /proc /sys /dev
exec $bb switch_root /newroot "$init"
