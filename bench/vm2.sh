#!/bin/bash
# Two hosts on one link, beside the kernel's own soft devices (issues 28
# and 29): boots two VMs of ctests/vm/ joined by a link (run-in-vm.sh
# -l), runs bench/vm2-guest.sh in both (perftest over rxe and siw on both
# ends with Debian's rdma-core, over rsw with our libraries over TCP and
# in RoCEv2 mode, and our RoCEv2 client against an rxe server) and prints
# a markdown table with rsw's ratios. Each VM has one CPU (VM2_CPUS), so
# on a 2-core host each end has a core, as two machines would. Under TCG
# emulation the figures compare the devices with each other only.
#   bench/vm2.sh           after `make`, as root, with the VM image built
#   BUILD=...              another build directory
#   VM2_DEVICES=...        some of "roce rsw mix rxe siw" (bench/vm2-guest.sh)
#   VM_BENCH_ONLY=REGEX    the rows whose names match
#   VM2_LOGS=DIR           keep both VMs' output there
# Exit status 77 when the VMs cannot run here.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
: "${BUILD:=$repo/build}"
cache=${RSV_VM_CACHE:-/var/tmp/rdma-rs-vm}
[ "$(id -u)" = 0 ] || { echo "bench/vm2.sh: needs root (the VMs' 9p shares)" >&2; exit 77; }
[ -e "$cache/current" ] || { echo "bench/vm2.sh: no VM image in $cache (ctests/vm/build-image.sh)" >&2; exit 77; }
command -v qemu-system-x86_64 >/dev/null || { echo "bench/vm2.sh: qemu-system-x86_64 is not installed" >&2; exit 77; }
work=$(mktemp -d)
trap 'kill ${srv:-} 2>/dev/null; rm -rf "$work"' EXIT
envs=()
for v in VM2_DEVICES VM_BENCH_ONLY VM_BENCH_LIMIT VM2_FAIL_LINES; do
	[ -n "${!v:-}" ] && envs+=(-e "$v=${!v}")
done
# Two free UDP ports on the host for the link (QEMU's socket netdev).
link=
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 20000 * 2))
	ss -Hlun "( sport = :$p or sport = :$((p + 1)) )" | grep -q . || { link=$p; break; }
done
[ -n "$link" ] || { echo "bench/vm2.sh: no free UDP ports for the link" >&2; exit 1; }
vm() { # ROLE SIDE
	BUILD=$BUILD "$repo/ctests/vm/run-in-vm.sh" -t 3000 -c "${VM2_CPUS:-1}" -r none -l "$2:$link" \
		-e VM2_ROLE="$1" "${envs[@]}" -f "${VM2_GUEST:-$repo/bench/vm2-guest.sh}"
}
# QEMU's link socket takes the host's default buffer (208 KiB), which a
# 1 MiB READ's burst of responses overflows: the link would drop what no
# cable drops. Larger defaults for the run, restored after.
rmem=$(sysctl -n net.core.rmem_default) wmem=$(sysctl -n net.core.wmem_default)
restore() { sysctl -q -w net.core.rmem_default="$rmem" net.core.wmem_default="$wmem"; }
trap 'kill ${srv:-} 2>/dev/null; restore; rm -rf "$work"' EXIT
sysctl -q -w net.core.rmem_default=$((16 << 20)) net.core.wmem_default=$((4 << 20))
vm server a >"$work/server" 2>"$work/server.err" &
srv=$!
vm client b >"$work/client" 2>"$work/client.err"
crc=$?
wait $srv
src=$?
if [ -n "${VM2_LOGS:-}" ]; then
	mkdir -p "$VM2_LOGS" && cp "$work"/* "$VM2_LOGS/"
fi
[ $crc = 0 ] && [ $src = 0 ] || {
	echo "bench/vm2.sh: the VM runs failed (client $crc, server $src)" >&2
	tail -n 20 "$work/client.err" "$work/server.err" >&2
	exit 1
}
python3 "$repo/bench/vm_table.py" "$work/client" "two VMs, one link (TCG; indicative)" \
	"rxe=rxe (Debian);siw=siw (Debian);roce=rsw RoCEv2 (ours);rsw=rsw TCP (ours);mix=rsw RoCEv2 client, rxe server" \
	"roce/rxe=rsw RoCEv2 vs rxe;mix/rxe=client vs rxe;rsw/siw=rsw TCP vs siw;rsw/rxe=rsw TCP vs rxe"
