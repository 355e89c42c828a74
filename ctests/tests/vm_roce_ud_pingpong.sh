#!/bin/bash
# harness-timeout: 400
# Issue 29: rsw's UD QPs in RoCEv2 mode (RSW_ROCEV2) talk to the kernel's
# rxe, in the VM of ctests/vm (ctests/vm/roce/ud_pingpong_rxe.sh): Debian's
# ibv_ud_pingpong on rxe and over our libibverbs on rsw, each side as
# server, at several sizes; then ctests/src/roce_ud_peer both ways (every
# byte, immediate, src_qp, GRH, Q_Keys checked); then a control without
# RSW_ROCEV2, which must fail. Skipped when QEMU is missing, as
# ctests/tests/vm_kernel_devices.sh.
set -uo pipefail
. "$(dirname "$0")/lib/vm.sh"
vm_need_build
[[ -x $BUILD/ctests/roce_ud_peer ]] || fail "no $BUILD/ctests/roce_ud_peer (make ctests)"

vm_image

vm_run -t 300 -r rxe -s "$vm/roce:/roce" \
	-f "$vm/roce/ud_pingpong_rxe.sh"
# 4 sizes x 2 servers, 2 roce_ud_peer runs, all ok; the control failed.
n=$(grep -c '^RESULT size=.* ok=1$' "$work/out")
((n == 8)) || { cat "$work/err"; fail "$n of 8 ibv_ud_pingpong runs passed (run-in-vm exit $vmrc)"; }
n=$(grep -c '^RESULT peer .* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 roce_ud_peer runs passed"
grep -q '^RESULT control (RSW_ROCEV2 unset) server_rc=[1-9][0-9]* client_rc=[1-9]' "$work/out" ||
	fail "the control without RSW_ROCEV2 did not fail"
grep -q '^RESULT fails=0$' "$work/out" || fail "the guest counted failures"
((vmrc == 0)) || fail "run-in-vm.sh exit $vmrc"
echo "ok: ibv_ud_pingpong and roce_ud_peer between rxe and rsw (RoCEv2), both ways"
