#!/bin/bash
# Runs inside the VM of ctests/vm/ (bench/vm.sh boots it): the same
# perftest and qperf rows over the kernel's rxe0 and siw0 (Debian's
# rdma-core, the anchors of issue 28) and over rsw on the same interface
# (our libraries from $RSV_BUILD, RSW_TRANSPORT=tcp: rsw's path between
# hosts). Server and client run in this one guest on the same address, as
# every soft device does here, so each device carries the same kernel
# TCP/IP path. One line a measurement on stdout: ROW<TAB>DEVICE<TAB>VALUE
# (VALUE "fail" when the run failed, "n/a" where the device has no such
# operation: siw has no atomics, and iWARP no immediate data, which qperf's
# rc_rdma_write_lat sends). Everything runs under TCG emulation:
# figures are for comparing the devices with each other, not with the host.
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

# wait_port PORT PID: until something listens on TCP PORT (an RDMA CM
# listener on siw shows as one too) or the server exits; at most 15 s.
wait_port() {
	local end=$((SECONDS + 15))
	while ((SECONDS < end)); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		rdma res show cm_id 2>/dev/null | grep "state LISTEN" | grep -q ":$1 " && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 0   # an RDMA CM listener not seen: the client decides
}

# wanted ROW: VM_BENCH_ONLY (an extended regex) picks rows for a quick look.
wanted() { [[ -z ${VM_BENCH_ONLY:-} || $1 =~ $VM_BENCH_ONLY ]]; }

# dev_args DEVICE: how perftest and qperf reach DEVICE (sets ENV, ARGS,
# QARGS and IP).
dev_args() {
	case $1 in
	rxe) ENV=(env) IP=$RXE_IP QARGS=(-cm1) ARGS=(-d rxe0 -x "$(gid_index rxe0 $RXE_IP)") ;;
	siw) ENV=(env) IP=$SIW_IP QARGS=(-cm1) ARGS=(-d siw0 -R) ;;
	# The kernel's CM off: 10.0.0.1 is rxe0's too, and the kernel device
	# would win the address (README: RDMACM_RS_KERNEL_CM).
	rsw) ENV=(env LD_LIBRARY_PATH="$B/lib" IBV_CONFIG_DIR="$B/etc/libibverbs.d" RSW_TRANSPORT=tcp RDMACM_RS_KERNEL_CM=0)
	     IP=$RXE_IP QARGS=(-cm1) ARGS=(-d "$RSW_DEV" -x 0) ;;
	esac
}

# perf ROW DEVICE COLUMN SCALE TOOL ARGS...: COLUMN of the client's last
# result row, times SCALE.
perf() {
	local row=$1 dev=$2 col=$3 scale=$4 tool=$5 v srv crc
	shift 5
	wanted "$row" || return 0
	dev_args "$dev"
	port=$((port + 1))
	"${ENV[@]}" timeout "$T" "$tool" "${ARGS[@]}" -F -p $port "$@" >"$work/srv" 2>&1 &
	srv=$!
	crc=1
	if wait_port $port $srv; then
		"${ENV[@]}" timeout "$T" "$tool" "${ARGS[@]}" -F -p $port "$@" "$IP" >"$work/cli" 2>&1
		crc=$?
	fi
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
	v=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$work/cli" 2>/dev/null | tail -1 |
		awk -v c="$col" -v s="$scale" '{ print $c * s }')
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
	"${ENV[@]}" timeout "$T" qperf -lp $port >"$work/srv" 2>&1 &
	srv=$!
	crc=1
	if wait_port $port $srv; then
		"${ENV[@]}" timeout "$T" qperf -lp $port "${QARGS[@]}" -cp1 "$@" "$IP" "$test" >"$work/cli" 2>&1
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

mib=0.001048576   # perftest's MB/sec is MiB/s; rows are GB/s
for dev in ${VM_BENCH_DEVICES:-rxe siw rsw}; do
	echo "== $dev" >&2
	perf "ib_send_bw 2 B, M msg/s" $dev 5 1 ib_send_bw -s 2 -n 20000
	if [[ $dev == siw ]]; then
		printf '%s\t%s\tn/a\n' "ib_atomic_bw fetch-and-add, M ops/s" $dev
	else
		perf "ib_atomic_bw fetch-and-add, M ops/s" $dev 5 1 ib_atomic_bw -n 10000
	fi
	for s in 65536 1048576; do
		for t in write read send; do
			perf "ib_${t}_bw $((s / 1024)) KiB, GB/s" $dev 4 $mib ib_${t}_bw -s $s -n $((s == 65536 ? 2000 : 200))
		done
	done
	perf "ib_send_lat 2 B, us" $dev 5 1 ib_send_lat -s 2 -n 2000
	perf "ib_read_lat 2 B, us" $dev 5 1 ib_read_lat -s 2 -n 2000
	if [[ $dev == siw ]]; then
		printf '%s\t%s\tn/a\n' "ib_atomic_lat, us" $dev
	else
		perf "ib_atomic_lat, us" $dev 5 1 ib_atomic_lat -n 2000
	fi
	qp "qperf rc_lat 64 B, us" $dev rc_lat -t 2 -m 64
	if [[ $dev == siw ]]; then
		printf '%s\t%s\tn/a\n' "qperf rc_rdma_write_lat 64 B, us" $dev
	else
		qp "qperf rc_rdma_write_lat 64 B, us" $dev rc_rdma_write_lat -t 2 -m 64
	fi
	qp "qperf rc_bw 64 KiB, GB/s" $dev rc_bw -t 2 -m 65536
done
rm -rf "$work"
