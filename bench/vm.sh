#!/bin/bash
# The between-hosts rows beside the kernel's own soft devices (issue 28):
# boots the VM of ctests/vm/ once, runs bench/vm-guest.sh there (perftest
# and qperf over rxe0 and siw0 with Debian's rdma-core, over rsw on the
# same interface with our libraries, RSW_TRANSPORT=tcp, over rsw in
# RoCEv2 mode between two namespaces, and our RoCEv2 client against an
# rxe server) and prints a markdown table with rsw's ratio to each. The
# VM runs under TCG emulation on machines without a usable KVM, so the
# figures compare the devices with each other only.
#   bench/vm.sh            after `make`, as root, with the VM image built
#                          (ctests/vm/build-image.sh; tests/vm_kernel_devices
#                          builds it)
#   BUILD=...              another build directory
#   VM_BENCH_DEVICES=...   some of "rxe siw rsw roce mix" (bench/vm-guest.sh)
#   VM_BENCH_ONLY=REGEX    the rows whose names match, for a quick look
# Exit status 77 when the VM cannot run here.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
: "${BUILD:=$repo/build}"
cache=${RSV_VM_CACHE:-/var/tmp/rdma-rs-vm}
[ "$(id -u)" = 0 ] || { echo "bench/vm.sh: needs root (the VM's network and 9p share)" >&2; exit 77; }
[ -e "$cache/current" ] || { echo "bench/vm.sh: no VM image in $cache (ctests/vm/build-image.sh)" >&2; exit 77; }
command -v qemu-system-x86_64 >/dev/null || { echo "bench/vm.sh: qemu-system-x86_64 is not installed" >&2; exit 77; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
envs=()
for v in VM_BENCH_DEVICES VM_BENCH_ONLY VM_BENCH_LIMIT; do
    [ -n "${!v:-}" ] && envs+=(-e "$v=${!v}")
done
BUILD=$BUILD "$repo/ctests/vm/run-in-vm.sh" -t 1800 "${envs[@]}" -f "$repo/bench/vm-guest.sh" > "$out" ||
    { echo "bench/vm.sh: the VM run failed" >&2; exit 1; }
python3 "$repo/bench/vm_table.py" "$out" "in the VM (TCG; indicative)" \
    "rxe=rxe0 (Debian);siw=siw0 (Debian);rsw=rsw, TCP (ours);roce=rsw RoCEv2 (ours);mix=rsw RoCEv2 client, rxe server" \
    "rsw/rxe=rsw vs rxe;rsw/siw=rsw vs siw;roce/rxe=rsw RoCEv2 vs rxe;mix/rxe=RoCEv2 client vs rxe"
