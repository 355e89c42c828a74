#!/bin/bash
# rsw's UD QPs speak RoCEv2 with the kernel's rxe (RSW_ROCEV2): Debian's
# ibv_ud_pingpong on rxeC and the same program over our libibverbs on
# rsw_vD in RoCEv2 mode exchange SENDs, each side as server in turn, at
# several sizes, with the received bytes checked (-c). In the VM test bed:
#
#   ctests/vm/run-in-vm.sh -r rxe -s "$PWD/ctests/vm/roce:/roce" -f ctests/vm/roce/ud_pingpong_rxe.sh
#
# rxeC sits on vC (10.0.8.1) in the initial namespace; rsw runs in
# namespace roce on vD (10.0.8.2), where UDP port 4791 is free (rxe holds
# it in the initial namespace). Prints one RESULT line per run and exits 0
# only when every run of both programs succeeded and rxe counted the
# packets, then the same with roce_ud_peer (ctests/src), which checks
# every byte, the immediate, src_qp and the GRH; and a control: without
# RSW_ROCEV2 the exchange must fail.
set -u
B=${RSV_BUILD:?run through run-in-vm.sh, which shares the build}
ITERS=${ITERS:-200}
SIZES=${SIZES:-1 64 1000 1024}
. /roce/rxe_link.sh
CNT=/sys/class/infiniband/rxeC/ports/1/hw_counters
# Ours: rsw only (its GID 0 is vD's IPv4 address), in RoCEv2 mode.
ours() {
	ip netns exec roce env -u LD_PRELOAD -u RDMAV_DRIVERS -u IBV_DRIVERS \
		LD_LIBRARY_PATH="$B/lib" IBV_CONFIG_DIR="$B/etc/libibverbs.d" RSW_ROCEV2=vD "$@"
}
theirs() { env -u LD_LIBRARY_PATH -u LD_PRELOAD -u IBV_CONFIG_DIR "$@"; }
# Waits (bounded) for a server's exchange port: $1 the namespace ("" for
# the initial one), $2 the port.
listening() {
	for _ in $(seq 200); do
		if [ -n "$1" ]; then
			ip netns exec "$1" ss -ltn | grep -q ":$2 " && return 0
		else
			ss -ltn | grep -q ":$2 " && return 0
		fi
		sleep 0.05
	done
	return 1
}
echo "--- ours: $(ours ibv_devices 2>&1 | tr -s ' \n' ' ')"
FAILS=0
PORT=18600
for SIZE in $SIZES; do
	for SERVER in rxe rsw; do
		PORT=$((PORT + 1))
		SENT=$(cat $CNT/sent_pkts)
		RCVD=$(cat $CNT/rcvd_pkts)
		T0=$(date +%s.%N)
		if [ $SERVER = rxe ]; then
			theirs timeout 60 ibv_ud_pingpong -d rxeC -g "$G" -s "$SIZE" -n "$ITERS" -c -p $PORT \
				>/job/srv.log 2>&1 &
			SRV=$!
			listening "" $PORT
			ours timeout 60 ibv_ud_pingpong -d rsw_vD -g 0 -s "$SIZE" -n "$ITERS" -c -p $PORT \
				10.0.8.1 >/job/cli.log 2>&1
			C=$?
		else
			ours timeout 60 ibv_ud_pingpong -d rsw_vD -g 0 -s "$SIZE" -n "$ITERS" -c -p $PORT \
				>/job/srv.log 2>&1 &
			SRV=$!
			listening roce $PORT
			theirs timeout 60 ibv_ud_pingpong -d rxeC -g "$G" -s "$SIZE" -n "$ITERS" -c -p $PORT \
				10.0.8.2 >/job/cli.log 2>&1
			C=$?
		fi
		wait $SRV
		S=$?
		T1=$(date +%s.%N)
		DS=$(($(cat $CNT/sent_pkts) - SENT))
		DR=$(($(cat $CNT/rcvd_pkts) - RCVD))
		OK=1
		[ $S = 0 ] && [ $C = 0 ] || OK=0
		# Each side sends ITERS SENDs (rdma-core's pingpong posts one more
		# receive than it waits for, never more sends): rxe's counters
		# show ours arrived and its own left.
		[ $DS -ge "$ITERS" ] && [ $DR -ge "$ITERS" ] || OK=0
		# Both programs report the bytes they moved.
		grep -q "bytes in" /job/srv.log && grep -q "bytes in" /job/cli.log || OK=0
		printf 'RESULT size=%s server=%s server_rc=%s client_rc=%s rxe_sent=%s rxe_rcvd=%s secs=%.1f ok=%s\n' \
			"$SIZE" $SERVER $S $C $DS $DR "$(awk "BEGIN{print $T1 - $T0}")" $OK
		if [ $OK = 0 ]; then
			FAILS=$((FAILS + 1))
			echo "--- server ($SERVER)"
			cat /job/srv.log
			echo "--- client"
			cat /job/cli.log
		fi
	done
done
# roce_ud_peer (ctests/src/roce_ud_peer.c): every byte, the immediate,
# src_qp and the GRH checked at both ends, controlled and wrong Q_Keys.
PEER=$B/ctests/roce_ud_peer
for SERVER in rxe rsw; do
	PORT=$((PORT + 1))
	T0=$(date +%s.%N)
	if [ $SERVER = rxe ]; then
		theirs timeout 60 "$PEER" server rxeC "$G" $PORT >/job/srv.log 2>&1 &
		SRV=$!
		ours timeout 60 "$PEER" client rsw_vD 0 $PORT 10.0.8.1 "$ITERS" controlled >/job/cli.log 2>&1
		C=$?
	else
		ours timeout 60 "$PEER" server rsw_vD 0 $PORT controlled >/job/srv.log 2>&1 &
		SRV=$!
		theirs timeout 60 "$PEER" client rxeC "$G" $PORT 10.0.8.2 "$ITERS" >/job/cli.log 2>&1
		C=$?
	fi
	wait $SRV
	S=$?
	T1=$(date +%s.%N)
	OK=1
	[ $S = 0 ] && [ $C = 0 ] || OK=0
	grep -q "^roce_ud_peer client: $ITERS messages" /job/cli.log || OK=0
	grep -q "^roce_ud_peer server: " /job/srv.log || OK=0
	printf 'RESULT peer server=%s server_rc=%s client_rc=%s secs=%s ok=%s\n' \
		$SERVER $S $C "$(awk "BEGIN{print $T1 - $T0}")" $OK
	echo "  $(tail -n 1 /job/cli.log)"
	echo "  $(tail -n 1 /job/srv.log)"
	if [ $OK = 0 ]; then
		FAILS=$((FAILS + 1))
		echo "--- server ($SERVER)"
		cat /job/srv.log
		echo "--- client"
		cat /job/cli.log
	fi
done
# The control: without RSW_ROCEV2, rsw speaks its own protocol, which rxe
# does not understand, so the same exchange must fail (bounded by 10 s).
PORT=$((PORT + 1))
theirs timeout 10 ibv_ud_pingpong -d rxeC -g "$G" -s 64 -n 5 -p $PORT >/job/srv.log 2>&1 &
SRV=$!
listening "" $PORT
ours env -u RSW_ROCEV2 timeout 10 ibv_ud_pingpong -d rsw_vD -g 0 -s 64 -n 5 -p $PORT \
	10.0.8.1 >/job/cli.log 2>&1
C=$?
wait $SRV
S=$?
echo "RESULT control (RSW_ROCEV2 unset) server_rc=$S client_rc=$C"
[ $S != 0 ] && [ $C != 0 ] || { FAILS=$((FAILS + 1)); echo "the control did not fail"; }
echo "RESULT fails=$FAILS"
[ $FAILS = 0 ]
