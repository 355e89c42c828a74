#!/bin/bash
# harness-timeout: 90
# RC atomics, SEND with invalidate and UC over RoCEv2 (RSW_ROCEV2) on
# rsw_lo, QP to QP through one port 4791 (ctests/src/roce_rc_ops.c):
# FETCH_AND_ADD and CMP_AND_SWP values and memory checked, a burst from
# two QPs on one word, a misaligned atomic (IBV_WC_REM_INV_REQ_ERR), one
# without remote atomic rights (IBV_WC_REM_ACCESS_ERR); SEND_WITH_INV of
# a type 2 window (IBV_WC_WITH_INV, the window unusable after) and of no
# window's key (IBV_WC_REM_INV_REQ_ERR); UC SENDs and WRITEs with every
# byte checked, a SEND with no receive dropped silently, messages with
# packets missing (crafted on a UDP socket) dropped whole; a crafted
# requester's READ of 1024 packets with a WRITE and a FETCH_AND_ADD right
# behind it: the WRITE's ACK after every READ response, the atomic's
# response after the ACK. Then twice
# 10000 FETCH_AND_ADDs with the shortest ACK timeout, so that requests
# are sent again while their responses are on the way (some hundreds a
# run): each must run once (a responder executing them again was caught
# by 7 of 8 such runs).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/roce_rc_ops
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
if ss -Hlun 'sport = :4791' | grep -q .; then
	echo "SKIP: UDP port 4791 is taken here (a kernel RoCE device?)"
	exit 77
fi
out=$(RSW_ROCEV2=rsw_lo timeout -k 5 70 "$bin" rsw_lo 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: roce_rc_ops exit $rc"; exit 1; }
for want in 'FETCH_AND_ADD and CMP_AND_SWP (match, no match) checked' \
	'16 FETCH_AND_ADDs from two QPs: 16 distinct old values, 23 left' \
	'misaligned atomic: IBV_WC_REM_INV_REQ_ERR' \
	'atomic into a 4-byte SGE: IBV_WC_LOC_LEN_ERR' \
	'atomic without IBV_ACCESS_REMOTE_ATOMIC: IBV_WC_REM_ACCESS_ERR' \
	'SEND_WITH_INV: IBV_WC_WITH_INV with the rkey, then a WRITE with it IBV_WC_REM_ACCESS_ERR' \
	'SEND_WITH_INV of no window' \
	'UC SEND_WITH_IMM 5000, WRITE 3000, WRITE_WITH_IMM across the PSN wrap' \
	'UC SEND with no receive dropped, the next one received' \
	'UC crafted losses: 3 messages dropped, the 3 complete ones whole' \
	"RC: a WRITE's ACK and an atomic response after the 1024 responses of the READ before them" \
	'ok'; do
	grep -qF "roce_rc_ops: $want" <<<"$out" || { echo "FAIL: no line '$want'"; exit 1; }
done
for i in 1 2; do
	out=$(RSW_ROCEV2=rsw_lo timeout -k 5 70 "$bin" rsw_lo replay 10000 2>&1)
	rc=$?
	echo "$out"
	[ $rc = 0 ] || { echo "FAIL: roce_rc_ops replay exit $rc"; exit 1; }
	grep -qF 'roce_rc_ops: 10000 FETCH_AND_ADDs with timeout 1: each ran once' <<<"$out" ||
		{ echo "FAIL: no replay line"; exit 1; }
done
