#!/bin/bash
# harness-timeout: 500
# tests/rsw_rocev2_rc_netns in the VM of ctests/vm, whose kernel has
# netem (this host's may not: that test then skips its lossy half): rsw
# to rsw in RoCEv2 mode between two namespaces with 5% loss and
# reordering both ways (LOSSY_ONLY=1: the clean half runs on the host);
# here the lossy half must run and pass. Skipped when QEMU is missing,
# as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$repo/build}
export BUILD
vm=$repo/ctests/vm

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Opt-in for its time (about 150 s in the TCG VM; the lossy half of
# vm_roce_rc_pingpong, against rxe, runs by default, and
# tests/rsw_rocev2_rc_loss loses rsw's packets on the host).
[[ ${ROCE_LOSSY:-0} == 1 ]] || skip "rsw to rsw under netem is opt-in (ROCE_LOSSY=1), 150 s"

command -v qemu-system-x86_64 >/dev/null ||
	skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
[[ -f $BUILD/lib/libibverbs.so.1 && -f $BUILD/etc/libibverbs.d/rsw.driver ]] ||
	fail "no build in $BUILD (make)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$vm/build-image.sh" >"$work/image" || fail "build-image.sh failed"
image=$(tail -n 1 "$work/image")
[[ -f $image/rootfs.img ]] || fail "build-image.sh named no image ($image)"

# The repository is shared (read-only) for the script and its lib/.
"$vm/run-in-vm.sh" -i "$image" -t 450 -r none -s "$repo" -e LOSSY_ONLY=1 \
	-- bash "$here/rsw_rocev2_rc_netns.sh" >"$work/out" 2>"$work/err"
vmrc=$?
cat "$work/out"
tail -n 1 "$work/err"
((vmrc == 0)) || fail "rsw_rocev2_rc_netns in the VM: exit $vmrc"
grep -q '^SKIP' "$work/out" && fail "the lossy half was skipped in the VM"
n=$(grep -c '^ok lossy ' "$work/out")
((n == 5)) || fail "$n of 5 lossy runs passed"
grep -Eq '^ok netem dropped [1-9][0-9]* packets' "$work/out" || fail "netem dropped nothing"
echo "ok: rsw to rsw over RoCEv2 RC with 5% loss and reordering"
