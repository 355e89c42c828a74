#!/bin/bash
# harness-timeout: 300
# Issue 29's first interop proof: the kernel's rxe accepts a RoCEv2 UD SEND
# that rsw's codec (providers/rsw/src/roce/) built and checksummed, in the
# VM of ctests/vm (ctests/vm/roce/ud_to_rxe.sh: a copy with a wrong ICRC
# first, which rxe must drop, then the right one, which Debian's
# ibv_ud_pingpong server on rxe must receive and answer).
# Skipped when QEMU is missing, as ctests/tests/vm_kernel_devices.sh.
set -uo pipefail
. "$(dirname "$0")/lib/vm.sh"
CARGO=${CARGO:-cargo}

# rsw's unit-test binary, which holds the live test (ignored elsewhere).
(cd "$repo" && "$CARGO" test --release -p rsw --lib --no-run) >"$work/build" 2>&1 ||
	{ cat "$work/build"; fail "cargo could not build rsw's unit tests"; }
bin=$(sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))$/\1/p' "$work/build" | tail -n 1)
[[ -n $bin ]] || { cat "$work/build"; fail "no unit-test binary named by cargo"; }
[[ $bin == /* ]] || bin=$repo/$bin
deps=$(dirname "$bin")

vm_image

vm_run -t 200 -r rxe -n -s "$deps" -s "$vm/roce:/roce" \
	-f "$vm/roce/ud_to_rxe.sh" "$bin"
grep -q '^RESULT test=0 server=0 rcvd_pkts=1$' "$work/out" ||
	{ cat "$work/err"; fail "rxe did not take exactly our good packet (run-in-vm exit $vmrc)"; }
((vmrc == 0)) || fail "run-in-vm.sh exit $vmrc"
echo "ok: rxe dropped our bad ICRC and took our UD SEND"
