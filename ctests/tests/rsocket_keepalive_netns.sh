#!/bin/bash
# harness-timeout: 120
# rsocket SO_KEEPALIVE between two hosts (network namespaces joined by a
# veth pair): a peer frozen with SIGSTOP (its kernel still acknowledges
# TCP, its RDMA side answers nothing) goes unnoticed by an idle reader
# without keepalives, and fails the connection once keepalives (every
# TCP_KEEPIDLE = 1 s, a zero-length RDMA WRITE as rdma-core sends) run out
# of retries: POLLERR, then rrecv's end of stream (or ECONNRESET) and a
# failed rsend
# (ctests/src/rsocket_keepalive.c).
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
bin=$CTESTS_BIN/rsocket_keepalive
[ -x "$bin" ] || fail "$bin is not built"
a=rswKA$$ b=rswKB$$ va=vka$$ vb=vkb$$
ip netns add $a 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $b
drop_ns() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add $va type veth peer name $vb || fail "veth"
ip link set $va netns $a
ip link set $vb netns $b
ip -n $a addr add 198.51.100.1/24 dev $va
ip -n $b addr add 198.51.100.2/24 dev $vb
for ns in $a $b; do ip -n $ns link set lo up; done
ip -n $a link set $va up
ip -n $b link set $vb up
in_ns() { ns=$1; shift; ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" "$@"; }

port=18621
in_ns $a timeout -k 5 70 "$bin" -s 198.51.100.1 $port > "$work/srv" 2>&1 &
srv=$!
bg_pids="$bg_pids $srv"
wait_listen $port $a
in_ns $b timeout -k 5 70 "$bin" -c 198.51.100.1 $port > "$work/cli" 2>&1 &
cli=$!
bg_pids="$bg_pids $cli"
wait $srv; src=$?
kill -9 $cli 2>/dev/null
cat "$work/srv" "$work/cli"
[ $src = 0 ] || fail "server exit $src"
expect_in "$work/srv" '^ok keepalive'
echo "ok: $(grep '^ok keepalive' "$work/srv")"
