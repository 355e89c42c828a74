#!/bin/bash
# harness-timeout: 300
# rdma_cm between two network namespaces joined by a veth pair: the server
# runs in one, the client in the other, so the CM and the RC QPs cross a
# real (virtual) link between two hosts' worth of devices:
#   - rping, 50 validated pings, over IPv4 and over IPv6;
#   - the sum client/server, the server listening on the wildcard address;
#   - ucmatose with 4 connections;
#   - a listener bound to one address does not answer on another
#     (REJECTED, status 8);
#   - killing the server mid-run ends the client (DISCONNECTED or an error
#     completion), no hang.
# Needs root and `ip netns`; exits 77 (skip) without them.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}

A=rdmacmA$$
B=rdmacmB$$
VA=rcma$$
VB=rcmb$$
IP_A=10.77.0.1
IP_B=10.77.0.2
IP6_A=fd77::1
IP6_B=fd77::2
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
skip() { echo "skip: $*"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$TMP"/*.out; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "no ip command"
ip netns add "$A" 2>/dev/null || skip "ip netns is not available here"
ip netns add "$B" 2>/dev/null || skip "ip netns is not available here"
ip link add "$VA" type veth peer name "$VB" 2>/dev/null || skip "cannot create veth pairs"
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" || fail "moving veth ends"
ina() { ip netns exec "$A" "$@"; }
inb() { ip netns exec "$B" "$@"; }
ina ip link set lo up && inb ip link set lo up || fail "lo up"
ina ip addr add "$IP_A/24" dev "$VA" && inb ip addr add "$IP_B/24" dev "$VB" || fail "IPv4 addresses"
ina ip addr add "$IP6_A/64" dev "$VA" nodad && inb ip addr add "$IP6_B/64" dev "$VB" nodad ||
    fail "IPv6 addresses"
ina ip link set "$VA" up && inb ip link set "$VB" up || fail "link up"
# Reachability: a TCP connect to a closed port must be refused, not time out.
inb timeout 5 bash -c "exec 3<>/dev/tcp/$IP_A/9" 2>&1 | grep -q refused ||
    fail "no IPv4 connectivity between the namespaces"

for p in rping ucmatose; do
    command -v "$p" >/dev/null || skip "$p is not installed"
done
for p in sum_server sum_client; do
    [ -x "$CTESTS_BIN/$p" ] || fail "$CTESTS_BIN/$p is not built"
done

# Each namespace sees its own devices: loopback and its end of the veth.
ina timeout 10 ibv_devices >"$TMP/devices-a.out" 2>&1
grep -q "rsw_$VA" "$TMP/devices-a.out" || echo "note: no rsw_$VA in namespace A ($(tr '\n' ' ' <"$TMP/devices-a.out"))"

wait_listen() { # NS PORT
    local end=$((SECONDS + 10))
    until ip netns exec "$1" ss -Hltn "sport = :$2" | grep -q .; do
        ((SECONDS < end)) || return 1
        sleep 0.05
    done
}

# --- rping over IPv4 and IPv6.
port=7301
for addr in "$IP_A" "$IP6_A"; do
    ina timeout -k 5 60 rping -s -a "$addr" -p "$port" -S 1024 -v >"$TMP/rping-server.out" 2>&1 &
    spid=$!
    pids+=("$spid")
    wait_listen "$A" "$port" || fail "rping server did not listen on $addr"
    inb timeout -k 5 60 rping -c -a "$addr" -p "$port" -S 1024 -C 50 -v -V >"$TMP/rping-client.out" 2>&1 ||
        fail "rping client to $addr failed"
    wait "$spid" || fail "rping server on $addr failed"
    [ "$(grep -c '^ping data: rdma-ping-' "$TMP/rping-client.out")" = 50 ] ||
        fail "rping to $addr: wrong ping count"
    echo "ok: rping across namespaces over $addr"
    port=$((port + 1))
done

# --- sum: the server listens on the wildcard address.
ina timeout -k 5 60 "$CTESTS_BIN/sum_server" 7310 >"$TMP/sum-server.out" 2>&1 &
spid=$!
pids+=("$spid")
wait_listen "$A" 7310 || fail "sum_server did not listen"
inb timeout -k 5 60 "$CTESTS_BIN/sum_client" "$IP_A" 40 2 7310 >"$TMP/sum-client.out" 2>&1 ||
    fail "sum_client failed"
wait "$spid" || fail "sum_server failed"
grep -q '^40 + 2 = 42$' "$TMP/sum-client.out" || fail "wrong sum"
echo "ok: sum across namespaces"

# --- ucmatose, 4 connections.
ina timeout -k 5 60 ucmatose -p 7320 -c 4 -C 10 >"$TMP/ucmatose-server.out" 2>&1 &
spid=$!
pids+=("$spid")
wait_listen "$A" 7320 || fail "ucmatose server did not listen"
inb timeout -k 5 60 ucmatose -s "$IP_A" -p 7320 -c 4 -C 10 >"$TMP/ucmatose-client.out" 2>&1 ||
    fail "ucmatose client failed"
wait "$spid" || fail "ucmatose server failed"
echo "ok: ucmatose across namespaces"

# --- A listener bound to 127.0.0.1 in A is not reachable at $IP_A.
ina timeout -k 5 30 rping -s -a 127.0.0.1 -p 7330 >"$TMP/lo-server.out" 2>&1 &
spid=$!
pids+=("$spid")
wait_listen "$A" 7330 || fail "loopback rping server did not listen"
if inb timeout -k 5 30 rping -c -a "$IP_A" -p 7330 -C 1 >"$TMP/lo-client.out" 2>&1; then
    fail "a listener bound to 127.0.0.1 answered on $IP_A"
fi
grep -q 'RDMA_CM_EVENT_REJECTED, error 8' "$TMP/lo-client.out" ||
    fail "expected REJECTED with status 8: $(cat "$TMP/lo-client.out")"
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
echo "ok: a listener bound to one address ignores the others (REJECTED, 8)"

# --- The server dies in the middle of a long run: the client must end.
ina timeout -k 5 60 rping -s -a "$IP_A" -p 7340 -S 4096 >"$TMP/kill-server.out" 2>&1 &
spid=$!
pids+=("$spid")
wait_listen "$A" 7340 || fail "rping server did not listen"
inb timeout -k 5 60 rping -c -a "$IP_A" -p 7340 -S 4096 -C 0 -v >"$TMP/kill-client.out" 2>&1 &
cpid=$!
pids+=("$cpid")
end=$((SECONDS + 10))
until [ "$(grep -c '^ping data:' "$TMP/kill-client.out")" -ge 20 ]; do
    ((SECONDS < end)) || fail "the endless rping never got going"
    sleep 0.05
done
ip netns pids "$A" | xargs -r kill -9
t0=$SECONDS
wait "$cpid"
crc=$?
[ "$crc" = 124 ] && fail "the client hung after its server was killed"
# Whichever comes first ends it: the CM's DISCONNECTED, or an error
# completion on the QP whose peer vanished (as on real hardware).
grep -Eq 'DISCONNECT EVENT|cq completion failed|client failed' "$TMP/kill-client.out" ||
    fail "client ended without noticing its server died"
echo "ok: client ended $((SECONDS - t0))s after its server was killed (exit $crc)"
echo "ok: all namespace tests passed"
