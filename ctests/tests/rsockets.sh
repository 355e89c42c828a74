#!/bin/bash
# harness-timeout: 600
# Debian's rsocket programs over our librdmacm, on loopback and between two
# network namespaces joined by a veth pair:
#   rstream    the full default set of sizes (latency and bandwidth, data
#              verified with -T v), then custom runs blocking (-T b),
#              asynchronous with rpoll (-T a), non-blocking (-T n), and
#              with plain sockets (-T s) for comparison;
#   riostream  riomap/riowrite into the peer's memory, custom sizes;
#   rcopy      a 5 MB random file, compared byte for byte;
#   udpong     datagram rsockets, 100 datagrams of 900 bytes echoed;
#   iperf3     under Debian's librspreload.so (LD_PRELOAD), both
#              directions; its byte counts must be non-zero and agree, and
#              a client without the preload library must fail against the
#              rsocket server (so the server really ran over rsockets).
# Every program runs under timeout; both ends must exit 0 and print their
# result line. The namespace part needs root and `ip netns` (skipped
# without them, the loopback part still runs).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
PRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
A=rsockA$$
B=rsockB$$
VA=rska$$
VB=rskb$$
IP_A=10.78.0.1
IP_B=10.78.0.2
TMP=$(mktemp -d)
pids=()
cleanup() {
    # timeout(1) leads a process group of its own: take the program with it.
    for p in "${pids[@]}"; do kill -9 -- "-$p" "$p" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$TMP"/*.out; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done; exit 1; }
for p in rstream riostream rcopy udpong iperf3; do
    command -v "$p" >/dev/null || { echo "$p is not installed"; exit 77; }
done
[ -f "$PRELOAD" ] || { echo "$PRELOAD is not installed (librdmacm1)"; exit 77; }
lib=$(ldd "$(command -v rstream)" | awk '/librdmacm\.so\.1/ { print $3 }')
case $lib in /usr/lib/* | /lib/* | "") fail "programs would load librdmacm from '$lib'" ;; esac

. "$(dirname "$0")/lib/ports.sh"

# NS is empty for the host, else the namespace the next command runs in.
in_ns() { # NS CMD...
    local ns=$1
    shift
    if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}
wait_listen() { # NS PORT
    local end=$((SECONDS + 10))
    until in_ns "$1" ss -Hltn "sport = :$2" | grep -q .; do
        ((SECONDS < end)) || return 1
        sleep 0.05 # polling a condition with a bound, not synchronising on time
    done
}
# start NS NAME CMD... : a server in the background, its pid in $spid.
start() {
    local ns=$1 name=$2
    shift 2
    # timeout(1) itself is the background job (ip netns exec execs into
    # it), so $spid names its process group and a kill takes the program.
    if [ -n "$ns" ]; then
        ip netns exec "$ns" timeout -k 5 120 "$@" >"$TMP/$name.out" 2>&1 &
    else
        timeout -k 5 120 "$@" >"$TMP/$name.out" 2>&1 &
    fi
    spid=$!
    pids+=("$spid")
}
# finish NAME: the server started last must exit 0.
finish() {
    wait "$spid" || fail "$1 server exited with status $?"
}

# rstream_pair SERVER_NS CLIENT_NS ADDR LABEL ARGS... : one rstream run
# (server and client with the same options); both print the result lines
# the run should produce: every size of the default run, or the one custom
# line with the expected byte total.
rstream_pair() {
    local sns=$1 cns=$2 addr=$3 label=$4 port
    shift 4
    port=$(free_port)
    start "$sns" "rstream-$label-server" stdbuf -o0 rstream -p "$port" "$@"
    wait_listen "$sns" "$port" || fail "rstream $label: server did not listen"
    in_ns "$cns" timeout -k 5 120 stdbuf -o0 rstream -s "$addr" -p "$port" "$@" \
        >"$TMP/rstream-$label-client.out" 2>&1 || fail "rstream $label: client failed"
    finish "rstream $label"
    for side in server client; do
        f=$TMP/rstream-$label-$side.out
        if [[ " $* " == *" -S "* ]]; then
            grep -Eq "^custom +$expect_size +$expect_count +1 +$expect_total " "$f" ||
                fail "rstream $label $side: no 'custom $expect_size $expect_count 1 $expect_total' line"
        else
            for t in 64_lat 4k_lat 64k_lat 1m_lat 64_bw 4k_bw 64k_bw 1m_bw; do
                grep -Eq "^$t " "$f" || fail "rstream $label $side: no $t line"
            done
        fi
    done
}

riostream_pair() { # SERVER_NS CLIENT_NS ADDR LABEL ARGS...
    local sns=$1 cns=$2 addr=$3 label=$4 port
    shift 4
    port=$(free_port)
    start "$sns" "riostream-$label-server" stdbuf -o0 riostream -p "$port" "$@"
    wait_listen "$sns" "$port" || fail "riostream $label: server did not listen"
    in_ns "$cns" timeout -k 5 120 stdbuf -o0 riostream -s "$addr" -p "$port" "$@" \
        >"$TMP/riostream-$label-client.out" 2>&1 || fail "riostream $label: client failed"
    finish "riostream $label"
    for side in server client; do
        grep -Eq "^custom +$expect_size +$expect_count +1 +$expect_total " \
            "$TMP/riostream-$label-$side.out" || fail "riostream $label $side: no result line"
    done
}

rcopy_pair() { # SERVER_NS CLIENT_NS ADDR LABEL
    local sns=$1 cns=$2 addr=$3 label=$4 port
    port=$(free_port)
    head -c 5000000 /dev/urandom >"$TMP/src-$label.bin"
    start "$sns" "rcopy-$label-server" rcopy -p "$port"
    wait_listen "$sns" "$port" || fail "rcopy $label: server did not listen"
    in_ns "$cns" timeout -k 5 60 rcopy "$TMP/src-$label.bin" "$addr:$TMP/dst-$label.bin" -p "$port" \
        >"$TMP/rcopy-$label-client.out" 2>&1 || fail "rcopy $label: client failed"
    grep -q "^5000000 bytes in" "$TMP/rcopy-$label-client.out" || fail "rcopy $label: no byte count"
    cmp "$TMP/src-$label.bin" "$TMP/dst-$label.bin" || fail "rcopy $label: the copy differs"
    # The server serves forever: stop it.
    kill -9 -- "-$spid" "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
}

# iperf3_pair SERVER_NS CLIENT_NS ADDR LABEL [-R]
iperf3_pair() {
    local sns=$1 cns=$2 addr=$3 label=$4 port
    shift 4
    port=$(free_port)
    start "$sns" "iperf3-$label-server" env LD_PRELOAD="$PRELOAD" iperf3 -s -1 -p "$port"
    wait_listen "$sns" "$port" || fail "iperf3 $label: server did not listen"
    in_ns "$cns" timeout -k 5 60 env LD_PRELOAD="$PRELOAD" iperf3 -c "$addr" -p "$port" -t 2 -J "$@" \
        >"$TMP/iperf3-$label.json" 2>"$TMP/iperf3-$label-client.out" || {
        cat "$TMP/iperf3-$label.json" >>"$TMP/iperf3-$label-client.out"
        fail "iperf3 $label: client failed"
    }
    finish "iperf3 $label"
    python3 - "$TMP/iperf3-$label.json" <<'PY' || fail "iperf3 $label: bad byte counts"
import json, sys
d = json.load(open(sys.argv[1]))
end = d["end"]
sent, recv = end["sum_sent"]["bytes"], end["sum_received"]["bytes"]
print(f"iperf3: sent {sent} received {recv} bytes")
# Received trails sent by at most what was in flight when the test ended.
assert recv > 10_000_000 and 0 <= sent - recv <= 64 << 20, (sent, recv)
PY
}

# udpong_pair SERVER_NS CLIENT_NS ADDR LABEL ARGS... : datagram rsockets,
# in echo mode (every datagram comes back, so the count is exact).
# The server blocks in rrecvfrom (-T b). Its non-blocking default spins,
# and udpong's echo client sends again after 1 ms without an answer and
# never retires a copy (a late echo even makes it send that stale
# sequence number on): beside CPU hogs the spinning server lost the CPU
# for whole slices, every millisecond of them left one more copy going
# round, until a receive queue overflowed; once the dropped datagram was
# the echo the client waited for, it exchanged stale copies until the
# timeout killed it (10 runs in 100 beside two hogs). A sleeping server
# is woken by the datagram instead.
udpong_pair() {
    local sns=$1 cns=$2 addr=$3 label=$4 port end
    shift 4
    port=$(free_port)
    start "$sns" "udpong-$label-server" stdbuf -o0 udpong -b "$addr" -p "$port" "$@" -T b
    end=$((SECONDS + 10))
    until in_ns "$sns" ss -Hlun "sport = :$port" | grep -q .; do
        ((SECONDS < end)) || fail "udpong $label: server did not bind"
        sleep 0.05 # polling a condition with a bound, not synchronising on time
    done
    in_ns "$cns" timeout -k 5 60 stdbuf -o0 udpong -s "$addr" -p "$port" "$@" \
        >"$TMP/udpong-$label-client.out" 2>&1 || fail "udpong $label: client failed"
    grep -Eq "^custom +$expect_size +$expect_count +$expect_total " "$TMP/udpong-$label-client.out" ||
        fail "udpong $label: no 'custom $expect_size $expect_count $expect_total' line"
    grep -q "client login from" "$TMP/udpong-$label-server.out" || fail "udpong $label: no login"
    # The server serves forever: stop it.
    kill -9 -- "-$spid" "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
}

# A client without the preload library cannot talk to the rsocket server:
# the port is our CM's, which drops anything that is not a connection
# request.
iperf3_plain_client_fails() { # NS ADDR
    local port
    port=$(free_port)
    start "$1" iperf3-plain-server env LD_PRELOAD="$PRELOAD" iperf3 -s -1 -p "$port"
    wait_listen "$1" "$port" || fail "iperf3: server did not listen"
    if timeout -k 5 20 iperf3 -c "$2" -p "$port" -t 1 --connect-timeout 3000 \
        >"$TMP/iperf3-plain-client.out" 2>&1; then
        fail "iperf3 without librspreload reached the rsocket server"
    fi
    kill -9 -- "-$spid" "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
}

suite() { # SERVER_NS CLIENT_NS ADDR WHERE
    local s=$1 c=$2 a=$3 w=$4
    expect_size=3.9k expect_count=2k expect_total=15m
    rstream_pair "$s" "$c" "$a" "$w-b" -T b -T v -S 4000 -C 2000
    rstream_pair "$s" "$c" "$a" "$w-a" -T a -T v -S 4000 -C 2000
    rstream_pair "$s" "$c" "$a" "$w-n" -T n -T v -S 4000 -C 2000
    rstream_pair "$s" "$c" "$a" "$w-s" -T s -S 4000 -C 2000
    expect_size=976k expect_count=20 expect_total=38m
    rstream_pair "$s" "$c" "$a" "$w-big" -T b -T v -S 1000000 -C 20
    expect_size=62k expect_count=200 expect_total=24m
    riostream_pair "$s" "$c" "$a" "$w" -S 64000 -C 200
    rcopy_pair "$s" "$c" "$a" "$w"
    # 900 bytes: within a 1024-byte MTU (rsw's on a 1500-byte link).
    expect_size=900 expect_count=200 expect_total=175k
    udpong_pair "$s" "$c" "$a" "$w" -C 100 -S 900 -T e
    iperf3_pair "$s" "$c" "$a" "$w"
    iperf3_pair "$s" "$c" "$a" "$w-R" -R
    echo "ok: rstream, riostream, rcopy, udpong, iperf3 ($w)"
}

# --- loopback: the default rstream run in full (every size, latency and
# bandwidth; blocking, as its non-blocking form busy-polls for minutes on a
# loaded machine), then the suite.
rstream_pair "" "" 127.0.0.1 lo-default -T b -T v
suite "" "" 127.0.0.1 lo
iperf3_plain_client_fails "" 127.0.0.1
echo "ok: loopback"

# --- two namespaces.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add "$A" 2>/dev/null; then
    echo "skip: no network namespaces here (the loopback part passed)"
    exit 0
fi
ip netns add "$B" || fail "ip netns add"
ip link add "$VA" type veth peer name "$VB" || fail "cannot create a veth pair"
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" || fail "moving veth ends"
ip netns exec "$A" ip link set lo up && ip netns exec "$B" ip link set lo up || fail "lo up"
ip netns exec "$A" ip addr add "$IP_A/24" dev "$VA" && ip netns exec "$B" ip addr add "$IP_B/24" dev "$VB" ||
    fail "addresses"
ip netns exec "$A" ip link set "$VA" up && ip netns exec "$B" ip link set "$VB" up || fail "link up"
ip netns exec "$B" timeout 5 bash -c "exec 3<>/dev/tcp/$IP_A/9" 2>&1 | grep -q refused ||
    fail "no IPv4 connectivity between the namespaces"
suite "$A" "$B" "$IP_A" netns
iperf3_plain_client_fails "$A" "$IP_A"
echo "ok: between namespaces"
