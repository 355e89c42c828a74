#!/bin/bash
# Side-by-side numbers for the data path: perftest over our libraries on the
# loopback device, the kernel's TCP on loopback (sockperf, iperf3), and a
# memcpy loop, all in the same run on the same machine. Reports ratios;
# nothing here asserts a time.
#   bench/run.sh            (after `make`)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH=$repo/build/lib IBV_CONFIG_DIR=$repo/build/etc/libibverbs.d
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null' EXIT
size=${BENCH_SIZE:-65536}
port=18600

wait_listen() {
    for _ in $(seq 1 200); do
        ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

# median COLUMN TOOL ARGS: the median of one column of the result rows of
# three server/client runs (numbers on a shared VM vary from run to run).
median() {
    col=$1; shift
    for _ in 1 2 3; do perf_once "$@"; done | awk -v c="$col" '{ print $c }' | sort -g | sed -n 2p
}

# perf_once TOOL ARGS: one perftest server/client pair; the client's result row.
perf_once() {
    tool=$1; shift
    port=$((port + 1))
    timeout 120 "$tool" -d rsw_lo -x 0 -F -p $port "$@" > "$work/srv" 2>&1 &
    wait_listen $port || { echo "$tool: server did not start" >&2; return 1; }
    timeout 120 "$tool" -d rsw_lo -x 0 -F -p $port "$@" 127.0.0.1 > "$work/cli" 2>&1
    wait
    grep -E '^ *[0-9]+ +[0-9]+ ' "$work/cli" | tail -1
}

echo "== perftest over our libraries (rsw_lo)"
send_lat=$(median 5 ib_send_lat -n 5000 -s 64)
write_lat=$(median 5 ib_write_lat -n 5000 -s 64)
read_lat=$(median 5 ib_read_lat -n 5000 -s 64)
write_bw=$(median 4 ib_write_bw -n 5000 -s "$size")
read_bw=$(median 4 ib_read_bw -n 5000 -s "$size")
send_bw=$(median 4 ib_send_bw -n 5000 -s "$size")
printf '  ib_send_lat  64B typical  %8s us\n' "$send_lat"
printf '  ib_write_lat 64B typical  %8s us\n' "$write_lat"
printf '  ib_read_lat  64B typical  %8s us\n' "$read_lat"
printf '  ib_write_bw  %sB avg      %8s MB/s\n' "$size" "$write_bw"
printf '  ib_read_bw   %sB avg      %8s MB/s\n' "$size" "$read_bw"
printf '  ib_send_bw   %sB avg      %8s MB/s\n' "$size" "$send_bw"

echo "== kernel TCP on loopback"
port=$((port + 1))
sockperf server --tcp -i 127.0.0.1 -p $port > /dev/null 2>&1 &
sp=$!
wait_listen $port
# The median, to compare with perftest's "typical".
tcp_lat=$(sockperf ping-pong --tcp -i 127.0.0.1 -p $port -m 64 -t 3 2>&1 |
    awk '/percentile 50.000/ {print $NF}')
kill $sp 2>/dev/null
port=$((port + 1))
iperf3 -s -1 -p $port > /dev/null 2>&1 &
wait_listen $port
tcp_bw=$(iperf3 -c 127.0.0.1 -p $port -t 3 -l "$size" -J 2>/dev/null |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6))')
printf '  sockperf 64B one-way median %6s us\n' "$tcp_lat"
printf '  iperf3   %sB             %8s MB/s\n' "$size" "$tcp_bw"

echo "== memcpy"
cc -O2 -o "$work/memcpy_bw" "$repo/bench/memcpy_bw.c"
mem_gbs=$("$work/memcpy_bw" "$size")
printf '  memcpy %sB               %8s GB/s\n' "$size" "$mem_gbs"

echo "== ratios"
python3 - "$send_lat" "$tcp_lat" "$write_bw" "$tcp_bw" "$mem_gbs" <<'PY'
import sys
def f(x):
    try: return float(x)
    except ValueError: return float("nan")
send_lat, tcp_lat, write_bw, tcp_bw, mem = map(f, sys.argv[1:])
print(f"  ib_send_lat / sockperf latency : {send_lat / tcp_lat:6.2f}x (lower is better)")
print(f"  ib_write_bw / iperf3 bandwidth : {write_bw / tcp_bw:6.2f}x (higher is better)")
print(f"  ib_write_bw / memcpy bandwidth : {write_bw / (mem * 1000):6.2f}x (1.0 = one copy at memory speed)")
PY
