#!/bin/bash
# harness-timeout: 500
# tests/rsw_rocev2_rc_netns and tests/rsw_rocev2_bulk_netns in the VM of
# ctests/vm, whose kernel has netem (this host's may not: those tests then
# skip their lossy half): rsw to rsw in RoCEv2 mode between two
# namespaces with 5% loss and reordering both ways (LOSSY_ONLY=1: the
# clean half runs on the host);
# here the lossy half must run and pass. Skipped when QEMU is missing,
# as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail

# Opt-in for its time (about 150 s in the TCG VM; the lossy half of
# vm_roce_rc_pingpong, against rxe, runs by default, and
# tests/rsw_rocev2_rc_loss loses rsw's packets on the host).
[[ ${ROCE_LOSSY:-0} == 1 ]] || { echo "SKIP: rsw to rsw under netem is opt-in (ROCE_LOSSY=1), 150 s"; exit 77; }

. "$(dirname "$0")/lib/vm.sh"
vm_need_build
vm_image

# The repository is shared (read-only) for the script and its lib/.
vm_run -t 450 -r none -s "$repo" -e LOSSY_ONLY=1 \
	-- "bash $here/rsw_rocev2_rc_netns.sh && bash $here/rsw_rocev2_bulk_netns.sh"
((vmrc == 0)) || fail "rsw_rocev2_rc_netns or _bulk_netns in the VM: exit $vmrc"
grep -q '^SKIP' "$work/out" && fail "a lossy half was skipped in the VM"
n=$(grep -Ec '^ok lossy[ ,]' "$work/out")
((n == 6)) || fail "$n of 6 lossy runs passed"
n=$(grep -Ec '^ok netem dropped [1-9][0-9]* packets' "$work/out")
((n == 2)) || fail "netem dropped nothing in $((2 - n)) of the 2 scripts"
echo "ok: rsw to rsw over RoCEv2 RC with 5% loss and reordering"
