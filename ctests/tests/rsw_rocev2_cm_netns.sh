#!/bin/bash
# harness-timeout: 240
# rdma_cm between two rsw devices in RoCEv2 mode (RSW_ROCEV2), in two
# network namespaces joined by a veth pair: the IB CM's MADs on QP1
# (librdmacm-rs/src/gsi.rs), our passive side against our active side,
# with no VM. rping -C 5 -V -v (payload verified, five pings printed),
# ucmatose (sends both ways, the disconnect) and udaddy (SIDR, datagrams
# both ways), each side as server; a connect to a port nobody listens
# on, behind a CM that is up, reported as RDMA_CM_EVENT_REJECTED with
# reason 8; rping over IPv6; one to an address where nothing holds QP1,
# RDMA_CM_EVENT_UNREACHABLE after the CM's timeout, its REQ sent again
# meanwhile. The kernel's rxe is the other end in tests/vm_roce_cm.
# DBG=1 turns on the debug log.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
for p in rping ucmatose udaddy; do
    command -v $p >/dev/null || { echo "$p is not installed"; exit 77; }
done
A=rcmA$$ B=rcmB$$
ip netns add $A 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $B
drop_ns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add a5$$ type veth peer name b5$$ || fail "veth"
# A second pair for IPv6 alone: a RoCEv2 device speaks from its first
# address, of one family.
ip link add a6$$ type veth peer name b6$$ || fail "veth"
for x in a b; do
    ns=$A n=1
    [ $x = b ] && ns=$B n=2
    ip link set "${x}5$$" netns $ns
    ip -n $ns addr add 192.0.2.$n/24 dev "${x}5$$"
    ip -n $ns link set lo up
    ip -n $ns link set "${x}5$$" up
    ip link set "${x}6$$" netns $ns
    ip -n $ns addr add fd00:5::$n/64 dev "${x}6$$" nodad
    ip -n $ns link set "${x}6$$" up
done

in_ns() {
    ns=$1; shift
    timeout 60 ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" RSW_ROCEV2=all RDMACM_RS_DEBUG=1 \
        ${DBG:+VERBS_LOG_LEVEL=debug} "$@"
}

port=$(free_port)
# pair NAME SERVER_NS CLIENT_NS SERVER_IP SERVER-ARGS -- CLIENT-ARGS:
# both must exit 0.
pair() {
    name=$1 sns=$2 cns=$3 sip=$4
    shift 4
    sargs=() cargs=()
    while [ "$1" != -- ]; do sargs+=("$1"); shift; done
    shift
    cargs=("$@")
    port=$((port + 1))
    in_ns $sns "${sargs[@]}" -p $port >"$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen $port $sns
    in_ns $cns "${cargs[@]}" -p $port >"$work/cli" 2>&1
    c=$?
    wait $srv
    s=$?
    if [ $c != 0 ] || [ $s != 0 ]; then
        echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
        fail "$name: client $c server $s"
    fi
}

for server in A B; do
    if [ $server = A ]; then sns=$A cns=$B sip=192.0.2.1
    else sns=$B cns=$A sip=192.0.2.2; fi
    pair "rping (server $server)" $sns $cns $sip \
        rping -s -a $sip -V -- rping -c -a $sip -C 5 -V -v
    n=$(grep -c 'ping data: rdma-ping-' "$work/cli")
    [ "$n" = 5 ] || { cat "$work/cli"; fail "rping (server $server): $n of 5 pings"; }
    # MADs on QP1, not the TCP CM (librdmacm's info line, RDMACM_RS_DEBUG).
    expect_in "$work/cli" 'the IB CM speaks on QP1'
    expect_in "$work/srv" 'the IB CM speaks on QP1'
    echo "ok rping -C 5 -V, server in $server"
    pair "ucmatose (server $server)" $sns $cns $sip \
        ucmatose -b $sip -- ucmatose -s $sip
    expect_in "$work/cli" 'return status 0'
    expect_in "$work/srv" 'return status 0'
    echo "ok ucmatose, server in $server"
    # udaddy: SIDR on its fixed port 7174, datagrams both ways.
    in_ns $sns udaddy -b $sip >"$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen 7174 $sns
    in_ns $cns udaddy -s $sip >"$work/cli" 2>&1 || { cat "$work/cli"; fail "udaddy client (server $server)"; }
    wait $srv || { cat "$work/srv"; fail "udaddy server $server"; }
    expect_in "$work/cli" 'return status 0'
    expect_in "$work/srv" 'return status 0'
    echo "ok udaddy, server in $server"
done

# IPv6: GIDs and rdma_cm's header of the other family.
pair "rping over IPv6" $A $B fd00:5::1 \
    rping -s -a fd00:5::1 -V -- rping -c -a fd00:5::1 -C 5 -V -v
n=$(grep -c 'ping data: rdma-ping-' "$work/cli")
[ "$n" = 5 ] || { cat "$work/cli"; fail "rping over IPv6: $n of 5 pings"; }
expect_in "$work/cli" 'the IB CM speaks on QP1'
echo "ok rping -C 5 -V over IPv6"

# Nobody on the port; a listener on the next one keeps QP1 open in A.
# (wait_listen sets `port`: the two are named first.)
none=$((port + 2)) next=$((port + 3))
in_ns $A rping -s -a 192.0.2.1 -p $next >"$work/srv" 2>&1 &
srv=$!
bg_pids="$bg_pids $srv"
wait_listen $next $A
in_ns $B rping -c -a 192.0.2.1 -p $none -C 1 >"$work/cli" 2>&1
c=$?
# The server's `timeout` (a child of the background subshell) passes
# the signal on to rping.
pkill -TERM -P $srv 2>/dev/null
wait $srv 2>/dev/null
[ $c != 0 ] && [ $c != 124 ] || { cat "$work/cli"; fail "rping to no listener: exit $c"; }
expect_in "$work/cli" 'RDMA_CM_EVENT_REJECTED, error 8'
echo "ok a connect to no listener is rejected, reason 8"

# Nobody holds QP1 at the address (no process of ours in A): the REQ is
# sent again each second, unanswered, until the CM's timeout (shortened
# here) reports RDMA_CM_EVENT_UNREACHABLE, ETIMEDOUT.
t0=$(date +%s)
in_ns $B env RDMACM_RS_TIMEOUT_MS=3000 rping -c -a 192.0.2.1 -p $none -C 1 >"$work/cli" 2>&1
c=$?
t=$(($(date +%s) - t0))
[ $c != 0 ] && [ $c != 124 ] || { cat "$work/cli"; fail "rping to no CM: exit $c"; }
expect_in "$work/cli" 'RDMA_CM_EVENT_UNREACHABLE, error -110'
[ $t -ge 2 ] && [ $t -le 20 ] || fail "rping to no CM gave up after $t s, not about 3"
echo "ok a connect to no CM is unreachable after the CM's timeout (${t} s)"
