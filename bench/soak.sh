#!/bin/bash
# make soak: the long reliability run, outside CI. Checksummed RC traffic
# (ctests/src/rc_stress.c) between two processes on rsw_lo: 10^7 messages
# over 1 and over 8 QPs (10^6 with two CPU hogs), then many QPs at
# once (SOAK_QPS, default 2000, each with traffic). Every message's order,
# checksum and bytes are verified; prints one line of figures per run and
# fails on the first error. SOAK_MSGS overrides 10^7.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH=$repo/build/lib IBV_CONFIG_DIR=$repo/build/etc/libibverbs.d
bin=$repo/build/ctests/rc_stress
[ -x "$bin" ] || { echo "build it first: make ctests" >&2; exit 1; }
msgs=${SOAK_MSGS:-10000000}
qps=${SOAK_QPS:-2000}
# Three descriptors per connected QP and process, plus room.
ulimit -n $((qps * 4 + 256)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"
hogs=""
stop_hogs() { for h in $hogs; do kill "$h" 2>/dev/null; done; hogs=""; }
trap stop_hogs EXIT
port=18700

run() { # LABEL ARGS...
    label=$1; shift
    port=$((port + 1))
    "$bin" -s -p $port "$@" > /tmp/soak.srv.$$ 2>&1 &
    srv=$!
    "$bin" -p $port "$@" 127.0.0.1 > /tmp/soak.cli.$$ 2>&1
    crc=$?
    wait $srv; src=$?
    if [ $crc != 0 ] || [ $src != 0 ]; then
        cat /tmp/soak.srv.$$ /tmp/soak.cli.$$
        echo "FAIL $label: client $crc server $src"; exit 1
    fi
    printf '%-34s %s\n' "$label" "$(grep -o '[0-9]* messages of .*' /tmp/soak.cli.$$)"
}

run "1 QP" -q 1 -n "$msgs" -S 64
run "8 QPs" -q 8 -n $((msgs / 8)) -S 64
for _ in 1 2; do sh -c 'while :; do :; done' & hogs="$hogs $!"; done
# A tenth as many under the hogs: with four runnable threads per core the
# rate drops several times, and the point is interleavings, not volume.
run "1 QP, 2 CPU hogs" -q 1 -n $((msgs / 10)) -S 64
run "8 QPs, 2 CPU hogs" -q 8 -n $((msgs / 80)) -S 64
stop_hogs
run "$qps QPs" -q "$qps" -n 500 -S 64 -w 4
rm -f /tmp/soak.srv.$$ /tmp/soak.cli.$$
echo "soak: all runs verified"
