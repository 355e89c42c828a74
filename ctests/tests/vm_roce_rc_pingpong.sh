#!/bin/bash
# harness-timeout: 600
# Issue 29: rsw's RC QPs in RoCEv2 mode (RSW_ROCEV2) talk to the kernel's
# rxe, in the VM of ctests/vm (ctests/vm/roce/rc_pingpong_rxe.sh): Debian's
# ibv_rc_pingpong (-c, sizes up to 64 path MTUs) on rxe and over our
# libibverbs on rsw, each side as server; perftest's ib_send_bw,
# ib_write_bw and ib_read_bw both ways; then pingpong and the WRITE and
# READ benchmarks again with netem dropping 5% and reordering both ways
# (pingpong's ACKs spared: see rc_pingpong_rxe.sh). Skipped when QEMU is
# missing, as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail
. "$(dirname "$0")/lib/vm.sh"
vm_need_build

vm_image

vm_run -t 540 -r rxe -s "$vm/roce:/roce" \
	-f "$vm/roce/rc_pingpong_rxe.sh"
# Clean: 4 sizes x 2 servers of pingpong, 3 benchmarks x 2 servers.
# Lossy: 3 sizes x 2 servers of pingpong, 2 benchmarks x 2 servers.
n=$(grep -c '^RESULT rc_pingpong size=.* ok=1$' "$work/out")
((n == 8)) || { cat "$work/err"; fail "$n of 8 ibv_rc_pingpong runs passed (run-in-vm exit $vmrc)"; }
n=$(grep -c '^RESULT ib_[a-z]*_bw size=.* ok=1$' "$work/out")
((n == 6)) || fail "$n of 6 perftest runs passed"
n=$(grep -c '^RESULT lossy rc_pingpong size=.* ok=1$' "$work/out")
((n == 6)) || fail "$n of 6 lossy ibv_rc_pingpong runs passed"
n=$(grep -c '^RESULT lossy ib_[a-z]*_bw size=.* ok=1$' "$work/out")
((n == 4)) || fail "$n of 4 lossy perftest runs passed"
grep -Eq '^RESULT netem dropped rxe_side=[1-9][0-9]* rsw_side=[1-9]' "$work/out" ||
	fail "netem dropped nothing"

grep -q '^RESULT fails=0$' "$work/out" || fail "the guest counted failures"
((vmrc == 0)) || fail "run-in-vm.sh exit $vmrc"
echo "ok: RC between rxe and rsw (RoCEv2), both ways, clean and with 5% loss"
