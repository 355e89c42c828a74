#!/bin/bash
# UD between hosts: three network namespaces on one bridge (a fourth holds
# the bridge). ibv_ud_pingpong between two of them, then multicast: two
# hosts attach a UD QP to a group and each receives every datagram the
# third sends to it (ctests/src/ud_mcast.c checks payload, immediate data
# and the GRH).
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
hub=rswH$$
hosts="rswA$$ rswB$$ rswC$$"
ip netns add $hub 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
drop_ns() { for ns in $hub $hosts; do ip netns del "$ns" 2>/dev/null; done; }
cleanup_hooks="drop_ns"
ip -n $hub link add br0 type bridge mcast_snooping 0 || fail "bridge"
ip -n $hub link set br0 up
i=1
for ns in $hosts; do
    ip netns add "$ns"
    ip link add "h$i$$" type veth peer name "p$i$$" || fail "veth"
    ip link set "h$i$$" netns "$ns"
    ip link set "p$i$$" netns $hub
    ip -n $hub link set "p$i$$" master br0
    ip -n $hub link set "p$i$$" up
    ip -n "$ns" addr add "192.0.2.$i/24" dev "h$i$$"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "h$i$$" up
    i=$((i + 1))
done
set -- $hosts
A=$1 B=$2 C=$3

in_ns() {
    ns=$1; shift
    timeout 60 ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" "$@"
}

# Unicast UD between two hosts, with a payload check.
port=18515
in_ns $A ibv_ud_pingpong -d "rsw_h1$$" -g 0 -p $port -c > "$work/ud.srv" 2>&1 &
srv=$!
bg_pids="$bg_pids $srv"
wait_listen $port $A
in_ns $B ibv_ud_pingpong -d "rsw_h2$$" -g 0 -p $port -c 192.0.2.1 > "$work/ud.cli" 2>&1
crc=$?
wait $srv; src=$?
if [ $crc != 0 ] || [ $src != 0 ]; then
    echo "--- server"; cat "$work/ud.srv"; echo "--- client"; cat "$work/ud.cli"
    fail "ibv_ud_pingpong between hosts: client $crc server $src"
fi
expect_in "$work/ud.cli" 'iters in'
echo "ok ud pingpong between hosts"

# Multicast: B and C attach, A sends.
group=239.7.7.7
n=20
in_ns $B "$CTESTS_BIN/ud_mcast" recv "rsw_h2$$" $group $n > "$work/b" 2>&1 &
rb=$!
in_ns $C "$CTESTS_BIN/ud_mcast" recv "rsw_h3$$" $group $n > "$work/c" 2>&1 &
rc=$!
bg_pids="$bg_pids $rb $rc"
for _ in $(seq 1 200); do
    grep -q ready "$work/b" && grep -q ready "$work/c" && break
    sleep 0.05   # polling for the receivers' "ready" line, bounded
done
grep -q ready "$work/b" && grep -q ready "$work/c" || { cat "$work/b" "$work/c"; fail "receivers not ready"; }
in_ns $A "$CTESTS_BIN/ud_mcast" send "rsw_h1$$" $group $n > "$work/a" 2>&1 || { cat "$work/a"; fail "sender"; }
wait $rb; sb=$?
wait $rc; sc=$?
if [ $sb != 0 ] || [ $sc != 0 ]; then
    echo "--- a"; cat "$work/a"; echo "--- b"; cat "$work/b"; echo "--- c"; cat "$work/c"
    fail "multicast receivers: $sb $sc"
fi
sender_qpn=$(sed -n 's/^sent [0-9]* from qpn //p' "$work/a")
expect_in "$work/b" "received $n from qpn $sender_qpn\$"
expect_in "$work/c" "received $n from qpn $sender_qpn\$"
echo "ok multicast to two hosts"
