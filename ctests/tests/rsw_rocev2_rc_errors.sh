#!/bin/bash
# harness-timeout: 90
# RC over RoCEv2 (RSW_ROCEV2) on rsw_lo, QP to QP through one port 4791
# (ctests/src/roce_rc_errors.c): multi-packet SEND, WRITE with immediate
# and READ across the 24-bit PSN wrap, every byte checked; RNR retries
# exhausted; a wrong rkey (IBV_WC_REM_ACCESS_ERR, both QPs in ERR); no
# peer (IBV_WC_RETRY_EXC_ERR after retry_cnt timeouts); a READ to a QP
# with max_dest_rd_atomic 0 (IBV_WC_REM_INV_REQ_ERR). Atomics, SEND
# with invalidate and UC: tests/rsw_rocev2_rc_ops.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/roce_rc_errors
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
if ss -Hlun 'sport = :4791' | grep -q .; then
	echo "SKIP: UDP port 4791 is taken here (a kernel RoCE device?)"
	exit 77
fi
out=$(RSW_ROCEV2=rsw_lo timeout -k 5 70 "$bin" rsw_lo 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: roce_rc_errors exit $rc"; exit 1; }
for want in 'SEND 5000, WRITE 3000, READ 3000 across the PSN wrap' \
	'RNR retries exhausted, next flushed' \
	'wrong rkey: IBV_WC_REM_ACCESS_ERR, both QPs in ERR' \
	'no peer: IBV_WC_RETRY_EXC_ERR after' \
	'READ with no responder resources: IBV_WC_REM_INV_REQ_ERR' \
	'ok'; do
	grep -qF "roce_rc_errors: $want" <<<"$out" || { echo "FAIL: no line '$want'"; exit 1; }
done
