#!/bin/bash
# harness-timeout: 120
# RC over RoCEv2 (RSW_ROCEV2) on rsw_lo, QP to QP through one port 4791
# (ctests/src/roce_rc_loss.c), while RSW_FAULTS' roce: rules lose,
# duplicate and reorder chosen packets: the last ACK (the ACK timeout
# resends, the responder ACKs the duplicate), middle packets of SEND and
# WRITE (NAK sequence error, go-back-N), a NAK too (the timeout), a READ
# request (sent twice; lost) and READ responses (asked again from the
# first missing), packets overtaken; messages longer than the
# requester's window of 128 packets; then seeded random loss,
# duplication and reordering of every kind of packet both ways. Every
# byte, length, immediate and status is checked by the program, and the
# faults' log lines are counted: each rule must have struck.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/roce_rc_loss
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
if ss -Hlun 'sport = :4791' | grep -q .; then
	echo "SKIP: UDP port 4791 is taken here (a kernel RoCE device?)"
	exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# case NAME FAULTS MIN_STRUCK ARGS...: the program must pass and the
# rules strike at least MIN_STRUCK times (exactly, for count= rules).
case_() {
	local name=$1 faults=$2 want=$3 out rc n
	shift 3
	: >"$log"
	out=$(RSW_FAULTS=$faults RSW_ROCEV2=rsw_lo VERBS_LOG_LEVEL=3 VERBS_LOG_FILE=$log \
		timeout -k 5 60 "$bin" rsw_lo "$@" 2>&1)
	rc=$?
	n=$(grep -c 'RSW_FAULTS: ' "$log")
	if [ $rc != 0 ] || ! grep -qx 'roce_rc_loss: ok' <<<"$out"; then
		echo "$out"
		grep -v 'RSW_FAULTS: ' "$log" | tail -20
		echo "FAIL: $name: exit $rc"
		exit 1
	fi
	case $want in
	+*) [ "$n" -ge "${want#+}" ] || { echo "FAIL: $name: $n faults struck, want at least ${want#+}"; exit 1; } ;;
	*) [ "$n" = "$want" ] || { echo "FAIL: $name: $n faults struck, want $want"; exit 1; } ;;
	esac
	echo "ok $name ($n faults): $(grep -v ': ok$' <<<"$out" | sed 's/^roce_rc_loss: //')"
}

# ACKs: one each for the two SENDs and the WRITE, fewer where one
# receive takes several messages and their ACKs coalesce (engine/roce_tx):
# losing the first three loses the last, and the duplicate's ACK after
# the timeout too where there were fewer.
case_ "last ACK lost" "roce:drop:op=ack:count=3" 3 fixed 16
case_ "middle packets lost" \
	"roce:drop:op=send_middle:after=3:count=1;roce:drop:op=write_middle:after=2:count=1" 2 fixed
case_ "a middle packet and its NAK lost" \
	"roce:drop:op=send_middle:after=2:count=1;roce:drop:op=nak:count=1" 2 fixed 16
case_ "READ request twice, a response lost" \
	"roce:dup:op=read_req:count=1;roce:drop:op=read_resp_middle:after=2:count=1" 2 fixed
case_ "READ request lost" "roce:drop:op=read_req:count=1" 1 fixed
case_ "packets overtaken" \
	"roce:late:op=send_middle:count=3;roce:late:op=read_resp:after=1:count=2;roce:late:op=ack:count=1" 6 fixed
case_ "longer than the window" "" 0 long
case_ "longer than the window, lossy" \
	"roce:drop:op=send_middle:after=140:count=1;roce:drop:op=ack:count=3;roce:drop:op=read_resp:after=150:count=1" 5 long
for seed in 1 2 3; do
	case_ "random loss, seed $seed" \
		"seed=$seed;roce:drop:p=0.05;roce:late:p=0.1;roce:dup:p=0.02" +100 mix 200
done
echo "ok: RC over RoCEv2 recovers from each loss"
