#!/bin/bash
# harness-timeout: 120
# The sum client/server (ctests/src/sum_server.c, sum_client.c): the
# rdma_cm flow of the vendor reference's example. The server hands out its
# buffer's address and rkey as accept private data; the client RDMA-writes
# one number there, SENDs the other and checks the sum the server returns.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
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
for p in sum_server sum_client; do
    [ -x "$CTESTS_BIN/$p" ] || fail "$CTESTS_BIN/$p is not built"
done

. "$(dirname "$0")/lib/ports.sh"
wait_listen() {
    local end=$((SECONDS + 10))
    until ss -Hltn "sport = :$1" | grep -q .; do
        ((SECONDS < end)) || return 1
        sleep 0.05
    done
}

# sum A B: one server, one client, the client checks A + B (mod 2^32).
sum() {
    local a=$1 b=$2 port
    port=$(free_port)
    timeout -k 5 60 "$CTESTS_BIN/sum_server" "$port" >"$TMP/server.out" 2>&1 &
    local spid=$!
    pids+=("$spid")
    wait_listen "$port" || fail "sum_server did not listen on $port"
    timeout -k 5 60 "$CTESTS_BIN/sum_client" 127.0.0.1 "$a" "$b" "$port" >"$TMP/client.out" 2>&1 ||
        fail "sum_client $a $b failed"
    wait "$spid" || fail "sum_server failed"
    local want=$(((a + b) & 0xffffffff))
    grep -q "^$a + $b = $want\$" "$TMP/client.out" || fail "client output: $(cat "$TMP/client.out")"
    grep -q "^sum_server: $a + $b = $want\$" "$TMP/server.out" || fail "server did not see $a + $b"
    echo "ok: $a + $b = $want"
}

sum 1 2
sum 1234567 7654321
sum 4000000000 500000000
echo "ok: sum client/server"
