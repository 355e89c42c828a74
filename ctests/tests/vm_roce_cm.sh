#!/bin/bash
# harness-timeout: 300
# Issue 29: rdma_cm between rsw in RoCEv2 mode (RSW_ROCEV2) and the
# kernel's rxe, in the VM of ctests/vm (ctests/vm/roce/cm_rxe.sh): the IB
# CM's MADs on QP1. Debian's rping, each side as server, five verified
# pings and the disconnect (a capture shows REQ, REP, RTU, DREQ and DREP
# in their directions), ucmatose and udaddy (SIDR) each side as server;
# a connect to a port with no listener rejected (reason 8) each way.
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
	-f "$vm/roce/cm_rxe.sh" >"$work/out" 2>"$work/err"
vmrc=$?
cat "$work/out"
tail -n 1 "$work/err"
n=$(grep -c '^RESULT rping server=.* ok=1$' "$work/out")
((n == 2)) || { cat "$work/err"; fail "$n of 2 rping runs passed (run-in-vm exit $vmrc)"; }
n=$(grep -c '^RESULT ucmatose server=.* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 ucmatose runs passed"
n=$(grep -c '^RESULT udaddy server=.* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 udaddy runs passed"
n=$(grep -c '^RESULT rejected server=.* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 rejected connects were reported as REJECTED, reason 8"
grep -q '^RESULT fails=0$' "$work/out" || fail "the guest counted failures"
((vmrc == 0)) || fail "run-in-vm.sh exit $vmrc"
echo "ok: rping, ucmatose and udaddy between rxe and rsw (RoCEv2) through the IB CM on QP1, both ways; REJ both ways"
