#!/bin/bash
# harness-timeout: 120
# ctests/src/dgram_peer.c on loopback over our librdmacm: datagram
# rsockets, 200 datagrams of 6 to 1000 bytes, every byte and the sender
# addresses checked by both ends (the program the VM cases kcm/dgram-*
# run with Debian's librdmacm on one end).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/dgram_peer
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
. "$(dirname "$0")/lib/ports.sh"
TMP=$(mktemp -d)
spid=
cleanup() {
    [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$TMP"/*.out; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }

port=$(free_port)
timeout -k 5 100 "$bin" server 127.0.0.1 "$port" >"$TMP/server.out" 2>&1 &
spid=$!
end=$((SECONDS + 10))
until ss -Hlun "sport = :$port" | grep -q .; do
    kill -0 "$spid" 2>/dev/null || fail "server exited before binding"
    ((SECONDS < end)) || fail "server did not bind in 10 s"
    sleep 0.05 # polling a condition with a bound, not synchronising on time
done
timeout -k 5 60 "$bin" client 127.0.0.1 "$port" 200 >"$TMP/client.out" 2>&1 ||
    fail "client exit status $?"
# The server exits a second after the client's bye.
wait "$spid"
src=$?
spid=
((src == 0)) || fail "server exit status $src"
grep -q '^dgram_peer client: 200 datagrams, 75875 bytes echoed and verified' "$TMP/client.out" ||
    fail "client: no result line"
grep -Eq '^dgram_peer server: 200 datagrams, 75875 bytes verified from 127\.0\.0\.1 port [1-9]' \
    "$TMP/server.out" || fail "server: no result line"
cat "$TMP/client.out" "$TMP/server.out"
echo "ok: 200 datagrams verified both ways"
