#!/bin/bash
# PID 1 of the ctests/vm guest (/sbin/rsv-vm-init; no systemd, no udev).
# Sets the machine up, runs the host's job, powers off:
#   - /job: the host's job directory (9p tag "job", read-write); the job is
#     /job/cmd.sh, run by bash as root in /job; its output goes to /job/out,
#     its exit status to /job/rc; the setup's own messages to /job/setup.log;
#   - rsv.sN=PATH on the kernel command line: the host directory shared under
#     9p tag sN is mounted read-only at PATH;
#   - the NIC with MAC 52:54:00:12:34:01 gets 10.0.0.1/24 and carries rxe0
#     (RoCEv2), the one with 52:54:00:12:34:02 gets 10.0.1.1/24 and carries
#     siw0 (iWARP); rsv.rdma=rxe,siw (the default), rxe, siw or none says
#     which devices to create. Each NIC is alone on its QEMU hub: no packet
#     leaves the VM.
# The serial console shows "RSV-VM-READY <uptime>" once the devices are up
# and "RSV-VM-EXIT <status> <uptime>" at the end.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C.UTF-8
cd /

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
hostname vm
console() { echo "rsv-vm: $*" >/dev/console; }

rdma_devs=rxe,siw
declare -A share_path=()
for w in $(</proc/cmdline); do
	case $w in
	rsv.rdma=*) rdma_devs=${w#rsv.rdma=} ;;
	rsv.s[0-9]*=*)
		tag=${w%%=*}
		share_path[${tag#rsv.}]=${w#*=}
		;;
	esac
done

modprobe -a 9p 9pnet_virtio virtio_net 2>/dev/console
mkdir -p /job
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 job /job; then
	console "cannot mount the job directory"
	busybox poweroff -f
fi
exec 3>/job/setup.log
log() { echo "$*" >&3; }

for tag in "${!share_path[@]}"; do
	p=${share_path[$tag]}
	mkdir -p "$p" &&
		mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,ro "$tag" "$p" ||
		log "cannot mount share $tag at $p"
done

# The interface with MAC $1.
netdev_of() {
	local d
	for d in /sys/class/net/*; do
		[[ $(<"$d/address") == "$1" ]] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
ip link set lo up
rxe_if=$(netdev_of 52:54:00:12:34:01) && ip addr add 10.0.0.1/24 dev "$rxe_if" && ip link set "$rxe_if" up
siw_if=$(netdev_of 52:54:00:12:34:02) && ip addr add 10.0.1.1/24 dev "$siw_if" && ip link set "$siw_if" up
log "netdevs: rxe on ${rxe_if:-?}, siw on ${siw_if:-?}"

ulimit -l unlimited
modprobe -a ib_uverbs rdma_ucm >&3 2>&1
if [[ ,$rdma_devs, == *,rxe,* ]]; then
	{ modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "$rxe_if"; } >&3 2>&1 ||
		console "rxe0: setup failed (see setup.log)"
fi
if [[ ,$rdma_devs, == *,siw,* ]]; then
	{ modprobe siw && rdma link add siw0 type siw netdev "$siw_if"; } >&3 2>&1 ||
		console "siw0: setup failed (see setup.log)"
fi

# Steady state before the job starts (bounded): every port ACTIVE, and rxe0's
# GID table holds the IPv4 address (added asynchronously on a netdev event).
for _ in $(seq 1 200); do
	ok=1
	for p in /sys/class/infiniband/*/ports/1/state; do
		[[ $(<"$p") == *ACTIVE* ]] || ok=0
	done
	if [[ -d /sys/class/infiniband/rxe0 ]]; then
		grep -qs '^0000:0000:0000:0000:0000:ffff:0a00:0001$' /sys/class/infiniband/rxe0/ports/1/gids/* || ok=0
	fi
	((ok)) && break
	sleep 0.05
done
log "rdma devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"
rdma link >&3 2>&1
exec 3>&-

console "RSV-VM-READY $(cut -d' ' -f1 /proc/uptime)"
rc=255
if [[ -f /job/cmd.sh ]]; then
	(cd /job && exec /bin/bash /job/cmd.sh) </dev/null >/job/out 2>&1
	rc=$?
	echo "$rc" >/job/rc
fi
console "RSV-VM-EXIT $rc $(cut -d' ' -f1 /proc/uptime)"
sync
umount /job 2>/dev/null
busybox poweroff -f
