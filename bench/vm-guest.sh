#!/bin/bash
# Runs inside the VM of ctests/vm/ (bench/vm.sh boots it): the same
# perftest and qperf rows over the kernel's rxe0 and siw0 (Debian's
# rdma-core, the anchors of issue 28), over rsw on the same interface
# (our libraries from $RSV_BUILD, RSW_TRANSPORT=tcp: rsw's path between
# hosts), and over rsw in RoCEv2 mode (RSW_ROCEV2). Server and client of
# rxe, siw and rsw over TCP run in this one guest on the same address, as
# every soft device does here. rsw in RoCEv2 mode cannot: rxe holds UDP
# port 4791 in this namespace, and one process per address may hold it,
# so its two ends are two namespaces joined by a veth pair (roce: rsw to
# rsw, 10.0.9.1 and 10.0.9.2), and one more veth pair carries rsw against
# rxe (mix: our client in namespace roce on vD, 10.0.8.2, Debian's server
# on rxeC, 10.0.8.1, ctests/vm/roce/rxe_link.sh's topology; bandwidth and
# message rate rows only). One line a measurement on stdout:
# ROW<TAB>DEVICE<TAB>VALUE (VALUE "fail" when the run failed, "n/a" where
# the device has no such operation: siw has no atomics, and iWARP no
# immediate data, which qperf's rc_rdma_write_lat sends). Everything runs
# under TCG emulation: figures are for comparing the devices with each
# other, not with the host. VM_BENCH_DEVICES picks devices (default
# "rxe siw rsw roce mix"), VM_BENCH_ONLY rows.
set -u
B=${RSV_BUILD:?RSV_BUILD names the build directory}
RXE_IP=10.0.0.1 SIW_IP=10.0.1.1
RSW_DEV=rsw_eth0           # the interface that carries 10.0.0.1
T=${VM_BENCH_LIMIT:-60}    # seconds a run may take
work=$(mktemp -d)
port=30000
logs=${VM_BENCH_LOGS:-}   # a directory for every run's output (e.g. /job/logs)
[[ -z $logs ]] || mkdir -p "$logs"
keep() { [[ -z $logs ]] || { cp "$work/cli" "$logs/$port.cli"; cp "$work/srv" "$logs/$port.srv"; echo "$*" > "$logs/$port.what"; }; }

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

# The namespaces of rsw's RoCEv2 columns (see the header), made once.
roce_setup() {
	[[ -n ${ROCE_UP:-} ]] && return 0
	ROCE_UP=1
	ip netns add rA && ip netns add rB || return 1
	ip link add vA type veth peer name vB
	ip link set vA netns rA
	ip link set vB netns rB
	ip -n rA addr add 10.0.9.1/24 dev vA
	ip -n rB addr add 10.0.9.2/24 dev vB
	local n
	for n in rA rB; do ip -n $n link set lo up; done
	ip -n rA link set vA up
	ip -n rB link set vB up
}
mix_setup() {
	[[ -n ${MIX_UP:-} ]] && return 0
	MIX_UP=1
	local g
	ip netns add roce || return 1
	ip link add vC type veth peer name vD
	ip link set vD netns roce
	ip addr add 10.0.8.1/24 dev vC
	ip link set vC up
	ip -n roce addr add 10.0.8.2/24 dev vD
	ip -n roce link set vD up
	ip -n roce link set lo up
	rdma link add rxeC type rxe netdev vC || return 1
	for _ in $(seq 100); do
		MIX_GID=$(gid_index rxeC 10.0.8.1) && return 0
		sleep 0.1   # bounded: the kernel adds the GID shortly
	done
	return 1
}

# wait_port PORT PID [NETNS]: until something listens on TCP PORT (an
# RDMA CM listener on siw shows as one too) or the server exits; at most
# 15 s.
wait_port() {
	local end=$((SECONDS + 15)) in=()
	[[ -n ${3:-} ]] && in=(ip netns exec "$3")
	while ((SECONDS < end)); do
		"${in[@]}" ss -Hltn "sport = :$1" | grep -q . && return 0
		rdma res show cm_id 2>/dev/null | grep "state LISTEN" | grep -q ":$1 " && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 0   # an RDMA CM listener not seen: the client decides
}

# wanted ROW: VM_BENCH_ONLY (an extended regex) picks rows for a quick look.
wanted() { [[ -z ${VM_BENCH_ONLY:-} || $1 =~ $VM_BENCH_ONLY ]]; }

OURS=(LD_LIBRARY_PATH="$B/lib" IBV_CONFIG_DIR="$B/etc/libibverbs.d")
# dev_args DEVICE: how perftest and qperf reach DEVICE: the server's and
# the client's command prefixes (SRV, CLI) and device arguments (SARGS,
# CARGS), qperf's (QARGS), the server's address (IP) and namespace (NS).
dev_args() {
	NS=
	case $1 in
	rxe) SRV=(env) IP=$RXE_IP QARGS=(-cm1) SARGS=(-d rxe0 -x "$(gid_index rxe0 $RXE_IP)") ;;
	siw) SRV=(env) IP=$SIW_IP QARGS=(-cm1) SARGS=(-d siw0 -R) ;;
	# The kernel's CM off: 10.0.0.1 is rxe0's too, and the kernel device
	# would win the address (README: RDMACM_RS_KERNEL_CM).
	rsw) SRV=(env "${OURS[@]}" RSW_TRANSPORT=tcp RDMACM_RS_KERNEL_CM=0)
	     IP=$RXE_IP QARGS=(-cm1) SARGS=(-d "$RSW_DEV" -x 0) ;;
	# qperf -cm1: our CM between two rsw devices (not the CM on QP1).
	roce) SRV=(ip netns exec rA env "${OURS[@]}" RSW_ROCEV2=vA RDMACM_RS_KERNEL_CM=0)
	      CLI=(ip netns exec rB env "${OURS[@]}" RSW_ROCEV2=vB RDMACM_RS_KERNEL_CM=0)
	      SARGS=(-d rsw_vA -x 0) CARGS=(-d rsw_vB -x 0) IP=10.0.9.1 NS=rA QARGS=(-cm1)
	      return ;;
	# Debian's server on rxeC, our client in RoCEv2 mode.
	mix) SRV=(env) SARGS=(-d rxeC -x "$MIX_GID") IP=10.0.8.1
	     CLI=(ip netns exec roce env "${OURS[@]}" RSW_ROCEV2=vD) CARGS=(-d rsw_vD -x 0)
	     return ;;
	esac
	CLI=("${SRV[@]}") CARGS=("${SARGS[@]}")
}

# perf ROW DEVICE COLUMN SCALE TOOL ARGS...: COLUMN of the client's last
# result row, times SCALE.
perf() {
	local row=$1 dev=$2 col=$3 scale=$4 tool=$5 v srv crc try
	shift 5
	wanted "$row" || return 0
	dev_args "$dev"
	for try in 1 2; do
		port=$((port + 1))
		"${SRV[@]}" timeout "$T" "$tool" "${SARGS[@]}" -F -p $port "$@" >"$work/srv" 2>&1 &
		srv=$!
		crc=1
		if wait_port $port $srv "$NS"; then
			"${CLI[@]}" timeout "$T" "$tool" "${CARGS[@]}" -F -p $port "$@" "$IP" >"$work/cli" 2>&1
			crc=$?
		fi
		kill $srv 2>/dev/null
		wait $srv 2>/dev/null
		# perftest could not time its CPU's clock (a fit of TSC cycles
		# against gettimeofday, which TCG's jitter can spoil): its figures
		# are 0 or inf, so once more.
		grep -q 'Correlation coefficient r^2' "$work/cli" || break
		echo "  | $row $dev: perftest could not time its clock; once more" >&2
	done
	v=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$work/cli" 2>/dev/null | tail -1 |
		awk -v c="$col" -v s="$scale" '{ print $c * s }')
	grep -q 'Correlation coefficient r^2' "$work/cli" && v=
	[[ $crc == 0 && -n $v ]] || { v=fail; { sed "s/^/  | /" "$work/cli" | tail -5; echo "  | exit $crc"; } >&2; }
	keep "$row $dev"
	printf '%s\t%s\t%s\n' "$row" "$dev" "$v"
}

# qp ROW DEVICE TEST ARGS...: qperf, latency in us or bandwidth in GB/s.
qp() {
	local row=$1 dev=$2 test=$3 v srv crc
	shift 3
	wanted "$row" || return 0
	dev_args "$dev"
	port=$((port + 1))
	"${SRV[@]}" timeout "$T" qperf -lp $port >"$work/srv" 2>&1 &
	srv=$!
	crc=1
	if wait_port $port $srv "$NS"; then
		"${CLI[@]}" timeout "$T" qperf -lp $port "${QARGS[@]}" -cp1 "$@" "$IP" "$test" >"$work/cli" 2>&1
		crc=$?
	fi
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
	v=$(awk '$1 == "latency" || $1 == "bw" {
		u = $4; x = $3
		if (u == "ns") x /= 1000; else if (u == "ms") x *= 1000; else if (u == "sec") x *= 1e6
		else if (u == "KB/sec") x /= 1e6; else if (u == "MB/sec") x /= 1e3; else if (u == "bytes/sec") x /= 1e9
		print x }' "$work/cli")
	[[ $crc == 0 && -n $v ]] || { v=fail; { sed "s/^/  | /" "$work/cli" | tail -5; echo "  | exit $crc"; } >&2; }
	keep "$row $dev"
	printf '%s\t%s\t%s\n' "$row" "$dev" "$v"
}

# na ROW DEVICE WHY: a row the device cannot run (WHY on stderr).
na() { wanted "$1" && printf '%s\t%s\tn/a\n' "$1" "$2"; return 0; }

mib=0.001048576   # perftest's MB/sec is MiB/s; rows are GB/s
for dev in ${VM_BENCH_DEVICES:-rxe siw rsw roce mix}; do
	echo "== $dev" >&2
	case $dev in
	roce) roce_setup || { echo "bench: no namespaces for rsw RoCEv2" >&2; continue; } ;;
	mix) mix_setup || { echo "bench: no rxeC for rsw RoCEv2 against rxe" >&2; continue; } ;;
	esac
	# rsw grants 16 outstanding READs and atomics; perftest's client asks
	# for its server's count (rxe: 128), which rsw's modify_qp refuses.
	o=()
	[[ $dev == mix ]] && o=(-o 16)
	perf "ib_send_bw 2 B, M msg/s" $dev 5 1 ib_send_bw -s 2 -n 20000
	if [[ $dev == siw ]]; then
		na "ib_atomic_bw fetch-and-add, M ops/s" $dev
	else
		perf "ib_atomic_bw fetch-and-add, M ops/s" $dev 5 1 ib_atomic_bw -n 10000 "${o[@]}"
	fi
	for s in 65536 1048576; do
		for t in write read send; do
			perf "ib_${t}_bw $((s / 1024)) KiB, GB/s" $dev 4 $mib ib_${t}_bw -s $s -n $((s == 65536 ? 2000 : 200)) \
				$([[ $t == read ]] && echo "${o[@]}")
		done
	done
	# Against rxe: the bandwidth and message rate rows only (issue 29).
	[[ $dev == mix ]] && continue
	perf "ib_send_lat 2 B, us" $dev 5 1 ib_send_lat -s 2 -n 2000
	perf "ib_read_lat 2 B, us" $dev 5 1 ib_read_lat -s 2 -n 2000
	if [[ $dev == siw ]]; then
		na "ib_atomic_lat, us" $dev
	else
		perf "ib_atomic_lat, us" $dev 5 1 ib_atomic_lat -n 2000
	fi
	qp "qperf rc_lat 64 B, us" $dev rc_lat -t 2 -m 64
	if [[ $dev == siw ]]; then
		na "qperf rc_rdma_write_lat 64 B, us" $dev
	else
		qp "qperf rc_rdma_write_lat 64 B, us" $dev rc_rdma_write_lat -t 2 -m 64
	fi
	qp "qperf rc_bw 64 KiB, GB/s" $dev rc_bw -t 2 -m 65536
done
rm -rf "$work"
