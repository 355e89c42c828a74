#!/bin/bash
# Tag-matching SRQs (build/ctests/tm_srq, ctests/src/tm_srq.c) on rsw_lo,
# over both of rsw's transports: the same-host path (the default; the
# rendezvous READ between two processes goes through it) and TCP alone
# (RSW_TRANSPORT=tcp). Each run must pass every case; a few rounds of the
# rendezvous cases guard the order of the FIN against the ACK of the
# request it answers.
# harness-timeout: 240
set -u
. "$(dirname "$0")/lib/common.sh"

prog=$CTESTS_BIN/tm_srq
[ -x "$prog" ] || fail "$prog not built (make ctests)"

for transport in default tcp; do
    if [ "$transport" = tcp ]; then t=tcp; else t=${RSW_TRANSPORT:-}; fi
    RSW_TRANSPORT=$t timeout -k 5 60 "$prog" </dev/null >"$work/$transport.out" 2>&1
    rc=$?
    cat "$work/$transport.out"
    [ $rc -eq 0 ] || fail "tm_srq over the $transport transport: exit status $rc"
    expect_in "$work/$transport.out" '^# 8 passed, 0 failed'
    for i in 1 2 3; do
        RSW_TRANSPORT=$t timeout -k 5 60 "$prog" rndv rndv_procs </dev/null >"$work/r.out" 2>&1 \
            || { cat "$work/r.out"; fail "rendezvous round $i over the $transport transport"; }
    done
    echo "ok: tm_srq over the $transport transport"
done
echo "ok: tag-matching SRQs on both transports"
