#!/bin/bash
# rsw's RC QPs speak RoCEv2 with the kernel's rxe (RSW_ROCEV2): Debian's
# ibv_rc_pingpong on rxeC and the same program over our libibverbs on
# rsw_vD in RoCEv2 mode, each side as server, at sizes up to many path
# MTUs (-m 1024), every byte checked (-c); perftest's ib_send_bw,
# ib_write_bw and ib_read_bw, each side as server; then ibv_rc_pingpong,
# ib_write_bw and ib_read_bw again with netem dropping 5% and reordering
# both ways (pingpong's ACKs spared, see below), which retransmission
# (rxe's and ours) must make good. In the VM test bed:
#
#   ctests/vm/run-in-vm.sh -r rxe -s "$PWD/ctests/vm/roce:/roce" -f ctests/vm/roce/rc_pingpong_rxe.sh
#
# The topology is ud_pingpong_rxe.sh's: rxeC on vC (10.0.8.1) in the
# initial namespace, rsw in namespace roce on vD (10.0.8.2). One RESULT
# line per run; exits 0 only when all passed.
set -u
B=${RSV_BUILD:?run through run-in-vm.sh, which shares the build}
ITERS=${ITERS:-100}
SIZES=${SIZES:-1 1024 4096 65536}
. /roce/rxe_link.sh
CNT=/sys/class/infiniband/rxeC/ports/1/hw_counters
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
		sleep 0.05
	done
	return 1
}
# perftest's READ client asks its QP for the server's outstanding reads
# (rxe: 128) rather than the fewer of both; rsw allows 16 (rxe's
# modify_qp refuses more than its own limit just the same).
rd_outs() { [ "$1" = read ] && echo "-o 16"; }
FAILS=0
PORT=18700
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
		theirs timeout 90 "$@" $rargs >/job/srv.log 2>&1 &
		SRV=$!
		listening "" $PORT
		ours timeout 90 "$@" $oargs 10.0.8.1 >/job/cli.log 2>&1
		c=$?
	else
		ours timeout 90 "$@" $oargs >/job/srv.log 2>&1 &
		SRV=$!
		listening roce $PORT
		theirs timeout 90 "$@" $rargs 10.0.8.2 >/job/cli.log 2>&1
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
for SIZE in $SIZES; do
	for SERVER in rxe rsw; do
		run "rc_pingpong size=$SIZE" $SERVER "$ITERS iters in" \
			ibv_rc_pingpong -m 1024 -s "$SIZE" -n "$ITERS" -c
	done
done
for T in send write read; do
	for SERVER in rxe rsw; do
		run "ib_${T}_bw size=65536" $SERVER "^ *65536 +$ITERS " \
			ib_${T}_bw -F -m 1024 -s 65536 -n "$ITERS" $(rd_outs $T)
	done
done
# Loss and reordering, netem on both ends (netem.sh): for pingpong, ACKs
# and NAKs are spared, since its client exits once it has its last
# message and a lost ACK of the last SEND would leave the server
# resending into a QP that is gone (it failed so 2 runs in 30 when they
# were lost too); perftest, which ends over its TCP exchange, loses
# them too. The counts of netem's drops add up over the runs.
. /roce/netem.sh
DC=0 DD=0
count_drops() {
	DC=$((DC + $(netem_dropped vC))) DD=$((DD + $(netem_dropped vD roce)))
}
lossy() {
	count_drops
	netem_lossy vC "" "${1:-}" || exit 1
	netem_lossy vD roce "${1:-}" || exit 1
}
LOSSY=40
for SIZE in 1024 4096 32768; do
	for SERVER in rxe rsw; do
		lossy spare-acks
		run "lossy rc_pingpong size=$SIZE" $SERVER "$LOSSY iters in" \
			ibv_rc_pingpong -m 1024 -s "$SIZE" -n "$LOSSY" -c
	done
done
lossy
for T in write read; do
	for SERVER in rxe rsw; do
		run "lossy ib_${T}_bw size=65536" $SERVER "^ *65536 +$LOSSY " \
			ib_${T}_bw -F -m 1024 -s 65536 -n "$LOSSY" $(rd_outs $T)
	done
done
count_drops
echo "RESULT netem dropped rxe_side=$DC rsw_side=$DD"
[ $DC -gt 0 ] && [ $DD -gt 0 ] || { FAILS=$((FAILS + 1)); echo "netem dropped nothing"; }
echo "rxe counters: $(for f in rcvd_seq_err duplicate_request out_of_seq_request retry_exceeded_err completer_retry_err rnr_nak_retry_err ack_deferred; do printf '%s=%s ' $f "$(cat $CNT/$f 2>/dev/null)"; done)"
echo "RESULT fails=$FAILS"
[ $FAILS = 0 ]
