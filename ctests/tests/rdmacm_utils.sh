#!/bin/bash
# harness-timeout: 300
# Debian's other rdma_cm programs over our libraries, on loopback:
#   ucmatose       (asynchronous CM, several connections, sends both ways;
#                   also with -m: the ids migrate to a new event channel)
#   rdma_server /
#   rdma_client    (synchronous CM: rdma_getaddrinfo, rdma_create_ep,
#                   rdma_get_request, rdma_verbs.h helpers)
#   cmtime         (100 connections set up and torn down, QPs on the
#                   per-device default PD, completion queues made by the CM)
# Each program runs under timeout; exit 0 only if all pass.
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
for p in ucmatose rdma_server rdma_client cmtime; do
    command -v "$p" >/dev/null || { echo "$p is not installed"; exit 77; }
done
lib=$(ldd "$(command -v ucmatose)" | awk '/librdmacm\.so\.1/ { print $3 }')
case $lib in /usr/lib/* | /lib/* | "") fail "programs would load librdmacm from '$lib'" ;; esac

. "$(dirname "$0")/lib/ports.sh"
wait_listen() {
    local end=$((SECONDS + 10))
    until ss -Hltn "sport = :$1" | grep -q .; do
        ((SECONDS < end)) || return 1
        sleep 0.05
    done
}
# start NAME CMD... : a server in the background, its pid in $spid.
start() {
    local name=$1
    shift
    timeout -k 5 60 "$@" >"$TMP/$name.out" 2>&1 &
    spid=$!
    pids+=("$spid")
}

# --- ucmatose: its defaults (one connection), 10 connections, and 4
# connections of 20 messages of 256 bytes each way, with and without
# migrating the ids to a new event channel (-m).
for extra in "" "-c 10" "-c 4 -C 20 -S 256" "-c 4 -C 20 -S 256 -m"; do
    port=$(free_port)
    # shellcheck disable=SC2086
    start ucmatose-server ucmatose -p "$port" $extra
    wait_listen "$port" || fail "ucmatose server did not listen"
    # shellcheck disable=SC2086
    timeout -k 5 60 ucmatose -s 127.0.0.1 -p "$port" $extra \
        >"$TMP/ucmatose-client.out" 2>&1 || fail "ucmatose client '$extra' failed"
    wait "$spid" || fail "ucmatose server '$extra' failed"
    grep -q 'return status 0' "$TMP/ucmatose-client.out" || fail "ucmatose client: no success line"
    grep -q 'return status 0' "$TMP/ucmatose-server.out" || fail "ucmatose server: no success line"
    echo "ok: ucmatose '$extra'"
done

# --- rdma_server / rdma_client (synchronous endpoints).
port=$(free_port)
start rdma_server rdma_server -p "$port"
wait_listen "$port" || fail "rdma_server did not listen"
timeout -k 5 30 rdma_client -s 127.0.0.1 -p "$port" >"$TMP/rdma_client.out" 2>&1 ||
    fail "rdma_client failed"
wait "$spid" || fail "rdma_server failed"
grep -q 'rdma_client: end 0' "$TMP/rdma_client.out" || fail "rdma_client: no success line"
grep -q 'rdma_server: end 0' "$TMP/rdma_server.out" || fail "rdma_server: no success line"
echo "ok: rdma_server / rdma_client"

# --- cmtime: the server never exits by itself; stop it once the client is done.
port=$(free_port)
start cmtime-server cmtime -p "$port"
wait_listen "$port" || fail "cmtime server did not listen"
timeout -k 5 120 cmtime -s 127.0.0.1 -p "$port" -c 100 >"$TMP/cmtime-client.out" 2>&1 ||
    fail "cmtime client failed"
grep -q '^disconnect' "$TMP/cmtime-client.out" || fail "cmtime: no timing table"
if grep -Eq 'error|failure' "$TMP/cmtime-client.out"; then
    fail "cmtime client reported errors"
fi
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
echo "ok: cmtime 100 connections"
echo "ok: all rdma_cm utilities passed"
