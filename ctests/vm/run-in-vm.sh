#!/bin/bash
# Boots the VM of ctests/vm/build-image.sh, runs one command or script in it
# as root, prints its output as it comes, powers the VM off and exits with
# the command's status (124 when the time ran out, 255 when the VM gave none).
#
#   ctests/vm/run-in-vm.sh [options] [--] COMMAND...     words joined, run by bash
#   ctests/vm/run-in-vm.sh [options] -f SCRIPT [ARG...]  SCRIPT is copied into the
#                                                        VM and run with the ARGs
# Options:
#   -i DIR     the image (default: $RSV_VM_IMAGE, else $RSV_VM_CACHE/current,
#              RSV_VM_CACHE defaulting to /var/tmp/rdma-rs-vm)
#   -t SEC     limit for the whole run, boot included (default 600)
#   -s HOST[:GUEST]  also share the host directory HOST, read-only, at GUEST
#              (default: the same path); may be repeated
#   -n         do not share the repository's build directory (shared by
#              default, read-only, at its own path; $RSV_BUILD in the guest
#              names it; BUILD in the environment picks another one)
#   -e NAME=VALUE  set this variable for the command; may be repeated
#   -r LIST    soft RDMA devices to create: rxe,siw (default), rxe, siw, none
#   -a ACCEL   kvm or tcg (default: tcg where /dev/kvm is PVM, i.e.
#              /sys/module/kvm_pvm exists, or /dev/kvm is not usable; else kvm)
#   -m SIZE    guest memory (default 2G)      -c N   guest CPUs (default 2)
#   -l a:PORT | b:PORT
#              a third NIC on a link to another VM: QEMU's socket netdev over
#              UDP on 127.0.0.1 (side a on PORT, b on PORT+1; UDP, as a TCP
#              stream would hold small frames back for its ACKs): MAC
#              52:54:00:12:35:01 on side a, :02 on b, no address (the
#              command sets it up); bench/vm2.sh
#   -v         copy the serial console (kernel messages) to stderr as well
#   -k         keep the job directory (console.log, setup.log, out, rc); it is
#              kept anyway when the VM gave no exit status
#
# The guest: Debian 12's kernel, no systemd, no udev. rxe0 runs on the NIC
# with 10.0.0.1/24 (its RoCEv2 GID for that address is found in
# /sys/class/infiniband/rxe0/ports/1/gids), siw0 on the one with 10.0.1.1/24.
# The command runs in the job directory, mounted read-write at /job: files it
# writes there are in the job directory on the host afterwards (-k keeps it).
# Debian's rdma-core is installed; LD_LIBRARY_PATH=$RSV_BUILD/lib runs a
# program over our libraries.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${RSV_VM_CACHE:-/var/tmp/rdma-rs-vm}
IMG=${RSV_VM_IMAGE:-$CACHE/current}
TIMEOUT=600 MEM=2G CPUS=2 RDMA=rxe,siw ACCEL= VERBOSE=0 KEEP=0 SCRIPT= SHARE_BUILD=1 LINK=
SHARES=() ENVS=()
usage() {
	sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}
while getopts "i:t:s:ne:r:a:m:c:l:vkf:h" o; do
	case $o in
	i) IMG=$OPTARG ;;
	t) TIMEOUT=$OPTARG ;;
	s) SHARES+=("$OPTARG") ;;
	n) SHARE_BUILD=0 ;;
	e) ENVS+=("$OPTARG") ;;
	r) RDMA=$OPTARG ;;
	a) ACCEL=$OPTARG ;;
	m) MEM=$OPTARG ;;
	c) CPUS=$OPTARG ;;
	l) LINK=$OPTARG ;;
	v) VERBOSE=1 ;;
	k) KEEP=1 ;;
	f)
		SCRIPT=$OPTARG
		break
		;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[[ -n $SCRIPT || $# -gt 0 ]] || usage
die() {
	echo "run-in-vm: $*" >&2
	[[ -n ${JOB:-} ]] && rm -rf "$JOB"
	exit 2
}

# Host programs only: QEMU links libibverbs and librdmacm, and must not pick
# up build/'s (the harness exports these for the tests).
unset LD_LIBRARY_PATH LD_PRELOAD IBV_CONFIG_DIR RDMAV_DRIVERS IBV_DRIVERS

command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
for f in vmlinux initrd.img rootfs.img; do
	[[ -f $IMG/$f ]] || die "$IMG/$f missing: run $HERE/build-image.sh first"
done
IMG=$(cd "$IMG" && pwd -P)

if [[ -z $ACCEL ]]; then
	# PVM (kvm_pvm) runs only kernels built for it; Debian's does not boot
	# there. TCG does, in seconds.
	if [[ -d /sys/module/kvm_pvm ]]; then
		ACCEL=tcg
	elif [[ -r /dev/kvm && -w /dev/kvm ]]; then
		ACCEL=kvm
	else
		ACCEL=tcg
	fi
fi
case $ACCEL in
kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu max) ;;
*) die "-a: kvm or tcg" ;;
esac

JOB=$(mktemp -d "${TMPDIR:-/tmp}/rsv-vm-job.XXXXXX")
chmod 755 "$JOB"
APPEND="console=ttyS0 root=/dev/vda rw init=/sbin/rsv-vm-init panic=-1 quiet loglevel=4 rsv.rdma=$RDMA"
FS=()
nshare=0
guest_build=
add_share() { # HOST GUEST
	local host guest=$2
	host=$(cd "$1" 2>/dev/null && pwd) || die "no directory $1"
	[[ $host != *[[:space:],]* && $guest != *[[:space:],]* ]] || die "share paths may not contain blanks or commas: $1"
	FS+=(-fsdev "local,id=fs$nshare,path=$host,security_model=none,readonly=on"
		-device "virtio-9p-pci,fsdev=fs$nshare,mount_tag=s$nshare")
	APPEND+=" rsv.s$nshare=$guest"
	nshare=$((nshare + 1))
}
if ((SHARE_BUILD)); then
	b=${BUILD:-$REPO/build}
	if [[ -d $b ]]; then
		b=$(cd "$b" && pwd)
		add_share "$b" "$b"
		guest_build=$b
	fi
fi
for s in "${SHARES[@]}"; do
	host=${s%%:*} guest=${s#*:}
	[[ $s == *:* ]] || guest=$(cd "$host" 2>/dev/null && pwd) || die "no directory $host"
	add_share "$host" "$guest"
done

# The job: cmd.sh sets the environment and runs the command or the script.
{
	echo "# written by run-in-vm.sh"
	[[ -n $guest_build ]] && printf 'export RSV_BUILD=%q\n' "$guest_build"
	for e in "${ENVS[@]}"; do
		[[ $e == [A-Za-z_]*=* ]] || die "-e wants NAME=VALUE, not $e"
		printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"
	done
	if [[ -n $SCRIPT ]]; then
		[[ -f $SCRIPT ]] || die "no script $SCRIPT"
		cp "$SCRIPT" "$JOB/script"
		chmod 755 "$JOB/script"
		if [[ $(head -c 2 "$SCRIPT") == '#!' ]]; then
			printf '/job/script'
		else
			printf 'bash /job/script'
		fi
		(($#)) && printf ' %q' "$@"
		echo
	else
		printf '%s\n' "$*"
	fi
} >"$JOB/cmd.sh"

QEMU=(qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m "$MEM" -smp "$CPUS"
	-nodefaults -no-user-config -display none -vga none -no-reboot
	-kernel "$IMG/vmlinux" -initrd "$IMG/initrd.img" -append "$APPEND"
	-drive "file=$IMG/rootfs.img,format=raw,if=virtio,snapshot=on"
	-fsdev "local,id=job,path=$JOB,security_model=none"
	-device virtio-9p-pci,fsdev=job,mount_tag=job
	"${FS[@]}"
	-netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:12:34:01
	-netdev hubport,id=n1,hubid=1 -device virtio-net-pci,netdev=n1,mac=52:54:00:12:34:02
	-chardev "file,id=con,path=$JOB/console.log" -serial chardev:con)
case $LINK in
"") ;;
a:[0-9]*) p=${LINK#*:}
	QEMU+=(-netdev "socket,id=n2,localaddr=127.0.0.1:$p,udp=127.0.0.1:$((p + 1))"
		-device virtio-net-pci,netdev=n2,mac=52:54:00:12:35:01) ;;
b:[0-9]*) p=${LINK#*:}
	QEMU+=(-netdev "socket,id=n2,localaddr=127.0.0.1:$((p + 1)),udp=127.0.0.1:$p"
		-device virtio-net-pci,netdev=n2,mac=52:54:00:12:35:02) ;;
*) die "-l: a:PORT or b:PORT" ;;
esac

: >"$JOB/console.log"
: >"$JOB/out"
tails=()
cleanup() {
	((${#tails[@]})) && kill "${tails[@]}" 2>/dev/null
	[[ -n ${qpid:-} ]] && kill "$qpid" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
t0=$EPOCHREALTIME
timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$JOB/qemu.log" 2>&1 &
qpid=$!
# The guest writes the command's output straight into $JOB/out (9p); tail
# follows it and, once QEMU is gone, prints what is left and ends.
tail --pid="$qpid" -n +1 -f "$JOB/out" &
tails+=($!)
if ((VERBOSE)); then
	tail --pid="$qpid" -n +1 -f "$JOB/console.log" >&2 &
	tails+=($!)
fi
wait "$qpid"
qrc=$?
qpid=
t1=$EPOCHREALTIME
wait "${tails[@]}" 2>/dev/null
tails=()

if [[ -s $JOB/rc ]]; then
	rc=$(<"$JOB/rc")
elif ((qrc == 124 || qrc == 137)); then
	rc=124
	echo "run-in-vm: timed out after ${TIMEOUT}s" >&2
else
	rc=255
	echo "run-in-vm: the VM gave no exit status (qemu exit $qrc)" >&2
fi
grep -v 'is not connected to host network' "$JOB/qemu.log" | sed 's/^/qemu: /' >&2
if [[ $rc != 0 && -s $JOB/setup.log ]]; then
	echo "--- guest setup.log" >&2
	sed 's/^/    /' "$JOB/setup.log" >&2
fi
if [[ ! -s $JOB/rc ]] && ((!VERBOSE)); then
	echo "--- serial console (last 40 lines)" >&2
	tail -n 40 "$JOB/console.log" >&2
fi
ready=$(sed -n 's/.*RSV-VM-READY \([0-9.]*\).*/\1/p' "$JOB/console.log" | head -n 1)
done_at=$(sed -n 's/.*RSV-VM-EXIT [0-9]* \([0-9.]*\).*/\1/p' "$JOB/console.log" | head -n 1)
awk -v rc="$rc" -v a="$t0" -v b="$t1" -v r="${ready:-}" -v d="${done_at:-}" -v acc="$ACCEL" 'BEGIN {
	printf "run-in-vm: exit status %s; wall %.1f s", rc, b - a
	if (r != "") printf ", devices ready at %.1f s of guest uptime", r
	if (r != "" && d != "") printf ", command %.1f s", d - r
	printf " (accel %s)\n", acc
}' >&2
if ((KEEP)) || [[ ! -s $JOB/rc ]]; then
	echo "run-in-vm: job directory kept: $JOB" >&2
else
	rm -rf "$JOB"
fi
exit "$rc"
