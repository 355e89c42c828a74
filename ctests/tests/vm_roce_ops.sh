#!/bin/bash
# harness-timeout: 300
# Issue 29: rsw's UC and RC atomics in RoCEv2 mode (RSW_ROCEV2) against
# the kernel's rxe, in the VM of ctests/vm (ctests/vm/roce/ops_rxe.sh):
# Debian's ibv_uc_pingpong (-c, sizes 1 to 64 path MTUs) and perftest's
# ib_atomic_bw (FETCH_AND_ADD, CMP_AND_SWAP), each side as server;
# ctests/src/roce_ops_peer each side as target (atomics' values and the
# target's memory, SEND_WITH_INV of a type 2 window).
# Skipped when QEMU is missing, as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$repo/build}
export BUILD
vm=$repo/ctests/vm

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v qemu-system-x86_64 >/dev/null ||
	skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
[[ -f $BUILD/lib/libibverbs.so.1 && -f $BUILD/etc/libibverbs.d/rsw.driver ]] ||
	fail "no build in $BUILD (make)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$vm/build-image.sh" >"$work/image" || fail "build-image.sh failed"
image=$(tail -n 1 "$work/image")
[[ -f $image/rootfs.img ]] || fail "build-image.sh named no image ($image)"

"$vm/run-in-vm.sh" -i "$image" -t 240 -r rxe -s "$vm/roce:/roce" \
	-f "$vm/roce/ops_rxe.sh" >"$work/out" 2>"$work/err"
vmrc=$?
cat "$work/out"
tail -n 1 "$work/err"
n=$(grep -c '^RESULT uc_pingpong size=.* ok=1$' "$work/out")
((n == 6)) || { cat "$work/err"; fail "$n of 6 ibv_uc_pingpong runs passed (run-in-vm exit $vmrc)"; }
n=$(grep -c '^RESULT ib_atomic_bw .* ok=1$' "$work/out")
((n == 4)) || fail "$n of 4 ib_atomic_bw runs passed"
n=$(grep -c '^RESULT roce_ops_peer .* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 roce_ops_peer runs passed"
grep -q '^RESULT fails=0$' "$work/out" || fail "the guest counted failures"
((vmrc == 0)) || fail "run-in-vm.sh exit $vmrc"
echo "ok: UC, RC atomics and SEND_WITH_INV between rxe and rsw (RoCEv2), both ways"
