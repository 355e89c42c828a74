#!/bin/bash
# The RoCEv2 operations beyond RC SEND/WRITE/READ between rsw
# (RSW_ROCEV2) and the kernel's rxe: Debian's ibv_uc_pingpong on rxeC and
# over our libibverbs on rsw_vD, each side as server, sizes 1 to 64 path
# MTUs (-m 1024), every byte checked (-c); perftest's ib_atomic_bw with
# FETCH_AND_ADD and CMP_AND_SWAP, each side as server; roce_ops_peer
# (ctests/src), each side as target: atomics' returned values and the
# target's memory checked, a type 2 window invalidated by SEND_WITH_INV
# (IBV_WC_WITH_INV, the rkey) and refusing a WRITE after; roce_bulk_peer,
# each side as target: 1 MiB WRITE and READ, bursts of WRITEs and SENDs,
# WRITEs right behind a READ, every byte checked, rsw's side sending and
# receiving in batches (sendmmsg, recvmmsg: its rsw-stat counters), and
# rxe's completer never going back (completer_retry_err: our responder
# keeps its responses in PSN order). In the VM test bed:
#
#   ctests/vm/run-in-vm.sh -r rxe -s "$PWD/ctests/vm/roce:/roce" -f ctests/vm/roce/ops_rxe.sh
#
# The topology is rxe_link.sh's. One RESULT line per run; exits 0 only
# when all passed.
set -u
B=${RSV_BUILD:?run through run-in-vm.sh, which shares the build}
ITERS=${ITERS:-100}
. /roce/rxe_link.sh
ours() {
	ip netns exec roce env -u LD_PRELOAD -u RDMAV_DRIVERS -u IBV_DRIVERS \
		LD_LIBRARY_PATH="$B/lib" IBV_CONFIG_DIR="$B/etc/libibverbs.d" RSW_ROCEV2=vD "$@"
}
theirs() { env -u LD_LIBRARY_PATH -u LD_PRELOAD -u IBV_CONFIG_DIR "$@"; }
listening() {
	for _ in $(seq 200); do
		if [ -n "$1" ]; then
			ip netns exec "$1" ss -ltn | grep -q ":$2 " && return 0
		else
			ss -ltn | grep -q ":$2 " && return 0
		fi
		sleep 0.05 # polling a condition with a bound: the server's listen
	done
	return 1
}
FAILS=0
PORT=18800
# run TAG SERVER(rxe|rsw) EXPECT-REGEX PROGRAM ARGS...: the program on
# both sides (-d/-g or -x and -p added), the client's output must match.
run() {
	local tag=$1 server=$2 want=$3 s c ok t0 t1 rargs oargs
	shift 3
	PORT=$((PORT + 1))
	case $1 in
	ib_*) rargs="-d rxeC -x $G -p $PORT" oargs="-d rsw_vD -x 0 -p $PORT" ;;
	*) rargs="-d rxeC -g $G -p $PORT" oargs="-d rsw_vD -g 0 -p $PORT" ;;
	esac
	t0=$(date +%s.%N)
	if [ "$server" = rxe ]; then
		theirs timeout 60 "$@" $rargs >/job/srv.log 2>&1 &
		SRV=$!
		listening "" $PORT
		ours timeout 60 "$@" $oargs 10.0.8.1 >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 60 "$@" $oargs >/job/srv.log 2>&1 &
		SRV=$!
		listening roce $PORT
		theirs timeout 60 "$@" $rargs 10.0.8.2 >/job/cli.log 2>&1
		c=$?
	fi
	wait $SRV
	s=$?
	t1=$(date +%s.%N)
	ok=1
	[ $s = 0 ] && [ $c = 0 ] || ok=0
	grep -Eq -- "$want" /job/cli.log || ok=0
	printf 'RESULT %s server=%s server_rc=%s client_rc=%s secs=%.1f ok=%s\n' \
		"$tag" "$server" $s $c "$(awk "BEGIN{print $t1 - $t0}")" $ok
	if [ $ok = 0 ]; then
		FAILS=$((FAILS + 1))
		echo "--- server ($server)"
		cat /job/srv.log
		echo "--- client"
		cat /job/cli.log
	fi
}
for SIZE in 1 4096 65536; do
	for SERVER in rxe rsw; do
		run "uc_pingpong size=$SIZE" $SERVER "$ITERS iters in" \
			ibv_uc_pingpong -m 1024 -s "$SIZE" -n "$ITERS" -c
	done
done
# rsw allows 16 atomics outstanding, rxe 128: perftest's client asks
# its QP for the server's number, so both are told 16.
for A in FETCH_AND_ADD CMP_AND_SWAP; do
	for SERVER in rxe rsw; do
		run "ib_atomic_bw $A" $SERVER "^ *8 +$ITERS " \
			ib_atomic_bw -F -A $A -o 16 -n "$ITERS"
	done
done
# peer PROGRAM TARGET(rxe|rsw): ctests/src/PROGRAM with the target on
# that side.
# rxe's completer goes back and asks again when a response passes a READ
# still answering (an ACK past the READ's PSNs): on this clean link that
# happens only when our responder sends out of PSN order.
RETRIES=/sys/class/infiniband/rxeC/ports/1/hw_counters/completer_retry_err
peer() {
	local p=$1 s c ok r0 r1
	shift
	PORT=$((PORT + 1))
	r0=$(cat $RETRIES)
	if [ "$1" = rxe ]; then
		theirs timeout 90 "$B/ctests/$p" target rxeC "$G" $PORT >/job/srv.log 2>&1 &
		SRV=$!
		listening "" $PORT
		ours timeout 90 "$B/ctests/$p" initiator rsw_vD 0 $PORT 10.0.8.1 >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 90 "$B/ctests/$p" target rsw_vD 0 $PORT >/job/srv.log 2>&1 &
		SRV=$!
		listening roce $PORT
		theirs timeout 90 "$B/ctests/$p" initiator rxeC "$G" $PORT 10.0.8.2 >/job/cli.log 2>&1
		c=$?
	fi
	wait $SRV
	s=$?
	ok=1
	[ $s = 0 ] && [ $c = 0 ] || ok=0
	grep -q "^$p initiator: ok" /job/cli.log || ok=0
	grep -q "^$p target: ok" /job/srv.log || ok=0
	# rsw's side sent and received in batches (sendmmsg, recvmmsg).
	r1=$(cat $RETRIES)
	echo "  rxe completer_retry_err $r0 -> $r1"
	[ "$r1" = "$r0" ] || ok=0
	if [ "$p" = roce_bulk_peer ]; then
		local f=/job/cli.log
		[ "$1" = rsw ] && f=/job/srv.log
		grep "stat roce_" $f | sed 's/^/  /'
		grep -Eq 'stat roce_tx_batches [1-9]' $f || ok=0
		grep -Eq 'stat roce_rx_batches [1-9]' $f || ok=0
	fi
	echo "RESULT $p target=$1 target_rc=$s initiator_rc=$c ok=$ok"
	if [ $ok = 0 ]; then
		FAILS=$((FAILS + 1))
		echo "--- target ($1)"
		cat /job/srv.log
		echo "--- initiator"
		cat /job/cli.log
	fi
}
for P in roce_ops_peer roce_bulk_peer; do
	peer $P rxe
	peer $P rsw
done
echo "RESULT fails=$FAILS"
[ $FAILS = 0 ]
