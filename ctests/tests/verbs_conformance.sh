#!/bin/bash
# harness-timeout: 600
# The verbs conformance programs (ctests/src/verbs_*.c, built by
# `make ctests-bin` into $CTESTS_BIN) over our libibverbs and the rsw
# provider. Each program runs under `timeout 60` and prints one
# "ok <case>" / "FAIL <case> (...)" line per case. The test fails when any
# program fails, times out, or is missing.
set -u
. "$(dirname "$0")/lib/common.sh"

# The programs this test requires; any other verbs_* program found is run too.
required="verbs_basic verbs_qp_state verbs_ops verbs_errors verbs_events verbs_ex verbs_2proc verbs_srq verbs_uc verbs_ud verbs_limits verbs_xrc verbs_xrc_procs verbs_mr verbs_domains verbs_handles"

programs=$required
for f in "$CTESTS_BIN"/verbs_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    name=$(basename "$f")
    case " $programs " in *" $name "*) ;; *) programs="$programs $name" ;; esac
done

failed=""
for name in $programs; do
    bin=$CTESTS_BIN/$name
    if [ ! -x "$bin" ]; then
        echo "MISSING $name ($bin not built)"
        failed="$failed $name"
        continue
    fi
    echo "=== $name"
    timeout -k 5 60 "$bin" </dev/null
    rc=$?
    case $rc in
    0) ;;
    124 | 137) echo "FAIL $name: timed out after 60 s"; failed="$failed $name" ;;
    *) echo "FAIL $name: exit status $rc"; failed="$failed $name" ;;
    esac
done

[ -z "$failed" ] || fail "failed:$failed"
echo "ok: all verbs conformance programs passed"
