#!/bin/bash
# harness-timeout: 300
# Fault injection (RSW_FAULTS) against unmodified programs: our sum
# client/server (ctests/src/sum_*.c), Debian's rping, ibv_rc_pingpong,
# ibv_devinfo and ibv_asyncwatch. Each fault must reach the application as
# the exact completion status or event real hardware gives, in the
# program's own words. Then rsw-stat reads a running rping server's
# counters, which must match the traffic exactly.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
# Exact counts need every request to reach the peer's responder.
export RSW_TRANSPORT=tcp
STAT=$BUILD/bin/rsw-stat
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
for p in "$CTESTS_BIN/sum_server" "$CTESTS_BIN/sum_client" "$STAT"; do
    [ -x "$p" ] || fail "$p is not built"
done
for p in rping ibv_rc_pingpong ibv_devinfo ibv_asyncwatch; do
    command -v $p >/dev/null || { echo "$p is not installed"; exit 77; }
done

. "$(dirname "$0")/lib/ports.sh"
wait_listen() {
    local end=$((SECONDS + 10))
    until ss -Hltn "sport = :$1" | grep -q .; do
        ((SECONDS < end)) || return 1
        sleep 0.05   # polling a condition with a bound
    done
}
# expect FILE LINE: FILE has exactly this line.
expect() { grep -Fxq -- "$2" "$1" || fail "'$2' not in $1"; }

# sum_case CLIENT_FAULTS WANT_CLIENT_LINE [WANT_SERVER_LINE]: one sum run
# with faults in the client; the client must fail with exactly that line
# and the server say exactly that (a server left waiting is stopped).
sum_case() {
    local spec=$1 want_c=$2 want_s=${3:-} port spid rc
    port=$(free_port)
    timeout -k 5 30 "$CTESTS_BIN/sum_server" "$port" >"$TMP/server.out" 2>&1 &
    spid=$!
    pids+=("$spid")
    wait_listen "$port" || fail "sum_server did not listen on $port"
    RSW_FAULTS=$spec timeout -k 5 30 "$CTESTS_BIN/sum_client" 127.0.0.1 1 2 "$port" \
        >"$TMP/client.out" 2>"$TMP/client.err.out"
    rc=$?
    if [ "$want_c" = "1 + 2 = 3" ]; then
        ((rc == 0)) || fail "[$spec] sum_client failed ($rc)"
        expect "$TMP/client.out" "$want_c"
    else
        ((rc == 1)) || fail "[$spec] sum_client exited $rc, not 1"
        expect "$TMP/client.err.out" "$want_c"
    fi
    if [ -n "$want_s" ]; then
        wait "$spid"
        expect "$TMP/server.out" "$want_s"
    else
        kill -- "-$spid" "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
    fi
    echo "ok sum [$spec]: $want_c${want_s:+ / $want_s}"
}

# The sum client writes val1 (wr 1, unsignaled WRITE), then SENDs val2
# (wr 2); its rnr_retry is 0 and retry_count 7.
sum_case 'qp=*:fail=REM_ACCESS_ERR' \
    'sum_client: wr 1 completed with remote access error' \
    'sum_server: completion status Work Request Flushed Error'
sum_case 'qp=*:fail=REM_OP_ERR:after=1' \
    'sum_client: wr 2 completed with remote operation error' \
    'sum_server: completion status local protection error'
sum_case 'qp=*:fail=REM_INV_REQ_ERR:after=1' \
    'sum_client: wr 2 completed with remote invalid request error' \
    'sum_server: completion status Work Request Flushed Error'
sum_case 'qp=*:fail=LOC_PROT_ERR' \
    'sum_client: wr 1 completed with local protection error'
sum_case 'qp=*:rnr' \
    'sum_client: wr 2 completed with RNR retry counter exceeded'
sum_case 'qp=*:fail=RETRY_EXC_ERR' \
    'sum_client: wr 1 completed with transport retry counter exceeded'
sum_case 'conn:kill' \
    'sum_client: wr 1 completed with transport retry counter exceeded'
sum_case 'port=rsw_lo:down@0s' \
    'sum_client: wr 1 completed with transport retry counter exceeded'
# Faults that only slow things down: the sum still comes out right.
start=$(date +%s%N)
sum_case 'seed=7;qp=*:delay=300ms' '1 + 2 = 3' 'sum_server: 1 + 2 = 3'
(( ($(date +%s%N) - start) >= 300000000 )) || fail "a 300 ms delay took less"
# Deterministic: with a probability, the same seed strikes the same
# requests every run (4 runs of a 50% fault on each of the 2 requests).
outcomes=()
for i in 1 2 3 4; do
    port=$(free_port)
    timeout -k 5 30 "$CTESTS_BIN/sum_server" "$port" >"$TMP/server.out" 2>&1 &
    spid=$!
    pids+=("$spid")
    wait_listen "$port" || fail "sum_server did not listen on $port"
    RSW_FAULTS='seed=11;qp=*:fail=REM_OP_ERR:p=0.5' timeout -k 5 30 \
        "$CTESTS_BIN/sum_client" 127.0.0.1 1 2 "$port" >"$TMP/client.out" 2>&1
    outcomes+=("$? $(tr '\n' ' ' <"$TMP/client.out")")
    kill -- "-$spid" "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
done
for o in "${outcomes[@]}"; do
    [ "$o" = "${outcomes[0]}" ] || fail "runs differ: '${outcomes[0]}' vs '$o'"
done
echo "ok deterministic: 4 runs, each: ${outcomes[0]}"

# The same rules from a file, with comments: an injected lost request.
printf '%s\n' '# the first request is lost' 'seed=3' 'qp=*:fail=RETRY_EXC_ERR   # no answer comes' \
    >"$TMP/faults.conf"
RSW_FAULTS_FILE=$TMP/faults.conf sum_case '' \
    'sum_client: wr 1 completed with transport retry counter exceeded'
# A bad spec: said on stderr, and no device opens.
RSW_FAULTS='qp=*:fail=NOPE' timeout 10 "$CTESTS_BIN/sum_client" 127.0.0.1 1 2 1 \
    >"$TMP/bad.out" 2>&1 && fail "sum_client ran with a bad RSW_FAULTS"
grep -q '^rsw: RSW_FAULTS: in `qp=\*:fail=NOPE`: unknown status `NOPE`' "$TMP/bad.out" ||
    fail "no clear error for a bad spec"
echo "ok bad spec: refused with a clear error"

# Connection manager faults (librdmacm): each step fails with the event
# and status rdma-core delivers.
for c in 'cm:addr=timeout|RDMA_CM_EVENT_ADDR_ERROR (status -110), wanted RDMA_CM_EVENT_ADDR_RESOLVED' \
    'cm:route=unreachable|RDMA_CM_EVENT_ROUTE_ERROR (status -113), wanted RDMA_CM_EVENT_ROUTE_RESOLVED' \
    'cm:connect=reject|RDMA_CM_EVENT_REJECTED (status 28), wanted RDMA_CM_EVENT_ESTABLISHED' \
    'cm:connect=noservice|RDMA_CM_EVENT_REJECTED (status 8), wanted RDMA_CM_EVENT_ESTABLISHED' \
    'cm:connect=timeout|RDMA_CM_EVENT_UNREACHABLE (status -110), wanted RDMA_CM_EVENT_ESTABLISHED' \
    'cm:connect=error|RDMA_CM_EVENT_CONNECT_ERROR (status -104), wanted RDMA_CM_EVENT_ESTABLISHED'; do
    sum_case "${c%%|*}" "sum_client: got ${c#*|}"
done
# The second connect is the one rejected; the first sum goes through.
sum_case 'cm:connect=reject:after=1' '1 + 2 = 3' 'sum_server: 1 + 2 = 3'
RSW_FAULTS='cm:connect=maybe' timeout 10 "$CTESTS_BIN/sum_client" 127.0.0.1 1 2 1 \
    >"$TMP/badcm.out" 2>&1 && fail "sum_client ran with a bad cm: rule"
grep -Fxq 'sum_client: rdma_resolve_addr failed: Invalid argument' "$TMP/badcm.out" &&
    grep -q '^librdmacm: RSW_FAULTS: in `cm:connect=maybe`: unknown CM fault' "$TMP/badcm.out" ||
    fail "no clear error for a bad cm: rule"
echo "ok bad cm: rule: refused with a clear error"

# rping: the server's RDMA READ of the client's buffer is refused; the
# client's connection is cut under its second request.
rping_case() {
    local side=$1 spec=$2 want=$3 port spid sf= cf=
    port=$(free_port)
    if [ "$side" = server ]; then sf=$spec; else cf=$spec; fi
    RSW_FAULTS=$sf timeout -k 5 30 rping -s -a 127.0.0.1 -p "$port" -S 100 -C 3 -v \
        >"$TMP/rs.out" 2>&1 &
    spid=$!
    pids+=("$spid")
    wait_listen "$port" || fail "rping -s did not listen"
    RSW_FAULTS=$cf timeout -k 5 30 rping -c -a 127.0.0.1 -p "$port" -S 100 -C 3 -v \
        >"$TMP/rc.out" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    local out=$TMP/rc.out good=$src other=server other_out=$TMP/rs.out
    [ "$side" = server ] && { out=$TMP/rs.out; good=$crc; other=client; other_out=$TMP/rc.out; }
    expect "$out" "$want"
    expect "$out" "rping $side failed: -1"
    ((good == 0)) || fail "[$side $spec] the other side failed too"
    # The failing side disconnects: its peer gets RDMA_CM_EVENT_DISCONNECTED.
    expect "$other_out" "$other DISCONNECT EVENT..."
    echo "ok rping [$side: $spec]: $want"
}
rping_case server 'qp=*:fail=REM_ACCESS_ERR' 'cq completion failed status 10'
port=$(free_port)
RSW_FAULTS='cm:connect=reject' timeout -k 5 30 rping -c -a 127.0.0.1 -p "$port" -C 1 \
    >"$TMP/rcm.out" 2>&1 && fail "rping connected through an injected reject"
expect "$TMP/rcm.out" "cma event RDMA_CM_EVENT_REJECTED, error 28"
echo "ok rping [client: cm:connect=reject]: cma event RDMA_CM_EVENT_REJECTED, error 28"
rping_case client 'conn:kill:after=1' 'cq completion failed status 12'

# A port taken down and brought back: the events and the port state.
RSW_FAULTS='port=rsw_lo:down@0s' ibv_devinfo -d rsw_lo >"$TMP/devinfo.out" 2>&1
grep -Eq 'state:[[:space:]]+PORT_DOWN \(1\)' "$TMP/devinfo.out" || fail "port not DOWN"
RSW_FAULTS='port=rsw_lo:down@100ms,up@300ms' timeout 2 ibv_asyncwatch -d rsw_lo \
    >"$TMP/watch.out" 2>&1
diff <(grep event_type "$TMP/watch.out") - <<'EOF' || fail "port events"
  event_type IBV_EVENT_PORT_ERR (10), port 1
  event_type IBV_EVENT_PORT_ACTIVE (9), port 1
EOF
echo "ok port: PORT_DOWN in ibv_devinfo; PORT_ERR then PORT_ACTIVE"

# A CQ overrun: ibv_rc_pingpong's server polls an overrun CQ.
port=$(free_port)
RSW_FAULTS='cq:overrun:after=1' timeout -k 5 20 ibv_rc_pingpong -d rsw_lo -g 0 -p "$port" -n 5 \
    >"$TMP/pps.out" 2>&1 &
spid=$!
pids+=("$spid")
wait_listen "$port" || fail "ibv_rc_pingpong did not listen"
timeout -k 5 20 ibv_rc_pingpong -d rsw_lo -g 0 -p "$port" -n 5 127.0.0.1 >"$TMP/ppc.out" 2>&1 &
pids+=("$!")
wait "$spid"
expect "$TMP/pps.out" "poll CQ failed -1"
echo "ok cq overrun: ibv_rc_pingpong's poll fails"

# Counters: a persistent rping server, read with rsw-stat between and
# during clients. Per iteration the server SENDs 2 x 16 bytes, READs and
# WRITEs -S bytes (a READ request carries no payload); the client SENDs
# 2 x 16 bytes.
port=$(free_port)
timeout -k 5 60 rping -s -P -a 127.0.0.1 -p "$port" -S 100 >"$TMP/rp.out" 2>&1 &
tpid=$!
pids+=("$tpid")
wait_listen "$port" || fail "rping -P did not listen"
spid=$(pgrep -P "$tpid") || fail "no rping under timeout"
timeout -k 5 30 rping -c -a 127.0.0.1 -p "$port" -S 100 -C 5 -v >"$TMP/c1.out" 2>&1 ||
    fail "rping client failed"
"$STAT" "$spid" >"$TMP/stat1.out" || fail "rsw-stat $spid failed"
dev() { sed -n "/^device rsw_lo\$/,/^[^ ]/p" "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
check() {
    local got
    got=$(dev "$1" "$2")
    [ "$got" = "$3" ] || fail "$2 is '$got', not $3 ($1)"
}
expect "$TMP/stat1.out" "pid $spid"
check "$TMP/stat1.out" sent_pkts 20
check "$TMP/stat1.out" sent_bytes 660
check "$TMP/stat1.out" rcvd_pkts 10
check "$TMP/stat1.out" rcvd_bytes 160
check "$TMP/stat1.out" req_cqe_error 0
check "$TMP/stat1.out" faults_injected 0
echo "ok rsw-stat: 5 rping iterations counted exactly"
# A client that keeps going: its QP is listed live on the server.
timeout -k 5 30 rping -c -a 127.0.0.1 -p "$port" -S 100 -C 0 >"$TMP/c2.out" 2>&1 &
cpid=$!
pids+=("$cpid")
# The live QP's counts grow while the client runs.
live_sent() {
    "$STAT" "$spid" >"$TMP/stat2.out" || return 1
    grep -Eq '^qp 0x[0-9a-f]+ device rsw_lo type RC state RTS$' "$TMP/stat2.out" || return 1
    sed -n '/^qp /,$p' "$TMP/stat2.out" | awk '$1 == "sent_pkts" { print $2; exit }'
}
end=$((SECONDS + 10))
until n=$(live_sent) && ((n > 0)); do
    ((SECONDS < end)) || fail "no live RC QP sending in rsw-stat"
    sleep 0.05   # polling a condition with a bound
done
until m=$(live_sent) && ((m > n)); do
    ((SECONDS < end)) || fail "the live QP's sent_pkts stays at $n"
    sleep 0.05   # polling a condition with a bound
done
kill -- "-$cpid" "$cpid" 2>/dev/null
"$STAT" 1 >/dev/null 2>&1 && fail "rsw-stat answered for pid 1"
"$STAT" nope >/dev/null 2>&1
(($? == 2)) || fail "rsw-stat took 'nope' as a pid"
"$STAT" | grep -qx "pid $spid" || fail "rsw-stat without a pid does not list $spid"
echo "ok rsw-stat: a live QP listed, bad pids refused"
echo "ok: faults"
