#!/bin/bash
# Debian's pingpong programs for the other queue-pair kinds, between two
# processes over the loopback device: ibv_srq_pingpong (16 QPs on one
# shared receive queue per side), ibv_uc_pingpong (unreliable connected)
# ibv_ud_pingpong (datagrams, with and without a GRH in the AH) and
# ibv_xsrq_pingpong (XRC: send QPs into the peer's XRC SRQ). Each pair must report the transfer; -c
# makes the programs check the payload.
set -u
. "$(dirname "$0")/lib/common.sh"

dev=rsw_lo
host=127.0.0.1
# GID index option; empty: LID-only addressing (no GRH in the AH).
gid="-g 0"

# Extra environment of the server and of the client (VAR=value words).
srv_env="" cli_env=""

# pingpong PROGRAM NAME ARGS...
pingpong() {
    prog=$1 name=$2; shift 2
    port=$(free_port)
    # shellcheck disable=SC2086 # one word per assignment
    env $srv_env timeout 60 "$prog" -d "$dev" $gid -p "$port" "$@" > "$work/$name.srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port"
    # shellcheck disable=SC2086 # one word per assignment
    env $cli_env timeout 60 "$prog" -d "$dev" $gid -p "$port" "$@" "$host" > "$work/$name.cli" 2>&1
    crc=$?
    wait "$srv"; src=$?
    if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
        echo "--- server"; cat "$work/$name.srv"; echo "--- client"; cat "$work/$name.cli"
        fail "$name: client exit $crc, server exit $src"
    fi
    for side in srv cli; do
        if [ "$prog" = ibv_xsrq_pingpong ]; then
            # It reports only that every exchange completed.
            expect_in "$work/$name.$side" '^success$'
        else
            expect_in "$work/$name.$side" '[0-9]+ bytes in [0-9.]+ seconds'
            expect_in "$work/$name.$side" '[0-9]+ iters in [0-9.]+ seconds'
        fi
    done
    echo "ok $name"
}

pingpong ibv_srq_pingpong srq_default
pingpong ibv_srq_pingpong srq_events -e
pingpong ibv_srq_pingpong srq_32qps -q 32 -r 64 -n 2000 -s 256
pingpong ibv_srq_pingpong srq_big -s 65536 -n 100
pingpong ibv_uc_pingpong uc_default -c
pingpong ibv_uc_pingpong uc_events -e -c
pingpong ibv_uc_pingpong uc_big -s 65536 -n 200 -c
pingpong ibv_ud_pingpong ud_default -c
pingpong ibv_ud_pingpong ud_events -e -c
pingpong ibv_ud_pingpong ud_mtu -s 4096 -c -n 300
gid="" pingpong ibv_ud_pingpong ud_no_grh -c
gid="" pingpong ibv_uc_pingpong uc_no_grh -c
pingpong ibv_xsrq_pingpong xsrq_default
pingpong ibv_xsrq_pingpong xsrq_events -e -n 50
pingpong ibv_xsrq_pingpong xsrq_big -s 65536 -n 100
pingpong ibv_srq_pingpong srq_64qps -q 64 -r 128 -n 1000
# The same-host doorbells between a process that fences for its peers
# (membarrier) and one that cannot (RSW_NO_MEMBARRIER): each side waits
# for completion events, so a lost doorbell hangs the run.
srv_env=RSW_NO_MEMBARRIER=1 pingpong ibv_srq_pingpong srq_events_mixed_a -e -n 2000
cli_env=RSW_NO_MEMBARRIER=1 pingpong ibv_srq_pingpong srq_events_mixed_b -e -n 2000
srv_env=RSW_NO_MEMBARRIER=1 pingpong ibv_uc_pingpong uc_events_mixed -e -c -n 2000
