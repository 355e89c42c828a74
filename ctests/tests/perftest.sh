#!/bin/bash
# harness-timeout: 300
# perftest (Debian's ib_*_lat / ib_*_bw) over our libraries on the loopback
# device: every RC test runs to completion on both sides and prints its
# result row; a few also connect through librdmacm (-R). Numbers are not
# judged here (bench/run.sh reports them).
set -u
. "$(dirname "$0")/lib/common.sh"
command -v ib_send_lat >/dev/null || { echo "perftest is not installed"; exit 77; }

# perf NAME TOOL ARGS...: server + client; both exit 0 and print a result row.
perf() {
    name=$1 tool=$2; shift 2
    port=$(free_port)
    timeout 90 "$tool" -d rsw_lo -x 0 -F -p "$port" "$@" > "$work/$name.srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port"
    timeout 90 "$tool" -d rsw_lo -x 0 -F -p "$port" "$@" 127.0.0.1 > "$work/$name.cli" 2>&1
    crc=$?
    wait "$srv"; src=$?
    if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
        echo "--- server"; tail -20 "$work/$name.srv"; echo "--- client"; tail -20 "$work/$name.cli"
        fail "$name: client exit $crc, server exit $src"
    fi
    # The result row: bytes, iterations, then numbers. On a loaded machine
    # perftest may fail to calibrate its clock ("Correlation coefficient
    # r^2 ... < 0.9") and print inf for every time; the run itself
    # completed (exit 0 on both sides), which is what is checked then.
    if grep -q '^Correlation coefficient r^2' "$work/$name.cli"; then
        expect_in "$work/$name.cli" '^ *[0-9]+ +[0-9]+ +(inf|[0-9.]+)'
    else
        expect_in "$work/$name.cli" '^ *[0-9]+ +[0-9]+ +[0-9.]+'
    fi
    echo "ok $name"
}

perf send_lat ib_send_lat -n 500
perf write_lat ib_write_lat -n 200
perf read_lat ib_read_lat -n 500
perf atomic_lat ib_atomic_lat -n 500
perf send_bw ib_send_bw -n 500
perf write_bw ib_write_bw -n 500
perf read_bw ib_read_bw -n 500
perf atomic_bw ib_atomic_bw -n 500
perf send_bw_sizes ib_send_bw -a -n 50
perf write_bw_inline ib_write_bw -s 64 -I 64 -n 500
perf send_lat_cm ib_send_lat -R -n 500
perf write_bw_cm ib_write_bw -R -n 500
# The other transports: UD and UC, and RC receiving through an SRQ.
perf ud_send_lat ib_send_lat -c UD -n 500
perf ud_send_bw ib_send_bw -c UD -n 500
perf ud_send_bw_sizes ib_send_bw -c UD -a -n 50
perf uc_send_lat ib_send_lat -c UC -n 500
perf uc_send_bw ib_send_bw -c UC -n 500
perf uc_write_lat ib_write_lat -c UC -n 200
perf uc_write_bw ib_write_bw -c UC -n 500
perf srq_send_bw ib_send_bw --use-srq -n 500
perf srq_send_lat ib_send_lat --use-srq -n 500
# Multicast (-g): perftest's default group is IPv6 (ff01::/16), so the
# GID is the IPv6 one, ::1 (index 1).
perf ud_mcast_send_bw ib_send_bw -c UD -g -n 500 -x 1
perf ud_mcast_send_lat ib_send_lat -c UD -g -n 500 -x 1
perf odp_write_bw ib_write_bw --odp -n 500
