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
python3 - "$out" <<'PY'
import sys
rows, order = {}, []
for line in open(sys.argv[1]):
    parts = line.rstrip("\n").split("\t")
    if len(parts) != 3:
        continue
    row, dev, v = parts
    if row not in rows:
        rows[row] = {}
        order.append(row)
    rows[row][dev] = v
def num(v):
    try:
        return float(v)
    except ValueError:
        return None
def fmt(v):
    x = num(v)
    if x is None:
        return v
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"
def ratio(row, ours, theirs):
    # rsw's figure against the device's: above 1 is better for rsw.
    a, b = num(ours), num(theirs)
    if a is None or b is None or a == 0 or b == 0:
        return ""
    lower_better = row.endswith(", us")
    r = b / a if lower_better else a / b
    return f"{r:.2f}x"
print("| in the VM (TCG; indicative) | rxe0 (Debian) | siw0 (Debian) | rsw, TCP (ours) | rsw RoCEv2 (ours) | rsw RoCEv2 client, rxe server | rsw vs rxe | rsw vs siw | rsw RoCEv2 vs rxe | RoCEv2 client vs rxe |")
print("|---|---|---|---|---|---|---|---|---|---|")
for row in order:
    d = rows[row]
    rxe, siw, rsw = d.get("rxe", ""), d.get("siw", ""), d.get("rsw", "")
    roce, mix = d.get("roce", ""), d.get("mix", "")
    print(f"| {row} | {fmt(rxe)} | {fmt(siw)} | {fmt(rsw)} | {fmt(roce)} | {fmt(mix)} | "
          f"{ratio(row, rsw, rxe)} | {ratio(row, rsw, siw)} | {ratio(row, roce, rxe)} | {ratio(row, mix, rxe)} |")
print()
print("Ratios are rsw's figure against the device's, oriented so that above 1.00x means rsw does better (for latencies: theirs / ours).")
PY
