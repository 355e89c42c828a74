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
. "$(dirname "$0")/lib/vm.sh"
vm_need_build

vm_image

vm_run -t 240 -r rxe -s "$vm/roce:/roce" \
	-f "$vm/roce/cm_rxe.sh"
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
