#!/bin/bash
# harness-timeout: 1200
# Kernel RDMA devices in a VM: Debian 12's kernel with rxe0 (RoCEv2) and
# siw0 (iWARP) booted under QEMU (ctests/vm/). One boot runs every case of
# ctests/vm/guest-tests.sh: Debian's RDMA programs over Debian's rdma-core
# (debian/*), over our libraries from build/ (ours/*) and mixed pairs
# (mixed/*). Every RESULT line is printed; the test fails when a case listed
# in ctests/vm/expected-pass.txt did not pass. Cases that pass without being
# listed are reported as newly passing (not a failure).
#
# The image is built (or taken from its cache, RSV_VM_CACHE, default
# /var/tmp/rdma-rs-vm) by ctests/vm/build-image.sh: root, mmdebstrap and the
# Debian mirror are needed the first time. KVM is used where /dev/kvm can
# boot Debian's kernel, TCG elsewhere (PVM hosts); the test is skipped only
# when QEMU is missing, i.e. when neither can boot it.
# The cases of expected-pass.txt run first. No case starts once the stage
# nears its harness limit (VM_TESTS_BUDGET seconds of guest tests, by
# default what the limit leaves after the image build, boot and a last case):
# a loaded host or hanging cases cut the other cases, reported as not run.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$repo/build}
export BUILD
vm=$repo/ctests/vm
limit=$(sed -n 's/^# harness-timeout: \([0-9]*\).*/\1/p' "$0" | head -n 1)
# The host side (apt, mmdebstrap, QEMU) runs over the system's libraries.
unset LD_LIBRARY_PATH LD_PRELOAD IBV_CONFIG_DIR RDMAV_DRIVERS IBV_DRIVERS

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

command -v qemu-system-x86_64 >/dev/null ||
	skip "qemu-system-x86_64 is not installed: neither KVM nor TCG can boot the VM (apt-get install qemu-system-x86)"
[[ -f $BUILD/lib/libibverbs.so.1 && -f $BUILD/lib/librdmacm.so.1 ]] ||
	fail "no libraries in $BUILD/lib: run make first"

# The expectations as the run starts, like guest-tests.sh (copied into the
# VM at boot): an edit during the run applies to the next one.
mapfile -t expected < <(sed 's/#.*//; s/[[:space:]]//g' "$vm/expected-pass.txt" | grep -v '^$')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== image: ctests/vm/build-image.sh"
t0=$EPOCHREALTIME
"$vm/build-image.sh" >"$work/image" || fail "build-image.sh failed"
t1=$EPOCHREALTIME
image=$(tail -n 1 "$work/image")
[[ -f $image/rootfs.img ]] || fail "build-image.sh named no image ($image)"
# Left for the guest tests: the limit less the build, the boot, a last case
# (60 s at most) and a margin.
budget=${VM_TESTS_BUDGET:-$((limit - ${SECONDS} - 150))}
((budget >= 120)) || budget=120

echo "== VM: guest-tests.sh, every case in one boot"
echo "   (cases of expected-pass.txt first; no case starts after ${budget} s)"
# rdma-core's pyverbs tests (python3-pyverbs), for the ours/pyverbs-delta-*
# cases; the guest image leaves /usr/share/doc out.
pyv=()
[[ -f /usr/share/doc/rdma-core/tests/run_tests.py ]] && pyv=(-s /usr/share/doc/rdma-core/tests)
"$vm/run-in-vm.sh" -i "$image" -t $((budget + 120)) -e GUEST_TESTS_BUDGET="$budget" "${pyv[@]}" \
	-e GUEST_TESTS_FIRST="${expected[*]}" \
	-f "$vm/guest-tests.sh" >"$work/out" 2>"$work/err"
vmrc=$?
t2=$EPOCHREALTIME
cat "$work/out"
cat "$work/err"
# run-in-vm.sh's last line: "... wall W s, devices ready at R s of guest
# uptime, command C s ..."
ready=$(sed -n 's/.*devices ready at \([0-9.]*\) s.*/\1/p' "$work/err" | tail -n 1)
cmd=$(sed -n 's/.*, command \([0-9.]*\) s.*/\1/p' "$work/err" | tail -n 1)

declare -A result=()
while read -r _ name status _; do
	result[$name]=$status
done < <(grep '^RESULT ' "$work/out")
((${#result[@]})) || fail "no RESULT line from the VM (run-in-vm.sh exit $vmrc)"

missing=() newly=()
declare -A listed=()
for name in "${expected[@]}"; do
	listed[$name]=1
	[[ ${result[$name]:-} == PASS ]] || missing+=("$name(${result[$name]:-no result})")
done
for name in "${!result[@]}"; do
	[[ ${result[$name]} == PASS && -z ${listed[$name]:-} ]] && newly+=("$name")
done

echo
echo "== summary"
npass=$(grep -c '^RESULT [^ ]* PASS' "$work/out")
echo "cases: ${#result[@]} run, $npass passed; expected to pass: ${#expected[@]}"
echo "time: image $(secs "$t0" "$t1") s, VM run $(secs "$t1" "$t2") s (devices ready at ${ready:-?} s of guest uptime, guest tests ${cmd:-?} s)"
if ((${#newly[@]})); then
	mapfile -t newly < <(printf '%s\n' "${newly[@]}" | sort)
	echo "newly passing (add them to ctests/vm/expected-pass.txt): ${newly[*]}"
fi
if ((${#missing[@]})); then
	fail "expected to pass but did not: ${missing[*]}"
fi
# Every RESULT came, and the guest ran to its end.
case $vmrc in 124 | 255) fail "the VM did not finish (run-in-vm.sh exit $vmrc)" ;; esac
echo "ok: every case of expected-pass.txt passed"
