#!/bin/bash
# harness-timeout: 180
# The RC retry contract between two hosts (network namespaces joined by a
# veth pair): a requester whose peer vanishes without closing anything
# (the peer host's link goes down, then the peer process is killed; or
# the peer process is frozen) completes its outstanding work with
# IBV_WC_RETRY_EXC_ERR and flushes the rest, in about the time hardware
# takes (timeout 14, retry_cnt 7: ~0.55 s; the bound here is 5 s); and a
# receiver with nothing outstanding has its receives flushed once the
# connections' keepalive gives up (~6 s, whether the kernel reports it as
# ETIMEDOUT or EHOSTUNREACH). Both with our rc_stress and with Debian's
# ibv_rc_pingpong, killed at whatever point of its ping-pong it is.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
bin=$CTESTS_BIN/rc_stress
[ -x "$bin" ] || fail "$bin is not built"
a=rswPA$$ b=rswPB$$ va=vpa$$ vb=vpb$$
ip netns add $a 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $b
drop_ns() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; }
cleanup_hooks="drop_ns"
setup_link() {
    ip -n $a link del $va 2>/dev/null
    ip -n $b link del $vb 2>/dev/null
    ip link add $va type veth peer name $vb || fail "veth"
    ip link set $va netns $a
    ip link set $vb netns $b
    ip -n $a addr add 198.51.100.1/24 dev $va
    ip -n $b addr add 198.51.100.2/24 dev $vb
    for ns in $a $b; do ip -n $ns link set lo up; done
    ip -n $a link set $va up
    ip -n $b link set $vb up
}
in_ns() { ns=$1; shift; ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" "$@"; }

# wait_for FILE PATTERN SECONDS: bounded wait for a line in a file.
wait_for() {
    for _ in $(seq 1 $(($3 * 20))); do
        grep -Eq -- "$2" "$1" && return 0
        sleep 0.05   # polling a condition with a bound
    done
    cat "$1"; fail "'$2' did not appear in $1 within $3 s"
}

# how: "down" (link down, then kill -9) or "stop" (SIGSTOP: alive, silent)
peer_vanishes() {
    how=$1 port=$2
    setup_link
    # Emptied now, not by the background job's redirection: wait_for must
    # not find the previous case's "running" before the new client starts.
    : > "$work/srv"; : > "$work/cli"
    in_ns $a timeout -k 5 60 "$bin" -s -d rsw_$va -p "$port" -q 2 -n 100000000 > "$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port" $a
    in_ns $b timeout -k 5 60 "$bin" -d rsw_$vb -p "$port" -q 2 -n 100000000 -D 198.51.100.1 > "$work/cli" 2>&1 &
    cli=$!
    bg_pids="$bg_pids $cli"
    wait_for "$work/cli" '^running' 20
    spid=$(pgrep -n -f "rc_stress -s -d rsw_$va -p $port")
    [ -n "$spid" ] || fail "no server process"
    t0=$(date +%s%N)
    if [ "$how" = down ]; then
        ip -n $a link set $va down
        kill -9 "$spid"
    else
        kill -STOP "$spid"
    fi
    wait $cli; crc=$?
    t1=$(date +%s%N)
    kill -9 "$spid" 2>/dev/null
    cat "$work/cli"
    [ $crc = 3 ] || fail "$how: client exit $crc, expected 3 (RETRY_EXC_ERR then flush)"
    expect_in "$work/cli" 'peer-death: RETRY_EXC_ERR after [0-9]+ ms'
    ms=$(( (t1 - t0) / 1000000 ))
    [ $ms -lt 5000 ] || fail "$how: the error took $ms ms"
    echo "ok rc_stress, peer $how: RETRY_EXC_ERR and flush $ms ms after the peer vanished"
}

peer_vanishes down 18611
peer_vanishes stop 18612

# The other way round: the sender's host vanishes, and the receiver, with
# nothing outstanding of its own, would wait for ever on its receives on
# hardware. Its connections' keepalive notices within about 6 s: the QP
# goes to ERR and the receives flush.
setup_link
port=18614
: > "$work/srv"; : > "$work/cli"
in_ns $a timeout -k 5 60 "$bin" -s -D -d rsw_$va -p "$port" -q 2 -n 100000000 > "$work/srv" 2>&1 &
srv=$!
bg_pids="$bg_pids $srv"
wait_listen "$port" $a
in_ns $b timeout -k 5 60 "$bin" -d rsw_$vb -p "$port" -q 2 -n 100000000 198.51.100.1 > "$work/cli" 2>&1 &
cli=$!
bg_pids="$bg_pids $cli"
wait_for "$work/cli" '^running' 20
cpid=$(pgrep -n -f "rc_stress -d rsw_$vb -p $port")
[ -n "$cpid" ] || fail "no client process"
t0=$(date +%s%N)
ip -n $b link set $vb down
kill -9 "$cpid"
wait $srv; src=$?
t1=$(date +%s%N)
cat "$work/srv"
[ $src = 3 ] || fail "receiver: server exit $src, expected 3 (receives flushed)"
ms=$(( (t1 - t0) / 1000000 ))
[ $ms -lt 12000 ] || fail "receiver: the flush took $ms ms"
echo "ok rc_stress, sender vanished: the receiver's receives flushed $ms ms later"

if command -v ibv_rc_pingpong >/dev/null; then
    setup_link
    port=18613
    in_ns $a timeout -k 5 60 ibv_rc_pingpong -d rsw_$va -g 0 -p $port -n 100000000 > "$work/psrv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen $port $a
    in_ns $b timeout -k 5 60 stdbuf -oL ibv_rc_pingpong -d rsw_$vb -g 0 -p $port -n 100000000 198.51.100.1 > "$work/pcli" 2>&1 &
    cli=$!
    bg_pids="$bg_pids $cli"
    # Traffic flows once the out-of-band exchange is over; give it a moment
    # of real traffic (bounded by the client's own run time).
    wait_for "$work/pcli" 'remote address' 20
    spid=$(pgrep -n -f "ibv_rc_pingpong -d rsw_$va -g 0 -p $port")
    t0=$(date +%s%N)
    ip -n $a link set $va down
    kill -9 "$spid"
    wait $cli; crc=$?
    t1=$(date +%s%N)
    cat "$work/pcli"
    echo "client exit status $crc"
    [ $crc != 0 ] || fail "ibv_rc_pingpong: the client did not notice"
    # Killed with a SEND outstanding, the client's retries run out (~0.6 s);
    # killed while the client only waits for the server's next message, the
    # vanished host is noticed by the connections' keepalive (~6 s) and the
    # client's receives flush (hardware would wait for ever there).
    expect_in "$work/pcli" 'Failed status (transport retry counter exceeded \(12\)|Work Request Flushed Error \(5\))'
    ms=$(( (t1 - t0) / 1000000 ))
    [ $ms -lt 12000 ] || fail "ibv_rc_pingpong: the error took $ms ms"
    echo "ok ibv_rc_pingpong: '$(grep -o 'Failed status [^(]*' "$work/pcli")' $ms ms after the peer vanished"
fi
