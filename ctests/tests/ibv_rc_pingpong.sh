#!/bin/bash
# Debian's ibv_rc_pingpong between two processes over the loopback device:
# default options, completion events, payload check, the new post-send API,
# timestamps, and message sizes from 1 byte to 1 MiB.
set -u
. "$(dirname "$0")/lib/common.sh"

# pingpong NAME ARGS...: one server/client pair; both must report the transfer.
pingpong() {
    name=$1; shift
    port=$(free_port)
    timeout 60 ibv_rc_pingpong -d rsw_lo -g 0 -p "$port" "$@" > "$work/$name.srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port"
    timeout 60 ibv_rc_pingpong -d rsw_lo -g 0 -p "$port" "$@" 127.0.0.1 > "$work/$name.cli" 2>&1
    crc=$?
    wait "$srv"; src=$?
    if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
        echo "--- server"; cat "$work/$name.srv"; echo "--- client"; cat "$work/$name.cli"
        fail "$name: client exit $crc, server exit $src"
    fi
    for side in srv cli; do
        expect_in "$work/$name.$side" '[0-9]+ bytes in [0-9.]+ seconds'
        expect_in "$work/$name.$side" '[0-9]+ iters in [0-9.]+ seconds'
    done
    echo "ok $name"
}

pingpong default
pingpong events -e
pingpong check -c
pingpong newapi -N
pingpong timestamps -t
pingpong events_check_newapi -e -c -N
pingpong size1 -s 1 -c
pingpong size1M -s 1048576 -n 50 -c
pingpong many -n 10000 -s 64
