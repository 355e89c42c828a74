#!/bin/bash
# Raw packet QPs, flow steering, work queues and RSS (ctests/src/raw_packet.c)
# on rsw_lo inside a network namespace of the test's own, whose lo carries
# only the test's frames. Needs root (CAP_NET_RAW and namespaces): skips
# otherwise. The program also checks that without CAP_NET_RAW a raw QP is
# EPERM.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
bin=$CTESTS_BIN/raw_packet
[ -x "$bin" ] || fail "$bin not built"
ns=rswRaw$$
ip netns add $ns 2>/dev/null || { echo "cannot create network namespaces (not root?)"; exit 77; }
drop_ns() { ip netns del $ns 2>/dev/null; }
cleanup_hooks="drop_ns"
ip -n $ns link set lo up || fail "lo up"
timeout -k 5 60 ip netns exec $ns env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
    IBV_CONFIG_DIR="$IBV_CONFIG_DIR" "$bin" </dev/null > "$work/out" 2>&1
rc=$?
cat "$work/out"
[ $rc = 0 ] || fail "raw_packet: exit status $rc"
n=$(grep -c '^ok ' "$work/out")
[ "$n" -ge 9 ] || fail "only $n cases passed"
echo "ok: raw packet QPs, flows and RSS"
