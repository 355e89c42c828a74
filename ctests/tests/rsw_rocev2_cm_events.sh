#!/bin/bash
# harness-timeout: 180
# ctests/src/cm_events' cases that hold for any IB CM, run on rsw_lo in
# RoCEv2 mode (RSW_ROCEV2=rsw_lo): our CM's MADs on QP1, passive and
# active side in one process each case. Private data and conn params
# both ways, a reject with private data, a wildcard listener, a closed
# port, a destroy that rejects, init_qp_attr, rd_atomic limits, traffic
# on the QPs, a disconnect from either side and from rdma_destroy_id
# (DREQ), migration, sync endpoints, a connect after fork, a peer gone
# in the handshake. Each must print "ok NAME", and librdmacm must say it
# speaks on QP1 (RDMACM_RS_DEBUG=1), so a fall back to the TCP CM fails.
# Not run here, as they are the TCP CM's own: ece (no ECE in MADs),
# listen_late, unreachable and disconnect_while_connecting (TCP's
# connection setup), repeated_mra (a crafted TCP peer), ipv6 (rsw_lo
# speaks the family of its first address), peer_killed_* (a second
# process cannot hold UDP port 4791 of the same address).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/cm_events
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
# A kernel RoCE device in this network namespace holds the port.
if ss -Hlun 'sport = :4791' | grep -q .; then
	echo "SKIP: UDP port 4791 is taken here (a kernel RoCE device?)"
	exit 77
fi
cases="pdata_connect_accept pdata_reject bind_any closed_port reject_by_destroy
	init_qp_attr rd_atomic_limits qp_traffic disconnect_client_first
	disconnect_server_first migrate destroy_waits_for_ack sync_endpoints
	connect_after_fork peer_killed_in_handshake"
out=$(RSW_ROCEV2=rsw_lo RDMACM_RS_DEBUG=1 timeout -k 5 150 "$bin" $cases </dev/null 2>&1)
rc=$?
echo "$out" | grep -v '^librdmacm: debug'
[ $rc = 0 ] || { echo "FAIL: cm_events exit $rc"; exit 1; }
n=0
for c in $cases; do
	grep -q "^ok $c\$" <<<"$out" || { echo "FAIL: no 'ok $c'"; exit 1; }
	n=$((n + 1))
done
grep -q 'the IB CM speaks on QP1' <<<"$out" || { echo "FAIL: not on QP1"; exit 1; }
echo "ok: $n cm_events cases over the IB CM on QP1"
