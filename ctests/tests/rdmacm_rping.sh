#!/bin/bash
# harness-timeout: 400
# rping (Debian's rdmacm-utils) over our librdmacm, libibverbs and the rsw
# provider, on loopback:
#   - message sizes from the smallest rping accepts (23) to the largest
#     (65535), 100 validated pings each (-V compares every byte);
#   - QPs the application creates itself (-q: rdma_init_qp_attr,
#     CONNECT_RESPONSE and rdma_establish);
#   - a persistent server (-P) serving two clients one after the other,
#     then three at the same time.
# rping's server reads the client's buffer with RDMA READ, so both sides
# get the same -S. Every program runs under timeout; exit 0 only if all pass.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
TMP=$(mktemp -d)
pids=()
cleanup() {
    # timeout(1) leads a process group of its own: take the program with it.
    for p in "${pids[@]}"; do kill -9 -- "-$p" "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$TMP"/*.out; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done; exit 1; }
command -v rping >/dev/null || { echo "rping is not installed"; exit 77; }

# Our librdmacm, not the system's, must be the one rping loads.
lib=$(ldd "$(command -v rping)" | awk '/librdmacm\.so\.1/ { print $3 }')
case $lib in /usr/lib/* | /lib/* | "") fail "rping would load librdmacm from '$lib'" ;; esac

. "$(dirname "$0")/lib/ports.sh"
# Bounded wait until something listens on TCP port $1.
wait_listen() {
    local end=$((SECONDS + 10))
    until ss -Hltn "sport = :$1" | grep -q .; do
        ((SECONDS < end)) || return 1
        sleep 0.05
    done
}

# run_pair SIZE COUNT [extra rping options...]
run_pair() {
    local size=$1 count=$2
    shift 2
    local port
    port=$(free_port)
    timeout -k 5 60 rping -s -a 127.0.0.1 -p "$port" -S "$size" -v "$@" >"$TMP/server.out" 2>&1 &
    local spid=$!
    pids+=("$spid")
    wait_listen "$port" || fail "rping server (size $size) did not listen on $port"
    timeout -k 5 60 rping -c -a 127.0.0.1 -p "$port" -S "$size" -C "$count" -v -V "$@" \
        >"$TMP/client.out" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    [ "$crc" = 0 ] || fail "rping client (size $size $*) exit status $crc"
    [ "$src" = 0 ] || fail "rping server (size $size $*) exit status $src"
    local got
    got=$(grep -c '^ping data: rdma-ping-' "$TMP/client.out")
    [ "$got" = "$count" ] || fail "client printed $got pings, expected $count (size $size)"
    got=$(grep -c '^server ping data: rdma-ping-' "$TMP/server.out")
    [ "$got" = "$count" ] || fail "server printed $got pings, expected $count (size $size)"
    grep -q 'data mismatch' "$TMP/client.out" && fail "client saw a data mismatch (size $size)"
    echo "ok: rping size $size x $count $*"
}

for size in 23 64 1000 4096 16384 65535; do
    run_pair "$size" 100
done
run_pair 64 20 -q
run_pair 4096 20 -q

# Persistent server: two clients in turn, then the server is stopped.
port=$(free_port)
timeout -k 5 60 rping -s -P -a 127.0.0.1 -p "$port" -S 128 >"$TMP/pserver.out" 2>&1 &
spid=$!
pids+=("$spid")
wait_listen "$port" || fail "persistent rping server did not listen"
for i in 1 2; do
    timeout -k 5 30 rping -c -a 127.0.0.1 -p "$port" -S 128 -C 10 -v -V >"$TMP/pclient.out" 2>&1 ||
        fail "client $i of the persistent server failed"
    [ "$(grep -c '^ping data:' "$TMP/pclient.out")" = 10 ] || fail "client $i: wrong ping count"
done
# ... then three clients served at the same time. Debian 12's rping
# (rdma-core 44) races in -P mode when two connect requests arrive back to
# back: its CM thread can overwrite the pending child id before the main
# thread has taken it (fixed upstream in rdma-core 57, "rping: wait for
# acknowledgement before processing subsequent CONNECT_REQUESTs"). So the
# clients connect one after another, each once the server has answered the
# previous one's first ping, and their sessions overlap.
cpids=()
for i in 1 2 3; do
    timeout -k 5 60 rping -c -a 127.0.0.1 -p "$port" -S 128 -C 400 -v -V >"$TMP/pclient$i.out" 2>&1 &
    cpids+=("$!")
    end=$((SECONDS + 10))
    until grep -q '^ping data: rdma-ping-0:' "$TMP/pclient$i.out"; do
        ((SECONDS < end)) || fail "concurrent client $i never got its first ping back"
        sleep 0.01
    done
done
# Overlap: the first client must still have been running when the last one
# got its first ping back.
kill -0 "${cpids[0]}" 2>/dev/null || echo "note: client 1 finished before client 3 started"
for i in 1 2 3; do
    wait "${cpids[$((i - 1))]}" || fail "concurrent client $i of the persistent server failed"
    [ "$(grep -c '^ping data:' "$TMP/pclient$i.out")" = 400 ] || fail "concurrent client $i: wrong ping count"
done
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
echo "ok: persistent rping server served 2 clients in turn and 3 at once"
echo "ok: all rping runs passed"
