#!/bin/bash
# harness-timeout: 240
# qperf (Debian's) over our libraries on the loopback device: the RC, UC and
# UD latency and bandwidth tests each run for a second and must print their
# result. Numbers are not judged here.
set -u
. "$(dirname "$0")/lib/common.sh"
command -v qperf >/dev/null || { echo "qperf is not installed"; exit 77; }

port=$(free_port)
qperf -lp "$port" > "$work/server" 2>&1 &
bg_pids="$bg_pids $!"
wait_listen "$port"

for t in rc_lat rc_bw rc_rdma_write_lat rc_rdma_write_bw rc_rdma_read_lat \
         uc_lat uc_bw uc_rdma_write_lat uc_rdma_write_bw ud_lat ud_bw; do
    timeout 30 qperf -lp "$port" -t 1 -i rsw_lo:1 -ri rsw_lo:1 127.0.0.1 "$t" > "$work/$t" 2>&1
    rc=$?
    if [ $rc != 0 ] || ! grep -Eq '(latency|bw) += +[0-9.]+ ' "$work/$t"; then
        echo "--- $t (exit $rc)"; cat "$work/$t"; echo "--- server"; cat "$work/server"
        fail "qperf $t"
    fi
    echo "ok $t: $(grep -Eo '(latency|bw) += +[0-9.]+ [a-zA-Z/]+' "$work/$t" | tr -s ' ' | paste -sd, -)"
done
