#!/bin/bash
# Captures the RoCEv2 packets rxe sends, for the fixtures of
# providers/rsw/tests/fixtures/roce_rxe.txt. In the VM test bed:
#
#   ctests/vm/run-in-vm.sh -r rxe -k -s "$PWD/ctests/vm/roce" \
#       -f ctests/vm/roce/capture.sh "$PWD/ctests/vm/roce"
#
# leaves cap-<case>.txt files (cap.py's format) in the kept job directory.
# rxe loops packets between its own GIDs inside the kernel, and rxe in
# Debian 12's kernel routes only in the initial network namespace, so two
# rxe devices sit on the two ends of a veth pair in that namespace, and
# policy routing sends the packets between their addresses over the pair
# (table 100 for locally sent ones, the local table for arriving ones)
# instead of over lo; cap.py watches vA.
set -u
HERE=${1:?usage: capture.sh DIR_OF_CAP_PY}
cd /job || exit 1

ip link add vA type veth peer name vB
ip addr add 10.0.9.1/24 dev vA
ip addr add 10.0.9.2/24 dev vB
ip addr add fd00:9::1/64 dev vA nodad
ip addr add fd00:9::2/64 dev vB nodad
ip link set vA up
ip link set vB up
for v in vA vB all; do
	sysctl -qw net.ipv4.conf.$v.accept_local=1 net.ipv4.conf.$v.rp_filter=0
done
MA=$(cat /sys/class/net/vA/address) MB=$(cat /sys/class/net/vB/address)
for f in "" -6; do
	ip $f rule add pref 10 iif lo lookup 100
	ip $f rule add pref 20 lookup local
	ip $f rule del pref 0 lookup local
done
ip route add 10.0.9.1 dev vB src 10.0.9.2 table 100
ip route add 10.0.9.2 dev vA src 10.0.9.1 table 100
ip -6 route add fd00:9::1 dev vB src fd00:9::2 table 100
ip -6 route add fd00:9::2 dev vA src fd00:9::1 table 100
ip neigh add 10.0.9.1 lladdr "$MA" dev vB nud permanent
ip neigh add 10.0.9.2 lladdr "$MB" dev vA nud permanent
ip -6 neigh add fd00:9::1 lladdr "$MA" dev vB nud permanent
ip -6 neigh add fd00:9::2 lladdr "$MB" dev vA nud permanent
rdma link add rxeA type rxe netdev vA
rdma link add rxeB type rxe netdev vB

gidx() { # device, pattern: the RoCE v2 GID index whose GID matches
	local g t
	for g in "/sys/class/infiniband/$1/ports/1/gids/"*; do
		grep -q "$2" "$g" 2>/dev/null || continue
		t=$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/${g##*/}" 2>/dev/null)
		[ "$t" = "RoCE v2" ] && { echo "${g##*/}"; return; }
	done
}
for _ in $(seq 100); do
	A4=$(gidx rxeA 0a00:0901) B4=$(gidx rxeB 0a00:0902)
	A6=$(gidx rxeA '^fd00:0009') B6=$(gidx rxeB '^fd00:0009')
	[ -n "$A4" ] && [ -n "$B4" ] && [ -n "$A6" ] && [ -n "$B6" ] && break
	sleep 0.1
done
echo "GID indexes: rxeA $A4 $A6, rxeB $B4 $B6"

start_cap() { # case
	python3 -u "$HERE/cap.py" vA "/job/cap-$1.txt" 90 >"/job/cap-$1.log" &
	CAP=$!
	for _ in $(seq 100); do grep -q ready "/job/cap-$1.log" && return; sleep 0.1; done
	echo "cap.py did not start"
}
stop_cap() { # case
	kill "$CAP"
	wait "$CAP"
	echo "CASE $1 $2 packets=$(wc -l <"/job/cap-$1.txt")"
}
# The commands are words to split.
# shellcheck disable=SC2086
run() { # case, server command, client command
	start_cap "$1"
	timeout 40 $2 >"/job/srv-$1.log" 2>&1 &
	local sp=$! cr sr
	for _ in $(seq 100); do ss -ltn | grep -q ':18515' && break; sleep 0.1; done
	timeout 40 $3 >"/job/cli-$1.log" 2>&1
	cr=$?
	wait $sp
	sr=$?
	stop_cap "$1" "server=$sr client=$cr"
}
# shellcheck disable=SC2086
only() { # case, command
	start_cap "$1"
	timeout 40 $2 >"/job/cli-$1.log" 2>&1
	local r=$?
	stop_cap "$1" "rc=$r"
	cat "/job/cli-$1.log"
}

S=10.0.9.1
run rc_pingpong6 "ibv_rc_pingpong -d rxeA -g $A6 -s 37 -n 1" "ibv_rc_pingpong -d rxeB -g $B6 -s 37 -n 1 $S"
run rc_pingpong_seg "ibv_rc_pingpong -d rxeA -g $A4 -s 600 -n 1 -m 256" "ibv_rc_pingpong -d rxeB -g $B4 -s 600 -n 1 -m 256 $S"
run uc_pingpong "ibv_uc_pingpong -d rxeA -g $A4 -s 600 -n 1 -m 256" "ibv_uc_pingpong -d rxeB -g $B4 -s 600 -n 1 -m 256 $S"
run ud_pingpong "ibv_ud_pingpong -d rxeA -g $A4 -s 64 -n 1" "ibv_ud_pingpong -d rxeB -g $B4 -s 64 -n 1 $S"
run ud_pingpong6 "ibv_ud_pingpong -d rxeA -g $A6 -s 64 -n 1" "ibv_ud_pingpong -d rxeB -g $B6 -s 64 -n 1 $S"
run write_bw "ib_write_bw -d rxeA -x $A4 -s 600 -n 5 -m 256" "ib_write_bw -d rxeB -x $B4 -s 600 -n 5 -m 256 $S"
run read_bw "ib_read_bw -d rxeA -x $A4 -s 600 -n 5 -m 256" "ib_read_bw -d rxeB -x $B4 -s 600 -n 5 -m 256 $S"
run read_bw_small "ib_read_bw -d rxeA -x $A4 -s 37 -n 5" "ib_read_bw -d rxeB -x $B4 -s 37 -n 5 $S"
run atomic_fa "ib_atomic_bw -d rxeA -x $A4 -n 5 -A FETCH_AND_ADD" "ib_atomic_bw -d rxeB -x $B4 -n 5 -A FETCH_AND_ADD $S"
run atomic_cs "ib_atomic_bw -d rxeA -x $A4 -n 5 -A CMP_AND_SWAP" "ib_atomic_bw -d rxeB -x $B4 -n 5 -A CMP_AND_SWAP $S"
for c in rc rnr nak uc ud; do
	only "ops_$c" "python3 $HERE/ops.py $A4 $B4 $c"
done
only ops_ud6 "python3 $HERE/ops.py $A6 $B6 ud"
