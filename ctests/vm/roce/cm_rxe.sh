#!/bin/bash
# rdma_cm between rsw (RSW_ROCEV2) and the kernel's rxe: the IB CM's MADs
# on QP1 (librdmacm-rs/src/gsi.rs). Debian's rping over our librdmacm and
# libibverbs on rsw_vD against Debian's rping on rxeC, each side as
# server: five pings, each payload verified (-V) and printed (-v), both
# exits 0, the disconnect included. Then a connect to a port nobody
# listens on, each way: the client must report RDMA_CM_EVENT_REJECTED
# with the IB CM's reason 8 (invalid service ID). ucmatose each side as
# server (sends both ways, the disconnect); udaddy each side as server
# (SIDR_REQ/SIDR_REP, then datagrams both ways). A capture of vC (cap.py) must
# show, for each rping, the client's DREQ and the server's DREP, and the
# CM's messages of each connection (REQ, REP, RTU) in their directions.
# In the VM test bed:
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
# cm_mads DIR ATTR: how many CM MADs of attribute ATTR (hex, 4 digits)
# the capture holds in direction DIR (in: from rsw to rxe, out: back).
cm_mads() {
	awk -v d="$1" -v a="$2" '$1 == d && substr($2, 1, 1) == "4" &&
		substr($2, 97, 6) == "010702" && substr($2, 129, 4) == a { n++ }
		END { print n + 0 }' /job/cap.txt
}
capture() {
	python3 /roce/cap.py vC /job/cap.txt 60 >/job/capready 2>&1 &
	CAP=$!
	for _ in $(seq 100); do
		grep -q ready /job/capready && return 0
		sleep 0.05 # polling a condition with a bound: the capture's start
	done
}
# ping SERVER(rxe|rsw): rping -C 5 -V -v, the client on the other side.
ping() {
	local server=$1 s c ok n req rep rtu dreq drep cdir sdir
	PORT=$((PORT + 1))
	: >/job/srv.log
	capture
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
	kill $CAP
	wait $CAP
	n=$(grep -c 'ping data: rdma-ping-' /job/cli.log)
	# The client's messages go one way, the server's the other.
	if [ "$server" = rxe ]; then cdir=in sdir=out; else cdir=out sdir=in; fi
	req=$(cm_mads $cdir 0010) rep=$(cm_mads $sdir 0013) rtu=$(cm_mads $cdir 0014)
	dreq=$(cm_mads $cdir 0015) drep=$(cm_mads $sdir 0016)
	ok=1
	[ $s = 0 ] && [ $c = 0 ] && [ "$n" = 5 ] || ok=0
	[ "$req" -ge 1 ] && [ "$rep" -ge 1 ] && [ "$rtu" -ge 1 ] || ok=0
	[ "$dreq" -ge 1 ] && [ "$drep" -ge 1 ] || ok=0
	echo "rping server=$server server_rc=$s client_rc=$c pings=$n REQ=$req REP=$rep RTU=$rtu DREQ=$dreq DREP=$drep"
	# A CM message of the kernel's, for the unit tests' fixtures.
	awk -v d=$sdir '$1 == d && substr($2, 129, 4) == "0013" { print "FIXTURE rep " $2; exit }' /job/cap.txt
	awk -v d=$sdir '$1 == d && substr($2, 129, 4) == "0010" { print "FIXTURE req " $2; exit }' /job/cap.txt
	awk '$1 == "out" && substr($2, 129, 4) == "0010" { print "FIXTURE req " $2; exit }' /job/cap.txt
	result "rping server=$server" $ok
}
# ucmatose SERVER(rxe|rsw): one connection, sends both ways, disconnect.
ucma() {
	local server=$1 s c ok
	PORT=$((PORT + 1))
	if [ "$server" = rxe ]; then
		theirs timeout 30 ucmatose -b 10.0.8.1 -p $PORT >/job/srv.log 2>&1 &
		SRV=$!
		listening rxe $PORT
		ours timeout 30 ucmatose -s 10.0.8.1 -p $PORT >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 30 ucmatose -b 10.0.8.2 -p $PORT >/job/srv.log 2>&1 &
		SRV=$!
		listening rsw $PORT
		theirs timeout 30 ucmatose -s 10.0.8.2 -p $PORT >/job/cli.log 2>&1
		c=$?
	fi
	wait $SRV
	s=$?
	ok=1
	[ $s = 0 ] && [ $c = 0 ] || ok=0
	grep -q 'return status 0' /job/cli.log && grep -q 'return status 0' /job/srv.log || ok=0
	echo "ucmatose server=$server server_rc=$s client_rc=$c"
	result "ucmatose server=$server" $ok
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
# udaddy SERVER(rxe|rsw): SIDR (its fixed port 7174), then datagrams
# both ways.
udaddy_run() {
	local server=$1 s c ok
	if [ "$server" = rxe ]; then
		theirs timeout 30 udaddy -b 10.0.8.1 >/job/srv.log 2>&1 &
		SRV=$!
		listening rxe 7174
		ours timeout 30 udaddy -s 10.0.8.1 >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 30 udaddy -b 10.0.8.2 >/job/srv.log 2>&1 &
		SRV=$!
		listening rsw 7174
		theirs timeout 30 udaddy -s 10.0.8.2 >/job/cli.log 2>&1
		c=$?
	fi
	wait $SRV
	s=$?
	ok=1
	[ $s = 0 ] && [ $c = 0 ] || ok=0
	grep -q 'return status 0' /job/cli.log && grep -q 'return status 0' /job/srv.log || ok=0
	echo "udaddy server=$server server_rc=$s client_rc=$c"
	result "udaddy server=$server" $ok
}
ping rxe
ping rsw
ucma rxe
ucma rsw
udaddy_run rxe
udaddy_run rsw
rejected rxe
rejected rsw
echo "RESULT fails=$FAILS"
[ $FAILS = 0 ]
