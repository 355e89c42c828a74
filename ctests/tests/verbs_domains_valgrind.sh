#!/bin/bash
# harness-timeout: 300
# The parent-domain allocator cases of ctests/src/verbs_domains.c under
# valgrind: the rings rsw keeps in the allocator's buffers are written and
# read within the bounds it was asked for, and never after it freed them
# (destroy, resize, a failed creation).
set -u
. "$(dirname "$0")/lib/common.sh"

bin=$CTESTS_BIN/verbs_domains
[ -x "$bin" ] || fail "$bin is not built"
if ! command -v valgrind >/dev/null; then
    echo "valgrind is not installed: the check is skipped"
    exit 0
fi
# Each case runs in a forked child, which valgrind follows; a child with an
# error exits 99 and its case is reported failed. Leaks are not checked:
# the provider's progress thread and tables are process-lived. Nor are
# uninitialised values: the rings hold Rust structs whose padding bytes
# are undefined by design, which the test's scan of the buffers reads.
timeout -k 5 240 valgrind -q --error-exitcode=99 --leak-check=no \
    --undef-value-errors=no --suppressions="$here/lib/rsw.supp" \
    "$bin" allocators_hold_the_rings receive_rings_from_the_allocator \
    use_default_falls_back null_fails_with_enomem </dev/null > "$work/vg" 2>&1
rc=$?
cat "$work/vg"
[ $rc = 0 ] || fail "verbs_domains under valgrind: exit status $rc"
grep -Eq '^==[0-9]+== [A-Z]' "$work/vg" && fail "valgrind reported errors"
grep -c '^ok ' "$work/vg" | grep -qx 4 || fail "not all 4 cases passed"
echo "ok: the allocator cases pass under valgrind"
