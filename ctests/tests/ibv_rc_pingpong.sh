#!/bin/bash
# Debian's ibv_rc_pingpong between two processes over the loopback device:
# default options, completion events, payload check, the new post-send API,
# timestamps, and message sizes from 1 byte to 1 MiB.
set -u
. "$(dirname "$0")/lib/common.sh"

dev=rsw_lo
host=127.0.0.1
gidx=0

# pingpong NAME ARGS...: one server/client pair on $dev (GID index $gidx;
# 0 is the first IPv4 address), the client reaching the server at $host; both must
# report the transfer.
pingpong() {
    name=$1; shift
    port=$(free_port)
    timeout 60 ibv_rc_pingpong -d "$dev" -g "$gidx" -p "$port" "$@" > "$work/$name.srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port"
    timeout 60 ibv_rc_pingpong -d "$dev" -g "$gidx" -p "$port" "$@" "$host" > "$work/$name.cli" 2>&1
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
# On-demand paging: explicit (-o), implicit (-O), with prefetch (-P).
pingpong odp -o -c
pingpong odp_implicit_prefetch -O -P -c

# GID index 1 on loopback is ::1: the QPs talk over IPv6 (the out-of-band
# exchange stays on 127.0.0.1).
gidx=1
pingpong ipv6_gid -c -n 200
gidx=0
# And over the first non-loopback interface with an IPv4 address, when the
# machine has one: two processes on one real interface.
read -r ifname addr < <(ip -4 -o addr show | awk '$2 != "lo" { split($4, a, "/"); print $2, a[1]; exit }')
if [ -n "${ifname:-}" ]; then
    dev=rsw_$ifname host=$addr
    pingpong "iface_$ifname" -c -n 500
    pingpong "iface_${ifname}_big" -c -s 262144 -n 50
else
    echo "no non-loopback IPv4 interface: skipped the interface run"
fi
