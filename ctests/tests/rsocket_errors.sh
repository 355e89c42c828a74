#!/bin/bash
# harness-timeout: 300
# The rsocket cases of ctests/src/rsocket_errors.c on loopback: bytes
# delivered end to end through every send and receive call (both ways,
# 1 MiB each), EAGAIN on non-blocking reads and full writes, EINPROGRESS
# and rpoll for a non-blocking connect, `rstream -T a`'s pattern (rpoll never
# -1 and errno untouched by a call that succeeds), ECONNREFUSED, EOF after SHUT_WR,
# EPIPE after the peer closes, EINVAL/EFAULT for bad arguments,
# EBADF/ENOTSOCK for descriptors that are no rsocket, socket options,
# rpoll/rselect over rsockets and pipes, riomap/riowrite, datagram rsockets
# (bytes, sender addresses, truncation, EMSGSIZE) and their wire format,
# rdma-core 44's (dgram_wire: the test plays rdma-core's side with a UDP
# socket and a UD QP of its own). Each case runs in
# a process of its own with an alarm; this script bounds the whole run too.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-$BUILD/lib}
export IBV_CONFIG_DIR=${IBV_CONFIG_DIR:-$BUILD/etc/libibverbs.d}
bin=$CTESTS_BIN/rsocket_errors
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
timeout -k 5 240 "$bin" </dev/null
rc=$?
case $rc in
0) echo "ok: all rsocket_errors cases passed" ;;
124 | 137) echo "FAIL: rsocket_errors timed out" ;;
*) echo "FAIL: rsocket_errors exit status $rc" ;;
esac
exit $rc
