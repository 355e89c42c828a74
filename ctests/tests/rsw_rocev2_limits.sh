#!/bin/bash
# harness-timeout: 60
# RSW_ROCEV2's limits, said rather than faked (ctests/src/roce_ud_limits.c
# on rsw_lo): XRC send QPs and ibv_attach_mcast are EOPNOTSUPP (RC and UC
# QPs are created: they speak RoCEv2, tests/rsw_rocev2_rc_netns) on a
# device in RoCEv2 mode, and a second process's UD QP there gets
# EADDRINUSE (UDP port 4791 of 127.0.0.1 is the first's); among three UD
# QPs of one process, a SEND without a posted receive and one with a
# wrong Q_Key are dropped, and what arrives is checked. The control:
# without RSW_ROCEV2 the same program must fail (its XRC QP is created).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/roce_ud_limits
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
# A kernel RoCE device in this network namespace holds the port.
if ss -Hlun 'sport = :4791' | grep -q .; then
	echo "SKIP: UDP port 4791 is taken here (a kernel RoCE device?)"
	exit 77
fi
out=$(RSW_ROCEV2=rsw_lo timeout -k 5 30 "$bin" rsw_lo 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: roce_ud_limits exit $rc"; exit 1; }
grep -q '^roce_ud_limits second: EADDRINUSE$' <<<"$out" || { echo "FAIL: no second process"; exit 1; }
grep -q '^roce_ud_limits: dropped without a receive and with a wrong Q_Key$' <<<"$out" ||
	{ echo "FAIL: no drop line"; exit 1; }
grep -q '^roce_ud_limits: source QPN 1 only, one at a time$' <<<"$out" ||
	{ echo "FAIL: no source QPN line"; exit 1; }
grep -q '^roce_ud_limits: ok$' <<<"$out" || { echo "FAIL: no ok line"; exit 1; }
out=$(env -u RSW_ROCEV2 timeout -k 5 30 "$bin" rsw_lo 2>&1)
rc=$?
echo "control, RSW_ROCEV2 unset: exit $rc: $out"
[ $rc = 1 ] && grep -q '^FAIL XRC_SEND QP on rsw_lo: created' <<<"$out" ||
	{ echo "FAIL: the control did not fail as expected"; exit 1; }
echo "ok: RC and UC created, EOPNOTSUPP for XRC and multicast, EADDRINUSE for a second process"
