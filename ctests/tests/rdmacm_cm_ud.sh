#!/bin/bash
# harness-timeout: 240
# The rdma_cm datagram and multicast conformance cases of ctests/src/cm_ud.c:
# the SIDR exchange (CONNECT_REQUEST and ESTABLISHED with param.ud, private
# data areas of 180 and 136 bytes, an AH from the event reaching the peer's
# UD QP, the 40-byte GRH before the payload, rdma_post_ud_send back),
# rdma_reject and a destroyed request (UNREACHABLE, status 2), nobody to
# take the request (status 1), UD QPs in RTS with RDMA_UDP_QKEY, the
# RDMA_PS_IB and RDMA_PS_IPOIB port spaces, synchronous endpoints, and
# multicast: JOIN events, send-only members receiving nothing, leave
# stopping delivery, and the errors of join and leave; the same over ::1
# with an IPv6 group. Each case runs in a
# process of its own with an alarm; this script bounds the whole run too.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/cm_ud
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
timeout -k 5 200 "$bin" </dev/null
rc=$?
case $rc in
0) echo "ok: all cm_ud cases passed" ;;
124 | 137) echo "FAIL: cm_ud timed out" ;;
*) echo "FAIL: cm_ud exit status $rc" ;;
esac
exit $rc
