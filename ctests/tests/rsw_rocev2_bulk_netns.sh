#!/bin/bash
# harness-timeout: 240
# RC bulk traffic between two rsw devices in RoCEv2 mode (RSW_ROCEV2), in
# two network namespaces joined by a veth pair (ctests/src/roce_bulk_peer:
# a 1 MiB WRITE, 64 WRITEs of 4 KiB at once, a 1 MiB READ, 96 SENDs at
# once, every byte and completion checked), each side as target; then
# with RSW_FAULTS losing, duplicating and reordering packets both ways;
# then with netem losing 5% and reordering both ways (where the kernel
# has netem; tests/vm_rsw_rocev2_rc_lossy runs this half in the VM,
# LOSSY_ONLY=1). rsw sends a QP's ready packets with one sendmmsg and
# takes the port's with one recvmmsg (engine/roce_tx.rs): each side's
# rsw-stat counters must show it, with fewer system calls than packets
# (RSW_FAULTS' packets go one a call: there only receiving is batched).
# rxe is the other end in tests/vm_roce_ops.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
bin=$CTESTS_BIN/roce_bulk_peer
[ -x "$bin" ] || fail "$bin is not built"
A=rbkA$$ B=rbkB$$
ip netns add $A 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $B
drop_ns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add a$$ type veth peer name b$$ || fail "veth"
for x in a b; do
    ns=$A n=1
    [ $x = b ] && ns=$B n=2
    ip link set "$x$$" netns $ns
    ip -n $ns addr add 192.0.2.$n/24 dev "$x$$"
    ip -n $ns link set lo up
    ip -n $ns link set "$x$$" up
done

# in_ns NS LOG CMD...: CMD in NS, its library log (info: the faults
# struck) in LOG.
in_ns() {
    ns=$1 log=$2; shift 2
    timeout 100 ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" RSW_ROCEV2=all ${FAULTS:+RSW_FAULTS=$FAULTS} \
        VERBS_LOG_LEVEL=3 VERBS_LOG_FILE="$log" "$@"
}

# stat FILE NAME: the counter the program printed.
stat() { awk -v n="$2" '$3 == "stat" && $4 == n { print $5 }' "$1"; }

port=$(free_port)
# run TAG TARGET_NS TARGET_DEV INITIATOR_NS INITIATOR_DEV TARGET_IP
run() {
    tag=$1 tns=$2 tdev=$3 ins=$4 idev=$5 tip=$6
    port=$((port + 1))
    in_ns $tns "$work/tgt.log" "$bin" target $tdev 0 $port >"$work/tgt" 2>&1 &
    tgt=$!
    bg_pids="$bg_pids $tgt"
    wait_listen $port $tns
    in_ns $ins "$work/ini.log" "$bin" initiator $idev 0 $port $tip >"$work/ini" 2>&1
    i=$?
    wait $tgt
    t=$?
    if [ $i != 0 ] || [ $t != 0 ]; then
        echo "--- target"; cat "$work/tgt"; echo "--- initiator"; cat "$work/ini"
        fail "$tag: initiator $i target $t"
    fi
    expect_in "$work/ini" '^roce_bulk_peer initiator: ok$'
    expect_in "$work/tgt" '^roce_bulk_peer target: ok$'
    for side in ini tgt; do
        f=$work/$side
        txp=$(stat $f roce_tx_pkts) txc=$(stat $f roce_tx_calls) txb=$(stat $f roce_tx_batches)
        rxp=$(stat $f roce_rx_pkts) rxc=$(stat $f roce_rx_calls) rxb=$(stat $f roce_rx_batches)
        co=$(stat $f roce_acks_coalesced) held=$(stat $f roce_replies_held)
        [ -n "$txp" ] && [ -n "$rxp" ] && [ -n "$co" ] && [ -n "$held" ] ||
            { cat "$f"; fail "$tag: $side printed no counters"; }
        echo "  $tag $side: tx $txp packets in $txc calls ($txb batches), rx $rxp in $rxc ($rxb batches), $co ACKs coalesced, $held replies held behind READ responses"
        # The initiator's WRITEs and the target's READ responses: 1024
        # packets each, 32 a sendmmsg when the socket has room.
        if [ -z "${FAULTS:-}" ]; then
            [ "$txb" -gt 0 ] || fail "$tag: $side sent no batch"
            [ $((txc * 2)) -lt "$txp" ] || fail "$tag: $side: $txc send calls for $txp packets"
        else
            [ "$txb" = 0 ] && [ "$txc" -ge "$txp" ] ||
                fail "$tag: $side: $txb batches, $txc calls for $txp packets through the faults"
        fi
        # The READ's responses come in bursts of 32: some are taken together.
        [ $side = tgt ] || [ "$rxb" -gt 0 ] || fail "$tag: $side received no batch"
        [ "$rxc" -le "$rxp" ] || fail "$tag: $side: $rxc receive calls for $rxp packets"
    done
    echo "ok $tag"
}

if [ "${LOSSY_ONLY:-0}" != 1 ]; then
    run "clean, target in A" $A rsw_a$$ $B rsw_b$$ 192.0.2.1
    run "clean, target in B" $B rsw_b$$ $A rsw_a$$ 192.0.2.2
    FAULTS="seed=7;roce:drop:p=0.03;roce:late:p=0.05;roce:dup:p=0.01"
    run "RSW_FAULTS, target in A" $A rsw_a$$ $B rsw_b$$ 192.0.2.1
    n=$(cat "$work/ini.log" "$work/tgt.log" | grep -c 'RSW_FAULTS: ')
    [ "$n" -gt 10 ] || fail "RSW_FAULTS struck $n times"
    echo "ok RSW_FAULTS struck $n times"
    FAULTS=
fi

. "$(dirname "$0")/../vm/roce/netem.sh"
if ! netem_lossy a$$ $A 2>"$work/tc"; then
    echo "SKIP the netem half: no netem here: $(cat "$work/tc")"
    exit 0
fi
netem_lossy b$$ $B || fail "netem on b$$"
run "lossy, target in A" $A rsw_a$$ $B rsw_b$$ 192.0.2.1
drops=$(($(netem_dropped a$$ $A) + $(netem_dropped b$$ $B)))
[ "$drops" -gt 0 ] || fail "netem dropped nothing"
echo "ok netem dropped $drops packets"
