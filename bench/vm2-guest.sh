#!/bin/bash
# Runs in each of the two VMs bench/vm2.sh boots, joined by one link (their
# third NIC, run-in-vm.sh -l): the perftest rows between two hosts, over
# the kernel's rxe and siw (Debian's rdma-core) on both ends, over rsw on
# both ends (our libraries from $RSV_BUILD, over TCP and in RoCEv2 mode),
# and our RoCEv2 client against Debian's rxe server. Every packet crosses
# the link, as between two machines (in one VM, rxe hands a packet to a
# device of its own inside the kernel, with no UDP, IP or NIC).
#
# VM2_ROLE=server (10.9.0.1) answers on TCP 17999: each connection names
# one run ("DEV PORT TOOL ARGS..."); the server sets DEV up, starts TOOL's
# server, writes "ready", and "exit N" when it ends. VM2_ROLE=client
# (10.9.0.2) drives the rows and prints one line a measurement:
# ROW<TAB>DEVICE<TAB>VALUE (VALUE "fail" when the run failed, "n/a"
# where the device has no such operation: siw has no atomics), then
# "quit" ends the server. VM2_DEVICES picks devices (default "roce rsw
# mix rxe siw", the order that loads rdma_rxe after rsw: it holds UDP 4791,
# which rsw's RoCEv2 mode needs), VM_BENCH_ONLY rows, VM_BENCH_LIMIT the
# seconds a run may take. Under TCG the figures compare devices only.
set -u
shopt -s extglob
B=${RSV_BUILD:?RSV_BUILD names the build directory}
SELF=$(readlink -f "$0")
SRV_IP=10.9.0.1 CLI_IP=10.9.0.2 CTL=17999
T=${VM_BENCH_LIMIT:-60}
OURS=(env LD_LIBRARY_PATH="$B/lib" IBV_CONFIG_DIR="$B/etc/libibverbs.d")

# The interface on the link (MAC from run-in-vm.sh -l).
link_if() {
	local d m=52:54:00:12:35:01
	[[ ${VM2_ROLE:-} == client ]] && m=52:54:00:12:35:02
	for d in /sys/class/net/*; do
		[[ $(<"$d/address") == "$m" ]] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
IF=$(link_if) || { echo "vm2-guest: no link NIC" >&2; exit 1; }
MY_IP=$SRV_IP
[[ $VM2_ROLE == client ]] && MY_IP=$CLI_IP

gid_index() { # DEV IPV4: the index of the RoCE v2 GID of that address
	local hex f t
	hex=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${2//./ })
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		[[ $(<"$f") == "$hex" ]] || continue
		t=$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/${f##*/}" 2>/dev/null)
		[[ -z $t || $t == *v2* ]] && { echo "${f##*/}"; return 0; }
	done
	return 1
}

# rxe on|off: rxeL on the link, or rdma_rxe gone (it holds UDP 4791).
rxe() {
	if [[ $1 == off ]]; then
		[[ -d /sys/module/rdma_rxe ]] || return 0
		rdma link del rxeL 2>/dev/null
		modprobe -r rdma_rxe
		return
	fi
	[[ -d /sys/class/infiniband/rxeL ]] && return 0
	modprobe rdma_rxe && rdma link add rxeL type rxe netdev "$IF" || return 1
	for _ in $(seq 100); do
		gid_index rxeL "$MY_IP" >/dev/null && return 0
		sleep 0.1 # bounded: the kernel adds the GID shortly
	done
	return 1
}
siw() {
	[[ -d /sys/class/infiniband/siwL ]] && return 0
	modprobe siw && rdma link add siwL type siw netdev "$IF"
}

# setup DEV SIDE: the device's state on this side, and how perftest
# reaches it: the command's prefix (PRE) and device arguments (ARGS).
setup() {
	PRE=(env) ARGS=()
	case $1/$2 in
	rxe/* | mix/server)
		rxe on || return 1
		ARGS=(-d rxeL -x "$(gid_index rxeL "$MY_IP")") ;;
	siw/*) siw || return 1; ARGS=(-d siwL -R) ;;
	rsw/*) PRE=("${OURS[@]}" RSW_TRANSPORT=tcp) ARGS=(-d "rsw_$IF" -x 0) ;;
	roce/* | mix/client)
		rxe off || return 1
		PRE=("${OURS[@]}" RSW_ROCEV2="$IF") ARGS=(-d "rsw_$IF" -x 0) ;;
	*) return 1 ;;
	esac
	return 0
}

# serve DEV PORT TOOL ARGS...: one run's server (the control connection
# is stdout).
serve() {
	local dev=$1 port=$2 tool=$3 pid rc
	shift 3
	setup "$dev" server || { echo "exit 99"; return; }
	timeout "$T" stdbuf -oL "${PRE[@]}" "$tool" "${ARGS[@]}" -F -p "$port" "$@" >>/job/server.log 2>&1 &
	pid=$!
	for _ in $(seq 300); do
		ss -Hltn "sport = :$port" | grep -q . && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.05 # bounded: 15 s for the server to listen
	done
	echo ready
	wait $pid
	rc=$?
	echo "exit $rc"
	((rc == 0)) || { echo "== server of $dev $port $tool: exit $rc"; tail -n "${VM2_FAIL_LINES:-5}" /job/server.log; } >&2
}

case ${1:-} in
serve)
	shift
	serve "$@"
	exit 0
	;;
esac

ip addr add "$MY_IP/24" dev "$IF"
ip link set "$IF" up

if [[ $VM2_ROLE == server ]]; then
	exec python3 - "$SELF" "$SRV_IP" "$CTL" <<'PY'
import socket, subprocess, sys
script, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, port))
s.listen(1)
while True:
    c, _ = s.accept()
    words = c.makefile("rb").readline().decode().split()
    if words and words[0] == "quit":
        c.close()
        break
    if not words:
        c.close()
        continue
    subprocess.run(["bash", script, "serve"] + words, stdout=c.fileno())
    c.close()
PY
fi

# The client.
wanted() { [[ -z ${VM_BENCH_ONLY:-} || $1 =~ $VM_BENCH_ONLY ]]; }
work=$(mktemp -d)
port=30000
# ctl LINE: a control connection to the server (fd 3), LINE sent;
# waits (bounded) for the server VM to answer at all.
ctl() {
	local end=$((SECONDS + 120))
	until exec 3<>"/dev/tcp/$SRV_IP/$CTL"; do
		((SECONDS < end)) || return 1
		sleep 0.2 # bounded: the other VM boots
	done 2>/dev/null
	echo "$1" >&3
}

# perf ROW DEVICE COLUMN SCALE TOOL ARGS...: COLUMN of the client's last
# result row, times SCALE.
perf() {
	local row=$1 dev=$2 col=$3 scale=$4 tool=$5 v crc try line
	shift 5
	wanted "$row" || return 0
	# rsw grants 16 outstanding READs and atomics; perftest's client asks
	# for its server's count (rxe: 128), which rsw's modify_qp refuses.
	[[ $dev == mix && $tool == ib_@(read|atomic)_* ]] && set -- "$@" -o 16
	for try in 1 2; do
		port=$((port + 1))
		crc=1
		: >"$work/cli"
		if setup "$dev" client && ctl "$dev $port $tool $*" &&
			read -r -t 30 line <&3 && [[ $line == ready ]]; then
			timeout "$T" stdbuf -oL "${PRE[@]}" "$tool" "${ARGS[@]}" -F -p $port "$@" $SRV_IP >"$work/cli" 2>&1
			crc=$?
			read -r -t $((T + 5)) line <&3
		fi
		exec 3>&-
		# perftest could not time its CPU's clock (TCG's jitter): once more.
		grep -q 'Correlation coefficient r^2' "$work/cli" || break
		echo "  | $row $dev: perftest could not time its clock; once more" >&2
	done
	v=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$work/cli" 2>/dev/null | tail -1 |
		awk -v c="$col" -v s="$scale" '{ print $c * s }')
	grep -q 'Correlation coefficient r^2' "$work/cli" && v=
	[[ $crc == 0 && -n $v ]] || { v=fail; { sed "s/^/  | /" "$work/cli" | tail -${VM2_FAIL_LINES:-5}; echo "  | exit $crc"; } >&2; }
	printf '%s\t%s\t%s\n' "$row" "$dev" "$v"
}
na() { wanted "$1" && printf '%s\t%s\tn/a\n' "$1" "$2"; return 0; }

mib=0.001048576 # perftest's MB/sec is MiB/s; rows are GB/s
for dev in ${VM2_DEVICES:-roce rsw mix rxe siw}; do
	echo "== $dev" >&2
	perf "ib_send_bw 2 B, M msg/s" $dev 5 1 ib_send_bw -s 2 -n 20000
	if [[ $dev == siw ]]; then
		na "ib_atomic_bw fetch-and-add, M ops/s" $dev
	else
		perf "ib_atomic_bw fetch-and-add, M ops/s" $dev 5 1 ib_atomic_bw -n 10000
	fi
	for s in 65536 1048576; do
		for t in write read send; do
			perf "ib_${t}_bw $((s / 1024)) KiB, GB/s" $dev 4 $mib ib_${t}_bw -s $s \
				-n $((s == 65536 ? 2000 : 200))
		done
	done
	perf "ib_send_lat 2 B, us" $dev 5 1 ib_send_lat -s 2 -n 2000
	perf "ib_read_lat 2 B, us" $dev 5 1 ib_read_lat -s 2 -n 2000
	if [[ $dev == siw ]]; then
		na "ib_atomic_lat, us" $dev
	else
		perf "ib_atomic_lat, us" $dev 5 1 ib_atomic_lat -n 2000
	fi
done
ctl quit
exec 3>&-
rm -rf "$work"
