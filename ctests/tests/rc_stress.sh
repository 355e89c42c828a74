#!/bin/bash
# harness-timeout: 300
# Checksummed RC traffic between two processes over rsw_lo
# (ctests/src/rc_stress.c): SENDs and RDMA WRITEs with immediate, every
# message's order, checksum and payload bytes verified, totals compared;
# over 1 and 8 QPs, then again with two CPU hogs competing for the two
# cores. Nothing may be lost, duplicated, reordered or corrupted.
set -u
. "$(dirname "$0")/lib/common.sh"

bin=$CTESTS_BIN/rc_stress
[ -x "$bin" ] || fail "$bin is not built"

hogs=""
stop_hogs() { for h in $hogs; do kill "$h" 2>/dev/null; done; hogs=""; }
cleanup_hooks="stop_hogs"

run() { # LABEL ARGS...
    label=$1; shift
    port=$(free_port)
    timeout -k 5 120 "$bin" -s -p "$port" "$@" > "$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port"
    timeout -k 5 120 "$bin" -p "$port" "$@" 127.0.0.1 > "$work/cli" 2>&1
    crc=$?
    wait "$srv"; src=$?
    if [ $crc != 0 ] || [ $src != 0 ]; then
        echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
        fail "$label: client $crc server $src"
    fi
    expect_in "$work/srv" ' 0 errors; client sent '
    expect_in "$work/cli" 'server verified [0-9]+ with 0 errors'
    echo "ok $label: $(grep -o '[0-9]* messages of .*msg/s)' "$work/cli")"
}

run "1 QP" -q 1 -n 100000 -S 256
run "8 QPs" -q 8 -n 20000 -S 1024
# A deep window: posts made while many await ACKs may be held for the
# program's next ones (TCP) and go in one sendmsg.
run "1 QP, 128 deep" -q 1 -n 200000 -S 64 -w 128
# Each connection starts over TCP and moves to the same-host path when
# the peer's offer arrives: a WRITE_WITH_IMM that went over TCP must
# complete before a SEND placed directly behind it. Repeated, since the
# offer's moment varies.
for i in 1 2 3 4 5 6 7 8 9 10; do
    run "8 QPs, 64 KiB ($i)" -q 8 -n 300 -S 65536 -w 4
done

for _ in 1 2; do
    sh -c 'while :; do :; done' &
    hogs="$hogs $!"
done
run "1 QP under 2 CPU hogs" -q 1 -n 50000 -S 256
run "8 QPs under 2 CPU hogs" -q 8 -n 10000 -S 1024
stop_hogs
