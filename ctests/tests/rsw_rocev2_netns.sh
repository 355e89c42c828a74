#!/bin/bash
# harness-timeout: 180
# rsw to rsw in RoCEv2 mode (RSW_ROCEV2), between two network namespaces
# joined by veth pairs, so it runs without the VM: ibv_ud_pingpong (-c)
# and ctests/src/roce_ud_peer (every byte, immediate, src_qp, GRH,
# wrong and controlled Q_Keys), over IPv4 (a pair with 192.0.2.0/24) and
# over IPv6 (a pair with only 2001:db8::/64, no link-local: its first GID
# is that address), each side as server. rxe is the other end in
# tests/vm_roce_ud_pingpong.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
A=rsrA$$ B=rsrB$$
ip netns add $A 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $B
drop_ns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup_hooks="drop_ns"
peer=$CTESTS_BIN/roce_ud_peer
[ -x "$peer" ] || fail "$peer is not built"
# Pair 4: IPv4. Pair 6: IPv6 only.
ip link add a4$$ type veth peer name b4$$ || fail "veth"
ip link add a6$$ type veth peer name b6$$ || fail "veth"
for x in a b; do
    ns=$A; [ $x = b ] && ns=$B
    n=1; [ $x = b ] && n=2
    ip link set "${x}4$$" netns $ns
    ip link set "${x}6$$" netns $ns
    ip -n $ns link set "${x}6$$" addrgenmode none
    ip -n $ns addr add 192.0.2.$n/24 dev "${x}4$$"
    ip -n $ns addr add 2001:db8::$n/64 dev "${x}6$$" nodad
    ip -n $ns link set lo up
    ip -n $ns link set "${x}4$$" up
    ip -n $ns link set "${x}6$$" up
done

in_ns() {
    ns=$1; shift
    timeout 60 ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" RSW_ROCEV2=all "$@"
}

port=$(free_port)
for fam in 4 6; do
    # The exchange goes over TCP on pair 4 (ibv_ud_pingpong's server
    # listens on IPv4 only); the devices are pair $fam's.
    ipA=192.0.2.1 ipB=192.0.2.2
    devA=rsw_a$fam$$ devB=rsw_b$fam$$
    for server in A B; do
        if [ $server = A ]; then sns=$A cns=$B sdev=$devA cdev=$devB sip=$ipA
        else sns=$B cns=$A sdev=$devB cdev=$devA sip=$ipB; fi
        for size in 4 1024; do
            port=$((port + 1))
            in_ns $sns ibv_ud_pingpong -d $sdev -g 0 -s $size -n 100 -c -p $port >"$work/srv" 2>&1 &
            srv=$!
            bg_pids="$bg_pids $srv"
            wait_listen $port $sns
            in_ns $cns ibv_ud_pingpong -d $cdev -g 0 -s $size -n 100 -c -p $port $sip >"$work/cli" 2>&1
            c=$?
            wait $srv
            s=$?
            if [ $c != 0 ] || [ $s != 0 ]; then
                echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
                fail "IPv$fam ibv_ud_pingpong -s $size, server in $server: client $c server $s"
            fi
            expect_in "$work/cli" '100 iters in'
            echo "ok IPv$fam ibv_ud_pingpong -s $size, server in $server"
        done
        port=$((port + 1))
        in_ns $sns "$peer" server $sdev 0 $port controlled >"$work/srv" 2>&1 &
        srv=$!
        bg_pids="$bg_pids $srv"
        wait_listen $port $sns
        in_ns $cns "$peer" client $cdev 0 $port $sip 100 controlled >"$work/cli" 2>&1
        c=$?
        wait $srv
        s=$?
        if [ $c != 0 ] || [ $s != 0 ]; then
            echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
            fail "IPv$fam roce_ud_peer, server in $server: client $c server $s"
        fi
        expect_in "$work/cli" '^roce_ud_peer client: 100 messages'
        expect_in "$work/srv" '^roce_ud_peer server: '
        echo "ok IPv$fam roce_ud_peer, server in $server: $(cat "$work/cli")"
    done
done
# The control: with RSW_ROCEV2 on one side only, RoCEv2 meets rsw's own
# protocol and the exchange must fail (bounded by 10 s).
port=$((port + 1))
in_ns $A ibv_ud_pingpong -d rsw_a4$$ -g 0 -s 64 -n 5 -p $port >"$work/srv" 2>&1 &
srv=$!
bg_pids="$bg_pids $srv"
wait_listen $port $A
timeout 10 ip netns exec $B env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" \
    ibv_ud_pingpong -d rsw_b4$$ -g 0 -s 64 -n 5 -p $port 192.0.2.1 >"$work/cli" 2>&1
c=$?
kill $srv 2>/dev/null
wait $srv 2>/dev/null
[ $c != 0 ] || fail "the control (RSW_ROCEV2 on one side only) did not fail"
echo "ok control: RoCEv2 against rsw's own protocol fails (client exit $c)"
