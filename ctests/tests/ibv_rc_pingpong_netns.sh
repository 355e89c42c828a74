#!/bin/bash
# ibv_rc_pingpong (then UC, SRQ and XRC pingpongs) between two network
# namespaces joined by a veth pair:
# two hosts, each with its own rsw device, talking over a real link.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
a=rswA$$ b=rswB$$
ip netns add $a 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $b
drop_ns() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add va$$ type veth peer name vb$$ || fail "veth"
ip link set va$$ netns $a
ip link set vb$$ netns $b
ip -n $a addr add 198.51.100.1/24 dev va$$
ip -n $b addr add 198.51.100.2/24 dev vb$$
for ns in $a $b; do ip -n $ns link set lo up; done
ip -n $a link set va$$ up
ip -n $b link set vb$$ up

port=18515
# The first run names no device: the default (first) device must be the
# veth one, whose GIDs the other host can reach, not rsw_lo.
for args in "" "-e -c" "-N -s 65536 -n 200 -c"; do
    if [ -z "$args" ]; then da="" db=""; else da="-d rsw_va$$" db="-d rsw_vb$$"; fi
    # shellcheck disable=SC2086
    timeout 60 ip netns exec $a env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" \
        ibv_rc_pingpong $da -g 0 -p $port $args > "$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen $port $a
    # shellcheck disable=SC2086
    timeout 60 ip netns exec $b env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" \
        ibv_rc_pingpong $db -g 0 -p $port $args 198.51.100.1 > "$work/cli" 2>&1
    crc=$?
    wait $srv; src=$?
    if [ $crc != 0 ] || [ $src != 0 ]; then
        echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
        fail "netns pingpong '$args': client $crc server $src"
    fi
    expect_in "$work/cli" 'iters in'
    expect_in "$work/srv" 'iters in'
    echo "ok netns '$args'"
    port=$((port + 1))
done

# The other connected QP kinds between the same two hosts: UC, RC on a
# shared receive queue (16 QPs), and XRC.
for prog in ibv_uc_pingpong ibv_srq_pingpong ibv_xsrq_pingpong; do
    timeout 60 ip netns exec $a env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" \
        $prog -d "rsw_va$$" -g 0 -p $port > "$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen $port $a
    timeout 60 ip netns exec $b env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" \
        $prog -d "rsw_vb$$" -g 0 -p $port 198.51.100.1 > "$work/cli" 2>&1
    crc=$?
    wait $srv; src=$?
    if [ $crc != 0 ] || [ $src != 0 ]; then
        echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
        fail "netns $prog: client $crc server $src"
    fi
    if [ $prog = ibv_xsrq_pingpong ]; then
        expect_in "$work/cli" '^success$'
    else
        expect_in "$work/cli" 'iters in'
        expect_in "$work/srv" 'iters in'
    fi
    echo "ok netns $prog"
    port=$((port + 1))
done
