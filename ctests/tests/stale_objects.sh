#!/bin/bash
# harness-timeout: 300
# Stale and foreign object pointers given to libibverbs' control verbs get
# EINVAL and are never read through (ctests/src/stale_objects.c), checked
# again under valgrind, which reports any read of freed memory.
set -u
. "$(dirname "$0")/lib/common.sh"

bin=$CTESTS_BIN/stale_objects
[ -x "$bin" ] || fail "$bin is not built"
timeout -k 5 60 "$bin" </dev/null || fail "stale_objects: exit status $?"

if ! command -v valgrind >/dev/null; then
    echo "valgrind is not installed: the freed-memory check is skipped"
    exit 0
fi
# The provider's progress thread and libibverbs' tables are process-lived:
# leaks are not what this checks, invalid reads are.
timeout -k 5 240 valgrind -q --error-exitcode=99 --leak-check=no \
    "$bin" </dev/null > "$work/vg" 2>&1
rc=$?
cat "$work/vg"
[ $rc = 0 ] || fail "stale_objects under valgrind: exit status $rc"
grep -q 'Invalid read' "$work/vg" && fail "valgrind saw invalid reads"
echo "ok: no invalid reads under valgrind"
