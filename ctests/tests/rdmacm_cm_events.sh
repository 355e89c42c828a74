#!/bin/bash
# harness-timeout: 300
# The rdma_cm conformance cases of ctests/src/cm_events.c: event channels
# (blocking, O_NONBLOCK + poll, acks, migration), wrong-state calls and
# their errno, private data and its length rules with connect, accept and
# reject, REJECTED for a closed port (status 8), UNREACHABLE, ADDR_ERROR,
# DISCONNECTED on both sides with flushed receives, a peer killed with
# SIGKILL, the synchronous (rdma_create_ep) mode, strangers sending garbage
# to a listener's port, a peer repeating MRAs (the connect still times
# out), rdma_disconnect before the CM's TCP connection is up (the REQ never
# leaves), and a listener that runs out of descriptors (no busy loop,
# accepts again afterwards). Each case runs in a process of its own with an alarm;
# this script bounds the whole run too.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/cm_events
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
timeout -k 5 240 "$bin" </dev/null
rc=$?
case $rc in
0) echo "ok: all cm_events cases passed" ;;
124 | 137) echo "FAIL: cm_events timed out" ;;
*) echo "FAIL: cm_events exit status $rc" ;;
esac
exit $rc
