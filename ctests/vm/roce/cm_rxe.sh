#!/bin/bash
# rdma_cm between rsw (RSW_ROCEV2) and the kernel's rxe: the IB CM's MADs
# on QP1 (librdmacm-rs/src/gsi.rs). Debian's rping over our librdmacm and
# libibverbs on rsw_vD against Debian's rping on rxeC, each side as
# server: five pings, each payload verified (-V) and printed (-v), both
# exits 0, the disconnect included. Then a connect to a port nobody
# listens on, each way: the client must report RDMA_CM_EVENT_REJECTED
# with the IB CM's reason 8 (invalid service ID). In the VM test bed:
#
#   ctests/vm/run-in-vm.sh -r rxe -s "$PWD/ctests/vm/roce:/roce" -f ctests/vm/roce/cm_rxe.sh
#
# The topology is rxe_link.sh's. One RESULT line per run; exits 0 only
# when all passed.
set -u
B=${RSV_BUILD:?run through run-in-vm.sh, which shares the build}
. /roce/rxe_link.sh
ours() {
	ip netns exec roce env -u LD_PRELOAD -u RDMAV_DRIVERS -u IBV_DRIVERS \
		LD_LIBRARY_PATH="$B/lib" IBV_CONFIG_DIR="$B/etc/libibverbs.d" RSW_ROCEV2=vD "$@"
}
theirs() { env -u LD_LIBRARY_PATH -u LD_PRELOAD -u IBV_CONFIG_DIR "$@"; }
# listening SIDE PORT: the server's listener is up (the kernel's rdma_cm
# ids as rdma(8) lists them; ours keeps a TCP listener on the port too).
listening() {
	for _ in $(seq 200); do
		if [ "$1" = rsw ]; then
			ip netns exec roce ss -ltn | grep -q ":$2 " && return 0
		else
			rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*src-addr 10.0.8.1:$2 " && return 0
		fi
		sleep 0.05 # polling a condition with a bound: the server's listen
	done
	return 1
}
FAILS=0
PORT=18900
result() { # TAG OK: one line, the logs when it failed
	printf 'RESULT %s ok=%s\n' "$1" "$2"
	if [ "$2" != 1 ]; then
		FAILS=$((FAILS + 1))
		echo "--- server"
		cat /job/srv.log
		echo "--- client"
		cat /job/cli.log
	fi
}
# ping SERVER(rxe|rsw): rping -C 5 -V -v, the client on the other side.
ping() {
	local server=$1 s c ok n
	PORT=$((PORT + 1))
	: >/job/srv.log
	if [ "$server" = rxe ]; then
		theirs timeout 30 rping -s -a 10.0.8.1 -p $PORT -V >/job/srv.log 2>&1 &
		SRV=$!
		listening rxe $PORT
		ours timeout 30 rping -c -a 10.0.8.1 -p $PORT -C 5 -V -v >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 30 rping -s -a 10.0.8.2 -p $PORT -V >/job/srv.log 2>&1 &
		SRV=$!
		listening rsw $PORT
		theirs timeout 30 rping -c -a 10.0.8.2 -p $PORT -C 5 -V -v >/job/cli.log 2>&1
		c=$?
	fi
	wait $SRV
	s=$?
	n=$(grep -c 'ping data: rdma-ping-' /job/cli.log)
	ok=1
	[ $s = 0 ] && [ $c = 0 ] && [ "$n" = 5 ] || ok=0
	echo "rping server=$server server_rc=$s client_rc=$c pings=$n"
	result "rping server=$server" $ok
}
# rejected SERVER(rxe|rsw): a client to a port with no listener behind a
# CM that is up (on rsw, a server on the next port keeps QP1 open).
rejected() {
	local server=$1 c ok
	PORT=$((PORT + 2))
	: >/job/srv.log
	if [ "$server" = rxe ]; then
		ours timeout 20 rping -c -a 10.0.8.1 -p $PORT -C 1 -v >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 40 rping -s -a 10.0.8.2 -p $((PORT + 1)) >/job/srv.log 2>&1 &
		SRV=$!
		listening rsw $((PORT + 1))
		theirs timeout 20 rping -c -a 10.0.8.2 -p $PORT -C 1 -v >/job/cli.log 2>&1
		c=$?
		kill $SRV 2>/dev/null
		wait $SRV 2>/dev/null
	fi
	ok=1
	[ $c != 0 ] && [ $c != 124 ] || ok=0
	grep -q 'RDMA_CM_EVENT_REJECTED, error 8' /job/cli.log || ok=0
	echo "rejected server=$server client_rc=$c"
	result "rejected server=$server" $ok
}
ping rxe
ping rsw
rejected rxe
rejected rsw
echo "RESULT fails=$FAILS"
[ $FAILS = 0 ]
