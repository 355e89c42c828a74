#!/bin/bash
# harness-timeout: 300
# RC between two rsw devices in RoCEv2 mode (RSW_ROCEV2), in two network
# namespaces joined by a veth pair (IPv4): ibv_rc_pingpong -c (every
# byte checked) at sizes below, at and above the path MTU, each side as
# server; perftest ib_send_bw, ib_write_bw, ib_read_bw with few
# iterations; then again with netem dropping 5% and reordering (where
# the kernel has netem), both ways: go-back-N and the ACK timeout make
# every transfer complete, pingpong's data still checked. LOSSY_ONLY=1
# runs the lossy half alone. rxe is the other end in
# tests/vm_roce_rc_pingpong. DBG=1 turns on the libraries' debug log.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
A=rrcA$$ B=rrcB$$
ip netns add $A 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $B
drop_ns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add a4$$ type veth peer name b4$$ || fail "veth"
for x in a b; do
    ns=$A n=1
    [ $x = b ] && ns=$B n=2
    ip link set "${x}4$$" netns $ns
    ip -n $ns addr add 192.0.2.$n/24 dev "${x}4$$"
    ip -n $ns link set lo up
    ip -n $ns link set "${x}4$$" up
done
devA=rsw_a4$$ devB=rsw_b4$$

in_ns() {
    ns=$1; shift
    timeout 60 ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" RSW_ROCEV2=all ${DBG:+VERBS_LOG_LEVEL=debug} "$@"
}

port=$(free_port)
# pair NAME SERVER_NS SERVER_DEV CLIENT_NS CLIENT_DEV SERVER_IP CMD...:
# the command as server and as client; both must exit 0.
pair() {
    name=$1 sns=$2 sdev=$3 cns=$4 cdev=$5 sip=$6
    shift 6
    port=$((port + 1))
    in_ns $sns "$@" -d $sdev -p $port >"$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen $port $sns
    in_ns $cns "$@" -d $cdev -p $port $sip >"$work/cli" 2>&1
    c=$?
    wait $srv
    s=$?
    if [ $c != 0 ] || [ $s != 0 ]; then
        echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
        fail "$name: client $c server $s"
    fi
}

run_all() {
    tag=$1 iters=$2
    for server in A B; do
        if [ $server = A ]; then set -- $A $devA $B $devB 192.0.2.1
        else set -- $B $devB $A $devA 192.0.2.2; fi
        for size in 1 1024 4096 65536; do
            pair "$tag ibv_rc_pingpong -s $size (server $server)" "$@" \
                ibv_rc_pingpong -g 0 -m 1024 -s $size -n $iters -c
            expect_in "$work/cli" "$iters iters in"
            expect_in "$work/srv" "$iters iters in"
            echo "ok $tag ibv_rc_pingpong -s $size -n $iters, server in $server"
        done
        # UC (engine/roce_rc/uc.rs), every byte checked.
        for size in 1 4096 65536; do
            pair "$tag ibv_uc_pingpong -s $size (server $server)" "$@" \
                ibv_uc_pingpong -g 0 -m 1024 -s $size -n $iters -c
            expect_in "$work/cli" "$iters iters in"
            expect_in "$work/srv" "$iters iters in"
            echo "ok $tag ibv_uc_pingpong -s $size -n $iters, server in $server"
        done
        # Atomics: ib_atomic_bw's report line is size 8 and the iterations.
        pair "$tag ib_atomic_bw (server $server)" "$@" ib_atomic_bw -x 0 -F -n $iters
        expect_in "$work/cli" "^ *8 +$iters "
        echo "ok $tag ib_atomic_bw -n $iters, server in $server: $(grep -E '^ *8 ' "$work/cli")"
    done
    set -- $A $devA $B $devB 192.0.2.1
    for t in send write read; do
        pair "$tag ib_${t}_bw" "$@" ib_${t}_bw -x 0 -F -m 1024 -s 65536 -n $iters
        # The report's line: size, iterations, peak and average bandwidth.
        expect_in "$work/cli" "^ *65536 +$iters "
        echo "ok $tag ib_${t}_bw -s 65536 -n $iters: $(grep -E '^ *65536 ' "$work/cli")"
    done
}

# LOSSY_ONLY=1 (tests/vm_rsw_rocev2_rc_lossy, in the slow VM): the clean
# half ran on the host already.
[ "${LOSSY_ONLY:-0}" = 1 ] || run_all clean 100
# Loss and reordering (ctests/vm/roce/netem.sh); a kernel without netem
# (sch_netem) leaves this half to the VM (tests/vm_rsw_rocev2_rc_lossy);
# tests/rsw_rocev2_rc_loss loses packets through rsw's own faults.
# ibv_rc_pingpong's client exits once it has its last message, so were
# the ACK of its last SEND lost the server would retry into a QP that is
# gone: pingpong's ACKs are spared, perftest loses them too.
. "$(dirname "$0")/../vm/roce/netem.sh"
if ! netem_lossy a4$$ $A spare-acks 2>"$work/tc"; then
    echo "SKIP the lossy half: no netem here: $(cat "$work/tc")"
    exit 0
fi
netem_lossy b4$$ $B spare-acks || fail "netem on b4$$"
for size in 4096 65536; do
    pair "lossy ibv_rc_pingpong -s $size" $A $devA $B $devB 192.0.2.1 \
        ibv_rc_pingpong -g 0 -m 1024 -s $size -n 40 -c
    expect_in "$work/cli" "40 iters in"
    expect_in "$work/srv" "40 iters in"
    echo "ok lossy ibv_rc_pingpong -s $size -n 40"
done
drops=$(($(netem_dropped a4$$ $A) + $(netem_dropped b4$$ $B)))
netem_lossy a4$$ $A || fail "netem on a4$$"
netem_lossy b4$$ $B || fail "netem on b4$$"
for t in send write read; do
    pair "lossy ib_${t}_bw" $A $devA $B $devB 192.0.2.1 ib_${t}_bw -x 0 -F -m 1024 -s 65536 -n 40
    expect_in "$work/cli" "^ *65536 +40 "
    echo "ok lossy ib_${t}_bw -s 65536 -n 40"
done
drops=$((drops + $(netem_dropped a4$$ $A) + $(netem_dropped b4$$ $B)))
[ "$drops" -gt 0 ] || fail "netem dropped nothing"
echo "ok netem dropped $drops packets"
