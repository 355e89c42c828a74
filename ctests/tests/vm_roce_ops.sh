#!/bin/bash
# harness-timeout: 300
# Issue 29: rsw's UC and RC atomics in RoCEv2 mode (RSW_ROCEV2) against
# the kernel's rxe, in the VM of ctests/vm (ctests/vm/roce/ops_rxe.sh):
# Debian's ibv_uc_pingpong (-c, sizes 1 to 64 path MTUs) and perftest's
# ib_atomic_bw (FETCH_AND_ADD, CMP_AND_SWAP), each side as server;
# ctests/src/roce_ops_peer each side as target (atomics' values and the
# target's memory, SEND_WITH_INV of a type 2 window); ctests/src/
# roce_bulk_peer each side as target (1 MiB WRITE and READ, bursts of
# WRITEs and SENDs, every byte; rsw's side in sendmmsg/recvmmsg batches).
# Skipped when QEMU is missing, as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail
. "$(dirname "$0")/lib/vm.sh"
vm_need_build

vm_image

vm_run -t 240 -r rxe -s "$vm/roce:/roce" \
	-f "$vm/roce/ops_rxe.sh"
n=$(grep -c '^RESULT uc_pingpong size=.* ok=1$' "$work/out")
((n == 6)) || { cat "$work/err"; fail "$n of 6 ibv_uc_pingpong runs passed (run-in-vm exit $vmrc)"; }
n=$(grep -c '^RESULT ib_atomic_bw .* ok=1$' "$work/out")
((n == 4)) || fail "$n of 4 ib_atomic_bw runs passed"
n=$(grep -c '^RESULT roce_ops_peer .* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 roce_ops_peer runs passed"
n=$(grep -c '^RESULT roce_bulk_peer .* ok=1$' "$work/out")
((n == 2)) || fail "$n of 2 roce_bulk_peer runs passed"
grep -q '^RESULT fails=0$' "$work/out" || fail "the guest counted failures"
((vmrc == 0)) || fail "run-in-vm.sh exit $vmrc"
echo "ok: UC, RC atomics, SEND_WITH_INV and bulk RC between rxe and rsw (RoCEv2), both ways"
