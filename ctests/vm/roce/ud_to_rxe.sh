#!/bin/bash
# rxe accepts a packet built by rsw's RoCEv2 codec (providers/rsw/src/roce/
# tests/rxe_live.rs). In the VM test bed, with the rsw unit-test binary shared:
#
#   cargo test --release -p rsw --lib --no-run     # prints the binary
#   ctests/vm/run-in-vm.sh -r rxe -s "$PWD/ctests/vm/roce:/roce" -s "$PWD/target/release/deps" \
#       -f ctests/vm/roce/ud_to_rxe.sh "$PWD/target/release/deps/rsw-<hash>"
#
# rxeC sits on vC (10.0.8.1) in the initial namespace, where Debian's
# ibv_ud_pingpong serves on it; the test runs in namespace roce on vD
# (10.0.8.2), where UDP port 4791 is free. It first sends a copy with a
# wrong ICRC, which rxe must drop, then the right one, which the server
# must receive and answer: rxe counts a packet in rcvd_pkts only once its
# ICRC matched, so the count must grow by exactly 1.
set -u
BIN=$1
SIZE=64
. /roce/rxe_link.sh
CNT=/sys/class/infiniband/rxeC/ports/1/hw_counters/rcvd_pkts
BEFORE=$(cat $CNT)
timeout 60 ibv_ud_pingpong -d rxeC -g "$G" -s $SIZE -n 1 >/job/srv.log 2>&1 &
SRV=$!
for _ in $(seq 100); do ss -ltn | grep -q ':18515' && break; sleep 0.1; done
ip netns exec roce env RSW_ROCE_LOCAL=10.0.8.2 RSW_ROCE_PEER=10.0.8.1 \
	RSW_ROCE_SIZE=$SIZE RSW_ROCE_BAD_FIRST=1 timeout 60 "$BIN" --ignored --exact \
	roce::rxe_live::rxe_accepts_our_ud_send --nocapture
T=$?
wait $SRV
S=$?
echo "--- server"
cat /job/srv.log
RCVD=$(($(cat $CNT) - BEFORE))
echo "RESULT test=$T server=$S rcvd_pkts=$RCVD"
[ "$T" = 0 ] && [ "$S" = 0 ] && [ "$RCVD" = 1 ]
