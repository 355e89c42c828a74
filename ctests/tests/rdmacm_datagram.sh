#!/bin/bash
# harness-timeout: 300
# Debian's rdma_cm datagram programs over our libraries:
#   udaddy  (RDMA_PS_UDP ids, the SIDR exchange, UD sends both ways with
#            the AH from ESTABLISHED and one made from the GRH): defaults,
#            3 ids of 20 messages of 1024 bytes, and the IPoIB port space;
#   mckey   (multicast: several receivers, one of them with two QPs, and a
#            sender; also a send-only sender and the IPoIB port space).
# First on loopback (inside a namespace of its own: udaddy's port is fixed
# at 7174), then across a bridge between three network namespaces (a
# fourth holds the bridge): udaddy between two of them, mckey with a
# sender in one and receivers in the other two, over IPv4 and IPv6 (an
# IPv6 group's MGID is its address). Every program runs under
# timeout; its exit status and its success lines are checked.
set -u
. "$(dirname "$0")/lib/common.sh"

for p in udaddy mckey stdbuf; do
    command -v "$p" >/dev/null || { echo "$p is not installed"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "needs root for network namespaces"; exit 77; }
command -v ip >/dev/null || { echo "no iproute2"; exit 77; }

lo_ns=cmudL$$
hub=cmudH$$
hosts="cmudA$$ cmudB$$ cmudC$$"
ip netns add $lo_ns 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
drop_ns() { for ns in $lo_ns $hub $hosts; do ip netns del "$ns" 2>/dev/null; done; }
cleanup_hooks="drop_ns"
ip -n $lo_ns link set lo up || fail "lo up"

# in_ns NS SECONDS CMD...: runs CMD in NS over our libraries, line-buffered
# (the tests wait for the programs' progress lines).
in_ns() {
    local ns=$1 t=$2
    shift 2
    timeout -k 5 "$t" ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" stdbuf -oL "$@"
}
# wait_line FILE PATTERN: bounded wait for a program's progress line.
wait_line() {
    for _ in $(seq 1 200); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05   # polling a file for a line, bounded
    done
    cat "$1" 2>/dev/null
    fail "no '$2' in $1 after 10 s"
}
# check_ok NAME STATUS FILE LINE...: the program exited 0 and printed each line.
check_ok() {
    local name=$1 st=$2 f=$3
    shift 3
    [ "$st" = 0 ] || { echo "--- $f"; cat "$f"; fail "$name exited with status $st"; }
    for l in "$@" 'return status 0'; do
        expect_in "$f" "$l"
    done
}

# udaddy NS_SERVER NS_CLIENT SERVER_ADDR LABEL "SERVER_OPTIONS" [OPTIONS...]
run_udaddy() {
    local sns=$1 cns=$2 addr=$3 label=$4 sopts=$5
    shift 5
    # shellcheck disable=SC2086
    in_ns "$sns" 60 udaddy $sopts "$@" >"$work/uds.$label" 2>&1 &
    local srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen 7174 "$sns"
    in_ns "$cns" 60 udaddy -s "$addr" "$@" >"$work/udc.$label" 2>&1
    local cst=$?
    wait $srv
    local sst=$?
    check_ok "udaddy client ($label)" $cst "$work/udc.$label" \
        'initiating data transfers' 'receiving data transfers' 'data transfers complete'
    check_ok "udaddy server ($label)" $sst "$work/uds.$label" \
        'receiving data transfers' 'sending replies' 'data transfers complete'
    echo "ok udaddy $label"
}

# mckey GROUP LABEL SENDER_NS "SENDER_OPTS" RECEIVER_NS "RECEIVER_OPTS" ...
run_mckey() {
    local group=$1 label=$2 sns=$3 sopts=$4 dgid=::ffff:$1
    shift 4
    local i=0 pids="" st
    case $group in *:*) dgid=$group ;; esac
    while [ $# -ge 2 ]; do
        # shellcheck disable=SC2086
        in_ns "$1" 60 mckey -m "$group" $2 >"$work/mcr.$label.$i" 2>&1 &
        pids="$pids $!"
        bg_pids="$bg_pids $!"
        i=$((i + 1))
        shift 2
    done
    for r in $(seq 0 $((i - 1))); do
        wait_line "$work/mcr.$label.$r" "joined dgid: $dgid"
    done
    # shellcheck disable=SC2086
    in_ns "$sns" 60 mckey -m "$group" -s $sopts >"$work/mcs.$label" 2>&1
    st=$?
    check_ok "mckey sender ($label)" $st "$work/mcs.$label" \
        "joined dgid: $dgid" 'initiating data transfers' 'data transfers complete'
    i=0
    for p in $pids; do
        wait "$p"
        st=$?
        check_ok "mckey receiver $i ($label)" $st "$work/mcr.$label.$i" \
            'receiving data transfers' 'data transfers complete'
        i=$((i + 1))
    done
    echo "ok mckey $label"
}

# --- loopback (rsw_lo in a namespace of its own)
run_udaddy $lo_ns $lo_ns 127.0.0.1 loopback ""
run_udaddy $lo_ns $lo_ns 127.0.0.1 loopback-3x20x1024 "" -c 3 -C 20 -S 1024
run_udaddy $lo_ns $lo_ns 127.0.0.1 loopback-ipoib "" -P ipoib
run_mckey 239.1.2.3 loopback $lo_ns "-b 127.0.0.1" \
    $lo_ns "-b 127.0.0.1" $lo_ns "-b 127.0.0.1 -c 2"
run_mckey 239.1.2.4 loopback-sendonly $lo_ns "-b 127.0.0.1 -o" \
    $lo_ns "-b 127.0.0.1"
run_mckey 239.1.2.5 loopback-ipoib $lo_ns "-b 127.0.0.1 -p 0x2" \
    $lo_ns "-b 127.0.0.1 -p 0x2"
# -l: the sender's QP blocks its own multicast loopback; others still get it.
run_mckey 239.1.2.7 loopback-nolb $lo_ns "-b 127.0.0.1 -l" \
    $lo_ns "-b 127.0.0.1"

# --- three hosts on a bridge
ip netns add $hub || fail "netns"
ip -n $hub link add br0 type bridge mcast_snooping 0 || fail "bridge"
ip -n $hub link set br0 up
i=1
for ns in $hosts; do
    ip netns add "$ns" || fail "netns"
    ip link add "cmh$i$$" type veth peer name "cmp$i$$" || fail "veth"
    ip link set "cmh$i$$" netns "$ns"
    ip link set "cmp$i$$" netns $hub
    ip -n $hub link set "cmp$i$$" master br0
    ip -n $hub link set "cmp$i$$" up
    ip -n "$ns" addr add "192.0.2.$i/24" dev "cmh$i$$"
    ip -n "$ns" addr add "fd79::$i/64" dev "cmh$i$$" nodad
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "cmh$i$$" up
    # Where multicast goes without a bound address (mckey without -b
    # resolves the group's address to find its device).
    ip -n "$ns" route add 224.0.0.0/4 dev "cmh$i$$"
    i=$((i + 1))
done
set -- $hosts
A=$1 B=$2 C=$3

run_udaddy "$A" "$B" 192.0.2.1 hosts ""
run_udaddy "$A" "$C" 192.0.2.1 hosts-3x20x1024 "" -c 3 -C 20 -S 1024
run_mckey 239.1.2.3 hosts "$A" "-b 192.0.2.1" \
    "$B" "" "$C" "-b 192.0.2.3 -c 2"
run_mckey 239.1.2.6 hosts-sendonly "$C" "-o" \
    "$A" "" "$B" "-b 192.0.2.2"
run_udaddy "$A" "$B" fd79::1 hosts-ipv6 "-b fd79::1"
run_mckey ff0e::79:1 hosts-ipv6 "$A" "-b fd79::1" \
    "$B" "-b fd79::2" "$C" "-b fd79::3"
echo "ok: all datagram programs passed"
